#!/usr/bin/env python3
"""python/dsa_capture.py: write captures, read them back with h5py, check bits and
attributes against fixtures/SCHEMA.md (schema 1). Runs under pytest or alone
(`python3 tests/python/test_capture.py`); exits 77 (CTest SKIP) without numpy / h5py
(dsaf_test_env.py).

With DSAF_FIXTURE_PROBE set to the dsaf_fixture_probe executable, every capture is also
loaded by the C++ validating loader (fixtures/fixture.h open_fixture).

test_slice_capture_sweep: The real-weights workflow of docs/capture.md, end to end, on a small V3.2-shaped layer:

  1. safetensors' own writer makes a checkpoint (F8_E4M3 wq_b / wk with F32 block scales,
     BF16 weights_proj, F32 k_norm) and its config.json;
  2. `dsa-fidelity slice` copies the layer's indexer into an HDF5 fixture;
  3. python/dsa_capture.py appends a sequence's hidden states (bf16 x, fp32 qr) to it in
     prefill-sized chunks;
  4. `dsa-fidelity inspect` validates the file (every schema rule, every checksum);
  5. `dsa-fidelity sweep --fixture` studies recipes on it: the exact recipe keeps every
     top-K against its own oracle, and the result names the fixture and the projection.

Needs safetensors and ml_dtypes too (the test venv has them)."""

import hashlib
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dsaf_test_env import executable, require  # noqa: E402

h5py, np, ml_dtypes, safetensors_numpy = require("h5py", "numpy", "ml_dtypes", "safetensors.numpy")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import dsa_capture  # noqa: E402

# A small model with the V3.2 structure.
SMALL = {"model_type": "deepseek_v32", "hidden_size": 256, "q_lora_rank": 128, "index_n_heads": 4,
         "index_head_dim": 128, "qk_rope_head_dim": 64, "index_topk": 16, "rope_theta": 10000.0,
         "rope_scaling": None}
TMP = tempfile.mkdtemp(prefix="dsa_capture_test_")


def bf16_bits(values):
    """Round-to-nearest-even fp32 -> bf16 bits, written independently of dsa_capture."""
    u = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def probe_load(path):
    probe = os.environ.get("DSAF_FIXTURE_PROBE")
    if not probe:
        return
    r = subprocess.run([probe, "load", path], capture_output=True, text=True)
    assert r.returncode == 0, f"the C++ loader rejects {path}:\n{r.stdout}{r.stderr}"


def check_dataset(d, dtype, shape, storage, raw):
    assert d.dtype == np.dtype(storage), (d.name, d.dtype)
    assert d.attrs["dtype"] == dtype
    assert list(d.attrs["shape"]) == list(shape)
    assert d.shape == tuple(shape)
    assert d.attrs["layout"] == "row_major"
    assert d.attrs["quant_block"] == "none"
    assert d.attrs["scale_fmt"] == "none"
    stored = d[()]
    assert np.array_equal(stored, raw), d.name
    assert d.attrs["sha256"] == hashlib.sha256(np.ascontiguousarray(raw).tobytes()).hexdigest()


def test_hidden_states_round_trip_bits_and_attributes():
    rng = np.random.default_rng(1)
    T = 5
    x = rng.standard_normal((T, 256)).astype(np.float32)
    qr = rng.standard_normal((T, 128)).astype(np.float32)
    xb = bf16_bits(x)  # x as the model holds it: bf16 bits
    path = os.path.join(TMP, "hidden.h5")
    dsa_capture.capture(path, layer=10, x=xb, qr=qr, positions=np.arange(T) + 3, model=SMALL,
                        source="test: hidden states", recipe="dsv32-ref", mode="w")
    with h5py.File(path, "r") as f:
        assert f.attrs["schema_version"] == 1
        assert f.attrs["kind"] == "activation_capture"
        assert f.attrs["synthetic"] == 0 and f.attrs["synthetic_label"] == ""
        assert f.attrs["hidden_size"] == 256 and f.attrs["index_n_heads"] == 4
        assert f.attrs["rope_scaling"] == "" and f.attrs["rope_theta"] == 10000.0
        assert f.attrs["generator"]
        g = f["activations/10"]
        assert sorted(g.keys()) == ["positions", "qr", "x"]
        check_dataset(g["x"], "bf16", (T, 256), "<u2", xb)
        check_dataset(g["qr"], "f32", (T, 128), "<f4", qr)
        check_dataset(g["positions"], "i32", (T,), "<i4", np.arange(T, dtype=np.int32) + 3)
        assert g["x"].attrs["recipe"] == "dsv32-ref" and g["x"].attrs["source"] == "test: hidden states"
    back = dsa_capture.read_capture(path, 10)
    assert np.array_equal(back["qr"], qr)
    assert np.array_equal(back["x"].view(np.uint32) >> 16, xb.astype(np.uint32))
    probe_load(path)


def test_projections_append_in_batches_and_keep_checksums():
    rng = np.random.default_rng(2)
    path = os.path.join(TMP, "projected.h5")
    qs, ks, ws = [], [], []
    for batch, T in enumerate((3, 1, 4)):
        q = rng.standard_normal((T, 4 * 128)).astype(np.float32)  # [T, H*D] is reshaped
        k = rng.standard_normal((T, 128)).astype(np.float32)
        w = rng.standard_normal((T, 4, 1)).astype(np.float32)  # [T, H, 1] is squeezed
        dsa_capture.capture(path, layer=0, q=q, k=k, weights=w, model=SMALL, source="test: batches",
                            synthetic_label="random normal test data", mode="w" if batch == 0 else "a")
        qs.append(q.reshape(T, 4, 128)), ks.append(k), ws.append(w.reshape(T, 4))
    with h5py.File(path, "r") as f:
        assert f.attrs["synthetic"] == 1
        g = f["activations/0"]
        check_dataset(g["q"], "f32", (8, 4, 128), "<f4", np.concatenate(qs))
        check_dataset(g["k"], "f32", (8, 128), "<f4", np.concatenate(ks))
        check_dataset(g["weights"], "f32", (8, 4), "<f4", np.concatenate(ws))
        check_dataset(g["positions"], "i32", (8,), "<i4", np.arange(8, dtype=np.int32))
    # Another process appending: the hash is recomputed from the file, not from memory.
    dsa_capture._hash_state.clear()
    dsa_capture.capture(path, layer=0, q=qs[0][:1], k=ks[0][:1], weights=ws[0][:1], model=SMALL,
                        source="test: batches", synthetic_label="random normal test data")
    with h5py.File(path, "r") as f:
        check_dataset(f["activations/0/k"], "f32", (9, 128), "<f4", np.concatenate(ks + [ks[0][:1]]))
    probe_load(path)


def test_two_layers_in_one_file():
    path = os.path.join(TMP, "two_layers.h5")
    x, qr = np.zeros((2, 256), np.float32), np.ones((2, 128), np.float32)
    dsa_capture.capture(path, layer=3, x=x, qr=qr, model=SMALL, source="t", mode="w")
    dsa_capture.capture(path, layer=12, x=x, qr=qr, model=SMALL, source="t")
    with h5py.File(path, "r") as f:
        assert sorted(f["activations"].keys()) == ["12", "3"]
    probe_load(path)


def test_appending_takes_the_files_model_facts():
    path = os.path.join(TMP, "facts.h5")
    x, qr = np.zeros((1, 256), np.float32), np.zeros((1, 128), np.float32)
    yarn = dict(SMALL, rope_scaling={"type": "yarn", "factor": 40})
    dsa_capture.capture(path, layer=0, x=x, qr=qr, model=yarn, source="t", mode="w")
    dsa_capture.capture(path, layer=0, x=x, qr=qr, source="t")  # the file's facts
    # rope_scaling is compared by meaning, not by its JSON text.
    dsa_capture.capture(path, layer=0, x=x, qr=qr, source="t",
                        model=dict(SMALL, rope_scaling='{ "factor": 40,  "type": "yarn" }'))
    with h5py.File(path, "r") as f:
        assert json.loads(f.attrs["rope_scaling"]) == {"type": "yarn", "factor": 40}
        assert list(f["activations/0/positions"][()]) == [0, 1, 2]
    probe_load(path)


def expect_error(kind, text, **kwargs):
    args = dict(layer=0, model=SMALL, source="t")
    args.update(kwargs)
    try:
        dsa_capture.capture(os.path.join(TMP, "errors.h5"), **args)
    except kind as e:
        assert text in str(e), (text, str(e))
        return
    raise AssertionError(f"no {kind.__name__} mentioning '{text}'")


def test_schema_violations_are_refused_before_writing():
    x, qr = np.zeros((2, 256), np.float32), np.zeros((2, 128), np.float32)
    expect_error(ValueError, "x and qr come together", x=x)
    expect_error(ValueError, "q, k and weights come together", q=np.zeros((2, 4, 128), np.float32),
                 k=np.zeros((2, 128), np.float32))
    expect_error(ValueError, "nothing to capture")
    expect_error(ValueError, "x: shape (2, 255)", x=np.zeros((2, 255), np.float32), qr=qr)
    expect_error(ValueError, "disagree on the token count", x=x, qr=np.zeros((3, 128), np.float32))
    bad = x.copy()
    bad[1, 7] = np.nan
    expect_error(ValueError, "x: element 263 is not finite", x=bad, qr=qr)
    expect_error(ValueError, "qr: element 0 is not finite", x=x, qr=np.full((2, 128), 0x7F80, np.uint16))
    expect_error(TypeError, "int32 array is not an activation", x=np.zeros((2, 256), np.int32), qr=qr)
    expect_error(ValueError, "positions has 3 entries", x=x, qr=qr, positions=[0, 1, 2])
    expect_error(ValueError, "keep increasing", x=x, qr=qr, positions=[4, 4])
    expect_error(ValueError, "model facts: 'hidden_size' is missing", x=x, qr=qr,
                 model={k: v for k, v in SMALL.items() if k != "hidden_size"})
    expect_error(ValueError, "source must say", x=x, qr=qr, source="")
    expect_error(ValueError, "model facts are needed to create a capture", x=x, qr=qr, model=None)
    # An existing file: other model facts, other datasets, other dtypes, going back in time.
    path = os.path.join(TMP, "errors.h5")
    dsa_capture.capture(path, layer=0, x=x, qr=qr, model=SMALL, source="t", mode="w")
    expect_error(ValueError, "model fact 'index_topk' is 16 in the file, 32 here", x=x, qr=qr,
                 model=dict(SMALL, index_topk=32))
    expect_error(ValueError, "synthetic_label is ''", x=x, qr=qr, synthetic_label="made up")
    expect_error(ValueError, "holds ['qr', 'x']", q=np.zeros((2, 4, 128), np.float32),
                 k=np.zeros((2, 128), np.float32), weights=np.zeros((2, 4), np.float32))
    expect_error(ValueError, "stored as f32, this batch is bf16", x=bf16_bits(x), qr=qr)
    expect_error(ValueError, "last stored 1, this batch starts at 0", x=x, qr=qr, positions=[0, 5])
    with h5py.File(path, "r") as f:  # nothing of the refused batches was written
        assert f["activations/0/x"].shape == (2, 256)


def test_torch_tensors_when_torch_is_installed():
    try:
        import torch
    except ImportError:
        print("  (torch not installed: torch conversion not exercised)")
        return
    path = os.path.join(TMP, "torch.h5")
    x = torch.randn(2, 256).to(torch.bfloat16)
    qr = torch.randn(2, 128, dtype=torch.float16)
    dsa_capture.capture(path, layer=1, x=x, qr=qr, positions=torch.tensor([7, 9]), model=SMALL,
                        source="t", mode="w")
    with h5py.File(path, "r") as f:
        g = f["activations/1"]
        assert g["x"].attrs["dtype"] == "bf16" and g["qr"].attrs["dtype"] == "f32"
        assert np.array_equal(g["x"][()], x.view(torch.int16).numpy().view(np.uint16))
        assert np.array_equal(g["qr"][()], qr.float().numpy())
        assert list(g["positions"][()]) == [7, 9]
    probe_load(path)


def test_default_model_facts_are_deepseek_v32():
    facts = dsa_capture._model_facts(dsa_capture.DEEPSEEK_V32)
    assert facts["hidden_size"] == 7168 and facts["q_lora_rank"] == 1536
    assert facts["index_n_heads"] == 64 and facts["index_topk"] == 2048
    assert json.loads(facts["rope_scaling"])["factor"] == 40


# ---- The real-weights workflow: slice -> capture -> inspect -> sweep --fixture -------------

PIPELINE_CONFIG = {"model_type": "deepseek_v32", "hidden_size": 256, "q_lora_rank": 128, "index_n_heads": 4,
          "index_head_dim": 128, "qk_rope_head_dim": 64, "index_topk": 16, "rope_theta": 10000.0,
          "rope_scaling": None, "num_hidden_layers": 1}
P = "model.layers.0.self_attn.indexer."


def fp8_weight(rng, rows, cols, sigma):
    """Codes and ue8m0 block scales of a weight ~ N(0, sigma^2), as DeepSeek stores them."""
    scale = np.float32(2.0 ** -8)
    grid = (-(-rows // 128), -(-cols // 128))
    codes = (rng.standard_normal((rows, cols)) * (sigma / scale)).astype(ml_dtypes.float8_e4m3fn)
    return codes, np.full(grid, scale, np.float32)


def write_checkpoint(folder, rng):
    os.makedirs(folder)
    t = {}
    t[P + "wq_b.weight"], t[P + "wq_b.weight_scale_inv"] = fp8_weight(rng, 4 * 128, 128, 0.09)
    t[P + "wk.weight"], t[P + "wk.weight_scale_inv"] = fp8_weight(rng, 128, 256, 0.0625)
    t[P + "k_norm.weight"] = (1 + 0.1 * rng.standard_normal(128)).astype(np.float32)
    t[P + "k_norm.bias"] = (0.1 * rng.standard_normal(128)).astype(np.float32)
    t[P + "weights_proj.weight"] = (0.0625 * rng.standard_normal((4, 256))).astype(ml_dtypes.bfloat16)
    safetensors_numpy.save_file(t, os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(PIPELINE_CONFIG, f)


def cli(*args):
    r = subprocess.run([executable("DSAF_CLI")] + list(args), capture_output=True, text=True)
    assert r.returncode == 0, f"dsa-fidelity {' '.join(args)} exited {r.returncode}:\n{r.stdout}{r.stderr}"
    return r.stdout


def test_slice_capture_sweep():
    rng = np.random.default_rng(7)
    tmp = tempfile.mkdtemp(prefix="dsaf_pipeline_")
    checkpoint, fixture = os.path.join(tmp, "ckpt"), os.path.join(tmp, "layer0.h5")
    write_checkpoint(checkpoint, rng)
    cli("slice", "--checkpoint", checkpoint, "--layers", "0", "--out", fixture)
    for _ in range(4):  # four prefill chunks of one sequence; positions continue
        x = rng.standard_normal((128, 256)).astype(ml_dtypes.bfloat16)
        qr = rng.standard_normal((128, 128)).astype(np.float32)
        dsa_capture.capture(fixture, layer=0, x=x, qr=qr, source="test_capture.py")
    assert "every checksum verified" in cli("inspect", fixture)
    out = os.path.join(tmp, "results")
    cli("sweep", "--recipes", "exact,dsv32-ref", "--context", "256,512", "--topk", "16", "--queries", "8",
        "--fixture", fixture, "--out", out)
    with open(os.path.join(out, "sweep.json")) as f:
        result = json.load(f)
    acts = result["activations"]
    assert acts["kind"] == "fixture" and acts["tokens"] == 512 and acts["num_heads"] == 4, acts
    assert acts["projection"]["q"] == "bf16" and acts["projection"]["weights"] == "fp32", acts
    rows = {(r["recipe"], r["context"]): r["metrics"] for r in result["rows"]}
    assert set(rows) == {("exact", 256), ("exact", 512), ("dsv32-ref", 256), ("dsv32-ref", 512)}, rows.keys()
    for context in (256, 512):
        assert rows[("exact", context)]["recall"]["worst"] == 1.0
        assert 0.5 < rows[("dsv32-ref", context)]["recall"]["mean"] <= 1.0
    print(f"  dsv32-ref recall@16 on the fixture: {rows[('dsv32-ref', 512)]['recall']['mean']:.4f} (512 tokens)")


if __name__ == "__main__":
    tests = [(name, fn) for name, fn in sorted(globals().items()) if name.startswith("test_") and callable(fn)]
    for name, fn in tests:
        print(name)
        fn()
    print(f"{len(tests)} tests passed")
