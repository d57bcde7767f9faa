// File: detect.cc — recipe detection from cache bytes (detect.h).
#include "oracle/detect.h"

#include <algorithm>
#include <limits>

#include "reference/error.h"
#include "reference/paged_cache.h"
#include "reference/pipeline.h"
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

// "a.b: x -> y" for the fields where two recipes' JSON differ (names excluded).
std::string describe_change(const Recipe& from, const Recipe& to) {
  nlohmann::json a = ref::recipe_to_json(from), b = ref::recipe_to_json(to);
  for (auto* j : {&a, &b}) {
    j->erase("name");
    j->erase("description");
    j->erase("source");
  }
  std::string out;
  for (const auto& op : nlohmann::json::diff(a, b)) {
    const std::string path = op["path"];
    const nlohmann::json::json_pointer ptr(path);
    std::string dotted = path.substr(1);
    std::replace(dotted.begin(), dotted.end(), '/', '.');
    if (dotted == "cache_bytes_per_token") continue;
    out += (out.empty() ? "" : "; ") + dotted + ": " + a.at(ptr).dump() + " -> " + b.at(ptr).dump();
  }
  return out;
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
  std::vector<Recipe> variants;
  const auto with = [&](auto mutate) {
    Recipe r = recipe;
    mutate(r);
    variants.push_back(r);
  };
  using ref::ContractedProduct;
  using ref::ReductionOrder;
  using ref::RsqrtKind;
  using ref::ScaleApply;
  using ref::ScaleDivisor;
  using ref::ScalePow2;
  for (auto order : {ReductionOrder::kSequential, ReductionOrder::kWarpTree}) {
    with([&](Recipe& r) { r.key_norm.order = order; });
  }
  with([](Recipe& r) { r.key_norm.fma_contraction = !r.key_norm.fma_contraction; });
  for (auto kind : {RsqrtKind::kCorrectlyRounded, RsqrtKind::kSm90Approx}) {
    with([&](Recipe& r) { r.key_norm.rsqrt = kind; });
  }
  for (float eps : {1e-6f, 1e-5f}) with([&](Recipe& r) { r.key_norm.eps = eps; });
  with([](Recipe& r) {
    r.rope.pairing = r.rope.pairing == ref::RopePairing::kNeox ? ref::RopePairing::kInterleaved
                                                                : ref::RopePairing::kNeox;
  });
  with([](Recipe& r) {
    r.rope.placement = r.rope.placement == ref::RopePlacement::kLeading
                           ? ref::RopePlacement::kTrailing
                           : ref::RopePlacement::kLeading;
  });
  for (auto fma : {ContractedProduct::kNone, ContractedProduct::kFirst, ContractedProduct::kSecond}) {
    with([&](Recipe& r) { r.rope.fma = fma; });
  }
  with([](Recipe& r) { r.hadamard = !r.hadamard; });
  with([](Recipe& r) { r.key_rounding.input = !r.key_rounding.input; });
  with([](Recipe& r) { r.key_rounding.norm = !r.key_rounding.norm; });
  with([](Recipe& r) { r.key_rounding.rope = !r.key_rounding.rope; });
  with([](Recipe& r) { r.key_rounding.hadamard = !r.key_rounding.hadamard; });
  for (auto d : {ScaleDivisor::kDivide, ScaleDivisor::kTimesReciprocal}) {
    with([&](Recipe& r) { r.key_quant.divisor = d; });
  }
  for (auto p : {ScalePow2::kNone, ScalePow2::kExponentBitsCeil, ScalePow2::kLog2Ceil}) {
    with([&](Recipe& r) { r.key_quant.pow2 = p; });
  }
  for (auto a : {ScaleApply::kDivide, ScaleApply::kTimesReciprocal}) {
    with([&](Recipe& r) { r.key_quant.apply = a; });
  }
  for (float floor : {1e-4f, 1e-10f}) with([&](Recipe& r) { r.key_quant.amax_floor = floor; });
  with([](Recipe& r) {
    r.key_quant.saturation = r.key_quant.saturation == ref::Saturation::kSatFinite
                                 ? ref::Saturation::kNonSaturating
                                 : ref::Saturation::kSatFinite;
  });
  with([](Recipe& r) {
    r.key_quant.fp4_rounding = r.key_quant.fp4_rounding == ref::Rounding::kNearestEven
                                   ? ref::Rounding::kNearestTiesTowardZero
                                   : ref::Rounding::kNearestEven;
  });
  // The query path's fields (verify names query-side bugs with them too).
  for (auto d : {ScaleDivisor::kDivide, ScaleDivisor::kTimesReciprocal}) {
    with([&](Recipe& r) { r.query_quant.divisor = d; });
  }
  for (auto p : {ScalePow2::kNone, ScalePow2::kExponentBitsCeil, ScalePow2::kLog2Ceil}) {
    with([&](Recipe& r) { r.query_quant.pow2 = p; });
  }
  for (auto a : {ScaleApply::kDivide, ScaleApply::kTimesReciprocal}) {
    with([&](Recipe& r) { r.query_quant.apply = a; });
  }
  for (float floor : {1e-4f, 1e-10f}) with([&](Recipe& r) { r.query_quant.amax_floor = floor; });
  with([](Recipe& r) { r.query_rounding.rope = !r.query_rounding.rope; });
  with([](Recipe& r) { r.query_rounding.hadamard = !r.query_rounding.hadamard; });
  with([](Recipe& r) {
    r.weights_fold = r.weights_fold == ref::WeightsFold::kSeparateFactors ? ref::WeightsFold::kCombinedConstant
                                                                           : ref::WeightsFold::kSeparateFactors;
  });
  std::vector<std::pair<std::string, Recipe>> out;
  for (Recipe& r : variants) {
    const std::string change = describe_change(recipe, r);
    if (change.empty()) continue;  // the alternative equals the recipe
    try {
      r.validate();
    } catch (const Error&) {
      continue;  // e.g. a power-of-two rule with a floor it cannot use
    }
    r.name = recipe.name + " [" + change + "]";
    out.emplace_back(change, r);
  }
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
