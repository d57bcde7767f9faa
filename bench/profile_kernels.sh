#!/usr/bin/env bash
# On the GPU host: where the memory-bound kernels lose time. Nsight Compute with the stall
# reasons (WarpStateStats), pipe utilisation (ComputeWorkloadAnalysis) and the hottest SASS
# lines (SourceCounters) of the default key kernels (sglang-v4-fp8 at 1 lane per head,
# sglang-v4-bf16 at 2) and the fp8 tensor-core logits kernel, one timed launch each, into
# $OUT (or /tmp). Build key_store_bench and paged_logits_bench first.
#   bench/profile_kernels.sh BUILD_DIR
set -uo pipefail
build=${1:-build-gpu}
out=${OUT:-/tmp}
export PATH=/usr/local/cuda/bin:$PATH
sections="--section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats
  --section SourceCounters --print-details all"
profile() {  # NAME KERNEL_REGEX COMMAND...
  local name=$1 regex=$2
  shift 2
  # shellcheck disable=SC2086
  ncu --clock-control none --kernel-name-base mangled --kernel-name "regex:$regex" --launch-skip 3 --launch-count 1 \
    $sections "$@" > "$out/ncu-$name.txt" 2>&1
  echo "ncu $name: exit $?"
}
profile key-store-fp8-lanes1 'StorageFormatE3ELi1ELi0E' "$build/bench/key_store_bench" /tmp/k.json sglang-v4-fp8
profile key-store-bf16-lanes2 'StorageFormatE2ELi2ELi1E' "$build/bench/key_store_bench" /tmp/k.json sglang-v4-bf16
profile paged-logits-fp8-mma 'paged_logits_mma.*StorageFormatE3' "$build/bench/paged_logits_bench" /tmp/l.json
