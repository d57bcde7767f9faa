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

// Query positions of a sweep row set: spread over [n/2, n), the last one n - 1.
std::vector<int64_t> query_positions(int64_t n, int queries) {
  std::vector<int64_t> out;
  const int64_t span = std::max<int64_t>(1, n - n / 2);
  for (int j = 0; j < queries; ++j) out.push_back(n - 1 - span * j / queries);
  return out;
}

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

}  // namespace

int64_t sweep_peak_bytes(const SweepConfig& config) {
  if (config.contexts.empty()) return kStudyBaseBytes;
  const int64_t n = *std::max_element(config.contexts.begin(), config.contexts.end());
  std::vector<Recipe> studied;
  for (const Studied& s : studied_recipes(config)) studied.push_back(s.recipe);
  const int64_t keys = n * kKeyMatrixBytesPerKey, q = config.queries;
  const int64_t oracle = keys + q * (n + config.topk) * 8;
  return distinct_oracles(studied) * oracle + keys + std::max(1, config.threads) * 2 * n * 8 +
         distinct_rope_tables(studied) * n * kRopeBytesPerPosition + kStudyBaseBytes;
}

SweepLayout sweep_layout(const SweepConfig& config) {
  if (config.recipes.empty() || config.contexts.empty() || (config.seeds.empty() && !config.source) ||
      config.queries < 1 || config.topk < 1 || config.page_size < 1) {
    throw Error(ErrorKind::kUsage, "sweep: need recipes, contexts, seeds, queries >= 1, topk >= 1");
  }
  check_contexts_fit(config.source, config.contexts, "sweep");
  SweepLayout layout;
  layout.topk = config.topk;
  layout.queries = config.queries;
  layout.page_size = config.page_size;
  layout.seeds = config.source ? std::vector<uint64_t>{} : config.seeds;
  layout.activations = describe_activations(config.source, config.activations);
  layout.contexts = config.contexts;
  for (const Studied& s : studied_recipes(config)) layout.studied.push_back({s.recipe.name, s.variant_of, s.stage});
  return layout;
}

std::vector<SweepUnit> sweep_units(const SweepLayout& layout) {
  // A fixture is one fixed set of activations: one pass, whatever the seeds say.
  const std::vector<uint64_t> seeds = layout.seeds.empty() ? std::vector<uint64_t>{0} : layout.seeds;
  std::vector<SweepUnit> units;
  for (const int64_t n : layout.contexts) {
    for (const uint64_t seed : seeds) units.push_back({n, seed});
  }
  return units;
}

std::vector<SweepUnitResult> run_sweep_units(const SweepConfig& config, const std::vector<SweepUnit>& units,
                                             const Progress& progress) {
  const std::vector<Studied> studied = studied_recipes(config);
  // The tables of the longest context of the study, whichever units run here.
  RopeTables rope(*std::max_element(config.contexts.begin(), config.contexts.end()));
  const int64_t total = static_cast<int64_t>(units.size() * studied.size());
  int64_t done = 0;
  std::vector<SweepUnitResult> results;
  for (const SweepUnit& unit : units) {
    const int64_t n = unit.context;
    const std::vector<int64_t> positions = query_positions(n, config.queries);
    const std::shared_ptr<const ActivationSource> source =
        activations_for(config.source, config.activations, unit.seed);
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
    for (const Studied& s : studied) {
      const Oracle& o = oracles.at(exact_model_key(s.recipe));
      const ref::RopeTable& table = rope.get(s.recipe.rope.table);
      const ref::KeyMatrix keys = build_keys(s.recipe, acts, n, table, config.threads);
      std::vector<RowMetrics> metrics(positions.size());
      std::vector<std::vector<int64_t>> histograms(positions.size(), std::vector<int64_t>(kUlpBuckets, 0));
      parallel_for(static_cast<int64_t>(positions.size()), config.threads, [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) {
          const int64_t valid = positions[j] + 1;
          const ref::PreparedQuery q = build_query(s.recipe, acts, positions[j], table);
          const std::vector<double> scores = ref::index_scores(q, keys, valid, s.recipe.score);
          metrics[j] = row_metrics(o.scores[j], valid, ref::select_topk(scores, valid, config.topk),
                                   o.topk[j], config.page_size);
          for (int64_t k = 0; k < valid; ++k) {
            const float ours = static_cast<float>(scores[k]);
            const float exact = static_cast<float>(o.scores[j][k]);
            if (std::isfinite(ours) && std::isfinite(exact)) {
              ++histograms[j][ulp_bucket(ulp_distance(ours, exact))];
            }
          }
        }
      });
      std::vector<int64_t> histogram(kUlpBuckets, 0);
      for (const auto& h : histograms) {
        for (int i = 0; i < kUlpBuckets; ++i) histogram[i] += h[i];
      }
      result.rows.push_back(std::move(metrics));
      result.score_ulp_histograms.push_back(std::move(histogram));
      if (progress) progress(++done, total);
    }
    results.push_back(std::move(result));
  }
  return results;
}

SweepResult reduce_sweep(const SweepLayout& layout, const std::vector<SweepUnitResult>& units) {
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
      for (int b = 0; b < kUlpBuckets; ++b) hist[b] += unit.score_ulp_histograms[i][b];
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
      a.recall_loss = loss.at({s.variant_of, n});
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
