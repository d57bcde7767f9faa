// File: rsqrt_table.h
// Loading the measured sm_90 rsqrtf table (reference/data/README.md) from its xz file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsaf::ref {

// Decodes an xz file holding the 2^24 int8 deltas. Throws dsaf::Error (kEnvironment) if
// the file is missing, and (kBadInput) if it is not valid xz or has the wrong size.
std::vector<int8_t> load_sm90_rsqrt_deltas(const std::string& path);

// Where the committed table is looked for: $DSAF_RSQRT_SM90_TABLE if set, else the
// source tree's reference/data/rsqrt_sm90_deltas.bin.xz (the build records that path).
std::string default_sm90_rsqrt_table_path();

}  // namespace dsaf::ref
