// File: sweep.cc — the sweep study (sweep.h).
#include "oracle/sweep.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <utility>

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

// Exact scores and top-K per query row of one oracle.
struct Oracle {
  std::vector<std::vector<double>> scores;
  std::vector<std::vector<int32_t>> topk;
};

}  // namespace

int64_t sweep_peak_bytes(const SweepConfig& config) {
  if (config.contexts.empty()) return kStudyBaseBytes;
  const int64_t n = *std::max_element(config.contexts.begin(), config.contexts.end());
  std::vector<Recipe> studied = config.recipes;
  if (config.attribution) {
    for (const Recipe& r : config.recipes) {
      for (auto& [stage, variant] : stage_variants(r)) studied.push_back(variant);
    }
  }
  const int64_t keys = n * kKeyMatrixBytesPerKey, q = config.queries;
  const int64_t oracle = keys + q * (n + config.topk) * 8;
  return distinct_oracles(studied) * oracle + keys + std::max(1, config.threads) * 2 * n * 8 +
         distinct_rope_tables(studied) * n * kRopeBytesPerPosition + kStudyBaseBytes;
}

SweepResult run_sweep(const SweepConfig& config, const Progress& progress) {
  if (config.recipes.empty() || config.contexts.empty() || (config.seeds.empty() && !config.source) ||
      config.queries < 1 || config.topk < 1 || config.page_size < 1) {
    throw Error(ErrorKind::kUsage, "sweep: need recipes, contexts, seeds, queries >= 1, topk >= 1");
  }
  check_contexts_fit(config.source, config.contexts, "sweep");
  // A fixture is one fixed set of activations: one pass, whatever the seeds say.
  const std::vector<uint64_t> seeds = config.source ? std::vector<uint64_t>{0} : config.seeds;
  std::vector<Studied> studied;
  for (const Recipe& r : config.recipes) {
    studied.push_back({r, "", ""});
    if (config.attribution) {
      for (auto& [stage, variant] : stage_variants(r)) studied.push_back({variant, r.name, stage});
    }
  }
  const int64_t max_n = *std::max_element(config.contexts.begin(), config.contexts.end());
  RopeTables rope(max_n);
  std::map<std::pair<std::string, int64_t>, std::vector<RowMetrics>> rows_of;
  // Score error in fp32 ulps: recipe score vs the exact score rounded to fp32, log2 buckets.
  std::map<std::pair<std::string, int64_t>, std::vector<int64_t>> ulp_histogram_of;
  const int64_t total = static_cast<int64_t>(config.contexts.size() * seeds.size() * studied.size());
  int64_t done = 0;

  for (int64_t n : config.contexts) {
    const std::vector<int64_t> positions = query_positions(n, config.queries);
    for (uint64_t seed : seeds) {
      const std::shared_ptr<const ActivationSource> source =
          activations_for(config.source, config.activations, seed);
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
        auto& all = rows_of[{s.recipe.name, n}];
        all.insert(all.end(), metrics.begin(), metrics.end());
        auto& hist = ulp_histogram_of[{s.recipe.name, n}];
        hist.resize(kUlpBuckets, 0);
        for (const auto& h : histograms) {
          for (int i = 0; i < kUlpBuckets; ++i) hist[i] += h[i];
        }
        if (progress) progress(++done, total);
      }
    }
  }

  SweepResult result;
  result.topk = config.topk;
  result.queries_per_context_and_seed = config.queries;
  result.seeds = config.source ? std::vector<uint64_t>{} : config.seeds;
  result.page_size = config.page_size;
  result.activations = describe_activations(config.source, config.activations);
  std::map<std::pair<std::string, int64_t>, double> loss;
  for (const Studied& s : studied) {
    for (int64_t n : config.contexts) {
      SweepRow row;
      row.recipe = s.recipe.name;
      row.context = n;
      row.variant_of = s.variant_of;
      row.stage = s.stage;
      row.metrics = aggregate(rows_of.at({s.recipe.name, n}));
      row.score_ulp_histogram = ulp_histogram_of.at({s.recipe.name, n});
      loss[{s.recipe.name, n}] = 1.0 - row.metrics.recall.mean;
      result.rows.push_back(std::move(row));
    }
  }
  for (const Studied& s : studied) {
    if (s.variant_of.empty()) continue;
    for (int64_t n : config.contexts) {
      StageAttribution a;
      a.recipe = s.variant_of;
      a.context = n;
      a.stage = s.stage;
      a.recall_loss = loss.at({s.variant_of, n});
      a.recall_loss_with_stage_exact = loss.at({s.recipe.name, n});
      a.accounted = a.recall_loss - a.recall_loss_with_stage_exact;
      result.attribution.push_back(std::move(a));
    }
  }
  return result;
}

}  // namespace dsaf::oracle
