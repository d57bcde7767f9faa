"""dsa_fidelity.strategies (Hypothesis) against kernels with known bugs.

Each "kernel" below is the reference with one realistic bug: a scale amax floor of 1e-6
instead of the recipe's 1e-4 (only a row whose rotated amax falls below 1e-4 shows it),
pages written in position order ignoring the page table, a top-K that breaks ties toward
the higher index. The strategies must find each bug within their budget and shrink it to a
small case; 200 Gaussian cases of the kind a hand-written test draws (torch.randn-like rows,
in-order pages, distinct scores) must find none of them, which is what the strategies are
for. And every input they draw is one the reference takes for every preset with a store.
Run by CTest (python_package) with the package on PYTHONPATH.
"""

import json

import numpy as np
import pytest

# Not importorskip: scripts/setup.sh installs python3-hypothesis, and a missing one must
# fail this suite rather than skip it unseen.
from hypothesis import HealthCheck, find, given, settings

import dsa_fidelity as d
from dsa_fidelity.strategies import key_inputs, score_rows

RECIPE = "sglang-v4-fp8"
QUIET = settings(database=None, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _with_field(recipe, path, value):
    j = json.loads(d.recipe(recipe).to_json())
    node = j
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    j["name"] = f"{recipe}-{path[-1]}-{value}"
    return d.Recipe.from_json(j)


AMAX_FLOOR_BUG = _with_field(RECIPE, ["key_quant", "amax_floor"], 1e-6)


def kernel_with_amax_floor_bug(inputs):
    return d.key_cache(inputs, recipe=AMAX_FLOOR_BUG)


def kernel_ignoring_the_page_table(inputs):
    """Writes token t of sequence s at page s * pages_per_sequence + position / P: right
    exactly when the page table is that (in order, no gaps)."""
    if inputs.page_table is None:
        return d.key_cache(inputs, recipe=RECIPE)
    table = np.asarray(inputs.page_table)
    in_order = np.arange(table.size, dtype=np.int32).reshape(table.shape)
    return d.key_cache(d.KeyInputs(**dict(inputs.__dict__, page_table=in_order,
                                          num_pages=max(int(inputs.num_pages), table.size))),
                       recipe=RECIPE)[:inputs.num_pages]


def topk_preferring_higher_index(scores, valid, k):
    """The top-K with ties broken toward the higher index (a radix pass that keeps the last
    key it sees): the exact set, in a wrong order wherever selected keys tie."""
    out = np.full((scores.shape[0], k), -1, np.int32)
    for r, row in enumerate(scores):
        n = int(valid[r])
        reversed_order = np.argsort(-row[:n][::-1].astype(np.float64), kind="stable")
        out[r, :min(k, n)] = (n - 1 - reversed_order)[:k]
    return out


def cache_differs(kernel, inputs):
    return not d.compare_cache(kernel(inputs), inputs, RECIPE).passed


def gaussian_cases(count, seed=0):
    """What a hand-written test draws: torch.randn-like bf16 rows, in-order pages."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        tokens = int(rng.integers(1, 300))
        x = (rng.standard_normal((tokens, 128)).astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)
        pages = -(-tokens // 64)
        yield d.KeyInputs(x, np.ones(128, np.float32), None, np.arange(tokens, dtype=np.int32),
                          page_table=np.arange(pages, dtype=np.int32)[None, :], page_size=64, num_pages=pages)


@pytest.mark.parametrize("recipe", ["sglang-v4-fp8", "dsv32-ref", "sglang-v4-fp4", "vllm-v32", "dsv4-ref"])
def test_every_drawn_input_is_one_the_reference_takes(recipe):
    layer_norm = json.loads(d.recipe(recipe).to_json())["key_norm"]["kind"] == "layernorm"

    @settings(QUIET, max_examples=40)
    @given(key_inputs(page_sizes=(1, 16, 64, 256), max_len=200, norm_bias=layer_norm))
    def check(inputs):
        cache = d.key_cache(inputs, recipe=recipe)
        assert d.compare_cache(cache, inputs, recipe).passed
    check()


def test_a_wrong_amax_floor_is_found_and_shrunk_and_gaussian_rows_miss_it():
    assert not any(cache_differs(kernel_with_amax_floor_bug, i) for i in gaussian_cases(200))
    found = find(key_inputs(), lambda i: cache_differs(kernel_with_amax_floor_bug, i),
                 settings=settings(QUIET, max_examples=300))
    assert len(found.positions) == 1  # shrunk to one token whose row holds the floor


def test_an_ignored_page_table_is_found_and_gaussian_layouts_miss_it():
    assert not any(cache_differs(kernel_ignoring_the_page_table, i) for i in gaussian_cases(200))
    found = find(key_inputs(placement="page_table"), lambda i: cache_differs(kernel_ignoring_the_page_table, i),
                 settings=settings(QUIET, max_examples=300))
    assert len(found.positions) <= 2 * 64 + 1  # a sequence over two pages, the smallest that can show it


def test_ties_toward_the_higher_index_are_found_and_gaussian_scores_miss_them():
    k = 16
    rng = np.random.default_rng(1)
    for _ in range(200):
        scores = rng.standard_normal((4, 1024)).astype(np.float32)
        valid = np.full(4, 1024, np.int64)
        assert d.compare_topk(topk_preferring_higher_index(scores, valid, k), scores, k, valid_lengths=valid)

    def wrong(rows):
        scores, valid = rows
        return not d.compare_topk(topk_preferring_higher_index(scores, valid, k), scores, k, valid_lengths=valid)
    scores, valid = find(score_rows(k=k, max_length=256), wrong, settings=settings(QUIET, max_examples=300))
    assert scores.shape[0] == 1 and scores.shape[1] <= 2 * k  # one short row with a tie in it
