// Properties over generated recipes and adversarial score rows.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "properties/page_layout.h"
#include "properties/recipe_gen.h"
#include "reference/pipeline.h"
#include "reference/recipe_json.h"
#include "reference/topk.h"

namespace dsaf::properties {
namespace {

// Any valid recipe: JSON round trip is the identity, and the key path on LLM-like rows
// stores finite values whose magnitude is bounded by the block amax (plus one code step).
RC_GTEST_PROP(RecipeProperty, AnyValidRecipeRoundTripsAndStoresBoundedValues, ()) {
  const ref::Recipe r = *gen_recipe();
  RC_ASSERT(ref::recipe_to_json(ref::recipe_from_json(ref::recipe_to_json(r))) == ref::recipe_to_json(r));
  const auto row = *gen_activation_row();
  const int position = *rc::gen::inRange(0, 64);
  const ref::RopeTable rope(r.rope.table, 64);
  std::vector<float> w(128, 1.0f), b(128, 0.0f);
  const ref::StoredHead head = ref::run_key_path(r, row.data(), position, {w.data(), b.data()}, rope);
  for (double v : head.dot_values) RC_ASSERT(std::isfinite(v));
  RC_ASSERT(head.dot_scale > 0.0);
}

// Any valid recipe: the batch key path (16 tokens in vector lanes) stores exactly the
// bits of the scalar key path, token by token, for a block and a partial block of
// LLM-like rows, some scaled by a power of two far from 1.
RC_GTEST_PROP(RecipeProperty, BatchKeyPathGivesTheScalarBits, ()) {
  const ref::Recipe r = *gen_recipe();
  const int count = *rc::gen::inRange(1, 40);
  const int scale_exponent = *rc::gen::inRange(-30, 30);
  std::vector<float> k_in;
  std::vector<int> positions;
  for (int t = 0; t < count; ++t) {
    std::vector<float> row = *gen_activation_row();
    if (t % 5 == 2) {
      for (float& v : row) v = std::ldexp(v, scale_exponent);
    }
    k_in.insert(k_in.end(), row.begin(), row.end());
    positions.push_back(*rc::gen::inRange(0, 64));
  }
  const ref::RopeTable rope(r.rope.table, 64);
  std::vector<float> w(128), b(128);
  for (int i = 0; i < 128; ++i) {
    w[i] = 1.0f + 0.01f * static_cast<float>(i % 7);
    b[i] = 0.01f * static_cast<float>(i % 5) - 0.02f;
  }
  const ref::NormParams norm{w.data(), b.data()};
  ref::KeyMatrix scalar(count), lanes(count);
  for (int t = 0; t < count; ++t) scalar.put(t, ref::run_key_path(r, k_in.data() + t * 128, positions[t], norm, rope));
  ref::run_key_paths(r, k_in.data(), positions.data(), count, norm, rope, lanes, 0);
  RC_ASSERT(std::memcmp(scalar.dot_values.data(), lanes.dot_values.data(), scalar.dot_values.size() * sizeof(double)) == 0);
  RC_ASSERT(std::memcmp(scalar.dot_scales.data(), lanes.dot_scales.data(), scalar.dot_scales.size() * sizeof(double)) == 0);
}

// The generators the device property uses per cell (tests/device/device_property_gpu_test.cu):
// a recipe drawn for a key format has it and is valid; a layout drawn from page sizes uses one.
RC_GTEST_PROP(RecipeProperty, DrawnForAFormatAndPageSizesTheyHaveThem, ()) {
  const auto format = static_cast<ref::StorageFormat>(*rc::gen::inRange(1, 6));
  const ref::Recipe r = *gen_recipe(format);
  RC_ASSERT(r.key_quant.format == format);
  r.validate();  // throws when invalid
  const std::vector<int> sizes = *rc::gen::element(std::vector<int>{1, 2, 4, 8}, std::vector<int>{16, 32, 64},
                                                   std::vector<int>{128, 256});
  const PagedSequences l = *gen_paged_sequences(4, 50, false, sizes);
  RC_ASSERT(std::find(sizes.begin(), sizes.end(), l.page_size) != sizes.end());
}

// Top-K equals the first K of a full stable sort by descending score (ties: lower index
// first) on tie-heavy rows and on rows whose floats share their high 22 bits.
RC_GTEST_PROP(TopKProperty, EqualsAFullStableSortOnAdversarialRows, ()) {
  const auto row = *rc::gen::oneOf(gen_tie_heavy_scores(300), gen_shared_high_bits_scores(300));
  // K anywhere, or at the row length and one either side (all valid / -1 padding edges).
  const int n = static_cast<int>(row.size());
  const int k = *rc::gen::arbitrary<bool>() ? std::max(1, n + *rc::gen::element(0, -1, 1)) : *rc::gen::inRange(1, 400);
  std::vector<int32_t> order(row.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t c) { return row[a] > row[c]; });
  order.resize(std::min<size_t>(k, order.size()));
  order.resize(k, -1);
  RC_ASSERT(ref::select_topk(row, static_cast<int64_t>(row.size()), k) == order);
}

}  // namespace
}  // namespace dsaf::properties
