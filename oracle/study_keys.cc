// File: study_keys.cc — keys, queries and stage variants of the studies (study_keys.h),
// and the helpers sweep.cc and needle.cc share (study_internal.h).
#include "oracle/study_keys.h"

#include <algorithm>
#include <memory>
#include <set>

#include "oracle/parallel.h"
#include "oracle/study_internal.h"
#include "reference/error.h"
#include "reference/pipeline.h"
#include "reference/recipe_json.h"

namespace dsaf::oracle {

using ref::kHeadDim;
using ref::Recipe;

namespace study_detail {

const ref::RopeTable& RopeTables::get(const ref::RopeTableSpec& s) {
  const std::string key = std::to_string(s.theta) + "/" + std::to_string(s.yarn_factor) + "/" +
                          std::to_string(s.original_seq_len) + "/" +
                          std::to_string(s.beta_fast) + "/" + std::to_string(s.beta_slow);
  auto& slot = tables_[key];
  if (!slot) slot = std::make_unique<ref::RopeTable>(s, static_cast<int>(positions_));
  return *slot;
}

std::string exact_model_key(const Recipe& recipe) {
  nlohmann::json j = ref::recipe_to_json(ref::exact_of(recipe));
  j.erase("name");
  j.erase("description");
  j.erase("source");
  return j.dump();
}

ref::StoredHead key_of(const Recipe& recipe, const ActivationSource& acts, const float* k_in,
                       int64_t position, const ref::RopeTable& rope) {
  const ref::NormParams norm{acts.norm_weight(), acts.norm_bias()};
  return ref::run_key_path(recipe, k_in, static_cast<int>(position), norm, rope);
}

std::shared_ptr<const ActivationSource> activations_for(const std::shared_ptr<const ActivationSource>& source,
                                                        SyntheticSpec spec, uint64_t seed) {
  if (source) return source;
  spec.seed = seed;
  return std::make_shared<const SyntheticActivations>(spec);
}

void check_contexts_fit(const std::shared_ptr<const ActivationSource>& source,
                        const std::vector<int64_t>& contexts, const char* study) {
  if (!source) return;
  for (int64_t n : contexts) {
    if (n > source->tokens()) {
      throw Error(ErrorKind::kUsage, std::string(study) + ": context " + std::to_string(n) +
                                         " exceeds the fixture's " + std::to_string(source->tokens()) +
                                         " tokens");
    }
  }
}

nlohmann::json describe_activations(const std::shared_ptr<const ActivationSource>& source,
                                    const SyntheticSpec& spec) {
  return source ? source->describe() : to_json(spec);
}

}  // namespace study_detail

ref::KeyMatrix build_keys(const Recipe& recipe, const ActivationSource& acts, int64_t n,
                          const ref::RopeTable& rope, int threads) {
  // Tokens go through the key path in runs of kRun (ref::run_key_paths computes 16 at a
  // time in vector lanes); key s is the token at position s.
  constexpr int64_t kRun = 256;
  ref::KeyMatrix keys(n);
  const ref::NormParams norm{acts.norm_weight(), acts.norm_bias()};
  parallel_for(n, threads, [&](int64_t begin, int64_t end) {
    std::vector<float> k_in(static_cast<size_t>(kRun) * kHeadDim);
    std::vector<int> positions(kRun);
    for (int64_t run = begin; run < end; run += kRun) {
      const int64_t count = std::min(kRun, end - run);
      for (int64_t t = 0; t < count; ++t) {
        acts.key_input(run + t, k_in.data() + t * kHeadDim);
        positions[t] = static_cast<int>(run + t);
      }
      ref::run_key_paths(recipe, k_in.data(), positions.data(), count, norm, rope, keys, run);
    }
  });
  return keys;
}

ref::PreparedQuery build_query(const Recipe& recipe, const ActivationSource& acts, int64_t t,
                               const ref::RopeTable& rope) {
  return build_query(recipe, acts, t, t, rope);
}

ref::PreparedQuery build_query(const Recipe& recipe, const ActivationSource& acts, int64_t t, int64_t position,
                               const ref::RopeTable& rope) {
  const int H = acts.num_heads();
  std::vector<float> q(static_cast<size_t>(H) * kHeadDim), wproj(H);
  acts.query_input(t, q.data(), wproj.data());
  const ref::QueryOutput out =
      ref::run_query_path(recipe, q.data(), H, wproj.data(), static_cast<int>(position), rope);
  return ref::prepare_query(out.heads, out.weights);
}

int64_t distinct_oracles(const std::vector<Recipe>& recipes) {
  std::set<std::string> keys;
  for (const Recipe& r : recipes) keys.insert(study_detail::exact_model_key(r));
  return static_cast<int64_t>(keys.size());
}

int64_t distinct_rope_tables(const std::vector<Recipe>& recipes) {
  std::set<std::vector<double>> tables;
  for (const Recipe& r : recipes) {
    const ref::RopeTableSpec& t = r.rope.table;
    tables.insert({t.theta, t.yarn_factor, t.original_seq_len, t.beta_fast, t.beta_slow});
  }
  return static_cast<int64_t>(tables.size());
}

std::vector<std::pair<std::string, Recipe>> stage_variants(const Recipe& recipe) {
  std::vector<std::pair<std::string, Recipe>> out;
  const auto add = [&](const std::string& stage, Recipe r) {
    r.name = recipe.name + "~" + stage;
    r.description = recipe.name + " with the " + stage + " stage exact (fp32 rounding only)";
    out.emplace_back(stage, std::move(r));
  };
  if (recipe.compute == ref::Compute::kFp64) return out;
  const ref::NormSpec exact_norm{recipe.key_norm.kind, recipe.key_norm.eps,
                                 ref::ReductionOrder::kSequential, false,
                                 ref::RsqrtKind::kCorrectlyRounded};
  if (recipe.key_norm.kind != ref::NormKind::kNone &&
      (recipe.key_rounding.norm || recipe.key_norm.fma_contraction ||
       recipe.key_norm.rsqrt != ref::RsqrtKind::kCorrectlyRounded ||
       recipe.key_norm.order != ref::ReductionOrder::kSequential)) {
    Recipe r = recipe;
    r.key_rounding.norm = false;
    r.key_norm = exact_norm;
    add("norm", r);
  }
  if (recipe.key_rounding.rope || recipe.query_rounding.rope ||
      recipe.rope.fma != ref::ContractedProduct::kNone) {
    Recipe r = recipe;
    r.key_rounding.rope = r.query_rounding.rope = false;
    r.rope.fma = ref::ContractedProduct::kNone;
    add("rope", r);
  }
  if (recipe.hadamard && (recipe.key_rounding.hadamard || recipe.query_rounding.hadamard)) {
    Recipe r = recipe;
    r.key_rounding.hadamard = r.query_rounding.hadamard = false;
    add("hadamard", r);
  }
  if (recipe.key_quant.format != ref::StorageFormat::kFp32) {
    Recipe r = recipe;
    r.key_quant.format = ref::StorageFormat::kFp32;
    add("key-quant", r);
  }
  if (recipe.query_quant.format != ref::StorageFormat::kFp32) {
    Recipe r = recipe;
    r.query_quant.format = ref::StorageFormat::kFp32;
    add("query-quant", r);
  }
  if (recipe.score != ref::ScoreAccum::kExact) {
    Recipe r = recipe;
    r.score = ref::ScoreAccum::kExact;
    add("score", r);
  }
  return out;
}

}  // namespace dsaf::oracle
