// File: ue8m0.h
// UE8M0: an unsigned 8-bit power-of-two scale, the OCP MX "E8M0" shared scale.
// Byte e encodes 2^(e - 127); 0xFF is NaN; there is no zero and no sign.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "reference/numeric/bit_cast.h"

namespace dsaf::ref {

inline constexpr uint8_t kUe8m0Nan = 0xFF;

inline float decode_ue8m0(uint8_t code) {
  if (code == kUe8m0Nan) return std::numeric_limits<float>::quiet_NaN();
  // 2^-127 is an fp32 subnormal; ldexp represents it exactly.
  return std::ldexp(1.0f, static_cast<int>(code) - 127);
}

// encode_ue8m0_ceil(s): the smallest power of two >= s, for positive normal fp32 s,
// read from the exponent bits: biased exponent + (fraction != 0). This is DeepSeek's
// fast_log2_ceil / SGLang's cast_to_ue8m0 (docs/numerics.md §2.6, §6.2). Subnormal s reads as
// exponent field 0 and maps to 2^-127 or 2^-126; callers floor amax so this never occurs.
inline uint8_t encode_ue8m0_ceil(float s) {
  const uint32_t bits = float_bits(s);
  const uint32_t biased = (bits >> 23) & 0xFF;
  const uint32_t fraction = bits & 0x7F'FFFF;
  return static_cast<uint8_t>(biased + (fraction != 0 ? 1 : 0));
}

}  // namespace dsaf::ref
