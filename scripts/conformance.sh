#!/usr/bin/env bash
# On the GPU host: the presets against the production kernels they name (docs/conformance.md).
# Builds the conformance adapters (conformance/) against the unpacked upstream releases
# (scripts/upstream.sh --fetch, on a networked machine), runs `dsa-fidelity verify` on each
# adapter with each of its presets (conformance/kernels.json), times the peers beside our
# kernels (bench/peer_bench, and the kernels alone with ncu), and writes the report.
#   scripts/conformance.sh [BUILD_DIR [RESULTS_DIR]]
# BUILD_DIR: a tree configured by scripts/gpu_host.sh (default build-gpu); RESULTS_DIR
# (default $OUT/conformance, or bench/results/conformance): every verify JSON and text,
# peer JSON, ncu CSV, and conformance.md (copy it to docs/conformance.md).
# DSAF_CONFORMANCE_PREBUILT=1: BUILD_DIR already holds dsa-fidelity, peer_bench and every
# adapter, built on another machine for this GPU (an offline host without the upstream
# tree): no build and no check of .deps/upstream; a capture script then reads the one
# upstream file it names under $DSAF_UPSTREAM_ROOT/src.
# DSAF_CONFORMANCE_CASES: verify tokens per run (default 10000). DSAF_CONFORMANCE_PARTS:
# which of "verify captures peers ncu" to run (default all four; the report is written from
# whatever RESULTS_DIR holds, so parts may run in separate calls). "captures" runs the
# manifest's capture scripts (upstream Triton kernels, with the host's torch and Triton)
# and `dsa-fidelity compare` on what they wrote. Exit 1 when a verify or compare run fails,
# 2 when the build or the upstream tree is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
results=${2:-${OUT:-bench/results}/conformance}
cases=${DSAF_CONFORMANCE_CASES:-10000}
manifest=conformance/kernels.json
report=scripts/conformance_report.py
mkdir -p "$results"
results=$(cd "$results" && pwd)  # absolute: the PyTorch baselines run from bench/
export PATH=/usr/local/cuda/bin:$PATH
cli=$build/cli/dsa-fidelity
lib() { echo "$build/conformance/libdsaf_upstream_$1.so"; }
if [ "${DSAF_CONFORMANCE_PREBUILT:-0}" = 1 ]; then
  adapters=$(python3 "$report" runs "$manifest" | awk '{print $1}' | sort -u) || exit 2
  [ -n "$adapters" ] || { echo "conformance.sh: $manifest names no adapter" >&2; exit 2; }
  mapfile -t libs < <(while read -r a; do lib "$a"; done <<< "$adapters")
  for f in "$cli" "$build/bench/peer_bench"; do
    [ -x "$f" ] || { echo "conformance.sh: DSAF_CONFORMANCE_PREBUILT=1 but $f is not an executable" >&2; exit 2; }
  done
  for f in "${libs[@]}"; do
    [ -f "$f" ] || { echo "conformance.sh: DSAF_CONFORMANCE_PREBUILT=1 but $f is missing" >&2; exit 2; }
  done
else
  scripts/upstream.sh --check || exit 2
  cmake --build "$build" -j"$(nproc)" --target dsa_fidelity dsaf_upstream_adapters peer_bench \
    > "$results/build.log" 2>&1 || { tail -30 "$results/build.log"; exit 2; }
fi
kernel_of() { [ "$1" = builtin ] && echo builtin || lib "$1"; }

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
releases=$(grep -v '^#' conformance/upstream.lock | awk 'NF == 6 {printf "%s\"%s %s\"", sep, $1, $2; sep=", "}')
# DSAF_TREE: what the tree is when the checkout's git state does not say (a copied tree
# with uncommitted changes).
cat > "$results/run.json" <<EOF
{"date": "$(date -u +%Y-%m-%d)", "commit": "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)",
 "tree": "${DSAF_TREE:-}", "gpu": "$gpu", "cases": $cases, "releases": [$releases]}
EOF

parts=${DSAF_CONFORMANCE_PARTS:-verify captures peers ncu}
part() { [[ " $parts " == *" $1 "* ]]; }
failed=0

python3 "$report" recipes "$manifest" > "$results/recipes.json"  # the run's recipes that are not presets

# verify: the reference runs on the CPU, so the runs go side by side (a few per core).
if part verify; then
python3 "$report" runs "$manifest" > "$results/runs.txt"
while read -r adapter preset; do
  (
    "$cli" verify --kernel "$(lib "$adapter")" --recipe "$preset" --recipe-file "$results/recipes.json" --cases "$cases" \
      --json "$results/verify-$adapter-$preset.json" > "$results/verify-$adapter-$preset.txt" 2>&1
    echo "exit $?" >> "$results/verify-$adapter-$preset.txt"
  ) &
  while [ "$(jobs -rp | wc -l)" -ge "$(( $(nproc) / 2 + 1 ))" ]; do sleep 0.2; done
done < "$results/runs.txt"
wait
while read -r adapter preset; do
  status=$(tail -1 "$results/verify-$adapter-$preset.txt")
  echo "verify $adapter $preset: $status: $(grep -E '^(key cache|top-K|q |paged)' "$results/verify-$adapter-$preset.txt" | head -3 | tr '\n' ' ')"
  [ "$status" = "exit 0" ] || failed=1
done < "$results/runs.txt"
fi

# captures: an upstream kernel that no C adapter can call writes a cache capture; compare
# checks it against each listed recipe, detect names every preset that reproduces it.
if part captures; then
python3 "$report" captures "$manifest" > "$results/captures.txt"
while read -r capture script tokens recipes; do
  file=$results/capture-$capture.h5
  if ! timeout 300 python3 "$script" "${DSAF_UPSTREAM_ROOT:-.deps/upstream}/src" "$file" "$tokens" \
       > "$results/capture-$capture.txt" 2>&1; then
    echo "capture $capture: the script failed"; tail -5 "$results/capture-$capture.txt"; failed=1; continue
  fi
  for recipe in ${recipes//,/ }; do
    "$cli" compare --capture "$file" --recipe "$recipe" --recipe-file "$results/recipes.json" \
      --json "$results/compare-$capture-$recipe.json" > "$results/compare-$capture-$recipe.txt" 2>&1
    status=$?
    echo "compare $capture $recipe: exit $status: $(head -3 "$results/compare-$capture-$recipe.txt" | tr '\n' ' ')"
    [ $status -eq 0 ] || failed=1
  done
  "$cli" detect --capture "$file" --recipe-file "$results/recipes.json" --json "$results/detect-$capture.json" \
    > "$results/detect-$capture.txt" 2>&1
  echo "detect $capture: exit $?: $(head -3 "$results/detect-$capture.txt" | tr '\n' ' ')"
done < "$results/captures.txt"
fi

# peers: the ABI-call times (events) of every line, then PyTorch eager on the same shapes,
# then the kernels alone under ncu (3 calls each: one untimed, two timed).
python3 "$report" peers "$manifest" > "$results/peers.txt"
# peer_line MODE LINE...: sets name and argv (peer_bench's arguments after OUT.json) from one
# line. Ours: `builtin`, what verify runs, first (the reference); for top-K under events also
# `builtin:by-index:async`, the call that does what the adapters' calls do (the report's
# ratios are to it). Under ncu top-K is `builtin:by-index` alone: by score and by index are
# one kernel, whose launches ncu's medians would merge.
peer_line() {
  local mode=$1 stage=$2 x
  shift 2
  if [ "$stage" = key ]; then
    name="key-$1" argv=(key "$1" builtin) && shift
  elif [ "$mode" = ncu ]; then
    name="topk-$3" argv=(topk "$1" "$2" "$3" builtin:by-index) && shift 3
  else
    name="topk-$3" argv=(topk "$1" "$2" "$3" builtin builtin:by-index:async) && shift 3
  fi
  for x in "$@"; do argv+=("$(kernel_of "$x")"); done
}
if part peers; then
while read -r -a line; do
  peer_line events "${line[@]}"
  DSAF_PEER_RECIPE_FILE=$results/recipes.json timeout 300 "$build/bench/peer_bench" "$results/peer-$name.json" "${argv[@]}" > "$results/peer-$name.txt" 2>&1
  echo "peer $name: exit $?"; cat "$results/peer-$name.txt"
done < "$results/peers.txt"
for k in $(python3 -c "import json; print(' '.join(map(str, json.load(open('$manifest'))['peer_topk']['k'])))"); do
  (cd bench && timeout 120 python3 torch_topk.py "$k" > "$results/torch-topk-$k.json" 2>/dev/null) ||
    rm -f "$results/torch-topk-$k.json"
done
(cd bench && timeout 120 python3 torch_key_path.py > "$results/torch-key-path.json" 2>/dev/null) ||
  rm -f "$results/torch-key-path.json"
fi
if part ncu; then
  while read -r -a line; do
    peer_line ncu "${line[@]}"
    DSAF_PEER_RUNS=2 DSAF_PEER_RECIPE_FILE=$results/recipes.json timeout 300 ncu --metrics gpu__time_duration.sum --clock-control none --csv \
      "$build/bench/peer_bench" /tmp/ncu-peer.json "${argv[@]}" > "$results/ncu-$name.csv" 2> "$results/ncu-$name.log"
    echo "ncu $name: exit $?"
  done < "$results/peers.txt"
fi

python3 "$report" report "$manifest" "$results" > "$results/conformance.md"
echo "wrote $results/conformance.md"
exit $failed
