"""An indexer kernel's test as an SGLang or vLLM developer writes it, with dsa-fidelity's
verdicts: build the inputs with torch, run the kernel, compare its cache byte for byte with
the preset it claims and its top-K with the exact selection.

The "kernel" here is dsa-fidelity's own CUDA key kernel when a GPU is present (swap in
yours: it only has to return the cache bytes), else the reference itself; the top-K kernel
is torch.topk. The numpy test below is the same without torch, for CPU-only machines.
Run: pytest python/examples (with dsa_fidelity installed: `pip install .`).
"""

import numpy as np
import pytest

import dsa_fidelity as d


def test_fused_key_store_matches_sglang_v4_fp8():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tokens, page_size = 300, 64
    k = torch.randn(tokens, 128).to(torch.bfloat16)                 # wk(x), before k_norm
    k_norm_weight = 1 + 0.1 * torch.randn(128)
    positions = torch.arange(tokens, dtype=torch.int32)
    page_table = torch.randperm(8, dtype=torch.int32)[None, :]      # one sequence, shuffled pages

    inputs = d.KeyInputs(k, k_norm_weight, None, positions, page_table=page_table, page_size=page_size)
    run_kernel = d.key_cache_builtin if d.has_gpu() else (lambda i, r: d.key_cache(i, recipe=r))
    cache = run_kernel(inputs, "sglang-v4-fp8")                     # the kernel under test
    d.assert_cache_equal(cache, inputs, "sglang-v4-fp8")            # the locator on failure

    scores = torch.randn(4, 8192)                                   # an indexer's logits rows
    selected = torch.topk(scores, 512).indices                      # the top-K kernel under test
    verdict = d.compare_topk(selected, scores, 512, contract="set")
    assert verdict, verdict.locator()


def test_cpu_only_key_cache_and_topk_with_numpy():
    rng = np.random.default_rng(0)
    k = rng.standard_normal((300, 128), dtype=np.float32)
    slots = rng.permutation(8 * 64)[:300]                           # SGLang's out_cache_loc
    inputs = d.KeyInputs(k, np.ones(128, np.float32), None, np.arange(300), slots=slots)
    d.assert_cache_equal(d.key_cache(inputs, recipe="sglang-v4-fp4"), inputs, "sglang-v4-fp4")

    scores = rng.standard_normal((4, 8192)).astype(np.float32)
    selected = np.argsort(-scores, axis=1, kind="stable")[:, :512]
    assert d.compare_topk(selected, scores, 512), "top-K differs from the exact order"
