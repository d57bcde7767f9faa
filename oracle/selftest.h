// File: selftest.h
// `dsa-fidelity selftest`: exhaustive cross-checks of the reference codecs against
// oracles that share no code with them:
//  * NVIDIA's host-side conversions (cuda_bf16.h __float2bfloat16_rn, cuda_fp8.h
//    __nv_cvt_float_to_fp8, cuda_fp4.h __nv_cvt_float_to_fp4 and the decoders), compiled
//    for the host when the CUDA toolkit headers exist — no GPU is needed;
//  * brute force: nearest of all decoded codes by exhaustive search.
// Encoders are checked over all 2^32 fp32 bit patterns. A check that cannot run (no CUDA
// headers) is reported as skipped, never as passed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dsaf::oracle {

struct SelftestCheck {
  std::string name;          // what is checked
  std::string oracle;        // against what
  uint64_t cases = 0;
  uint64_t mismatches = 0;
  bool skipped = false;
  std::string note;          // skip reason, or the first mismatch
  double seconds = 0.0;
};

// (cases done, cases) of the check running, from one worker thread, every few million
// cases; never with done == cases.
using SelftestProgress = std::function<void(int64_t done, int64_t total)>;

// Runs every check on `threads` threads; `on_done` is called after each check (on the
// calling thread). Memory: a few KiB a thread; nothing grows with the cases.
std::vector<SelftestCheck> run_selftest(int threads, const std::function<void(const SelftestCheck&)>& on_done,
                                        const SelftestProgress& progress = nullptr);

}  // namespace dsaf::oracle
