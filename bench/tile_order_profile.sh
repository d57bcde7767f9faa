#!/usr/bin/env bash
# On the GPU host: Nsight Compute on the fused sglang-v4 fp8 (1 lane) and bf16 (2 lanes)
# kernels in batch order and in the tile order (api.h KeyStoreArgs::tile_order): duration,
# L2 sectors and utilisation, DRAM bytes, instructions and issue activity. key_store_bench
# launches each width 3 + 21 x 10 times, then once in batch order and once in the tile
# order (the byte comparison): skipping 213 launches of the kernel profiles those two.
# Also: SM active against elapsed cycles (ramp-up and tail), and stall reasons per issue.
# Build key_store_bench first.
#   bench/tile_order_profile.sh BUILD_DIR
set -uo pipefail
build=${1:-build-gpu}
out=${OUT:-/tmp}
export PATH=/usr/local/cuda/bin:$PATH
metrics=gpu__time_duration.sum,lts__t_sectors.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,\
dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,\
sm__cycles_elapsed.avg.per_second,sm__cycles_active.avg,sm__cycles_elapsed.avg,\
regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio
profile() {  # NAME KERNEL_REGEX RECIPE
  ncu --clock-control none --kernel-name-base mangled --kernel-name "regex:$2" --launch-skip 213 --launch-count 2 \
    --metrics "$metrics" "$build/bench/key_store_bench" /tmp/k.json "$3" > "$out/ncu-tile-order-$1.txt" 2>&1
  echo "ncu $1 (batch order, then tile order): exit $?"
  grep -E "^\s+(gpu__|dram__|lts__|smsp__|sm__)" "$out/ncu-tile-order-$1.txt"
}
profile fp8 'StorageFormatE3ELi1ELi0E' sglang-v4-fp8
profile bf16 'StorageFormatE2ELi2ELi1E' sglang-v4-bf16
