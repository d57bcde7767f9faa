#!/usr/bin/env bash
# On the GPU host: Nsight Compute profile of the fused key kernel inside key_store_bench
# (sglang-v4-fp8, 1M tokens), one launch per lane-group width, into $OUT (or /tmp).
# The bench launches each width 24 times (3 warm-ups + 21 timed) for the first recipe,
# widths in the order 4, 8, 16, 32: launch 24*i+5 is a timed launch of width i.
#   bench/profile_key_store.sh BUILD_DIR
set -uo pipefail
build=${1:-build-gpu}
out=${OUT:-/tmp}
export PATH=/usr/local/cuda/bin:$PATH
for i in 0 1 2 3; do
  ncu --clock-control none --kernel-name regex:key_store_kernel --launch-skip $((24 * i + 5)) --launch-count 1 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section InstructionStats \
    "$build/bench/key_store_bench" /tmp/ncu-bench-$i.json sglang-v4-fp8 > "$out/ncu-key-store-width$i.txt" 2>&1
  echo "ncu width index $i: exit $?"
done
