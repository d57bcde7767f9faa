// Recipe detection: bytes written under a known recipe, or under a recipe with one field
// changed, are attributed to the right recipe and the right field.
#include "oracle/detect.h"

#include <random>

#include <gtest/gtest.h>

#include "reference/paged_cache.h"

namespace dsaf::oracle {
namespace {

// 40 outlier-heavy tokens at positions 0..39 in pages of 16 through a scrambled page
// table, RoPE rows from the recipe's table.
KeyObservation observe(const ref::Recipe& writer) {
  KeyObservation obs;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int T = 40;
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < 128; ++i) obs.key_inputs.push_back(normal(rng) * (i % 37 == 5 ? 60.0f : 1.0f));
  }
  for (int i = 0; i < 128; ++i) {
    obs.norm_weight.push_back(1.0f + 0.1f * normal(rng));
    obs.norm_bias.push_back(0.1f * normal(rng));
  }
  obs.page_size = 16;
  obs.num_pages = 5;
  obs.layout = writer.key_quant.format;
  const ref::PagedCacheLayout layout(writer.key_quant.format, obs.page_size);
  for (int t = 0; t < T; ++t) {
    const ref::CacheLocation at = layout.locate({4, 0, 2}, t, obs.num_pages);
    obs.positions.push_back(t);
    obs.slots.push_back(at.page * obs.page_size + at.offset);
  }
  obs.cache.assign(obs.num_pages * layout.page_bytes(), 0xAA);
  obs.cache = expected_cache(writer, obs);
  return obs;
}

TEST(DetectCapture, NamesThePresetThatWroteTheBytes) {
  const KeyObservation obs = observe(ref::preset("sglang-v4-fp8"));
  const Detection d = detect_capture(obs, ref::presets());
  EXPECT_EQ(d.matches, (std::vector<std::string>{"sglang-v4-fp8"}));
  // bf16 and fp4 layouts cannot hold these bytes.
  EXPECT_NE(std::find(d.skipped.begin(), d.skipped.end(), "sglang-v4-bf16"), d.skipped.end());
}

TEST(DetectCapture, NamesTheFieldThatExplainsANearMiss) {
  // An implementation that forms the scale as amax * fl(1/448) where sglang-v4-fp8
  // divides amax by 448 (docs/verification.md §7 trap 2): the fp32 scale words differ by an ulp
  // on many tokens. (Dividing the values instead of multiplying by the reciprocal, trap 1,
  // changes an e4m3fn code only when the quotient sits within an ulp of a code midpoint,
  // about one value in 2^20: 40 tokens rarely show it.)
  ref::Recipe mutant = ref::preset("sglang-v4-fp8");
  mutant.key_quant.divisor = ref::ScaleDivisor::kTimesReciprocal;
  const KeyObservation obs = observe(mutant);
  const Detection d = detect_capture(obs, ref::presets());
  ASSERT_TRUE(d.matches.empty()) << d.describe();
  EXPECT_EQ(d.closest, "sglang-v4-fp8");
  ASSERT_TRUE(d.closest_verdict.first.has_value());
  ASSERT_EQ(d.explaining.size(), 1u) << d.describe();
  EXPECT_EQ(d.explaining[0].change, "key_quant.divisor: \"divide\" -> \"times_reciprocal\"");
}

// A sign-magnitude e2m1 encoder (-0 for a negative value that rounds to zero) where
// sglang-v4-fp4's kernel writes +0: the one field that says so is named.
TEST(DetectCapture, NamesTheFp4ZeroSignRule) {
  ref::Recipe mutant = ref::preset("sglang-v4-fp4");
  mutant.key_quant.fp4_zero_sign = ref::Fp4ZeroSign::kKeep;
  const Detection d = detect_capture(observe(mutant), ref::presets());
  ASSERT_TRUE(d.matches.empty()) << d.describe();
  EXPECT_EQ(d.closest, "sglang-v4-fp4");
  ASSERT_EQ(d.explaining.size(), 1u) << d.describe();
  EXPECT_EQ(d.explaining[0].change, "key_quant.fp4_zero_sign: \"positive\" -> \"keep\"");
}

TEST(DetectCapture, FindsTheRsqrtAndRopeContractionChoices) {
  ref::Recipe mutant = ref::preset("sglang-v4-fp8");
  mutant.key_norm.rsqrt = ref::RsqrtKind::kCorrectlyRounded;
  Detection d = detect_capture(observe(mutant), ref::presets());
  ASSERT_EQ(d.explaining.size(), 1u) << d.describe();
  EXPECT_EQ(d.explaining[0].change, "key_norm.rsqrt: \"sm90_approx\" -> \"correctly_rounded\"");

  mutant = ref::preset("sglang-v4-fp8");
  mutant.rope.fma = ref::ContractedProduct::kNone;
  d = detect_capture(observe(mutant), ref::presets());
  ASSERT_EQ(d.explaining.size(), 1u) << d.describe();
  EXPECT_EQ(d.explaining[0].change, "rope.fma: \"first\" -> \"none\"");
}

TEST(SingleFieldChanges, AreValidAndNamed) {
  const auto changes = single_field_changes(ref::preset("dsv32-ref"));
  EXPECT_GT(changes.size(), 15u);
  for (const auto& [change, recipe] : changes) {
    EXPECT_FALSE(change.empty());
    EXPECT_NO_THROW(recipe.validate()) << change;
  }
}

}  // namespace
}  // namespace dsaf::oracle
