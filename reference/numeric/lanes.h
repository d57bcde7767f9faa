// File: lanes.h
// Lanes<T>: a pack of independent T values (16 fp32 or 8 fp64: 64 bytes, one AVX-512
// register) on which every operation is the scalar operation applied lane by lane, with
// the scalar rounding: IEEE +, -, *, / and fma are correctly rounded whatever the vector
// width, so lane j of a result has the bits the scalar code gives for lane j's operands.
// The reference's stage templates (stage_arithmetic.h) run on it unchanged, which is how
// the batch key path (pipeline.h, run_key_paths) computes 16 tokens at once with the
// bits of 16 scalar runs. Nothing here reorders or fuses: there is no horizontal
// operation, and fma is only what the caller writes as fma.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "reference/numeric/minifloat.h"
#include "reference/numeric/rsqrt.h"

// The code that runs on lanes is compiled three times, for AVX-512, for AVX2 + FMA and for
// baseline x86-64, and the loader picks the widest the CPU has (GCC target_clones): the
// lanes are wider, the operation on each lane the same (-ffp-contract=off holds in every
// clone, so no clone fuses what the source does not).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define DSAF_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DSAF_VECTOR_CLONES
#endif

namespace dsaf::ref {

// The 64-byte GCC vectors of a lane type: values, and their bits as unsigned integers.
template <class T>
struct LaneVectors;
template <>
struct LaneVectors<float> {
  typedef float Values __attribute__((vector_size(64)));
  typedef uint32_t Bits __attribute__((vector_size(64)));
};
template <>
struct LaneVectors<double> {
  typedef double Values __attribute__((vector_size(64)));
  typedef uint64_t Bits __attribute__((vector_size(64)));
};

template <class T>
struct Lanes {
  using Vector = typename LaneVectors<T>::Values;
  static constexpr int kCount = 64 / sizeof(T);

  Vector v;

  Lanes() = default;
  // Broadcast: every lane holds static_cast<T>(s), as `T(s)` does in the scalar code.
  template <class S, std::enable_if_t<std::is_arithmetic_v<S>, int> = 0>
  explicit Lanes(S s) {
    for (int j = 0; j < kCount; ++j) v[j] = static_cast<T>(s);
  }
  static Lanes of(Vector x) {
    Lanes out;
    out.v = x;
    return out;
  }

  T operator[](int j) const { return v[j]; }
  void set(int j, T x) { v[j] = x; }

  friend Lanes operator+(Lanes a, Lanes b) { return of(a.v + b.v); }
  friend Lanes operator-(Lanes a, Lanes b) { return of(a.v - b.v); }
  friend Lanes operator*(Lanes a, Lanes b) { return of(a.v * b.v); }
  friend Lanes operator/(Lanes a, Lanes b) { return of(a.v / b.v); }
  friend Lanes operator-(Lanes a) { return of(-a.v); }
};

using Fp32Lanes = Lanes<float>;
using Fp64Lanes = Lanes<double>;

// Unsigned integers of the width of T, one per lane (for bit manipulation).
template <class T>
using LaneBits = typename LaneVectors<T>::Bits;

template <class T>
inline LaneBits<T> lane_bits(Lanes<T> x) {
  LaneBits<T> bits;
  std::memcpy(&bits, &x.v, sizeof(bits));
  return bits;
}
template <class T>
inline Lanes<T> lanes_from_bits(LaneBits<T> bits) {
  Lanes<T> x;
  std::memcpy(&x.v, &bits, sizeof(bits));
  return x;
}

// std::fma lane by lane (one rounding per lane, as the scalar call).
template <class T>
inline Lanes<T> fma(Lanes<T> a, Lanes<T> b, Lanes<T> c) {
  Lanes<T> out;
  for (int j = 0; j < Lanes<T>::kCount; ++j) out.v[j] = std::fma(a.v[j], b.v[j], c.v[j]);
  return out;
}

// |x|: the sign bit cleared, as std::fabs.
template <class T>
inline Lanes<T> abs(Lanes<T> x) {
  using Bit = std::conditional_t<std::is_same_v<T, float>, uint32_t, uint64_t>;
  constexpr Bit kMagnitude = ~Bit{0} >> 1;
  return lanes_from_bits<T>(lane_bits(x) & kMagnitude);
}

// a > b ? a : b lane by lane (the reference's running maximum; no NaN reaches it).
template <class T>
inline Lanes<T> greater_of(Lanes<T> a, Lanes<T> b) {
  return Lanes<T>::of(a.v > b.v ? a.v : b.v);
}

// Lane tests are written as integer arithmetic, not as vector comparisons: GCC 12 moves
// the mask of a 64-byte comparison into the lanes one at a time. For unsigned a, b < 2^31,
// (b - a) >> 31 is 1 exactly when a > b.
template <class T>
inline LaneBits<T> is_greater(LaneBits<T> a, LaneBits<T> b) {
  return (b - a) >> (8 * sizeof(T) - 1);
}

// Whether any lane of a 0/1 test is 1 (an OR over the lanes without an early exit).
template <class Bits>
inline bool any_lane(Bits test) {
  auto any = test[0];
  for (int j = 1; j < static_cast<int>(sizeof(Bits) / sizeof(test[0])); ++j) any |= test[j];
  return any != 0;
}

// Whether every lane of x is finite.
inline bool all_finite(Fp32Lanes x) {
  // The exponent field is all ones exactly when adding one at its lowest bit carries out.
  return !any_lane((((lane_bits(x) & 0x7F80'0000u) + 0x0080'0000u) >> 31));
}
inline bool all_finite(Fp64Lanes x) {
  for (int j = 0; j < Fp64Lanes::kCount; ++j) {
    if (!std::isfinite(x.v[j])) return false;
  }
  return true;
}

// round_bf16 lane by lane (minifloat.h): a NaN becomes the canonical +quiet NaN, every
// other value rounds its low 16 bits away to nearest even, the carry running into the
// exponent.
inline Fp32Lanes round_bf16(Fp32Lanes x) {
  const LaneBits<float> bits = lane_bits(x);
  const LaneBits<float> rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF'0000u;
  const LaneBits<float> nan = LaneBits<float>{} - is_greater<float>(bits & 0x7FFF'FFFFu, LaneBits<float>{} + 0x7F80'0000u);
  return lanes_from_bits<float>((rounded & ~nan) | (float_bits(kQuietNan) & nan));
}

// encode_e4m3fn lane by lane (minifloat.h), one code per lane: magnitudes in the normal
// range [2^-6, 448] take the shortcut on all lanes at once, any other lane the scalar
// encoder.
inline LaneBits<float> encode_e4m3fn(Fp32Lanes x, Saturation saturation) {
  const LaneBits<float> bits = lane_bits(x);
  const LaneBits<float> magnitude = bits & 0x7FFF'FFFFu;
  const LaneBits<float> rounded = (magnitude + 0x7'FFFFu + ((magnitude >> 20) & 1u)) >> 20;
  LaneBits<float> codes = ((bits >> 24) & 0x80u) | (rounded - ((127u - 7u) << 3));
  const LaneBits<float> outside = is_greater<float>(LaneBits<float>{} + 0x3C80'0000u, magnitude) |
                                  is_greater<float>(magnitude, LaneBits<float>{} + 0x43E0'0000u);
  if (!any_lane(outside)) return codes;
  for (int j = 0; j < Fp32Lanes::kCount; ++j) {
    if (outside[j] != 0) codes[j] = encode_e4m3fn(x[j], saturation);
  }
  return codes;
}

// decode_e4m3fn lane by lane (one code per lane): a normal code's fields move into fp32's
// (exponent rebiased by 127 - 7), any other code (zero, subnormal, NaN) reads the scalar
// decoder's table.
inline Fp32Lanes decode_e4m3fn(LaneBits<float> codes) {
  const LaneBits<float> normal_bits = ((codes & 0x80u) << 24) | (((codes & 0x7Fu) << 20) + ((127u - 7u) << 23));
  Fp32Lanes values = lanes_from_bits<float>(normal_bits);
  // Exponent field 0 (zero, subnormal): (field - 1) wraps to bit 31; 0x7F: +1 carries to bit 7.
  const LaneBits<float> special = ((((codes >> 3) & 0xFu) - 1u) >> 31) | ((((codes & 0x7Fu) + 1u) >> 7) & 1u);
  if (!any_lane(special)) return values;
  for (int j = 0; j < Fp32Lanes::kCount; ++j) {
    if (special[j] != 0) values.set(j, decode_e4m3fn(static_cast<uint8_t>(codes[j])));
  }
  return values;
}

// rsqrt lane by lane (one call per token, so scalar).
inline Fp32Lanes rsqrt(Fp32Lanes x, RsqrtKind kind) {
  Fp32Lanes out;
  for (int j = 0; j < Fp32Lanes::kCount; ++j) out.v[j] = rsqrt(x.v[j], kind);
  return out;
}

}  // namespace dsaf::ref
