// File: head_pipeline.cuh
// The per-head stages shared by the key and query kernels, for one warp holding one
// 128-value head (4 contiguous values per lane). Each stage implements the contract of
// its reference header (norm.h, rope.h, hadamard.h, quantize.h) with CUDA's correctly
// rounded intrinsics (__fadd_rn, __fmul_rn, __fdiv_rn, __fmaf_rn, __frsqrt_rn); the
// device library is compiled with --fmad=false, so no other multiply-add is fused.
// Where a recipe names the GPU's approximate rsqrtf, the hardware instruction is used.
// Intrinsics with numeric effect: cvt.rn.satfinite.e4m3x2 (via __nv_cvt_float_to_fp8),
// cvt.rn.bf16.f32 (__float2bfloat16_rn), MUFU.RSQ (rsqrtf, kSm90Approx only).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "device/api.h"
#include "device/primitives/warp.cuh"

namespace dsaf::dev {

using Head = float[kPerLane];

__device__ __forceinline__ float to_bf16_and_back(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

__device__ __forceinline__ void round_head_bf16(bool enabled, Head& x) {
  if (!enabled) return;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) x[i] = to_bf16_and_back(x[i]);
}

// sum_i x_i^2 (fma: ss = fma(x, x, ss)) or sum_i x_i, in the recipe's order.
__device__ __forceinline__ float reduce_head(const Head& x, ref::ReductionOrder order,
                                             bool squares, bool fma) {
  const auto fold = [&](float acc, float v) {
    if (!squares) return __fadd_rn(acc, v);
    return fma ? __fmaf_rn(v, v, acc) : __fadd_rn(acc, __fmul_rn(v, v));
  };
  if (order == ref::ReductionOrder::kSequential) return sequential_fold(x, fold);
  float partial = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) partial = fold(partial, x[i]);
  return warp_tree_sum(partial);
}

__device__ __forceinline__ float inverse_sqrt(float v, ref::RsqrtKind kind) {
  return kind == ref::RsqrtKind::kSm90Approx ? rsqrtf(v) : __frsqrt_rn(v);
}

// x / 128 and x * 2^-7 are the same correctly rounded value (128 is a power of two), so
// the norm multiplies: an IEEE division costs a dozen instructions.
inline constexpr float kInv128 = 0.0078125f;

// norm.h: RMSNorm y = (x * inv_rms) * w; LayerNorm y = ((x - mean) * inv_std) * w + b.
__device__ __forceinline__ void norm_head(Head& x, const ref::NormSpec& spec, int lane,
                                          const float* weight, const float* bias) {
  if (spec.kind == ref::NormKind::kNone) return;
  float mean = 0.0f;
  Head d;
  if (spec.kind == ref::NormKind::kLayerNorm) {
    mean = __fmul_rn(reduce_head(x, spec.order, false, false), kInv128);
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    d[i] = spec.kind == ref::NormKind::kLayerNorm ? __fsub_rn(x[i], mean) : x[i];
  }
  const float ss = reduce_head(d, spec.order, true, spec.fma_contraction);
  const float inv = inverse_sqrt(__fadd_rn(__fmul_rn(ss, kInv128), spec.eps), spec.rsqrt);
  const float4 w4 = reinterpret_cast<const float4*>(weight)[lane];
  const float4 b4 = spec.kind == ref::NormKind::kLayerNorm ? reinterpret_cast<const float4*>(bias)[lane]
                                                           : make_float4(0, 0, 0, 0);
  const float ws[kPerLane] = {w4.x, w4.y, w4.z, w4.w};
  const float bs[kPerLane] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const float w = ws[i];
    const float scaled = __fmul_rn(d[i], inv);
    if (spec.kind == ref::NormKind::kRmsNorm) {
      x[i] = __fmul_rn(scaled, w);
    } else {
      const float b = bs[i];
      x[i] = spec.fma_contraction ? __fmaf_rn(scaled, w, b) : __fadd_rn(__fmul_rn(scaled, w), b);
    }
  }
}

// a*c - b*s (sign -1) or a*s + b*c style: a*b + sign*(c*d) with the named product fused.
__device__ __forceinline__ float two_products(float a, float b, float c, float d, float sign,
                                              ref::ContractedProduct fused) {
  switch (fused) {
    case ref::ContractedProduct::kFirst: return __fmaf_rn(a, b, sign * __fmul_rn(c, d));
    case ref::ContractedProduct::kSecond: return __fmaf_rn(sign * c, d, __fmul_rn(a, b));
    default: return __fadd_rn(__fmul_rn(a, b), sign * __fmul_rn(c, d));
  }
}

// rope.h: rotate pairs (i, i+32) (NeoX) or (2i, 2i+1) (interleaved) of the leading or
// trailing 64 dims by the table row of `position`.
__device__ __forceinline__ void rope_head(Head& x, int lane, ref::RopePairing pairing,
                                          ref::RopePlacement placement, ref::ContractedProduct fma,
                                          const float* cos_row, const float* sin_row) {
  const int first_lane = placement == ref::RopePlacement::kLeading ? 0 : 16;
  const bool rotary = lane >= first_lane && lane < first_lane + 16;
  if (pairing == ref::RopePairing::kInterleaved) {
    if (!rotary) return;
    // pair indices 2(lane - first_lane) + {0, 1} of dims (2i, 2i+1)
    const float2 c2 = reinterpret_cast<const float2*>(cos_row)[lane - first_lane];
    const float2 s2 = reinterpret_cast<const float2*>(sin_row)[lane - first_lane];
    const float cs[2] = {c2.x, c2.y}, ss[2] = {s2.x, s2.y};
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const float a = x[2 * p], b = x[2 * p + 1], c = cs[p], s = ss[p];
      x[2 * p] = two_products(a, c, b, s, -1.0f, fma);
      x[2 * p + 1] = two_products(a, s, b, c, 1.0f, fma);
    }
    return;
  }
  // NeoX: rotary element r < 32 pairs with r + 32, i.e. lane l with lane l ^ 8 (8 lanes
  // of 4 values = 32 elements); every lane takes part in the shuffle.
  Head partner;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) partner[i] = __shfl_xor_sync(kFullMask, x[i], 8);
  if (!rotary) return;
  const bool first_half = ((lane - first_lane) & 8) == 0;
  // pair indices 4((lane - first_lane) & 7) + i
  const float4 c4 = reinterpret_cast<const float4*>(cos_row)[(lane - first_lane) & 7];
  const float4 s4 = reinterpret_cast<const float4*>(sin_row)[(lane - first_lane) & 7];
  const float cs[kPerLane] = {c4.x, c4.y, c4.z, c4.w}, ss[kPerLane] = {s4.x, s4.y, s4.z, s4.w};
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const float c = cs[i], s = ss[i];
    if (first_half) {  // holds a, partner holds b: a' = a*c - b*s
      x[i] = two_products(x[i], c, partner[i], s, -1.0f, fma);
    } else {           // holds b, partner holds a: b' = a*s + b*c
      x[i] = two_products(partner[i], s, x[i], c, 1.0f, fma);
    }
  }
}

// hadamard.h: strides 1, 2 in lane, then 4..64 across lanes (xor 1..16), then * fl(2^-3.5).
__device__ __forceinline__ void hadamard_head(Head& x, int lane) {
  float t0 = x[0], t1 = x[1], t2 = x[2], t3 = x[3];
  x[0] = __fadd_rn(t0, t1);
  x[1] = __fsub_rn(t0, t1);
  x[2] = __fadd_rn(t2, t3);
  x[3] = __fsub_rn(t2, t3);
  t0 = x[0], t1 = x[1], t2 = x[2], t3 = x[3];
  x[0] = __fadd_rn(t0, t2);
  x[2] = __fsub_rn(t0, t2);
  x[1] = __fadd_rn(t1, t3);
  x[3] = __fsub_rn(t1, t3);
#pragma unroll
  for (int mask = 1; mask < kLanes; mask *= 2) {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const float other = __shfl_xor_sync(kFullMask, x[i], mask);
      x[i] = (lane & mask) ? __fsub_rn(other, x[i]) : __fadd_rn(x[i], other);
    }
  }
  const float scale = __uint_as_float(0x3db504f3u);  // fl(128^-1/2)
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) x[i] = __fmul_rn(x[i], scale);
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
__device__ __forceinline__ unsigned e2m1_code(float v, ref::Rounding rounding) {
  if (isnan(v)) return 0x7;
  const float mag = fabsf(v);
  const float midpoints[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  unsigned code = 0;
#pragma unroll
  for (int i = 0; i < 7; ++i) {
    // A tie at midpoint i rounds up when the upper code i+1 is even (i odd) under RNE.
    const bool up = mag > midpoints[i] ||
                    (rounding == ref::Rounding::kNearestEven && mag == midpoints[i] && (i & 1));
    code += up ? 1u : 0u;
  }
  return code | (signbit(v) ? 0x8u : 0u);
}

__device__ __forceinline__ float e2m1_value(unsigned code) {
  const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float mag = grid[code & 7];
  return (code & 8) ? -mag : mag;
}

// One head quantised and written: value bytes at `values` (the token's slot in the page)
// and scale bytes at `scales`. Layout per reference/paged_cache.h / quantize.h.
template <ref::StorageFormat kFormat>
__device__ __forceinline__ void store_head(const Head& x, int lane, const ref::QuantSpec& q,
                                           uint8_t* values, uint8_t* scales) {
  if constexpr (kFormat == ref::StorageFormat::kFp32) {
    reinterpret_cast<float4*>(values)[lane] = make_float4(x[0], x[1], x[2], x[3]);
  } else if constexpr (kFormat == ref::StorageFormat::kBf16) {
    __nv_bfloat162 lo = __floats2bfloat162_rn(x[0], x[1]);
    __nv_bfloat162 hi = __floats2bfloat162_rn(x[2], x[3]);
    uint2 packed;
    packed.x = *reinterpret_cast<unsigned*>(&lo);
    packed.y = *reinterpret_cast<unsigned*>(&hi);
    reinterpret_cast<uint2*>(values)[lane] = packed;
  } else if constexpr (kFormat == ref::StorageFormat::kFp8E4m3fn) {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) amax = fmaxf(amax, fabsf(x[i]));
    amax = group_max<32>(amax);
    const float raw = raw_scale(amax, q, 448.0f, 1.0f / 448.0f);
    const float scale = q.pow2 == ref::ScalePow2::kNone ? raw : pow2_scale(ue8m0_byte(raw, q.pow2));
    const __nv_saturation_t sat = q.saturation == ref::Saturation::kSatFinite ? __NV_SATFINITE : __NV_NOSAT;
    const bool pow2 = q.pow2 != ref::ScalePow2::kNone;
    const float inv = __frcp_rn(scale);
    float v[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) v[i] = apply_scale(x[i], scale, inv, pow2, q.apply);
    // cvt.rn(.satfinite).e4m3x2: two codes per instruction, .x in the low byte
    const unsigned lo = __nv_cvt_float2_to_fp8x2(make_float2(v[0], v[1]), sat, __NV_E4M3);
    const unsigned hi = __nv_cvt_float2_to_fp8x2(make_float2(v[2], v[3]), sat, __NV_E4M3);
    const unsigned packed = lo | (hi << 16);
    reinterpret_cast<unsigned*>(values)[lane] = packed;
    if (lane == 0) *reinterpret_cast<float*>(scales) = scale;
  } else {  // kFp4E2m1, kFp4SimulatedBf16: blocks of 32 values = 8 lanes
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) amax = fmaxf(amax, fabsf(x[i]));
    amax = group_max<8>(amax);
    const int byte = ue8m0_byte(raw_scale(amax, q, 6.0f, 1.0f / 6.0f), q.pow2);
    const float scale = pow2_scale(byte);
    unsigned codes[kPerLane];
    const float inv = __frcp_rn(scale);  // exact: the scale is a power of two
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) codes[i] = e2m1_code(apply_scale(x[i], scale, inv, true, q.apply), q.fp4_rounding);
    if constexpr (kFormat == ref::StorageFormat::kFp4E2m1) {
      const unsigned short packed = static_cast<unsigned short>(
          codes[0] | (codes[1] << 4) | (codes[2] << 8) | (codes[3] << 12));
      reinterpret_cast<unsigned short*>(values)[lane] = packed;
      if ((lane & 7) == 0) scales[lane / 8] = static_cast<uint8_t>(byte);
    } else {
      Head dequant;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) dequant[i] = __fmul_rn(e2m1_value(codes[i]), scale);
      store_head<ref::StorageFormat::kBf16>(dequant, lane, q, values, scales);
    }
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

// Loads lane's 4 input values (bf16 or fp32) of a 128-value head.
__device__ __forceinline__ void load_head(const void* head, bool bf16, int lane, Head& x) {
  if (bf16) {
    const uint2 raw = reinterpret_cast<const uint2*>(head)[lane];
    const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
    const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
    x[0] = __low2float(lo);
    x[1] = __high2float(lo);
    x[2] = __low2float(hi);
    x[3] = __high2float(hi);
  } else {
    const float4 v = reinterpret_cast<const float4*>(head)[lane];
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
  }
}

}  // namespace dsaf::dev
