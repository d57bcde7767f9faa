#!/usr/bin/env bash
# On the GPU host: the device property (tests/device/device_property_gpu_test.cu) at
# DSAF_PROPERTY_SCALE (default 100: 10,000 cases in each cell of store format x page-size
# class), one process per store format side by side (each case's reference runs on one
# CPU core; the GPU is mostly idle), into LOG. Prints one line per cell; exits non-zero
# when any process fails.
#   scripts/device_property.sh BUILD_DIR LOG
set -uo pipefail
build=$1
log=$2
export DSAF_PROPERTY_SCALE=${DSAF_PROPERTY_SCALE:-100}
filters=('*/fp8_*' '*/bf16_*' '*/fp4_e2m1_*' '*/fp32_*:*/fp4_simulated_*')
pids=()
for i in "${!filters[@]}"; do
  "$build/tests/device_property_gpu_test" --gtest_filter="${filters[$i]}" > "$log.$i" 2>&1 &
  pids+=($!)
done
status=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || status=1
done
cat "$log".[0-9] > "$log" && rm -f "$log".[0-9]
# Every cell ran and passed: as many OK lines as the binary lists tests (a filter that
# matched nothing would otherwise pass in silence).
cells=$("$build/tests/device_property_gpu_test" --gtest_list_tests | grep -c '^  ')
passed=$(grep -c '^\[       OK \]' "$log")
if [ "$passed" -ne "$cells" ]; then
  echo "device property: $passed of $cells cells passed"
  status=1
fi
# Every cell drew both grids (full, and one block: a warp's later tiles) and all three
# tile walks (batch order, tile order, hand-out).
both=$(grep '^  cases by kernel:' "$log" | grep ':grid1:' | grep -E ' builtin:[0-9]:[a-z]' |
       grep 'batch-order: ' | grep 'tile-order: ' | grep -c 'hand-out: ')
if [ "$both" -ne "$cells" ]; then
  echo "device property: $both of $cells cells ran both grids and every tile walk"
  status=1
fi
grep -E '^\[ .* \] device property|OK, passed|Falsifiable|FAILED|cases by (page size|kernel)' "$log"
echo "device property (scale $DSAF_PROPERTY_SCALE, every cell): exit $status"
exit $status
