// The sweep and needle studies on small contexts: invariants that must hold whatever
// the activations are.
#include "oracle/study.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "reference/error.h"

namespace dsaf::oracle {
namespace {

SyntheticSpec small_spec(ActivationKind kind) {
  SyntheticSpec s;
  s.kind = kind;
  s.seed = 7;
  s.num_heads = 8;
  return s;
}

TEST(SyntheticActivations, AreDeterministicPerTokenAndDifferAcrossTokens) {
  const SyntheticActivations a(small_spec(ActivationKind::kOutliers));
  const SyntheticActivations b(small_spec(ActivationKind::kOutliers));
  float x[128], y[128], z[128];
  a.key_input(1000, x);
  b.key_input(1000, y);
  a.key_input(1001, z);
  EXPECT_EQ(0, std::memcmp(x, y, sizeof x));
  EXPECT_NE(0, std::memcmp(x, z, sizeof x));
  // Outlier channels: the largest |value| over many tokens is far above N(0,1)'s range.
  float largest = 0;
  for (int t = 0; t < 50; ++t) {
    a.key_input(t, x);
    for (float v : x) largest = std::max(largest, std::fabs(v));
  }
  EXPECT_GT(largest, 20.0f);
  EXPECT_THROW(parse_activation_kind("uniform"), Error);
}

TEST(Sweep, ExactRecipeAgainstItsOracleHasPerfectMetrics) {
  SweepConfig c;
  c.recipes = {ref::preset("exact")};
  c.contexts = {256};
  c.seeds = {1};
  c.queries = 4;
  c.topk = 32;
  c.activations = small_spec(ActivationKind::kGaussian);
  const nlohmann::json r = run_sweep(c, nullptr);
  ASSERT_EQ(r["rows"].size(), 1u);
  const auto& m = r["rows"][0]["metrics"];
  EXPECT_EQ(m["recall"]["worst"], 1.0);
  EXPECT_EQ(m["mass_recall"]["worst"], 1.0);
  EXPECT_EQ(m["rows"], 4);
}

TEST(Sweep, QuantisedRecipeLosesSomethingAndAttributionNamesStages) {
  SweepConfig c;
  c.recipes = {ref::preset("dsv32-ref")};
  c.contexts = {1024};
  c.seeds = {1};
  c.queries = 8;
  c.topk = 64;
  c.attribution = true;
  c.activations = small_spec(ActivationKind::kOutliers);
  c.threads = 2;
  const nlohmann::json r = run_sweep(c, nullptr);
  const double recall = r["rows"][0]["metrics"]["recall"]["mean"];
  EXPECT_LT(recall, 1.0);  // fp8 keys and queries cost some recall
  EXPECT_GT(recall, 0.5);
  std::vector<std::string> stages;
  for (const auto& a : r["attribution"]) stages.push_back(a["stage"]);
  EXPECT_EQ(stages, (std::vector<std::string>{"norm", "rope", "hadamard", "key-quant",
                                              "query-quant", "score"}));
}

TEST(Needle, TheOracleKeepsEveryNeedleWithPositiveMargin) {
  NeedleConfig c;
  c.recipes = {ref::preset("exact"), ref::preset("dsv32-ref")};
  c.contexts = {512};
  c.depths = {0.0, 0.5, 1.0};
  c.margins = {0.05, 1.0};
  c.trials = 2;
  c.topk = 32;
  c.activations = small_spec(ActivationKind::kOutliers);
  const nlohmann::json r = run_needle(c, nullptr);
  int reachable = 0;
  for (const auto& rec : r["cases"]) {
    if (!rec["reachable"].get<bool>()) continue;
    ++reachable;
    EXPECT_LE(rec["exact_rank"].get<int>(), 32);
    EXPECT_GE(rec["achieved_margin"].get<double>(), rec["margin"].get<double>());
    EXPECT_TRUE(rec["recipes"]["exact"]["retained"].get<bool>());
  }
  EXPECT_GT(reachable, 0);
  for (const auto& s : r["summary"]) {
    if (s["recipe"] == "exact") {
      EXPECT_EQ(s["retention"], 1.0);
    }
  }
}

TEST(Needle, RejectsBadConfigurations) {
  NeedleConfig c;
  c.recipes = {ref::preset("exact")};
  c.contexts = {512};
  c.depths = {1.5};
  c.margins = {1.0};
  EXPECT_THROW(run_needle(c, nullptr), Error);
  c.depths = {0.5};
  c.contexts = {1};
  EXPECT_THROW(run_needle(c, nullptr), Error);
}

TEST(StageVariants, CoverTheRecipesLossyStagesOnly) {
  std::vector<std::string> names;
  for (const auto& [stage, r] : stage_variants(ref::preset("sglang-v4-fp8"))) names.push_back(stage);
  // fp32 throughout: no bf16 rounding after Hadamard, so no "hadamard" stage.
  EXPECT_EQ(names, (std::vector<std::string>{"norm", "rope", "key-quant", "query-quant", "score"}));
  EXPECT_TRUE(stage_variants(ref::preset("exact")).empty());
}

}  // namespace
}  // namespace dsaf::oracle
