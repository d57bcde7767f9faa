// File: topk_metrics.h
// How a recipe's top-K selection compares with the exact one, per query row
// (docs/verification.md §4, §8). Inputs per row:
//   exact_scores  I_exact[s] for the valid positions s in [0, n) (fp64, the oracle),
//   selected      the recipe's top-K indices (-1 padding allowed),
//   reference     the exact top-K indices (topk.h order; -1 padding allowed),
// where K = selected.size() = reference.size(). "Valid" entries are those != -1.
// Definitions (S = valid selected, R = valid reference, k_eff = |R|):
//   recall            |S ∩ R| / k_eff                         (1 when k_eff = 0)
//   jaccard           |S ∩ R| / |S ∪ R|                       (1 when both empty)
//   tie_aware_recall  (|S ∩ R| + forgiven) / k_eff, where the exact scores of S \ R and
//                     of R \ S, each sorted descending, are compared position by position
//                     and equal pairs are forgiven (SGLang's test_topk rule: a swap among
//                     equal scores is no error; a swap next to a real loss is not forgiven)
//   threshold_valid   every s in S has I_exact[s] >= the k_eff-th largest exact score
//   value_recall      sum_{S} I_exact / sum_{R} I_exact        (1 when the sums are equal
//                     or the latter is 0); indexer scores can be negative (signed head
//                     weights), and then the ratio can exceed 1 for a worse selection
//   mass_recall       sum_{S} p / sum_{R} p with p = softmax(I_exact) over [0, n),
//                     computed stably (max subtracted); the DSA KL target is this mass
//   kendall_tau       Kendall's tau-b between the recipe rank order of S ∩ R (position in
//                     `selected`) and their exact rank order (position in `reference`);
//                     1 when |S ∩ R| < 2
//   page_recall       |pages(S) ∩ pages(R)| / |pages(R)| with page(s) = s / page_size
//   changed           |R \ S|, the number of exact indices the recipe lost
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsaf::oracle {

struct RowMetrics {
  double recall = 1.0;
  double jaccard = 1.0;
  double tie_aware_recall = 1.0;
  bool threshold_valid = true;
  double value_recall = 1.0;
  double mass_recall = 1.0;
  double kendall_tau = 1.0;
  double page_recall = 1.0;
  int changed = 0;
};

RowMetrics row_metrics(const std::vector<double>& exact_scores, int64_t n,
                       const std::vector<int32_t>& selected,
                       const std::vector<int32_t>& reference, int page_size);

// Distribution of one metric over rows.
struct Summary {
  double mean = 0.0;
  double p1 = 0.0;   // 1st percentile (nearest rank)
  double p50 = 0.0;  // median (nearest rank)
  double worst = 0.0;  // the minimum: every summarised metric is higher-is-better
  int64_t rows = 0;
};
// Nearest-rank percentiles: p-th percentile = sorted[ceil(p/100 * rows) - 1].
Summary summarize(std::vector<double> values);

// Aggregates over rows: a Summary per metric, the fraction of threshold-valid rows and a
// histogram of `changed` (bucket i counts rows with changed == i; the last bucket holds
// all rows with changed >= buckets - 1).
struct Aggregate {
  Summary recall, jaccard, tie_aware_recall, value_recall, mass_recall, kendall_tau, page_recall;
  double threshold_valid_fraction = 1.0;
  std::vector<int64_t> changed_histogram;
};
Aggregate aggregate(const std::vector<RowMetrics>& rows, int buckets = 17);

}  // namespace dsaf::oracle
