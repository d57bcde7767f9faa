// File: lanes_test.cc — the lane-wise codecs and tests of numeric/lanes.h against the
// scalar ones they stand for (minifloat.h), on fp32 bit patterns that reach every branch:
// a stride through all 2^32 patterns (every exponent, both signs, NaN payloads) plus the
// neighbours of each format's boundaries, and all 256 e4m3fn codes.
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "reference/numeric/lanes.h"
#include "reference/numeric/minifloat.h"

namespace dsaf::ref {
namespace {

// Bit patterns: every 257th of the 2^32 (a stride prime to every field width) and +-1 ulp
// around the boundaries the lane code branches on.
std::vector<uint32_t> probe_patterns() {
  std::vector<uint32_t> bits;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 257) bits.push_back(static_cast<uint32_t>(b));
  for (uint32_t edge : {0x0000'0000u, 0x3C80'0000u, 0x43E0'0000u, 0x43E8'0000u, 0x7F7F'FFFFu, 0x7F80'0000u,
                        0x7F80'0001u, 0x7FC0'0000u, 0x7FFF'FFFFu, 0x3B00'0000u, 0x0080'0000u}) {
    for (uint32_t sign : {0u, 0x8000'0000u}) {
      for (int64_t d = -2; d <= 2; ++d) bits.push_back(static_cast<uint32_t>((edge | sign) + d));
    }
  }
  while (bits.size() % Fp32Lanes::kCount != 0) bits.push_back(0);
  return bits;
}

Fp32Lanes lanes_at(const std::vector<uint32_t>& bits, size_t first) {
  Fp32Lanes x;
  for (int j = 0; j < Fp32Lanes::kCount; ++j) x.set(j, float_from_bits(bits[first + j]));
  return x;
}

TEST(Lanes, RoundBf16IsTheScalarRounding) {
  const std::vector<uint32_t> bits = probe_patterns();
  int64_t mismatches = 0;
  for (size_t first = 0; first < bits.size(); first += Fp32Lanes::kCount) {
    const Fp32Lanes got = round_bf16(lanes_at(bits, first));
    for (int j = 0; j < Fp32Lanes::kCount; ++j) {
      mismatches += float_bits(got[j]) != float_bits(round_bf16(float_from_bits(bits[first + j])));
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Lanes, EncodeE4m3fnIsTheScalarEncoder) {
  const std::vector<uint32_t> bits = probe_patterns();
  for (Saturation saturation : {Saturation::kSatFinite, Saturation::kNonSaturating}) {
    int64_t mismatches = 0;
    for (size_t first = 0; first < bits.size(); first += Fp32Lanes::kCount) {
      const LaneBits<float> got = encode_e4m3fn(lanes_at(bits, first), saturation);
      for (int j = 0; j < Fp32Lanes::kCount; ++j) {
        mismatches += got[j] != encode_e4m3fn(float_from_bits(bits[first + j]), saturation);
      }
    }
    EXPECT_EQ(mismatches, 0) << (saturation == Saturation::kSatFinite ? "satfinite" : "non-saturating");
  }
}

TEST(Lanes, DecodeE4m3fnIsTheScalarDecoderForEveryCode) {
  for (uint32_t first = 0; first < 256; first += Fp32Lanes::kCount) {
    LaneBits<float> codes;
    for (int j = 0; j < Fp32Lanes::kCount; ++j) codes[j] = first + j;
    const Fp32Lanes got = decode_e4m3fn(codes);
    for (int j = 0; j < Fp32Lanes::kCount; ++j) {
      EXPECT_EQ(float_bits(got[j]), float_bits(decode_e4m3fn(static_cast<uint8_t>(first + j)))) << "code " << first + j;
    }
  }
}

TEST(Lanes, FiniteTestAndComparisonsMatchTheScalarOnes) {
  const std::vector<uint32_t> bits = probe_patterns();
  int64_t mismatches = 0;
  for (size_t first = 0; first < bits.size(); first += Fp32Lanes::kCount) {
    const Fp32Lanes x = lanes_at(bits, first);
    bool all = true;
    for (int j = 0; j < Fp32Lanes::kCount; ++j) all = all && std::isfinite(x[j]);
    mismatches += all_finite(x) != all;
    const LaneBits<float> magnitude = lane_bits(x) & 0x7FFF'FFFFu;
    const LaneBits<float> above = is_greater<float>(magnitude, LaneBits<float>{} + 0x3F80'0000u);
    for (int j = 0; j < Fp32Lanes::kCount; ++j) mismatches += above[j] != (magnitude[j] > 0x3F80'0000u ? 1u : 0u);
  }
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace dsaf::ref
