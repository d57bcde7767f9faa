// File: fuzz_hdf5_fixture.cc
// libFuzzer target: bytes -> a scratch .h5 file -> open_fixture (fixtures/fixture.h), the
// validating loader of SCHEMA.md fixtures. Rejection must be a dsaf::Error; an accepted
// fixture must pass check_accepted_fixture (fixture_checks.h). libhdf5 itself is not
// instrumented: ASan sees its reads and writes only where they reach our memory, but a
// crash inside it still ends the run (and is reported with its stack).
// Most mutations of raw HDF5 bytes end at libhdf5's metadata checksums or at the
// datasets' sha256 attributes; fuzz_fixture_schema fuzzes the loader's rules behind them.
#include <cstdint>

#include "fixtures/fixture.h"
#include "fuzz/fixture_checks.h"
#include "fuzz/harness.h"
#include "reference/error.h"

// libhdf5 1.10.8 (Debian 12) leaks the object header it was decoding when H5Oopen meets a
// damaged one (H5Oopen -> H5O_protect -> H5AC_protect -> H5FL_reg_calloc, from
// h5::list_members). That is libhdf5's bug, not ours; LeakSanitizer skips allocations
// with a libhdf5 frame and still reports leaks of our own.
extern "C" const char* __lsan_default_suppressions() { return "leak:libhdf5\n"; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static dsaf::fuzz::ScratchFile scratch(".h5");
  static dsaf::fuzz::ScratchFile copy(".h5");
  dsaf::fixtures::Fixture fixture;
  try {
    fixture = dsaf::fixtures::open_fixture(scratch.write(data, size));
  } catch (const dsaf::Error&) {
    return 0;
  }
  dsaf::fuzz::check_accepted_fixture(fixture, copy);
  return 0;
}
