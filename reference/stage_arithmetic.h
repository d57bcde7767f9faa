// File: stage_arithmetic.h
// The arithmetic of the per-head stages (norm.h, rope.h, hadamard.h) as templates over
// the number type T: fp32, fp64 (the oracle) or a pack of lanes (numeric/lanes.h), which
// computes several tokens at once with the bits of the scalar code. The definitions live
// here, not in the stages' .cc files, so that the batch key path (key_batch.cc) can
// instantiate them for Lanes<T>. Include only from reference/*.cc: this folder is compiled
// with -ffp-contract=off (CMakeLists.txt), and the source is the numeric contract only
// where no compiler fuses a*b+c behind its back.
#pragma once

#include <cmath>

#include "reference/hadamard.h"
#include "reference/norm.h"
#include "reference/numeric/bit_cast.h"
#include "reference/numeric/lanes.h"
#include "reference/numeric/rsqrt.h"
#include "reference/recipe.h"
#include "reference/reduction.h"
#include "reference/rope.h"

namespace dsaf::ref {
namespace stage_detail {

template <class T>
T fused_multiply_add(T a, T b, T c) {
  using std::fma;  // Lanes<T> find theirs by argument-dependent lookup
  return fma(a, b, c);
}

// 1/sqrt in T: fp32 follows the recipe's rsqrt; the fp64 oracle uses 1/sqrt in fp64.
inline float inverse_sqrt(float v, RsqrtKind kind) { return rsqrt(v, kind); }
inline double inverse_sqrt(double v, RsqrtKind) { return 1.0 / std::sqrt(v); }
inline Fp32Lanes inverse_sqrt(Fp32Lanes v, RsqrtKind kind) { return rsqrt(v, kind); }
inline Fp64Lanes inverse_sqrt(Fp64Lanes v, RsqrtKind) {
  Fp64Lanes out;
  for (int j = 0; j < Fp64Lanes::kCount; ++j) out.set(j, 1.0 / std::sqrt(v[j]));
  return out;
}

// sum_i d_i^2 in the recipe's order, where d_i = term(i).
template <class T, class Term>
T sum_of_squares(const NormSpec& spec, Term term) {
  const auto fold = [&](T acc, int i) {
    const T d = term(i);
    return spec.fma_contraction ? fused_multiply_add(d, d, acc) : acc + d * d;
  };
  return reduce_128<T>(spec.order, T(0), fold, [](T a, T b) { return a + b; });
}

// fl(1/sqrt(128)) = 0x3db504f3: 1/sqrt(128) = 0.08838834764831845, and the three nearest
// fp32 values 0x3db504f2 / 0x3db504f3 / 0x3db504f4 lie 9.0e-9 below, 1.5e-9 below and
// 5.9e-9 above it (fp32 spacing here is 7.45e-9).
inline float hadamard_scale(float) { return float_from_bits(0x3db504f3u); }
// fp64: the correctly rounded 128^-1/2 (1.0 / std::sqrt(128.0) is one ulp below it).
inline double hadamard_scale(double) { return 0x1.6a09e667f3bcdp-4; }
template <class T>
Lanes<T> hadamard_scale(Lanes<T>) { return Lanes<T>(hadamard_scale(T{})); }

// a*b - c*d (sign = -1) or a*b + c*d (sign = +1) with the named product fused.
template <class T>
T two_products(T a, T b, T c, T d, T sign, ContractedProduct fused) {
  switch (fused) {
    case ContractedProduct::kFirst:
      return fused_multiply_add(a, b, sign * (c * d));
    case ContractedProduct::kSecond:
      return fused_multiply_add(sign * c, d, a * b);
    case ContractedProduct::kNone:
    case ContractedProduct::kCos:  // resolved per output by the caller (first/second_output_fma)
      break;
  }
  return a * b + sign * (c * d);
}

}  // namespace stage_detail

template <class T>
void apply_norm(T* x, const NormSpec& spec, const float* weight, const float* bias) {
  const T eps = static_cast<T>(spec.eps);
  const T n = static_cast<T>(kHeadDim);
  switch (spec.kind) {
    case NormKind::kNone:
      return;
    case NormKind::kRmsNorm: {
      const T ss = stage_detail::sum_of_squares<T>(spec, [&](int i) { return x[i]; });
      const T inv_rms = stage_detail::inverse_sqrt(ss / n + eps, spec.rsqrt);
      for (int i = 0; i < kHeadDim; ++i) x[i] = (x[i] * inv_rms) * static_cast<T>(weight[i]);
      return;
    }
    case NormKind::kLayerNorm: {
      const T sum = reduce_128<T>(
          spec.order, T(0), [&](T acc, int i) { return acc + x[i]; },
          [](T a, T b) { return a + b; });
      const T mean = sum / n;
      const T ss = stage_detail::sum_of_squares<T>(spec, [&](int i) { return x[i] - mean; });
      const T inv_std = stage_detail::inverse_sqrt(ss / n + eps, spec.rsqrt);
      for (int i = 0; i < kHeadDim; ++i) {
        const T normalized = (x[i] - mean) * inv_std;
        const T w = static_cast<T>(weight[i]);
        const T b = static_cast<T>(bias[i]);
        x[i] = spec.fma_contraction ? stage_detail::fused_multiply_add(normalized, w, b) : normalized * w + b;
      }
      return;
    }
  }
}

template <class T>
void apply_hadamard(T* x) {
  // Stage h pairs j with j + h for every j whose bit h is clear: blocks of 2h values,
  // the first half of each against its second half.
  for (int h = 1; h < kHeadDim; h *= 2) {
    for (int block = 0; block < kHeadDim; block += 2 * h) {
      for (int j = block; j < block + h; ++j) {
        const T a = x[j];
        const T b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  const T scale = stage_detail::hadamard_scale(T{});
  for (int j = 0; j < kHeadDim; ++j) x[j] = x[j] * scale;
}

// The rotation of apply_rope with the position's table rows given: cos[i], sin[i] for
// pair i = 0..31, as fp32 values (Row = float) or packs of them (Row = T = Lanes).
template <class T, class Row>
void rotate_pairs(T* x, const RopeSpec& spec, const Row* cos, const Row* sin) {
  using stage_detail::two_products;
  T* rotary = x + (spec.placement == RopePlacement::kLeading ? 0 : kHeadDim - kRopeDims);
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

}  // namespace dsaf::ref
