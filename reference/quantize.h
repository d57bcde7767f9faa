// File: quantize.h
// Storage of one 128-value head: per-block scale rules and the value codecs.
//
// Scale of a block (QuantSpec in recipe.h; docs/numerics.md §2.6, §5.3, §6.2, §7.1, §8):
//   amax  = max(max_i |x_i|, amax_floor)
//   raw   = amax / qmax                  (ScaleDivisor::kDivide)
//         = amax * fl(1 / qmax)          (ScaleDivisor::kTimesReciprocal)
//   scale = raw                                          (ScalePow2::kNone)
//         = 2^(exponent(raw) + (fraction(raw) != 0))     (kExponentBitsCeil, bit trick)
//         = exp2f(ceilf(log2f(raw)))                     (kLog2Ceil, log2f correctly rounded)
//   qmax = 448 (e4m3fn) or 6 (e2m1).
// Values:  v_i = x_i / scale  or  x_i * fl(1 / scale)   (ScaleApply), then encoded.
//   fp8:  one e4m3fn byte per value + the fp32 scale (block 128 only: one per token)
//   fp4:  one e2m1 nibble per value, two per byte (element 2i in the low nibble), +
//         one ue8m0 byte per block of 32; the scale must be a power of two; a code of
//         magnitude 0 keeps the value's sign or is +0 (QuantSpec::fp4_zero_sign)
//   bf16 / fp32: the value rounded to the format, no scale
//   fp4-simulated bf16: bf16(decode(e2m1(x / s)) * s), the DeepSeek V4 reference
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "reference/recipe.h"

namespace dsaf::ref {

// One stored head.
struct StoredHead {
  StorageFormat format = StorageFormat::kNone;
  // The bytes a cache holds for this head, little-endian: fp8 128, fp4 64, bf16 256,
  // fp32 512; empty for kNone.
  std::vector<uint8_t> value_bytes;
  // fp8: the fp32 scale (4 bytes); fp4: one ue8m0 byte per block of 32; else empty.
  std::vector<uint8_t> scale_bytes;
  // The numbers that enter the score dot product: decoded codes for fp8 (unscaled;
  // the scale is applied after the dot, as DeepGEMM does), code * 2^e for fp4 (exact),
  // the stored value otherwise. Held in fp64, which represents every fp32 exactly.
  std::array<double, kHeadDim> dot_values{};
  // The multiplier applied after the dot: the fp8 scale, else 1.
  double dot_scale = 1.0;
};

// The scale before power-of-two rounding: max(amax, floor) / qmax or * fl(1/qmax).
float raw_scale(float amax, const QuantSpec& spec, float qmax);
// The scale of a block whose largest magnitude is `amax`, for format qmax.
float block_scale(float amax, const QuantSpec& spec, float qmax);

// log2f(x) correctly rounded to fp32 (x > 0, finite), for the kLog2Ceil rule.
float log2_correctly_rounded(float x);

// From this mantissa (the 23 fraction bits of a normal raw scale) up, kLog2Ceil equals the
// exponent bits' ceiling: the two differ only where log2(raw) rounds down onto an integer,
// at mantissas of at most 22 (tests/reference/scale_test.cc, Ue8m0Variants). The device
// kernels take the logarithm below it only.
inline constexpr uint32_t kLog2CeilMantissasBelow = 32;

// Quantises one head (128 values of the compute type). NaN/Inf inputs are rejected
// with dsaf::Error(kBadInput): the caller sees bad input, never a silent NaN code.
template <class T>
StoredHead store_head(const T* x, const QuantSpec& spec);

// Rebuilds the StoredHead of a head from its bytes (the inverse of the byte part of
// store_head), e.g. after reading a paged cache.
StoredHead load_head(StorageFormat format, const uint8_t* value_bytes,
                     const uint8_t* scale_bytes);

// Bytes per head in a cache: values and scales.
int value_bytes_per_head(StorageFormat format);
int scale_bytes_per_head(StorageFormat format);

}  // namespace dsaf::ref
