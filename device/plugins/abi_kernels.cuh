// File: abi_kernels.cuh
// Our kernels behind the C ABI (kernel_abi.h), as tables of entry points: version 2 for
// `--kernel builtin`, version 1 for the example plug-ins. `kBug` selects a deliberately
// wrong variant, for plug-ins that `verify` must catch and name (docs/gallery.md):
//   kCorrect              our kernels as they are
//   kReciprocal           the query path multiplies by fl(1/scale) where the recipe divides,
//                         and divides where it multiplies
//   kOffsetByOneToken     writes every key one slot later in its page ((offset + 1) mod P)
//   kKeyOtherRopePairing  the key path pairs RoPE dims the other way (NeoX <-> interleaved);
//                         the query path follows the recipe
//   kKeyWithoutHadamard   the key path skips the Hadamard rotation; the query path applies it
//   kNanCodes             after a correct store, e4m3fn value element (p / 16) mod 128 of
//                         every key at a position p = 0 mod 16 becomes a NaN code (its sign
//                         kept: 0x7f or 0xff)
//   kScaleOnNextPage      every key's values where they belong, its scale bytes in the same
//                         slot of the next physical page (none past the cache's last page)
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device/api.h"
#include "device/head/quantize.cuh"
#include "device/kernel_abi.h"
#include "device/kernel_abi_convert.h"
#include "device/launch.h"

namespace dsaf::dev {

// example_plugin.cu selects the first three by their numbers (DSAF_PLUGIN_BUG 0..2).
enum class PluginBug {
  kCorrect,
  kReciprocal,
  kOffsetByOneToken,
  kKeyOtherRopePairing,
  kKeyWithoutHadamard,
  kNanCodes,
  kScaleOnNextPage,
};

inline std::string& abi_last_error() {
  static thread_local std::string message;
  return message;
}

// An ABI entry's body run as the ABI reports: its status (0, or 1 for a failure it put in
// abi_last_error itself), or 1 with the message of an exception it threw (no exception
// crosses the C ABI).
template <class Body>
int abi_status(Body body) {
  try {
    return body();
  } catch (const std::exception& e) {
    abi_last_error() = e.what();
    return 1;
  }
}

// What a bug does to the cache after our kernel stored it correctly: where each token's
// value and scale bytes go, and which codes it overwrites.
struct StoreTamper {
  bool active = false;
  int slot_shift = 0;        // values and scales to slot (offset + slot_shift) mod P of their page
  int scale_page_shift = 0;  // scales to page + scale_page_shift (not written outside the cache)
  bool nan_codes = false;    // kNanCodes's codes
};

template <PluginBug kBug>
constexpr StoreTamper store_tamper() {
  if constexpr (kBug == PluginBug::kOffsetByOneToken) return {true, 1, 0, false};
  if constexpr (kBug == PluginBug::kNanCodes) return {true, 0, 0, true};
  if constexpr (kBug == PluginBug::kScaleOnNextPage) return {true, 0, 1, false};
  return {};
}

// Copies each token's bytes from its slot in `from` (a correctly stored cache) to where
// `tamper` puts them in `to`, one block a token.
__global__ void tamper_tokens_kernel(const KeyStoreArgs a, const uint8_t* from, uint8_t* to, int value_bytes,
                                     int scale_bytes, int64_t num_pages, StoreTamper tamper) {
  const int64_t t = blockIdx.x;
  const int pos = a.positions[t];
  const int64_t page = a.page_tables[a.seq[t] * a.page_table_stride + pos / a.page_size];
  const int off = pos % a.page_size, moved = (off + tamper.slot_shift) % a.page_size;
  const int64_t page_bytes = static_cast<int64_t>(a.page_size) * (value_bytes + scale_bytes);
  const int64_t values = page * page_bytes;
  for (int i = threadIdx.x; i < value_bytes; i += blockDim.x) {
    to[values + moved * value_bytes + i] = from[values + off * value_bytes + i];
  }
  const int64_t scale_page = page + tamper.scale_page_shift;
  if (scale_page >= 0 && scale_page < num_pages) {
    const int64_t from_scales = values + a.page_size * value_bytes;
    const int64_t to_scales = scale_page * page_bytes + a.page_size * value_bytes;
    for (int i = threadIdx.x; i < scale_bytes; i += blockDim.x) {
      to[to_scales + moved * scale_bytes + i] = from[from_scales + off * scale_bytes + i];
    }
  }
  if (tamper.nan_codes && pos % 16 == 0) {
    __syncthreads();  // the value bytes are copied before one of them is overwritten
    if (threadIdx.x == 0) to[values + moved * value_bytes + (pos / 16) % value_bytes] |= 0x7F;
  }
}

// The recipe a variant's key path or query path runs.
enum class PluginPath { kKey, kQuery };
template <PluginBug kBug>
ref::RecipeFields plugin_recipe(ref::RecipeFields r, PluginPath path) {
  if constexpr (kBug == PluginBug::kReciprocal) {  // the query's other scale application
    if (path == PluginPath::kQuery) {
      r.query_quant.apply = r.query_quant.apply == ref::ScaleApply::kDivide ? ref::ScaleApply::kTimesReciprocal
                                                                           : ref::ScaleApply::kDivide;
    }
  }
  if constexpr (kBug == PluginBug::kKeyOtherRopePairing) {
    if (path == PluginPath::kKey) {
      r.rope.pairing = r.rope.pairing == ref::RopePairing::kNeox ? ref::RopePairing::kInterleaved
                                                                 : ref::RopePairing::kNeox;
    }
  }
  if constexpr (kBug == PluginBug::kKeyWithoutHadamard) {
    if (path == PluginPath::kKey) r.hadamard = false;
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

// A key-store call of either ABI version as our launcher's arguments, with what v2 adds:
// the RoPE table's length and the cache's size (0 where v1 does not say).
struct AbiKeyStore {
  KeyStoreArgs args;
  int64_t rope_positions = 0;
  int64_t cache_bytes = 0;
};

template <class A>
KeyStoreArgs key_store_args(const A& a, const ref::RecipeFields& recipe) {
  KeyStoreArgs args;
  args.input = a.input;
  args.input_bf16 = a.input_bf16 != 0;
  args.num_tokens = a.num_tokens;
  args.positions = a.positions;
  args.seq = a.seq;
  args.page_tables = a.page_tables;
  args.page_table_stride = a.page_table_stride;
  args.rope_cos = a.rope_cos;
  args.rope_sin = a.rope_sin;
  args.norm_weight = a.norm_weight;
  args.norm_bias = a.norm_bias;
  args.cache = a.cache;
  args.page_size = a.page_size;
  args.recipe = recipe;
  return args;
}
inline AbiKeyStore from_abi_call(const dsaf_key_store_args_v1& a) { return {key_store_args(a, from_abi(a.recipe))}; }
inline AbiKeyStore from_abi_call(const dsaf_key_store_args_v2& a) {
  return {key_store_args(a, from_abi(*a.recipe)), a.rope_positions, a.cache_bytes};
}

// A tile order sorted on all 31 bits of a position is a permutation whatever the
// positions are (for v1 calls, which do not pass the table's length).
inline constexpr int kAnyRopePositions = 1 << 30;

// The tile orders of the key-store calls: a KeyTileOrderCache (api.h) a device, kept for
// the life of the process or of the plug-in library that holds this table (freed at exit
// or unload, after waiting for the device). A call holds `mutex` from its build until its
// launches are enqueued on stream 0: no other thread's build rewrites the order in
// between, and stream order keeps it in place until those launches have run. Once the
// buffers have grown to a batch, a call allocates nothing and does not wait for the device.
struct AbiTileOrders {
  std::mutex mutex;
  std::map<int, std::unique_ptr<KeyTileOrderCache>> by_device;  // under mutex
};
inline AbiTileOrders& abi_tile_orders() {
  static AbiTileOrders orders;
  return orders;
}

// The current device's cache; `orders.mutex` held.
inline KeyTileOrderCache& abi_tile_order_cache(AbiTileOrders& orders) {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  std::unique_ptr<KeyTileOrderCache>& cache = orders.by_device[device];
  if (cache == nullptr) cache = std::make_unique<KeyTileOrderCache>();
  return *cache;
}

// The pages a batch's page tables name, counted on the host (a v1 call's cache size).
inline int64_t cache_bytes_named(const KeyStoreArgs& a) {
  std::vector<int32_t> seq(a.num_tokens);
  if (cudaMemcpy(seq.data(), a.seq, seq.size() * 4, cudaMemcpyDeviceToHost) != cudaSuccess) return -1;
  const int64_t seqs = seq.empty() ? 0 : *std::max_element(seq.begin(), seq.end()) + 1;
  std::vector<int32_t> tables(seqs * a.page_table_stride);
  if (cudaMemcpy(tables.data(), a.page_tables, tables.size() * 4, cudaMemcpyDeviceToHost) != cudaSuccess) return -1;
  const int64_t pages = tables.empty() ? 0 : *std::max_element(tables.begin(), tables.end()) + 1;
  const int64_t token_bytes = value_bytes(a.recipe.key_quant.format) + scale_bytes(a.recipe.key_quant.format);
  return pages * a.page_size * token_bytes;
}

template <PluginBug kBug, class Call>
int abi_key_store(const Call* a, const AbiSchedule& s) {
  return abi_status([&] {
    AbiKeyStore k = from_abi_call(*a);
    KeyStoreArgs& args = k.args;
    args.recipe = plugin_recipe<kBug>(args.recipe, PluginPath::kKey);
    KeyStoreSchedule schedule;
    schedule.lanes_per_head = s.lanes;
    schedule.max_blocks = s.max_blocks;
    const int rope_positions = k.rope_positions > 0 ? static_cast<int>(std::min<int64_t>(k.rope_positions, INT32_MAX))
                                                    : kAnyRopePositions;
    AbiTileOrders& orders = abi_tile_orders();
    std::unique_lock<std::mutex> order_lock(orders.mutex, std::defer_lock);  // until the launches are enqueued
    if (s.walk != KeyTileWalk::kBatchOrder && args.num_tokens != 0) {
      order_lock.lock();
      const int tile_tokens = key_store_tile_tokens(args.recipe, s.lanes, args.input_bf16);
      abi_tile_order_cache(orders).build(args.positions, args.num_tokens, tile_tokens, rope_positions, s.walk, schedule);
    }
    constexpr StoreTamper kTamper = store_tamper<kBug>();
    if constexpr (kTamper.active) {
      // Run the correct kernel into a copy of the cache, then move or overwrite its bytes.
      const int64_t bytes = k.cache_bytes > 0 ? k.cache_bytes : cache_bytes_named(args);
      uint8_t* scratch = nullptr;
      if (bytes < 0 || cudaMalloc(&scratch, std::max<int64_t>(1, bytes)) != cudaSuccess) return 1;
      uint8_t* cache = args.cache;
      cudaMemcpy(scratch, cache, bytes, cudaMemcpyDeviceToDevice);
      args.cache = scratch;
      launch_key_store(args, schedule);
      const int vb = value_bytes(args.recipe.key_quant.format), sb = scale_bytes(args.recipe.key_quant.format);
      const int64_t num_pages = bytes / (static_cast<int64_t>(args.page_size) * (vb + sb));
      if (args.num_tokens > 0) {
        tamper_tokens_kernel<<<static_cast<unsigned>(args.num_tokens), 128>>>(args, scratch, cache, vb, sb, num_pages,
                                                                              kTamper);
      }
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
  });
}

inline ref::RecipeFields query_recipe(const dsaf_query_args_v1& a) { return from_abi(a.recipe); }
inline ref::RecipeFields query_recipe(const dsaf_query_args_v2& a) { return from_abi(*a.recipe); }

template <PluginBug kBug, class Call>
int abi_query_quant(const Call* a, int lanes) {
  return abi_status([&] {
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
    args.recipe = plugin_recipe<kBug>(query_recipe(*a), PluginPath::kQuery);
    launch_query_quant(args, lanes);
    return 0;
  });
}

inline const char* abi_error_text() { return abi_last_error().c_str(); }

// Our paged logits on the scoring ABI's arguments: the exact-order kernel, or (kFast) the
// tensor-core kernel with its bounded contract. `shared_row_run`: PagedLogitsArgs' hint,
// which a caller of our kernels that knows its rows gives natively (KernelUnderTest); the
// ABI carries none, so its entry passes 0 and the fast launcher reads row_seq on the device.
template <bool kFast>
int abi_paged_logits_hinted(const dsaf_paged_logits_args_v1* a, int shared_row_run) {
  return abi_status([&] {
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
    args.shared_row_run = shared_row_run;
    if constexpr (kFast) {
      launch_paged_logits_fast(args);
    } else {
      launch_paged_logits(args);
    }
    return 0;
  });
}

// The scoring ABI's entry point for our paged logits (no row-run hint).
template <bool kFast>
int abi_paged_logits(const dsaf_paged_logits_args_v1* a) {
  return abi_paged_logits_hinted<kFast>(a, 0);
}

// kOrder: the ordered contract's order (kByScore) or each row's positions ascending
// (kByIndex, declared under the set contract: with_topk_by_index). `row_status`: null, the
// ABI's synchronous call (the rows' statuses checked before it returns), or [rows] for the
// statuses, which the caller checks (check_topk_row_statuses) after the call, unsynchronised.
template <TopKOrder kOrder = TopKOrder::kByScore>
int abi_topk_with_status(const dsaf_topk_args_v1* a, int32_t* row_status) {
  return abi_status([&] {
    TopKArgs args;
    args.order = kOrder;
    args.scores = a->scores;
    args.row_stride = a->row_stride;
    args.rows = a->rows;
    args.valid_lengths = a->valid_lengths;
    args.k = a->k;
    args.indices = a->indices;
    args.row_status = row_status;
    launch_topk(args);
    return 0;
  });
}

template <TopKOrder kOrder = TopKOrder::kByScore>
int abi_topk(const dsaf_topk_args_v1* a) {
  return abi_topk_with_status<kOrder>(a, nullptr);
}

template <bool kFast>
const dsaf_scoring_v1* abi_scoring_table(const char* name) {
  static const dsaf_scoring_v1 table = {DSAF_SCORING_ABI_VERSION, name, kFast ? 1 : 0, &abi_paged_logits<kFast>,
                                        &abi_topk<>, &abi_error_text};
  return &table;
}

// The version-1 table of our kernels (kBug: a deliberately wrong variant) for one
// schedule, given as compile-time values because the ABI's entry points are plain
// functions (the example plug-ins: device/plugins/example_plugin.cu).
template <PluginBug kBug, int kLanes = kAutoLanesPerHead, int kMaxBlocks = 0, KeyTileWalk kWalk = KeyTileWalk::kHandOut>
const dsaf_kernel_v1* abi_table(const char* name) {
  static const dsaf_kernel_v1 table = {
      DSAF_KERNEL_ABI_VERSION, name,
      [](const dsaf_key_store_args_v1* a) { return abi_key_store<kBug>(a, AbiSchedule{kLanes, kMaxBlocks, kWalk}); },
      [](const dsaf_query_args_v1* a) { return abi_query_quant<kBug>(a, kLanes); }, &abi_error_text};
  return &table;
}

// What our kernels support: every store format but 'none', every page size and input
// dtype, fp32 norm parameters, any position and token count.
inline dsaf_key_caps_v2 builtin_key_caps() {
  dsaf_key_caps_v2 caps{};
  for (ref::StorageFormat f : {ref::StorageFormat::kFp32, ref::StorageFormat::kBf16, ref::StorageFormat::kFp8E4m3fn,
                               ref::StorageFormat::kFp4E2m1, ref::StorageFormat::kFp4SimulatedBf16}) {
    caps.store_formats |= 1u << static_cast<int>(f);
  }
  caps.page_sizes = 0x1FFu;  // 1 .. 256
  caps.input_dtypes = DSAF_INPUT_BF16 | DSAF_INPUT_FP32;
  return caps;
}

// The version-2 table of our kernels: every stage, the exact-order logits or (kFast) the
// tensor-core ones, top-K under the ordered contract.
template <int kLanes, int kMaxBlocks, KeyTileWalk kWalk, bool kFast>
const dsaf_kernel_v2* abi_table_v2(const char* name) {
  static const dsaf_kernel_v2 table = {
      DSAF_KERNEL_ABI_VERSION_2,
      name,
      builtin_key_caps(),
      [](const dsaf_key_store_args_v2* a) {
        return abi_key_store<PluginBug::kCorrect>(a, AbiSchedule{kLanes, kMaxBlocks, kWalk});
      },
      [](const dsaf_query_args_v2* a) { return abi_query_quant<PluginBug::kCorrect>(a, kLanes); },
      kFast ? 1 : 0,
      &abi_paged_logits<kFast>,
      DSAF_TOPK_ORDERED,
      DSAF_TOPK_PAD_MINUS_ONE,
      0,
      &abi_topk<>,
      &abi_error_text};
  return &table;
}

// `table` with its top-K writing each row's selected positions in ascending order
// (TopKOrder::kByIndex) under the set contract: the same positions, no final sort. One copy
// per table, kept for the process (the ABI hands out table pointers that stay valid).
inline const dsaf_kernel_v2* with_topk_by_index(const dsaf_kernel_v2* table) {
  static std::mutex mutex;
  static std::map<const dsaf_kernel_v2*, dsaf_kernel_v2> copies;
  const std::lock_guard<std::mutex> lock(mutex);
  auto [at, inserted] = copies.try_emplace(table, *table);
  if (inserted) {
    at->second.topk_contract = DSAF_TOPK_SET;
    at->second.topk = &abi_topk<TopKOrder::kByIndex>;
  }
  return &at->second;
}

}  // namespace dsaf::dev
