// File: threshold_noise.cc — why a recipe loses recall: its score error against the
// spacing of the exact scores at the K-th, on the sweep's synthetic activations.
//
//   threshold_noise RECIPES CONTEXT K QUERIES [ACTIVATIONS [RECIPE_FILE]]
//   (RECIPES comma-separated presets or names from RECIPE_FILE; ACTIVATIONS gaussian,
//    heavy, outliers or clustered, default gaussian; seed as `sweep`'s first, 1000004)
//
// A row's top-K changes where the recipe's error moves a key across the K-th exact score
// t. Per query row (the sweep's positions, spread over [n/2, n)) and recipe:
//   window   the keys of exact rank K - m .. K + m - 1 (m = 32, rank 1 the largest),
//   spacing  (exact score at rank K - m - exact score at rank K + m) / 2m: the mean gap
//            between neighbouring exact scores at the threshold,
//   error    the median over the window of |recipe score - exact score|,
//   rank noise  error / spacing: how many ranks a typical key near t moves,
// each also relative to |t| (spacing / |t|, error / |t|), with the row's recall.
// Printed: the median over the rows of each. Of two recipes with the same relative error,
// the one whose scores lie closer at t (smaller spacing / |t|) has more rank noise and
// loses more recall; at the same spacing, the one with the larger error does. The scores and the
// oracle are the sweep's (oracle/sweep.cc: ref::exact_of, build_keys, build_query,
// ref::index_scores, ref::select_topk, row_metrics), so the recall column is the sweep's.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "oracle/parallel.h"
#include "oracle/study_keys.h"
#include "oracle/sweep.h"
#include "oracle/synthetic.h"
#include "oracle/topk_metrics.h"
#include "reference/error.h"
#include "reference/recipe.h"
#include "reference/recipe_json.h"
#include "reference/rope.h"
#include "reference/score.h"
#include "reference/topk.h"

namespace {

using namespace dsaf;
using namespace dsaf::oracle;

constexpr int kHalfWindow = 32;

struct RowNoise {
  double spacing, error, rank_noise, spacing_rel, error_rel, recall;
};

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// The exact scores' indices ordered by score, descending (ties by index), ranks
// [0, limit) only.
std::vector<int64_t> top_ranks(const std::vector<double>& exact, int64_t n, int64_t limit) {
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  const auto before = [&](int64_t a, int64_t b) { return exact[a] > exact[b] || (exact[a] == exact[b] && a < b); };
  std::partial_sort(order.begin(), order.begin() + limit, order.end(), before);
  order.resize(limit);
  return order;
}

RowNoise row_noise(const std::vector<double>& exact, const std::vector<double>& ours, int64_t n, int k,
                   const std::vector<int32_t>& selected, const std::vector<int32_t>& reference) {
  const std::vector<int64_t> order = top_ranks(exact, n, k + kHalfWindow);
  const double t = exact[order[k - 1]];
  const double spacing = (exact[order[k - 1 - kHalfWindow]] - exact[order[k - 1 + kHalfWindow]]) / (2.0 * kHalfWindow);
  std::vector<double> errors;
  for (int r = k - kHalfWindow; r < k + kHalfWindow; ++r) errors.push_back(std::fabs(ours[order[r]] - exact[order[r]]));
  const double error = median(errors);
  RowNoise out;
  out.spacing = spacing;
  out.error = error;
  out.rank_noise = spacing > 0 ? error / spacing : INFINITY;
  out.spacing_rel = spacing / std::fabs(t);
  out.error_rel = error / std::fabs(t);
  out.recall = row_metrics(exact, n, selected, reference, 64).recall;
  return out;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');) out.push_back(part);
  return out;
}

int run(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: threshold_noise RECIPES CONTEXT K QUERIES [ACTIVATIONS [RECIPE_FILE]]\n");
    return 2;
  }
  const int64_t n = std::atoll(argv[2]);
  const int k = std::atoi(argv[3]), queries = std::atoi(argv[4]);
  if (n < 2 || k < kHalfWindow + 1 || queries < 1 || n / 2 < k + kHalfWindow) {
    std::fprintf(stderr, "threshold_noise: need K > %d and K + %d <= CONTEXT / 2, QUERIES >= 1\n", kHalfWindow, kHalfWindow);
    return 2;
  }
  SyntheticSpec spec;
  spec.kind = parse_activation_kind(argc > 5 ? argv[5] : "gaussian");
  std::vector<ref::Recipe> extra;
  if (argc > 6) extra = ref::load_recipe_file(argv[6]);
  std::vector<ref::Recipe> recipes;
  for (const std::string& name : split(argv[1])) {
    const auto found = std::find_if(extra.begin(), extra.end(), [&](const ref::Recipe& r) { return r.name == name; });
    recipes.push_back(found != extra.end() ? *found : ref::preset(name));
  }
  spec.seed = 1 * 1000003ull + 1;  // the sweep's first seed (--activation-seed 1)
  const auto acts = std::make_shared<const SyntheticActivations>(spec);
  const std::vector<int64_t> positions = query_positions(n, queries);
  std::printf("%lld keys, K %d, %d query rows, %s activations; medians over the rows (window of ranks K +- %d)\n",
              static_cast<long long>(n), k, queries, activation_kind_name(spec.kind).c_str(), kHalfWindow);
  std::printf("%-22s %10s %10s %10s %12s %10s %9s\n", "recipe", "spacing/|t|", "error/|t|", "rank noise", "spacing", "error",
              "recall");
  for (const ref::Recipe& recipe : recipes) {
    const ref::Recipe exact = ref::exact_of(recipe);
    const ref::RopeTable exact_rope(exact.rope.table, static_cast<int>(n)), rope(recipe.rope.table, static_cast<int>(n));
    const ref::KeyMatrix exact_keys = build_keys(exact, *acts, n, exact_rope, 2);
    const ref::KeyMatrix keys = build_keys(recipe, *acts, n, rope, 2);
    std::vector<RowNoise> rows(positions.size());
    parallel_for(static_cast<int64_t>(positions.size()), 2, [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) {
        const int64_t valid = positions[j] + 1;
        const std::vector<double> exact_scores =
            ref::index_scores(build_query(exact, *acts, positions[j], exact_rope), exact_keys, valid, exact.score);
        const std::vector<double> scores =
            ref::index_scores(build_query(recipe, *acts, positions[j], rope), keys, valid, recipe.score);
        rows[j] = row_noise(exact_scores, scores, valid, k, ref::select_topk(scores, valid, k),
                            ref::select_topk(exact_scores, valid, k));
      }
    });
    const auto col = [&](double RowNoise::*field) {
      std::vector<double> v;
      for (const RowNoise& r : rows) v.push_back(r.*field);
      return median(v);
    };
    std::vector<double> recall;
    for (const RowNoise& r : rows) recall.push_back(r.recall);
    double mean_recall = 0;
    for (double r : recall) mean_recall += r / static_cast<double>(recall.size());
    std::printf("%-22s %10.3e %10.3e %10.3f %12.4e %10.4e %9.6f\n", recipe.name.c_str(), col(&RowNoise::spacing_rel),
                col(&RowNoise::error_rel), col(&RowNoise::rank_noise), col(&RowNoise::spacing), col(&RowNoise::error),
                mean_recall);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const dsaf::Error& e) {
    std::fprintf(stderr, "threshold_noise: %s\n", e.what());
    return 2;
  }
}
