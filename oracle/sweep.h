// File: sweep.h
// The sweep study behind `dsa-fidelity sweep`: every recipe against its exact oracle
// (ref::exact_of) on synthetic activations, or on a fixture's real ones (`source`,
// fixture_inputs.h): causal query rows scored, top-K selected and compared
// (topk_metrics.h), per (recipe, context). results_io.h writes the result as JSON / CSV.
// Memory is O(N) per query row (keys are N x 128 values; scores one row at a time):
// no N x N matrix is ever formed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "oracle/activations.h"
#include "oracle/study_keys.h"
#include "oracle/synthetic.h"
#include "oracle/topk_metrics.h"
#include "oracle/verdict.h"  // kUlpBuckets, ulp_bucket
#include "reference/recipe.h"

namespace dsaf::oracle {

struct SweepConfig {
  std::vector<ref::Recipe> recipes;
  std::vector<int64_t> contexts;
  std::vector<uint64_t> seeds;
  int queries = 64;      // query rows per (context, seed), positions spread over [n/2, n)
  int topk = 512;
  int page_size = 64;    // for page-level recall
  bool attribution = false;
  SyntheticSpec activations;
  // A fixture's activations (fixture_inputs.h). When set they replace the synthetic
  // generator: `activations` and `seeds` are ignored (one pass over the fixture), and
  // every context must be <= source->tokens() (else dsaf::Error(kUsage)).
  std::shared_ptr<const ActivationSource> source;
  int threads = 1;
};

// One (recipe, context) of a sweep: the aggregate over seeds x query rows.
struct SweepRow {
  std::string recipe;
  int64_t context = 0;
  // An attribution variant (stage_variants): the recipe it was derived from and the stage
  // made exact; both empty for a recipe as given.
  std::string variant_of;
  std::string stage;
  Aggregate metrics;
  // Score error in fp32 ulps over every (query row, valid key) with both scores finite:
  // the recipe's score vs the exact score rounded to fp32, kUlpBuckets log2 buckets
  // (ulp_bucket: 0 = 0 ulp, 1 = 1 ulp, b >= 2 = [2^(b-1), 2^b) ulps).
  std::vector<int64_t> score_ulp_histogram;
};

// How much of a recipe's recall loss (1 - mean recall) one stage accounts for at a
// context: the loss minus the loss of the variant with that stage exact.
struct StageAttribution {
  std::string recipe;
  int64_t context = 0;
  std::string stage;
  double recall_loss = 0.0;
  double recall_loss_with_stage_exact = 0.0;
  double accounted = 0.0;  // recall_loss - recall_loss_with_stage_exact
};

struct SweepResult {
  // The configuration, as the result files echo it.
  int topk = 0;
  int queries_per_context_and_seed = 0;
  std::vector<uint64_t> seeds;  // empty with a fixture
  int page_size = 0;
  nlohmann::json activations;   // the generator and its parameters, or the fixture
  // Per recipe (each followed by its attribution variants when asked), per context.
  std::vector<SweepRow> rows;
  // Per attribution variant, per context; empty without attribution.
  std::vector<StageAttribution> attribution;
};

// Metrics of every recipe against its exact oracle.
SweepResult run_sweep(const SweepConfig& config, const Progress& progress);

// An upper bound of run_sweep's peak memory (study_keys.h's model), from its loop: at the
// longest context n, with Q query rows, K and T threads, every distinct oracle O keeps its
// key matrix while its scores are drawn, then Q score rows and Q top-K selections for the
// context; each studied recipe then builds one key matrix and scores a row per thread
// (index_scores' row and its copy):
//   O x (key matrix + Q x (n + K) x 8) + key matrix + T x 2 x n x 8 + RoPE tables + base.
int64_t sweep_peak_bytes(const SweepConfig& config);

}  // namespace dsaf::oracle
