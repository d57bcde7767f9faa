#!/usr/bin/env python3
"""Our safetensors reader and DeepSeek fp8 dequantisation against an independent writer.

The file is written by Hugging Face's own `safetensors` package (safetensors.numpy.save_file,
which names each tensor's dtype after numpy's dtype name, so ml_dtypes' float8_e4m3fn and
bfloat16 arrays become F8_E4M3 and BF16 tensors): a V3.2-style indexer layer with F8_E4M3
weights whose 128x128 block scales (F32 weight_scale_inv) have partial edge blocks, a BF16
weights_proj and F32 k_norm.
The C++ side (dsaf_fixture_probe: fixtures/safetensors.h SafetensorsFile,
dequantize_fp8_blocks, to_float) dumps fp32 values, and every value must equal, bit for
bit, numpy's dequantisation: e4m3fn code value (decoded here from the format's
definition, and checked against ml_dtypes) times its block's scale, one fp32 multiply.

Exits 77 (CTest SKIP) when numpy, safetensors or ml_dtypes is missing (dsaf_test_env.py:
scripts/test.sh installs the last two into a venv in the build folder).
"""

import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dsaf_test_env import executable, require  # noqa: E402

ml_dtypes, np, safetensors_numpy = require("ml_dtypes", "numpy", "safetensors.numpy")

P = "model.layers.0.self_attn.indexer."
BLOCK = 128


def e4m3fn_table():
    """The value of every e4m3fn code (OCP OFP8: 1 sign, 4 exponent bits with bias 7, 3
    mantissa bits; exponent 0 is subnormal; S.1111.111 is NaN; no infinity)."""
    table = np.empty(256, np.float32)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exponent, mantissa = (code >> 3) & 0xF, code & 0x7
        if exponent == 0xF and mantissa == 0x7:
            table[code] = np.nan
        elif exponent == 0:
            table[code] = sign * mantissa / 8.0 * 2.0 ** -6
        else:
            table[code] = sign * (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7)
    return table


def block_scales_full(scale, rows, cols):
    """Each weight element's scale: block (i // 128, j // 128) of the scale grid."""
    return np.repeat(np.repeat(scale, BLOCK, axis=0), BLOCK, axis=1)[:rows, :cols]


def make_layer(rng):
    """Codes, scales and the expected fp32 values of the test layer."""
    layer = {}
    nan_codes = {0x7F, 0xFF}
    finite_codes = np.array([c for c in range(256) if c not in nan_codes], np.uint8)
    for stem, (rows, cols) in {"wk": (128, 300), "wq_b": (256, 200)}.items():
        codes = rng.choice(finite_codes, size=(rows, cols)).astype(np.uint8)
        codes.reshape(-1)[:finite_codes.size] = finite_codes  # every finite code at least once
        grid = (-(-rows // BLOCK), -(-cols // BLOCK))
        # Powers of two (ue8m0, as V3.2 stores them) and, in the last block, a scale that is
        # not one, so that the product is rounded: the reader must do one fp32 multiply.
        scale = np.ldexp(np.ones(grid, np.float32), rng.integers(-12, 4, size=grid)).astype(np.float32)
        scale[-1, -1] = np.float32(0.0013)
        layer[stem] = (codes, scale)
    layer["weights_proj"] = rng.standard_normal((2, 300)).astype(np.float32)
    layer["k_norm.weight"] = (1 + 0.1 * rng.standard_normal(128)).astype(np.float32)
    layer["k_norm.bias"] = (0.1 * rng.standard_normal(128)).astype(np.float32)
    return layer


def bf16_bits(values):
    u = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_checkpoint(path, layer):
    """Written by safetensors itself: the header, offsets and dtype names are its own."""
    tensors = {P + "k_norm.weight": layer["k_norm.weight"], P + "k_norm.bias": layer["k_norm.bias"]}
    for stem in ("wk", "wq_b"):
        codes, scale = layer[stem]
        tensors[P + stem + ".weight"] = codes.view(ml_dtypes.float8_e4m3fn)
        tensors[P + stem + ".weight_scale_inv"] = scale
    tensors[P + "weights_proj.weight"] = bf16_bits(layer["weights_proj"]).view(ml_dtypes.bfloat16)
    safetensors_numpy.save_file(tensors, path, metadata={"format": "pt"})


def header_dtypes(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    return {k: v["dtype"] for k, v in header.items() if k != "__metadata__"}


def probe(*args):
    r = subprocess.run([executable("DSAF_FIXTURE_PROBE")] + list(args), capture_output=True, text=True)
    assert r.returncode == 0, f"dsaf_fixture_probe {' '.join(args)} failed:\n{r.stderr}"


def dumped(path, shape):
    return np.fromfile(path, dtype="<f4").reshape(shape)


def assert_bits_equal(name, ours, expected):
    assert ours.shape == expected.shape, (name, ours.shape, expected.shape)
    diff = np.flatnonzero(ours.view(np.uint32) != expected.view(np.uint32))
    assert diff.size == 0, (f"{name}: {diff.size} of {ours.size} values differ, first at flat index {diff[0]}: "
                            f"ours {ours.reshape(-1)[diff[0]]!r}, numpy {expected.reshape(-1)[diff[0]]!r}")
    print(f"  {name}: {ours.size} values bit-identical")


def test_roundtrip():
    table = e4m3fn_table()
    # Two independent decoders agree on every code.
    theirs = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    assert np.array_equal(table, theirs, equal_nan=True), "e4m3fn table disagrees with ml_dtypes"
    rng = np.random.default_rng(20260512)
    layer = make_layer(rng)
    tmp = tempfile.mkdtemp(prefix="dsaf_st_")
    path = os.path.join(tmp, "model.safetensors")
    write_checkpoint(path, layer)
    print(f"  written by safetensors {sys.modules['safetensors'].__version__} (ml_dtypes {ml_dtypes.__version__})")
    dtypes = header_dtypes(path)
    assert dtypes[P + "wk.weight"] == "F8_E4M3" and dtypes[P + "wq_b.weight"] == "F8_E4M3", dtypes
    assert dtypes[P + "wk.weight_scale_inv"] == "F32" and dtypes[P + "weights_proj.weight"] == "BF16", dtypes

    for stem in ("wk", "wq_b"):
        codes, scale = layer[stem]
        expected = table[codes] * block_scales_full(scale, *codes.shape)  # one fp32 multiply
        assert expected.dtype == np.float32
        out = os.path.join(tmp, stem + ".f32")
        probe("dequant", path, P + stem + ".weight", P + stem + ".weight_scale_inv", out)
        assert_bits_equal(stem, dumped(out, codes.shape), expected)

    out = os.path.join(tmp, "weights_proj.f32")
    probe("values", path, P + "weights_proj.weight", out)
    expected = (bf16_bits(layer["weights_proj"]).astype(np.uint32) << 16).view(np.float32)
    assert_bits_equal("weights_proj (bf16)", dumped(out, (2, 300)), expected)
    for name in ("k_norm.weight", "k_norm.bias"):
        out = os.path.join(tmp, name + ".f32")
        probe("values", path, P + name, out)
        assert_bits_equal(name, dumped(out, (128,)), layer[name])


if __name__ == "__main__":
    test_roundtrip()
    print("safetensors round trip passed")
