// File: norm.cc — RMSNorm and LayerNorm of norm.h.
#include "reference/norm.h"

#include <cmath>

#include "reference/reduction.h"

namespace dsaf::ref {
namespace {

float fused_multiply_add(float a, float b, float c) { return std::fma(a, b, c); }
double fused_multiply_add(double a, double b, double c) { return std::fma(a, b, c); }

// 1/sqrt in T: fp32 follows the recipe's rsqrt; the fp64 oracle uses 1/sqrt in fp64.
float inverse_sqrt(float v, RsqrtKind kind) { return rsqrt(v, kind); }
double inverse_sqrt(double v, RsqrtKind) { return 1.0 / std::sqrt(v); }

// sum_i d_i^2 in the recipe's order, where d_i = term(i).
template <class T, class Term>
T sum_of_squares(const NormSpec& spec, Term term) {
  const auto fold = [&](T acc, int i) {
    const T d = term(i);
    return spec.fma_contraction ? fused_multiply_add(d, d, acc) : acc + d * d;
  };
  return reduce_128<T>(spec.order, T(0), fold, [](T a, T b) { return a + b; });
}

}  // namespace

template <class T>
void apply_norm(T* x, const NormSpec& spec, const float* weight, const float* bias) {
  const T eps = static_cast<T>(spec.eps);
  const T n = static_cast<T>(kHeadDim);
  switch (spec.kind) {
    case NormKind::kNone:
      return;
    case NormKind::kRmsNorm: {
      const T ss = sum_of_squares<T>(spec, [&](int i) { return x[i]; });
      const T inv_rms = inverse_sqrt(ss / n + eps, spec.rsqrt);
      for (int i = 0; i < kHeadDim; ++i) x[i] = (x[i] * inv_rms) * static_cast<T>(weight[i]);
      return;
    }
    case NormKind::kLayerNorm: {
      const T sum = reduce_128<T>(
          spec.order, T(0), [&](T acc, int i) { return acc + x[i]; },
          [](T a, T b) { return a + b; });
      const T mean = sum / n;
      const T ss = sum_of_squares<T>(spec, [&](int i) { return x[i] - mean; });
      const T inv_std = inverse_sqrt(ss / n + eps, spec.rsqrt);
      for (int i = 0; i < kHeadDim; ++i) {
        const T normalized = (x[i] - mean) * inv_std;
        const T w = static_cast<T>(weight[i]);
        const T b = static_cast<T>(bias[i]);
        x[i] = spec.fma_contraction ? fused_multiply_add(normalized, w, b) : normalized * w + b;
      }
      return;
    }
  }
}

template void apply_norm<float>(float*, const NormSpec&, const float*, const float*);
template void apply_norm<double>(double*, const NormSpec&, const float*, const float*);

}  // namespace dsaf::ref
