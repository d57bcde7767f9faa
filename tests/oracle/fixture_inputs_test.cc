// Study inputs from real weights (oracle/fixture_inputs.h): the sources hand the study
// exactly the projections of reference/projection.h, reject inconsistent captures, and
// the sweep and needle studies run on them.
#include "oracle/fixture_inputs.h"

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "oracle/parallel.h"
#include "oracle/needle.h"
#include "oracle/results_io.h"
#include "oracle/study_keys.h"
#include "oracle/sweep.h"
#include "reference/error.h"
#include "reference/projection.h"
#include "reference/recipe.h"

namespace dsaf::oracle {
namespace {

using ref::kHeadDim;

std::vector<float> random_values(size_t n, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A small layer shaped like V3.2's (hidden and q_lora_rank multiples of 128, LayerNorm
// parameters) with weights scaled so that projections are O(1).
ref::IndexerWeights small_layer(int heads) {
  ref::IndexerWeights w;
  w.hidden = 256;
  w.q_lora_rank = 128;
  w.num_heads = heads;
  w.wq_b = random_values(static_cast<size_t>(heads) * kHeadDim * w.q_lora_rank, 1, 0.09f);
  w.wk = random_values(static_cast<size_t>(kHeadDim) * w.hidden, 2, 0.0625f);
  w.weights_proj = random_values(static_cast<size_t>(heads) * w.hidden, 3, 0.0625f);
  w.k_norm_weight = random_values(kHeadDim, 4, 0.1f);
  for (float& v : w.k_norm_weight) v += 1.0f;
  w.k_norm_bias = random_values(kHeadDim, 5, 0.1f);
  return w;
}

struct Hidden {
  std::vector<float> x, qr;
};

Hidden hidden_states(const ref::IndexerWeights& w, int tokens) {
  return {random_values(static_cast<size_t>(tokens) * w.hidden, 11, 1.0f),
          random_values(static_cast<size_t>(tokens) * w.q_lora_rank, 12, 1.0f)};
}

TEST(FixtureInputs, HiddenStatesGiveTheProjectionsOfEachToken) {
  const ref::IndexerWeights w = small_layer(4);
  const Hidden h = hidden_states(w, 20);
  const auto source = activations_from_hidden_states(w, h.x, h.qr, {}, {{"layer", 3}});
  ASSERT_EQ(source->tokens(), 20);
  ASSERT_EQ(source->num_heads(), 4);
  const ref::IndexerProjector projector(w);
  const std::vector<float> keys = projector.keys(h.x);
  for (int64_t t = 0; t < 20; ++t) {
    float k[kHeadDim];
    source->key_input(t, k);
    ASSERT_TRUE(std::equal(k, k + kHeadDim, keys.begin() + t * kHeadDim)) << t;
    std::vector<float> q(4 * kHeadDim), wproj(4);
    source->query_input(t, q.data(), wproj.data());
    const std::vector<float> x_row(h.x.begin() + t * 256, h.x.begin() + (t + 1) * 256);
    const std::vector<float> qr_row(h.qr.begin() + t * 128, h.qr.begin() + (t + 1) * 128);
    EXPECT_EQ(q, projector.queries(qr_row)) << t;
    EXPECT_EQ(wproj, projector.head_weights(x_row)) << t;
  }
  EXPECT_TRUE(std::equal(w.k_norm_weight.begin(), w.k_norm_weight.end(), source->norm_weight()));
  EXPECT_TRUE(std::equal(w.k_norm_bias.begin(), w.k_norm_bias.end(), source->norm_bias()));
  const nlohmann::json d = source->describe();
  EXPECT_EQ(d["kind"], "fixture");
  EXPECT_EQ(d["layer"], 3);
  EXPECT_EQ(d["tokens"], 20);
  EXPECT_EQ(d["projection"]["q"], "bf16");
  EXPECT_EQ(d["projection"]["weights"], "fp32");
}

TEST(FixtureInputs, ConcurrentQueriesSeeTheSameValuesAsSerialOnes) {
  const ref::IndexerWeights w = small_layer(2);
  const Hidden h = hidden_states(w, 64);
  const auto serial = activations_from_hidden_states(w, h.x, h.qr);
  const auto shared = activations_from_hidden_states(w, h.x, h.qr);
  // Each row: q [2][128], then wproj [2].
  constexpr size_t kRow = 2 * kHeadDim + 2;
  std::vector<std::vector<float>> got(256, std::vector<float>(kRow));
  // Four threads, each token asked for four times: cache misses race with hits.
  parallel_for(256, 4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      shared->query_input((i * 7) % 64, got[i].data(), got[i].data() + 2 * kHeadDim);
    }
  });
  for (int64_t i = 0; i < 256; ++i) {
    std::vector<float> want(kRow);
    serial->query_input((i * 7) % 64, want.data(), want.data() + 2 * kHeadDim);
    ASSERT_EQ(got[i], want) << i;
  }
}

void expect_error(ErrorKind kind, const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no dsaf::Error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(FixtureInputs, RejectInconsistentCaptures) {
  const ref::IndexerWeights w = small_layer(2);
  const Hidden h = hidden_states(w, 4);
  const auto bad = ErrorKind::kBadInput;
  expect_error(bad, [&] { activations_from_hidden_states(w, h.x, std::vector<float>(3 * 128)); },
               "x holds 4 tokens, so qr needs 512 values (has 384)");
  expect_error(bad, [&] { activations_from_hidden_states(w, std::vector<float>(255), h.qr); },
               "multiple of the width 256");
  std::vector<float> qr = h.qr;
  qr[130] = NAN;
  expect_error(bad, [&] { activations_from_hidden_states(w, h.x, qr); }, "qr: non-finite value at element 130");
  ref::IndexerWeights broken = w;
  broken.wk.pop_back();
  expect_error(bad, [&] { activations_from_hidden_states(broken, h.x, h.qr); }, "wk");

  const std::vector<float> q(3 * 2 * kHeadDim, 1.0f), k(3 * kHeadDim, 1.0f), wp(3 * 2, 1.0f);
  const std::vector<float> none;
  expect_error(bad, [&] { activations_from_projections(2, q, std::vector<float>(127), wp, none, none); },
               "not a positive multiple of 128");
  expect_error(bad, [&] { activations_from_projections(2, q, k, std::vector<float>(5), none, none); },
               "wproj 6 (has 5)");
  expect_error(bad, [&] { activations_from_projections(3, q, k, wp, none, none); }, "q needs 1152 values");
  expect_error(bad, [&] { activations_from_projections(0, q, k, wp, none, none); }, "num_heads");
  expect_error(bad, [&] { activations_from_projections(2, q, k, wp, std::vector<float>(5), none); },
               "k_norm weight has 5 values");
  expect_error(bad, [&] { activations_from_projections(2, q, k, wp, none, std::vector<float>(128)); },
               "k_norm bias needs 128 values and a weight");

  const auto ok = activations_from_projections(2, q, k, wp, none, none);
  EXPECT_EQ(ok->tokens(), 3);
  EXPECT_EQ(ok->norm_weight(), nullptr);
  float out[kHeadDim];
  expect_error(ErrorKind::kUsage, [&] { ok->key_input(3, out); }, "outside the fixture's 3 tokens");
}

// The captured projections of a layer, taken from a hidden-state source: both sources
// must then drive the studies to identical results.
std::shared_ptr<const ActivationSource> recorded_copy(const ActivationSource& from,
                                                      const ref::IndexerWeights& w) {
  const int64_t T = from.tokens();
  const int H = from.num_heads();
  std::vector<float> q(static_cast<size_t>(T) * H * kHeadDim), k(static_cast<size_t>(T) * kHeadDim),
      wproj(static_cast<size_t>(T) * H);
  for (int64_t t = 0; t < T; ++t) {
    from.key_input(t, k.data() + t * kHeadDim);
    from.query_input(t, q.data() + t * H * kHeadDim, wproj.data() + t * H);
  }
  return activations_from_projections(H, q, k, wproj, w.k_norm_weight, w.k_norm_bias, {{"capture", "copy"}});
}

TEST(FixtureInputs, SweepRunsOnAFixtureAndTheOracleIsPerfect) {
  const ref::IndexerWeights w = small_layer(4);
  const Hidden h = hidden_states(w, 300);
  SweepConfig c;
  c.recipes = {ref::preset("exact"), ref::preset("dsv32-ref")};
  c.contexts = {128, 300};
  c.queries = 4;
  c.topk = 16;
  c.threads = 2;
  c.source = activations_from_hidden_states(w, h.x, h.qr, {}, {{"fixture", "test"}});
  const SweepResult r = run_sweep(c, nullptr);
  EXPECT_EQ(r.layout.activations["fixture"], "test");
  EXPECT_TRUE(r.layout.seeds.empty());
  ASSERT_EQ(r.rows.size(), 4u);
  for (const SweepRow& row : r.rows) {
    EXPECT_EQ(row.metrics.recall.rows, 4);
    if (row.recipe == "exact") {
      EXPECT_EQ(row.metrics.recall.worst, 1.0);
    }
  }
  // The same activations captured as projections give the same study.
  SweepConfig copy = c;
  copy.source = recorded_copy(*c.source, w);
  const SweepResult r2 = run_sweep(copy, nullptr);
  EXPECT_EQ(sweep_to_json(r2)["rows"], sweep_to_json(r)["rows"]);

  c.contexts = {301};
  expect_error(ErrorKind::kUsage, [&] { run_sweep(c, nullptr); }, "context 301 exceeds the fixture's 300 tokens");
}

TEST(FixtureInputs, NeedleRunsOnAFixtureWithOneTrial) {
  const ref::IndexerWeights w = small_layer(4);
  const Hidden h = hidden_states(w, 256);
  NeedleConfig c;
  c.recipes = {ref::preset("exact"), ref::preset("dsv32-ref")};
  c.contexts = {256};
  c.depths = {0.25, 0.75};
  c.margins = {1.0};
  c.trials = 3;  // ignored with a fixture
  c.topk = 16;
  c.source = activations_from_hidden_states(w, h.x, h.qr);
  const NeedleResult r = run_needle(c, nullptr);
  EXPECT_EQ(r.layout.trials, 1);
  EXPECT_EQ(r.layout.activations["kind"], "fixture");
  ASSERT_EQ(r.cases.size(), 2u);
  for (const NeedleCase& rec : r.cases) {
    EXPECT_EQ(rec.trial, 1);
    if (rec.reachable) {
      ASSERT_FALSE(rec.recipes.empty());
      EXPECT_EQ(rec.recipes.front().recipe, "exact");
      EXPECT_TRUE(rec.recipes.front().retained);
    }
  }
}

}  // namespace
}  // namespace dsaf::oracle
