"""Timing shared by the PyTorch baselines in bench/: the median of CUDA-event timings,
as bench/gpu_timing.h times the kernels (3 warm-ups, 21 runs)."""
import torch


def median_ms(fn, runs=21):
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    return sorted(times)[runs // 2]
