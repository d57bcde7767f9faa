# Run 82: the fp8 key kernel's memory floor at 4K positions (ablated: no norm/RoPE/Hadamard),
# the real kernel beside it, and the DRAM bytes of a timed-loop launch (ncu, one pass).
set -u
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/tmp/dsaf-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
patch -p1 < bench/run82/ablation.patch > $OUT/patch.log 2>&1 || { cat $OUT/patch.log; exit 1; }
scripts/gpu_host.sh build-gpu key_store_bench > $OUT/build-base.log 2>&1 || { tail -30 $OUT/build-base.log; exit 1; }
scripts/gpu_host.sh build-gpu device_gpu_test > $OUT/build-tests.log 2>&1 &
CUDAFLAGS="-DDSAF_ABLATE_TRANSFORM" scripts/gpu_host.sh build-gpu-t key_store_bench > $OUT/build-t.log 2>&1 || { tail -30 $OUT/build-t.log; exit 1; }
wait
echo "built in $(( $(date +%s) - t0 )) s"
timeout 200 build-gpu/tests/device_gpu_test --gtest_filter='*KeyStore*:*Sglang*:*QueryQuant*' > $OUT/gpu-tests.log 2>&1
echo "device_gpu_test exit $?: $(grep -cE '^\[       OK' $OUT/gpu-tests.log) OK, $(grep -cE '^\[  FAILED' $OUT/gpu-tests.log) FAILED lines"
for len in 4096 65536; do
  for b in build-gpu build-gpu-t; do
    DSAF_BENCH_SEQ_LEN=$len timeout 120 $b/bench/key_store_bench $OUT/seq$len-$b.json sglang-v4-fp8 > $OUT/seq$len-$b.txt 2>&1
    echo "seq $len $b exit $?"; grep -E "lanes/head  [12]:|copy bandwidth|twin" $OUT/seq$len-$b.txt | sed "s/^/  /"
  done
done
echo "benched at $(( $(date +%s) - t0 )) s"
for len in 4096 65536; do
  for b in build-gpu build-gpu-t; do
    DSAF_BENCH_SEQ_LEN=$len timeout 150 ncu --clock-control none --cache-control none --kernel-name-base mangled \
      --kernel-name 'regex:StorageFormatE3ELi1ENS0_15SglangV4' --launch-skip 440 --launch-count 1 \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      $b/bench/key_store_bench /tmp/k.json sglang-v4-fp8 > $OUT/ncu-seq$len-$b.txt 2>&1
    echo "ncu seq $len $b exit $?"; grep -E "^\s+(gpu__|dram__)|Pass|pass" $OUT/ncu-seq$len-$b.txt | sed "s/^/  /"
  done
done
echo "total $(( $(date +%s) - t0 )) s"
