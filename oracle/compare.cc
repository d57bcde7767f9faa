// File: compare.cc — a captured key cache against a recipe (compare.h).
#include "oracle/compare.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "reference/error.h"
#include "reference/paged_cache.h"
#include "reference/pipeline.h"
#include "reference/quantize.h"
#include "reference/recipe_fields.h"
#include "reference/rope.h"

namespace dsaf::oracle {
namespace {

using ref::kHeadDim;

[[noreturn]] void bad(const std::string& what) { throw_bad_input("key observation: " + what); }

// The token that owns each slot of the cache (-1: none), after checking that the
// observation's tensors agree with each other and with the cache.
std::vector<int64_t> slot_owners(const KeyObservation& obs) {
  const int64_t T = obs.tokens();
  if (T < 1 || static_cast<int64_t>(obs.key_inputs.size()) != T * kHeadDim) {
    bad(fmt::format("key inputs hold {} values; {} positions need [T][128] with T >= 1", obs.key_inputs.size(), T));
  }
  if (static_cast<int64_t>(obs.slots.size()) != T) bad(fmt::format("{} slots for {} tokens", obs.slots.size(), T));
  if (!obs.sequences.empty() && static_cast<int64_t>(obs.sequences.size()) != T) {
    bad(fmt::format("{} sequence entries for {} tokens", obs.sequences.size(), T));
  }
  for (const auto* norm : {&obs.norm_weight, &obs.norm_bias}) {
    if (!norm->empty() && norm->size() != static_cast<size_t>(kHeadDim)) bad("norm weight and bias hold 128 values or none");
  }
  const ref::PagedCacheLayout layout(obs.layout, obs.page_size);
  if (obs.num_pages < 1 || static_cast<int64_t>(obs.cache.size()) != obs.num_pages * layout.page_bytes()) {
    bad(fmt::format("the cache holds {} bytes, not {} pages of {} bytes", obs.cache.size(), obs.num_pages,
                    layout.page_bytes()));
  }
  std::vector<int64_t> owner(static_cast<size_t>(obs.num_pages * obs.page_size), -1);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t slot = obs.slots[t];
    if (slot < 0) continue;
    if (slot >= static_cast<int64_t>(owner.size())) bad(fmt::format("token {} names slot {} of {}", t, slot, owner.size()));
    if (owner[slot] >= 0) bad(fmt::format("tokens {} and {} are both written to slot {}", owner[slot], t, slot));
    owner[slot] = t;
  }
  return owner;
}

std::string format_name(ref::StorageFormat format) {
  for (const auto& [value, name] : ref::enum_names(ref::StorageFormat{})) {
    if (value == format) return name;
  }
  return "unknown";
}

ref::CacheLocation location_of(int64_t slot, int page_size) {
  return {slot / page_size, static_cast<int>(slot % page_size)};
}

ref::RopeTable rope_table(const KeyObservation& obs, const ref::Recipe& recipe) {
  if (!obs.rope_cos.empty() || !obs.rope_sin.empty()) return ref::RopeTable(obs.rope_cos, obs.rope_sin);
  return ref::RopeTable(recipe.rope.table, obs.positions);  // the rows of the tokens' positions
}

// "page 16 slot 5, value element 7, byte ...": the located mismatch without its owner,
// which ByteMismatch::describe names as the verdict's (sequence, position) pair.
std::string element_text(const ByteMismatch& m) {
  const std::string text = m.describe();
  const size_t cut = text.find("), ");
  return fmt::format("page {} slot {}, {}", m.page, m.slot, cut == std::string::npos ? text : text.substr(cut + 3));
}

}  // namespace

bool inputs_fit(const KeyObservation& obs, const ref::Recipe& recipe) {
  switch (recipe.key_norm.kind) {
    case ref::NormKind::kNone: return true;
    case ref::NormKind::kRmsNorm: return !obs.norm_weight.empty();
    case ref::NormKind::kLayerNorm: return !obs.norm_weight.empty() && !obs.norm_bias.empty();
  }
  return false;
}

bool layout_fits(const KeyObservation& obs, const ref::Recipe& recipe) {
  const ref::StorageFormat f = recipe.key_quant.format;
  return f != ref::StorageFormat::kNone && ref::value_bytes_per_head(f) == ref::value_bytes_per_head(obs.layout) &&
         ref::scale_bytes_per_head(f) == ref::scale_bytes_per_head(obs.layout);
}

std::vector<uint8_t> expected_cache(const ref::Recipe& recipe, const KeyObservation& obs) {
  slot_owners(obs);
  if (!layout_fits(obs, recipe)) {
    bad(fmt::format("recipe {} writes a {} cache ({} bytes per token), the capture's is {} ({} bytes per token)",
                    recipe.name, format_name(recipe.key_quant.format), ref::cache_bytes_per_token(recipe.key_quant.format),
                    format_name(obs.layout), ref::cache_bytes_per_token(obs.layout)));
  }
  if (!inputs_fit(obs, recipe)) {
    bad(fmt::format("recipe {}'s key norm needs a norm weight{}, which the capture does not hold", recipe.name,
                    recipe.key_norm.kind == ref::NormKind::kLayerNorm ? " and bias" : ""));
  }
  const ref::PagedCacheLayout layout(recipe.key_quant.format, obs.page_size);
  const ref::RopeTable rope = rope_table(obs, recipe);
  const ref::NormParams norm{obs.norm_weight.empty() ? nullptr : obs.norm_weight.data(),
                             obs.norm_bias.empty() ? nullptr : obs.norm_bias.data()};
  std::vector<uint8_t> cache = obs.cache;
  for (int64_t t = 0; t < obs.tokens(); ++t) {
    if (obs.slots[t] < 0) continue;
    const ref::StoredHead head =
        ref::run_key_path(recipe, obs.key_inputs.data() + t * kHeadDim, obs.positions[t], norm, rope);
    layout.store(cache, location_of(obs.slots[t], obs.page_size), head);
  }
  return cache;
}

CaptureVerdict compare_capture(const KeyObservation& obs, const ref::Recipe& recipe) {
  const std::vector<uint8_t> expected = expected_cache(recipe, obs);
  const std::vector<int64_t> owner = slot_owners(obs);
  const ref::PagedCacheLayout layout(recipe.key_quant.format, obs.page_size);
  CaptureVerdict v;
  v.recipe = recipe.name;
  v.supplied_rope = !obs.rope_cos.empty();
  v.tokens = obs.tokens();
  const int value_bytes = ref::value_bytes_per_head(layout.format());
  const int scale_bytes = ref::scale_bytes_per_head(layout.format());
  for (int64_t t = 0; t < v.tokens; ++t) {
    if (obs.slots[t] < 0) continue;
    ++v.written_tokens;
    const ref::CacheLocation at = location_of(obs.slots[t], obs.page_size);
    const int64_t vo = layout.value_offset(at), so = layout.scale_offset(at);
    const bool same = std::memcmp(expected.data() + vo, obs.cache.data() + vo, value_bytes) == 0 &&
                      std::memcmp(expected.data() + so, obs.cache.data() + so, scale_bytes) == 0;
    v.mismatched_tokens += same ? 0 : 1;
  }
  v.bytes = v.written_tokens * layout.bytes_per_token();
  // Every slot as one pseudo-sequence's positions, so that the verdict locates any byte;
  // bytes outside written slots are equal by construction of `expected`.
  std::vector<int32_t> all_pages(static_cast<size_t>(obs.num_pages));
  std::iota(all_pages.begin(), all_pages.end(), 0);
  const ByteVerdict bytes = compare_paged_cache(layout, {{all_pages}, {obs.num_pages * obs.page_size}}, expected, obs.cache);
  v.mismatches = bytes.mismatches;
  v.pass = v.mismatches == 0;
  if (bytes.first) {
    v.first = bytes.first;
    v.first_token = owner[v.first->page * obs.page_size + v.first->slot];
    v.first->sequence = obs.sequences.empty() ? -1 : obs.sequences[v.first_token];
    v.first->position = obs.positions[v.first_token];
  }
  return v;
}

std::string CaptureVerdict::describe() const {
  std::string out =
      pass ? fmt::format("PASS byte-exact against {}: {} written tokens, {} bytes compared, 0 differ", recipe,
                         written_tokens, bytes)
           : fmt::format("FAIL byte-exact against {}: {} of {} bytes differ, in {} of {} written tokens", recipe,
                         mismatches, bytes, mismatched_tokens, written_tokens);
  if (written_tokens < tokens) out += fmt::format(" ({} of {} tokens have no slot: not written)", tokens - written_tokens, tokens);
  out += supplied_rope ? "; RoPE rows from the capture's table." : "; RoPE rows from the recipe's table.";
  if (first) {
    const std::string owner = first->sequence >= 0 ? fmt::format("sequence {}, position {}", first->sequence, first->position)
                                                   : fmt::format("position {}", first->position);
    out += fmt::format(" First mismatch: token {} ({}), {}.", first_token, owner, element_text(*first));
  }
  return out + " Only slots a token was written to are compared; the rest of the cache is whatever the buffer held.";
}

nlohmann::json to_json(const CaptureVerdict& v) {
  nlohmann::json j = {{"recipe", v.recipe},
                      {"pass", v.pass},
                      {"tokens", v.tokens},
                      {"written_tokens", v.written_tokens},
                      {"bytes_compared", v.bytes},
                      {"mismatched_bytes", v.mismatches},
                      {"mismatched_tokens", v.mismatched_tokens},
                      {"rope_table", v.supplied_rope ? "capture" : "recipe"},
                      {"compared", "written slots only"},
                      {"text", v.describe()}};
  if (v.first) {
    const ByteMismatch& m = *v.first;
    j["first_mismatch"] = {{"token", v.first_token},       {"sequence", m.sequence},
                           {"position", m.position},       {"page", m.page},
                           {"slot", m.slot},               {"field", to_string(m.field)},
                           {"element", m.element},         {"byte_offset", m.byte_offset},
                           {"expected_code", m.expected_code}, {"actual_code", m.actual_code},
                           {"expected_value", m.expected_value}, {"actual_value", m.actual_value}};
  }
  return j;
}

}  // namespace dsaf::oracle
