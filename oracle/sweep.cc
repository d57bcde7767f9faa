// File: sweep.cc — the sweep study (sweep.h).
#include "oracle/sweep.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include "oracle/parallel.h"
#include "oracle/study_internal.h"
#include "oracle/verdict.h"
#include "reference/error.h"
#include "reference/topk.h"

namespace dsaf::oracle {
namespace {

using ref::Recipe;
using namespace study_detail;

// A recipe studied (one given, or an attribution variant) and the recipe it belongs to.
struct Studied {
  Recipe recipe;
  std::string variant_of;
  std::string stage;
};

// Each recipe as given, followed by its attribution variants when asked.
std::vector<Studied> studied_recipes(const SweepConfig& config) {
  std::vector<Studied> studied;
  for (const Recipe& r : config.recipes) {
    studied.push_back({r, "", ""});
    if (config.attribution) {
      for (auto& [stage, variant] : stage_variants(r)) studied.push_back({variant, r.name, stage});
    }
  }
  return studied;
}

// Exact scores and top-K per query row of one oracle.
struct Oracle {
  std::vector<std::vector<double>> scores;
  std::vector<std::vector<int32_t>> topk;
};

int64_t longest_context(const std::vector<int64_t>& contexts) {
  return *std::max_element(contexts.begin(), contexts.end());
}

// What one studied recipe measured in a unit: per query row, its metrics and ulp histogram.
struct RecipeRows {
  std::vector<RowMetrics> metrics;
  std::vector<std::vector<int64_t>> histograms;
};

// The recipe's scores of row j (valid keys: the reference's fp32 values held as doubles,
// or a kernel's floats) against the oracle's: metrics and histogram.
template <class Score>
void score_row(const SweepConfig& config, const Oracle& o, int64_t j, int64_t valid, const std::vector<int32_t>& selected,
               const Score* scores, RecipeRows& out) {
  out.metrics[j] = row_metrics(o.scores[j], valid, selected, o.topk[j], config.page_size);
  for (int64_t k = 0; k < valid; ++k) {
    const float ours = static_cast<float>(scores[k]);
    const float exact = static_cast<float>(o.scores[j][k]);
    if (std::isfinite(ours) && std::isfinite(exact)) ++out.histograms[j][ulp_bucket(ulp_distance(ours, exact))];
  }
}

// The recipe on the CPU reference: keys, each row's query, scores and top-K.
RecipeRows cpu_rows(const SweepConfig& config, const Recipe& recipe, const ActivationSource& acts, int64_t n,
                    const std::vector<int64_t>& positions, const ref::RopeTable& table, const Oracle& o) {
  const ref::KeyMatrix keys = build_keys(recipe, acts, n, table, config.threads);
  RecipeRows out{std::vector<RowMetrics>(positions.size()),
                 std::vector<std::vector<int64_t>>(positions.size(), std::vector<int64_t>(kUlpBuckets, 0))};
  parallel_for(static_cast<int64_t>(positions.size()), config.threads, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      const int64_t valid = positions[j] + 1;
      const ref::PreparedQuery q = build_query(recipe, acts, positions[j], table);
      const std::vector<double> scores = ref::index_scores(q, keys, valid, recipe.score);
      score_row(config, o, j, valid, ref::select_topk(scores, valid, config.topk), scores.data(), out);
    }
  });
  return out;
}

// The recipe on the device (study_device.h): the kernels' cache, queries, logits and
// top-K; the reference rechecks a sample of cache slots and of rows.
RecipeRows device_rows(const SweepConfig& config, const Recipe& recipe, const ActivationSource& acts,
                       const SweepUnit& unit, size_t recipe_index, const std::vector<int64_t>& positions,
                       const ref::RopeTable& table, const Oracle& o) {
  const int64_t n = unit.context;
  const int K = config.topk;
  const StudyDevice& device = config.device;
  const StageKernels kernels =
      stage_kernels(device, recipe, K, longest_context(config.contexts), config.page_size);
  const DeviceSequence sequence(kernels, recipe, acts, n, config.page_size, table, device.timings);
  const dev::HostQueryResult q = sequence.queries(positions, positions);
  std::vector<int32_t> valid;
  for (const int64_t p : positions) valid.push_back(static_cast<int32_t>(p + 1));
  const std::vector<float> logits = sequence.logits(sequence.cache(), q, valid);
  const std::string where =
      fmt::format("sweep --device gpu, context {}, seed {}, recipe {}", n, unit.seed, recipe.name);
  const int64_t rows = static_cast<int64_t>(positions.size());
  for (int64_t j = 0; j < rows; ++j) {
    check_no_nan(fmt::format("{}, query row {}", where, j), logits.data() + j * n, valid[j]);
  }
  const std::vector<int32_t> top = sequence.topk(logits, valid, K);

  // The reference's sample: cache slots, then whole rows (query, logits, top-K).
  const uint64_t sample_seed = unit.seed * 1000003ull + static_cast<uint64_t>(n) * 131ull + recipe_index;
  std::vector<int64_t> slots = sample_rows(n, device.check_keys, sample_seed);
  std::vector<float> slot_inputs(slots.size() * ref::kHeadDim);
  for (size_t i = 0; i < slots.size(); ++i) acts.key_input(slots[i], slot_inputs.data() + i * ref::kHeadDim);
  check_key_slots(where, recipe, acts, table, sequence.cache(), config.page_size, slots, slot_inputs);
  const std::vector<int64_t> checked = sample_rows(rows, device.check_rows, sample_seed + 1);
  if (!checked.empty()) {
    const ref::KeyMatrix keys = build_keys(recipe, acts, n, table, config.threads);
    const int H = acts.num_heads();
    std::vector<float> q_in(static_cast<size_t>(H) * ref::kHeadDim), wproj(H);
    for (const int64_t j : checked) {
      const std::string at = fmt::format("{}, query row {} (position {})", where, j, positions[j]);
      acts.query_input(positions[j], q_in.data(), wproj.data());
      const ref::QueryOutput expected_q =
          ref::run_query_path(recipe, q_in.data(), H, wproj.data(), static_cast<int>(positions[j]), table);
      check_query_row(at, recipe, q, j, expected_q);
      const LogitsExpectation e =
          expect_logits(recipe, kernels.logits_exact_order, expected_q, keys, valid[j], config.threads);
      check_logits_row(at, kernels.logits_exact_order, logits.data() + j * n, valid[j], n, e.expected, e.exact, e.bound);
      check_topk_row(at, kernels, logits.data() + j * n, valid[j], K, top.data() + j * K);
    }
  }

  RecipeRows out{std::vector<RowMetrics>(positions.size()),
                 std::vector<std::vector<int64_t>>(positions.size(), std::vector<int64_t>(kUlpBuckets, 0))};
  std::vector<std::vector<int32_t>> selected(rows);
  for (int64_t j = 0; j < rows; ++j) {
    selected[j] = canonical_selection(fmt::format("{}, query row {}", where, j), logits.data() + j * n, valid[j], K,
                                      top.data() + j * K);
  }
  parallel_for(rows, config.threads, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) score_row(config, o, j, valid[j], selected[j], logits.data() + j * n, out);
  });
  return out;
}

}  // namespace

std::vector<int64_t> query_positions(int64_t n, int queries) {
  std::vector<int64_t> out;
  const int64_t span = std::max<int64_t>(1, n - n / 2);
  for (int j = 0; j < queries; ++j) out.push_back(n - 1 - span * j / queries);
  return out;
}

int64_t sweep_peak_bytes(const SweepConfig& config) {
  if (config.contexts.empty()) return kStudyBaseBytes;
  const int64_t n = *std::max_element(config.contexts.begin(), config.contexts.end());
  std::vector<Recipe> studied;
  for (const Studied& s : studied_recipes(config)) studied.push_back(s.recipe);
  const int64_t keys = n * kKeyMatrixBytesPerKey, q = config.queries;
  const int64_t oracle = keys + q * (n + config.topk) * 8;
  const int64_t device = config.device.kernel != nullptr ? device_study_bytes(n, q) : 0;
  return distinct_oracles(studied) * oracle + keys + std::max(1, config.threads) * 2 * n * 8 +
         distinct_rope_tables(studied) * n * kRopeBytesPerPosition + kStudyBaseBytes + device;
}

SweepLayout sweep_layout(const SweepConfig& config) {
  if (config.seeds.empty() && !config.source) throw Error(ErrorKind::kUsage, "sweep: need seeds (or a fixture)");
  check_contexts_fit(config.source, config.contexts, "sweep");
  if (config.device.kernel != nullptr && config.attribution) {
    throw Error(ErrorKind::kUsage, "sweep: --attribution runs on the CPU (its exact stages are the reference's), "
                                   "not with --device gpu");
  }
  SweepLayout layout;
  layout.topk = config.topk;
  layout.queries = config.queries;
  layout.page_size = config.page_size;
  layout.seeds = config.source ? std::vector<uint64_t>{} : config.seeds;
  layout.activations = describe_activations(config.source, config.activations);
  layout.contexts = config.contexts;
  for (const Studied& s : studied_recipes(config)) layout.studied.push_back({s.recipe.name, s.variant_of, s.stage});
  check_sweep_layout(layout, ErrorKind::kUsage);
  if (config.device.kernel != nullptr) {
    layout.device = describe_device(config.device, config.recipes, config.topk, longest_context(config.contexts),
                                    config.page_size);
  }
  return layout;
}

void check_sweep_layout(const SweepLayout& layout, ErrorKind kind) {
  const auto refuse = [kind](const std::string& why) { throw Error(kind, "sweep: " + why); };
  if (layout.studied.empty()) refuse("recipes: none");
  if (layout.contexts.empty()) refuse("contexts: none");
  for (const int64_t n : layout.contexts) {
    if (n < 1) refuse(fmt::format("contexts: {} is not >= 1", n));
  }
  if (layout.queries < 1) refuse(fmt::format("queries: {} is not >= 1", layout.queries));
  if (layout.topk < 1) refuse(fmt::format("topk: {} is not >= 1", layout.topk));
  if (layout.page_size < 1) refuse(fmt::format("page_size: {} is not >= 1", layout.page_size));
  for (size_t i = 0; i < layout.studied.size(); ++i) {
    const SweepLayout::Studied& s = layout.studied[i];
    // A variant follows the recipe it was derived from and names the stage made exact.
    const bool base_before = std::any_of(layout.studied.begin(), layout.studied.begin() + i,
                                         [&](const SweepLayout::Studied& b) { return b.recipe == s.variant_of; });
    if (!s.variant_of.empty() && !base_before) {
      refuse(fmt::format("'{}' is a variant of '{}', which the study does not hold before it", s.recipe, s.variant_of));
    }
    if (s.variant_of.empty() != s.stage.empty()) {
      refuse(fmt::format("'{}' names a {} without a {}", s.recipe, s.stage.empty() ? "base recipe" : "stage",
                         s.stage.empty() ? "stage" : "base recipe"));
    }
  }
}

std::vector<SweepUnit> sweep_units(const SweepLayout& layout) {
  // A fixture is one fixed set of activations: one pass, whatever the seeds say.
  const std::vector<uint64_t> seeds = layout.seeds.empty() ? std::vector<uint64_t>{0} : layout.seeds;
  std::vector<SweepUnit> units;
  units.reserve(sweep_unit_count(layout));
  for (const int64_t n : layout.contexts) {
    for (const uint64_t seed : seeds) units.push_back({n, seed});
  }
  return units;
}

uint64_t sweep_unit_count(const SweepLayout& layout) {
  return static_cast<uint64_t>(layout.contexts.size()) * std::max<uint64_t>(1, layout.seeds.size());
}

std::vector<SweepUnitResult> run_sweep_units(const SweepConfig& config, const std::vector<SweepUnit>& units,
                                             const Progress& progress) {
  const std::vector<Studied> studied = studied_recipes(config);
  // The tables of the longest context of the study, whichever units run here.
  RopeTables rope(longest_context(config.contexts));
  const int64_t total = static_cast<int64_t>(units.size() * studied.size());
  // In the device mode, every input the kernels take in bf16 is rounded for all (oracle
  // included).
  const InputRounding rounding =
      config.device.kernel != nullptr
          ? input_rounding(config.device, config.recipes, config.topk, longest_context(config.contexts), config.page_size)
          : InputRounding{};
  int64_t done = 0;
  std::vector<SweepUnitResult> results;
  for (const SweepUnit& unit : units) {
    const int64_t n = unit.context;
    const std::vector<int64_t> positions = query_positions(n, config.queries);
    const std::shared_ptr<const ActivationSource> source =
        rounded_inputs(activations_for(config.source, config.activations, unit.seed), rounding);
    const ActivationSource& acts = *source;
    // Exact scores and top-K per query row, once per distinct oracle.
    std::map<std::string, Oracle> oracles;
    for (const Studied& s : studied) {
      const std::string key = exact_model_key(s.recipe);
      if (oracles.count(key)) continue;
      const Recipe exact = ref::exact_of(s.recipe);
      const ref::RopeTable& table = rope.get(exact.rope.table);
      const ref::KeyMatrix keys = build_keys(exact, acts, n, table, config.threads);
      Oracle& o = oracles[key];
      o.scores.resize(positions.size());
      o.topk.resize(positions.size());
      parallel_for(static_cast<int64_t>(positions.size()), config.threads, [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) {
          const ref::PreparedQuery q = build_query(exact, acts, positions[j], table);
          o.scores[j] = ref::index_scores(q, keys, positions[j] + 1, exact.score);
          o.topk[j] = ref::select_topk(o.scores[j], positions[j] + 1, config.topk);
        }
      });
    }
    SweepUnitResult result;
    result.unit = unit;
    for (size_t i = 0; i < studied.size(); ++i) {
      const Studied& s = studied[i];
      const Oracle& o = oracles.at(exact_model_key(s.recipe));
      const ref::RopeTable& table = rope.get(s.recipe.rope.table);
      RecipeRows rows = config.device.kernel != nullptr
                            ? device_rows(config, s.recipe, acts, unit, i, positions, table, o)
                            : cpu_rows(config, s.recipe, acts, n, positions, table, o);
      std::vector<int64_t> histogram(kUlpBuckets, 0);
      for (const auto& h : rows.histograms) {
        for (int b = 0; b < kUlpBuckets; ++b) histogram[b] += h[b];
      }
      result.rows.push_back(std::move(rows.metrics));
      result.score_ulp_histograms.push_back(std::move(histogram));
      if (progress) progress(++done, total);
    }
    results.push_back(std::move(result));
  }
  return results;
}

SweepResult reduce_sweep(const SweepLayout& layout, const std::vector<SweepUnitResult>& units) {
  check_sweep_layout(layout, ErrorKind::kBadInput);
  const std::vector<SweepUnit> expected = sweep_units(layout);
  if (units.size() != expected.size()) {
    throw_bad_input(fmt::format("sweep: {} unit results for the {} units of the study", units.size(),
                                expected.size()));
  }
  // Keyed by recipe name, as the rows of the result are: two studied recipes of one name
  // (a recipe named twice in --recipes) share their rows.
  std::map<std::pair<std::string, int64_t>, std::vector<RowMetrics>> rows_of;
  std::map<std::pair<std::string, int64_t>, std::vector<int64_t>> ulp_histogram_of;
  for (size_t u = 0; u < units.size(); ++u) {
    const SweepUnitResult& unit = units[u];
    if (unit.unit.context != expected[u].context || unit.unit.seed != expected[u].seed ||
        unit.rows.size() != layout.studied.size() || unit.score_ulp_histograms.size() != layout.studied.size()) {
      throw_bad_input(fmt::format("sweep: unit {} (context {}, seed {}) is not unit {} of the study (context {}, "
                                  "seed {}) with {} studied recipes",
                                  u, unit.unit.context, unit.unit.seed, u, expected[u].context, expected[u].seed,
                                  layout.studied.size()));
    }
    for (size_t i = 0; i < layout.studied.size(); ++i) {
      if (unit.score_ulp_histograms[i].size() != static_cast<size_t>(kUlpBuckets)) {
        throw_bad_input(fmt::format("sweep: unit {} has a histogram of {} buckets, not {}", u,
                                    unit.score_ulp_histograms[i].size(), kUlpBuckets));
      }
      const std::pair<std::string, int64_t> key{layout.studied[i].recipe, unit.unit.context};
      auto& all = rows_of[key];
      all.insert(all.end(), unit.rows[i].begin(), unit.rows[i].end());
      auto& hist = ulp_histogram_of[key];
      hist.resize(kUlpBuckets, 0);
      for (int b = 0; b < kUlpBuckets; ++b) {
        // Counts from a shard file: negative ones or a sum past int64 are no study's.
        const int64_t count = unit.score_ulp_histograms[i][b];
        if (count < 0 || __builtin_add_overflow(hist[b], count, &hist[b])) {
          throw_bad_input(fmt::format("sweep: unit {} has a histogram count {} that no study makes", u, count));
        }
      }
    }
  }

  SweepResult result;
  result.layout = layout;
  std::map<std::pair<std::string, int64_t>, double> loss;
  for (const SweepLayout::Studied& s : layout.studied) {
    for (int64_t n : layout.contexts) {
      SweepRow row;
      row.recipe = s.recipe;
      row.context = n;
      row.variant_of = s.variant_of;
      row.stage = s.stage;
      row.metrics = aggregate(rows_of.at({s.recipe, n}));
      row.score_ulp_histogram = ulp_histogram_of.at({s.recipe, n});
      loss[{s.recipe, n}] = 1.0 - row.metrics.recall.mean;
      result.rows.push_back(std::move(row));
    }
  }
  for (const SweepLayout::Studied& s : layout.studied) {
    if (s.variant_of.empty()) continue;
    for (int64_t n : layout.contexts) {
      StageAttribution a;
      a.recipe = s.variant_of;
      a.context = n;
      a.stage = s.stage;
      a.recall_loss = loss.at({s.variant_of, n});  // check_sweep_layout: the base is studied
      a.recall_loss_with_stage_exact = loss.at({s.recipe, n});
      a.accounted = a.recall_loss - a.recall_loss_with_stage_exact;
      result.attribution.push_back(std::move(a));
    }
  }
  return result;
}

SweepResult run_sweep(const SweepConfig& config, const Progress& progress) {
  const SweepLayout layout = sweep_layout(config);
  return reduce_sweep(layout, run_sweep_units(config, sweep_units(layout), progress));
}

}  // namespace dsaf::oracle
