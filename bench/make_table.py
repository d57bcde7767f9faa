#!/usr/bin/env python3
"""One Markdown table of the benchmarks, each result with PyTorch eager and the upstream
kernels beside it (standard library only).

For every kernel: time (ms), bytes moved, the fraction of the measured device-to-device copy
bandwidth, its time against the bytes-only traffic twin's (key store), the PyTorch eager time
of the same operation and the speed-up over it, and the fastest upstream kernel timed on the
same operation: its name, its time, ours in the same measurement, and our speed-up over it.
Every cell comes from an input file; a cell without one is "-", and for the upstream columns
a numbered note under the table says why. The inputs are the JSON files the benchmarks write
(bench/results/):
  --key-store    bench/key_store_bench.cu     cases {recipe, fused_ms, unfused_ms, bytes, ...};
                 or a list of run summaries   [{recipe, sequence_length, store_bytes_per_token,
                 (a bundle's "key_store")      batch_order_ms, tile_order_ms, hand_out_ms,
                                               twin_bytes_only_ms, best_fraction_of_copy, ...}]
  --paged-logits bench/paged_logits_bench.cu  cases {cache, kernel, ms, bytes, ...}
  --topk         bench/topk_bench.cu          cases {input, topk_ms, topk_checked_ms, cub_full_sort_ms, bytes, ...}
  --cpu          the CPU reference against PyTorch on one core, alternating (a bundle's "cpu_job"):
                 {job, alternating_medians_ms: [{reference, torch}], torch}
  --torch-key-path     bench/torch_key_path.py      {fp8_ms, bf16_ms}
  --torch-paged-logits bench/torch_paged_logits.py  {fp8_ms, bf16_ms}
  --torch-topk         bench/torch_topk.py          {<input>_topk_ms, ...}
  --peers        bench/peer_bench.cu: its JSON ({stage, cases: [{kernel, name, ms, same_as_first,
                 ...}]}: ABI calls, CUDA events), or its Nsight Compute profile (ncu --csv with
                 gpu__time_duration.sum, peer_bench's lines above the CSV: kernels alone), or an
                 object holding such files by name (a conformance bundle, a run of a bundle);
                 the verify / compare verdicts in such an object (verify-*.json, compare-*.json)
                 say which upstream kernels implement a recipe, for the notes.
Each option takes one or more files. FILE#a/b names the member b of the member a of the JSON
object in FILE (the bundles nest the benchmarks' files by run and name). A later file's case
replaces an earlier one's with the same operation, case and kernel (a rerun), keeping the first
one's place in the table.
  --inputs BUNDLE.json   the same files as one JSON object, {"make_table_inputs": {OPTION:
                         {FILE NAME: its JSON}}} (OPTION as above, e.g. "--key-store"), read
                         before any file given to the options themselves; the table's
                         "From:" line then names the bundle.

"The same operation" in PyTorch: torch_key_path.py is the sglang-v4 key path (fp8 store for
sglang-v4-fp8, bf16 store for sglang-v4-bf16, on every schedule of the default batch; other
recipes have no eager twin and show "-"); torch_paged_logits.py scores the same shape per cache
format; torch_topk.py runs torch.topk per input, of the same shape where the files record it.
Fractions use each benchmark file's own measured copy bandwidth (a run summary records the best
schedule's only). The bytes-only twin column is the twin's time over the row's, both from the
same file (>= 1: the row moves its bytes as fast as a kernel that only moves them).

Upstream: per operation (key store of a recipe and batch shape; top-K of a shape) the peer
measurement used is the last kernels-alone profile given, else the last ABI-call JSON. Its
fastest upstream kernel that returned our result stands beside the row of the kernel
peer_bench runs (our default schedule: the tile order + hand-out; the exact top-K, as the
call that does what the upstream calls do where the measurement has it: by index, returning
once queued; conformance_report.ours_of). The speed-up is that kernel's time over ours in
the same measurement (the same process, inputs and timing), not over the row's own time.
Kernels alone: the median of each kernel's profiled launches, summed over an
implementation's kernels per call, the adapters' glue kernels (conformance/) and our key
store's per-call tile-order kernel left out (set-up on both sides).

Usage: make_table.py --key-store A.json [B.json] --paged-logits C.json --topk D.json [--cpu E.json]
                     [--torch-key-path F.json] [--torch-paged-logits G.json] [--torch-topk H.json]
                     [--peers I.json J.csv BUNDLE.json#run] [-o TABLE.md]
Exit status: 0, or 2 for a missing or malformed input (file and field named on stderr)."""

import argparse
import csv
import functools
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from conformance_report import OURS, is_ours, kernel_name, ours_of  # noqa: E402  (standard library only)

# The eager key path exists for these recipes only (bench/torch_key_path.py).
TORCH_KEY_PATH = {"sglang-v4-fp8": "fp8_ms", "sglang-v4-bf16": "bf16_ms"}

FUSED = "fused key path (key_store.cu)"
TILE_ORDER = "fused key path, tile order (key_store.cu)"
HAND_OUT = "fused key path, tile order + hand-out (key_store.cu)"
TWIN = "traffic twin: these bytes, no arithmetic (key_store_bench.cu)"
TOPK = "exact top-K (topk.cu)"

# In a peer profile: kernels the adapters launch around an upstream kernel (conformance/*.cu:
# token slots, RoPE tables, decode plans, identity page tables, row tails, widened
# positions), and (OUR_CALL_SETUP) our key store's per-call tile order. Neither is the kernel.
ADAPTER_GLUE = ("conformance::", "<unnamed>::decode_plans_kernel", "<unnamed>::fill_tails_kernel",
                "<unnamed>::widen_positions_kernel")
# Our key store's tile order, built on the device before the key kernel on every ABI call
# (tile_order_kernel; tile_keys_kernel and CUB's radix sort in profiles from before the
# order cache).
OUR_CALL_SETUP = ("dev::<unnamed>::tile_order_kernel", "dev::<unnamed>::tile_keys_kernel", "cub::DeviceRadixSort")
# Which of our calls stands beside the upstream ones: conformance_report.ours_of.

OPTIONS = ("--key-store", "--paged-logits", "--topk", "--cpu", "--torch-key-path", "--torch-paged-logits",
           "--torch-topk", "--peers")


class InputError(Exception):
    pass


# Documents of an --inputs bundle, by "BUNDLE:FILE NAME" (what errors name), and the
# documents of the option each came under (the files beside it).
PRELOADED, PRELOADED_BESIDE = {}, {}


def display(spec):
    """What the table and errors call an input: the file's name, with its member path."""
    if spec in PRELOADED:
        return spec
    path, _, member = spec.partition("#")
    return os.path.basename(path) + ("#" + member if member else "")


@functools.lru_cache(maxsize=None)
def read_file(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read() if path.endswith((".csv", ".txt")) else json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: {e}") from e


def load(spec):
    if spec in PRELOADED:
        return PRELOADED[spec]
    path, _, member = spec.partition("#")
    doc = read_file(path)
    for key in member.split("/") if member else []:
        if not isinstance(doc, dict) or key not in doc:
            raise InputError(f"{display(spec)}: no member '{key}'")
        doc = doc[key]
    return doc


def field(obj, key, where):
    if not isinstance(obj, dict) or key not in obj:
        raise InputError(f"{where}: no '{key}' in {json.dumps(obj)[:120]}")
    return obj[key]


def number(obj, key, where):
    value = field(obj, key, where)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where}: '{key}' is not a number: {json.dumps(value)[:60]}")
    return float(value)


def integer(obj, key, where):
    value = field(obj, key, where)
    if type(value) is not int or value <= 0:
        raise InputError(f"{where}: '{key}' is not a positive integer: {json.dumps(value)[:60]}")
    return value


def objects(value, what, where):
    if not isinstance(value, list) or not all(isinstance(c, dict) for c in value):
        raise InputError(f"{where}: {what} is not a list of objects")
    return value


class Row:
    """One line of the table. peer_op: the operation an upstream timing of it is filed under;
    peer_row: this row is our kernel as peer_bench times it; no_peer: why no upstream kernel
    can stand beside it at all."""

    def __init__(self, operation, case, kernel, ms, nbytes=None, copy_gbps=None, torch_ms=None, notes="",
                 fraction=None, twin_ms=None, peer_op=None, peer_row=False, no_peer=None):
        self.operation, self.case, self.kernel = operation, case, kernel
        self.ms = float(ms)
        self.bytes = None if nbytes is None else float(nbytes)
        self.copy_gbps = None if copy_gbps is None else float(copy_gbps)
        self.torch_ms = None if torch_ms is None else float(torch_ms)
        self.notes, self.fraction, self.twin_ms = notes, fraction, twin_ms
        self.peer_op, self.peer_row, self.no_peer = peer_op, peer_row, no_peer

    def key(self):
        return (self.operation, self.case, self.kernel)

    def fraction_of_copy(self):
        if self.fraction is not None:
            return self.fraction
        if self.bytes is None or self.copy_gbps is None:
            return None
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
            PRELOADED[key], PRELOADED_BESIDE[key] = doc, docs
            out.setdefault(option, []).append(key)
    return out


def torch_times(specs):
    """(shape, {name: ms}) of each eager file in order; shape None where it records none."""
    out = []
    for spec in specs or []:
        doc = load(spec)
        if not isinstance(doc, dict):
            raise InputError(f"{display(spec)}: not a JSON object")
        shape = tuple(doc.get(k) for k in ("rows", "row_length", "k")) if "k" in doc else doc.get("shape")
        out.append((shape, {k: v for k, v in doc.items() if k.endswith("_ms")}))
    return out


def eager(torch, shape, name):
    """The eager time `name` of the last file of this shape (or recording none)."""
    found = None
    for file_shape, times in torch:
        if (file_shape is None or file_shape == shape) and name in times:
            found = times[name]
    return found


def cases(specs):
    """(where, its copy bandwidth, case) for every case of every benchmark file."""
    for spec in specs or []:
        doc, where = load(spec), display(spec)
        copy = number(doc, "copy_bandwidth_gbps", where)
        for c in objects(field(doc, "cases", where), "'cases'", where):
            yield spec, copy, c


# The key-store benchmark's default batch: 16 sequences of 64K positions (files of older
# benchmarks do not record their shape or page order). Another shape (DSAF_BENCH_SEQ_LEN) is
# another case, named by its shape.
DEFAULT_SEQUENCE_LENGTH = 65536


def positions(length):
    return f"{length // 1024}K" if length % 1024 == 0 else str(length)


@functools.lru_cache(maxsize=None)
def batch_shape(spec):
    """The case name's suffix: empty for the default batch (16 x 64K positions, shuffled
    pages), else what differs from it; and the batch's sequence length and page order."""
    doc, where = load(spec), display(spec)
    length = doc.get("sequence_length", DEFAULT_SEQUENCE_LENGTH)
    if type(length) is not int or length <= 0:
        raise InputError(f"{where}: sequence_length is not a positive integer")
    order = doc.get("pages", "shuffled")
    pages = "" if order == "shuffled" else f", {order} pages"
    if length == DEFAULT_SEQUENCE_LENGTH:
        return pages, length, order
    tokens = field(doc, "tokens", where)
    return f", {tokens // length} x {positions(length)} positions{pages}", length, order


def key_op(recipe, length, pages="shuffled"):
    """What a key-store timing is filed under: peer_bench's batches have shuffled pages."""
    return ("key store", recipe, length) + (() if pages == "shuffled" else (pages,))


def twin_row(case, ms, nbytes, copy, notes, op):
    return Row("key store", case, TWIN, ms, nbytes, copy, None, notes, peer_op=op,
               no_peer="The twin is a yardstick (it moves the operation's bytes and computes nothing), "
                       "not an implementation of the operation.")


def key_store_rows(specs, torch):
    rows = []
    for spec in specs or []:
        doc = load(spec)
        rows += key_store_summary_rows(spec, doc, torch) if isinstance(doc, list) else key_store_file_rows(spec, torch)
    return rows


def key_store_file_rows(spec, torch):
    rows = []
    for spec, copy, c in cases([spec]):
        where = display(spec)
        recipe = field(c, "recipe", where)
        shape, length, pages = batch_shape(spec)
        case = f"{recipe}, {field(c, 'store_bytes_per_token', where)} B/token{shape}"
        # The eager pipeline was timed on the default batch only.
        torch_ms = eager(torch, None, TORCH_KEY_PATH.get(recipe, "")) if not shape else None
        nbytes, op = number(c, "bytes", where), key_op(recipe, length, pages)
        twin = number(c, "traffic_twin_no_rope_ms", where) if c.get("traffic_twin_no_rope_ms", 0) else None
        rows.append(Row("key store", case, FUSED, number(c, "fused_ms", where), nbytes, copy, torch_ms,
                        f"unfused pipeline, a kernel per stage, {number(c, 'unfused_ms', where):.3f} ms",
                        twin_ms=twin, peer_op=op))
        if "tile_order_ms" in c:  # the same batch with api.h's tile order (sequences share RoPE rows)
            rows.append(Row("key store", case, TILE_ORDER, number(c, "tile_order_ms", where), nbytes, copy, torch_ms,
                            f"order built once per batch in {number(c, 'tile_order_build_ms', where):.3f} ms",
                            twin_ms=twin, peer_op=op))
        if "tile_order_hand_out_ms" in c:  # and with the order's last tiles handed out at run time
            per_warp = c.get("hand_out_tiles_per_warp")
            rows.append(Row("key store", case, HAND_OUT, number(c, "tile_order_hand_out_ms", where), nbytes, copy,
                            torch_ms, "last tiles of the order handed out by counters"
                            + (f", {per_warp} per warp" if per_warp is not None else ""),
                            twin_ms=twin, peer_op=op, peer_row=True))
        if twin is not None:  # 0: not measured (older benchmarks: the fp4 store)
            rows.append(twin_row(case, twin, nbytes, copy, "reads the rows and page entries and writes the cache "
                                 "rows, computes nothing (the faster of 4 and 16 threads a token; batch order; no "
                                 "RoPE table)", op))
    return rows


def key_store_summary_rows(spec, doc, torch):
    """A run's summary of key_store_bench per recipe and sequence length: the three schedules'
    times and the bytes-only twin's; it records neither bytes nor the copy bandwidth, only the
    best schedule's fraction of copy."""
    rows = []
    for i, e in enumerate(objects(doc, "the document", display(spec))):
        where = f"{display(spec)}[{i}]"
        recipe, length = field(e, "recipe", where), integer(e, "sequence_length", where)
        shape = "" if length == DEFAULT_SEQUENCE_LENGTH else f", sequences of {positions(length)} positions"
        case = f"{recipe}, {field(e, 'store_bytes_per_token', where)} B/token{shape}"
        torch_ms = eager(torch, None, TORCH_KEY_PATH.get(recipe, "")) if not shape else None
        twin, op = number(e, "twin_bytes_only_ms", where), key_op(recipe, length)
        times = [(kernel, number(e, name, where)) for kernel, name in
                 ((FUSED, "batch_order_ms"), (TILE_ORDER, "tile_order_ms"), (HAND_OUT, "hand_out_ms"))]
        best = min(times, key=lambda t: t[1])[0]
        lanes = integer(e, "lanes_per_head", where)
        path = f"kernel path {field(e, 'kernel_path', where)}, {lanes} lane{'s' if lanes > 1 else ''} per head"
        for kernel, ms in times:
            notes = [path] if kernel == FUSED else []
            rows.append(Row("key store", case, kernel, ms, torch_ms=torch_ms,
                            notes="; ".join(notes + (["the fastest schedule"] if kernel == best else [])),
                            fraction=number(e, "best_fraction_of_copy", where) if kernel == best else None,
                            twin_ms=twin, peer_op=op, peer_row=kernel == HAND_OUT))
        rope = number(e, "twin_with_rope_rows_ms", where)
        rows.append(twin_row(case, twin, None, None, f"bytes-only: no RoPE table rows (with them {rope:.4f} ms)", op))
    return rows


# paged_logits_bench.cu's decode shape: the shape of its files' cases without a "shape"
# (the files before the one-sequence cases) and of torch_paged_logits.py's eager times.
LOGITS_DECODE_SHAPE = "batch 32, next_n 1, 64 heads, context 131072, page 64"


def paged_logits_rows(specs, torch):
    rows = []
    for spec, copy, c in cases(specs):
        where = display(spec)
        cache, kernel = field(c, "cache", where), field(c, "kernel", where)
        source = "paged_logits.cu" if kernel == "exact-order" else "paged_logits_mma.cu"
        if c.get("shape", "decode") == "decode":
            rows.append(Row("paged logits", f"{cache} cache", f"{kernel} ({source})", number(c, "ms", where),
                            number(c, "bytes", where), copy,
                            eager(torch, load(spec).get("shape", LOGITS_DECODE_SHAPE), f"{cache}_ms"),
                            peer_op=("paged logits", cache)))
        else:  # rows of one sequence: arithmetic-bound; no eager or upstream timing of this shape
            rows.append(Row("paged logits", f"{cache} cache, {c['shape']}, {int(number(c, 'rows', where))} rows",
                            f"{kernel} ({source})", number(c, "ms", where), number(c, "bytes", where), copy,
                            notes=f"{number(c, 'fraction_of_roofline', where):.0%} of the {c.get('bound', '?')} roofline",
                            no_peer="No upstream kernel or eager time of this shape is recorded."))
    return rows


def topk_rows(specs, torch):
    rows = []
    for spec, copy, c in cases(specs):
        where, doc = display(spec), load(spec)
        name = field(c, "input", where)
        shape = tuple(doc.get(k) for k in ("rows", "row_length", "k"))
        notes = (f"with host status check {number(c, 'topk_checked_ms', where):.3f} ms; "
                 f"CUB full sort {number(c, 'cub_full_sort_ms', where):.3f} ms")
        if "topk_by_index_ms" in c:  # the same positions in ascending order (no final sort)
            notes = f"by index {number(c, 'topk_by_index_ms', where):.4f} ms; " + notes
        op = ("top-K",) + shape if all(type(v) is int for v in shape) else None
        rows.append(Row("top-K", name, TOPK, number(c, "topk_ms", where), number(c, "bytes", where), copy,
                        eager(torch, shape, f"{name}_topk_ms"), notes, peer_op=op, peer_row=True,
                        no_peer=None if op else "The benchmark file records no shape (rows, row_length, k)."))
    return rows


def cpu_rows(specs):
    rows = []
    for spec in specs or []:
        doc, where = load(spec), display(spec)
        pairs = objects(field(doc, "alternating_medians_ms", where), "'alternating_medians_ms'", where)
        if not pairs:
            raise InputError(f"{where}: 'alternating_medians_ms' is empty")
        ours = [number(p, "reference", where) for p in pairs]
        torch = [number(p, "torch", where) for p in pairs]
        rows.append(Row("CPU reference", field(doc, "job", where), "reference/, one core (bench/reference_bench)",
                        statistics.median(ours), torch_ms=statistics.median(torch),
                        notes=f"eager: PyTorch {doc.get('torch', '')} on the CPU, one core; medians of alternating "
                              f"runs, ours {' / '.join(f'{v:g}' for v in ours)} ms, PyTorch "
                              f"{' / '.join(f'{v:g}' for v in torch)} ms", peer_op=("CPU reference",)))
    return rows


# --- peer_bench: ours beside the upstream kernels ----------------------------------------------

class Peer:
    """One operation timed by peer_bench: ours and each upstream kernel, the same way.
    timed: [(name, ms, whether it is ours, whether it returned our result)]."""

    def __init__(self, op, source, method, timed, missing_ours):
        self.op, self.source, self.method = op, source, method
        ours = [ms for _, ms, is_ours, _ in timed if is_ours]
        if not ours:
            raise InputError(f"{display(source)}: {missing_ours}")
        self.ours_ms = ours[0]
        self.upstream = [(name, ms) for name, ms, is_ours, same in timed if not is_ours and same]
        self.wrong = [name for name, _, is_ours, same in timed if not is_ours and not same]
        self.fastest = min(self.upstream, key=lambda u: u[1]) if self.upstream else None


def peer_json(spec, doc):
    """peer_bench's JSON: ABI calls timed with CUDA events."""
    where = display(spec)
    stage = field(doc, "stage", where)
    if stage == "key_store":
        op = key_op(field(doc, "recipe", where), integer(doc, "sequence_length", where))
    elif stage == "topk":
        op = ("top-K", integer(doc, "rows", where), integer(doc, "length", where), integer(doc, "k", where))
    else:
        raise InputError(f"{where}: 'stage' is neither key_store nor topk: {json.dumps(stage)}")
    cases_ = objects(field(doc, "cases", where), "'cases'", where)
    kernels = [field(c, "kernel", where) for c in cases_]
    if not all(isinstance(k, str) for k in kernels):
        raise InputError(f"{where}: a case's 'kernel' is not a string")
    ours = ours_of(kernels)
    timed = [(field(c, "name", where), number(c, "ms", where), kernel == ours,
              c.get("same_as_first") is True and not c.get("exact_rows_wrong", 0))
             for c, kernel in zip(cases_, kernels) if kernel == ours or not is_ours(kernel)]
    return Peer(op, spec, "abi", timed, f"no case with kernel '{OURS}' (ours) in 'cases'")


# peer_bench's line per kernel that ran (a skipped or refused kernel's line has no time).
PEER_LINE = re.compile(r"^(key|topk) (.*?)\s+(\d+(?:\.\d+)?) ms\s+\d+% of copy\s+same (?:bytes|set) as first: (\w+)"
                       r"(?:; against the exact sets: (\d+) rows wrong, (\d+) keys missing)?\s*$")
TOPK_SHAPE = re.compile(r"^\[(\d+) x (\d+)\] K=(\d+)\s+(.*)$")
TIME_UNITS = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}


def is_peer_profile(text):
    return isinstance(text, str) and "peer_bench" in text and '"Kernel Name"' in text


def sibling(spec, container, name):
    """(spec, document) of the file `name` beside `spec`: in the same object of a bundle, or
    in the same folder; None if there is none."""
    if spec in PRELOADED:  # a file of an --inputs bundle
        return spec.rsplit(":", 1)[0] + ":" + name, PRELOADED_BESIDE[spec].get(name)
    if container is not None:
        return (spec.rsplit("/", 1)[0] + "/" + name if "/" in spec.partition("#")[2] else
                spec.partition("#")[0] + "#" + name), container.get(name)
    path, _, member = spec.partition("#")
    if member:
        parent = member.rsplit("/", 1)[0] if "/" in member else ""
        doc = load(path + ("#" + parent if parent else ""))
        return path + "#" + (parent + "/" if parent else "") + name, doc.get(name) if isinstance(doc, dict) else None
    other = os.path.join(os.path.dirname(path), name)
    return other, (load(other) if os.path.exists(other) else None)


def peer_profile(spec, text, container, implicit):
    """peer_bench under Nsight Compute: kernels alone. The cases that ran are peer_bench's
    lines, in order; their launches follow in the same order, each case's calls one after
    another, so a case's launches end where a kernel it has not launched follows a repeat of
    its first kernel (adapter glue set aside)."""
    where = display(spec)
    lines = [m.groups() for m in map(PEER_LINE.match, text.splitlines()) if m]
    if not lines:
        raise InputError(f"{where}: no peer_bench line with a time above the profile")
    ops, cases_ = set(), []
    for stage, rest, _, same, rows_wrong, _ in lines:
        if stage == "topk":
            m = TOPK_SHAPE.match(rest)
            if not m:
                raise InputError(f"{where}: a top-K line without its shape: {rest[:80]}")
            ops.add(("top-K",) + tuple(int(v) for v in m.groups()[:3]))
            name = m.group(4).strip()
        else:
            recipe, _, name = rest.partition(" ")
            ops.add(("key", recipe))
            name = name.strip()
        cases_.append((name, same, rows_wrong))
    if len(ops) != 1:
        raise InputError(f"{where}: peer_bench lines of more than one operation: {sorted(ops)}")
    (op,) = ops
    if op[0] == "key":  # the line names the recipe, not the batch: peer_bench's JSON of the run has it
        name = spec.rsplit(":", 1)[1] if spec in PRELOADED else os.path.basename(spec.partition("#")[2] or spec)
        other_spec, doc = sibling(spec, container, "peer-" + name.removeprefix("ncu-").rsplit(".", 1)[0] + ".json")
        if not name.startswith("ncu-") or not isinstance(doc, dict):
            raise InputError(f"{where}: a key-store profile records no batch shape, and no peer_bench JSON "
                             f"of its run (peer-*.json) is beside it")
        if field(doc, "recipe", display(other_spec)) != op[1]:
            raise InputError(f"{display(other_spec)}: 'recipe' is not the profile's {op[1]}")
        op = key_op(op[1], integer(doc, "sequence_length", display(other_spec)))
        # A file of an --inputs bundle, or a member of one, is named by the bundle already.
        if other_spec.partition("#")[0] not in PRELOADED:
            implicit.append(other_spec)
    rows = list(csv.reader(line for line in text.splitlines() if line.startswith('"')))
    header = rows[0] if rows else []
    try:
        name_col, metric_col, unit_col, value_col = (header.index(h) for h in
                                                     ("Kernel Name", "Metric Name", "Metric Unit", "Metric Value"))
    except ValueError:
        raise InputError(f"{where}: no 'Kernel Name', 'Metric Name', 'Metric Unit' and 'Metric Value' columns")
    segments = []  # [{kernel name: [ms of each launch]}]
    repeated = False
    for r in rows[1:]:
        if len(r) <= value_col or r[metric_col] != "gpu__time_duration.sum":
            continue
        name = kernel_name(r[name_col])
        if name.startswith(ADAPTER_GLUE):
            continue
        if r[unit_col] not in TIME_UNITS:
            raise InputError(f"{where}: 'Metric Unit' {r[unit_col]!r} of {name} is not a time unit")
        try:
            ms = float(r[value_col].replace(",", "")) * TIME_UNITS[r[unit_col]]
        except ValueError:
            raise InputError(f"{where}: 'Metric Value' {r[value_col]!r} of {name} is not a number")
        if not segments or (repeated and name not in segments[-1]):
            segments.append({})
            repeated = False
        elif name == next(iter(segments[-1])) and name in segments[-1]:
            repeated = True
        segments[-1].setdefault(name, []).append(ms)
    if len(segments) != len(cases_):
        raise InputError(f"{where}: {len(segments)} groups of profiled kernels for the {len(cases_)} kernels "
                         "peer_bench timed")
    ours = ours_of([name for name, _, _ in cases_])
    timed = [(name, sum(statistics.median(v) for k, v in launches.items()
                        if name != ours or not k.startswith(OUR_CALL_SETUP)),
              name == ours, same == "true" and not int(rows_wrong or 0))
             for (name, same, rows_wrong), launches in zip(cases_, segments)
             if name == ours or not is_ours(name)]
    return Peer(op, spec, "kernel", timed, f"no '{OURS}' line (ours) among peer_bench's lines")


def is_verdict(doc):
    """A verify or compare verdict of an upstream key-store kernel (dsa-fidelity --json)."""
    return isinstance(doc, dict) and "recipe" in doc and "pass" in doc and "kernel" in doc and (
        "capture" in doc or doc.get("capabilities", {}).get("key_store") is True)


class Peers:
    def __init__(self, specs):
        self.measured, self.verdicts, self.verdict_sources, self.implicit = [], {}, [], []
        for spec in specs or []:
            doc = load(spec)
            if is_peer_profile(doc):
                self.measured.append(peer_profile(spec, doc, None, self.implicit))
            elif isinstance(doc, dict) and "stage" in doc:
                self.measured.append(peer_json(spec, doc))
            elif isinstance(doc, dict):
                self.scan(spec, doc)
            else:
                raise InputError(f"{display(spec)}: neither peer_bench's JSON, its profile, nor an object of them")
        self.chosen = {}  # op -> Peer: kernels alone over ABI calls, else the later file
        for m in self.measured:
            prev = self.chosen.get(m.op)
            if prev is None or m.method == "kernel" or prev.method == "abi":
                self.chosen[m.op] = m

    def scan(self, spec, container):
        found = False
        for name, doc in container.items():
            member = spec + ("/" if "#" in spec else "#") + name
            if is_peer_profile(doc):
                self.measured.append(peer_profile(member, doc, container, self.implicit))
            elif isinstance(doc, dict) and "stage" in doc and "cases" in doc:
                self.measured.append(peer_json(member, doc))
            elif is_verdict(doc):
                if doc["pass"] is True:
                    engine = doc.get("engine", "").split(" (")[0]
                    self.verdicts.setdefault(doc["recipe"], []).append(
                        f"{engine}: {doc['kernel']}" if "capture" in doc and engine else doc["kernel"])
                if spec not in self.verdict_sources:
                    self.verdict_sources.append(spec)
            else:
                continue
            found = True
        if not found:
            raise InputError(f"{display(spec)}: no peer_bench JSON or profile in it")


class Notes:
    """The numbered notes under the table, in the order the cells first cite them."""

    def __init__(self):
        self.texts = []

    def cite(self, text):
        if text not in self.texts:
            self.texts.append(text)
        return f"[{self.texts.index(text) + 1}]"


def shape_text(op):
    if op[0] == "key store":
        return f"sequences of {positions(op[2])} positions" + (f", {op[3]} pages" if len(op) > 3 else "")
    return f"[{op[1]} x {op[2]}] K={op[3]}" if op[0] == "top-K" else ", ".join(map(str, op[1:]))


def measurement_note(m):
    how = ("Kernels alone: Nsight Compute's gpu__time_duration, the median of each kernel's profiled launches, "
           "summed over an implementation's kernels per call (the adapters' glue kernels and our per-call "
           "tile-order set-up left out)" if m.method == "kernel" else
           "ABI calls: CUDA events around each call, the median of peer_bench's timed calls (an adapter's set-up "
           "and our per-call tile-order build included)")
    text = (f"{how}. Ours and {len(m.upstream) + len(m.wrong)} upstream kernel(s) in one peer_bench process on the "
            f"same inputs ({display(m.source)}); the fastest of those that returned our result")
    if m.wrong:
        text += " (left out for a different result: " + "; ".join(m.wrong) + ")"
    if m.op[0] == "top-K":
        text += ". peer_bench's rows are distinct scores (a shuffled grid); the benchmark's are Gaussian"
    return text + "."


def upstream_cells(r, peers, notes):
    """Fastest upstream kernel, its time, ours beside it, our speed-up over it."""
    def none(why):
        return [f"- {notes.cite(why)}", "-", "-", "-"]
    if r.no_peer:
        return none(r.no_peer)
    if not peers.measured:
        return none("No upstream timings were given (--peers).")
    m = peers.chosen.get(r.peer_op)
    if m is not None:
        if not r.peer_row:
            return none("peer_bench times our default schedule (tile order + hand-out) beside the upstream kernels: "
                        "the comparison is on that schedule's row.")
        if m.fastest is None:
            return none(f"No upstream kernel timed on this operation returned our result ({display(m.source)}).")
        name, ms = m.fastest
        return [f"{name} {notes.cite(measurement_note(m))}", f"{ms:.4f}", f"{m.ours_ms:.4f}", ratio(ms / m.ours_ms)]
    same_kind = sorted({shape_text(op) for op in peers.chosen if op[:2] == r.peer_op[:2] and op[0] != "top-K"} |
                       {shape_text(op) for op in peers.chosen if op[0] == r.peer_op[0] == "top-K"})
    if same_kind:
        return none(f"Timed beside the upstream kernels at another shape only ({'; '.join(same_kind)}).")
    if r.peer_op[0] == "key store" and peers.verdict_sources:
        sources = ", ".join(display(s) for s in peers.verdict_sources)
        kernels = peers.verdicts.get(r.peer_op[1])
        if kernels:
            return none(f"An upstream kernel stores this recipe's keys byte-exact ({'; '.join(kernels)}: {sources}), "
                        "but no timing of it is in the inputs.")
        return none(f"No upstream kernel implements the recipe: no upstream key-store kernel of the conformance run "
                    f"({sources}) stores it byte-exact.")
    stages = ", ".join(sorted({op[0] for op in peers.chosen}))
    return none(f"No upstream timing of this operation is in the inputs (they time: {stages}).")


def ratio(s):
    return f"{s:.2f}x" if s < 10 else f"{s:.1f}x"


def ms_text(ms, digits):
    return f"{ms:.{digits}f}" if ms < 10 else f"{ms:.1f}"


def markdown(rows, peers, sources):
    notes = Notes()
    lines = ["| Operation | Case | Kernel | Time (ms) | Bytes moved | Fraction of copy | PyTorch eager (ms) "
             "| Speed-up vs eager | Bytes-only twin / time | Fastest upstream kernel | Upstream (ms) "
             "| Ours beside it (ms) | Speed-up vs upstream | Notes |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|"]
    for r in rows:
        nbytes = "-" if r.bytes is None else f"{r.bytes / 1e6:,.1f} MB"
        fraction = "-" if r.fraction_of_copy() is None else f"{100 * r.fraction_of_copy():.1f}%"
        torch_ms = "-" if r.torch_ms is None else ms_text(r.torch_ms, 3)
        speedup = "-" if r.speedup() is None else ratio(r.speedup())
        twin = "-" if r.twin_ms is None else f"{r.twin_ms / r.ms:.2f}"
        cells = [r.operation, r.case, r.kernel, ms_text(r.ms, 4), nbytes, fraction, torch_ms, speedup, twin]
        lines.append("| " + " | ".join(cells + upstream_cells(r, peers, notes) + [r.notes]) + " |")
    lines.append("")
    lines += [f"[{i + 1}] {text}" for i, text in enumerate(notes.texts)]
    lines += ["", "From: " + ", ".join(display(s) for s in sources)]
    return "\n".join(lines) + "\n"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for option in OPTIONS:
        p.add_argument(option, nargs="+")
    p.add_argument("--inputs", help="the input files as one bundle (see above)")
    p.add_argument("-o", "--output", help="write the table here instead of stdout")
    args = p.parse_args(argv)
    explicit = [f for option in OPTIONS for f in getattr(args, option[2:].replace("-", "_")) or []]
    try:
        if args.inputs:
            for option, names in bundle_inputs(args.inputs).items():
                attr = option[2:].replace("-", "_")
                setattr(args, attr, names + (getattr(args, attr) or []))
    except InputError as e:
        print(f"make_table.py: {e}", file=sys.stderr)
        return 2
    if not (args.key_store or args.paged_logits or args.topk or args.cpu):
        p.error("no benchmark results given")
    try:
        rows = merged(key_store_rows(args.key_store, torch_times(args.torch_key_path)) +
                      paged_logits_rows(args.paged_logits, torch_times(args.torch_paged_logits)) +
                      topk_rows(args.topk, torch_times(args.torch_topk)) + cpu_rows(args.cpu))
        peers = Peers(args.peers)
    except InputError as e:
        print(f"make_table.py: {e}", file=sys.stderr)
        return 2
    sources = ([args.inputs] if args.inputs else []) + explicit
    covered = lambda s: any(s == n or s.startswith(n + ("/" if "#" in n else "#")) for n in sources)  # noqa: E731
    sources += [s for s in dict.fromkeys(peers.implicit) if not covered(s)]
    table = markdown(rows, peers, sources)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(table)
    else:
        sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
