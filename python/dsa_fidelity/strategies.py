"""Hypothesis strategies for a kernel author's property tests: key-path inputs in random
paged layouts, with the rows that expose rounding and edge-case bugs, and score rows that
expose top-K tie and radix bugs. Needs the `hypothesis` package (Debian python3-hypothesis);
the rest of dsa_fidelity does not.

    from hypothesis import given, settings
    import dsa_fidelity as d
    from dsa_fidelity.strategies import key_inputs, score_rows

    @given(key_inputs(page_sizes=[64]))
    def test_my_key_store(inputs):
        d.assert_cache_equal(my_kernel(inputs), inputs, "sglang-v4-fp8")

    @given(score_rows(k=512))
    def test_my_topk(rows):
        scores, valid = rows
        assert d.compare_topk(my_topk(scores, valid, 512), scores, 512, valid_lengths=valid)

Every draw shrinks toward a small readable case: one sequence of one token, Gaussian rows,
in-order pages, no padding tokens. The kinds of row that are not Gaussian are the ones a
random-normal test never draws: zero rows (the scale's amax floor), rows of bf16
subnormals (the norm's eps decides the magnitude), rows near the top of the range whose
squares still fit fp32, constant rows (the Hadamard puts the whole row in one channel),
single spikes, outlier channels, and random bf16 bit patterns over every exponent.
Activations are float32 values bf16 holds exactly: `torch.from_numpy(x).to(torch.bfloat16)`
loses nothing, and the reference sees the same values either way.
"""

from typing import Optional, Sequence, Tuple

import numpy as np
from hypothesis import strategies as st

from . import KeyInputs

ROW_KINDS = ("gaussian", "outliers", "zero", "subnormal", "large", "constant", "spike", "bf16_bits")
SCORE_KINDS = ("gaussian", "ties", "shared_high_bits", "infinities", "signed_zeros", "constant")


def _bf16_exact(values: np.ndarray) -> np.ndarray:
    """float32 values bf16 holds exactly (the low 16 bits of each float32 cleared)."""
    return (np.asarray(values, np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def activation_row(kind: str, seed: int) -> np.ndarray:
    """One row of 128 key-path inputs of `kind` (ROW_KINDS) from `seed`."""
    rng = np.random.default_rng(seed)
    if kind == "gaussian":
        v = rng.standard_normal(128)
    elif kind == "outliers":  # LLM-like: a few channels 20-100x the rest
        v = rng.standard_normal(128)
        channels = rng.choice(128, 4, replace=False)
        v[channels] *= rng.uniform(20, 100, 4)
    elif kind == "zero":
        v = np.where(rng.random(128) < 0.5, -0.0, 0.0)
    elif kind == "subnormal":  # bf16 subnormals: 2^-133 .. 2^-127
        v = rng.standard_normal(128) * 2.0 ** rng.integers(-133, -126)
    elif kind == "large":  # |x| < 2^60: the sum of 128 squares stays below fp32's 2^128
        v = rng.standard_normal(128) * 2.0 ** rng.integers(20, 58)
    elif kind == "constant":
        v = np.full(128, rng.standard_normal())
    elif kind == "spike":
        v = np.zeros(128)
        v[rng.integers(128)] = rng.standard_normal() * 2.0 ** rng.integers(-10, 10)
    elif kind == "bf16_bits":  # sign, any exponent up to 2^59, any mantissa
        exponent = rng.integers(0, 127 + 60, 128).astype(np.uint32)
        sign = rng.integers(0, 2, 128).astype(np.uint32)
        mantissa = rng.integers(0, 128, 128).astype(np.uint32)
        bits = (sign << 15) | (exponent << 7) | mantissa
        return (bits << 16).view(np.float32)
    else:
        raise ValueError(f"kind: {kind!r} is not one of {ROW_KINDS}")
    return _bf16_exact(v)


@st.composite
def page_layouts(draw, page_sizes: Sequence[int] = (64,), max_sequences: int = 3, max_len: int = 300,
                 spare_pages: int = 3):
    """(page_size, sequence lengths, page_table [S, P] padded with -1, num_pages): each
    sequence's pages drawn from one shuffled pool with up to `spare_pages` pages no sequence
    uses. Lengths favour whole pages and one token either side of them."""
    page_size = draw(st.sampled_from(list(page_sizes)))
    lengths = []
    for _ in range(draw(st.integers(1, max_sequences))):
        n = draw(st.integers(1, max_len))
        snap = draw(st.sampled_from([None, -1, 0, 1]))  # a whole number of pages, or one token either side
        if snap is not None:
            n = min(max(-(-n // page_size) * page_size + snap, 1), max_len)
        lengths.append(n)
    pages = [-(-n // page_size) for n in lengths]
    num_pages = sum(pages) + draw(st.integers(0, spare_pages))
    pool = draw(st.permutations(range(num_pages)))
    table = np.full((len(lengths), max(pages)), -1, np.int32)
    used = 0
    for s, count in enumerate(pages):
        table[s, :count] = pool[used:used + count]
        used += count
    return page_size, lengths, table, num_pages


@st.composite
def key_inputs(draw, page_sizes: Sequence[int] = (64,), max_sequences: int = 3, max_len: int = 300,
               placement: Optional[str] = None, norm_bias: bool = False, special_rows: int = 8) -> KeyInputs:
    """KeyInputs for a key store: a prefill (every position of every sequence) or a decode
    step (each sequence's last position), rows Gaussian but for up to `special_rows` tokens
    of another ROW_KINDS kind, a norm weight of ones or around 1 (and a bias when
    `norm_bias`), placed by page table and `seq` or, as SGLang's out_cache_loc / vLLM's
    slot_mapping, by `slots` with up to 3 padding tokens (slot -1, not written).
    `placement`: "page_table", "slots" or None (either)."""
    page_size, lengths, table, num_pages = draw(page_layouts(page_sizes, max_sequences, max_len))
    decode = draw(st.booleans())
    seq = np.concatenate([np.full(1 if decode else n, s, np.int32) for s, n in enumerate(lengths)])
    positions = np.concatenate([np.array([n - 1]) if decode else np.arange(n) for n in lengths]).astype(np.int32)
    tokens = len(positions)
    seed = draw(st.integers(0, 2**32 - 1))
    x = np.stack([activation_row("gaussian", seed + t) for t in range(tokens)])
    for t, kind, seed in draw(st.lists(st.tuples(st.integers(0, tokens - 1), st.sampled_from(ROW_KINDS),
                                                 st.integers(0, 2**32 - 1)), max_size=special_rows)):
        x[t] = activation_row(kind, seed)
    weight_seed = draw(st.one_of(st.none(), st.integers(0, 2**32 - 1)))
    weight = (np.ones(128, np.float32) if weight_seed is None else
              _bf16_exact(1 + 0.2 * np.random.default_rng(weight_seed).standard_normal(128)))
    bias = _bf16_exact(0.1 * np.random.default_rng(draw(st.integers(0, 2**32 - 1))).standard_normal(128)) \
        if norm_bias else None
    placement = placement or draw(st.sampled_from(["page_table", "slots"]))
    if placement == "page_table":
        return KeyInputs(x, weight, bias, positions, page_table=table, seq=seq, page_size=page_size,
                         num_pages=num_pages)
    if placement != "slots":
        raise ValueError(f"placement: {placement!r} is not 'page_table', 'slots' or None")
    slots = table[seq, positions // page_size].astype(np.int64) * page_size + positions % page_size
    padding = draw(st.integers(0, 3))
    if padding:  # tokens a batch carries but does not write: any row, any position
        x = np.concatenate([x, np.stack([activation_row("gaussian", 7 + p) for p in range(padding)])])
        positions = np.concatenate([positions, np.zeros(padding, np.int32)])
        slots = np.concatenate([slots, np.full(padding, -1, np.int64)])
    return KeyInputs(x, weight, bias, positions, slots=slots, page_size=page_size, num_pages=num_pages)


def score_row(kind: str, seed: int, length: int) -> np.ndarray:
    """One float32 score row of `kind` (SCORE_KINDS) from `seed`."""
    rng = np.random.default_rng(seed)
    if kind == "gaussian":
        row = rng.standard_normal(length)
    elif kind == "ties":  # a handful of distinct values: ties inside the top-K and at its cut
        row = rng.integers(0, 8, length).astype(np.float64)
    elif kind == "shared_high_bits":  # one 2^23-aligned block: only the low 10 mantissa bits differ
        return (np.uint32(0x3F800000) | rng.integers(0, 1024, length).astype(np.uint32)).view(np.float32)
    elif kind == "infinities":
        row = rng.standard_normal(length)
        row[rng.random(length) < 0.1] = np.inf
        row[rng.random(length) < 0.1] = -np.inf
    elif kind == "signed_zeros":  # -0.0 == +0.0: equal scores, ordered by index
        row = rng.choice(np.array([-0.0, 0.0, 1.0, -1.0]), length)
    elif kind == "constant":
        row = np.full(length, 1.5)
    else:
        raise ValueError(f"kind: {kind!r} is not one of {SCORE_KINDS}")
    return row.astype(np.float32)


@st.composite
def score_rows(draw, k: int = 512, max_rows: int = 4, max_length: int = 4096,
               kinds: Sequence[str] = SCORE_KINDS) -> Tuple[np.ndarray, np.ndarray]:
    """(scores float32 [R, N], valid_lengths int64 [R]) for a top-K of `k`: each row of one
    of `kinds`, its valid length below, at or above k (and N >= k where max_length allows)."""
    rows = draw(st.integers(1, max_rows))
    length = draw(st.integers(1, max_length))
    scores = np.zeros((rows, length), np.float32)
    valid = np.zeros(rows, np.int64)
    for r in range(rows):
        scores[r] = score_row(draw(st.sampled_from(list(kinds))), draw(st.integers(0, 2**32 - 1)), length)
        valid[r] = draw(st.one_of(st.just(length), st.integers(0, length),
                                  st.sampled_from([n for n in (k - 1, k, k + 1) if 0 <= n <= length] or [length])))
    return scores, valid
