"""dsa_fidelity: the bit-exact reference, verdicts and captures of dsa-fidelity, for pytest.

Every number comes from the project's C++ libraries (the compiled module _dsa_fidelity, the
same code as the CLI); this file checks arguments, moves arrays and wraps verdicts. A key
kernel's cache against a preset, in a test::

    import dsa_fidelity as d
    inputs = d.KeyInputs(k, norm_weight, None, positions, slots=out_cache_loc, page_size=64)
    d.assert_cache_equal(kernel_cache, inputs, "sglang-v4-fp8")

Arrays: numpy arrays, torch tensors (CPU or CUDA: copied to the host) and any object with
``__dlpack__`` or the buffer protocol. bf16 travels as ``ml_dtypes.bfloat16``, as
``torch.bfloat16`` or as its uint16 bits; key and query inputs must be float32 or bf16
(anything else is refused rather than cast: a cast would verify other numbers than the
kernel's). Big-endian arrays are refused; non-contiguous ones are copied. A wrong shape,
dtype or value raises ValueError or TypeError naming the argument.

Caches are uint8 arrays [pages, page bytes] in the paged index-K layout of the recipe's key
format (fixtures/SCHEMA.md §10, reference/paged_cache.h): fp8 132 B a token, bf16 256,
fp4 68, fp32 512; a page holds page_size tokens' values, then their scales.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

__all__ = [
    "Recipe", "recipes", "recipe", "KeyInputs", "key_cache", "key_cache_builtin", "has_gpu", "query",
    "QueryOutput", "index_scores", "topk", "compare_cache", "assert_cache_equal", "CacheVerdict",
    "CacheMismatch", "compare_topk", "TopKVerdict", "topk_metrics", "detect", "Detection",
    "write_capture", "read_capture", "cli_path",
]

SCHEMA_VERSION = 1  # fixtures/SCHEMA.md

ArrayLike = Any
RecipeLike = Union[str, "Recipe"]


def _native():
    """The compiled module; an ImportError that says how to build it otherwise."""
    try:
        from . import _dsa_fidelity
    except ImportError as e:
        raise ImportError("dsa_fidelity's compiled module is not built: `pip install .` in a dsa-fidelity "
                          "checkout (README), or PYTHONPATH=<build>/python for a CMake build with "
                          "-DDSAF_BUILD_PYTHON=ON") from e
    return _dsa_fidelity


# ---- Host arrays ------------------------------------------------------------------------
# Shared with python/dsa_capture.py, the HDF5 writers for engines: those need only this
# part, which imports without the compiled module.

# Dtypes numpy lacks, as (torch view dtype, storage, schema dtype): they travel as their bits.
_BITS_DTYPES = {"bfloat16": ("int16", "<u2", "bf16"), "float8_e4m3fn": ("uint8", "|u1", "f8_e4m3fn"),
                "float8_e8m0fnu": ("uint8", "|u1", "f8_e8m0")}


def host_array(value: ArrayLike) -> Tuple[np.ndarray, Optional[str]]:
    """(numpy array, schema dtype or None): a torch tensor (on any device: copied to the
    host), a DLPack or buffer-protocol object, or an array-like. bf16 and fp8 come back as
    their bits with their schema dtype; anything else as numpy holds it, with None."""
    if type(value).__module__.split(".")[0] == "torch":
        t = value.detach()
        name = str(t.dtype).replace("torch.", "")
        if name in _BITS_DTYPES:
            import torch  # only when a torch tensor is given: torch is there already
            view, storage, dtype = _BITS_DTYPES[name]
            return t.contiguous().view(getattr(torch, view)).cpu().numpy().view(storage), dtype
        return np.ascontiguousarray(t.cpu().numpy()), None
    if not isinstance(value, np.ndarray) and hasattr(value, "__dlpack__"):
        value = np.from_dlpack(value)
    a = np.asarray(value)
    if a.dtype.name in _BITS_DTYPES:  # ml_dtypes
        _, storage, dtype = _BITS_DTYPES[a.dtype.name]
        return np.ascontiguousarray(a).view(storage), dtype
    return a, None


def to_numpy(value: ArrayLike) -> Tuple[np.ndarray, str]:
    """(array, schema dtype) of an activation: the raw storage array ('<u2' for bf16,
    '<f4' for f32)."""
    a, dtype = host_array(value)
    if dtype == "bf16" or (dtype is None and a.dtype == np.uint16):
        return np.ascontiguousarray(a, dtype="<u2"), "bf16"
    if dtype is not None or a.dtype.kind != "f":
        raise TypeError(f"a {dtype or a.dtype} array is not an activation (float, or uint16 bf16 bits)")
    return np.ascontiguousarray(a, dtype="<f4"), "f32"


def check_finite(name: str, array: np.ndarray, dtype: Optional[str]) -> None:
    """ValueError naming the first element of `array` (stored as `dtype`) that is not finite."""
    if dtype == "bf16":
        bad = (array & 0x7F80) == 0x7F80  # exponent all ones: Inf or NaN
    elif dtype == "f8_e4m3fn":
        bad = (array & 0x7F) == 0x7F  # S.1111.111 is NaN
    elif dtype == "f8_e8m0":
        bad = array == 0xFF
    elif dtype == "f32":
        bad = ~np.isfinite(array)
    else:
        return
    if bad.any():
        first = int(np.flatnonzero(bad.reshape(-1))[0])
        raise ValueError(f"{name}: element {first} is not finite (fixtures hold finite values)")


def _host(name: str, value: ArrayLike) -> Tuple[np.ndarray, Optional[str]]:
    try:
        a, dtype = host_array(value)
    except (TypeError, ValueError, BufferError) as e:
        raise TypeError(f"{name}: not an array ({e})") from None
    if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and sys.byteorder == "big"):
        raise ValueError(f"{name}: a big-endian array; pass it as little-endian (.astype('<{a.dtype.kind}"
                         f"{a.dtype.itemsize}'))")
    if a.dtype.kind in "OUSV" or a.dtype == np.bool_:
        raise TypeError(f"{name}: dtype {a.dtype} is not numeric")
    return a, dtype


def _shape_text(shape: Sequence[Optional[int]]) -> str:
    return "[" + ", ".join("N" if s is None else str(s) for s in shape) + "]"


def _check_shape(name: str, a: np.ndarray, shape: Sequence[Optional[int]]) -> None:
    if a.ndim != len(shape) or any(want is not None and got != want for got, want in zip(a.shape, shape)):
        raise ValueError(f"{name}: shape {list(a.shape)}, expected {_shape_text(shape)}")


def _values(name: str, value: ArrayLike, shape: Sequence[Optional[int]]) -> Tuple[np.ndarray, bool]:
    """(float32 values, was bf16) of a float32 or bf16 input: bf16 bits become their exact
    float32 values (bits << 16)."""
    a, dtype = _host(name, value)
    if dtype == "bf16" or (dtype is None and a.dtype == np.uint16):
        bits = np.ascontiguousarray(a).view("<u2") if a.dtype.itemsize == 2 else a.astype("<u2")
        out = (bits.astype("<u4") << 16).view("<f4")
        bf16 = True
    elif dtype is None and a.dtype == np.float32:
        out, bf16 = np.ascontiguousarray(a), False
    else:
        raise TypeError(f"{name}: dtype {dtype or a.dtype} is not float32 or bf16 (ml_dtypes.bfloat16, "
                        f"torch.bfloat16 or uint16 bits); convert it as the kernel receives it")
    _check_shape(name, out, shape)
    return np.ascontiguousarray(out, dtype="<f4"), bf16


def _floats(name: str, value: ArrayLike, shape: Sequence[Optional[int]]) -> np.ndarray:
    """float32 parameters (norm weights, RoPE rows, head weights): float32, or bf16 values."""
    return _values(name, value, shape)[0]


def _ints(name: str, value: ArrayLike, dtype: str, shape: Sequence[Optional[int]]) -> np.ndarray:
    a, schema = _host(name, value)
    if schema is not None or a.dtype.kind not in "iu":
        raise TypeError(f"{name}: dtype {schema or a.dtype} is not an integer dtype")
    _check_shape(name, a, shape)
    info = np.iinfo(dtype)
    if a.size and (a.min() < info.min or a.max() > info.max):
        raise ValueError(f"{name}: values outside {dtype}")
    return np.ascontiguousarray(a, dtype=np.dtype(dtype).newbyteorder("<"))


def _bytes(name: str, value: ArrayLike) -> np.ndarray:
    a, schema = _host(name, value)
    if a.dtype != np.uint8 and a.dtype != np.int8 and schema not in ("f8_e4m3fn", "f8_e8m0"):
        raise TypeError(f"{name}: dtype {schema or a.dtype} is not a byte array (uint8)")
    return np.ascontiguousarray(a).view(np.uint8).reshape(-1)


# ---- Recipes ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Recipe:
    """A recipe: every numeric choice of the key and query paths (docs/design.md). Compare
    recipes by their fields: ``Recipe.from_json(text).fields == Recipe.preset(name).fields``."""
    name: str
    fields: Dict[str, Any]

    @staticmethod
    def preset(name: str) -> "Recipe":
        """The preset `name`; ValueError listing the presets otherwise."""
        return Recipe.from_json(_native().preset_json(name))

    @staticmethod
    def from_json(text: Union[str, Dict[str, Any]]) -> "Recipe":
        """A recipe from its JSON (the format of `dsa-fidelity recipes --json`), validated
        by the C++ loader: unknown fields, bad values and duplicate keys raise ValueError."""
        if isinstance(text, dict):
            text = json.dumps(text)
        if not isinstance(text, str):
            raise TypeError(f"Recipe.from_json: a {type(text).__name__}, expected JSON text or a dict")
        fields = json.loads(_native().normalize_recipe(text))
        return Recipe(fields["name"], fields)

    def to_json(self) -> str:
        """Its JSON text, which from_json and `dsa-fidelity --recipe-file` read back."""
        return json.dumps(self.fields, indent=2)

    @property
    def cache_format(self) -> str:
        """The layout of its key cache: fp8_e4m3fn, bf16, fp4_e2m1 or fp32; "none" for the
        fp64 oracles, which store no cache."""
        return _native().cache_format_of(self.to_json())


def recipes(file: Optional[str] = None) -> List[str]:
    """The names of the presets, then of the recipes in `file` (a recipe JSON file)."""
    names = list(_native().preset_names())
    if file is not None:
        names += [json.loads(t)["name"] for t in _native().recipe_file_jsons(os.fspath(file))]
    return names


def recipe(name_or_recipe: RecipeLike, file: Optional[str] = None) -> Recipe:
    """A Recipe by preset name, by name from a recipe file, or the Recipe itself."""
    if isinstance(name_or_recipe, Recipe):
        return name_or_recipe
    if not isinstance(name_or_recipe, str):
        raise TypeError(f"recipe: a {type(name_or_recipe).__name__}, expected a recipe name or a Recipe")
    if file is not None:
        for text in _native().recipe_file_jsons(os.fspath(file)):
            if json.loads(text)["name"] == name_or_recipe:
                return Recipe.from_json(text)
    return Recipe.preset(name_or_recipe)


_as_recipe = recipe  # for functions whose `recipe` argument hides the function


def _recipe_json(r: RecipeLike) -> str:
    return recipe(r).to_json()


# ---- Key path inputs ----------------------------------------------------------------------

@dataclass
class KeyInputs:
    """What a key kernel was given, and where it wrote each token.

    x            [T, 128] float32 or bf16: the key rows before the norm
    norm_weight  [128] or None; norm_bias [128] or None (LayerNorm recipes need both)
    positions    [T] RoPE positions, any order
    slots        [T] slot of each token (page * page_size + offset; < 0: not written),
                 SGLang's out_cache_loc or vLLM's slot_mapping; or instead
    page_table   [S, P] page numbers with `seq` [T] (token t is position positions[t] of
                 sequence seq[t]; default: all tokens of sequence 0)
    rope         None (the recipe's own table), (cos, sin) each [R, 32], or one [R, 64]
                 array of cos then sin halves (SGLang's and vLLM's cos_sin_cache)
    num_pages    pages of the cache (default: the highest page written + 1)
    """
    x: ArrayLike
    norm_weight: Optional[ArrayLike] = None
    norm_bias: Optional[ArrayLike] = None
    positions: ArrayLike = None
    slots: Optional[ArrayLike] = None
    page_table: Optional[ArrayLike] = None
    page_size: int = 64
    rope: Optional[Any] = None
    seq: Optional[ArrayLike] = None
    num_pages: Optional[int] = None

    def capture(self, recipe_: RecipeLike, cache: Optional[ArrayLike] = None, *, rope_table: bool = True,
                **attributes: Any):
        """The native capture of these inputs for `recipe_`, with `cache` (default: zeros).
        Without `rope` it holds the recipe's own RoPE table (a file needs one), unless
        `rope_table` is False (then the reference computes it)."""
        n = _native()
        r = recipe(recipe_)
        c = n.Capture()
        c.engine, c.kernel, c.generator = "python", "dsa_fidelity", "dsa_fidelity (Python)"
        for key, value in attributes.items():
            setattr(c, key, value)
        x, c.k_is_bf16 = _values("x", self.x, (None, 128))
        c.k = x
        tokens = x.shape[0]
        if self.positions is None:
            raise ValueError("positions: required ([T] RoPE positions)")
        positions = _ints("positions", self.positions, "int32", (tokens,))
        if tokens and positions.min() < 0:
            raise ValueError("positions: a negative position")
        c.positions = positions
        if self.norm_weight is not None:
            c.norm_weight = _floats("norm_weight", self.norm_weight, (128,))
        if self.norm_bias is not None:
            if self.norm_weight is None:
                raise ValueError("norm_bias: given without norm_weight")
            c.norm_bias = _floats("norm_bias", self.norm_bias, (128,))
        if not isinstance(self.page_size, (int, np.integer)) or isinstance(self.page_size, bool):
            raise TypeError(f"page_size: a {type(self.page_size).__name__}, expected an int")
        page_size = int(self.page_size)
        if page_size < 1 or page_size > 256 or page_size & (page_size - 1):
            raise ValueError(f"page_size: {page_size} is not a power of two in 1..256")
        c.page_size = page_size
        if (self.slots is None) == (self.page_table is None):
            raise ValueError("slots / page_table: give exactly one of them")
        if self.slots is not None:
            slots = _ints("slots", self.slots, "int64", (tokens,))
            c.slots = slots
            highest = int(slots.max()) // page_size if tokens and slots.max() >= 0 else -1
        else:
            table = _ints("page_table", self.page_table, "int32", (None, None))
            seq = (np.zeros(tokens, np.int32) if self.seq is None
                   else _ints("seq", self.seq, "int32", (tokens,)))
            c.page_tables, c.seq = table, seq
            highest = int(table.max()) if table.size else -1
        fmt = r.cache_format
        if fmt == "none":
            raise ValueError(f"recipe: {r.name} stores no key cache (an fp64 oracle); pick a recipe with a store")
        c.format = fmt
        pages = self.num_pages if self.num_pages is not None else highest + 1
        if not isinstance(pages, (int, np.integer)) or isinstance(pages, bool) or pages < 1:
            raise ValueError(f"num_pages: {pages!r} is not a positive page count")
        if self.rope is None:
            if rope_table:
                rows = int(positions.max()) + 1 if tokens else 1
                c.rope_cos, c.rope_sin = n.rope_table(r.to_json(), rows)
        else:
            cos, sin = _rope(self.rope)
            c.rope_cos, c.rope_sin = cos, sin
        page_bytes = n.page_bytes(fmt, page_size)
        if cache is None:
            c.cache = np.zeros(int(pages) * page_bytes, np.uint8)
        else:
            data = _bytes("cache", cache)
            if data.size % page_bytes:
                raise ValueError(f"cache: {data.size} bytes is not a whole number of {page_bytes}-byte pages "
                                 f"({fmt}, page_size {page_size})")
            if self.num_pages is not None and data.size != int(pages) * page_bytes:
                raise ValueError(f"cache: {data.size // page_bytes} pages of {page_bytes} bytes, but num_pages is "
                                 f"{int(pages)}")
            c.cache = data
        return c


def _rope(rope: Any) -> Tuple[np.ndarray, np.ndarray]:
    if isinstance(rope, (tuple, list)) and len(rope) == 2:
        return _floats("rope[0] (cos)", rope[0], (None, 32)), _floats("rope[1] (sin)", rope[1], (None, 32))
    table = _floats("rope", rope, (None, 64))
    return np.ascontiguousarray(table[:, :32]), np.ascontiguousarray(table[:, 32:])


def _inputs(x: Any, **kwargs: Any) -> KeyInputs:
    if isinstance(x, KeyInputs):
        return x
    return KeyInputs(x, **kwargs)


def key_cache(x: Union[ArrayLike, KeyInputs], norm_weight: Optional[ArrayLike] = None,
              norm_bias: Optional[ArrayLike] = None, positions: Optional[ArrayLike] = None,
              slots: Optional[ArrayLike] = None, page_table: Optional[ArrayLike] = None, page_size: int = 64,
              recipe: Optional[RecipeLike] = None, rope: Any = None, *, seq: Optional[ArrayLike] = None,
              num_pages: Optional[int] = None) -> np.ndarray:
    """The key cache the reference writes under `recipe`: uint8 [pages, page bytes], zero
    wherever no token is written. `x` may be a KeyInputs (then only `recipe` is read)."""
    if recipe is None:
        raise ValueError("recipe: required (a preset name or a Recipe)")
    inputs = _inputs(x, norm_weight=norm_weight, norm_bias=norm_bias, positions=positions, slots=slots,
                     page_table=page_table, page_size=page_size, rope=rope, seq=seq, num_pages=num_pages)
    return _native().key_cache(inputs.capture(recipe, rope_table=False), _recipe_json(recipe))


def has_gpu() -> bool:
    """True when the module was built with our CUDA kernels and a GPU answers."""
    n = _native()
    if not n.has_device:
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def key_cache_builtin(inputs: KeyInputs, recipe: RecipeLike) -> np.ndarray:
    """The cache our built-in CUDA key kernel writes for `inputs` (page-table inputs only),
    for an example of a kernel under test. RuntimeError without a GPU build or a GPU."""
    n = _native()
    if not n.has_device:
        raise RuntimeError("key_cache_builtin: this dsa_fidelity was built without CUDA")
    return n.builtin_key_cache(inputs.capture(recipe), _recipe_json(recipe))


# ---- Verdicts -----------------------------------------------------------------------------

@dataclass
class CacheMismatch:
    """The first differing byte: its token (-1 when comparing bytes only), sequence and
    position, page and slot, field (value or scale), element, and both codes and values."""
    token: int
    sequence: int
    position: int
    page: int
    slot: int
    field: str
    element: int
    byte_offset: int
    expected_code: int
    actual_code: int
    expected_value: float
    actual_value: float

    def __str__(self) -> str:
        owner = f"token {self.token} (sequence {self.sequence}, position {self.position}), " if self.token >= 0 else ""
        return (f"{owner}page {self.page} slot {self.slot} {self.field}[{self.element}] (byte {self.byte_offset}): "
                f"expected code 0x{self.expected_code:x} ({self.expected_value:g}), "
                f"got 0x{self.actual_code:x} ({self.actual_value:g})")


@dataclass
class CacheVerdict:
    """A key cache against a recipe. `explaining`: the single recipe-field changes that
    reproduce the actual bytes exactly (the diagnosis), when it failed."""
    passed: bool
    recipe: str
    bytes_compared: int
    mismatched_bytes: int
    mismatched_tokens: int
    first: Optional[CacheMismatch]
    explaining: List[str]
    text: str
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)

    def __bool__(self) -> bool:
        return self.passed

    def locator(self) -> str:
        """One paragraph: what differs, where, and which recipe field would explain it."""
        lines = [f"key cache differs from recipe {self.recipe}: {self.mismatched_bytes} of {self.bytes_compared} "
                 f"bytes" + (f" in {self.mismatched_tokens} tokens" if self.mismatched_tokens else "")]
        if self.first is not None:
            lines.append(f"first mismatch: {self.first}")
        lines += [f"explained by one recipe field: {c}" for c in self.explaining]
        return "\n".join(lines)


def _mismatch(j: Optional[Dict[str, Any]]) -> Optional[CacheMismatch]:
    return None if j is None else CacheMismatch(**{k: j[k] for k in CacheMismatch.__dataclass_fields__})


def compare_cache(actual: ArrayLike, expected_or_inputs: Union[ArrayLike, KeyInputs],
                  recipe: Optional[RecipeLike] = None, *, page_size: int = 64) -> CacheVerdict:
    """`actual` (the kernel's cache bytes) against the reference for KeyInputs under
    `recipe` — byte for byte over the slots the tokens own — or against an `expected`
    cache of the same layout: `recipe` gives the layout, `page_size` the pages (a
    KeyInputs carries its own page size)."""
    if recipe is None:
        raise ValueError("recipe: required (a preset name or a Recipe)")
    if actual is None:  # not "no cache": capture() would compare the reference against zeros
        raise TypeError("actual: None, expected the kernel's cache bytes")
    n = _native()
    if isinstance(expected_or_inputs, KeyInputs):
        capture = expected_or_inputs.capture(recipe, cache=actual, rope_table=False)  # each recipe's own rows
        j = json.loads(n.compare_cache(capture, _recipe_json(recipe)))
        return CacheVerdict(j["pass"], j["recipe"], j["bytes_compared"], j["mismatched_bytes"],
                            j["mismatched_tokens"], _mismatch(j.get("first_mismatch")),
                            [c["change"] for c in j["explaining"]], j["text"], j)
    r = _as_recipe(recipe)
    j = json.loads(n.compare_cache_bytes(_bytes("expected", expected_or_inputs), _bytes("actual", actual),
                                         r.cache_format, _positive("page_size", page_size)))
    return CacheVerdict(j["pass"], r.name, j["bytes_compared"], j["mismatched_bytes"], 0,
                        _mismatch(j.get("first_mismatch")), [], j["text"], j)


def assert_cache_equal(actual: ArrayLike, expected_or_inputs: Union[ArrayLike, KeyInputs],
                       recipe: Optional[RecipeLike] = None, *, page_size: int = 64) -> CacheVerdict:
    """compare_cache, raising AssertionError with the locator when the bytes differ."""
    verdict = compare_cache(actual, expected_or_inputs, recipe, page_size=page_size)
    if not verdict.passed:
        raise AssertionError(verdict.locator())
    return verdict


@dataclass
class Detection:
    """Which recipes reproduce a cache exactly; else the closest and the single field
    changes that explain it."""
    matches: List[str]
    closest: Optional[str]
    explaining: List[str]
    text: str
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)


def detect(actual: ArrayLike, inputs: KeyInputs, recipes_: Optional[Sequence[RecipeLike]] = None) -> Detection:
    """The presets (or `recipes_`) whose reference reproduces `actual` for `inputs`."""
    candidates = [recipe(r) for r in (recipes_ if recipes_ is not None else recipes())]
    if not candidates:
        raise ValueError("recipes_: empty")
    n = _native()
    data = _bytes("actual", actual)
    # The layout: of the first candidate whose pages the bytes fill (all of inputs.num_pages
    # when it is given); the others of another layout are reported as skipped.
    layout = None
    for c in candidates:
        fmt = c.cache_format
        if fmt == "none":
            continue
        page_bytes = n.page_bytes(fmt, int(inputs.page_size))
        if (data.size == inputs.num_pages * page_bytes) if inputs.num_pages else data.size % page_bytes == 0:
            layout = c
            break
    if layout is None:
        raise ValueError(f"actual: {data.size} bytes fit the cache layout of none of the candidate recipes")
    j = json.loads(n.detect(inputs.capture(layout, cache=data, rope_table=False), [c.to_json() for c in candidates]))
    return Detection(j["matches"], j.get("closest"), [c["change"] for c in j["explaining"]], j["text"], j)


# ---- Query path, scores, top-K ------------------------------------------------------------

@dataclass
class QueryOutput:
    """The query path's stored heads: values uint8 [T, H, value bytes], scales uint8
    [T, H, scale bytes], folded head weights float32 [T, H]."""
    values: np.ndarray
    scales: np.ndarray
    weights: np.ndarray


def query(q: ArrayLike, wproj: ArrayLike, positions: ArrayLike, recipe: RecipeLike, rope: Any = None) -> QueryOutput:
    """The query path of `recipe` on q [T, H, 128] (float32 or bf16) with the weights_proj
    outputs wproj [T, H] and the positions [T]."""
    qv, _ = _values("q", q, (None, None, 128))
    w = _floats("wproj", wproj, qv.shape[:2])
    p = _ints("positions", positions, "int32", (qv.shape[0],))
    empty = np.zeros(0, np.float32)
    cos, sin = _rope(rope) if rope is not None else (empty, empty)
    values, scales, weights = _native().query(_recipe_json(recipe), qv, w, p, cos, sin)
    return QueryOutput(values, scales, weights)


def index_scores(q: QueryOutput, cache: ArrayLike, key_slots: ArrayLike, recipe: RecipeLike,
                 page_size: int = 64) -> np.ndarray:
    """Scores [T, N] of the query tokens against the keys at `key_slots` [N] of `cache`,
    under the recipe's score accumulation: float32 values (float64 for an exact recipe)."""
    if not isinstance(q, QueryOutput):
        raise TypeError("q: a QueryOutput (dsa_fidelity.query's result)")
    r = _as_recipe(recipe)
    weights = _floats("q.weights", q.weights, (None, None))
    check_finite("q.weights", weights, "f32")  # query's folded weights are finite
    slots = _ints("key_slots", key_slots, "int64", (None,))
    scores = _native().index_scores(r.to_json(), _bytes("q.values", q.values), _bytes("q.scales", q.scales),
                                    weights, _bytes("cache", cache), slots, _positive("page_size", page_size))
    return scores if r.fields.get("score") == "exact" else scores.astype(np.float32)


def _score_rows(name: str, scores: ArrayLike, valid_lengths: Optional[ArrayLike],
                verdict: bool = False) -> Tuple[np.ndarray, np.ndarray]:
    """(rows [R, N], valid lengths [R]); a verdict or metrics (`verdict`) needs R >= 1: over
    no rows it would pass, or average, nothing."""
    a, dtype = _host(name, scores)
    if dtype is not None or a.dtype.kind != "f":
        raise TypeError(f"{name}: dtype {dtype or a.dtype} is not a float dtype")
    if a.ndim == 1:
        a = a[None, :]
    _check_shape(name, a, (None, None))
    rows, n = a.shape
    if verdict and rows == 0:
        raise ValueError(f"{name}: no rows to judge")
    valid = (np.full(rows, n, np.int64) if valid_lengths is None
             else _ints("valid_lengths", valid_lengths, "int64", (rows,)))
    if rows and (valid.min() < 0 or valid.max() > n):
        raise ValueError(f"valid_lengths: values outside 0..{n}")
    return a, valid


def topk(scores: ArrayLike, k: int, valid_lengths: Optional[ArrayLike] = None) -> np.ndarray:
    """The reference top-K of each row of scores [R, N] (or [N]): int32 [R, k], higher
    scores first, ties to the lower index, -1 past the valid keys."""
    a, valid = _score_rows("scores", scores, valid_lengths)
    return _native().topk(np.ascontiguousarray(a, dtype="<f8"), valid, _positive("k", k))


def _positive(name: str, k: Any) -> int:
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise ValueError(f"{name}: {k!r} is not a positive int")
    return int(k)


@dataclass
class TopKVerdict:
    """Top-K rows judged under a contract (ordered, set, set-ties): per row pass,
    identical, order_only, tie swaps at the cut, misses (exact keys above the cut left
    out) and intruders (keys below the cut let in), each with index, score, rank, gap."""
    passed: bool
    contract: str
    rows: List[Dict[str, Any]]

    def __bool__(self) -> bool:
        return self.passed

    @property
    def failing(self) -> List[Dict[str, Any]]:
        return [r for r in self.rows if not r["pass"]]

    def locator(self) -> str:
        bad = self.failing
        head = f"top-K ({self.contract}): {len(bad)} of {len(self.rows)} rows fail"
        return "\n".join([head] + [f"row {r['row']}: {r['text']}" for r in bad[:4]])


def compare_topk(actual: ArrayLike, scores: ArrayLike, k: int, contract: str = "ordered",
                 padding: str = "minus_one", valid_lengths: Optional[ArrayLike] = None) -> TopKVerdict:
    """A kernel's top-K indices [R, k] against the float32 scores [R, N] it selected from.
    contract: ordered (the exact order), set (the exact set), set-ties (any keys tied at
    the cut may swap); padding: minus_one (entries past the valid keys are -1) or unread."""
    a, valid = _score_rows("scores", scores, valid_lengths, verdict=True)
    if a.dtype != np.float32:
        raise TypeError(f"scores: dtype {a.dtype}; the kernel's scores are float32")
    k = _positive("k", k)
    got = _ints("actual", actual, "int32", (a.shape[0], k)) if np.ndim(actual) == 2 else \
        _ints("actual", actual, "int32", (k,))
    rows = json.loads(_native().compare_topk(got.reshape(-1), np.ascontiguousarray(a), valid, k, contract, padding))
    return TopKVerdict(all(r["pass"] for r in rows), contract, rows)


def topk_metrics(selected: ArrayLike, exact_scores: ArrayLike, k: Optional[int] = None, page_size: int = 64,
                 valid_lengths: Optional[ArrayLike] = None) -> Dict[str, Any]:
    """Recall@K, Jaccard, tie-aware, value and attention-mass recall, Kendall tau and page
    recall of selections [R, k] against the exact top-K of exact_scores [R, N] (mean, p1,
    p50, worst over the rows), and `changed`: exact keys lost in all."""
    a, valid = _score_rows("exact_scores", exact_scores, valid_lengths, verdict=True)
    sel = _ints("selected", selected, "int32", (a.shape[0], None) if np.ndim(selected) == 2 else (None,))
    sel = sel.reshape(a.shape[0], -1)
    k = _positive("k", sel.shape[1] if k is None else k)
    return json.loads(_native().topk_metrics(np.ascontiguousarray(sel), np.ascontiguousarray(a, dtype="<f8"),
                                             valid, k, _positive("page_size", page_size)))


# ---- Captures -----------------------------------------------------------------------------

def write_capture(path: Union[str, os.PathLike], cache: ArrayLike, inputs: KeyInputs, *, engine: str, kernel: str,
                  version: str = "", recipe: str = "", notes: str = "", synthetic_label: Optional[str] = None) -> None:
    """A cache capture file (fixtures/SCHEMA.md §10) that `dsa-fidelity compare` and
    `detect` read, written atomically by the C++ writer. `recipe` is the recipe the
    engine claims (may be empty); the layout is taken from it, else from the bytes' size."""
    if not engine or not kernel:
        raise ValueError("engine and kernel: required (who wrote the cache)")
    layout = recipe or "sglang-v4-fp8"
    attributes: Dict[str, Any] = {"engine": engine, "kernel": kernel, "version": version, "recipe": recipe,
                                  "notes": notes, "generator": "dsa_fidelity.write_capture (Python)"}
    if synthetic_label is not None:
        attributes.update(synthetic=True, synthetic_label=synthetic_label)
    _native().write_capture(inputs.capture(layout, cache=cache, **attributes), os.fspath(path))


def read_capture(path: Union[str, os.PathLike]) -> Tuple[np.ndarray, KeyInputs, Dict[str, Any]]:
    """(cache [pages, page bytes], KeyInputs, attributes) of a cache capture, validated by
    the C++ loader (ValueError naming the file and the rule otherwise)."""
    c = _native().read_capture(os.fspath(path))
    x = c.k
    if c.k_is_bf16:
        x = (x.view("<u4") >> 16).astype("<u2")  # the bf16 bits the file holds
    slots = c.slots
    paged = slots.size == 0
    inputs = KeyInputs(x, c.norm_weight if c.norm_weight.size else None, c.norm_bias if c.norm_bias.size else None,
                       c.positions, slots=None if paged else slots, page_table=c.page_tables if paged else None,
                       page_size=c.page_size, rope=(c.rope_cos, c.rope_sin), seq=c.seq if paged else None,
                       num_pages=c.num_pages)
    attributes = {name: getattr(c, name) for name in ("engine", "kernel", "version", "recipe", "generator", "notes",
                                                       "synthetic", "synthetic_label", "format")}
    page_bytes = _native().page_bytes(c.format, c.page_size)
    return c.cache.reshape(-1, page_bytes), inputs, attributes


# ---- The CLI ------------------------------------------------------------------------------

def cli_path() -> str:
    """The dsa-fidelity executable: $DSAF_CLI, the one installed with this package, or the
    first on the PATH."""
    candidates = [os.environ.get("DSAF_CLI", ""), os.path.join(sysconfig.get_path("scripts"), "dsa-fidelity"),
                  shutil.which("dsa-fidelity") or ""]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise FileNotFoundError("the dsa-fidelity executable was not found (set DSAF_CLI, or `pip install .`)")
