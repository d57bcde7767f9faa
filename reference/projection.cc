// File: projection.cc — the indexer's linear projections (projection.h).
// Eigen computes each product as an fp64 GEMM; its blocking fixes the summation order,
// which the header's bounded contract allows (fp64 sum, one rounding to fp32).
#include "reference/projection.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <Eigen/Core>

#include "reference/error.h"
#include "reference/numeric/minifloat.h"
#include "reference/quantize.h"

namespace dsaf::ref {
namespace {

using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic>;  // column-major
using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ColMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;

// Tokens per GEMM call: bounds the fp64 copy of the input (256 x 7168 x 8 B = 14 MB)
// while keeping the GEMM large enough for Eigen's blocking to pay off.
constexpr int64_t kTokenChunk = 256;

void check_size(const std::vector<float>& v, int64_t expected, const char* name) {
  if (static_cast<int64_t>(v.size()) != expected) {
    throw_bad_input(std::string("indexer weights: ") + name + " has " + std::to_string(v.size()) +
                    " values, expected " + std::to_string(expected));
  }
}

void check_finite(const std::vector<float>& v, const char* what) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      throw_bad_input(std::string(what) + ": non-finite value at element " + std::to_string(i));
    }
  }
}

// The fp32 [out][in] weight as an fp64 out x in matrix (exact: fp64 holds every fp32).
MatrixD to_fp64(const std::vector<float>& w, int out, int in) {
  return Eigen::Map<const RowMajorF>(w.data(), out, in).cast<double>();
}

// DeepSeek act_quant of one group of 128 (docs/numerics.md §2.6): amax floored at 1e-4,
// s = 2^ceil(log2(amax * fl(1/448))) by the exponent-bit rule, code = e4m3fn(x / s)
// saturated to ±448; the GEMM then sees code * s.
const QuantSpec& act_quant_spec() {
  static const QuantSpec spec = [] {
    QuantSpec s;
    s.format = StorageFormat::kFp8E4m3fn;
    s.block = kHeadDim;
    s.amax_floor = 1e-4f;
    s.divisor = ScaleDivisor::kTimesReciprocal;
    s.pow2 = ScalePow2::kExponentBitsCeil;
    s.apply = ScaleApply::kDivide;
    s.saturation = Saturation::kSatFinite;
    return s;
  }();
  return spec;
}

// out[t][o] = round(fl32(Σ_i w[o][i] · in[t][i])) for every token t of `in`
// ([tokens][in_dim], row-major). Steps:
//   1. check the size and finiteness of `in`;
//   2. per chunk of tokens: copy to fp64 columns (one column per token), fp8 act_quant
//      each group of 128 when asked;
//   3. fp64 GEMM  Y = W · A;
//   4. round each element once to fp32, then to bf16 when the model does.
std::vector<float> project_rows(const MatrixD& w, const std::vector<float>& in, bool act_quant,
                                ProjectionRounding rounding, const char* what) {
  const int64_t in_dim = w.cols();
  const int64_t out_dim = w.rows();
  if (in.empty() || static_cast<int64_t>(in.size()) % in_dim != 0) {
    throw_bad_input(std::string(what) + ": " + std::to_string(in.size()) +
                    " values is not a positive multiple of the width " + std::to_string(in_dim));
  }
  check_finite(in, what);
  const int64_t tokens = static_cast<int64_t>(in.size()) / in_dim;
  std::vector<float> out(static_cast<size_t>(tokens * out_dim));
  MatrixD a, y;
  for (int64_t t0 = 0; t0 < tokens; t0 += kTokenChunk) {
    const int64_t n = std::min(kTokenChunk, tokens - t0);
    // A row-major [n][in_dim] block is, read column-major, the in_dim x n matrix whose
    // column j is token t0 + j.
    a = Eigen::Map<const ColMajorF>(in.data() + t0 * in_dim, in_dim, n).cast<double>();
    if (act_quant) {
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t g = 0; g < in_dim; g += kHeadDim) {
          const float* group = in.data() + (t0 + j) * in_dim + g;
          const StoredHead q = store_head(group, act_quant_spec());
          // code * s is exact in fp64 (a 4-bit significand times a power of two).
          for (int i = 0; i < kHeadDim; ++i) a(g + i, j) = q.dot_values[i] * q.dot_scale;
        }
      }
    }
    y.noalias() = w * a;
    for (int64_t j = 0; j < n; ++j) {
      float* row = out.data() + (t0 + j) * out_dim;
      for (int64_t o = 0; o < out_dim; ++o) {
        const float v = static_cast<float>(y(o, j));  // the one fp64 -> fp32 rounding
        row[o] = rounding == ProjectionRounding::kBf16 ? round_bf16(v) : v;
      }
    }
  }
  return out;
}

}  // namespace

void IndexerWeights::validate() const {
  if (hidden < 1 || q_lora_rank < 1 || num_heads < 1) {
    throw_bad_input("indexer weights: hidden, q_lora_rank and num_heads must be >= 1 (got " +
                    std::to_string(hidden) + ", " + std::to_string(q_lora_rank) + ", " +
                    std::to_string(num_heads) + ")");
  }
  const int64_t heads = num_heads;
  check_size(wq_b, heads * kHeadDim * q_lora_rank, "wq_b [H*128, q_lora_rank]");
  check_size(wk, int64_t{kHeadDim} * hidden, "wk [128, hidden]");
  check_size(weights_proj, heads * hidden, "weights_proj [H, hidden]");
  if (!k_norm_weight.empty()) check_size(k_norm_weight, kHeadDim, "k_norm.weight [128]");
  if (!k_norm_bias.empty()) {
    check_size(k_norm_bias, kHeadDim, "k_norm.bias [128]");
    if (k_norm_weight.empty()) throw_bad_input("indexer weights: k_norm.bias without k_norm.weight");
  }
  check_finite(wq_b, "indexer weights: wq_b");
  check_finite(wk, "indexer weights: wk");
  check_finite(weights_proj, "indexer weights: weights_proj");
  check_finite(k_norm_weight, "indexer weights: k_norm.weight");
  check_finite(k_norm_bias, "indexer weights: k_norm.bias");
}

struct IndexerProjector::Impl {
  int hidden = 0, q_lora_rank = 0, num_heads = 0;
  ProjectionOptions options;
  MatrixD wq_b;          // (H*128) x q_lora_rank
  MatrixD wk;            // 128 x hidden
  MatrixD weights_proj;  // H x hidden
};

IndexerProjector::IndexerProjector(const IndexerWeights& weights, ProjectionOptions options)
    : impl_(std::make_unique<Impl>()) {
  weights.validate();
  if (options.input_quant == InputQuant::kFp8Ue8m0Block128 &&
      (weights.hidden % kHeadDim != 0 || weights.q_lora_rank % kHeadDim != 0)) {
    throw_bad_input("projection: fp8 input quantisation needs hidden and q_lora_rank divisible by 128 (got " +
                    std::to_string(weights.hidden) + ", " + std::to_string(weights.q_lora_rank) + ")");
  }
  impl_->hidden = weights.hidden;
  impl_->q_lora_rank = weights.q_lora_rank;
  impl_->num_heads = weights.num_heads;
  impl_->options = options;
  impl_->wq_b = to_fp64(weights.wq_b, weights.num_heads * kHeadDim, weights.q_lora_rank);
  impl_->wk = to_fp64(weights.wk, kHeadDim, weights.hidden);
  impl_->weights_proj = to_fp64(weights.weights_proj, weights.num_heads, weights.hidden);
}

IndexerProjector::~IndexerProjector() = default;
IndexerProjector::IndexerProjector(IndexerProjector&&) noexcept = default;
IndexerProjector& IndexerProjector::operator=(IndexerProjector&&) noexcept = default;

int IndexerProjector::hidden() const { return impl_->hidden; }
int IndexerProjector::q_lora_rank() const { return impl_->q_lora_rank; }
int IndexerProjector::num_heads() const { return impl_->num_heads; }
const ProjectionOptions& IndexerProjector::options() const { return impl_->options; }

std::vector<float> IndexerProjector::queries(const std::vector<float>& qr) const {
  const bool quant = impl_->options.input_quant == InputQuant::kFp8Ue8m0Block128;
  return project_rows(impl_->wq_b, qr, quant, impl_->options.q, "projection input qr");
}

std::vector<float> IndexerProjector::keys(const std::vector<float>& x) const {
  const bool quant = impl_->options.input_quant == InputQuant::kFp8Ue8m0Block128;
  return project_rows(impl_->wk, x, quant, impl_->options.k, "projection input x");
}

std::vector<float> IndexerProjector::head_weights(const std::vector<float>& x) const {
  // weights_proj is a bf16/fp32 weight: no fp8 GEMM, so no activation quantisation.
  return project_rows(impl_->weights_proj, x, false, impl_->options.weights, "projection input x");
}

ProjectedTokens IndexerProjector::project(const std::vector<float>& x, const std::vector<float>& qr) const {
  const int64_t x_tokens = static_cast<int64_t>(x.size()) / impl_->hidden;
  const int64_t qr_tokens = static_cast<int64_t>(qr.size()) / impl_->q_lora_rank;
  if (x_tokens != qr_tokens) {
    throw_bad_input("projection: x holds " + std::to_string(x_tokens) + " tokens but qr holds " +
                    std::to_string(qr_tokens));
  }
  ProjectedTokens out;
  out.num_heads = impl_->num_heads;
  out.k = keys(x);  // checks x's size
  out.q = queries(qr);
  out.wproj = head_weights(x);
  out.tokens = x_tokens;
  return out;
}

ProjectedTokens project_indexer(const IndexerWeights& weights, const std::vector<float>& x,
                                const std::vector<float>& qr, ProjectionOptions options) {
  return IndexerProjector(weights, options).project(x, qr);
}

}  // namespace dsaf::ref
