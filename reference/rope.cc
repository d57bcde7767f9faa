// File: rope.cc — rotary tables and rotation (rope.h).
#include "reference/rope.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "reference/error.h"

namespace dsaf::ref {
namespace {

constexpr double kPi = 3.14159265358979323846;

// The rotary dim at which a wavelength completes `rotations` turns over the original
// context (YaRN "find_correction_dim").
double correction_dim(double rotations, const RopeTableSpec& spec) {
  return kRopeDims * std::log(spec.original_seq_len / (rotations * 2 * kPi)) /
         (2 * std::log(spec.theta));
}

// a*b - c*d (sign = -1) or a*b + c*d (sign = +1) with the named product fused.
template <class T>
T two_products(T a, T b, T c, T d, T sign, ContractedProduct fused) {
  switch (fused) {
    case ContractedProduct::kFirst:
      return std::fma(a, b, sign * (c * d));
    case ContractedProduct::kSecond:
      return std::fma(sign * c, d, a * b);
    case ContractedProduct::kNone:
    case ContractedProduct::kCos:  // resolved per output by the caller (first/second_output_fma)
      break;
  }
  return a * b + sign * (c * d);
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
  T* rotary = x + (spec.placement == RopePlacement::kLeading ? 0 : kHeadDim - kRopeDims);
  const float* cos = table.cos(position);
  const float* sin = table.sin(position);
  for (int i = 0; i < kRopePairs; ++i) {
    const int first = spec.pairing == RopePairing::kNeox ? i : 2 * i;
    const int second = spec.pairing == RopePairing::kNeox ? i + kRopePairs : 2 * i + 1;
    const T a = rotary[first];
    const T b = rotary[second];
    const T c = static_cast<T>(cos[i]);
    const T s = static_cast<T>(sin[i]);
    rotary[first] = two_products(a, c, b, s, T(-1), first_output_fma(spec.fma));    // a*c - b*s
    rotary[second] = two_products(a, s, b, c, T(+1), second_output_fma(spec.fma));  // a*s + b*c
  }
}

template void apply_rope<float>(float*, const RopeSpec&, const RopeTable&, int);
template void apply_rope<double>(double*, const RopeSpec&, const RopeTable&, int);

}  // namespace dsaf::ref
