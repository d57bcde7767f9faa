#!/usr/bin/env bash
# On the GPU host, between full runs: build the key-path GPU test and benchmark only, run
# the key-store tests (every preset, width and page-size class) and the benchmark, into $OUT.
#   bench/gpu_key_quick.sh BUILD_DIR
set -uo pipefail
build=${1:-build-gpu}
out=${OUT:-/tmp}
export PATH=/usr/local/cuda/bin:$PATH
for t in device_gpu_test key_store_bench; do
  scripts/gpu_host.sh "$build" "$t" > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
done
export LD_LIBRARY_PATH=/tmp/dsaf-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
"$build/tests/device_gpu_test" --gtest_filter='*KeyStore*:*Sglang*:*QueryQuant*' > "$out/gpu-tests.log" 2>&1
echo "device_gpu_test (key store, SGLang-style, query) exit $?"
grep -E "PASSED|FAILED" "$out/gpu-tests.log" | head -20
# SM and memory clocks while the benchmark runs (whether the kernels run at the boost clock)
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 250 \
  > "$out/clocks.csv" 2>&1 &
smi=$!
"$build/bench/key_store_bench" "$out/key-store-bench.json" | grep -v "^$"
kill $smi 2>/dev/null
awk -F, 'NR > 1 {print $2}' "$out/clocks.csv" | sort | uniq -c | sort -rn | head -5
