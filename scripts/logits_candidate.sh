#!/usr/bin/env bash
# On the GPU host: one logits kernel candidate (bench/logits_variants/candidates/NAME.patch,
# docs/gpu-host.md) checked and timed against the tree in one call, in order of what a merge
# needs: the candidate's logits against the tree's in one process (logits_variants: bytes
# and events, plus the candidate's timeline probe), paged_logits_gpu_test built with the
# candidate, compute-sanitizer memcheck and racecheck on its determinism test (both kernels
# at one and four rows a block; two launches a kernel, as racecheck ran 20 past 240 s),
# then the 128K sweep through the candidate and ncu's kernel times of its logits.
#   scripts/logits_candidate.sh NAME [BUILD_DIR]
# BUILD_DIR (default /tmp/build-candidate) is configured by scripts/gpu_host.sh from a copy
# of the tree with the patch applied (.deps/debs must be there, as for gpu_host.sh).
# Everything goes into one tarball, $OUT/logits-candidate-NAME.tgz (bench/results/ when OUT
# is unset), written at exit, also when the device call's limit stops the script; summary.txt
# in it has one line a step. Exit 2 when the patch is missing or does not apply.
set -uo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: scripts/logits_candidate.sh NAME [BUILD_DIR]}
build=${2:-/tmp/build-candidate}
patch=bench/logits_variants/candidates/$name.patch
[ -f "$patch" ] || { echo "logits_candidate: no $patch" >&2; exit 2; }
out=${OUT:-bench/results}
mkdir -p "$out"
results=$(mktemp -d)
trap 'tar czf "$out/logits-candidate-$name.tgz" -C "$results" .' EXIT
trap 'exit 143' TERM
start=$(date +%s)
step() { echo "[$(($(date +%s) - start)) s] $*" | tee -a "$results/summary.txt"; }
export PATH=/usr/local/cuda/bin:$PATH

# The candidate's tree: a copy with the patch applied (no git needed on the host).
tree=$(mktemp -d)/tree
mkdir -p "$tree"
tar cf - --exclude='./build*' --exclude=./.git . | tar xf - -C "$tree"
patch -s -p1 -d "$tree" < "$patch" || { echo "logits_candidate: $patch does not apply" >&2; exit 2; }
{ nvidia-smi -L; git log --oneline -1 2>/dev/null; echo "candidate $name"; } > "$results/host.txt" 2>&1

step "build"
python3 bench/logits_variants/timeline_probe.py "$tree/device/paged_logits_mma.cu" "$results/timeline.cu"
bash bench/logits_variants/build.sh /tmp/lv-candidate main=device/paged_logits_mma.cu "$name=$tree/device/paged_logits_mma.cu" \
  timeline="$results/timeline.cu" > "$results/logits-variants-build.log" 2>&1 &
variants_build=$!
(cd "$tree" && scripts/gpu_host.sh "$build" paged_logits_gpu_test) > "$results/build.log" 2>&1
cmake --build "$build" -j"$(nproc)" --target dsa_fidelity >> "$results/build.log" 2>&1
step "build exit $? (tail: $(tail -1 "$results/build.log"))"
wait "$variants_build"
step "logits_variants build exit $?"
lib=${DSAF_DEPS_PREFIX:-/tmp/dsaf-deps}/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$lib:$lib/hdf5/serial:${LD_LIBRARY_PATH:-}

timeout 120 /tmp/lv-candidate/logits_variants > "$results/logits-variants.log" 2>&1
step "logits_variants exit $?"
grep -E "TFLOP|TIMELINE" "$results/logits-variants.log" >> "$results/summary.txt"

timeout 180 "$build/tests/paged_logits_gpu_test" > "$results/paged-logits-gpu-test.log" 2>&1
step "paged_logits_gpu_test exit $? ($(grep -E '^\[  (PASSED|FAILED)' "$results/paged-logits-gpu-test.log" | tr '\n' ' '))"

for tool in memcheck racecheck; do
  DSAF_DETERMINISM_LAUNCHES=2 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 \
    "$build/tests/paged_logits_gpu_test" --gtest_filter='PagedLogitsDeterminism.*' > "$results/sanitizer-$tool.log" 2>&1
  step "compute-sanitizer $tool exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$results/sanitizer-$tool.log" | tail -1))"
done

recipes=sglang-v4-fp8,sglang-v4-bf16,dsv32-ref
sweep=(sweep --recipes $recipes --context 128k --topk 2048 --queries 64 --device gpu --kernel builtin-fast)
timeout 90 "$build/cli/dsa-fidelity" "${sweep[@]}" --out "$results/sweep-128k" > "$results/sweep-128k.log" 2>&1
step "sweep exit $? ($(grep -E 'logits \[' "$results/sweep-128k.log" | tr -s ' '))"
timeout 120 ncu --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second --clock-control none --csv \
  -k regex:paged_logits_mma "$build/cli/dsa-fidelity" "${sweep[@]}" --out "$(mktemp -d)" > "$results/ncu-sweep-logits.csv" 2>&1
step "ncu exit $?"
