// Tests of the generic minifloat codec against facts of the formats (OCP OFP8, OCP MX),
// stated independently of the codec. The exhaustive cross-checks against NVIDIA's
// conversions run in `dsa-fidelity selftest` (cli_test runs it).
#include "reference/numeric/minifloat.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "reference/numeric/bit_cast.h"
#include "reference/numeric/ue8m0.h"

namespace dsaf::ref {
namespace {

TEST(E4m3fnDecode, NamedCodesHaveTheirSpecValues) {
  EXPECT_EQ(decode_e4m3fn(0x7E), 448.0f);          // 1.75 * 2^8, largest finite
  EXPECT_EQ(decode_e4m3fn(0xFE), -448.0f);
  EXPECT_EQ(decode_e4m3fn(0x08), 0x1p-6f);         // smallest normal 2^(1-7)
  EXPECT_EQ(decode_e4m3fn(0x01), 0x1p-9f);         // smallest subnormal 2^-6 * 2^-3
  EXPECT_EQ(decode_e4m3fn(0x07), 7 * 0x1p-9f);     // largest subnormal
  EXPECT_EQ(decode_e4m3fn(0x38), 1.0f);            // exponent field 7 = bias
  EXPECT_TRUE(std::isnan(decode_e4m3fn(0x7F)));    // S.1111.111 is NaN
  EXPECT_TRUE(std::isnan(decode_e4m3fn(0xFF)));
  EXPECT_TRUE(std::signbit(decode_e4m3fn(0x80)));  // -0
}

TEST(E4m3fnDecode, EveryFiniteCodeRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;
    const float v = decode_e4m3fn(static_cast<uint8_t>(code));
    EXPECT_EQ(encode_e4m3fn(v, Saturation::kSatFinite), code) << code;
    EXPECT_EQ(encode_e4m3fn(v, Saturation::kNonSaturating), code) << code;
  }
}

TEST(E4m3fnEncode, TiesGoToEvenAndOverflowFollowsSaturation) {
  // 464 is the midpoint of 448 (mantissa 110) and the would-be 480 (111 = NaN code):
  // the even neighbour 448 wins, so 464 is still finite in both modes.
  EXPECT_EQ(encode_e4m3fn(464.0f, Saturation::kNonSaturating), 0x7E);
  EXPECT_EQ(encode_e4m3fn(std::nextafter(464.0f, 1e9f), Saturation::kNonSaturating), 0x7F);
  EXPECT_EQ(encode_e4m3fn(std::nextafter(464.0f, 1e9f), Saturation::kSatFinite), 0x7E);
  EXPECT_EQ(encode_e4m3fn(-1e30f, Saturation::kSatFinite), 0xFE);
  EXPECT_EQ(encode_e4m3fn(INFINITY, Saturation::kSatFinite), 0x7E);
  EXPECT_EQ(encode_e4m3fn(INFINITY, Saturation::kNonSaturating), 0x7F);
  // 1.0625 is halfway between 1 (0x38) and 1.125 (0x39): even mantissa 000 wins.
  EXPECT_EQ(encode_e4m3fn(1.0625f, Saturation::kSatFinite), 0x38);
  // 1.1875 is halfway between 1.125 (0x39) and 1.25 (0x3A): even 0x3A wins.
  EXPECT_EQ(encode_e4m3fn(1.1875f, Saturation::kSatFinite), 0x3A);
  // Subnormal midpoint: 1.5 * 2^-9 lies between codes 1 and 2: even code 2.
  EXPECT_EQ(encode_e4m3fn(1.5f * 0x1p-9f, Saturation::kSatFinite), 0x02);
  // Half the smallest subnormal ties to 0; just above rounds to code 1.
  EXPECT_EQ(encode_e4m3fn(0x1p-10f, Saturation::kSatFinite), 0x00);
  EXPECT_EQ(encode_e4m3fn(std::nextafter(0x1p-10f, 1.0f), Saturation::kSatFinite), 0x01);
  EXPECT_EQ(encode_e4m3fn(-0.0f, Saturation::kSatFinite), 0x80);
  // NaN of either sign becomes the canonical +NaN code, as NVIDIA's fp32 path does.
  EXPECT_EQ(encode_e4m3fn(-NAN, Saturation::kSatFinite), 0x7F);
}

TEST(Bf16Encode, RoundsToNearestEvenOnTheLow16Bits) {
  // 1 + 2^-8 is halfway between 1 (0x3F80) and 1 + 2^-7 (0x3F81): even 0x3F80.
  EXPECT_EQ(encode_bf16(1.0f + 0x1p-8f), 0x3F80);
  // 1 + 3 * 2^-8 is halfway between 0x3F81 and 0x3F82: even 0x3F82.
  EXPECT_EQ(encode_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);
  EXPECT_EQ(encode_bf16(std::nextafter(1.0f + 0x1p-8f, 2.0f)), 0x3F81);
  EXPECT_EQ(encode_bf16(3.4028235e38f), 0x7F80);  // fp32 max rounds up to +inf
  EXPECT_EQ(encode_bf16(-INFINITY), 0xFF80);
  EXPECT_EQ(encode_bf16(NAN), 0x7FFF);
  EXPECT_EQ(encode_bf16(0x1p-149f), 0x0000);  // half of ... below bf16's 2^-133 quantum
  EXPECT_EQ(encode_bf16(0x1p-133f), 0x0001);  // smallest bf16 subnormal
  EXPECT_EQ(decode_bf16(0x0001), 0x1p-133f);
  EXPECT_EQ(round_bf16(1.00390625f), 1.0f);  // 1 + 2^-8 -> 1
}

// The named entry points take shortcuts (minifloat.h); they must be the generic codec.
// e4m3fn: every sign, exponent and top 3 fraction bits of fp32 (so every e4m3fn code and
// both ends of the shortcut's range), each with low 20 bits below, at and above the
// rounding midpoint and at their ends, and 32 random ones; both saturation modes.
// (selftest compares the named encoder with NVIDIA's on all 2^32 patterns.)
TEST(NamedCodecs, E4m3fnEncoderEqualsTheGenericOne) {
  std::mt19937 rng(11);
  std::vector<uint32_t> lows = {0x0'0000, 0x0'0001, 0x7'FFFF, 0x8'0000, 0x8'0001, 0xF'FFFF, 0x4'0000, 0xC'0000};
  while (lows.size() < 40) lows.push_back(rng() & 0xF'FFFFu);
  for (uint32_t high = 0; high < 0x1000u; ++high) {
    for (const uint32_t low : lows) {
      const float x = float_from_bits(high << 20 | low);
      for (const Saturation sat : {Saturation::kSatFinite, Saturation::kNonSaturating}) {
        ASSERT_EQ(encode_e4m3fn(x, sat), encode<E4m3fnTraits>(x, sat)) << std::hex << (high << 20 | low);
      }
    }
  }
}

TEST(NamedCodecs, EqualTheGenericCodecBitForBit) {
  for (uint32_t code = 0; code < 0x10000u; ++code) {
    const float fast = decode_bf16(static_cast<uint16_t>(code));
    const float generic = decode<Bf16Traits>(static_cast<uint16_t>(code));
    ASSERT_EQ(float_bits(fast), float_bits(generic)) << "bf16 code " << code;
  }
  for (uint32_t code = 0; code < 256u; ++code) {
    const auto c = static_cast<uint8_t>(code);
    ASSERT_EQ(float_bits(decode_e4m3fn(c)), float_bits(decode<E4m3fnTraits>(c))) << "e4m3fn code " << code;
    ASSERT_EQ(float_bits(decode_e2m1(c)), float_bits(decode<E2m1Traits>(c))) << "e2m1 code " << code;
  }
  // Every sign and exponent and the top of every mantissa, with the low half below,
  // at, and above the rounding midpoint, at both parities, and at its ends.
  const uint32_t lows[] = {0x0000, 0x0001, 0x3FFF, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFF, 0x5A5A, 0xA5A5};
  for (uint32_t high = 0; high < 0x10000u; ++high) {
    for (const uint32_t low : lows) {
      const float x = float_from_bits(high << 16 | low);
      ASSERT_EQ(encode_bf16(x), encode<Bf16Traits>(x, Saturation::kNonSaturating)) << std::hex << (high << 16 | low);
    }
  }
}

TEST(E2m1Codec, GridAndBothTieRules) {
  const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int code = 0; code < 16; ++code) {
    const float expected = (code & 8 ? -1.0f : 1.0f) * grid[code & 7];
    EXPECT_EQ(decode_e2m1(static_cast<uint8_t>(code)), expected) << code;
  }
  // Midpoints: RNE goes to the even code, ties-toward-zero to the smaller magnitude
  // (SGLang compares against {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5} with a strict >).
  const float midpoints[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const int rne[7] = {0, 2, 2, 4, 4, 6, 6};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(encode_e2m1(midpoints[i], Rounding::kNearestEven), rne[i]) << midpoints[i];
    EXPECT_EQ(encode_e2m1(midpoints[i], Rounding::kNearestTiesTowardZero), i) << midpoints[i];
    EXPECT_EQ(encode_e2m1(-midpoints[i], Rounding::kNearestTiesTowardZero), 8 | i);
    EXPECT_EQ(encode_e2m1(std::nextafter(midpoints[i], 9.0f), Rounding::kNearestTiesTowardZero), i + 1);
  }
  EXPECT_EQ(encode_e2m1(7.0f, Rounding::kNearestEven), 0x7);  // saturates
  EXPECT_EQ(encode_e2m1(-INFINITY, Rounding::kNearestEven), 0xF);
  EXPECT_EQ(encode_e2m1(NAN, Rounding::kNearestEven), 0x7);  // NVIDIA: NaN -> +6
}

TEST(Ue8m0, CeilFromExponentBits) {
  EXPECT_EQ(encode_ue8m0_ceil(1.0f), 127);
  EXPECT_EQ(encode_ue8m0_ceil(std::nextafter(1.0f, 2.0f)), 128);  // just above: next power
  EXPECT_EQ(encode_ue8m0_ceil(0.75f), 127);                        // 2^-1 < 0.75 <= 2^0
  EXPECT_EQ(decode_ue8m0(127 - 22), 0x1p-22f);
  EXPECT_EQ(decode_ue8m0(0), 0x1p-127f);  // fp32 subnormal, exact
  EXPECT_TRUE(std::isnan(decode_ue8m0(0xFF)));
}

}  // namespace
}  // namespace dsaf::ref
