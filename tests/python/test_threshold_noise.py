#!/usr/bin/env python3
"""bench/threshold_noise against `dsa-fidelity sweep` on the same study: its recall column
must be the sweep's mean recall (the same oracle, keys, queries and top-K), and recipes
with one exact oracle (vllm-v32, dsv32-ref: both layer-normed keys) must report the same
exact-score spacing. Environment: DSAF_THRESHOLD_NOISE, DSAF_CLI (set by CTest)."""
import csv
import os
import subprocess
import sys
import tempfile

RECIPES = ["vllm-v32", "dsv32-ref", "sglang-v4-fp8"]
CONTEXT, K, QUERIES, ACTIVATIONS = 16384, 256, 8, "outliers"


def main():
    tool, cli = os.environ["DSAF_THRESHOLD_NOISE"], os.environ["DSAF_CLI"]
    out = subprocess.run([tool, ",".join(RECIPES), str(CONTEXT), str(K), str(QUERIES), ACTIVATIONS],
                         check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] in RECIPES:
            rows[parts[0]] = {"spacing": float(parts[4]), "rank_noise": float(parts[3]), "recall": float(parts[6])}
    assert sorted(rows) == sorted(RECIPES), out
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([cli, "sweep", "--recipes", ",".join(RECIPES), "--context", str(CONTEXT), "--topk", str(K),
                        "--queries", str(QUERIES), "--activations", ACTIVATIONS, "--threads", "2", "--out", d],
                       check=True, capture_output=True)
        with open(os.path.join(d, "sweep.csv")) as f:
            sweep = {r["recipe"]: float(r["recall_mean"]) for r in csv.DictReader(f)}
    for name in RECIPES:
        assert abs(rows[name]["recall"] - sweep[name]) < 5e-7, (name, rows[name]["recall"], sweep[name])
        assert rows[name]["rank_noise"] > 0, (name, rows[name])
    assert rows["vllm-v32"]["spacing"] == rows["dsv32-ref"]["spacing"], rows
    print("threshold_noise: recall equals the sweep's for", ", ".join(RECIPES))


if __name__ == "__main__":
    sys.exit(main())
