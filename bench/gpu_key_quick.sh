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
"$build/tests/device_gpu_test" --gtest_filter='*KeyStore*' > "$out/gpu-tests.log" 2>&1
echo "device_gpu_test (*KeyStore*) exit $?"
grep -E "PASSED|FAILED" "$out/gpu-tests.log" | head -20
"$build/bench/key_store_bench" "$out/key-store-bench.json" | grep -v "^$"
