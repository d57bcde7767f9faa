// Properties over generated recipes and adversarial score rows.
#include <algorithm>
#include <cmath>
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
