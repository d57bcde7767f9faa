// dsaf_fixture_probe: a test-only bridge from the Python tests to the C++ fixture code,
// so that files written by independent writers (safetensors' own Python writer, h5py
// via python/dsa_capture.py) are read by exactly the code the CLI uses.
//   dsaf_fixture_probe dequant FILE.safetensors WEIGHT SCALE OUT.f32
//       dequantize_fp8_blocks(WEIGHT, SCALE) -> OUT as raw little-endian fp32, row-major
//   dsaf_fixture_probe values FILE.safetensors TENSOR OUT.f32
//       to_float(TENSOR) (F32 / BF16 / F16) -> OUT as raw little-endian fp32
//   dsaf_fixture_probe load FIXTURE.h5
//       open_fixture (every SCHEMA.md rule), then the describe_fixture summary
//   dsaf_fixture_probe expected-cache CAPTURE.h5 RECIPE OUT.u8
//       the cache the reference writes for the capture's inputs under preset RECIPE
//       (oracle::expected_cache, as `compare` computes it) -> OUT as raw bytes
// Exit status: 0 done, 2 usage or a dsaf::Error (its message on stderr).
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "fixtures/cache_capture.h"
#include "fixtures/cache_capture_observation.h"
#include "fixtures/fixture.h"
#include "fixtures/safetensors.h"
#include "oracle/compare.h"
#include "reference/error.h"

namespace {

// The raw bytes of host values: little-endian on every platform the project builds on
// (x86-64, aarch64), which the Python side reads as '<f4' or 'u1'.
template <class T>
void write_raw(const std::string& path, const std::vector<T>& values) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw dsaf::Error(dsaf::ErrorKind::kEnvironment, "cannot write '" + path + "'");
  const size_t n = std::fwrite(values.data(), sizeof(T), values.size(), f);
  const bool closed = std::fclose(f) == 0;
  if (n != values.size() || !closed) throw dsaf::Error(dsaf::ErrorKind::kEnvironment, "cannot write '" + path + "'");
}

int usage() {
  std::cerr << "usage: dsaf_fixture_probe dequant FILE WEIGHT SCALE OUT | values FILE TENSOR OUT | load FIXTURE.h5 | "
               "expected-cache CAPTURE.h5 RECIPE OUT\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() == 5 && args[0] == "dequant") {
      const auto file = dsaf::fixtures::SafetensorsFile::open(args[1]);
      write_raw(args[4], dsaf::fixtures::dequantize_fp8_blocks(file->tensor(args[2]), file->tensor(args[3])));
      return 0;
    }
    if (args.size() == 4 && args[0] == "values") {
      const auto file = dsaf::fixtures::SafetensorsFile::open(args[1]);
      write_raw(args[3], dsaf::fixtures::to_float(file->tensor(args[2])));
      return 0;
    }
    if (args.size() == 2 && args[0] == "load") {
      std::cout << dsaf::fixtures::describe_fixture(dsaf::fixtures::open_fixture(args[1]));
      return 0;
    }
    if (args.size() == 4 && args[0] == "expected-cache") {
      const auto capture = dsaf::fixtures::read_cache_capture(args[1]);
      write_raw(args[3], dsaf::oracle::expected_cache(dsaf::ref::preset(args[2]), dsaf::fixtures::observation_of(capture)));
      return 0;
    }
    return usage();
  } catch (const dsaf::Error& e) {
    std::cerr << "dsaf_fixture_probe: " << e.what() << "\n";
    return 2;
  }
}
