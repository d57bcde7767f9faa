// File: synthetic.h
// Synthetic indexer activations: what the key path and the query path receive (the
// key input k_in[128] before the norm, the query q_in[H][128] before RoPE, and the
// weights_proj output wproj[H]). Every value is a deterministic function of
// (seed, stream, token), so a context of any length is reproducible and any token can
// be regenerated alone. The kinds (docs/design.md "Synthetic activations"):
//   gaussian   every channel ~ N(0, 1)
//   heavy      every channel ~ Student-t with `dof` degrees of freedom
//   outliers   N(0, 1) plus `outlier_channels` fixed channels scaled by a fixed factor
//              drawn from [outlier_min, outlier_max] (20-100x): the case the Hadamard
//              rotation exists for; the same channels in keys and queries
//   clustered  keys = one of `clusters` fixed centres (N(0, 1)) + N(0, cluster_noise^2)
//              noise: near-duplicate keys and near-tied scores; queries Gaussian
// wproj ~ N(0, 1); key-norm weight 1 + N(0, 0.1^2), bias N(0, 0.1^2) (fixed per seed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "oracle/activations.h"

namespace dsaf::oracle {

enum class ActivationKind { kGaussian, kHeavy, kOutliers, kClustered };

struct SyntheticSpec {
  ActivationKind kind = ActivationKind::kOutliers;
  uint64_t seed = 1;
  int num_heads = 64;
  double dof = 3.0;
  int outlier_channels = 4;
  double outlier_min = 20.0;
  double outlier_max = 100.0;
  int clusters = 16;
  double cluster_noise = 0.1;
};

// "gaussian" | "heavy" | "outliers" | "clustered"; throws dsaf::Error(kUsage) otherwise.
ActivationKind parse_activation_kind(const std::string& name);
std::string activation_kind_name(ActivationKind kind);
// The generator's name and every parameter, for result files.
nlohmann::json to_json(const SyntheticSpec& spec);

class SyntheticActivations : public ActivationSource {
 public:
  explicit SyntheticActivations(const SyntheticSpec& spec);

  const SyntheticSpec& spec() const { return spec_; }
  int num_heads() const override { return spec_.num_heads; }
  int64_t tokens() const override { return kUnbounded; }
  void key_input(int64_t token, float* out) const override;                  // 128 values
  void query_input(int64_t token, float* q, float* wproj) const override;    // [H][128], [H]
  const float* norm_weight() const override { return norm_weight_.data(); }  // 128 values
  const float* norm_bias() const override { return norm_bias_.data(); }      // 128 values
  nlohmann::json describe() const override { return to_json(spec_); }

 private:
  void fill_channels(uint64_t stream, int64_t token, float* out, bool is_key) const;
  SyntheticSpec spec_;
  std::vector<int> outlier_channel_;      // channel index per outlier
  std::vector<float> outlier_factor_;     // its scale
  std::vector<float> centres_;            // [clusters][128]
  std::vector<float> norm_weight_, norm_bias_;
};

}  // namespace dsaf::oracle
