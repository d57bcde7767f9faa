// Tile orders (api.h build_key_tile_order, KeyTileOrderCache) against a stable sort on
// the host, entry for entry, and the C ABI's key store, whose calls keep their orders
// across batches, against the reference's cache bytes.
#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "device/api.h"
#include "oracle/verdict.h"
#include "reference/paged_cache.h"
#include "reference/pipeline.h"
#include "reference/rope.h"
#include "tests/device/gpu_test_support.h"

namespace dsaf::test {
namespace {

using ref::kHeadDim;

// The order build_key_tile_order promises: tiles stably sorted by the low bits (those of
// rope_positions - 1, at least one) of their first position.
std::vector<int32_t> host_order(const std::vector<int32_t>& positions, int tile_tokens, int rope_positions) {
  int bits = 1;
  while (bits < 31 && (rope_positions - 1) >> bits != 0) ++bits;
  const uint32_t mask = (1u << bits) - 1;
  const int64_t tiles = (static_cast<int64_t>(positions.size()) + tile_tokens - 1) / tile_tokens;
  std::vector<int32_t> order(tiles);
  std::iota(order.begin(), order.end(), 0);
  const auto key = [&](int32_t tile) { return static_cast<uint32_t>(positions[int64_t{tile} * tile_tokens]) & mask; };
  std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return key(x) < key(y); });
  return order;
}

std::vector<int32_t> download_ints(const int32_t* device, int64_t count) {
  std::vector<int32_t> host(count);
  cuda_ok(cudaDeviceSynchronize(), "kernel");
  cuda_ok(cudaMemcpy(host.data(), device, count * sizeof(int32_t), cudaMemcpyDeviceToHost), "download");
  return host;
}

// Positions of sequences of the given lengths, each from 0, one after another.
std::vector<int32_t> sequences(const std::vector<int>& lengths) {
  std::vector<int32_t> positions;
  for (int len : lengths) {
    for (int p = 0; p < len; ++p) positions.push_back(p);
  }
  return positions;
}

std::vector<int32_t> uniform_positions(std::mt19937& rng, int64_t n, int64_t lo, int64_t hi) {
  std::uniform_int_distribution<int64_t> draw(lo, hi);
  std::vector<int32_t> positions(n);
  for (int32_t& p : positions) p = static_cast<int32_t>(draw(rng));
  return positions;
}

struct OrderCase {
  std::string name;
  std::vector<int32_t> positions;
  int tile_tokens;
  int rope_positions;
};

// Every path of the order kernel: keys that never decrease (the identity, sorted
// nothing), one to four radix passes (8 key bits a pass, the last one narrower), blocks
// that rank one chunk of 1,024 tiles or several, partial last tiles, and positions outside
// the table (negative ones too), which sort by their low bits.
TEST(KeyTileOrderGpu, BuildIsTheStableSortByFirstPosition) {
  DSAF_REQUIRE_GPU();
  std::mt19937 rng(28);
  std::vector<OrderCase> cases;
  cases.push_back({"one token", {5}, 32, 4096});
  cases.push_back({"one sequence, a partial last tile", sequences({100'001}), 32, 131072});
  cases.push_back({"nondecreasing with repeats", [] {
                     std::vector<int32_t> p(50'000);
                     for (size_t t = 0; t < p.size(); ++t) p[t] = static_cast<int32_t>(t / 100);
                     return p;
                   }(),
                   1, 4096});
  cases.push_back({"one sequence but its last tile", [] {
                     std::vector<int32_t> p = sequences({40'000});
                     p[39'999 / 8 * 8] = 0;  // the last tile (of 8) starts at 0
                     return p;
                   }(),
                   8, 65536});
  cases.push_back({"descending", [] {
                     std::vector<int32_t> p(70'000);
                     for (size_t t = 0; t < p.size(); ++t) p[t] = static_cast<int32_t>(p.size() - t);
                     return p;
                   }(),
                   2, 131072});
  cases.push_back({"16 sequences of 4K, tiles of 32", sequences(std::vector<int>(16, 4096)), 32, 4096});
  cases.push_back({"16 sequences of 4K, tiles of 4", sequences(std::vector<int>(16, 4096)), 4, 4096});
  cases.push_back({"7 sequences of random lengths", [&] {
                     std::vector<int> lengths;
                     for (int s = 0; s < 7; ++s) lengths.push_back(std::uniform_int_distribution<int>(1, 5000)(rng));
                     return sequences(lengths);
                   }(),
                   8, 8192});
  cases.push_back({"3M random positions, tiles of 1 (blocks rank several chunks)",
                   uniform_positions(rng, 3'000'000, 0, 65535), 1, 65536});
  cases.push_back({"18 key bits: passes of 8, 8 and 2", uniform_positions(rng, 200'000, 0, 131072), 16, 131073});
  cases.push_back({"30 key bits (a version-1 call): four passes", uniform_positions(rng, 300'000, 0, (1 << 30) - 1), 4,
                   1 << 30});
  cases.push_back({"one key bit", uniform_positions(rng, 10'000, 0, 7), 1, 1});
  cases.push_back({"outside the table, negative too", uniform_positions(rng, 100'000, INT32_MIN, INT32_MAX), 2, 4096});
  for (const OrderCase& c : cases) {
    const int64_t n = static_cast<int64_t>(c.positions.size());
    const int64_t tiles = (n + c.tile_tokens - 1) / c.tile_tokens;
    DeviceBuffer<int32_t> d_positions(c.positions), d_order(std::vector<int32_t>(tiles, -7));
    const size_t scratch_bytes = dev::key_tile_order_scratch_bytes(n, c.tile_tokens);
    DeviceBuffer<uint8_t> scratch(std::vector<uint8_t>(scratch_bytes, 0xA5));  // not read before written
    dev::build_key_tile_order(d_positions.get(), n, c.tile_tokens, c.rope_positions, d_order.get(), scratch.get(),
                              scratch_bytes);
    ASSERT_EQ(d_order.download(), host_order(c.positions, c.tile_tokens, c.rope_positions)) << c.name;
  }
}

// One KeyTileOrderCache through a sequence of batches that takes every branch of a
// build: growth, an order kept (same keys, another buffer), keys that changed at the same
// tile count, the identity, fewer tiles, other key bits, and every walk. Each build's
// order is compared with the host's; the counters stay zero.
TEST(KeyTileOrderGpu, CacheKeepsOnlyOrdersItsKeysStillHave) {
  DSAF_REQUIRE_GPU();
  std::mt19937 rng(96);
  const std::vector<int32_t> small = sequences(std::vector<int>(16, 1000));
  std::vector<int> lengths(40);
  for (int& len : lengths) len = std::uniform_int_distribution<int>(1000, 5000)(rng);
  const std::vector<int32_t> large = sequences(lengths);
  std::vector<int32_t> large_swapped = large;  // two tiles of 8 exchanged: same tiles, other keys
  std::swap_ranges(large_swapped.begin(), large_swapped.begin() + 8, large_swapped.begin() + 4000);
  const std::vector<int32_t> one_sequence = sequences({static_cast<int>(large.size())});
  struct Step {
    std::string name;
    const std::vector<int32_t>* positions;
    int tile_tokens, rope_positions;
    dev::KeyTileWalk walk;
  };
  using W = dev::KeyTileWalk;
  const std::vector<Step> steps = {
      {"16 x 1000", &small, 32, 4096, W::kHandOut},
      {"40 random lengths: the buffers grow", &large, 8, 8192, W::kHandOut},
      {"the same positions again, another buffer: the order kept", &large, 8, 8192, W::kHandOut},
      {"two tiles swapped: the same tile count, other keys", &large_swapped, 8, 8192, W::kHandOut},
      {"one sequence: the identity", &one_sequence, 8, 262144, W::kTileOrder},
      {"the one sequence again", &one_sequence, 8, 262144, W::kHandOut},
      {"the 40 sequences after the identity", &large, 8, 8192, W::kTileOrder},
      {"the 40 sequences on 4 key bits", &large, 8, 16, W::kHandOut},
      {"the 40 sequences on 13 key bits again", &large, 8, 8192, W::kHandOut},
      {"fewer tiles than the buffers hold", &small, 4, 4096, W::kHandOut},
      {"the same positions at another tile size", &small, 32, 4096, W::kTileOrder},
  };
  dev::KeyTileOrderCache cache;
  for (const Step& step : steps) {
    const std::vector<int32_t>& positions = *step.positions;
    const int64_t n = static_cast<int64_t>(positions.size());
    DeviceBuffer<int32_t> d_positions(positions);
    dev::KeyStoreSchedule schedule;
    cache.build(d_positions.get(), n, step.tile_tokens, step.rope_positions, step.walk, schedule);
    ASSERT_NE(schedule.tile_order, nullptr) << step.name;
    EXPECT_EQ(schedule.tile_order_tokens, step.tile_tokens) << step.name;
    EXPECT_EQ(schedule.tile_counters != nullptr, step.walk == W::kHandOut) << step.name;
    const int64_t tiles = (n + step.tile_tokens - 1) / step.tile_tokens;
    ASSERT_EQ(download_ints(schedule.tile_order, tiles), host_order(positions, step.tile_tokens, step.rope_positions))
        << step.name;
    if (schedule.tile_counters != nullptr) {
      EXPECT_EQ(download_ints(schedule.tile_counters, 2), (std::vector<int32_t>{0, 0})) << step.name;
    }
  }
  dev::KeyStoreSchedule batch_order;
  batch_order.tile_order_tokens = 5;
  cache.build(nullptr, 0, 32, 4096, W::kBatchOrder, batch_order);  // builds nothing, checks nothing
  EXPECT_EQ(batch_order.tile_order, nullptr);
  EXPECT_EQ(batch_order.tile_order_tokens, 0);
  EXPECT_EQ(batch_order.tile_counters, nullptr);
}

// A build whose keys are the previous build's leaves the order as it is (it is not sorted
// again): an entry overwritten between the two builds stays overwritten. Keys that differ
// in one tile at the same tile count are sorted again.
TEST(KeyTileOrderGpu, CacheSortsOnlyKeysItHasNotSeen) {
  DSAF_REQUIRE_GPU();
  const std::vector<int32_t> batch = sequences(std::vector<int>(8, 3000));
  std::vector<int32_t> changed = batch;
  changed[32 * 100] = 7;  // tile 100's first position
  DeviceBuffer<int32_t> d_batch(batch), d_same(batch), d_changed(changed);
  dev::KeyTileOrderCache cache;
  dev::KeyStoreSchedule schedule;
  cache.build(d_batch.get(), static_cast<int64_t>(batch.size()), 32, 4096, dev::KeyTileWalk::kTileOrder, schedule);
  const int64_t tiles = static_cast<int64_t>(batch.size()) / 32;
  const std::vector<int32_t> sorted = host_order(batch, 32, 4096);
  ASSERT_EQ(download_ints(schedule.tile_order, tiles), sorted);
  const int32_t poison = -5;
  cuda_ok(cudaMemcpy(const_cast<int32_t*>(schedule.tile_order), &poison, sizeof poison, cudaMemcpyHostToDevice),
          "poison");
  cache.build(d_same.get(), static_cast<int64_t>(batch.size()), 32, 4096, dev::KeyTileWalk::kTileOrder, schedule);
  std::vector<int32_t> kept = sorted;
  kept[0] = poison;
  EXPECT_EQ(download_ints(schedule.tile_order, tiles), kept) << "the same keys were sorted again";
  cache.build(d_changed.get(), static_cast<int64_t>(changed.size()), 32, 4096, dev::KeyTileWalk::kTileOrder, schedule);
  EXPECT_EQ(download_ints(schedule.tile_order, tiles), host_order(changed, 32, 4096));
}

// A key batch of whole sequences in host memory (the layouts of HostKeyBatch), and the
// reference's cache for it.
struct AbiBatch {
  dev::HostKeyBatch batch;
  std::vector<uint8_t> expected;
  oracle::CacheOwnership owners;
};

AbiBatch abi_batch(std::mt19937& rng, const ref::Recipe& recipe, const std::vector<int>& lengths, int page_size,
                   const std::vector<float>& weight, const std::vector<float>& bias) {
  PagedBatch b;
  b.page_size = page_size;
  for (int len : lengths) b.seq_lens.push_back(len);
  const int longest = *std::max_element(lengths.begin(), lengths.end());
  b.pages_per_seq = (longest + page_size - 1) / page_size;
  b.num_pages = b.pages_per_seq * static_cast<int64_t>(lengths.size()) + 2;
  std::vector<int32_t> pool(b.num_pages);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  b.page_tables.assign(pool.begin(), pool.begin() + b.pages_per_seq * lengths.size());
  for (size_t s = 0; s < lengths.size(); ++s) {
    for (int p = 0; p < lengths[s]; ++p) {
      b.token_seq.push_back(static_cast<int32_t>(s));
      b.token_pos.push_back(p);
    }
  }
  const int64_t T = static_cast<int64_t>(b.token_pos.size());
  std::vector<float> input(T * kHeadDim);
  for (int64_t t = 0; t < T; ++t) random_row(rng, input.data() + t * kHeadDim);
  const std::vector<uint16_t> bits = to_bf16_bits(input);  // `input` becomes what the kernel reads

  const ref::RopeTable rope(recipe.rope.table, longest);
  const ref::PagedCacheLayout layout(recipe.key_quant.format, page_size);
  AbiBatch out;
  out.expected.assign(b.num_pages * layout.page_bytes(), 0xAA);
  const ref::NormParams norm{weight.data(), bias.data()};
  for (int64_t t = 0; t < T; ++t) {
    const ref::StoredHead head = ref::run_key_path(recipe, input.data() + t * kHeadDim, b.token_pos[t], norm, rope);
    layout.store(out.expected, layout.locate(table_of(b, b.token_seq[t]), b.token_pos[t], b.num_pages), head);
  }
  dev::HostKeyBatch& h = out.batch;
  h.input_bf16 = bits;
  h.bf16 = true;
  h.positions = b.token_pos;
  h.seq = b.token_seq;
  h.page_tables = b.page_tables;
  h.page_table_stride = b.pages_per_seq;
  h.page_size = page_size;
  h.rope_cos.assign(rope.cos(0), rope.cos(0) + int64_t{longest} * 32);
  h.rope_sin.assign(rope.sin(0), rope.sin(0) + int64_t{longest} * 32);
  h.norm_weight = weight;
  h.norm_bias = bias;
  h.cache.assign(out.expected.size(), 0xAA);
  h.recipe = recipe;
  for (size_t s = 0; s < lengths.size(); ++s) {
    out.owners.page_tables.push_back(table_of(b, static_cast<int>(s)));
    out.owners.seq_lens.push_back(lengths[s]);
  }
  return out;
}

// The builtin ABI table keeps its tile orders across calls (device/plugins/abi_kernels.cuh).
// Calls in a row: a sorted batch (one sequence), an unsorted larger one (the buffers
// grow), the same again (its order kept), its sequences in another order (the same tile
// count, other keys), a sorted batch of the same tile count, then the first, smaller
// batch. Every call's cache must be the reference's, on each walk that takes an order and
// at 1 and 8 lanes (tiles of 32 and 4 tokens), in a full grid and in one block.
TEST(AbiKeyStoreGpu, CallsThatKeepTheirOrdersMatchTheReference) {
  DSAF_REQUIRE_GPU();
  std::mt19937 rng(95);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> weight(kHeadDim), bias(kHeadDim);
  for (int i = 0; i < kHeadDim; ++i) {
    weight[i] = ref::decode_bf16(ref::encode_bf16(1.0f + 0.2f * normal(rng)));
    bias[i] = ref::decode_bf16(ref::encode_bf16(0.1f * normal(rng)));
  }
  std::vector<int> lengths = {3000, 1700, 4096, 512, 2048, 3333};
  std::vector<int> reordered = lengths;
  std::rotate(reordered.begin(), reordered.begin() + 2, reordered.end());
  const int total = std::accumulate(lengths.begin(), lengths.end(), 0);
  for (const std::string recipe_name : {"sglang-v4-fp8", "dsv32-ref"}) {
    const ref::Recipe& recipe = ref::preset(recipe_name);
    const std::vector<std::pair<std::string, AbiBatch>> calls = {
        {"one sequence", abi_batch(rng, recipe, {2500}, 64, weight, bias)},
        {"six sequences", abi_batch(rng, recipe, lengths, 16, weight, bias)},
        {"the six again", abi_batch(rng, recipe, lengths, 16, weight, bias)},
        {"the six reordered", abi_batch(rng, recipe, reordered, 64, weight, bias)},
        {"one sequence as long as the six", abi_batch(rng, recipe, {total}, 128, weight, bias)},
        {"the first again", abi_batch(rng, recipe, {2500}, 64, weight, bias)},
    };
    for (const char* spec : {"builtin", "builtin:1:hand-out", "builtin:8:tile-order", "builtin:1:grid1:hand-out",
                             "builtin:8:grid1:hand-out"}) {
      const std::unique_ptr<dev::KernelUnderTest> kernel = dev::open_kernel(spec);
      for (const auto& [name, call] : calls) {
        const ref::PagedCacheLayout layout(recipe.key_quant.format, call.batch.page_size);
        const oracle::ByteVerdict v =
            oracle::compare_paged_cache(layout, call.owners, call.expected, kernel->key_store(call.batch));
        ASSERT_TRUE(v.pass) << recipe_name << ", " << spec << ": " << name << ":\n" << v.describe();
      }
    }
  }
}

}  // namespace
}  // namespace dsaf::test
