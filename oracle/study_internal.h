// File: study_internal.h
// Helpers that the sweep (sweep.cc) and the needle study (needle.cc) share; not part of
// the oracle's interface. Implemented in study_keys.cc.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "oracle/activations.h"
#include "oracle/synthetic.h"
#include "reference/pipeline.h"
#include "reference/recipe.h"
#include "reference/rope.h"

namespace dsaf::oracle::study_detail {

// One RoPE table per distinct table spec, long enough for the largest context.
class RopeTables {
 public:
  explicit RopeTables(int64_t positions) : positions_(positions) {}
  const ref::RopeTable& get(const ref::RopeTableSpec& s);

 private:
  int64_t positions_;
  std::map<std::string, std::unique_ptr<ref::RopeTable>> tables_;
};

// Recipes with the same exact oracle share it: the oracle depends only on model math.
// The key is the same for two recipes iff ref::exact_of gives them the same fields
// (name, description and source aside).
std::string exact_model_key(const ref::Recipe& recipe);

// The stored key of input k_in at `position` under a recipe (the source's norm
// parameters).
ref::StoredHead key_of(const ref::Recipe& recipe, const ActivationSource& acts, const float* k_in,
                       int64_t position, const ref::RopeTable& rope);

// The activations of one sweep seed or needle trial: the fixture when the study has
// one, else the synthetic generator with this seed.
std::shared_ptr<const ActivationSource> activations_for(
    const std::shared_ptr<const ActivationSource>& source, SyntheticSpec spec, uint64_t seed);

// A fixture holds T tokens: a context of N tokens needs N <= T, else
// dsaf::Error(kUsage) "<study>: context N exceeds the fixture's T tokens".
void check_contexts_fit(const std::shared_ptr<const ActivationSource>& source,
                        const std::vector<int64_t>& contexts, const char* study);

// The activations entry of a result: the fixture's description, else the generator's.
nlohmann::json describe_activations(const std::shared_ptr<const ActivationSource>& source,
                                    const SyntheticSpec& spec);

}  // namespace dsaf::oracle::study_detail
