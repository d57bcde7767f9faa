// File: reference_cache.h
// Predicates' building block: the paged key cache the reference writes for a generated
// layout and generated input rows (tokens in sequence order, positions 0..len-1).
#pragma once

#include <cstdint>
#include <vector>

#include "properties/page_layout.h"
#include "reference/paged_cache.h"
#include "reference/pipeline.h"
#include "reference/recipe.h"
#include "reference/rope.h"

namespace dsaf::properties {

struct KeyInputs {
  std::vector<std::vector<float>> rows;  // one row of 128 per token, sequence-major
  std::vector<float> norm_weight = std::vector<float>(128, 1.0f);
  std::vector<float> norm_bias = std::vector<float>(128, 0.0f);
};

// Calls f(seq, pos, token index) for every token of the layout, in order.
template <class F>
void for_each_token(const PagedSequences& l, F f) {
  int64_t t = 0;
  for (size_t s = 0; s < l.seq_lens.size(); ++s) {
    for (int64_t p = 0; p < l.seq_lens[s]; ++p) f(static_cast<int>(s), p, t++);
  }
}

inline std::vector<uint8_t> reference_key_cache(const ref::Recipe& recipe, const PagedSequences& l,
                                                const KeyInputs& in, uint8_t fill = 0xAA) {
  const ref::PagedCacheLayout layout(recipe.key_quant.format, l.page_size);
  int64_t longest = 1;
  for (int64_t len : l.seq_lens) longest = std::max(longest, len);
  const ref::RopeTable rope(recipe.rope.table, static_cast<int>(longest));
  const ref::NormParams norm{in.norm_weight.data(), in.norm_bias.data()};
  std::vector<uint8_t> cache(l.num_pages * layout.page_bytes(), fill);
  for_each_token(l, [&](int s, int64_t pos, int64_t t) {
    const ref::StoredHead head = ref::run_key_path(recipe, in.rows[t].data(), static_cast<int>(pos), norm, rope);
    layout.store(cache, layout.locate(l.page_tables[s], pos, l.num_pages), head);
  });
  return cache;
}

}  // namespace dsaf::properties
