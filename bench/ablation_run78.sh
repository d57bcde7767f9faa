set -u
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/tmp/dsaf-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
scripts/gpu_host.sh build-gpu key_store_bench > $OUT/build-base.log 2>&1 || { tail -30 $OUT/build-base.log; exit 1; }
CUDAFLAGS="-DDSAF_ABLATE_TRANSFORM" scripts/gpu_host.sh build-gpu-t key_store_bench > $OUT/build-t.log 2>&1 || { tail -30 $OUT/build-t.log; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
metrics="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,lts__t_sectors_srcunit_tex_lookup_miss.sum,lts__d_sectors_fill_device.sum,sm__warps_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_ltcfabric.sum,sm__inst_executed.sum"
profile() {  # NAME BUILD KERNEL_REGEX
  timeout 150 ncu --clock-control none --kernel-name-base mangled --kernel-name "regex:$3" --launch-skip 3 --launch-count 1 \
    --metrics "$metrics" "$2/bench/key_store_bench" /tmp/k.json sglang-v4-fp8 > "$OUT/ncu-$1.txt" 2>&1
  echo "ncu $1: exit $?"
  grep -E "^\s+(gpu__|dram__|lts__|sm__)" "$OUT/ncu-$1.txt"
}
profile fused-fp8 build-gpu 'StorageFormatE3ELi1ENS0_15SglangV4'
profile fused-fp8-no-transform build-gpu-t 'StorageFormatE3ELi1ENS0_15SglangV4'
profile twin-fp8-norope build-gpu 'traffic_twin_kernel.*E3ELb0ELi4E'
echo "total $(( $(date +%s) - t0 )) s"
