// File: projection.h
// The indexer's linear projections on real weights: from the hidden states of a token to
// the inputs of the key and query paths (pipeline.h). In the notation of
// docs/checkpoints.md §2 and docs/numerics.md §2.1-§2.3, §2.7, for token t:
//
//   q[t][h][d]  = Σ_i wq_b[h*128 + d][i] · qr[t][i]      pre-RoPE query, [T][H][128]
//   k[t][d]     = Σ_i wk[d][i]           · x[t][i]       PRE-NORM key,   [T][128]
//   wproj[t][h] = Σ_i weights_proj[h][i] · x[t][i]       raw head weight, [T][H]
//
// What the projection leaves to the pipeline (so nothing is applied twice):
//   * k_norm (LayerNorm w + b, eps 1e-6) runs inside run_key_path with the recipe's
//     norm spec; pass IndexerWeights::k_norm_weight / k_norm_bias as its NormParams.
//   * RoPE, the Hadamard rotation and quantisation run in run_key_path / run_query_path.
//   * The head-weight factors n_heads^-1/2, D^-1/2 and the query scale q_scale (docs/numerics.md
//     §2.7) are folded by run_query_path (Recipe::weights_fold). wproj here is the bare
//     weights_proj(x): do not scale it.
//   * bf16 rounding of the path inputs is also a recipe choice (IntermediateRounding::
//     input); rounding to bf16 here as well is harmless (bf16 rounding is idempotent).
//
// Numeric contract: BOUNDED, not bit-exact against any GPU GEMM. A GPU GEMM's summation
// order (split-K, tiles, tensor-core fp32 accumulation per 128-K block of an fp8 GEMM)
// is not modelled. The reference computes every output element as
//     fl32( Σ_i w_i · a_i )   with the products and the sum in fp64 (Eigen GEMM),
// rounded ONCE to fp32: each fp32 x fp32 product is exact in fp64 and the fp64 sum's
// error (≤ n · 2^-53 · Σ|w_i a_i|) is far below one fp32 ulp of any output whose terms do
// not cancel, so the value is the correctly rounded dot product but for rare
// near-ties. Then, per ProjectionOptions, the fp32 value is rounded to bf16, as the model
// does (docs/numerics.md §2.1: wq_b and wk produce bf16 — DeepSeek `linear()` returns the default
// dtype bf16, SGLang and vLLM likewise; weights_proj is fp32 in the fixed reference, in
// SGLang after PR #13459 and in transformers, bf16 in the original 2025-10 reference).
// fp32 -> bf16 is the model's rounding path too (an fp32 accumulator cast to bf16).
//
// Weights come dequantised to fp32 (fixtures/safetensors.h dequantize_fp8_blocks for the
// F8_E4M3 wq_b and wk, to_float for the BF16 weights_proj and the F32 k_norm); hidden
// states are fp32 values (a captured bf16 is passed as its exact fp32 value). Non-finite
// values and size mismatches are rejected with dsaf::Error(kBadInput).
//
// V3.2 sizes: hidden 7168, q_lora_rank 1536, H 64 (docs/checkpoints.md §1). DeepSeek V4 has
// no wk / k_norm (its index keys come from a compressor) and is not covered here.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "reference/recipe.h"

namespace dsaf::ref {

// One layer's indexer weights, dequantised, row-major [out][in] (the safetensors layout).
struct IndexerWeights {
  int hidden = 0;        // width of x (V3.2: 7168)
  int q_lora_rank = 0;   // width of qr (V3.2: 1536)
  int num_heads = 0;     // H (V3.2: 64); the head dim is kHeadDim = 128
  std::vector<float> wq_b;           // [H * 128][q_lora_rank]
  std::vector<float> wk;             // [128][hidden]
  std::vector<float> k_norm_weight;  // [128]; may be empty when no recipe uses a norm
  std::vector<float> k_norm_bias;    // [128]; may be empty (RMSNorm or no norm)
  std::vector<float> weights_proj;   // [H][hidden]

  // Throws dsaf::Error(kBadInput) naming the tensor, its size and the expected size,
  // or the first non-finite element.
  void validate() const;
};

// How the model rounds a projection's output before the next stage reads it.
enum class ProjectionRounding : uint8_t { kFp32, kBf16 };

// Per-128-group fp8 quantisation of the GEMM's *input* activation, which DeepSeek's fp8
// `linear()` does before `fp8_gemm` (docs/numerics.md §2.1: `x, s = act_quant(x, 128,
// scale_fmt)`): the input is replaced by e4m3fn(a / s) * s, with s the ue8m0 scale of
// each group of 128 (amax floor 1e-4, docs/numerics.md §2.6). Applies to the fp8 weights only
// (wq_b on qr, wk on x), never to weights_proj. Requires widths divisible by 128.
enum class InputQuant : uint8_t { kNone, kFp8Ue8m0Block128 };

struct ProjectionOptions {
  ProjectionRounding q = ProjectionRounding::kBf16;        // wq_b output (model: bf16)
  ProjectionRounding k = ProjectionRounding::kBf16;        // wk output (model: bf16)
  ProjectionRounding weights = ProjectionRounding::kFp32;  // weights_proj (fixed ref: fp32)
  InputQuant input_quant = InputQuant::kNone;              // kNone: ideal fp32 inputs
};

// The three projections of a batch of tokens.
struct ProjectedTokens {
  int64_t tokens = 0;
  int num_heads = 0;
  std::vector<float> q;      // [tokens][H][128], pre-RoPE: run_query_path's q_in per token
  std::vector<float> k;      // [tokens][128], pre-norm: run_key_path's k_in per token
  std::vector<float> wproj;  // [tokens][H], bare weights_proj(x): run_query_path's wproj
};

// The projections of one layer, with the weights held as fp64 matrices (converted once:
// V3.2 wq_b is 8192 x 1536, ~100 MB in fp64), so that callers can project tokens in
// batches or one at a time. Immutable after construction; safe to share across threads.
class IndexerProjector {
 public:
  // Validates the weights (IndexerWeights::validate) and the options.
  explicit IndexerProjector(const IndexerWeights& weights, ProjectionOptions options = {});
  ~IndexerProjector();
  IndexerProjector(IndexerProjector&&) noexcept;
  IndexerProjector& operator=(IndexerProjector&&) noexcept;

  int hidden() const;
  int q_lora_rank() const;
  int num_heads() const;
  const ProjectionOptions& options() const;

  // qr: [tokens][q_lora_rank], row-major, tokens = qr.size() / q_lora_rank (> 0).
  // Returns q [tokens][H][128]. Throws kBadInput when qr.size() is not a positive
  // multiple of q_lora_rank or holds a non-finite value.
  std::vector<float> queries(const std::vector<float>& qr) const;
  // x: [tokens][hidden]. Returns k [tokens][128] (pre-norm).
  std::vector<float> keys(const std::vector<float>& x) const;
  // x: [tokens][hidden]. Returns wproj [tokens][H] (not scaled).
  std::vector<float> head_weights(const std::vector<float>& x) const;
  // All three; x and qr must describe the same number of tokens.
  ProjectedTokens project(const std::vector<float>& x, const std::vector<float>& qr) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One-shot convenience: IndexerProjector(weights, options).project(x, qr).
ProjectedTokens project_indexer(const IndexerWeights& weights, const std::vector<float>& x,
                                const std::vector<float>& qr, ProjectionOptions options = {});

}  // namespace dsaf::ref
