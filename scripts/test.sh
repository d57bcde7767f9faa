#!/usr/bin/env bash
# README command (b): install dependencies, build and run the tests.
#   scripts/test.sh              Release build in build/, every CPU test (incl. the selftest)
#                                and the GPU tests, which report SKIPPED without a GPU
#   scripts/test.sh --sanitize   AddressSanitizer + UBSan build in build-asan/, CPU tests
#                                except those labelled slow
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
jobs=$(nproc)
if [ "${1:-}" = "--sanitize" ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSAF_SANITIZE=ON \
    -DDSAF_BUILD_BENCH=OFF
  cmake --build build-asan -j"$jobs"
  ctest --test-dir build-asan -L cpu -LE slow --output-on-failure -j"$jobs"
else
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
  cmake --build build -j"$jobs"
  ctest --test-dir build --output-on-failure -j"$jobs"
fi
