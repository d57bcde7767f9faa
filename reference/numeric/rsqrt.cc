// File: rsqrt.cc — exact fp32 reciprocal square root and the sm_90 rsqrtf model.
#include "reference/numeric/rsqrt.h"

#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "reference/error.h"
#include "reference/numeric/bit_cast.h"
#include "reference/numeric/rsqrt_table.h"

namespace dsaf::ref {
namespace {

__extension__ typedef unsigned __int128 u128;  // 75-bit exact products

// Splits positive finite x into x = reduced * 4^k with reduced in [1, 4), returned as
// its 24-bit-fraction integer: reduced = mantissa * 2^-23, mantissa in [2^23, 2^25).
void reduce_to_1_4(float x, uint32_t& mantissa, int& k) {
  uint32_t bits = float_bits(x);
  int exponent = static_cast<int>(bits >> 23) - 127;
  uint32_t significand = bits & 0x7F'FFFF;
  if ((bits >> 23) == 0) {  // subnormal: normalise
    exponent = -126;
    while ((significand & 0x80'0000) == 0) {
      significand <<= 1;
      --exponent;
    }
    significand &= 0x7F'FFFF;
  }
  significand |= 0x80'0000;  // 24-bit, value significand * 2^(exponent - 23)
  // Make the exponent even: x = (significand * 2^(e mod 2)) * 2^-23 * 4^(floor(e/2)).
  const int parity = ((exponent % 2) + 2) % 2;
  mantissa = significand << parity;
  k = (exponent - parity) / 2;
}

// Index of the reduced value in the [1, 4) table.
uint32_t table_index(uint32_t mantissa) {
  return mantissa < (uint32_t{1} << 24) ? mantissa - (uint32_t{1} << 23)
                                        : (uint32_t{1} << 23) + ((mantissa - (uint32_t{1} << 24)) >> 1);
}

std::unique_ptr<std::vector<int8_t>>& sm90_deltas() {
  static std::unique_ptr<std::vector<int8_t>> deltas;
  return deltas;
}

// The committed table, loaded once on first use unless one was installed explicitly.
const std::vector<int8_t>& sm90_model() {
  static std::once_flag loaded;
  std::call_once(loaded, [] {
    if (!sm90_deltas()) set_sm90_rsqrt_deltas(load_sm90_rsqrt_deltas(default_sm90_rsqrt_table_path()));
  });
  return *sm90_deltas();
}

}  // namespace

float rsqrt_correctly_rounded(float x) {
  if (std::isnan(x)) return x;
  if (x == 0.0f) return std::copysign(std::numeric_limits<float>::infinity(), x);
  if (x < 0.0f) return std::numeric_limits<float>::quiet_NaN();
  if (std::isinf(x)) return 0.0f;
  uint32_t mantissa;
  int k;
  reduce_to_1_4(x, mantissa, k);
  // r = 1/sqrt(mantissa * 2^-23) lies in (1/2, 1]. As a float in [1/2, 1) it is
  // y * 2^-24 with y in [2^23, 2^24). r * 2^24 = sqrt(2^71 / mantissa), so
  // y = floor(sqrt(2^71 / mantissa)) is the largest y with y^2 * mantissa <= 2^71.
  const u128 target = u128{1} << 71;
  uint64_t y = static_cast<uint64_t>(std::sqrt(std::ldexp(1.0, 71) / mantissa));
  while (u128{y} * y * mantissa > target) --y;
  while (u128{y + 1} * (y + 1) * mantissa <= target) ++y;
  // Round to nearest: up iff r exceeds the midpoint y + 1/2, i.e.
  // (2y + 1)^2 * mantissa < 2^73. Equality would need mantissa = 2^73 / odd^2, which
  // no 25-bit mantissa > 1 satisfies, so there are no ties.
  const u128 twice_mid = 2 * u128{y} + 1;
  if (twice_mid * twice_mid * mantissa < (u128{1} << 73)) ++y;
  return std::ldexp(static_cast<float>(y), -24 - k);  // y <= 2^24: exact
}

void set_sm90_rsqrt_deltas(std::vector<int8_t> deltas) {
  if (deltas.size() != kRsqrtTableSize) {
    throw Error(ErrorKind::kBadInput,
                "sm90 rsqrt table: expected " + std::to_string(kRsqrtTableSize) +
                    " entries, got " + std::to_string(deltas.size()));
  }
  sm90_deltas() = std::make_unique<std::vector<int8_t>>(std::move(deltas));
}

bool has_sm90_rsqrt_model() { return sm90_deltas() != nullptr; }

float rsqrt(float x, RsqrtKind kind) {
  const float rounded = rsqrt_correctly_rounded(x);
  if (kind == RsqrtKind::kCorrectlyRounded) return rounded;
  const std::vector<int8_t>& deltas = sm90_model();
  // Measured special cases: +-0 -> +-inf and +inf -> +0 as IEEE; every NaN and every
  // negative input gives the canonical NaN 0x7fffffff.
  if (std::isnan(x) || (x < 0.0f)) return float_from_bits(0x7FFF'FFFFu);
  if (x == 0.0f || std::isinf(x)) return rounded;
  uint32_t mantissa;
  int k;
  reduce_to_1_4(x, mantissa, k);
  const int delta = deltas[table_index(mantissa)];
  // rsqrtf(x) = rsqrtf(reduced) * 2^-k (measured for every reduced and k). The deltas
  // are steps of the result's bit pattern; all results of [1, 4) lie in (1/2, 1].
  const float reduced = std::ldexp(rounded, k);
  const float stepped = float_from_bits(float_bits(reduced) + delta);
  return std::ldexp(stepped, -k);
}

}  // namespace dsaf::ref
