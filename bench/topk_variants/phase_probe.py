#!/usr/bin/env python3
"""Writes a copy of device/topk/select.cuh whose grid kernel stamps its phases.

    python3 bench/topk_variants/phase_probe.py SRC.cuh OUT.cuh

SRC is a version of select.cuh (the working tree's, or `git show REV:device/topk/select.cuh`);
OUT goes to build.sh as a variant (`probe=OUT.cuh`). Thread 0 of every block of
topk_grid_kernel records %globaltimer (ns, one clock for every SM) at these points:

     0  kernel entry                      1  pass 0 staged (before its histogram's publish)
     2  after pass 0's exchange           3, 5, 7, 9, 11  pass 1, 2, .. scanned
     4, 6, 8, 10  after that pass's exchange
    12  before the exchange of the selection counts, 13 after it
    14  output written

The last block to finish prints, for one launch in 25 (the 13th: within the timed launches
of each topk_variants configuration), each point's earliest and latest time over the
blocks from the earliest entry, and how many blocks reached it; then clears the stamps.
The stamps and the extra block barrier at the end cost 1-4 us of kernel time (compare the
probe's time with its source's in the same run, and read the phases as relative). Exits
with an error when an anchor below is missing from SRC: the kernel changed, so this script
must follow it.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import edit_file  # noqa: E402

PROBE = r'''
// ---- Phase probe (bench/topk_variants/phase_probe.py; never in the product) ----
__device__ unsigned long long g_probe[256][16];
__device__ unsigned int g_probe_done;
__device__ unsigned int g_probe_launch;
__device__ __forceinline__ unsigned long long probe_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
#define PROBE(i) do { if (threadIdx.x == 0) g_probe[blockIdx.x][i] = probe_now(); } while (0)
__device__ void probe_finish(int passes) {
  __syncthreads();
  if (threadIdx.x != 0) return;
  g_probe[blockIdx.x][15] = passes;
  __threadfence();
  const unsigned blocks = gridDim.x;
  if (atomicAdd(&g_probe_done, 1u) != blocks - 1) return;
  __threadfence();
  const unsigned launch = atomicAdd(&g_probe_launch, 1u);
  g_probe_done = 0;
  if (launch % 25 != 12) return;
  unsigned long long t0 = ~0ull;
  for (unsigned b = 0; b < blocks; ++b) t0 = min(t0, g_probe[b][0]);
  printf("PROBE launch %u blocks %u passes(block 0) %llu\n", launch, blocks, g_probe[0][15]);
  for (int i = 0; i < 15; ++i) {
    unsigned long long lo = ~0ull, hi = 0;
    unsigned n = 0;
    for (unsigned b = 0; b < blocks; ++b) {
      const unsigned long long t = g_probe[b][i];
      if (t == 0) continue;
      lo = min(lo, t - t0);
      hi = max(hi, t - t0);
      ++n;
    }
    if (n) printf("PROBE  point %2d: n %3u  min %7.2f us  max %7.2f us\n", i, n, lo * 1e-3, hi * 1e-3);
  }
  for (unsigned b = 0; b < blocks; ++b) {
    for (int i = 0; i < 15; ++i) g_probe[b][i] = 0;
  }
}
'''

# (anchor in select.cuh, its replacement); each anchor must occur exactly once. Both
# exchanges are stamped: the row barriers' (G > 4) and the tagged words' (G <= 4), whose
# point 2, 4, .. comes after the bin search that its exchange includes.
EDITS = [
    ("constexpr int kGridSliceScores = 32768;", PROBE + "constexpr int kGridSliceScores = 32768;"),
    ("  GridSmem& sm = *reinterpret_cast<GridSmem*>(smem_bytes);\n  const int rank",
     "  GridSmem& sm = *reinterpret_cast<GridSmem*>(smem_bytes);\n  PROBE(0);\n  const int rank"),
    ("records.slots);\n  __syncthreads();\n  Progress g{",
     "records.slots);\n  __syncthreads();\n  PROBE(1);\n  Progress g{"),
    ("  bool has_nan = false, more = false;\n",
     "  bool has_nan = false, more = false;\n  int probe_passes = 0;\n"),
    ("    find_bin_tagged<kTaggedBlocks>(row_slots(), 0, tag, g.remaining, !g.final, true, sm);\n",
     "    find_bin_tagged<kTaggedBlocks>(row_slots(), 0, tag, g.remaining, !g.final, true, sm);\n    PROBE(2);\n"),
    ("    sync_row();\n    has_nan = __ldcg(&z.has_nan) != 0;\n",
     "    sync_row();\n    PROBE(2);\n    has_nan = __ldcg(&z.has_nan) != 0;\n"),
    ("    __syncthreads();\n    if (g.final) break;\n    if constexpr (kTagged) {\n",
     "    __syncthreads();\n    PROBE(min(3 + 2 * (pass - 1), 11));\n    probe_passes = pass;\n"
     "    if (g.final) break;\n    if constexpr (kTagged) {\n"),
    ("      find_bin_tagged<kTaggedBlocks>(row_slots(), pass, tag, g.remaining, true, false, sm);\n",
     "      find_bin_tagged<kTaggedBlocks>(row_slots(), pass, tag, g.remaining, true, false, sm);\n"
     "      PROBE(min(4 + 2 * (pass - 1), 11));\n"),
    ("      publish_hist(sm.hist, r.hist[pass - 1]);\n      sync_row();\n",
     "      publish_hist(sm.hist, r.hist[pass - 1]);\n      sync_row();\n      PROBE(min(4 + 2 * (pass - 1), 11));\n"),
    ("    const uint32_t tag = make_tag(sm.epoch.epoch, kTaggedCountStage);\n",
     "    PROBE(12);\n    const uint32_t tag = make_tag(sm.epoch.epoch, kTaggedCountStage);\n"),
    ("    const uint32_t peer_count = word & 0x7FFF;\n",
     "    PROBE(13);\n    const uint32_t peer_count = word & 0x7FFF;\n"),
    ("    sync_row();\n    overflow = __ldcg(&z.overflow) != 0;",
     "    PROBE(12);\n    sync_row();\n    PROBE(13);\n    overflow = __ldcg(&z.overflow) != 0;"),
    ("\n}\n\n}  // namespace dsaf::dev::topk_select",  # the grid kernel's end, the file's last function
     "\n  __syncthreads();\n  PROBE(14);\n  probe_finish(probe_passes);\n}\n\n}  // namespace dsaf::dev::topk_select"),
]


if __name__ == "__main__":
    edit_file("phase_probe.py", __doc__, EDITS)
