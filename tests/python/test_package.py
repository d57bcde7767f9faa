"""The dsa_fidelity Python package (python/dsa_fidelity) against the C++ side it wraps.

Byte equality with the CLI (`dsa-fidelity compare` on a capture of the package's bytes, and
its located mismatch once a byte is flipped) and with the C++ reference alone
(dsaf_fixture_probe expected-cache: oracle::expected_cache on the same capture); every input
form (numpy float32, ml_dtypes bf16, uint16 bits, torch, DLPack, lists, non-contiguous);
every refusal (shape, dtype, big-endian, non-finite, out-of-range placement) as a ValueError
or TypeError naming the argument; top-K, metrics, detection and captures; the overhead of
the binding. Run by CTest (python_package) with PYTHONPATH=<build>/python, DSAF_CLI and
DSAF_FIXTURE_PROBE set.
"""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import dsa_fidelity as d

CLI = os.environ.get("DSAF_CLI", "")
PROBE = os.environ.get("DSAF_FIXTURE_PROBE", "")
needs_cli = pytest.mark.skipif(not (CLI and PROBE), reason="DSAF_CLI / DSAF_FIXTURE_PROBE not set (run by CTest)")


def random_inputs(seed, tokens=300, page_size=64, pages=16, paged=False, norm_bias=False):
    """Random key inputs: bf16-valued rows with outliers, positions of three sequences, the
    tokens scattered over a shuffled page pool (slots), or the same as page tables."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((tokens, 128), dtype=np.float32) * np.where(np.arange(128) % 29 == 3, 20, 1)
    x = ((x.astype(np.float32).view(np.uint32) + 0x8000) & 0xFFFF0000).view(np.float32)  # bf16 values
    weight = (1 + 0.2 * rng.standard_normal(128)).astype(np.float32)
    bias = (0.1 * rng.standard_normal(128)).astype(np.float32) if norm_bias else None
    pool = rng.permutation(pages).astype(np.int32)
    lens = [tokens // 3, tokens // 3, tokens - 2 * (tokens // 3)]
    per_seq = pages // 3
    table = pool[: 3 * per_seq].reshape(3, per_seq)
    seq = np.concatenate([np.full(n, s, np.int32) for s, n in enumerate(lens)])
    positions = np.concatenate([np.arange(n, dtype=np.int32) for n in lens])
    if paged:
        return d.KeyInputs(x, weight, bias, positions, page_table=table, seq=seq, page_size=page_size,
                           num_pages=pages)
    slots = table[seq, positions // page_size].astype(np.int64) * page_size + positions % page_size
    slots[::17] = -1  # padding tokens: not written
    return d.KeyInputs(x, weight, bias, positions, slots=slots, page_size=page_size, num_pages=pages)


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=120)


# ---- Recipes -----------------------------------------------------------------------------

def test_recipes_lists_the_presets_and_round_trips_json():
    names = d.recipes()
    assert "sglang-v4-fp8" in names and "sglang-v4-fp4" in names and "dsv32-ref" in names
    for name in names:
        r = d.Recipe.preset(name)
        assert d.Recipe.from_json(r.to_json()) == r
    with pytest.raises(ValueError, match="no-such"):
        d.Recipe.preset("no-such")
    dup = '{"name": "a", "name": "b"}'
    with pytest.raises(ValueError):
        d.Recipe.from_json(dup)


# ---- Key caches against the CLI and the C++ reference --------------------------------------

@needs_cli
@pytest.mark.parametrize("preset", ["sglang-v4-fp8", "sglang-v4-fp4", "dsv32-ref", "sglang-v4-bf16"])
@pytest.mark.parametrize("paged", [False, True])
def test_key_cache_is_byte_equal_to_the_cli_and_the_cpp_reference(tmp_path, preset, paged):
    inputs = random_inputs(7, paged=paged, norm_bias=d.Recipe.preset(preset).fields["key_norm"]["kind"] == "layernorm")
    cache = d.key_cache(inputs, recipe=preset)
    assert cache.dtype == np.uint8 and cache.shape[0] == 16
    capture = tmp_path / "c.h5"
    d.write_capture(capture, cache, inputs, engine="test", kernel="dsa_fidelity.key_cache", recipe=preset)
    # The C++ reference alone, on the capture the CLI reads.
    out = tmp_path / "expected.u8"
    r = run(PROBE, "expected-cache", str(capture), preset, str(out))
    assert r.returncode == 0, r.stderr
    assert np.array_equal(np.fromfile(out, np.uint8), cache.reshape(-1))
    # The CLI's verdict: pass, then the located first mismatch once a written byte flips.
    r = run(CLI, "compare", "--capture", str(capture), "--recipe", preset)
    assert r.returncode == 0, r.stdout + r.stderr
    slots = inputs.capture(preset).token_slots()
    token = int(np.flatnonzero(slots >= 0)[5])
    page, offset = divmod(int(slots[token]), inputs.page_size)
    flipped = cache.copy()
    value_bytes = {"fp8_e4m3fn": 128, "fp4_e2m1": 64, "bf16": 256}[d.Recipe.preset(preset).cache_format]
    flipped[page, offset * value_bytes + 3] ^= 0x01
    d.write_capture(capture, flipped, inputs, engine="test", kernel="flipped", recipe=preset)
    cli_json = tmp_path / "v.json"
    r = run(CLI, "compare", "--capture", str(capture), "--recipe", preset, "--json", str(cli_json))
    assert r.returncode == 1, r.stdout + r.stderr
    cli_first = json.loads(cli_json.read_text())["verdict"]["first_mismatch"]
    verdict = d.compare_cache(flipped, inputs, preset)
    assert not verdict and verdict.first is not None
    assert (verdict.first.token, verdict.first.page, verdict.first.slot, verdict.first.field) == (token, page, offset,
                                                                                               "value")
    for key in ("token", "page", "slot", "field", "element", "byte_offset", "expected_code", "actual_code"):
        assert getattr(verdict.first, key) == cli_first[key], key
    with pytest.raises(AssertionError, match=f"token {token}"):
        d.assert_cache_equal(flipped, inputs, preset)
    by_bytes = d.compare_cache(flipped, cache, preset, page_size=inputs.page_size)
    assert not by_bytes and by_bytes.mismatched_bytes == 1
    assert (by_bytes.first.page, by_bytes.first.slot, by_bytes.first.field) == (page, offset, "value")
    assert d.assert_cache_equal(cache, inputs, preset).passed


def test_slots_and_page_tables_place_the_same_bytes():
    by_table = random_inputs(3, paged=True)
    x, table, seq = by_table.x, np.asarray(by_table.page_table), np.asarray(by_table.seq)
    positions = np.asarray(by_table.positions)
    slots = table[seq, positions // 64].astype(np.int64) * 64 + positions % 64
    by_slots = d.KeyInputs(x, by_table.norm_weight, None, positions, slots=slots, num_pages=16)
    assert np.array_equal(d.key_cache(by_table, recipe="sglang-v4-fp8"), d.key_cache(by_slots, recipe="sglang-v4-fp8"))


def test_positional_signature_and_the_recipe_own_rope_table():
    i = random_inputs(5)
    a = d.key_cache(i.x, i.norm_weight, None, i.positions, i.slots, None, 64, "sglang-v4-fp8", num_pages=16)
    assert np.array_equal(a, d.key_cache(i, recipe="sglang-v4-fp8"))
    cap = i.capture("sglang-v4-fp8")
    table = np.concatenate([cap.rope_cos, cap.rope_sin], axis=1)  # one [R, 64] cos_sin_cache
    with_table = d.KeyInputs(i.x, i.norm_weight, None, i.positions, slots=i.slots, rope=table, num_pages=16)
    assert np.array_equal(a, d.key_cache(with_table, recipe="sglang-v4-fp8"))


# ---- Input forms ---------------------------------------------------------------------------

def with_x(inputs, x):
    return d.KeyInputs(x, inputs.norm_weight, inputs.norm_bias, inputs.positions, slots=inputs.slots,
                       page_size=inputs.page_size, num_pages=inputs.num_pages)


def test_bf16_from_ml_dtypes_from_bits_and_float32_values_agree():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    i = random_inputs(11)
    want = d.key_cache(i, recipe="sglang-v4-fp8")
    bits = (i.x.view(np.uint32) >> 16).astype(np.uint16)
    assert np.array_equal(d.key_cache(with_x(i, bits), recipe="sglang-v4-fp8"), want)
    assert np.array_equal(d.key_cache(with_x(i, bits.view(ml_dtypes.bfloat16)), recipe="sglang-v4-fp8"), want)
    assert i.capture("sglang-v4-fp8").k_is_bf16 is False
    assert with_x(i, bits).capture("sglang-v4-fp8").k_is_bf16 is True


def test_non_contiguous_lists_and_dlpack_inputs_give_the_same_bytes():
    i = random_inputs(13)
    want = d.key_cache(i, recipe="sglang-v4-fp4")
    wide = np.zeros((i.x.shape[0], 256), np.float32)
    wide[:, ::2] = i.x
    assert not wide[:, ::2].flags.c_contiguous
    assert np.array_equal(d.key_cache(with_x(i, wide[:, ::2]), recipe="sglang-v4-fp4"), want)
    listed = d.KeyInputs(i.x, list(i.norm_weight), None, list(i.positions), slots=list(i.slots), num_pages=16)
    assert np.array_equal(d.key_cache(listed, recipe="sglang-v4-fp4"), want)

    class DLPackOnly:  # a foreign array that speaks DLPack only
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__()

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    assert np.array_equal(d.key_cache(with_x(i, DLPackOnly(i.x)), recipe="sglang-v4-fp4"), want)


def test_torch_tensors_cpu_and_gpu():
    torch = pytest.importorskip("torch")
    i = random_inputs(17)
    want = d.key_cache(i, recipe="sglang-v4-fp8")
    t = torch.from_numpy(i.x).to(torch.bfloat16)
    assert np.array_equal(d.key_cache(with_x(i, t), recipe="sglang-v4-fp8"), want)
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for the GPU-tensor half")
    assert np.array_equal(d.key_cache(with_x(i, t.cuda()), recipe="sglang-v4-fp8"), want)


@pytest.mark.parametrize("change, error, names", [
    (dict(x=np.zeros((4, 64), np.float32)), ValueError, "x: shape"),
    (dict(x=np.zeros((4, 128), np.float64)), TypeError, "x: dtype float64"),
    (dict(x=np.zeros((4, 128), ">f4")), ValueError, "x: a big-endian"),
    (dict(x=np.array([["a"] * 128] * 4)), TypeError, "x: dtype"),
    (dict(x=np.full((4, 128), np.nan, np.float32)), ValueError, "finite"),
    (dict(positions=np.array([0, 1, 2], np.int32)), ValueError, "positions: shape"),
    (dict(positions=np.array([0, 1, -2, 3], np.int32)), ValueError, "positions: a negative"),
    (dict(positions=np.array([0.0, 1, 2, 3])), TypeError, "positions: dtype"),
    (dict(slots=np.array([0, 1, 2, 10**6], np.int64), num_pages=1), ValueError, "slot"),
    (dict(slots=np.array([0, 0, 1, 2], np.int64)), ValueError, "slot"),
    (dict(page_size=3), ValueError, "page_size: 3"),
    (dict(page_size="64"), TypeError, "page_size"),
    (dict(norm_weight=np.ones(64, np.float32)), ValueError, "norm_weight: shape"),
    (dict(norm_bias=np.ones(128, np.float32), norm_weight=None), ValueError, "norm_bias"),
    (dict(page_table=np.zeros((1, 1), np.int32)), ValueError, "exactly one"),
    (dict(num_pages=0), ValueError, "num_pages"),
])
def test_bad_inputs_raise_naming_the_argument(change, error, names):
    base = dict(x=np.ones((4, 128), np.float32), norm_weight=np.ones(128, np.float32), norm_bias=None,
                positions=np.arange(4, dtype=np.int32), slots=np.arange(4, dtype=np.int64), page_size=64,
                num_pages=None)
    base.update(change)
    with pytest.raises(error, match=names):
        d.key_cache(d.KeyInputs(**base), recipe="sglang-v4-fp8")


def test_bad_cache_and_recipe_arguments():
    i = random_inputs(19)
    with pytest.raises(ValueError, match="cache: .* whole number"):
        d.compare_cache(np.zeros(100, np.uint8), i, "sglang-v4-fp8")
    with pytest.raises(TypeError, match="cache: dtype float32"):
        d.compare_cache(np.zeros(100, np.float32), i, "sglang-v4-fp8")
    with pytest.raises(ValueError, match="recipe"):
        d.key_cache(i)
    with pytest.raises(TypeError, match="recipe"):
        d.key_cache(i, recipe=3)


# ---- Query, scores, top-K -------------------------------------------------------------------

def test_query_shapes_and_index_scores_of_an_exact_recipe_match_fp64():
    rng = np.random.default_rng(23)
    q = rng.standard_normal((3, 8, 128)).astype(np.float32)
    w = rng.standard_normal((3, 8)).astype(np.float32)
    out = d.query(q, w, np.array([5, 9, 40], np.int32), "sglang-v4-fp8")
    assert out.values.shape == (3, 8, 128) and out.scales.shape == (3, 8, 4) and out.weights.shape == (3, 8)
    # dsv32-ref's arithmetic with fp32 storage on both sides and fp64 scores.
    fields = dict(d.Recipe.preset("dsv32-ref").fields, name="fp32-store-exact-score", score="exact")
    for side in ("key_quant", "query_quant"):
        fields[side] = dict(fields[side], format="fp32")
    exact = d.Recipe.from_json(fields)
    i = random_inputs(29, norm_bias=True)
    cache = d.key_cache(i, recipe=exact)  # fp32 keys, no scales
    slots = np.asarray(i.slots)
    slots = slots[slots >= 0]
    qx = d.query(q, w, np.array([5, 9, 40], np.int32), exact)
    scores = d.index_scores(qx, cache, slots, exact)
    keys = cache.reshape(-1).view("<f4").reshape(-1, 128)[slots]  # fp32 layout: values only
    qv = qx.values.reshape(-1).view("<f4").reshape(3, 8, 128).astype(np.float64)
    dots = np.einsum("thd,nd->thn", qv, keys.astype(np.float64))
    want = (np.maximum(dots, 0) * qx.weights.astype(np.float64)[:, :, None]).sum(axis=1)
    np.testing.assert_allclose(scores, want, rtol=1e-12, atol=1e-12)


def test_topk_is_the_lexicographic_order_and_compare_topk_classifies():
    rng = np.random.default_rng(31)
    scores = rng.standard_normal((4, 1000)).astype(np.float32)
    scores[1, :] = np.round(scores[1, :])  # ties at the cut
    idx = d.topk(scores, 64)
    for r in range(4):
        order = np.lexsort((np.arange(1000), -scores[r].astype(np.float64)))[:64]
        assert np.array_equal(idx[r], order)
    assert d.compare_topk(idx, scores, 64)
    wrong = idx.copy()
    wrong[0, 0] = int(np.argsort(scores[0])[0])  # the lowest score in place of the best
    v = d.compare_topk(wrong, scores, 64, contract="set")
    assert not v and [r["row"] for r in v.failing] == [0]
    assert v.failing[0]["misses"][0]["index"] == int(idx[0, 0]) and v.failing[0]["intruders"]
    tied = idx.copy()
    at_cut = np.flatnonzero(scores[1] == scores[1, idx[1, -1]])
    outside = [int(j) for j in at_cut if j not in idx[1]]
    if outside:
        tied[1, -1] = outside[0]  # another key of the cut score
        assert not d.compare_topk(tied, scores, 64, contract="set")
        assert d.compare_topk(tied, scores, 64, contract="set-ties")
    shuffled = idx[:, ::-1].copy()
    assert d.compare_topk(shuffled, scores, 64, contract="set") and not d.compare_topk(shuffled, scores, 64)


def test_topk_metrics():
    rng = np.random.default_rng(37)
    exact = rng.standard_normal((5, 2000))
    sel = d.topk(exact, 128)
    m = d.topk_metrics(sel, exact)
    assert m["recall"]["mean"] == 1.0 and m["changed"] == 0
    lost = sel.copy()
    lost[:, 0] = d.topk(-exact, 1)[:, 0]  # the worst key instead of the best
    m = d.topk_metrics(lost, exact)
    assert m["changed"] == 5 and m["recall"]["worst"] == pytest.approx(127 / 128)


# ---- Detection and captures -----------------------------------------------------------------

def test_detect_names_the_recipe_that_wrote_the_bytes():
    i = random_inputs(41)
    cache = d.key_cache(i, recipe="sglang-v4-fp4")
    found = d.detect(cache, i)
    assert "sglang-v4-fp4" in found.matches


def test_capture_round_trip(tmp_path):
    i = random_inputs(43, paged=True)
    cache = d.key_cache(i, recipe="sglang-v4-fp8")
    d.write_capture(tmp_path / "c.h5", cache, i, engine="test", kernel="k", recipe="sglang-v4-fp8")
    got_cache, got, attributes = d.read_capture(tmp_path / "c.h5")
    assert np.array_equal(got_cache, cache) and attributes["engine"] == "test"
    assert np.array_equal(d.key_cache(got, recipe="sglang-v4-fp8"), cache)
    (tmp_path / "bad.h5").write_bytes(b"not hdf5")
    with pytest.raises(ValueError, match="bad.h5"):
        d.read_capture(tmp_path / "bad.h5")


@needs_cli
def test_python_dash_m_forwards_to_the_cli():
    r = subprocess.run([sys.executable, "-m", "dsa_fidelity", "recipes"], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, DSAF_CLI=CLI))
    assert r.returncode == 0 and "sglang-v4-fp8" in r.stdout
    r = subprocess.run([sys.executable, "-m", "dsa_fidelity", "no-such-command"], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, DSAF_CLI=CLI))
    assert r.returncode == 2


# ---- Overhead -------------------------------------------------------------------------------

def test_key_cache_on_64k_tokens_costs_at_most_1_2x_the_cpp_reference_alone():
    """key_cache from numpy (argument checks, copies in and out, the verdict-free path)
    against oracle::expected_cache alone on a fresh copy of the same capture, fastest of 15
    each (a shared 2-core CI machine's noise needs that many draws for the minimum to settle).
    Building the capture (the inputs' one copy in: 32 MiB of keys, the 8 MiB cache) is a
    fixed cost that the reference alone is given ready; it is timed on its own and
    allowed beside the 1.2x (on a machine whose page faults are slow it is ~20% of the
    reference's time, which got 2x faster since the bound was set)."""
    tokens, pages = 65536, 1024
    rng = np.random.default_rng(47)
    x = rng.standard_normal((tokens, 128), dtype=np.float32)
    positions = np.arange(tokens, dtype=np.int32)
    slots = (rng.permutation(pages)[positions // 64].astype(np.int64) * 64 + positions % 64)
    i = d.KeyInputs(x, np.ones(128, np.float32), None, positions, slots=slots, num_pages=pages)
    native = d._native()
    recipe_json = d.recipe("sglang-v4-fp8").to_json()
    # One run per fresh capture, as key_cache gets (repeated runs on one capture reuse warm,
    # already-faulted memory that a call from Python never has); the three timings
    # alternate, so a busy machine slows each alike.
    reference = python = capture_build = float("inf")
    for _ in range(15):
        reference = min(reference, native.reference_seconds(i.capture("sglang-v4-fp8", rope_table=False),
                                                            recipe_json, 1))
        start = time.perf_counter()
        d.key_cache(i, recipe="sglang-v4-fp8")
        python = min(python, time.perf_counter() - start)
        start = time.perf_counter()
        capture = i.capture("sglang-v4-fp8", rope_table=False)
        capture_build = min(capture_build, time.perf_counter() - start)
        del capture
    print(f"\nkey_cache 64K tokens: Python {python * 1e3:.1f} ms, C++ reference alone {reference * 1e3:.1f} ms, "
          f"ratio {python / reference:.3f}; building the capture {capture_build * 1e3:.1f} ms")
    assert python <= 1.2 * reference + capture_build
