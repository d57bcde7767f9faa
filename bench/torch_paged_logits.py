#!/usr/bin/env python3
"""Paged decode indexer logits in PyTorch eager on the GPU, the baseline for
bench/paged_logits_bench.cu: batch 32, one query each, 64 heads, 128K context, page 64.
fp8 cache: gather the pages by the page table, e4m3 -> fp32, scores =
(relu(q . k) * w).sum(heads) * k_scale; bf16 cache: the same without the scale.
Prints one JSON object: median ms of 21 runs after 3 warm-ups (CUDA events)."""
import json

import torch

from torch_timing import median_ms

B, H, D, CTX, PAGE = 32, 64, 128, 131072, 64



def main():
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(7)
    pages_per_seq = CTX // PAGE
    tables = torch.randperm(B * pages_per_seq, device=dev, generator=g).view(B, pages_per_seq)
    q = torch.randn(B, H, D, device=dev, generator=g).to(torch.float8_e4m3fn)
    w = torch.randn(B, H, device=dev, generator=g)
    result = {"shape": "batch 32, next_n 1, 64 heads, context 131072, page 64", "torch": torch.__version__,
              "gpu": torch.cuda.get_device_name()}

    k8 = torch.randn(B * pages_per_seq, PAGE, D, device=dev, generator=g).to(torch.float8_e4m3fn)
    ks = torch.rand(B * pages_per_seq, PAGE, device=dev, generator=g) * 0.01 + 0.01

    def fp8_logits():
        k = k8[tables].view(B, CTX, D).float()
        s = torch.einsum("bhd,bsd->bhs", q.float(), k).relu_()
        return (s * w[:, :, None]).sum(1) * ks[tables].view(B, CTX)

    result["fp8_ms"] = median_ms(fp8_logits)
    del k8, ks
    kb = torch.randn(B * pages_per_seq, PAGE, D, device=dev, generator=g).to(torch.bfloat16)

    def bf16_logits():
        k = kb[tables].view(B, CTX, D).float()
        s = torch.einsum("bhd,bsd->bhs", q.float(), k).relu_()
        return (s * w[:, :, None]).sum(1)

    result["bf16_ms"] = median_ms(bf16_logits)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
