#!/usr/bin/env bash
# On the offline GPU host: build (scripts/gpu_host.sh), run every CTest test (the GPU
# ones included), the device property at scale 100 (scripts/device_property.sh), compute-sanitizer (memcheck,
# racecheck; a reduced filter), `verify` on our kernels and the plug-ins, the benchmarks
# and the PyTorch baselines. Writes bench/results-style files named
# <date>-<gpu>-* into $OUT (or bench/results/ when OUT is unset) and prints a summary.
#   scripts/gpu_check.sh [BUILD_DIR]
# DSAF_GPU_TESTS_ONLY=1: build only, no CTest (the CPU tests run in CI, the exhaustive
# selftest alone takes minutes; the GPU test binaries run below either way), to fit one
# 10-minute device call.
# DSAF_GPU_CHECK_PART=tests | bench: the build and the tests, sanitizers and `verify`; or
# the build (incremental where the directory is still there) and the benchmarks, PyTorch
# baselines, ncu profile and table. Both in one call took ~580 s on the H200, at the
# device tool's 600 s limit; two calls, the second on the still-warm machine, fit. The
# tests part ends with scripts/conformance.sh when the upstream releases are there.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
out=${OUT:-bench/results}
mkdir -p "$out"
# DSAF_GPU_CHECK_TARBALL=1: every file goes into one gpu-check.tgz in $OUT, written at exit
# (also when the call's limit cuts the script short with SIGTERM): the device tool returns
# only a limited number of files from $OUT and drops the rest (docs/gpu-host.md).
if [ "${DSAF_GPU_CHECK_TARBALL:-0}" = 1 ]; then
  tarball="$out/gpu-check.tgz"
  out=$(mktemp -d)
  trap 'tar czf "$tarball" -C "$out" .' EXIT
  trap 'exit 143' TERM
fi
stamp="$(date +%Y-%m-%d)-$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' '-')"
export PATH=/usr/local/cuda/bin:$PATH
if [ "${DSAF_GPU_TESTS_ONLY:-0}" = 1 ]; then
  scripts/gpu_host.sh "$build" all > "$out/$stamp-build-and-ctest.log" 2>&1
  echo "build: exit $?"
else
  scripts/gpu_host.sh "$build" > "$out/$stamp-build-and-ctest.log" 2>&1
fi
echo "ctest: $(grep -E 'tests passed|tests failed' "$out/$stamp-build-and-ctest.log")"
grep -E '^\s+[0-9]+ - .*\((Failed|Not Run|Timeout)\)' "$out/$stamp-build-and-ctest.log" | head -20
export LD_LIBRARY_PATH=/tmp/dsaf-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
part=${DSAF_GPU_CHECK_PART:-all}

if [ "$part" != bench ]; then
  tests="$out/$stamp-gpu-tests.log"
  {
    for t in device_gpu_test paged_logits_gpu_test topk_gpu_test verify_plugins_gpu_test; do
      "$build/tests/$t"; echo "$t exit $?"
    done
  } > "$tests" 2>&1
  grep -E ' exit |^\[ (sglang|dsv|vllm|topk|TopK)|OK, passed|FAILED' "$tests" | head -60
  scripts/device_property.sh "$build" "$out/$stamp-property.log"

  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 "$build/tests/device_gpu_test" \
      --gtest_filter='*QueryQuantGpu*sglang_v4_fp8*:*KeyStoreGpu*dsv4_ref*:*KeyStoreGpu*sglang_v4_fp4*:*KeyStoreGpu*dsv32*:*KeyStoreGpu*_v32*' \
      > "$out/$stamp-sanitizer-$tool.log" 2>&1
    echo "compute-sanitizer $tool (key/query): exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$stamp-sanitizer-$tool.log" | tail -1))"
    # The logits: memcheck on the fp8 and bf16 presets and the determinism test; racecheck
    # (past 240 s on the determinism test's 20 launches a kernel, past 60 s on a preset) on
    # the determinism test at two launches a kernel.
    filter='PagedLogitsDeterminism.*'
    [ $tool = memcheck ] && filter="$filter:*sglang_v4_fp8*:*sglang_v4_bf16*"
    DSAF_DETERMINISM_LAUNCHES=2 compute-sanitizer --tool $tool --error-exitcode 9 "$build/tests/paged_logits_gpu_test" \
      --gtest_filter="$filter" > "$out/$stamp-sanitizer-logits-$tool.log" 2>&1
    echo "compute-sanitizer $tool (paged logits): exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$stamp-sanitizer-logits-$tool.log" | tail -1))"
  done

  verify="$out/$stamp-verify.log"
  {
    for recipe in dsv32-ref dsv32-bf16 sglang-v32-fused vllm-v32 dsv4-ref sglang-v4-fp8 sglang-v4-bf16 sglang-v4-fp4; do
      echo "== verify builtin (ABI v2), $recipe"
      "$build/cli/dsa-fidelity" verify --kernel builtin --recipe $recipe --cases 10000; echo "exit $?"
    done
    # The version-1 example: every preset v1 can carry (sglang-v4-fp4's zero-sign rule is newer).
    for recipe in dsv32-ref dsv32-bf16 sglang-v32-fused vllm-v32 dsv4-ref sglang-v4-fp8 sglang-v4-bf16; do
      echo "== verify example plug-in (ABI v1), $recipe"
      "$build/cli/dsa-fidelity" verify --kernel "$build/device/libdsaf_example_plugin.so" --recipe $recipe --cases 10000
      echo "exit $?"
    done
    for recipe in sglang-v4-fp8 sglang-v4-bf16; do  # the fp8 and the bf16 tensor-core kernel
      echo "== verify builtin-fast, $recipe"
      "$build/cli/dsa-fidelity" verify --kernel builtin-fast --recipe $recipe --cases 10000; echo "exit $?"
    done
    for bug in wrong_reciprocal wrong_offset; do
      echo "== verify $bug plug-in, sglang-v4-fp8"
      "$build/cli/dsa-fidelity" verify --kernel "$build/device/libdsaf_${bug}_plugin.so" --recipe sglang-v4-fp8 --cases 10000
      echo "exit $?"
    done
  } > "$verify" 2>&1
  grep -E '^== |^exit|MISMATCH|explained|paged logits|top-K' "$verify" | head -80
  # The presets against the upstream kernels they name (docs/conformance.md), when the
  # pinned releases were unpacked (scripts/upstream.sh --fetch) and carried.
  if scripts/upstream.sh --check 2>/dev/null; then
    scripts/conformance.sh "$build" "$out/$stamp-conformance"; echo "conformance: exit $?"
  else
    echo "conformance: SKIPPED (no unpacked upstream releases: scripts/upstream.sh --fetch)"
  fi
fi
[ "$part" = tests ] && exit 0

"$build/bench/key_store_bench" "$out/$stamp-key-store-bench.json"
"$build/bench/paged_logits_bench" "$out/$stamp-paged-logits-bench.json"
"$build/bench/topk_bench" "$out/$stamp-topk-bench.json"
for py in torch_key_path torch_paged_logits torch_topk; do
  python3 "bench/$py.py" > "$out/$stamp-$py.json" && cat "$out/$stamp-$py.json"
done

# Where the default key kernel (sglang-v4-fp8, pinned, 1 lane per head) spends its time.
ncu --clock-control none --kernel-name-base mangled --kernel-name "regex:StorageFormatE3ELi1ELi0E" \
  --launch-skip 3 --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats \
  --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats \
  "$build/bench/key_store_bench" /tmp/ncu-key.json sglang-v4-fp8 > "$out/$stamp-ncu-key-store-fp8-lanes1.txt" 2>&1
echo "ncu key store exit $?"
grep -E "Duration|Executed Instructions  |Issue Slots Busy|Achieved Occupancy|DRAM Throughput|L1/TEX Cache|L2 Cache Throughput" \
  "$out/$stamp-ncu-key-store-fp8-lanes1.txt" | head -10

# One table of every kernel against the copy bandwidth and PyTorch eager.
python3 bench/make_table.py --key-store "$out/$stamp-key-store-bench.json" \
  --paged-logits "$out/$stamp-paged-logits-bench.json" --topk "$out/$stamp-topk-bench.json" \
  --torch-key-path "$out/$stamp-torch_key_path.json" --torch-paged-logits "$out/$stamp-torch_paged_logits.json" \
  --torch-topk "$out/$stamp-torch_topk.json" -o "$out/$stamp-table.md" && cat "$out/$stamp-table.md"
