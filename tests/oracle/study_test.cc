// The sweep and needle studies on small contexts: invariants that must hold whatever
// the activations are; and the keys of their result files (results_io.h).
#include "oracle/needle.h"
#include "oracle/results_io.h"
#include "oracle/study_keys.h"
#include "oracle/sweep.h"

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
  const SweepResult r = run_sweep(c, nullptr);
  ASSERT_EQ(r.rows.size(), 1u);
  const Aggregate& m = r.rows[0].metrics;
  EXPECT_EQ(m.recall.worst, 1.0);
  EXPECT_EQ(m.mass_recall.worst, 1.0);
  EXPECT_EQ(m.recall.rows, 4);
  EXPECT_TRUE(r.rows[0].variant_of.empty());
  EXPECT_TRUE(r.attribution.empty());
  // Every finite (row, key) pair lands in the ulp histogram: 4 rows over keys 0..t.
  ASSERT_EQ(r.rows[0].score_ulp_histogram.size(), static_cast<size_t>(kUlpBuckets));
  int64_t pairs = 0;
  for (int64_t count : r.rows[0].score_ulp_histogram) pairs += count;
  EXPECT_GT(pairs, 4 * 128);
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
  const SweepResult r = run_sweep(c, nullptr);
  const double recall = r.rows[0].metrics.recall.mean;
  EXPECT_LT(recall, 1.0);  // fp8 keys and queries cost some recall
  EXPECT_GT(recall, 0.5);
  std::vector<std::string> stages;
  for (const StageAttribution& a : r.attribution) {
    stages.push_back(a.stage);
    EXPECT_EQ(a.recipe, "dsv32-ref");
    EXPECT_EQ(a.recall_loss, 1.0 - recall);
    EXPECT_EQ(a.accounted, a.recall_loss - a.recall_loss_with_stage_exact);
  }
  EXPECT_EQ(stages, (std::vector<std::string>{"norm", "rope", "hadamard", "key-quant",
                                              "query-quant", "score"}));
  // The variants' rows follow their recipe's, named "<recipe>~<stage>".
  ASSERT_EQ(r.rows.size(), 7u);
  for (size_t i = 1; i < r.rows.size(); ++i) {
    EXPECT_EQ(r.rows[i].variant_of, "dsv32-ref");
    EXPECT_EQ(r.rows[i].recipe, "dsv32-ref~" + r.rows[i].stage);
  }
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
  const NeedleResult r = run_needle(c, nullptr);
  int reachable = 0;
  for (const NeedleCase& rec : r.cases) {
    if (!rec.reachable) continue;
    ++reachable;
    EXPECT_LE(rec.exact_rank, 32);
    EXPECT_GE(rec.achieved_margin, rec.margin);
    const auto exact = std::find_if(rec.recipes.begin(), rec.recipes.end(),
                                    [](const NeedleOutcome& o) { return o.recipe == "exact"; });
    ASSERT_NE(exact, rec.recipes.end());
    EXPECT_TRUE(exact->retained);
    EXPECT_EQ(exact->retained, exact->rank <= 32);
  }
  EXPECT_GT(reachable, 0);
  // 2 trials x 3 depths x 2 margins for each oracle.
  EXPECT_FALSE(r.cases.empty());
  EXPECT_EQ(r.cases.size() % (2u * 3u * 2u), 0u);
  ASSERT_EQ(r.summary.size(), 2u * 2u);  // recipes x margins (one context)
  for (const NeedleSummaryRow& s : r.summary) {
    if (s.recipe == "exact") {
      EXPECT_EQ(s.retention, 1.0);
    }
  }
}

// The planted-fact mode measures the margin among the query's last R keys: at N = R it is
// the default mode case for case; at N > R tau and sigma come from R keys (R - 1 when the
// needle sits in the window), the needle is placed against them, and its exact rank among
// all N keys can exceed K as older keys compete (the default mode keeps it <= K).
TEST(Needle, PlantedFactMeasuresTheMarginInTheQuerysLastKeys) {
  NeedleConfig c;
  c.recipes = {ref::preset("exact"), ref::preset("dsv32-ref")};
  c.contexts = {256, 1024};
  c.depths = {0.0, 0.5, 1.0};
  c.margins = {0.05};
  c.trials = 1;
  c.topk = 16;
  c.activations = small_spec(ActivationKind::kGaussian);
  const NeedleResult plain = run_needle(c, nullptr);
  c.reference_context = 256;
  const NeedleResult planted = run_needle(c, nullptr);
  ASSERT_EQ(plain.cases.size(), planted.cases.size());
  EXPECT_EQ(planted.layout.reference_context, 256);
  int beyond_k = 0, checked = 0;
  for (size_t i = 0; i < plain.cases.size(); ++i) {
    const NeedleCase &a = plain.cases[i], &b = planted.cases[i];
    ASSERT_EQ(a.context, b.context);
    ASSERT_EQ(a.position, b.position);
    EXPECT_EQ(a.reference_keys, a.context - 1);
    if (a.context == 256) {  // the window is the whole context
      EXPECT_EQ(b.reference_keys, 255);
      EXPECT_EQ(a.tau, b.tau);
      EXPECT_EQ(a.sigma, b.sigma);
      EXPECT_EQ(a.needle_exact_score, b.needle_exact_score);
      continue;
    }
    EXPECT_EQ(b.reference_keys, b.position >= 1024 - 256 ? 255 : 256);
    EXPECT_NE(a.tau, b.tau);
    if (!b.reachable) continue;
    ++checked;
    EXPECT_GE(b.achieved_margin, b.margin);
    EXPECT_GE(b.needle_exact_score, b.tau);
    beyond_k += b.exact_rank > 16;
  }
  EXPECT_GT(checked, 0);
  EXPECT_GT(beyond_k, 0) << "a longer context should push some planted needles out of the exact top-K";
  const nlohmann::json j = needle_to_json(planted, "");
  EXPECT_EQ(j["reference_context"], 256);
  EXPECT_TRUE(j["cases"][0].contains("reference_keys"));
  EXPECT_FALSE(needle_to_json(plain, "").contains("reference_context"));
  c.reference_context = 1;
  EXPECT_THROW(run_needle(c, nullptr), Error);
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

TEST(ResultsIo, SweepJsonAndCsvHaveTheFormatsKeysAndColumns) {
  SweepConfig c;
  c.recipes = {ref::preset("dsv32-ref")};
  c.contexts = {128, 256};
  c.seeds = {1, 2};
  c.queries = 2;
  c.topk = 8;
  c.attribution = true;
  c.activations = small_spec(ActivationKind::kGaussian);
  const SweepResult r = run_sweep(c, nullptr);
  const nlohmann::json j = sweep_to_json(r, "dsa-fidelity sweep --test");
  std::vector<std::string> keys;
  for (const auto& [key, value] : j.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"activations", "attribution", "command", "kind", "page_size",
                                            "queries_per_context_and_seed", "query_positions", "rows",
                                            "score_ulp_histogram", "seeds", "topk"}));
  EXPECT_EQ(j["kind"], "sweep");
  EXPECT_EQ(j["command"], "dsa-fidelity sweep --test");
  EXPECT_EQ(j["seeds"], (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(j["activations"]["generator"], "gaussian");
  EXPECT_FALSE(sweep_to_json(r).contains("command"));
  ASSERT_EQ(j["rows"].size(), r.rows.size());
  const nlohmann::json& given = j["rows"][0];
  EXPECT_FALSE(given.contains("variant_of"));
  EXPECT_FALSE(given.contains("stage"));
  for (const char* key : {"recipe", "context", "metrics", "score_ulp_histogram"}) {
    EXPECT_TRUE(given.contains(key)) << key;
  }
  for (const char* key : {"recall", "jaccard", "tie_aware_recall", "value_recall", "mass_recall",
                          "kendall_tau", "page_recall"}) {
    for (const char* stat : {"mean", "p1", "p50", "worst"}) {
      EXPECT_TRUE(given["metrics"][key].contains(stat)) << key << " " << stat;
    }
  }
  EXPECT_EQ(given["metrics"]["rows"], 4);  // 2 queries x 2 seeds
  EXPECT_EQ(given["metrics"]["recall"]["mean"], r.rows[0].metrics.recall.mean);
  EXPECT_TRUE(given["metrics"].contains("threshold_valid_fraction"));
  EXPECT_TRUE(given["metrics"].contains("changed_histogram"));
  const nlohmann::json& variant = j["rows"][2];
  EXPECT_EQ(variant["variant_of"], "dsv32-ref");
  EXPECT_EQ(variant["stage"], "norm");
  ASSERT_FALSE(j["attribution"].empty());
  for (const char* key : {"recipe", "context", "stage", "recall_loss", "recall_loss_with_stage_exact",
                          "accounted"}) {
    EXPECT_TRUE(j["attribution"][0].contains(key)) << key;
  }

  const std::string csv = sweep_to_csv(r);
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "recipe,context,variant_of,stage,recall_mean,recall_p1,recall_worst,jaccard_mean,"
            "tie_aware_recall_mean,value_recall_mean,mass_recall_mean,kendall_tau_mean,"
            "page_recall_mean,threshold_valid_fraction");
  EXPECT_EQ(static_cast<size_t>(std::count(csv.begin(), csv.end(), '\n')), r.rows.size() + 1);
  EXPECT_NE(csv.find("\ndsv32-ref,128,,,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\ndsv32-ref~norm,128,dsv32-ref,norm,"), std::string::npos) << csv;
}

TEST(ResultsIo, NeedleJsonAndCsvHaveTheFormatsKeysAndColumns) {
  NeedleConfig c;
  c.recipes = {ref::preset("exact"), ref::preset("dsv32-ref")};
  c.contexts = {256};
  c.depths = {0.5};
  c.margins = {0.5, 1000.0};  // the second is out of reach
  c.trials = 1;
  c.topk = 8;
  c.activations = small_spec(ActivationKind::kGaussian);
  const NeedleResult r = run_needle(c, nullptr);
  const nlohmann::json j = needle_to_json(r, "dsa-fidelity needle --test");
  std::vector<std::string> keys;
  for (const auto& [key, value] : j.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"activations", "cases", "command", "depths", "kind",
                                            "margins_in_sigma", "query", "summary", "topk", "trials"}));
  EXPECT_EQ(j["kind"], "needle");
  EXPECT_EQ(j["trials"], 1);
  ASSERT_EQ(j["cases"].size(), r.cases.size());
  bool saw_reachable = false, saw_unreachable = false;
  for (size_t i = 0; i < r.cases.size(); ++i) {
    const nlohmann::json& rec = j["cases"][i];
    for (const char* key : {"context", "trial", "depth", "position", "margin", "tau", "sigma",
                            "model_recipes", "reachable"}) {
      EXPECT_TRUE(rec.contains(key)) << key;
    }
    EXPECT_EQ(rec["reachable"], r.cases[i].reachable);
    if (r.cases[i].reachable) {
      saw_reachable = true;
      for (const char* key : {"beta", "needle_exact_score", "achieved_margin", "exact_rank", "recipes"}) {
        EXPECT_TRUE(rec.contains(key)) << key;
      }
      EXPECT_FALSE(rec.contains("best_exact_score_found"));
      for (const NeedleOutcome& o : r.cases[i].recipes) {
        EXPECT_EQ(rec["recipes"][o.recipe]["rank"], o.rank);
        EXPECT_EQ(rec["recipes"][o.recipe]["retained"], o.retained);
        EXPECT_EQ(rec["recipes"][o.recipe]["score"], o.score);
      }
    } else {
      saw_unreachable = true;
      EXPECT_TRUE(rec.contains("best_exact_score_found"));
      EXPECT_TRUE(rec.contains("lowest_exact_score_found"));
      EXPECT_FALSE(rec.contains("recipes"));
      EXPECT_FALSE(rec.contains("beta"));
    }
  }
  EXPECT_TRUE(saw_reachable);
  EXPECT_TRUE(saw_unreachable);
  ASSERT_EQ(j["summary"].size(), 4u);
  for (const char* key : {"recipe", "context", "margin", "cases", "unreachable", "retention", "rank_p50",
                          "rank_worst"}) {
    EXPECT_TRUE(j["summary"][0].contains(key)) << key;
  }
  EXPECT_TRUE(j["summary"][0]["rank_p50"].is_number_float());

  const std::string csv = needle_to_csv(r);
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "recipe,context,margin_sigma,cases,retention,rank_p50,rank_worst");
  EXPECT_NE(csv.find("\nexact,256,0.5,1,1,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\nexact,256,1000,0,0,0,0\n"), std::string::npos) << csv;
}

TEST(ResultsIo, SelftestJsonNamesEveryField) {
  SelftestCheck check;
  check.name = "e4m3fn encode";
  check.oracle = "brute force";
  check.cases = 10;
  check.mismatches = 1;
  check.note = "first at 0x1";
  check.seconds = 0.5;
  const nlohmann::json j = selftest_to_json({check});
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(json_file_text(j),
            "[\n  {\n    \"cases\": 10,\n    \"check\": \"e4m3fn encode\",\n    \"mismatches\": 1,\n"
            "    \"note\": \"first at 0x1\",\n    \"oracle\": \"brute force\",\n    \"seconds\": 0.5,\n"
            "    \"skipped\": false\n  }\n]\n");
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
