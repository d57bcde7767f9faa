// File: fixture_inputs.cc — study inputs from real weights or captures (fixture_inputs.h).
#include "oracle/fixture_inputs.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "reference/error.h"

namespace dsaf::oracle {
namespace {

using ref::kHeadDim;

void check_finite(const std::vector<float>& v, const char* what) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      throw_bad_input(std::string(what) + ": non-finite value at element " + std::to_string(i));
    }
  }
}

// The caller's description wins over the defaults; a non-object is kept as one field.
void merge_description(nlohmann::json& into, const nlohmann::json& extra) {
  if (extra.is_object()) {
    into.update(extra);
  } else if (!extra.is_null()) {
    into["description"] = extra;
  }
}

void check_norm(const std::vector<float>& weight, const std::vector<float>& bias) {
  if (!weight.empty() && weight.size() != static_cast<size_t>(kHeadDim)) {
    throw_bad_input("fixture activations: k_norm weight has " + std::to_string(weight.size()) +
                    " values, expected 128");
  }
  if (!bias.empty() && (bias.size() != static_cast<size_t>(kHeadDim) || weight.empty())) {
    throw_bad_input("fixture activations: k_norm bias needs 128 values and a weight");
  }
  check_finite(weight, "fixture activations: k_norm weight");
  check_finite(bias, "fixture activations: k_norm bias");
}

// What both sources share: T keys held in memory, the norm parameters, the description.
class FixtureBase : public ActivationSource {
 public:
  int num_heads() const override { return num_heads_; }
  int64_t tokens() const override { return tokens_; }
  void key_input(int64_t token, float* out) const override {
    check_token(token);
    std::copy_n(keys_.data() + token * kHeadDim, kHeadDim, out);
  }
  const float* norm_weight() const override { return norm_weight_.empty() ? nullptr : norm_weight_.data(); }
  const float* norm_bias() const override { return norm_bias_.empty() ? nullptr : norm_bias_.data(); }
  nlohmann::json describe() const override { return description_; }

 protected:
  void check_token(int64_t token) const {
    if (token < 0 || token >= tokens_) {
      throw Error(ErrorKind::kUsage, "fixture activations: token " + std::to_string(token) +
                                         " outside the fixture's " + std::to_string(tokens_) + " tokens");
    }
  }
  int num_heads_ = 0;
  int64_t tokens_ = 0;
  std::vector<float> keys_;  // [T][128], pre-norm
  std::vector<float> norm_weight_, norm_bias_;
  nlohmann::json description_;
};

class RecordedProjections : public FixtureBase {
 public:
  RecordedProjections(int num_heads, std::vector<float> q, std::vector<float> k,
                      std::vector<float> wproj, std::vector<float> norm_weight,
                      std::vector<float> norm_bias, nlohmann::json description) {
    if (num_heads < 1) throw_bad_input("fixture activations: num_heads must be >= 1");
    const size_t heads = static_cast<size_t>(num_heads);
    if (k.empty() || k.size() % kHeadDim != 0) {
      throw_bad_input("fixture activations: k has " + std::to_string(k.size()) +
                      " values, not a positive multiple of 128");
    }
    const size_t t = k.size() / kHeadDim;
    if (q.size() != t * heads * kHeadDim || wproj.size() != t * heads) {
      throw_bad_input("fixture activations: k holds " + std::to_string(t) + " tokens, so q needs " +
                      std::to_string(t * heads * kHeadDim) + " values (has " + std::to_string(q.size()) +
                      ") and wproj " + std::to_string(t * heads) + " (has " + std::to_string(wproj.size()) + ")");
    }
    check_finite(q, "fixture activations: q");
    check_finite(k, "fixture activations: k");
    check_finite(wproj, "fixture activations: wproj");
    check_norm(norm_weight, norm_bias);
    num_heads_ = num_heads;
    tokens_ = static_cast<int64_t>(t);
    keys_ = std::move(k);
    q_ = std::move(q);
    wproj_ = std::move(wproj);
    norm_weight_ = std::move(norm_weight);
    norm_bias_ = std::move(norm_bias);
    description_ = {{"kind", "fixture"}, {"inputs", "captured projections (q pre-RoPE, k pre-norm, wproj)"},
                    {"tokens", tokens_}, {"num_heads", num_heads_}};
    merge_description(description_, description);
  }

  void query_input(int64_t token, float* q, float* wproj) const override {
    check_token(token);
    const size_t h = static_cast<size_t>(num_heads_);
    std::copy_n(q_.data() + token * h * kHeadDim, h * kHeadDim, q);
    std::copy_n(wproj_.data() + token * h, h, wproj);
  }

 private:
  std::vector<float> q_;      // [T][H][128]
  std::vector<float> wproj_;  // [T][H]
};

class ProjectedHiddenStates : public FixtureBase {
 public:
  ProjectedHiddenStates(const ref::IndexerWeights& weights, std::vector<float> x, std::vector<float> qr,
                        const ref::ProjectionOptions& options, nlohmann::json description)
      : projector_(weights, options), x_(std::move(x)), qr_(std::move(qr)) {
    num_heads_ = weights.num_heads;
    // keys() checks x's size and values; project()'s token-count check is repeated here
    // because only keys are projected now.
    keys_ = projector_.keys(x_);
    tokens_ = static_cast<int64_t>(keys_.size()) / kHeadDim;
    if (qr_.size() != static_cast<size_t>(tokens_) * weights.q_lora_rank) {
      throw_bad_input("fixture activations: x holds " + std::to_string(tokens_) + " tokens, so qr needs " +
                      std::to_string(tokens_ * weights.q_lora_rank) + " values (has " +
                      std::to_string(qr_.size()) + ")");
    }
    // Query rows are projected lazily; a non-finite qr value must still fail now.
    check_finite(qr_, "projection input qr");
    norm_weight_ = weights.k_norm_weight;
    norm_bias_ = weights.k_norm_bias;
    description_ = {{"kind", "fixture"},
                    {"inputs", "hidden states x, qr projected with the layer's indexer weights"},
                    {"tokens", tokens_},
                    {"num_heads", num_heads_},
                    {"hidden", weights.hidden},
                    {"q_lora_rank", weights.q_lora_rank},
                    {"projection", to_json(options)}};
    merge_description(description_, description);
  }

  void query_input(int64_t token, float* q, float* wproj) const override {
    check_token(token);
    const size_t h = static_cast<size_t>(num_heads_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = cache_.find(token);
      if (it != cache_.end()) {
        std::copy_n(it->second.first.data(), h * kHeadDim, q);
        std::copy_n(it->second.second.data(), h, wproj);
        return;
      }
    }
    // Projected outside the lock so threads project different tokens at once; two
    // threads asking for the same token compute the same bits, and the first insert wins.
    const size_t rank = static_cast<size_t>(projector_.q_lora_rank());
    const size_t hidden = static_cast<size_t>(projector_.hidden());
    std::vector<float> qr_row(qr_.begin() + token * rank, qr_.begin() + (token + 1) * rank);
    std::vector<float> x_row(x_.begin() + token * hidden, x_.begin() + (token + 1) * hidden);
    std::pair<std::vector<float>, std::vector<float>> row{projector_.queries(qr_row),
                                                          projector_.head_weights(x_row)};
    std::copy_n(row.first.data(), h * kHeadDim, q);
    std::copy_n(row.second.data(), h, wproj);
    std::lock_guard<std::mutex> lock(mutex_);
    cache_.emplace(token, std::move(row));
  }

 private:
  ref::IndexerProjector projector_;
  std::vector<float> x_;   // [T][hidden]
  std::vector<float> qr_;  // [T][q_lora_rank]
  mutable std::mutex mutex_;
  mutable std::map<int64_t, std::pair<std::vector<float>, std::vector<float>>> cache_;  // q, wproj
};

const char* rounding_name(ref::ProjectionRounding r) {
  return r == ref::ProjectionRounding::kBf16 ? "bf16" : "fp32";
}

}  // namespace

nlohmann::json to_json(const ref::ProjectionOptions& options) {
  return {{"q", rounding_name(options.q)},
          {"k", rounding_name(options.k)},
          {"weights", rounding_name(options.weights)},
          {"input_quant", options.input_quant == ref::InputQuant::kFp8Ue8m0Block128
                              ? "fp8-e4m3fn-ue8m0-block128"
                              : "none"},
          {"contract", "bounded: fp64 sums rounded once to fp32, then the rounding named per output"}};
}

std::shared_ptr<const ActivationSource> activations_from_hidden_states(
    const ref::IndexerWeights& weights, std::vector<float> x, std::vector<float> qr,
    const ref::ProjectionOptions& options, nlohmann::json description) {
  return std::make_shared<ProjectedHiddenStates>(weights, std::move(x), std::move(qr), options,
                                                 std::move(description));
}

std::shared_ptr<const ActivationSource> activations_from_projections(
    int num_heads, std::vector<float> q, std::vector<float> k, std::vector<float> wproj,
    std::vector<float> norm_weight, std::vector<float> norm_bias, nlohmann::json description) {
  return std::make_shared<RecordedProjections>(num_heads, std::move(q), std::move(k), std::move(wproj),
                                               std::move(norm_weight), std::move(norm_bias),
                                               std::move(description));
}

}  // namespace dsaf::oracle
