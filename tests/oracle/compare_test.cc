// A key observation against a recipe (oracle/compare.h): positions in any order over
// several sequences, a slot map with unwritten tokens, the observation's own RoPE table;
// only written slots count, and the first mismatch is named by its token.
#include "oracle/compare.h"

#include <random>

#include <gtest/gtest.h>

#include "oracle/detect.h"
#include "reference/error.h"
#include "reference/numeric/minifloat.h"
#include "reference/paged_cache.h"
#include "reference/rope.h"

namespace dsaf::oracle {
namespace {

constexpr int kPageSize = 8;
constexpr int64_t kPages = 12;

// 2 sequences (positions 0..29 and 10..39) interleaved 5 tokens at a time over a shuffled
// pool, 3 tokens with slot -1; a RoPE table whose row p is the recipe's row p + 3; bytes
// of unwritten slots 0x33. The cache is the writer's.
KeyObservation observe(const ref::Recipe& writer) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  KeyObservation obs;
  std::vector<int32_t> pool(kPages);
  for (int32_t i = 0; i < kPages; ++i) pool[i] = (i * 7) % kPages;
  const std::vector<std::vector<int32_t>> tables = {{pool.begin(), pool.begin() + 5}, {pool.begin() + 5, pool.begin() + 10}};
  const ref::PagedCacheLayout layout(writer.key_quant.format, kPageSize);
  int32_t cursor[2] = {0, 10};
  const int32_t last[2] = {29, 39};
  while (cursor[0] <= last[0] || cursor[1] <= last[1]) {
    for (int s = 0; s < 2; ++s) {
      for (int i = 0; i < 5 && cursor[s] <= last[s]; ++i) {
        const ref::CacheLocation at = layout.locate(tables[s], cursor[s], kPages);
        obs.positions.push_back(cursor[s]++);
        obs.sequences.push_back(s);
        obs.slots.push_back(at.page * kPageSize + at.offset);
      }
    }
  }
  for (int i = 0; i < 3; ++i) obs.positions.push_back(1), obs.sequences.push_back(0), obs.slots.push_back(-1);
  for (size_t i = 0; i < obs.positions.size() * ref::kHeadDim; ++i) {
    obs.key_inputs.push_back(ref::round_bf16(normal(rng) * (i % 41 == 7 ? 50.0f : 1.0f)));
  }
  for (int i = 0; i < ref::kHeadDim; ++i) {
    obs.norm_weight.push_back(1.0f + 0.1f * normal(rng));
    obs.norm_bias.push_back(0.1f * normal(rng));
  }
  const ref::RopeTable rope(writer.rope.table, 43);
  obs.rope_cos.assign(rope.cos(3), rope.cos(3) + 40 * ref::kRopePairs);
  obs.rope_sin.assign(rope.sin(3), rope.sin(3) + 40 * ref::kRopePairs);
  obs.page_size = kPageSize;
  obs.layout = writer.key_quant.format;
  obs.num_pages = kPages;
  obs.cache.assign(kPages * layout.page_bytes(), 0x33);
  obs.cache = expected_cache(writer, obs);
  return obs;
}

TEST(CompareCapture, PassesOnTheWritersBytesOverWrittenSlotsOnly) {
  const ref::Recipe& recipe = ref::preset("dsv32-ref");
  KeyObservation obs = observe(recipe);
  CaptureVerdict v = compare_capture(obs, recipe);
  EXPECT_TRUE(v.pass) << v.describe();
  EXPECT_EQ(v.tokens, 63);
  EXPECT_EQ(v.written_tokens, 60);
  EXPECT_EQ(v.bytes, 60 * 132);
  EXPECT_TRUE(v.supplied_rope);
  // Pages 10 and 11 belong to no token: whatever they hold is not compared.
  const ref::PagedCacheLayout layout(recipe.key_quant.format, kPageSize);
  for (int64_t i = 10 * layout.page_bytes(); i < kPages * layout.page_bytes(); ++i) obs.cache[i] ^= 0xFF;
  EXPECT_TRUE(compare_capture(obs, recipe).pass);
  // The observation's RoPE table is the one used: the recipe's own table disagrees.
  obs.rope_cos.clear();
  obs.rope_sin.clear();
  v = compare_capture(obs, recipe);
  EXPECT_FALSE(v.pass);
  EXPECT_FALSE(v.supplied_rope);
}

TEST(CompareCapture, LocatesTheFirstMismatchByItsToken) {
  const ref::Recipe& recipe = ref::preset("dsv32-ref");
  KeyObservation obs = observe(recipe);
  const int64_t token = 17;
  const int64_t slot = obs.slots[token];
  const ref::PagedCacheLayout layout(recipe.key_quant.format, kPageSize);
  const ref::CacheLocation at{slot / kPageSize, static_cast<int>(slot % kPageSize)};
  obs.cache[layout.value_offset(at) + 9] ^= 0x01;
  obs.cache[layout.scale_offset(at) + 2] ^= 0x40;
  const CaptureVerdict v = compare_capture(obs, recipe);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.mismatches, 2);
  EXPECT_EQ(v.mismatched_tokens, 1);
  ASSERT_TRUE(v.first.has_value());
  EXPECT_EQ(v.first_token, token);
  EXPECT_EQ(v.first->sequence, obs.sequences[token]);
  EXPECT_EQ(v.first->position, obs.positions[token]);
  EXPECT_EQ(v.first->page, at.page);
  EXPECT_EQ(v.first->slot, at.offset);
  EXPECT_EQ(v.first->field, CacheField::kValue);
  EXPECT_EQ(v.first->element, 9);
  const std::string text = v.describe();
  EXPECT_NE(text.find("First mismatch: token 17 (sequence " + std::to_string(obs.sequences[token]) + ", position " +
                      std::to_string(obs.positions[token]) + "), page " + std::to_string(at.page) + " slot " +
                      std::to_string(at.offset) + ", value element 9, byte "),
            std::string::npos)
      << text;
  const nlohmann::json j = to_json(v);
  EXPECT_EQ(j["first_mismatch"]["token"], token);
  EXPECT_EQ(j["mismatched_bytes"], 2);
}

TEST(CompareCapture, RejectsInconsistentObservations) {
  const ref::Recipe& recipe = ref::preset("dsv32-ref");
  const KeyObservation good = observe(recipe);
  const auto rejected = [&](KeyObservation obs) {
    EXPECT_THROW(
        try { compare_capture(obs, recipe); } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
          throw;
        },
        Error);
  };
  KeyObservation obs = good;
  obs.slots[4] = obs.slots[5];  // two tokens in one slot
  rejected(obs);
  obs = good;
  obs.slots[0] = kPages * kPageSize;  // outside the cache
  rejected(obs);
  obs = good;
  obs.positions[0] = 40;  // beyond the supplied table
  rejected(obs);
  obs = good;
  obs.cache.pop_back();
  rejected(obs);
  obs = good;
  obs.norm_bias.clear();  // LayerNorm needs it
  rejected(obs);
  EXPECT_THROW(compare_capture(good, ref::preset("dsv32-bf16")), Error);  // another layout
}

TEST(DetectCapture, NamesTheWriterAndTheFieldOfANearMiss) {
  Detection d = detect_capture(observe(ref::preset("vllm-v32")), ref::presets());
  EXPECT_EQ(d.matches, (std::vector<std::string>{"vllm-v32"})) << d.describe();
  ref::Recipe mutant = ref::preset("dsv32-ref");
  mutant.key_norm.eps = 1e-5f;
  d = detect_capture(observe(mutant), ref::presets());
  ASSERT_TRUE(d.matches.empty()) << d.describe();
  EXPECT_EQ(d.closest, "dsv32-ref");
  ASSERT_EQ(d.explaining.size(), 1u) << d.describe();
  EXPECT_EQ(d.explaining[0].change, "key_norm.eps: 9.999999974752427e-07 -> 9.999999747378752e-06");
}

}  // namespace
}  // namespace dsaf::oracle
