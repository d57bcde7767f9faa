set -u
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/tmp/dsaf-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
scripts/gpu_host.sh build-gpu key_store_bench > $OUT/build-base.log 2>&1 || { tail -30 $OUT/build-base.log; exit 1; }
for s in 2 8 128; do
  CUDAFLAGS="-DDSAF_ABLATE_HADAMARD_FIRST_STRIDE=$s" scripts/gpu_host.sh build-gpu-h$s key_store_bench > $OUT/build-h$s.log 2>&1 &
done
wait
echo "built in $(( $(date +%s) - t0 )) s"
for rep in 1 2; do
for d in build-gpu build-gpu-h2 build-gpu-h8 build-gpu-h128; do
  [ -x $d/bench/key_store_bench ] || { echo "$d missing"; tail -20 $OUT/build-${d#build-gpu-}.log; continue; }
  timeout 120 $d/bench/key_store_bench $OUT/$d-$rep.json sglang-v4-fp8 2>&1 | grep -E "lanes/head  1|copy bandwidth|twin,  4 threads a token, without" | sed "s/^/$d rep$rep: /"
done
done
echo "total $(( $(date +%s) - t0 )) s"
