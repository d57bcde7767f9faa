#!/usr/bin/env bash
# A/B of a key-kernel patch on the GPU host, old and new in one call:
#   bench/key_variants/ab.sh OUT_DIR PATCH [RECIPE ...]
# From the repository root (a clean tree at the commit to compare with; the Debian packages
# in .deps/debs, scripts/gpu_host.sh --fetch): copies the files git does not ignore twice,
# to /tmp/key-ab/{old,new}, applies PATCH to new, builds key_store_bench in both
# (scripts/gpu_host.sh, one after the other: the first unpacks the Debian packages) and
# device_gpu_test in new, runs new's key and query byte tests of the recipes, then
# key_store_bench for each recipe, old and new alternated, two rounds. OUT_DIR gets the
# logs, the benchmark JSONs and summary.txt (per recipe and round: the best of the orders
# and the bytes-only twin, ms). Default recipes: the presets key_store_bench times by
# default. Exit 1 when a byte test or a benchmark failed.
# DSAF_AB_OLD_BUILD=DIR: time old from DIR, a build of this same unpatched tree that is
# already there (scripts/gpu_host.sh DIR), instead of building old again.
set -uo pipefail
out=$1 patch=$(realpath "$2")
shift 2
recipes=("$@")
mkdir -p "$out"
: > "$out/summary.txt"
export PATH=/usr/local/cuda/bin:$PATH
root=/tmp/key-ab
rm -rf "$root" && mkdir -p "$root/old" "$root/new"
for side in old new; do
  # The working tree's files, not only the index's (a checkout copied without its git
  # state lists new files as untracked); ignored folders (.deps, builds) stay behind.
  git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$root/$side" 2>/dev/null
  mkdir -p "$root/$side/.deps" && ln -s "$PWD/.deps/debs" "$root/$side/.deps/debs"
done
(cd "$root/new" && git apply "$patch") || { echo "the patch does not apply" | tee "$out/summary.txt"; exit 2; }
[ -n "${DSAF_AB_OLD_BUILD:-}" ] && ln -s "$(realpath "$DSAF_AB_OLD_BUILD")" "$root/build-old"
for side in old new; do
  [ "$side" = old ] && [ -n "${DSAF_AB_OLD_BUILD:-}" ] && continue
  (cd "$root/$side" && scripts/gpu_host.sh "$root/build-$side" key_store_bench) > "$out/build-$side.log" 2>&1 ||
    { echo "build $side failed (build-$side.log)" | tee -a "$out/summary.txt"; exit 1; }
done
(cd "$root/new" && scripts/gpu_host.sh "$root/build-new" device_gpu_test) > "$out/build-new-tests.log" 2>&1
lib=${DSAF_DEPS_PREFIX:-/tmp/dsaf-deps}/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH="$lib:$lib/hdf5/serial:${LD_LIBRARY_PATH:-}"
filter=""
for r in "${recipes[@]:-}"; do [ -n "$r" ] && filter="$filter*KeyStoreGpu*${r//-/_}*:*QueryQuantGpu*${r//-/_}*:"; done
"$root/build-new/tests/device_gpu_test" --gtest_filter="${filter:-*KeyStoreGpu*:*QueryQuantGpu*}" > "$out/tests-new.log" 2>&1
status=$?
count() { grep -cE "$1" "$out/tests-new.log"; }
echo "new's byte tests: exit $status ($(count '^\[       OK \].*ms\)$') passed, $(count '^\[  FAILED  \].*ms\)$') failed," \
  "$(count '^\[  SKIPPED \].*ms\)$') skipped)" | tee -a "$out/summary.txt"
for round in 1 2; do
  for side in old new; do
    for r in "${recipes[@]:-default}"; do
      json="$out/key-$side-$r-$round.json"
      args=("$json"); [ "$r" != default ] && args+=("$r")
      if ! "$root/build-$side/bench/key_store_bench" "${args[@]}" > "${json%.json}.log" 2>&1; then
        echo "$r $side round $round: no result (${json%.json}.log)" >> "$out/summary.txt"
        status=1
        continue
      fi
      python3 - "$json" "$side" "$round" >> "$out/summary.txt" <<'PY'
import json, sys
path, side, rnd = sys.argv[1:]
for c in json.load(open(path))["cases"]:
    best = min(v for k in ("fused_ms_by_lanes_per_head", "tile_order_ms_by_lanes_per_head",
                           "tile_order_hand_out_ms_by_lanes_per_head") for v in c.get(k, {}).values())
    twin = c["traffic_twin_no_rope_ms"]
    print(f"{c['recipe']:16s} {side} round {rnd}: best {best:.4f} ms, bytes-only twin {twin:.4f} ({twin / best:.2f})")
PY
    done
  done
done
cat "$out/summary.txt"
exit $(( status != 0 ))
