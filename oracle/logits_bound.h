// File: logits_bound.h — the bounded contract of paged logits (kernel_abi.h
// logits_contract 1: tensor-core accumulation, whose order and precision differ from the
// reference's): how far one logit may be from the exact (fp64) score. Derived in
// device/paged_logits_mma.cu's header, for Hopper's fp8 and bf16 MMA plus an fp32
// epilogue with H + 4 roundings:
//   |logit - exact| <= k_scale x (E x W + (H + 4) x 2^-24 x W),
//   W = sum_h |w_h| M_h,  M_h = sum_d |q_hd k_d| (dequantised dot values),
//   E = 4 x 34 x 2^-12 (fp8 cache: 34 truncations of ~13-bit alignment per k32 step, 4
//   steps), 200 x 2^-23 (bf16 cache: <= 192 block-FMA truncations, 8 more for second-order
//   terms); k_scale is the key's scale (1 for bf16).
// verify checks it on every score of a bounded kernel; paged_logits_gpu_test on ours.
#pragma once

#include <cmath>

#include "reference/pipeline.h"
#include "reference/recipe.h"

namespace dsaf::oracle {

// The formats the derivation covers: an fp8 or bf16-stored cache (fp4-simulated values
// are stored as bf16), fp32 accumulation.
inline bool logit_bound_derived_for(ref::StorageFormat key_format, ref::ScoreAccum accum) {
  return accum == ref::ScoreAccum::kFp32 &&
         (key_format == ref::StorageFormat::kFp8E4m3fn || key_format == ref::StorageFormat::kBf16 ||
          key_format == ref::StorageFormat::kFp4SimulatedBf16);
}

// W = sum_h |w_h| sum_d |q_hd k_d| of one key (its 128 dequantised dot values) against
// a query's heads and folded weights.
inline double weighted_magnitude(const ref::QueryOutput& q, const double* key) {
  double weighted = 0.0;
  for (size_t h = 0; h < q.heads.size(); ++h) {
    double magnitude = 0.0;
    for (int d = 0; d < ref::kHeadDim; ++d) magnitude += std::fabs(q.heads[h].dot_values[d] * key[d]);
    weighted += std::fabs(q.weights[h]) * magnitude;
  }
  return weighted;
}

inline double bounded_logit_error(ref::StorageFormat key_format, int heads, double key_scale,
                                  double weighted_magnitude) {
  const bool fp8 = key_format == ref::StorageFormat::kFp8E4m3fn;
  const double dot = fp8 ? 4 * 34 * std::ldexp(1.0, -12) : 200 * std::ldexp(1.0, -23);
  return key_scale * (dot * weighted_magnitude + (heads + 4) * std::ldexp(weighted_magnitude, -24));
}

}  // namespace dsaf::oracle
