#!/usr/bin/env python3
"""Writes a copy of device/paged_logits_mma.cu whose step loop clocks its three parts.

    python3 bench/logits_variants/step_probe.py SRC.cu OUT.cu

OUT goes to build.sh as a variant (e.g. `probe=OUT.cu`, its logits equal to SRC's). Lane 0
of every warp reads clock64 at four points of each scored step and adds the differences
into shared memory (no register held across steps):
  wait    from the top of the step to the end of its block barrier (the copies' wait,
          the proxy fence, the barrier: what the warp waits for its block and the ring),
  tensor  from there to the end of wgmma_wait_all (the next copies issued, the wgmma
          issued and their result awaited),
  epilogue  the epilogue (ReLU, weights, quad sums, stores issued).
At the kernel's end the warps add their sums into global counters. The device code calls
no function (a call in a wgmma kernel makes ptxas serialise its wgmma), so the launcher
prints: every 26th launch of an instance (one within a logits_variants version's 25
timed launches) it synchronises, reads the counters of the 26 launches, prints each
part's mean SM cycles per warp and step, and zeroes them. Exits with an error when an
anchor is missing from SRC (the kernel changed, so this script must follow it).
The clocks are in the whole-step loop, which bf16 four rows a block (the split step,
score_segment_split) does not run: its line counts no steps. The sums live in 64 bytes
of static shared memory, which would also break that kernel's exact fit of two blocks an
SM's 228 KB.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import LOGITS_KERNEL_HEAD, LOGITS_LAUNCHER_END, edit_file, probe_prelude  # noqa: E402

PROBE = r'''
// ---- Step probe (bench/logits_variants/step_probe.py; never in the product) ----
__device__ unsigned long long g_step_probe[4];  // wait, tensor, epilogue cycles; steps (sums over warps)
'''

EDITS = probe_prelude(LOGITS_KERNEL_HEAD, PROBE) + [
    ("  extern __shared__ __align__(1024) uint8_t smem[];\n",
     "  extern __shared__ __align__(1024) uint8_t smem[];\n"
     "  __shared__ unsigned probe_sums[T::kThreads / 32][4];\n"
     "  if (threadIdx.x < T::kThreads / 32 * 4) probe_sums[threadIdx.x / 4][threadIdx.x % 4] = 0;\n"),
    ("      bool copies_awaited = false;\n",
     "      const long long probe_t0 = clock64();\n      bool copies_awaited = false;\n"),
    ("      __syncthreads();\n      const int slot = i % T::kStages;\n",
     "      __syncthreads();\n      const long long probe_t1 = clock64();\n      const int slot = i % T::kStages;\n"),
    ("      wgmma_wait_all();\n      pin_accumulators(acc);\n      epilogue(acc, first, scale, pass);\n",
     "      wgmma_wait_all();\n      pin_accumulators(acc);\n      const long long probe_t2 = clock64();\n"
     "      epilogue(acc, first, scale, pass);\n      const long long probe_t3 = clock64();\n"
     "      if (lane == 0) {\n"
     "        probe_sums[warp][0] += static_cast<unsigned>(probe_t1 - probe_t0);\n"
     "        probe_sums[warp][1] += static_cast<unsigned>(probe_t2 - probe_t1);\n"
     "        probe_sums[warp][2] += static_cast<unsigned>(probe_t3 - probe_t2);\n"
     "        probe_sums[warp][3] += 1;\n"
     "      }\n"),
    ("    score_segment(pass, begin, end);\n  });\n",
     "    score_segment(pass, begin, end);\n  });\n  __syncthreads();\n"
     "  if (lane == 0) {\n"
     "    for (int p = 0; p < 4; ++p) atomicAdd(&g_step_probe[p], static_cast<unsigned long long>(probe_sums[warp][p]));\n"
     "  }\n"),
    (LOGITS_LAUNCHER_END,
     "  static unsigned probe_launches = 0;\n"
     "  if (++probe_launches % 26 == 14) {\n"
     "    unsigned long long sums[4] = {0, 0, 0, 0};\n"
     "    check_cuda(cudaDeviceSynchronize(), \"step probe\");\n"
     "    check_cuda(cudaMemcpyFromSymbol(sums, g_step_probe, sizeof sums), \"step probe\");\n"
     "    const double steps = sums[3] > 0 ? static_cast<double>(sums[3]) : 1.0;\n"
     "    std::printf(\"STEP PROBE %s rows %d blocks %d (26 launches): warp-steps %llu, SM cycles a step: wait %.0f \"\n"
     "                \"tensor %.0f epilogue %.0f\\n\", T::kFp8 ? \"fp8\" : \"bf16\", args.rows, blocks, sums[3],\n"
     "                sums[0] / steps, sums[1] / steps, sums[2] / steps);\n"
     "    const unsigned long long zero[4] = {0, 0, 0, 0};\n"
     "    check_cuda(cudaMemcpyToSymbol(g_step_probe, zero, sizeof zero), \"step probe\");\n"
     "  }\n" + LOGITS_LAUNCHER_END),
]


if __name__ == "__main__":
    edit_file("step_probe.py", __doc__, EDITS)
