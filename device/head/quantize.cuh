// File: quantize.cuh
// A head quantised and written in a storage format (reference/quantize.h, paged_cache.h):
// the scale rules, the e2m1 encoder and store_head. Intrinsics with numeric effect:
// cvt.rn(.satfinite).e4m3x2 (__nv_cvt_float2_to_fp8x2) and cvt.rn.bf16x2.f32
// (__floats2bfloat162_rn); everything else is correctly rounded IEEE arithmetic.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "device/head/head_io.cuh"
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
__device__ __forceinline__ int ue8m0_byte(float raw, ref::ScalePow2 pow2) {
  const unsigned bits = __float_as_uint(raw);
  if (pow2 == ref::ScalePow2::kLog2Ceil && (bits & 0x7F'FFFFu) != 0) {
    const float l = __double2float_rn(log2(static_cast<double>(raw)));
    return static_cast<int>(ceilf(l)) + 127;
  }
  return static_cast<int>((bits >> 23) & 0xFF) + ((bits & 0x7F'FFFFu) != 0 ? 1 : 0);
}

__device__ __forceinline__ float pow2_scale(int byte) { return __uint_as_float(static_cast<unsigned>(byte) << 23); }

// x / scale (kDivide) or x * fl(1/scale) (kTimesReciprocal). `inv` = fl(1/scale) is computed
// once per block; for a power-of-two scale it is exact and x / scale == x * inv, so the
// multiply serves both modes.
__device__ __forceinline__ float apply_scale(float x, float scale, float inv, bool pow2,
                                             ref::ScaleApply apply) {
  return apply == ref::ScaleApply::kDivide && !pow2 ? __fdiv_rn(x, scale) : __fmul_rn(x, inv);
}

// e2m1 code of v (sign bit 3): nearest of {0, .5, 1, 1.5, 2, 3, 4, 6}, saturating; ties to
// the even code, or toward zero (SGLang's strict '>' against the midpoints). NaN -> +6.
// The sign bit is v's, on zero codes too (-0 is 0x8); e2m1_zero_sign makes those +0.
// Branch-free on the bits of |v|, which order like the magnitudes. From 1 up the codes are
// e2m1's normal numbers, 2 x (biased exponent, 1 for 1.0) + a mantissa bit: rounding |v|
// to one mantissa bit (add 2^21 - 1 to the bits, plus the kept bit 22 for ties to even,
// then drop 22 bits) and rebasing (1.0 = 0x3f800000 -> 254 -> code 2) gives the code; a round-up
// past a binade carries into the exponent, and everything from 8 up (infinity too) clamps
// to 7 = 6.0. Below 1 the codes are the integers nearest 2|v| (0, 1, 2), and the float
// unit rounds to integers for us: 2|v| + 1.5 x 2^23 lies in [2^23, 2^24), where floats are
// the integers, so one fma rounds 2|v| to the nearest, ties to even, and its bits less
// those of 1.5 x 2^23 are the code. Ties toward zero: 2|v| - 1/2 (exact from 2|v| = 1/2 up;
// below it any value in [-1/2, 0] gives code 0 alike), then + 1.5 x 2^23 rounded up. Seven
// comparisons against the midpoints and a branch per value (the obvious form) make the fp4
// kernels about twice as long; tests/device/e2m1_exhaustive_gpu_test.cu checks every
// float under both rules.
__device__ __forceinline__ unsigned e2m1_code(float v, ref::Rounding rounding) {
  const unsigned bits = __float_as_uint(v), mag = bits & 0x7fffffffu;
  const bool to_even = rounding == ref::Rounding::kNearestEven;
  const unsigned half_less_one = 0x1fffffu + (to_even ? (mag >> 22) & 1u : 0u);
  const unsigned normal = min(((mag + half_less_one) >> 22) - 252u, 7u);  // mag >= 1.0f
  const float twice = __fmaf_rn(__uint_as_float(mag), 2.0f, to_even ? 12582912.0f : -0.5f);  // 1.5 x 2^23
  const unsigned below_one = __float_as_uint(to_even ? twice : __fadd_ru(twice, 12582912.0f)) - 0x4b400000u;
  const unsigned code = (mag < 0x3f800000u ? below_one : normal) | ((bits >> 28) & 8u);
  return mag > 0x7f800000u ? 0x7u : code;
}

// A zero code under the recipe's rule: -0 (0x8) stays, or becomes +0 (kPositive). Branch-
// free: the sign bit is cleared exactly when the magnitude bits are 0.
__device__ __forceinline__ unsigned e2m1_zero_sign(unsigned code, ref::Fp4ZeroSign rule) {
  return rule == ref::Fp4ZeroSign::kPositive && (code & 7u) == 0 ? 0u : code;
}

// The grid value e2m1_code and e2m1_zero_sign give v, sign included, without the code:
// value(e2m1_zero_sign(e2m1_code(v, rounding), zero_sign)), for the stages that keep values
// (the fp4-simulated store, the fake quantisation). Branch-free like e2m1_code. From 1 up:
// |v|'s bits rounded to one mantissa bit as there, the bits below it cleared, clamped at
// 6.0's bits (a round-up to 8 and infinity land above them). Below 1: the nearest multiple
// of 1/2, by the float unit: the floats in [2^22, 2^23) are the multiples of 1/2, so |v| +
// 1.5 x 2^22 rounds |v| to one, ties to the even multiple (= the even code), and taking
// 1.5 x 2^22 off again is exact. Ties toward zero: |v| - 1/4 (exact from |v| = 1/8 up;
// below it every result lies in [-1/4, -1/8] and gives 0 alike) added rounding up. NaN ->
// +6. tests/device/e2m1_exhaustive_gpu_test.cu checks every float under every rule.
__device__ __forceinline__ float e2m1_round(float v, ref::Rounding rounding, ref::Fp4ZeroSign zero_sign) {
  const unsigned bits = __float_as_uint(v), mag = bits & 0x7fffffffu;
  const bool to_even = rounding == ref::Rounding::kNearestEven;
  const unsigned half_less_one = 0x1fffffu + (to_even ? (mag >> 22) & 1u : 0u);
  const unsigned normal = min((mag + half_less_one) & 0xffc00000u, 0x40c00000u);  // 6.0f
  constexpr float kHalves = 6291456.0f;  // 1.5 x 2^22
  const float m = __uint_as_float(mag);
  const float below = to_even ? __fsub_rn(__fadd_rn(m, kHalves), kHalves)
                              : __fsub_rn(__fadd_ru(__fsub_rn(m, 0.25f), kHalves), kHalves);
  const unsigned rounded = mag < 0x3f800000u ? __float_as_uint(below) : normal;
  const unsigned sign = zero_sign == ref::Fp4ZeroSign::kPositive && rounded == 0 ? 0u : bits & 0x80000000u;
  return mag > 0x7f800000u ? 6.0f : __uint_as_float(rounded | sign);
}

// Value of an e2m1 code: {0, .5, 1, 1.5, 2, 3, 4, 6}; for c >= 2 the bits of (1 + m/2) *
// 2^(e-1) with e = c / 2, m = c % 2 (no table: a runtime index would put it in local memory).
__device__ __forceinline__ float e2m1_value(unsigned code) {
  const unsigned c = code & 7;
  const float mag = c >= 2 ? __uint_as_float((((c >> 1) + 126u) << 23) | ((c & 1u) << 22)) : (c == 1 ? 0.5f : 0.0f);
  return (code & 8) ? -mag : mag;
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
  constexpr float kAmaxFloor = 6.0f * 0x1p-126f;
#pragma unroll
  for (int b = 0; b < kBlocks; ++b) {
    float amax = lane_amax<kBlockValues>(x, b * kBlockValues);
    if constexpr (kV < 32) amax = group_max<32 / kV>(amax);
    const float scale = pow2_scale(ue8m0_byte(__fmul_rn(fmaxf(amax, kAmaxFloor), 1.0f / 6.0f), ref::ScalePow2::kExponentBitsCeil));
    const float inv = __frcp_rn(scale);
#pragma unroll
    for (int i = 0; i < kBlockValues; ++i) {
      float& v = x[b * kBlockValues + i];
      const float scaled = __fadd_rn(__fmul_rn(v, inv), 0.0f);
      v = __fmul_rn(e2m1_round(scaled, ref::Rounding::kNearestEven, ref::Fp4ZeroSign::kKeep), scale);
    }
  }
}

// One head quantised and written: value bytes at `values` (the head's slot, kValuesAlign-
// aligned) and scale bytes at `scales`. Layout per reference/paged_cache.h / quantize.h.
// `store` false: compute only (a lane group padding the last warp). Returns the fp8
// per-head scale (1 otherwise), which the query path folds into the head weight. An fp4
// first stage (QuantSpec::fp4_prestage) rewrites x in place.
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
      const auto code = [&](int k) { return e2m1_zero_sign(e2m1_code(scaled(k), q.fp4_rounding), q.fp4_zero_sign); };
      // 2 codes per byte, the even element in the low nibble; V/2 bytes per lane.
      constexpr int kBytes = kV / 2;
      unsigned w[kBytes / 4];
#pragma unroll
      for (int j = 0; j < kBytes / 4; ++j) {
        w[j] = 0;
#pragma unroll
        for (int n = 0; n < 8; ++n) w[j] |= code(8 * j + n) << (4 * n);
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
