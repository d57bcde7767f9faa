#!/usr/bin/env bash
# On the GPU host: warp-state samples per SASS instruction of the default key kernels
# (sglang-v4-fp8 at 1 lane per head, sglang-v4-bf16 at 2), one launch each: by default the
# 4th (batch order); DSAF_LAUNCH_SKIP=428 profiles the tile order with hand-out instead
# (key_store_bench launches the width 3 + 21 x 10 times in batch order, once each in batch
# and tile order, 213 times in the tile order, then the hand-out's byte comparison).
# Nsight Compute's SourceCounters exported as CSV (--page source --print-source sass), to
# find which instructions the warps wait at. Builds key_store_bench; writes into $OUT.
#   bench/sass_stalls.sh BUILD_DIR
set -uo pipefail
build=${1:-build-gpu}
out=${OUT:-/tmp}
export PATH=/usr/local/cuda/bin:$PATH
scripts/gpu_host.sh "$build" key_store_bench > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
export LD_LIBRARY_PATH=/tmp/dsaf-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
profile() {  # NAME KERNEL_REGEX RECIPE
  ncu --clock-control none --kernel-name-base mangled --kernel-name "regex:$2" --launch-skip "${DSAF_LAUNCH_SKIP:-3}" --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section InstructionStats -f -o "$out/$1" \
    "$build/bench/key_store_bench" /tmp/k.json "$3" > "$out/ncu-$1.log" 2>&1
  echo "ncu $1: exit $?"
  ncu --import "$out/$1.ncu-rep" --page source --csv --print-source sass > "$out/$1-sass.csv" 2>&1
  echo "source page $1: exit $?, $(wc -l < "$out/$1-sass.csv") lines"
}
profile fp8-lanes1 'StorageFormatE3ELi1ELi0E' sglang-v4-fp8
profile bf16-lanes2 'StorageFormatE2ELi2ELi1E' sglang-v4-bf16
