#!/usr/bin/env python3
"""bench/make_table.py on the committed H200 results of runs 11 and 12 (bench/results/):
the table has one row for every kernel case of every input file (a later file's rerun of a
case replaces the earlier one), its numbers are the files' numbers, and a missing input is
a usage error (exit 2). Standard library only; runs under pytest or alone."""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
SCRIPT = os.path.join(ROOT, "bench", "make_table.py")
RESULTS = os.path.join(ROOT, "bench", "results")
P = "2026-11-30-NVIDIA-H200-"
INPUTS = {
    "--key-store": [P + "run11-key-store-bench.json", P + "run12-key-store-bench.json",
                    P + "run12-key-store-bench-bf16.json"],
    "--paged-logits": [P + "run11-paged-logits-bench.json", P + "run12-paged-logits-bench.json"],
    "--topk": [P + "run11-topk-bench.json", P + "run12-topk-bench.json"],
    "--torch-key-path": [P + "run11-torch_key_path.json"],
    "--torch-paged-logits": [P + "run11-torch_paged_logits.json"],
    "--torch-topk": [P + "run11-torch_topk.json"],
}


def run(args):
    return subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True)


def table_rows(markdown):
    """{(operation, case, kernel): cells} of the table's body rows."""
    rows = {}
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 9 or cells[0] in ("Operation",) or set(cells[0]) <= set("-:"):
            continue
        key = tuple(cells[:3])
        assert key not in rows, f"row {key} appears twice"
        rows[key] = cells
    return rows


def cases(option):
    """The cases of the input files of one benchmark, later files last."""
    out = []
    for name in INPUTS[option]:
        with open(os.path.join(RESULTS, name), encoding="utf-8") as f:
            out += json.load(f)["cases"]
    return out


def test_every_kernel_case_has_one_row():
    args = [a for option, files in INPUTS.items() for a in [option] + [os.path.join(RESULTS, f) for f in files]]
    r = run(args)
    assert r.returncode == 0, r.stderr
    rows = table_rows(r.stdout)
    expected = set()
    for c in cases("--key-store"):
        case = f"{c['recipe']}, {c['store_bytes_per_token']} B/token"
        expected.add(("key store", case, "fused key path (key_store.cu)"))
    for c in cases("--paged-logits"):
        source = "paged_logits.cu" if c["kernel"] == "exact-order" else "paged_logits_mma.cu"
        expected.add(("paged logits", f"{c['cache']} cache", f"{c['kernel']} ({source})"))
    for c in cases("--topk"):
        expected.add(("top-K", c["input"], "exact top-K (topk.cu)"))
    assert set(rows) == expected, f"missing {expected - set(rows)}, unexpected {set(rows) - expected}"
    assert len(rows) == 5 + 3 + 2

    # Reruns replace: run 12's sglang-v4-fp8 key store and fp8-mma logits, not run 11's.
    fp8_store = rows[("key store", "sglang-v4-fp8, 132 B/token", "fused key path (key_store.cu)")]
    assert fp8_store[3] == "0.3097", fp8_store
    mma = rows[("paged logits", "fp8 cache", "fp8-mma (paged_logits_mma.cu)")]
    assert mma[3] == "0.3262" and mma[4] == "571.0 MB" and mma[5] == "41.4%", mma
    # The eager time of the same operation and the speed-up over it: 5.18474 / 0.3262.
    assert mma[6] == "5.185" and mma[7] == "15.9x", mma
    # Recipes without an eager twin say so.
    fp4_store = rows[("key store", "sglang-v4-fp4, 68 B/token", "fused key path (key_store.cu)")]
    assert fp4_store[6] == "-" and fp4_store[7] == "-", fp4_store
    topk = rows[("top-K", "gaussian-fp32", "exact top-K (topk.cu)")]
    assert topk[6] == "0.160" and topk[7] == "2.58x", topk


def check_rows_of(file, kernel, ms_field, rows_per_case):
    # Every case of a committed key-store file has a row for `kernel` with the time in
    # `ms_field`, the same bytes, the fraction of copy they make, and no eager twin.
    path = os.path.join(RESULTS, file)
    r = run(["--key-store", path])
    assert r.returncode == 0, r.stderr
    rows = table_rows(r.stdout)
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    for c in doc["cases"]:
        if c.get(ms_field, 0) == 0:  # not measured for this case: no row
            assert ("key store", f"{c['recipe']}, {c['store_bytes_per_token']} B/token", kernel) not in rows
            continue
        row = rows[("key store", f"{c['recipe']}, {c['store_bytes_per_token']} B/token", kernel)]
        assert float(row[3]) == round(c[ms_field], 4), (row, c[ms_field])
        assert row[6] == "-", row
        fraction = c["bytes"] / (c[ms_field] * 1e-3) / 1e9 / doc["copy_bandwidth_gbps"]
        assert row[5] == f"{100 * fraction:.1f}%", (row, fraction)
    fused = [key for key in rows if key[2].startswith("fused")]
    assert len(fused) == rows_per_case * len(doc["cases"])


def test_tile_order_cases_get_their_own_row():
    # Run 47's key-store file has tile-order timings (api.h KeyStoreArgs::tile_order).
    check_rows_of("2026-12-01-NVIDIA-H200-run47-key-store-bench.json", "fused key path, tile order (key_store.cu)",
                  "tile_order_ms", 2)


def test_hand_out_cases_get_a_third_row():
    # Run 58's also has the tile order with its last tiles handed out by counters (api.h
    # KeyStoreArgs::tile_counters).
    check_rows_of("2026-12-01-NVIDIA-H200-run58-key-store-bench.json",
                  "fused key path, tile order + hand-out (key_store.cu)", "tile_order_hand_out_ms", 3)


def test_traffic_twins_get_a_row_where_measured():
    # Run 72's file has the bytes-only twin for the fp8 and bf16 stores, 0 for fp4.
    check_rows_of("2026-12-01-NVIDIA-H200-run72-key-store-bench.json",
                  "traffic twin: these bytes, no arithmetic (key_store_bench.cu)", "traffic_twin_no_rope_ms", 3)


def test_another_batch_shape_is_another_case():
    # Run 80 timed 16 x 64K (the default: plain labels) and 256 x 4K positions: the same recipe
    # gets one row per shape, and only the default shape carries the eager time (measured there).
    r80 = [os.path.join(RESULTS, "2026-12-01-NVIDIA-H200-run80-" + f) for f in
           ("seq65536-sglang-v4-fp8.json", "seq4096-sglang-v4-fp8.json")]
    eager = os.path.join(RESULTS, "2026-12-01-NVIDIA-H200-run66-torch_key_path.json")
    r = run(["--key-store"] + r80 + ["--torch-key-path", eager])
    assert r.returncode == 0, r.stderr
    rows = table_rows(r.stdout)
    kernel = "fused key path, tile order + hand-out (key_store.cu)"
    for path in r80:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        (c,) = doc["cases"]
        shape = "" if doc["sequence_length"] == 65536 else ", 256 x 4K positions"
        row = rows[("key store", "sglang-v4-fp8, 132 B/token" + shape, kernel)]
        assert float(row[3]) == round(c["tile_order_hand_out_ms"], 4), (row, c)
        fused = rows[("key store", "sglang-v4-fp8, 132 B/token" + shape, "fused key path (key_store.cu)")]
        assert (fused[6] == "-") == bool(shape), fused
    assert len(rows) == 2 * 4
    # Run 81's sequential cache pages (DSAF_BENCH_PAGES) are named too; its shuffled file is the default.
    r81 = [os.path.join(RESULTS, "2026-12-01-NVIDIA-H200-run81-pages-" + f) for f in
           ("shuffled-sglang-v4-fp8.json", "sequential-sglang-v4-fp8.json")]
    rows = table_rows(run(["--key-store"] + r81).stdout)
    assert {key[1] for key in rows} == {"sglang-v4-fp8, 132 B/token", "sglang-v4-fp8, 132 B/token, sequential pages"}


def test_missing_input_is_a_usage_error():
    r = run(["--topk", os.path.join(RESULTS, "no-such-file.json")])
    assert r.returncode == 2 and "no-such-file.json" in r.stderr, (r.returncode, r.stderr)


if __name__ == "__main__":
    tests = [f for name, f in sorted(globals().items()) if name.startswith("test_") and callable(f)]
    for test in tests:
        test()
    print(f"{len(tests)} passed, 0 failed")
