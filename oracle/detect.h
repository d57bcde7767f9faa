// File: detect.h
// Recipe detection (docs/design.md question 3: "which exact numeric variant does a kernel
// implement?"). Given known key inputs and the paged index-K cache an unknown
// implementation wrote from them, report which recipes reproduce the bytes exactly; for
// the closest recipe that does not, its first differing byte (oracle/verdict.h locator)
// and which single recipe field, changed, would explain the bytes — or, if none explains
// them fully, which single change brings them closest.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "oracle/verdict.h"
#include "reference/recipe.h"

namespace dsaf::oracle {

// One sequence of T tokens at positions 0..T-1, and the cache written for it.
struct KeyObservation {
  std::vector<float> key_inputs;   // [T][128]: the key path's input (before the norm)
  std::vector<float> norm_weight;  // 128 (empty when no recipe needs it)
  std::vector<float> norm_bias;    // 128
  int page_size = 64;
  std::vector<int32_t> page_table;
  int64_t num_pages = 0;
  std::vector<uint8_t> cache;      // the observed bytes, num_pages * page bytes
};

struct FieldChange {
  std::string change;        // e.g. "key_quant.apply: times_reciprocal -> divide"
  int64_t mismatches = 0;    // differing owned bytes with this change applied
};

struct Detection {
  std::vector<std::string> matches;           // recipes reproducing every owned byte
  std::vector<std::string> skipped;           // candidates with another cache layout
  std::string closest;                        // fewest mismatches, when nothing matches
  ByteVerdict closest_verdict;
  std::vector<FieldChange> explaining;        // single changes that match exactly
  std::vector<FieldChange> best_changes;      // else: the changes that reduce mismatches most
  std::string describe() const;
};

// The cache bytes a recipe writes for the observation's inputs (owned slots overwrite a
// copy of the observed cache, so bytes no token owns compare equal).
std::vector<uint8_t> expected_cache(const ref::Recipe& recipe, const KeyObservation& obs);

Detection detect_key_recipe(const KeyObservation& obs, const std::vector<ref::Recipe>& candidates);

// Every single-field alternative of a recipe: each other value of every field the field
// table marks kDetected (reference/recipe_fields.h), named by the field's path and both
// values ("key_quant.apply: \"divide\" -> \"times_reciprocal\""); alternatives that fail
// Recipe::validate are left out.
std::vector<std::pair<std::string, ref::Recipe>> single_field_changes(const ref::Recipe& recipe);

}  // namespace dsaf::oracle
