// File: quantize.cuh
// A head quantised and written in a storage format (reference/quantize.h, paged_cache.h):
// the scale rules, the e2m1 encoder and store_head. Intrinsics with numeric effect:
// cvt.rn(.satfinite).e4m3x2 (__nv_cvt_float2_to_fp8x2) and cvt.rn.bf16x2.f32
// (__floats2bfloat162_rn); everything else is correctly rounded IEEE arithmetic.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "device/head/head_io.cuh"
#include "reference/quantize.h"
#include "reference/recipe.h"

namespace dsaf::dev {

// max_i |x[first + i]|, i < kCount, from 0: four independent chains (fmaxf is exact and
// order-independent; each chain starts at 0 like the reference's fold, so NaN is skipped
// the same way).
template <int kCount, int kV>
__device__ __forceinline__ float lane_amax(const float (&x)[kV], int first) {
  constexpr int kChains = kCount >= 4 ? 4 : kCount;
  float m[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) m[c] = 0.0f;
#pragma unroll
  for (int i = 0; i < kCount; ++i) m[i % kChains] = fmaxf(m[i % kChains], fabsf(x[first + i]));
#pragma unroll
  for (int c = 1; c < kChains; ++c) m[0] = fmaxf(m[0], m[c]);
  return m[0];
}

// quantize.h scale rules. raw = max(amax, floor) / qmax or * fl(1/qmax); then the power
// of two: exponent bits + (fraction != 0), or ceil of the correctly rounded log2 (fp64
// log2 rounded once to fp32; exact at powers of two).
__device__ __forceinline__ float raw_scale(float amax, const ref::QuantSpec& q, float qmax,
                                           float inv_qmax) {
  const float floored = fmaxf(amax, q.amax_floor);
  return q.divisor == ref::ScaleDivisor::kDivide ? __fdiv_rn(floored, qmax) : __fmul_rn(floored, inv_qmax);
}

// The ue8m0 exponent byte of a power-of-two rule (raw >= 2^-126 by Recipe::validate).
// kLog2Ceil differs from the exponent bits' ceiling only where log2(raw) = n + f, f =
// log2(1 + m 2^-23) ~ m 2^-23 / ln 2 for the mantissa bits m != 0, lies within half an
// fp32 ulp above the integer n (then it rounds to n): f < 2^(j-24) for 2^j <= |n| <
// 2^(j+1) <= 128 (half the spacing below |n| when it is a power of two), so m < ln 2 x
// 2^(j-1) <= 22.2. From ref::kLog2CeilMantissasBelow (32) up the bits decide, and the fp64
// logarithm (about 100 instructions) runs for 31 mantissas in 2^23 only. raw is finite
// here (amax is an fmaxf that never keeps a NaN; the floor is finite).
__device__ __forceinline__ int ue8m0_byte(float raw, ref::ScalePow2 pow2) {
  const unsigned bits = __float_as_uint(raw), mantissa = bits & 0x7F'FFFFu;
  if (pow2 == ref::ScalePow2::kLog2Ceil && mantissa - 1u < ref::kLog2CeilMantissasBelow - 1u) {  // 1 <= m < 32
    const float l = __double2float_rn(log2(static_cast<double>(raw)));
    return static_cast<int>(ceilf(l)) + 127;
  }
  return static_cast<int>((bits >> 23) & 0xFF) + (mantissa != 0 ? 1 : 0);
}

__device__ __forceinline__ float pow2_scale(int byte) { return __uint_as_float(static_cast<unsigned>(byte) << 23); }

// x / scale (kDivide) or x * fl(1/scale) (kTimesReciprocal). `inv` = fl(1/scale) is computed
// once per block; for a power-of-two scale it is exact and x / scale == x * inv, so the
// multiply serves both modes.
__device__ __forceinline__ float apply_scale(float x, float scale, float inv, bool pow2,
                                             ref::ScaleApply apply) {
  return apply == ref::ScaleApply::kDivide && !pow2 ? __fdiv_rn(x, scale) : __fmul_rn(x, inv);
}

// e2m1 through fp32's subnormal grid. Multiplying |v| by 2^-126 lays e2m1's magnitudes on
// fp32 bit patterns that are their codes << 22: 0.5 -> 2^-127 (0x00400000, code 1), 1.0 ->
// 2^-126 (0x00800000, code 2), 1.5 -> 0x00c00000 (3), 2.0 -> 2^-125 (0x01000000, 4), ..,
// 6.0 -> 1.5 x 2^-124 (0x01c00000, 7): below 2^-126 fp32's spacing is uniform as e2m1's is
// below 1, and from there each binade carries one exponent step per two codes as e2m1's
// normals do. So the code of v is the image's bits rounded to a multiple of 2^22: (bits +
// 2^21 - 1) >> 22 rounds ties down (toward zero), and adding the kept bit 22 as well
// rounds them to even. The product is exact from |v| = 1 up; below 1 it rounds to the
// 2^-149 grid (2^-23 in units of v), the one rounding before the code's, and it rounds up:
// a value above a midpoint stays above it and a value at or below one stays at or below
// it, so ties toward zero come out exact. Ties to even do except where the round-up lands a
// value just below a midpoint on it and that midpoint's tie goes up: 0.75 (codes 1 | 2),
// reached only from 0.75 - 2^-24 (the float spacing below 0.75 is half the grid's), taken
// apart; 0.25's tie goes down. min(image, 6 x 2^-126) saturates at 6 (infinities too) and
// takes NaN to 6 (min.f32 returns the number). Seven comparisons against the midpoints and a
// branch per value (the obvious form) take about twice the instructions, rounding the
// unscaled float with a separate path below 1 about twice as many for ties toward zero
// (SASS). tests/device/e2m1_exhaustive_gpu_test.cu checks every float under every rule.
// The image is subnormal: every operation on it is PTX without .ftz (here and in
// e2m1_round), so that no compiler flag (-ftz=true, --use_fast_math) flushes it to zero.
__device__ __forceinline__ unsigned e2m1_magnitude(float v, ref::Rounding rounding) {
  float image_f;
  asm("{ .reg .f32 t; abs.f32 t, %1; mul.rp.f32 t, t, 0f00800000; min.f32 %0, t, 0f01C00000; }"  // 2^-126, 6 x 2^-126
      : "=f"(image_f)
      : "f"(v));
  const unsigned image = __float_as_uint(image_f);
  if (rounding == ref::Rounding::kNearestTiesTowardZero) return (image + 0x1fffffu) >> 22;
  const unsigned to_even = (image + 0x1fffffu + ((image >> 22) & 1u)) >> 22;
  return fabsf(v) == 0x1.7ffffep-1f ? 1u : to_even;  // 0.75 - 2^-24
}

// Whether v's code carries the sign bit (bit 3). kKeep: v's sign bit, on zero codes too (-0
// is 0x8), except on NaN (+6): as signed integers the negative NaNs are the patterns above
// -infinity's (0xff800000). kPositive: only on a non-zero magnitude, which under both tie
// rules is |v| > 0.25 (0.25 itself rounds to 0): v < -0.25, false for NaN.
__device__ __forceinline__ bool e2m1_negative(float v, ref::Fp4ZeroSign zero_sign) {
  return zero_sign == ref::Fp4ZeroSign::kPositive ? v < -0.25f
                                                  : static_cast<int>(__float_as_uint(v)) < static_cast<int>(0xff800001u);
}

// e2m1 code of v: nearest of {0, .5, 1, 1.5, 2, 3, 4, 6}, saturating, ties to the even code
// or toward zero (SGLang's strict '>' against the midpoints), NaN -> +6 (0x7), the sign in
// bit 3 under the recipe's zero-sign rule.
__device__ __forceinline__ unsigned e2m1_code(float v, ref::Rounding rounding, ref::Fp4ZeroSign zero_sign) {
  return e2m1_magnitude(v, rounding) | (e2m1_negative(v, zero_sign) ? 8u : 0u);
}

// The grid value of e2m1_code(v, ..), sign included, for the stages that keep values (the
// fp4-simulated store, the fake quantisation): the magnitude's image (code << 22) times
// +-2^126, exact (2 significant bits, a power of two).
__device__ __forceinline__ float e2m1_round(float v, ref::Rounding rounding, ref::Fp4ZeroSign zero_sign) {
  const float image = __uint_as_float(e2m1_magnitude(v, rounding) << 22);
  const float factor = e2m1_negative(v, zero_sign) ? -0x1p126f : 0x1p126f;
  float value;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(value) : "f"(image), "f"(factor));
  return value;
}

// Value of an e2m1 code: {0, .5, 1, 1.5, 2, 3, 4, 6}; for c >= 2 the bits of (1 + m/2) *
// 2^(e-1) with e = c / 2, m = c % 2 (no table: a runtime index would put it in local memory).
__device__ __forceinline__ float e2m1_value(unsigned code) {
  const unsigned c = code & 7;
  const float mag = c >= 2 ? __uint_as_float((((c >> 1) + 126u) << 23) | ((c & 1u) << 22)) : (c == 1 ? 0.5f : 0.0f);
  return (code & 8) ? -mag : mag;
}

// The fake quantisation's scale byte of block b (of kBlockValues values in this lane, the
// block spread over 32 / V lanes when V < 32): the exponent bits' ceiling of
// max(amax, 6 * 2^-126) * fl(1/6). Every lane of the group takes part (a shuffle).
template <int kLanes, int kBlockValues>
__device__ __forceinline__ int fake_quant_scale_byte(const HeadPart<kLanes>& x, int b) {
  constexpr int kV = HeadGroup<kLanes>::kValues;
  constexpr float kAmaxFloor = 6.0f * 0x1p-126f;
  float amax = lane_amax<kBlockValues>(x, b * kBlockValues);
  if constexpr (kV < 32) amax = group_max<32 / kV>(amax);
  return ue8m0_byte(__fmul_rn(fmaxf(amax, kAmaxFloor), 1.0f / 6.0f), ref::ScalePow2::kExponentBitsCeil);
}

// Fp4Prestage::kFakeQuant (reference/recipe.h) on this lane's values, in place: per block
// of 32 (in the lane, or over 32 / V lanes), s = 2^ceil(log2(max(amax, 6 * 2^-126) *
// fl(1/6))) by the exponent bits, x = value(e2m1_rne(x * (1/s) + 0)) * s. Every product
// is exact (s a power of two, the code value 2 significant bits).
template <int kLanes>
__device__ __forceinline__ void fp4_fake_quant_head(HeadPart<kLanes>& x) {
  constexpr int kV = HeadGroup<kLanes>::kValues;
  constexpr int kBlocks = kV >= 32 ? kV / 32 : 1;
  constexpr int kBlockValues = kV >= 32 ? 32 : kV;
#pragma unroll
  for (int b = 0; b < kBlocks; ++b) {
    const float scale = pow2_scale(fake_quant_scale_byte<kLanes, kBlockValues>(x, b));
    const float inv = __frcp_rn(scale);
#pragma unroll
    for (int i = 0; i < kBlockValues; ++i) {
      float& v = x[b * kBlockValues + i];
      const float scaled = __fadd_rn(__fmul_rn(v, inv), 0.0f);
      v = __fmul_rn(e2m1_round(scaled, ref::Rounding::kNearestEven, ref::Fp4ZeroSign::kKeep), scale);
    }
  }
}

// Fp4Prestage::kFakeQuant followed by e2m1 codes, computed from the first stage's codes.
// The first stage leaves each value of a block at v = +-value(c1) * s1 (s1 its power-of-two
// scale, c1 its code), so the block's amax is value(top) * s1, top the largest magnitude
// code, exactly, and when the second stage's scale s2 is a power of two, v / s2 = +-value(c1)
// * 2^j with j = log2(s1 / s2). For 0 <= j and value(top) * 2^j <= 6 every such value is
// on the e2m1 grid again (a code value is 1 or 1.5 times a power of two from 0.5 up, and
// doubling stays on the grid up to 6), so the second stage rounds nothing and its code is
// the first's shifted: magnitude c >= 2 -> c + 2j (two codes a binade), 1 (0.5) -> 2j
// for j > 0, 0 -> 0; the sign stays (kKeep) or goes with a zero magnitude (kPositive). That
// replaces the second encode of every value by word operations on 8 packed codes. A block
// that fails the test (the second floor lifts s2 above s1, as in a block of tiny nonzero
// values; an infinity, where s1 is infinite and 0 * s1 is NaN) takes the first stage's
// values and the second encode, as store_head did for all.
// The codes: 8 a word, value 8k+n in nibble n; mags the magnitude bits, one bit a nibble
// in the masks.
__device__ __forceinline__ unsigned e2m1_codes_times_pow2(unsigned codes, int j, ref::Fp4ZeroSign zero_sign) {
  const unsigned mags = codes & 0x7777'7777u;
  const unsigned nonzero = (mags | mags >> 1 | mags >> 2) & 0x1111'1111u;
  const unsigned at_least_two = (mags >> 1 | mags >> 2) & 0x1111'1111u;  // codes 2..7
  const unsigned is_one = nonzero ^ at_least_two;
  // per nibble at most 7 (the caller's test): no carry into the next
  const unsigned shifted = mags + at_least_two * static_cast<unsigned>(2 * j) +
                           is_one * static_cast<unsigned>(j > 0 ? 2 * j - 1 : 0);
  const unsigned signs = codes & (zero_sign == ref::Fp4ZeroSign::kPositive ? nonzero << 3 : 0x8888'8888u);
  return shifted | signs;
}

template <int kLanes, int kValuesAlign>
__device__ __forceinline__ void store_fake_quantised_e2m1(const HeadPart<kLanes>& x, int part, const ref::QuantSpec& q,
                                                          uint8_t* values, uint8_t* scales, bool store) {
  constexpr int kV = HeadGroup<kLanes>::kValues;
  constexpr int kBlocks = kV >= 32 ? kV / 32 : 1;
  constexpr int kBlockValues = kV >= 32 ? 32 : kV;
  constexpr int kBlockWords = kBlockValues / 8;
  static_assert(kBlockValues % 8 == 0, "whole words of codes");
  unsigned w[kV / 8];
  int byte[kBlocks];
#pragma unroll
  for (int b = 0; b < kBlocks; ++b) {
    // First stage (fp4_fake_quant_head's rules), kept as codes.
    const int first_byte = fake_quant_scale_byte<kLanes, kBlockValues>(x, b);
    const float s1 = pow2_scale(first_byte), inv1 = __frcp_rn(s1);
    unsigned top = 0;
#pragma unroll
    for (int k = 0; k < kBlockWords; ++k) {
      unsigned word = 0;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const float scaled = __fadd_rn(__fmul_rn(x[b * kBlockValues + 8 * k + n], inv1), 0.0f);
        const unsigned mag = e2m1_magnitude(scaled, ref::Rounding::kNearestEven);
        top = max(top, mag);
        word |= mag << (4 * n) | (e2m1_negative(scaled, ref::Fp4ZeroSign::kKeep) ? 8u << (4 * n) : 0u);
      }
      w[b * kBlockWords + k] = word;
    }
    float top_value = e2m1_value(top);
    if constexpr (kV < 32) top_value = group_max<32 / kV>(top_value);
    // Second stage: its scale from the block's amax, value(top) * s1 (exact).
    byte[b] = ue8m0_byte(raw_scale(__fmul_rn(top_value, s1), q, 6.0f, 1.0f / 6.0f), q.pow2);
    const int j = first_byte - byte[b];
    const bool shifted = first_byte != 255 &&  // s1 finite: with an infinity in the block, 0 * s1 is NaN
                         (top_value == 0.0f || (j >= 0 && j <= 3 && __fmul_rn(top_value, pow2_scale(127 + j)) <= 6.0f));
    if (shifted) {
#pragma unroll
      for (int k = 0; k < kBlockWords; ++k) {
        w[b * kBlockWords + k] = e2m1_codes_times_pow2(w[b * kBlockWords + k], top_value == 0.0f ? 0 : j, q.fp4_zero_sign);
      }
    } else {
      const float s2 = pow2_scale(byte[b]), inv2 = __frcp_rn(s2);
#pragma unroll
      for (int k = 0; k < kBlockWords; ++k) {
        const unsigned first = w[b * kBlockWords + k];
        unsigned word = 0;
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          const float v = __fmul_rn(e2m1_value(first >> (4 * n)), s1);  // the first stage's value
          const float scaled = apply_scale(v, s2, inv2, true, q.apply);
          word |= e2m1_magnitude(scaled, q.fp4_rounding) << (4 * n) |
                  (e2m1_negative(scaled, q.fp4_zero_sign) ? 8u << (4 * n) : 0u);
        }
        w[b * kBlockWords + k] = word;
      }
    }
  }
  if (!store) return;
  store_words<kV / 8, part_alignment(kValuesAlign, kV / 2)>(values + part * (kV / 2), w);
  if ((part * kV) % 32 == 0) {
#pragma unroll
    for (int b = 0; b < kBlocks; ++b) scales[part * kV / 32 + b] = static_cast<uint8_t>(byte[b]);
  }
}

// One head quantised and written: value bytes at `values` (the head's slot, kValuesAlign-
// aligned) and scale bytes at `scales`. Layout per reference/paged_cache.h / quantize.h.
// `store` false: compute only (a lane group padding the last warp). Returns the fp8
// per-head scale (1 otherwise), which the query path folds into the head weight. An fp4
// first stage (QuantSpec::fp4_prestage) may rewrite x in place (fp4_fake_quant_head) or
// leave it (store_fake_quantised_e2m1): x is undefined after the call.
template <ref::StorageFormat kFormat, int kLanes, int kValuesAlign = 4>
__device__ __forceinline__ float store_head(HeadPart<kLanes>& x, int part, const ref::QuantSpec& q,
                                            uint8_t* values, uint8_t* scales, bool store) {
  constexpr int kV = HeadGroup<kLanes>::kValues;
  if constexpr (kFormat == ref::StorageFormat::kFp32) {
    if (store) {
#pragma unroll
      for (int i = 0; i < kV; i += 4) {
        reinterpret_cast<float4*>(values + part * kV * 4)[i / 4] = make_float4(x[i], x[i + 1], x[i + 2], x[i + 3]);
      }
    }
    return 1.0f;
  } else if constexpr (kFormat == ref::StorageFormat::kBf16) {
    if (store) store_bf16<kV, part_alignment(kValuesAlign, kV * 2)>([&](int i) { return x[i]; }, values + part * kV * 2);
    return 1.0f;
  } else if constexpr (kFormat == ref::StorageFormat::kFp8E4m3fn) {
    const float amax = group_max<kLanes>(lane_amax<kV>(x, 0));
    const float raw = raw_scale(amax, q, 448.0f, 1.0f / 448.0f);
    const float scale = q.pow2 == ref::ScalePow2::kNone ? raw : pow2_scale(ue8m0_byte(raw, q.pow2));
    const __nv_saturation_t sat = q.saturation == ref::Saturation::kSatFinite ? __NV_SATFINITE : __NV_NOSAT;
    const bool pow2 = q.pow2 != ref::ScalePow2::kNone;
    const float inv = __frcp_rn(scale);
    unsigned w[kV / 4];
#pragma unroll
    for (int i = 0; i < kV; i += 4) {
      // cvt.rn(.satfinite).e4m3x2: two codes per instruction, .x in the low byte
      const float2 lo = make_float2(apply_scale(x[i], scale, inv, pow2, q.apply), apply_scale(x[i + 1], scale, inv, pow2, q.apply));
      const float2 hi = make_float2(apply_scale(x[i + 2], scale, inv, pow2, q.apply), apply_scale(x[i + 3], scale, inv, pow2, q.apply));
      w[i / 4] = static_cast<unsigned>(__nv_cvt_float2_to_fp8x2(lo, sat, __NV_E4M3)) |
                 (static_cast<unsigned>(__nv_cvt_float2_to_fp8x2(hi, sat, __NV_E4M3)) << 16);
    }
    if (store) {
      store_words<kV / 4, part_alignment(kValuesAlign, kV)>(values + part * kV, w);
      if (part == 0) *reinterpret_cast<float*>(scales) = scale;
    }
    return scale;
  } else {  // kFp4E2m1, kFp4SimulatedBf16: blocks of 32 values, each in one lane or 32/V lanes
    constexpr int kBlocks = kV >= 32 ? kV / 32 : 1;  // blocks this lane touches
    constexpr int kBlockValues = kV >= 32 ? 32 : kV;  // of which it holds this many
    if constexpr (kFormat == ref::StorageFormat::kFp4E2m1) {
      if (q.fp4_prestage == ref::Fp4Prestage::kFakeQuant && q.pow2 != ref::ScalePow2::kNone) {
        store_fake_quantised_e2m1<kLanes, kValuesAlign>(x, part, q, values, scales, store);
        return 1.0f;
      }
    }
    if (q.fp4_prestage == ref::Fp4Prestage::kFakeQuant) fp4_fake_quant_head<kLanes>(x);
    float scale[kBlocks], inv[kBlocks];
    int byte[kBlocks];
#pragma unroll
    for (int b = 0; b < kBlocks; ++b) {
      float amax = lane_amax<kBlockValues>(x, b * kBlockValues);
      if constexpr (kV < 32) amax = group_max<32 / kV>(amax);
      byte[b] = ue8m0_byte(raw_scale(amax, q, 6.0f, 1.0f / 6.0f), q.pow2);
      scale[b] = pow2_scale(byte[b]);
      inv[b] = __frcp_rn(scale[b]);  // exact: the scale is a power of two
    }
    // Values are scaled, coded or rounded where they are stored: a lane may hold 128.
    const auto scaled = [&](int k) {
      return apply_scale(x[k], scale[k / kBlockValues], inv[k / kBlockValues], true, q.apply);
    };
    if (!store) return 1.0f;
    if constexpr (kFormat == ref::StorageFormat::kFp4E2m1) {
      // 2 codes per byte, the even element in the low nibble; V/2 bytes per lane. The sign
      // bit goes in as a select of its shifted bit, not with the magnitude before the
      // shift (SASS: one instruction fewer a value).
      constexpr int kBytes = kV / 2;
      unsigned w[kBytes / 4];
#pragma unroll
      for (int j = 0; j < kBytes / 4; ++j) {
        w[j] = 0;
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          const float v = scaled(8 * j + n);
          w[j] |= e2m1_magnitude(v, q.fp4_rounding) << (4 * n) | (e2m1_negative(v, q.fp4_zero_sign) ? 8u << (4 * n) : 0u);
        }
      }
      store_words<kBytes / 4, part_alignment(kValuesAlign, kBytes)>(values + part * kBytes, w);
      if ((part * kV) % 32 == 0) {
#pragma unroll
        for (int b = 0; b < kBlocks; ++b) scales[part * kV / 32 + b] = static_cast<uint8_t>(byte[b]);
      }
    } else {  // the dequantised values, as bf16
      const auto value = [&](int k) {
        return __fmul_rn(e2m1_round(scaled(k), q.fp4_rounding, q.fp4_zero_sign), scale[k / kBlockValues]);
      };
      store_bf16<kV, part_alignment(kValuesAlign, kV * 2)>(value, values + part * kV * 2);
    }
    return 1.0f;
  }
}

// Value and scale bytes per head of a format (as reference/quantize.h).
__host__ __device__ constexpr int value_bytes(ref::StorageFormat f) {
  return f == ref::StorageFormat::kFp32 ? 512
         : f == ref::StorageFormat::kBf16 || f == ref::StorageFormat::kFp4SimulatedBf16 ? 256
         : f == ref::StorageFormat::kFp8E4m3fn ? 128
         : f == ref::StorageFormat::kFp4E2m1 ? 64 : 0;
}
__host__ __device__ constexpr int scale_bytes(ref::StorageFormat f) {
  return f == ref::StorageFormat::kFp8E4m3fn || f == ref::StorageFormat::kFp4E2m1 ? 4 : 0;
}

}  // namespace dsaf::dev
