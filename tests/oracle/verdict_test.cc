// Verdicts (oracle/verdict.h): the byte locator on paged caches built by the reference
// codec, with byte offsets computed here by hand from the layout formula of
// paged_cache.h; ulp distances, round-side flips and budgets on hand-made fp32 values;
// calc_diff on hand-computed vectors; determinism of a callable that changes on its third call.
#include "oracle/verdict.h"

#include <cmath>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "reference/error.h"
#include "reference/numeric/bit_cast.h"
#include "reference/numeric/minifloat.h"
#include "reference/numeric/ue8m0.h"

namespace dsaf::oracle {
namespace {

using ref::CacheLocation;
using ref::PagedCacheLayout;
using ref::StorageFormat;

// A cache of `num_pages` pages filled with the 0xAA sentinel, then every owned token
// stored with the reference quantiser of `format`.
std::vector<uint8_t> build_cache(const PagedCacheLayout& layout, const CacheOwnership& owners,
                                 int64_t num_pages) {
  ref::QuantSpec spec;
  spec.format = layout.format();
  spec.block = layout.format() == StorageFormat::kFp4E2m1 ? 32 : 128;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> cache(num_pages * layout.page_bytes(), 0xAA);
  for (size_t s = 0; s < owners.page_tables.size(); ++s) {
    for (int64_t pos = 0; pos < owners.seq_lens[s]; ++pos) {
      float x[ref::kHeadDim];
      for (float& v : x) v = normal(rng);
      layout.store(cache, layout.locate(owners.page_tables[s], pos, num_pages),
                   ref::store_head(x, spec));
    }
  }
  return cache;
}

uint32_t u32_at(const std::vector<uint8_t>& b, int64_t at) {
  return b[at] | (b[at + 1] << 8) | (b[at + 2] << 16) | (static_cast<uint32_t>(b[at + 3]) << 24);
}

// fp8, page size 4 (132 B/token, page 528 B: values at 128*slot, scales at 512 + 4*slot).
// Sequence 0: 6 tokens through pages {3, 1}; sequence 1: 3 tokens in page {0}.
// Unowned: page 0 slot 3, page 1 slots 2-3, pages 2 and 4.
class Fp8Cache : public ::testing::Test {
 protected:
  const PagedCacheLayout layout{StorageFormat::kFp8E4m3fn, 4};
  const CacheOwnership owners{{{3, 1}, {0}}, {6, 3}};
  const std::vector<uint8_t> expected = build_cache(layout, owners, 5);
};

TEST_F(Fp8Cache, IdenticalCachesPass) {
  const ByteVerdict v = compare_paged_cache(layout, owners, expected, expected);
  EXPECT_TRUE(v.pass);
  EXPECT_EQ(v.bytes, 5 * 528);
  EXPECT_FALSE(v.first.has_value());
}

TEST_F(Fp8Cache, LocatesAValueByteAndAScaleByteInTwoTokens) {
  // Sequence 1 position 2 -> page 0 slot 2; value element 77 at 2*128 + 77 = 333.
  // Sequence 0 position 5 -> entry 1 -> page 1 slot 1; its scale byte 2 at
  // 528 + 512 + 4*1 + 2 = 1046.
  const int64_t value_byte = 333;
  const int64_t scale_byte = 1046;
  std::vector<uint8_t> actual = expected;
  actual[value_byte] ^= 0x01;
  actual[scale_byte] ^= 0x40;

  const ByteVerdict v = compare_paged_cache(layout, owners, expected, actual);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.mismatches, 2);
  EXPECT_EQ(v.untouched_region_writes, 0);
  ASSERT_TRUE(v.first.has_value());
  const ByteMismatch& m = *v.first;  // the lower offset: the value byte
  EXPECT_EQ(m.byte_offset, value_byte);
  EXPECT_TRUE(m.owned);
  EXPECT_EQ(m.sequence, 1);
  EXPECT_EQ(m.position, 2);
  EXPECT_EQ(m.page, 0);
  EXPECT_EQ(m.slot, 2);
  EXPECT_EQ(m.field, CacheField::kValue);
  EXPECT_EQ(m.element, 77);
  EXPECT_EQ(m.expected_code, expected[value_byte]);
  EXPECT_EQ(m.actual_code, actual[value_byte]);
  EXPECT_EQ(m.expected_value, ref::decode_e4m3fn(expected[value_byte]));
  EXPECT_EQ(m.actual_value, ref::decode_e4m3fn(actual[value_byte]));
  EXPECT_NE(v.describe().find("sequence 1 position 2 (page 0 slot 2), value element 77"),
            std::string::npos)
      << v.describe();

  // The scale flip alone.
  std::vector<uint8_t> scale_only = expected;
  scale_only[scale_byte] ^= 0x40;
  const ByteVerdict s = compare_paged_cache(layout, owners, expected, scale_only);
  ASSERT_TRUE(s.first.has_value());
  EXPECT_EQ(s.mismatches, 1);
  EXPECT_EQ(s.first->byte_offset, scale_byte);
  EXPECT_EQ(s.first->sequence, 0);
  EXPECT_EQ(s.first->position, 5);
  EXPECT_EQ(s.first->page, 1);
  EXPECT_EQ(s.first->slot, 1);
  EXPECT_EQ(s.first->field, CacheField::kScale);
  EXPECT_EQ(s.first->element, 0);
  const int64_t scale_start = 528 + 512 + 4;
  EXPECT_EQ(s.first->expected_code, u32_at(expected, scale_start));
  EXPECT_EQ(s.first->actual_code, u32_at(scale_only, scale_start));
  EXPECT_EQ(s.first->actual_code, s.first->expected_code ^ 0x0040'0000u);
  EXPECT_EQ(s.first->expected_value, ref::float_from_bits(u32_at(expected, scale_start)));
  EXPECT_NE(s.describe().find("scale"), std::string::npos);
}

TEST_F(Fp8Cache, WritesIntoUnownedSlotsAreReportedSeparately) {
  // Page 0 slot 3 (sequence 1 holds only 3 tokens): its scale at 512 + 12 = 524.
  // Page 2 (no table names it): value element 10 of slot 0 at 2*528 + 10 = 1066.
  std::vector<uint8_t> actual = expected;
  actual[524] = 0x00;
  actual[1066] = 0x00;
  const ByteVerdict v = compare_paged_cache(layout, owners, expected, actual);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.mismatches, 0);
  EXPECT_FALSE(v.first.has_value());
  EXPECT_EQ(v.untouched_region_writes, 2);
  ASSERT_TRUE(v.first_untouched.has_value());
  const ByteMismatch& m = *v.first_untouched;
  EXPECT_EQ(m.byte_offset, 524);
  EXPECT_FALSE(m.owned);
  EXPECT_EQ(m.sequence, -1);
  EXPECT_EQ(m.page, 0);
  EXPECT_EQ(m.slot, 3);
  EXPECT_EQ(m.field, CacheField::kScale);
  EXPECT_EQ(m.expected_code, 0xAAAA'AAAAu);  // the sentinel
  EXPECT_EQ(m.actual_code, 0xAAAA'AA00u);
  EXPECT_NE(v.describe().find("untouched-region writes"), std::string::npos);
  EXPECT_NE(v.describe().find("owned by no token"), std::string::npos);
}

TEST_F(Fp8Cache, SplitsDifferingBytesIntoValuesAndScales) {
  // Sequence 1 position 2's value element 77 (byte 333); sequence 0 position 5's scale,
  // bytes 1044 and 1046 (page 1 slot 1: 528 + 512 + 4).
  std::vector<uint8_t> actual = expected;
  actual[333] ^= 0x01;
  actual[1044] ^= 0x01;
  actual[1046] ^= 0x40;
  const ByteVerdict v = compare_paged_cache(layout, owners, expected, actual);
  EXPECT_EQ(v.mismatches, 3);
  EXPECT_EQ(v.value_mismatches, 1);
  EXPECT_EQ(v.scale_mismatches, 2);
  EXPECT_NE(v.describe().find("3 differ in token-owned slots (1 in values, 2 in scales)"), std::string::npos)
      << v.describe();
  EXPECT_EQ(v.nan_codes, 0);
  EXPECT_EQ(v.describe().find("NaN codes"), std::string::npos) << v.describe();
}

TEST_F(Fp8Cache, CountsNaNCodesWhereTheReferenceHasANumber) {
  // e4m3fn NaN is S.1111.111: value element 77 of sequence 1 position 2 (byte 333) as
  // 0x7f, element 3 of sequence 0 position 0 (page 3 slot 0, byte 3 * 528 + 3) as 0xff;
  // elements 76 (byte 332, the first mismatch) and 4 of that token changed to numbers; an
  // unowned slot's byte (page 2) set to 0x7f.
  std::vector<uint8_t> actual = expected;
  actual[332] = static_cast<uint8_t>(expected[332] ^ 0x01);
  actual[333] = 0x7F;
  actual[3 * 528 + 3] = 0xFF;
  actual[3 * 528 + 4] = static_cast<uint8_t>(expected[3 * 528 + 4] ^ 0x01);
  actual[2 * 528 + 10] = 0x7F;
  for (int64_t at : {int64_t{332}, int64_t{333}, int64_t{3 * 528 + 3}, int64_t{3 * 528 + 4}}) {
    ASSERT_NE(expected[at] & 0x7F, 0x7F) << at;
  }
  ASSERT_NE(actual[332] & 0x7F, 0x7F);
  ASSERT_NE(actual[3 * 528 + 4] & 0x7F, 0x7F);
  const ByteVerdict v = compare_paged_cache(layout, owners, expected, actual);
  EXPECT_EQ(v.mismatches, 4);
  EXPECT_EQ(v.untouched_region_writes, 1);
  EXPECT_EQ(v.nan_codes, 2);
  ASSERT_TRUE(v.first_nan.has_value());
  EXPECT_EQ(v.first_nan->byte_offset, 333);  // the lower offset of the two
  EXPECT_EQ(v.first_nan->actual_code, 0x7Fu);
  EXPECT_NE(v.describe().find("2 element(s) are NaN codes in the actual cache where the reference has a number; "
                              "first: sequence 1 position 2 (page 0 slot 2), value element 77"),
            std::string::npos)
      << v.describe();
  // A NaN the reference also has is no finding.
  const ByteVerdict same = compare_paged_cache(layout, owners, actual, actual);
  EXPECT_EQ(same.nan_codes, 0);
  // When the first mismatch is a NaN code it is not described twice.
  std::vector<uint8_t> one = expected;
  one[333] = 0x7F;
  const ByteVerdict first = compare_paged_cache(layout, owners, expected, one);
  EXPECT_EQ(first.nan_codes, 1);
  EXPECT_NE(first.describe().find("1 element(s) are NaN codes in the actual cache where the reference has a number; "
                                  "the first mismatch is one."),
            std::string::npos)
      << first.describe();
}

TEST_F(Fp8Cache, ANaNScaleIsOneElementHoweverManyOfItsBytesDiffer) {
  // Sequence 0 position 5's fp32 scale (bytes 1044..1047) as the quiet NaN 0x7fc00000.
  std::vector<uint8_t> actual = expected;
  const uint8_t nan_bytes[4] = {0x00, 0x00, 0xC0, 0x7F};
  for (int i = 0; i < 4; ++i) actual[1044 + i] = nan_bytes[i];
  const ByteVerdict v = compare_paged_cache(layout, owners, expected, actual);
  EXPECT_EQ(v.nan_codes, 1);
  ASSERT_TRUE(v.first_nan.has_value());
  EXPECT_EQ(v.first_nan->field, CacheField::kScale);
  EXPECT_EQ(v.first_nan->actual_code, 0x7FC0'0000u);
  EXPECT_EQ(v.scale_mismatches, v.mismatches);
}

TEST_F(Fp8Cache, RejectsBadSizesAndTables) {
  std::vector<uint8_t> shorter(expected.begin(), expected.end() - 1);
  EXPECT_THROW(compare_paged_cache(layout, owners, expected, shorter), Error);
  EXPECT_THROW(compare_paged_cache(layout, {{{3, 1}}, {6, 3}}, expected, expected), Error);
  EXPECT_THROW(compare_paged_cache(layout, {{{3, 9}}, {6}}, expected, expected), Error);
  EXPECT_THROW(compare_paged_cache(layout, {{{3}}, {6}}, expected, expected), Error);
}

TEST(ByteVerdict, Bf16ElementIsTwoLittleEndianBytes) {
  // Page size 2, 256 B/token, page 512 B. Sequence 0: 3 tokens through pages {1, 0};
  // position 2 -> page 0 slot 0. High byte of element 9: 2*9 + 1 = 19.
  const PagedCacheLayout layout(StorageFormat::kBf16, 2);
  const CacheOwnership owners{{{1, 0}}, {3}};
  const std::vector<uint8_t> expected = build_cache(layout, owners, 2);
  std::vector<uint8_t> actual = expected;
  actual[19] ^= 0x80;  // the sign bit
  const ByteVerdict v = compare_paged_cache(layout, owners, expected, actual);
  ASSERT_TRUE(v.first.has_value());
  const ByteMismatch& m = *v.first;
  EXPECT_EQ(m.sequence, 0);
  EXPECT_EQ(m.position, 2);
  EXPECT_EQ(m.page, 0);
  EXPECT_EQ(m.slot, 0);
  EXPECT_EQ(m.field, CacheField::kValue);
  EXPECT_EQ(m.element, 9);
  const uint16_t code = static_cast<uint16_t>(expected[18] | (expected[19] << 8));
  EXPECT_EQ(m.expected_code, code);
  EXPECT_EQ(m.actual_code, code ^ 0x8000u);
  EXPECT_EQ(m.expected_value, ref::decode_bf16(code));
  EXPECT_EQ(m.actual_value, -m.expected_value);
  // Slot 1 of page 0 is unowned (position 3 does not exist).
  EXPECT_EQ(v.untouched_region_writes, 0);
}

TEST(ByteVerdict, Fp4NibblesAndUe8m0Scales) {
  // Page size 2, 68 B/token, page 136 B: values at 64*slot, ue8m0 scales at 128 + 4*slot.
  const PagedCacheLayout layout(StorageFormat::kFp4E2m1, 2);
  const CacheOwnership owners{{{0}}, {2}};
  const std::vector<uint8_t> expected = build_cache(layout, owners, 1);

  // Position 1, value byte 5 = elements 10 (low nibble) and 11 (high): flip the high one.
  std::vector<uint8_t> value_flip = expected;
  value_flip[64 + 5] ^= 0x10;
  const ByteVerdict v = compare_paged_cache(layout, owners, expected, value_flip);
  ASSERT_TRUE(v.first.has_value());
  EXPECT_EQ(v.first->position, 1);
  EXPECT_EQ(v.first->slot, 1);
  EXPECT_EQ(v.first->field, CacheField::kValue);
  EXPECT_EQ(v.first->element, 11);
  EXPECT_EQ(v.first->expected_code, static_cast<uint32_t>(expected[69] >> 4));
  EXPECT_EQ(v.first->actual_code, static_cast<uint32_t>(value_flip[69] >> 4));
  EXPECT_EQ(v.first->actual_value,
            ref::decode_e2m1(static_cast<uint8_t>(value_flip[69] >> 4)));

  // Position 0, the ue8m0 byte of block 3 (elements 96..127) at 128 + 3 = 131.
  std::vector<uint8_t> scale_flip = expected;
  scale_flip[131] += 1;
  const ByteVerdict s = compare_paged_cache(layout, owners, expected, scale_flip);
  ASSERT_TRUE(s.first.has_value());
  EXPECT_EQ(s.first->position, 0);
  EXPECT_EQ(s.first->field, CacheField::kScale);
  EXPECT_EQ(s.first->element, 3);
  EXPECT_EQ(s.first->expected_code, expected[131]);
  EXPECT_EQ(s.first->actual_value, 2 * s.first->expected_value);
  EXPECT_EQ(s.first->expected_value, ref::decode_ue8m0(expected[131]));
  EXPECT_NE(s.describe().find("scale 3 (elements 96..127)"), std::string::npos) << s.describe();
}

TEST(ByteVerdict, PlainBuffersReportTheByteOffsetOnly) {
  const std::vector<uint8_t> a = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<uint8_t> b = a;
  b[3] = 0x44;
  b[7] = 0x88;
  const ByteVerdict v = compare_bytes(a, b);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.mismatches, 2);
  ASSERT_TRUE(v.first.has_value());
  EXPECT_EQ(v.first->byte_offset, 3);
  EXPECT_FALSE(v.first->in_cache);
  EXPECT_EQ(v.first->expected_byte, 4);
  EXPECT_EQ(v.first->actual_byte, 0x44);
  EXPECT_NE(v.describe().find("byte 3 (expected 0x04, actual 0x44)"), std::string::npos)
      << v.describe();
  EXPECT_TRUE(compare_bytes(a, a).pass);

  const std::vector<uint8_t> longer = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const ByteVerdict sized = compare_bytes(a, longer);
  EXPECT_FALSE(sized.pass);
  EXPECT_EQ(sized.mismatches, 0);
  EXPECT_NE(sized.describe().find("sizes differ"), std::string::npos);
}

// ---------------------------------------------------------------------------------------

constexpr float kOne = 1.0f;
const float kOneUp = std::nextafter(1.0f, 2.0f);      // 1 + 2^-23
const float kTwoUp = std::nextafter(kOneUp, 2.0f);    // 1 + 2^-22

TEST(UlpDistance, MonotoneMapping) {
  EXPECT_EQ(ulp_distance(kOne, kOne), 0u);
  EXPECT_EQ(ulp_distance(kOne, kOneUp), 1u);
  EXPECT_EQ(ulp_distance(kTwoUp, kOne), 2u);
  EXPECT_EQ(ulp_distance(0.0f, -0.0f), 0u);
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(ulp_distance(-tiny, tiny), 2u);
  EXPECT_EQ(ulp_distance(-1.0f, std::nextafter(-1.0f, -2.0f)), 1u);
  EXPECT_EQ(ulp_distance(std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()),
            2ull * 0x7F7F'FFFFull);
  EXPECT_EQ(ulp_bucket(0), 0);
  EXPECT_EQ(ulp_bucket(1), 1);
  EXPECT_EQ(ulp_bucket(2), 2);
  EXPECT_EQ(ulp_bucket(3), 2);
  EXPECT_EQ(ulp_bucket(4), 3);
}

TEST(UlpVerdict, ExactValueBetweenAdjacentResultsIsARoundSideFlip) {
  // exact 1 + 2^-24 lies between 1 and 1 + 2^-23: both are valid roundings.
  const double exact = 1.0 + std::ldexp(1.0, -24);
  const UlpVerdict v = compare_ulp({kOne}, {kOneUp}, {}, {exact});
  EXPECT_EQ(v.round_side_flips, 1);
  EXPECT_EQ(v.other_mismatches, 0);
  EXPECT_EQ(v.max_ulp, 1u);
  ASSERT_TRUE(v.first_flip.has_value());
  EXPECT_EQ(v.first_flip->index, 0);
  EXPECT_FALSE(v.pass);  // the default budget charges flips

  UlpBudget forgive;
  forgive.forgive_round_side_flips = true;
  EXPECT_TRUE(compare_ulp({kOne}, {kOneUp}, forgive, {exact}).pass);
}

TEST(UlpVerdict, OtherMismatchesAreNotFlips) {
  UlpBudget forgive;
  forgive.forgive_round_side_flips = true;
  // 2 ulp apart, exact in between: not adjacent, not a flip.
  const UlpVerdict two = compare_ulp({kOne}, {kTwoUp}, forgive, {static_cast<double>(kOneUp)});
  EXPECT_EQ(two.round_side_flips, 0);
  EXPECT_EQ(two.other_mismatches, 1);
  EXPECT_EQ(two.max_ulp, 2u);
  EXPECT_EQ(two.histogram[2], 1);
  EXPECT_FALSE(two.pass);
  // Adjacent, but the exact value is one of them (only it is correctly rounded)...
  EXPECT_EQ(compare_ulp({kOne}, {kOneUp}, forgive, {1.0}).other_mismatches, 1);
  // ... or outside them.
  EXPECT_EQ(compare_ulp({kOne}, {kOneUp}, forgive, {static_cast<double>(kTwoUp)})
                .other_mismatches,
            1);
  // Without an exact tensor nothing can be called a flip.
  const UlpVerdict blind = compare_ulp({kOne}, {kOneUp}, forgive);
  EXPECT_EQ(blind.other_mismatches, 1);
  EXPECT_FALSE(blind.pass);
  EXPECT_NE(blind.describe().find("No exact reference"), std::string::npos);
}

TEST(UlpVerdict, HistogramBudgetAndCoordinates) {
  // 100 elements; index 4 differs by 1 ulp, index 7 by 3 ulp (no exact tensor).
  std::vector<float> expected(100, 0.5f);
  std::vector<float> actual = expected;
  actual[4] = std::nextafter(0.5f, 1.0f);
  actual[7] = ref::float_from_bits(ref::float_bits(0.5f) + 3);
  const UlpVerdict exact_budget = compare_ulp(expected, actual, {}, {}, {10, 10});
  EXPECT_FALSE(exact_budget.pass);
  EXPECT_EQ(exact_budget.histogram[0], 98);
  EXPECT_EQ(exact_budget.histogram[1], 1);
  EXPECT_EQ(exact_budget.histogram[2], 1);  // 3 ulp is in bucket 2-3
  EXPECT_EQ(exact_budget.max_ulp, 3u);
  EXPECT_EQ(exact_budget.charged, 2);
  ASSERT_TRUE(exact_budget.first_mismatch.has_value());
  EXPECT_EQ(exact_budget.first_mismatch->index, 4);
  EXPECT_EQ(exact_budget.first_mismatch->coordinates, (std::vector<int64_t>{0, 4}));
  ASSERT_TRUE(exact_budget.worst.has_value());
  EXPECT_EQ(exact_budget.worst->index, 7);
  EXPECT_NE(exact_budget.describe().find("index 4 [0, 4]"), std::string::npos)
      << exact_budget.describe();

  EXPECT_TRUE(compare_ulp(expected, actual, {3, 0.02}).pass);
  EXPECT_FALSE(compare_ulp(expected, actual, {2, 0.02}).pass);    // 3 ulp > 2
  EXPECT_FALSE(compare_ulp(expected, actual, {3, 0.019}).pass);   // 2 > 1.9 elements
  EXPECT_TRUE(compare_ulp(expected, expected).pass);
  EXPECT_THROW(compare_ulp(expected, {1.0f}), Error);
  EXPECT_THROW(compare_ulp(expected, actual, {}, {}, {3, 3}), Error);
}

TEST(UlpVerdict, NanAndInfPositionsMustAgreeWhateverTheBudget) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  UlpBudget generous;
  generous.max_ulp = std::numeric_limits<uint64_t>::max();
  generous.max_mismatch_fraction = 1.0;
  generous.forgive_round_side_flips = true;

  const UlpVerdict v = compare_ulp({1.0f, nan, 3.0f}, {1.0f, 2.0f, 3.0f}, generous);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.anomaly_mismatches, 1);
  ASSERT_TRUE(v.first_anomaly.has_value());
  EXPECT_EQ(v.first_anomaly->index, 1);
  EXPECT_NE(v.describe().find("NaN/Inf"), std::string::npos);

  EXPECT_FALSE(compare_ulp({-inf}, {inf}, generous).pass);
  EXPECT_FALSE(compare_ulp({inf}, {std::numeric_limits<float>::max()}, generous).pass);
  // Same positions agree; NaN payloads are not compared.
  const float other_nan = ref::float_from_bits(0x7FC0'0001u);
  EXPECT_TRUE(compare_ulp({nan, -inf, inf}, {other_nan, -inf, inf}).pass);
}

// ---------------------------------------------------------------------------------------

TEST(CalcDiff, HandComputedVectors) {
  EXPECT_EQ(calc_diff(std::vector<float>{1, 0}, std::vector<float>{0, 1}), 1.0);
  EXPECT_EQ(calc_diff(std::vector<float>{1.5f, -2, 3}, std::vector<float>{1.5f, -2, 3}), 0.0);
  EXPECT_EQ(calc_diff(std::vector<float>{0, 0}, std::vector<float>{0, 0}), 0.0);
  EXPECT_EQ(calc_diff(std::vector<float>{1, 2}, std::vector<float>{-1, -2}), 2.0);
  // sum(xy) = 4, sum(x^2 + y^2) = 10: 1 - 8/10.
  EXPECT_DOUBLE_EQ(calc_diff(std::vector<double>{1, 2}, std::vector<double>{2, 1}), 0.2);

  EXPECT_EQ(cosine_similarity(std::vector<float>{1, 0}, std::vector<float>{0, 1}), 0.0);
  EXPECT_DOUBLE_EQ(cosine_similarity(std::vector<float>{1, 2}, std::vector<float>{2, 1}), 0.8);
  EXPECT_EQ(cosine_similarity(std::vector<float>{0, 0}, std::vector<float>{0, 0}), 1.0);
  EXPECT_EQ(cosine_similarity(std::vector<float>{0, 0}, std::vector<float>{1, 0}), 0.0);
}

TEST(CalcDiff, MetricVerdict) {
  const std::vector<float> x = {1, 2, 3};
  EXPECT_TRUE(compare_metric(x, x).pass);
  const MetricVerdict off = compare_metric(x, std::vector<float>{1, 2, 3.5f});
  EXPECT_FALSE(off.pass);
  EXPECT_GT(off.calc_diff, 0.0);
  EXPECT_TRUE(compare_metric(x, std::vector<float>{1, 2, 3.5f}, 1e-2).pass);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(compare_metric(x, std::vector<float>{1, 2, nan}, 1.0).pass);
  EXPECT_NE(off.describe().find("calc_diff"), std::string::npos);
  EXPECT_THROW(compare_metric(x, std::vector<float>{1}), Error);
}

// ---------------------------------------------------------------------------------------

TEST(Determinism, DetectsAnOutputThatChangesOnTheThirdCall) {
  int calls = 0;
  const auto run = [&calls] {
    ++calls;
    std::vector<uint8_t> out = {0, 1, 2, 3, 4, 5, 6, 7};
    if (calls == 3) out[5] = 0x55;
    return out;
  };
  const DeterminismVerdict v = check_determinism(run, 5);
  EXPECT_EQ(calls, 5);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.first_differing_run, 3);
  EXPECT_EQ(v.differing_runs, 1);
  EXPECT_EQ(v.first_byte, 5);
  EXPECT_EQ(v.baseline_byte, 5);
  EXPECT_EQ(v.differing_byte, 0x55);
  EXPECT_NE(v.describe().find("call 3"), std::string::npos) << v.describe();
}

TEST(Determinism, RepeatableRunsPassButTheReportSaysThatIsNotCorrectness) {
  const DeterminismVerdict v =
      check_determinism([] { return std::vector<uint8_t>{9, 9, 9}; }, 4);
  EXPECT_TRUE(v.pass);
  EXPECT_EQ(v.first_differing_run, 0);
  EXPECT_NE(v.describe().find("does not prove correctness"), std::string::npos);
  EXPECT_NE(v.describe().find("DeepGEMM #433"), std::string::npos);

  int calls = 0;
  const DeterminismVerdict grows = check_determinism(
      [&calls] { return std::vector<uint8_t>(++calls == 2 ? 4 : 3, 1); }, 3);
  EXPECT_FALSE(grows.pass);
  EXPECT_EQ(grows.first_differing_run, 2);
  EXPECT_EQ(grows.first_byte, -1);  // the common prefix agrees; only the size differs
  EXPECT_EQ(grows.differing_size, 4);
  EXPECT_THROW(check_determinism([] { return std::vector<uint8_t>{}; }, 1), Error);
}

}  // namespace
}  // namespace dsaf::oracle
