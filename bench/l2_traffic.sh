#!/usr/bin/env bash
# On the GPU host: where the key kernel's L2 sectors come from. Nsight Compute's L2 sector
# counts split by the unit that sent them (tex: the SMs' own loads and stores; ltcfabric:
# requests between the GPU's two L2 partitions) with DRAM bytes and duration, for the fused
# sglang-v4 fp8 (1 lane) and bf16 (2 lanes) kernels and their traffic twins (the same bytes
# with no arithmetic, bench/key_store_bench.cu), one launch each, into $OUT (or /tmp).
# Build key_store_bench first. Each twin is profiled at the width that was faster on the H200
# (16 threads a token with the RoPE rows, 4 without), the one the benchmark reports.
#   bench/l2_traffic.sh BUILD_DIR
set -uo pipefail
build=${1:-build-gpu}
out=${OUT:-/tmp}
export PATH=/usr/local/cuda/bin:$PATH
ncu --query-metrics > "$out/ncu-query-metrics.txt" 2>&1
wanted="gpu__time_duration.sum dram__bytes_read.sum dram__bytes_write.sum lts__t_sectors.sum
  lts__t_sectors_srcunit_tex.sum lts__t_sectors_srcunit_tex_op_read.sum lts__t_sectors_srcunit_tex_op_write.sum
  lts__t_sectors_srcunit_ltcfabric.sum lts__t_sectors_srcunit_ltcfabric_op_read.sum
  lts__t_sectors_srcunit_ltcfabric_op_write.sum lts__t_sectors_srcunit_tex_lookup_hit.sum
  lts__t_sectors_srcunit_tex_lookup_miss.sum lts__t_sectors_lookup_hit.sum lts__t_sectors_lookup_miss.sum
  lts__t_requests_srcunit_tex.sum lts__d_sectors_fill_device.sum lts__d_sectors_fill_sysmem.sum
  lts__t_sectors_srcunit_tex_aperture_device_evict_first.sum lts__t_sectors_srcunit_tex_aperture_device_evict_first_lookup_hit.sum
  lts__t_sectors_srcunit_tex_aperture_device_evict_last.sum lts__t_sectors_srcunit_tex_aperture_device_evict_last_lookup_hit.sum
  lts__t_sectors_srcunit_tex_aperture_device_evict_normal.sum lts__t_sectors_srcunit_tex_aperture_device_evict_normal_lookup_hit.sum
  l1tex__m_xbar2l1tex_read_sectors.sum sm__sass_inst_executed_op_ldgsts.sum sm__sass_data_bytes_mem_global_op_ldgsts.sum
  sm__sass_data_bytes_mem_global.sum"
metrics=""
for m in $wanted; do
  base=${m%.*}
  if grep -q "^$base " "$out/ncu-query-metrics.txt"; then metrics="$metrics,$m"; else echo "not on this ncu: $m"; fi
done
metrics=${metrics#,}
profile() {  # NAME KERNEL_REGEX RECIPE
  ncu --clock-control none --kernel-name-base mangled --kernel-name "regex:$2" --launch-skip 3 --launch-count 1 \
    --metrics "$metrics" "$build/bench/key_store_bench" /tmp/k.json "$3" > "$out/ncu-l2-$1.txt" 2>&1
  echo "ncu $1: exit $?"
  grep -E "^\s+(gpu__|dram__|lts__)" "$out/ncu-l2-$1.txt"
}
profile fused-fp8 'StorageFormatE3ELi1ELi0E' sglang-v4-fp8
profile twin-fp8-rope 'traffic_twin_kernel.*E3ELb1ELi16E' sglang-v4-fp8
profile twin-fp8-norope 'traffic_twin_kernel.*E3ELb0ELi4E' sglang-v4-fp8
profile fused-bf16 'StorageFormatE2ELi2ELi1E' sglang-v4-bf16
profile twin-bf16-rope 'traffic_twin_kernel.*E2ELb1ELi16E' sglang-v4-bf16
