// File: key_tile_order.cu — tile orders for the key kernel (api.h KeyStoreSchedule): the
// batch's tiles sorted by the position of their first token, stably, so that tiles at the
// same offsets of several sequences sit next to each other in the order and the warp that
// computes them reads their RoPE rows once.
//
// One cooperative launch builds an order (tile_order_kernel). Its blocks first read every
// tile's key (the first position's low key_bits(rope_positions) bits) and say whether any
// key is smaller than the one before it, and, for KeyTileOrderCache, whether any differs
// from the key the same tile had in the previous build. Then, all blocks alike:
//  - no key decreases: the stable sort is the identity, written as such;
//  - otherwise, the keys unchanged since the previous build (same tile count and key
//    bits, the previous order still in `order`): nothing is written;
//  - otherwise an LSD radix sort, 8 bits a pass (a 64K-row table: two passes). Block b owns
//    the contiguous tiles [T b / G, T (b + 1) / G) of the pass's input; a pass counts each
//    block's digits, scans them digit-major across blocks (every tile of digit d in block
//    b goes after all smaller digits and after digit d in blocks before b), then each
//    block ranks its tiles 1,024 at a time with cub::BlockRadixSort (stable) and scatters
//    them. grid.sync() separates the phases.
// The host enqueues one launch either way and never waits for it.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <climits>
#include <string>

#include "device/api.h"
#include "device/launch.h"

namespace dsaf::dev {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;  // a block's threads: one per digit in the counting phases
constexpr int kDigitBits = 8;
constexpr int kDigits = 1 << kDigitBits;
static_assert(kThreads == kDigits, "a thread per digit");
constexpr int kItems = 4;                     // tiles a thread ranks at once
constexpr int kChunk = kThreads * kItems;     // tiles a block ranks at once
constexpr int kMaxGrid = 1024;                // blocks at most (sizes the scratch)
constexpr uint32_t kPadKey = 0xFFFFFFFFu;     // past a block's last tile: ranked last

// Device buffers of one build (api.h build_key_tile_order). `keys` holds every tile's key
// after the launch; with `compare` it holds the previous build's on entry.
struct OrderArgs {
  const int32_t* positions;
  int64_t tiles;
  int tile_tokens;
  int bits;      // key bits, 1..31
  bool compare;  // `keys` and `order` hold the previous build's keys and order (same tiles, bits)
  uint32_t* keys;
  uint32_t* keys_a;
  int32_t* ids_a;
  uint32_t* keys_b;
  int32_t* ids_b;
  int32_t* counts;  // [kDigits][gridDim.x]
  int32_t* totals;  // [kDigits]
  int32_t* flags;   // [gridDim.x]
  int32_t* order;   // [tiles]
};

// Data other blocks wrote before a grid.sync() is read with __ldcg (L2, not a stale L1 line).
__global__ void __launch_bounds__(kThreads) tile_order_kernel(const OrderArgs a) {
  using Sort = cub::BlockRadixSort<uint32_t, kThreads, kItems, int32_t>;
  using Scan = cub::BlockScan<int32_t, kThreads>;
  __shared__ union {
    typename Sort::TempStorage sort;
    typename Scan::TempStorage scan;
  } temp;
  __shared__ int32_t hist[kDigits];         // the block's (or a chunk's) tiles of each digit
  __shared__ int32_t chunk_start[kDigits];  // a chunk's first rank of each digit once ranked
  __shared__ int64_t next[kDigits];         // where the block's next tile of each digit goes

  cg::grid_group grid = cg::this_grid();
  const int blocks = static_cast<int>(gridDim.x), block = static_cast<int>(blockIdx.x);
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t lo = a.tiles * block / blocks, hi = a.tiles * (block + 1) / blocks;
  const uint32_t key_mask = (1u << a.bits) - 1;

  // The keys; does one decrease, does one differ from the previous build's?
  bool descent = false, changed = false;
  for (int64_t t = lo + tid; t < hi; t += kThreads) {
    const uint32_t key = static_cast<uint32_t>(a.positions[t * a.tile_tokens]) & key_mask;
    if (t > 0) descent |= (static_cast<uint32_t>(a.positions[(t - 1) * a.tile_tokens]) & key_mask) > key;
    if (a.compare) changed |= a.keys[t] != key;
    a.keys[t] = key;
  }
  descent = __syncthreads_or(descent);
  changed = __syncthreads_or(changed);
  if (tid == 0) a.flags[block] = (descent ? 1 : 0) | (changed ? 2 : 0);
  grid.sync();
  int seen = 0;
  for (int b = tid; b < blocks; b += kThreads) seen |= __ldcg(a.flags + b);
  const bool unsorted = __syncthreads_or(seen & 1), new_keys = __syncthreads_or(seen & 2);
  if (!unsorted) {
    for (int64_t t = static_cast<int64_t>(block) * kThreads + tid; t < a.tiles; t += int64_t{blocks} * kThreads) {
      a.order[t] = static_cast<int32_t>(t);
    }
    return;
  }
  if (a.compare && !new_keys) return;

  const int passes = (a.bits + kDigitBits - 1) / kDigitBits;
  for (int pass = 0; pass < passes; ++pass) {
    const int bit = pass * kDigitBits, bits = min(kDigitBits, a.bits - bit);
    const uint32_t digit_mask = (1u << bits) - 1;
    const bool first = pass == 0, last = pass == passes - 1;
    const uint32_t* src_keys = first ? a.keys : pass % 2 == 1 ? a.keys_a : a.keys_b;
    const int32_t* src_ids = pass % 2 == 1 ? a.ids_a : a.ids_b;  // the first pass's ids are the tiles
    uint32_t* dst_keys = pass % 2 == 0 ? a.keys_a : a.keys_b;    // not written by the last pass
    int32_t* dst_ids = last ? a.order : pass % 2 == 0 ? a.ids_a : a.ids_b;

    // 1. The block's tiles of each digit, as counts[digit][block].
    hist[tid] = 0;
    __syncthreads();
    for (int64_t t = lo + tid; t < hi; t += kThreads) atomicAdd(&hist[(__ldcg(src_keys + t) >> bit) & digit_mask], 1);
    __syncthreads();
    a.counts[tid * blocks + block] = hist[tid];
    grid.sync();

    // 2. Each digit's row scanned: counts[d][b] = tiles of digit d in blocks before b;
    // totals[d] = tiles of digit d.
    for (int d = block; d < kDigits; d += blocks) {
      int32_t carry = 0;
      for (int b0 = 0; b0 < blocks; b0 += kThreads) {
        const int b = b0 + tid;
        const int32_t count = b < blocks ? __ldcg(a.counts + d * blocks + b) : 0;
        int32_t before = 0, sum = 0;
        Scan(temp.scan).ExclusiveSum(count, before, sum);
        if (b < blocks) a.counts[d * blocks + b] = carry + before;
        carry += sum;
        __syncthreads();
      }
      if (tid == 0) a.totals[d] = carry;
    }
    grid.sync();

    // 3. The block's first place for each digit, then its tiles, a chunk at a time: a
    // tile of digit d at rank r of its ranked chunk goes to next[d] + r - chunk_start[d].
    {
      int32_t smaller = 0;
      Scan(temp.scan).ExclusiveSum(__ldcg(a.totals + tid), smaller);
      next[tid] = int64_t{smaller} + __ldcg(a.counts + tid * blocks + block);
    }
    for (int64_t base = lo; base < hi; base += kChunk) {
      const int valid = static_cast<int>(min(int64_t{kChunk}, hi - base));
      uint32_t keys[kItems];
      int32_t ids[kItems];
      __syncthreads();  // the previous chunk's reads of hist, chunk_start, next and temp
      hist[tid] = 0;
      __syncthreads();
      for (int j = 0; j < kItems; ++j) {
        const int rank = tid * kItems + j;  // blocked: a thread's tiles are consecutive
        if (rank < valid) {
          keys[j] = __ldcg(src_keys + base + rank);
          ids[j] = first ? static_cast<int32_t>(base + rank) : __ldcg(src_ids + base + rank);
          atomicAdd(&hist[(keys[j] >> bit) & digit_mask], 1);
        } else {
          keys[j] = kPadKey;
          ids[j] = -1;
        }
      }
      __syncthreads();
      const int32_t count = hist[tid];
      int32_t start = 0;
      Scan(temp.scan).ExclusiveSum(count, start);
      chunk_start[tid] = start;
      __syncthreads();  // temp.scan's last reads before temp.sort's first writes
      // Stable: a chunk's tiles of one digit keep their order, and the padding (the
      // largest digit, after every tile) ranks last, so ranks [0, valid) are the tiles.
      Sort(temp.sort).Sort(keys, ids, bit, bit + bits);
      for (int j = 0; j < kItems; ++j) {
        const int rank = tid * kItems + j;
        if (rank < valid) {
          const uint32_t d = (keys[j] >> bit) & digit_mask;
          const int64_t to = next[d] + rank - chunk_start[d];
          if (!last) dst_keys[to] = keys[j];
          dst_ids[to] = ids[j];
        }
      }
      __syncthreads();
      next[tid] += count;
    }
    if (!last) grid.sync();
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

void check_rope_positions(int rope_positions) {
  if (rope_positions < 1) throw_bad_input("key tile order: rope_positions must be positive");
}

// The most blocks a build of `tiles` tiles launches: a chunk each at least.
int max_grid(int64_t tiles) { return static_cast<int>(std::clamp<int64_t>((tiles + kChunk - 1) / kChunk, 1, kMaxGrid)); }

// Scratch for `tiles` tiles: every array 256-byte aligned.
constexpr size_t kAlign = 256;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

struct ScratchLayout {
  size_t keys, keys_a, ids_a, keys_b, ids_b, counts, totals, flags, bytes;
};
ScratchLayout scratch_layout(int64_t tiles) {
  const size_t array = aligned(static_cast<size_t>(tiles) * 4), grid = static_cast<size_t>(max_grid(tiles));
  ScratchLayout l{};
  size_t at = 0;
  for (size_t* field : {&l.keys, &l.keys_a, &l.ids_a, &l.keys_b, &l.ids_b}) *field = at, at += array;
  l.counts = at, at += aligned(kDigits * grid * 4);
  l.totals = at, at += aligned(kDigits * 4);
  l.flags = at, at += aligned(grid * 4);
  l.bytes = at;
  return l;
}

OrderArgs order_args(const int32_t* positions, int64_t tiles, int tile_tokens, int bits, int32_t* order,
                     void* scratch, const ScratchLayout& l) {
  auto* base = static_cast<uint8_t*>(scratch);
  OrderArgs a{};
  a.positions = positions;
  a.tiles = tiles;
  a.tile_tokens = tile_tokens;
  a.bits = bits;
  a.keys = reinterpret_cast<uint32_t*>(base + l.keys);
  a.keys_a = reinterpret_cast<uint32_t*>(base + l.keys_a);
  a.ids_a = reinterpret_cast<int32_t*>(base + l.ids_a);
  a.keys_b = reinterpret_cast<uint32_t*>(base + l.keys_b);
  a.ids_b = reinterpret_cast<int32_t*>(base + l.ids_b);
  a.counts = reinterpret_cast<int32_t*>(base + l.counts);
  a.totals = reinterpret_cast<int32_t*>(base + l.totals);
  a.flags = reinterpret_cast<int32_t*>(base + l.flags);
  a.order = order;
  return a;
}

// Blocks of tile_order_kernel resident on the current device at once (a cooperative
// launch needs them all resident).
int resident_order_blocks() {
  int device = 0, sms = 0, per_sm = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count");
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, tile_order_kernel, kThreads, 0),
             "key tile order occupancy");
  return std::max(1, sms * per_sm);
}

// Stream 0; the host does not wait.
void enqueue_order(const OrderArgs& a, int resident_blocks) {
  const int grid = std::min(resident_blocks, max_grid(a.tiles));
  void* params[] = {const_cast<OrderArgs*>(&a)};
  check_cuda(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(&tile_order_kernel), dim3(grid),
                                         dim3(kThreads), params, 0, nullptr),
             "key tile order launch");
}

}  // namespace

size_t key_tile_order_scratch_bytes(int64_t num_tokens, int tile_tokens) {
  return scratch_layout(checked_tiles(num_tokens, tile_tokens)).bytes;
}

void build_key_tile_order(const int32_t* positions, int64_t num_tokens, int tile_tokens, int rope_positions,
                          int32_t* order, void* scratch, size_t scratch_bytes) {
  const int tiles = checked_tiles(num_tokens, tile_tokens);
  check_rope_positions(rope_positions);
  const ScratchLayout layout = scratch_layout(tiles);
  if (scratch_bytes < layout.bytes) {
    throw_bad_input("key tile order: scratch smaller than key_tile_order_scratch_bytes");
  }
  enqueue_order(order_args(positions, tiles, tile_tokens, key_bits(rope_positions), order, scratch, layout),
                resident_order_blocks());
}

const char* to_string(KeyTileWalk walk) {
  switch (walk) {
    case KeyTileWalk::kBatchOrder: return "batch-order";
    case KeyTileWalk::kTileOrder: return "tile-order";
    case KeyTileWalk::kHandOut: return "hand-out";
  }
  return "?";
}

KeyTileOrderCache::~KeyTileOrderCache() {
  if (buffers_ == nullptr && counters_ == nullptr) return;
  // Errors are ignored: at exit the runtime may be gone, and then so are the buffers.
  int current = -1;
  const bool other_device = cudaGetDevice(&current) == cudaSuccess && current != device_;
  if (other_device) cudaSetDevice(device_);
  cudaDeviceSynchronize();  // launches enqueued with these buffers
  cudaFree(buffers_);
  cudaFree(counters_);
  if (other_device) cudaSetDevice(current);
}

void KeyTileOrderCache::build(const int32_t* positions, int64_t num_tokens, int tile_tokens, int rope_positions,
                              KeyTileWalk walk, KeyStoreSchedule& schedule) {
  schedule.tile_order = nullptr;
  schedule.tile_order_tokens = 0;
  schedule.tile_counters = nullptr;
  if (walk == KeyTileWalk::kBatchOrder) return;
  const int tiles = checked_tiles(num_tokens, tile_tokens);
  check_rope_positions(rope_positions);
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  if (device_ < 0) {
    resident_blocks_ = resident_order_blocks();
    device_ = device;
  } else if (device != device_) {
    throw_bad_input("key tile order cache: its buffers are on device " + std::to_string(device_) +
                    ", the current device is " + std::to_string(device));
  }
  if (tiles > capacity_) {
    int64_t capacity = kChunk;
    while (capacity < tiles) capacity *= 2;
    if (buffers_ != nullptr) {
      // Launches already enqueued may still read the order: wait for them, once per growth.
      check_cuda(cudaDeviceSynchronize(), "key tile order cache: before growing");
      check_cuda(cudaFree(buffers_), "key tile order cache: free");
      buffers_ = nullptr;
      capacity_ = 0;
      held_tiles_ = 0;
    }
    check_cuda(cudaMalloc(&buffers_, aligned(static_cast<size_t>(capacity) * 4) + scratch_layout(capacity).bytes),
               "key tile order cache: buffers");
    capacity_ = capacity;
  }
  if (walk == KeyTileWalk::kHandOut && counters_ == nullptr) {
    check_cuda(cudaMalloc(&counters_, 2 * sizeof(int32_t)), "key tile order cache: counters");
    check_cuda(cudaMemset(counters_, 0, 2 * sizeof(int32_t)), "key tile order cache: counters");
  }
  auto* order = static_cast<int32_t*>(buffers_);
  void* scratch = static_cast<uint8_t*>(buffers_) + aligned(static_cast<size_t>(capacity_) * 4);
  const int bits = key_bits(rope_positions);
  OrderArgs a = order_args(positions, tiles, tile_tokens, bits, order, scratch, scratch_layout(capacity_));
  a.compare = held_tiles_ == tiles && held_bits_ == bits;
  held_tiles_ = 0;  // until the launch is enqueued
  enqueue_order(a, resident_blocks_);
  held_tiles_ = tiles;
  held_bits_ = bits;
  schedule.tile_order = order;
  schedule.tile_order_tokens = tile_tokens;
  schedule.tile_counters = walk == KeyTileWalk::kHandOut ? counters_ : nullptr;
}

}  // namespace dsaf::dev
