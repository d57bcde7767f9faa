// File: synthetic.cc — deterministic synthetic activations (synthetic.h).
#include "oracle/synthetic.h"

#include <cmath>
#include <algorithm>
#include <random>

#include "reference/error.h"
#include "reference/recipe.h"

namespace dsaf::oracle {
namespace {

using ref::kHeadDim;

// A generator seeded by (seed, stream, token) through splitmix64, so that tokens are
// independent streams and any one can be regenerated alone.
std::mt19937_64 stream_rng(uint64_t seed, uint64_t stream, int64_t token) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull ^ (stream + 1) * 0xBF58476D1CE4E5B9ull ^
               static_cast<uint64_t>(token) * 0x94D049BB133111EBull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return std::mt19937_64(z ^ (z >> 31));
}

enum Stream : uint64_t { kFixed = 0, kKey = 1, kQuery = 2, kWproj = 3, kCluster = 4 };

}  // namespace

ActivationKind parse_activation_kind(const std::string& name) {
  if (name == "gaussian") return ActivationKind::kGaussian;
  if (name == "heavy") return ActivationKind::kHeavy;
  if (name == "outliers") return ActivationKind::kOutliers;
  if (name == "clustered") return ActivationKind::kClustered;
  throw Error(ErrorKind::kUsage, "unknown activation kind '" + name +
                                     "' (gaussian, heavy, outliers, clustered)");
}

std::string activation_kind_name(ActivationKind kind) {
  switch (kind) {
    case ActivationKind::kGaussian: return "gaussian";
    case ActivationKind::kHeavy: return "heavy";
    case ActivationKind::kOutliers: return "outliers";
    case ActivationKind::kClustered: return "clustered";
  }
  return "?";
}

nlohmann::json to_json(const SyntheticSpec& s) {
  nlohmann::json j = {{"generator", activation_kind_name(s.kind)},
                      {"seed", s.seed},
                      {"num_heads", s.num_heads},
                      {"wproj", "N(0,1)"},
                      {"key_norm", "weight 1+N(0,0.01), bias N(0,0.01)"}};
  switch (s.kind) {
    case ActivationKind::kGaussian: j["channels"] = "N(0,1)"; break;
    case ActivationKind::kHeavy: j["channels"] = "Student-t"; j["dof"] = s.dof; break;
    case ActivationKind::kOutliers:
      j["channels"] = "N(0,1), outlier channels scaled";
      j["outlier_channels"] = s.outlier_channels;
      j["outlier_factor_range"] = {s.outlier_min, s.outlier_max};
      break;
    case ActivationKind::kClustered:
      j["channels"] = "keys: centre N(0,1) + N(0,noise^2); queries N(0,1)";
      j["clusters"] = s.clusters;
      j["cluster_noise"] = s.cluster_noise;
      break;
  }
  return j;
}

SyntheticActivations::SyntheticActivations(const SyntheticSpec& spec) : spec_(spec) {
  if (spec.num_heads < 1 || spec.outlier_channels < 0 || spec.outlier_channels > kHeadDim ||
      spec.clusters < 1 || !(spec.dof > 0) || !(spec.outlier_min > 0) ||
      spec.outlier_max < spec.outlier_min || !(spec.cluster_noise >= 0)) {
    throw Error(ErrorKind::kUsage, "synthetic activations: invalid parameters");
  }
  std::mt19937_64 rng = stream_rng(spec.seed, kFixed, 0);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> factor(spec.outlier_min, spec.outlier_max);
  std::vector<int> channels(kHeadDim);
  for (int i = 0; i < kHeadDim; ++i) channels[i] = i;
  std::shuffle(channels.begin(), channels.end(), rng);
  for (int i = 0; i < spec.outlier_channels; ++i) {
    outlier_channel_.push_back(channels[i]);
    outlier_factor_.push_back(static_cast<float>(factor(rng)));
  }
  centres_.resize(static_cast<size_t>(spec.clusters) * kHeadDim);
  for (float& v : centres_) v = normal(rng);
  for (int i = 0; i < kHeadDim; ++i) {
    norm_weight_.push_back(1.0f + 0.1f * normal(rng));
    norm_bias_.push_back(0.1f * normal(rng));
  }
}

void SyntheticActivations::fill_channels(uint64_t stream, int64_t token, float* out,
                                         bool is_key) const {
  std::mt19937_64 rng = stream_rng(spec_.seed, stream, token);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  switch (spec_.kind) {
    case ActivationKind::kHeavy: {
      std::student_t_distribution<float> t(static_cast<float>(spec_.dof));
      for (int i = 0; i < kHeadDim; ++i) out[i] = t(rng);
      return;
    }
    case ActivationKind::kClustered:
      if (is_key) {
        std::uniform_int_distribution<int> pick(0, spec_.clusters - 1);
        const float* centre = centres_.data() + static_cast<size_t>(pick(rng)) * kHeadDim;
        const float noise = static_cast<float>(spec_.cluster_noise);
        for (int i = 0; i < kHeadDim; ++i) out[i] = centre[i] + noise * normal(rng);
        return;
      }
      break;
    case ActivationKind::kGaussian:
    case ActivationKind::kOutliers:
      break;
  }
  for (int i = 0; i < kHeadDim; ++i) out[i] = normal(rng);
  if (spec_.kind == ActivationKind::kOutliers) {
    for (size_t c = 0; c < outlier_channel_.size(); ++c) out[outlier_channel_[c]] *= outlier_factor_[c];
  }
}

void SyntheticActivations::key_input(int64_t token, float* out) const {
  fill_channels(kKey, token, out, true);
}

void SyntheticActivations::query_input(int64_t token, float* q, float* wproj) const {
  for (int h = 0; h < spec_.num_heads; ++h) {
    fill_channels(kQuery, token * spec_.num_heads + h, q + static_cast<size_t>(h) * kHeadDim, false);
  }
  std::mt19937_64 rng = stream_rng(spec_.seed, kWproj, token);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int h = 0; h < spec_.num_heads; ++h) wproj[h] = normal(rng);
}

}  // namespace dsaf::oracle
