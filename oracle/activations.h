// File: activations.h
// What the sweep and needle studies (sweep.h, needle.h) consume, per token t of one sequence:
//   key_input(t)   k_in[128]  the key path's input, BEFORE the key norm (pipeline.h
//                             run_key_path normalises with norm_weight()/norm_bias())
//   query_input(t) q_in[H][128] the query path's input, BEFORE RoPE, and
//                  wproj[H]     the bare weights_proj output (run_query_path folds
//                               H^-1/2, D^-1/2 and the query scale; docs/numerics.md §2.7)
// Token t sits at RoPE position t. Two implementations: SyntheticActivations
// (synthetic.h, a generator of any length) and the fixture sources of fixture_inputs.h
// (real weights and captured hidden states, `tokens()` long).
#pragma once

#include <cstdint>
#include <limits>

#include <nlohmann/json.hpp>

namespace dsaf::oracle {

class ActivationSource {
 public:
  // tokens() of a source without an end (a generator).
  static constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

  virtual ~ActivationSource() = default;
  virtual int num_heads() const = 0;
  // Tokens available: valid arguments of key_input/query_input are [0, tokens()).
  virtual int64_t tokens() const = 0;
  // Both may be called concurrently from several threads.
  virtual void key_input(int64_t token, float* out) const = 0;                // 128 values
  virtual void query_input(int64_t token, float* q, float* wproj) const = 0;  // [H][128], [H]
  // Key-norm parameters, 128 values each; nullptr when the source has none (a recipe
  // with a norm then fails with dsaf::Error(kBadInput) in run_key_path).
  virtual const float* norm_weight() const = 0;
  virtual const float* norm_bias() const = 0;
  // Where the activations come from, for result files (the generator and its
  // parameters, or the fixture and the projection).
  virtual nlohmann::json describe() const = 0;
};

}  // namespace dsaf::oracle
