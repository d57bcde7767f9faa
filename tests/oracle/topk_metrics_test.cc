// Top-K comparison metrics (oracle/topk_metrics.h): every metric against small cases
// computed by hand, the conventions at the edges (padding, empty sets, ties, infinities),
// nearest-rank summaries and the changed-index histogram.
//
// Each formula is pinned so that a plausible wrong version fails a named test:
//   recall divided by |S| or by K instead of k_eff    -> RecallDividesByValidReferenceCount
//   Jaccard replaced by |S ∩ R| / K                   -> RecallAndJaccardCountOneSwap
//   tie-aware recall forgiving unequal swaps          -> TieAwareRecall.ForgivesOnlyEqualScores
//   tie-aware recall as a multiset match (not a zip)  -> TieAwareRecall.ZipsTheDescendingLists
//   threshold with > instead of >=                    -> TieAwareRecall.ForgivesOnlyEqualScores
//   threshold from min over R / the (k_eff+1)-th      -> ThresholdValidity.*
//   value recall from means or in list order          -> ValueRecall.*, ReorderedSelection...
//   mass recall without max subtraction               -> MassRecall.StableFarFromZero
//   mass recall as sum_S p alone, or of raw scores    -> MassRecall.TinySoftmaxByHand
//   Kendall as Spearman, or with a wrong denominator  -> KendallTau.OneDiscordantPairAmongThree
//   Kendall inversion count (merge sort) off          -> KendallTau.MatchesBruteForce...
//   page recall per token, over |pages(S)|, or s % p  -> PageRecall.PageSizeTwo
//   changed as |S \ R|                                -> Changed.CountsLostReferenceIndices
//   percentiles interpolated / floor rank / p1 = min  -> Summarize.*
//   histogram dropping the overflow                   -> Aggregate.LastBucketHoldsOverflow
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "oracle/topk_metrics.h"
#include "reference/error.h"

namespace dsaf::oracle {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Every position of `scores` is valid (n = scores.size()).
RowMetrics metrics_of(const std::vector<double>& scores, const std::vector<int32_t>& selected,
                      const std::vector<int32_t>& reference, int page_size = 1) {
  return row_metrics(scores, static_cast<int64_t>(scores.size()), selected, reference,
                     page_size);
}

template <typename Call>
void expect_bad_input(Call call, const char* what) {
  try {
    call();
    ADD_FAILURE() << what << ": no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << what;
  }
}

TEST(TopkRowMetrics, IdenticalSelectionScoresOneEverywhere) {
  const RowMetrics m = metrics_of({5, 4, 3, 2, 1}, {0, 1, 2}, {0, 1, 2});
  EXPECT_EQ(m.recall, 1.0);
  EXPECT_EQ(m.jaccard, 1.0);
  EXPECT_EQ(m.tie_aware_recall, 1.0);
  EXPECT_TRUE(m.threshold_valid);
  EXPECT_EQ(m.value_recall, 1.0);
  EXPECT_EQ(m.mass_recall, 1.0);
  EXPECT_EQ(m.kendall_tau, 1.0);
  EXPECT_EQ(m.page_recall, 1.0);
  EXPECT_EQ(m.changed, 0);
}

TEST(TopkRowMetrics, ReorderedSelectionKeepsValueAndMassExactlyOne) {
  // R = {2, 1, 0} (scores 0.3, 0.2, 0.1), S = the same set reversed. In list order the
  // sums differ by an ulp: 0.1 + 0.2 + 0.3 = 0.6000000000000001 but 0.3 + 0.2 + 0.1 = 0.6,
  // so summing in list order would give 1.0000000000000002. The set metrics are 1; the
  // order is fully reversed, so all 3 pairs are discordant: tau = (0 - 3) / 3 = -1.
  const RowMetrics m = metrics_of({0.1, 0.2, 0.3}, {0, 1, 2}, {2, 1, 0});
  EXPECT_EQ(m.value_recall, 1.0);
  EXPECT_EQ(m.mass_recall, 1.0);
  EXPECT_EQ(m.recall, 1.0);
  EXPECT_EQ(m.kendall_tau, -1.0);
}

TEST(TopkRowMetrics, RecallAndJaccardCountOneSwap) {
  // Scores 9 8 7 6 5 4; R = {0,1,2,3}, S = {0,1,2,4}. |S ∩ R| = 3, |S ∪ R| = 5, k_eff = 4.
  // recall 3/4; Jaccard 3/5 (|S ∩ R| / K would be 3/4); changed |R \ S| = |{3}| = 1.
  // S \ R = {5}, R \ S = {6}: unequal, nothing forgiven, tie-aware 3/4.
  // The 4th largest is 6 and S holds 5 < 6: not threshold-valid.
  // value (9+8+7+5) / (9+8+7+6) = 29/30. The common indices keep their order: tau 1.
  const RowMetrics m = metrics_of({9, 8, 7, 6, 5, 4}, {0, 1, 2, 4}, {0, 1, 2, 3});
  EXPECT_EQ(m.recall, 0.75);
  EXPECT_DOUBLE_EQ(m.jaccard, 0.6);
  EXPECT_EQ(m.tie_aware_recall, 0.75);
  EXPECT_FALSE(m.threshold_valid);
  EXPECT_DOUBLE_EQ(m.value_recall, 29.0 / 30.0);
  EXPECT_EQ(m.kendall_tau, 1.0);
  EXPECT_EQ(m.page_recall, 0.75);
  EXPECT_EQ(m.changed, 1);
}

TEST(TopkRowMetrics, RecallDividesByValidReferenceCount) {
  // n = 3 < K = 5: R = {0,1,2} (k_eff = 3), S = {0,1} (the recipe under-filled).
  // recall = 2 / k_eff = 2/3; dividing by K gives 2/5, by |S| gives 1.
  // Jaccard 2 / |{0,1,2}| = 2/3. changed = |{2}| = 1. page_recall (page 1) = 2/3.
  // Threshold validity only bounds the scores in S (3, 2 >= the 3rd largest, 1), so an
  // under-filled S is threshold-valid; recall is what catches it.
  // value (3+2)/(3+2+1) = 5/6. mass, max 3 subtracted: (1 + e^-1) / (1 + e^-1 + e^-2).
  const RowMetrics m = metrics_of({3, 2, 1}, {0, 1, -1, -1, -1}, {0, 1, 2, -1, -1});
  EXPECT_DOUBLE_EQ(m.recall, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.jaccard, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.tie_aware_recall, 2.0 / 3.0);
  EXPECT_TRUE(m.threshold_valid);
  EXPECT_DOUBLE_EQ(m.value_recall, 5.0 / 6.0);
  const double e1 = std::exp(-1.0), e2 = std::exp(-2.0);
  EXPECT_NEAR(m.mass_recall, (1 + e1) / (1 + e1 + e2), 1e-15);
  EXPECT_EQ(m.kendall_tau, 1.0);
  EXPECT_DOUBLE_EQ(m.page_recall, 2.0 / 3.0);
  EXPECT_EQ(m.changed, 1);
}

TEST(TopkRowMetrics, PaddingWhenKExceedsLength) {
  // n = 2, K = 4: both lists hold {0, 1} and two -1s, in opposite orders. Every set metric
  // is 1; the single common pair is discordant: tau = (0 - 1) / 1 = -1.
  const RowMetrics m = metrics_of({2, 1}, {1, 0, -1, -1}, {0, 1, -1, -1});
  EXPECT_EQ(m.recall, 1.0);
  EXPECT_EQ(m.jaccard, 1.0);
  EXPECT_EQ(m.tie_aware_recall, 1.0);
  EXPECT_TRUE(m.threshold_valid);
  EXPECT_EQ(m.value_recall, 1.0);
  EXPECT_EQ(m.mass_recall, 1.0);
  EXPECT_EQ(m.kendall_tau, -1.0);
  EXPECT_EQ(m.page_recall, 1.0);
  EXPECT_EQ(m.changed, 0);
}

TEST(TopkRowMetrics, KEqualToLengthSelectsTheWholeRow) {
  // K = n = 3: any permutation of {0,1,2} is the whole row. The k_eff-th largest is the
  // row minimum, so every selection is threshold-valid.
  const RowMetrics m = metrics_of({3, 2, 1}, {2, 0, 1}, {0, 1, 2});
  EXPECT_EQ(m.recall, 1.0);
  EXPECT_EQ(m.jaccard, 1.0);
  EXPECT_TRUE(m.threshold_valid);
  EXPECT_EQ(m.value_recall, 1.0);
  EXPECT_EQ(m.mass_recall, 1.0);
  EXPECT_EQ(m.changed, 0);
  // Selected order 2,0,1 vs reference 0,1,2: pairs (0,1) concordant, (0,2) and (1,2)
  // discordant (2 comes first in S, last in R): tau = (1 - 2) / 3.
  EXPECT_DOUBLE_EQ(m.kendall_tau, -1.0 / 3.0);
}

TEST(TopkRowMetrics, AllEqualScores) {
  // Scores 4 4 4 4, K = 2: R = {0,1}, the recipe picked the other two, page size 2.
  // recall 0, Jaccard 0/4, changed 2. S \ R = {4,4} and R \ S = {4,4} zip to two equal
  // pairs: tie-aware (0 + 2)/2 = 1. The 2nd largest is 4: threshold-valid.
  // value 8/8; mass 2/2 (every weight exp(0) = 1); no common pair: tau 1.
  // pages(S) = {1}, pages(R) = {0}: page recall 0.
  const RowMetrics m = metrics_of({4, 4, 4, 4}, {2, 3}, {0, 1}, /*page_size=*/2);
  EXPECT_EQ(m.recall, 0.0);
  EXPECT_EQ(m.jaccard, 0.0);
  EXPECT_EQ(m.tie_aware_recall, 1.0);
  EXPECT_TRUE(m.threshold_valid);
  EXPECT_EQ(m.value_recall, 1.0);
  EXPECT_EQ(m.mass_recall, 1.0);
  EXPECT_EQ(m.kendall_tau, 1.0);
  EXPECT_EQ(m.page_recall, 0.0);
  EXPECT_EQ(m.changed, 2);
}

TEST(TopkRowMetrics, EmptyRowGivesTheEmptyConventions) {
  // n = 0: both lists are all padding; every metric takes its "empty" value. Scores past n
  // are not part of the row, so the NaN at position 1 is not bad input.
  const RowMetrics m = row_metrics({7.0, kNaN}, 0, {-1, -1}, {-1, -1}, 1);
  EXPECT_EQ(m.recall, 1.0);
  EXPECT_EQ(m.jaccard, 1.0);
  EXPECT_EQ(m.tie_aware_recall, 1.0);
  EXPECT_TRUE(m.threshold_valid);
  EXPECT_EQ(m.value_recall, 1.0);
  EXPECT_EQ(m.mass_recall, 1.0);
  EXPECT_EQ(m.kendall_tau, 1.0);
  EXPECT_EQ(m.page_recall, 1.0);
  EXPECT_EQ(m.changed, 0);
}

TEST(TopkRowMetrics, EmptyReferenceWithNonEmptySelection) {
  // R = {}, S = {1}: recall, tie-aware, value, mass and page recall take their k_eff = 0
  // value 1; Jaccard is 0/|{1}| = 0. The 0-th largest score is +inf, so a non-empty S is
  // not threshold-valid (the implementation's convention; the header leaves it open).
  const RowMetrics m = metrics_of({1, 2}, {1, -1}, {-1, -1});
  EXPECT_EQ(m.recall, 1.0);
  EXPECT_EQ(m.jaccard, 0.0);
  EXPECT_EQ(m.tie_aware_recall, 1.0);
  EXPECT_FALSE(m.threshold_valid);
  EXPECT_EQ(m.value_recall, 1.0);
  EXPECT_EQ(m.mass_recall, 1.0);
  EXPECT_EQ(m.kendall_tau, 1.0);
  EXPECT_EQ(m.page_recall, 1.0);
  EXPECT_EQ(m.changed, 0);
}

TEST(TopkTieAwareRecall, ForgivesOnlyEqualScores) {
  // Scores 5 3 3 1, K = 2, R = {0, 1} (the tie at 3 is broken by the lower index).
  // S = {0, 2}: S \ R = {3}, R \ S = {3}, equal: tie-aware (1 + 1)/2 = 1, plain recall 1/2.
  // The 2nd largest is 3 and S's scores are 5, 3 >= 3: valid (a strict > would fail).
  const RowMetrics tie_swap = metrics_of({5, 3, 3, 1}, {0, 2}, {0, 1});
  EXPECT_EQ(tie_swap.recall, 0.5);
  EXPECT_EQ(tie_swap.tie_aware_recall, 1.0);
  EXPECT_TRUE(tie_swap.threshold_valid);
  EXPECT_EQ(tie_swap.value_recall, 1.0);  // 8/8
  EXPECT_EQ(tie_swap.mass_recall, 1.0);
  EXPECT_EQ(tie_swap.changed, 1);
  // S = {0, 3}: S \ R = {1}, R \ S = {3}: not forgiven, tie-aware 1/2, and 1 < 3 is invalid.
  const RowMetrics real_loss = metrics_of({5, 3, 3, 1}, {0, 3}, {0, 1});
  EXPECT_EQ(real_loss.recall, 0.5);
  EXPECT_EQ(real_loss.tie_aware_recall, 0.5);
  EXPECT_FALSE(real_loss.threshold_valid);
  EXPECT_EQ(real_loss.changed, 1);
}

TEST(TopkTieAwareRecall, ZipsTheDescendingLists) {
  // Scores 9 7 5 5 1 0, K = 3, R = {0,1,2}, S = {0,3,4}: the recipe lost 7 and swapped
  // the tied 5s (index 2 for 3), then took 1. Sorted descending, S \ R = (5, 1) and
  // R \ S = (7, 5); the pairs (5,7) and (1,5) differ, so nothing is forgiven: 1/3.
  // This pins the header's literal "compared pairwise"; a multiset match of equal values
  // would forgive the 5-for-5 swap and give 2/3.
  const RowMetrics m = metrics_of({9, 7, 5, 5, 1, 0}, {0, 3, 4}, {0, 1, 2});
  EXPECT_DOUBLE_EQ(m.recall, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.tie_aware_recall, 1.0 / 3.0);
  // With only the tie swap and a loss at the bottom, the zip does forgive the swap:
  // S = {0,1,3} vs R = {0,1,2}: (5) vs (5), tie-aware 3/3.
  EXPECT_EQ(metrics_of({9, 7, 5, 5, 1, 0}, {0, 1, 3}, {0, 1, 2}).tie_aware_recall, 1.0);
}

TEST(TopkThresholdValidity, UsesTheKthLargestOfTheWholeRow) {
  // Scores 10 8 6 4, K = 2: the 2nd largest is 8.
  EXPECT_TRUE(metrics_of({10, 8, 6, 4}, {1, 0}, {0, 1}).threshold_valid);  // order is free
  // 6 < 8. (Against the 3rd largest, 6, it would pass: catches a k_eff+1 off-by-one.)
  EXPECT_FALSE(metrics_of({10, 8, 6, 4}, {0, 2}, {0, 1}).threshold_valid);
  // A wrong reference R = {0, 2} does not lower the bar: S = R still holds 6 < 8. The
  // minimum over R (6) would call it valid.
  EXPECT_FALSE(metrics_of({10, 8, 6, 4}, {0, 2}, {0, 2}).threshold_valid);
}

TEST(TopkThresholdValidity, MinusInfinityTiesAtTheThreshold) {
  // Scores 1 -inf -inf, K = 2: the 2nd largest is -inf, so either -inf position is a valid
  // second pick, and swapping them is a forgiven tie (-inf == -inf).
  const RowMetrics m = metrics_of({1, -kInf, -kInf}, {0, 2}, {0, 1});
  EXPECT_TRUE(m.threshold_valid);
  EXPECT_EQ(m.tie_aware_recall, 1.0);
  EXPECT_EQ(m.mass_recall, 1.0);  // (1 + 0) / (1 + 0)
  EXPECT_EQ(m.value_recall, 1.0);  // both sums are -inf: equal, so 1 rather than NaN
}

TEST(TopkValueRecall, KnownRatios) {
  // Scores 10 6 3 1, R = {0,1} (sum 16).
  // S = {0,2}: (10+3)/16 = 13/16 = 0.8125, exact in binary.
  EXPECT_EQ(metrics_of({10, 6, 3, 1}, {0, 2}, {0, 1}).value_recall, 0.8125);
  // S = {0} (under-filled): 10/16 = 0.625. A ratio of means would give 10 / 8 = 1.25.
  EXPECT_EQ(metrics_of({10, 6, 3, 1}, {0, -1}, {0, 1}).value_recall, 0.625);
}

TEST(TopkValueRecall, ZeroAndNegativeReferenceSums) {
  // Scores 0 0 -1, R = {0,1} sums to 0: value recall is 1 by definition, whatever S holds
  // (here -1 / 0 would be -inf).
  EXPECT_EQ(metrics_of({0, 0, -1}, {0, 2}, {0, 1}).value_recall, 1.0);
  // Scores -1 -2 -3, R = {0,1} (sum -3), S = {0,2} (sum -4): the literal ratio is 4/3 > 1
  // although S is worse. Pinned as defined; negative sums invert the metric's meaning.
  EXPECT_DOUBLE_EQ(metrics_of({-1, -2, -3}, {0, 2}, {0, 1}).value_recall, 4.0 / 3.0);
}

TEST(TopkMassRecall, TinySoftmaxByHand) {
  // Scores 0, ln 2, ln 3: softmax p = (1, 2, 3) / 6. K = 2, R = {2, 1}: p_R = 5/6.
  // S = {2, 0}: p_S = 4/6. mass recall = (4/6) / (5/6) = 4/5.
  // sum_S p alone would be 2/3; the ratio of raw scores ln 3 / ln 6 = 0.613.
  const RowMetrics m = metrics_of({0, std::log(2.0), std::log(3.0)}, {2, 0}, {2, 1});
  EXPECT_NEAR(m.mass_recall, 0.8, 1e-15);
}

TEST(TopkMassRecall, StableFarFromZero) {
  // The same row shifted by +-1000: exp(1000) overflows and exp(-1000) underflows, so
  // only a max-subtracted softmax still gives 4/5. (The shift rounds ln 2 and ln 3 to the
  // ulp of 1000, ~1.1e-13, hence the tolerance.)
  for (const double shift : {1000.0, -1000.0}) {
    const RowMetrics m = metrics_of({shift, shift + std::log(2.0), shift + std::log(3.0)},
                                    {2, 0}, {2, 1});
    EXPECT_NEAR(m.mass_recall, 0.8, 1e-12) << "shift " << shift;
  }
}

TEST(TopkMassRecall, InfiniteScores) {
  // -inf has zero mass: scores 0, -inf, ln 3 (weights 1, 0, 3), R = {2, 0} (mass 4),
  // S = {2, 1} (mass 3): 3/4.
  EXPECT_NEAR(metrics_of({0, -kInf, std::log(3.0)}, {2, 1}, {2, 0}).mass_recall, 0.75, 1e-15);
  // +inf positions share all the mass: scores inf 1 inf, R = {0, 2} holds both halves,
  // S = {0, 1} one of them: 1/2 (not inf - inf = NaN).
  EXPECT_EQ(metrics_of({kInf, 1, kInf}, {0, 1}, {0, 2}).mass_recall, 0.5);
  // All -inf: the limit of equal scores is uniform, so S and R of equal size carry equal
  // mass: 1 (not 0/0).
  const RowMetrics all_masked = metrics_of({-kInf, -kInf, -kInf}, {0, 2}, {0, 1});
  EXPECT_EQ(all_masked.mass_recall, 1.0);
  EXPECT_EQ(all_masked.value_recall, 1.0);
}

TEST(TopkKendallTau, OneDiscordantPairAmongThree) {
  // R = (0, 1, 2), S = (0, 2, 1). Pairs: {0,1} and {0,2} concordant (0 first in both),
  // {1,2} discordant. tau = (2 - 1) / 3 = 1/3. Spearman would give
  // 1 - 6 * (0 + 1 + 1) / (3 * 8) = 1/2; dividing by m^2 = 9 would give 1/9.
  const RowMetrics m = metrics_of({3, 2, 1}, {0, 2, 1}, {0, 1, 2});
  EXPECT_DOUBLE_EQ(m.kendall_tau, 1.0 / 3.0);
  EXPECT_EQ(m.recall, 1.0);  // same set: only the order differs
}

TEST(TopkKendallTau, UsesOnlyTheCommonIndices) {
  // Scores 4 3 2 1 0, K = 3, R = (0, 1, 2). S = (2, 4, 0): S ∩ R = {0, 2}, with 2 before 0
  // in S and after it in R: one discordant pair, tau = -1. Index 4 (not in R) is ignored.
  EXPECT_EQ(metrics_of({4, 3, 2, 1, 0}, {2, 4, 0}, {0, 1, 2}).kendall_tau, -1.0);
  // S = (0, 3, 4): one common index, no pair: tau = 1.
  EXPECT_EQ(metrics_of({4, 3, 2, 1, 0}, {0, 3, 4}, {0, 1, 2}).kendall_tau, 1.0);
}

TEST(TopkKendallTau, MatchesBruteForceOnRandomSelections) {
  // A DSA-sized row (n = 2^17, K = 2048): the O(m log m) inversion count against the
  // O(m^2) pair count, with S = R minus some entries, plus outsiders, locally shuffled.
  std::mt19937 rng(11);
  const int64_t n = int64_t{1} << 17;
  const int k = 2048;
  std::vector<double> scores(n);
  std::uniform_real_distribution<double> uniform(-4.0, 4.0);
  for (double& score : scores) score = uniform(rng);
  std::vector<int32_t> positions(n);
  std::iota(positions.begin(), positions.end(), 0);
  std::shuffle(positions.begin(), positions.end(), rng);
  for (int trial = 0; trial < 4; ++trial) {
    const std::vector<int32_t> reference(positions.begin() + trial * k,
                                         positions.begin() + (trial + 1) * k);
    std::vector<int32_t> selected = reference;
    for (int i = 0; i < k; i += 7 + trial) selected[i] = positions[(trial + 5) * k + i];
    // Shuffle within windows so the orders stay correlated but not identical.
    const int window = 4 << trial;
    for (int start = 0; start < k; start += window) {
      std::shuffle(selected.begin() + start, selected.begin() + std::min(start + window, k), rng);
    }
    std::vector<int64_t> reference_rank(n, -1);
    for (int i = 0; i < k; ++i) reference_rank[reference[i]] = i;
    std::vector<int64_t> common_ranks;  // reference ranks of S ∩ R in selected order
    for (const int32_t index : selected) {
      if (reference_rank[index] >= 0) common_ranks.push_back(reference_rank[index]);
    }
    int64_t concordant = 0, discordant = 0;
    for (size_t i = 0; i < common_ranks.size(); ++i) {
      for (size_t j = i + 1; j < common_ranks.size(); ++j) {
        (common_ranks[i] < common_ranks[j] ? concordant : discordant) += 1;
      }
    }
    const double expected =
        static_cast<double>(concordant - discordant) / static_cast<double>(concordant + discordant);
    const RowMetrics m = row_metrics(scores, n, selected, reference, 64);
    EXPECT_EQ(m.kendall_tau, expected) << "trial " << trial;
    EXPECT_EQ(m.changed, k - static_cast<int>(common_ranks.size())) << "trial " << trial;
  }
}

TEST(TopkPageRecall, PageSizeTwo) {
  // Scores by index: 9 1 2 8 0.5 7 3 4. K = 3, R = {0, 3, 5}: pages {0, 1, 2}.
  const std::vector<double> scores = {9, 1, 2, 8, 0.5, 7, 3, 4};
  // S = {1, 2, 6}: pages {0, 1, 3}; shared {0, 1}: 2/3, though no token is shared.
  const RowMetrics m = metrics_of(scores, {1, 2, 6}, {0, 3, 5}, /*page_size=*/2);
  EXPECT_DOUBLE_EQ(m.page_recall, 2.0 / 3.0);
  EXPECT_EQ(m.recall, 0.0);
  // S = {0, 1, 6}: pages {0, 3}; shared {0}: 1/3. Counting tokens (0 and 1 both land on
  // page 0) would give 2/3, dividing by |pages(S)| 1/2, and page = s % 2 ({0, 1} both
  // ways) 1.
  EXPECT_DOUBLE_EQ(metrics_of(scores, {0, 1, 6}, {0, 3, 5}, 2).page_recall, 1.0 / 3.0);
  // Page size 1 is token recall; a page as long as the row always matches.
  const RowMetrics unit_pages = metrics_of(scores, {0, 1, 6}, {0, 3, 5}, 1);
  EXPECT_EQ(unit_pages.page_recall, unit_pages.recall);
  EXPECT_EQ(metrics_of(scores, {1, 2, 4}, {0, 3, 5}, 8).page_recall, 1.0);
}

TEST(TopkChanged, CountsLostReferenceIndices) {
  // R = {0,1,2}, S = {0}: the recipe lost 1 and 2, changed = 2 (|S \ R| would be 0).
  EXPECT_EQ(metrics_of({3, 2, 1}, {0, -1, -1}, {0, 1, 2}).changed, 2);
  // S = {0, 1, 3} vs R = {0, 1, 2}: one lost, one gained: changed = 1.
  EXPECT_EQ(metrics_of({4, 3, 2, 1}, {0, 1, 3}, {0, 1, 2}).changed, 1);
}

TEST(TopkRowMetricsInput, RejectsBadInput) {
  const std::vector<double> scores = {3, 2, 1};
  expect_bad_input([&] { row_metrics(scores, 3, {0, 1}, {0, 1, 2}, 1); }, "K mismatch");
  expect_bad_input([&] { row_metrics(scores, 3, {0, 3}, {0, 1}, 1); }, "index == n");
  expect_bad_input([&] { row_metrics(scores, 2, {0, 2}, {0, 1}, 1); }, "index past n");
  expect_bad_input([&] { row_metrics(scores, 3, {0, -2}, {0, 1}, 1); }, "index -2");
  expect_bad_input([&] { row_metrics(scores, 3, {0, 1}, {0, 3}, 1); }, "reference out of range");
  expect_bad_input([&] { row_metrics(scores, 3, {1, 1}, {0, 1}, 1); }, "selected repeats");
  expect_bad_input([&] { row_metrics(scores, 3, {0, 1}, {2, 2}, 1); }, "reference repeats");
  expect_bad_input([&] { row_metrics(scores, 4, {0, 1}, {0, 1}, 1); }, "n > scores");
  expect_bad_input([&] { row_metrics(scores, -1, {-1}, {-1}, 1); }, "n < 0");
  expect_bad_input([&] { row_metrics(scores, 3, {0, 1}, {0, 1}, 0); }, "page size 0");
  expect_bad_input([&] { row_metrics({3, kNaN, 1}, 3, {0, 2}, {0, 2}, 1); }, "NaN score");
  // Repeated padding is fine; so is a NaN past n.
  EXPECT_NO_THROW(row_metrics({3, 2, kNaN}, 2, {0, -1, -1}, {0, 1, -1}, 1));
}

TEST(TopkSummarize, NearestRankOnHundredValues) {
  // Values 100, 99, ..., 1. p1 = sorted[ceil(1) - 1] = 1; p50 = sorted[ceil(50) - 1] = 50
  // (an interpolated median would be 50.5); mean 5050 / 100 = 50.5; worst 1.
  std::vector<double> values(100);
  for (int i = 0; i < 100; ++i) values[i] = 100 - i;
  const Summary s = summarize(values);
  EXPECT_EQ(s.rows, 100);
  EXPECT_EQ(s.mean, 50.5);
  EXPECT_EQ(s.p1, 1.0);
  EXPECT_EQ(s.p50, 50.0);
  EXPECT_EQ(s.worst, 1.0);
}

TEST(TopkSummarize, NearestRankOnThreeValues) {
  // Sorted 0.5 0.7 0.9. p1: ceil(0.03) = 1 -> 0.5. p50: ceil(1.5) = 2 -> 0.7 (a floor rank
  // gives 0.5, a missing -1 gives 0.9). mean 2.1 / 3 = 0.7.
  const Summary s = summarize({0.9, 0.5, 0.7});
  EXPECT_EQ(s.rows, 3);
  EXPECT_DOUBLE_EQ(s.mean, 0.7);
  EXPECT_EQ(s.p1, 0.5);
  EXPECT_EQ(s.p50, 0.7);
  EXPECT_EQ(s.worst, 0.5);
}

TEST(TopkSummarize, FirstPercentileIsNotAlwaysTheMinimum) {
  // 1..200: p1 = sorted[ceil(2) - 1] = 2 (not the minimum), p50 = sorted[99] = 100.
  std::vector<double> values(200);
  std::iota(values.begin(), values.end(), 1.0);
  const Summary s = summarize(values);
  EXPECT_EQ(s.p1, 2.0);
  EXPECT_EQ(s.p50, 100.0);
  EXPECT_EQ(s.worst, 1.0);
}

TEST(TopkSummarize, EmptyAndNaN) {
  const Summary empty = summarize({});
  EXPECT_EQ(empty.rows, 0);
  EXPECT_EQ(empty.mean, 0.0);
  EXPECT_EQ(empty.p1, 0.0);
  EXPECT_EQ(empty.p50, 0.0);
  EXPECT_EQ(empty.worst, 0.0);
  expect_bad_input([] { summarize({1.0, kNaN}); }, "NaN value");
}

RowMetrics row_with_changed(int changed) {
  RowMetrics row;
  row.changed = changed;
  return row;
}

TEST(TopkAggregate, LastBucketHoldsOverflow) {
  // 17 buckets: 0..15 exact, bucket 16 holds changed >= 16 (here 16, 17 and 40).
  std::vector<RowMetrics> rows;
  for (const int changed : {0, 1, 1, 5, 16, 17, 40}) rows.push_back(row_with_changed(changed));
  std::vector<int64_t> expected(17, 0);
  expected[0] = 1;
  expected[1] = 2;
  expected[5] = 1;
  expected[16] = 3;
  EXPECT_EQ(aggregate(rows).changed_histogram, expected);
  // 3 buckets: changed 0 | 1 | >= 2.
  EXPECT_EQ(aggregate(rows, 3).changed_histogram, (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(aggregate(rows, 1).changed_histogram, (std::vector<int64_t>{7}));
}

TEST(TopkAggregate, SummarizesEachMetricFromItsOwnField) {
  // Row i gives metric j the value (j + 1) + i / 10, so a summary fed from the wrong field
  // has the wrong mean. 3 of 4 rows are threshold-valid.
  std::vector<RowMetrics> rows(4);
  for (int i = 0; i < 4; ++i) {
    const double row_part = i / 10.0;
    rows[i].recall = 1 + row_part;
    rows[i].jaccard = 2 + row_part;
    rows[i].tie_aware_recall = 3 + row_part;
    rows[i].value_recall = 4 + row_part;
    rows[i].mass_recall = 5 + row_part;
    rows[i].kendall_tau = 6 + row_part;
    rows[i].page_recall = 7 + row_part;
    rows[i].threshold_valid = i != 2;
  }
  const Aggregate a = aggregate(rows);
  const Summary* summaries[] = {&a.recall,      &a.jaccard,     &a.tie_aware_recall,
                                &a.value_recall, &a.mass_recall, &a.kendall_tau,
                                &a.page_recall};
  for (int j = 0; j < 7; ++j) {
    // Values (j+1) + {0, 0.1, 0.2, 0.3}: mean (j+1) + 0.15, worst = p1 = j+1, p50 (rank 2)
    // = (j+1) + 0.1.
    EXPECT_NEAR(summaries[j]->mean, j + 1.15, 1e-12) << "metric " << j;
    EXPECT_EQ(summaries[j]->worst, j + 1.0) << "metric " << j;
    EXPECT_EQ(summaries[j]->p1, j + 1.0) << "metric " << j;
    EXPECT_NEAR(summaries[j]->p50, j + 1.1, 1e-12) << "metric " << j;
    EXPECT_EQ(summaries[j]->rows, 4) << "metric " << j;
  }
  EXPECT_EQ(a.threshold_valid_fraction, 0.75);
  std::vector<int64_t> expected_histogram(17, 0);
  expected_histogram[0] = 4;  // every row kept the default changed = 0
  EXPECT_EQ(a.changed_histogram, expected_histogram);
}

TEST(TopkAggregate, EmptyRowsAndBadInput) {
  const Aggregate a = aggregate({});
  EXPECT_EQ(a.threshold_valid_fraction, 1.0);
  EXPECT_EQ(a.recall.rows, 0);
  EXPECT_EQ(a.changed_histogram, std::vector<int64_t>(17, 0));
  expect_bad_input([] { aggregate({}, 0); }, "zero buckets");
  expect_bad_input([] { aggregate({row_with_changed(-1)}); }, "negative changed");
}

}  // namespace
}  // namespace dsaf::oracle
