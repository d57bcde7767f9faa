// Index scores and top-K: the accumulation contracts of score.h and the selection
// contract of topk.h, checked against independent computations and hand cases.
#include <cmath>
#include <cstdint>
#include <random>

#include <gtest/gtest.h>

#include "reference/error.h"
#include "reference/numeric/minifloat.h"
#include "reference/score.h"
#include "reference/topk.h"

namespace dsaf::ref {
namespace {

StoredHead fp8_head(const std::vector<uint8_t>& codes, double scale) {
  StoredHead h;
  h.format = StorageFormat::kFp8E4m3fn;
  for (int d = 0; d < kHeadDim; ++d) h.dot_values[d] = decode_e4m3fn(codes[d]);
  h.dot_scale = scale;
  return h;
}

// An e4m3fn code as an integer multiple of 2^-9 (its value * 512), independent of the
// codec: normal codes (1 + m/8) * 2^(e-7), subnormals m/8 * 2^-6.
int64_t e4m3fn_in_units_of_2m9(uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 7;
  const int64_t magnitude = e == 0 ? m : (8 + m) << (e - 1);
  return code & 0x80 ? -magnitude : magnitude;
}

TEST(IndexScoreExact, Fp8DotIsExactAsTheProofInScoreHSays) {
  // Integer arithmetic in units of 2^-18 against the fp64 accumulation of kExact.
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> any_code(0, 255);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint8_t> q(kHeadDim), k(kHeadDim);
    for (int d = 0; d < kHeadDim; ++d) {
      do { q[d] = static_cast<uint8_t>(any_code(rng)); } while ((q[d] & 0x7F) == 0x7F);
      do { k[d] = static_cast<uint8_t>(any_code(rng)); } while ((k[d] & 0x7F) == 0x7F);
      if (trial == 0) q[d] = k[d] = 0x7E;  // all 448: the largest dot, 128 * 448^2
    }
    int64_t exact_units = 0;  // sum of products in units of 2^-18
    for (int d = 0; d < kHeadDim; ++d) exact_units += e4m3fn_in_units_of_2m9(q[d]) * e4m3fn_in_units_of_2m9(k[d]);
    KeyMatrix keys;
    keys.append(fp8_head(k, 1.0));
    const PreparedQuery query = prepare_query({fp8_head(q, 1.0)}, {1.0});
    const double score = index_scores(query, keys, 1, ScoreAccum::kExact)[0];
    const double expected = exact_units > 0 ? std::ldexp(static_cast<double>(exact_units), -18) : 0.0;
    ASSERT_EQ(score, expected) << "trial " << trial;  // ReLU then * 1
  }
}

// Head counts below, at and past the vector width of the score loop (16 fp32 or 8 fp64
// lanes), so both its vector and its scalar heads are pinned to the documented order.
TEST(IndexScoreFp32, FollowsTheDocumentedOrderWithKeyScaleAfterTheHeadSum) {
  for (const int H : {1, 8, 17, 64}) {
    std::mt19937 rng(5 + H);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<StoredHead> q_heads(H);
    std::vector<double> w(H);
    for (int h = 0; h < H; ++h) {
      for (int d = 0; d < kHeadDim; ++d) q_heads[h].dot_values[d] = normal(rng);
      w[h] = normal(rng);
    }
    const PreparedQuery query = prepare_query(q_heads, w);
    KeyMatrix keys;
    for (int s = 0; s < 64; ++s) {
      StoredHead k;
      for (int d = 0; d < kHeadDim; ++d) k.dot_values[d] = normal(rng);
      k.dot_scale = std::fabs(normal(rng)) + 0.001f;
      keys.append(k);
    }
    const std::vector<double> scores = index_scores(query, keys, 64, ScoreAccum::kFp32);
    const std::vector<double> fp64_scores = index_scores(query, keys, 64, ScoreAccum::kExact);
    int scale_placement_matters = 0;
    for (int s = 0; s < 64; ++s) {
      float sum = 0.0f, sum_scaled_inside = 0.0f;
      double sum64 = 0.0;
      const float k_scale = static_cast<float>(keys.dot_scales[s]);
      for (int h = 0; h < H; ++h) {
        float dot = 0.0f;
        double dot64 = 0.0;
        for (int d = 0; d < kHeadDim; ++d) {
          dot += static_cast<float>(q_heads[h].dot_values[d]) * static_cast<float>(keys.dot_values[s * kHeadDim + d]);
          dot64 += q_heads[h].dot_values[d] * keys.dot_values[s * kHeadDim + d];
        }
        const float relu = dot > 0.0f ? dot : 0.0f;
        sum += relu * static_cast<float>(w[h]);
        sum_scaled_inside += (relu * static_cast<float>(w[h])) * k_scale;
        sum64 += (dot64 > 0.0 ? dot64 : 0.0) * w[h];
      }
      ASSERT_EQ(scores[s], static_cast<double>(sum * k_scale)) << "H " << H << " key " << s;
      ASSERT_EQ(fp64_scores[s], sum64 * keys.dot_scales[s]) << "H " << H << " key " << s;
      scale_placement_matters += sum * k_scale != sum_scaled_inside;
    }
    // The placement of the key scale is observable in fp32 once there are two terms to
    // sum, so the test above pins it.
    if (H > 1) {
      EXPECT_GT(scale_placement_matters, 0) << "H " << H;
    }
  }
}

TEST(IndexScoreBf16, RoundsDotTermAndSumToBf16) {
  StoredHead q, k;
  for (int d = 0; d < kHeadDim; ++d) {
    q.dot_values[d] = 1.0;
    k.dot_values[d] = d == 0 ? 1.0 + 0x1p-7 : 0.0;  // dot = 1 + 2^-7 (a bf16 value)
  }
  KeyMatrix keys;
  keys.append(k);
  // dot = 1 + 2^-7 (a bf16 value). term = bf16((1 + 2^-7) * 3) = bf16(3.0234375). bf16
  // spacing in [2, 4) is 2^-6, and 3.0234375 = 3 + 1.5 * 2^-6 is the midpoint of
  // 3 + 2^-6 (fraction 1000001, odd) and 3 + 2^-5 (1000010, even): ties to even ->
  // 3.03125. The head sum of one term and bf16 rounding keep it. fp32 keeps 3.0234375.
  const PreparedQuery query = prepare_query({q}, {3.0});
  EXPECT_EQ(index_scores(query, keys, 1, ScoreAccum::kBf16)[0], 3.03125);
  EXPECT_EQ(index_scores(query, keys, 1, ScoreAccum::kFp32)[0], 3.0234375);
}

TEST(TopK, HigherScoreFirstThenLowerIndex) {
  const std::vector<double> s = {1.0, 5.0, 3.0, 5.0, -2.0, 3.0};
  EXPECT_EQ(select_topk(s, 6, 4), (std::vector<int32_t>{1, 3, 2, 5}));
  EXPECT_EQ(select_topk(s, 6, 1), (std::vector<int32_t>{1}));
}

TEST(TopK, AllEqualScoresSelectTheLowestIndices) {
  const std::vector<double> s(100, 0.25);
  std::vector<int32_t> expected(10);
  for (int i = 0; i < 10; ++i) expected[i] = i;
  EXPECT_EQ(select_topk(s, 100, 10), expected);
}

TEST(TopK, FewerValidPositionsThanKPadsWithMinusOne) {
  const std::vector<double> s = {0.5, 2.0, 1.0, 9.0};  // position 3 masked: n_valid = 3
  EXPECT_EQ(select_topk(s, 3, 5), (std::vector<int32_t>{1, 2, 0, -1, -1}));
  EXPECT_EQ(select_topk(s, 0, 2), (std::vector<int32_t>{-1, -1}));
}

TEST(TopK, NegativeInfinityIsSelectableButNaNIsBadInput) {
  EXPECT_EQ(select_topk({-INFINITY, 1.0}, 2, 2), (std::vector<int32_t>{1, 0}));
  EXPECT_THROW(select_topk({1.0, NAN}, 2, 1), Error);
  EXPECT_THROW(select_topk({1.0}, 2, 1), Error);
}

TEST(TopK, MatchesAFullSortOnTieHeavyRows) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> few(0, 7);  // 8 distinct values: heavy ties
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<double> s(1000);
    for (double& v : s) v = few(rng) * 0.5;
    std::vector<int32_t> all(1000);
    for (int i = 0; i < 1000; ++i) all[i] = i;
    std::stable_sort(all.begin(), all.end(), [&](int a, int b) { return s[a] > s[b]; });
    all.resize(100);
    ASSERT_EQ(select_topk(s, 1000, 100), all);
  }
}

}  // namespace
}  // namespace dsaf::ref
