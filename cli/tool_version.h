// File: tool_version.h
// The build of this program: the release and the commit of its source tree (cmake/
// write_build_version.cmake), for `--version` and the shard files (oracle/shard_files.h).
#pragma once

#include <string>

namespace dsaf::cli {

std::string tool_version();  // "0.1.0"
std::string tool_commit();   // `git describe --always --dirty`, or "unknown"

}  // namespace dsaf::cli
