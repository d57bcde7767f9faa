// File: fixture_inputs.h
// Study inputs (activations.h) from a real layer instead of the synthetic generator, so
// that `sweep --fixture f.h5` and `needle --fixture f.h5` measure real activations:
//
//   activations_from_hidden_states  one layer's dequantised indexer weights plus the
//       captured hidden states x [T][hidden] and qr [T][q_lora_rank] of one sequence;
//       the projections of reference/projection.h give k_in = wk·x (pre-norm),
//       q_in = wq_b·qr (pre-RoPE) and wproj = weights_proj·x.
//   activations_from_projections    a capture of the projections themselves:
//       q [T][H][128] (pre-RoPE), k [T][128] (PRE-NORM: the wk output, before k_norm)
//       and wproj [T][H] (bare weights_proj output, not scaled by H^-1/2 or anything).
//       A capture of post-norm keys can be studied only with recipes without a key norm:
//       pass empty norm parameters, and run_key_path rejects norm recipes (kBadInput).
//
// Token t of the capture sits at RoPE position t: the captured tokens must be one
// sequence from position 0 (the loader checks a capture's `positions`). The studies
// then need every context N <= T (they throw dsaf::Error(kUsage) otherwise).
//
// Cost: keys are projected for all T tokens when the source is built (one fp64 GEMM of
// 128 x hidden x T multiply-adds: ~1.2e11 at T = 128K for V3.2, ~30 s on one core at the
// ~8 GFLOP/s Eigen's fp64 GEMM reached on the CI machine); queries and head weights only
// for the tokens a study asks for (the sweep's query rows, the needle's last token), each
// once (~10 ms a token), then cached. The source keeps x and qr (T x (hidden +
// q_lora_rank) fp32).
//
// Typical use (the CLI):
//   ref::IndexerWeights w = ...;              // from the fixture's weight datasets
//   std::vector<float> x = ..., qr = ...;     // its activation datasets, as fp32 values
//   SweepConfig config = ...;
//   config.source = activations_from_hidden_states(w, std::move(x), std::move(qr), {},
//                                                  {{"fixture", path}, {"layer", 10}});
//   run_sweep(config, progress);
#pragma once

#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "oracle/activations.h"
#include "reference/projection.h"

namespace dsaf::oracle {

// Builds the source from weights and hidden states (reference/projection.h contract:
// fp64 sums rounded once to fp32, then the option's bf16 rounding). Throws
// dsaf::Error(kBadInput) on invalid weights, sizes that disagree (x and qr must hold the
// same number of tokens T >= 1) or non-finite values. `description` is merged into
// describe() (e.g. {"fixture": path, "layer": 10}).
std::shared_ptr<const ActivationSource> activations_from_hidden_states(
    const ref::IndexerWeights& weights, std::vector<float> x, std::vector<float> qr,
    const ref::ProjectionOptions& options = {}, nlohmann::json description = nlohmann::json::object());

// Builds the source from captured projections (see the file comment for what each
// tensor must be). num_heads >= 1; q, k and wproj must describe the same T >= 1 tokens;
// norm_weight / norm_bias hold 128 values or are empty. Throws dsaf::Error(kBadInput).
std::shared_ptr<const ActivationSource> activations_from_projections(
    int num_heads, std::vector<float> q, std::vector<float> k, std::vector<float> wproj,
    std::vector<float> norm_weight, std::vector<float> norm_bias,
    nlohmann::json description = nlohmann::json::object());

// {"q": "bf16", "k": "bf16", "weights": "fp32", "input_quant": "none"} and the contract.
nlohmann::json to_json(const ref::ProjectionOptions& options);

}  // namespace dsaf::oracle
