#!/usr/bin/env python3
"""One Markdown table of the GPU benchmarks (standard library only).

For every kernel: time (ms), bytes moved, the fraction of the measured device-to-device copy
bandwidth, the PyTorch eager time of the same operation, and the speed-up over it. The inputs
are the JSON files the benchmarks write (bench/results/):
  --key-store    bench/key_store_bench.cu     cases {recipe, fused_ms, unfused_ms, bytes, ...}
  --paged-logits bench/paged_logits_bench.cu  cases {cache, kernel, ms, bytes, ...}
  --topk         bench/topk_bench.cu          cases {input, topk_ms, topk_checked_ms, cub_full_sort_ms, bytes, ...}
  --torch-key-path     bench/torch_key_path.py      {fp8_ms, bf16_ms}
  --torch-paged-logits bench/torch_paged_logits.py  {fp8_ms, bf16_ms}
  --torch-topk         bench/torch_topk.py          {<input>_topk_ms, ...}
Each option takes one or more files; a later file's case replaces an earlier one's with the
same operation, case and kernel (a rerun), keeping the first one's place in the table.
  --inputs BUNDLE.json   the same files as one JSON object, {"make_table_inputs": {OPTION:
                         {FILE NAME: its JSON}}} (OPTION as above, e.g. "--key-store"), read
                         before any file given to the options themselves; the table's
                         "From:" line then names the bundle.

"The same operation" in PyTorch: torch_key_path.py is the sglang-v4 key path (fp8 store for
sglang-v4-fp8, bf16 store for sglang-v4-bf16; other recipes have no eager twin and show "-");
torch_paged_logits.py scores the same shape per cache format; torch_topk.py runs torch.topk
per input. Fractions use each benchmark file's own measured copy bandwidth.

Usage: make_table.py --key-store A.json [B.json] --paged-logits C.json --topk D.json
                     [--torch-key-path E.json] [--torch-paged-logits F.json] [--torch-topk G.json]
                     [-o TABLE.md]
Exit status: 0, or 2 for a missing or malformed input (named on stderr)."""

import argparse
import functools
import json
import os
import sys

# The eager key path exists for these recipes only (bench/torch_key_path.py).
TORCH_KEY_PATH = {"sglang-v4-fp8": "fp8_ms", "sglang-v4-bf16": "bf16_ms"}


class InputError(Exception):
    pass


# Documents of an --inputs bundle, by "BUNDLE:FILE NAME" (what errors name).
PRELOADED = {}
OPTIONS = ("--key-store", "--paged-logits", "--topk", "--torch-key-path", "--torch-paged-logits", "--torch-topk")


def load(path):
    if path in PRELOADED:
        return PRELOADED[path]
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: {e}") from e


def field(obj, key, path):
    if key not in obj:
        raise InputError(f"{path}: no '{key}' in {json.dumps(obj)[:120]}")
    return obj[key]


class Row:
    def __init__(self, operation, case, kernel, ms, nbytes, copy_gbps, torch_ms=None, notes=""):
        self.operation, self.case, self.kernel = operation, case, kernel
        self.ms, self.bytes, self.copy_gbps = float(ms), float(nbytes), float(copy_gbps)
        self.torch_ms = None if torch_ms is None else float(torch_ms)
        self.notes = notes

    def key(self):
        return (self.operation, self.case, self.kernel)

    def fraction_of_copy(self):
        return self.bytes / (self.ms * 1e-3) / 1e9 / self.copy_gbps

    def speedup(self):
        return None if self.torch_ms is None else self.torch_ms / self.ms


def merged(rows):
    """Later rows replace earlier ones with the same key, in the earlier one's place."""
    order, by_key = [], {}
    for r in rows:
        if r.key() not in by_key:
            order.append(r.key())
        by_key[r.key()] = r
    return [by_key[k] for k in order]


def bundle_inputs(path):
    """{option: [names of its documents]} of an --inputs bundle, the documents preloaded."""
    groups = field(load(path), "make_table_inputs", path)
    if not isinstance(groups, dict):
        raise InputError(f"{path}: make_table_inputs is not an object")
    out = {}
    for option, docs in groups.items():
        if option not in OPTIONS or not isinstance(docs, dict):
            raise InputError(f"{path}: '{option}' is not an option with an object of files")
        for name, doc in docs.items():
            key = f"{os.path.basename(path)}:{name}"
            PRELOADED[key] = doc
            out.setdefault(option, []).append(key)
    return out


def torch_times(paths):
    times = {}
    for path in paths or []:
        times.update({k: v for k, v in load(path).items() if k.endswith("_ms")})
    return times


def cases(paths):
    """(path, its copy bandwidth, case) for every case of every file."""
    for path in paths or []:
        doc = load(path)
        copy = field(doc, "copy_bandwidth_gbps", path)
        for c in field(doc, "cases", path):
            yield path, copy, c


# The key-store benchmark's default batch: 16 sequences of 64K positions (files of older
# benchmarks do not record their shape or page order). Another shape (DSAF_BENCH_SEQ_LEN) is
# another case, named by its shape.
DEFAULT_SEQUENCE_LENGTH = 65536


@functools.lru_cache(maxsize=None)
def batch_shape(path):
    """The case name's suffix: empty for the default batch (16 x 64K positions, shuffled
    pages), else what differs from it."""
    doc = load(path)
    length = doc.get("sequence_length", DEFAULT_SEQUENCE_LENGTH)
    if type(length) is not int or length <= 0:
        raise InputError(f"{path}: sequence_length is not a positive integer")
    pages = "" if doc.get("pages", "shuffled") == "shuffled" else f", {doc['pages']} pages"
    if length == DEFAULT_SEQUENCE_LENGTH:
        return pages
    tokens = field(doc, "tokens", path)
    name = f"{length // 1024}K" if length % 1024 == 0 else str(length)
    return f", {tokens // length} x {name} positions{pages}"


def key_store_rows(paths, torch):
    rows = []
    for path, copy, c in cases(paths):
        recipe = field(c, "recipe", path)
        shape = batch_shape(path)
        case = f"{recipe}, {field(c, 'store_bytes_per_token', path)} B/token{shape}"
        # The eager pipeline was timed on the default batch only.
        eager = torch.get(TORCH_KEY_PATH.get(recipe, "")) if not shape else None
        rows.append(Row("key store", case, "fused key path (key_store.cu)", field(c, "fused_ms", path),
                        field(c, "bytes", path), copy, eager,
                        f"unfused pipeline, a kernel per stage, {float(field(c, 'unfused_ms', path)):.3f} ms"))
        if "tile_order_ms" in c:  # the same batch with api.h's tile order (sequences share RoPE rows)
            rows.append(Row("key store", case, "fused key path, tile order (key_store.cu)",
                            field(c, "tile_order_ms", path), field(c, "bytes", path), copy, None,
                            f"order built once per batch in {float(field(c, 'tile_order_build_ms', path)):.3f} ms"))
        if "tile_order_hand_out_ms" in c:  # and with the order's last tiles handed out at run time
            per_warp = c.get("hand_out_tiles_per_warp")
            rows.append(Row("key store", case, "fused key path, tile order + hand-out (key_store.cu)",
                            field(c, "tile_order_hand_out_ms", path), field(c, "bytes", path), copy, None,
                            "last tiles of the order handed out by counters"
                            + (f", {per_warp} per warp" if per_warp is not None else "")))
        if c.get("traffic_twin_no_rope_ms", 0) > 0:  # fp8 and bf16 stores (0: not measured)
            rows.append(Row("key store", case, "traffic twin: these bytes, no arithmetic (key_store_bench.cu)",
                            field(c, "traffic_twin_no_rope_ms", path), field(c, "bytes", path), copy, None,
                            "reads the rows and page entries and writes the cache rows, computes nothing "
                            "(the faster of 4 and 16 threads a token; batch order; no RoPE table)"))
    return rows


def paged_logits_rows(paths, torch):
    rows = []
    for path, copy, c in cases(paths):
        cache = field(c, "cache", path)
        kernel = field(c, "kernel", path)
        source = "paged_logits.cu" if kernel == "exact-order" else "paged_logits_mma.cu"
        rows.append(Row("paged logits", f"{cache} cache", f"{kernel} ({source})", field(c, "ms", path),
                        field(c, "bytes", path), copy, torch.get(f"{cache}_ms")))
    return rows


def topk_rows(paths, torch):
    rows = []
    for path, copy, c in cases(paths):
        name = field(c, "input", path)
        notes = (f"with host status check {float(field(c, 'topk_checked_ms', path)):.3f} ms; "
                 f"CUB full sort {float(field(c, 'cub_full_sort_ms', path)):.3f} ms")
        rows.append(Row("top-K", name, "exact top-K (topk.cu)", field(c, "topk_ms", path), field(c, "bytes", path),
                        copy, torch.get(f"{name}_topk_ms"), notes))
    return rows


def markdown(rows, sources):
    lines = ["| Operation | Case | Kernel | Time (ms) | Bytes moved | Fraction of copy | PyTorch eager (ms) "
             "| Speed-up vs eager | Notes |",
             "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        torch_ms = "-" if r.torch_ms is None else f"{r.torch_ms:.3f}"
        speedup = "-" if r.speedup() is None else f"{r.speedup():.2f}x" if r.speedup() < 10 else f"{r.speedup():.1f}x"
        lines.append(f"| {r.operation} | {r.case} | {r.kernel} | {r.ms:.4f} | {r.bytes / 1e6:,.1f} MB "
                     f"| {100 * r.fraction_of_copy():.1f}% | {torch_ms} | {speedup} | {r.notes} |")
    lines += ["", "From: " + ", ".join(os.path.basename(s) for s in sources)]
    return "\n".join(lines) + "\n"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--key-store", nargs="+")
    p.add_argument("--paged-logits", nargs="+")
    p.add_argument("--topk", nargs="+")
    p.add_argument("--torch-key-path", nargs="+")
    p.add_argument("--torch-paged-logits", nargs="+")
    p.add_argument("--torch-topk", nargs="+")
    p.add_argument("--inputs", help="the input files as one bundle (see above)")
    p.add_argument("-o", "--output", help="write the table here instead of stdout")
    args = p.parse_args(argv)
    explicit = [f for group in (args.key_store, args.paged_logits, args.topk, args.torch_key_path,
                                args.torch_paged_logits, args.torch_topk) for f in group or []]
    try:
        if args.inputs:
            for option, names in bundle_inputs(args.inputs).items():
                attr = option[2:].replace("-", "_")
                setattr(args, attr, names + (getattr(args, attr) or []))
    except InputError as e:
        print(f"make_table.py: {e}", file=sys.stderr)
        return 2
    if not (args.key_store or args.paged_logits or args.topk):
        p.error("no benchmark results given")
    try:
        rows = merged(key_store_rows(args.key_store, torch_times(args.torch_key_path)) +
                      paged_logits_rows(args.paged_logits, torch_times(args.torch_paged_logits)) +
                      topk_rows(args.topk, torch_times(args.torch_topk)))
    except InputError as e:
        print(f"make_table.py: {e}", file=sys.stderr)
        return 2
    sources = ([args.inputs] if args.inputs else []) + explicit
    table = markdown(rows, sources)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(table)
    else:
        sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
