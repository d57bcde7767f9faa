// File: verdict_determinism.cc — run-to-run determinism, bit for bit (verdict.h,
// section 4).
#include <algorithm>

#include "oracle/verdict.h"
#include "oracle/verdict_text.h"
#include "reference/error.h"

namespace dsaf::oracle {

using verdict_detail::printf_string;

std::string DeterminismVerdict::describe() const {
  std::string out;
  if (pass) {
    out = printf_string("PASS determinism: all %d calls are bitwise identical (%lld bytes).", runs,
                        static_cast<long long>(baseline_size));
  } else {
    out = printf_string(
        "FAIL determinism: %d of the %d later calls differ from the first; the first "
        "that does is call %d",
        differing_runs, runs - 1, first_differing_run);
    if (baseline_size != differing_size) {
      out += printf_string(", whose size differs (%lld bytes vs %lld)",
                           static_cast<long long>(differing_size),
                           static_cast<long long>(baseline_size));
    }
    if (first_byte >= 0) {
      out += printf_string(", at byte %lld (first call: 0x%02x, call %d: 0x%02x)",
                           static_cast<long long>(first_byte), baseline_byte, first_differing_run,
                           differing_byte);
    }
    out += ".";
  }
  out +=
      " Repeatability does not prove correctness: a kernel can return the same wrong "
      "bytes every time (DeepGEMM #433), so compare against the reference too.";
  return out;
}

DeterminismVerdict check_determinism(const std::function<std::vector<uint8_t>()>& run, int runs) {
  if (runs < 2) throw_bad_input(printf_string("check_determinism needs >= 2 runs, got %d", runs));
  DeterminismVerdict v;
  v.runs = runs;
  const std::vector<uint8_t> baseline = run();
  v.baseline_size = v.differing_size = static_cast<int64_t>(baseline.size());
  for (int r = 2; r <= runs; ++r) {
    const std::vector<uint8_t> output = run();
    if (output == baseline) continue;
    if (v.differing_runs++ > 0) continue;
    v.first_differing_run = r;
    v.differing_size = static_cast<int64_t>(output.size());
    const size_t common = std::min(output.size(), baseline.size());
    const auto diff = std::mismatch(baseline.begin(), baseline.begin() + common, output.begin());
    if (diff.first != baseline.begin() + common) {
      v.first_byte = diff.first - baseline.begin();
      v.baseline_byte = *diff.first;
      v.differing_byte = *diff.second;
    }
  }
  v.pass = v.differing_runs == 0;
  return v;
}

}  // namespace dsaf::oracle
