// File: reduction.h
// The four orders in which a 128-term reduction is evaluated (ReductionOrder in
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
  if (order == ReductionOrder::kBlockTree) {
    // Four groups of 32 (one warp each, one term a lane): lane e < 16 folds term e onto the
    // fold of term e + 16, the lower halves add down to one sum, the groups pair as
    // (g0 + g2) + (g1 + g3).
    std::array<T, 4> group;
    for (int g = 0; g < 4; ++g) {
      std::array<T, 16> p;
      for (int e = 0; e < 16; ++e) p[e] = fold(fold(identity, 32 * g + e + 16), 32 * g + e);
      for (int m = 8; m >= 1; m /= 2) {
        for (int e = 0; e < m; ++e) p[e] = combine(p[e], p[e + m]);
      }
      group[g] = p[0];
    }
    return combine(combine(group[0], group[2]), combine(group[1], group[3]));
  }
  // kWarpTree: lanes fold 4 contiguous terms each; kWarpTreeHalves: lane l folds 2l+1,
  // 2l, 64+2l, 65+2l. Then the xor butterfly 16..1.
  std::array<T, kWarpLanes> lane;
  for (int l = 0; l < kWarpLanes; ++l) {
    T acc = identity;
    if (order == ReductionOrder::kWarpTreeHalves) {
      for (const int i : {2 * l + 1, 2 * l, kHeadDim / 2 + 2 * l, kHeadDim / 2 + 2 * l + 1}) acc = fold(acc, i);
    } else {
      for (int j = 0; j < kTermsPerLane; ++j) acc = fold(acc, kTermsPerLane * l + j);
    }
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
