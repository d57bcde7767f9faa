// File: detect.cc — recipe detection from cache bytes (detect.h).
#include "oracle/detect.h"

#include <algorithm>
#include <limits>
#include <type_traits>
#include <utility>

#include "reference/error.h"
#include "reference/paged_cache.h"
#include "reference/pipeline.h"
#include "reference/recipe_fields.h"
#include "reference/recipe_json.h"
#include "reference/rope.h"

namespace dsaf::oracle {
namespace {

using ref::Recipe;

int64_t token_count(const KeyObservation& obs) {
  if (obs.key_inputs.empty() || obs.key_inputs.size() % ref::kHeadDim != 0) {
    throw_bad_input("detect: key inputs must be [T][128] with T >= 1");
  }
  return static_cast<int64_t>(obs.key_inputs.size() / ref::kHeadDim);
}

CacheOwnership owners_of(const KeyObservation& obs) {
  return {{obs.page_table}, {token_count(obs)}};
}

}  // namespace

std::vector<uint8_t> expected_cache(const Recipe& recipe, const KeyObservation& obs) {
  const int64_t T = token_count(obs);
  const ref::PagedCacheLayout layout(recipe.key_quant.format, obs.page_size);
  if (static_cast<int64_t>(obs.cache.size()) != obs.num_pages * layout.page_bytes()) {
    throw_bad_input("detect: cache size does not match " + std::to_string(obs.num_pages) +
                    " pages of the recipe's layout");
  }
  const ref::RopeTable rope(recipe.rope.table, static_cast<int>(T));
  const ref::NormParams norm{obs.norm_weight.empty() ? nullptr : obs.norm_weight.data(),
                             obs.norm_bias.empty() ? nullptr : obs.norm_bias.data()};
  std::vector<uint8_t> cache = obs.cache;
  for (int64_t t = 0; t < T; ++t) {
    const ref::StoredHead head = ref::run_key_path(
        recipe, obs.key_inputs.data() + t * ref::kHeadDim, static_cast<int>(t), norm, rope);
    layout.store(cache, layout.locate(obs.page_table, t, obs.num_pages), head);
  }
  return cache;
}

std::vector<std::pair<std::string, Recipe>> single_field_changes(const Recipe& recipe) {
  std::vector<std::pair<std::string, Recipe>> out;
  const auto add = [&](Recipe r) {
    const std::string change = ref::describe_field_changes(recipe, r);
    if (change.empty()) return;  // the alternative equals the recipe
    try {
      r.validate();
    } catch (const Error&) {
      return;  // e.g. a power-of-two rule with a floor it cannot use
    }
    r.name = recipe.name + " [" + change + "]";
    out.emplace_back(change, std::move(r));
  };
  // Every other value of each detected field (reference/recipe_fields.h kDetected).
  ref::for_each_field([&](const ref::FieldInfo& f, auto member) {
    if (!f.has(ref::kDetected)) return;
    using T = std::decay_t<decltype(member(recipe))>;
    if constexpr (std::is_enum_v<T>) {
      for (const auto& [value, name] : ref::enum_names(T{})) {
        Recipe r = recipe;
        member(r) = value;
        add(std::move(r));
      }
    } else if constexpr (std::is_same_v<T, bool>) {
      Recipe r = recipe;
      member(r) = !member(r);
      add(std::move(r));
    } else if constexpr (std::is_floating_point_v<T>) {
      for (int i = 0; i < f.num_alternatives; ++i) {
        Recipe r = recipe;
        member(r) = static_cast<T>(f.alternatives[i]);
        add(std::move(r));
      }
    }
  });
  return out;
}

Detection detect_key_recipe(const KeyObservation& obs, const std::vector<Recipe>& candidates) {
  Detection d;
  int64_t best = std::numeric_limits<int64_t>::max();
  const Recipe* closest = nullptr;
  for (const Recipe& r : candidates) {
    if (r.key_quant.format == ref::StorageFormat::kNone) {
      d.skipped.push_back(r.name);
      continue;
    }
    const ref::PagedCacheLayout layout(r.key_quant.format, obs.page_size);
    if (static_cast<int64_t>(obs.cache.size()) != obs.num_pages * layout.page_bytes()) {
      d.skipped.push_back(r.name);
      continue;
    }
    const ByteVerdict v = compare_paged_cache(layout, owners_of(obs), expected_cache(r, obs), obs.cache);
    if (v.pass) {
      d.matches.push_back(r.name);
    } else if (v.mismatches < best) {
      best = v.mismatches;
      closest = &r;
      d.closest_verdict = v;
    }
  }
  if (!d.matches.empty() || closest == nullptr) return d;
  d.closest = closest->name;
  for (const auto& [change, variant] : single_field_changes(*closest)) {
    const ref::PagedCacheLayout layout(variant.key_quant.format, obs.page_size);
    if (static_cast<int64_t>(obs.cache.size()) != obs.num_pages * layout.page_bytes()) continue;
    const ByteVerdict v =
        compare_paged_cache(layout, owners_of(obs), expected_cache(variant, obs), obs.cache);
    if (v.pass) {
      d.explaining.push_back({change, 0});
    } else if (v.mismatches < best) {
      d.best_changes.push_back({change, v.mismatches});
    }
  }
  std::sort(d.best_changes.begin(), d.best_changes.end(),
            [](const FieldChange& a, const FieldChange& b) { return a.mismatches < b.mismatches; });
  return d;
}

std::string Detection::describe() const {
  std::string out;
  if (!matches.empty()) {
    out = "byte-exact match:";
    for (const std::string& m : matches) out += " " + m;
    return out;
  }
  if (closest.empty()) return "no candidate recipe has this cache layout";
  out = "no recipe matches; closest: " + closest + " (" +
        std::to_string(closest_verdict.mismatches) + " differing bytes). " +
        closest_verdict.describe();
  if (!explaining.empty()) {
    out += "\nexplained by one field change:";
    for (const FieldChange& c : explaining) out += "\n  " + c.change;
  } else if (!best_changes.empty()) {
    out += "\nno single field change explains it; the closest single changes:";
    for (size_t i = 0; i < std::min<size_t>(3, best_changes.size()); ++i) {
      out += "\n  " + best_changes[i].change + " (" + std::to_string(best_changes[i].mismatches) +
             " differing bytes)";
    }
  }
  return out;
}

}  // namespace dsaf::oracle
