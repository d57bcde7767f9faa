// File: key_store.cu — the fused key path (api.h KeyStoreArgs): one lane group per token,
// norm -> RoPE -> Hadamard -> quantise -> paged store, in one launch. The store format and
// the group width (head_pipeline.cuh) are template parameters of one kernel; the other
// recipe fields are runtime values, uniform across the grid, or constants when the recipe
// is one that key_paths.cuh compiles.
//
// The kernel is memory-bound, so it is built around keeping bytes in flight: every warp
// is persistent and walks tiles of 32 / kLanes tokens; everything a tile reads (input
// rows, RoPE table rows, positions) is copied into the warp's shared memory with cp.async
// a tile ahead (KeyRing), so the next tile loads while this one computes, without
// registers held for it. Narrow groups (1-2 lanes per token) issue the fewest
// instructions per token (no shuffles in the Hadamard, one lane per reduction) but hold
// 64-128 values per lane, so few warps fit on an SM; the staging is what lets those few
// warps keep HBM busy.
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

// One warp's staging area. Everything a tile needs is copied with cp.async one tile
// ahead, in one commit group per tile: its input rows (bf16, 256 bytes a row; fp32 input,
// a test and verification format, is read from global memory instead), its RoPE table
// rows (32 cos, 32 sin: as many bytes as the input; read from global memory by the one
// lane that rotates, they were the longest stall in run 13's profile) and the positions
// and sequences of the tile after it (the RoPE rows need them a tile early). So while a
// warp computes tile i, the group of tile i + 1 is in flight and nothing waits in the
// middle of a tile. The input rows are read into registers first, so one buffer serves;
// the RoPE rows of tile i are read mid-tile, so they have two, and then carry the tile's
// cache rows on their way out.
template <int kLanes>
struct KeyRing {
  static constexpr int kTokens = kWarpLanes / kLanes;  // per tile
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kChunksPerLane = kRowBytes / kLanes / 16;  // 16-byte chunks a lane reads
  // A RoPE row is 64 floats + 4 of padding: rows 272 bytes apart start 4 banks apart, so
  // the lanes of a quarter warp, on different tokens, read different banks.
  static constexpr int kRopeStride = 68;
  uint4 rows[kTokens * kRowBytes / 16];         // input rows of the next tile to compute
  alignas(16) float rope[2][kTokens * kRopeStride];  // RoPE rows of tiles i and i + 1
  int32_t positions[3][kTokens];                // of tiles i, i + 1, i + 2
  int32_t seq[3][kTokens];
};

// Blocks of kThreadsPerBlock per SM; the register cap is 65536 / (128 x this), rounded down
// to a multiple of 8: 1 lane: 255 (128 values + the pipeline), 2: 128, 4: 80, 8: 64 (the
// most each width's pinned paths need without spilling, ptxas -v). Shared memory per SM,
// staging + norm weights + 1 KB reserved per block: 1 lane 2 x 107.5 KB, 2: 4 x 54.5 KB,
// 4: 6 x 27.8 KB, 8: 8 x 14.9 KB (of 228 KB; static_assert below).
template <int kLanes>
inline constexpr int kKeyMinBlocks = kLanes == 1 ? 2 : kLanes == 2 ? 4 : kLanes == 4 ? 6 : 8;

template <int kLanes>
constexpr bool fits_shared_memory() {  // 228 KB per SM on sm_90, 1 KB of it reserved per block
  return kKeyMinBlocks<kLanes> * (sizeof(KeyRing<kLanes>) * kWarpsPerBlock + 2 * kHeadDim * 4 + 1024) <= 228 * 1024;
}
static_assert(fits_shared_memory<1>() && fits_shared_memory<2>() && fits_shared_memory<4>() && fits_shared_memory<8>(),
              "kKeyMinBlocks blocks of staging fit an SM's shared memory");

// Physical 16-byte chunk of logical chunk g of the input rows. Lane l reads its chunks
// l*C + c (C = kChunksPerLane) in step c; the 8 lanes of a quarter warp must hit 8
// different 16-byte bank groups, so the low 3 bits of g are xor'ed with the bits that
// number the lanes: g / C for C >= 8, g / 8 for smaller C (then g % 8 already varies).
template <int kLanes>
__device__ __forceinline__ int swizzle(int g) {
  constexpr int kC = KeyRing<kLanes>::kChunksPerLane;
  constexpr int kShift = kC >= 16 ? 4 : 3;
  return g ^ ((g >> kShift) & 7);
}

// The copies of one tile's input rows (tokens past the end repeat the last token, which
// is computed and not stored).
template <int kLanes>
__device__ __forceinline__ void issue_input_rows(const KeyStoreArgs& args, int64_t tile, KeyRing<kLanes>& ring,
                                                 int lane) {
  using Ring = KeyRing<kLanes>;
  if (!args.input_bf16) return;
  const int64_t first = tile * Ring::kTokens;
  constexpr int kChunksPerRow = Ring::kRowBytes / 16;
#pragma unroll
  for (int g = lane; g < Ring::kTokens * kChunksPerRow; g += kWarpLanes) {
    const int64_t token = min(first + g / kChunksPerRow, args.num_tokens - 1);
    const uint8_t* src = static_cast<const uint8_t*>(args.input) + token * Ring::kRowBytes + (g % kChunksPerRow) * 16;
    copy_async<16, L2Priority::kEvictFirst>(&ring.rows[swizzle<kLanes>(g)], src);  // read once
  }
}

// The copies of one tile's positions and sequences into buffer `b`.
template <int kLanes>
__device__ __forceinline__ void issue_positions(const KeyStoreArgs& args, int64_t tile, KeyRing<kLanes>& ring,
                                                int b, int lane) {
  using Ring = KeyRing<kLanes>;
  const int64_t first = tile * Ring::kTokens;
#pragma unroll
  for (int i = lane; i < 2 * Ring::kTokens; i += kWarpLanes) {
    const int k = i % Ring::kTokens;
    const int64_t token = min(first + k, args.num_tokens - 1);
    if (i < Ring::kTokens) {
      copy_async<4>(&ring.positions[b][k], args.positions + token);
    } else {
      copy_async<4>(&ring.seq[b][k], args.seq + token);
    }
  }
}

// The copies of one tile's RoPE rows into rope[rb], from its landed positions[pb]. Every
// sequence of a batch re-reads the same rows (16 MB for 64K positions, against 256 MB of
// input rows per 1M tokens streaming past): evict-last, so they stay in L2 (run 18's
// profile: 35% more HBM bytes than the kernel's own, the table re-read from HBM).
template <int kLanes>
__device__ __forceinline__ void issue_rope_rows(const KeyStoreArgs& args, KeyRing<kLanes>& ring, int pb, int rb,
                                                int lane) {
  using Ring = KeyRing<kLanes>;
#pragma unroll
  for (int g = lane; g < Ring::kTokens * 16; g += kWarpLanes) {
    const int k = g / 16, c = g % 16;  // chunks 0-7: cos, 8-15: sin
    const float* table = c < 8 ? args.rope_cos : args.rope_sin;
    copy_async<16, L2Priority::kEvictLast>(ring.rope[rb] + k * Ring::kRopeStride + (c / 8) * 32 + (c % 8) * 4,
                   table + static_cast<int64_t>(ring.positions[pb][k]) * 32 + (c % 8) * 4);
  }
}

// Cache rows go out through shared memory when every row can be written in 16-byte
// pieces: rows of at most 256 bytes (not fp32) in a 16-byte aligned cache of pages whose
// size is a multiple of 16 (fp8 pages of 1 or 2 tokens are 132 or 264 bytes: those slots,
// and any cache a caller hands in at a smaller alignment, are stored directly).
inline constexpr int kStagedScaleOffset = 256;  // scale bytes after a staged row's values
template <ref::StorageFormat kFormat>
__device__ __forceinline__ bool stages_cache_rows(const uint8_t* cache, int page_size) {
  return (reinterpret_cast<uintptr_t>(cache) & 15) == 0 &&
         (page_size * (value_bytes(kFormat) + scale_bytes(kFormat))) % 16 == 0;
}

// Writes the tile's staged cache rows (row k at staged + k * kRopeStride floats: values,
// then scale bytes at kStagedScaleOffset) to their slots: value chunk g of the tile by lane
// g % 32. Each token's lane 0 holds its destinations (null: not stored) and lends them.
template <ref::StorageFormat kFormat, int kLanes>
__device__ __forceinline__ void copy_out_tile(const uint8_t* staged, uint8_t* value_dst, uint8_t* scale_dst,
                                              int lane) {
  using Ring = KeyRing<kLanes>;
  constexpr int kRowBytes = Ring::kRopeStride * 4;
  constexpr int kChunks = value_bytes(kFormat) / 16, kTotal = Ring::kTokens * kChunks;
  static_assert(kRowBytes >= kStagedScaleOffset + 4, "a staged row holds values and scales");
#pragma unroll
  for (int j = 0; j < (kTotal + kWarpLanes - 1) / kWarpLanes; ++j) {
    const int g = lane + j * kWarpLanes;
    const int k = g < kTotal ? g / kChunks : 0, c = g % kChunks;
    const auto dst = reinterpret_cast<uint8_t*>(
        __shfl_sync(kFullMask, reinterpret_cast<unsigned long long>(value_dst), k * kLanes));
    if (g < kTotal && dst != nullptr) {
      // st.global.cs: streamed out, evict-first in L2 (the RoPE table stays)
      __stcs(reinterpret_cast<uint4*>(dst + c * 16), *reinterpret_cast<const uint4*>(staged + k * kRowBytes + c * 16));
    }
  }
  if constexpr (scale_bytes(kFormat) == 4) {
#pragma unroll
    for (int j = 0; j < (Ring::kTokens + kWarpLanes - 1) / kWarpLanes; ++j) {
      const int k = lane + j * kWarpLanes;
      const auto dst = reinterpret_cast<uint8_t*>(
          __shfl_sync(kFullMask, reinterpret_cast<unsigned long long>(scale_dst), (k % Ring::kTokens) * kLanes));
      if (k < Ring::kTokens && dst != nullptr) {
        *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(staged + k * kRowBytes + kStagedScaleOffset);
      }
    }
  }
}

// This lane's part of a staged bf16 row, widened to fp32 (exact: the bits move up).
template <int kLanes>
__device__ __forceinline__ void read_staged_row(const KeyRing<kLanes>& ring, int token, int part,
                                                HeadPart<kLanes>& x) {
  constexpr int kV = HeadGroup<kLanes>::kValues;
  constexpr int kC = KeyRing<kLanes>::kChunksPerLane;
  unsigned w[kV / 2];
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    const uint4 v = ring.rows[swizzle<kLanes>((token * kLanes + part) * kC + c)];
    w[4 * c] = v.x, w[4 * c + 1] = v.y, w[4 * c + 2] = v.z, w[4 * c + 3] = v.w;
  }
  widen_bf16<kV>(w, x);
}

template <ref::StorageFormat kFormat, int kLanes, class Path>
__global__ void __launch_bounds__(kThreadsPerBlock, kKeyMinBlocks<kLanes>)
key_store_kernel(const KeyStoreArgs args) {
  using Ring = KeyRing<kLanes>;
  extern __shared__ uint4 shared_words[];
  // The warp index through a shuffle: the compiler then knows it is uniform across the warp,
  // and so is the tile loop below; otherwise it guards every shuffle in the loop as if the
  // warp could have diverged (WARPSYNC + ENDCOLLECTIVE around each one, SASS of run 13).
  const int warp = __shfl_sync(kFullMask, static_cast<int>(threadIdx.x / kWarpLanes), 0);
  const int lane = threadIdx.x % kWarpLanes;
  Ring& ring = reinterpret_cast<Ring*>(shared_words)[warp];
  const int part = lane % kLanes, token_in_tile = lane / kLanes;
  const KernelRecipe r = pinned_recipe<Path>(args.recipe);

  // The norm's weight and bias, read by every token: from shared memory, not through L1.
  __shared__ __align__(16) float norm_weight[kHeadDim];  // read as float4
  __shared__ __align__(16) float norm_bias[kHeadDim];
  for (int i = threadIdx.x; i < kHeadDim; i += kThreadsPerBlock) {
    if (args.norm_weight != nullptr) norm_weight[i] = args.norm_weight[i];
    if (args.norm_bias != nullptr) norm_bias[i] = args.norm_bias[i];
  }
  __syncthreads();

  const int64_t tiles = (args.num_tokens + Ring::kTokens - 1) / Ring::kTokens;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;  // warps in the grid
  const bool staged_store = stages_cache_rows<kFormat>(args.cache, args.page_size);
  const int64_t first_tile = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;

  // Tile i of this warp is first_tile + i * stride. Prologue: the positions of tile 0, then
  // the group of tile 0 (input, RoPE rows; positions of tile 1).
  const auto tile_of = [&](int i) { return first_tile + static_cast<int64_t>(i) * stride; };
  const auto issue_group = [&](int i) {  // the group of tile i: all of it exists if tile i does
    if (tile_of(i) < tiles) {
      issue_input_rows<kLanes>(args, tile_of(i), ring, lane);
      issue_rope_rows<kLanes>(args, ring, i % 3, i % 2, lane);
    }
    if (tile_of(i + 1) < tiles) issue_positions<kLanes>(args, tile_of(i + 1), ring, (i + 1) % 3, lane);
    commit_async();
  };
  if (first_tile < tiles) issue_positions<kLanes>(args, first_tile, ring, 0, lane);
  commit_async();
  wait_async<0>();
  __syncwarp();
  issue_group(0);

  for (int i = 0; tile_of(i) < tiles; ++i) {
    const int64_t tile = tile_of(i);
    wait_async<0>();  // the group of this tile: its input, RoPE rows, the next positions
    __syncwarp();     // (every lane's copies)

    const int64_t token_unclamped = tile * Ring::kTokens + token_in_tile;
    // A group past the end recomputes the last token and stores nothing: every lane of the
    // warp must take part in the shuffles.
    const bool store = token_unclamped < args.num_tokens;
    const int64_t token = store ? token_unclamped : args.num_tokens - 1;
    const int position = ring.positions[i % 3][token_in_tile];
    // Paged store address first: its page-table read then overlaps the arithmetic.
    // page = table[seq][pos / P], slot pos % P; [P x values | P x scales]
    const PageSlot page_slot_of_token = page_slot(position, args.page_size);
    const int64_t page = args.page_tables[static_cast<int64_t>(ring.seq[i % 3][token_in_tile]) * args.page_table_stride +
                                          page_slot_of_token.table_index];

    HeadPart<kLanes> x;
    if (args.input_bf16) {
      read_staged_row<kLanes>(ring, token_in_tile, part, x);
    } else {
      load_head<kLanes>(static_cast<const float*>(args.input) + token * kHeadDim, false, part, x);
    }
    __syncwarp();  // the input rows are read: the next tile's group may land
    issue_group(i + 1);
    round_head_bf16<kLanes>(r.key_rounding.input, x);

    norm_head<kLanes>(x, r.key_norm, part, norm_weight, norm_bias);
    if (r.key_norm.kind != ref::NormKind::kNone) round_head_bf16<kLanes>(r.key_rounding.norm, x);
    float* rope = ring.rope[i % 2];
    const float* rope_row = rope + token_in_tile * Ring::kRopeStride;
    rope_and_rotate<kLanes>(x, part, r, r.key_rounding, rope_row, rope_row + 32);

    const int offset = page_slot_of_token.offset;
    constexpr int kValueBytes = value_bytes(kFormat), kScaleBytes = scale_bytes(kFormat);
    uint8_t* page_base = args.cache + page * args.page_size * (kValueBytes + kScaleBytes);
    uint8_t* value_dst = page_base + offset * kValueBytes;
    uint8_t* scale_dst = page_base + args.page_size * kValueBytes + offset * kScaleBytes;
    if constexpr (value_bytes(kFormat) > kStagedScaleOffset) {  // fp32 rows do not fit: direct
      store_head<kFormat, kLanes>(x, part, r.key_quant, value_dst, scale_dst, store);
    } else if (staged_store) {
      // The RoPE rows are read: their area takes this tile's cache rows, which then go out
      // whole (16 lanes write a 256-byte row at once, not 32 lanes 16 bytes of 32 rows).
      __syncwarp();
      uint8_t* staged_row = reinterpret_cast<uint8_t*>(rope + token_in_tile * Ring::kRopeStride);
      store_head<kFormat, kLanes>(x, part, r.key_quant, staged_row, staged_row + kStagedScaleOffset, true);
      __syncwarp();
      copy_out_tile<kFormat, kLanes>(reinterpret_cast<const uint8_t*>(rope), store ? value_dst : nullptr,
                                     store ? scale_dst : nullptr, lane);
      __syncwarp();  // the area takes the RoPE rows of tile i + 2 next
    } else {
      store_head<kFormat, kLanes>(x, part, r.key_quant, value_dst, scale_dst, store);
    }
  }
  wait_async<0>();  // nothing may still be writing this block's shared memory at exit
}

// Grid of the persistent kernel: as many blocks as fit on the current device at once (asked
// on every launch: a process may switch devices), fewer when there are fewer tiles or the
// caller caps the grid.
template <ref::StorageFormat kFormat, int kLanes, class Path>
unsigned grid_blocks(const KeyStoreArgs& args, int64_t tiles) {
  const int resident = resident_blocks(key_store_kernel<kFormat, kLanes, Path>, kThreadsPerBlock,
                                       sizeof(KeyRing<kLanes>) * kWarpsPerBlock, "key_store_kernel");
  int64_t blocks = std::min<int64_t>((tiles + kWarpsPerBlock - 1) / kWarpsPerBlock, resident);
  if (args.max_blocks > 0) blocks = std::min<int64_t>(blocks, args.max_blocks);
  return static_cast<unsigned>(blocks);
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

// Measured on the H200 (bench/results/LOG.md runs 17 and 21, 1M tokens): sglang-v4-fp8
// 0.159 ms at 1 lane (2: 0.171), sglang-v4-bf16 0.176 ms at 2 lanes (1: 0.179),
// sglang-v4-fp4 0.329 ms at 4 (run 17); the generic kernel (dsv32 recipes) is fastest at 2
// and slow at 1 (it spills).
int fastest_key_lanes(const KernelRecipe& recipe) {
  const bool pinned = key_store_path(recipe) != RuntimeKeyPath::kName;
  switch (recipe.key_quant.format) {
    case ref::StorageFormat::kFp8E4m3fn: return pinned ? 1 : 2;
    case ref::StorageFormat::kFp4E2m1: return 4;
    default: return 2;
  }
}

void launch_key_store(const KeyStoreArgs& args, int lanes_per_head) {
  check_launch_args(args.recipe.key_quant, args.page_size, "key_store");
  // reference/norm.h: a norm needs its weight, LayerNorm its bias too.
  if (args.recipe.key_norm.kind != ref::NormKind::kNone && args.norm_weight == nullptr) {
    throw_bad_input("key_store: the recipe's norm needs norm_weight");
  }
  if (args.recipe.key_norm.kind == ref::NormKind::kLayerNorm && args.norm_bias == nullptr) {
    throw_bad_input("key_store: LayerNorm needs norm_bias");
  }
  if (args.num_tokens == 0) return;
  if (lanes_per_head == kAutoLanesPerHead) lanes_per_head = fastest_key_lanes(args.recipe);
  dispatch_lanes(lanes_per_head, "key_store", [&](auto lanes) {
    constexpr int kLanes = decltype(lanes)::value;
    const int64_t tiles = (args.num_tokens + KeyRing<kLanes>::kTokens - 1) / KeyRing<kLanes>::kTokens;
    dispatch_format(args.recipe.key_quant.format, [&](auto format) {
      constexpr ref::StorageFormat kFormat = decltype(format)::value;
      dispatch_key_path<kFormat>(args.recipe, [&](auto path) {
        using Path = decltype(path);
        key_store_kernel<kFormat, kLanes, Path>
            <<<grid_blocks<kFormat, kLanes, Path>(args, tiles), kThreadsPerBlock,
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
