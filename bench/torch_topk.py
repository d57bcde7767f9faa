#!/usr/bin/env python3
"""torch.topk on the shape of bench/topk_bench.cu: top-2048 of 131,072 fp32 scores x 32
rows, sorted=True, on the GPU; the baseline the exact kernel (device/topk.cu) is compared
with. Inputs as in topk_bench: Gaussian fp32, and the same rounded to bf16 (kept in fp32).
Timing as in topk_bench: CUDA events around one call, median of 21 runs after 3 warm-ups.
Prints one JSON object. Note torch.topk leaves the order of equal scores unspecified.
Usage: torch_topk.py [K [ROWS LENGTH]]   (default 2048, 32 x 131072; scripts/conformance.sh
also times K 512 and 1024)"""
import json
import sys

import torch

from torch_timing import median_ms

K = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
ROWS, LENGTH = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (32, 131072)



def main():
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(1)
    x = torch.randn(ROWS, LENGTH, device=dev, generator=g, dtype=torch.float32)
    inputs = {"gaussian-fp32": x, "gaussian-bf16-values": x.to(torch.bfloat16).to(torch.float32)}
    out = {"rows": ROWS, "row_length": LENGTH, "k": K, "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name()}
    for name, scores in inputs.items():
        out[f"{name}_topk_ms"] = median_ms(lambda: torch.topk(scores, K, dim=-1, sorted=True))
        out[f"{name}_sort_ms"] = median_ms(lambda: torch.sort(scores, dim=-1, descending=True, stable=True))
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
