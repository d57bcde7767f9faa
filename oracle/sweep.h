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
#include "oracle/study_device.h"
#include "oracle/study_keys.h"
#include "oracle/synthetic.h"
#include "oracle/topk_metrics.h"
#include "oracle/verdict.h"  // kUlpBuckets, ulp_bucket
#include "reference/error.h"
#include "reference/recipe.h"

namespace dsaf::oracle {

// The query positions of a sweep's row set for a context of n keys: `queries` of them
// spread over [n/2, n), the first n - 1 (each row's keys are 0 .. its position).
std::vector<int64_t> query_positions(int64_t n, int queries);

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
  // The device mode (study_device.h): with device.kernel set, each recipe's keys, queries,
  // logits and top-K come from the kernels, the oracle and the sampled checks from the CPU.
  // Attribution variants are refused there (their exact stages are the CPU's).
  StudyDevice device;
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

// The configuration as the result echoes it and its reduction needs it, without the
// activations themselves: what a shard file carries (shard_files.h) so that `merge` can
// finish the study.
struct SweepLayout {
  // A recipe studied: one as given, or an attribution variant (stage_variants) that names
  // the recipe it was derived from and the stage made exact.
  struct Studied {
    std::string recipe;
    std::string variant_of;
    std::string stage;
  };
  int topk = 0;
  int queries = 0;
  int page_size = 0;
  std::vector<uint64_t> seeds;  // empty with a fixture (one pass, unit seed 0)
  nlohmann::json activations;   // the generator and its parameters, or the fixture
  std::vector<int64_t> contexts;
  std::vector<Studied> studied;  // each recipe as given, followed by its variants
  nlohmann::json device;          // describe_device (study_device.h); null on the CPU
};

// A sweep's independent work: one context and one seed. Its activations, oracles and
// recipe scores depend on nothing else. Canonical order: contexts as given, seeds as given
// within each (sweep_units).
struct SweepUnit {
  int64_t context = 0;
  uint64_t seed = 0;
};

// What one unit measured, per studied recipe (SweepLayout::studied order): each query
// row's metrics (query row order) and the score ulp histogram (kUlpBuckets counts).
struct SweepUnitResult {
  SweepUnit unit;
  std::vector<std::vector<RowMetrics>> rows;
  std::vector<std::vector<int64_t>> score_ulp_histograms;
};

struct SweepResult {
  // The configuration, as the result files echo it.
  SweepLayout layout;
  // Per recipe (each followed by its attribution variants when asked), per context.
  std::vector<SweepRow> rows;
  // Per attribution variant, per context; empty without attribution.
  std::vector<StageAttribution> attribution;
};

// Metrics of every recipe against its exact oracle:
// reduce_sweep(layout, run_sweep_units(config, sweep_units(layout))), one code path with
// a sharded run and its `merge`, so that both give the same result bit for bit.
SweepResult run_sweep(const SweepConfig& config, const Progress& progress);

// The layout of a configuration; throws dsaf::Error(kUsage) for a configuration that
// run_sweep refuses.
SweepLayout sweep_layout(const SweepConfig& config);
// Throws dsaf::Error(kind) naming the first rule of a study's configuration that `layout`
// breaks: at least one recipe, context (each >= 1), query row, topk and page size; an
// attribution variant names both its stage and its base recipe, studied before it. sweep_layout runs it (kUsage); `merge` runs it on a shard
// file's configuration (kBadInput), so that a file holds no study the tool refuses to run.
void check_sweep_layout(const SweepLayout& layout, ErrorKind kind);
// Every unit of a layout, in canonical order; a unit's cost (shard_plan.h) is its context.
std::vector<SweepUnit> sweep_units(const SweepLayout& layout);
// sweep_units(layout).size(), without listing them (merge checks it against the units its
// files hold before it lists them: a damaged configuration may name ~10^12 units).
uint64_t sweep_unit_count(const SweepLayout& layout);
// Runs `units` (of sweep_units(sweep_layout(config))) in the order given, progress after
// each (unit, studied recipe).
std::vector<SweepUnitResult> run_sweep_units(const SweepConfig& config, const std::vector<SweepUnit>& units,
                                             const Progress& progress);
// The result from the results of every unit, in canonical order: per (studied recipe,
// context) the rows of its units concatenated in that order (summarize sorts them, so the
// means are sums in one order) and their histograms added; then the attribution.
// Throws dsaf::Error(kBadInput) when the layout fails check_sweep_layout or `units` are not
// sweep_units(layout) with one result per studied recipe each.
SweepResult reduce_sweep(const SweepLayout& layout, const std::vector<SweepUnitResult>& units);

// An upper bound of run_sweep's peak memory (study_keys.h's model), from its loop: at the
// longest context n, with Q query rows, K and T threads, every distinct oracle O keeps its
// key matrix while its scores are drawn, then Q score rows and Q top-K selections for the
// context; each studied recipe then builds one key matrix and scores a row per thread
// (index_scores' row and its copy):
//   O x (key matrix + Q x (n + K) x 8) + key matrix + T x 2 x n x 8 + RoPE tables + base,
// plus device_study_bytes(n, Q) in the device mode (study_device.h).
int64_t sweep_peak_bytes(const SweepConfig& config);

}  // namespace dsaf::oracle
