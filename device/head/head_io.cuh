// File: head_io.cuh
// One 128-value head in the registers of a group of kLanes lanes (primitives/warp.cuh:
// lane `part` holds the contiguous values part*V .. part*V+V-1, V = 128 / kLanes): loads
// (bf16 or fp32), the bf16 round trip, and the vector stores the quantisers write with.
// The group width is a template parameter: every result bit is the same for all widths.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

#include "device/primitives/warp.cuh"

namespace dsaf::dev {

template <int kLanes>
using HeadPart = float[HeadGroup<kLanes>::kValues];

// The 32 bits of a bf16 pair, .x in the low half (its layout in memory), read through
// memcpy: a pointer cast to unsigned would break the aliasing rules; nvcc compiles either
// to no instruction.
__device__ __forceinline__ unsigned bf16_pair_bits(__nv_bfloat162 pair) {
  unsigned bits;
  memcpy(&bits, &pair, sizeof bits);
  return bits;
}

// v rounded to bf16 (nearest even; NaN -> the canonical 0x7fff) and widened back. A bf16
// widens to fp32 by taking the high 16 bits, so the pair (+0, v) -- v in the high half, +0
// the low -- is that fp32 already: cvt.rn.bf16x2 rounds each half as cvt.rn.bf16 rounds
// one value, and on sm_90 it is the one instruction F2FP.BF16.F32.PACK_AB with a zero
// register. Rounding alone and widening (a shift, or a mask for a pair's high half) takes
// two instructions a value, or three a pair.
__device__ __forceinline__ float to_bf16_and_back(float v) {
  return __uint_as_float(bf16_pair_bits(__floats2bfloat162_rn(0.0f, v)));
}

// Every value of the lane rounded to bf16 and widened back (to_bf16_and_back: one
// instruction a value).
template <int kLanes>
__device__ __forceinline__ void round_head_bf16(bool enabled, HeadPart<kLanes>& x) {
  if (!enabled) return;
#pragma unroll
  for (int i = 0; i < HeadGroup<kLanes>::kValues; ++i) x[i] = to_bf16_and_back(x[i]);
}

// Loads this lane's n floats of a [128] vector (n a multiple of 4, 16-byte aligned).
template <int kCount>
__device__ __forceinline__ void load_floats(const float* src, float (&dst)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; i += 4) {
    const float4 v = *reinterpret_cast<const float4*>(src + i);
    dst[i] = v.x, dst[i + 1] = v.y, dst[i + 2] = v.z, dst[i + 3] = v.w;
  }
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
// where the lane's part is a multiple of 16) spares the run-time alignment tests, whose
// branches stall the store code.
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
      w[i] = bf16_pair_bits(__floats2bfloat162_rn(value(c + 2 * i), value(c + 2 * i + 1)));  // .x low
    }
    store_words<kChunk / 2, kAlign>(dst + 2 * c, w);
  }
}

// The alignment of a lane's part of a row at `align`-aligned `values`, the part `bytes`
// long (both powers of two): the smaller of the two.
__host__ __device__ constexpr int part_alignment(int align, int bytes) { return align < bytes ? align : bytes; }

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

}  // namespace dsaf::dev
