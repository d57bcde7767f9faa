#!/usr/bin/env python3
"""bench/make_table.py on benchmark files this test writes itself, in the formats of
bench/key_store_bench.cu, bench/paged_logits_bench.cu, bench/topk_bench.cu and
bench/torch_*.py (older key-store files too: without the batch shape, the page order, the
tile order, the hand-out or its tiles a warp): the table has one row for every kernel case of
every input file (a later file's rerun of a case replaces the earlier one, in the earlier
one's place), its numbers are the files' numbers (the fraction of copy with each file's own
copy bandwidth, the eager time of the same operation where there is one), another batch shape
or page order is another case, and a missing or malformed input is a usage error (exit 2).
Beside each row, from bench/peer_bench.cu's JSON and Nsight Compute profiles (files, or members
of a bundle): the fastest upstream kernel of the same operation that returned our result, its
time, ours in the same measurement and the speed-up, on the row of the schedule peer_bench
times, kernels alone preferred to ABI calls; elsewhere "-" and a note saying why. Also a run's
key-store summary and the CPU reference row (the run bundles' summary formats, read as FILE#member), the
bytes-only twin over each row's time, and eager times of the same top-K shape only.
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
TOPK = "exact top-K (topk.cu)"
# The table's columns: 0-2 operation, case, kernel; 3 time; 4 bytes; 5 fraction of copy; 6-7
# eager time and speed-up; 8 the bytes-only twin over the time; 9-12 the fastest upstream
# kernel, its time, ours beside it, the speed-up over it; 13 notes.
TWIN_RATIO, UPSTREAM, UPSTREAM_MS, OURS_MS, VS_UPSTREAM, NOTES = 8, 9, 10, 11, 12, 13


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


def torch_topk_file(folder, times, k=2048, name="torch_topk.json"):
    doc = {"rows": 32, "row_length": 131072, "k": k, "torch": "2.11.0+cu130", "gpu": GPU}
    for input_name, ms in times.items():
        doc.update({f"{input_name}_topk_ms": ms, f"{input_name}_sort_ms": 2.5 * ms})
    return write(folder, name, doc)


# --- bench/peer_bench.cu's files: its JSON, and its run under Nsight Compute -----------------

def peer_key_json(recipe, cases, sequence_length=65536):
    """peer_bench's JSON of a key store; cases: [(kernel, name, ms, same_as_first)]."""
    return {"gpu": GPU, "copy_bandwidth_gbps": 4240.0, "stage": "key_store", "recipe": recipe, "tokens": TOKENS,
            "sequence_length": sequence_length, "page_size": 64, "bytes": 406847488.0,
            "cases": [{"kernel": kernel, "name": name, "ms": ms, "gbps": 1000.0, "fraction_of_copy": 0.25,
                       "same_as_first": same} for kernel, name, ms, same in cases]}


def peer_topk_json(k, cases):
    """peer_bench's JSON of a top-K over [32 x 131072]; cases: [(kernel, name, ms, same, rows wrong)]."""
    return {"gpu": GPU, "copy_bandwidth_gbps": 4240.0, "stage": "topk", "rows": 32, "length": 131072, "k": k,
            "bytes": 16842752.0,
            "cases": [{"kernel": kernel, "name": name, "ms": ms, "gbps": 100.0, "fraction_of_copy": 0.03,
                       "same_as_first": same, "exact_rows_wrong": wrong, "exact_keys_missing": 7 * wrong}
                      for kernel, name, ms, same, wrong in cases]}


def ncu_profile(lines, launches):
    """peer_bench under `ncu --csv --metrics gpu__time_duration.sum`: its lines (as it prints
    them: a skipped kernel's line has no time), then one CSV row per launch, in launch order;
    launches: [(demangled kernel name, ns)]."""
    head = ["==PROF== Connected to process 7 (/tmp/build-gpu/bench/peer_bench)"] + lines + \
           ["==PROF== Disconnected from process 7",
            '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
            '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"']
    rows = [f'"{i}","7","peer_bench","127.0.0.1","{name}","1","7","(128, 1, 1)","(264, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","gpu__time_duration.sum","ns","{ns:,}"' for i, (name, ns) in
            enumerate(launches)]
    return "\n".join(head + rows) + "\n"


def key_line(recipe, name, ms, same):
    return f"key {recipe:<14} {name:<60} {ms:.4f} ms  3% of copy  same bytes as first: {same}"


def topk_line(k, name, ms, same, wrong):
    return (f"topk [32 x 131072] K={k:<5} {name:<52} {ms:.4f} ms  0% of copy  same set as first: {same}; "
            f"against the exact sets: {wrong} rows wrong, {7 * wrong} keys missing")


OUR_KEY_KERNEL = "void key_kernel::key_store_kernel<3, 1, 0>(dev::KeyStoreArgs, dev::KeyStoreSchedule)"
# What our ABI call launches before the kernel (its tile order) and an adapter before upstream's.
OUR_SETUP = ["dev::<unnamed>::tile_keys_kernel(const int *, int, int, int *, int *)",
             "void cub::DeviceRadixSortOnesweepKernel<cub::policy_hub<int, int, unsigned int>::Policy1000, 0, int, "
             "int, unsigned int, int, int, cub::identity_decomposer_t>(T7 *, T7 *, T5 *, const T5 *, T3 *, const T3 *, "
             "T4 *, const T4 *, T6, int, int, T8)",
             "dev::<unnamed>::tile_order_kernel(dev::KeyStoreArgs, dev::KeyTileOrder)"]  # since the order cache
GLUE = "conformance::token_slots_kernel(const int *, const int *, const int *, long, int, long *)"
GLUE_UNNAMED = "<unnamed>::widen_positions_kernel(const int *, long, long *)"  # vllm_v32_indexer_key.cu


# --- make_table.py and its table ------------------------------------------------------------

def run(args):
    return subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True)


def table_rows(markdown):
    """{(operation, case, kernel): cells} of the table's body rows, in the table's order."""
    rows = {}
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 14 or cells[0] in ("Operation",) or set(cells[0]) <= set("-:"):
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
    assert fp8_store[NOTES] == "unfused pipeline, a kernel per stage, 1.166 ms", fp8_store
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
    assert topk[NOTES] == "with host status check 0.138 ms; CUB full sort 0.876 ms", topk


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
    assert rows[("key store", "sglang-v4-fp8, 132 B/token", TILE_ORDER)][NOTES] == \
        "order built once per batch in 0.042 ms"
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
        note = rows[("key store", "dsv32-ref, 132 B/token", HAND_OUT)][NOTES]
        assert note == "last tiles of the order handed out by counters", note
        newer = key_store_file(d, "newer.json", copy, [
            key_case("sglang-v4-fp8", 0.1388, copy, twin_ms=0.1192, tile_order_ms=0.1384, hand_out_ms=0.1308,
                     per_warp=4)],
            sequence_length=65536, pages="shuffled")
        rows = check_rows_of(newer, HAND_OUT, "tile_order_hand_out_ms", 3)
        assert rows[("key store", "sglang-v4-fp8, 132 B/token", HAND_OUT)][NOTES] == \
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
    assert twin[NOTES].startswith("reads the rows and page entries and writes the cache rows, computes nothing"), twin


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
        # peer_bench's files in a bundle: a profile finds the JSON of its run beside it there.
        lines = [key_line("sglang-v4-fp8", "builtin", 60.0, "null"), key_line("sglang-v4-fp8", "up", 40.0, "true")]
        peers = {"peer-key-sglang-v4-fp8.json": peer_key_json("sglang-v4-fp8", [("builtin", "builtin", 0.3, None),
                                                                                ("/u.so", "up", 0.34, True)]),
                 "ncu-key-sglang-v4-fp8.csv": ncu_profile(lines, [(OUR_KEY_KERNEL, 131000)] * 2 +
                                                          [("void up::k(up::P)", 262000)] * 2)}
        hand_out = key_store_file(d, "hand-out.json", 4260.0, [key_case("sglang-v4-fp8", 0.14, 4260.0,
                                                                        tile_order_ms=0.135, hand_out_ms=0.13)])
        with open(hand_out, encoding="utf-8") as f:
            keys = {"hand-out.json": json.load(f)}
        write(d, "inputs.json", {"make_table_inputs": {"--key-store": keys, "--peers": peers}})
        r = run(["--inputs", bundle])
        assert r.returncode == 0 and r.stdout.splitlines()[-1] == "From: inputs.json", (r.stderr, r.stdout)
        hand_out = table_rows(r.stdout)[("key store", "sglang-v4-fp8, 132 B/token", HAND_OUT)]
        assert hand_out[UPSTREAM_MS:VS_UPSTREAM + 1] == ["0.2620", "0.1310", "2.00x"], hand_out
        write(d, "inputs.json", {"make_table_inputs": {"--tables": {}}})
        r = run(["--inputs", bundle])
        assert r.returncode == 2 and "inputs.json" in r.stderr, (r.returncode, r.stderr)


def test_upstream_kernels_stand_beside_the_schedule_peer_bench_times():
    # sglang-v4-fp8 in key_store_bench's file, and peer_bench's JSON (ABI calls) and profile
    # (kernels alone) of the same store at the same batch. The profile wins, given first or
    # last: the fastest upstream implementation that wrote our bytes, summed over its two
    # kernels per call, beside our kernel alone (neither the adapter's glue nor our tile
    # order's sort counted), on the hand-out row only (peer_bench's "builtin" schedule).
    copy = 4241.0
    with tempfile.TemporaryDirectory() as d:
        key = key_store_file(d, "key-store.json", copy, [key_case("sglang-v4-fp8", 0.1390, copy, twin_ms=0.1190,
                                                                  tile_order_ms=0.1385, hand_out_ms=0.1310,
                                                                  per_warp=4)])
        names = ("sglang 9.9 two kernels", "sglang 9.9 wrong bytes")
        abi = write(d, "peer-key-sglang-v4-fp8.json", peer_key_json(
            "sglang-v4-fp8", [("builtin", "builtin", 0.35, None), ("/a.so", names[0], 0.34, True),
                              ("/b.so", names[1], 0.10, False)]))
        ours = [133000, 132000, 132500]  # ns; median 0.1325 ms
        k1, k2, bad = [200000, 210000, 190000], [110000, 120000, 100000], [50000, 51000, 52000]
        launches = [x for ns in ours for x in [(OUR_SETUP[0], 3000), (OUR_SETUP[1], 11000), (OUR_SETUP[1], 10000),
                                               (OUR_SETUP[2], 6500), (OUR_KEY_KERNEL, ns)]]
        launches += [x for a, b in zip(k1, k2) for x in [(GLUE, 7000), (GLUE_UNNAMED, 6000),
                                                         ("void sglang::k1<1>(sglang::P)", a),
                                                         ("void sglang::k2<1>(sglang::P)", b)]]
        launches += [x for ns in bad for x in [(GLUE, 7000), ("void sglang::bad(sglang::P)", ns)]]
        lines = [key_line("sglang-v4-fp8", "builtin", 60.1, "null"), key_line("sglang-v4-fp8", names[0], 40.2, "true"),
                 key_line("sglang-v4-fp8", names[1], 30.3, "false")]
        profile = os.path.join(d, "ncu-key-sglang-v4-fp8.csv")
        with open(profile, "w", encoding="utf-8") as f:
            f.write(ncu_profile(lines, launches))
        for peers in ([profile, abi], [abi, profile]):
            r = run(["--key-store", key, "--peers"] + peers)
            assert r.returncode == 0, r.stderr
            rows = table_rows(r.stdout)
            hand_out = rows[("key store", "sglang-v4-fp8, 132 B/token", HAND_OUT)]
            assert hand_out[UPSTREAM].startswith(names[0] + " [") and hand_out[UPSTREAM_MS] == "0.3100", hand_out
            assert hand_out[OURS_MS] == "0.1325" and hand_out[VS_UPSTREAM] == "2.34x", hand_out  # 0.31 / 0.1325
            assert hand_out[TWIN_RATIO] == f"{0.1190 / 0.1310:.2f}" == "0.91", hand_out
            note = note_of(r.stdout, hand_out[UPSTREAM])
            assert "Kernels alone" in note and "ncu-key-sglang-v4-fp8.csv" in note and names[1] in note, note
            for kernel in (FUSED, TILE_ORDER):  # the same operation, another schedule: cited to the hand-out row
                row = rows[("key store", "sglang-v4-fp8, 132 B/token", kernel)]
                assert row[UPSTREAM].startswith("- [") and row[UPSTREAM_MS:VS_UPSTREAM + 1] == ["-"] * 3, row
                assert "default schedule" in note_of(r.stdout, row[UPSTREAM]), row
            twin = rows[("key store", "sglang-v4-fp8, 132 B/token", TWIN)]
            assert "yardstick" in note_of(r.stdout, twin[UPSTREAM]) and twin[TWIN_RATIO] == "-", twin
            assert from_line(r.stdout) == ["key-store.json"] + [os.path.basename(p) for p in peers]
        # The ABI calls alone: both sides through the same call, the adapter's set-up and our
        # tile order's included.
        hand_out = table_rows(run(["--key-store", key, "--peers", abi]).stdout)[
            ("key store", "sglang-v4-fp8, 132 B/token", HAND_OUT)]
        assert hand_out[UPSTREAM_MS:VS_UPSTREAM + 1] == ["0.3400", "0.3500", "0.97x"], hand_out
        # The profile names the recipe, not the batch: it takes that from peer_bench's JSON beside it.
        os.remove(abi)
        r = run(["--key-store", key, "--peers", profile])
        assert r.returncode == 2 and "ncu-key-sglang-v4-fp8.csv" in r.stderr and "peer-*.json" in r.stderr, r.stderr


def test_top_k_eager_and_upstream_of_the_same_shape():
    # The eager file of K = 2048 gives the row of K = 2048 its time, though one of K = 512 comes
    # later; an upstream timing of K = 512 only is of another shape; the K = 2048 one leaves out
    # the kernel that returned other sets, however fast.
    copy = 4245.0
    with tempfile.TemporaryDirectory() as d:
        topk = topk_file(d, "topk.json", copy, [("gaussian-fp32", 0.0533, 0.1236, 0.867)])
        eager = [torch_topk_file(d, {"gaussian-fp32": 0.1600}, 2048, "torch-2048.json"),
                 torch_topk_file(d, {"gaussian-fp32": 0.9000}, 512, "torch-512.json")]
        k512 = write(d, "peer-topk-512.json", peer_topk_json(512, [("builtin", "builtin", 0.11, None, 0),
                                                                   ("/r.so", "ragged", 0.029, True, 0)]))
        k2048 = write(d, "peer-topk-2048.json", peer_topk_json(2048, [
            ("builtin", "builtin", 0.1200, None, 0), ("/p.so", "paged", 0.0200, False, 32),
            ("/r.so", "ragged", 0.0300, True, 0), ("/s.so", "sampled", 0.0310, True, 0)]))
        r = run(["--topk", topk, "--torch-topk"] + eager + ["--peers", k512])
        assert r.returncode == 0, r.stderr
        row = table_rows(r.stdout)[("top-K", "gaussian-fp32", TOPK)]
        assert row[6] == "0.160" and row[7] == f"{0.16 / 0.0533:.2f}x" == "3.00x", row
        assert row[UPSTREAM].startswith("- [") and row[UPSTREAM_MS] == "-", row
        assert "another shape only ([32 x 131072] K=512)" in note_of(r.stdout, row[UPSTREAM]), r.stdout
        r = run(["--topk", topk, "--peers", k512, k2048])
        row = table_rows(r.stdout)[("top-K", "gaussian-fp32", TOPK)]
        assert row[UPSTREAM].startswith("ragged [") and \
            row[UPSTREAM_MS:VS_UPSTREAM + 1] == ["0.0300", "0.1200", "0.25x"], row
        assert "left out for a different result: paged" in note_of(r.stdout, row[UPSTREAM]), r.stdout
        assert row[6] == "-", row  # no eager file given


def test_ours_beside_the_upstream_top_k_is_the_call_that_does_what_theirs_do():
    # peer_bench times our top-K three ways; the upstream calls return unordered sets once
    # queued, so ours beside them is builtin:by-index:async in the ABI calls, and
    # builtin:by-index in a profile (kernels alone), not the default by-score call.
    copy = 4245.0
    with tempfile.TemporaryDirectory() as d:
        topk = topk_file(d, "topk.json", copy, [("gaussian-fp32", 0.0533, 0.1236, 0.867)])
        abi = write(d, "peer-topk-2048.json", peer_topk_json(2048, [
            ("builtin", "builtin", 0.0420, None, 0), ("builtin:by-index:async", "builtin", 0.0270, True, 0),
            ("/r.so", "ragged", 0.0330, True, 0), ("/s.so", "sampled", 0.0320, True, 0)]))
        r = run(["--topk", topk, "--peers", abi])
        assert r.returncode == 0, r.stderr
        row = table_rows(r.stdout)[("top-K", "gaussian-fp32", TOPK)]
        assert row[UPSTREAM].startswith("sampled [") and \
            row[UPSTREAM_MS:VS_UPSTREAM + 1] == ["0.0320", "0.0270", "1.19x"], row
        note = note_of(r.stdout, row[UPSTREAM])  # our other call is neither upstream nor left out
        assert "Ours and 2 upstream kernel(s)" in note and "left out" not in note, note
        # Without the async call, ours is by index, then the default.
        for kernels, ms in ((["builtin:by-index", "builtin"], "0.0290"), (["builtin"], "0.0420")):
            cases = [(k, "builtin", {"builtin": 0.0420, "builtin:by-index": 0.0290}[k], True, 0) for k in kernels]
            doc = write(d, "peer-topk-2048.json", peer_topk_json(2048, cases + [("/s.so", "sampled", 0.0320, True, 0)]))
            row = table_rows(run(["--topk", topk, "--peers", doc]).stdout)[("top-K", "gaussian-fp32", TOPK)]
            assert row[OURS_MS] == ms, (kernels, row)
        # A case whose kernel is not a string is a usage error, named.
        bad = peer_topk_json(2048, [("builtin", "builtin", 0.0420, None, 0)])
        bad["cases"][0]["kernel"] = None
        r = run(["--topk", topk, "--peers", write(d, "peer-bad.json", bad)])
        assert r.returncode == 2 and "peer-bad.json" in r.stderr and "'kernel'" in r.stderr, (r.returncode, r.stderr)
        ours = "void dsaf::dev::topk_select::topk_grid_kernel(dsaf::TopKArgs, int, dsaf::GridRowZeroed *, " \
               "dsaf::GridRow *, int *)"
        lines = [topk_line(2048, "builtin:by-index", 28.1, "null", 0), topk_line(2048, "ragged", 34.3, "true", 0)]
        launches = [(ours, ns) for ns in (28100, 28000, 28200)] + \
                   [("void sglang::topk_ragged_kernel<1>(sglang::TopKRaggedParams)", ns) for ns in (34300, 34000, 34500)]
        profile = os.path.join(d, "ncu-topk-2048.csv")
        with open(profile, "w", encoding="utf-8") as f:
            f.write(ncu_profile(lines, launches))
        r = run(["--topk", topk, "--peers", profile])
        assert r.returncode == 0, r.stderr
        row = table_rows(r.stdout)[("top-K", "gaussian-fp32", TOPK)]
        assert row[UPSTREAM_MS:VS_UPSTREAM + 1] == ["0.0343", "0.0281", "1.22x"], row


def test_a_top_k_time_by_index_goes_to_the_notes_where_measured():
    # topk_bench records the kernel by index (no final sort) since the order existed; an
    # older file has no such time and keeps its notes.
    with tempfile.TemporaryDirectory() as d:
        topk = topk_file(d, "topk.json", 4245.0, [("gaussian-fp32", 0.0460, 0.058, 0.866),
                                                  ("gaussian-bf16-values", 0.0505, 0.067, 0.832)])
        doc = json.load(open(topk))
        doc["cases"][0]["topk_by_index_ms"] = 0.0381
        doc["cases"][0]["by_index_matches"] = True
        json.dump(doc, open(topk, "w"))
        r = run(["--topk", topk])
        assert r.returncode == 0, r.stderr
        rows = table_rows(r.stdout)
        fp32 = rows[("top-K", "gaussian-fp32", TOPK)]
        assert fp32[3] == "0.0460", fp32
        assert fp32[NOTES] == "by index 0.0381 ms; with host status check 0.058 ms; CUB full sort 0.866 ms", fp32
        bf16 = rows[("top-K", "gaussian-bf16-values", TOPK)]
        assert bf16[NOTES] == "with host status check 0.067 ms; CUB full sort 0.832 ms", bf16


def test_the_notes_say_why_no_upstream_kernel_stands_beside_a_row():
    # A conformance bundle: peer_bench's JSON of sglang-v4-fp8, a passing verify of an upstream
    # key store of sglang-v4-bf16, a failing one of sglang-v4-fp4, a top-K verify of dsv32-ref,
    # a passing capture compare of dsv32-bf16, and a log. The rows of each recipe say which
    # applies; paged logits, which no peer timing covers, say so.
    copy = 4230.0
    with tempfile.TemporaryDirectory() as d:
        key = key_store_file(d, "key-store.json", copy, [key_case(r, 0.2, copy) for r in KEY_STORE])
        logits = paged_logits_file(d, "paged-logits.json", copy, [("fp8", "fp8-mma", 0.154)])

        def verify(recipe, kernel, passed, key_store=True):
            return {"recipe": recipe, "kernel": kernel, "pass": passed, "capabilities": {"key_store": key_store}}
        bundle = write(d, "conformance.json", {
            "peer-key-sglang-v4-fp8.json": peer_key_json("sglang-v4-fp8", [("builtin", "builtin", 0.3, None),
                                                                           ("/u.so", "up fp8", 0.4, True)]),
            "verify-up-sglang-v4-bf16.json": verify("sglang-v4-bf16", "up bf16 kernel", True),
            "verify-up-sglang-v4-fp4.json": verify("sglang-v4-fp4", "up fp4 kernel", False),
            "verify-topk-dsv32-ref.json": verify("dsv32-ref", "up top-K", True, key_store=False),
            "compare-capture-dsv32-bf16.json": {"recipe": "dsv32-bf16", "kernel": "kernels.py: _k", "pass": True,
                                                "capture": "/c.h5", "engine": "engine 1.0 (sdist), torch"},
            "run.log": "build 100 s\n"})
        r = run(["--key-store", key, "--paged-logits", logits, "--peers", bundle])
        assert r.returncode == 0, r.stderr
        rows = table_rows(r.stdout)

        def why(recipe):
            return note_of(r.stdout, rows[("key store", f"{recipe}, {KEY_STORE[recipe][0]} B/token", FUSED)][UPSTREAM])
        assert "default schedule" in why("sglang-v4-fp8"), why("sglang-v4-fp8")  # timed: on the hand-out row
        assert why("sglang-v4-bf16").startswith("An upstream kernel stores this recipe's keys byte-exact (up bf16 "
                                                "kernel: conformance.json)"), why("sglang-v4-bf16")
        assert "(engine 1.0: kernels.py: _k: conformance.json)" in why("dsv32-bf16"), why("dsv32-bf16")
        for recipe in ("sglang-v4-fp4", "dsv32-ref"):  # a failing verify and a top-K one implement no key store
            assert why(recipe).startswith("No upstream kernel implements the recipe"), why(recipe)
        logits_row = rows[("paged logits", "fp8 cache", "fp8-mma (paged_logits_mma.cu)")]
        assert note_of(r.stdout, logits_row[UPSTREAM]) == \
            "No upstream timing of this operation is in the inputs (they time: key store).", r.stdout
        assert from_line(r.stdout) == ["key-store.json", "paged-logits.json", "conformance.json"]
        # No peer timings at all: every row says so.
        r = run(["--key-store", key])
        assert {row[UPSTREAM] for row in table_rows(r.stdout).values()} == {"- [1]"}, r.stdout
        assert "[1] No upstream timings were given (--peers)." in r.stdout.splitlines(), r.stdout


def test_one_sequence_logits_cases_are_their_own_rows_against_their_roofline():
    # paged_logits_bench.cu's files since the one-sequence cases: a "shape" per case. Decode
    # cases keep their rows (and eager time); one-sequence cases get rows of their own, with
    # the fraction of the roofline that binds them and no eager or upstream time.
    copy = 4250.0
    with tempfile.TemporaryDirectory() as d:
        def case(shape, rows, cache, kernel, ms, nbytes, roofline, bound):
            return {"shape": shape, "rows": rows, "cache": cache, "kernel": kernel, "ms": ms, "bytes": nbytes,
                    "fraction_of_roofline": roofline, "bound": bound}
        logits = write(d, "paged-logits.json", {
            "gpu": GPU, "copy_bandwidth_gbps": copy, "cases": [
                case("decode", 32, "fp8", "fp8-mma", 0.155, LOGITS_BYTES["fp8"], 0.87, "memory"),
                case("one sequence", 64, "fp8", "fp8-mma", 0.239, 51.4e6, 0.27, "compute"),
                case("one sequence", 64, "fp8", "fp8-mma-4rows", 0.200, 51.4e6, 0.32, "compute")]})
        torch = torch_paged_logits_file(d, 5.18, 5.34)
        r = run(["--paged-logits", logits, "--torch-paged-logits", torch])
        assert r.returncode == 0, r.stderr
        rows = table_rows(r.stdout)
        decode = rows[("paged logits", "fp8 cache", "fp8-mma (paged_logits_mma.cu)")]
        assert decode[6] == "5.180", r.stdout  # column 6: eager
        four = rows[("paged logits", "fp8 cache, one sequence, 64 rows", "fp8-mma-4rows (paged_logits_mma.cu)")]
        assert four[6] == "-" and four[NOTES] == "32% of the compute roofline", r.stdout
        assert note_of(r.stdout, four[UPSTREAM]) == "No upstream kernel or eager time of this shape is recorded.", r.stdout
        assert ("paged logits", "fp8 cache, one sequence, 64 rows", "fp8-mma (paged_logits_mma.cu)") in rows


def test_a_run_summary_and_the_cpu_reference_from_members_of_a_bundle():
    # A run's bundle in the summary format: the key store summarised per recipe and sequence length (three
    # schedules and the bytes-only twin; the best schedule's fraction of copy, no bytes) and the
    # CPU reference against PyTorch on one core, alternating; each read as FILE#member.
    def entry(length, batch, tile, hand_out, twin):
        return {"recipe": "sglang-v4-fp8", "sequence_length": length, "store_bytes_per_token": 132,
                "kernel_path": "sglang-v4-fp8", "lanes_per_head": 1, "batch_order_ms": batch, "tile_order_ms": tile,
                "hand_out_ms": hand_out, "best_fraction_of_copy": 0.74, "twin_bytes_only_ms": twin,
                "twin_with_rope_rows_ms": 0.1324, "best_over_bytes_only_twin": round(twin / hand_out, 3)}
    with tempfile.TemporaryDirectory() as d:
        bundle = write(d, "bundle.json", {"key_store": [entry(65536, 0.1369, 0.1388, 0.1304, 0.1188),
                                                                  entry(4096, 0.1372, 0.1369, 0.1299, 0.1187)],
                                         "cpu_job": {"job": "the CPU job, one core", "torch": "2.11.0",
                                                     "alternating_medians_ms": [{"reference": 34.2, "torch": 113.7},
                                                                                {"reference": 37.2, "torch": 128.5},
                                                                                {"reference": 33.6, "torch": 130.0}]}})
        eager = torch_key_path_file(d, 7.4308, 6.5203)
        r = run(["--key-store", bundle + "#key_store", "--cpu", bundle + "#cpu_job", "--torch-key-path", eager])
        assert r.returncode == 0, r.stderr
        rows = table_rows(r.stdout)
        for case, times, twin in (("", (0.1369, 0.1388, 0.1304), 0.1188),
                                  (", sequences of 4K positions", (0.1372, 0.1369, 0.1299), 0.1187)):
            for kernel, ms in zip((FUSED, TILE_ORDER, HAND_OUT), times):
                row = rows[("key store", "sglang-v4-fp8, 132 B/token" + case, kernel)]
                assert row[3] == f"{ms:.4f}" and row[4] == "-", row  # no bytes recorded
                assert row[5] == ("74.0%" if kernel == HAND_OUT else "-"), row  # the best schedule's only
                assert row[TWIN_RATIO] == f"{twin / ms:.2f}", row
                assert row[6:8] == (["7.431", f"{7.4308 / ms:.1f}x"] if not case else ["-", "-"]), row
            assert rows[("key store", "sglang-v4-fp8, 132 B/token" + case, TWIN)][3] == f"{twin:.4f}"
        cpu = rows[("CPU reference", "the CPU job, one core", "reference/, one core (bench/reference_bench)")]
        assert cpu[3] == "34.2" and cpu[6] == "128.5" and cpu[7] == f"{128.5 / 34.2:.2f}x" == "3.76x", cpu
        assert "34.2 / 37.2 / 33.6" in cpu[NOTES] and "113.7 / 128.5 / 130" in cpu[NOTES], cpu
        assert from_line(r.stdout) == ["bundle.json#key_store", "bundle.json#cpu_job", "torch_key_path.json"]


def test_malformed_peer_and_summary_inputs_are_usage_errors():
    # Each names its file (or member) and the field on one line of stderr, and exits 2.
    with tempfile.TemporaryDirectory() as d:
        key = key_store_file(d, "key.json", 4200.0, [key_case("sglang-v4-fp8", 0.13, 4200.0)])
        bad_ms = peer_key_json("sglang-v4-fp8", [("builtin", "builtin", 0.3, None), ("/u.so", "up", "fast", True)])
        no_ours = peer_key_json("sglang-v4-fp8", [("/u.so", "up", 0.4, True)])
        files = {"bad-ms.json": bad_ms, "no-ours.json": no_ours,
                 "bundle.json": {"key_store": [{"recipe": "sglang-v4-fp8", "sequence_length": 65536}],
                                 "cpu_job": {"job": "cpu", "alternating_medians_ms": []}, "log": "no peers here"}}
        paths = {name: write(d, name, doc) for name, doc in files.items()}
        # Two timed kernels, but their launches make one group: they cannot be told apart.
        merged = os.path.join(d, "ncu-topk-2048.csv")
        with open(merged, "w", encoding="utf-8") as f:
            f.write(ncu_profile([topk_line(2048, "builtin", 9.1, "null", 0), topk_line(2048, "up", 9.2, "true", 0)],
                                [("void dev::topk_kernel<2>(dev::TopKArgs, int *)", 47000)] * 3))
        for args, named in ((["--peers", paths["bad-ms.json"]], ("bad-ms.json", "'ms'")),
                            (["--peers", paths["no-ours.json"]], ("no-ours.json", "builtin")),
                            (["--peers", merged], ("ncu-topk-2048.csv", "groups")),
                            (["--peers", paths["bundle.json"] + "#log"], ("bundle.json#log",)),
                            (["--peers", paths["bundle.json"]], ("bundle.json", "no peer_bench")),
                            (["--key-store", paths["bundle.json"] + "#nope"], ("bundle.json#nope", "'nope'")),
                            (["--key-store", paths["bundle.json"] + "#key_store"], ("bundle.json#key_store[0]",
                                                                                     "store_bytes_per_token")),
                            (["--cpu", paths["bundle.json"] + "#cpu_job"], ("bundle.json#cpu_job", "empty"))):
            r = run((["--key-store", key] if args[0] != "--key-store" else []) + args)
            assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, (args, r.stderr)
            assert all(n in r.stderr for n in named), (args, named, r.stderr)


def note_of(markdown, cell):
    """The text of the numbered note a cell cites ("name [3]" or "- [3]")."""
    number = cell.rsplit("[", 1)[1].rstrip("]")
    for line in markdown.splitlines():
        if line.startswith(f"[{number}] "):
            return line[len(number) + 3:]
    raise AssertionError(f"no note [{number}]")


def from_line(markdown):
    last = markdown.rstrip("\n").splitlines()[-1]
    assert last.startswith("From: "), last
    return last[len("From: "):].split(", ")


# --- the committed tables -------------------------------------------------------------------

def option_of(doc):
    """Which make_table.py option a benchmark file is for, from what it holds."""
    if isinstance(doc, str):  # peer_bench's Nsight Compute profile
        return "--peers"
    if isinstance(doc, list):  # a run's key-store summary
        return "--key-store"
    if "make_table_inputs" in doc:
        return "--inputs"
    if "stage" in doc or any(k.startswith(("peer-", "ncu-")) for k in doc):  # peer_bench's files, or a bundle of them
        return "--peers"
    if "alternating_medians_ms" in doc:
        return "--cpu"
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
            file_name, _, member = name.partition("#")  # FILE#a/b: the member b of a in FILE
            path = os.path.join(RESULTS, file_name)
            assert os.path.isfile(path), f"{os.path.basename(table)} is made from {name}, which is not in bench/results"
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            for key in member.split("/") if member else []:
                assert key in doc, f"{os.path.basename(table)} is made from {name}, which {file_name} does not hold"
                doc = doc[key]
            args.setdefault(option_of(doc), []).append(os.path.join(RESULTS, name))
        assert len(args.get("--inputs", [])) <= 1, (table, "one bundle at most")
        r = run([a for option, files in args.items() for a in [option] + files])
        assert r.returncode == 0, (table, r.stderr)
        assert r.stdout == text, f"{os.path.basename(table)} is not what bench/make_table.py makes of its inputs"


if __name__ == "__main__":
    tests = [f for name, f in sorted(globals().items()) if name.startswith("test_") and callable(f)]
    for test in tests:
        test()
    print(f"{len(tests)} passed, 0 failed")
