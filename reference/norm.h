// File: norm.h
// The key norm of the indexer, applied in place to one 128-value head.
//   RMSNorm:   y_i = (x_i * inv_rms) * w_i,
//              inv_rms = rsqrt(ss / 128 + eps),  ss = sum_i x_i^2
//   LayerNorm: y_i = ((x_i - mean) * inv_std) * w_i + b_i,
//              mean = (sum_i x_i) / 128,  inv_std = rsqrt(sum_i (x_i - mean)^2 / 128 + eps)
// Arithmetic in T (fp32, or fp64 for the oracle). Every operation rounds to T in the
// order written; sums follow NormSpec::order; with NormSpec::fma_contraction the sites
// `ss + x*x` and `n*w + b` are single fused multiply-adds; `/ 128` is exact (a power of
// two) so it is the same whether a compiler divides or multiplies by 2^-7.
#pragma once

#include "reference/recipe.h"

namespace dsaf::ref {

// weight: 128 values; bias: 128 values (LayerNorm) or nullptr.
template <class T>
void apply_norm(T* x, const NormSpec& spec, const float* weight, const float* bias);

}  // namespace dsaf::ref
