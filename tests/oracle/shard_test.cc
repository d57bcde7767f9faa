// Sharding a study (oracle/shard_plan.h) and merging its shard files
// (oracle/shard_files.h): every unit runs on exactly one shard, the plan is balanced, the
// merged result is the unsharded one for any shard count, and numbers survive the files
// bit for bit.
#include "oracle/shard_files.h"
#include "oracle/shard_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "oracle/results_io.h"
#include "reference/error.h"

namespace dsaf::oracle {
namespace {

TEST(ShardPlan, ParsesIndexOverCountAndRefusesAnythingElse) {
  const Shard s = parse_shard("2/5");
  EXPECT_EQ(s.index, 2);
  EXPECT_EQ(s.count, 5);
  for (const char* bad : {"5/5", "1/0", "x", "", "/3", "1/", "-1/3", "1/3/4", "1.0/3", "0x1/3", "1/9999999999"}) {
    try {
      parse_shard(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUsage) << bad;
    }
  }
}

TEST(ShardPlan, EveryUnitRunsOnExactlyOneShardAndNoShardCarriesMoreThanItsShareAndOneUnit) {
  const std::vector<std::vector<int64_t>> cost_lists = {
      {2048, 4096, 8192, 16384, 32768, 65536},  // contexts 2k..64k, one seed
      {256, 256, 256, 256, 512, 512, 512, 512},  // two contexts, four seeds
      {7},
      {}};
  for (const auto& costs : cost_lists) {
    const int64_t total = std::accumulate(costs.begin(), costs.end(), int64_t{0});
    const int64_t largest = costs.empty() ? 0 : *std::max_element(costs.begin(), costs.end());
    for (int count = 1; count <= 9; ++count) {
      std::vector<int> runs(costs.size(), 0);
      for (int i = 0; i < count; ++i) {
        int64_t load = 0;
        const std::vector<size_t> mine = units_of_shard(costs, Shard{i, count});
        EXPECT_TRUE(std::is_sorted(mine.begin(), mine.end()));
        for (const size_t unit : mine) {
          ++runs[unit];
          load += costs[unit];
        }
        // Greedy to the least loaded shard: a shard's last unit joined a load <= the mean.
        EXPECT_LE(load, total / count + largest) << "shard " << i << " of " << count;
      }
      for (size_t unit = 0; unit < costs.size(); ++unit) EXPECT_EQ(runs[unit], 1) << unit;
    }
  }
  // Equal costs: round-robin over the canonical order.
  const std::vector<int> owner = assign_units(std::vector<int64_t>(7, 100), 3);
  for (size_t unit = 0; unit < owner.size(); ++unit) EXPECT_EQ(owner[unit], static_cast<int>(unit % 3));
}

SyntheticSpec small_spec() {
  SyntheticSpec s;
  s.kind = ActivationKind::kOutliers;
  s.seed = 3;
  s.num_heads = 2;
  return s;
}

ShardOrigin origin() { return {"0.1.0", "test", "dsa-fidelity sweep ...", ""}; }

// The shard files of `count` shards as `merge` reads them: written and parsed back.
template <class Config, class Units, class RunUnits, class ShardJson>
std::vector<ShardFile> shard_files(const Config& config, const Units& units, int count, RunUnits run_units,
                                   ShardJson shard_json) {
  std::vector<ShardFile> files;
  for (int i = count - 1; i >= 0; --i) {  // in reverse: merge orders them itself
    const Shard shard{i, count};
    const auto results = run_units(config, units_of_shard(units, shard), nullptr);
    const std::string text = shard_file_text(shard_json(config, shard, origin(), results));
    files.push_back({shard_file_name("study", shard), nlohmann::json::parse(text)});
  }
  return files;
}

TEST(ShardFiles, MergedSweepIsTheWholeSweepForAnyShardCount) {
  SweepConfig config;
  config.recipes = {ref::preset("dsv32-ref"), ref::preset("sglang-v4-fp8")};
  config.contexts = {96, 160, 224};
  config.seeds = {11, 12};
  config.queries = 3;
  config.topk = 8;
  config.attribution = true;
  config.activations = small_spec();
  const std::string whole = json_file_text(sweep_to_json(run_sweep(config, nullptr), "c"));
  const std::vector<SweepUnit> units = sweep_units(sweep_layout(config));
  for (int count = 1; count <= 7; ++count) {  // 7: more shards than the 6 units
    const auto files = shard_files(config, units, count, run_sweep_units, sweep_shard_json);
    const auto merged = merge_sweep_shards(files);
    EXPECT_EQ(merged.command, origin().command);
    EXPECT_TRUE(json_file_text(sweep_to_json(merged.result, "c")) == whole) << count << " shards";
  }
}

TEST(ShardFiles, MergedNeedleIsTheWholeNeedleForAnyShardCount) {
  NeedleConfig config;
  config.recipes = {ref::preset("dsv32-ref"), ref::preset("exact"), ref::preset("sglang-v4-fp8")};
  config.contexts = {96, 160};
  config.depths = {0.25, 0.75};
  config.margins = {0.0, 0.3};
  config.trials = 2;
  config.topk = 8;
  config.activations = small_spec();
  for (const int64_t reference_context : {0, 64}) {  // the default, and the planted-fact mode
    config.reference_context = reference_context;
    const NeedleResult whole_result = run_needle(config, nullptr);
    const std::string whole = json_file_text(needle_to_json(whole_result, "c")) + needle_to_csv(whole_result);
    EXPECT_EQ(whole.find("reference_keys") != std::string::npos, reference_context > 0);
    const std::vector<NeedleUnit> units = needle_units(needle_layout(config));
    for (int count = 1; count <= 5; ++count) {
      const auto files = shard_files(config, units, count, run_needle_units, needle_shard_json);
      const NeedleResult merged = merge_needle_shards(files).result;
      EXPECT_TRUE(json_file_text(needle_to_json(merged, "c")) + needle_to_csv(merged) == whole)
          << count << " shards, reference context " << reference_context;
    }
  }
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// A unit's numbers that JSON has no literal for (a study reaches them when sigma is 0 or a
// score overflows) come back as the same doubles.
// A needle of one unit: context 64, one trial, one depth and margin, the exact recipe.
NeedleConfig one_unit_needle() {
  NeedleConfig config;
  config.recipes = {ref::preset("exact")};
  config.contexts = {64};
  config.depths = {0.5};
  config.margins = {0.1};
  config.trials = 1;
  config.topk = 4;
  config.activations = small_spec();
  return config;
}

// A change of a valid shard file: `value` at `pointer` (and at `also`, when not empty).
struct ShardEdit {
  ShardEdit(std::string pointer_, nlohmann::json value_, std::string expected_, std::string also_ = "")
      : pointer(std::move(pointer_)), value(std::move(value_)), expected(std::move(expected_)), also(std::move(also_)) {}
  std::string pointer;
  nlohmann::json value;
  std::string expected;  // a part of the refusal's message
  std::string also;
};

// Each edit of `valid` is refused by `merge` as kBadInput, the message naming the file and
// holding the edit's expected text.
template <class Merge>
void expect_edits_refused(const nlohmann::json& valid, Merge merge, const std::vector<ShardEdit>& edits) {
  ASSERT_NO_THROW(merge({{"valid.json", valid}}));
  for (const ShardEdit& edit : edits) {
    nlohmann::json file = valid;
    file[nlohmann::json::json_pointer(edit.pointer)] = edit.value;
    if (!edit.also.empty()) file[nlohmann::json::json_pointer(edit.also)] = edit.value;
    try {
      merge({{"edited.json", file}});
      ADD_FAILURE() << edit.pointer << " = " << edit.value.dump() << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << edit.pointer;
      EXPECT_NE(std::string(e.what()).find(edit.expected), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("edited.json"), std::string::npos) << e.what();
    }
  }
}

// A sweep's shard file whose configuration, studied recipes or histograms no study makes is
// refused (kBadInput), not merged: a configuration `sweep` refuses to run; a variant of a
// recipe the study does not hold (std::out_of_range escaped reduce_sweep before; the
// fuzz_shard_merge target's second find) or a stage without a base recipe; a negative
// count, counts whose sum passes int64.
TEST(ShardFiles, SweepStudiedRecipesAndHistogramsAreChecked) {
  SweepConfig config;
  config.recipes = {ref::preset("dsv32-ref")};
  config.contexts = {96};
  config.seeds = {11, 12};
  config.queries = 2;
  config.topk = 8;
  config.activations = small_spec();
  const auto units = run_sweep_units(config, sweep_units(sweep_layout(config)), nullptr);
  const nlohmann::json valid =
      nlohmann::json::parse(shard_file_text(sweep_shard_json(config, Shard{0, 1}, origin(), units)));
  expect_edits_refused(valid, merge_sweep_shards,
                       {{"/config/studied/0/variant_of", "no-such-recipe", "which the study does not hold"},
                        {"/config/studied/0/stage", "norm", "names a stage without a base recipe"},
                        {"/config/topk", -4, "topk: -4 is not >= 1"},
                        {"/config/queries", 0, "queries: 0"},
                        {"/config/page_size", 0, "page_size: 0"},
                        {"/config/contexts/0", 0, "contexts: 0 is not >= 1"},
                        {"/config/contexts", nlohmann::json::array(), "contexts: none"},
                        {"/config/studied", nlohmann::json::array(), "recipes: none"},
                        {"/units/0/studied/0/score_ulp_histogram/0", -1, "histogram count -1"},
                        // the same count in both units: their sum passes int64
                        {"/units/0/studied/0/score_ulp_histogram/1", 9223372036854775807ll, "histogram count",
                         "/units/1/studied/0/score_ulp_histogram/1"}});
}

TEST(ShardFiles, NonFiniteAndSignedZeroNumbersSurviveAShardFile) {
  const NeedleConfig config = one_unit_needle();
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  NeedleCase c;
  c.context = 64;
  c.trial = 1;
  c.depth = 0.5;
  c.position = 32;
  c.margin = 0.1;
  c.tau = -inf;
  c.sigma = -0.0;
  c.model_recipes = {"exact"};
  c.reachable = true;
  c.beta = nan;
  c.needle_exact_score = inf;
  c.achieved_margin = -nan;
  c.exact_rank = 1;
  c.recipes = {{"exact", 1, true, 0.1 + 0.2}};
  const std::vector<NeedleUnitResult> units = {{{64, 1}, {c}}};
  const std::string text = shard_file_text(needle_shard_json(config, Shard{0, 1}, origin(), units));
  const NeedleResult merged = merge_needle_shards({{"one.json", nlohmann::json::parse(text)}}).result;
  ASSERT_EQ(merged.cases.size(), 1u);
  const NeedleCase& back = merged.cases[0];
  EXPECT_TRUE(same_bits(back.tau, c.tau));
  EXPECT_TRUE(same_bits(back.sigma, c.sigma));
  EXPECT_TRUE(std::isnan(back.beta) && !std::signbit(back.beta));
  EXPECT_TRUE(same_bits(back.needle_exact_score, c.needle_exact_score));
  EXPECT_TRUE(std::isnan(back.achieved_margin) && std::signbit(back.achieved_margin));
  ASSERT_EQ(back.recipes.size(), 1u);
  EXPECT_TRUE(same_bits(back.recipes[0].score, c.recipes[0].score));
}

// A needle shard file is refused (kBadInput) when its configuration is one `needle` refuses
// to run, or a case is not one its study makes: `merge` would otherwise echo a topk of -4 or
// a negative margin into a merged result, or count a case under a margin the study lacks.
TEST(ShardFiles, NeedleConfigurationsAndCasesNoStudyMakesAreRefused) {
  const NeedleConfig config = one_unit_needle();
  const auto units = run_needle_units(config, needle_units(needle_layout(config)), nullptr);
  ASSERT_EQ(units.size(), 1u);
  ASSERT_FALSE(units[0].cases.empty());
  ASSERT_TRUE(units[0].cases[0].reachable);
  ASSERT_FALSE(units[0].cases[0].recipes.empty());
  const nlohmann::json valid =
      nlohmann::json::parse(shard_file_text(needle_shard_json(config, Shard{0, 1}, origin(), units)));
  expect_edits_refused(valid, merge_needle_shards, {
      {"/config/topk", -4, "topk: -4 is not >= 1"},
      {"/config/margins/0", -0.5, "margins: -0.5"},
      {"/config/margins/0", "nan", "margins: nan"},
      {"/config/margins", nlohmann::json::array(), "margins: none"},
      {"/config/depths/0", 1.5, "depths: 1.5 is not in [0, 1]"},
      {"/config/contexts/0", 1, "contexts: 1 is not >= 2"},
      {"/config/reference_context", 1, "reference_context: 1"},
      {"/config/recipe_names", nlohmann::json::array(), "recipes: none"},
      {"/units/0/cases/0/margin", 0.2, "not the study's"},
      {"/units/0/cases/0/depth", 0.25, "not the study's"},
      {"/units/0/cases/0/position", 64, "outside the context"},
      {"/units/0/cases/0/recipes/0/recipe", "bf16", "which the study does not hold"},
      {"/units/0/cases/0/recipes/0/rank", 0, "outside 1..64"},
      {"/units/0/cases/0/recipes/0/rank", 65, "outside 1..64"},
  });
}

// Integers in a shard file are read exactly: a value with a fraction or an exponent, or one
// the field's type cannot hold, is refused (kBadInput naming the field), never converted.
// A count of 2^32 + 1 would wrap to 1 in an int and pass for the one shard of a study; the
// float 6.4e106 as a context was undefined behaviour (the fuzz_shard_merge target's find).
// And a configuration naming more units than the files hold is refused before they are listed.
TEST(ShardFiles, IntegersAreReadExactlyAndUnitCountsCheckedBeforeListing) {
  const NeedleConfig config = one_unit_needle();
  const auto units = run_needle_units(config, needle_units(needle_layout(config)), nullptr);
  const nlohmann::json valid =
      nlohmann::json::parse(shard_file_text(needle_shard_json(config, Shard{0, 1}, origin(), units)));
  expect_edits_refused(valid, merge_needle_shards, {
      {"/shard/count", 4294967297ull, "count"},  // 2^32 + 1
      {"/shard/index", -4294967296ll, "index"},  // -2^32
      {"/shard/count", 1.0, "count"},
      {"/units/0/cases/0/context", 6.4e106, "context"},
      {"/units/0/context", 64.5, "context"},
      {"/units/0/trial", 2147483648ull, "trial"},  // 2^31
      {"/config/topk", -4.0, "topk"},
      {"/config/contexts/0", 1e3, "contexts"},
      {"/units/0/cases/0/recipes/0/rank", 9223372036854775808ull, "rank"},  // 2^63
      // Listing 2^31 - 1 units would take ~32 GB: refused before, by the files' unit count.
      {"/config/trials", 2147483647, "names 2147483647 units"},
  });
}

}  // namespace
}  // namespace dsaf::oracle
