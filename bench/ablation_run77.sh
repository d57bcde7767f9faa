set -u
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/tmp/dsaf-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
scripts/gpu_host.sh build-gpu key_store_bench > $OUT/build-base.log 2>&1 || { tail -30 $OUT/build-base.log; exit 1; }
CUDAFLAGS="-DDSAF_ABLATE_TRANSFORM" scripts/gpu_host.sh build-gpu-t key_store_bench > $OUT/build-t.log 2>&1 || { tail -30 $OUT/build-t.log; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
for rep in 1 2; do
for d in build-gpu build-gpu-t; do
for cap in 0 132; do
  DSAF_BENCH_MAX_BLOCKS=$cap timeout 120 $d/bench/key_store_bench $OUT/$d-cap$cap-$rep.json sglang-v4-fp8 2>&1 | grep -E "lanes/head  [12]|copy bandwidth|twin,  4 threads a token, without" | sed "s/^/$d cap$cap rep$rep: /"
done
done
done
echo "total $(( $(date +%s) - t0 )) s"
