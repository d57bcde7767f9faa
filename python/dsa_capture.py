"""dsa_capture: write indexer activations of a live model into a dsa-fidelity fixture.

One function, `capture`, called inside an inference engine's indexer forward (see
docs/capture.md), appends the tokens of one sequence to an HDF5 activation capture
(fixtures/SCHEMA.md, schema_version 1, kind "activation_capture"):

    /                          root attributes: schema_version, kind, model facts
                               (model_type, hidden_size, q_lora_rank, index_n_heads,
                               index_head_dim, qk_rope_head_dim, index_topk, rope_theta,
                               rope_scaling), synthetic, synthetic_label, generator[, notes]
    /activations/<layer>/      one group per layer (decimal, no leading zeros)
        positions  i32  [T]            RoPE position of each token, increasing
        x          bf16|f32 [T, hidden]          input of wk and weights_proj (attn_norm output)
        qr         bf16|f32 [T, q_lora_rank]     input of wq_b (q_norm(wq_a(x)))
        q          bf16|f32 [T, H, head_dim]     wq_b(qr), BEFORE RoPE
        k          bf16|f32 [T, head_dim]        wk(x), BEFORE k_norm
        weights    bf16|f32 [T, H]               weights_proj(x), NOT scaled
    x and qr come together, and q, k and weights come together; a capture holds either
    pair or both.

Every dataset stores raw bits (bf16 as uint16, f32 as float32, i32 as int32, all
little-endian) with the attributes dtype, shape (logical), layout ("row_major"),
quant_block ("none"), scale_fmt ("none"), recipe, source and sha256 (hex digest of the
stored bytes). The C++ loader (fixtures/fixture.h open_fixture) checks all of it.

`write_cache_capture` (at the end of this file) writes the other kind, a
cache capture (SCHEMA.md §10): a key cache an engine's kernel wrote, with the inputs that
produced it, for `dsa-fidelity compare` (docs/capture.md "Cache captures").

Only numpy and h5py are needed. torch tensors are accepted without importing torch here:
a bf16 tensor is stored as its bits (tensor.view(torch.int16)), any other floating tensor
as fp32 (tensor.float()); it is copied to the CPU. numpy arrays: float32 is stored as f32,
uint16 is taken as bf16 bits, an ml_dtypes bfloat16 array as bf16, other floats as f32.
"""

import hashlib
import json
import os
import tempfile

import h5py
import numpy as np

# The host-array conversions are the dsa_fidelity package's; its pure-Python part imports
# without the compiled module, so python/ on sys.path is enough.
from dsa_fidelity import SCHEMA_VERSION, check_finite, host_array, to_numpy

KIND = "activation_capture"
GENERATOR = "dsa_capture.py (dsa-fidelity, schema 1)"

# DeepSeek V3.2 (docs/checkpoints.md §1, docs/numerics.md §1). Pass the model's own
# config (a dict or a transformers config object) when it is at hand.
DEEPSEEK_V32 = {
    "model_type": "deepseek_v32",
    "hidden_size": 7168,
    "q_lora_rank": 1536,
    "index_n_heads": 64,
    "index_head_dim": 128,
    "qk_rope_head_dim": 64,
    "index_topk": 2048,
    "rope_theta": 10000.0,
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                     "beta_fast": 32, "beta_slow": 1, "mscale": 1.0},
}

_INT_FACTS = ("hidden_size", "q_lora_rank", "index_n_heads", "index_head_dim",
              "qk_rope_head_dim", "index_topk")
_ACTIVATIONS = ("x", "qr", "q", "k", "weights")

# (path, dataset) -> (sha256 object, stored bytes, hex digest): lets an append extend the
# hash of what this process wrote instead of re-reading the whole dataset.
_hash_state = {}


def _model_facts(model):
    """The schema's root facts from a dict or a config object (attributes)."""
    def get(name):
        value = model.get(name) if isinstance(model, dict) else getattr(model, name, None)
        if value is None:
            raise ValueError(f"model facts: '{name}' is missing")
        return value

    facts = {"model_type": str(get("model_type"))}
    for name in _INT_FACTS:
        facts[name] = int(get(name))
    facts["rope_theta"] = float(get("rope_theta"))
    scaling = model.get("rope_scaling") if isinstance(model, dict) else getattr(model, "rope_scaling", None)
    facts["rope_scaling"] = "" if scaling is None else (scaling if isinstance(scaling, str)
                                                         else json.dumps(scaling, sort_keys=True))
    return facts


def _expected_shapes(facts, tokens, heads):
    return {"x": (tokens, facts["hidden_size"]),
            "qr": (tokens, facts["q_lora_rank"]),
            "q": (tokens, heads, facts["index_head_dim"]),
            "k": (tokens, facts["index_head_dim"]),
            "weights": (tokens, heads)}


def _sha256_of_dataset(dset):
    h = hashlib.sha256()
    rows = max(1, (8 << 20) // max(1, dset.dtype.itemsize * int(np.prod(dset.shape[1:], dtype=np.int64))))
    for start in range(0, dset.shape[0], rows):
        h.update(np.ascontiguousarray(dset[start:start + rows]).tobytes())
    return h


def _write_root(f, facts, synthetic_label, generator, notes):
    f.attrs["schema_version"] = np.int64(SCHEMA_VERSION)
    f.attrs["kind"] = KIND
    for name, value in facts.items():
        f.attrs[name] = np.int64(value) if name in _INT_FACTS else (
            np.float64(value) if name == "rope_theta" else value)
    f.attrs["synthetic"] = np.int64(1 if synthetic_label else 0)
    f.attrs["synthetic_label"] = synthetic_label
    f.attrs["generator"] = generator
    if notes:
        f.attrs["notes"] = notes


def _file_facts(path):
    """The model facts of an existing fixture; it must be schema 1 and a capture or a
    checkpoint slice (a slice may carry captures of its layers: /activations/<i> next to
    /layers/<i>, which is what `sweep --fixture` reads)."""
    with h5py.File(path, "r") as f:
        a = f.attrs
        if int(a.get("schema_version", -1)) != SCHEMA_VERSION or a.get("kind") not in (KIND, "checkpoint_slice"):
            raise ValueError(f"{path}: exists but is not a schema-{SCHEMA_VERSION} {KIND} or checkpoint_slice")
        facts = {"model_type": a["model_type"], "rope_theta": float(a["rope_theta"]),
                 "rope_scaling": a["rope_scaling"]}
        for name in _INT_FACTS:
            facts[name] = int(a[name])
        return facts, a["synthetic_label"]


def _same_facts(path, stored, given):
    for name, value in given.items():
        have = stored[name]
        if name == "rope_scaling":  # JSON texts: compare what they mean
            same = (json.loads(have) if have else None) == (json.loads(value) if value else None)
        else:
            same = have == value
        if not same:
            raise ValueError(f"{path}: model fact '{name}' is {have!r} in the file, {value!r} here")


def _check_compatible(group, name, array, dtype):
    """An existing dataset can take this batch: same dtype, same row shape."""
    if name not in group:
        return
    dset = group[name]
    if dset.attrs["dtype"] != dtype:
        raise ValueError(f"{dset.name}: stored as {dset.attrs['dtype']}, this batch is {dtype}")
    if dset.shape[1:] != array.shape[1:]:
        raise ValueError(f"{dset.name}: rows of shape {dset.shape[1:]}, this batch has {array.shape[1:]}")


def _append(group, name, array, dtype, attrs, key):
    """Creates or extends (along tokens) one dataset and refreshes shape and sha256."""
    if name not in group:
        row_bytes = array.dtype.itemsize * int(np.prod(array.shape[1:], dtype=np.int64))
        chunk_rows = max(1, min(array.shape[0], (1 << 20) // max(1, row_bytes)))
        dset = group.create_dataset(name, data=array, maxshape=(None,) + array.shape[1:],
                                    chunks=(chunk_rows,) + array.shape[1:])
        for attr, value in attrs.items():
            dset.attrs[attr] = value
        h = hashlib.sha256(array.tobytes())
    else:
        dset = group[name]
        state = _hash_state.get(key)
        stored_bytes = dset.size * dset.dtype.itemsize
        if state is not None and state[1] == stored_bytes and state[2] == dset.attrs["sha256"]:
            h = state[0].copy()
        else:
            h = _sha256_of_dataset(dset)  # written by another process: hash it again
        start = dset.shape[0]
        dset.resize(start + array.shape[0], axis=0)
        dset[start:] = array
        h.update(array.tobytes())
    dset.attrs["shape"] = np.asarray(dset.shape, dtype=np.int64)
    dset.attrs["sha256"] = h.hexdigest()
    _hash_state[key] = (h, dset.size * dset.dtype.itemsize, h.hexdigest())


def capture(path, *, layer, x=None, qr=None, q=None, k=None, weights=None, positions=None,
            model=None, source, recipe="", synthetic_label="", generator=GENERATOR,
            notes=None, mode="a"):
    """Appends one batch of tokens of one sequence to the capture at `path`.

    layer      decoder layer index (the group /activations/<layer>)
    x, qr      hidden states: x [T, hidden] (the input of wk and weights_proj) and
               qr [T, q_lora_rank] (the input of wq_b); pass both or neither
    q, k, weights  projections: q [T, H, head_dim] or [T, H*head_dim] before RoPE,
               k [T, head_dim] BEFORE k_norm, weights [T, H] (or [T, H, 1]) =
               weights_proj(x) before any scaling; pass all three or none
    positions  RoPE positions [T] (int); default: continue after the last stored one
               (0, 1, ... for a new group)
    model      model facts: a dict or config object with model_type, hidden_size,
               q_lora_rank, index_n_heads, index_head_dim, qk_rope_head_dim, index_topk,
               rope_theta, rope_scaling (e.g. DEEPSEEK_V32, or the HF config). Needed to
               create a file; for an existing one (a capture, or a checkpoint slice from
               `dsa-fidelity slice`) the file's facts are used and `model`, if given,
               must agree with them
    source     where the tensors come from, e.g. "sglang nsa_indexer layer 10, prompt 3"
    recipe     the engine's numeric recipe name, if known ("" otherwise)
    synthetic_label  non-empty marks the file synthetic (test data) and says how
    mode       "a": create or append (the same datasets and dtypes on every call);
               "w": truncate first

    Every call of one file must give the same set of datasets per layer, with the same
    dtypes; tokens are appended in order and positions must keep increasing. Raises
    ValueError / TypeError on anything the schema forbids, before writing.
    """
    if mode not in ("a", "w"):
        raise ValueError("mode must be 'a' or 'w'")
    if not source:
        raise ValueError("source must say where the activations come from")
    layer = int(layer)
    if layer < 0:
        raise ValueError("layer must be >= 0")
    exists = mode == "a" and os.path.exists(path)
    if exists:
        facts, stored_label = _file_facts(path)
        if model is not None:
            _same_facts(path, facts, _model_facts(model))
        if synthetic_label and synthetic_label != stored_label:
            raise ValueError(f"{path}: synthetic_label is {stored_label!r} in the file, {synthetic_label!r} here")
    elif model is None:
        raise ValueError("model facts are needed to create a capture (e.g. dsa_capture.DEEPSEEK_V32, "
                         "or the model's HF config)")
    else:
        facts = _model_facts(model)
    given = {name: value for name, value in
             (("x", x), ("qr", qr), ("q", q), ("k", k), ("weights", weights)) if value is not None}
    if ("x" in given) != ("qr" in given):
        raise ValueError("x and qr come together")
    projected = {"q", "k", "weights"} & given.keys()
    if projected and projected != {"q", "k", "weights"}:
        raise ValueError("q, k and weights come together")
    if not given:
        raise ValueError("nothing to capture: give x and qr, or q, k and weights")

    arrays = {name: to_numpy(value) for name, value in given.items()}
    tokens = {name: a.shape[0] if a.ndim else 0 for name, (a, _) in arrays.items()}
    if len(set(tokens.values())) != 1:
        raise ValueError(f"the batch's tensors disagree on the token count: {tokens}")
    T = next(iter(tokens.values()))
    if T < 1:
        raise ValueError("empty batch")
    head_dim = facts["index_head_dim"]
    heads = facts["index_n_heads"]
    if "q" in arrays:
        a, dt = arrays["q"]
        if a.ndim == 2 and a.shape[1] % head_dim == 0:
            a = a.reshape(T, a.shape[1] // head_dim, head_dim)
        arrays["q"] = (a, dt)
        heads = a.shape[1] if a.ndim == 3 else heads
        if heads > facts["index_n_heads"]:
            raise ValueError(f"q has {heads} heads, more than index_n_heads {facts['index_n_heads']}")
        w, wdt = arrays["weights"]
        if w.ndim == 3 and w.shape[2] == 1:
            arrays["weights"] = (w.reshape(T, w.shape[1]), wdt)
    want = _expected_shapes(facts, T, heads)
    for name, (a, dt) in arrays.items():
        if tuple(a.shape) != want[name]:
            raise ValueError(f"{name}: shape {tuple(a.shape)}, expected {want[name]}")
        check_finite(name, a, dt)

    if positions is not None:
        positions = np.asarray(positions.detach().cpu().numpy()
                               if type(positions).__module__.split(".")[0] == "torch" else positions).reshape(-1)
        if positions.shape[0] != T:
            raise ValueError(f"positions has {positions.shape[0]} entries for {T} tokens")
        if positions.dtype.kind not in "iu" or positions.min() < 0 or positions.max() > np.iinfo(np.int32).max:
            raise ValueError("positions must be non-negative integers that fit int32")
        if T > 1 and np.any(np.diff(positions.astype(np.int64)) <= 0):
            raise ValueError("positions must keep increasing (one sequence)")
        positions = positions.astype("<i4")

    def attrs_of(dtype):
        return {"dtype": dtype, "layout": "row_major", "quant_block": "none",
                "scale_fmt": "none", "recipe": recipe, "source": source}

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with h5py.File(path, "a" if exists else "w") as f:
        if not exists:
            _write_root(f, facts, synthetic_label, generator, notes)
        # Every check passes before the first byte is written.
        group = f.get(f"activations/{layer}")
        present = set(group.keys()) - {"positions"} if group is not None else set()
        if present and present != set(arrays):
            raise ValueError(f"{group.name}: holds {sorted(present)}, this batch gives {sorted(arrays)}")
        last = int(group["positions"][-1]) if group is not None and "positions" in group else -1
        pos = np.arange(last + 1, last + 1 + T, dtype="<i4") if positions is None else positions
        if pos[0] <= last:
            raise ValueError(f"positions must keep increasing (one sequence): last stored {last}, "
                             f"this batch starts at {int(pos[0])}")
        if group is not None:
            _check_compatible(group, "positions", pos, "i32")
            for name, (a, dt) in arrays.items():
                _check_compatible(group, name, a, dt)
        group = f.require_group("activations").require_group(str(layer))
        key = os.path.abspath(path)
        _append(group, "positions", pos, "i32", attrs_of("i32"), (key, group.name + "/positions"))
        for name, (a, dt) in arrays.items():
            _append(group, name, a, dt, attrs_of(dt), (key, group.name + "/" + name))


def read_capture(path, layer):
    """The datasets of /activations/<layer> as numpy arrays: bf16 widened to float32
    (exact), f32 and i32 as stored. For checks and notebooks."""
    out = {}
    with h5py.File(path, "r") as f:
        group = f["activations"][str(int(layer))]
        for name, dset in group.items():
            data = dset[()]
            if dset.attrs["dtype"] == "bf16":
                data = (data.astype(np.uint32) << 16).view(np.float32)
            out[name] = data
    return out


# ---- Cache captures ----------------------------------------------------------------------
# write_cache_capture: a cache capture (fixtures/SCHEMA.md §10, kind "cache_capture"):
# the key path's inputs as an engine fed them, where each token went, the RoPE table it used,
# and the paged index-K cache bytes its kernel wrote, for `dsa-fidelity compare` and
# `dsa-fidelity detect` (docs/capture.md "Cache captures"). numpy + h5py only; torch tensors
# (CPU or CUDA) are copied to the host.
#
#     /                 schema_version, kind, engine, kernel, version, generator, synthetic,
#                       synthetic_label[, recipe, notes]
#     k                 bf16|f32 [T, 128]      before the norm
#     positions         i32 [T]                any order, each < R
#     norm_weight/bias  f32 [128]              optional
#     slots             i64 [T]                page * page_size + offset; < 0: not written
#       or seq          i32 [T] + page_tables i32 [S, stride]
#     rope_cos/sin      f32 [R, 32]            the table as the engine used it
#     cache             u8 [pages, page bytes] layout paged_index_k: page_size, key_format
#     q_values, q_scales, weights, logits, topk_indices   optional, stored and not compared
# Every dataset carries dtype, shape, layout, quant_block, scale_fmt, recipe, source, sha256.

CACHE_GENERATOR = "dsa_capture.py write_cache_capture (dsa-fidelity, schema 1)"

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
                        notes=None, generator=CACHE_GENERATOR):
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
