#!/usr/bin/env python3
"""The sglang-v4 key path in PyTorch eager on the GPU (the baseline the fused kernel is
compared with): bf16 [T,128] -> fp32 RMSNorm -> interleaved RoPE on dims 64..127 ->
Hadamard-128 (matmul) -> fp8 e4m3fn with scale max(amax,1e-4)/448 (or bf16) -> paged
store [pages, 64*132] / [pages, 64*256]. 1M tokens = 16 sequences x 64K positions.
Prints one JSON object: median ms of 21 runs after 3 warm-ups, per store format."""
import json
import sys

import torch
from torch_timing import median_ms

T, SEQ, PAGE = 1 << 20, 65536, 64


def main():
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


if __name__ == "__main__":
    main()
