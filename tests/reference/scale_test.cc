// Tests of the block-scale rules and the scaled fp8 / fp4 head codecs (quantize.h,
// docs/numerics.md §2.6, §3.3, §5.3, §6.2, §7.1; docs/verification.md §7 traps 1-4). Expected values
// come from derivations in the comments and from small independent models written here
// (a nearest-value e4m3fn / e2m1 encoder over the format's value list, the documented
// scale formulas), never from printing what the code under test returns.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "reference/error.h"
#include "reference/numeric/bit_cast.h"
#include "reference/quantize.h"
#include "reference/recipe.h"
#include "reference/numeric/minifloat.h"

namespace dsaf::ref {
namespace {

constexpr int kN = 128;
using Head = std::array<float, kN>;

// Bit views of fp32 values (reference/numeric/bit_cast.h: memcpy, no punning).
uint32_t bits_of(float f) { return float_bits(f); }
float from_bits(uint32_t b) { return float_from_bits(b); }

// ---------------------------------------------------------------------------------
// Independent format models (OCP OFP8 e4m3fn, OCP MX e2m1), by table lookup.

// Magnitude code 0..0x7E of e4m3fn: subnormal m * 2^-9, normal (8 + m) * 2^(e - 10).
long double e4m3_magnitude(int code) {
  const int e = code >> 3, m = code & 7;
  return e == 0 ? std::ldexp(static_cast<long double>(m), -9)
                : std::ldexp(static_cast<long double>(8 + m), e - 10);
}
long double e4m3_value(uint8_t code) {
  const long double v = e4m3_magnitude(code & 0x7F);
  return (code & 0x80) ? -v : v;
}

// Round to nearest, ties to the even code, saturating: |v| > 464 (the midpoint of 448
// and the NaN slot 480) clamps to 448; 448 <= |v| <= 464 rounds to 448 (464 is a tie
// and 448's mantissa 110 is the even one).
uint8_t my_e4m3(float v) {
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const long double a = std::fabs(static_cast<long double>(v));
  if (a >= 448) return sign | 0x7E;
  // Magnitudes ascend with the code: take the last code <= a and its successor.
  int lo = 0, hi = 0x7E;  // e4m3_magnitude(lo) <= a < e4m3_magnitude(hi)
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (e4m3_magnitude(mid) <= a ? lo : hi) = mid;
  }
  const long double dlo = a - e4m3_magnitude(lo), dhi = e4m3_magnitude(hi) - a;
  const int best = dlo < dhi ? lo : (dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi));
  return static_cast<uint8_t>(sign | best);
}

// Spacing of e4m3fn values at the magnitude of q (normals 2^(floor(log2|q|) - 3),
// subnormals and 0: 2^-9). For a value v rounded to nearest q, |v - q| <= ulp(q) / 2:
// within q's binade by definition; and when q = 2^j was reached from the binade below,
// the spacing there is half as large.
long double e4m3_ulp(long double q) {
  const long double a = std::fabs(q);
  if (a < 0x1p-6L) return 0x1p-9L;
  return std::ldexp(1.0L, static_cast<int>(std::floor(std::log2(a))) - 3);
}

constexpr float kE2m1Grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

uint8_t my_e2m1(float v, Rounding rounding) {
  const uint8_t sign = std::signbit(v) ? 0x8 : 0;
  const float a = std::fabs(v);
  if (a >= 6.0f) return sign | 7;
  int best = 0;
  for (int c = 1; c < 8; ++c) {
    const float dc = std::fabs(a - kE2m1Grid[c]);
    const float db = std::fabs(a - kE2m1Grid[best]);
    // Ties: even code (RNE) or the smaller magnitude (ties toward zero; `best` is
    // the smaller since codes ascend).
    if (dc < db || (dc == db && rounding == Rounding::kNearestEven && c % 2 == 0)) best = c;
  }
  return static_cast<uint8_t>(sign | best);
}
float e2m1_value(uint8_t code) {
  const float v = kE2m1Grid[code & 7];
  return (code & 8) ? -v : v;
}
// e2m1 spacing at |q|: 0.5 below 2, 1 in [2, 4), 2 in [4, 6].
float e2m1_ulp(float q) {
  const float a = std::fabs(q);
  return a < 2 ? 0.5f : (a < 4 ? 1.0f : 2.0f);
}

// The documented scale rules (quantize.h), written out here.
float my_raw(float amax, float floor, ScaleDivisor div, float qmax) {
  const float a = std::max(amax, floor);
  return div == ScaleDivisor::kDivide ? a / qmax : a * (1.0f / qmax);
}
float smallest_pow2_at_least(float raw) {
  int e;
  const float f = std::frexp(raw, &e);  // raw = f * 2^e, f in [0.5, 1)
  return f == 0.5f ? raw : std::ldexp(1.0f, e);
}
float my_scale(float amax, const QuantSpec& q, float qmax) {
  const float raw = my_raw(amax, q.amax_floor, q.divisor, qmax);
  switch (q.pow2) {
    case ScalePow2::kNone:
      return raw;
    case ScalePow2::kExponentBitsCeil:
      return smallest_pow2_at_least(raw);
    case ScalePow2::kLog2Ceil:
      return std::ldexp(1.0f, static_cast<int>(std::ceil(static_cast<float>(std::log2(
                                  static_cast<long double>(raw))))));
  }
  return raw;
}
float my_apply(float x, float s, ScaleApply apply) {
  return apply == ScaleApply::kDivide ? x / s : x * (1.0f / s);
}

float block_amax(const float* x, int n) {
  float a = 0;
  for (int i = 0; i < n; ++i) a = std::max(a, std::fabs(x[i]));
  return a;
}

// Random heads: Gaussian at a random magnitude 10^[-7, 3], with 0-4 outlier channels
// scaled by 20-100x (the activation outliers the Hadamard is there for), and now and
// then a head entirely below the amax floor or all zeros.
Head random_head(std::mt19937& rng) {
  std::uniform_real_distribution<float> log_mag(-7.0f, 3.0f), factor(20.0f, 100.0f);
  std::uniform_int_distribution<int> outliers(0, 4), channel(0, kN - 1), kind(0, 19);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Head x;
  const int k = kind(rng);
  if (k == 0) {
    x.fill(0.0f);
    return x;
  }
  const float mag = k == 1 ? 1e-9f : std::pow(10.0f, log_mag(rng));
  for (float& v : x) v = normal(rng) * mag;
  const int n = outliers(rng);
  for (int j = 0; j < n; ++j) x[channel(rng)] *= factor(rng);
  return x;
}

QuantSpec fp8_spec(ScalePow2 pow2, ScaleDivisor div, ScaleApply apply) {
  QuantSpec q;
  q.format = StorageFormat::kFp8E4m3fn;
  q.block = 128;
  q.amax_floor = 1e-4f;
  q.divisor = div;
  q.pow2 = pow2;
  q.apply = apply;
  q.saturation = Saturation::kSatFinite;
  return q;
}
QuantSpec fp4_spec(ScalePow2 pow2, ScaleDivisor div, ScaleApply apply, Rounding rounding) {
  QuantSpec q;
  q.format = StorageFormat::kFp4E2m1;
  q.block = 32;
  q.amax_floor = 1e-4f;
  q.divisor = div;
  q.pow2 = pow2;
  q.apply = apply;
  q.fp4_rounding = rounding;
  return q;
}

float stored_fp8_scale(const StoredHead& h) {
  uint32_t b = 0;
  for (int i = 0; i < 4; ++i) b |= uint32_t{h.scale_bytes[i]} << (8 * i);
  return from_bits(b);
}
uint8_t fp4_code(const StoredHead& h, int i) {
  return (h.value_bytes[i / 2] >> (4 * (i % 2))) & 0xF;
}

// ---------------------------------------------------------------------------------
// 1. Quantisation error.

TEST(ScaleQuantError, Fp8ErrorIsAtMostHalfACodeStepTimesTheScale) {
  // v = x / s (or x * fl(1/s)) rounded to nearest e4m3fn q gives |v - q| <= ulp(q)/2,
  // so |x - q s| <= ulp(q)/2 * s. For power-of-two s the quotient is exact and that is
  // the whole bound. For plain scales (pow2 kNone) the fp32 quotient adds its own
  // rounding before the e4m3fn one: 2^-24 |x/s| for x / s, and (1 + 2^-24)^2 - 1 <=
  // 2^-23 + 2^-48 for x * fl(1/s); the error bound grows by that (x s).
  // Codes and scales must also equal the independent model's.
  std::mt19937 rng(20241129);
  int checked = 0;
  for (ScalePow2 pow2 : {ScalePow2::kNone, ScalePow2::kExponentBitsCeil, ScalePow2::kLog2Ceil}) {
    for (ScaleDivisor div : {ScaleDivisor::kDivide, ScaleDivisor::kTimesReciprocal}) {
      for (ScaleApply apply : {ScaleApply::kDivide, ScaleApply::kTimesReciprocal}) {
        const QuantSpec spec = fp8_spec(pow2, div, apply);
        const long double quotient_rel =
            pow2 != ScalePow2::kNone ? 0
            : apply == ScaleApply::kDivide ? 0x1p-24L
                                           : 0x1p-23L + 0x1p-48L;
        for (int trial = 0; trial < 400; ++trial) {
          const Head x = random_head(rng);
          const StoredHead h = store_head<float>(x.data(), spec);
          ASSERT_EQ(h.value_bytes.size(), 128u);
          ASSERT_EQ(h.scale_bytes.size(), 4u);
          const float s = stored_fp8_scale(h);
          ASSERT_EQ(bits_of(s), bits_of(my_scale(block_amax(x.data(), kN), spec, 448.0f)));
          ASSERT_EQ(h.dot_scale, s);
          for (int i = 0; i < kN; ++i) {
            const uint8_t code = h.value_bytes[i];
            ASSERT_EQ(code, my_e4m3(my_apply(x[i], s, apply))) << "x = " << x[i] << " s = " << s;
            const long double q = e4m3_value(code);
            ASSERT_EQ(h.dot_values[i], q);
            const long double err = std::fabs(x[i] - q * s);  // q*s exact (4 x 24 bits)
            const long double bound =
                (e4m3_ulp(q) / 2 + quotient_rel * std::fabs(static_cast<long double>(x[i]) / s)) * s;
            ASSERT_LE(err, bound) << "x = " << x[i] << " s = " << s << " code " << int(code);
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 12 * 400 * kN);
}

TEST(ScaleQuantError, Fp4ErrorIsAtMostHalfACodeStepTimesTheBlockScale) {
  // Four blocks of 32, each with its own ue8m0 scale 2^(e - 127). The scale is a power
  // of two, so x / s and x * (1/s) are exact and |x - q s| <= ulp_e2m1(q)/2 * s exactly,
  // for both tie rules (a tie is exactly half a step either way).
  std::mt19937 rng(6);
  for (ScalePow2 pow2 : {ScalePow2::kExponentBitsCeil, ScalePow2::kLog2Ceil}) {
    for (ScaleDivisor div : {ScaleDivisor::kDivide, ScaleDivisor::kTimesReciprocal}) {
      for (ScaleApply apply : {ScaleApply::kDivide, ScaleApply::kTimesReciprocal}) {
        for (Rounding rounding : {Rounding::kNearestEven, Rounding::kNearestTiesTowardZero}) {
          const QuantSpec spec = fp4_spec(pow2, div, apply, rounding);
          for (int trial = 0; trial < 300; ++trial) {
            const Head x = random_head(rng);
            const StoredHead h = store_head<float>(x.data(), spec);
            ASSERT_EQ(h.value_bytes.size(), 64u);
            ASSERT_EQ(h.scale_bytes.size(), 4u);
            for (int b = 0; b < 4; ++b) {
              const float s = std::ldexp(1.0f, h.scale_bytes[b] - 127);
              ASSERT_EQ(s, my_scale(block_amax(x.data() + 32 * b, 32), spec, 6.0f)) << b;
              for (int j = 0; j < 32; ++j) {
                const int i = 32 * b + j;
                const uint8_t code = fp4_code(h, i);
                ASSERT_EQ(code, my_e2m1(my_apply(x[i], s, apply), rounding)) << x[i];
                const float q = e2m1_value(code);
                ASSERT_EQ(h.dot_values[i], static_cast<double>(q) * s);
                const long double err = std::fabs(x[i] - static_cast<long double>(q) * s);
                ASSERT_LE(err, e2m1_ulp(q) / 2.0L * s) << "x = " << x[i] << " s = " << s;
              }
            }
          }
        }
      }
    }
  }
}

TEST(ScaleQuantError, Fp4TiesFollowTheRoundingRuleAndAttainTheBound) {
  // Every e2m1 midpoint, at block scale 1 (amax 6: 6/6 = 1, and 6 * fl(1/6) =
  // 1 + 2^-25 rounds to 1) and 2^-3 (amax 0.75). The error is then exactly half the
  // gap between the tie's neighbours, so the bound above is attained. Ties to even: 0.25 -> 0, 0.75 -> 1, 1.25 -> 1,
  // 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4 (codes 0, 2, 2, 4, 4, 6, 6); ties toward
  // zero (SGLang's strict `>` thresholds, docs/numerics.md §6.2): 0, 0.5, 1, 1.5, 2, 3, 4
  // (codes 0, 1, 2, 3, 4, 5, 6). Negative ties keep the sign bit (0x8).
  const float ties[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const float gaps[7] = {0.5f, 0.5f, 0.5f, 0.5f, 1.0f, 1.0f, 2.0f};  // between neighbours
  const uint8_t even_codes[7] = {0, 2, 2, 4, 4, 6, 6};
  const uint8_t toward_zero_codes[7] = {0, 1, 2, 3, 4, 5, 6};
  const float block_scales[2] = {1.0f, 0x1p-3f};
  Head x{};
  for (int b = 0; b < 2; ++b) {
    x[32 * b] = 6.0f * block_scales[b];
    for (int t = 0; t < 7; ++t) {
      x[32 * b + 1 + t] = ties[t] * block_scales[b];
      x[32 * b + 8 + t] = -ties[t] * block_scales[b];
    }
  }
  for (Rounding rounding : {Rounding::kNearestEven, Rounding::kNearestTiesTowardZero}) {
    for (ScaleDivisor div : {ScaleDivisor::kDivide, ScaleDivisor::kTimesReciprocal}) {
      const StoredHead h = store_head<float>(
          x.data(), fp4_spec(ScalePow2::kExponentBitsCeil, div, ScaleApply::kDivide, rounding));
      const uint8_t* expected =
          rounding == Rounding::kNearestEven ? even_codes : toward_zero_codes;
      for (int b = 0; b < 2; ++b) {
        ASSERT_EQ(std::ldexp(1.0f, h.scale_bytes[b] - 127), block_scales[b]);
        EXPECT_EQ(fp4_code(h, 32 * b), 7);
        for (int t = 0; t < 7; ++t) {
          const int i = 32 * b + 1 + t;
          EXPECT_EQ(fp4_code(h, i), expected[t]) << "tie " << ties[t];
          EXPECT_EQ(fp4_code(h, i + 7), expected[t] | 0x8) << "tie " << -ties[t];
          // A tie is half the gap between its neighbours from q, whichever way it
          // went; that is ulp(q)/2 except when it rounded up onto a power of two.
          const float q = e2m1_value(expected[t]);
          const float err = std::fabs(x[i] - q * block_scales[b]);
          EXPECT_EQ(err, gaps[t] / 2 * block_scales[b]) << ties[t];
          EXPECT_LE(err, e2m1_ulp(q) / 2 * block_scales[b]) << ties[t];
        }
      }
    }
  }
}

// A negative value that rounds to zero keeps its sign (code 0x8) by default, and is +0
// (code 0) under Fp4ZeroSign::kPositive, SGLang's V4 fp4 key kernel's rule (docs/numerics.md
// §6.2); non-zero codes keep their sign under both, and so do the fp4-in-bf16 values.
TEST(ScaleQuantError, Fp4ZeroSignRuleDecidesTheSignOfZeroCodesOnly) {
  Head x{};
  x[0] = 6.0f;         // block scale 1
  x[1] = -0.1f;        // rounds to -0
  x[2] = -0.0f;
  x[3] = 0.1f;         // rounds to +0
  x[4] = -1.0f;        // code 0xA
  for (Fp4ZeroSign rule : {Fp4ZeroSign::kKeep, Fp4ZeroSign::kPositive}) {
    QuantSpec q = fp4_spec(ScalePow2::kExponentBitsCeil, ScaleDivisor::kDivide, ScaleApply::kDivide,
                           Rounding::kNearestEven);
    q.fp4_zero_sign = rule;
    const StoredHead h = store_head<float>(x.data(), q);
    const uint8_t negative_zero = rule == Fp4ZeroSign::kKeep ? 0x8 : 0x0;
    EXPECT_EQ(fp4_code(h, 1), negative_zero);
    EXPECT_EQ(fp4_code(h, 2), negative_zero);
    EXPECT_EQ(fp4_code(h, 3), 0x0);
    EXPECT_EQ(fp4_code(h, 4), 0xA);
    q.format = StorageFormat::kFp4SimulatedBf16;
    const StoredHead sim = store_head<float>(x.data(), q);
    EXPECT_EQ(std::signbit(sim.dot_values[1]), rule == Fp4ZeroSign::kKeep);
    EXPECT_TRUE(std::signbit(sim.dot_values[4]));
  }
}

TEST(ScaleQuantError, ExponentBitScaleMapsTheGroupMaxIntoTheTopBinade) {
  // docs/numerics.md §2.6: with s = 2^ceil(log2(amax/448)) the group max maps into (224, 448]
  // (fp4: (3, 6]). For kExponentBitsCeil this holds exactly even with the rounded raw
  // scale: fl(amax/448) or fl(amax * fl(1/448)) can equal a power of two 2^k only when
  // amax = 448 * 2^k exactly, since the next float above 448 * 2^k gives
  // amax/448 = 2^k (1 + 2^-23/1.75), which rounds up to 2^k (1 + 2^-23).
  std::mt19937 rng(3);
  const QuantSpec fp8 = fp8_spec(ScalePow2::kExponentBitsCeil, ScaleDivisor::kTimesReciprocal,
                                 ScaleApply::kDivide);
  for (int trial = 0; trial < 5000; ++trial) {
    const Head x = random_head(rng);
    const float amax = block_amax(x.data(), kN);
    if (amax < 1e-4f) continue;
    const float s = block_scale(amax, fp8, 448.0f);
    EXPECT_GT(amax / s, 224.0f) << amax;
    EXPECT_LE(amax / s, 448.0f) << amax;
  }
}

// ---------------------------------------------------------------------------------
// 2. The two ue8m0 ceilings.
//
// raw = 2^k (1 + m 2^-23), 0 <= m < 2^23 (normal raw). kExponentBitsCeil gives 2^k for
// m = 0 and 2^(k+1) otherwise. kLog2Ceil gives 2^ceil(fl(L)), L = log2(raw) =
// k + t(m), t(m) = log2(1 + m 2^-23) in (0, 1) for m > 0. ceil(fl(L)) = k + 1 unless
// fl(L) == k, i.e. unless t(m) < h(k), half the gap between k and its fp32 neighbour
// toward k + 1 (t is irrational for m > 0, so never a tie):
//   k >= 1:  the gap above k is ulp(k) = 2^(j - 23), j = floor(log2 k): h = 2^(j - 24);
//   k = 0:   L = t is itself representable-ish and never rounds to 0: no window;
//   k <= -1: L lies just above k, i.e. |L| just below |k|: the gap below |k| is
//            2^(j - 23), or 2^(j - 24) when |k| = 2^j is a power of two (finer binade).
// t is increasing in m, so the disagreements near 2^k are exactly m = 1 .. M(k), M(k) =
// the largest m with t(m) < h(k). With t(1) = 2^-23 / ln 2 = 1.72e-7 this gives e.g.
// M(1..3) = 0, M(4..7) = 1, M(8..15) = 2, M(16..31) = 5, M(-1..-4) = 0, M(-5..-8) = 1,
// M(-9..-16) = 2, M(-17..-32) = 5, M(-33) = 11. (So "|k| >= 4" holds for positive k,
// but -4 has no window: |L| < 4 lies in [2, 4), where fp32 is twice as fine.)

long double half_gap(int k) {
  if (k == 0) return 0;
  const int a = std::abs(k);
  int j = 0;
  while ((2 << j) <= a) ++j;  // j = floor(log2 a)
  if (k > 0) return std::ldexp(1.0L, j - 24);
  return (a == (1 << j)) ? std::ldexp(1.0L, j - 25) : std::ldexp(1.0L, j - 24);
}

long double t_of(uint32_t m) { return std::log1p(std::ldexp(static_cast<long double>(m), -23)) / std::log(2.0L); }

uint32_t window(int k) {
  const long double h = half_gap(k);
  uint32_t m = 0;
  while (t_of(m + 1) < h) ++m;
  // The long double evaluation decides unambiguously: both ends are far from h.
  EXPECT_GT(std::fabs(t_of(m + 1) - h), 1e-9L * h) << k;
  if (m > 0) {
    EXPECT_GT(std::fabs(t_of(m) - h), 1e-9L * h) << k;
  }
  return m;
}

// The scale of raw scale `raw` under each rule: qmax 1 and kDivide make raw_scale the
// identity (amax / 1), and a zero floor leaves amax alone.
float pow2_of_raw(float raw, ScalePow2 rule) {
  QuantSpec q;
  q.format = StorageFormat::kFp8E4m3fn;
  q.amax_floor = 0.0f;
  q.divisor = ScaleDivisor::kDivide;
  q.pow2 = rule;
  return block_scale(raw, q, 1.0f);
}

float raw_of(int k, uint32_t m) { return std::ldexp(1.0f + std::ldexp(static_cast<float>(m), -23), k); }

TEST(Ue8m0Variants, WindowSizesMatchTheHandDerivation) {
  const std::pair<int, uint32_t> hand[] = {
      {1, 0},  {2, 0},   {3, 0},   {4, 1},   {7, 1},   {8, 2},   {15, 2},  {16, 5},
      {31, 5}, {-1, 0},  {-2, 0},  {-3, 0},  {-4, 0},  {-5, 1},  {-8, 1},  {-9, 2},
      {-16, 2}, {-17, 5}, {-32, 5}, {-33, 11}, {32, 11}, {0, 0}};
  for (const auto& [k, m] : hand) EXPECT_EQ(window(k), m) << "k = " << k;
}

TEST(Ue8m0Variants, Log2IsCorrectlyRoundedOnASample) {
  // kLog2Ceil relies on log2_correctly_rounded. Compare with long double log2 rounded
  // to fp32, skipping (none expected) values within 2^-60 relative of an fp32 midpoint,
  // where that double rounding could itself be wrong.
  std::mt19937 rng(15);
  std::uniform_int_distribution<uint32_t> bits(0x0080'0000u, 0x7F7F'FFFFu);
  for (int i = 0; i < 300000; ++i) {
    const float x = from_bits(bits(rng));
    const long double l = std::log2(static_cast<long double>(x));
    const float f = static_cast<float>(l);
    const long double below = (static_cast<long double>(f) + std::nextafter(f, -INFINITY)) / 2;
    const long double above = (static_cast<long double>(f) + std::nextafter(f, INFINITY)) / 2;
    if (std::fabs(l - below) < 0x1p-60L * std::fabs(l) ||
        std::fabs(l - above) < 0x1p-60L * std::fabs(l)) {
      continue;
    }
    ASSERT_EQ(bits_of(log2_correctly_rounded(x)), bits_of(f)) << "x = " << x;
  }
}

TEST(Ue8m0Variants, AgreeAtExactPowersOfTwo) {
  for (int k = -126; k <= 126; ++k) {
    const float raw = std::ldexp(1.0f, k);
    EXPECT_EQ(pow2_of_raw(raw, ScalePow2::kExponentBitsCeil), raw) << k;
    EXPECT_EQ(pow2_of_raw(raw, ScalePow2::kLog2Ceil), raw) << k;
  }
}

// Checks the rules on raw = 2^k (1 + m 2^-23) against the predicted window.
void expect_predicted(int k, uint32_t m, uint32_t window_k) {
  const float raw = raw_of(k, m);
  const float bits = pow2_of_raw(raw, ScalePow2::kExponentBitsCeil);
  const float log2 = pow2_of_raw(raw, ScalePow2::kLog2Ceil);
  const float pk = std::ldexp(1.0f, k);
  ASSERT_EQ(bits, m == 0 ? pk : 2 * pk) << "k = " << k << " m = " << m;
  const bool predicted = m >= 1 && m <= window_k;
  ASSERT_EQ(log2, predicted ? pk : bits) << "k = " << k << " m = " << m;
}

TEST(Ue8m0Variants, DisagreeExactlyOnThePredictedSetAtEveryBinade) {
  // Every normal binade whose ceiling is finite: the first and last 512 mantissas.
  for (int k = -126; k <= 126; ++k) {
    const uint32_t w = window(k);
    ASSERT_LT(w, 512u);
    for (uint32_t m = 0; m < 512; ++m) expect_predicted(k, m, w);
    for (uint32_t m = (1u << 23) - 512; m < (1u << 23); ++m) expect_predicted(k, m, w);
  }
}

TEST(Ue8m0Variants, EveryWindowEndsBelowTheDevicesLogarithmBound) {
  // device/head/quantize.cuh ue8m0_byte takes the exponent bits' ceiling from mantissa
  // kLog2CeilMantissasBelow up and the logarithm below: every window must end below it.
  // The widest are 22 (k in [64, 126] and [-126, -65]).
  uint32_t widest = 0;
  for (int k = -126; k <= 126; ++k) widest = std::max(widest, window(k));
  EXPECT_EQ(widest, 22u);
  EXPECT_LT(widest, kLog2CeilMantissasBelow);
}

TEST(Ue8m0Variants, DisagreeExactlyOnThePredictedSetOverWholeBinades) {
  // All 2^23 mantissas of a few binades, with windows 1, 0, 1, 11 and 22 (k = 100:
  // h = 2^-18, t(22) = 3.78e-6 < 3.81e-6 < t(23)).
  for (int k : {4, -4, -5, -33, 100}) {
    const uint32_t w = window(k);
    if (k == 100) {
      EXPECT_EQ(w, 22u);
    }
    for (uint32_t m = 0; m < (1u << 23); ++m) expect_predicted(k, m, w);
  }
}

TEST(Ue8m0Variants, SubnormalRawScalesAreRejectedNotWrapped) {
  // A floor below 448 * 2^-126 = 5.3e-36 makes the raw scale of an all-zero block an
  // fp32 subnormal: raw = fl(1e-40 / 448) = 2.23e-43, log2 = -141.7. No ue8m0 byte
  // holds 2^-141 (the smallest is 2^-127), and the exponent-bit rule has no exponent to
  // read. An earlier version wrapped ceil(log2) + 127 = -14 into byte 242 (2^115); both
  // rules must now refuse such a floor: store_head reports bad input and
  // Recipe::validate rejects the recipe.
  for (ScalePow2 pow2 : {ScalePow2::kLog2Ceil, ScalePow2::kExponentBitsCeil}) {
    QuantSpec q = fp8_spec(pow2, ScaleDivisor::kDivide, ScaleApply::kDivide);
    q.amax_floor = 1e-40f;
    EXPECT_THROW(block_scale(0.0f, q, 448.0f), Error);
    float zeros[kHeadDim] = {};
    EXPECT_THROW(store_head(zeros, q), Error);
    Recipe r = preset("dsv32-ref");
    r.key_quant = q;
    EXPECT_THROW(r.validate(), Error);
  }
  // The smallest accepted floor gives raw = 2^-126 exactly and scale 2^-126.
  QuantSpec q = fp8_spec(ScalePow2::kLog2Ceil, ScaleDivisor::kDivide, ScaleApply::kDivide);
  q.amax_floor = 448.0f * 0x1p-126f;
  EXPECT_EQ(block_scale(0.0f, q, 448.0f), 0x1p-126f);
}

TEST(Ue8m0Variants, OneConcreteDisagreementChangesTheCodes) {
  // amax = 7168 + 2^-11 (the float after 448 * 16; ulp(7168) = 2^-11):
  // amax / 448 = 16 + 2^-19 / 1.75 = 16 + 0.571 ulp(16) -> fl = 16 (1 + 2^-23) =
  // 0x41800001 (and * fl(1/448), 0.75 * 2^-24 larger, rounds the same way).
  // log2 = 4 + 1.72e-7 rounds to 4 (half-gap above 4 is 2^-22 = 2.38e-7): kLog2Ceil
  // gives 16, the exponent-bit rule 32. The max element then maps to
  // amax / 32 = 224 + 2^-16 -> e4m3fn 224 = 1.75 * 2^7 = 0x76, or
  // amax / 16  = 448 + 2^-15 -> 448 = 0x7E (past 448, so the log2 rule puts the max
  // outside (224, 448]).
  const float amax = std::nextafter(7168.0f, INFINITY);
  ASSERT_EQ(amax, 7168.0f + 0x1p-11f);
  for (ScaleDivisor div : {ScaleDivisor::kDivide, ScaleDivisor::kTimesReciprocal}) {
    QuantSpec bits = fp8_spec(ScalePow2::kExponentBitsCeil, div, ScaleApply::kDivide);
    QuantSpec log2 = fp8_spec(ScalePow2::kLog2Ceil, div, ScaleApply::kDivide);
    EXPECT_EQ(bits_of(raw_scale(amax, bits, 448.0f)), 0x41800001u);
    EXPECT_EQ(block_scale(amax, bits, 448.0f), 32.0f);
    EXPECT_EQ(block_scale(amax, log2, 448.0f), 16.0f);
    Head x{};
    x[0] = amax;
    x[1] = -1.0f;
    const StoredHead hb = store_head<float>(x.data(), bits);
    const StoredHead hl = store_head<float>(x.data(), log2);
    EXPECT_EQ(stored_fp8_scale(hb), 32.0f);
    EXPECT_EQ(stored_fp8_scale(hl), 16.0f);
    EXPECT_EQ(hb.value_bytes[0], 0x76);
    EXPECT_EQ(hl.value_bytes[0], 0x7E);
    // -1/32 = -2^-5 = -(1.0 * 2^-5): exponent field 2 -> 0x90; -1/16 -> field 3 -> 0x98.
    EXPECT_EQ(hb.value_bytes[1], 0x90);
    EXPECT_EQ(hl.value_bytes[1], 0x98);
  }
}

// ---------------------------------------------------------------------------------
// 3. Dividing by the scale vs multiplying by its fp32 reciprocal (docs/verification.md §7.1).

TEST(ScaleApplyMode, DivideAndReciprocalDifferOnConstructedInputsForPlainScales) {
  // fl(x / s) and fl(x * fl(1/s)) differ by at most an fp32 ulp or two, so their e4m3fn
  // codes differ only when an e4m3fn rounding midpoint lies between them. Put x right
  // at fl(midpoint * s) (+-2 fp32 ulps) for plain scales s = fl(amax / 448) and keep
  // the cases where the independent encoder gives different codes; store_head must
  // reproduce both codes.
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-10, 10);
  const QuantSpec div = fp8_spec(ScalePow2::kNone, ScaleDivisor::kDivide, ScaleApply::kDivide);
  const QuantSpec rec =
      fp8_spec(ScalePow2::kNone, ScaleDivisor::kDivide, ScaleApply::kTimesReciprocal);
  int found = 0, candidates = 0;
  for (int trial = 0; trial < 2000 && found < 40; ++trial) {
    const float amax = std::ldexp(mant(rng), expo(rng));
    const float s = amax / 448.0f;
    for (int c = 0; c < 0x7E; ++c) {
      const long double mid = (e4m3_magnitude(c) + e4m3_magnitude(c + 1)) / 2;
      float x = static_cast<float>(mid * s);
      for (int step = 0; step < 2; ++step) x = std::nextafter(x, 0.0f);
      for (int j = 0; j < 5; ++j, x = std::nextafter(x, INFINITY)) {
        if (!(x > 0 && x < amax)) continue;
        const uint8_t by_div = my_e4m3(x / s);
        const uint8_t by_rec = my_e4m3(x * (1.0f / s));
        ++candidates;
        if (by_div == by_rec) continue;
        ++found;
        Head h{};
        h[0] = amax;
        h[1] = x;
        h[2] = -x;
        const StoredHead sd = store_head<float>(h.data(), div);
        const StoredHead sr = store_head<float>(h.data(), rec);
        ASSERT_EQ(stored_fp8_scale(sd), s);
        ASSERT_EQ(stored_fp8_scale(sr), s);
        EXPECT_EQ(sd.value_bytes[1], by_div) << "x = " << x << " s = " << s;
        EXPECT_EQ(sr.value_bytes[1], by_rec) << "x = " << x << " s = " << s;
        EXPECT_EQ(sd.value_bytes[2], by_div | 0x80);
        EXPECT_EQ(sr.value_bytes[2], by_rec | 0x80);
        // Adjacent codes: the two paths straddle one midpoint.
        EXPECT_EQ(std::abs(int(by_div) - int(by_rec)), 1);
      }
    }
  }
  EXPECT_GT(found, 0) << "of " << candidates << " near-midpoint candidates";
}

TEST(ScaleApplyMode, ConcreteInputsWhereDivideAndReciprocalCodesDiffer) {
  // Two inputs the search above turns up, checked by hand. amax = 0x1.117c8ep-7 gives
  // the plain scale s = fl(amax / 448) = 0x1.388e5ap-16.
  //  x1 = 0x1.d4d586p-25: x1 / s = 0x1.8p-9 = 1.5 * 2^-9 exactly, the midpoint of the
  //    subnormals 1 * 2^-9 (code 0x01) and 2 * 2^-9 (0x02): a tie, to the even 0x02;
  //    x1 * fl(1/s) = 0x1.7ffffep-9, just below it: 0x01.
  //  x2 = 0x1.e85e6ep-22: x2 / s = 0x1.900002p-6, one fp32 ulp above the midpoint
  //    1.5625 * 2^-6 of 1.5 * 2^-6 (0x0C) and 1.625 * 2^-6 (0x0D): 0x0D;
  //    x2 * fl(1/s) = 0x1.9p-6 lands exactly on it: a tie, to the even 0x0C.
  const float amax = 0x1.117c8ep-7f;
  const float s = amax / 448.0f;
  ASSERT_EQ(s, 0x1.388e5ap-16f);
  const float x1 = 0x1.d4d586p-25f, x2 = 0x1.e85e6ep-22f;
  ASSERT_EQ(x1 / s, 0x1.8p-9f);
  ASSERT_EQ(x1 * (1.0f / s), 0x1.7ffffep-9f);
  ASSERT_EQ(x2 / s, 0x1.900002p-6f);
  ASSERT_EQ(x2 * (1.0f / s), 0x1.9p-6f);
  Head h{};
  h[0] = amax;
  h[1] = x1;
  h[2] = x2;
  const StoredHead by_div = store_head<float>(
      h.data(), fp8_spec(ScalePow2::kNone, ScaleDivisor::kDivide, ScaleApply::kDivide));
  const StoredHead by_rec = store_head<float>(
      h.data(), fp8_spec(ScalePow2::kNone, ScaleDivisor::kDivide, ScaleApply::kTimesReciprocal));
  EXPECT_EQ(by_div.value_bytes[1], 0x02);
  EXPECT_EQ(by_rec.value_bytes[1], 0x01);
  EXPECT_EQ(by_div.value_bytes[2], 0x0D);
  EXPECT_EQ(by_rec.value_bytes[2], 0x0C);
}

TEST(ScaleApplyMode, DivideAndReciprocalAgreeForPowerOfTwoScales) {
  // 1/2^k is exact, and x / 2^k and x * 2^-k are the same exact value rounded once, so
  // every code is identical, fp8 and fp4, on a large random sample.
  std::mt19937 rng(12);
  for (ScalePow2 pow2 : {ScalePow2::kExponentBitsCeil, ScalePow2::kLog2Ceil}) {
    for (ScaleDivisor d : {ScaleDivisor::kDivide, ScaleDivisor::kTimesReciprocal}) {
      const QuantSpec f8d = fp8_spec(pow2, d, ScaleApply::kDivide);
      const QuantSpec f8r = fp8_spec(pow2, d, ScaleApply::kTimesReciprocal);
      const QuantSpec f4d = fp4_spec(pow2, d, ScaleApply::kDivide, Rounding::kNearestEven);
      const QuantSpec f4r = fp4_spec(pow2, d, ScaleApply::kTimesReciprocal, Rounding::kNearestEven);
      for (int trial = 0; trial < 2000; ++trial) {
        const Head x = random_head(rng);
        ASSERT_EQ(store_head<float>(x.data(), f8d).value_bytes,
                  store_head<float>(x.data(), f8r).value_bytes);
        ASSERT_EQ(store_head<float>(x.data(), f4d).value_bytes,
                  store_head<float>(x.data(), f4r).value_bytes);
      }
    }
  }
}

TEST(ScaleApplyMode, ScaleDivisorChangesPlainScalesButNotAt448TimesPowersOfTwo) {
  // fl(1/448) = (1/448)(1 + 0.75 * 2^-24), so amax * fl(1/448) and amax / 448 differ in
  // the last bit for some amax. At amax = 448 * 2^k both are exactly 2^k:
  // 448 * fl(1/448) = 1 + 0.75 * 2^-24 rounds to 1 (half an ulp above 1 is 2^-24).
  ASSERT_EQ(static_cast<long double>(1.0f / 448.0f) * 448.0L, 1.0L + 0.75L * 0x1p-24L);
  QuantSpec d = fp8_spec(ScalePow2::kNone, ScaleDivisor::kDivide, ScaleApply::kDivide);
  QuantSpec r = fp8_spec(ScalePow2::kNone, ScaleDivisor::kTimesReciprocal, ScaleApply::kDivide);
  for (int k = -20; k <= 20; ++k) {
    const float amax = std::ldexp(448.0f, k);
    EXPECT_EQ(raw_scale(amax, d, 448.0f), std::ldexp(1.0f, k)) << k;
    EXPECT_EQ(raw_scale(amax, r, 448.0f), std::ldexp(1.0f, k)) << k;
  }
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> a(1.0f, 1000.0f);
  int differ = 0;
  for (int i = 0; i < 10000; ++i) {
    const float amax = a(rng);
    const float by_div = raw_scale(amax, d, 448.0f);
    const float by_rec = raw_scale(amax, r, 448.0f);
    ASSERT_EQ(by_div, amax / 448.0f);
    ASSERT_EQ(by_rec, amax * (1.0f / 448.0f));
    differ += by_div != by_rec;
  }
  EXPECT_GT(differ, 0);
}

// ---------------------------------------------------------------------------------
// 4. The amax floor.

TEST(AmaxFloor, TinyBlocksGetTheDocumentedScales) {
  // DeepSeek/SGLang floor 1e-4: 1e-4 / 448 = 2.23e-7, log2 = -22.095, so the
  // power-of-two scale is 2^-22 (docs/numerics.md §2.6) for any block with amax <= 1e-4.
  // vLLM's 1e-10 (§7.1): an all-zero block gets 1e-10 / 448 = 2.23e-13, log2 = -42.03
  // -> 2^-42; a block with amax 1e-7 (above that floor) gets 2.23e-10, log2 = -32.06
  // -> 2^-32. The plain (kNone) scale is fl(fl(1e-4) * fl(1/448)).
  EXPECT_EQ(std::ceil(std::log2(static_cast<long double>(1e-4f) / 448)), -22);
  EXPECT_EQ(std::ceil(std::log2(static_cast<long double>(1e-10f) / 448)), -42);
  EXPECT_EQ(std::ceil(std::log2(static_cast<long double>(1e-7f) / 448)), -32);
  Head zeros{};
  Head tiny;
  tiny.fill(-1e-7f);
  tiny[5] = 1e-7f;
  for (ScalePow2 pow2 : {ScalePow2::kExponentBitsCeil, ScalePow2::kLog2Ceil}) {
    for (ScaleDivisor div : {ScaleDivisor::kDivide, ScaleDivisor::kTimesReciprocal}) {
      QuantSpec q = fp8_spec(pow2, div, ScaleApply::kDivide);
      q.amax_floor = 1e-4f;
      EXPECT_EQ(stored_fp8_scale(store_head<float>(zeros.data(), q)), 0x1p-22f);
      EXPECT_EQ(stored_fp8_scale(store_head<float>(tiny.data(), q)), 0x1p-22f);
      q.amax_floor = 1e-10f;
      EXPECT_EQ(stored_fp8_scale(store_head<float>(zeros.data(), q)), 0x1p-42f);
      EXPECT_EQ(stored_fp8_scale(store_head<float>(tiny.data(), q)), 0x1p-32f);
    }
  }
  QuantSpec plain = fp8_spec(ScalePow2::kNone, ScaleDivisor::kTimesReciprocal, ScaleApply::kDivide);
  EXPECT_EQ(stored_fp8_scale(store_head<float>(zeros.data(), plain)), 1e-4f * (1.0f / 448.0f));
  // Zeros encode as +0 codes whatever the scale.
  for (uint8_t c : store_head<float>(zeros.data(), plain).value_bytes) EXPECT_EQ(c, 0);
  // fp4 (qmax 6): 1e-4 / 6 = 1.67e-5, log2 = -15.87 -> 2^-15.
  const StoredHead f4 = store_head<float>(
      zeros.data(), fp4_spec(ScalePow2::kExponentBitsCeil, ScaleDivisor::kDivide,
                             ScaleApply::kDivide, Rounding::kNearestEven));
  for (uint8_t e : f4.scale_bytes) EXPECT_EQ(e, 127 - 15);
}

// ---------------------------------------------------------------------------------
// 5. Saturation.

TEST(Fp8Saturation, QuotientPastTheMaxWithPlainScalesStoresMaxFinite) {
  // With a plain scale s = fl(amax / 448) the group max's quotient fl(amax / s) can land
  // an fp32 ulp or two above 448 (s rounded down). That value is below the 464 midpoint,
  // so it rounds to 448: code 0x7E, 0xFE for the negative max — in both saturation modes.
  std::mt19937 rng(14);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-8, 12);
  int past = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const float amax = std::ldexp(mant(rng), expo(rng));
    for (ScaleDivisor div : {ScaleDivisor::kDivide, ScaleDivisor::kTimesReciprocal}) {
      for (ScaleApply apply : {ScaleApply::kDivide, ScaleApply::kTimesReciprocal}) {
        const float s = my_raw(amax, 1e-4f, div, 448.0f);
        if (!(my_apply(amax, s, apply) > 448.0f)) continue;
        ++past;
        Head x{};
        x[0] = amax;
        x[1] = -amax;
        for (Saturation sat : {Saturation::kSatFinite, Saturation::kNonSaturating}) {
          QuantSpec q = fp8_spec(ScalePow2::kNone, div, apply);
          q.saturation = sat;
          const StoredHead h = store_head<float>(x.data(), q);
          ASSERT_EQ(stored_fp8_scale(h), s);
          ASSERT_EQ(h.value_bytes[0], 0x7E) << amax;
          ASSERT_EQ(h.value_bytes[1], 0xFE) << amax;
        }
      }
    }
  }
  EXPECT_GT(past, 0);
}

TEST(Fp8Saturation, ValuesRoundingPastTheMaxClampOnlyWhenSaturating) {
  // Beyond the midpoint 464 the nearest would be the NaN slot 480: kSatFinite clamps to
  // +-448 (cvt.rn.satfinite), kNonSaturating gives the NaN code. store_head can never
  // produce such a quotient (the scale is at least ~amax / 448), so this is the codec
  // the scaled store relies on.
  for (float v : {std::nextafter(464.0f, INFINITY), 480.0f, 1e6f, INFINITY}) {
    EXPECT_EQ(encode_e4m3fn(v, Saturation::kSatFinite), 0x7E) << v;
    EXPECT_EQ(encode_e4m3fn(-v, Saturation::kSatFinite), 0xFE) << v;
    EXPECT_EQ(encode_e4m3fn(v, Saturation::kNonSaturating) & 0x7F, 0x7F) << v;
    EXPECT_EQ(my_e4m3(v), 0x7E) << v;
  }
  EXPECT_EQ(encode_e4m3fn(464.0f, Saturation::kSatFinite), 0x7E);  // tie -> even 448
  EXPECT_EQ(encode_e4m3fn(464.0f, Saturation::kNonSaturating), 0x7E);
}

// ---------------------------------------------------------------------------------
// SGLang's V4.1 two-stage fp4 pack (docs/numerics.md §6.5), written out from the kernel's
// formulas with this file's own encoder: ceil_exp(f) = biased exponent + (mantissa != 0).

int ceil_exp(float f) {
  const uint32_t b = bits_of(f);
  return static_cast<int>((b >> 23) & 0xFF) + ((b & 0x7F'FFFF) != 0 ? 1 : 0);
}
float pow2_of(int biased) { return std::ldexp(1.0f, biased - 127); }

struct Packed {
  std::array<uint8_t, kN> codes;
  std::array<uint8_t, 4> exponents;
};
Packed v41_pack(const Head& x) {
  Packed out{};
  for (int b = 0; b < 4; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
    // Stage 1: fake quantisation, scale from max(amax, 6 * 2^-126) * fl(1/6).
    const int e1 = ceil_exp(std::max(amax, 6.0f * 0x1p-126f) * (1.0f / 6.0f));
    std::array<float, 32> y;
    for (int j = 0; j < 32; ++j) {
      y[j] = e2m1_value(my_e2m1(x[32 * b + j] / pow2_of(e1) + 0.0f, Rounding::kNearestEven)) * pow2_of(e1);
    }
    // Stage 2: the pack, exponent of max(amax / 6, 1e-4), clamped to [1, 254].
    float amax2 = 0;
    for (float v : y) amax2 = std::max(amax2, std::fabs(v));
    const int e2 = std::min(std::max(ceil_exp(std::max(amax2 / 6.0f, 1e-4f)), 1), 254);
    out.exponents[b] = static_cast<uint8_t>(e2);
    for (int j = 0; j < 32; ++j) {
      uint8_t c = my_e2m1(y[j] / pow2_of(e2), Rounding::kNearestEven);
      if ((c & 7) == 0) c = 0;  // the kernel's clear_negative_zero
      out.codes[32 * b + j] = c;
    }
  }
  return out;
}

// bf16 heads (what the kernels see after their bf16 rounding), blocks of mixed sizes: tiny
// blocks below both floors, blocks near 6e-4, exact powers of two and their neighbours.
TEST(ScaleQuantError, Fp4PrestageAndFloorReproduceTheV41PackWrittenOut) {
  const QuantSpec spec = preset("sglang-v41-fp4").key_quant;
  ASSERT_EQ(spec.fp4_prestage, Fp4Prestage::kFakeQuant);
  std::mt19937 rng(41);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-40, 12);
  int exponents_below_floor = 0, stages_differ = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    Head x{};
    for (int b = 0; b < 4; ++b) {
      const float magnitude = std::ldexp(1.0f, exponent(rng));
      for (int j = 0; j < 32; ++j) x[32 * b + j] = decode_bf16(encode_bf16(magnitude * normal(rng)));
      if (trial % 7 == 0) x[32 * b] = decode_bf16(encode_bf16(1.5f * magnitude));  // amax/6 a power of two
    }
    const Packed want = v41_pack(x);
    const StoredHead got = store_head<float>(x.data(), spec);
    for (int b = 0; b < 4; ++b) {
      ASSERT_EQ(got.scale_bytes[b], want.exponents[b]) << "trial " << trial << " block " << b;
      exponents_below_floor += want.exponents[b] == 114;  // 2^-13: the 1e-4 floor
    }
    for (int i = 0; i < kN; ++i) ASSERT_EQ(fp4_code(got, i), want.codes[i]) << "trial " << trial << " element " << i;
    // The first stage matters: the one-stage pack of the same spec differs somewhere.
    QuantSpec one_stage = spec;
    one_stage.fp4_prestage = Fp4Prestage::kNone;
    stages_differ += store_head<float>(x.data(), one_stage).value_bytes != got.value_bytes;
  }
  EXPECT_GT(exponents_below_floor, 1000);
  EXPECT_GT(stages_differ, 100);
}

// The preset floors amax at 6e-4 before the divide; the kernel floors amax / 6 at 1e-4
// after it. Under the exponent-bit ceiling the two give the same scale for every fp32
// amax from 2^-30 to 2^10 (every 16th bit pattern, and every pattern near the floor).
TEST(ScaleQuantError, FloorBeforeTheDivideEqualsTheKernelsFloorAfterItUnderTheCeiling) {
  QuantSpec spec = fp4_spec(ScalePow2::kExponentBitsCeil, ScaleDivisor::kDivide, ScaleApply::kTimesReciprocal,
                            Rounding::kNearestEven);
  spec.amax_floor = 6e-4f;
  const auto check = [&](uint32_t bits) {
    const float amax = from_bits(bits);
    const int kernel = ceil_exp(std::max(amax / 6.0f, 1e-4f));
    ASSERT_EQ(bits_of(block_scale(amax, spec, 6.0f)), bits_of(pow2_of(kernel))) << amax;
  };
  for (uint32_t b = bits_of(0x1p-30f); b <= bits_of(0x1p10f); b += 16) check(b);
  for (uint32_t b = bits_of(5.9e-4f); b <= bits_of(6.1e-4f); ++b) check(b);
}

}  // namespace
}  // namespace dsaf::ref
