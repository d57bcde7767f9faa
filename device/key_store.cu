// File: key_store.cu — the fused key path (api.h KeyStoreArgs): one lane group per token,
// norm -> RoPE -> Hadamard -> quantise -> paged store, in one launch. The store format and
// the group width (head_pipeline.cuh) are template parameters of one kernel; the other
// recipe fields are runtime values, uniform across the grid, or constants when the recipe
// is one that key_paths.cuh compiles.
//
// Where the time goes (H200 runs 30-37, ncu, 1M tokens): the L2 is ~83% busy at ~63% of
// DRAM bandwidth: besides its input row (256 B) and its cache row (132 / 256 B) every token
// reads its RoPE table row (256 B) from L2, so the L2 moves 1.5-1.7x the bytes the copy
// bandwidth is measured on. A kernel that moves exactly these bytes and computes nothing
// (key_store_bench's traffic twins) reaches 72% of copy for fp8 and 71% for bf16 (81-82%
// without the RoPE rows); this one 70% and 74% (run 37). Removing that traffic does not
// buy the time back: with tokens sorted by position and each tile reading a RoPE row once
// (run 39, reverted; in git history) fp8 moved 28% fewer L2 sectors and ran slower, since
// its 1-lane warps issue ~2,600 instructions per token at 0.63 per scheduler cycle (run
// 37's profile): instruction issue binds as tightly, and the per-token bookkeeping of that
// order cost every caller. What stayed is the cheap half: tiles keep their consecutive
// tokens, and a warp whose next tile has its current tile's positions keeps the RoPE rows
// (one compare and a vote per tile); an optional tile order (api.h) groups such tiles.
// With it (runs 45-47, 16 sequences x 64K positions) bf16 stores take 0.163 ms against
// 0.172 (78% of copy against 74%; L2 sectors 36.5 M -> 26.8 M), fp4 0.205 against 0.213,
// and fp8 the same 0.139 ms: 29% fewer L2 sectors and 4% fewer instructions, but no
// more issued per cycle. Handing the order's last tiles out at run time (tile_counters,
// TileWalk; runs 57-62) takes what the static runs left idle at the end: fp8 0.131-0.134
// ms (72-73% of copy), bf16 0.156-0.158 at 4 tiles per warp (80-81%), fp4 0.196-0.199.
// Prefetching a tile's input rows into L2 a tile or two before its copies (run 61) made
// every format slower (bf16 0.159 / 0.164 ms): more bytes in flight do not help this
// kernel. Neither did one block per SM holding all 8 (1 lane) or 12 (2 lanes) warps, with
// or without the warps that share a scheduler starting each tile together to share
// instruction fetches (run 65; in git history): fp8 0.133-0.135 ms against 0.131, bf16
// 0.157-0.159 against 0.156. Where a warp's time goes (run 67: clock64 at phase ends, fp8 1
// lane, hand-out): of ~7,500 cycles a tile, 42% the norm, RoPE and Hadamard and 19% the
// quantisation, which issue most of the instructions; the other 39% (walk 7%, reading the
// rows 11%, issuing the next copies 13%, copy-out 8%) issue a fifth of them, waiting on
// shared-memory loads and address chains; the wait for the tile's copies is 1%: the data is
// there. Copying tile i - 1's rows out in the middle of tile i, where the norm's arithmetic
// covers their loads (run 68; in git history), saved ~1% (fp8 0.1295 against 0.1308 ms).
// Bulk copies (cp.async.bulk) per lane do not pay: their operands are uniform registers,
// and ptxas serialises a warp's 32 copies in a loop. A third warp per scheduler at 1 lane
// (runs 53-54: 168 registers, one RoPE buffer) issued no faster: the warps then waited on
// instruction fetch (a tile's unrolled code is ~37 KB, fetched by each warp at its own
// place in it) or, kept in step by a barrier, on the barrier and the
// shared-memory pipe. The kernel is built around keeping bytes in flight: every warp is
// persistent and walks tiles of 32 / kLanes tokens; everything a tile reads (input rows,
// RoPE table rows, positions, page-table entries) is copied into the warp's shared memory
// with cp.async a tile ahead (KeyRing), so the next tile loads while this one computes,
// without registers held for it. Narrow groups (1-2
// lanes per token) issue the fewest instructions per token (no shuffles in the Hadamard,
// one lane per reduction) but hold 64-128 values per lane, so few warps fit on an SM;
// the staging is what lets those few warps keep HBM busy. The paths whose norm sums
// sequentially (dsv32, vllm-v32, sglang-v32-fused, dsv4-ref) run key_store_specialized_kernel
// at 1 lane instead: the same tile, its copies and copy-out done by a producer warp beside
// each compute warp (below; runs 71, 84).
// What bounds fp8 (runs 76-83; the ablation switches are in git history): skipping the
// in-lane Hadamard stages (896 of ~2,440 warp instructions a tile) made 1 lane 2-3% faster.
// Skipping norm, RoPE and Hadamard (the quantisation kept) gives the kernel's floor, what
// its memory traffic takes: 256 x 4K positions 0.121 ms at 1 lane (79% of copy), 0.116 at 2
// (82%; 81% with 8 warps an SM, so not its warp count); 16 x 64K 0.124 / 0.121 (77% / 79%),
// the 16 MB RoPE table then read from DRAM on every launch (ncu: 290 against 271 MB). With
// the arithmetic, 1 lane 0.128-0.130 ms (5-7% over its floor; the warps set the pace: half
// of them take 1.7x), 2 lanes 0.144 (24% over: the Hadamard's last stage is 64 shuffles a
// lane, RoPE runs in half the lanes). 80% of copy (~0.120 ms) would need the 2-lane floor
// with at most ~3% of arithmetic on top; at 64K positions neither 1 nor 2 lanes' floor reaches it.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "device/api.h"
#include "device/head_pipeline.cuh"
#include "device/key_paths.cuh"
#include "device/launch.h"
#include "device/primitives/async_copy.cuh"
#include "device/primitives/mbarrier.cuh"
#include "device/primitives/paging.cuh"

namespace dsaf::dev {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kThreadsPerBlock = kWarpsPerBlock * kWarpLanes;

// One warp's staging area. Everything a tile needs is copied with cp.async one tile
// ahead, in one commit group per tile: its input rows (bf16, 256 bytes a row; fp32 input,
// a test and verification format, is read from global memory instead), its RoPE table
// rows (32 cos, 32 sin: as many bytes as the input; read from global memory by the one
// lane that rotates, they were the longest stall in run 13's profile), its page-table
// entries, and the positions and sequences of the tile after it (the RoPE rows and page
// entries need them a tile early). So while a
// warp computes tile i, the group of tile i + 1 is in flight and nothing waits in the
// middle of a tile. The input rows are read into registers first, so one buffer serves;
// the RoPE rows of tile i are read mid-tile, so they have two, and the buffer the next
// tile does not need carries the tile's cache rows on their way out.
template <int kLanes>
struct alignas(32) KeyRing {  // rows and rope start 32-byte aligned (see kPartPad)
  static constexpr int kTokens = kWarpLanes / kLanes;  // per tile
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kChunksPerLane = kRowBytes / kLanes / 16;  // 16-byte chunks a lane reads
  // Every copy lands at the same offset modulo 32 bytes as its source (rows and parts start
  // on 32-byte boundaries): cp.async reads each 32-byte L2 sector once only when its 16-byte
  // halves land in one aligned 32-byte word of shared memory. With rows padded by 16 bytes
  // (272 apart, until run 35) every odd row straddled, and L2 served 12 sectors per 256-byte
  // row instead of 8: ncu counted 25.4 M sectors read for 545 MB copied at 1M tokens, and a
  // probe (bench/staging_probe.cu, run 35) 12.6 M against 8.4 M for rows 272 against 256
  // bytes apart. Input rows: each lane's part of a row (C = kChunksPerLane chunks) is
  // followed by kPartPad chunks of padding (see input_chunk), and a lane reads one address
  // plus constant offsets.
  static constexpr int kPartPad = kLanes < 8 ? 2 : 0;
  static constexpr int kRowChunks = kRowBytes / 16 + kLanes * kPartPad;
  // A RoPE row is 64 floats + 8 of padding (288 bytes: 32-byte aligned, as above).
  static constexpr int kRopeStride = 72;
  static_assert(kRopeStride * 4 % 16 == 0, "staged rows (store_head<..., 16>) start 16-byte aligned");
  uint4 rows[kTokens * kRowChunks];                  // input rows of the next tile to compute
  alignas(16) float rope[2][kTokens * kRopeStride];  // RoPE rows of tiles i and i + 1
  int32_t positions[3][kTokens];                     // of tiles i, i + 1, i + 2
  // The sequences of tiles i .. i + 2; once a tile's are read, its page-table entries
  // are copied over them (the staging fills shared memory to the last byte at 1 lane).
  int32_t seq_then_page[3][kTokens];
  uint8_t* value_dst[kTokens];  // this tile's cache slots (null: not stored), for the copy-out
};

// Blocks of kThreadsPerBlock per SM; the register cap is 65536 / (128 x this), rounded down
// to a multiple of 8: 1 lane: 255 (128 values + the pipeline), 2: 168, 4: 80, 8: 64 (the
// most each width's pinned paths need; ptxas -v reports a few bytes of spills on some
// 4-lane ones). 2 lanes had 4 blocks and 128 registers until H200 run 31: with the copies'
// addresses kept in registers they spilled ~50 bytes a thread inside the loop, and 3 blocks
// without spills were 7% faster (bf16 0.179 against 0.192 ms). Shared memory per SM,
// staging + norm weights + 1 KB reserved per block: 1 lane 2 x 114 KB (all of it), 2: 3 x 60 KB,
// 4: 6 x 33 KB, 8: 8 x 15.5 KB (of 228 KB; static_assert below).
template <int kLanes>
inline constexpr int kKeyMinBlocks = kLanes == 1 ? 2 : kLanes == 2 ? 3 : kLanes == 4 ? 6 : 8;

template <int kLanes>
constexpr bool fits_shared_memory() {  // 228 KB per SM on sm_90, 1 KB of it reserved per block
  return kKeyMinBlocks<kLanes> * (sizeof(KeyRing<kLanes>) * kWarpsPerBlock + 2 * kHeadDim * 4 + 1024) <= 228 * 1024;
}
static_assert(fits_shared_memory<1>() && fits_shared_memory<2>() && fits_shared_memory<4>() && fits_shared_memory<8>(),
              "kKeyMinBlocks blocks of staging fit an SM's shared memory");

// Where chunk c (0..15) of input row k sits in KeyRing::rows: part c / C of the row (the
// lane that reads it) at k S + (c / C) P, S = 16 + kLanes x pad, P = C + pad, C =
// kChunksPerLane. Every part starts on a 32-byte boundary (C and pad even), so the 8 lanes
// of a quarter warp, reading chunk c of their parts, can reach only 4 of the 8 16-byte bank
// groups: a 2-way conflict, the least that alignment allows. The pads reach it: at
// k S + p P (mod 8) over (token, part) pairs: 1 lane, 8 tokens: 18k = 2k; 2 lanes, 4 x 2:
// 20k + 10p = 4k + 2p; 4 lanes, 2 x 4: 24k + 6p = 6p; 8 lanes (no pad), 1 x 8: 2p — 4
// distinct values each. (Conflict-free 16-byte padding cost half as many L2 sectors again,
// above; the L2 is the key kernel's bottleneck, shared memory is not.)
template <int kLanes>
__device__ __forceinline__ int input_chunk(int k, int c) {
  using Ring = KeyRing<kLanes>;
  constexpr int kC = Ring::kChunksPerLane;
  return k * Ring::kRowChunks + (c / kC) * (kC + Ring::kPartPad) + c % kC;
}

// The copies of one tile's input rows: lane l copies chunk l % 16 of rows l / 16 + 2j, so
// a warp instruction reads two whole rows (4 lines). A tile wholly inside the batch reads
// from one address per lane plus constant offsets; the last one repeats the last token
// past the end (computed and not stored).
template <int kLanes>
__device__ __forceinline__ void issue_input_rows(const KeyStoreArgs& args, int64_t tile, KeyRing<kLanes>& ring,
                                                 int lane) {
  using Ring = KeyRing<kLanes>;
  // Read once: evict-first. Not at 8 lanes: there a lane's destination is the warp's base
  // plus 16 x lane, and ptxas 13.0 (sm_90a) then addresses it as [R + UR] and overwrites
  // the cache policy's uniform register pair with the base (SASS: LDGSTS ... desc[UR1],
  // a register never written; every 8-lane launch died with "illegal instruction", H200
  // run 36). The 8-lane kernels are the slowest width and never chosen automatically.
  // CTest sass_uniform_registers (scripts/check_uniform_registers.py) finds this
  // miscompile in the built SASS on any machine, GPU or not.
  constexpr L2Priority kPriority = kLanes == 8 ? L2Priority::kNormal : L2Priority::kEvictFirst;
  if (!args.input_bf16) return;
  const int64_t first = tile * Ring::kTokens;
  const int c = lane % 16, k0 = lane / 16;
  const auto* input = static_cast<const uint8_t*>(args.input);
  if (first + Ring::kTokens <= args.num_tokens) {
    const uint8_t* src = input + (first + k0) * Ring::kRowBytes + 16 * c;
#pragma unroll
    for (int j = 0; j < Ring::kTokens / 2; ++j) {
      copy_async<16, kPriority>(&ring.rows[input_chunk<kLanes>(k0 + 2 * j, c)], src + j * 2 * Ring::kRowBytes);
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < Ring::kTokens / 2; ++j) {
    const int64_t token = min(first + k0 + 2 * j, args.num_tokens - 1);
    copy_async<16, kPriority>(&ring.rows[input_chunk<kLanes>(k0 + 2 * j, c)],
                                            input + token * Ring::kRowBytes + 16 * c);
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
      copy_async<4>(&ring.seq_then_page[b][k], args.seq + token);
    }
  }
}

// The copies of one tile's page-table entries (page_tables[seq][pos / P]) over its landed
// sequences, from those and its positions, buffer b: copied with the tile's group, they
// wait in shared memory. Read where it was used, the entry's load was the one global
// load in the tile loop whose latency nothing covered (moved here in run 47:
// long-scoreboard stalls 0.24 -> 0.22 per instruction for fp8, time within the spread).
// Lane k reads token k's sequence before its copy is issued, and no other lane reads it.
template <int kLanes>
__device__ __forceinline__ void issue_page_entries(const KeyStoreArgs& args, KeyRing<kLanes>& ring, int b, int lane) {
  using Ring = KeyRing<kLanes>;
  if (lane >= Ring::kTokens) return;
  const int64_t entry = static_cast<int64_t>(ring.seq_then_page[b][lane]) * args.page_table_stride +
                        page_slot(ring.positions[b][lane], args.page_size).table_index;
  copy_async<4>(&ring.seq_then_page[b][lane], args.page_tables + entry);
}

// The copies of one tile's RoPE rows into rope[rb], from its landed positions[pb]. Every
// sequence of a batch re-reads the same rows (16 MB for 64K positions, against 256 MB of
// input rows per 1M tokens streaming past): evict-last, so they stay in L2 (run 18's
// profile: 35% more HBM bytes than the kernel's own, the table re-read from HBM).
template <int kLanes>
__device__ __forceinline__ void issue_rope_rows(const KeyStoreArgs& args, KeyRing<kLanes>& ring, int pb, int rb,
                                                int lane) {
  using Ring = KeyRing<kLanes>;
  // Lane l copies chunk c = l % 16 (0-7: cos, 8-15: sin) of the rows of tokens
  // k0 + j, k0 = (l / 16) x kTokens / 2: a warp instruction reads two whole rows (4 lines),
  // and a lane's destinations are one address plus constant offsets.
  constexpr int kHalf = Ring::kTokens / 2;
  const int c = lane % 16, k0 = (lane / 16) * kHalf;
  const float* table = (c < 8 ? args.rope_cos : args.rope_sin) + (c % 8) * 4;
  float* dst = ring.rope[rb] + k0 * Ring::kRopeStride + (c / 8) * 32 + (c % 8) * 4;
  // Sources in batches of 8, then their copies back to back: ptxas pads every run of
  // cp.async with three idle instructions (nvdisasm of this file), so runs are kept long.
  constexpr int kBatch = kHalf < 8 ? kHalf : 8;
#pragma unroll
  for (int j0 = 0; j0 < kHalf; j0 += kBatch) {
    const float* src[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) src[b] = table + static_cast<int64_t>(ring.positions[pb][k0 + j0 + b]) * 32;
#pragma unroll
    for (int b = 0; b < kBatch; ++b) copy_async<16, L2Priority::kEvictLast>(dst + (j0 + b) * Ring::kRopeStride, src[b]);
  }
}

// Whether tile `a`'s landed positions equal tile `b`'s, token for token (then their RoPE
// rows are the same rows, and the ones in shared memory serve).
template <int kLanes>
__device__ __forceinline__ bool same_positions(const KeyRing<kLanes>& ring, int a, int b, int lane) {
  using Ring = KeyRing<kLanes>;
  const bool same = lane >= Ring::kTokens || ring.positions[a][lane] == ring.positions[b][lane];
  return __all_sync(kFullMask, same);
}

// The copies of tile i's group (`tile`, -1 if none; `next_tile` is tile i + 1): its input
// rows (tile 0's went with its positions), its page-table entries, its RoPE rows, and the
// positions of tile i + 1. The RoPE rows go to the buffer tile i - 1 did not use
// (`previous_buffer` is the one it did), unless tile i has tile i - 1's positions: then it
// keeps them. Returns the buffer that holds tile i's RoPE rows. The caller completes the
// group (a commit group, or an mbarrier arrival).
template <int kLanes>
__device__ __forceinline__ int issue_tile_copies(const KeyStoreArgs& args, KeyRing<kLanes>& ring, int i, int64_t tile,
                                                 int64_t next_tile, int previous_buffer, int lane) {
  int buffer = 1 - previous_buffer;
  if (tile >= 0) {
    if (i > 0) issue_input_rows<kLanes>(args, tile, ring, lane);
    issue_page_entries<kLanes>(args, ring, i % 3, lane);
    if (i > 0 && same_positions<kLanes>(ring, i % 3, (i - 1) % 3, lane)) {
      buffer = previous_buffer;
    } else {
      issue_rope_rows<kLanes>(args, ring, i % 3, buffer, lane);
    }
  }
  if (next_tile >= 0) issue_positions<kLanes>(args, next_tile, ring, (i + 1) % 3, lane);
  return buffer;
}

// The tiles one warp computes, in order (api.h KeyStoreArgs::tile_order): batch order,
// tiles g, g + W, g + 2W, ... for warp g of W, so that the grid sweeps the batch front to
// back; or a contiguous run of the tile order, so that tiles the order put side by side
// (same positions) follow each other in one warp. Runs differ by one tile at most (with
// runs of ceil(tiles / W) the last warps had none: at 1M tokens and 1 lane, 32,768 tiles
// for 1,056 warps left 32 idle and gave the rest 32 tiles, where batch order gives 31 to
// all but 32 of them; fp8 in the tile order 0.144 ms in run 45, 0.142 in run 46 balanced).
// With tile_counters the runs cover all but the order's last hand_out_tiles_per_warp x W
// tiles (the pool), which are handed out one at a time, by an atomic counter, to the warps
// that finish their runs first: runs of equal length end at different times on different
// SMs, and 4-9% of SM cycles had no warp resident (ncu, runs 46-49), most of them at the
// end (runs 57-59: bf16 3%, fp8 5% faster with the hand-out).
//
// A walk position's slot (its index into the order, or its tile in batch order) comes in
// two steps, request() and finish(), so that the counter's atomic is read a tile after it
// is issued; the order's entry is read a tile before the tile is needed, since a load used
// at once waits out its whole latency (with the entry widened where it was read, ptxas
// waited for it at the top of every tile, SASS of run 46's build: long-scoreboard stalls
// 0.24 -> 0.37 per instruction, fp8, ncu).
struct TileWalk {
  const int32_t* order;          // null: batch order
  int64_t first, step, count;    // positions i < count: slot first + i x step
  int32_t* pool;                 // null: no pool; else [0] tiles handed out, [1] warps done
  int64_t pool_first, pool_size;  // pool positions take slots pool_first + 0, 1, ...
  bool pool_open;

  __device__ static TileWalk of(const KeyStoreArgs& args, int64_t tiles, int64_t warp, int64_t warps) {
    if (args.tile_order != nullptr) {
      const int64_t pool_size =
          args.tile_counters == nullptr ? 0 : min(tiles, static_cast<int64_t>(args.hand_out_tiles_per_warp) * warps);
      const int64_t runs = tiles - pool_size, first = warp * runs / warps;
      return {args.tile_order, first, 1, (warp + 1) * runs / warps - first,
              args.tile_counters, runs, pool_size, pool_size > 0};
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

// Cache values go out through shared memory when every row can be written in 16-byte
// pieces: rows of at most 256 bytes (not fp32) in a 16-byte aligned cache of pages whose
// size is a multiple of 16 (fp8 pages of 1 or 2 tokens are 132 or 264 bytes: those slots,
// and any cache a caller hands in at a smaller alignment, are stored directly). Scales
// (4 bytes a token) are written by the token's lanes directly.
inline constexpr int kStagedRowBytes = 256;  // what a RoPE row's area holds (fp32 rows do not fit)
template <ref::StorageFormat kFormat>
__device__ __forceinline__ bool stages_cache_rows(const uint8_t* cache, int page_size) {
  return (reinterpret_cast<uintptr_t>(cache) & 15) == 0 &&
         (page_size * (value_bytes(kFormat) + scale_bytes(kFormat))) % 16 == 0;
}

// Writes the tile's staged value rows (row k at staged + k * kRopeStride floats) to
// ring.value_dst[k]. The lanes form groups of C (16-byte chunks per row); group q copies
// rows q R .. q R + R - 1 (R = rows per group), one row per instruction, so a lane reads
// one address plus constant offsets and each instruction writes whole rows. The
// destinations come from shared memory (ptxas loads two per 16-byte load), not by two
// shuffles per row and lane from their tokens' lanes. kWholeTile: every token of the tile
// is stored (all but a batch's last tile), so no destination is checked.
template <ref::StorageFormat kFormat, int kLanes, bool kWholeTile>
__device__ __forceinline__ void copy_out_tile(const uint8_t* staged, const KeyRing<kLanes>& ring, int lane) {
  using Ring = KeyRing<kLanes>;
  constexpr int kRowStride = Ring::kRopeStride * 4;
  constexpr int kChunks = value_bytes(kFormat) / 16, kGroups = kWarpLanes / kChunks;
  constexpr int kRowsPerGroup = (Ring::kTokens + kGroups - 1) / kGroups;
  static_assert(kWarpLanes % kChunks == 0 && kRowStride >= kStagedRowBytes, "whole rows per group");
  const int c = lane % kChunks, first = (lane / kChunks) * kRowsPerGroup;
  const uint8_t* const src = staged + first * kRowStride + c * 16;
#pragma unroll
  for (int j = 0; j < kRowsPerGroup; ++j) {
    const int k = first + j;
    const bool in_tile = Ring::kTokens % kGroups == 0 || k < Ring::kTokens;  // groups past a short tile idle
    uint8_t* const dst = ring.value_dst[in_tile ? k : 0];
    if (in_tile && (kWholeTile || dst != nullptr)) {
      // st.global.cs: streamed out, evict-first in L2 (the RoPE table stays)
      __stcs(reinterpret_cast<uint4*>(dst + c * 16), *reinterpret_cast<const uint4*>(src + j * kRowStride));
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
    const uint4 v = ring.rows[input_chunk<kLanes>(token, part * kC + c)];
    w[4 * c] = v.x, w[4 * c + 1] = v.y, w[4 * c + 2] = v.z, w[4 * c + 3] = v.w;
  }
  widen_bf16<kV>(w, x);
}

// This lane's token of the tile in ring slot `slot`: its input part read into x (from the
// staged rows, or fp32 rows from global memory), its page and slot offset, and whether it
// is stored (a tile past the batch's end recomputes the last token and stores nothing:
// every lane of the warp must take part in the shuffles).
struct KeyToken {
  bool store;
  int64_t page;  // table[seq][pos / P] (landed with the group); the slot is pos % P
  int offset;
};
template <int kLanes>
__device__ __forceinline__ KeyToken read_key_token(const KeyStoreArgs& args, const KeyRing<kLanes>& ring, int64_t tile,
                                                   int slot, int token_in_tile, int part, HeadPart<kLanes>& x) {
  const int64_t token_unclamped = tile * KeyRing<kLanes>::kTokens + token_in_tile;
  const bool store = token_unclamped < args.num_tokens;
  const int64_t token = store ? token_unclamped : args.num_tokens - 1;
  const int position = ring.positions[slot][token_in_tile];
  const PageSlot page_slot_of_token = page_slot(position, args.page_size);
  const int64_t page = ring.seq_then_page[slot][token_in_tile];
  if (args.input_bf16) {
    read_staged_row<kLanes>(ring, token_in_tile, part, x);
  } else {
    load_head<kLanes>(static_cast<const float*>(args.input) + token * kHeadDim, false, part, x);
  }
  return {store, page, page_slot_of_token.offset};
}

// Norm -> RoPE -> Hadamard on this lane's part of a token (the recipe's roundings between);
// its RoPE row is row token_in_tile of rope_rows.
template <int kLanes>
__device__ __forceinline__ void transform_key(const KernelRecipe& r, int part, const float* norm_weight,
                                              const float* norm_bias, const float* rope_rows, int token_in_tile,
                                              HeadPart<kLanes>& x) {
  round_head_bf16<kLanes>(r.key_rounding.input, x);
  norm_head<kLanes>(x, r.key_norm, part, norm_weight, norm_bias);
  if (r.key_norm.kind != ref::NormKind::kNone) round_head_bf16<kLanes>(r.key_rounding.norm, x);
  const float* rope_row = rope_rows + token_in_tile * KeyRing<kLanes>::kRopeStride;
  rope_and_rotate<kLanes>(x, part, r, r.key_rounding, rope_row, rope_row + 32);
}

// Quantises a token and stores it in its cache slot: the scale directly, the values directly
// or, with staged_row, into the stage for the tile's copy-out (then returns their slot).
template <ref::StorageFormat kFormat, int kLanes>
__device__ __forceinline__ uint8_t* store_key(const KeyStoreArgs& args, const KernelRecipe& r, int part, int64_t page,
                                              int offset, bool store, uint8_t* staged_row, HeadPart<kLanes>& x) {
  constexpr int kValueBytes = value_bytes(kFormat), kScaleBytes = scale_bytes(kFormat);
  uint8_t* page_base = args.cache + page * args.page_size * (kValueBytes + kScaleBytes);
  uint8_t* value_dst = page_base + offset * kValueBytes;
  uint8_t* scale_dst = page_base + args.page_size * kValueBytes + offset * kScaleBytes;
  if constexpr (kValueBytes <= kStagedRowBytes) {
    if (staged_row != nullptr) {
      // A staged row starts 16-byte aligned (rope rows kRopeStride floats apart).
      store_head<kFormat, kLanes, 16>(x, part, r.key_quant, staged_row, scale_dst, store);
      return value_dst;
    }
  }
  store_head<kFormat, kLanes>(x, part, r.key_quant, value_dst, scale_dst, store);
  return value_dst;
}

template <ref::StorageFormat kFormat, int kLanes, class Path>
__global__ void __launch_bounds__(kThreadsPerBlock, kKeyMinBlocks<kLanes>)
key_store_kernel(const KeyStoreArgs args) {
  using Ring = KeyRing<kLanes>;
  extern __shared__ __align__(128) uint4 shared_words[];
  // The warp index through a shuffle: the compiler then knows it is uniform across the warp,
  // and so is the tile loop below; otherwise it guards every shuffle in the loop as if the
  // warp could have diverged (WARPSYNC + ENDCOLLECTIVE around each one, SASS of run 13).
  const int warp = __shfl_sync(kFullMask, static_cast<int>(threadIdx.x / kWarpLanes), 0);
  const int lane = threadIdx.x % kWarpLanes;
  Ring& ring = reinterpret_cast<Ring*>(shared_words)[warp];
  const int part = lane % kLanes, token_in_tile = lane / kLanes;
  const KernelRecipe r = pinned_recipe<Path>(args.recipe);

  const int64_t tiles = (args.num_tokens + Ring::kTokens - 1) / Ring::kTokens;
  const bool staged_store = stages_cache_rows<kFormat>(args.cache, args.page_size);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  TileWalk walk = TileWalk::of(args, tiles, static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp, warps);

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
  // in shared memory (not through L1); then the rest of tile 0's group. Until run 48 the
  // weights came first, and a launch waited out three memory round trips before its
  // first arithmetic instead of two (run 49: no change measurable at 1M tokens, where
  // the start is ~1% of the kernel).
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
    const bool store = t.store;
    const int64_t page = t.page;
    __syncwarp();  // the input rows are read: the next tile's group may land
    const int next_rope_buffer = issue_group(i + 1, next_tile, tile_after_next, rope_buffer);
    round_head_bf16<kLanes>(r.key_rounding.input, x);

    norm_head<kLanes>(x, r.key_norm, part, norm_weight, norm_bias);
    if (r.key_norm.kind != ref::NormKind::kNone) round_head_bf16<kLanes>(r.key_rounding.norm, x);
    const float* rope_row = ring.rope[rope_buffer] + token_in_tile * Ring::kRopeStride;
    rope_and_rotate<kLanes>(x, part, r, r.key_rounding, rope_row, rope_row + 32);

    const int offset = t.offset;
    constexpr int kValueBytes = value_bytes(kFormat), kScaleBytes = scale_bytes(kFormat);
    uint8_t* page_base = args.cache + page * args.page_size * (kValueBytes + kScaleBytes);
    uint8_t* value_dst = page_base + offset * kValueBytes;
    uint8_t* scale_dst = page_base + args.page_size * kValueBytes + offset * kScaleBytes;
    if constexpr (value_bytes(kFormat) > kStagedRowBytes) {  // fp32 rows do not fit: direct
      store_head<kFormat, kLanes>(x, part, r.key_quant, value_dst, scale_dst, store);
    } else if (staged_store) {
      // The cache values go out whole (16 lanes write a 256-byte row at once, not 32 lanes
      // 16 bytes of 32 rows) from the RoPE buffer the next tile does not need: this
      // tile's, once its rows are read, or the other one when the next tile keeps them.
      __syncwarp();
      float* stage = ring.rope[next_rope_buffer == rope_buffer ? 1 - rope_buffer : rope_buffer];
      uint8_t* staged_row = reinterpret_cast<uint8_t*>(stage + token_in_tile * Ring::kRopeStride);
      // A staged row starts 16-byte aligned (rope rows kRopeStride floats apart).
      store_head<kFormat, kLanes, 16>(x, part, r.key_quant, staged_row, scale_dst, store);
      if (part == 0) ring.value_dst[token_in_tile] = store ? value_dst : nullptr;
      __syncwarp();
      const auto* staged = reinterpret_cast<const uint8_t*>(stage);
      if ((tile + 1) * Ring::kTokens <= args.num_tokens) {
        copy_out_tile<kFormat, kLanes, true>(staged, ring, lane);
      } else {
        copy_out_tile<kFormat, kLanes, false>(staged, ring, lane);
      }
      __syncwarp();  // the area may take the RoPE rows of tile i + 2 next
    } else {
      store_head<kFormat, kLanes>(x, part, r.key_quant, value_dst, scale_dst, store);
    }
    rope_buffer = next_rope_buffer;
    tile = next_tile, next_tile = tile_after_next, tile_after_next = walk.tile(later_slot, later_entry);
  }
  walk.leave(lane, warps);
  wait_async<0>();  // nothing may still be writing this block's shared memory at exit
}

// Producer and compute warps (the pinned paths with kProducerWarps, at 1 lane). Run 67's
// phase clocks put 39% of a 1-lane warp's time in phases that issue a sixth of its
// instructions (the walk, issuing the next tile's copies, the copy-out). Here each compute
// warp has a producer warp of its own that walks the tiles, issues every copy and copies
// the staged cache rows out; the compute warp waits for its tile's group, computes,
// stages, and hands the stage back. One block per SM: 8 compute warps (warpgroups 0-1, 216
// registers after setmaxnreg) and 8 producers (warpgroups 2-3, 40 registers): 2 x 128 x
// 216 + 2 x 128 x 40 = 65,536; the 8 rings fill shared memory as the 2 x 4 of
// key_store_kernel do. H200 run 71 (1M tokens, tile order + hand-out): dsv32-bf16 0.212 ms
// (0.239 in key_store_kernel, run 69), dsv32-ref 0.227 (0.234); but sglang-v4-fp8 0.136
// (0.131), sglang-v4-fp4 0.194 (0.195-0.197) and sglang-v4-bf16 at 1 lane 0.165 (2 lanes
// in key_store_kernel: 0.157). The dsv32 paths' long sequential LayerNorm chains leave the
// most issue slots idle between them; the sglang-v4 ones lose more to the hand-offs than
// the producers give back.
constexpr int kSpecializedComputeWarps = 8;
constexpr int kSpecializedThreads = 2 * kSpecializedComputeWarps * kWarpLanes;
constexpr int kComputeRegisters = 216, kProducerRegisters = 40;
static_assert(kSpecializedComputeWarps * kWarpLanes * (kComputeRegisters + kProducerRegisters) == 65536,
              "the register file, shared out");
// The launch must hold 65536 / kSpecializedThreads = 128 registers a thread: setmaxnreg moves
// registers within the block's allocation, and a block launched with fewer could never
// satisfy the compute warps' claim (they would wait in setmaxnreg.inc forever).
constexpr int kSpecializedLaunchRegisters = 65536 / kSpecializedThreads;

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
__device__ void produce_key_tiles(const KeyStoreArgs& args, KeyRing<kLanes>& ring, KeyHandoff& h, int64_t warp,
                                  int64_t warps, bool staged_store, int lane) {
  using Ring = KeyRing<kLanes>;
  const int64_t tiles = (args.num_tokens + Ring::kTokens - 1) / Ring::kTokens;
  TileWalk walk = TileWalk::of(args, tiles, warp, warps);
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
      if ((previous_tile + 1) * Ring::kTokens <= args.num_tokens) {
        copy_out_tile<kFormat, kLanes, true>(staged, ring, lane);
      } else {
        copy_out_tile<kFormat, kLanes, false>(staged, ring, lane);
      }
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

template <ref::StorageFormat kFormat, int kLanes, class Path>
__global__ void __launch_bounds__(kSpecializedThreads, 1) key_store_specialized_kernel(const KeyStoreArgs args) {
  using Ring = KeyRing<kLanes>;
  constexpr int kComputeWarps = kSpecializedComputeWarps;
  extern __shared__ __align__(128) uint4 shared_words[];
  const int warp = __shfl_sync(kFullMask, static_cast<int>(threadIdx.x / kWarpLanes), 0);
  const int lane = threadIdx.x % kWarpLanes;
  const bool producer = warp >= kComputeWarps;
  const int w = producer ? warp - kComputeWarps : warp;
  Ring& ring = reinterpret_cast<Ring*>(shared_words)[w];
  KeyHandoff& h = reinterpret_cast<KeyHandoff*>(reinterpret_cast<Ring*>(shared_words) + kComputeWarps)[w];
  __shared__ __align__(16) float norm_weight[kHeadDim];
  __shared__ __align__(16) float norm_bias[kHeadDim];
  for (int i = threadIdx.x; i < kHeadDim; i += kSpecializedThreads) {
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
  const bool staged_store =
      value_bytes(kFormat) <= kStagedRowBytes && stages_cache_rows<kFormat>(args.cache, args.page_size);
  if (producer) {
    registers_release<kProducerRegisters>();
    produce_key_tiles<kFormat, kLanes>(args, ring, h, static_cast<int64_t>(blockIdx.x) * kComputeWarps + w,
                                       static_cast<int64_t>(gridDim.x) * kComputeWarps, staged_store, lane);
    return;
  }
  registers_claim<kComputeRegisters>();
  const int part = lane % kLanes, token_in_tile = lane / kLanes;
  const KernelRecipe r = pinned_recipe<Path>(args.recipe);
  int rope_buffer = 0;  // tile i's RoPE rows
  for (int i = 0;; ++i) {
    barrier_wait(&h.landed, i & 1);
    const int64_t tile = h.tiles[i % 2][0], next_tile = h.tiles[i % 2][1];
    if (tile < 0) break;
    HeadPart<kLanes> x;
    const KeyToken t = read_key_token<kLanes>(args, ring, tile, i % 3, token_in_tile, part, x);
    const bool keeps = keeps_rope_rows<kLanes>(ring, next_tile, i, lane);
    barrier_arrive(&h.rows_read);
    transform_key<kLanes>(r, part, norm_weight, norm_bias, ring.rope[rope_buffer], token_in_tile, x);
    if (staged_store) {
      __syncwarp();  // every lane has read its RoPE row: the stage may be this tile's buffer
      if (i > 0) barrier_wait(&h.copied, (i - 1) & 1);
      float* stage = ring.rope[keeps ? 1 - rope_buffer : rope_buffer];
      uint8_t* staged_row = reinterpret_cast<uint8_t*>(stage + token_in_tile * Ring::kRopeStride);
      uint8_t* value_dst = store_key<kFormat, kLanes>(args, r, part, t.page, t.offset, t.store, staged_row, x);
      if (part == 0) ring.value_dst[token_in_tile] = t.store ? value_dst : nullptr;
      barrier_arrive(&h.staged);
    } else {
      store_key<kFormat, kLanes>(args, r, part, t.page, t.offset, t.store, nullptr, x);
    }
    rope_buffer = keeps ? rope_buffer : 1 - rope_buffer;
  }
}

template <ref::StorageFormat kFormat, int kLanes, class Path>
void launch_key_store_specialized(const KeyStoreArgs& args, int64_t tiles) {
  using Ring = KeyRing<kLanes>;
  constexpr int kShared = kSpecializedComputeWarps * (sizeof(Ring) + sizeof(KeyHandoff));
  static_assert(kShared + 2 * kHeadDim * 4 <= 227 * 1024, "8 rings, their hand-offs and the norm weights in a block");
  const auto kernel = key_store_specialized_kernel<kFormat, kLanes, Path>;
  cudaFuncAttributes attributes{};
  check_cuda(cudaFuncGetAttributes(&attributes, kernel), "key_store_specialized_kernel attributes");
  if (attributes.numRegs != kSpecializedLaunchRegisters) {
    throw Error(ErrorKind::kEnvironment, "key_store_specialized_kernel was compiled for " +
                                             std::to_string(attributes.numRegs) + " registers a thread, not " +
                                             std::to_string(kSpecializedLaunchRegisters) +
                                             ": its setmaxnreg claims could not be met");
  }
  const int resident = resident_blocks(kernel, kSpecializedThreads, kShared, "key_store_specialized_kernel");
  int64_t blocks = std::min<int64_t>((tiles + kSpecializedComputeWarps - 1) / kSpecializedComputeWarps, resident);
  if (args.max_blocks > 0) blocks = std::min<int64_t>(blocks, args.max_blocks);
  kernel<<<static_cast<unsigned>(blocks), kSpecializedThreads, kShared>>>(args);
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
  if constexpr (kFormat == ref::StorageFormat::kFp8E4m3fn || kFormat == ref::StorageFormat::kBf16) {
    if (key_path_matches<Dsv32KeyPath<kFormat>>(recipe)) return f(Dsv32KeyPath<kFormat>{});
  }
  if constexpr (kFormat == ref::StorageFormat::kFp8E4m3fn) {
    if (key_path_matches<SglangV32FusedKeyPath>(recipe)) return f(SglangV32FusedKeyPath{});
    if (key_path_matches<VllmV32KeyPath>(recipe)) return f(VllmV32KeyPath{});
  }
  if constexpr (kFormat == ref::StorageFormat::kFp4SimulatedBf16) {
    if (key_path_matches<Dsv4KeyPath>(recipe)) return f(Dsv4KeyPath{});
  }
  f(RuntimeKeyPath{});
}

}  // namespace

// Measured on the H200 (bench/results/LOG.md runs 37, 40-42, 1M tokens): sglang-v4-fp8
// 0.137 ms at 1 lane (2: 0.148), sglang-v4-bf16 0.171 ms at 2 lanes (1: 0.177),
// sglang-v4-fp4 0.214 ms at 1 lane (2: 0.227, 4: 0.229; run 42, the branch-free e2m1
// encoder; 4 lanes were fastest with the threshold one); the generic kernel (other
// recipes): dsv32-ref, before its pinned path, 0.60 ms at 2 lanes (1: 1.19), dsv32-bf16
// 0.39 at 1 lane (2: 0.41; runs 34, 37, 39-42 alike). Pinned dsv32 paths (run 69): dsv32-ref
// 0.245 ms at 1 lane (2: 0.283, 4: 0.363, 8: 0.453), dsv32-bf16 0.252 (2: 0.279); at 1 lane
// with producer warps (run 71) 0.248 and 0.233 in batch order. Pinned sglang-v32-fused,
// vllm-v32 and dsv4-ref (run 84): fastest at 1 lane with producer warps, 2 lanes 3-20% slower.
int fastest_key_lanes(const KernelRecipe& recipe) {
  int lanes = 0;
  dispatch_format(recipe.key_quant.format, [&](auto format) {
    dispatch_key_path<decltype(format)::value>(recipe, [&](auto path) {
      if constexpr (decltype(path)::kPinned) lanes = decltype(path)::kFastestLanes;
    });
  });
  if (lanes > 0) return lanes;
  switch (recipe.key_quant.format) {  // the generic kernel
    case ref::StorageFormat::kFp8E4m3fn: return 2;
    case ref::StorageFormat::kFp4E2m1: return 4;
    case ref::StorageFormat::kBf16: return 1;
    default: return 2;
  }
}

int key_store_tile_tokens(const KernelRecipe& recipe, int lanes_per_head) {
  if (lanes_per_head == kAutoLanesPerHead) lanes_per_head = fastest_key_lanes(recipe);
  int tokens = 0;
  dispatch_lanes(lanes_per_head, "key_store", [&](auto lanes) { tokens = KeyRing<decltype(lanes)::value>::kTokens; });
  return tokens;
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
  if (args.tile_counters != nullptr && args.tile_order == nullptr) {
    throw_bad_input("key_store: tile_counters hand out tiles of a tile order; this launch has no tile_order");
  }
  if (args.tile_counters != nullptr && args.hand_out_tiles_per_warp < 1) {
    throw_bad_input("key_store: hand_out_tiles_per_warp must be at least 1, got " +
                    std::to_string(args.hand_out_tiles_per_warp));
  }
  if (args.tile_order != nullptr && args.tile_order_tokens != key_store_tile_tokens(args.recipe, lanes_per_head)) {
    throw_bad_input("key_store: the tile order was built for tiles of " + std::to_string(args.tile_order_tokens) +
                    " tokens; this launch computes tiles of " +
                    std::to_string(key_store_tile_tokens(args.recipe, lanes_per_head)));
  }
  dispatch_lanes(lanes_per_head, "key_store", [&](auto lanes) {
    constexpr int kLanes = decltype(lanes)::value;
    const int64_t tiles = (args.num_tokens + KeyRing<kLanes>::kTokens - 1) / KeyRing<kLanes>::kTokens;
    dispatch_format(args.recipe.key_quant.format, [&](auto format) {
      constexpr ref::StorageFormat kFormat = decltype(format)::value;
      dispatch_key_path<kFormat>(args.recipe, [&](auto path) {
        using Path = decltype(path);
        if constexpr (kLanes == 1 && Path::kProducerWarps) {
          launch_key_store_specialized<kFormat, kLanes, Path>(args, tiles);
        } else {
          key_store_kernel<kFormat, kLanes, Path>
              <<<grid_blocks<kFormat, kLanes, Path>(args, tiles), kThreadsPerBlock,
                 sizeof(KeyRing<kLanes>) * kWarpsPerBlock>>>(args);
        }
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
