// File: key_store.cu — the fused key path (api.h KeyStoreArgs): one lane group per token,
// norm -> RoPE -> Hadamard -> quantise -> paged store, in one launch. The store format and
// the group width (head_pipeline.cuh) are template parameters of one kernel; the other
// recipe fields are runtime values, uniform across the grid, or constants when the recipe
// is one that key_paths.cuh compiles.
//
// The kernel is memory-bound, so it is built around keeping bytes in flight: every warp
// is persistent and streams tiles of 32 / kLanes tokens through its own ring of kStages
// shared-memory slots with cp.async (input rows, positions, sequences), so the next tiles
// are loading while it computes on this one, without registers held for them. Narrow
// groups (1-2 lanes per token) issue the fewest instructions per token (no shuffles in
// the Hadamard, one lane per reduction) but hold 64-128 values per lane, so few warps fit
// on an SM; the ring is what lets those few warps still saturate HBM.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "device/api.h"
#include "device/head_pipeline.cuh"
#include "device/key_paths.cuh"
#include "device/launch.h"
#include "device/primitives/async_copy.cuh"
#include "device/primitives/paging.cuh"

namespace dsaf::dev {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kThreadsPerBlock = kWarpsPerBlock * kWarpLanes;

// One warp's tile and ring. The staged input is bf16 (256 bytes a row); fp32 input (a test
// and verification format, not a serving one) is read straight from global memory.
template <int kLanes>
struct KeyRing {
  static constexpr int kTokens = kWarpLanes / kLanes;  // per tile
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kChunksPerLane = kRowBytes / kLanes / 16;  // 16-byte chunks a lane reads
  static constexpr int kStages = kLanes >= 4 ? 4 : 2;  // tiles in flight: about 4 KB for every width
  struct Slot {
    uint4 rows[kTokens * kRowBytes / 16];
    int32_t positions[kTokens];
    int32_t seq[kTokens];
  };
  Slot slots[kStages];
};

// Blocks of kThreadsPerBlock per SM; the register cap is 65536 / (128 x this): 1 lane: 170
// (128 values + the pipeline), 2: 128, 4: 85, 8 and up: 64 (the most each width's pinned
// paths need without spilling, ptxas -v). Shared memory: up to 203 KB.
template <int kLanes>
inline constexpr int kKeyMinBlocks = kLanes == 1 ? 3 : kLanes == 2 ? 4 : kLanes == 4 ? 6 : 8;

// Physical 16-byte chunk of logical chunk g in a ring slot. Lane l reads its chunks
// l*C + c (C = kChunksPerLane) in step c; the 8 lanes of a quarter warp must hit 8
// different 16-byte bank groups, so the low 3 bits of g are xor'ed with the bits that
// number the lanes: g / C for C >= 8, g / 8 for smaller C (then g % 8 already varies).
template <int kLanes>
__device__ __forceinline__ int swizzle(int g) {
  constexpr int kC = KeyRing<kLanes>::kChunksPerLane;
  constexpr int kShift = kC >= 16 ? 4 : 3;
  return g ^ ((g >> kShift) & 7);
}

// Issues the copies of tile `tile` into `slot` (every lane; tokens past the end repeat the
// last token, which is computed and not stored).
template <int kLanes>
__device__ __forceinline__ void issue_tile(const KeyStoreArgs& args, int64_t tile,
                                           typename KeyRing<kLanes>::Slot& slot, int lane) {
  using Ring = KeyRing<kLanes>;
  const int64_t first = tile * Ring::kTokens;
  if (args.input_bf16) {
    constexpr int kChunksPerRow = Ring::kRowBytes / 16;
#pragma unroll
    for (int g = lane; g < Ring::kTokens * kChunksPerRow; g += kWarpLanes) {
      const int64_t token = min(first + g / kChunksPerRow, args.num_tokens - 1);
      const uint8_t* src = static_cast<const uint8_t*>(args.input) + token * Ring::kRowBytes + (g % kChunksPerRow) * 16;
      copy_async<16>(&slot.rows[swizzle<kLanes>(g)], src);
    }
  }
#pragma unroll
  for (int i = lane; i < 2 * Ring::kTokens; i += kWarpLanes) {
    const int k = i % Ring::kTokens;
    const int64_t token = min(first + k, args.num_tokens - 1);
    if (i < Ring::kTokens) {
      copy_async<4>(&slot.positions[k], args.positions + token);
    } else {
      copy_async<4>(&slot.seq[k], args.seq + token);
    }
  }
}

// This lane's part of a staged bf16 row, widened to fp32 (exact: the bits move up).
template <int kLanes>
__device__ __forceinline__ void read_staged_row(const typename KeyRing<kLanes>::Slot& slot, int token, int part,
                                                HeadPart<kLanes>& x) {
  constexpr int kV = HeadGroup<kLanes>::kValues;
  constexpr int kC = KeyRing<kLanes>::kChunksPerLane;
  unsigned w[kV / 2];
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    const uint4 v = slot.rows[swizzle<kLanes>((token * kLanes + part) * kC + c)];
    w[4 * c] = v.x, w[4 * c + 1] = v.y, w[4 * c + 2] = v.z, w[4 * c + 3] = v.w;
  }
#pragma unroll
  for (int i = 0; i < kV / 2; ++i) {
    x[2 * i] = __uint_as_float(w[i] << 16);
    x[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF'0000u);
  }
}

template <ref::StorageFormat kFormat, int kLanes, class Path>
__global__ void __launch_bounds__(kThreadsPerBlock, kKeyMinBlocks<kLanes>)
key_store_kernel(const KeyStoreArgs args) {
  using Ring = KeyRing<kLanes>;
  extern __shared__ uint4 shared_words[];
  const int warp = threadIdx.x / kWarpLanes, lane = threadIdx.x % kWarpLanes;
  Ring& ring = reinterpret_cast<Ring*>(shared_words)[warp];
  const int part = lane % kLanes, token_in_tile = lane / kLanes;
  const KernelRecipe r = pinned_recipe<Path>(args.recipe);

  const int64_t tiles = (args.num_tokens + Ring::kTokens - 1) / Ring::kTokens;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;  // warps in the grid
  const int64_t first_tile = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;

  // Ring: tile first_tile + i * stride lives in slot i % kStages; kStages - 1 ahead.
#pragma unroll
  for (int i = 0; i < Ring::kStages - 1; ++i) {
    const int64_t tile = first_tile + i * stride;
    if (tile < tiles) issue_tile<kLanes>(args, tile, ring.slots[i], lane);
    commit_async();
  }
  int i = 0;
  for (int64_t tile = first_tile; tile < tiles; tile += stride, ++i) {
    const int64_t ahead = tile + (Ring::kStages - 1) * stride;
    if (ahead < tiles) issue_tile<kLanes>(args, ahead, ring.slots[(i + Ring::kStages - 1) % Ring::kStages], lane);
    commit_async();
    wait_async<Ring::kStages - 1>();  // this lane's copies of `tile` have landed
    __syncwarp();                     // and every other lane's
    const typename Ring::Slot& slot = ring.slots[i % Ring::kStages];

    const int64_t token_unclamped = tile * Ring::kTokens + token_in_tile;
    // A group past the end recomputes the last token and stores nothing: every lane of the
    // warp must take part in the shuffles.
    const bool store = token_unclamped < args.num_tokens;
    const int64_t token = store ? token_unclamped : args.num_tokens - 1;
    const int position = slot.positions[token_in_tile];
    const int64_t page_row = static_cast<int64_t>(slot.seq[token_in_tile]) * args.page_table_stride;

    HeadPart<kLanes> x;
    if (args.input_bf16) {
      read_staged_row<kLanes>(slot, token_in_tile, part, x);
    } else {
      load_head<kLanes>(static_cast<const float*>(args.input) + token * kHeadDim, false, part, x);
    }
    __syncwarp();  // the slot is free for the copies issued next iteration
    round_head_bf16<kLanes>(r.key_rounding.input, x);

    norm_head<kLanes>(x, r.key_norm, part, args.norm_weight, args.norm_bias);
    if (r.key_norm.kind != ref::NormKind::kNone) round_head_bf16<kLanes>(r.key_rounding.norm, x);
    rope_and_rotate<kLanes>(x, part, r, r.key_rounding, position, args.rope_cos, args.rope_sin);

    // Paged store: page = table[seq][pos / P], slot pos % P; [P x values | P x scales]
    const PageSlot page_slot_of_token = page_slot(position, args.page_size);
    const int64_t page = args.page_tables[page_row + page_slot_of_token.table_index];
    const int offset = page_slot_of_token.offset;
    constexpr int kValueBytes = value_bytes(kFormat), kScaleBytes = scale_bytes(kFormat);
    uint8_t* page_base = args.cache + page * args.page_size * (kValueBytes + kScaleBytes);
    store_head<kFormat, kLanes>(x, part, r.key_quant, page_base + offset * kValueBytes,
                                page_base + args.page_size * kValueBytes + offset * kScaleBytes, store);
  }
  wait_async<0>();  // nothing may still be writing this block's shared memory at exit
}

// Grid of the persistent kernel: as many blocks as fit on the device at once (queried and
// configured once per instantiation), fewer when there are fewer tiles.
template <ref::StorageFormat kFormat, int kLanes, class Path>
unsigned resident_blocks(int64_t tiles) {
  static const unsigned capacity = [] {
    const auto kernel = key_store_kernel<kFormat, kLanes, Path>;
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(sizeof(KeyRing<kLanes>) * kWarpsPerBlock)),
               "key_store_kernel shared memory");
    int device = 0, sms = 0, per_sm = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count");
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreadsPerBlock,
                                                             sizeof(KeyRing<kLanes>) * kWarpsPerBlock),
               "key_store_kernel occupancy");
    return static_cast<unsigned>(std::max(1, sms * per_sm));
  }();
  const int64_t wanted = (tiles + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<unsigned>(std::min<int64_t>(wanted, capacity));
}

// Calls f(Path{}) with the pinned path that matches the recipe, else RuntimeKeyPath.
template <ref::StorageFormat kFormat, class F>
void dispatch_key_path(const KernelRecipe& recipe, F f) {
  if constexpr (kFormat == ref::StorageFormat::kFp8E4m3fn || kFormat == ref::StorageFormat::kBf16 ||
                kFormat == ref::StorageFormat::kFp4E2m1) {
    if (key_path_matches<SglangV4KeyPath<kFormat>>(recipe)) return f(SglangV4KeyPath<kFormat>{});
  }
  f(RuntimeKeyPath{});
}

}  // namespace

void launch_key_store(const KeyStoreArgs& args, int lanes_per_head) {
  check_launch_args(args.recipe.key_quant, args.page_size, "key_store");
  if (args.num_tokens == 0) return;
  dispatch_lanes(lanes_per_head, "key_store", [&](auto lanes) {
    constexpr int kLanes = decltype(lanes)::value;
    const int64_t tiles = (args.num_tokens + KeyRing<kLanes>::kTokens - 1) / KeyRing<kLanes>::kTokens;
    dispatch_format(args.recipe.key_quant.format, [&](auto format) {
      constexpr ref::StorageFormat kFormat = decltype(format)::value;
      dispatch_key_path<kFormat>(args.recipe, [&](auto path) {
        using Path = decltype(path);
        key_store_kernel<kFormat, kLanes, Path>
            <<<resident_blocks<kFormat, kLanes, Path>(tiles), kThreadsPerBlock,
               sizeof(KeyRing<kLanes>) * kWarpsPerBlock>>>(args);
      });
    });
  });
  check_cuda(cudaGetLastError(), "key_store_kernel launch");
}

std::string key_store_path(const KernelRecipe& recipe) {
  std::string name = RuntimeKeyPath::kName;
  dispatch_format(recipe.key_quant.format, [&](auto format) {
    dispatch_key_path<decltype(format)::value>(recipe, [&](auto path) { name = decltype(path)::kName; });
  });
  return name;
}

}  // namespace dsaf::dev
