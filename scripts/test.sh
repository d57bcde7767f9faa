#!/usr/bin/env bash
# README command (b): install dependencies, build and run the tests.
#   scripts/test.sh              Release build in build/, every CPU test (incl. the selftest)
#                                and the GPU tests, which report SKIPPED without a GPU
#   scripts/test.sh --sanitize   AddressSanitizer + UBSan build in build-asan/, CPU tests
#                                except those labelled slow; then a smoke run of the
#                                libFuzzer targets (scripts/fuzz.sh, clang, build-fuzz/)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --deps
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
jobs=$(nproc)
# Python packages of the safetensors round-trip test (tests/python), best effort. Debian's
# Python refuses system-wide pip installs (PEP 668), so they go into a venv in the build
# folder that also sees apt's numpy and h5py (installed for /usr/bin/python3); numpy is
# pinned to apt's version, which apt's h5py is built against. With them, NVIDIA's
# cuobjdump and nvdisasm wheels (CUDA 13), which the SASS check (sass_uniform_registers)
# needs where the toolkit lacks them; nanobind, scikit-build-core and pytest for the Python
# package (python/), which the release tree builds with that venv's interpreter. Offline,
# those tests are SKIPPED (the package is then not built).
python_test_env() {
  local base=python3 venv="$1/pyenv" pin
  local complete='import glob, sys, safetensors.numpy, ml_dtypes, nanobind, scikit_build_core, pytest; sys.exit(not glob.glob(sys.prefix + "/lib/python3*/site-packages/nvidia/cu*/bin/nvdisasm"))'
  # The sanitizer tree borrows the release tree's venv when that one is complete (saves
  # the second pip install in CI).
  if [ "$1" != build ] && [ ! -e "$venv" ] && [ -x build/pyenv/bin/python3 ] &&
     build/pyenv/bin/python3 -c "$complete" 2>/dev/null; then
    ln -s "$PWD/build/pyenv" "$venv"
    return 0
  fi
  [ -x /usr/bin/python3 ] && base=/usr/bin/python3
  [ -x "$venv/bin/python3" ] || "$base" -m venv --system-site-packages "$venv" || return 0
  "$venv/bin/python3" -c "$complete" 2>/dev/null && return 0
  pin=$("$venv/bin/python3" -c "import numpy; print('numpy==' + numpy.__version__)") || return 0
  "$venv/bin/python3" -m pip install --quiet safetensors ml_dtypes "$pin" \
    "nvidia-cuda-cuobjdump~=13.0" "nvidia-cuda-nvdisasm~=13.0" nanobind scikit-build-core pytest ||
    echo "note: safetensors / ml_dtypes / cuobjdump / nanobind not installed: their tests will be SKIPPED"
}
if [ "${1:-}" = "--sanitize" ]; then
  # -O1 -g1: line-level stack traces at a fraction of -O2 -g's compile time (CI budget);
  # the cold targets (tests, CLI front end, fixture I/O: cmake/dsaf_options.cmake) at -O0.
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSAF_SANITIZE=ON \
    -DDSAF_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DDSAF_COLD_CXX_FLAGS=-O0
  cmake --build build-asan -j"$jobs"
  python_test_env build-asan
  ctest --test-dir build-asan -L cpu -LE slow --output-on-failure -j"$jobs"
  # The libFuzzer targets (clang, build-fuzz/): build, then 2000 runs of each from its
  # seeds, so that a broken fuzzer fails CI (docs/fuzzing.md has the long runs). libhdf5
  # 1.10 itself crashes or hangs on some damaged files within a few hundred mutations
  # (fuzz/crashes/README.md), so the raw-bytes HDF5 targets run over their seeds only.
  scripts/fuzz.sh -runs=2000 fuzz_safetensors fuzz_recipe_json fuzz_page_table fuzz_cli_arguments fuzz_shard_merge
  if [ -f fixtures/fixture.h ]; then
    scripts/fuzz.sh -runs=2000 fuzz_fixture_schema
    scripts/fuzz.sh -runs=0 fuzz_hdf5_fixture fuzz_cache_capture
  fi
else
  # The release tree and the package build go through ccache (scripts/compiler_cache.sh):
  # the package's compilations hit the tree's. The sanitizer and fuzzer trees share no
  # compilation with anything in a CI run, so there a cache would only add its misses' cost.
  source scripts/compiler_cache.sh
  # The pinned upstream releases the conformance adapters build against (conformance/):
  # in CI a failed fetch fails the run (an adapter that no longer builds must fail here,
  # not on the GPU host); elsewhere, offline, the adapters are left out with a note.
  upstream="$PWD/.deps/upstream/src"
  if ! scripts/upstream.sh --fetch; then
    [ "${CI:-}" = true ] && { echo "upstream.sh --fetch failed" >&2; exit 1; }
    echo "note: upstream releases not fetched: the conformance adapters are not built"
    upstream=""
  fi
  python_test_env build
  python_package=(-DDSAF_BUILD_PYTHON=OFF)
  if build/pyenv/bin/python3 -c "import nanobind, pytest" 2>/dev/null; then
    python_package=(-DDSAF_BUILD_PYTHON=ON -DPython_EXECUTABLE="$PWD/build/pyenv/bin/python3")
  fi
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSAF_UPSTREAM_DIR="$upstream" "${python_package[@]}"
  cmake --build build -j"$jobs"
  ctest --test-dir build --output-on-failure -j"$jobs"
  # The package as a user installs it (README): `pip install .` into the venv (CPU-only
  # module, build folder build/wheel), then imported from outside the checkout.
  if [ "${python_package[0]}" = -DDSAF_BUILD_PYTHON=ON ]; then
    py="$PWD/build/pyenv/bin/python3"
    "$py" -m pip install --quiet --no-build-isolation --config-settings=cmake.define.DSAF_ENABLE_CUDA=OFF .
    (cd /tmp && "$py" -c "import dsa_fidelity as d; print(d.recipes())")
  fi
fi
