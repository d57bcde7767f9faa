#!/usr/bin/env bash
# Build and test on an offline GPU host (docs/gpu-host.md): no apt there, so the
# Debian packages travel in .deps/debs (fetched on a networked machine with
# `scripts/gpu_host.sh --fetch`), are unpacked into a private prefix, and GoogleTest is
# built from the source the googletest package ships.
#   scripts/gpu_host.sh --fetch      (networked machine) download the .debs into .deps/debs
#   scripts/gpu_host.sh [BUILD_DIR [TARGET]]  (GPU host) unpack, build for sm_90a (all, or
#                                    one TARGET), and run every test (all targets only);
#                                    $DSAF_CMAKE_ARGS: more configure options (e.g. the
#                                    Python package's -DDSAF_BUILD_PYTHON=ON)
set -euo pipefail
cd "$(dirname "$0")/.."
debs=.deps/debs
if [ "${1:-}" = "--fetch" ]; then
  mkdir -p "$debs"
  (cd "$debs" && apt-get download libeigen3-dev googletest libgtest-dev libgmock-dev \
    librapidcheck-dev libhdf5-dev libhdf5-103-1 libhdf5-cpp-103-1 libhdf5-hl-100 \
    libhdf5-hl-cpp-100 libsz2 libaec0 libaec-dev libcli11-dev nlohmann-json3-dev libfmt-dev \
    libfmt9 libbenchmark-dev libbenchmark1debian liblzma-dev liblzma5 libssl-dev libssl3)
  exit 0
fi
build=${1:-build-gpu}
prefix=${DSAF_DEPS_PREFIX:-/tmp/dsaf-deps}
if [ ! -f "$prefix/.unpacked" ]; then
  mkdir -p "$prefix"
  for f in "$debs"/*.deb; do dpkg -x "$f" "$prefix"; done
  cmake -S "$prefix/usr/src/googletest" -B /tmp/dsaf-gtest -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix/usr" >/dev/null
  cmake --build /tmp/dsaf-gtest >/dev/null && cmake --install /tmp/dsaf-gtest >/dev/null
  touch "$prefix/.unpacked"
fi
lib="$prefix/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$lib:$lib/hdf5/serial:${LD_LIBRARY_PATH:-}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix/usr;$lib/hdf5/serial" -DHDF5_ROOT="$lib/hdf5/serial" \
  -DCMAKE_CUDA_ARCHITECTURES=90a ${DSAF_CMAKE_ARGS:-}
if [ -n "${2:-}" ]; then
  cmake --build "$build" -j"$(nproc)" --target "$2"
  exit 0
fi
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)"
