#!/usr/bin/env bash
# README command (a): install dependencies, build, and run the main job on built-in
# data (for now the exhaustive codec selftest). Build folder: build/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
build/cli/dsa-fidelity recipes
build/cli/dsa-fidelity selftest
