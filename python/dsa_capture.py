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

`write_cache_capture` (dsa_cache_capture.py, re-exported here) writes the other kind, a
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

import h5py
import numpy as np

from dsaf_arrays import SCHEMA_VERSION, check_finite as _check_finite, to_numpy as _to_numpy

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

    arrays = {name: _to_numpy(value) for name, value in given.items()}
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
        _check_finite(name, a, dt)

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


# Cache captures (fixtures/SCHEMA.md §10): dsa_cache_capture.py, re-exported here.
from dsa_cache_capture import CACHE_FORMATS, write_cache_capture  # noqa: E402,F401
