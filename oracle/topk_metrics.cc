// File: topk_metrics.cc — per-row top-K comparison metrics and their aggregation
// (topk_metrics.h; docs/verification.md §4, §8).
// Cost per row: O(n) for validation, the threshold (nth_element), the value sums and the
// softmax weights; O(K log K) for the tie lists, the page sets and the Kendall inversion
// count. Memory O(n + K): a reference position and a selected flag per valid position, one
// copy of the scores for nth_element, and lists of at most K entries. Nothing is n x n.
//
// Conventions the header leaves open (the code below says why at each one):
//   - threshold_valid with k_eff = 0: the 0-th largest score is taken as +inf, so only an
//     empty S is valid (the reference selected nothing, so any selection exceeds it).
//   - tie_aware_recall: both difference lists are sorted descending and zipped; when
//     |S \ R| != |R \ S| the surplus entries of the longer list are never forgiven.
//   - value_recall: 1 also when the two sums are equal (so agreeing infinite sums give 1,
//     not inf/inf = NaN); otherwise the plain fp64 ratio, which exceeds 1 when both sums
//     are negative and the recipe's is more negative.
//   - mass_recall: 1 when sum_R p = 0 (only when R is empty, or R misses the row maximum by
//     more than the fp64 exp range), mirroring value_recall.
//   - page_recall: 1 when pages(R) is empty (R is empty), mirroring recall.
#include "oracle/topk_metrics.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <utility>

#include "reference/error.h"

namespace dsaf::oracle {
namespace {

constexpr int64_t kAbsent = -1;  // reference_position of an index that is not in R

// Counts the pairs i < j with values[i] > values[j] by bottom-up merge sort; sorts
// `values` as a side effect. O(m log m) time, O(m) extra memory.
int64_t count_inversions(std::vector<int64_t>& values) {
  const size_t m = values.size();
  std::vector<int64_t> merged(m);
  int64_t inversions = 0;
  for (size_t width = 1; width < m; width *= 2) {
    for (size_t lo = 0; lo < m; lo += 2 * width) {
      const size_t mid = std::min(lo + width, m), hi = std::min(lo + 2 * width, m);
      size_t left = lo, right = mid, out = lo;
      while (left < mid && right < hi) {
        if (values[right] < values[left]) {
          // Every entry still waiting in the left run is larger than values[right] and
          // precedes it: that many inversions.
          inversions += static_cast<int64_t>(mid - left);
          merged[out++] = values[right++];
        } else {
          merged[out++] = values[left++];
        }
      }
      while (left < mid) merged[out++] = values[left++];
      while (right < hi) merged[out++] = values[right++];
    }
    values.swap(merged);
  }
  return inversions;
}

// Number of positions i < min(sizes) with a[i] == b[i]; both lists are sorted descending
// first, so this is the header's "sorted ... compared pairwise".
int64_t count_equal_sorted_pairs(std::vector<double> a, std::vector<double> b) {
  std::sort(a.begin(), a.end(), std::greater<double>());
  std::sort(b.begin(), b.end(), std::greater<double>());
  int64_t equal_pairs = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) equal_pairs += a[i] == b[i];
  return equal_pairs;
}

// The distinct pages of `indices`, ascending.
std::vector<int64_t> distinct_pages(const std::vector<int32_t>& indices, int page_size) {
  std::vector<int64_t> pages;
  pages.reserve(indices.size());
  for (const int32_t index : indices) pages.push_back(index / page_size);
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
  return pages;
}

// Throws unless `index`, entry `position` of the list `list_name`, is a valid position
// in [0, n); the caller has already skipped -1 padding.
void check_in_row(int32_t index, int64_t n, const char* list_name, size_t position) {
  if (index < 0 || index >= n) {
    throw_bad_input(std::string("top-K metrics: ") + list_name + "[" + std::to_string(position) +
                    "] = " + std::to_string(index) + " is neither -1 nor in [0, " +
                    std::to_string(n) + ")");
  }
}

[[noreturn]] void throw_repeated(const char* list_name, int32_t index) {
  throw_bad_input(std::string("top-K metrics: ") + list_name + " repeats index " +
                  std::to_string(index));
}

}  // namespace

RowMetrics row_metrics(const std::vector<double>& exact_scores, int64_t n,
                       const std::vector<int32_t>& selected,
                       const std::vector<int32_t>& reference, int page_size) {
  // 1. Validate.
  if (selected.size() != reference.size()) {
    throw_bad_input("top-K metrics: " + std::to_string(selected.size()) +
                    " selected indices but " + std::to_string(reference.size()) +
                    " reference indices (K must agree)");
  }
  if (n < 0 || n > static_cast<int64_t>(exact_scores.size())) {
    throw_bad_input("top-K metrics: " + std::to_string(n) + " valid positions but " +
                    std::to_string(exact_scores.size()) + " exact scores");
  }
  if (page_size < 1) {
    throw_bad_input("top-K metrics: page size " + std::to_string(page_size) + " < 1");
  }
  for (int64_t s = 0; s < n; ++s) {
    if (std::isnan(exact_scores[s])) {
      throw_bad_input("top-K metrics: NaN exact score at position " + std::to_string(s));
    }
  }

  // 2. Membership. reference_position[s] is s's position in `reference` (kAbsent if s is
  // not in R); in_selected[s] says whether s is in S.
  std::vector<int64_t> reference_position(n, kAbsent);
  std::vector<char> in_selected(n, 0);
  std::vector<int32_t> valid_reference, valid_selected;
  valid_reference.reserve(reference.size());
  valid_selected.reserve(selected.size());
  for (size_t position = 0; position < reference.size(); ++position) {
    const int32_t index = reference[position];
    if (index == -1) continue;
    check_in_row(index, n, "reference", position);
    if (reference_position[index] != kAbsent) throw_repeated("reference", index);
    reference_position[index] = static_cast<int64_t>(position);
    valid_reference.push_back(index);
  }
  for (size_t position = 0; position < selected.size(); ++position) {
    const int32_t index = selected[position];
    if (index == -1) continue;
    check_in_row(index, n, "selected", position);
    if (in_selected[index]) throw_repeated("selected", index);
    in_selected[index] = 1;
    valid_selected.push_back(index);
  }

  RowMetrics metrics;
  const int64_t k_eff = static_cast<int64_t>(valid_reference.size());
  const int64_t selected_count = static_cast<int64_t>(valid_selected.size());

  // 3. Set overlap: recall, Jaccard, changed; the difference lists feed tie-aware recall.
  // `reference_ranks_in_selected_order` holds, for S ∩ R walked in `selected` order, each
  // index's position in `reference`: the two rank orders Kendall's tau compares.
  std::vector<int64_t> reference_ranks_in_selected_order;
  std::vector<double> selected_only_scores, reference_only_scores;
  for (const int32_t index : valid_selected) {
    if (reference_position[index] != kAbsent) {
      reference_ranks_in_selected_order.push_back(reference_position[index]);
    } else {
      selected_only_scores.push_back(exact_scores[index]);
    }
  }
  for (const int32_t index : valid_reference) {
    if (!in_selected[index]) reference_only_scores.push_back(exact_scores[index]);
  }
  const int64_t common = static_cast<int64_t>(reference_ranks_in_selected_order.size());
  const int64_t union_size = selected_count + k_eff - common;
  metrics.changed = static_cast<int>(k_eff - common);
  if (k_eff > 0) metrics.recall = static_cast<double>(common) / k_eff;
  if (union_size > 0) metrics.jaccard = static_cast<double>(common) / union_size;

  // Zipping the descending lists forgives exactly the swaps of equal scores when the
  // recipe's only differences are ties at the threshold. A genuine loss shifts the zip,
  // so a tie swap next to it may go unforgiven: the metric errs on the strict side.
  if (k_eff > 0) {
    const int64_t forgiven =
        count_equal_sorted_pairs(std::move(selected_only_scores), std::move(reference_only_scores));
    metrics.tie_aware_recall = static_cast<double>(common + forgiven) / k_eff;
  }

  // 4. Threshold validity against the k_eff-th largest score of the whole row (not the
  // minimum over R, which would trust the reference it is meant to check). For k_eff = 0
  // the threshold is +inf: only an empty S selects nothing above it.
  if (k_eff == 0) {
    metrics.threshold_valid = valid_selected.empty();
  } else {
    std::vector<double> row(exact_scores.begin(), exact_scores.begin() + n);
    std::nth_element(row.begin(), row.begin() + (k_eff - 1), row.end(), std::greater<double>());
    const double threshold = row[k_eff - 1];
    metrics.threshold_valid =
        std::all_of(valid_selected.begin(), valid_selected.end(),
                    [&](int32_t index) { return exact_scores[index] >= threshold; });
  }

  // 5. Value and mass recall. Both sums run over positions in ascending index order, so a
  // recipe that returns R in another order gets exactly 1, not 1 - ulp.
  // The softmax normaliser Z cancels in sum_S p / sum_R p and is never formed; subtracting
  // the row maximum keeps every weight exp(I - max) in (0, 1], so nothing overflows and the
  // largest weight cannot underflow. A weight equal to the maximum is 1 by definition; this
  // also avoids inf - inf = NaN when the maximum is +inf (the +inf positions share the
  // mass) or when every score is -inf (uniform, the limit of equal scores). Otherwise -inf
  // scores get exp(-inf) = 0 mass.
  double row_max = -std::numeric_limits<double>::infinity();
  for (int64_t s = 0; s < n; ++s) row_max = std::max(row_max, exact_scores[s]);
  const auto softmax_weight = [row_max](double score) {
    return score == row_max ? 1.0 : std::exp(score - row_max);
  };
  double selected_value = 0.0, reference_value = 0.0;
  double selected_mass = 0.0, reference_mass = 0.0;
  for (int64_t s = 0; s < n; ++s) {
    const bool in_s = in_selected[s], in_r = reference_position[s] != kAbsent;
    if (!in_s && !in_r) continue;
    const double weight = softmax_weight(exact_scores[s]);
    if (in_s) {
      selected_value += exact_scores[s];
      selected_mass += weight;
    }
    if (in_r) {
      reference_value += exact_scores[s];
      reference_mass += weight;
    }
  }
  // Equal sums give 1 before dividing, so agreeing infinite sums do not become NaN.
  if (reference_value != 0.0 && selected_value != reference_value) {
    metrics.value_recall = selected_value / reference_value;
  }
  if (reference_mass != 0.0) metrics.mass_recall = selected_mass / reference_mass;

  // 6. Kendall's tau over S ∩ R. Positions in either list are distinct, so neither ranking
  // has ties and tau-b's denominator sqrt((P0 - T_sel)(P0 - T_ref)) is P0 = m(m-1)/2:
  // tau-b = tau-a = (concordant - discordant) / P0 = 1 - 2 * discordant / P0. Walking S ∩ R
  // in `selected` order, a discordant pair is an inversion of the reference positions.
  if (common >= 2) {
    const int64_t pairs = common * (common - 1) / 2;
    const int64_t discordant = count_inversions(reference_ranks_in_selected_order);
    metrics.kendall_tau = static_cast<double>(pairs - 2 * discordant) / pairs;
  }

  // 7. Page recall: pages(R) = {} only when R is empty, and then 1 as for recall.
  const std::vector<int64_t> reference_pages = distinct_pages(valid_reference, page_size);
  if (!reference_pages.empty()) {
    const std::vector<int64_t> selected_pages = distinct_pages(valid_selected, page_size);
    std::vector<int64_t> shared_pages;
    std::set_intersection(selected_pages.begin(), selected_pages.end(), reference_pages.begin(),
                          reference_pages.end(), std::back_inserter(shared_pages));
    metrics.page_recall = static_cast<double>(shared_pages.size()) / reference_pages.size();
  }
  return metrics;
}

Summary summarize(std::vector<double> values) {
  Summary summary;
  summary.rows = static_cast<int64_t>(values.size());
  if (values.empty()) return summary;  // no rows: every statistic stays 0
  for (const double value : values) {
    // NaN has no place in a sorted order (std::sort would be undefined).
    if (std::isnan(value)) throw_bad_input("summarize: NaN metric value");
  }
  std::sort(values.begin(), values.end());
  // Summing in sorted order makes the mean independent of the row order.
  double sum = 0.0;
  for (const double value : values) sum += value;
  summary.mean = sum / summary.rows;
  // Nearest rank ceil(p/100 * rows), in integers: in fp64 a product can land an ulp above
  // an integer (0.07 * 100 = 7.000000000000001) and its ceiling would move the rank by one.
  const auto nearest_rank = [&](int64_t percent) {
    const int64_t rank = (percent * summary.rows + 99) / 100;
    return values[rank - 1];
  };
  summary.p1 = nearest_rank(1);
  summary.p50 = nearest_rank(50);
  summary.worst = values.front();  // every metric here is "higher is better"
  return summary;
}

Aggregate aggregate(const std::vector<RowMetrics>& rows, int buckets) {
  if (buckets < 1) {
    throw_bad_input("aggregate: " + std::to_string(buckets) + " histogram buckets (need >= 1)");
  }
  const auto summarize_field = [&rows](double RowMetrics::*field) {
    std::vector<double> values;
    values.reserve(rows.size());
    for (const RowMetrics& row : rows) values.push_back(row.*field);
    return summarize(std::move(values));
  };
  Aggregate result;
  result.recall = summarize_field(&RowMetrics::recall);
  result.jaccard = summarize_field(&RowMetrics::jaccard);
  result.tie_aware_recall = summarize_field(&RowMetrics::tie_aware_recall);
  result.value_recall = summarize_field(&RowMetrics::value_recall);
  result.mass_recall = summarize_field(&RowMetrics::mass_recall);
  result.kendall_tau = summarize_field(&RowMetrics::kendall_tau);
  result.page_recall = summarize_field(&RowMetrics::page_recall);

  result.changed_histogram.assign(buckets, 0);
  int64_t threshold_valid_rows = 0;
  for (const RowMetrics& row : rows) {
    if (row.changed < 0) {
      throw_bad_input("aggregate: negative changed count " + std::to_string(row.changed));
    }
    threshold_valid_rows += row.threshold_valid;
    ++result.changed_histogram[std::min(row.changed, buckets - 1)];
  }
  // No rows: nothing is invalid, so the fraction keeps its default 1.
  if (!rows.empty()) {
    result.threshold_valid_fraction = static_cast<double>(threshold_valid_rows) / rows.size();
  }
  return result;
}

}  // namespace dsaf::oracle
