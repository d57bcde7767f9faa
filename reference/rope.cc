// File: rope.cc — rotary tables and rotation (rope.h; the arithmetic: stage_arithmetic.h).
#include "reference/rope.h"

#include <algorithm>
#include <cmath>
#include <new>
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

// Row `row` of cos and sin: position p's angles p * f_i', in fp64, each rounded once to fp32.
void compute_row(const std::vector<double>& freqs, int p, size_t row, std::vector<float>& cos,
                 std::vector<float>& sin) {
  for (int i = 0; i < kRopePairs; ++i) {
    const double angle = p * freqs[i];
    cos[row * kRopePairs + i] = static_cast<float>(std::cos(angle));
    sin[row * kRopePairs + i] = static_cast<float>(std::sin(angle));
  }
}

// cos and sin of `rows` rows each; a table that does not fit in memory is bad input (a
// dense table of positions up to 2^31 - 1 takes 512 GiB), not std::bad_alloc.
void allocate_rows(size_t rows, std::vector<float>& cos, std::vector<float>& sin) {
  try {
    cos.resize(rows * kRopePairs);
    sin.resize(rows * kRopePairs);
  } catch (const std::bad_alloc&) {
    throw_bad_input("rope table: " + std::to_string(rows) + " rows (" + std::to_string(rows * kRopePairs * 8 >> 20) +
                    " MiB) do not fit in memory");
  }
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
  if (num_positions < 0) throw_bad_input("rope table: " + std::to_string(num_positions) + " positions");
  const std::vector<double> freqs = rope_frequencies(spec);
  allocate_rows(static_cast<size_t>(num_positions), cos_, sin_);
  for (int p = 0; p < num_positions; ++p) compute_row(freqs, p, static_cast<size_t>(p), cos_, sin_);
}

RopeTable::RopeTable(const RopeTableSpec& spec, const std::vector<int32_t>& positions)
    : sparse_(true), positions_(positions) {
  std::sort(positions_.begin(), positions_.end());
  positions_.erase(std::unique(positions_.begin(), positions_.end()), positions_.end());
  if (!positions_.empty() && positions_.front() < 0) {
    throw_bad_input("rope table: the negative position " + std::to_string(positions_.front()));
  }
  const std::vector<double> freqs = rope_frequencies(spec);
  allocate_rows(positions_.size(), cos_, sin_);
  for (size_t row = 0; row < positions_.size(); ++row) compute_row(freqs, positions_[row], row, cos_, sin_);
}

RopeTable::RopeTable(std::vector<float> cos, std::vector<float> sin)
    : cos_(std::move(cos)), sin_(std::move(sin)) {
  if (cos_.size() != sin_.size() || cos_.size() % kRopePairs != 0) {
    throw_bad_input("rope table: cos and sin must both be [positions][32]");
  }
}

bool RopeTable::holds(int position) const {
  if (position < 0) return false;
  if (!sparse_) return static_cast<size_t>(position) < cos_.size() / kRopePairs;
  return std::binary_search(positions_.begin(), positions_.end(), position);
}

size_t RopeTable::row_of(int position) const {
  if (!sparse_) {
    if (!holds(position)) {
      throw_bad_input("rope table: position " + std::to_string(position) + " outside [0, " +
                      std::to_string(cos_.size() / kRopePairs) + ")");
    }
    return static_cast<size_t>(position);
  }
  // One search finds the row and whether the position has one.
  const auto at = std::lower_bound(positions_.begin(), positions_.end(), position);
  if (at == positions_.end() || *at != position) {
    throw_bad_input("rope table: position " + std::to_string(position) + " is not one it was computed for");
  }
  return static_cast<size_t>(at - positions_.begin());
}

const float* RopeTable::cos(int position) const { return cos_.data() + row_of(position) * kRopePairs; }
const float* RopeTable::sin(int position) const { return sin_.data() + row_of(position) * kRopePairs; }

template <class T>
void apply_rope(T* x, const RopeSpec& spec, const RopeTable& table, int position) {
  rotate_pairs(x, spec, table.cos(position), table.sin(position));
}

template void apply_rope<float>(float*, const RopeSpec&, const RopeTable&, int);
template void apply_rope<double>(double*, const RopeSpec&, const RopeTable&, int);

}  // namespace dsaf::ref
