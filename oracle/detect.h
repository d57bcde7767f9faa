// File: detect.h
// Recipe detection (docs/design.md question 3: "which exact numeric variant does a kernel
// implement?"). Given a key observation (compare.h: known key inputs, where each token was
// written, the RoPE table used, and the cache an unknown implementation wrote), report
// which recipes reproduce the written slots' bytes exactly; for the closest recipe that
// does not, its verdict (first differing byte located) and which single recipe field,
// changed, would explain the bytes — or, if none explains them fully, which single
// changes bring them closest.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "oracle/compare.h"
#include "reference/recipe.h"

namespace dsaf::oracle {

struct FieldChange {
  std::string change;        // e.g. "key_quant.apply: \"times_reciprocal\" -> \"divide\""
  int64_t mismatches = 0;    // differing written bytes with this change applied
};

struct Detection {
  std::vector<std::string> matches;           // recipes reproducing every written byte
  std::vector<std::string> skipped;           // candidates with another cache layout
  std::vector<std::string> lacking_inputs;    // candidates whose norm needs parameters the observation lacks
  std::string closest;                        // fewest mismatches, when nothing matches
  CaptureVerdict closest_verdict;
  std::vector<FieldChange> explaining;        // single changes of `closest` that match exactly
  std::vector<FieldChange> best_changes;      // else: the changes that reduce mismatches, fewest first
  std::string describe() const;
};

// Compares every candidate whose layout and inputs fit (layout_fits, inputs_fit) and,
// when none matches, every single-field change of the closest one. Throws dsaf::Error(kBadInput) as
// compare_capture. `progress` (may be empty) is called before each comparison: (stage,
// comparisons done, comparisons of the stage), stages "candidates" and "single-field changes".
using DetectProgress = std::function<void(const std::string& stage, int64_t done, int64_t total)>;
Detection detect_capture(const KeyObservation& obs, const std::vector<ref::Recipe>& candidates,
                         const DetectProgress& progress = nullptr);

nlohmann::json to_json(const Detection& detection);

// Every single-field alternative of a recipe: each other value of every field the field
// table marks kDetected (reference/recipe_fields.h), named by the field's path and both
// values ("key_quant.apply: \"divide\" -> \"times_reciprocal\""); alternatives that fail
// Recipe::validate are left out.
std::vector<std::pair<std::string, ref::Recipe>> single_field_changes(const ref::Recipe& recipe);

}  // namespace dsaf::oracle
