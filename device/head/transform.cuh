// File: transform.cuh
// The per-head stages before quantisation, shared by the key and query kernels: norm,
// RoPE, Hadamard (head_io.cuh says how a head sits in a lane group). Each stage implements
// the contract of its reference header (reference/norm.h, rope.h, hadamard.h) with CUDA's
// correctly rounded intrinsics (__fadd_rn, __fmul_rn, __fmaf_rn, __frsqrt_rn); the device
// library is compiled with --fmad=false, so no other multiply-add is fused. Where a recipe
// names the GPU's approximate rsqrtf, the hardware instruction (MUFU.RSQ) is used.
#pragma once

#include <cstdint>

#include "device/head/head_io.cuh"
#include "reference/recipe.h"

namespace dsaf::dev {

// sum_i x_i^2 (fma: ss = fma(x, x, ss)) or sum_i x_i, in the recipe's order.
template <int kLanes>
__device__ __forceinline__ float reduce_head(const HeadPart<kLanes>& x, int part, ref::ReductionOrder order,
                                             bool squares, bool fma) {
  const auto fold = [&](float acc, float v) {
    if (!squares) return __fadd_rn(acc, v);
    return fma ? __fmaf_rn(v, v, acc) : __fadd_rn(acc, __fmul_rn(v, v));
  };
  if (order == ref::ReductionOrder::kSequential) return sequential_fold<kLanes>(x, part, fold);
  if (order == ref::ReductionOrder::kBlockTree) return block_tree_fold<kLanes>(x, part, fold);
  if (order == ref::ReductionOrder::kWarpTreeHalves) return warp_tree_halves_fold<kLanes>(x, part, fold);
  return warp_tree_fold<kLanes>(x, fold);
}

__device__ __forceinline__ float inverse_sqrt(float v, ref::RsqrtKind kind) {
  return kind == ref::RsqrtKind::kSm90Approx ? rsqrtf(v) : __frsqrt_rn(v);
}

// x / 128 and x * 2^-7 are the same correctly rounded value (128 is a power of two), so
// the norm multiplies: an IEEE division costs a dozen instructions.
inline constexpr float kInv128 = 0.0078125f;

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
      x[ia] = two_products(a, c[j], b, s[j], -1.0f, ref::first_output_fma(fma));
      x[ib] = two_products(a, s[j], b, c[j], 1.0f, ref::second_output_fma(fma));
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
      x[2 * p] = two_products(a, c[p], b, s[p], -1.0f, ref::first_output_fma(fma));
      x[2 * p + 1] = two_products(a, s[p], b, c[p], 1.0f, ref::second_output_fma(fma));
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
      x[i] = two_products(x[i], c[i], partner[i], s[i], -1.0f, ref::first_output_fma(fma));
    } else {           // holds b, partner holds a: b' = a*s + b*c
      x[i] = two_products(partner[i], s[i], x[i], c[i], 1.0f, ref::second_output_fma(fma));
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

// The rotate stages every path shares: RoPE by a table row (32 cos, 32 sin), then (when the recipe has it)
// the Hadamard rotation, each rounded to bf16 when the recipe says so.
template <int kLanes>
__device__ __forceinline__ void rope_and_rotate(HeadPart<kLanes>& x, int part, const ref::RecipeFields& r,
                                                const ref::IntermediateRounding& rounding, const float* cos_row,
                                                const float* sin_row) {
  rope_head<kLanes>(x, part, r.rope.pairing, r.rope.placement, r.rope.fma, cos_row, sin_row);
  round_head_bf16<kLanes>(rounding.rope, x);
  if (r.hadamard) {
    hadamard_head<kLanes>(x, part);
    round_head_bf16<kLanes>(rounding.hadamard, x);
  }
}

}  // namespace dsaf::dev
