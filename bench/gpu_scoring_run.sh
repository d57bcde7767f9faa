#!/usr/bin/env bash
# On the GPU host: build the scoring targets only, run the paged-logits and top-K GPU
# tests (determinism included) and the key-path test, the three benchmarks, and Nsight
# Compute profiles of the fp8 tensor-core logits kernel and the fp8 key kernel (with the
# L2 request and sector counts: whole-line requests or not), into $OUT.
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
l2="--metrics lts__t_requests_srcunit_tex.sum,lts__t_sectors_srcunit_tex.sum,dram__bytes_read.sum,dram__bytes_write.sum"
ncu --clock-control none --kernel-name regex:paged_logits_mma --launch-skip 3 --launch-count 1 $l2 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
  --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats \
  "$build/bench/paged_logits_bench" /tmp/ncu-logits.json > "$out/ncu-paged-logits-mma.txt" 2>&1
echo "ncu exit $?"
ncu --clock-control none --kernel-name-base mangled --kernel-name "regex:StorageFormatE3ELi1ELi0E" \
  --launch-skip 3 --launch-count 1 $l2 --section SpeedOfLight --section Occupancy --section WarpStateStats \
  --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats \
  "$build/bench/key_store_bench" /tmp/ncu-key.json sglang-v4-fp8 > "$out/ncu-key-store-fp8-lanes1.txt" 2>&1
echo "ncu key exit $?"
for f in "$out"/ncu-*.txt; do
  echo "== $f"; grep -E "Duration|DRAM Throughput|L2 Cache Throughput|lts__t_|dram__bytes|Executed Instructions  " "$f" | head -12
done
