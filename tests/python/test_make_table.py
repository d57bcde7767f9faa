#!/usr/bin/env python3
"""bench/make_table.py on benchmark files this test writes itself, in the formats of
bench/key_store_bench.cu, bench/paged_logits_bench.cu, bench/topk_bench.cu and
bench/torch_*.py (older key-store files too: without the batch shape, the page order, the
tile order, the hand-out or its tiles a warp): the table has one row for every kernel case of
every input file (a later file's rerun of a case replaces the earlier one, in the earlier
one's place), its numbers are the files' numbers (the fraction of copy with each file's own
copy bandwidth, the eager time of the same operation where there is one), another batch shape
or page order is another case, and a missing or malformed input is a usage error (exit 2).
Also: every table committed under bench/results/ is what make_table.py makes of the files its
"From:" line names, and those files are there. Standard library only; runs under pytest or
alone."""

import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
SCRIPT = os.path.join(ROOT, "bench", "make_table.py")
RESULTS = os.path.join(ROOT, "bench", "results")

GPU = "NVIDIA H200"
TOKENS = 1048576  # the key-store benchmark's batch: 16 x 64K positions by default
# Cache bytes a token and bytes counted for the whole batch, by recipe (key_store_bench.cu).
KEY_STORE = {"sglang-v4-fp8": (132, 406913024), "sglang-v4-bf16": (256, 536936448),
             "sglang-v4-fp4": (68, 339804160), "dsv32-ref": (132, 406913024), "dsv32-bf16": (256, 536936448)}
LOGITS_BYTES = {"fp8": 570957824, "bf16": 1091051520}
TOPK_BYTES = 16777216
FUSED = "fused key path (key_store.cu)"
TILE_ORDER = "fused key path, tile order (key_store.cu)"
HAND_OUT = "fused key path, tile order + hand-out (key_store.cu)"
TWIN = "traffic twin: these bytes, no arithmetic (key_store_bench.cu)"


# --- the benchmarks' files ------------------------------------------------------------------

def write(folder, name, doc):
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    return path


def by_width(ms):
    return {"1": ms, "2": ms * 1.1, "4": ms * 1.5, "8": ms * 1.8}


def key_case(recipe, fused_ms, copy_gbps, unfused_ms=1.15, twin_ms=None, tile_order_ms=None, build_ms=0.045,
             hand_out_ms=None, per_warp=None):
    """One case as key_store_bench.cu writes it. A field left None is one an older benchmark
    did not write; a twin time of 0 is what it writes where the twin is not measured (fp4)."""
    store, nbytes = KEY_STORE[recipe]
    fraction = lambda ms: nbytes / (ms * 1e-3) / 1e9 / copy_gbps if ms > 0 else 0.0  # noqa: E731
    c = {"recipe": recipe, "store_bytes_per_token": store, "fused_ms": fused_ms, "unfused_ms": unfused_ms,
         "bytes": nbytes, "fused_gbps": round(nbytes / (fused_ms * 1e-3) / 1e9, 1),
         "fraction_of_copy": round(fraction(fused_ms), 3), "speedup_vs_unfused": round(unfused_ms / fused_ms, 2),
         "lanes_per_head": 1, "fused_ms_by_lanes_per_head": by_width(fused_ms)}
    if twin_ms is not None:
        c.update({"kernel_path": recipe, "traffic_twin_ms": twin_ms * 1.1,
                  "traffic_twin_fraction_of_copy": round(fraction(twin_ms * 1.1), 3),
                  "traffic_twin_no_rope_ms": twin_ms,
                  "traffic_twin_no_rope_fraction_of_copy": round(fraction(twin_ms), 3)})
    if tile_order_ms is not None:
        c.update({"tile_order_ms": tile_order_ms, "tile_order_fraction_of_copy": round(fraction(tile_order_ms), 3),
                  "tile_order_build_ms": build_ms, "tile_order_ms_by_lanes_per_head": by_width(tile_order_ms)})
    if hand_out_ms is not None:
        c.update({"tile_order_hand_out_ms": hand_out_ms,
                  "tile_order_hand_out_fraction_of_copy": round(fraction(hand_out_ms), 3),
                  "tile_order_hand_out_ms_by_lanes_per_head": by_width(hand_out_ms)})
    if per_warp is not None:
        c["hand_out_tiles_per_warp"] = per_warp
    return c


def key_store_file(folder, name, copy_gbps, cases, sequence_length=None, pages=None):
    """key_store_bench.cu's file; sequence_length / pages None: an older benchmark's, which
    did not write them (the default batch, shuffled pages)."""
    doc = {"gpu": GPU, "tokens": TOKENS}
    if sequence_length is not None:
        doc["sequence_length"] = sequence_length
    if pages is not None:
        doc["pages"] = pages
    doc.update({"copy_bandwidth_gbps": copy_gbps, "persisting_l2_bytes": 0,
                "bytes_counted": "bf16 input read + cache bytes written + page table read", "cases": cases})
    return write(folder, name, doc)


def paged_logits_file(folder, name, copy_gbps, times):
    """paged_logits_bench.cu's file; times: [(cache, kernel, ms)]."""
    cases = [{"cache": cache, "kernel": kernel, "ms": ms, "bytes": LOGITS_BYTES[cache],
              "gbps": round(LOGITS_BYTES[cache] / (ms * 1e-3) / 1e9, 1),
              "fraction_of_copy": round(LOGITS_BYTES[cache] / (ms * 1e-3) / 1e9 / copy_gbps, 3)}
             for cache, kernel, ms in times]
    return write(folder, name, {"gpu": GPU, "shape": "batch 32, next_n 1, 64 heads, context 131072, page 64",
                                "copy_bandwidth_gbps": copy_gbps,
                                "bytes_counted": "cache read + q + weights + page tables + fp32 logits written",
                                "cases": cases})


def topk_file(folder, name, copy_gbps, times):
    """topk_bench.cu's file; times: [(input, topk_ms, topk_checked_ms, cub_full_sort_ms)]."""
    cases = [{"input": name_, "topk_ms": ms, "topk_checked_ms": checked, "cub_full_sort_ms": sort, "bytes": TOPK_BYTES,
              "topk_gbps": round(TOPK_BYTES / (ms * 1e-3) / 1e9, 1),
              "fraction_of_copy": round(TOPK_BYTES / (ms * 1e-3) / 1e9 / copy_gbps, 3),
              "speedup_vs_cub_sort": round(sort / ms, 2), "matches_stable_sort_prefix": True,
              "same_bits_for_every_blocks_per_row": True, "topk_ms_by_blocks_per_row": {"auto": ms, "1": ms * 1.2}}
             for name_, ms, checked, sort in times]
    return write(folder, name, {"gpu": GPU, "rows": 32, "row_length": 131072, "k": 2048,
                                "copy_bandwidth_gbps": copy_gbps, "bytes_counted": "fp32 scores read once",
                                "cases": cases})


def torch_key_path_file(folder, fp8_ms, bf16_ms):
    return write(folder, "torch_key_path.json", {"tokens": TOKENS, "torch": "2.11.0+cu130", "gpu": GPU,
                                                 "fp8_ms": fp8_ms, "bf16_ms": bf16_ms})


def torch_paged_logits_file(folder, fp8_ms, bf16_ms):
    return write(folder, "torch_paged_logits.json",
                 {"shape": "batch 32, next_n 1, 64 heads, context 131072, page 64", "torch": "2.11.0+cu130",
                  "gpu": GPU, "fp8_ms": fp8_ms, "bf16_ms": bf16_ms})


def torch_topk_file(folder, times):
    doc = {"rows": 32, "row_length": 131072, "k": 2048, "torch": "2.11.0+cu130", "gpu": GPU}
    for name, ms in times.items():
        doc.update({f"{name}_topk_ms": ms, f"{name}_sort_ms": 2.5 * ms})
    return write(folder, "torch_topk.json", doc)


# --- make_table.py and its table ------------------------------------------------------------

def run(args):
    return subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True)


def table_rows(markdown):
    """{(operation, case, kernel): cells} of the table's body rows, in the table's order."""
    rows = {}
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 9 or cells[0] in ("Operation",) or set(cells[0]) <= set("-:"):
            continue
        key = tuple(cells[:3])
        assert key not in rows, f"row {key} appears twice"
        rows[key] = cells
    return rows


def cases_of(paths):
    """The cases of some input files, later files last."""
    out = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            out += json.load(f)["cases"]
    return out


def fraction(nbytes, ms, copy_gbps):
    return f"{100 * nbytes / (ms * 1e-3) / 1e9 / copy_gbps:.1f}%"


def test_every_kernel_case_has_one_row():
    # Three key-store files (all five recipes, then reruns of sglang-v4-fp8 and of
    # sglang-v4-bf16), two of paged logits and of top-K (the second a rerun of every case),
    # and the three eager baselines. The key-store files are of the oldest format: the fused
    # kernel only, no batch shape.
    with tempfile.TemporaryDirectory() as d:
        first = [key_case(r, ms, 4255.881270, unfused_ms=1.2) for r, ms in
                 (("sglang-v4-fp8", 0.3090), ("sglang-v4-bf16", 0.2823), ("sglang-v4-fp4", 0.4730),
                  ("dsv32-ref", 0.5888), ("dsv32-bf16", 0.5296))]
        inputs = {
            "--key-store": [key_store_file(d, "key-store-1.json", 4255.881270, first),
                            key_store_file(d, "key-store-2.json", 4221.877935,
                                           [key_case("sglang-v4-fp8", 0.3097, 4221.877935, unfused_ms=1.1657)]),
                            key_store_file(d, "key-store-3.json", 4229.994589,
                                           [key_case("sglang-v4-bf16", 0.2840, 4229.994589, unfused_ms=1.2152)])],
            "--paged-logits": [paged_logits_file(d, "paged-logits-1.json", 4252.106151,
                                                 [("fp8", "exact-order", 5.5279), ("fp8", "fp8-mma", 0.3643),
                                                  ("bf16", "exact-order", 5.4338)]),
                               paged_logits_file(d, "paged-logits-2.json", 4229.328221,
                                                 [("fp8", "exact-order", 5.5275), ("fp8", "fp8-mma", 0.3262),
                                                  ("bf16", "exact-order", 5.4773)])],
            "--topk": [topk_file(d, "topk-1.json", 4253.857765, [("gaussian-fp32", 0.0713, 0.1261, 0.8651),
                                                                 ("gaussian-bf16-values", 0.0868, 0.1413, 0.8323)]),
                       topk_file(d, "topk-2.json", 4225.333924, [("gaussian-fp32", 0.0620, 0.1379, 0.8757),
                                                                 ("gaussian-bf16-values", 0.0661, 0.1364, 0.8432)])],
            "--torch-key-path": [torch_key_path_file(d, 7.436927795410156, 6.506015777587891)],
            "--torch-paged-logits": [torch_paged_logits_file(d, 5.1847357749938965, 5.33622407913208)],
            "--torch-topk": [torch_topk_file(d, {"gaussian-fp32": 0.15993599593639374,
                                                 "gaussian-bf16-values": 0.15936000645160675})],
        }
        out_path = os.path.join(d, "table.md")
        r = run([a for option, files in inputs.items() for a in [option] + files] + ["-o", out_path])
        assert r.returncode == 0 and r.stdout == "", (r.returncode, r.stderr, r.stdout)
        with open(out_path, encoding="utf-8") as f:
            table = f.read()
        rows = table_rows(table)

        expected = []  # in the order of first appearance
        for c in cases_of(inputs["--key-store"]):
            expected.append(("key store", f"{c['recipe']}, {c['store_bytes_per_token']} B/token", FUSED))
        for c in cases_of(inputs["--paged-logits"]):
            source = "paged_logits.cu" if c["kernel"] == "exact-order" else "paged_logits_mma.cu"
            expected.append(("paged logits", f"{c['cache']} cache", f"{c['kernel']} ({source})"))
        for c in cases_of(inputs["--topk"]):
            expected.append(("top-K", c["input"], "exact top-K (topk.cu)"))
        expected = list(dict.fromkeys(expected))
        assert list(rows) == expected, f"rows {list(rows)}, expected {expected}"
        assert len(rows) == 5 + 3 + 2
        # The table names its inputs, in the order of the options.
        names = [os.path.basename(p) for files in inputs.values() for p in files]
        assert table.rstrip("\n").splitlines()[-1] == "From: " + ", ".join(names), table.splitlines()[-1]

    # Reruns replace: the second file's sglang-v4-fp8 key store and fp8-mma logits, not the
    # first's, with the second file's copy bandwidth (the first's would make 30.9% and 41.2%).
    fp8_store = rows[("key store", "sglang-v4-fp8, 132 B/token", FUSED)]
    assert fp8_store[3] == "0.3097" and fp8_store[4] == "406.9 MB", fp8_store
    assert fp8_store[5] == fraction(406913024, 0.3097, 4221.877935) == "31.1%", fp8_store
    assert fp8_store[8] == "unfused pipeline, a kernel per stage, 1.166 ms", fp8_store
    mma = rows[("paged logits", "fp8 cache", "fp8-mma (paged_logits_mma.cu)")]
    assert mma[3] == "0.3262" and mma[4] == "571.0 MB" and mma[5] == "41.4%", mma
    # The eager time of the same operation and the speed-up over it: 5.18474 / 0.3262.
    assert mma[6] == "5.185" and mma[7] == "15.9x", mma
    exact = rows[("paged logits", "bf16 cache", "exact-order (paged_logits.cu)")]
    assert exact[3] == "5.4773" and exact[4] == "1,091.1 MB" and exact[6] == "5.336" and exact[7] == "0.97x", exact
    # The eager key path is the sglang-v4 pipeline: fp8 store for sglang-v4-fp8, bf16 for
    # sglang-v4-bf16 (7.43693 / 0.3097, 6.50602 / 0.2840); other recipes have no eager twin.
    assert fp8_store[6] == "7.437" and fp8_store[7] == "24.0x", fp8_store
    bf16_store = rows[("key store", "sglang-v4-bf16, 256 B/token", FUSED)]
    assert bf16_store[3] == "0.2840" and bf16_store[6] == "6.506" and bf16_store[7] == "22.9x", bf16_store
    for recipe in ("sglang-v4-fp4, 68 B/token", "dsv32-ref, 132 B/token", "dsv32-bf16, 256 B/token"):
        row = rows[("key store", recipe, FUSED)]
        assert row[6] == "-" and row[7] == "-", row
    topk = rows[("top-K", "gaussian-fp32", "exact top-K (topk.cu)")]
    assert topk[3] == "0.0620" and topk[4] == "16.8 MB" and topk[6] == "0.160" and topk[7] == "2.58x", topk
    assert topk[8] == "with host status check 0.138 ms; CUB full sort 0.876 ms", topk


def check_rows_of(path, kernel, ms_field, rows_per_case):
    # Every case of a key-store file has a row for `kernel` with the time in `ms_field`
    # (none where the file has 0 there: not measured), the same bytes, the fraction of copy
    # they make, and no eager twin; each case has `rows_per_case` rows of the fused kernel.
    r = run(["--key-store", path])
    assert r.returncode == 0, r.stderr
    rows = table_rows(r.stdout)
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    for c in doc["cases"]:
        key = ("key store", f"{c['recipe']}, {c['store_bytes_per_token']} B/token", kernel)
        if c.get(ms_field, 0) == 0:  # not measured for this case: no row
            assert key not in rows, key
            continue
        row = rows[key]
        assert float(row[3]) == round(c[ms_field], 4), (row, c[ms_field])
        assert row[4] == f"{c['bytes'] / 1e6:,.1f} MB", row
        assert row[5] == fraction(c["bytes"], c[ms_field], doc["copy_bandwidth_gbps"]), row
        assert row[6] == "-" and row[7] == "-", row
    fused = [key for key in rows if key[2].startswith("fused")]
    assert len(fused) == rows_per_case * len(doc["cases"]), fused
    return rows


def test_tile_order_cases_get_their_own_row():
    # A key-store file with the tile order (api.h KeyStoreArgs::tile_order) and no hand-out:
    # two rows of the fused kernel per case; the tile order's row notes its build time.
    copy = 4202.314677
    with tempfile.TemporaryDirectory() as d:
        path = key_store_file(d, "key-store.json", copy, [
            key_case("sglang-v4-fp8", 0.1384, copy, twin_ms=0.1188, tile_order_ms=0.1387, build_ms=0.0415),
            key_case("sglang-v4-bf16", 0.1717, copy, twin_ms=0.1560, tile_order_ms=0.1630, build_ms=0.0433),
            key_case("sglang-v4-fp4", 0.2130, copy, twin_ms=0.0, tile_order_ms=0.2051, build_ms=0.0418)])
        rows = check_rows_of(path, TILE_ORDER, "tile_order_ms", 2)
    assert rows[("key store", "sglang-v4-fp8, 132 B/token", TILE_ORDER)][8] == "order built once per batch in 0.042 ms"
    assert not any(key[2] == HAND_OUT for key in rows)


def test_hand_out_cases_get_a_third_row():
    # With the tile order's last tiles also handed out by counters (api.h
    # KeyStoreArgs::tile_counters): three rows of the fused kernel per case. The note names
    # the tiles a warp takes where the file records them (newer benchmarks), else not.
    copy = 4248.875304
    with tempfile.TemporaryDirectory() as d:
        older = key_store_file(d, "older.json", copy, [
            key_case(r, ms, copy, twin_ms=twin, tile_order_ms=0.99 * ms, hand_out_ms=0.95 * ms)
            for r, ms, twin in (("sglang-v4-fp8", 0.1394, 0.1182), ("sglang-v4-bf16", 0.1702, 0.1538),
                                ("sglang-v4-fp4", 0.2149, 0.0), ("dsv32-ref", 0.6242, 0.1184),
                                ("dsv32-bf16", 0.3946, 0.1542))])
        rows = check_rows_of(older, HAND_OUT, "tile_order_hand_out_ms", 3)
        note = rows[("key store", "dsv32-ref, 132 B/token", HAND_OUT)][8]
        assert note == "last tiles of the order handed out by counters", note
        newer = key_store_file(d, "newer.json", copy, [
            key_case("sglang-v4-fp8", 0.1388, copy, twin_ms=0.1192, tile_order_ms=0.1384, hand_out_ms=0.1308,
                     per_warp=4)],
            sequence_length=65536, pages="shuffled")
        rows = check_rows_of(newer, HAND_OUT, "tile_order_hand_out_ms", 3)
        assert rows[("key store", "sglang-v4-fp8, 132 B/token", HAND_OUT)][8] == \
            "last tiles of the order handed out by counters, 4 per warp"


def test_traffic_twins_get_a_row_where_measured():
    # The bytes-only twin is measured for the fp8 and bf16 stores; the benchmark writes 0 for
    # fp4 (and for a recipe without a twin), which gets no row.
    copy = 4234.532161
    with tempfile.TemporaryDirectory() as d:
        path = key_store_file(d, "key-store.json", copy, [
            key_case(r, ms, copy, twin_ms=twin, tile_order_ms=0.99 * ms, hand_out_ms=0.95 * ms, per_warp=4)
            for r, ms, twin in (("sglang-v4-fp8", 0.1388, 0.1192), ("sglang-v4-bf16", 0.1709, 0.1564),
                                ("sglang-v4-fp4", 0.2136, 0.0), ("dsv32-ref", 0.2464, 0.1189),
                                ("dsv32-bf16", 0.2371, 0.1561))], sequence_length=65536, pages="shuffled")
        rows = check_rows_of(path, TWIN, "traffic_twin_no_rope_ms", 3)
    assert len([key for key in rows if key[2] == TWIN]) == 4
    twin = rows[("key store", "sglang-v4-bf16, 256 B/token", TWIN)]
    assert twin[3] == "0.1564" and twin[5] == fraction(536936448, 0.1564, copy) == "81.1%", twin
    assert twin[8].startswith("reads the rows and page entries and writes the cache rows, computes nothing"), twin


def test_another_batch_shape_is_another_case():
    # 16 x 64K positions (the default: plain labels, whether the file records its shape or
    # not) and 256 x 4K: the same recipe gets one row per shape, and only the default shape
    # carries the eager time (measured there).
    copy = 4231.728525
    with tempfile.TemporaryDirectory() as d:
        case = lambda ms: key_case("sglang-v4-fp8", ms, copy, twin_ms=0.118, tile_order_ms=ms - 0.002,  # noqa: E731
                                   hand_out_ms=ms - 0.008, per_warp=4)
        shapes = [key_store_file(d, "seq65536.json", copy, [case(0.1387)], sequence_length=65536),
                  key_store_file(d, "seq4096.json", copy, [case(0.1381)], sequence_length=4096)]
        eager = torch_key_path_file(d, 7.503007888793945, 6.599423885345459)
        r = run(["--key-store"] + shapes + ["--torch-key-path", eager])
        assert r.returncode == 0, r.stderr
        rows = table_rows(r.stdout)
        for path, shape in zip(shapes, ("", ", 256 x 4K positions")):
            (c,) = cases_of([path])
            row = rows[("key store", "sglang-v4-fp8, 132 B/token" + shape, HAND_OUT)]
            assert float(row[3]) == round(c["tile_order_hand_out_ms"], 4), (row, c)
            fused = rows[("key store", "sglang-v4-fp8, 132 B/token" + shape, FUSED)]
            assert float(fused[3]) == round(c["fused_ms"], 4), (fused, c)
            assert (fused[6] == "-") == bool(shape), fused
        assert rows[("key store", "sglang-v4-fp8, 132 B/token", FUSED)][6] == "7.503"
        assert len(rows) == 2 * 4

        # An older file without the shape is the default batch, the same case as a file that
        # records it: the later file replaces it.
        older = key_store_file(d, "older.json", copy, [key_case("sglang-v4-fp8", 0.1400, copy)])
        rows = table_rows(run(["--key-store", older, shapes[0]]).stdout)
        assert rows[("key store", "sglang-v4-fp8, 132 B/token", FUSED)][3] == "0.1387"
        assert {key[1] for key in rows} == {"sglang-v4-fp8, 132 B/token"}

        # Sequential cache pages (DSAF_BENCH_PAGES) are named too; shuffled is the default.
        pages = [key_store_file(d, f"pages-{p}.json", copy, [case(0.1404)], sequence_length=65536, pages=p)
                 for p in ("shuffled", "sequential")]
        pages.append(key_store_file(d, "seq4096-sequential.json", copy, [case(0.1380)], sequence_length=4096,
                                    pages="sequential"))
        rows = table_rows(run(["--key-store"] + pages).stdout)
        assert {key[1] for key in rows} == {"sglang-v4-fp8, 132 B/token",
                                            "sglang-v4-fp8, 132 B/token, sequential pages",
                                            "sglang-v4-fp8, 132 B/token, 256 x 4K positions, sequential pages"}


def test_missing_or_malformed_input_is_a_usage_error():
    with tempfile.TemporaryDirectory() as d:
        missing = os.path.join(d, "no-such-file.json")
        r = run(["--topk", missing])
        assert r.returncode == 2 and "no-such-file.json" in r.stderr and r.stdout == "", (r.returncode, r.stderr)
        not_json = os.path.join(d, "not-json.json")
        with open(not_json, "w", encoding="utf-8") as f:
            f.write("{\"cases\": [")
        no_cases = write(d, "no-cases.json", {"gpu": GPU, "copy_bandwidth_gbps": 4200.0})
        no_time = write(d, "no-time.json", {"gpu": GPU, "copy_bandwidth_gbps": 4200.0,
                                            "cases": [{"input": "gaussian-fp32", "bytes": TOPK_BYTES}]})
        bad_shape = key_store_file(d, "bad-shape.json", 4200.0, [key_case("sglang-v4-fp8", 0.14, 4200.0)],
                                   sequence_length=0)
        for option, path in (("--paged-logits", not_json), ("--topk", no_cases), ("--topk", no_time),
                             ("--key-store", bad_shape)):
            r = run([option, path])
            assert r.returncode == 2 and os.path.basename(path) in r.stderr, (path, r.returncode, r.stderr)
            assert len(r.stderr.splitlines()) == 1 and r.stdout == "", (path, r.stderr, r.stdout)
    r = run([])  # no benchmark results at all
    assert r.returncode == 2, (r.returncode, r.stderr)


def test_a_bundle_makes_the_table_its_files_make_and_a_bad_one_is_refused():
    with tempfile.TemporaryDirectory() as d:
        key = key_store_file(d, "key.json", 4260.0, [key_case("sglang-v4-fp8", 0.13, 4260.0)])
        topk = topk_file(d, "topk.json", 4260.0, [("gaussian-fp32", 0.061, 0.136, 0.87)])
        docs = {}
        for path in (key, topk):
            with open(path, encoding="utf-8") as f:
                docs[os.path.basename(path)] = json.load(f)
        bundle = write(d, "inputs.json", {"make_table_inputs": {"--key-store": {"key.json": docs["key.json"]},
                                                                "--topk": {"topk.json": docs["topk.json"]}}})
        from_files = run(["--key-store", key, "--topk", topk])
        from_bundle = run(["--inputs", bundle])
        assert from_files.returncode == 0 and from_bundle.returncode == 0, (from_files.stderr, from_bundle.stderr)
        assert from_bundle.stdout.splitlines()[:-1] == from_files.stdout.splitlines()[:-1]
        assert from_bundle.stdout.splitlines()[-1] == "From: inputs.json"
        write(d, "inputs.json", {"make_table_inputs": {"--tables": {}}})
        r = run(["--inputs", bundle])
        assert r.returncode == 2 and "inputs.json" in r.stderr, (r.returncode, r.stderr)


# --- the committed tables -------------------------------------------------------------------

def option_of(doc):
    """Which make_table.py option a benchmark file is for, from what it holds."""
    if "make_table_inputs" in doc:
        return "--inputs"
    if "cases" in doc:
        first = doc["cases"][0]
        return "--key-store" if "recipe" in first else "--paged-logits" if "cache" in first else "--topk"
    if any(k.endswith("_topk_ms") for k in doc):
        return "--torch-topk"
    return "--torch-paged-logits" if "shape" in doc else "--torch-key-path"


def test_committed_tables_are_made_from_committed_files():
    # Each *-table.md under bench/results/ names its inputs on its "From:" line (in the order
    # of make_table.py's options); they are committed beside it, and make the same table.
    for table in sorted(glob.glob(os.path.join(RESULTS, "*-table.md"))):
        with open(table, encoding="utf-8") as f:
            text = f.read()
        last = text.rstrip("\n").splitlines()[-1]
        assert last.startswith("From: "), (table, last)
        args = {}
        for name in last[len("From: "):].split(", "):
            path = os.path.join(RESULTS, name)
            assert os.path.isfile(path), f"{os.path.basename(table)} is made from {name}, which is not in bench/results"
            with open(path, encoding="utf-8") as f:
                args.setdefault(option_of(json.load(f)), []).append(path)
        assert len(args.get("--inputs", [])) <= 1, (table, "one bundle at most")
        r = run([a for option, files in args.items() for a in [option] + files])
        assert r.returncode == 0, (table, r.stderr)
        assert r.stdout == text, f"{os.path.basename(table)} is not what bench/make_table.py makes of its inputs"


if __name__ == "__main__":
    tests = [f for name, f in sorted(globals().items()) if name.startswith("test_") and callable(f)]
    for test in tests:
        test()
    print(f"{len(tests)} passed, 0 failed")
