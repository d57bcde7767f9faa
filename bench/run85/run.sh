# Run 85: what bounds the e2m1 fp4 key kernel (sglang-v4-fp4): the same kernel without norm,
# RoPE and Hadamard (ablation switches of 3adf559; the quantisation kept), 16 x 64K and
# 256 x 4K positions.
set -u
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/tmp/dsaf-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
R=/tmp/r85; mkdir -p $R
patch -p1 < bench/run85/ablation.patch > $R/patch.log 2>&1 || { cat $R/patch.log; exit 1; }
scripts/gpu_host.sh build-gpu key_store_bench > $R/build.log 2>&1 &
base=$!
while [ ! -f /tmp/dsaf-deps/.unpacked ]; do sleep 2; done  # the packages unpacked once
CUDAFLAGS="-DDSAF_ABLATE_TRANSFORM" scripts/gpu_host.sh build-gpu-t key_store_bench > $R/build-t.log 2>&1 || { tail -30 $R/build-t.log; exit 1; }
wait $base || { tail -30 $R/build.log; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
for len in 65536 4096; do
  for b in build-gpu build-gpu-t; do
    tag=$([ $b = build-gpu ] && echo fused || echo ablated)
    DSAF_BENCH_SEQ_LEN=$len timeout 120 $b/bench/key_store_bench $R/seq$len-$tag.json sglang-v4-fp4 > $R/seq$len-$tag.txt 2>&1
    echo "seq $len $tag exit $?"; grep -E "lanes/head  [1248]:|copy bandwidth" $R/seq$len-$tag.txt | sed "s/^/  /"
  done
done
tar -C /tmp -czf $OUT/run85.tgz r85
echo "total $(( $(date +%s) - t0 )) s"
