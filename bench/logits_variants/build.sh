#!/usr/bin/env bash
# Builds logits_variants (logits_variants.cu) from versions of the tensor-core logits kernel:
#   bench/logits_variants/build.sh OUT_DIR NAME=FILE [NAME=FILE ...]
# FILE is a copy of device/paged_logits_mma.cu (e.g. `git show REV:device/paged_logits_mma.cu
# > /tmp/old.cu`); the first NAME is the one the others' bytes are compared with. Each FILE
# is compiled on its own with its launcher renamed launch_NAME (and shared_row_run_of and
# shared_row_run_on_device renamed, so that the objects link side by side), in parallel;
# run from the repository root, with nvcc on PATH; sm_90a.
set -euo pipefail
out=$1
shift
mkdir -p "$out"
flags=(-DDSAF_HAVE_DEVICE=1 -I. -O3 -DNDEBUG --generate-code=arch=compute_90a,code=sm_90a --fmad=false
       --expt-relaxed-constexpr -std=c++17)
pids=() objects=() names=""
for version in "$@"; do
  name=${version%%=*} file=${version#*=}
  nvcc "${flags[@]}" -Dlaunch_paged_logits_fast="launch_$name" -Dshared_row_run_of="shared_row_run_of_$name" \
    -Dshared_row_run_on_device="shared_row_run_on_device_$name" \
    -c -x cu "$file" -o "$out/$name.o" -Xptxas -v > "$out/$name.ptxas" 2>&1 &
  pids+=($!)
  objects+=("$out/$name.o")
  names="$names V($name)"
done
nvcc "${flags[@]}" "-DLOGITS_VARIANTS=$names" \
  -c bench/logits_variants/logits_variants.cu -o "$out/driver.o" &
pids+=($!)
for pid in "${pids[@]}"; do wait "$pid"; done
nvcc --generate-code=arch=compute_90a,code=sm_90a "$out/driver.o" "${objects[@]}" -o "$out/logits_variants"
