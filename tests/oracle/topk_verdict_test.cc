// A top-K row under each contract (oracle/topk_verdict.h): what passes, and how a
// difference is classified — order only, tie substitution at the cut, keys genuinely
// missed and selected below the cut, an index-order loss, wrong padding, invalid entries.
#include "oracle/topk_verdict.h"

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "reference/error.h"

namespace dsaf::oracle {
namespace {

using C = TopKContractKind;
using P = TopKPaddingKind;

// Scores 9, 8, 7, 7, 7, 1 at indices 0..5: with K = 3 the reference takes 0, 1, 2 (the
// first of the three 7s), the K-th score is 7, and indices 3 and 4 tie with it.
const std::vector<float> kRow = {9, 8, 7, 7, 7, 1};

TEST(TopKVerdict, TheReferenceSelectionPassesEveryContract) {
  for (C c : {C::kOrdered, C::kSet, C::kSetTies}) {
    const TopKRowVerdict v = judge_topk_row(kRow, 3, {0, 1, 2}, c, P::kMinusOne);
    EXPECT_TRUE(v.pass) << to_string(c) << ": " << v.describe();
    EXPECT_TRUE(v.identical);
    EXPECT_EQ(v.cut_score, 7.0f);
  }
}

TEST(TopKVerdict, AnotherOrderIsOrderOnlyAndFailsOnlyTheOrderedContract) {
  const std::vector<int32_t> shuffled = {2, 0, 1};
  EXPECT_FALSE(judge_topk_row(kRow, 3, shuffled, C::kOrdered, P::kMinusOne).pass);
  EXPECT_TRUE(judge_topk_row(kRow, 3, shuffled, C::kSet, P::kMinusOne).pass);
  EXPECT_TRUE(judge_topk_row(kRow, 3, shuffled, C::kSetTies, P::kMinusOne).pass);
  const TopKRowVerdict v = judge_topk_row(kRow, 3, shuffled, C::kOrdered, P::kMinusOne);
  EXPECT_TRUE(v.order_only);
  EXPECT_EQ(v.tie_swaps, 0);
  EXPECT_TRUE(v.misses.empty() && v.intruders.empty());
  EXPECT_NE(v.describe().find("order only"), std::string::npos) << v.describe();
}

TEST(TopKVerdict, ATiedKeyInPlaceOfAnotherIsATieSwapThatOnlySetTiesAdmits) {
  const std::vector<int32_t> swapped = {0, 1, 4};  // 4 scores 7 like 2, which it replaces
  EXPECT_FALSE(judge_topk_row(kRow, 3, swapped, C::kOrdered, P::kMinusOne).pass);
  EXPECT_FALSE(judge_topk_row(kRow, 3, swapped, C::kSet, P::kMinusOne).pass);
  const TopKRowVerdict v = judge_topk_row(kRow, 3, swapped, C::kSetTies, P::kMinusOne);
  EXPECT_TRUE(v.pass) << v.describe();
  EXPECT_EQ(v.tie_swaps, 1);
  EXPECT_TRUE(v.misses.empty() && v.intruders.empty());
  EXPECT_NE(v.describe().find("1 tie substitution(s) at the cut"), std::string::npos) << v.describe();
}

TEST(TopKVerdict, AKeyAboveTheCutLeftOutIsAMissWithItsRankAndGap) {
  const std::vector<int32_t> dropped = {0, 2, 5};  // 1 (score 8, rank 2) out, 5 (score 1, rank 6) in
  for (C c : {C::kOrdered, C::kSet, C::kSetTies}) {
    const TopKRowVerdict v = judge_topk_row(kRow, 3, dropped, c, P::kMinusOne);
    EXPECT_FALSE(v.pass) << to_string(c);
    ASSERT_EQ(v.misses.size(), 1u);
    EXPECT_EQ(v.misses[0].index, 1);
    EXPECT_EQ(v.misses[0].rank, 2);
    EXPECT_DOUBLE_EQ(v.misses[0].gap, 1.0);
    ASSERT_EQ(v.intruders.size(), 1u);
    EXPECT_EQ(v.intruders[0].index, 5);
    EXPECT_EQ(v.intruders[0].rank, 6);
    EXPECT_DOUBLE_EQ(v.intruders[0].gap, -6.0);
  }
  const std::string text = judge_topk_row(kRow, 3, dropped, C::kSet, P::kMinusOne).describe();
  EXPECT_NE(text.find("above the cut missing: index 1 (score 8 = 0x41000000, exact rank 2"), std::string::npos)
      << text;
  EXPECT_NE(text.find("below the cut selected: index 5"), std::string::npos) << text;
}

// Scores 1..8 at indices 0..7 rising with the index, K = 3: the reference takes 7, 6, 5.
// A kernel that keeps only the first 4 candidates (indices 0..3) and picks the best of
// them selects 3, 2, 1: keys 7 and 6 are lost by position, every selected key coming
// before them.
TEST(TopKVerdict, MissesAfterEverySelectedKeyAreAnIndexOrderLoss) {
  const std::vector<float> rising = {1, 2, 3, 4, 5, 6, 7, 8};
  TopKRowVerdict v = judge_topk_row(rising, 3, {3, 2, 1}, C::kSet, P::kMinusOne);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.misses.size(), 2u);  // 7 and 6 (5 scores the cut, 6: counted at the cut)
  EXPECT_TRUE(v.misses_in_index_order);
  EXPECT_NE(v.describe().find("lost in index order, as past a full candidate buffer"), std::string::npos)
      << v.describe();
  // Scores falling with the index: the best two keys lost while later, lower keys are
  // selected is not a loss by position.
  v = judge_topk_row({8, 7, 6, 5, 4, 3, 2, 1}, 3, {5, 6, 7}, C::kSet, P::kMinusOne);
  EXPECT_EQ(v.misses.size(), 2u);
  EXPECT_FALSE(v.misses_in_index_order);
  EXPECT_EQ(v.describe().find("index order"), std::string::npos) << v.describe();
  // One miss is too few to call a pattern.
  v = judge_topk_row(rising, 3, {7, 6, 0}, C::kSet, P::kMinusOne);
  EXPECT_EQ(v.misses.size(), 0u);  // 5 (the cut) out, 0 in: a key at the cut and an intruder
  v = judge_topk_row(rising, 4, {7, 5, 4, 0}, C::kSet, P::kMinusOne);
  EXPECT_EQ(v.misses.size(), 1u);  // 6 (score 7, above the cut 5)
  EXPECT_FALSE(v.misses_in_index_order);
}

TEST(TopKVerdict, ShortRowsArePaddedWithMinusOneUnlessThePaddingIsUnread) {
  const std::vector<float> row = {3, 1, 2};
  const std::vector<int32_t> padded = {0, 2, 1, -1, -1};
  EXPECT_TRUE(judge_topk_row(row, 5, padded, C::kOrdered, P::kMinusOne).pass);
  const std::vector<int32_t> garbage = {0, 2, 1, 0, 7};
  const TopKRowVerdict v = judge_topk_row(row, 5, garbage, C::kOrdered, P::kMinusOne);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.wrong_padding, 2);
  EXPECT_TRUE(judge_topk_row(row, 5, garbage, C::kOrdered, P::kUnread).pass);
  // A short row in index order (as a kernel that copies 0..n-1 for rows shorter than K).
  const std::vector<int32_t> by_index = {0, 1, 2, -1, -1};
  EXPECT_TRUE(judge_topk_row(row, 5, by_index, C::kSet, P::kMinusOne).pass);
  EXPECT_TRUE(judge_topk_row(row, 5, by_index, C::kOrdered, P::kMinusOne).order_only);
}

TEST(TopKVerdict, OutOfRangeDuplicateAndMissingEntriesAreInvalid) {
  for (const std::vector<int32_t>& bad : {std::vector<int32_t>{0, 1, 6}, std::vector<int32_t>{0, 1, 1},
                                          std::vector<int32_t>{0, 1, -1}}) {
    const TopKRowVerdict v = judge_topk_row(kRow, 3, bad, C::kSetTies, P::kMinusOne);
    EXPECT_FALSE(v.pass);
    EXPECT_EQ(v.invalid_count, 1) << v.describe();
    EXPECT_NE(v.describe().find("invalid: entry 2"), std::string::npos) << v.describe();
  }
  EXPECT_THROW(judge_topk_row(kRow, 3, {0, 1}, C::kSet, P::kMinusOne), Error);
}

// -0.0 and +0.0 are equal scores (the reference compares doubles): a kernel that keeps
// +0.0's index where the reference keeps -0.0's (lower index) made a tie swap.
TEST(TopKVerdict, SignedZerosTie) {
  const std::vector<float> row = {1.0f, -0.0f, 0.0f};
  EXPECT_TRUE(judge_topk_row(row, 2, {0, 1}, C::kOrdered, P::kMinusOne).pass);
  const TopKRowVerdict v = judge_topk_row(row, 2, {0, 2}, C::kSetTies, P::kMinusOne);
  EXPECT_TRUE(v.pass);
  EXPECT_EQ(v.tie_swaps, 1);
}

TEST(TopKVerdict, ContractNamesParse) {
  EXPECT_EQ(parse_topk_contract("set-ties"), C::kSetTies);
  EXPECT_EQ(parse_topk_contract("ordered"), C::kOrdered);
  EXPECT_THROW(parse_topk_contract("unordered"), Error);
}

}  // namespace
}  // namespace dsaf::oracle
