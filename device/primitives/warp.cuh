// File: warp.cuh
// Warp-level helpers for kernels that hold one 128-value head per warp, 4 contiguous
// values per lane (lane l: elements 4l..4l+3). The reductions follow the orders of
// reference/recipe.h (ReductionOrder); only arithmetic written here runs on the device.
#pragma once

#include <cuda_runtime.h>

namespace dsaf::dev {

inline constexpr unsigned kFullMask = 0xFFFF'FFFFu;
inline constexpr int kLanes = 32;
inline constexpr int kPerLane = 4;

// ReductionOrder::kWarpTree: lane partials combined by the xor butterfly 16, 8, 4, 2, 1
// (p = p + shfl_xor(p, m)); every lane ends with the same value.
__device__ __forceinline__ float warp_tree_sum(float partial) {
#pragma unroll
  for (int mask = 16; mask >= 1; mask /= 2) {
    partial = __fadd_rn(partial, __shfl_xor_sync(kFullMask, partial, mask));
  }
  return partial;
}

// Maximum over `width` consecutive lanes (a power of two <= 32). fmaxf is exact and
// order-independent for the finite values it sees here.
template <int kWidth>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int mask = kWidth / 2; mask >= 1; mask /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, mask));
  return v;
}

// ReductionOrder::kSequential: ((t0 + t1) + t2) + ... over the 128 terms, where lane l
// holds terms 4l..4l+3 and `fold(acc, term)` folds one term. Every lane evaluates the same
// chain (the terms are broadcast one lane at a time), so all lanes end with the result.
template <class Fold>
__device__ __forceinline__ float sequential_fold(const float (&terms)[kPerLane], Fold fold) {
  float acc = 0.0f;
  for (int src = 0; src < kLanes; ++src) {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc = fold(acc, __shfl_sync(kFullMask, terms[i], src));
  }
  return acc;
}

}  // namespace dsaf::dev
