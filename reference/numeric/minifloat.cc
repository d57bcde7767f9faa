// File: minifloat.cc — the generic fp32 <-> narrow-float codec (see minifloat.h).
#include "reference/numeric/minifloat.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/numeric/bit_cast.h"

namespace dsaf::ref {
namespace {

// Rounds the unsigned integer `value / 2^shift` to an integer, to nearest with the
// given tie rule. With the bit pattern  Q...Q R S...S  (R = first dropped bit, S = the
// rest), the quotient rounds up when R=1 and (any S=1, or the tie rule says so).
uint64_t round_shift_right(uint64_t value, int shift, Rounding rounding) {
  if (shift == 0) return value;
  if (shift > 63) return 0;  // value < 2^25 here, so value / 2^shift < 1/2
  const uint64_t quotient = value >> shift;
  const uint64_t dropped = value & ((uint64_t{1} << shift) - 1);
  const uint64_t half = uint64_t{1} << (shift - 1);
  if (dropped > half) return quotient + 1;
  if (dropped < half) return quotient;
  // An exact tie.
  if (rounding == Rounding::kNearestEven) return quotient + (quotient & 1);
  return quotient;  // kNearestTiesTowardZero (magnitudes are rounded here)
}

}  // namespace

template <class Traits>
typename Traits::Code encode(float x, Saturation saturation, Rounding rounding) {
  using Code = typename Traits::Code;
  constexpr int kM = Traits::kMantissaBits;
  constexpr int kBias = Traits::kExponentBias;
  constexpr int kSignShift = Traits::kExponentBits + kM;
  const uint32_t bits = float_bits(x);
  const Code sign = static_cast<Code>((bits >> 31) << kSignShift);
  const uint32_t abs_bits = bits & 0x7FFF'FFFFu;

  // 1. Non-finite inputs.
  if (abs_bits > 0x7F80'0000u) {  // NaN
    return Traits::kCanonicalNan;
  }
  const auto overflow_code = [&]() -> Code {
    if (saturation == Saturation::kSatFinite) return sign | Traits::kMaxFinite;
    if constexpr (Traits::kHasInf) return sign | Traits::kInf;
    return sign | Traits::kCanonicalNan;
  };
  if (abs_bits == 0x7F80'0000u) return overflow_code();
  if (abs_bits == 0) return sign;

  // 2. Write |x| = significand * 2^exponent with an integer significand of <= 24 bits.
  const int biased = static_cast<int>(abs_bits >> 23);
  const uint32_t fraction = abs_bits & 0x7F'FFFFu;
  const uint64_t significand = biased == 0 ? fraction : (fraction | 0x80'0000u);
  const int exponent = (biased == 0 ? 1 : biased) - 127 - 23;

  // 3. floor(log2|x|): the position of the leading one.
  int leading = 23;
  while (((significand >> leading) & 1) == 0) --leading;
  const int log2_floor = exponent + leading;

  // 4. The target's quantum (one unit in the last place) at that magnitude: normals
  //    have kM fraction bits; below the smallest normal, 2^(1-bias), the quantum stays
  //    that of the smallest binade (subnormals).
  const int target_exponent = std::max(log2_floor, 1 - kBias);
  const int quantum_exponent = target_exponent - kM;
  // Every format here has a coarser quantum than fp32 at the same magnitude
  // (bf16 subnormals: 2^-133 vs 2^-149), so the shift is never negative.
  const int shift = quantum_exponent - exponent;
  uint64_t units = round_shift_right(significand, shift, rounding);  // |x| ~ units * 2^q

  // 5. Assemble. `units` < 2^kM only in the subnormal binade; == 2^(kM+1) when the
  //    rounding carried into the next binade.
  int field_exponent;
  if (units < (uint64_t{1} << kM)) {
    field_exponent = 0;
  } else {
    int q = quantum_exponent;
    if (units == (uint64_t{1} << (kM + 1))) {
      units >>= 1;
      ++q;
    }
    field_exponent = q + kM + kBias;
    units -= uint64_t{1} << kM;
  }
  // 6. Overflow: codes are ordered by magnitude, so anything past the largest finite
  //    code (or an exponent field beyond the format) overflowed.
  const uint64_t magnitude = (static_cast<uint64_t>(field_exponent) << kM) | units;
  if (field_exponent >= (1 << Traits::kExponentBits) || magnitude > Traits::kMaxFinite) {
    return overflow_code();
  }
  return static_cast<Code>(sign | magnitude);
}

template <class Traits>
float decode(typename Traits::Code code) {
  constexpr int kM = Traits::kMantissaBits;
  constexpr int kSignShift = Traits::kExponentBits + kM;
  constexpr uint32_t kMagnitudeMask = (1u << kSignShift) - 1;
  const bool negative = (code >> kSignShift) & 1;
  const uint32_t magnitude = code & kMagnitudeMask;
  const int field_exponent = static_cast<int>(magnitude >> kM);
  const uint32_t mantissa = magnitude & ((1u << kM) - 1);
  float value;
  if constexpr (Traits::kHasInf) {
    if (magnitude == Traits::kInf) return negative ? -INFINITY : INFINITY;
  }
  if (Traits::kHasNan && magnitude > Traits::kMaxFinite) {
    value = std::numeric_limits<float>::quiet_NaN();
  } else if (field_exponent == 0) {  // subnormal: mantissa * 2^(1 - bias - kM)
    value = std::ldexp(static_cast<float>(mantissa), 1 - Traits::kExponentBias - kM);
  } else {  // normal: (2^kM + mantissa) * 2^(e - bias - kM)
    value = std::ldexp(static_cast<float>((1u << kM) | mantissa),
                       field_exponent - Traits::kExponentBias - kM);
  }
  return negative ? -value : value;
}

template uint16_t encode<Bf16Traits>(float, Saturation, Rounding);
template uint8_t encode<E4m3fnTraits>(float, Saturation, Rounding);
template uint8_t encode<E2m1Traits>(float, Saturation, Rounding);
template float decode<Bf16Traits>(uint16_t);
template float decode<E4m3fnTraits>(uint8_t);
template float decode<E2m1Traits>(uint8_t);

}  // namespace dsaf::ref
