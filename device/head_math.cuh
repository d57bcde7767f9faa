// File: head_math.cuh
// The per-head stages of the key and query kernels, for one thread holding one whole
// 128-value head in registers (a warp processes 32 heads side by side). Each stage
// implements the contract of its reference header (norm.h, rope.h, hadamard.h,
// quantize.h) with CUDA's correctly rounded intrinsics (__fadd_rn, __fmul_rn, __fdiv_rn,
// __fmaf_rn, __frsqrt_rn); the device library is compiled with --fmad=false, so no other
// multiply-add is fused. Where a recipe names the GPU's approximate rsqrtf, the hardware
// instruction is used. Intrinsics with numeric effect: cvt.rn(.satfinite).e4m3x2
// (__nv_cvt_float2_to_fp8x2), cvt.rn.bf16x2.f32 (__floats2bfloat162_rn), MUFU.RSQ
// (rsqrtf, kSm90Approx only).
// Why a thread per head: the Hadamard butterfly and the reductions then stay in registers
// (no shuffles), about 60 warp instructions per head instead of 250 for a warp per head.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "device/api.h"

namespace dsaf::dev {

inline constexpr int kDim = 128;
using Head = float[kDim];

// Layout sizes (reference/paged_cache.h).
__host__ __device__ constexpr int value_bytes(ref::StorageFormat f) {
  return f == ref::StorageFormat::kFp32 ? 512
         : f == ref::StorageFormat::kBf16 || f == ref::StorageFormat::kFp4SimulatedBf16 ? 256
         : f == ref::StorageFormat::kFp8E4m3fn ? 128
         : f == ref::StorageFormat::kFp4E2m1 ? 64 : 0;
}
__host__ __device__ constexpr int scale_bytes(ref::StorageFormat f) {
  return f == ref::StorageFormat::kFp8E4m3fn || f == ref::StorageFormat::kFp4E2m1 ? 4 : 0;
}

__device__ __forceinline__ float bf16_round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

__device__ __forceinline__ void round_bf16_if(bool enabled, Head& x) {
  if (!enabled) return;
#pragma unroll
  for (int i = 0; i < kDim; ++i) x[i] = bf16_round(x[i]);
}

// ---- Load ----------------------------------------------------------------------------
__device__ __forceinline__ void load_head(const void* row, bool bf16, Head& x) {
  if (bf16) {
    const uint4* p = static_cast<const uint4*>(row);
#pragma unroll
    for (int v = 0; v < kDim / 8; ++v) {
      const uint4 q = p[v];
      const unsigned words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {  // bf16 -> fp32 is exact: the bits move up 16 places
        x[8 * v + 2 * w] = __uint_as_float(words[w] << 16);
        x[8 * v + 2 * w + 1] = __uint_as_float(words[w] & 0xFFFF0000u);
      }
    }
  } else {
    const float4* p = static_cast<const float4*>(row);
#pragma unroll
    for (int v = 0; v < kDim / 4; ++v) {
      const float4 q = p[v];
      x[4 * v] = q.x, x[4 * v + 1] = q.y, x[4 * v + 2] = q.z, x[4 * v + 3] = q.w;
    }
  }
}

// ---- Reductions (reference/recipe.h ReductionOrder) --------------------------------
// sum_i t_i with t_i = x_i (squares = false) or x_i^2 (squares; fused: fma(x, x, acc)).
__device__ __forceinline__ float reduce_head(const Head& x, ref::ReductionOrder order, bool squares, bool fused) {
  const auto fold = [&](float acc, float v) {
    if (!squares) return __fadd_rn(acc, v);
    return fused ? __fmaf_rn(v, v, acc) : __fadd_rn(acc, __fmul_rn(v, v));
  };
  if (order == ref::ReductionOrder::kSequential) {
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < kDim; ++i) acc = fold(acc, x[i]);
    return acc;
  }
  // kWarpTree: 32 "lanes" fold 4 contiguous terms each, then the butterfly 16, 8, 4, 2, 1;
  // after step m, lanes l and l ^ m hold p[l] + p[l ^ m], so p[0] needs only l < m.
  float p[32];
#pragma unroll
  for (int l = 0; l < 32; ++l) {
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) acc = fold(acc, x[4 * l + j]);
    p[l] = acc;
  }
#pragma unroll
  for (int m = 16; m >= 1; m /= 2) {
#pragma unroll
    for (int l = 0; l < m; ++l) p[l] = __fadd_rn(p[l], p[l + m]);
  }
  return p[0];
}

// ---- Norm (norm.h) -------------------------------------------------------------------
// x / 128 and x * 2^-7 are the same correctly rounded value (128 is a power of two).
inline constexpr float kInv128 = 0.0078125f;

__device__ __forceinline__ float inverse_sqrt(float v, ref::RsqrtKind kind) {
  return kind == ref::RsqrtKind::kSm90Approx ? rsqrtf(v) : __frsqrt_rn(v);
}

__device__ __forceinline__ void norm_head(Head& x, const ref::NormSpec& spec, const float* weight,
                                          const float* bias) {
  if (spec.kind == ref::NormKind::kNone) return;
  const bool layer = spec.kind == ref::NormKind::kLayerNorm;
  float mean = 0.0f;
  if (layer) {
    mean = __fmul_rn(reduce_head(x, spec.order, false, false), kInv128);
#pragma unroll
    for (int i = 0; i < kDim; ++i) x[i] = __fsub_rn(x[i], mean);  // x now holds x - mean
  }
  const float ss = reduce_head(x, spec.order, true, spec.fma_contraction);
  const float inv = inverse_sqrt(__fadd_rn(__fmul_rn(ss, kInv128), spec.eps), spec.rsqrt);
#pragma unroll
  for (int i = 0; i < kDim; ++i) {
    const float scaled = __fmul_rn(x[i], inv);
    if (!layer) {
      x[i] = __fmul_rn(scaled, __ldg(weight + i));
    } else {
      const float w = __ldg(weight + i), b = __ldg(bias + i);
      x[i] = spec.fma_contraction ? __fmaf_rn(scaled, w, b) : __fadd_rn(__fmul_rn(scaled, w), b);
    }
  }
}

// ---- RoPE (rope.h) -------------------------------------------------------------------
// a*b + sign*(c*d) with the named product fused.
__device__ __forceinline__ float two_products(float a, float b, float c, float d, float sign,
                                              ref::ContractedProduct fused) {
  switch (fused) {
    case ref::ContractedProduct::kFirst: return __fmaf_rn(a, b, sign * __fmul_rn(c, d));
    case ref::ContractedProduct::kSecond: return __fmaf_rn(sign * c, d, __fmul_rn(a, b));
    default: return __fadd_rn(__fmul_rn(a, b), sign * __fmul_rn(c, d));
  }
}

// The rotary dims are [kBase, kBase + 64); pairs (i, i + 32) for NeoX, (2i, 2i + 1)
// interleaved. Template parameters keep every register index a compile-time constant.
template <int kBase, bool kNeox>
__device__ __forceinline__ void rope_pairs(Head& x, ref::ContractedProduct fma, const float* cos_row,
                                           const float* sin_row) {
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int first = kBase + (kNeox ? i : 2 * i), second = kBase + (kNeox ? i + 32 : 2 * i + 1);
    const float a = x[first], b = x[second], c = __ldg(cos_row + i), s = __ldg(sin_row + i);
    x[first] = two_products(a, c, b, s, -1.0f, fma);
    x[second] = two_products(a, s, b, c, 1.0f, fma);
  }
}

__device__ __forceinline__ void rope_head(Head& x, ref::RopePairing pairing, ref::RopePlacement placement,
                                          ref::ContractedProduct fma, const float* cos_row, const float* sin_row) {
  const bool neox = pairing == ref::RopePairing::kNeox;
  if (placement == ref::RopePlacement::kLeading) {
    neox ? rope_pairs<0, true>(x, fma, cos_row, sin_row) : rope_pairs<0, false>(x, fma, cos_row, sin_row);
  } else {
    neox ? rope_pairs<64, true>(x, fma, cos_row, sin_row) : rope_pairs<64, false>(x, fma, cos_row, sin_row);
  }
}

// ---- Hadamard (hadamard.h) -------------------------------------------------------------
__device__ __forceinline__ void hadamard_head(Head& x) {
#pragma unroll
  for (int h = 1; h < kDim; h *= 2) {
#pragma unroll
    for (int j = 0; j < kDim; ++j) {
      if (j & h) continue;
      const float a = x[j], b = x[j + h];
      x[j] = __fadd_rn(a, b);
      x[j + h] = __fsub_rn(a, b);
    }
  }
  const float scale = __uint_as_float(0x3db504f3u);  // fl(128^-1/2)
#pragma unroll
  for (int i = 0; i < kDim; ++i) x[i] = __fmul_rn(x[i], scale);
}

// ---- Quantise (quantize.h) -------------------------------------------------------------
__device__ __forceinline__ float raw_scale(float amax, const ref::QuantSpec& q, float qmax, float inv_qmax) {
  const float floored = fmaxf(amax, q.amax_floor);
  return q.divisor == ref::ScaleDivisor::kDivide ? __fdiv_rn(floored, qmax) : __fmul_rn(floored, inv_qmax);
}

// The ue8m0 byte of a power-of-two rule (raw >= 2^-126 by Recipe::validate): exponent bits
// + (fraction != 0), or ceil of the correctly rounded log2 (fp64 log2 rounded once).
__device__ __forceinline__ int ue8m0_byte(float raw, ref::ScalePow2 pow2) {
  const unsigned bits = __float_as_uint(raw);
  if (pow2 == ref::ScalePow2::kLog2Ceil && (bits & 0x7F'FFFFu) != 0) {
    return static_cast<int>(ceilf(__double2float_rn(log2(static_cast<double>(raw))))) + 127;
  }
  return static_cast<int>((bits >> 23) & 0xFF) + ((bits & 0x7F'FFFFu) != 0 ? 1 : 0);
}

__device__ __forceinline__ float pow2_scale(int byte) { return __uint_as_float(static_cast<unsigned>(byte) << 23); }

// x / scale (kDivide) or x * fl(1/scale) (kTimesReciprocal). For a power-of-two scale
// fl(1/scale) is exact and x / scale == x * inv, so the multiply serves both.
__device__ __forceinline__ float apply_scale(float x, float scale, float inv, bool pow2, ref::ScaleApply apply) {
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
    // A tie at midpoint i rounds up under RNE when the upper code i + 1 is even (i odd).
    const bool up = mag > midpoints[i] || (rounding == ref::Rounding::kNearestEven && mag == midpoints[i] && (i & 1));
    code += up ? 1u : 0u;
  }
  return code | (signbit(v) ? 0x8u : 0u);
}

// The value of an e2m1 code: {0, .5, 1, 1.5} = c / 2 below code 4; {2, 3, 4, 6} above
// (selects, not a table: a runtime-indexed array would live in local memory).
__device__ __forceinline__ float e2m1_value(unsigned code) {
  const unsigned c = code & 7;
  const float mag = c < 4 ? 0.5f * c : c == 4 ? 2.0f : c == 5 ? 3.0f : c == 6 ? 4.0f : 6.0f;
  return (code & 8) ? -mag : mag;
}

// Stores `words` 32-bit words: 16-byte stores when `dst` is 16-byte aligned (page sizes
// >= 4 and every bf16/fp32 row), else 4-byte stores (fp8 rows of 1- and 2-token pages).
template <int kWords>
__device__ __forceinline__ void store_words(uint8_t* dst, const unsigned (&w)[kWords]) {
  if ((reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
#pragma unroll
    for (int v = 0; v < kWords / 4; ++v) {
      reinterpret_cast<uint4*>(dst)[v] = make_uint4(w[4 * v], w[4 * v + 1], w[4 * v + 2], w[4 * v + 3]);
    }
  } else {
#pragma unroll
    for (int v = 0; v < kWords; ++v) reinterpret_cast<unsigned*>(dst)[v] = w[v];
  }
}

template <int kBegin, int kCount>
__device__ __forceinline__ float block_amax(const Head& x) {
  float amax = 0.0f;
#pragma unroll
  for (int i = kBegin; i < kBegin + kCount; ++i) amax = fmaxf(amax, fabsf(x[i]));
  return amax;
}

// One head quantised and written: value bytes at `values`, scale bytes at `scales`.
template <ref::StorageFormat kFormat>
__device__ __forceinline__ void store_head(Head& x, const ref::QuantSpec& q, uint8_t* values, uint8_t* scales) {
  if constexpr (kFormat == ref::StorageFormat::kFp32) {  // 512-byte rows: always 16-byte aligned
#pragma unroll
    for (int v = 0; v < kDim / 4; ++v) {
      reinterpret_cast<float4*>(values)[v] = make_float4(x[4 * v], x[4 * v + 1], x[4 * v + 2], x[4 * v + 3]);
    }
  } else if constexpr (kFormat == ref::StorageFormat::kBf16) {
    unsigned w[kDim / 2];
#pragma unroll
    for (int i = 0; i < kDim / 2; ++i) {
      const __nv_bfloat162 pair = __floats2bfloat162_rn(x[2 * i], x[2 * i + 1]);  // .x low half
      w[i] = *reinterpret_cast<const unsigned*>(&pair);
    }
    store_words(values, w);
  } else if constexpr (kFormat == ref::StorageFormat::kFp8E4m3fn) {
    const float raw = raw_scale(block_amax<0, kDim>(x), q, 448.0f, 1.0f / 448.0f);
    const bool pow2 = q.pow2 != ref::ScalePow2::kNone;
    const float scale = pow2 ? pow2_scale(ue8m0_byte(raw, q.pow2)) : raw;
    const float inv = __frcp_rn(scale);
    const __nv_saturation_t sat = q.saturation == ref::Saturation::kSatFinite ? __NV_SATFINITE : __NV_NOSAT;
    unsigned w[kDim / 4];
#pragma unroll
    for (int i = 0; i < kDim / 4; ++i) {
      float v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = apply_scale(x[4 * i + j], scale, inv, pow2, q.apply);
      // cvt.rn(.satfinite).e4m3x2: .x goes to the low byte
      const unsigned lo = __nv_cvt_float2_to_fp8x2(make_float2(v[0], v[1]), sat, __NV_E4M3);
      const unsigned hi = __nv_cvt_float2_to_fp8x2(make_float2(v[2], v[3]), sat, __NV_E4M3);
      w[i] = lo | (hi << 16);
    }
    store_words(values, w);
    *reinterpret_cast<float*>(scales) = scale;
  } else {  // kFp4E2m1, kFp4SimulatedBf16: blocks of 32 with ue8m0 scales
    unsigned codes_or_words[kDim / 8];  // fp4: 8 nibbles per word
    unsigned scale_word = 0;
#pragma unroll
    for (int b = 0; b < kDim / 32; ++b) {
      float amax = 0.0f;
#pragma unroll
      for (int i = 32 * b; i < 32 * b + 32; ++i) amax = fmaxf(amax, fabsf(x[i]));
      const int byte = ue8m0_byte(raw_scale(amax, q, 6.0f, 1.0f / 6.0f), q.pow2);
      const float scale = pow2_scale(byte), inv = __frcp_rn(scale);  // exact: a power of two
      scale_word |= static_cast<unsigned>(byte) << (8 * b);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        unsigned word = 0;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int i = 32 * b + 8 * k + j;
          const unsigned code = e2m1_code(apply_scale(x[i], scale, inv, true, q.apply), q.fp4_rounding);
          word |= code << (4 * j);  // element 2i in the low nibble of byte i
          if constexpr (kFormat == ref::StorageFormat::kFp4SimulatedBf16) x[i] = __fmul_rn(e2m1_value(code), scale);
        }
        codes_or_words[4 * b + k] = word;
      }
    }
    if constexpr (kFormat == ref::StorageFormat::kFp4E2m1) {
      store_words(values, codes_or_words);
      *reinterpret_cast<unsigned*>(scales) = scale_word;
    } else {
      store_head<ref::StorageFormat::kBf16>(x, q, values, scales);
    }
  }
}

}  // namespace dsaf::dev
