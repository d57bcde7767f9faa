// File: study.h
// The CPU studies behind `sweep` and `needle`: run recipes and their exact oracle
// (ref::exact_of) on synthetic activations, or on a fixture's real ones (`source`,
// fixture_inputs.h), score causal rows, select top-K and compare.
// Memory is O(N) per query row (keys are N x 128 values; scores one row at a time):
// no N x N matrix is ever formed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "oracle/activations.h"
#include "oracle/synthetic.h"
#include "oracle/topk_metrics.h"
#include "reference/recipe.h"
#include "reference/rope.h"
#include "reference/score.h"

namespace dsaf::oracle {

// Called with (work done, work total) after each unit of work.
using Progress = std::function<void(int64_t, int64_t)>;

// Keys of positions [0, n) under a recipe (key path of every token).
ref::KeyMatrix build_keys(const ref::Recipe& recipe, const ActivationSource& acts,
                          int64_t n, const ref::RopeTable& rope, int threads);
// The query of token t under a recipe (query path + folded head weights).
ref::PreparedQuery build_query(const ref::Recipe& recipe, const ActivationSource& acts,
                               int64_t t, const ref::RopeTable& rope);

// Stage attribution (issue: "re-run with one stage made exact at a time"): the recipe
// with one stage's lossy choices replaced by exact-as-fp32 ones, named "<recipe>~<stage>":
//   norm      no bf16 rounding after the norm, sequential order, no FMA, exact rsqrt
//   rope      no bf16 rounding after RoPE (query and key), no FMA contraction
//   hadamard  no bf16 rounding after the Hadamard rotation
//   key-quant keys stored as fp32
//   query-quant queries stored as fp32
//   score     exact (fp64) score accumulation
// Stages the recipe does not have are omitted. fp32 arithmetic remains everywhere else,
// so "exact" here means: the stage contributes fp32 rounding only.
std::vector<std::pair<std::string, ref::Recipe>> stage_variants(const ref::Recipe& recipe);

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

// Metrics of every recipe against its exact oracle. JSON: config, generator and one row
// per (recipe, context) with the aggregate over seeds x queries.
nlohmann::json run_sweep(const SweepConfig& config, const Progress& progress);

struct NeedleConfig {
  std::vector<ref::Recipe> recipes;
  std::vector<int64_t> contexts;
  std::vector<double> depths;    // needle position = round(depth * (N - 1))
  std::vector<double> margins;   // in units of sigma (see docs/needle.md)
  int trials = 4;                // seeds 1..trials (plus the activation seed)
  int topk = 512;
  SyntheticSpec activations;
  // As SweepConfig::source; with a fixture there is one trial (the activations do not
  // change between trials), and every context must be <= source->tokens().
  std::shared_ptr<const ActivationSource> source;
  int threads = 1;
};

// The needle study (docs/needle.md): for each context N, trial, depth and margin, a
// needle key whose exact score is tau_K + margin * sigma, and whether each recipe keeps it
// in its top-K, with its rank.
nlohmann::json run_needle(const NeedleConfig& config, const Progress& progress);

}  // namespace dsaf::oracle
