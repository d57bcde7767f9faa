// File: rsqrt_table.cc — xz decoding of the sm_90 rsqrtf table (rsqrt_table.h).
#include "reference/numeric/rsqrt_table.h"

#include <cstdlib>
#include <fstream>
#include <iterator>

#include <lzma.h>

#include "reference/error.h"
#include "reference/numeric/rsqrt.h"

#ifndef DSAF_DATA_DIR
#error "DSAF_DATA_DIR must name the reference/data folder"
#endif

namespace dsaf::ref {

std::vector<int8_t> load_sm90_rsqrt_deltas(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw Error(ErrorKind::kEnvironment, "cannot open the sm_90 rsqrtf table '" + path + "'");
  }
  const std::vector<uint8_t> packed((std::istreambuf_iterator<char>(file)),
                                    std::istreambuf_iterator<char>());
  std::vector<int8_t> deltas(kRsqrtTableSize);
  uint64_t memlimit = UINT64_MAX;
  size_t in_pos = 0, out_pos = 0;
  // xz carries its own integrity check (CRC64 here), so a damaged file fails to decode.
  const lzma_ret status = lzma_stream_buffer_decode(
      &memlimit, 0, nullptr, packed.data(), &in_pos, packed.size(),
      reinterpret_cast<uint8_t*>(deltas.data()), &out_pos, deltas.size());
  if (status != LZMA_OK || in_pos != packed.size() || out_pos != deltas.size()) {
    throw_bad_input("'" + path + "' is not an xz file of " + std::to_string(kRsqrtTableSize) +
                    " bytes (lzma status " + std::to_string(status) + ", " +
                    std::to_string(out_pos) + " bytes decoded)");
  }
  return deltas;
}

std::string default_sm90_rsqrt_table_path() {
  if (const char* env = std::getenv("DSAF_RSQRT_SM90_TABLE")) return env;
  return std::string(DSAF_DATA_DIR) + "/rsqrt_sm90_deltas.bin.xz";
}

}  // namespace dsaf::ref
