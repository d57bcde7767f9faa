// File: key_token.cuh
// One token of the key path in a lane group, the part both key kernels share: its input
// read from the staging ring, norm -> RoPE -> Hadamard with the recipe's roundings
// between (head/transform.cuh), then quantised and stored in its paged cache slot
// (head/quantize.cuh), the values directly or through the ring's stage for the tile's
// copy-out. Where a token sits: page = page_tables[seq][pos / P] (copied with the tile's
// group), slot pos % P, in the layout of reference/paged_cache.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device/api.h"
#include "device/head/head_io.cuh"
#include "device/head/quantize.cuh"
#include "device/head/transform.cuh"
#include "device/key_store/staging.cuh"
#include "device/primitives/paging.cuh"

namespace dsaf::dev::key_kernel {

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
// its RoPE row is row token_in_tile of rope_rows. The input's bf16 rounding is skipped
// where it cannot change a bit: on bf16 input (every value already a bf16, which the
// rounding keeps; a NaN only loses its payload) followed by a norm, whose every output is
// an arithmetic result (a NaN comes out canonical either way).
template <int kLanes>
__device__ __forceinline__ void transform_key(const ref::RecipeFields& r, bool input_bf16, int part,
                                              const float* norm_weight, const float* norm_bias, const float* rope_rows,
                                              int token_in_tile, HeadPart<kLanes>& x) {
  const bool input_rounding_is_identity = input_bf16 && r.key_norm.kind != ref::NormKind::kNone;
  round_head_bf16<kLanes>(r.key_rounding.input && !input_rounding_is_identity, x);
  norm_head<kLanes>(x, r.key_norm, part, norm_weight, norm_bias);
  if (r.key_norm.kind != ref::NormKind::kNone) round_head_bf16<kLanes>(r.key_rounding.norm, x);
  const float* rope_row = rope_rows + token_in_tile * KeyRing<kLanes>::kRopeStride;
  rope_and_rotate<kLanes>(x, part, r, r.key_rounding, rope_row, rope_row + 32);
}

// Quantises a token and stores it in its cache slot: the scale directly, the values
// directly or (kStaged) into the stage at staged_row for the tile's copy-out (only rows of
// at most kStagedRowBytes are staged: the kernels' staged_store). Returns the values' slot.
template <ref::StorageFormat kFormat, int kLanes, bool kStaged>
__device__ __forceinline__ uint8_t* store_key(const KeyStoreArgs& args, const ref::RecipeFields& r, int part,
                                              const KeyToken& t, uint8_t* staged_row, HeadPart<kLanes>& x) {
  constexpr int kValueBytes = value_bytes(kFormat), kScaleBytes = scale_bytes(kFormat);
  uint8_t* page_base = args.cache + t.page * args.page_size * (kValueBytes + kScaleBytes);
  uint8_t* value_dst = page_base + t.offset * kValueBytes;
  uint8_t* scale_dst = page_base + args.page_size * kValueBytes + t.offset * kScaleBytes;
  if constexpr (kStaged) {
    // A staged row starts 16-byte aligned (rope rows kRopeStride floats apart).
    store_head<kFormat, kLanes, 16>(x, part, r.key_quant, staged_row, scale_dst, t.store);
  } else {
    store_head<kFormat, kLanes>(x, part, r.key_quant, value_dst, scale_dst, t.store);
  }
  return value_dst;
}

}  // namespace dsaf::dev::key_kernel
