#!/usr/bin/env bash
# On a GPU host: the published device studies (docs/results/README.md, "device-h200/";
# docs/device-studies.md) through our kernels, each CSV compared byte for byte with the
# committed one, and each run's stage table kept (the CLI's: device time and fraction of
# its roofline per stage, the dominant one marked). The 128K sweep and needle run twice
# (a host's spread shows between the two); `1m` adds the 1M rows (~70 s more on an H100).
#   scripts/device_study.sh CLI OUT_DIR [1m]
# CLI: a built dsa-fidelity (build-gpu/cli/dsa-fidelity, or one carried to the host with
# its libraries on LD_LIBRARY_PATH). Prints one line a run and its stage table; each run's
# output, results and device-timing.json are in OUT_DIR/NAME/. Exit 1 when a CSV differs,
# 2 on bad arguments.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] && [ -x "$1" ] || { echo "usage: $0 CLI OUT_DIR [1m] (CLI: an executable dsa-fidelity)" >&2; exit 2; }
cli=$1 out=$2 sizes=128k
[ "${3:-}" = 1m ] && sizes="128k 1m"
mkdir -p "$out"
recipes=sglang-v4-fp8,sglang-v4-bf16,dsv32-ref
committed=docs/results/device-h200
failed=0
run() {  # NAME STUDY CSV_NAME ARGS...: one study, its CSV against the committed one
  local name=$1 study=$2 committed_csv=$3
  shift 3
  local start=$SECONDS
  "$cli" "$study" --recipes $recipes --topk 2048 --device gpu --kernel builtin-fast --out "$out/$name" "$@" \
    > "$out/$name/stdout.txt" 2>&1
  local status=$?
  local verdict="CSV equal to $committed/$committed_csv"
  if [ $status -ne 0 ]; then
    verdict="exit $status (see $out/$name/stdout.txt)"
    failed=1
  elif ! cmp -s "$out/$name/$study.csv" "$committed/$committed_csv"; then
    verdict="CSV DIFFERS from $committed/$committed_csv"
    failed=1
  fi
  echo "$name: $((SECONDS - start)) s, $verdict"
  sed -n '/^device time per stage/,/^study wall time/p' "$out/$name/stdout.txt"
}
needle_args=(--reference-context 8k --depths 0.1..0.9:5 --margins 0.5,1,2)
for size in $sizes; do
  rounds=2 trials=2
  [ "$size" = 1m ] && rounds=1 trials=1  # the committed 1M needle is one trial
  for round in $(seq $rounds); do
    mkdir -p "$out/sweep-$size-$round" "$out/needle-$size-$round"
    run "sweep-$size-$round" sweep "sweep-$size.csv" --context "$size" --queries 64
    run "needle-$size-$round" needle "needle-$size.csv" --context "$size" --trials $trials "${needle_args[@]}"
  done
done
exit $failed
