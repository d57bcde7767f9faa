// File: minifloat.h
// One generic codec between fp32 and the narrow float formats the indexer uses:
//   bf16      (1.8.7,  bias 127, IEEE inf/NaN)              — "brain float"
//   e4m3fn    (1.4.3,  bias 7, no inf, NaN = S.1111.111)     — OCP OFP8 E4M3 ("fn" = finite + NaN)
//   e2m1      (1.2.1,  bias 1, no inf, no NaN)               — OCP MX FP4
// Normative references: OCP 8-bit Floating Point Specification (OFP8) rev 1.0;
// OCP Microscaling Formats (MX) v1.0 §5.3.3; PTX ISA "cvt" (rn, satfinite).
//
// The codec is driven by Traits (as ml_dtypes' float8.h is): the formats differ only in
// their field widths and in what they do with values beyond the largest finite one.
// It is exact: every finite narrow code decodes to an fp32 value exactly, and the
// encoder rounds the exact fp32 value once (no double rounding through fp64).
#pragma once

#include <cstdint>
#include <limits>

#include "reference/numeric/bit_cast.h"

namespace dsaf::ref {

// What an encoder does with a finite value that rounds beyond the largest finite
// code, and with an infinite input. kSatFinite clamps to ±max finite, as PTX
// `cvt.rn.satfinite` and `__NV_SATFINITE` do; kNonSaturating gives inf where the
// format has one, else NaN (ml_dtypes' default, torch's `.to(float8_e4m3fn)`).
enum class Saturation : uint8_t { kSatFinite, kNonSaturating };

// Rounding of the fp32 significand to the narrow one.
// kNearestEven: IEEE round-to-nearest, ties to even (hardware cvt.rn).
// kNearestTiesTowardZero: nearest, ties toward zero. This is what SGLang's fp4 encoder
// does by comparing |x| against the midpoints {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5}
// with a strict `>` (docs/numerics.md §6.2).
enum class Rounding : uint8_t { kNearestEven, kNearestTiesTowardZero };

inline constexpr float kQuietNan = std::numeric_limits<float>::quiet_NaN();

struct Bf16Traits {
  using Code = uint16_t;
  static constexpr int kExponentBits = 8;
  static constexpr int kMantissaBits = 7;
  static constexpr int kExponentBias = 127;
  static constexpr bool kHasInf = true;
  static constexpr bool kHasNan = true;
  static constexpr Code kMaxFinite = 0b0'11111110'1111111;  // (2 - 2^-7) * 2^127
  static constexpr Code kInf = 0b0'11111111'0000000;
  // The canonical NaN that PTX cvt.rn.bf16.f32 and the host path of
  // __float2bfloat16_rn return for every NaN input (payload and sign are dropped).
  static constexpr Code kCanonicalNan = 0x7FFF;
};

struct E4m3fnTraits {
  using Code = uint8_t;
  static constexpr int kExponentBits = 4;
  static constexpr int kMantissaBits = 3;
  static constexpr int kExponentBias = 7;
  static constexpr bool kHasInf = false;
  static constexpr bool kHasNan = true;
  // (1 + 0b110 * 2^-3) * 2^(0b1111 - 7) = 1.75 * 2^8 = 448; 0b1111'111 is NaN.
  static constexpr Code kMaxFinite = 0b0'1111'110;
  static constexpr Code kCanonicalNan = 0b0'1111'111;  // sign dropped, as NVIDIA's cvt does
};

struct E2m1Traits {
  using Code = uint8_t;  // the low 4 bits hold the code
  static constexpr int kExponentBits = 2;
  static constexpr int kMantissaBits = 1;
  static constexpr int kExponentBias = 1;
  static constexpr bool kHasInf = false;
  static constexpr bool kHasNan = false;
  // (1 + 0b1 * 2^-1) * 2^(0b11 - 1) = 1.5 * 4 = 6. The grid is {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
  static constexpr Code kMaxFinite = 0b0'11'1;
  static constexpr Code kCanonicalNan = kMaxFinite;  // NaN -> +6, as cvt.satfinite.e2m1 does
};

// encode<Traits>(x, saturation, rounding) -> code. NaN inputs follow NVIDIA's fp32
// conversions (cuda_bf16.hpp, cuda_fp8.hpp, cuda_fp4.hpp host paths), which first
// canonicalise every NaN to +NaN: bf16 gives 0x7FFF, e4m3fn 0x7F (0.1111.111), and e2m1,
// which has no NaN, +6 (0.11.1). The pipeline rejects NaN inputs before any codec.
template <class Traits>
typename Traits::Code encode(float x, Saturation saturation,
                             Rounding rounding = Rounding::kNearestEven);

// decode<Traits>(code) -> the exact fp32 value of the code.
template <class Traits>
float decode(typename Traits::Code code);

// Named entry points (what the rest of the reference calls). bf16 and the byte codes take
// shortcuts that give the generic codec's results bit for bit (minifloat_test compares
// them: every bf16 and byte code, and every fp32 exponent with each rounding case of the
// low half; selftest compares the named encoders with NVIDIA's over all 2^32 inputs):
// - bf16 shares fp32's sign and exponent fields, so at every finite magnitude the
//   generic encoder's quantum is 2^16 fp32 quanta (shift = 16, subnormals included):
//   encoding is round_shift_right(bits, 16) to nearest even, and the carry of the
//   integer add runs into the exponent field exactly as the generic step 5 renormalises
//   (up to 0x7F80, +inf, past the largest finite value: non-saturating). NaNs are
//   canonicalised first, as the generic step 1 does.
// - Decoding a finite or infinite bf16 code is the code in the top half of an fp32; a
//   NaN code decodes to the generic codec's quiet NaN with the code's sign.
// - e4m3fn values of magnitude in [2^-6, 448] (its normal range up to the largest finite
//   value) have 3 fraction bits where fp32 has 23, so the generic quantum is 2^20 fp32
//   quanta: the code is round_shift_right(|bits|, 20) to nearest even, with the carry
//   into the exponent as in bf16, minus the bias difference (127 - 7) << 3. A magnitude
//   <= 448 never rounds past 448 (0x7E). Every other input takes the generic encoder.
// - Decoding a byte code (e4m3fn, e2m1) reads a table the generic decoder filled.
inline uint16_t encode_bf16(float x) {
  const uint32_t bits = float_bits(x);
  if ((bits & 0x7FFF'FFFFu) > 0x7F80'0000u) return Bf16Traits::kCanonicalNan;
  const uint32_t round_half_even = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + round_half_even) >> 16);
}
inline float decode_bf16(uint16_t code) {
  if ((code & 0x7FFFu) > Bf16Traits::kInf) return (code & 0x8000u) != 0 ? -kQuietNan : kQuietNan;
  return float_from_bits(static_cast<uint32_t>(code) << 16);
}
// round_bf16(x): x rounded to the nearest bf16 value (ties to even), returned as fp32.
inline float round_bf16(float x) { return decode_bf16(encode_bf16(x)); }

// The generic decoder's value of every code of a byte format, filled on first use.
template <class Traits>
inline const float* decode_table() {
  static const struct Table {
    float values[256];
    Table() {
      for (int code = 0; code < 256; ++code) values[code] = decode<Traits>(static_cast<typename Traits::Code>(code));
    }
  } table;
  return table.values;
}

inline uint8_t encode_e4m3fn(float x, Saturation saturation) {
  const uint32_t bits = float_bits(x);
  const uint32_t magnitude = bits & 0x7FFF'FFFFu;
  constexpr uint32_t kSmallestNormal = 0x3C80'0000u, kLargest = 0x43E0'0000u;  // 2^-6, 448
  if (magnitude < kSmallestNormal || magnitude > kLargest) return encode<E4m3fnTraits>(x, saturation);
  const uint32_t rounded = (magnitude + 0x7'FFFFu + ((magnitude >> 20) & 1u)) >> 20;
  return static_cast<uint8_t>((bits >> 24 & 0x80u) | (rounded - ((127u - 7u) << 3)));
}
inline float decode_e4m3fn(uint8_t code) { return decode_table<E4m3fnTraits>()[code]; }

inline uint8_t encode_e2m1(float x, Rounding rounding) {
  return encode<E2m1Traits>(x, Saturation::kSatFinite, rounding);
}
inline float decode_e2m1(uint8_t code) { return decode_table<E2m1Traits>()[code]; }

}  // namespace dsaf::ref
