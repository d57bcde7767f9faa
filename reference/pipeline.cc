// File: pipeline.cc — key and query paths (pipeline.h).
#include "reference/pipeline.h"

#include <array>
#include <cmath>
#include <string>

#include "reference/error.h"
#include "reference/hadamard.h"
#include "reference/norm.h"
#include "reference/numeric/minifloat.h"

namespace dsaf::ref {
namespace {

// Rounds every value to bf16 when `enabled` (fp32 compute only; validate() forbids
// rounding in fp64 compute).
template <class T>
void round_to_bf16_if(bool enabled, T* x) {
  if (!enabled) return;
  for (int i = 0; i < kHeadDim; ++i) x[i] = static_cast<T>(round_bf16(static_cast<float>(x[i])));
}

void check_finite(const float* x, int n, const char* what) {
  for (int i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      throw_bad_input(std::string(what) + ": non-finite value at element " + std::to_string(i));
    }
  }
}

template <class T>
std::array<T, kHeadDim> load(const float* in, bool round_input) {
  std::array<T, kHeadDim> x;
  for (int i = 0; i < kHeadDim; ++i) x[i] = static_cast<T>(in[i]);
  round_to_bf16_if(round_input, x.data());
  return x;
}

// RoPE, then the Hadamard rotation, with the recipe's rounding after each.
template <class T>
void rope_and_rotate(const Recipe& recipe, const IntermediateRounding& rounding, T* x,
                     const RopeTable& rope, int position) {
  apply_rope(x, recipe.rope, rope, position);
  round_to_bf16_if(rounding.rope, x);
  if (recipe.hadamard) {
    apply_hadamard(x);
    round_to_bf16_if(rounding.hadamard, x);
  }
}

template <class T>
StoredHead key_path(const Recipe& recipe, const float* k_in, int position,
                    const NormParams& norm, const RopeTable& rope) {
  std::array<T, kHeadDim> x = load<T>(k_in, recipe.key_rounding.input);
  if (recipe.key_norm.kind != NormKind::kNone) {
    if (norm.weight == nullptr ||
        (recipe.key_norm.kind == NormKind::kLayerNorm && norm.bias == nullptr)) {
      throw_bad_input("recipe '" + recipe.name + "' needs key-norm weight" +
                      (recipe.key_norm.kind == NormKind::kLayerNorm ? " and bias" : ""));
    }
    apply_norm(x.data(), recipe.key_norm, norm.weight, norm.bias);
    round_to_bf16_if(recipe.key_rounding.norm, x.data());
  }
  rope_and_rotate(recipe, recipe.key_rounding, x.data(), rope, position);
  return store_head(x.data(), recipe.key_quant);
}

// The folded head weight (Recipe::weights_fold, Recipe::weights).
double head_weight(const Recipe& recipe, float wproj, double q_scale, int num_heads) {
  if (recipe.compute == Compute::kFp64) {
    // 128^-1/2 correctly rounded (1.0 / std::sqrt(128.0) is one ulp low).
    constexpr double kInvSqrtHeadDim = 0x1.6a09e667f3bcdp-4;
    return static_cast<double>(wproj) / std::sqrt(static_cast<double>(num_heads)) * q_scale *
           kInvSqrtHeadDim;
  }
  const float scale = static_cast<float>(q_scale);
  const float inv_sqrt_heads = static_cast<float>(1.0 / std::sqrt(static_cast<double>(num_heads)));
  const float inv_sqrt_dim = static_cast<float>(1.0 / std::sqrt(static_cast<double>(kHeadDim)));
  const float combined = static_cast<float>(1.0 / std::sqrt(static_cast<double>(num_heads) * kHeadDim));
  float w;
  if (recipe.weights_fold == WeightsFold::kSeparateFactors) {
    w = ((wproj * inv_sqrt_heads) * scale) * inv_sqrt_dim;
  } else {
    w = (wproj * combined) * scale;
  }
  return recipe.weights == WeightsPrecision::kBf16 ? round_bf16(w) : w;
}

template <class T>
QueryOutput query_path(const Recipe& recipe, const float* q_in, int num_heads,
                       const float* wproj, int position, const RopeTable& rope) {
  QueryOutput out;
  for (int h = 0; h < num_heads; ++h) {
    std::array<T, kHeadDim> x = load<T>(q_in + h * kHeadDim, recipe.query_rounding.input);
    rope_and_rotate(recipe, recipe.query_rounding, x.data(), rope, position);
    out.heads.push_back(store_head(x.data(), recipe.query_quant));
    out.weights.push_back(head_weight(recipe, wproj[h], out.heads.back().dot_scale, num_heads));
  }
  return out;
}

}  // namespace

StoredHead run_key_path(const Recipe& recipe, const float* k_in, int position,
                        const NormParams& norm, const RopeTable& rope) {
  check_finite(k_in, kHeadDim, "key input");
  if (recipe.compute == Compute::kFp64) return key_path<double>(recipe, k_in, position, norm, rope);
  return key_path<float>(recipe, k_in, position, norm, rope);
}

QueryOutput run_query_path(const Recipe& recipe, const float* q_in, int num_heads,
                           const float* wproj, int position, const RopeTable& rope) {
  if (num_heads < 1) throw_bad_input("query: num_heads must be >= 1");
  check_finite(q_in, num_heads * kHeadDim, "query input");
  check_finite(wproj, num_heads, "head weights (wproj)");
  if (recipe.compute == Compute::kFp64) {
    return query_path<double>(recipe, q_in, num_heads, wproj, position, rope);
  }
  return query_path<float>(recipe, q_in, num_heads, wproj, position, rope);
}

}  // namespace dsaf::ref
