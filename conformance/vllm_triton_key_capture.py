#!/usr/bin/env python3
"""Runs vLLM's production V3.2 index-key kernel, the Triton `_fused_norm_rope_kernel` of
the pinned sdist (conformance/upstream.lock), on random inputs on the GPU and writes what
it stored as a cache capture (fixtures/SCHEMA.md §10), for `dsa-fidelity compare`
(docs/upstream.md "Triton kernels").

    vllm_triton_key_capture.py UPSTREAM_SRC OUT.h5 [TOKENS [SEED [ROPE_ROWS [DUMP.npz]]]]

DUMP.npz, when given, also keeps the kernel's fp32 key after RoPE (`index_k_out`, the value
it quantises) with the inputs, for reading its arithmetic off the bits.

UPSTREAM_SRC is .deps/upstream/src (scripts/upstream.sh --fetch). No C adapter can call a
Triton kernel, and vLLM itself is not installed on the GPU host (torch and Triton are), so
the kernel module is loaded from the sdist with the five vLLM imports it names replaced by
the values they have on an H200 (below); the kernel's own source runs unchanged.

Inputs, as vLLM's DeepseekV32ForCausalLM feeds the kernel: the pre-norm key bf16 [T, 128];
LayerNorm weight and bias (fp32 tensors holding bf16 values, eps 1e-6); the RoPE table
cos | sin [R, 64] computed in fp32 and cast to bf16 (vLLM's torch.compile deployment);
NeoX pairing (index_rope_interleave = False, V3.2); the indexer cache [blocks, 64, 132]
uint8 (block size 64, fp32 scales after the block's values: not the shuffled layout, not
MX scales, which sm_90 does not use); a slot map with some -1 (padding) entries. The MLA
half of the same launch gets small dummy tensors and no cache (its entry stride is 0).
"""
import importlib.util
import math
import os
import sys
import types

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import dsa_capture  # noqa: E402

KERNELS = "vllm/vllm-0.33.0/vllm/models/deepseek_v32/common/kernels.py"
BLOCK = 64          # vLLM's indexer cache block size for V3.2
ROPE_ROWS = 65536   # RoPE table rows (default); positions are drawn below it
HEAD_DIM = 128


def install_vllm_stand_ins():
    """The kernel module imports five names from vLLM; these are their H200 values:
    fp8 is e4m3fn (not the gfx942 fnuz type), PDL is supported on sm_90, DeepGEMM's MQA
    logits read fp32 (not MX) scales before sm_100, and a kv-cache dtype other than
    "auto" is quantised (used only by the MLA half, which gets no cache here)."""
    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m

    class Platform:
        @staticmethod
        def fp8_dtype():
            return torch.float8_e4m3fn

        @staticmethod
        def is_arch_support_pdl():
            return torch.cuda.get_device_capability()[0] >= 9

    @triton.jit
    def pack_ue8m0_x4(x):  # only traced when MX_SCALE is set, which sm_90 never sets
        return x

    for name in ("vllm", "vllm.utils", "vllm.v1", "vllm.v1.attention", "vllm.v1.attention.ops"):
        module(name)
    module("vllm.platforms", current_platform=Platform())
    module("vllm.triton_utils", tl=tl, triton=triton)
    module("vllm.utils.deep_gemm", mqa_logits_use_mx_scales=lambda: False)
    module("vllm.v1.attention.ops.common", pack_ue8m0_x4=pack_ue8m0_x4)
    module("vllm.v1.kv_cache_interface", is_quantized_kv_cache=lambda dtype: dtype != "auto")


def load_kernels(upstream_src):
    path = os.path.join(upstream_src, KERNELS)
    spec = importlib.util.spec_from_file_location("vllm_dsv32_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bf16_values(t):
    return t.to(torch.bfloat16).to(torch.float32)


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    upstream_src, out = argv[1], argv[2]
    tokens = int(argv[3]) if len(argv) > 3 else 16384
    seed = int(argv[4]) if len(argv) > 4 else 1
    rope_rows = int(argv[5]) if len(argv) > 5 else ROPE_ROWS
    dump = argv[6] if len(argv) > 6 else None
    install_vllm_stand_ins()
    kernels = load_kernels(upstream_src)
    dev = torch.device("cuda")
    g = torch.Generator(device="cpu").manual_seed(seed)

    # Keys with outlier channels (a few channels 20-100x): the case where the per-token
    # scale and the norm's reductions matter.
    k = torch.randn(tokens, HEAD_DIM, generator=g)
    outliers = torch.randperm(HEAD_DIM, generator=g)[:4]
    k[:, outliers] *= torch.tensor([20.0, 40.0, 70.0, 100.0])
    k = k.to(torch.bfloat16)
    weight = bf16_values(1.0 + 0.25 * torch.randn(HEAD_DIM, generator=g))
    bias = bf16_values(0.1 * torch.randn(HEAD_DIM, generator=g))
    positions = torch.randint(0, rope_rows, (tokens,), generator=g, dtype=torch.int64)

    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, 64, 2, dtype=torch.float32) / 64))
    angles = torch.outer(torch.arange(rope_rows, dtype=torch.float32), inv_freq)
    table = torch.cat([angles.cos(), angles.sin()], dim=-1).to(torch.bfloat16)  # [R, 64]

    blocks = 2 * math.ceil(tokens / BLOCK)                  # half the slots stay unwritten
    slots = torch.randperm(blocks * BLOCK, generator=g)[:tokens]
    slots[torch.rand(tokens, generator=g) < 0.03] = -1      # padding tokens: not written
    cache = torch.full((blocks, BLOCK, HEAD_DIM + 4), 0xA5, dtype=torch.uint8)

    small = 64  # the MLA half's dimensions (powers of two; its outputs are discarded)
    kernels.fused_norm_rope(
        positions=positions.to(dev),
        q_c=torch.randn(tokens, small, generator=g).to(torch.bfloat16).to(dev),
        q_rms_norm_w=torch.ones(small, dtype=torch.bfloat16, device=dev), q_rms_eps=1e-6,
        kv_c=torch.randn(tokens, small, generator=g).to(torch.bfloat16).to(dev),
        kv_rms_norm_w=torch.ones(small, dtype=torch.bfloat16, device=dev), kv_rms_eps=1e-6,
        k_pe=torch.randn(tokens, small, generator=g).to(torch.bfloat16).to(dev),
        k_rope_cos_sin_cache=table.to(dev),
        index_k=k.to(dev), index_k_layer_norm_w=weight.to(dev),
        index_k_layer_norm_bias=bias.to(dev), index_k_layer_norm_eps=1e-6,
        index_k_rope_cos_sin_cache=table.to(dev),
        topk_indices_buffer=torch.empty(tokens, 64, dtype=torch.int32, device=dev),
        slot_mapping=slots.to(dev), indexer_k_cache=(cache_dev := cache.to(dev)),
        index_rope_interleave=False,
        index_k_out=(key_out := torch.empty(tokens, HEAD_DIM, dtype=torch.float32, device=dev)))
    torch.cuda.synchronize()

    rope = table.to(torch.float32)
    dsa_capture.write_cache_capture(
        out, k=k, positions=positions, slots=slots, cache=cache_dev, page_size=BLOCK,
        store_format="fp8_e4m3fn", rope_cos=rope[:, :32], rope_sin=rope[:, 32:],
        norm_weight=weight, norm_bias=bias,
        engine=f"vllm 0.33.0 (sdist kernels.py), torch {torch.__version__}, triton {triton.__version__}",
        kernel="vllm/models/deepseek_v32/common/kernels.py: _fused_norm_rope_kernel (program 0)",
        recipe="vllm-v32", version="0.33.0",
        notes=f"{tokens} tokens, seed {seed}, block size {BLOCK}, NeoX RoPE, on {torch.cuda.get_device_name()}")
    if dump:
        import numpy as np
        np.savez(dump, k_bits=k.view(torch.int16).numpy(), weight=weight.numpy(), bias=bias.numpy(),
                 positions=positions.numpy(), table_bits=table.view(torch.int16).numpy(),
                 key_out=key_out.cpu().numpy())
    written = int((slots >= 0).sum())
    print(f"wrote {out}: {written} of {tokens} tokens stored by vLLM's Triton kernel")


if __name__ == "__main__":
    main(sys.argv)
