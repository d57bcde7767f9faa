// File: rope.h
// Rotary position embedding on the 64 rotary dims of an indexer head.
//
// Table (RopeTable): for pair index i = 0..31 and position p,
//   f_i   = theta^(-2i/64), YaRN-corrected when yarn_factor > 1 (docs/numerics.md §2.4, §3.2):
//           dim(beta) = 64 * ln(original_seq_len / (beta * 2 pi)) / (2 ln theta)
//           low = max(floor(dim(beta_fast)), 0), high = min(ceil(dim(beta_slow)), 63)
//           ramp_i = clamp((i - low) / (high - low), 0, 1)        (high == low: +0.001)
//           f_i'  = f_i / factor * ramp_i + f_i * (1 - ramp_i)
//   cos/sin(p * f_i') computed in fp64 and rounded once to fp32.
// V3.2 (theta 1e4, factor 40, original 4096, betas 32/1) gives low = 10, high = 23;
// V4 compressed layers (theta 160000, factor 16, original 65536) give low = 15, high = 25.
// A table can also come from a fixture (the model's own fp32 table).
//
// Rotation of a pair (a, b) by (c, s):  a' = a*c - b*s,  b' = a*s + b*c,
// where pairs are (i, i+32) for NeoX or (2i, 2i+1) interleaved, inside the leading or
// trailing 64 dims. RopeSpec::fma names which product a compiler fused (recipe.h).
#pragma once

#include <cstdint>
#include <vector>

#include "reference/recipe.h"

namespace dsaf::ref {

inline constexpr int kRopePairs = kRopeDims / 2;  // 32

class RopeTable {
 public:
  // Computes positions [0, num_positions) from the spec.
  RopeTable(const RopeTableSpec& spec, int num_positions);
  // Computes the rows of `positions` only (any order, repeats allowed, each >= 0), each the
  // dense table's row bit for bit: a few tokens at positions near 2^31 - 1 would otherwise
  // need a dense table of 512 GiB (256 bytes a position), and a decode step at 1M, 256 MB.
  RopeTable(const RopeTableSpec& spec, const std::vector<int32_t>& positions);
  // Takes a supplied table: cos and sin each [num_positions][32], row-major.
  RopeTable(std::vector<float> cos, std::vector<float> sin);

  // Whether the table holds the row of `position`.
  bool holds(int position) const;
  // Pointers to 32 values; throws dsaf::Error(kBadInput) for a position the table lacks.
  const float* cos(int position) const;
  const float* sin(int position) const;

 private:
  size_t row_of(int position) const;
  bool sparse_ = false;             // rows for positions_ only, not for [0, rows)
  std::vector<int32_t> positions_;  // a sparse table's positions, sorted and distinct
  std::vector<float> cos_;
  std::vector<float> sin_;
};

// The YaRN-corrected frequencies f_i' of the spec, in fp64 (32 values).
std::vector<double> rope_frequencies(const RopeTableSpec& spec);

// Rotates the rotary dims of one 128-value head in place.
template <class T>
void apply_rope(T* x, const RopeSpec& spec, const RopeTable& table, int position);

}  // namespace dsaf::ref
