#!/usr/bin/env python3
"""Writes a copy of device/paged_logits_mma.cu whose blocks record where their time goes.

    python3 bench/logits_variants/timeline_probe.py SRC.cu OUT.cu

OUT goes to build.sh as a variant (e.g. `timeline=OUT.cu`, its logits equal to SRC's).
Thread 0 of every block records, in global memory at its block's slot: the global timer
(ns) at entry and exit, its SM, and SM cycles (clock64) spent in the work partition (part
0), the masked stores (part 3), loading group inputs (with the count of loads), and scoring
segments (with the count of steps). Every 26th launch of an instance (one within a
logits_variants version's 25 timed launches) the launcher synchronises, reads the slots of
that launch and prints:
  span      first block entry to last block exit (global timer), and the spread of the
            blocks' entries and exits: launch ramp and tail;
  clock     a block's cycles over its wall time (the SM clock under this load);
  SMs       whether the tail is between SMs or inside them: the spread of the SMs' last
            exits, and the mean and largest gap between an SM's first and last exit
            (one SM's blocks finishing apart leaves that SM part-empty while its last
            block runs);
  per block the mean cycles of each part and of the rest (set-up and exit), the cycles a
            scored step, the blocks an SM held.
With $DSAF_TIMELINE_DUMP=FILE every reported launch also appends a line a block to FILE:
  format rows block sm entry_us exit_us scored_cycles steps total_cycles
(entry and exit from the launch's first entry), for per-SM analyses across launches.
So the kernel's time splits into steps, per-block fixed cost, ramp and tail: a step probe
(step_probe.py) explains only the first. No static shared memory is added (it could
change the blocks an SM holds). Exits with an error when an anchor is missing from SRC.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import LOGITS_KERNEL_HEAD, LOGITS_LAUNCHER_END, edit_file, probe_prelude  # noqa: E402

PROBE = r'''
// ---- Timeline probe (bench/logits_variants/timeline_probe.py; never in the product) ----
constexpr int kTimelineSlots = 4096;
// Per block: entry ns, exit ns, SM, partition cycles, masked cycles, load cycles, loads,
// scored cycles, steps, total cycles.
__device__ unsigned long long g_timeline[kTimelineSlots][10];
__device__ __forceinline__ unsigned long long timeline_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned timeline_smid() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}
'''

LAUNCH_REPORT = r'''
  static unsigned timeline_launches = 0;
  if (++timeline_launches % 26 == 14 && blocks <= kTimelineSlots) {
    static unsigned long long slots[kTimelineSlots][10];
    check_cuda(cudaDeviceSynchronize(), "timeline probe");
    check_cuda(cudaMemcpyFromSymbol(slots, g_timeline, sizeof(unsigned long long) * 10 * blocks), "timeline probe");
    unsigned long long first_in = ~0ull, last_in = 0, first_out = ~0ull, last_out = 0;
    double sums[8] = {0, 0, 0, 0, 0, 0, 0, 0}, wall = 0, wall_min = 1e30, wall_max = 0;
    int per_sm[1024] = {0};
    unsigned long long sm_first_out[1024], sm_last_out[1024];
    std::fill(sm_first_out, sm_first_out + 1024, ~0ull);
    std::fill(sm_last_out, sm_last_out + 1024, 0ull);
    for (int b = 0; b < blocks; ++b) {
      const unsigned long long* s = slots[b];
      first_in = std::min(first_in, s[0]), last_in = std::max(last_in, s[0]);
      first_out = std::min(first_out, s[1]), last_out = std::max(last_out, s[1]);
      const double w = static_cast<double>(s[1] - s[0]);
      wall += w, wall_min = std::min(wall_min, w), wall_max = std::max(wall_max, w);
      for (int p = 0; p < 7; ++p) sums[p] += static_cast<double>(s[3 + p]);
      per_sm[s[2] % 1024]++;
      sm_first_out[s[2] % 1024] = std::min(sm_first_out[s[2] % 1024], s[1]);
      sm_last_out[s[2] % 1024] = std::max(sm_last_out[s[2] % 1024], s[1]);
    }
    int most = 0, least = 1 << 30, sms = 0;
    unsigned long long first_sm_done = ~0ull;
    double gap_sum = 0, gap_max = 0;
    for (int sm = 0; sm < 1024; ++sm) {
      if (per_sm[sm] > 0) {
        most = std::max(most, per_sm[sm]), least = std::min(least, per_sm[sm]), ++sms;
        first_sm_done = std::min(first_sm_done, sm_last_out[sm]);
        const double gap = static_cast<double>(sm_last_out[sm] - sm_first_out[sm]);
        gap_sum += gap, gap_max = std::max(gap_max, gap);
      }
    }
    const double n = blocks, total = sums[6] / n;
    const double rest = total - (sums[0] + sums[1] + sums[2] + sums[4]) / n;
    std::printf("TIMELINE %s rows %d blocks %d (%d-%d an SM): span %.1f us, entries within %.1f us, exits within %.1f us; "
                "a block %.1f us (%.1f-%.1f), clock %.3f GHz; cycles a block: partition %.0f, masked %.0f, loads %.0f "
                "(%.2f), scored %.0f (%.1f steps, %.0f a step), rest %.0f\n",
                T::kFp8 ? "fp8" : "bf16", args.rows, blocks, least, most, (last_out - first_in) * 1e-3,
                (last_in - first_in) * 1e-3, (last_out - first_out) * 1e-3, wall / n * 1e-3, wall_min * 1e-3,
                wall_max * 1e-3, total / (wall / n), sums[0] / n, sums[1] / n, sums[2] / n, sums[3] / n, sums[4] / n,
                sums[5] / n, sums[5] > 0 ? sums[4] / sums[5] : 0.0, rest);
    std::printf("TIMELINE SMs %d: last exits within %.1f us; an SM's first to last exit %.1f us (mean), %.1f (most)\n",
                sms, (last_out - first_sm_done) * 1e-3, gap_sum / sms * 1e-3, gap_max * 1e-3);
    if (const char* dump = std::getenv("DSAF_TIMELINE_DUMP")) {  // a line a block, appended
      if (FILE* f = std::fopen(dump, "a")) {
        for (int b = 0; b < blocks; ++b) {
          const unsigned long long* s = slots[b];
          std::fprintf(f, "%s %d %d %llu %.3f %.3f %llu %llu %llu\n", T::kFp8 ? "fp8" : "bf16", args.rows, b, s[2],
                       (s[0] - first_in) * 1e-3, (s[1] - first_in) * 1e-3, s[7], s[8], s[9]);
        }
        std::fclose(f);
      }
    }
  }
'''

EDITS = probe_prelude(LOGITS_KERNEL_HEAD, PROBE) + [
    ("#include <cstdint>\n", "#include <cstdint>\n#include <cstdlib>\n"),  # getenv (the dump)
    ("  extern __shared__ __align__(1024) uint8_t smem[];\n",
     "  extern __shared__ __align__(1024) uint8_t smem[];\n"
     "  const unsigned long long tl_entry_ns = timeline_ns();\n"
     "  const long long tl_entry = clock64();\n"
     "  long long tl_mark = tl_entry, tl_partition = 0, tl_masked = 0, tl_loads = 0, tl_scored = 0;\n"
     "  int tl_load_count = 0, tl_steps = 0;\n"),
    ("    __syncthreads();  // the ring is refilled below\n  }\n",
     "    __syncthreads();  // the ring is refilled below\n  }\n"
     "  tl_partition = clock64() - tl_mark;\n  tl_mark = clock64();\n"),
    ("  // 4. The block's scored steps; a group's inputs are loaded when the block enters it.\n",
     "  tl_masked = clock64() - tl_mark;\n"
     "  // 4. The block's scored steps; a group's inputs are loaded when the block enters it.\n"),
    ("    if (loaded_group != group.first) load_group_inputs(), loaded_group = group.first, group_out = out(0);\n"
     "    score_segment(pass, begin, end);\n  });\n",
     "    long long tl_t0 = clock64();\n"
     "    tl_load_count += loaded_group != group.first;\n"
     "    if (loaded_group != group.first) load_group_inputs(), loaded_group = group.first, group_out = out(0);\n"
     "    long long tl_t1 = clock64();\n"
     "    score_segment(pass, begin, end);\n"
     "    tl_loads += tl_t1 - tl_t0, tl_scored += clock64() - tl_t1, tl_steps += end - begin;\n"
     "  });\n"
     "  if (threadIdx.x == 0 && blockIdx.x < kTimelineSlots) {\n"
     "    unsigned long long* s = g_timeline[blockIdx.x];\n"
     "    const long long tl_total = clock64() - tl_entry;\n"
     "    s[0] = tl_entry_ns, s[1] = timeline_ns(), s[2] = timeline_smid();\n"
     "    s[3] = tl_partition, s[4] = tl_masked, s[5] = tl_loads, s[6] = tl_load_count, s[7] = tl_scored, s[8] = tl_steps,\n"
     "    s[9] = tl_total;\n"
     "  }\n"),
    (LOGITS_LAUNCHER_END, LAUNCH_REPORT.lstrip("\n") + LOGITS_LAUNCHER_END),
]


if __name__ == "__main__":
    edit_file("timeline_probe.py", __doc__, EDITS)
