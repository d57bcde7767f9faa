// File: staging.cuh
// A key-kernel warp's staging ring (KeyRing) and the copies that fill and empty it. Each
// warp is persistent and walks tiles of 32 / kLanes tokens (tile_walk.cuh); everything a
// tile reads — input rows, RoPE table rows, positions, page-table entries — is copied
// into the warp's shared memory with cp.async a tile ahead, so the next tile loads while
// this one computes, without registers held for it. Narrow lane groups (1-2 lanes a
// token) issue the fewest instructions per token but hold 64-128 values a lane, so few
// warps fit on an SM: the staging is what lets those few warps keep HBM busy. A tile's
// cache rows leave through the ring too (copy_out_tile), whole rows per instruction.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device/api.h"
#include "device/head/head_io.cuh"
#include "device/head/quantize.cuh"
#include "device/primitives/async_copy.cuh"
#include "device/primitives/paging.cuh"

namespace dsaf::dev::key_kernel {

// One warp's staging area. Everything a tile needs is copied with cp.async one tile
// ahead, in one commit group per tile: its input rows (bf16, 256 bytes a row; fp32 input,
// a test and verification format, is read from global memory instead), its RoPE table
// rows (32 cos, 32 sin: as many bytes as the input; read from global memory by the one
// lane that rotates, they would stall it longest), its page-table entries, and the
// positions and sequences of the tile after it (the RoPE rows and page entries need them
// a tile early). So while a warp computes tile i, the group of tile i + 1 is in flight and
// nothing waits in the middle of a tile. The input rows are read into registers first, so
// one buffer serves; the RoPE rows of tile i are read mid-tile, so they have two, and the
// buffer the next tile does not need carries the tile's cache rows on their way out.
template <int kLanes>
struct alignas(32) KeyRing {  // rows and rope start 32-byte aligned (see kPartPad)
  static constexpr int kTokens = kWarpLanes / kLanes;  // per tile
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kChunksPerLane = kRowBytes / kLanes / 16;  // 16-byte chunks a lane reads
  // Every copy lands at the same offset modulo 32 bytes as its source (rows and parts start
  // on 32-byte boundaries): cp.async reads each 32-byte L2 sector once only when its 16-byte
  // halves land in one aligned 32-byte word of shared memory. Rows padded by 16 bytes (272
  // apart) make every odd row straddle, and L2 then serves 12 sectors per 256-byte row
  // instead of 8 (bench/staging_probe.cu measures both layouts). Input rows: each lane's
  // part of a row (C = kChunksPerLane chunks) is followed by kPartPad chunks of padding
  // (see input_chunk), and a lane reads one address plus constant offsets.
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
  // a register never written: every 8-lane launch dies with "illegal instruction" on the
  // H200). The 8-lane kernels are the slowest width and never chosen automatically.
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
// wait in shared memory (read where it is used, the entry's load would be the one global
// load in the tile loop whose latency nothing covers).
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
// input rows per 1M tokens streaming past): evict-last, so they stay in L2 (with equal
// priorities the stream pushes the table out and every sequence re-reads it from HBM).
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

// Cache values go out through shared memory when every row can be written in 16-byte
// pieces: rows of at most 256 bytes (not fp32) in a 16-byte aligned cache of pages whose
// size is a multiple of 16 (fp8 pages of 1 or 2 tokens are 132 or 264 bytes: those slots,
// and any cache a caller hands in at a smaller alignment, are stored directly). Scales
// (4 bytes a token) are written by the token's lanes directly.
inline constexpr int kStagedRowBytes = 256;  // what a RoPE row's area holds (fp32 rows do not fit)
template <ref::StorageFormat kFormat>
__device__ __forceinline__ bool stages_cache_rows(const uint8_t* cache, int page_size) {
  return value_bytes(kFormat) <= kStagedRowBytes && (reinterpret_cast<uintptr_t>(cache) & 15) == 0 &&
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

// The tile's staged rows to their slots (copy_out_tile), checking destinations only in a
// tile that runs past the batch's end.
template <ref::StorageFormat kFormat, int kLanes>
__device__ __forceinline__ void copy_out_staged(const uint8_t* staged, const KeyRing<kLanes>& ring, int64_t tile,
                                                int64_t num_tokens, int lane) {
  if ((tile + 1) * KeyRing<kLanes>::kTokens <= num_tokens) {
    copy_out_tile<kFormat, kLanes, true>(staged, ring, lane);
  } else {
    copy_out_tile<kFormat, kLanes, false>(staged, ring, lane);
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

}  // namespace dsaf::dev::key_kernel
