set -u
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/tmp/dsaf-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
scripts/gpu_host.sh build-gpu key_store_bench > $OUT/build-base.log 2>&1 || { tail -30 $OUT/build-base.log; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
for len in 4096 65536; do
for r in sglang-v4-fp8 sglang-v4-bf16; do
  DSAF_BENCH_SEQ_LEN=$len timeout 100 build-gpu/bench/key_store_bench $OUT/seq$len-$r.json $r 2>&1 | grep -E "lanes/head  [12]:|copy bandwidth|twin,  4 threads a token, without|fused" | sed "s/^/seq $len: /"
done
done
echo "total $(( $(date +%s) - t0 )) s"
