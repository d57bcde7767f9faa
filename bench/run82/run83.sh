# Run 83: does the 2-lane kernel's lower memory floor come from its 12 warps an SM? The
# ablated (no norm/RoPE/Hadamard) and real fp8 kernels at 4K positions, full grid and capped
# at 264 blocks (8 warps an SM, as the 1-lane kernel has), twice each.
set -u
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/tmp/dsaf-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
mkdir -p /tmp/r && cd "$(dirname "$0")/../.." || exit 1
patch -p1 < bench/run82/ablation.patch > /tmp/r/patch.log 2>&1 || { cat /tmp/r/patch.log; exit 1; }
scripts/gpu_host.sh build-gpu key_store_bench > /tmp/r/build-base.log 2>&1 || { tail -30 /tmp/r/build-base.log; exit 1; }
CUDAFLAGS="-DDSAF_ABLATE_TRANSFORM" scripts/gpu_host.sh build-gpu-t key_store_bench > /tmp/r/build-t.log 2>&1 || { tail -30 /tmp/r/build-t.log; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
for rep in 1 2; do
  for cap in full 264; do
    for b in build-gpu-t build-gpu; do
      env_cap=""; [ $cap = full ] || env_cap="DSAF_BENCH_MAX_BLOCKS=$cap"
      env DSAF_BENCH_SEQ_LEN=4096 $env_cap timeout 120 $b/bench/key_store_bench /tmp/r/$b-$cap-$rep.json sglang-v4-fp8 > /tmp/r/$b-$cap-$rep.txt 2>&1
      echo "rep $rep cap $cap $b exit $?"; grep -E "lanes/head  [12]:|copy bandwidth" /tmp/r/$b-$cap-$rep.txt | sed "s/^/  /"
    done
  done
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem --format=csv
tar -C /tmp -czf $OUT/run83.tgz r
echo "total $(( $(date +%s) - t0 )) s"
