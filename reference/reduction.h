// File: reduction.h
// The two orders in which a 128-term reduction is evaluated (ReductionOrder in
// recipe.h). Each term is folded into a partial result by `fold(acc, i)`; partial
// results are merged by `combine(a, b)`. Floating-point addition is not associative,
// so the order is part of the numeric contract.
#pragma once

#include <array>

#include "reference/recipe.h"

namespace dsaf::ref {

inline constexpr int kWarpLanes = 32;
inline constexpr int kTermsPerLane = kHeadDim / kWarpLanes;  // 4

template <class T, class Fold, class Combine>
T reduce_128(ReductionOrder order, T identity, Fold fold, Combine combine) {
  if (order == ReductionOrder::kSequential) {
    T acc = identity;
    for (int i = 0; i < kHeadDim; ++i) acc = fold(acc, i);
    return acc;
  }
  // kWarpTree: lanes fold 4 contiguous terms each, then the xor butterfly 16..1.
  std::array<T, kWarpLanes> lane;
  for (int l = 0; l < kWarpLanes; ++l) {
    T acc = identity;
    for (int j = 0; j < kTermsPerLane; ++j) acc = fold(acc, kTermsPerLane * l + j);
    lane[l] = acc;
  }
  for (int mask = kWarpLanes / 2; mask >= 1; mask /= 2) {
    std::array<T, kWarpLanes> next;
    for (int l = 0; l < kWarpLanes; ++l) next[l] = combine(lane[l], lane[l ^ mask]);
    lane = next;
  }
  return lane[0];
}

}  // namespace dsaf::ref
