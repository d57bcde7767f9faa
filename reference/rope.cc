// File: rope.cc — rotary tables and rotation (rope.h; the arithmetic: stage_arithmetic.h).
#include "reference/rope.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "reference/error.h"
#include "reference/stage_arithmetic.h"

namespace dsaf::ref {
namespace {

constexpr double kPi = 3.14159265358979323846;

// The rotary dim at which a wavelength completes `rotations` turns over the original
// context (YaRN "find_correction_dim").
double correction_dim(double rotations, const RopeTableSpec& spec) {
  return kRopeDims * std::log(spec.original_seq_len / (rotations * 2 * kPi)) /
         (2 * std::log(spec.theta));
}

}  // namespace

std::vector<double> rope_frequencies(const RopeTableSpec& spec) {
  std::vector<double> freqs(kRopePairs);
  for (int i = 0; i < kRopePairs; ++i) {
    freqs[i] = std::pow(spec.theta, -2.0 * i / kRopeDims);
  }
  if (spec.yarn_factor > 1.0) {
    const double low = std::max(std::floor(correction_dim(spec.beta_fast, spec)), 0.0);
    double high = std::min(std::ceil(correction_dim(spec.beta_slow, spec)), kRopeDims - 1.0);
    if (high == low) high += 0.001;
    for (int i = 0; i < kRopePairs; ++i) {
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      freqs[i] = freqs[i] / spec.yarn_factor * ramp + freqs[i] * (1.0 - ramp);
    }
  }
  return freqs;
}

RopeTable::RopeTable(const RopeTableSpec& spec, int num_positions) {
  const std::vector<double> freqs = rope_frequencies(spec);
  cos_.resize(static_cast<size_t>(num_positions) * kRopePairs);
  sin_.resize(cos_.size());
  for (int p = 0; p < num_positions; ++p) {
    for (int i = 0; i < kRopePairs; ++i) {
      const double angle = p * freqs[i];
      cos_[p * kRopePairs + i] = static_cast<float>(std::cos(angle));
      sin_[p * kRopePairs + i] = static_cast<float>(std::sin(angle));
    }
  }
}

RopeTable::RopeTable(std::vector<float> cos, std::vector<float> sin)
    : cos_(std::move(cos)), sin_(std::move(sin)) {
  if (cos_.size() != sin_.size() || cos_.size() % kRopePairs != 0) {
    throw_bad_input("rope table: cos and sin must both be [positions][32]");
  }
}

void RopeTable::check(int position) const {
  if (position < 0 || position >= num_positions()) {
    throw_bad_input("rope table: position " + std::to_string(position) + " outside [0, " +
                    std::to_string(num_positions()) + ")");
  }
}

const float* RopeTable::cos(int position) const {
  check(position);
  return cos_.data() + static_cast<size_t>(position) * kRopePairs;
}
const float* RopeTable::sin(int position) const {
  check(position);
  return sin_.data() + static_cast<size_t>(position) * kRopePairs;
}

template <class T>
void apply_rope(T* x, const RopeSpec& spec, const RopeTable& table, int position) {
  rotate_pairs(x, spec, table.cos(position), table.sin(position));
}

template void apply_rope<float>(float*, const RopeSpec&, const RopeTable&, int);
template void apply_rope<double>(double*, const RopeSpec&, const RopeTable&, int);

}  // namespace dsaf::ref
