"""Hostile arguments through the dsa_fidelity package: every public function, every
argument, replaced one at a time by a value a caller may pass by mistake.

The contract (python/native.cc, dsa_fidelity/__init__.py): a call returns, or raises
TypeError / ValueError naming what is wrong (AssertionError from assert_cache_equal's
verdict); it never kills the interpreter (a read past an array, an abort) and never lets
another exception escape (ZeroDivisionError, IndexError, KeyError, OverflowError, a C++
std::length_error's text). And a replacement that keeps the values (a strided view, a
list, bf16 from ml_dtypes or as uint16 bits) gives the baseline's answer exactly.

The cases run in a child interpreter, which prints each case's name before the call: a
crash is reported with the case that caused it. Run by CTest (python_package) with the
package on PYTHONPATH.
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import dsa_fidelity as d

RECIPE = "sglang-v4-fp8"
TOKENS, HEADS, KEYS, K = 8, 4, 64, 8


def _bf16_values(a):
    """float32 values that bf16 holds exactly (so that bf16 forms of them keep the values)."""
    return ((a.astype(np.float32).view(np.uint32) + 0x8000) & 0xFFFF0000).view(np.float32)


def baseline():
    """Valid arguments of every function, small enough for a few thousand calls."""
    rng = np.random.default_rng(5)
    x = _bf16_values(rng.standard_normal((TOKENS, 128)))
    weight = _bf16_values(1 + 0.2 * rng.standard_normal(128))
    positions = np.arange(TOKENS, dtype=np.int32) * 3
    slots = rng.permutation(128)[:TOKENS].astype(np.int64)
    inputs = dict(x=x, norm_weight=weight, norm_bias=None, positions=positions, slots=slots, page_size=64,
                  num_pages=2)
    cache = d.key_cache(d.KeyInputs(**inputs), recipe=RECIPE)
    q = _bf16_values(rng.standard_normal((2, HEADS, 128)))
    wproj = _bf16_values(rng.standard_normal((2, HEADS)))
    out = d.query(q, wproj, np.array([5, 9], np.int32), RECIPE)
    scores = rng.standard_normal((3, KEYS)).astype(np.float32)
    valid = np.array([KEYS, KEYS - 5, 1], np.int64)
    return dict(inputs=inputs, cache=cache, q=q, wproj=wproj, qpos=np.array([5, 9], np.int32), qout=out,
                key_slots=slots.copy(), scores=scores, selected=d.topk(scores.astype(np.float64), K, valid),
                valid=valid)


# Each function as a call on a flat dict of its arguments (arguments() gives the valid ones).
CALLS = {
    "key_cache": lambda a: d.key_cache(d.KeyInputs(**a["inputs"]), recipe=a["recipe"]),
    "compare_cache": lambda a: d.compare_cache(a["cache"], d.KeyInputs(**a["inputs"]), a["recipe"]),
    "compare_cache_bytes": lambda a: d.compare_cache(a["cache"], a["expected"], a["recipe"], page_size=a["page_size"]),
    "assert_cache_equal": lambda a: d.assert_cache_equal(a["cache"], d.KeyInputs(**a["inputs"]), a["recipe"]),
    "detect": lambda a: d.detect(a["cache"], d.KeyInputs(**a["inputs"]), [a["recipe"], "dsv32-ref"]),
    "query": lambda a: d.query(a["q"], a["wproj"], a["qpos"], a["recipe"], rope=a["rope"]),
    "index_scores": lambda a: d.index_scores(d.QueryOutput(a["values"], a["scales"], a["weights"]), a["cache"],
                                             a["key_slots"], a["recipe"], page_size=a["page_size"]),
    "topk": lambda a: d.topk(a["scores"], a["k"], valid_lengths=a["valid"]),
    "compare_topk": lambda a: d.compare_topk(a["selected"], a["scores"], a["k"], contract=a["contract"],
                                             padding=a["padding"], valid_lengths=a["valid"]),
    "topk_metrics": lambda a: d.topk_metrics(a["selected"], a["scores"], a["k"], page_size=a["page_size"],
                                             valid_lengths=a["valid"]),
    "recipe_from_json": lambda a: d.Recipe.from_json(a["json"]),
}


def arguments(b, function):
    """The valid arguments of `function`: a flat dict (key inputs nested under 'inputs')."""
    if function == "key_cache":
        return dict(recipe=RECIPE, inputs=dict(b["inputs"]))
    if function in ("compare_cache", "assert_cache_equal", "detect"):
        return dict(recipe=RECIPE, cache=b["cache"], inputs=dict(b["inputs"]))
    if function == "compare_cache_bytes":
        return dict(recipe=RECIPE, cache=b["cache"], expected=b["cache"].copy(), page_size=64)
    if function == "query":
        return dict(recipe=RECIPE, q=b["q"], wproj=b["wproj"], qpos=b["qpos"], rope=None)
    if function == "index_scores":
        return dict(recipe=RECIPE, cache=b["cache"], values=b["qout"].values, scales=b["qout"].scales,
                    weights=b["qout"].weights, key_slots=b["key_slots"], page_size=64)
    if function == "topk":
        return dict(scores=b["scores"].astype(np.float64), k=K, valid=b["valid"])
    if function == "compare_topk":
        return dict(selected=b["selected"], scores=b["scores"], k=K, contract="ordered", padding="minus_one",
                    valid=b["valid"])
    if function == "topk_metrics":
        return dict(selected=b["selected"], scores=b["scores"], k=K, valid=b["valid"], page_size=64)
    if function == "recipe_from_json":
        return dict(json=d.recipe(RECIPE).to_json())
    raise KeyError(function)


def _array_variants(a):
    """(label, value, keeps_values) replacements of an array argument."""
    a = np.asarray(a)
    out = [
        ("float64", a.astype(np.float64), False), ("int8", a.astype(np.int8) if a.dtype.kind != "f" else
                                                   np.zeros(a.shape, np.int8), False),
        ("bool", a.astype(bool), False), ("complex64", a.astype(np.complex64), False),
        ("object", a.astype(object), False), ("str", a.astype(str), False),
        ("0-d", np.asarray(a.reshape(-1)[0] if a.size else 0, a.dtype), False),
        ("empty", a[:0], False), ("one more row", np.concatenate([a, a[:1]]) if a.ndim and a.size else a, False),
        ("one row less", a[:-1], False), ("flattened", a.reshape(-1), False), ("extra axis", a[None], False),
        ("big-endian", a.astype(a.dtype.newbyteorder(">")) if a.dtype.itemsize > 1 else a, False),
        ("None", None, False), ("text", "not an array", False), ("dict", {"a": 1}, False),
    ]
    if a.ndim >= 1 and a.size:
        strided = np.repeat(a, 2, axis=0)[::2]  # a view with twice the row stride
        out.append(("strided view", strided, True))
        out.append(("list", a.tolist(), a.dtype.kind in "iu"))  # floats: a list is float64
    if a.dtype.kind == "f":
        for label, v in [("NaN", np.nan), ("+Inf", np.inf), ("-Inf", -np.inf), ("3e38", 3e38),
                         ("-0.0", -0.0), ("tiny", 1e-45)]:
            filled = a.copy()
            if filled.size:
                filled.reshape(-1)[filled.size // 2] = v
            out.append((label, filled, False))
        if a.dtype == np.float32 and np.array_equal(_bf16_values(a), a):
            out.append(("bf16 bits (uint16)", (a.view(np.uint32) >> 16).astype(np.uint16), True))
            try:
                import ml_dtypes
                out.append(("ml_dtypes.bfloat16", a.astype(ml_dtypes.bfloat16), True))
            except ImportError:
                pass
    if a.dtype.kind in "iu" and a.size:
        info = np.iinfo(a.dtype)
        for label, v in [("-1", -1), ("dtype min", info.min), ("dtype max", info.max), ("2^31-1", 2**31 - 1)]:
            if info.min <= v <= info.max:
                filled = a.copy()
                filled.reshape(-1)[filled.size // 2] = v
                out.append((label, filled, False))
        if a.min() >= 0:
            out.append(("uint64", a.astype(np.uint64), False))
    return out


SCALARS = [("0", 0), ("-1", -1), ("2^31", 2**31), ("2^63", 2**63), ("1.5", 1.5), ("True", True), ("'3'", "3"),
           ("None", None), ("nan", float("nan")), ("3 (np.int8)", np.int8(3)), ("list", [64])]
TEXTS = [("empty", ""), ("unknown", "no-such-thing"), ("bytes", b"ordered"), ("None", None), ("int", 3),
         ("NUL", "ordered\0"), ("long", "x" * 100000)]


def _json_variants(text):
    j = json.loads(text)
    out = [("truncated", text[: len(text) // 2]), ("not JSON", "{{"), ("deep", "[" * 5000 + "]" * 5000),
           ("array", "[]"), ("dict", dict(j)), ("empty dict", {}), ("bytes", text.encode())]
    for key in list(j)[:12]:
        for label, v in [("null", None), ("string", "x"), ("number", 1e308), ("list", [1])]:
            changed = dict(j)
            changed[key] = v
            out.append((f"{key}={label}", json.dumps(changed)))
    return out


def cases():
    """(function, argument path, label, value, keeps_values), in a fixed order."""
    b = baseline()
    out = []
    for function in CALLS:
        args = arguments(b, function)
        paths = [("inputs", k) for k in args["inputs"]] if "inputs" in args else []
        paths += [(k,) for k in args if k != "inputs"]
        for path in paths:
            value = args[path[0]] if len(path) == 1 else args["inputs"][path[1]]
            name = path[-1]
            if name == "json":
                variants = [(label, v, False) for label, v in _json_variants(value)]
            elif name in ("recipe", "contract", "padding"):
                variants = [(label, v, False) for label, v in TEXTS]
            elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
                variants = [(label, v, False) for label, v in SCALARS]
            elif value is None:
                variants = [("array", np.ones(128, np.float32), False), ("text", "x", False)]
            elif name == "rope":
                variants = []
            else:
                variants = _array_variants(value)
            out += [(function, path, label, v, keeps) for label, v, keeps in variants]
        if function == "query":  # a RoPE table of the wrong form
            out += [(function, ("rope",), label, v, False) for label, v in [
                ("short table", np.ones((3, 64), np.float32)), ("one half", (np.ones((20, 32), np.float32),)),
                ("NaN table", np.full((20, 64), np.nan, np.float32)), ("text", "table")]]
    return b, out


# The replacements each argument may take and still return; a refusal is always right, and
# a return outside this table fails (a call that accepted what it should refuse: a float
# page size read as int(1.5) = 1, truncated query heads read past their array, a NaN weight
# scored). Why each group is valid input:
SAME = {"strided view", "list", "bf16 bits (uint16)", "ml_dtypes.bfloat16"}  # the same values (checked equal)
BYTES = {"int8", "flattened", "extra axis", "big-endian", "dtype min", "dtype max"}  # bytes are read as bytes:
# any shape, uint8 or int8, no byte order; every code is a value the kernel may have written
INTS = {"int8", "uint64", "flattened"}  # integers of another width holding the same values
FINITE = {"3e38", "-0.0", "tiny"}  # finite floats are computed with, as the kernel would
INF = {"+Inf", "-Inf"}  # scores: infinities order like any other value
FAR = {"dtype max", "2^31-1"}  # a position up to 2^31 - 1 (RoPE rows are computed for the positions given)
KEY = {"inputs.x": SAME | FINITE, "inputs.norm_weight": SAME | FINITE | {"flattened"},
       "inputs.norm_bias": {"array"},  # a bias beside the weight
       "inputs.num_pages": {"None", "3 (np.int8)"},  # None: the highest page written + 1
       "inputs.positions": SAME | INTS | FAR,
       "inputs.slots": SAME | INTS | {"-1", "dtype min"},  # a slot < 0: a token not written
       "cache": BYTES | SAME}
MAY_RETURN = {
    "key_cache": KEY, "compare_cache": KEY, "assert_cache_equal": KEY,
    "detect": dict(KEY, **{"inputs.norm_weight": KEY["inputs.norm_weight"] | {"None"}}),  # recipes without it
    "compare_cache_bytes": {"cache": BYTES | SAME, "expected": BYTES | SAME},
    "query": {"q": SAME | FINITE, "wproj": SAME | FINITE, "qpos": SAME | INTS | FAR},
    "index_scores": {"cache": BYTES | SAME | {"one more row"},  # one page more
                     "values": BYTES | SAME, "scales": BYTES | SAME, "weights": SAME | FINITE,
                     "key_slots": SAME | INTS | {"empty", "one more row", "one row less"}},  # N keys, any N
    "topk": {"k": {"3 (np.int8)"}, "scores": SAME | FINITE | INF | {"float64"},
             "valid": SAME | INTS | {"None"}},  # None: every key valid
    "compare_topk": {"scores": SAME | FINITE | INF, "valid": SAME | INTS | {"None"},
                     # a kernel's entries: any int32 is a verdict (invalid or padding), not an error
                     "selected": SAME | {"int8", "-1", "dtype min", "dtype max", "2^31-1"}},
    "topk_metrics": {"k": {"None"}, "page_size": {"3 (np.int8)"}, "scores": SAME | FINITE | INF | {"float64"},
                     "selected": SAME | INTS | {"-1"}, "valid": SAME | INTS | {"None"}},
    "recipe_from_json": {"json": {"dict", "description=string", "name=string"}},
}


def _apply(args, path, value):
    args = dict(args, inputs=dict(args.get("inputs", {})))
    if len(path) == 1:
        args[path[0]] = value
    else:
        args["inputs"][path[1]] = value
    return args


def _same(x, y):
    if isinstance(x, np.ndarray):
        return isinstance(y, np.ndarray) and x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True)
    if hasattr(x, "__dataclass_fields__"):
        return type(x) is type(y) and all(_same(getattr(x, f), getattr(y, f)) for f in x.__dataclass_fields__
                                          if f != "raw")
    if isinstance(x, (list, tuple)):
        return len(x) == len(y) and all(_same(p, q) for p, q in zip(x, y))
    return x == y


def run_cases(first, count):
    """The child's loop: cases [first, first + count); one JSON line per case."""
    b, all_cases = cases()
    baselines = {f: CALLS[f](arguments(b, f)) for f in CALLS}
    for index in range(first, min(first + count, len(all_cases))):
        function, path, label, value, keeps = all_cases[index]
        argument = ".".join(path)
        print(json.dumps({"start": index, "case": f"{function}({argument} = {label})"}), flush=True)
        verdict = "returned"
        try:
            result = CALLS[function](_apply(arguments(b, function), path, value))
            if keeps and not _same(result, baselines[function]):
                verdict = "returned another answer than the baseline's for the same values"
            elif label not in MAY_RETURN[function].get(argument, ()):
                verdict = "returned: accepted a replacement it should refuse"
        except (TypeError, ValueError) as e:
            verdict = "refused" if str(e) else f"{type(e).__name__} without a message"
            if "vector::" in str(e) or "basic_string" in str(e) or "std::" in str(e):
                verdict = f"a C++ library error's text escaped: {e}"
        except AssertionError as e:
            verdict = "refused" if function == "assert_cache_equal" else f"AssertionError: {e}"
        except MemoryError:  # numpy's refusal of an allocation no machine has (num_pages = 2^31)
            verdict = "refused"
        except Exception as e:  # the contract's failure: another exception type
            verdict = f"{type(e).__name__}: {str(e)[:200]}"
        print(json.dumps({"done": index, "verdict": verdict}), flush=True)


def test_every_function_refuses_hostile_arguments_with_type_or_value_errors():
    _, all_cases = cases()
    assert len(all_cases) >= 500, len(all_cases)
    failures, counts, index = [], {"returned": 0, "refused": 0}, 0
    while index < len(all_cases):
        # One child for the rest of the cases; after a crash, a new one from the next case.
        proc = subprocess.run([sys.executable, __file__, str(index), str(len(all_cases))], capture_output=True,
                              text=True, timeout=900)
        started, finished = None, index
        for line in proc.stdout.splitlines():
            record = json.loads(line)
            if "start" in record:
                started = record
            else:
                finished = record["done"] + 1
                verdict = record["verdict"]
                if verdict in counts:
                    counts[verdict] += 1
                else:
                    failures.append(f"{started['case']}: {verdict}")
        assert started is not None, f"the cases did not start: {proc.stderr[-2000:]}"
        if finished < len(all_cases):
            where = started["case"] if started else f"case {index}"
            failures.append(f"{where}: the interpreter died (exit {proc.returncode}): {proc.stderr[-400:]}")
            finished = (started["start"] if started else index) + 1
        index = finished
    print(f"\n{len(all_cases)} hostile cases: {counts['refused']} refused, {counts['returned']} returned")
    assert not failures, f"{len(failures)} of {len(all_cases)} cases broke the contract:\n" + "\n".join(failures)
    assert counts["refused"] >= len(all_cases) // 2  # the harness is not passing everything through


def test_a_sparse_rope_position_gives_the_dense_tables_bytes():
    """The reference computes RoPE rows only for the positions it is given: a token at
    position 2^31 - 1 needs no 512 GiB table, and a row is the dense table's bit for bit."""
    b = baseline()
    inputs = dict(b["inputs"])
    dense = d.key_cache(d.KeyInputs(**inputs), recipe=RECIPE)
    cos, sin = d._native().rope_table(d.recipe(RECIPE).to_json(), int(inputs["positions"].max()) + 1)
    assert np.array_equal(d.key_cache(d.KeyInputs(**dict(inputs, rope=(cos, sin))), recipe=RECIPE), dense)
    far = dict(inputs, positions=np.full(TOKENS, 2**31 - 1, np.int32))
    assert d.key_cache(d.KeyInputs(**far), recipe=RECIPE).shape == dense.shape
    out = d.query(b["q"], b["wproj"], np.array([2**31 - 1, 7], np.int32), RECIPE)
    assert out.values.shape[:2] == (2, HEADS)


if __name__ == "__main__":
    run_cases(int(sys.argv[1]), int(sys.argv[2]))
