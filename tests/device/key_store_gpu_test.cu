// Device key path and query path against the reference, byte for byte, on random
// tensors (Gaussian, outlier channels and edge rows), random page layouts and every
// store format and page-size class of every preset that quantises.
#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>

#include "device/api.h"
#include "oracle/verdict.h"
#include "reference/numeric/minifloat.h"
#include "reference/paged_cache.h"
#include "reference/pipeline.h"
#include "reference/rope.h"
#include "tests/device/gpu_test_support.h"

namespace dsaf::test {
namespace {

using ref::kHeadDim;

struct PageClass {
  const char* name;
  std::vector<int> sizes;
};
const std::vector<PageClass> kPageClasses = {{"small", {1, 2, 4, 8}}, {"medium", {16, 32, 64}},
                                             {"large", {128, 256}}};

const std::vector<std::string> kQuantisingPresets = {"dsv32-ref", "dsv32-bf16", "sglang-v32-fused",
                                                     "vllm-v32", "dsv4-ref", "sglang-v4-fp8",
                                                     "sglang-v4-bf16", "sglang-v4-fp4", "sglang-v41-fp4"};

const std::vector<int> kLaneWidths = {1, 2, 4, 8};

// The key-store test's recipes: every preset that quantises, each on its pinned kernel
// (device/key_store/key_paths.cuh), and "PRESET:generic", the preset with its norm's FMA
// contraction flipped (a field every pinned path fixes, so the generic kernel runs it):
// every store format, and each of fp8's three scale rules.
const std::string kGeneric = ":generic";
std::vector<std::string> key_store_recipes() {
  std::vector<std::string> names = kQuantisingPresets;
  for (const char* name :
       {"dsv32-ref", "vllm-v32", "sglang-v4-fp8", "sglang-v4-bf16", "sglang-v4-fp4", "dsv4-ref", "sglang-v41-fp4"}) {
    names.push_back(name + kGeneric);
  }
  return names;
}
ref::Recipe key_store_recipe(const std::string& name) {
  const size_t cut = name.find(kGeneric);
  if (cut == std::string::npos) return ref::preset(name);
  ref::Recipe r = ref::preset(name.substr(0, cut));
  r.key_norm.fma_contraction = !r.key_norm.fma_contraction;
  r.name = name;
  return r;
}

// Every preset that quantises runs the instantiation compiled with its fields as constants
// (device/key_store/key_paths.cuh), the kernels bench/key_store_bench.cu times; any other recipe, or
// one field changed, runs the generic kernel. Host-side only: runs without a GPU.
TEST(KeyStorePaths, PinnedKernelsServeExactlyTheirPresets) {
  for (const std::string& name : kQuantisingPresets) {
    EXPECT_EQ(dev::key_store_path(ref::preset(name)), name);
  }
  for (const std::string& name : key_store_recipes()) {
    if (name.find(kGeneric) == std::string::npos) continue;
    EXPECT_EQ(dev::key_store_path(key_store_recipe(name)), "generic") << name;
  }
  ref::RecipeFields v32 = ref::preset("dsv32-ref");
  v32.key_rounding.rope = false;
  EXPECT_EQ(dev::key_store_path(v32), "generic");
  v32 = ref::preset("dsv32-bf16");
  v32.key_norm.order = ref::ReductionOrder::kWarpTree;
  EXPECT_EQ(dev::key_store_path(v32), "generic");
  // The default widths (docs/key-path-speed.md: the fastest measured, bf16 input on the
  // H200, sglang-v41-fp4's on an H100; fp32 input on an H100), bf16 then fp32 input.
  struct Widths {
    const char* name;
    int bf16_input, fp32_input;
  };
  const std::vector<Widths> fastest = {
      {"sglang-v4-fp8", 1, 2},    {"sglang-v4-bf16", 2, 2}, {"sglang-v4-fp4", 1, 2}, {"dsv32-ref", 1, 2},
      {"dsv32-bf16", 1, 2},       {"sglang-v32-fused", 1, 2}, {"vllm-v32", 1, 2},    {"dsv4-ref", 1, 4},
      {"sglang-v41-fp4", 4, 4}};
  for (const Widths& w : fastest) {
    EXPECT_EQ(dev::fastest_key_lanes(ref::preset(w.name), true), w.bf16_input) << w.name;
    EXPECT_EQ(dev::fastest_key_lanes(ref::preset(w.name), false), w.fp32_input) << w.name;
  }
  ref::RecipeFields changed = ref::preset("sglang-v4-fp8");
  changed.rope.fma = ref::ContractedProduct::kNone;
  EXPECT_EQ(dev::key_store_path(changed), "generic");
  changed = ref::preset("sglang-v4-fp4");
  changed.key_quant.fp4_rounding = ref::Rounding::kNearestEven;
  EXPECT_EQ(dev::key_store_path(changed), "generic");
  changed = ref::preset("sglang-v4-fp4");
  changed.key_quant.fp4_zero_sign = ref::Fp4ZeroSign::kKeep;  // a code-path field too
  EXPECT_EQ(dev::key_store_path(changed), "generic");
}

// reference/norm.h needs a norm's weight (and LayerNorm's bias): the launcher refuses a
// missing one before anything runs (the kernel stages them in shared memory, where a null
// pointer would not fault but read garbage). Host-side only: runs without a GPU.
TEST(KeyStoreArgsCheck, ANormWithoutItsWeightOrBiasIsBadInput) {
  const float weight[kHeadDim] = {};
  const auto kind_of = [](const dev::KeyStoreArgs& a) {
    try {
      dev::launch_key_store(a);
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::kInternal;  // not refused
  };
  dev::KeyStoreArgs rms;
  rms.num_tokens = 1;
  rms.recipe = ref::preset("sglang-v4-fp8");  // RMSNorm
  EXPECT_EQ(kind_of(rms), ErrorKind::kBadInput);
  dev::KeyStoreArgs layer_norm = rms;
  layer_norm.recipe = ref::preset("dsv32-ref");  // LayerNorm
  layer_norm.norm_weight = weight;
  EXPECT_EQ(kind_of(layer_norm), ErrorKind::kBadInput);
}

// A key-store test's fixed tensors on the device: the recipe's RoPE table for 4,096
// positions and a random norm weight and bias (drawn from rng).
struct KeyStoreTensors {
  explicit KeyStoreTensors(const ref::Recipe& recipe, std::mt19937& rng)
      : rope(recipe.rope.table, 4096),
        cos(std::vector<float>(rope.cos(0), rope.cos(0) + 4096 * 32)),
        sin(std::vector<float>(rope.sin(0), rope.sin(0) + 4096 * 32)),
        weight(draw(rng, 1.0f, 0.2f)),
        bias(draw(rng, 0.0f, 0.1f)),
        d_weight(weight),
        d_bias(bias) {}
  static std::vector<float> draw(std::mt19937& rng, float mean, float sigma) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> v(kHeadDim);
    for (float& x : v) x = mean + sigma * normal(rng);
    return v;
  }
  // Batch b (positions, sequences and page tables already on the device) stored from
  // `input` into `cache`.
  dev::KeyStoreArgs args(const ref::Recipe& recipe, const PagedBatch& b, const void* input, bool input_bf16,
                         const int32_t* positions, const int32_t* seq, const int32_t* page_tables,
                         uint8_t* cache) const {
    dev::KeyStoreArgs a;
    a.input = input;
    a.input_bf16 = input_bf16;
    a.num_tokens = static_cast<int64_t>(b.token_seq.size());
    a.positions = positions;
    a.seq = seq;
    a.page_tables = page_tables;
    a.page_table_stride = b.pages_per_seq;
    a.rope_cos = cos.get();
    a.rope_sin = sin.get();
    a.norm_weight = d_weight.get();
    a.norm_bias = d_bias.get();
    a.cache = cache;
    a.page_size = b.page_size;
    a.recipe = recipe;
    return a;
  }

  ref::RopeTable rope;
  DeviceBuffer<float> cos, sin;
  std::vector<float> weight, bias;
  DeviceBuffer<float> d_weight, d_bias;
};

class KeyStoreGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(KeyStoreGpu, MatchesReferenceBytesOnRandomPagedBatches) {
  DSAF_REQUIRE_GPU();
  const ref::Recipe recipe = key_store_recipe(GetParam());
  const int kMinTokensPerClass = 10000;
  std::mt19937 rng(std::hash<std::string>{}(recipe.name));
  const KeyStoreTensors tensors(recipe, rng);
  const ref::RopeTable& rope = tensors.rope;
  int64_t repeated_tiles = 0;  // tiles after one of equal positions in a tile order
  for (const PageClass& page_class : kPageClasses) {
    int64_t tokens = 0;
    int batches = 0;
    while (tokens < kMinTokensPerClass) {
      const int page_size = page_class.sizes[batches % page_class.sizes.size()];
      // The tile order (api.h KeyStoreSchedule), which must not change a byte
      // either: the batch's own, build_key_tile_order's (tiles sorted by position: the
      // sequences all start at position 0, so with lengths a multiple of 32, drawn for
      // half of these batches, every tile offset repeats in each sequence and warps keep
      // RoPE rows across tiles), or a random permutation of the tiles. The first four batches
      // of each class are sure to keep rows, one at each lane-group width: sorted, aligned,
      // two sequences or more, and one block (long runs of the order per warp).
      const bool keeps_rows = batches < static_cast<int>(kLaneWidths.size());
      const int order_kind = keeps_rows ? 1 : std::uniform_int_distribution<int>(0, 2)(rng);
      const int64_t len_multiple =
          keeps_rows || (order_kind > 0 && std::uniform_int_distribution<int>(0, 1)(rng) == 0) ? 32 : 1;
      PagedBatch b = random_batch(rng, page_size, 6, 1500, len_multiple);
      while (keeps_rows && b.seq_lens.size() < 2) b = random_batch(rng, page_size, 6, 1500, len_multiple);
      const int64_t T = static_cast<int64_t>(b.token_seq.size());
      std::vector<float> input(T * kHeadDim);
      for (int64_t t = 0; t < T; ++t) random_row(rng, input.data() + t * kHeadDim);
      // Drawn independently per batch (they used to cycle in lockstep with the page size):
      // the input type, the lane-group width (a tuning knob that must not change a bit) and
      // the grid cap. The kernel's warps are persistent; without a cap every warp of a
      // batch this small gets one tile, and only capped grids reach the steady state of the
      // copy pipeline (tile i computing while tile i + 1 lands).
      const bool bf16_input = std::uniform_int_distribution<int>(0, 1)(rng) == 0;
      const int lanes = keeps_rows ? kLaneWidths[batches]
                                   : kLaneWidths[std::uniform_int_distribution<size_t>(0, kLaneWidths.size() - 1)(rng)];
      const int max_blocks =
          keeps_rows ? 1 : std::array<int, 3>{0, 1, 3}[std::uniform_int_distribution<int>(0, 2)(rng)];
      std::vector<uint16_t> bits;
      if (bf16_input) bits = to_bf16_bits(input);

      // Reference
      const ref::PagedCacheLayout layout(recipe.key_quant.format, page_size);
      std::vector<uint8_t> expected(b.num_pages * layout.page_bytes(), 0xAA);
      const ref::NormParams norm{tensors.weight.data(), tensors.bias.data()};
      for (int64_t t = 0; t < T; ++t) {
        const ref::StoredHead head = ref::run_key_path(recipe, input.data() + t * kHeadDim, b.token_pos[t], norm, rope);
        layout.store(expected, layout.locate(table_of(b, b.token_seq[t]), b.token_pos[t], b.num_pages), head);
      }
      // Device
      DeviceBuffer<uint8_t> d_cache(std::vector<uint8_t>(expected.size(), 0xAA));
      DeviceBuffer<float> d_in_f32(bf16_input ? std::vector<float>() : input);
      DeviceBuffer<uint16_t> d_in_bf16(bf16_input ? bits : std::vector<uint16_t>());
      DeviceBuffer<int32_t> d_pos(b.token_pos), d_seq(b.token_seq), d_tables(b.page_tables);
      const dev::KeyStoreArgs args =
          tensors.args(recipe, b, bf16_input ? static_cast<const void*>(d_in_bf16.get()) : d_in_f32.get(), bf16_input,
                       d_pos.get(), d_seq.get(), d_tables.get(), d_cache.get());
      dev::KeyStoreSchedule schedule;
      schedule.lanes_per_head = lanes;
      schedule.max_blocks = max_blocks;
      const int tile_tokens = dev::key_store_tile_tokens(args.recipe, lanes, args.input_bf16);
      const int64_t tiles = (T + tile_tokens - 1) / tile_tokens;
      DeviceBuffer<int32_t> d_order(tiles);
      if (order_kind == 1) {
        DeviceBuffer<uint8_t> scratch(dev::key_tile_order_scratch_bytes(T, tile_tokens));
        dev::build_key_tile_order(d_pos.get(), T, tile_tokens, 4096, d_order.get(), scratch.get(),
                                  dev::key_tile_order_scratch_bytes(T, tile_tokens));
        // A permutation of the tiles, sorted by first position, stable.
        const std::vector<int32_t> order = d_order.download();
        std::vector<int> seen(tiles, 0);
        for (int64_t e = 0; e < tiles; ++e) {
          ASSERT_TRUE(order[e] >= 0 && order[e] < tiles && seen[order[e]]++ == 0) << "entry " << e;
          if (e == 0) continue;
          const int32_t before = b.token_pos[order[e - 1] * tile_tokens], here = b.token_pos[order[e] * tile_tokens];
          ASSERT_TRUE(before < here || (before == here && order[e - 1] < order[e])) << "entry " << e;
        }
        for (int64_t e = 1; e < tiles; ++e) {
          bool same = true;
          for (int k = 0; k < tile_tokens; ++k) {
            const auto pos = [&](int64_t tile) { return b.token_pos[std::min(tile * tile_tokens + k, T - 1)]; };
            same = same && pos(order[e]) == pos(order[e - 1]);
          }
          repeated_tiles += same;
        }
      } else if (order_kind == 2) {
        std::vector<int32_t> order(tiles);
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        d_order.upload(order);
      }
      if (order_kind > 0) {
        schedule.tile_order = d_order.get();
        schedule.tile_order_tokens = tile_tokens;
      }
      // With an order, half the batches hand its last tiles out by counters (api.h
      // KeyStoreSchedule; in batches this small the hand-out often covers every tile). The
      // launch must leave the counters zero: it is launched twice on one pair, the cache
      // reset in between, and the second launch's bytes are the ones compared.
      const bool hand_out = order_kind > 0 && std::uniform_int_distribution<int>(0, 1)(rng) == 0;
      DeviceBuffer<int32_t> d_counters(std::vector<int32_t>{0, 0});
      if (hand_out) {
        schedule.tile_counters = d_counters.get();
        schedule.hand_out_tiles_per_warp = std::uniform_int_distribution<int>(1, 8)(rng);
        dev::launch_key_store(args, schedule);
        const std::vector<int32_t> counters = d_counters.download();
        ASSERT_EQ(counters, (std::vector<int32_t>{0, 0})) << "hand-out counters after a launch, batch " << batches;
        d_cache.upload(std::vector<uint8_t>(expected.size(), 0xAA));
      }
      dev::launch_key_store(args, schedule);
      const std::vector<uint8_t> actual = d_cache.download();
      if (hand_out) {
        ASSERT_EQ(d_counters.download(), (std::vector<int32_t>{0, 0})) << "after the second launch";
      }

      oracle::CacheOwnership owners;
      for (size_t s = 0; s < b.seq_lens.size(); ++s) {
        owners.page_tables.push_back(table_of(b, static_cast<int>(s)));
        owners.seq_lens.push_back(b.seq_lens[s]);
      }
      const oracle::ByteVerdict v = oracle::compare_paged_cache(layout, owners, expected, actual);
      ASSERT_TRUE(v.pass) << recipe.name << ", page size " << page_size << ", "
                          << (bf16_input ? "bf16" : "fp32") << " input, " << lanes << " lanes per head, grid cap "
                          << max_blocks << ", " << std::array<const char*, 3>{"batch", "sorted", "random"}[order_kind]
                          << " tile order" << (hand_out ? " with hand-out counters" : "") << ", batch " << batches
                          << ":\n"
                          << v.describe();
      tokens += T;
      ++batches;
    }
    RecordProperty(std::string(page_class.name) + "_tokens", std::to_string(tokens));
    std::printf("[ %s ] %s pages: %lld tokens in %d batches, byte-exact\n", recipe.name.c_str(),
                page_class.name, static_cast<long long>(tokens), batches);
  }
  // The sorted orders gave warps tiles whose RoPE rows they already held (how many a warp
  // kept depends on where the runs split; with a grid cap of 1 or 3 blocks, runs are long).
  std::printf("[ %s ] sorted tile orders: %lld tiles with their predecessor's positions\n", recipe.name.c_str(),
              static_cast<long long>(repeated_tiles));
  RecordProperty("repeated_position_tiles", std::to_string(repeated_tiles));
  EXPECT_GT(repeated_tiles, 0);
}

// On bf16 input a NaN's payload and sign never reach the cache: the kernels skip the input's
// bf16 rounding (which canonicalises a NaN and keeps every other bf16) where a norm follows
// (device/key_store/key_token.cuh), so the bytes stored from NaNs of any payload must equal
// those stored from the canonical NaN 0x7fff, at every lane width. Rows hold one NaN, a
// few, or only NaNs, among Gaussian values.
TEST_P(KeyStoreGpu, Bf16NanPayloadsStoreAsTheCanonicalNan) {
  DSAF_REQUIRE_GPU();
  const ref::Recipe recipe = key_store_recipe(GetParam());
  std::mt19937 rng(std::hash<std::string>{}(recipe.name) ^ 0x4e614eu);
  const KeyStoreTensors tensors(recipe, rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int page_size = 16;
  PagedBatch b = random_batch(rng, page_size, 4, 600);
  const int64_t T = static_cast<int64_t>(b.token_seq.size());
  std::vector<float> input(T * kHeadDim);
  for (float& v : input) v = normal(rng);
  std::vector<uint16_t> payloads = to_bf16_bits(input);
  std::uniform_int_distribution<int> payload(1, 0x7f), dim(0, kHeadDim - 1);
  int64_t nans = 0;
  for (int64_t t = 0; t < T; ++t) {
    const int kind = static_cast<int>(t % 3);  // one NaN, eight, all
    const int count = kind == 0 ? 1 : kind == 1 ? 8 : kHeadDim;
    for (int n = 0; n < count; ++n) {
      const int i = kind == 2 ? n : dim(rng);
      const uint16_t sign = (rng() & 1) ? 0x8000 : 0;
      payloads[t * kHeadDim + i] = static_cast<uint16_t>(sign | 0x7f80 | payload(rng));  // quiet or signalling
    }
  }
  std::vector<uint16_t> canonical = payloads;
  for (uint16_t& bits : canonical) {
    if ((bits & 0x7f80) == 0x7f80 && (bits & 0x7f) != 0) bits = 0x7fff, ++nans;
  }
  const ref::PagedCacheLayout layout(recipe.key_quant.format, page_size);
  DeviceBuffer<int32_t> d_pos(b.token_pos), d_seq(b.token_seq), d_tables(b.page_tables);
  const auto store = [&](const std::vector<uint16_t>& bits, int lanes) {
    DeviceBuffer<uint16_t> d_in(bits);
    DeviceBuffer<uint8_t> d_cache(std::vector<uint8_t>(b.num_pages * layout.page_bytes(), 0xAA));
    const dev::KeyStoreArgs args =
        tensors.args(recipe, b, d_in.get(), true, d_pos.get(), d_seq.get(), d_tables.get(), d_cache.get());
    dev::KeyStoreSchedule schedule;
    schedule.lanes_per_head = lanes;
    dev::launch_key_store(args, schedule);
    return d_cache.download();
  };
  for (int lanes : kLaneWidths) {
    const std::vector<uint8_t> from_payloads = store(payloads, lanes), from_canonical = store(canonical, lanes);
    const auto differ = std::mismatch(from_payloads.begin(), from_payloads.end(), from_canonical.begin());
    EXPECT_TRUE(differ.first == from_payloads.end())
        << recipe.name << ", " << lanes << " lanes per head: cache byte " << (differ.first - from_payloads.begin())
        << " differs";
  }
  std::printf("[ %s ] %lld NaNs of random payload and sign in %lld tokens: the canonical NaN's bytes\n",
              recipe.name.c_str(), static_cast<long long>(nans), static_cast<long long>(T));
}

// What launch_key_store says when it refuses `args` under `schedule` ("not refused" if it
// launched, "not bad input" for another kind of error). Host-side: its checks precede any
// CUDA call.
std::string refusal_of(const dev::KeyStoreArgs& args, const dev::KeyStoreSchedule& schedule) {
  try {
    dev::launch_key_store(args, schedule);
  } catch (const Error& e) {
    return e.kind() == ErrorKind::kBadInput ? e.what() : "not bad input";
  }
  return "not refused";
}

// A fp8 batch of one token (never launched: every check below refuses it first).
dev::KeyStoreArgs one_token_args(const float* weight) {
  dev::KeyStoreArgs args;
  args.num_tokens = 1;
  args.recipe = ref::preset("sglang-v4-fp8");
  args.norm_weight = weight;
  return args;
}

// A tile order built for another tile size is refused before anything runs (the kernel
// would skip or repeat tiles).
TEST(KeyStoreArgsCheck, ATileOrderOfAnotherTileSizeIsBadInput) {
  const float weight[kHeadDim] = {};
  const int32_t order[1] = {0};
  const dev::KeyStoreArgs args = one_token_args(weight);
  dev::KeyStoreSchedule schedule;
  schedule.lanes_per_head = 1;
  schedule.tile_order = order;
  schedule.tile_order_tokens = 16;  // 2 lanes' tiles; launched at 1 lane (32 tokens)
  EXPECT_NE(refusal_of(args, schedule).find("tile order"), std::string::npos) << refusal_of(args, schedule);
  EXPECT_EQ(dev::key_store_tile_tokens(args.recipe, 1, true), 32);
  EXPECT_EQ(dev::key_store_tile_tokens(args.recipe, 8, false), 4);
}

// Hand-out counters hand out tiles of a tile order: without one they are refused, and so
// is a hand-out of no tiles.
TEST(KeyStoreArgsCheck, HandOutCountersWithoutATileOrderAreBadInput) {
  const float weight[kHeadDim] = {};
  int32_t counters[2] = {0, 0};
  const dev::KeyStoreArgs args = one_token_args(weight);
  dev::KeyStoreSchedule schedule;
  schedule.lanes_per_head = 1;
  schedule.tile_counters = counters;
  EXPECT_NE(refusal_of(args, schedule).find("tile_counters"), std::string::npos) << refusal_of(args, schedule);
  const int32_t order[1] = {0};
  schedule.tile_order = order;
  schedule.tile_order_tokens = 32;
  schedule.hand_out_tiles_per_warp = 0;
  EXPECT_NE(refusal_of(args, schedule).find("hand_out_tiles_per_warp"), std::string::npos)
      << refusal_of(args, schedule);
  schedule.hand_out_tiles_per_warp = 4;
  schedule.max_blocks = -1;
  EXPECT_NE(refusal_of(args, schedule).find("max_blocks"), std::string::npos) << refusal_of(args, schedule);
}

// build_key_tile_order refuses what it cannot order, naming the argument, before it asks
// CUB or the device anything. Host-side: runs without a GPU.
TEST(KeyStoreArgsCheck, TileOrderBuilderRefusesBadArguments) {
  const auto message_of = [](int64_t num_tokens, int tile_tokens) -> std::string {
    try {
      dev::build_key_tile_order(nullptr, num_tokens, tile_tokens, 4096, nullptr, nullptr, 0);
    } catch (const Error& e) {
      return e.kind() == ErrorKind::kBadInput ? e.what() : "not bad input";
    }
    return "not refused";
  };
  EXPECT_NE(message_of(0, 32).find("num_tokens"), std::string::npos) << message_of(0, 32);
  EXPECT_NE(message_of(int64_t{1} << 31, 32).find("num_tokens"), std::string::npos);
  EXPECT_NE(message_of(100, 3).find("tile_tokens"), std::string::npos) << message_of(100, 3);
  EXPECT_NE(message_of(100, 64).find("tile_tokens"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Presets, KeyStoreGpu, ::testing::ValuesIn(key_store_recipes()),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           std::replace(name.begin(), name.end(), ':', '_');
                           return name;
                         });

class QueryQuantGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(QueryQuantGpu, MatchesReferenceCodesScalesAndWeights) {
  DSAF_REQUIRE_GPU();
  const ref::Recipe& recipe = ref::preset(GetParam());
  std::mt19937 rng(std::hash<std::string>{}(recipe.name) + 1);
  const int H = 64;
  const int64_t T = 200;  // 12,800 heads
  const ref::RopeTable rope(recipe.rope.table, 4096);
  DeviceBuffer<float> d_cos(std::vector<float>(rope.cos(0), rope.cos(0) + 4096 * 32));
  DeviceBuffer<float> d_sin(std::vector<float>(rope.sin(0), rope.sin(0) + 4096 * 32));
  std::vector<float> input(T * H * kHeadDim), wproj(T * H);
  std::vector<int32_t> positions(T);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t r = 0; r < T * H; ++r) random_row(rng, input.data() + r * kHeadDim);
  for (float& w : wproj) w = normal(rng);
  for (int32_t& p : positions) p = std::uniform_int_distribution<int>(0, 4095)(rng);
  const std::vector<uint16_t> bits = to_bf16_bits(input);
  const int vb = ref::value_bytes_per_head(recipe.query_quant.format);
  const int sb = ref::scale_bytes_per_head(recipe.query_quant.format);
  DeviceBuffer<uint16_t> d_in(bits);
  DeviceBuffer<float> d_wproj(wproj), d_weights(T * H);
  DeviceBuffer<int32_t> d_pos(positions);
  DeviceBuffer<uint8_t> d_values(T * H * vb), d_scales(T * H * std::max(sb, 1));
  dev::QueryArgs args;
  args.input = d_in.get();
  args.num_tokens = T;
  args.num_heads = H;
  args.positions = d_pos.get();
  args.wproj = d_wproj.get();
  args.rope_cos = d_cos.get();
  args.rope_sin = d_sin.get();
  args.q_values = d_values.get();
  args.q_scales = d_scales.get();
  args.weights = d_weights.get();
  args.recipe = recipe;
  std::vector<ref::QueryOutput> expected;
  for (int64_t t = 0; t < T; ++t) {
    expected.push_back(ref::run_query_path(recipe, input.data() + t * H * kHeadDim, H, wproj.data() + t * H,
                                           positions[t], rope));
  }
  for (int lanes : kLaneWidths) {  // a tuning knob: every width must give the same bytes
    dev::launch_query_quant(args, lanes);
    const std::vector<uint8_t> values = d_values.download(), scales = d_scales.download();
    const std::vector<float> weights = d_weights.download();
    for (int64_t t = 0; t < T; ++t) {
      const ref::QueryOutput& q = expected[t];
      for (int h = 0; h < H; ++h) {
        const int64_t row = t * H + h;
        const std::string where = recipe.name + ", " + std::to_string(lanes) + " lanes per head, token " +
                                  std::to_string(t) + " head " + std::to_string(h);
        const std::vector<uint8_t> got_values(values.begin() + row * vb, values.begin() + (row + 1) * vb);
        ASSERT_EQ(got_values, q.heads[h].value_bytes) << where;
        const std::vector<uint8_t> got_scales(scales.begin() + row * sb, scales.begin() + (row + 1) * sb);
        ASSERT_EQ(got_scales, q.heads[h].scale_bytes) << where;
        const float expected_weight = static_cast<float>(q.weights[h]);
        ASSERT_EQ(0, std::memcmp(&weights[row], &expected_weight, 4))
            << where << ": weight " << weights[row] << " vs " << expected_weight;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, QueryQuantGpu, ::testing::ValuesIn(kQuantisingPresets),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace dsaf::test
