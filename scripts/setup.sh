#!/usr/bin/env bash
# README command (a): install dependencies, build, and run the main job on built-in data:
# a small needle study (does the needle stay in the top-512 under fp8 vs bf16 index keys?)
# with its table, results and plots in build/demo/. Build folder: build/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
build/cli/dsa-fidelity recipes
build/cli/dsa-fidelity needle --recipes dsv32-ref,dsv32-bf16,sglang-v32-fused,sglang-v4-fp8,sglang-v4-bf16 \
  --context 2k..8k --topk 512 --trials 4 --margins 0.01,0.1 --out build/demo
build/cli/dsa-fidelity report build/demo/needle.json --out build/demo
