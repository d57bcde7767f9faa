# Run 84: pinned key paths for sglang-v32-fused, vllm-v32 and dsv4-ref (1 lane, producer
# warps) — tests, property, sanitizers, and times against the tree before them (HEAD's
# archive in bench/run84/before.tar.gz, whose launcher ran these presets on the generic kernel,
# timed by this tree's benchmark).
set -u
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/tmp/dsaf-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
R=/tmp/r84; mkdir -p $R
root=$(pwd)
scripts/gpu_host.sh build-gpu key_store_bench > $R/build.log 2>&1 || { tail -30 $R/build.log; exit 1; }
rm -rf /tmp/before && mkdir /tmp/before && tar -C /tmp/before -xzf bench/run84/before.tar.gz
# The new benchmark (any preset by name) against the old device library: it times the
# kernels the old launcher chose.
cp bench/key_store_bench.cu /tmp/before/bench/key_store_bench.cu
(cd /tmp/before && ln -s $root/.deps .deps && scripts/gpu_host.sh build-gpu key_store_bench > $R/build-before.log 2>&1) &
scripts/gpu_host.sh build-gpu device_gpu_test >> $R/build.log 2>&1 || { tail -30 $R/build.log; exit 1; }
scripts/gpu_host.sh build-gpu device_property_gpu_test >> $R/build.log 2>&1 || { tail -30 $R/build.log; exit 1; }
wait
echo "built in $(( $(date +%s) - t0 )) s; before: $(tail -1 $R/build-before.log)"
timeout 300 build-gpu/tests/device_gpu_test --gtest_filter='*KeyStore*:*Sglang*:*QueryQuant*' > $R/gpu-tests.log 2>&1
echo "device_gpu_test exit $?"; grep -E "^\[  (PASSED|FAILED)|tests ran|FAILED  \]" $R/gpu-tests.log | head -30
timeout 300 scripts/device_property.sh build-gpu $R/property.log | tail -20
for tool in memcheck racecheck; do
  timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 build-gpu/tests/device_gpu_test \
    --gtest_filter='*KeyStoreGpu*sglang_v32*:*KeyStoreGpu*vllm_v32*:*KeyStoreGpu*dsv4_ref*' > $R/sanitizer-$tool.log 2>&1
  echo "compute-sanitizer $tool: exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $R/sanitizer-$tool.log | tail -1))"
done
echo "checked at $(( $(date +%s) - t0 )) s"
for r in sglang-v32-fused vllm-v32 dsv4-ref; do
  for b in build-gpu /tmp/before/build-gpu; do
    tag=$([ $b = build-gpu ] && echo pinned || echo before)
    timeout 120 $b/bench/key_store_bench $R/bench-$r-$tag.json $r > $R/bench-$r-$tag.txt 2>&1
    echo "$r $tag exit $?"; grep -E "lanes/head  [1248]:|kernel path|B/token|copy bandwidth" $R/bench-$r-$tag.txt | sed "s/^/  /"
  done
done
tar -C /tmp -czf $OUT/run84.tgz r84
echo "total $(( $(date +%s) - t0 )) s"
