"""dsa_cache_capture: write a cache capture (fixtures/SCHEMA.md §10, kind "cache_capture"):
the key path's inputs as an engine fed them, where each token went, the RoPE table it used,
and the paged index-K cache bytes its kernel wrote, for `dsa-fidelity compare` and
`dsa-fidelity detect` (docs/capture.md "Cache captures"). numpy + h5py only; torch tensors
(CPU or CUDA) are copied to the host. Also reachable as dsa_capture.write_cache_capture.

    /                 schema_version, kind, engine, kernel, version, generator, synthetic,
                      synthetic_label[, recipe, notes]
    k                 bf16|f32 [T, 128]      before the norm
    positions         i32 [T]                any order, each < R
    norm_weight/bias  f32 [128]              optional
    slots             i64 [T]                page * page_size + offset; < 0: not written
      or seq          i32 [T] + page_tables i32 [S, stride]
    rope_cos/sin      f32 [R, 32]            the table as the engine used it
    cache             u8 [pages, page bytes] layout paged_index_k: page_size, key_format
    q_values, q_scales, weights, logits, topk_indices   optional, stored and not compared
Every dataset carries dtype, shape, layout, quant_block, scale_fmt, recipe, source, sha256.
"""

import hashlib
import os
import tempfile

import h5py
import numpy as np

from dsaf_arrays import SCHEMA_VERSION, check_finite, host_array, to_numpy

GENERATOR = "dsa_cache_capture.py (dsa-fidelity, schema 1)"

CACHE_CAPTURE_KIND = "cache_capture"
# Bytes per token of each paged index-K cache layout (reference/paged_cache.h).
CACHE_FORMATS = {"fp8_e4m3fn": 132, "bf16": 256, "fp4_e2m1": 68, "fp32": 512}


def _ints(name, value, rank, storage):
    a, dtype = host_array(value)
    if dtype is not None or a.dtype.kind not in "iu" or a.ndim != rank:
        raise ValueError(f"{name}: expected a rank-{rank} integer array, got {dtype or a.dtype} {a.shape}")
    info = np.iinfo(storage)
    if a.size and (a.min() < info.min or a.max() > info.max):
        raise ValueError(f"{name}: values do not fit {np.dtype(storage).name}")
    return np.ascontiguousarray(a, dtype=storage)


def _floats(name, value, shape):
    """fp32 values (bf16 widened exactly) of the given shape (None: any)."""
    a, dtype = to_numpy(value)
    if dtype == "bf16":
        a = (a.astype(np.uint32) << 16).view("<f4")
    if shape is not None and tuple(a.shape) != tuple(shape):
        raise ValueError(f"{name}: shape {tuple(a.shape)}, expected {tuple(shape)}")
    return np.ascontiguousarray(a)


def _output(name, value):
    """(storage array, schema dtype, logical shape) of an optional output: bf16 / fp8 bits as
    given; uint8 codes are f8_e4m3fn (q_values) or f8_e8m0 (q_scales); (array, "f4_e2m1")
    names packed e2m1 pairs; floats are f32, integers i32."""
    named = None
    if isinstance(value, tuple):
        value, named = value
    a, dtype = host_array(value)
    if named is not None:
        dtype = named
    elif dtype is None and a.dtype == np.uint8:
        dtype = "f8_e8m0" if name == "q_scales" else "f8_e4m3fn"
    elif dtype is None:
        dtype = "f32" if a.dtype.kind == "f" else "i32" if a.dtype.kind in "iu" else None
    storage = {"bf16": "<u2", "f8_e4m3fn": "|u1", "f8_e8m0": "|u1", "f4_e2m1": "|u1", "f32": "<f4", "i32": "<i4"}
    if dtype not in storage:
        raise TypeError(f"{name}: a {a.dtype} array has no schema dtype")
    a = np.ascontiguousarray(a, dtype=storage[dtype])
    shape = a.shape[:-1] + (2 * a.shape[-1],) if dtype == "f4_e2m1" else a.shape
    check_finite(name, a, dtype)
    return a, dtype, shape


def _check_outputs(out, tokens):
    shapes = {name: shape for name, (_, _, shape) in out.items()}
    rank = {"q_values": 3, "q_scales": 3, "weights": 2, "logits": 2, "topk_indices": 2}
    for name, shape in shapes.items():
        if len(shape) != rank[name] or shape[0] != tokens:
            raise ValueError(f"{name}: shape {shape}, expected rank {rank[name]} with {tokens} tokens first")
    heads = shapes["q_values"][1] if "q_values" in shapes else None
    if heads is not None and shapes["q_values"][2] != 128:
        raise ValueError(f"q_values: shape {shapes['q_values']}, expected [T, heads, 128]")
    if "q_scales" in shapes and (heads is None or shapes["q_scales"][1] != heads):
        raise ValueError("q_scales: needs q_values with the same heads")
    if "weights" in shapes and heads is not None and shapes["weights"][1] != heads:
        raise ValueError(f"weights: {shapes['weights'][1]} heads, q_values has {heads}")


def write_cache_capture(path, *, k, positions, cache, page_size, store_format, rope_cos, rope_sin,
                        slots=None, seq=None, page_tables=None, norm_weight=None, norm_bias=None,
                        q_values=None, q_scales=None, weights=None, logits=None, topk_indices=None,
                        engine=None, kernel=None, recipe=None, version="", synthetic_label="",
                        notes=None, generator=GENERATOR):
    """Writes a cache capture (fixtures/SCHEMA.md §10) atomically: every check passes before
    a temp file beside `path` is written and renamed over it.

    k [T, 128] (bf16 or float) before the norm; positions [T] any order; rope_cos, rope_sin
    [R, 32] as the engine used them; cache: the paged index-K buffer (uint8 any shape, whole
    pages of `store_format`, one of CACHE_FORMATS); slots [T] (slot = page * page_size +
    offset, negative = not written: SGLang's out_loc, vLLM's slot_mapping) or seq [T] +
    page_tables [S, stride]. Optional: norm_weight / norm_bias [128]; q_values [T, H, 128],
    q_scales [T, H, n], weights [T, H], logits [T, N], topk_indices [T, K] (stored, not
    compared). numpy arrays or torch tensors (any device). Raises ValueError / TypeError."""
    if store_format not in CACHE_FORMATS:
        raise ValueError(f"store_format {store_format!r} is not one of {sorted(CACHE_FORMATS)}")
    page_size = int(page_size)
    if page_size < 1 or page_size > 256 or page_size & (page_size - 1):
        raise ValueError("page_size must be a power of two in 1..256")
    key, key_dtype = to_numpy(k)
    key = key.reshape(-1, 128) if key.ndim >= 2 and key.shape[-1] == 128 else key
    if key.ndim != 2 or key.shape[1] != 128 or key.shape[0] < 1:
        raise ValueError(f"k: shape {key.shape}, expected [T, 128]")
    T = key.shape[0]
    data = {"k": (key, key_dtype), "positions": (_ints("positions", positions, 1, "<i4"), "i32")}
    cos = _floats("rope_cos", rope_cos, None)
    if cos.ndim != 2 or cos.shape[1] != 32 or cos.shape[0] < 1:
        raise ValueError(f"rope_cos: shape {cos.shape}, expected [R, 32]")
    data["rope_cos"], data["rope_sin"] = (cos, "f32"), (_floats("rope_sin", rope_sin, cos.shape), "f32")
    for name, value in (("norm_weight", norm_weight), ("norm_bias", norm_bias)):
        if value is not None:
            data[name] = (_floats(name, value, (128,)), "f32")
    if norm_bias is not None and norm_weight is None:
        raise ValueError("norm_bias needs norm_weight")
    raw, _ = host_array(cache)
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
    page_bytes = page_size * CACHE_FORMATS[store_format]
    if raw.size == 0 or raw.size % page_bytes:
        raise ValueError(f"cache: {raw.size} bytes is not a whole number of {page_bytes}-byte pages")
    data["cache"] = (raw.reshape(-1, page_bytes), "u8")
    num_slots = raw.size // page_bytes * page_size
    pos = data["positions"][0]
    if pos.shape != (T,) or pos.min() < 0 or pos.max() >= cos.shape[0]:
        raise ValueError(f"positions: need {T} entries in [0, {cos.shape[0]}) (the RoPE table's rows)")
    if (slots is None) == (seq is None and page_tables is None):
        raise ValueError("give slots, or seq and page_tables")
    if slots is not None:
        where = _ints("slots", slots, 1, "<i8")
        data["slots"] = (where, "i64")
    else:
        if seq is None or page_tables is None:
            raise ValueError("seq and page_tables come together")
        s, table = _ints("seq", seq, 1, "<i4"), _ints("page_tables", page_tables, 2, "<i4")
        data["seq"], data["page_tables"] = (s, "i32"), (table, "i32")
        entry = pos // page_size
        if s.shape != (T,) or s.min() < 0 or s.max() >= table.shape[0] or entry.max() >= table.shape[1]:
            raise ValueError("seq / page_tables: every token needs a row and an entry for its position")
        where = table[s, entry].astype(np.int64) * page_size + pos % page_size
    if where.shape != (T,) or where.max() >= num_slots:
        raise ValueError(f"slots: need {T} entries below {num_slots} (the cache's slots)")
    written = where[where >= 0]
    if np.unique(written).size != written.size:
        raise ValueError("slots: two tokens are written to one slot")
    out = {name: _output(name, v) for name, v in (("q_values", q_values), ("q_scales", q_scales),
           ("weights", weights), ("logits", logits), ("topk_indices", topk_indices)) if v is not None}
    _check_outputs(out, T)
    for name, (a, dtype) in data.items():
        check_finite(name, a, dtype)
    engine, kernel = engine or "unknown", kernel or "unknown"
    folder = os.path.dirname(os.path.abspath(path))
    fd, temp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".tmp-")
    os.close(fd)
    try:
        with h5py.File(temp, "w", libver=("v108", "v110"), track_order=False) as f:
            root = {"schema_version": np.int64(SCHEMA_VERSION), "kind": CACHE_CAPTURE_KIND, "engine": engine,
                    "kernel": kernel, "version": version, "generator": generator,
                    "synthetic": np.int64(1 if synthetic_label else 0), "synthetic_label": synthetic_label}
            root.update({"recipe": recipe} if recipe else {})
            root.update({"notes": notes} if notes else {})
            f.attrs.update(root)
            items = [(n, a, dt, a.shape) for n, (a, dt) in data.items()] + \
                    [(n, a, dt, shape) for n, (a, dt, shape) in out.items()]
            for name, a, dtype, shape in items:
                d = f.create_dataset(name, data=a, track_times=False)
                d.attrs.update({"dtype": dtype, "shape": np.asarray(shape, dtype=np.int64), "quant_block": "none",
                                "layout": "paged_index_k" if name == "cache" else "row_major", "scale_fmt": "none",
                                "recipe": (recipe or "") if name == "cache" or name in out else "",
                                "source": f"{engine} / {kernel}: {name}",
                                "sha256": hashlib.sha256(a.tobytes()).hexdigest()})
                if name == "cache":
                    d.attrs.update({"page_size": np.int64(page_size), "key_format": store_format})
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    finally:
        if os.path.exists(temp):
            os.remove(temp)
