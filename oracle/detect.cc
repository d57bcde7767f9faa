// File: detect.cc — recipe detection from captured cache bytes (detect.h).
#include "oracle/detect.h"

#include <algorithm>
#include <limits>
#include <type_traits>
#include <utility>

#include "reference/error.h"
#include "reference/recipe_fields.h"
#include "reference/recipe_json.h"

namespace dsaf::oracle {

using ref::Recipe;

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

Detection detect_capture(const KeyObservation& obs, const std::vector<Recipe>& candidates,
                         const DetectProgress& progress) {
  Detection d;
  int64_t best = std::numeric_limits<int64_t>::max();
  const Recipe* closest = nullptr;
  int64_t done = 0;
  for (const Recipe& r : candidates) {
    if (progress) progress("candidates", done++, static_cast<int64_t>(candidates.size()));
    if (!layout_fits(obs, r)) {
      d.skipped.push_back(r.name);
      continue;
    }
    if (!inputs_fit(obs, r)) {
      d.lacking_inputs.push_back(r.name);
      continue;
    }
    const CaptureVerdict v = compare_capture(obs, r);
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
  const auto changes = single_field_changes(*closest);
  done = 0;
  for (const auto& [change, variant] : changes) {
    if (progress) progress("single-field changes", done++, static_cast<int64_t>(changes.size()));
    if (!layout_fits(obs, variant) || !inputs_fit(obs, variant)) continue;
    const CaptureVerdict v = compare_capture(obs, variant);
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
    out += ".";
  } else if (closest.empty()) {
    out = "no candidate recipe writes this cache layout.";
  } else {
    out = "no recipe matches; closest: " + closest + " (" + std::to_string(closest_verdict.mismatches) +
          " differing bytes). " + closest_verdict.describe();
  }
  if (!skipped.empty()) {
    out += " Not tried (another cache layout):";
    for (const std::string& s : skipped) out += " " + s;
    out += ".";
  }
  if (!lacking_inputs.empty()) {
    out += " Not tried (their key norm needs a weight or bias the capture lacks):";
    for (const std::string& s : lacking_inputs) out += " " + s;
    out += ".";
  }
  if (!explaining.empty()) {
    out += "\nexplained by one field change of " + closest + ":";
    for (const FieldChange& c : explaining) out += "\n  " + c.change;
  } else if (!best_changes.empty()) {
    out += "\nno single field change explains it; the closest single changes:";
    for (size_t i = 0; i < std::min<size_t>(3, best_changes.size()); ++i) {
      out += "\n  " + best_changes[i].change + " (" + std::to_string(best_changes[i].mismatches) +
             " differing bytes)";
    }
  } else if (!closest.empty()) {
    out += "\nno single field change of " + closest + " brings the bytes closer.";
  }
  return out;
}

nlohmann::json to_json(const Detection& d) {
  const auto changes = [](const std::vector<FieldChange>& list) {
    nlohmann::json out = nlohmann::json::array();
    for (const FieldChange& c : list) out.push_back({{"change", c.change}, {"mismatched_bytes", c.mismatches}});
    return out;
  };
  nlohmann::json j = {{"matches", d.matches},
                      {"skipped", d.skipped},
                      {"lacking_inputs", d.lacking_inputs},
                      {"explaining", changes(d.explaining)},
                      {"best_changes", changes(d.best_changes)},
                      {"text", d.describe()}};
  if (!d.closest.empty()) {
    j["closest"] = d.closest;
    j["closest_verdict"] = to_json(d.closest_verdict);
  }
  return j;
}

}  // namespace dsaf::oracle
