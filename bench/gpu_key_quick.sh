#!/usr/bin/env bash
# On the GPU host, between full runs: build the key-path GPU test and benchmark only, run
# the key-store tests (every preset, width and page-size class) and the benchmark, into $OUT.
# Each NAME=CUDAFLAGS argument adds a compile-time variant of the same two targets, built
# in BUILD_DIR-NAME (a fresh directory: CMake reads CUDAFLAGS when it configures one),
# tested and timed the same way, into $OUT/NAME/. DSAF_QUICK_CHECKS=1 adds, for every
# build, the device property test at scale 100 and compute-sanitizer memcheck and
# racecheck on the key-store tests of the sglang-v4, dsv32, vllm-v32 and sglang-v32-fused
# presets and dsv4-ref (each with its generic recipe where it has one).
#   bench/gpu_key_quick.sh BUILD_DIR [NAME=CUDAFLAGS ...]
set -uo pipefail
build=${1:-build-gpu}
shift || true
out=${OUT:-/tmp}
export PATH=/usr/local/cuda/bin:$PATH

# build DIR OUTDIR FLAGS LABEL
build() {
  local dir=$1 dest=$2 flags=$3 label=$4
  mkdir -p "$dest"
  local targets="device_gpu_test key_store_bench"
  [ "${DSAF_QUICK_CHECKS:-0}" = 1 ] && targets="$targets device_property_gpu_test"
  for t in $targets; do
    CUDAFLAGS="$flags" scripts/gpu_host.sh "$dir" "$t" > "$dest/build.log" 2>&1 || {
      echo "$label: build of $t failed"
      tail -40 "$dest/build.log"
      return 1
    }
  done
}

# run DIR OUTDIR LABEL
run() {
  local dir=$1 dest=$2 label=$3
  [ -x "$dir/bench/key_store_bench" ] || return 1
  export LD_LIBRARY_PATH=/tmp/dsaf-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  timeout 300 "$dir/tests/device_gpu_test" --gtest_filter='*KeyStore*:*Sglang*:*QueryQuant*' > "$dest/gpu-tests.log" 2>&1
  echo "$label: device_gpu_test (key store, SGLang-style, query) exit $?"
  grep -E "PASSED|FAILED" "$dest/gpu-tests.log" | head -20
  if [ "${DSAF_QUICK_CHECKS:-0}" = 1 ]; then
    timeout 300 scripts/device_property.sh "$dir" "$dest/property.log" | sed "s/^/$label: /"
    for tool in memcheck racecheck; do
      timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 "$dir/tests/device_gpu_test" \
        --gtest_filter='*KeyStoreGpu*sglang_v4*:*KeyStoreGpu*dsv4_ref*:*KeyStoreGpu*dsv32*:*KeyStoreGpu*_v32*' > "$dest/sanitizer-$tool.log" 2>&1
      echo "$label: compute-sanitizer $tool (key store): exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$dest/sanitizer-$tool.log" | tail -1))"
    done
  fi
  # SM and memory clocks while the benchmark runs (whether the kernels run at the boost clock)
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 250 \
    > "$dest/clocks.csv" 2>&1 &
  local smi=$!
  timeout 200 "$dir/bench/key_store_bench" "$dest/key-store-bench.json" | grep -v "^$" | sed "s/^/$label: /"
  kill $smi 2>/dev/null
  awk -F, 'NR > 1 {print $2}' "$dest/clocks.csv" | sort | uniq -c | sort -rn | head -3
}

# The base build first (it unpacks the packages), then the variants side by side.
build "$build" "$out" "${CUDAFLAGS:-}" base
for variant in "$@"; do
  build "$build-${variant%%=*}" "$out/${variant%%=*}" "${variant#*=}" "${variant%%=*}" &
done
wait
run "$build" "$out" base
for variant in "$@"; do
  run "$build-${variant%%=*}" "$out/${variant%%=*}" "${variant%%=*}"
done
