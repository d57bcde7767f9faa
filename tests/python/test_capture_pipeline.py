#!/usr/bin/env python3
"""The real-weights workflow of docs/capture.md, end to end, on a small V3.2-shaped layer:

  1. safetensors' own writer makes a checkpoint (F8_E4M3 wq_b / wk with F32 block scales,
     BF16 weights_proj, F32 k_norm) and its config.json;
  2. `dsa-fidelity slice` copies the layer's indexer into an HDF5 fixture;
  3. python/dsa_capture.py appends a sequence's hidden states (bf16 x, fp32 qr) to it in
     prefill-sized chunks;
  4. `dsa-fidelity inspect` validates the file (every schema rule, every checksum);
  5. `dsa-fidelity sweep --fixture` studies recipes on it: the exact recipe keeps every
     top-K against its own oracle, and the result names the fixture and the projection.

Exits 77 (CTest SKIP) without numpy, h5py, safetensors or ml_dtypes (dsaf_test_env.py)."""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
from dsaf_test_env import executable, require  # noqa: E402

ml_dtypes, np, safetensors_numpy, _ = require("ml_dtypes", "numpy", "safetensors.numpy", "h5py")
import dsa_capture  # noqa: E402

CONFIG = {"model_type": "deepseek_v32", "hidden_size": 256, "q_lora_rank": 128, "index_n_heads": 4,
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
        json.dump(CONFIG, f)


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
        dsa_capture.capture(fixture, layer=0, x=x, qr=qr, source="test_capture_pipeline.py")
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
    test_slice_capture_sweep()
    print("slice -> capture -> inspect -> sweep passed")
