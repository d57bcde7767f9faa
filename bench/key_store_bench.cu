// Key-path benchmark on the GPU: the fused key kernel (device/key_store/) at 1M tokens
// against the device-to-device copy bandwidth, and against the same pipeline as separate
// kernels (norm, RoPE, Hadamard when the recipe has it, quantise+store; fp32 intermediates
// in HBM).
// Bytes counted: bf16 input read + cache bytes written + page table read. Beside them, for
// every store format, the traffic twins: the same bytes moved with no arithmetic, the
// fraction of copy a data mover reaches with and without the RoPE table rows (below).
// Usage: key_store_bench OUT.json [RECIPE]   (one preset that quantises: a default case or
// any other, e.g. for a profiler)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "bench/batch_shape.h"
#include "bench/gpu_timing.h"
#include "device/api.h"
#include "device/head/head_io.cuh"
#include "device/head/quantize.cuh"
#include "device/head/transform.cuh"
#include "reference/error.h"
#include "reference/numeric/minifloat.h"
#include "reference/recipe.h"
#include "reference/rope.h"

namespace {

using namespace dsaf;

constexpr int64_t kTokens = int64_t{1} << 20;  // 1,048,576: 16 sequences x 64K positions by default
constexpr int kPage = 64;

// ---- the unfused baseline: one stage per kernel, fp32 [T][128] in and out ---------------
// The same stage functions as the fused kernel, 8 lanes per head (kDefaultLanesPerHead),
// non-persistent blocks of 256 threads.
enum class Stage { kNorm, kRope, kHadamard };
constexpr int kLanes = dev::kDefaultLanesPerHead;
constexpr int kTokensPerBlock = 256 / kLanes;
static_assert(kTokens % kTokensPerBlock == 0, "every lane group has a token");

template <Stage kStage>
__global__ void stage_kernel(const dev::KeyStoreArgs a, const float* in, float* out) {
  const int part = threadIdx.x % kLanes;
  const int64_t token = static_cast<int64_t>(blockIdx.x) * kTokensPerBlock + threadIdx.x / kLanes;
  // kTokens is a multiple of kTokensPerBlock: every group has a token (the shuffles need all lanes)
  dev::HeadPart<kLanes> x;
  if constexpr (kStage == Stage::kNorm) {
    dev::load_head<kLanes>(static_cast<const uint8_t*>(a.input) + token * 256, true, part, x);
    dev::norm_head<kLanes>(x, a.recipe.key_norm, part, a.norm_weight, a.norm_bias);
  } else {
    dev::load_head<kLanes>(in + token * 128, false, part, x);
    if constexpr (kStage == Stage::kRope) {
      const int p = a.positions[token];
      dev::rope_head<kLanes>(x, part, a.recipe.rope.pairing, a.recipe.rope.placement, a.recipe.rope.fma,
                             a.rope_cos + p * 32, a.rope_sin + p * 32);
    } else {
      dev::hadamard_head<kLanes>(x, part);
    }
  }
  dev::store_head<ref::StorageFormat::kFp32, kLanes>(x, part, a.recipe.key_quant,
                                                      reinterpret_cast<uint8_t*>(out + token * 128), nullptr, true);
}

template <ref::StorageFormat kFormat>
__global__ void store_kernel(const dev::KeyStoreArgs a, const float* in) {
  const int part = threadIdx.x % kLanes;
  const int64_t token = static_cast<int64_t>(blockIdx.x) * kTokensPerBlock + threadIdx.x / kLanes;
  dev::HeadPart<kLanes> x;
  dev::load_head<kLanes>(in + token * 128, false, part, x);
  const int position = a.positions[token];
  const int64_t page = a.page_tables[a.seq[token] * a.page_table_stride + position / a.page_size];
  const int offset = position % a.page_size;
  constexpr int vb = dev::value_bytes(kFormat), sb = dev::scale_bytes(kFormat);
  uint8_t* base = a.cache + page * a.page_size * (vb + sb);
  dev::store_head<kFormat, kLanes>(x, part, a.recipe.key_quant, base + offset * vb,
                                   base + a.page_size * vb + offset * sb, true);
}

// ---- traffic twins: the fused kernel's bytes with none of its arithmetic ----------------
// kThreads threads per token (16: one 16-byte chunk each; 4: four each, more bytes in flight
// per thread): a token reads its bf16 row (256 B, streaming), its position, sequence and
// page-table entry and, with kRopeRows, its cos and sin rows (2 x 128 B fp32, from the
// L2-resident table), and writes its cache row: kValueBytes of values (256: bf16 and the
// simulated fp4; 128: fp8; 64: e2m1 fp4) and kScaleBytes of scale (4 for fp8's fp32 scale
// and fp4's four ue8m0 bytes; 0 otherwise), in the page layout of the store (values of the
// page's tokens, then their scales). What is written is a bitwise mix of what was read, so
// no load is dead. The faster width's time is what a plain data mover reaches with these
// bytes (with the RoPE rows the fused kernel's own traffic, without them the counted bytes
// alone through the page table): a yardstick, not a bound (at 256 x 4K positions the bf16
// fused kernel, in its tile order, beats the twin without RoPE rows).
template <int kValueBytes, int kScaleBytes, bool kRopeRows, int kThreads>
__global__ void __launch_bounds__(256) traffic_twin_kernel(const dev::KeyStoreArgs a) {
  static_assert(kValueBytes == 256 || kValueBytes == 128 || kValueBytes == 64, "a row of 16-byte chunks");
  static_assert(kScaleBytes == 0 || kScaleBytes == 4, "one 4-byte scale word or none");
  constexpr int kChunks = 16 / kThreads;       // input chunk c is held by thread c % kThreads
  constexpr int kOut = kValueBytes / 16;       // value chunks; input chunk c folds into c % kOut
  // Chunks j and j + kPeriod of one thread fold together (kThreads * kPeriod = kOut);
  // threads t and t ^ s fold for s = kOut, 2 kOut, .. < kThreads.
  constexpr int kPeriod = kOut >= kThreads ? kOut / kThreads : 1;
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  const int64_t token = thread / kThreads;  // kTokens * kThreads is a multiple of 256
  const int t = static_cast<int>(thread % kThreads);
  uint4 v[kChunks];
#pragma unroll
  for (int j = 0; j < kChunks; ++j) v[j] = __ldcs(static_cast<const uint4*>(a.input) + token * 16 + t + j * kThreads);
  const int position = a.positions[token];
  if constexpr (kRopeRows) {
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const int c = t + j * kThreads;
      const float* row = (c < 8 ? a.rope_cos : a.rope_sin) + static_cast<int64_t>(position) * 32;
      const uint4 r = __ldg(reinterpret_cast<const uint4*>(row) + c % 8);
      v[j] = make_uint4(v[j].x ^ r.x, v[j].y ^ r.y, v[j].z ^ r.z, v[j].w ^ r.w);
    }
  }
  const uint32_t scale_word = v[0].y;
#pragma unroll
  for (int j = kPeriod; j < kChunks; ++j) {
    uint4& w = v[j % kPeriod];
    w = make_uint4(w.x ^ v[j].x, w.y ^ v[j].y, w.z ^ v[j].z, w.w ^ v[j].w);
  }
#pragma unroll
  for (int s = kOut; s < kThreads; s *= 2) {
    v[0].x ^= __shfl_xor_sync(0xffffffffu, v[0].x, s);
    v[0].y ^= __shfl_xor_sync(0xffffffffu, v[0].y, s);
    v[0].z ^= __shfl_xor_sync(0xffffffffu, v[0].z, s);
    v[0].w ^= __shfl_xor_sync(0xffffffffu, v[0].w, s);
  }
  const int64_t page = a.page_tables[a.seq[token] * a.page_table_stride + position / a.page_size];
  const int offset = position % a.page_size;
  uint8_t* base = a.cache + page * a.page_size * (kValueBytes + kScaleBytes);
  auto* row = reinterpret_cast<uint4*>(base + offset * kValueBytes);
#pragma unroll
  for (int j = 0; j < kPeriod; ++j) {
    const int c = t + j * kThreads;
    if (c < kOut) row[c] = v[j];
  }
  if constexpr (kScaleBytes == 4) {
    if (t == 0) reinterpret_cast<uint32_t*>(base + a.page_size * kValueBytes)[offset] = scale_word;
  }
}

template <int kValueBytes, int kScaleBytes, int kThreads>
void launch_traffic_twin(const dev::KeyStoreArgs& a, bool rope_rows) {
  const unsigned blocks = static_cast<unsigned>(kTokens * kThreads / 256);
  if (rope_rows) {
    traffic_twin_kernel<kValueBytes, kScaleBytes, true, kThreads><<<blocks, 256>>>(a);
  } else {
    traffic_twin_kernel<kValueBytes, kScaleBytes, false, kThreads><<<blocks, 256>>>(a);
  }
}

// The twin of a store format: its value and scale bytes a token.
template <int kThreads>
void launch_traffic_twin(ref::StorageFormat format, const dev::KeyStoreArgs& a, bool rope_rows) {
  switch (format) {
    case ref::StorageFormat::kBf16:
    case ref::StorageFormat::kFp4SimulatedBf16: launch_traffic_twin<256, 0, kThreads>(a, rope_rows); return;
    case ref::StorageFormat::kFp8E4m3fn: launch_traffic_twin<128, 4, kThreads>(a, rope_rows); return;
    case ref::StorageFormat::kFp4E2m1: launch_traffic_twin<64, 4, kThreads>(a, rope_rows); return;
    default: std::fprintf(stderr, "no traffic twin for this store format\n"); std::exit(2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: %s OUT.json [RECIPE]\n", argv[0]);
    return 2;
  }
  // The recipe and the knobs, checked before the GPU is touched.
  // The default cases: every store format docs/key-path-speed.md sets against its twin (the
  // V4 fp8 / bf16 / fp4 stores, the V3.2 reference and its bf16 store, vLLM's V3.2, and the
  // V4 reference's fp4-simulated bf16 store).
  std::vector<std::string> names = {"sglang-v4-fp8", "sglang-v4-bf16", "sglang-v4-fp4", "dsv32-ref",
                                    "dsv32-bf16",    "vllm-v32",       "dsv4-ref"};
  if (argc == 3) {
    try {
      if (dev::value_bytes(ref::preset(argv[2]).key_quant.format) == 0) {
        std::fprintf(stderr, "%s stores no key cache: name a preset that quantises\n", argv[2]);
        return 2;
      }
    } catch (const Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 2;
    }
    names = {argv[2]};
  }
  const int seq_len = bench::key_sequence_length(kTokens, kPage);  // batch_shape.h
  if (seq_len < 0) return 2;
  // DSAF_BENCH_PAGES=sequential: the batch's pages are the cache's pages in order (a cache
  // written front to back) instead of shuffled, as an allocator leaves them (the default):
  // what scattered page writes cost the memory system. The other inputs stay the same.
  const std::string page_order = std::getenv("DSAF_BENCH_PAGES") ? std::getenv("DSAF_BENCH_PAGES") : "shuffled";
  if (page_order != "shuffled" && page_order != "sequential") {
    std::fprintf(stderr, "DSAF_BENCH_PAGES must be shuffled or sequential, not '%s'\n", page_order.c_str());
    return 2;
  }
  // DSAF_BENCH_MAX_BLOCKS=N: the key kernel's grid capped at N blocks (fewer warps, fewer
  // bytes in flight per SM: whether a kernel is latency- or bandwidth-bound).
  int max_blocks = 0;
  if (const char* cap = std::getenv("DSAF_BENCH_MAX_BLOCKS")) {
    max_blocks = std::atoi(cap);
    if (max_blocks < 1) {
      std::fprintf(stderr, "DSAF_BENCH_MAX_BLOCKS must be a positive block count, not '%s'\n", cap);
      return 2;
    }
  }
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));

  const double copy_gbps = bench::copy_bandwidth_gbps();
  // DSAF_BENCH_PERSISTING_L2_MB=N: set N MB of L2 aside for persisting lines (a device-wide
  // setting a serving stack makes once; the kernel's RoPE-row copies are marked evict-last).
  size_t persisting_l2_bytes = 0;
  if (const char* mb = std::getenv("DSAF_BENCH_PERSISTING_L2_MB")) {
    persisting_l2_bytes = std::min<size_t>(std::strtoull(mb, nullptr, 10) << 20, prop.persistingL2CacheMaxSize);
    BENCH_CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, persisting_l2_bytes));
    BENCH_CHECK(cudaDeviceGetLimit(&persisting_l2_bytes, cudaLimitPersistingL2CacheSize));
    std::printf("persisting L2 set-aside: %zu bytes (device maximum %d, L2 %d)\n", persisting_l2_bytes,
                prop.persistingL2CacheMaxSize, prop.l2CacheSize);
  }

  const int64_t seqs = kTokens / seq_len;
  // Inputs: 1M bf16 rows (Gaussian with outlier channels).
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> input(kTokens * 128);
  for (size_t i = 0; i < input.size(); ++i) input[i] = ref::encode_bf16(normal(rng) * (i % 37 == 3 ? 40.0f : 1.0f));
  std::vector<int32_t> positions(kTokens), seq(kTokens);
  for (int64_t t = 0; t < kTokens; ++t) {
    seq[t] = static_cast<int32_t>(t / seq_len);
    positions[t] = static_cast<int32_t>(t % seq_len);
  }
  const int64_t pages_per_seq = seq_len / kPage, pages = seqs * pages_per_seq;
  std::vector<int32_t> tables(pages);
  std::iota(tables.begin(), tables.end(), 0);
  std::shuffle(tables.begin(), tables.end(), rng);
  if (page_order == "sequential") std::iota(tables.begin(), tables.end(), 0);
  std::vector<float> weight(128), bias(128);
  for (int i = 0; i < 128; ++i) weight[i] = 1.0f + 0.1f * normal(rng), bias[i] = 0.1f * normal(rng);

  const auto upload = [](const auto& host) {
    using T = typename std::decay_t<decltype(host)>::value_type;
    T* d;
    BENCH_CHECK(cudaMalloc(&d, host.size() * sizeof(T)));
    BENCH_CHECK(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
  };
  uint16_t* d_input = upload(input);
  int32_t* d_pos = upload(positions);
  int32_t* d_seq = upload(seq);
  int32_t* d_tables = upload(tables);
  float* d_weight = upload(weight);
  float* d_bias = upload(bias);
  float *d_tmp0, *d_tmp1;
  BENCH_CHECK(cudaMalloc(&d_tmp0, kTokens * 128 * sizeof(float)));
  BENCH_CHECK(cudaMalloc(&d_tmp1, kTokens * 128 * sizeof(float)));

  std::string json = "{\n  \"gpu\": \"" + std::string(prop.name) + "\",\n  \"tokens\": " +
                     std::to_string(kTokens) + ",\n  \"sequence_length\": " + std::to_string(seq_len) +
                     ",\n  \"pages\": \"" + page_order + "\",\n  \"copy_bandwidth_gbps\": " + std::to_string(copy_gbps) +
                     ",\n  \"persisting_l2_bytes\": " + std::to_string(persisting_l2_bytes) +
                     ",\n  \"bytes_counted\": \"bf16 input read + cache bytes written + page table read\",\n  \"cases\": [";
  bool first = true;
  for (const std::string& name : names) {
    const ref::Recipe& recipe = ref::preset(name);
    const ref::RopeTable rope(recipe.rope.table, seq_len);
    std::vector<float> cos(rope.cos(0), rope.cos(0) + int64_t{seq_len} * 32);
    std::vector<float> sin(rope.sin(0), rope.sin(0) + int64_t{seq_len} * 32);
    float* d_cos = upload(cos);
    float* d_sin = upload(sin);
    const int token_bytes = dev::value_bytes(recipe.key_quant.format) + dev::scale_bytes(recipe.key_quant.format);
    uint8_t* d_cache;
    BENCH_CHECK(cudaMalloc(&d_cache, pages * kPage * token_bytes));
    dev::KeyStoreArgs a;
    a.input = d_input;
    a.input_bf16 = true;
    a.num_tokens = kTokens;
    a.positions = d_pos;
    a.seq = d_seq;
    a.page_tables = d_tables;
    a.page_table_stride = pages_per_seq;
    a.rope_cos = d_cos;
    a.rope_sin = d_sin;
    a.norm_weight = d_weight;
    a.norm_bias = d_bias;
    a.cache = d_cache;
    a.page_size = kPage;
    a.recipe = recipe;
    dev::KeyStoreSchedule batch_order;
    batch_order.max_blocks = max_blocks;
    const auto at_width = [](dev::KeyStoreSchedule s, int lanes) {
      s.lanes_per_head = lanes;
      return s;
    };
    // Every lane-group width; the automatic one (fastest_key_lanes) is the headline number. Ten launches per
    // timing (bench::median_ms): at ~0.1 ms a kernel, one launch's host overhead is 5%.
    constexpr int kCallsPerTiming = 10;
    // Each width again with the tile order (api.h KeyStoreSchedule) built for its
    // tiles: the batch's 16 sequences share positions, so sorted tiles share RoPE rows. The
    // order is built once per batch (timed apart: a serving stack reuses it for every
    // layer); the cache must be byte-identical to the batch-order launch's.
    const size_t cache_bytes = static_cast<size_t>(pages) * kPage * token_bytes;
    const auto cache_after = [&](const dev::KeyStoreSchedule& schedule) {
      std::vector<uint8_t> host(cache_bytes);
      BENCH_CHECK(cudaMemset(d_cache, 0, cache_bytes));
      dev::launch_key_store(a, schedule);
      BENCH_CHECK(cudaMemcpy(host.data(), d_cache, cache_bytes, cudaMemcpyDeviceToHost));
      return host;
    };
    std::string widths, ordered_widths, hand_out_widths;
    float fused_ms = 0.0f, tile_order_ms = 0.0f, order_build_ms = 0.0f, hand_out_ms = 0.0f;
    // DSAF_BENCH_LAUNCH_PROBE=1: how much of a timed call is the host's. 10 launches at
    // the automatic width: host time to enqueue them, wall time to finish, and each
    // launch alone between two events (the device's time for one call, idle start
    // included); then the usual 10-call median.
    if (std::getenv("DSAF_BENCH_LAUNCH_PROBE") != nullptr) {
      const int lanes = dev::fastest_key_lanes(a.recipe, a.input_bf16);
      for (int i = 0; i < 3; ++i) dev::launch_key_store(a, at_width(batch_order, lanes));
      BENCH_CHECK(cudaDeviceSynchronize());
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 10; ++i) dev::launch_key_store(a, at_width(batch_order, lanes));
      const auto t1 = std::chrono::steady_clock::now();
      BENCH_CHECK(cudaDeviceSynchronize());
      const auto t2 = std::chrono::steady_clock::now();
      const auto us = [](auto d) { return std::chrono::duration<double, std::micro>(d).count(); };
      std::vector<float> single(21);
      cudaEvent_t e0, e1;
      BENCH_CHECK(cudaEventCreate(&e0));
      BENCH_CHECK(cudaEventCreate(&e1));
      for (float& ms : single) {
        BENCH_CHECK(cudaEventRecord(e0));
        dev::launch_key_store(a, at_width(batch_order, lanes));
        BENCH_CHECK(cudaEventRecord(e1));
        BENCH_CHECK(cudaEventSynchronize(e1));
        BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      }
      std::sort(single.begin(), single.end());
      std::printf("%-16s launch probe, %d lanes: host enqueue %.1f us/launch, wall %.1f us/launch, one launch between "
                  "events %.1f us (median of 21), 10-call median %.1f us/launch\n",
                  name.c_str(), lanes, us(t1 - t0) / 10, us(t2 - t0) / 10, 1e3 * single[10],
                  1e3 * bench::median_ms([&] { dev::launch_key_store(a, at_width(batch_order, lanes)); }, 21, kCallsPerTiming));
    }
    for (int lanes : {1, 2, 4, 8}) {
      const float ms = bench::median_ms([&] { dev::launch_key_store(a, at_width(batch_order, lanes)); }, 21, kCallsPerTiming);
      const int tile_tokens = dev::key_store_tile_tokens(a.recipe, lanes, a.input_bf16);
      const size_t scratch_bytes = dev::key_tile_order_scratch_bytes(kTokens, tile_tokens);
      bench::DeviceArray<int32_t> order((kTokens + tile_tokens - 1) / tile_tokens);
      bench::DeviceArray<uint8_t> scratch(scratch_bytes);
      const float build_ms = bench::median_ms(
          [&] { dev::build_key_tile_order(d_pos, kTokens, tile_tokens, seq_len, order.get(), scratch.get(), scratch_bytes); });
      dev::KeyStoreSchedule ordered = at_width(batch_order, lanes);
      ordered.tile_order = order.get();
      ordered.tile_order_tokens = tile_tokens;
      // batch order, then tile order: the order a profiler skipping launches meets them
      const std::vector<uint8_t> batch_order_cache = cache_after(at_width(batch_order, lanes));
      if (batch_order_cache != cache_after(ordered)) {
        std::fprintf(stderr, "%s, %d lanes: the tile order changed cache bytes\n", name.c_str(), lanes);
        return 2;
      }
      const float ordered_ms = bench::median_ms([&] { dev::launch_key_store(a, ordered); }, 21, kCallsPerTiming);
      // The order again with its last tiles handed out by counters (api.h KeyStoreSchedule).
      bench::DeviceArray<int32_t> counters(2);
      BENCH_CHECK(cudaMemset(counters.get(), 0, 2 * sizeof(int32_t)));
      dev::KeyStoreSchedule handed = ordered;
      handed.tile_counters = counters.get();
      if (batch_order_cache != cache_after(handed)) {
        std::fprintf(stderr, "%s, %d lanes: the hand-out changed cache bytes\n", name.c_str(), lanes);
        return 2;
      }
      const float handed_ms = bench::median_ms([&] { dev::launch_key_store(a, handed); }, 21, kCallsPerTiming);
      if (lanes == dev::fastest_key_lanes(a.recipe, a.input_bf16)) {
        fused_ms = ms, tile_order_ms = ordered_ms, order_build_ms = build_ms, hand_out_ms = handed_ms;
        // How many tiles per warp the hand-out keeps back (api.h; the default above).
        std::string sweep;
        for (int per_warp : {1, 2, 4, 6, 8}) {
          dev::KeyStoreSchedule swept = handed;
          swept.hand_out_tiles_per_warp = per_warp;
          const float swept_ms = bench::median_ms([&] { dev::launch_key_store(a, swept); }, 21, kCallsPerTiming);
          sweep += (sweep.empty() ? "" : ", ") + std::to_string(per_warp) + ": " + std::to_string(swept_ms);
        }
        std::printf("%-16s lanes/head %2d, hand-out tiles per warp: %s ms\n", name.c_str(), lanes, sweep.c_str());
      }
      const auto entry = [&](float v) { return std::string("\"") + std::to_string(lanes) + "\": " + std::to_string(v); };
      widths += (widths.empty() ? "" : ", ") + entry(ms);
      ordered_widths += (ordered_widths.empty() ? "" : ", ") + entry(ordered_ms);
      hand_out_widths += (hand_out_widths.empty() ? "" : ", ") + entry(handed_ms);
      std::printf("%-16s lanes/head %2d: %.4f ms, tile order %.4f ms, with hand-out %.4f ms (order built in %.4f ms; "
                  "cache identical)\n",
                  name.c_str(), lanes, ms, ordered_ms, handed_ms, build_ms);
    }
    const unsigned blocks = static_cast<unsigned>(kTokens / kTokensPerBlock);
    const std::string path = dev::key_store_path(a.recipe);
    const float unfused_ms = bench::median_ms([&] {
      stage_kernel<Stage::kNorm><<<blocks, 256>>>(a, nullptr, d_tmp0);
      stage_kernel<Stage::kRope><<<blocks, 256>>>(a, d_tmp0, d_tmp1);
      const float* rotated = d_tmp1;  // a recipe without the Hadamard has no third stage
      if (recipe.hadamard) {
        stage_kernel<Stage::kHadamard><<<blocks, 256>>>(a, d_tmp1, d_tmp0);
        rotated = d_tmp0;
      }
      switch (recipe.key_quant.format) {
        case ref::StorageFormat::kFp8E4m3fn: store_kernel<ref::StorageFormat::kFp8E4m3fn><<<blocks, 256>>>(a, rotated); break;
        case ref::StorageFormat::kBf16: store_kernel<ref::StorageFormat::kBf16><<<blocks, 256>>>(a, rotated); break;
        case ref::StorageFormat::kFp4SimulatedBf16:
          store_kernel<ref::StorageFormat::kFp4SimulatedBf16><<<blocks, 256>>>(a, rotated);
          break;
        case ref::StorageFormat::kFp4E2m1: store_kernel<ref::StorageFormat::kFp4E2m1><<<blocks, 256>>>(a, rotated); break;
        default: std::fprintf(stderr, "%s: no unfused store for this format\n", name.c_str()); std::exit(2);
      }
    }, 21, kCallsPerTiming);
    BENCH_CHECK(cudaGetLastError());
    const double bytes = kTokens * (256.0 + token_bytes) + pages * 4.0;
    const double gbps = bytes / (fused_ms * 1e-3) / 1e9;
    // The traffic twin of the store: the fraction of copy that the counted bytes reach when
    // moved with and without the RoPE rows and no arithmetic.
    float twin_ms = 0.0f, twin_no_rope_ms = 0.0f;
    {
      const auto twin = [&](bool rope_rows, auto threads) {
        constexpr int kThreads = decltype(threads)::value;
        const float ms = bench::median_ms([&] { launch_traffic_twin<kThreads>(recipe.key_quant.format, a, rope_rows); },
                                          21, kCallsPerTiming);
        BENCH_CHECK(cudaGetLastError());
        std::printf("%-16s traffic twin, %2d threads a token, %s RoPE rows: %.4f ms (%.0f%% of copy)\n", name.c_str(), kThreads,
                    rope_rows ? "with   " : "without", ms, 100 * bytes / (ms * 1e-3) / 1e9 / copy_gbps);
        return ms;
      };
      using Sixteen = std::integral_constant<int, 16>;
      using Four = std::integral_constant<int, 4>;
      twin_ms = std::min(twin(true, Sixteen{}), twin(true, Four{}));
      twin_no_rope_ms = std::min(twin(false, Sixteen{}), twin(false, Four{}));
    }
    const auto copy_fraction = [&](float ms) { return ms > 0 ? bytes / (ms * 1e-3) / 1e9 / copy_gbps : 0.0; };
    char row[2400];
    std::snprintf(row, sizeof row,
                  "%s\n    {\"recipe\": \"%s\", \"store_bytes_per_token\": %d, \"fused_ms\": %.4f, "
                  "\"unfused_ms\": %.4f, \"bytes\": %.0f, \"fused_gbps\": %.1f, \"fraction_of_copy\": %.3f, "
                  "\"speedup_vs_unfused\": %.2f, \"lanes_per_head\": %d, \"kernel_path\": \"%s\", "
                  "\"fused_ms_by_lanes_per_head\": {%s}, \"traffic_twin_ms\": %.4f, "
                  "\"traffic_twin_fraction_of_copy\": %.3f, \"traffic_twin_no_rope_ms\": %.4f, "
                  "\"traffic_twin_no_rope_fraction_of_copy\": %.3f, \"tile_order_ms\": %.4f, "
                  "\"tile_order_fraction_of_copy\": %.3f, \"tile_order_build_ms\": %.4f, "
                  "\"tile_order_ms_by_lanes_per_head\": {%s}, \"tile_order_hand_out_ms\": %.4f, "
                  "\"tile_order_hand_out_fraction_of_copy\": %.3f, \"tile_order_hand_out_ms_by_lanes_per_head\": {%s}, "
                  "\"hand_out_tiles_per_warp\": %d}",
                  first ? "" : ",", name.c_str(), token_bytes, fused_ms, unfused_ms, bytes, gbps, gbps / copy_gbps,
                  unfused_ms / fused_ms, dev::fastest_key_lanes(a.recipe, a.input_bf16), path.c_str(), widths.c_str(),
                  twin_ms,
                  copy_fraction(twin_ms), twin_no_rope_ms, copy_fraction(twin_no_rope_ms), tile_order_ms,
                  copy_fraction(tile_order_ms), order_build_ms, ordered_widths.c_str(), hand_out_ms,
                  copy_fraction(hand_out_ms), hand_out_widths.c_str(), dev::KeyStoreSchedule{}.hand_out_tiles_per_warp);
    json += row;
    first = false;
    std::printf("%-16s kernel path: %s\n", name.c_str(), path.c_str());
    std::printf("%-16s %3d B/token  fused %.3f ms (%.0f GB/s, %.0f%% of copy)  unfused %.3f ms (%.1fx)\n", name.c_str(),
                token_bytes, fused_ms, gbps, 100 * gbps / copy_gbps, unfused_ms, unfused_ms / fused_ms);
    std::printf("%-16s tile order: fused %.3f ms (%.0f%% of copy), with hand-out %.3f ms (%.0f%% of copy)\n", name.c_str(),
                tile_order_ms, 100 * copy_fraction(tile_order_ms), hand_out_ms, 100 * copy_fraction(hand_out_ms));
    BENCH_CHECK(cudaFree(d_cache));
    BENCH_CHECK(cudaFree(d_cos));
    BENCH_CHECK(cudaFree(d_sin));
  }
  json += "\n  ]\n}\n";
  std::printf("copy bandwidth %.0f GB/s\n", copy_gbps);
  return bench::write_file(argv[1], json) ? 0 : 2;
}
