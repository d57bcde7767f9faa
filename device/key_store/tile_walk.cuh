// File: tile_walk.cuh
// The tiles one key-kernel warp computes, in order (api.h KeyStoreSchedule): batch order,
// tiles g, g + W, g + 2W, ... for warp g of W, so that the grid sweeps the batch front to
// back; or a contiguous run of the tile order, so that tiles the order put side by side
// (same positions) follow each other in one warp and share their RoPE rows. Runs differ
// by one tile at most (runs of ceil(tiles / W) would leave the last warps none). With
// tile_counters the runs cover all but the order's last hand_out_tiles_per_warp x W tiles
// (the pool), which are handed out one at a time, by an atomic counter, to the warps that
// finish their runs first: runs of equal length end at different times on different SMs,
// and without a pool the SMs that finish first idle while the last runs end.
//
// A walk position's slot (its index into the order, or its tile in batch order) comes in
// two steps, request() and finish(), so that the counter's atomic is read a tile after it
// is issued; the order's entry is read a tile before the tile is needed, since a load used
// at once waits out its whole latency (widened where it is read, ptxas waits for it at the
// top of every tile).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device/api.h"
#include "device/primitives/warp.cuh"

namespace dsaf::dev::key_kernel {

struct TileWalk {
  const int32_t* order;           // null: batch order
  int64_t first, step, count;     // positions i < count: slot first + i x step
  int32_t* pool;                  // null: no pool; else [0] tiles handed out, [1] warps done
  int64_t pool_first, pool_size;  // pool positions take slots pool_first + 0, 1, ...
  bool pool_open;

  __device__ static TileWalk of(const KeyStoreSchedule& s, int64_t tiles, int64_t warp, int64_t warps) {
    if (s.tile_order != nullptr) {
      const int64_t pool_size =
          s.tile_counters == nullptr ? 0 : min(tiles, static_cast<int64_t>(s.hand_out_tiles_per_warp) * warps);
      const int64_t runs = tiles - pool_size, first = warp * runs / warps;
      return {s.tile_order, first, 1, (warp + 1) * runs / warps - first, s.tile_counters, runs, pool_size,
              pool_size > 0};
    }
    return {nullptr, warp, warps, warp < tiles ? (tiles - warp + warps - 1) / warps : 0, nullptr, 0, 0, false};
  }
  // Step one for position i: lane 0's ticket from the pool (0 for a run's position).
  __device__ int32_t request(int64_t i, int lane) const {
    return i >= count && pool_open && lane == 0 ? atomicAdd(pool, 1) : 0;
  }
  // Step two: the slot of position i, or -1 past the walk's end. Positions are finished
  // in order, and after the first -1 every later one is -1 (no more requests).
  __device__ int64_t finish(int64_t i, int32_t ticket) {
    if (i < count) return first + i * step;
    if (!pool_open) return -1;
    const int64_t k = __shfl_sync(kFullMask, ticket, 0);
    if (k < pool_size) return pool_first + k;
    pool_open = false;
    return -1;
  }
  __device__ int64_t slot(int64_t i, int lane) { return finish(i, request(i, lane)); }
  // The order's entry at a slot (0 without an order or a slot).
  __device__ int32_t entry(int64_t slot) const { return order != nullptr && slot >= 0 ? __ldg(order + slot) : 0; }
  // The tile at a slot, or -1; `entry` = entry(slot).
  __device__ int64_t tile(int64_t slot, int32_t entry) const { return slot < 0 ? -1 : order != nullptr ? entry : slot; }
  // After the walk: the last warp of the launch to leave sets the pool's counters back to
  // zero for the next launch (every warp's tickets are drawn before it counts itself out).
  __device__ void leave(int lane, int64_t warps) const {
    if (pool == nullptr || lane != 0) return;
    __threadfence();
    if (atomicAdd(pool + 1, 1) == warps - 1) {
      pool[0] = 0;
      pool[1] = 0;
    }
  }
};

}  // namespace dsaf::dev::key_kernel
