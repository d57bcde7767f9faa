// File: needle.h
// The needle study behind `dsa-fidelity needle` (docs/needle.md): for each context N,
// trial, depth and margin, a needle key whose exact score is tau_K + margin * sigma, and
// whether each recipe keeps it in its top-K, with its rank. Recipes are grouped by their
// exact oracle (ref::exact_of); the needle is built against the oracle's scores.
// results_io.h writes the result as JSON / CSV.
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
#include "reference/error.h"
#include "reference/recipe.h"

namespace dsaf::oracle {

struct NeedleConfig {
  std::vector<ref::Recipe> recipes;
  std::vector<int64_t> contexts;
  std::vector<double> depths;    // needle position = round(depth * (N - 1))
  std::vector<double> margins;   // in units of sigma (see docs/needle.md)
  int trials = 4;                // seeds 1..trials (plus the activation seed)
  int topk = 512;
  // Where the margin is measured (docs/needle.md). 0: among the other keys of the needle's
  // own context, so tau grows with N and length is normalised away. R > 0, the planted-fact
  // mode: the query (at position N - 1) has the input of token min(R, N) - 1 at every N, and
  // the margin is measured among the other keys of the last min(R, N) positions (the
  // query's most recent window, of the same size at every N >= R); the needle's exact score
  // then stays where a context of R puts it while a longer context adds older competitors.
  int64_t reference_context = 0;
  SyntheticSpec activations;
  // As SweepConfig::source; with a fixture there is one trial (the activations do not
  // change between trials), and every context must be <= source->tokens().
  std::shared_ptr<const ActivationSource> source;
  int threads = 1;
  // The device mode (study_device.h): with device.kernel set, each recipe's cache, query,
  // logits row and top-K of every case come from the kernels (the needle's key stored by
  // a one-token key store into the context's cache), ranks from the kernel's logits; the
  // needle search stays with the CPU's exact oracle.
  StudyDevice device;
};

// One recipe's verdict on a reachable needle.
struct NeedleOutcome {
  std::string recipe;
  int64_t rank = 0;       // 1-based: higher score first, then lower index (topk.h)
  bool retained = false;  // rank <= K
  double score = 0.0;     // the recipe's score of the needle
};

// One (context, trial, depth, margin) for the recipes of one exact oracle. The query is
// the last token (t = N - 1) and sees all N keys.
struct NeedleCase {
  int64_t context = 0;
  int trial = 0;
  double depth = 0.0;
  int64_t position = 0;   // round(depth * (N - 1))
  double margin = 0.0;    // in sigma
  double tau = 0.0;       // the K-th largest exact score among the other keys (of the window)
  double sigma = 0.0;     // the standard deviation of their exact scores
  int64_t reference_keys = 0;  // how many keys tau and sigma were taken over
  std::vector<std::string> model_recipes;  // the recipes sharing this oracle
  // Whether a needle with exact score >= tau + margin * sigma (and below it at the
  // bracket's other end) was found.
  bool reachable = false;
  // Reachable: the interpolation weight of the needle input (base -> donor), its exact
  // score, (score - tau) / sigma, its exact rank, and each model recipe's outcome.
  double beta = 0.0;
  double needle_exact_score = 0.0;
  double achieved_margin = 0.0;
  int64_t exact_rank = 0;  // <= K whenever margin > 0
  std::vector<NeedleOutcome> recipes;
  // Unreachable: the highest and lowest exact scores the search found.
  double best_exact_score_found = 0.0;
  double lowest_exact_score_found = 0.0;
};

// Retention of one recipe at one (context, margin), over depths x trials.
struct NeedleSummaryRow {
  std::string recipe;
  int64_t context = 0;
  double margin = 0.0;
  int64_t cases = 0;        // reachable cases
  // Always 0, a known bug kept on purpose: the count was taken with
  // nlohmann::json::contains on an array (always false), and the typed study keeps the
  // result files byte-identical to those written before it. docs/needle.md says
  // unreachable cases are counted; fixing it changes needle.json, so do it as its own change.
  int64_t unreachable = 0;
  double retention = 0.0;   // retained / cases (0 without cases)
  double rank_p50 = 0.0;    // sorted ranks[(cases - 1) / 2] (0 without cases)
  double rank_worst = 0.0;  // the largest rank (0 without cases)
};

// The configuration as the result echoes it and its reduction needs it, without the
// activations themselves: what a shard file carries (shard_files.h).
struct NeedleLayout {
  int topk = 0;
  int64_t reference_context = 0;  // NeedleConfig::reference_context
  std::vector<double> depths;
  std::vector<double> margins;
  int trials = 0;                 // 1 with a fixture
  nlohmann::json activations;     // the generator and its parameters, or the fixture
  std::vector<int64_t> contexts;
  std::vector<std::string> recipes;  // names, as given
  nlohmann::json device;             // describe_device (study_device.h); null on the CPU
};

// A needle study's independent work: one context and one trial, whose activations and
// cases depend on nothing else. Canonical order: contexts as given, trials 1..trials within
// each (needle_units).
struct NeedleUnit {
  int64_t context = 0;
  int trial = 0;
};

// The cases of one unit: per oracle (exact_model_key order), depth and margin.
struct NeedleUnitResult {
  NeedleUnit unit;
  std::vector<NeedleCase> cases;
};

struct NeedleResult {
  // The configuration, as the result files echo it.
  NeedleLayout layout;
  // Per recipe, context and margin (in that nesting).
  std::vector<NeedleSummaryRow> summary;
  // Per context, trial, oracle (in exact_model_key order), depth and margin.
  std::vector<NeedleCase> cases;
};

// reduce_needle(layout, run_needle_units(config, needle_units(layout))): one code path
// with a sharded run and its `merge`.
NeedleResult run_needle(const NeedleConfig& config, const Progress& progress);

// The layout of a configuration; throws dsaf::Error(kUsage) for a configuration that
// run_needle refuses.
NeedleLayout needle_layout(const NeedleConfig& config);
// Throws dsaf::Error(kind) naming the first rule of a study's configuration that `layout`
// breaks: at least one recipe, context (each >= 2), depth (each in [0, 1]), margin (each
// finite and >= 0 sigma) and trial; topk >= 1; a reference context of 0 or >= 2.
// needle_layout runs it (kUsage); `merge` runs it on a shard file's configuration
// (kBadInput), so that a file holds no study the tool refuses to run.
void check_needle_layout(const NeedleLayout& layout, ErrorKind kind);
// Every unit of a layout, in canonical order; a unit's cost (shard_plan.h) is its context.
std::vector<NeedleUnit> needle_units(const NeedleLayout& layout);
// needle_units(layout).size(), without listing them (as sweep_unit_count).
uint64_t needle_unit_count(const NeedleLayout& layout);
// Runs `units` (of needle_units(needle_layout(config))) in the order given, progress after
// each.
std::vector<NeedleUnitResult> run_needle_units(const NeedleConfig& config, const std::vector<NeedleUnit>& units,
                                               const Progress& progress);
// The result from the results of every unit, in canonical order: their cases concatenated,
// then the summary over them. Throws dsaf::Error(kBadInput) when the layout fails
// check_needle_layout, `units` are not needle_units(layout), or a case is not one the
// layout's study makes (a depth, margin or recipe it does not hold, a needle outside its
// context, a rank outside 1..context).
NeedleResult reduce_needle(const NeedleLayout& layout, const std::vector<NeedleUnitResult>& units);

// An upper bound of run_needle's peak memory (study_keys.h's model): at the longest context
// n, the exact oracle's key matrix and score row stay while each of the group's M recipes
// builds its key matrix and keeps its score row; each depth adds the other keys' scores and
// a position order (2 x n x 8):
//   2 x key matrix + (M + 4) x n x 8 + RoPE tables + base, M = the recipes; in the device
// mode (study_device.h) each recipe keeps its key matrix, cache and 2 x n x 8 of
// expectations, plus device_study_bytes(n, 1).
int64_t needle_peak_bytes(const NeedleConfig& config);

}  // namespace dsaf::oracle
