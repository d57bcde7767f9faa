#!/usr/bin/env bash
# On the GPU host: build the GPU targets only (not the CPU tests), then every GPU test,
# the property at DSAF_PROPERTY_SCALE=100, compute-sanitizer, the key-path benchmark, the
# PyTorch baseline and the SASS instruction mix of the default key kernel, into $OUT.
#   bench/gpu_key_path_run.sh BUILD_DIR
set -uo pipefail
build=${1:-build-gpu}
out=${OUT:-/tmp}
export PATH=/usr/local/cuda/bin:$PATH
for t in device_gpu_test device_property_gpu_test verify_plugins_gpu_test key_store_bench; do
  scripts/gpu_host.sh "$build" "$t" > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
done
export LD_LIBRARY_PATH=/tmp/dsaf-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
log="$out/gpu-tests.log"
{
  "$build/tests/device_gpu_test"; echo "device_gpu_test exit $?"
  "$build/tests/verify_plugins_gpu_test"; echo "verify_plugins_gpu_test exit $?"
  scripts/device_property.sh "$build" "$out/property.log"
  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 "$build/tests/device_gpu_test" \
      --gtest_filter='*QueryQuantGpu*sglang_v4_fp8*:*KeyStoreGpu*dsv4_ref*:*KeyStoreGpu*sglang_v4_fp4*' 2>&1 | tail -4
    echo "compute-sanitizer $tool exit ${PIPESTATUS[0]}"
  done
} > "$log" 2>&1
grep -E "exit|PASSED|FAILED|byte-exact|OK, passed|SUMMARY" "$log" | head -60
"$build/bench/key_store_bench" "$out/key-store-bench.json"
python3 bench/torch_key_path.py > "$out/torch-key-path.json" && cat "$out/torch-key-path.json"
obj="$build/device/CMakeFiles/dsaf_device.dir/key_store/key_store.cu.o"
for lanes in 1 2; do  # the pinned sglang-v4-fp8 kernels: instruction mix and a profile
  sass="$out/key_store_sglang_v4_fp8_lanes$lanes.sass"
  cuobjdump -sass "$obj" | awk -v pat="StorageFormatE3ELi${lanes}ELi0E" '/Function :/ {keep = index($0, pat) > 0} keep' > "$sass"
  echo "SASS instructions in key_store_kernel<fp8, $lanes, sglang-v4>: $(grep -cE '^ +/\*[0-9a-f]{4}\*/' "$sass")"
  grep -oE '^ +/\*[0-9a-f]{4}\*/ +[A-Z0-9.]+' "$sass" | awk '{print $2}' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -12
  ncu --clock-control none --kernel-name-base mangled --kernel-name "regex:StorageFormatE3ELi${lanes}ELi0E" \
    --launch-skip 3 --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats \
    "$build/bench/key_store_bench" /tmp/ncu-key.json sglang-v4-fp8 > "$out/ncu-key-store-fp8-lanes$lanes.txt" 2>&1
  echo "ncu lanes $lanes exit $?"
  grep -E "Duration|Executed Instructions  |Issue Slots Busy|Achieved Occupancy|Registers Per|DRAM Throughput|Memory Throughput" "$out/ncu-key-store-fp8-lanes$lanes.txt" | head -10
done
