// File: producer_kernel.cuh
// key_store_producer_kernel: the fused key path with producer and compute warps, for the
// pinned paths that ask for it (key_paths.cuh, producer_warps) at 1 lane. Each compute
// warp has a producer warp of its own that walks the tiles (tile_walk.cuh), issues every
// copy and copies the staged cache rows out (staging.cuh); the compute warp waits for its
// tile's group, computes the tokens (key_token.cuh, as key_store_kernel does), stages
// them, and hands the stage back. The walk, the copies and the copy-out issue few
// instructions but wait on loads; moved to their own warps they run beside the arithmetic.
// That pays where the arithmetic leaves issue slots idle: the sequential LayerNorm chains
// of the V3.2 and V4-reference paths (docs/key-path-speed.md has the measurements).
//
// One block per SM: 8 compute warps (warpgroups 0-1, 216 registers after setmaxnreg) and
// 8 producers (warpgroups 2-3, 40 registers): 2 x 128 x 216 + 2 x 128 x 40 = 65,536; the
// 8 rings fill shared memory as the 2 x 4 of key_store_kernel do. The hand-offs are
// mbarriers (primitives/mbarrier.cuh), one phase per tile.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "device/api.h"
#include "device/key_store/key_paths.cuh"
#include "device/key_store/key_token.cuh"
#include "device/key_store/staging.cuh"
#include "device/key_store/tile_walk.cuh"
#include "device/launch.h"
#include "device/primitives/async_copy.cuh"
#include "device/primitives/mbarrier.cuh"

namespace dsaf::dev::key_kernel {

constexpr int kComputeWarps = 8;
constexpr int kProducerKernelThreads = 2 * kComputeWarps * kWarpLanes;
constexpr int kComputeRegisters = 216, kProducerRegisters = 40;
static_assert(kComputeWarps * kWarpLanes * (kComputeRegisters + kProducerRegisters) == 65536,
              "the register file, shared out");
// The launch must hold 65536 / kProducerKernelThreads = 128 registers a thread: setmaxnreg moves
// registers within the block's allocation, and a block launched with fewer could never
// satisfy the compute warps' claim (they would wait in setmaxnreg.inc forever).
constexpr int kProducerLaunchRegisters = 65536 / kProducerKernelThreads;

// The hand-offs between a compute warp and its producer, one phase per tile i.
struct alignas(16) KeyHandoff {
  uint64_t landed;     // tile i's group is in shared memory (32 copy arrivals + the plan's)
  uint64_t rows_read;  // the compute warp has read tile i's rows: tile i + 1's group may go
  uint64_t staged;     // tile i's cache rows are staged, their slots in value_dst
  uint64_t copied;     // the producer has read them out: the stage may be written again
  int64_t tiles[2][2];  // [i % 2]: tiles i and i + 1 (-1: none)
};

// Tile i + 1 keeps tile i's RoPE rows (its positions are tile i's): both warps decide
// the buffers alike from the landed positions.
template <int kLanes>
__device__ __forceinline__ bool keeps_rope_rows(const KeyRing<kLanes>& ring, int64_t next_tile, int i, int lane) {
  return next_tile >= 0 && same_positions<kLanes>(ring, (i + 1) % 3, i % 3, lane);
}

template <ref::StorageFormat kFormat, int kLanes>
__device__ void produce_key_tiles(const KeyStoreArgs& args, const KeyStoreSchedule& schedule, KeyRing<kLanes>& ring,
                                  KeyHandoff& h, int64_t warp, int64_t warps, bool staged_store, int lane) {
  using Ring = KeyRing<kLanes>;
  const int64_t tiles = (args.num_tokens + Ring::kTokens - 1) / Ring::kTokens;
  TileWalk walk = TileWalk::of(schedule, tiles, warp, warps);
  const auto tile_at = [&](int64_t i) {
    const int64_t slot = walk.slot(i, lane);
    return walk.tile(slot, walk.entry(slot));
  };
  int64_t tile = tile_at(0), next_tile = tile_at(1), tile_after_next = tile_at(2), previous_tile = -1;
  int32_t ticket = walk.request(3, lane);
  if (tile >= 0) {
    issue_positions<kLanes>(args, tile, ring, 0, lane);
    issue_input_rows<kLanes>(args, tile, ring, lane);
  }
  commit_async();
  wait_async<0>();
  __syncwarp();
  int rope_buffer = 1;  // tile i - 1's
  for (int i = 0;; ++i) {
    if (i > 0) {
      barrier_wait(&h.landed, (i - 1) & 1);     // tile i's positions (acquired here, too)
      barrier_wait(&h.rows_read, (i - 1) & 1);  // the input-row buffer is free
    }
    // tile i's group; `buffer` holds its RoPE rows
    const int buffer = issue_tile_copies<kLanes>(args, ring, i, tile, next_tile, rope_buffer, lane);
    if (lane == 0) h.tiles[i % 2][0] = tile, h.tiles[i % 2][1] = next_tile;
    barrier_arrive_after_copies(&h.landed);
    __syncwarp();
    if (lane == 0) barrier_arrive(&h.landed);
    if (i > 0 && staged_store) {  // tile i - 1's rows, from the buffer tile i does not use
      barrier_wait(&h.staged, (i - 1) & 1);
      const auto* staged = reinterpret_cast<const uint8_t*>(ring.rope[buffer == rope_buffer ? 1 - rope_buffer : rope_buffer]);
      copy_out_staged<kFormat, kLanes>(staged, ring, previous_tile, args.num_tokens, lane);
      __syncwarp();  // every lane's reads of the stage are done: it may take RoPE rows next
      barrier_arrive(&h.copied);
    }
    if (tile < 0) break;
    const int64_t later_slot = walk.finish(i + 3, ticket);
    const int32_t later_entry = walk.entry(later_slot);
    ticket = walk.request(i + 4, lane);
    rope_buffer = buffer;
    previous_tile = tile;
    tile = next_tile, next_tile = tile_after_next, tile_after_next = walk.tile(later_slot, later_entry);
  }
  walk.leave(lane, warps);
  commit_async();
  wait_async<0>();
}

template <ref::StorageFormat kFormat, int kLanes, int kPath>
__global__ void __launch_bounds__(kProducerKernelThreads, 1)
key_store_producer_kernel(const KeyStoreArgs args, const KeyStoreSchedule schedule) {
  using Ring = KeyRing<kLanes>;
  extern __shared__ __align__(128) uint4 shared_words[];
  const int warp = __shfl_sync(kFullMask, static_cast<int>(threadIdx.x / kWarpLanes), 0);
  const int lane = threadIdx.x % kWarpLanes;
  const bool producer = warp >= kComputeWarps;
  const int w = producer ? warp - kComputeWarps : warp;
  Ring& ring = reinterpret_cast<Ring*>(shared_words)[w];
  KeyHandoff& h = reinterpret_cast<KeyHandoff*>(reinterpret_cast<Ring*>(shared_words) + kComputeWarps)[w];
  __shared__ __align__(16) float norm_weight[kHeadDim];
  __shared__ __align__(16) float norm_bias[kHeadDim];
  for (int i = threadIdx.x; i < kHeadDim; i += kProducerKernelThreads) {
    if (args.norm_weight != nullptr) norm_weight[i] = args.norm_weight[i];
    if (args.norm_bias != nullptr) norm_bias[i] = args.norm_bias[i];
  }
  if (!producer && lane == 0) {
    barrier_init(&h.landed, kWarpLanes + 1);
    barrier_init(&h.rows_read, kWarpLanes);
    barrier_init(&h.staged, kWarpLanes);
    barrier_init(&h.copied, kWarpLanes);
  }
  __syncthreads();
  const bool staged_store = stages_cache_rows<kFormat>(args.cache, args.page_size);
  if (producer) {
    registers_release<kProducerRegisters>();
    produce_key_tiles<kFormat, kLanes>(args, schedule, ring, h, static_cast<int64_t>(blockIdx.x) * kComputeWarps + w,
                                       static_cast<int64_t>(gridDim.x) * kComputeWarps, staged_store, lane);
    return;
  }
  registers_claim<kComputeRegisters>();
  const int part = lane % kLanes, token_in_tile = lane / kLanes;
  const ref::RecipeFields r = pinned_recipe<kPath>(args.recipe);
  int rope_buffer = 0;  // tile i's RoPE rows
  for (int i = 0;; ++i) {
    barrier_wait(&h.landed, i & 1);
    const int64_t tile = h.tiles[i % 2][0], next_tile = h.tiles[i % 2][1];
    if (tile < 0) break;
    HeadPart<kLanes> x;
    const KeyToken t = read_key_token<kLanes>(args, ring, tile, i % 3, token_in_tile, part, x);
    const bool keeps = keeps_rope_rows<kLanes>(ring, next_tile, i, lane);
    barrier_arrive(&h.rows_read);
    transform_key<kLanes>(r, args.input_bf16, part, norm_weight, norm_bias, ring.rope[rope_buffer], token_in_tile, x);
    if (staged_store) {
      __syncwarp();  // every lane has read its RoPE row: the stage may be this tile's buffer
      if (i > 0) barrier_wait(&h.copied, (i - 1) & 1);
      float* stage = ring.rope[keeps ? 1 - rope_buffer : rope_buffer];
      uint8_t* staged_row = reinterpret_cast<uint8_t*>(stage + token_in_tile * Ring::kRopeStride);
      uint8_t* value_dst = store_key<kFormat, kLanes, true>(args, r, part, t, staged_row, x);
      if (part == 0) ring.value_dst[token_in_tile] = t.store ? value_dst : nullptr;
      barrier_arrive(&h.staged);
    } else {
      store_key<kFormat, kLanes, false>(args, r, part, t, nullptr, x);
    }
    rope_buffer = keeps ? rope_buffer : 1 - rope_buffer;
  }
}

template <ref::StorageFormat kFormat, int kLanes, int kPath>
void launch_producer(const KeyStoreArgs& args, const KeyStoreSchedule& schedule, int64_t tiles) {
  using Ring = KeyRing<kLanes>;
  constexpr int kShared = kComputeWarps * (sizeof(Ring) + sizeof(KeyHandoff));
  static_assert(kShared + 2 * kHeadDim * 4 <= 227 * 1024, "8 rings, their hand-offs and the norm weights in a block");
  const auto kernel = key_store_producer_kernel<kFormat, kLanes, kPath>;
  // The registers are the compiled kernel's (one sm_90a binary for every device): checked
  // at the first launch that passes (a failed check throws, and the next launch checks again).
  static const bool registers_checked = [&] {
    cudaFuncAttributes attributes{};
    check_cuda(cudaFuncGetAttributes(&attributes, kernel), "key_store_producer_kernel attributes");
    if (attributes.numRegs != kProducerLaunchRegisters) {
      throw Error(ErrorKind::kEnvironment, "key_store_producer_kernel was compiled for " +
                                               std::to_string(attributes.numRegs) + " registers a thread, not " +
                                               std::to_string(kProducerLaunchRegisters) +
                                               ": its setmaxnreg claims could not be met");
    }
    return true;
  }();
  (void)registers_checked;
  const int resident = resident_blocks(kernel, kProducerKernelThreads, kShared, "key_store_producer_kernel");
  int64_t blocks = std::min<int64_t>((tiles + kComputeWarps - 1) / kComputeWarps, resident);
  if (schedule.max_blocks > 0) blocks = std::min<int64_t>(blocks, schedule.max_blocks);
  kernel<<<static_cast<unsigned>(blocks), kProducerKernelThreads, kShared>>>(args, schedule);
}

}  // namespace dsaf::dev::key_kernel
