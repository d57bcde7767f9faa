#!/usr/bin/env bash
# Builds topk_variants (topk_variants.cu) from versions of the top-K kernel:
#   bench/topk_variants/build.sh OUT_DIR NAME=FILE[@LAUNCHER] [NAME=FILE[@LAUNCHER] ...]
# FILE is a copy of device/topk/select.cuh (e.g. `git show REV:device/topk/select.cuh >
# /tmp/old.cuh`); the first NAME is the one the others' indices are compared with. Each
# version compiles device/topk/topk.cu (or LAUNCHER, that version's copy of it) with FILE
# standing in for select.cuh (an include directory searched first), its launcher renamed
# launch_topk_NAME, its namespace topk_select_NAME and the launcher file's other external
# function check_topk_row_statuses_NAME, so that the objects link side by side; in
# parallel, from the repository root, with nvcc on PATH; sm_90a.
# $TOPK_VARIANTS_NVCC_FLAGS adds nvcc flags. A version whose kernels take other parameters
# than the tree's topk.cu passes them needs its own LAUNCHER: the cooperative launch passes
# its parameters untyped, so a mismatch compiles and faults on the device.
set -euo pipefail
out=$1
shift
mkdir -p "$out"
flags=(-DDSAF_HAVE_DEVICE=1 -O3 -DNDEBUG --generate-code=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -std=c++17
       ${TOPK_VARIANTS_NVCC_FLAGS:-})  # e.g. -lineinfo for a source-level profile
pids=() objects=() names=""
for version in "$@"; do
  name=${version%%=*} file=${version#*=} launcher=device/topk/topk.cu
  if [[ $file == *@* ]]; then launcher=${file#*@} file=${file%%@*}; fi
  mkdir -p "$out/$name/device/topk"
  cp "$file" "$out/$name/device/topk/select.cuh"
  cp "$launcher" "$out/$name/launcher.cu"  # beside no select.cuh: the include resolves to FILE
  nvcc "${flags[@]}" -I"$out/$name" -I. -Dlaunch_topk="launch_topk_$name" -Dtopk_select="topk_select_$name" \
    -Dcheck_topk_row_statuses="check_topk_row_statuses_$name" \
    -c "$out/$name/launcher.cu" -o "$out/$name.o" -Xptxas -v > "$out/$name.ptxas" 2>&1 &
  pids+=($!)
  objects+=("$out/$name.o")
  names="$names V($name)"
done
nvcc "${flags[@]}" -I. "-DTOPK_VARIANTS=$names" -c bench/topk_variants/topk_variants.cu -o "$out/driver.o" &
pids+=($!)
for pid in "${pids[@]}"; do wait "$pid"; done
nvcc --generate-code=arch=compute_90a,code=sm_90a "$out/driver.o" "${objects[@]}" -o "$out/topk_variants"
