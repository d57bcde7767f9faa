// File: persistent_kernel.cuh
// key_store_kernel: the fused key path with persistent warps, each of which walks its
// tiles (tile_walk.cuh), staging tile i + 1's inputs while it computes tile i
// (staging.cuh) and writing each tile's cache rows out through the ring. kWarpsPerBlock
// warps a block, kKeyMinBlocks<kLanes> blocks an SM; every result bit is the same for
// every width, grid and schedule (tests/device/key_store_gpu_test.cu).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "device/api.h"
#include "device/key_store/key_paths.cuh"
#include "device/key_store/key_token.cuh"
#include "device/key_store/staging.cuh"
#include "device/key_store/tile_walk.cuh"
#include "device/launch.h"
#include "device/primitives/async_copy.cuh"

namespace dsaf::dev::key_kernel {

constexpr int kWarpsPerBlock = 4;
constexpr int kThreadsPerBlock = kWarpsPerBlock * kWarpLanes;

// Blocks of kThreadsPerBlock per SM; the register cap is 65536 / (128 x this), rounded down
// to a multiple of 8: 1 lane: 255 (128 values + the pipeline), 2: 168, 4: 80, 8: 64 (the
// most each width's pinned paths need; ptxas -v reports a few bytes of spills on some
// 4-lane ones). At 2 lanes, 4 blocks of 128 registers spill the copies' addresses inside
// the tile loop (~50 bytes a thread); 3 blocks without spills are faster. Shared memory
// per SM, staging + norm weights + 1 KB reserved per block: 1 lane 2 x 114 KB (all of it),
// 2: 3 x 60 KB, 4: 6 x 33 KB, 8: 8 x 15.5 KB (of 228 KB; static_assert below).
template <int kLanes>
inline constexpr int kKeyMinBlocks = kLanes == 1 ? 2 : kLanes == 2 ? 3 : kLanes == 4 ? 6 : 8;

template <int kLanes>
constexpr bool fits_shared_memory() {  // 228 KB per SM on sm_90, 1 KB of it reserved per block
  return kKeyMinBlocks<kLanes> * (sizeof(KeyRing<kLanes>) * kWarpsPerBlock + 2 * kHeadDim * 4 + 1024) <= 228 * 1024;
}
static_assert(fits_shared_memory<1>() && fits_shared_memory<2>() && fits_shared_memory<4>() && fits_shared_memory<8>(),
              "kKeyMinBlocks blocks of staging fit an SM's shared memory");

template <ref::StorageFormat kFormat, int kLanes, int kPath>
__global__ void __launch_bounds__(kThreadsPerBlock, kKeyMinBlocks<kLanes>)
key_store_kernel(const KeyStoreArgs args, const KeyStoreSchedule schedule) {
  using Ring = KeyRing<kLanes>;
  extern __shared__ __align__(128) uint4 shared_words[];
  // The warp index through a shuffle: the compiler then knows it is uniform across the warp,
  // and so is the tile loop below; otherwise it guards every shuffle in the loop as if the
  // warp could have diverged (WARPSYNC + ENDCOLLECTIVE around each one).
  const int warp = __shfl_sync(kFullMask, static_cast<int>(threadIdx.x / kWarpLanes), 0);
  const int lane = threadIdx.x % kWarpLanes;
  Ring& ring = reinterpret_cast<Ring*>(shared_words)[warp];
  const int part = lane % kLanes, token_in_tile = lane / kLanes;
  const ref::RecipeFields r = pinned_recipe<kPath>(args.recipe);

  const int64_t tiles = (args.num_tokens + Ring::kTokens - 1) / Ring::kTokens;
  const bool staged_store = stages_cache_rows<kFormat>(args.cache, args.page_size);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  TileWalk walk = TileWalk::of(schedule, tiles, static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp, warps);

  // The group of tile i (issue_tile_copies) as one commit group; returns the buffer that
  // holds tile i's RoPE rows.
  const auto issue_group = [&](int i, int64_t t, int64_t t_next, int previous_buffer) {
    const int buffer = issue_tile_copies<kLanes>(args, ring, i, t, t_next, previous_buffer, lane);
    commit_async();
    return buffer;
  };
  // The tiles i, i + 1 and i + 2 (positions are copied a tile ahead of the rows); at the
  // top of iteration i, position i + 3's slot is finished and its order entry read, and
  // position i + 4's ticket requested; tile i + 3 moves up at the end.
  const auto tile_at = [&](int64_t i) {  // at once, for the first three (in order)
    const int64_t slot = walk.slot(i, lane);
    return walk.tile(slot, walk.entry(slot));
  };
  int64_t tile = tile_at(0), next_tile = tile_at(1), tile_after_next = tile_at(2);
  int32_t ticket = walk.request(3, lane);
  // Prologue: the positions and input rows of tile 0 (the rows need no position) are in
  // flight while the block stages the norm's weight and bias, which every token reads,
  // in shared memory (not through L1); then the rest of tile 0's group. A launch so waits
  // out two memory round trips before its first arithmetic, not three.
  if (tile >= 0) {
    issue_positions<kLanes>(args, tile, ring, 0, lane);
    issue_input_rows<kLanes>(args, tile, ring, lane);
  }
  commit_async();
  __shared__ __align__(16) float norm_weight[kHeadDim];  // read as float4
  __shared__ __align__(16) float norm_bias[kHeadDim];
  for (int i = threadIdx.x; i < kHeadDim; i += kThreadsPerBlock) {
    if (args.norm_weight != nullptr) norm_weight[i] = args.norm_weight[i];
    if (args.norm_bias != nullptr) norm_bias[i] = args.norm_bias[i];
  }
  __syncthreads();
  wait_async<0>();
  __syncwarp();
  int rope_buffer = issue_group(0, tile, next_tile, 1);  // holds tile i's RoPE rows

  for (int i = 0; tile >= 0; ++i) {
    const int64_t later_slot = walk.finish(i + 3, ticket);
    const int32_t later_entry = walk.entry(later_slot);
    ticket = walk.request(i + 4, lane);
    wait_async<0>();  // the group of this tile: its input, RoPE rows, the next positions
    __syncwarp();     // (every lane's copies)

    HeadPart<kLanes> x;
    const KeyToken t = read_key_token<kLanes>(args, ring, tile, i % 3, token_in_tile, part, x);
    __syncwarp();  // the input rows are read: the next tile's group may land
    const int next_rope_buffer = issue_group(i + 1, next_tile, tile_after_next, rope_buffer);
    transform_key<kLanes>(r, args.input_bf16, part, norm_weight, norm_bias, ring.rope[rope_buffer], token_in_tile, x);
    if (staged_store) {
      // The cache values go out whole (16 lanes write a 256-byte row at once, not 32 lanes
      // 16 bytes of 32 rows) from the RoPE buffer the next tile does not need: this
      // tile's, once its rows are read, or the other one when the next tile keeps them.
      __syncwarp();
      float* stage = ring.rope[next_rope_buffer == rope_buffer ? 1 - rope_buffer : rope_buffer];
      uint8_t* staged_row = reinterpret_cast<uint8_t*>(stage + token_in_tile * Ring::kRopeStride);
      uint8_t* value_dst = store_key<kFormat, kLanes, true>(args, r, part, t, staged_row, x);
      if (part == 0) ring.value_dst[token_in_tile] = t.store ? value_dst : nullptr;
      __syncwarp();
      copy_out_staged<kFormat, kLanes>(reinterpret_cast<const uint8_t*>(stage), ring, tile, args.num_tokens, lane);
      __syncwarp();  // the area may take the RoPE rows of tile i + 2 next
    } else {
      store_key<kFormat, kLanes, false>(args, r, part, t, nullptr, x);
    }
    rope_buffer = next_rope_buffer;
    tile = next_tile, next_tile = tile_after_next, tile_after_next = walk.tile(later_slot, later_entry);
  }
  walk.leave(lane, warps);
  wait_async<0>();  // nothing may still be writing this block's shared memory at exit
}

// Launches key_store_kernel on a grid of as many blocks as fit on the current device at
// once (resident_blocks, per device), fewer when there are fewer
// tiles or the schedule caps the grid.
template <ref::StorageFormat kFormat, int kLanes, int kPath>
void launch_persistent(const KeyStoreArgs& args, const KeyStoreSchedule& schedule, int64_t tiles) {
  const auto kernel = key_store_kernel<kFormat, kLanes, kPath>;
  constexpr int kShared = sizeof(KeyRing<kLanes>) * kWarpsPerBlock;
  const int resident = resident_blocks(kernel, kThreadsPerBlock, kShared, "key_store_kernel");
  int64_t blocks = std::min<int64_t>((tiles + kWarpsPerBlock - 1) / kWarpsPerBlock, resident);
  if (schedule.max_blocks > 0) blocks = std::min<int64_t>(blocks, schedule.max_blocks);
  kernel<<<static_cast<unsigned>(blocks), kThreadsPerBlock, kShared>>>(args, schedule);
}

}  // namespace dsaf::dev::key_kernel
