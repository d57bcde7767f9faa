// File: head_pipeline.cuh
// The per-head stages shared by the key and query kernels, for a group of kLanes lanes
// holding one 128-value head (primitives/warp.cuh: lane `part` holds the contiguous values
// part*V .. part*V+V-1, V = 128 / kLanes). The group width is a template parameter: wide
// groups (8 lanes) spend issue slots on shuffles, narrow ones (1-2 lanes) do every stage
// in registers but hold 64-128 values per lane; the arithmetic, and so every result bit,
// is the same for all widths.
//
// Each stage implements the contract of its reference header (norm.h, rope.h, hadamard.h,
// quantize.h) with CUDA's correctly rounded intrinsics (__fadd_rn, __fmul_rn, __fdiv_rn,
// __fmaf_rn, __frsqrt_rn); the device library is compiled with --fmad=false, so no other
// multiply-add is fused. Where a recipe names the GPU's approximate rsqrtf, the hardware
// instruction is used. Intrinsics with numeric effect: cvt.rn(.satfinite).e4m3x2 (via
// __nv_cvt_float2_to_fp8x2), cvt.rn.bf16x2.f32 (__floats2bfloat162_rn), MUFU.RSQ (rsqrtf,
// kSm90Approx only).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "device/api.h"
#include "device/primitives/warp.cuh"

namespace dsaf::dev {

template <int kLanes>
using HeadPart = float[HeadGroup<kLanes>::kValues];

// Blocks of 256 threads to keep resident per SM (__launch_bounds__' second argument) for
// the query kernel: the register budget is capped at 65536 / (256 x this) per thread:
// 8 lanes 64 registers, 4: 128, 2 and 1: 255 (a lane then holds 64 or 128 values).
template <int kLanes>
inline constexpr int kMinBlocksPerSm = kLanes == 8 ? 4 : kLanes == 4 ? 2 : 1;

__device__ __forceinline__ float to_bf16_and_back(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

template <int kLanes>
__device__ __forceinline__ void round_head_bf16(bool enabled, HeadPart<kLanes>& x) {
  if (!enabled) return;
#pragma unroll
  for (int i = 0; i < HeadGroup<kLanes>::kValues; ++i) x[i] = to_bf16_and_back(x[i]);
}

// sum_i x_i^2 (fma: ss = fma(x, x, ss)) or sum_i x_i, in the recipe's order.
template <int kLanes>
__device__ __forceinline__ float reduce_head(const HeadPart<kLanes>& x, int part, ref::ReductionOrder order,
                                             bool squares, bool fma) {
  const auto fold = [&](float acc, float v) {
    if (!squares) return __fadd_rn(acc, v);
    return fma ? __fmaf_rn(v, v, acc) : __fadd_rn(acc, __fmul_rn(v, v));
  };
  if (order == ref::ReductionOrder::kSequential) return sequential_fold<kLanes>(x, part, fold);
  return warp_tree_fold<kLanes>(x, fold);
}

__device__ __forceinline__ float inverse_sqrt(float v, ref::RsqrtKind kind) {
  return kind == ref::RsqrtKind::kSm90Approx ? rsqrtf(v) : __frsqrt_rn(v);
}

// x / 128 and x * 2^-7 are the same correctly rounded value (128 is a power of two), so
// the norm multiplies: an IEEE division costs a dozen instructions.
inline constexpr float kInv128 = 0.0078125f;

// Loads this lane's n floats of a [128] vector (n a multiple of 4, 16-byte aligned).
template <int kCount>
__device__ __forceinline__ void load_floats(const float* src, float (&dst)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; i += 4) {
    const float4 v = *reinterpret_cast<const float4*>(src + i);
    dst[i] = v.x, dst[i + 1] = v.y, dst[i + 2] = v.z, dst[i + 3] = v.w;
  }
}

// norm.h: RMSNorm y = (x * inv_rms) * w; LayerNorm y = ((x - mean) * inv_std) * w + b.
template <int kLanes>
__device__ __forceinline__ void norm_head(HeadPart<kLanes>& x, const ref::NormSpec& spec, int part,
                                          const float* weight, const float* bias) {
  constexpr int kV = HeadGroup<kLanes>::kValues;
  if (spec.kind == ref::NormKind::kNone) return;
  const bool layer_norm = spec.kind == ref::NormKind::kLayerNorm;
  float mean = 0.0f;
  if (layer_norm) mean = __fmul_rn(reduce_head<kLanes>(x, part, spec.order, false, false), kInv128);
  HeadPart<kLanes> d;
#pragma unroll
  for (int i = 0; i < kV; ++i) d[i] = layer_norm ? __fsub_rn(x[i], mean) : x[i];
  const float ss = reduce_head<kLanes>(d, part, spec.order, true, spec.fma_contraction);
  const float inv = inverse_sqrt(__fadd_rn(__fmul_rn(ss, kInv128), spec.eps), spec.rsqrt);
  // Weights (and bias) four at a time, next to their use: a lane of a narrow group holds
  // up to 128 values, and 128 more registers of weights would spill.
#pragma unroll
  for (int i = 0; i < kV; i += 4) {
    float w[4];
    load_floats(weight + part * kV + i, w);
    if (!layer_norm) {
#pragma unroll
      for (int j = 0; j < 4; ++j) x[i + j] = __fmul_rn(__fmul_rn(d[i + j], inv), w[j]);
      continue;
    }
    float b[4];
    load_floats(bias + part * kV + i, b);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float scaled = __fmul_rn(d[i + j], inv);
      x[i + j] = spec.fma_contraction ? __fmaf_rn(scaled, w[j], b[j]) : __fadd_rn(__fmul_rn(scaled, w[j]), b[j]);
    }
  }
}

// a*b + sign*(c*d) with the named product fused (rope.h's contraction variants).
__device__ __forceinline__ float two_products(float a, float b, float c, float d, float sign,
                                              ref::ContractedProduct fused) {
  switch (fused) {
    case ref::ContractedProduct::kFirst: return __fmaf_rn(a, b, sign * __fmul_rn(c, d));
    case ref::ContractedProduct::kSecond: return __fmaf_rn(sign * c, d, __fmul_rn(a, b));
    default: return __fadd_rn(__fmul_rn(a, b), sign * __fmul_rn(c, d));
  }
}

// The 64 rotated dims x[kStart .. kStart + 63] when they all lie in this lane (V >= 64):
// pairs (2p, 2p+1) (interleaved) or (r, r+32) (NeoX) rotated by cos/sin [p] or [r], both
// as a' = a*c - b*s, b' = a*s + b*c. The table is read four entries at a time; the
// pairing is a template parameter so that every register index is a constant.
template <int kStart, bool kInterleaved, int kV>
__device__ __forceinline__ void rope_in_lane(float (&x)[kV], ref::ContractedProduct fma, const float* cos_row,
                                             const float* sin_row) {
  static_assert(kStart + 64 <= kV, "the rotated dims lie in the lane");
#pragma unroll
  for (int p = 0; p < 32; p += 4) {
    float c[4], s[4];
    load_floats(cos_row + p, c);
    load_floats(sin_row + p, s);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int ia = kInterleaved ? kStart + 2 * (p + j) : kStart + p + j;
      const int ib = kInterleaved ? ia + 1 : ia + 32;
      const float a = x[ia], b = x[ib];
      x[ia] = two_products(a, c[j], b, s[j], -1.0f, fma);
      x[ib] = two_products(a, s[j], b, c[j], 1.0f, fma);
    }
  }
}

template <int kStart, int kV>
__device__ __forceinline__ void rope_in_lane(float (&x)[kV], ref::RopePairing pairing, ref::ContractedProduct fma,
                                             const float* cos_row, const float* sin_row) {
  if (pairing == ref::RopePairing::kInterleaved) {
    rope_in_lane<kStart, true>(x, fma, cos_row, sin_row);
  } else {
    rope_in_lane<kStart, false>(x, fma, cos_row, sin_row);
  }
}

// rope_head for V <= 32: a lane's values lie wholly inside or outside the rotated dims.
template <int kLanes>
__device__ __forceinline__ void rope_across_lanes(HeadPart<kLanes>& x, int part, ref::RopePairing pairing,
                                                  ref::RopePlacement placement, ref::ContractedProduct fma,
                                                  const float* cos_row, const float* sin_row) {
  constexpr int kV = HeadGroup<kLanes>::kValues;
  const int first = placement == ref::RopePlacement::kLeading ? 0 : 64;
  const int offset = part * kV - first;  // of this lane's first value inside the rotated dims
  const bool rotary = offset >= 0 && offset < 64;
  if (pairing == ref::RopePairing::kInterleaved) {
    if (!rotary) return;
    float c[kV / 2], s[kV / 2];  // pair indices offset/2 ..
    load_floats(cos_row + offset / 2, c);
    load_floats(sin_row + offset / 2, s);
#pragma unroll
    for (int p = 0; p < kV / 2; ++p) {
      const float a = x[2 * p], b = x[2 * p + 1];
      x[2 * p] = two_products(a, c[p], b, s[p], -1.0f, fma);
      x[2 * p + 1] = two_products(a, s[p], b, c[p], 1.0f, fma);
    }
    return;
  }
  // NeoX: rotated element r < 32 pairs with r + 32, i.e. part with part ^ (32 / V); every
  // lane takes part in the shuffle.
  HeadPart<kLanes> partner;
#pragma unroll
  for (int i = 0; i < kV; ++i) partner[i] = __shfl_xor_sync(kFullMask, x[i], 32 / kV);
  if (!rotary) return;
  const bool first_half = (offset & 32) == 0;
  float c[kV], s[kV];  // pair indices (offset & 31) ..
  load_floats(cos_row + (offset & 31), c);
  load_floats(sin_row + (offset & 31), s);
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    if (first_half) {  // holds a, partner holds b: a' = a*c - b*s
      x[i] = two_products(x[i], c[i], partner[i], s[i], -1.0f, fma);
    } else {           // holds b, partner holds a: b' = a*s + b*c
      x[i] = two_products(partner[i], s[i], x[i], c[i], 1.0f, fma);
    }
  }
}

// rope.h: rotate pairs (i, i+32) (NeoX) or (2i, 2i+1) (interleaved) of the leading or
// trailing 64 dims by the table row of `position` (32 cos and 32 sin). A lane's V values
// lie wholly inside or outside the rotated 64 dims (V <= 64), or contain them (V = 128).
template <int kLanes>
__device__ __forceinline__ void rope_head(HeadPart<kLanes>& x, int part, ref::RopePairing pairing,
                                          ref::RopePlacement placement, ref::ContractedProduct fma,
                                          const float* cos_row, const float* sin_row) {
  constexpr int kV = HeadGroup<kLanes>::kValues;
  if constexpr (kV == 128) {
    if (placement == ref::RopePlacement::kLeading) {
      rope_in_lane<0>(x, pairing, fma, cos_row, sin_row);
    } else {
      rope_in_lane<64>(x, pairing, fma, cos_row, sin_row);
    }
  } else if constexpr (kV == 64) {
    if (part * 64 == (placement == ref::RopePlacement::kLeading ? 0 : 64)) {
      rope_in_lane<0>(x, pairing, fma, cos_row, sin_row);
    }
  } else {
    rope_across_lanes<kLanes>(x, part, pairing, placement, fma, cos_row, sin_row);
  }
}

// hadamard.h: strides 1 .. V/2 in the lane, then V .. 64 across lanes (xor stride / V), in
// increasing order, then * fl(2^-3.5). Across lanes the upper element of a pair computes
// other - x as fma(x, -1, other): one rounding of the same exact value, no select.
template <int kLanes>
__device__ __forceinline__ void hadamard_head(HeadPart<kLanes>& x, int part) {
  constexpr int kV = HeadGroup<kLanes>::kValues;
#pragma unroll
  for (int stride = 1; stride < kV; stride *= 2) {
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      if (i & stride) continue;
      const float a = x[i], b = x[i + stride];
      x[i] = __fadd_rn(a, b);
      x[i + stride] = __fsub_rn(a, b);
    }
  }
#pragma unroll
  for (int stride = kV; stride < kHeadDim; stride *= 2) {
    const int mask = stride / kV;
    const float sign = (part & mask) ? -1.0f : 1.0f;
#pragma unroll
    for (int i = 0; i < kV; ++i) x[i] = __fmaf_rn(x[i], sign, __shfl_xor_sync(kFullMask, x[i], mask));
  }
  const float scale = __uint_as_float(0x3db504f3u);  // fl(128^-1/2)
#pragma unroll
  for (int i = 0; i < kV; ++i) x[i] = __fmul_rn(x[i], scale);
}

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
// Branch-free on the bits of |v|, which order like the magnitudes. From 1 up the codes are
// e2m1's normal numbers, 2 x (biased exponent, 1 for 1.0) + a mantissa bit: rounding |v|
// to one mantissa bit (add 2^21 - 1 to the bits, plus the kept bit 22 for ties to even,
// then drop 22 bits) and rebasing (1.0 = 0x3f800000 -> 254 -> code 2) gives the code; a round-up
// past a binade carries into the exponent, and everything from 8 up (infinity too) clamps
// to 7 = 6.0. Below 1 the codes are the integers nearest 2|v| (0, 1, 2), and the float
// unit rounds to integers for us: 2|v| + 1.5 x 2^23 lies in [2^23, 2^24), where floats are
// the integers, so one fma rounds 2|v| to the nearest, ties to even, and its bits less
// those of 1.5 x 2^23 are the code. Ties toward zero: 2|v| - 1/2 (exact from 2|v| = 1/2 up;
// below it any value in [-1/2, 0] gives code 0 alike), then + 1.5 x 2^23 rounded up. The
// threshold form this replaces (seven comparisons and a branch per value) made the fp4
// kernels twice as long as the fp8 ones (SASS of run 39's build; the 1-lane fp4 kernel is
// 39% shorter now); tests/device/e2m1_exhaustive_gpu_test.cu checks every float, both rules.
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

// Value of an e2m1 code: {0, .5, 1, 1.5, 2, 3, 4, 6}; for c >= 2 the bits of (1 + m/2) *
// 2^(e-1) with e = c / 2, m = c % 2 (no table: a runtime index would put it in local memory).
__device__ __forceinline__ float e2m1_value(unsigned code) {
  const unsigned c = code & 7;
  const float mag = c >= 2 ? __uint_as_float((((c >> 1) + 126u) << 23) | ((c & 1u) << 22)) : (c == 1 ? 0.5f : 0.0f);
  return (code & 8) ? -mag : mag;
}

// kN-word vector stores of w at dst (dst 4 kN-byte aligned).
template <int kN, int kWords>
__device__ __forceinline__ void store_vectors(uint8_t* dst, const unsigned (&w)[kWords]) {
  static_assert(kWords % kN == 0, "whole vectors");
#pragma unroll
  for (int i = 0; i < kWords; i += kN) {
    if constexpr (kN == 4) {
      reinterpret_cast<uint4*>(dst)[i / 4] = make_uint4(w[i], w[i + 1], w[i + 2], w[i + 3]);
    } else if constexpr (kN == 2) {
      reinterpret_cast<uint2*>(dst)[i / 2] = make_uint2(w[i], w[i + 1]);
    } else {
      reinterpret_cast<unsigned*>(dst)[i] = w[i];
    }
  }
}

// Stores kWords 32-bit words at dst: 16- or 8-byte vectors where the count and the address
// allow, else words. A slot is only 4-byte aligned in general: a page holds P x 132 (fp8)
// or P x 68 (fp4) bytes, so for P = 1 or 2 a token's values start at any multiple of 4.
// kAlign: the alignment the caller guarantees (a staged row in shared memory: 16 bytes
// where the lane's part is a multiple of 16), which spares the run-time tests (in run
// 64's profile of the bf16 key kernel, 12% of the samples in its store code were
// branch-resolving stalls).
template <int kWords, int kAlign = 4>
__device__ __forceinline__ void store_words(uint8_t* dst, const unsigned (&w)[kWords]) {
  constexpr int kWide = kWords % 4 == 0 ? 4 : 1, kPair = kWords % 2 == 0 ? 2 : 1;
  const auto address = reinterpret_cast<uintptr_t>(dst);
  if (kWide == 4 && (kAlign % 16 == 0 || (address & 15) == 0)) {
    store_vectors<kWide>(dst, w);
  } else if (kPair == 2 && (kAlign % 8 == 0 || (address & 7) == 0)) {
    store_vectors<kPair>(dst, w);
  } else {
    store_vectors<1>(dst, w);
  }
}

// Stores kCount values value(0) .. value(kCount - 1) as bf16 at dst (a functor, so that
// a value can be made where it is packed), 8 values (16 bytes) at a time; dst kAlign-aligned
// (store_words).
template <int kCount, int kAlign = 4, class Value>
__device__ __forceinline__ void store_bf16(Value value, uint8_t* dst) {
  constexpr int kChunk = kCount < 8 ? kCount : 8;
#pragma unroll
  for (int c = 0; c < kCount; c += kChunk) {
    unsigned w[kChunk / 2];
#pragma unroll
    for (int i = 0; i < kChunk / 2; ++i) {
      const __nv_bfloat162 pair = __floats2bfloat162_rn(value(c + 2 * i), value(c + 2 * i + 1));  // .x low
      w[i] = *reinterpret_cast<const unsigned*>(&pair);
    }
    store_words<kChunk / 2, kAlign>(dst + 2 * c, w);
  }
}

// The alignment of a lane's part of a row at `align`-aligned `values`, the part `bytes`
// long (both powers of two): the smaller of the two.
__host__ __device__ constexpr int part_alignment(int align, int bytes) { return align < bytes ? align : bytes; }

// One head quantised and written: value bytes at `values` (the head's slot, kValuesAlign-
// aligned) and scale bytes at `scales`. Layout per reference/paged_cache.h / quantize.h.
// `store` false: compute only (a lane group padding the last warp). Returns the fp8
// per-head scale (1 otherwise), which the query path folds into the head weight.
template <ref::StorageFormat kFormat, int kLanes, int kValuesAlign = 4>
__device__ __forceinline__ float store_head(const HeadPart<kLanes>& x, int part, const ref::QuantSpec& q,
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
    // Codes are made where they are packed: a lane may hold 128 values.
    const auto code = [&](int k) {
      return e2m1_code(apply_scale(x[k], scale[k / kBlockValues], inv[k / kBlockValues], true, q.apply),
                       q.fp4_rounding);
    };
    if (!store) return 1.0f;
    if constexpr (kFormat == ref::StorageFormat::kFp4E2m1) {
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
      store_bf16<kV, part_alignment(kValuesAlign, kV * 2)>(
          [&](int k) { return __fmul_rn(e2m1_value(code(k)), scale[k / kBlockValues]); }, values + part * kV * 2);
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

// Widens kV bf16 values, two per 32-bit word (the even one in the low half), to fp32:
// exact, the bits move to the high half.
template <int kV>
__device__ __forceinline__ void widen_bf16(const unsigned (&w)[kV / 2], float (&x)[kV]) {
#pragma unroll
  for (int i = 0; i < kV / 2; ++i) {
    x[2 * i] = __uint_as_float(w[i] << 16);
    x[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF'0000u);
  }
}

// Loads this lane's V input values (bf16 or fp32) of a 128-value head.
template <int kLanes>
__device__ __forceinline__ void load_head(const void* head, bool bf16, int part, HeadPart<kLanes>& x) {
  constexpr int kV = HeadGroup<kLanes>::kValues;
  if (!bf16) {
    load_floats(static_cast<const float*>(head) + part * kV, x);
    return;
  }
  const uint8_t* src = static_cast<const uint8_t*>(head) + part * kV * 2;
  unsigned w[kV / 2];
#pragma unroll
  for (int i = 0; i < kV / 2; i += 4) {
    const uint4 v = reinterpret_cast<const uint4*>(src)[i / 4];
    w[i] = v.x, w[i + 1] = v.y, w[i + 2] = v.z, w[i + 3] = v.w;
  }
  widen_bf16<kV>(w, x);
}

// The rotate stages every path shares: RoPE by a table row (32 cos, 32 sin), then (when the recipe has it)
// the Hadamard rotation, each rounded to bf16 when the recipe says so.
template <int kLanes>
__device__ __forceinline__ void rope_and_rotate(HeadPart<kLanes>& x, int part, const KernelRecipe& r,
                                                const ref::IntermediateRounding& rounding, const float* cos_row,
                                                const float* sin_row) {
  rope_head<kLanes>(x, part, r.rope_pairing, r.rope_placement, r.rope_fma, cos_row, sin_row);
  round_head_bf16<kLanes>(rounding.rope, x);
  if (r.hadamard) {
    hadamard_head<kLanes>(x, part);
    round_head_bf16<kLanes>(rounding.hadamard, x);
  }
}

}  // namespace dsaf::dev
