#!/usr/bin/env bash
# On the GPU host: build the scoring targets only, run the paged-logits and top-K GPU
# tests (determinism included) and the key-path test, the three benchmarks, and an Nsight
# Compute profile of the fp8 tensor-core logits kernel, into $OUT.
#   bench/gpu_scoring_run.sh BUILD_DIR
set -uo pipefail
build=${1:-build-gpu}
out=${OUT:-/tmp}
export PATH=/usr/local/cuda/bin:$PATH
for t in paged_logits_gpu_test topk_gpu_test device_gpu_test paged_logits_bench topk_bench key_store_bench; do
  scripts/gpu_host.sh "$build" "$t" > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
done
export LD_LIBRARY_PATH=/tmp/dsaf-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
{
  for t in paged_logits_gpu_test topk_gpu_test device_gpu_test; do "$build/tests/$t"; echo "$t exit $?"; done
} > "$out/gpu-tests.log" 2>&1
grep -E ' exit |^\[ |PASSED|FAILED' "$out/gpu-tests.log" | head -50
"$build/bench/paged_logits_bench" "$out/paged-logits-bench.json"
"$build/bench/topk_bench" "$out/topk-bench.json"
"$build/bench/key_store_bench" "$out/key-store-bench.json" sglang-v4-fp8
"$build/bench/key_store_bench" "$out/key-store-bench-bf16.json" sglang-v4-bf16
ncu --clock-control none --kernel-name regex:paged_logits_mma --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
  --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats \
  "$build/bench/paged_logits_bench" /tmp/ncu-logits.json > "$out/ncu-paged-logits-mma.txt" 2>&1
echo "ncu exit $?"
