// Mutation test: three implementations with a planted bug each are run against the
// reference through a property; RapidCheck must find each bug, and the shrunk
// counterexample must be small (at most 2 pages and 8 tokens). The mutants stand in for a
// kernel under test; the reference itself is not modified.
//   neox-interleaved-swap   RoPE pairs (2i, 2i+1) where the recipe says (i, i+32)
//   page-offset-plus-one    each key written one slot later in its page
//   reciprocal-for-divide   x * fl(1/s) where the recipe divides x / s (plain scales)
#include <rapidcheck.h>

#include <gtest/gtest.h>

#include "properties/page_layout.h"
#include "properties/reference_cache.h"
#include "reference/numeric/minifloat.h"

namespace dsaf::properties {
namespace {

enum class Mutant { kNone, kPairingSwap, kOffsetPlusOne, kReciprocalForDivide };

// The implementation under test: the reference pipeline with the planted bug.
std::vector<uint8_t> mutant_cache(Mutant mutant, const ref::Recipe& recipe, const PagedSequences& l,
                                  const KeyInputs& in) {
  ref::Recipe r = recipe;
  if (mutant == Mutant::kPairingSwap) r.rope.pairing = ref::RopePairing::kInterleaved;
  if (mutant == Mutant::kReciprocalForDivide) r.key_quant.apply = ref::ScaleApply::kTimesReciprocal;
  if (mutant != Mutant::kOffsetPlusOne) return reference_key_cache(r, l, in);
  const ref::PagedCacheLayout layout(r.key_quant.format, l.page_size);
  int64_t longest = 1;
  for (int64_t len : l.seq_lens) longest = std::max(longest, len);
  const ref::RopeTable rope(r.rope.table, static_cast<int>(longest));
  std::vector<uint8_t> cache(l.num_pages * layout.page_bytes(), 0xAA);
  for_each_token(l, [&](int s, int64_t pos, int64_t t) {
    ref::CacheLocation at = layout.locate(l.page_tables[s], pos, l.num_pages);
    at.offset = (at.offset + 1) % l.page_size;
    layout.store(cache, at, ref::run_key_path(r, in.rows[t].data(), static_cast<int>(pos),
                                              {in.norm_weight.data(), in.norm_bias.data()}, rope));
  });
  return cache;
}

// The recipe the reciprocal bug is visible in: plain (non power-of-two) fp8 scales,
// values divided by them, and no norm or Hadamard, so the generated values reach the
// quantiser unchanged in the 64 dims RoPE does not touch.
ref::Recipe plain_divide_recipe() {
  ref::Recipe r = ref::preset("sglang-v32-fused");
  r.name = "plain-divide";
  r.key_norm.kind = ref::NormKind::kNone;
  r.hadamard = false;
  r.key_rounding = {};
  r.rope.placement = ref::RopePlacement::kTrailing;
  r.key_quant.apply = ref::ScaleApply::kDivide;
  r.key_quant.pow2 = ref::ScalePow2::kNone;
  return r;
}

// Rows whose values sit on e4m3fn rounding midpoints of the block's own scale: the
// amax element fixes s = fl(amax / 448); the others are fl(m * s) for midpoints m, where
// x / s and x * fl(1/s) round to different codes when their fp32 results straddle m.
std::vector<float> gen_midpoint_row() {
  const float amax = 448.0f * (1.0f + *rc::gen::inRange(1, 1 << 20) * 0x1p-21f);
  const float s = amax / 448.0f;
  std::vector<float> row(128, 0.0f);
  row[0] = amax;
  for (int i = 1; i < 64; ++i) {
    const int code = *rc::gen::inRange(8, 0x7D);  // normal codes below the max
    const float m = 0.5f * (ref::decode_e4m3fn(static_cast<uint8_t>(code)) +
                            ref::decode_e4m3fn(static_cast<uint8_t>(code + 1)));
    row[i] = m * s;
  }
  return row;
}

struct Found {
  bool failed = false;
  int64_t pages = 0, tokens = 0;
  std::string last;
};

Found hunt(Mutant mutant) {
  Found found;
  const ref::Recipe recipe = mutant == Mutant::kReciprocalForDivide ? plain_divide_recipe() : ref::preset("dsv32-ref");
  const bool passed = rc::check(std::string("mutant ") + std::to_string(static_cast<int>(mutant)), [&] {
    const PagedSequences l = *gen_paged_sequences(3, 40);
    KeyInputs in;
    for (int64_t t = 0; t < l.tokens(); ++t) {
      in.rows.push_back(mutant == Mutant::kReciprocalForDivide ? gen_midpoint_row() : *gen_activation_row());
    }
    if (mutant_cache(mutant, recipe, l, in) != reference_key_cache(recipe, l, in)) {
      // RapidCheck re-runs the minimal counterexample last, so this ends as its size.
      found.failed = true;
      found.pages = l.used_pages();
      found.tokens = l.tokens();
      found.last = l.describe();
      RC_FAIL("cache bytes differ from the reference");
    }
  });
  found.failed = found.failed && !passed;
  return found;
}

TEST(MutationTest, EachPlantedBugIsFoundAndShrunkToAtMostTwoPagesAndEightTokens) {
  for (Mutant m : {Mutant::kPairingSwap, Mutant::kOffsetPlusOne, Mutant::kReciprocalForDivide}) {
    const Found f = hunt(m);
    ASSERT_TRUE(f.failed) << "mutant " << static_cast<int>(m) << " was not found";
    EXPECT_LE(f.pages, 2) << f.last;
    EXPECT_LE(f.tokens, 8) << f.last;
    std::printf("mutant %d found; shrunk case: %s\n", static_cast<int>(m), f.last.c_str());
  }
}

TEST(MutationTest, TheUnmutatedImplementationPasses) {
  EXPECT_FALSE(hunt(Mutant::kNone).failed);
}

}  // namespace
}  // namespace dsaf::properties
