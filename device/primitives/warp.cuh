// File: warp.cuh
// Lane-group helpers for kernels that spread one 128-value head over a group of
// kLanes consecutive lanes of a warp (1, 2, 4 or 8), 32 / kLanes heads per warp.
// Lane `part` of a group (0..kLanes-1) holds the contiguous elements
// part * V .. part * V + V - 1, V = 128 / kLanes. Shuffles use xor masks below kLanes or a
// width of kLanes, so they never leave the group. The reductions follow the orders of
// reference/recipe.h (ReductionOrder); only arithmetic written here runs on the device.
#pragma once

#include <cuda_runtime.h>

namespace dsaf::dev {

inline constexpr unsigned kFullMask = 0xFFFF'FFFFu;
inline constexpr int kWarpLanes = 32;
inline constexpr int kHeadDim = 128;

template <int kLanes>
struct HeadGroup {
  static_assert(kLanes == 1 || kLanes == 2 || kLanes == 4 || kLanes == 8, "1, 2, 4 or 8 lanes");
  static constexpr int kValues = kHeadDim / kLanes;  // contiguous values per lane
  static constexpr int kPerWarp = kWarpLanes / kLanes;  // heads per warp
  // ReductionOrder::kWarpTree is defined on 32 virtual lanes of 4 terms; a lane holds this many.
  static constexpr int kVirtualLanes = kValues / 4;
};

// Maximum over aligned groups of kWidth lanes (a power of two <= 32). fmaxf is exact and
// order-independent for the finite values it sees here.
template <int kWidth>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int mask = kWidth / 2; mask >= 1; mask /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, mask));
  return v;
}

// The xor butterfly over 32 virtual lanes, masks 16, 8, 4, 2, 1 (p_v = p_v + p_{v^m}), with
// kSlots consecutive virtual lanes held by each lane in p: masks of at least kSlots cross
// lanes (xor mask / kSlots), smaller ones stay in the lane. fadd is commutative, so both
// ends of each butterfly hold the same sum, as on a 32-lane warp.
template <int kSlots>
__device__ __forceinline__ void virtual_lane_butterfly(float (&p)[kSlots]) {
#pragma unroll
  for (int mask = 16; mask >= 1; mask /= 2) {
    if (mask >= kSlots) {
#pragma unroll
      for (int j = 0; j < kSlots; ++j) p[j] = __fadd_rn(p[j], __shfl_xor_sync(kFullMask, p[j], mask / kSlots));
    } else {
      float q[kSlots];
#pragma unroll
      for (int j = 0; j < kSlots; ++j) q[j] = __fadd_rn(p[j], p[j ^ mask]);
#pragma unroll
      for (int j = 0; j < kSlots; ++j) p[j] = q[j];
    }
  }
}

// ReductionOrder::kWarpTree: virtual lane v (terms 4v..4v+3) folds its 4 terms from 0, then
// the butterfly; virtual lane v sits in lane part v / kVirtualLanes, slot v % kVirtualLanes.
template <int kLanes, class Fold>
__device__ __forceinline__ float warp_tree_fold(const float (&terms)[HeadGroup<kLanes>::kValues], Fold fold) {
  constexpr int kSlots = HeadGroup<kLanes>::kVirtualLanes;
  float p[kSlots];
#pragma unroll
  for (int j = 0; j < kSlots; ++j) {
    p[j] = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) p[j] = fold(p[j], terms[4 * j + i]);
  }
  virtual_lane_butterfly<kSlots>(p);
  return p[0];
}

// ReductionOrder::kWarpTreeHalves: virtual lane l folds terms 2l+1, 2l, 64+2l, 65+2l from 0,
// then kWarpTree's butterfly. At 1 lane a head all 32 virtual lanes compute in the lane.
// Otherwise parts p < kLanes/2 hold the head half and p + kLanes/2 the matching stretch of
// the tail, so virtual lane l's head pair and tail pair sit at the same local index 2j in
// partners p and p ^ kLanes/2 (kSlots = V/2 virtual lanes a partner pair): the head part
// folds its pair, hands the partial to the tail part (one shuffle a slot), which folds
// its own pair on top. The butterfly then runs on the tail parts' partials, with slot
// masks in the lane and larger masks across tail parts (xor mask / kSlots < kLanes/2, so
// a tail part's partner is a tail part); the head parts run the same steps on values that
// are not used, and take the result from their partner at the end.
template <int kLanes, class Fold>
__device__ __forceinline__ float warp_tree_halves_fold(const float (&terms)[HeadGroup<kLanes>::kValues], int part,
                                                       Fold fold) {
  constexpr int kV = HeadGroup<kLanes>::kValues;
  constexpr int kSlots = kLanes == 1 ? 32 : kV / 2;
  constexpr int kHalf = kLanes / 2;
  float p[kSlots];
#pragma unroll
  for (int j = 0; j < kSlots; ++j) {
    if constexpr (kLanes == 1) {
      p[j] = fold(fold(fold(fold(0.0f, terms[2 * j + 1]), terms[2 * j]), terms[64 + 2 * j]), terms[65 + 2 * j]);
    } else {
      const float own = fold(fold(0.0f, terms[2 * j + 1]), terms[2 * j]);  // the head part's pair
      const float head = __shfl_xor_sync(kFullMask, own, kHalf);
      p[j] = fold(fold(head, terms[2 * j]), terms[2 * j + 1]);  // the tail part's pair on top
    }
  }
  virtual_lane_butterfly<kSlots>(p);
  if constexpr (kLanes == 1) {
    return p[0];
  } else {
    const float from_tail = __shfl_xor_sync(kFullMask, p[0], kHalf);
    return part >= kHalf ? p[0] : from_tail;
  }
}

// p_e = p_e + p_{e+kM} for e < kM. kM is a template argument so that the trip count is a
// constant wherever this is inlined and p stays in registers: a bound that is itself a loop
// variable can leave the step a loop, with p indexed at run time in local memory.
template <int kM, int kN>
__device__ __forceinline__ void add_upper_half(float (&p)[kN]) {
  static_assert(2 * kM <= kN, "p holds both halves");
#pragma unroll
  for (int e = 0; e < kM; ++e) p[e] = __fadd_rn(p[e], p[e + kM]);
}

// ReductionOrder::kBlockTree: four groups of 32 terms (Triton's warps of one term a lane).
// In group g, p_e = fold(fold(0, t_{e+16}), t_e) for e < 16, then p_e += p_{e+m} for
// m = 8, 4, 2, 1 (e < m), w_g = p_0; the result is (w_0 + w_2) + (w_1 + w_3). A lane holds
// 128 / kLanes contiguous terms: 1, 2 or 4 whole groups compute in the lane, and at
// 8 lanes a group spans lanes 2g and 2g + 1, which trade their halves by one shuffle per
// term and then compute the same p_e. The group sums pair across lanes by xor shuffles
// (fadd is commutative, so both ends hold the same sum).
template <int kLanes, class Fold>
__device__ __forceinline__ float block_tree_fold(const float (&terms)[HeadGroup<kLanes>::kValues], int part,
                                                 Fold fold) {
  constexpr int kV = HeadGroup<kLanes>::kValues;
  constexpr int kGroups = kV >= 32 ? kV / 32 : 1;  // groups a lane computes
  float w[kGroups];
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    float p[16];
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      float low, high;  // terms e and e + 16 of the group
      if constexpr (kV >= 32) {
        low = terms[32 * g + e];
        high = terms[32 * g + e + 16];
      } else {
        const float other = __shfl_xor_sync(kFullMask, terms[e], 1);
        const bool upper = (part & 1) != 0;
        low = upper ? other : terms[e];
        high = upper ? terms[e] : other;
      }
      p[e] = fold(fold(0.0f, high), low);
    }
    add_upper_half<8>(p);
    add_upper_half<4>(p);
    add_upper_half<2>(p);
    add_upper_half<1>(p);
    w[g] = p[0];
  }
  if constexpr (kLanes == 1) {
    return __fadd_rn(__fadd_rn(w[0], w[2]), __fadd_rn(w[1], w[3]));
  } else if constexpr (kLanes == 2) {  // lane part holds groups 2 part, 2 part + 1
    return __fadd_rn(__fadd_rn(w[0], __shfl_xor_sync(kFullMask, w[0], 1)),
                     __fadd_rn(w[1], __shfl_xor_sync(kFullMask, w[1], 1)));
  } else {  // one group a lane (4 lanes) or a lane pair (8 lanes): g pairs with g ^ 2, then g ^ 1
    constexpr int kStride = kLanes / 4;  // lanes per group
    const float a = __fadd_rn(w[0], __shfl_xor_sync(kFullMask, w[0], 2 * kStride));
    return __fadd_rn(a, __shfl_xor_sync(kFullMask, a, kStride));
  }
}

// ReductionOrder::kSequential: ((t0 + t1) + t2) + ... over the 128 terms. The running sum
// travels through the group: part 0 folds its terms, hands the sum to part 1, and so on;
// the last broadcast leaves the result in every lane.
template <int kLanes, class Fold>
__device__ __forceinline__ float sequential_fold(const float (&terms)[HeadGroup<kLanes>::kValues], int part,
                                                 Fold fold) {
  float acc = 0.0f;
#pragma unroll
  for (int src = 0; src < kLanes; ++src) {
    if (part == src) {
#pragma unroll
      for (int i = 0; i < HeadGroup<kLanes>::kValues; ++i) acc = fold(acc, terms[i]);
    }
    if constexpr (kLanes > 1) acc = __shfl_sync(kFullMask, acc, src, kLanes);
  }
  return acc;
}

}  // namespace dsaf::dev
