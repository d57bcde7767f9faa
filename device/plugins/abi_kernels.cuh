// File: abi_kernels.cuh
// Our kernels behind the C ABI (kernel_abi.h), as a table of entry points. `kBug` selects
// a deliberately wrong variant, for plug-ins that `verify` must catch and name:
//   kCorrect            our kernels as they are
//   kReciprocal         multiplies by fl(1/scale) where the recipe divides (key and query)
//   kOffsetByOneToken   writes every key one slot later in its page ((offset + 1) mod P)
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <exception>
#include <string>
#include <vector>

#include "device/api.h"
#include "device/head/quantize.cuh"
#include "device/kernel_abi.h"
#include "device/kernel_abi_convert.h"

namespace dsaf::dev {

enum class PluginBug { kCorrect, kReciprocal, kOffsetByOneToken };

inline std::string& abi_last_error() {
  static thread_local std::string message;
  return message;
}

// Copies each token's bytes from its slot in `from` to the next slot of the same page in `to`.
__global__ void shift_tokens_kernel(const dsaf_key_store_args_v1 a, const uint8_t* from, uint8_t* to,
                                    int value_bytes, int scale_bytes) {
  const int64_t t = blockIdx.x;
  const int pos = a.positions[t];
  const int64_t page = a.page_tables[a.seq[t] * a.page_table_stride + pos / a.page_size];
  const int off = pos % a.page_size, shifted = (off + 1) % a.page_size;
  const int64_t base = page * a.page_size * (value_bytes + scale_bytes);
  for (int i = threadIdx.x; i < value_bytes; i += blockDim.x) {
    to[base + shifted * value_bytes + i] = from[base + off * value_bytes + i];
  }
  for (int i = threadIdx.x; i < scale_bytes; i += blockDim.x) {
    const int64_t scales = base + a.page_size * value_bytes;
    to[scales + shifted * scale_bytes + i] = from[scales + off * scale_bytes + i];
  }
}

template <PluginBug kBug>
ref::RecipeFields plugin_recipe(const dsaf_recipe_v1& abi) {
  ref::RecipeFields r = from_abi(abi);
  if constexpr (kBug == PluginBug::kReciprocal) {
    r.key_quant.apply = ref::ScaleApply::kTimesReciprocal;
    r.query_quant.apply = ref::ScaleApply::kTimesReciprocal;
  }
  return r;
}

// How our key kernel is scheduled behind the ABI (api.h KeyStoreSchedule): its width (0 =
// the fastest), a grid cap (0 = none) and its tile walk. None changes a bit; the default
// is what bench/key_store_bench.cu times for the published speeds: the fastest width, a
// full grid, the tile order with its last tiles handed out.
struct AbiSchedule {
  int lanes = kAutoLanesPerHead;
  int max_blocks = 0;
  KeyTileWalk walk = KeyTileWalk::kHandOut;
};

// The ABI does not pass the RoPE table's length: a tile order sorted on all 31 bits of a
// position is a permutation whatever the positions are.
inline constexpr int kAnyRopePositions = 1 << 30;

template <PluginBug kBug>
int abi_key_store(const dsaf_key_store_args_v1* a, const AbiSchedule& s) {
  try {
    KeyStoreArgs args;
    args.input = a->input;
    args.input_bf16 = a->input_bf16 != 0;
    args.num_tokens = a->num_tokens;
    args.positions = a->positions;
    args.seq = a->seq;
    args.page_tables = a->page_tables;
    args.page_table_stride = a->page_table_stride;
    args.rope_cos = a->rope_cos;
    args.rope_sin = a->rope_sin;
    args.norm_weight = a->norm_weight;
    args.norm_bias = a->norm_bias;
    args.cache = a->cache;
    args.page_size = a->page_size;
    args.recipe = plugin_recipe<kBug>(a->recipe);
    KeyStoreSchedule schedule;
    schedule.lanes_per_head = s.lanes;
    schedule.max_blocks = s.max_blocks;
    const KeyTileOrder order(args.positions, args.num_tokens, key_store_tile_tokens(args.recipe, s.lanes),
                             kAnyRopePositions, s.walk);
    order.apply(schedule);
    if constexpr (kBug == PluginBug::kOffsetByOneToken) {
      // Run the correct kernel into a copy of the cache, then move every token one slot on.
      const int vb = value_bytes(args.recipe.key_quant.format);
      const int sb = scale_bytes(args.recipe.key_quant.format);
      const size_t page_bytes = static_cast<size_t>(a->page_size) * (vb + sb);
      // The ABI does not pass the cache size: the pages the page tables name bound it.
      std::vector<int32_t> seq(a->num_tokens);
      if (cudaMemcpy(seq.data(), a->seq, seq.size() * 4, cudaMemcpyDeviceToHost) != cudaSuccess) return 1;
      const int64_t seqs = seq.empty() ? 0 : *std::max_element(seq.begin(), seq.end()) + 1;
      std::vector<int32_t> tables(seqs * a->page_table_stride);
      if (cudaMemcpy(tables.data(), a->page_tables, tables.size() * 4, cudaMemcpyDeviceToHost) != cudaSuccess) return 1;
      const int64_t pages = tables.empty() ? 0 : *std::max_element(tables.begin(), tables.end()) + 1;
      uint8_t* scratch = nullptr;
      if (cudaMalloc(&scratch, std::max<size_t>(1, pages * page_bytes)) != cudaSuccess) return 1;
      cudaMemcpy(scratch, a->cache, pages * page_bytes, cudaMemcpyDeviceToDevice);
      args.cache = scratch;
      launch_key_store(args, schedule);
      shift_tokens_kernel<<<static_cast<unsigned>(a->num_tokens), 128>>>(*a, scratch, a->cache, vb, sb);
      const cudaError_t status = cudaDeviceSynchronize();
      cudaFree(scratch);
      if (status != cudaSuccess) {
        abi_last_error() = cudaGetErrorString(status);
        return 1;
      }
      return 0;
    } else {
      launch_key_store(args, schedule);
      return 0;
    }
  } catch (const std::exception& e) {
    abi_last_error() = e.what();
    return 1;
  }
}

template <PluginBug kBug>
int abi_query_quant(const dsaf_query_args_v1* a, int lanes) {
  try {
    QueryArgs args;
    args.input = a->input;
    args.input_bf16 = a->input_bf16 != 0;
    args.num_tokens = a->num_tokens;
    args.num_heads = a->num_heads;
    args.positions = a->positions;
    args.wproj = a->wproj;
    args.rope_cos = a->rope_cos;
    args.rope_sin = a->rope_sin;
    args.q_values = a->q_values;
    args.q_scales = a->q_scales;
    args.weights = a->weights;
    args.recipe = plugin_recipe<kBug>(a->recipe);
    launch_query_quant(args, lanes);
    return 0;
  } catch (const std::exception& e) {
    abi_last_error() = e.what();
    return 1;
  }
}

inline const char* abi_error_text() { return abi_last_error().c_str(); }

// Our paged logits behind the scoring ABI: the exact-order kernel, or (kFast) the fp8
// tensor-core kernel with its bounded contract.
template <bool kFast>
int abi_paged_logits(const dsaf_paged_logits_args_v1* a) {
  try {
    PagedLogitsArgs args;
    args.q_values = a->q_values;
    args.q_scales = a->q_scales;
    args.weights = a->weights;
    args.q_format = static_cast<ref::StorageFormat>(a->q_format);
    args.k_format = static_cast<ref::StorageFormat>(a->k_format);
    args.accum = static_cast<ref::ScoreAccum>(a->accum);
    args.rows = a->rows;
    args.num_heads = a->num_heads;
    args.row_seq = a->row_seq;
    args.row_valid = a->row_valid;
    args.cache = a->cache;
    args.page_size = a->page_size;
    args.page_tables = a->page_tables;
    args.page_table_stride = a->page_table_stride;
    args.max_context = a->max_context;
    args.logits = a->logits;
    if constexpr (kFast) {
      launch_paged_logits_fast(args);
    } else {
      launch_paged_logits(args);
    }
    return 0;
  } catch (const std::exception& e) {
    abi_last_error() = e.what();
    return 1;
  }
}

inline int abi_topk(const dsaf_topk_args_v1* a) {
  try {
    TopKArgs args;
    args.scores = a->scores;
    args.row_stride = a->row_stride;
    args.rows = a->rows;
    args.valid_lengths = a->valid_lengths;
    args.k = a->k;
    args.indices = a->indices;
    launch_topk(args);
    return 0;
  } catch (const std::exception& e) {
    abi_last_error() = e.what();
    return 1;
  }
}

template <bool kFast>
const dsaf_scoring_v1* abi_scoring_table(const char* name) {
  static const dsaf_scoring_v1 table = {DSAF_SCORING_ABI_VERSION, name, kFast ? 1 : 0, &abi_paged_logits<kFast>,
                                        &abi_topk, &abi_error_text};
  return &table;
}

// The ABI table of our kernels (kBug: a deliberately wrong variant) for one schedule,
// given as compile-time values because the ABI's entry points are plain functions.
template <PluginBug kBug, int kLanes = kAutoLanesPerHead, int kMaxBlocks = 0, KeyTileWalk kWalk = KeyTileWalk::kHandOut>
const dsaf_kernel_v1* abi_table(const char* name) {
  static const dsaf_kernel_v1 table = {
      DSAF_KERNEL_ABI_VERSION, name,
      [](const dsaf_key_store_args_v1* a) { return abi_key_store<kBug>(a, AbiSchedule{kLanes, kMaxBlocks, kWalk}); },
      [](const dsaf_query_args_v1* a) { return abi_query_quant<kBug>(a, kLanes); }, &abi_error_text};
  return &table;
}

}  // namespace dsaf::dev
