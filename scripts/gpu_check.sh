#!/usr/bin/env bash
# On the offline GPU host: build (scripts/gpu_host.sh), run the GPU tests, run them
# under compute-sanitizer (memcheck, racecheck; a reduced filter), the benchmarks and the
# PyTorch baseline, and write bench/results/<date>-<gpu>*.json plus logs into $OUT (or
# bench/results/ when OUT is unset).
#   scripts/gpu_check.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
out=${OUT:-bench/results}
mkdir -p "$out"
stamp="$(date +%Y-%m-%d)-$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' '-')"
export PATH=/usr/local/cuda/bin:$PATH
scripts/gpu_host.sh "$build" > "$out/$stamp-build-and-ctest.log" 2>&1
echo "ctest (all labels): $(grep -E 'tests passed|tests failed' "$out/$stamp-build-and-ctest.log")"
export LD_LIBRARY_PATH=/tmp/dsaf-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
"$build/tests/device_gpu_test" > "$out/$stamp-gpu-tests.log" 2>&1
echo "gpu tests: $(tail -1 "$out/$stamp-gpu-tests.log")"; grep -E '^\[ (sglang|dsv|vllm)' "$out/$stamp-gpu-tests.log"
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool --error-exitcode 9 "$build/tests/device_gpu_test" \
    --gtest_filter='*QueryQuantGpu*sglang_v4_fp8*:*KeyStoreGpu*dsv4_ref*' > "$out/$stamp-sanitizer-$tool.log" 2>&1
  echo "compute-sanitizer $tool: exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$stamp-sanitizer-$tool.log" | tail -1))"
done
for recipe in dsv32-ref dsv32-bf16 sglang-v32-fused vllm-v32 dsv4-ref sglang-v4-fp8 sglang-v4-bf16 sglang-v4-fp4; do
  "$build/cli/dsa-fidelity" verify --kernel "$build/device/libdsaf_example_plugin.so" --recipe $recipe --cases 10000 \
    --json "$out/$stamp-verify-$recipe.json" > "$out/$stamp-verify-$recipe.log" 2>&1
  echo "verify example plug-in, $recipe: exit $? — $(grep -E '^key cache' "$out/$stamp-verify-$recipe.log")"
done
for bug in wrong_reciprocal wrong_offset; do
  "$build/cli/dsa-fidelity" verify --kernel "$build/device/libdsaf_${bug}_plugin.so" --recipe sglang-v4-fp8 \
    --cases 10000 > "$out/$stamp-verify-$bug.log" 2>&1
  echo "verify $bug plug-in: exit $?"; grep -E 'explained|MISMATCH' "$out/$stamp-verify-$bug.log" | head -4
done
"$build/bench/key_store_bench" "$out/$stamp-key-store-bench.json"
python3 bench/torch_key_path.py > "$out/$stamp-torch-key-path.json" && cat "$out/$stamp-torch-key-path.json"
