#!/usr/bin/env bash
# Times the issue's sweep budget: 5 recipes x 6 contexts (2K..64K) x 64 queries on the
# CPU, with the machine's cores. Writes bench/results/sweep-timing-<host>-<date>.json.
#   bench/sweep_timing.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=$(mktemp -d)
start=$(date +%s.%N)
"$build/cli/dsa-fidelity" sweep --recipes dsv32-ref,dsv32-bf16,sglang-v32-fused,sglang-v4-fp8,sglang-v4-bf16 \
  --context 2k..64k --queries 64 --topk 512 --threads "$(nproc)" --out "$out" >"$out/stdout.txt"
end=$(date +%s.%N)
seconds=$(python3 -c "print(round($end - $start, 1))")
cat "$out/stdout.txt"
result="bench/results/sweep-timing-$(hostname -s)-$(date +%Y-%m-%d).json"
python3 - "$out/sweep.json" "$seconds" "$(nproc)" "$(git rev-parse --short HEAD)" "$result" <<'PY'
import json, sys
sweep, seconds, cores, commit, path = sys.argv[1:]
r = json.load(open(sweep))
json.dump({"command": r["command"], "seconds": float(seconds), "cores": int(cores),
           "commit": commit, "budget_seconds": 600,
           "recall_mean": {f"{x['recipe']}@{x['context']}": x["metrics"]["recall"]["mean"] for x in r["rows"]}},
          open(path, "w"), indent=2)
print(f"sweep took {seconds} s on {cores} cores (budget 600 s); wrote {path}")
PY
