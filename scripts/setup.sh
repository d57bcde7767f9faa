#!/usr/bin/env bash
# README command (a): install dependencies, build, and run the main job on built-in data:
# a small needle study (does the needle stay in the top-512 under fp8 vs bf16 index keys?)
# with its table, results and plots in build/demo/; then the Python package installed into
# build/pyenv (`pip install .`). Build folder: build/.
#   scripts/setup.sh --deps   only install the Debian packages dsa-fidelity builds with
#                             (Debian 12 / Ubuntu 24.04; scripts/test.sh runs this first).
# CUDA (nvcc) is optional and not installed here: without it the CPU parts build alone.
set -euo pipefail
cd "$(dirname "$0")/.."
install_packages() {
  packages=(cmake ninja-build g++ libeigen3-dev libhdf5-dev libssl-dev librapidcheck-dev libgtest-dev
            libgmock-dev googletest libcli11-dev nlohmann-json3-dev libfmt-dev libbenchmark-dev liblzma-dev
            python3-matplotlib python3-numpy python3-h5py python3-hypothesis python3-venv python3-dev
            curl ca-certificates  # the pinned upstream releases: scripts/upstream.sh --fetch
            clang libclang-rt-dev  # clang + compiler-rt (libFuzzer, ASan): scripts/fuzz.sh
            ccache)  # the compiler cache of scripts/compiler_cache.sh
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}
install_packages
[ "${1:-}" = "--deps" ] && exit 0
source scripts/compiler_cache.sh
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
build/cli/dsa-fidelity recipes
build/cli/dsa-fidelity needle --recipes dsv32-ref,dsv32-bf16,sglang-v32-fused,sglang-v4-fp8,sglang-v4-bf16 \
  --context 2k..8k --topk 512 --trials 4 --margins 0.01,0.1 --out build/demo
build/cli/dsa-fidelity report build/demo/needle.json --out build/demo
# The Python package (python/dsa_fidelity) into a venv that sees apt's numpy and h5py:
# `pip install .` builds it with this CMake project (pyproject.toml, scikit-build-core).
python3 -m venv --system-site-packages build/pyenv
build/pyenv/bin/python3 -m pip install --quiet scikit-build-core nanobind pytest ml_dtypes \
  "numpy==$(build/pyenv/bin/python3 -c 'import numpy; print(numpy.__version__)')"
build/pyenv/bin/python3 -m pip install --quiet --no-build-isolation .
(py="$PWD/build/pyenv/bin/python3"; cd /tmp && "$py" -c "import dsa_fidelity as d; print(d.recipes())")
