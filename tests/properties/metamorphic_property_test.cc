// Metamorphic properties of the reference: transformations of the input whose effect on
// the output is known exactly.
#include <cmath>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "properties/page_layout.h"
#include "reference/pipeline.h"
#include "reference/quantize.h"
#include "reference/score.h"

namespace dsaf::properties {
namespace {

// Scaling a block by 2^k leaves ue8m0 fp8 codes unchanged and multiplies the scale by
// 2^k (while amax stays above the floor and below overflow): every step of the rule is
// exact under power-of-two scaling.
RC_GTEST_PROP(QuantizeProperty, Ue8m0CodesAreInvariantUnderPowerOfTwoScaling, ()) {
  const std::vector<float> row = *gen_activation_row();
  const int k = *rc::gen::inRange(-20, 21);
  ref::QuantSpec q;
  q.format = ref::StorageFormat::kFp8E4m3fn;
  q.pow2 = *rc::gen::element(ref::ScalePow2::kExponentBitsCeil, ref::ScalePow2::kLog2Ceil);
  q.divisor = *rc::gen::element(ref::ScaleDivisor::kDivide, ref::ScaleDivisor::kTimesReciprocal);
  q.amax_floor = 1e-30f;
  std::vector<float> scaled(row.size());
  for (size_t i = 0; i < row.size(); ++i) scaled[i] = std::ldexp(row[i], k);
  const ref::StoredHead a = ref::store_head(row.data(), q);
  const ref::StoredHead b = ref::store_head(scaled.data(), q);
  RC_ASSERT(a.value_bytes == b.value_bytes);
  RC_ASSERT(b.dot_scale == std::ldexp(a.dot_scale, k));
}

// In the exact recipe (fp64, no quantisation) the Hadamard rotation is orthonormal and
// applied to both q and k, so scores do not change (up to fp64 rounding).
RC_GTEST_PROP(ExactRecipeProperty, HadamardLeavesScoresUnchanged, ()) {
  ref::Recipe with = ref::preset("exact");
  ref::Recipe without = with;
  without.hadamard = false;
  const int64_t n = *rc::gen::inRange(1, 20);
  const ref::RopeTable rope(with.rope.table, 64);
  std::vector<float> w(128, 1.0f), b(128, 0.0f);
  const ref::NormParams norm{w.data(), b.data()};
  ref::KeyMatrix keys_with, keys_without;
  for (int64_t s = 0; s < n; ++s) {
    const auto row = *gen_activation_row();
    keys_with.append(ref::run_key_path(with, row.data(), static_cast<int>(s), norm, rope));
    keys_without.append(ref::run_key_path(without, row.data(), static_cast<int>(s), norm, rope));
  }
  std::vector<float> q;
  for (int h = 0; h < 2; ++h) {
    const auto row = *gen_activation_row();
    q.insert(q.end(), row.begin(), row.end());
  }
  const std::vector<float> wproj = {0.8f, -1.1f};
  const ref::QueryOutput qa = ref::run_query_path(with, q.data(), 2, wproj.data(), 63, rope);
  const ref::QueryOutput qb = ref::run_query_path(without, q.data(), 2, wproj.data(), 63, rope);
  const auto sa = ref::index_scores(ref::prepare_query(qa.heads, qa.weights), keys_with, n, with.score);
  const auto sb = ref::index_scores(ref::prepare_query(qb.heads, qb.weights), keys_without, n, without.score);
  for (int64_t s = 0; s < n; ++s) {
    // |q.k| <= |q||k|; the rotation adds at most ~1e-15 relative error per term in fp64.
    RC_ASSERT(std::fabs(sa[s] - sb[s]) <= 1e-9 * (1.0 + std::fabs(sb[s])));
  }
}

}  // namespace
}  // namespace dsaf::properties
