#!/usr/bin/env python3
"""The sglang-v4 key path in PyTorch eager on the GPU (the baseline the fused kernel is
compared with): bf16 [T,128] -> fp32 RMSNorm -> interleaved RoPE on dims 64..127 ->
Hadamard-128 (matmul) -> fp8 e4m3fn with scale max(amax,1e-4)/448 (or bf16) -> paged
store [pages, 64*132] / [pages, 64*256]. 1M tokens = 16 sequences x 64K positions.
Prints one JSON object: median ms of 21 runs after 3 warm-ups, per store format.

With --cpu THREADS: the CPU reference's baseline instead, the job of
bench/reference_bench's BM_KeyPathScoresTop512 in PyTorch eager on THREADS CPU threads:
32K bf16 keys through the dsv32-ref key path (LayerNorm in fp32, NeoX RoPE on dims 0..63,
Hadamard-128, bf16 between stages, fp8 e4m3fn with 2^ceil(log2(max(amax,1e-4)/448))
scales), one 64-head query likewise (no norm), fp32 scores
k_scale * sum_h relu(q_h . k) w_h and the top-512. Prints the median wall ms of 7 runs."""
import json
import sys
import time

import torch

T, SEQ, PAGE = 1 << 20, 65536, 64


def main():
    from torch_timing import median_ms

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(1)
    x = torch.randn(T, 128, device=dev, generator=g).to(torch.bfloat16)
    w = torch.ones(128, device=dev)
    pos = torch.arange(T, device=dev) % SEQ
    freqs = 1.0 / (160000.0 ** (torch.arange(0, 64, 2, device=dev).float() / 64))
    ang = torch.outer(torch.arange(SEQ, device=dev).float(), freqs)
    cos, sin = ang.cos(), ang.sin()
    idx = torch.arange(128, device=dev)
    had = (torch.bitwise_and(idx[:, None], idx[None, :]).to(torch.int32).bitwise_count() % 2) if hasattr(torch.Tensor, "bitwise_count") else None
    if had is None:
        bits = torch.bitwise_and(idx[:, None], idx[None, :])
        pc = torch.zeros_like(bits)
        for b in range(7):
            pc += (bits >> b) & 1
        had = pc % 2
    H = (1 - 2 * had).float() / (128 ** 0.5)
    pages = T // PAGE
    page_of = torch.randperm(pages, device=dev, generator=g)
    slot_page = page_of[torch.arange(T, device=dev) // PAGE]
    slot_off = torch.arange(T, device=dev) % PAGE

    def pipeline(store):
        k = x.float()
        k = k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + 1e-6) * w
        c, s = cos[pos], sin[pos]
        re, im = k[:, 64::2], k[:, 65::2]
        rot = torch.stack((re * c - im * s, re * s + im * c), dim=-1).flatten(1)
        k = torch.cat((k[:, :64], rot), dim=1)
        k = k @ H
        if store == "fp8":
            scale = k.abs().amax(-1, keepdim=True).clamp(min=1e-4) / 448.0
            codes = (k * (1.0 / scale)).to(torch.float8_e4m3fn).view(torch.uint8)
            cache = torch.empty(pages, PAGE * 132, dtype=torch.uint8, device=dev)
            vals = cache[:, : PAGE * 128].view(pages, PAGE, 128)
            scl = cache[:, PAGE * 128:].view(torch.float32).view(pages, PAGE)
            vals[slot_page, slot_off] = codes
            scl[slot_page, slot_off] = scale.squeeze(-1)
        else:
            cache = torch.empty(pages, PAGE, 128, dtype=torch.bfloat16, device=dev)
            cache[slot_page, slot_off] = k.to(torch.bfloat16)
        return cache

    out = {"tokens": T, "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    for store in ("fp8", "bf16"):
        out[f"{store}_ms"] = median_ms(lambda: pipeline(store))
    json.dump(out, sys.stdout)
    print()


def hadamard_matrix(dev):
    idx = torch.arange(128, device=dev)
    bits = torch.bitwise_and(idx[:, None], idx[None, :])
    parity = torch.zeros_like(bits)
    for b in range(7):
        parity += (bits >> b) & 1
    return (1 - 2 * (parity % 2)).float() / (128 ** 0.5)


def cpu_reference_job(threads):
    torch.set_num_threads(threads)
    keys, heads = 32768, 64
    g = torch.Generator().manual_seed(2026)
    k_in = torch.randn(keys, 128, generator=g).bfloat16()
    q_in = torch.randn(heads, 128, generator=g).bfloat16()
    wproj = torch.randn(heads, generator=g).bfloat16()
    gamma = (1 + 0.1 * torch.randn(128, generator=g)).bfloat16()
    beta = (0.1 * torch.randn(128, generator=g)).bfloat16()
    H = hadamard_matrix("cpu")
    freqs = 1.0 / (10000.0 ** (torch.arange(0, 64, 2).double() / 64))
    ang = torch.outer(torch.arange(keys).double(), freqs)
    cos, sin = ang.cos().float(), ang.sin().float()

    def rope(x, c, s):  # NeoX pairs (i, i + 32) of dims 0..63, bf16 out
        x = x.float()
        a, b = x[..., :32], x[..., 32:64]
        return torch.cat((a * c - b * s, a * s + b * c, x[..., 64:]), dim=-1).bfloat16()

    def fp8(x):  # act_quant: power-of-two scale per 128 values
        x = x.float()
        scale = torch.exp2(torch.ceil(torch.log2(x.abs().amax(-1, keepdim=True).clamp(min=1e-4) / 448.0)))
        return (x / scale).to(torch.float8_e4m3fn), scale.squeeze(-1)

    def job():
        k = torch.nn.functional.layer_norm(k_in.float(), (128,), gamma.float(), beta.float(), 1e-6).bfloat16()
        k = rope(k, cos, sin)
        k = (k.float() @ H).bfloat16()
        k_codes, k_scale = fp8(k)
        q = rope(q_in, cos[keys - 1], sin[keys - 1])
        q = (q.float() @ H).bfloat16()
        q_codes, q_scale = fp8(q)
        w = wproj.float() * heads ** -0.5 * q_scale * 128 ** -0.5
        dots = k_codes.float() @ q_codes.float().T  # [keys, heads]
        scores = (dots.relu() * w).sum(-1) * k_scale
        return scores.topk(512).indices

    job()
    times = []
    for _ in range(7):
        start = time.perf_counter()
        job()
        times.append(1e3 * (time.perf_counter() - start))
    return {"job": "dsv32-ref key path + scores + top-512, 32768 keys, 64 heads", "threads": threads,
            "torch": torch.__version__, "median_ms": sorted(times)[3]}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--cpu":
        json.dump(cpu_reference_job(int(sys.argv[2])), sys.stdout)
        print()
    else:
        main()
