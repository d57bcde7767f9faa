#!/usr/bin/env python3
"""python/dsa_capture.py write_cache_capture against the C++ side: files
it writes, from the shipped capture's inputs and reference bytes rearranged as an SGLang
call site (out_loc slot map, tokens in any order), a vLLM one (slot_mapping with -1
padding, fp32 keys, the query path's outputs) and a page-table one, are read back by h5py
bit for bit and accepted by `dsa-fidelity compare` (exit 0), a flipped byte is located
(exit 1), and bad inputs are refused before anything is written.

Exits 77 (CTest SKIP) without numpy / h5py, or when DSAF_CLI is unset (dsaf_test_env.py)."""

import hashlib
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
from dsaf_test_env import executable, require  # noqa: E402

h5py, np = require("h5py", "numpy")
import dsa_capture  # noqa: E402

SHIPPED = os.path.join(HERE, "..", "..", "fixtures", "data", "sglang_v4_fp8_cache_capture.h5")
TMP = tempfile.mkdtemp(prefix="dsaf_cache_capture_")
PAGE, TOKEN_BYTES = 64, 132


def shipped():
    with h5py.File(SHIPPED, "r") as f:
        return {name: f[name][()] for name in f}


def cli(*args):
    r = subprocess.run([executable("DSAF_CLI")] + list(args), capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def write(name, **kw):
    path = os.path.join(TMP, name)
    kw.setdefault("engine", "test_cache_capture.py")
    kw.setdefault("kernel", "shipped reference bytes, rearranged")
    dsa_capture.write_cache_capture(path, page_size=PAGE, store_format="fp8_e4m3fn", **kw)
    return path


def assert_compares(path, expect_rc=0, recipe="sglang-v4-fp8"):
    rc, out = cli("compare", "--capture", path, "--recipe", recipe)
    assert rc == expect_rc, f"compare exited {rc}:\n{out}"
    return out


def test_sglang_style_slot_map_in_any_order():
    d = shipped()
    order = np.random.default_rng(3).permutation(len(d["positions"]))  # a batch's token order
    path = write("sglang.h5", k=d["k"][order], positions=d["positions"][order].astype(np.int64),
                 cache=d["cache"].reshape(d["cache"].shape[0], PAGE, TOKEN_BYTES), rope_cos=d["rope_cos"],
                 rope_sin=d["rope_sin"], slots=d["slots"][order], norm_weight=d["norm_weight"],
                 recipe="sglang-v4-fp8")
    with h5py.File(path, "r") as f:
        assert f.attrs["kind"] == "cache_capture" and f.attrs["recipe"] == "sglang-v4-fp8"
        for name in ("k", "positions", "slots", "cache", "rope_cos", "rope_sin", "norm_weight"):
            stored = f[name][()]
            assert hashlib.sha256(stored.tobytes()).hexdigest() == f[name].attrs["sha256"], name
            assert list(f[name].attrs["shape"]) == list(stored.shape), name
        assert f["k"].dtype == np.uint16 and f["k"].attrs["dtype"] == "bf16"
        assert f["slots"].dtype == np.int64 and f["positions"].dtype == np.int32
        assert np.array_equal(f["k"][()], d["k"][order]) and np.array_equal(f["cache"][()], d["cache"])
        assert f["cache"].attrs["layout"] == "paged_index_k" and int(f["cache"].attrs["page_size"]) == PAGE
    assert "PASS byte-exact against sglang-v4-fp8" in assert_compares(path)
    rc, out = cli("detect", "--capture", path)
    assert rc == 0 and "byte-exact match: sglang-v4-fp8." in out, out


def test_vllm_style_slot_mapping_with_outputs():
    d = shipped()
    T = len(d["positions"])
    k32 = (d["k"].astype(np.uint32) << 16).view(np.float32)  # the same values as fp32
    assert (d["slots"] < 0).sum() == 8  # padded batch: slot_mapping -1
    path = write("vllm.h5", k=k32, positions=d["positions"], cache=d["cache"], rope_cos=d["rope_cos"],
                 rope_sin=d["rope_sin"], slots=d["slots"], norm_weight=d["norm_weight"],
                 q_values=np.zeros((T, 2, 128), np.uint8), q_scales=np.ones((T, 2, 1), np.float32),
                 weights=np.ones((T, 2), np.float32), logits=np.zeros((T, 16), np.float32),
                 topk_indices=np.full((T, 4), -1, np.int32))
    with h5py.File(path, "r") as f:
        assert f["k"].attrs["dtype"] == "f32" and f["q_values"].attrs["dtype"] == "f8_e4m3fn"
        assert "recipe" not in f.attrs
    out = assert_compares(path)
    assert "present but not compared: logits, q_scales, q_values, topk_indices, weights" in out, out


def test_page_tables_and_a_flipped_byte():
    d = shipped()
    live = d["slots"] >= 0
    slots, positions = d["slots"][live], d["positions"][live]
    T = len(slots)
    # One page-table row a token: the entry its position needs names its page; -1 elsewhere.
    tables = np.full((T, 20), -1, np.int32)
    tables[np.arange(T), positions // PAGE] = slots // PAGE
    assert np.array_equal(slots % PAGE, positions % PAGE)
    common = dict(k=d["k"][live], positions=positions, rope_cos=d["rope_cos"], rope_sin=d["rope_sin"],
                  seq=np.arange(T, dtype=np.int32), page_tables=tables, norm_weight=d["norm_weight"])
    assert_compares(write("tables.h5", cache=d["cache"], **common))
    cache = d["cache"].copy().reshape(-1)
    token = 500
    page, offset = divmod(int(slots[token]), PAGE)
    cache[page * PAGE * TOKEN_BYTES + PAGE * 128 + offset * 4 + 1] ^= 0x04  # its fp32 scale, byte 1
    out = assert_compares(write("flipped.h5", cache=cache, **common), expect_rc=1)
    where = f"First mismatch: token {token} (sequence {token}, position {positions[token]}), page {page} slot {offset}, scale"
    assert where in out, out


def test_bad_inputs_are_refused_before_writing():
    d = shipped()
    base = dict(k=d["k"], positions=d["positions"], cache=d["cache"], rope_cos=d["rope_cos"],
                rope_sin=d["rope_sin"], slots=d["slots"], norm_weight=d["norm_weight"])
    twice = d["slots"].copy()
    twice[1] = twice[0]
    beyond = d["positions"].copy()
    beyond[0] = len(d["rope_cos"])
    cases = [({"slots": twice}, "two tokens are written to one slot"),
             ({"positions": beyond}, "positions: need"),
             ({"rope_sin": d["rope_sin"][:-1]}, "rope_sin: shape"),
             ({"cache": d["cache"].reshape(-1)[:-1]}, "whole number"),
             ({"slots": None}, "give slots, or seq and page_tables"),
             ({"weights": np.ones((3, 2), np.float32)}, "weights: shape")]
    for change, message in cases:
        path = os.path.join(TMP, "refused.h5")
        try:
            dsa_capture.write_cache_capture(path, page_size=PAGE, store_format="fp8_e4m3fn",
                                            **{**base, **change})
        except (ValueError, TypeError) as e:
            assert message in str(e), (message, str(e))
        else:
            raise AssertionError(f"accepted: {change.keys()}")
        assert not os.path.exists(path) and not [n for n in os.listdir(TMP) if ".tmp-" in n]


if __name__ == "__main__":
    for name, test in sorted(globals().items()):
        if name.startswith("test_"):
            test()
            print(name)
    print("cache capture writer: every file accepted and compared by dsa-fidelity")
