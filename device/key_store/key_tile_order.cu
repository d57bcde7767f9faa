// File: key_tile_order.cu — a tile order for the key kernel (api.h KeyStoreSchedule):
// the batch's tiles radix-sorted by the position of their first token, with CUB (a stable
// LSD sort over the bits of the largest position the RoPE table has: a 64K-row table
// costs two 8-bit passes, not four). Tiles at the same offsets of several sequences then
// sit next to each other in the order, and the warp that computes them reads their RoPE
// rows once.
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <climits>
#include <string>

#include "device/api.h"
#include "device/launch.h"

namespace dsaf::dev {
namespace {

// keys[t] = position of tile t's first token, tiles[t] = t.
__global__ void tile_keys_kernel(const int32_t* __restrict__ positions, int tiles, int tile_tokens,
                                 int32_t* __restrict__ keys, int32_t* __restrict__ tile_ids) {
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < tiles; t += gridDim.x * blockDim.x) {
    keys[t] = positions[static_cast<int64_t>(t) * tile_tokens];
    tile_ids[t] = t;
  }
}

int key_bits(int rope_positions) {  // bits of the largest position, rope_positions - 1
  int bits = 1;
  while (bits < 31 && (rope_positions - 1) >> bits != 0) ++bits;
  return bits;
}

int checked_tiles(int64_t num_tokens, int tile_tokens) {
  if (num_tokens < 1 || num_tokens > INT_MAX) {
    throw_bad_input("key tile order: num_tokens must be in [1, 2^31), got " + std::to_string(num_tokens));
  }
  if (tile_tokens < 1 || tile_tokens > 32 || (tile_tokens & (tile_tokens - 1)) != 0) {
    throw_bad_input("key tile order: tile_tokens must be 1, 2, 4, 8, 16 or 32, got " + std::to_string(tile_tokens));
  }
  return static_cast<int>((num_tokens + tile_tokens - 1) / tile_tokens);
}

// Scratch: keys in, keys out, tile indices in (256-byte aligned each), then CUB's own.
constexpr size_t kAlign = 256;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

size_t cub_bytes(int tiles) {
  size_t bytes = 0;
  check_cuda(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr), tiles),
             "key tile order: scratch size");
  return bytes;
}

}  // namespace

size_t key_tile_order_scratch_bytes(int64_t num_tokens, int tile_tokens) {
  const int tiles = checked_tiles(num_tokens, tile_tokens);
  return 3 * aligned(tiles * sizeof(int32_t)) + cub_bytes(tiles);
}

void build_key_tile_order(const int32_t* positions, int64_t num_tokens, int tile_tokens, int rope_positions,
                          int32_t* order, void* scratch, size_t scratch_bytes) {
  const int tiles = checked_tiles(num_tokens, tile_tokens);
  if (rope_positions < 1) throw_bad_input("key tile order: rope_positions must be positive");
  if (scratch_bytes < key_tile_order_scratch_bytes(num_tokens, tile_tokens)) {
    throw_bad_input("key tile order: scratch smaller than key_tile_order_scratch_bytes");
  }
  auto* base = static_cast<uint8_t*>(scratch);
  const size_t array_bytes = aligned(tiles * sizeof(int32_t));
  auto* keys = reinterpret_cast<int32_t*>(base);
  auto* sorted_keys = reinterpret_cast<int32_t*>(base + array_bytes);
  auto* tile_ids = reinterpret_cast<int32_t*>(base + 2 * array_bytes);
  constexpr int kThreads = 256;
  const int blocks = std::min((tiles + kThreads - 1) / kThreads, 4096);
  tile_keys_kernel<<<blocks, kThreads>>>(positions, tiles, tile_tokens, keys, tile_ids);
  check_cuda(cudaGetLastError(), "key tile order: keys launch");
  // Positions in the table's range are non-negative and below 2^bits: their low bits order
  // them. Out-of-range ones still sort by those bits, into some permutation.
  size_t bytes = scratch_bytes - 3 * array_bytes;
  check_cuda(cub::DeviceRadixSort::SortPairs(base + 3 * array_bytes, bytes, keys, sorted_keys, tile_ids, order, tiles,
                                             0, key_bits(rope_positions)),
             "key tile order: radix sort");
}

const char* to_string(KeyTileWalk walk) {
  switch (walk) {
    case KeyTileWalk::kBatchOrder: return "batch-order";
    case KeyTileWalk::kTileOrder: return "tile-order";
    case KeyTileWalk::kHandOut: return "hand-out";
  }
  return "?";
}

KeyTileOrder::KeyTileOrder(const int32_t* positions, int64_t num_tokens, int tile_tokens, int rope_positions,
                           KeyTileWalk walk)
    : tile_tokens_(tile_tokens) {
  if (walk == KeyTileWalk::kBatchOrder || num_tokens == 0) return;
  const size_t scratch_bytes = key_tile_order_scratch_bytes(num_tokens, tile_tokens);
  const int64_t tiles = (num_tokens + tile_tokens - 1) / tile_tokens;
  void* scratch = nullptr;
  check_cuda(cudaMalloc(&order_, tiles * sizeof(int32_t)), "key tile order: order");
  check_cuda(cudaMalloc(&scratch, scratch_bytes), "key tile order: scratch");
  try {
    build_key_tile_order(positions, num_tokens, tile_tokens, rope_positions, order_, scratch, scratch_bytes);
    if (walk == KeyTileWalk::kHandOut) {
      check_cuda(cudaMalloc(&counters_, 2 * sizeof(int32_t)), "key tile order: counters");
      check_cuda(cudaMemset(counters_, 0, 2 * sizeof(int32_t)), "key tile order: counters");
    }
    check_cuda(cudaDeviceSynchronize(), "key tile order");
  } catch (...) {
    cudaFree(scratch);
    cudaFree(order_);
    cudaFree(counters_);
    throw;
  }
  cudaFree(scratch);
}

KeyTileOrder::~KeyTileOrder() {
  cudaFree(order_);
  cudaFree(counters_);
}

void KeyTileOrder::apply(KeyStoreSchedule& schedule) const {
  schedule.tile_order = order_;
  schedule.tile_order_tokens = order_ != nullptr ? tile_tokens_ : 0;
  schedule.tile_counters = counters_;
}

}  // namespace dsaf::dev
