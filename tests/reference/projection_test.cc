// Tests of the indexer projections (reference/projection.h) against a naive triple loop
// that sums in long double (x87: 64-bit significand) in index order, independent of
// Eigen. The contract is "fp64 sum, rounded once to fp32", so the check is:
//   |ours - exact| <= ulp(ours) / 2 + n * 2^-52 * Σ|w_i a_i|
// (half an ulp from the one rounding; the second term bounds the fp64 summation error,
// n * u64 * Σ|terms| with u64 = 2^-53, doubled to cover the long-double oracle's own
// error). Away from near-ties this forces the correctly rounded value.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "reference/error.h"
#include "reference/numeric/minifloat.h"
#include "reference/projection.h"

namespace dsaf::ref {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

IndexerWeights small_weights(int hidden, int rank, int heads, uint32_t seed) {
  IndexerWeights w;
  w.hidden = hidden;
  w.q_lora_rank = rank;
  w.num_heads = heads;
  w.wq_b = random_values(static_cast<size_t>(heads) * kHeadDim * rank, seed + 1, 0.05f);
  w.wk = random_values(static_cast<size_t>(kHeadDim) * hidden, seed + 2, 0.05f);
  w.weights_proj = random_values(static_cast<size_t>(heads) * hidden, seed + 3, 0.05f);
  w.k_norm_weight = random_values(kHeadDim, seed + 4);
  w.k_norm_bias = random_values(kHeadDim, seed + 5);
  return w;
}

ProjectionOptions all_fp32() {
  ProjectionOptions o;
  o.q = o.k = o.weights = ProjectionRounding::kFp32;
  return o;
}

// Checks out[t][o] against the naive dot product of weight row o ([out][in]) and input
// row t ([tokens][in]).
void expect_matches_naive(const std::vector<float>& out, const std::vector<float>& w,
                          const std::vector<float>& in, int out_dim, int in_dim, const char* what) {
  const int64_t tokens = static_cast<int64_t>(in.size()) / in_dim;
  ASSERT_EQ(out.size(), static_cast<size_t>(tokens * out_dim)) << what;
  int64_t bit_equal = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int o = 0; o < out_dim; ++o) {
      long double exact = 0.0L, magnitude = 0.0L;
      for (int i = 0; i < in_dim; ++i) {
        const long double term = static_cast<long double>(w[static_cast<size_t>(o) * in_dim + i]) *
                                 in[static_cast<size_t>(t * in_dim + i)];
        exact += term;
        magnitude += std::fabs(term);
      }
      const float ours = out[static_cast<size_t>(t * out_dim + o)];
      const long double half_ulp =
          (static_cast<long double>(std::nextafter(std::fabs(ours), INFINITY)) - std::fabs(ours)) / 2;
      const long double bound = half_ulp + in_dim * 0x1p-52L * magnitude;
      ASSERT_LE(std::fabs(static_cast<long double>(ours) - exact), bound)
          << what << " token " << t << " output " << o;
      bit_equal += ours == static_cast<float>(exact);
    }
  }
  // Random data almost never lands within 2^-29 relative of a rounding tie.
  EXPECT_GE(bit_equal, tokens * out_dim - 1) << what;
}

TEST(Projection, MatchesNaiveLoopOnSmallRandomShapes) {
  struct Shape { int hidden, rank, heads, tokens; };
  for (const Shape s : {Shape{200, 136, 3, 5}, Shape{1, 1, 1, 1}, Shape{257, 64, 2, 300}}) {
    const IndexerWeights w = small_weights(s.hidden, s.rank, s.heads, 7u * s.hidden);
    const std::vector<float> x = random_values(static_cast<size_t>(s.tokens) * s.hidden, 11);
    const std::vector<float> qr = random_values(static_cast<size_t>(s.tokens) * s.rank, 13);
    const ProjectedTokens p = project_indexer(w, x, qr, all_fp32());
    ASSERT_EQ(p.tokens, s.tokens);
    ASSERT_EQ(p.num_heads, s.heads);
    // q [T][H][128] is row h*128 + d of wq_b: the flat index t*H*128 + h*128 + d.
    expect_matches_naive(p.q, w.wq_b, qr, s.heads * kHeadDim, s.rank, "q");
    expect_matches_naive(p.k, w.wk, x, kHeadDim, s.hidden, "k");
    expect_matches_naive(p.wproj, w.weights_proj, x, s.heads, s.hidden, "wproj");
  }
}

TEST(Projection, DefaultOptionsRoundQAndKToBf16AndKeepWeightsFp32) {
  const IndexerWeights w = small_weights(96, 80, 2, 3);
  const std::vector<float> x = random_values(4 * 96, 21);
  const std::vector<float> qr = random_values(4 * 80, 22);
  const ProjectedTokens fp32 = project_indexer(w, x, qr, all_fp32());
  const ProjectedTokens model = project_indexer(w, x, qr);  // defaults
  for (size_t i = 0; i < fp32.q.size(); ++i) ASSERT_EQ(model.q[i], round_bf16(fp32.q[i])) << i;
  for (size_t i = 0; i < fp32.k.size(); ++i) ASSERT_EQ(model.k[i], round_bf16(fp32.k[i])) << i;
  EXPECT_EQ(model.wproj, fp32.wproj);
  ProjectionOptions bf16_weights;
  bf16_weights.weights = ProjectionRounding::kBf16;  // the original 2025-10 reference
  const ProjectedTokens orig = project_indexer(w, x, qr, bf16_weights);
  for (size_t i = 0; i < fp32.wproj.size(); ++i) ASSERT_EQ(orig.wproj[i], round_bf16(fp32.wproj[i]));
}

TEST(Projection, BatchedCallsAgreeWithTheSeparateProjections) {
  const IndexerWeights w = small_weights(130, 70, 2, 5);
  const IndexerProjector projector(w);
  const std::vector<float> x = random_values(3 * 130, 31);
  const std::vector<float> qr = random_values(3 * 70, 32);
  const ProjectedTokens p = projector.project(x, qr);
  EXPECT_EQ(p.q, projector.queries(qr));
  EXPECT_EQ(p.k, projector.keys(x));
  EXPECT_EQ(p.wproj, projector.head_weights(x));
  EXPECT_EQ(projector.hidden(), 130);
  EXPECT_EQ(projector.q_lora_rank(), 70);
  EXPECT_EQ(projector.num_heads(), 2);
}

// DeepSeek act_quant of a group (docs/numerics.md §2.6), written out independently of
// reference/quantize: s = the least power of two >= max(amax, 1e-4) * fl32(1/448).
std::vector<float> act_quant_naive(const std::vector<float>& in) {
  std::vector<float> out(in.size());
  for (size_t g = 0; g < in.size(); g += kHeadDim) {
    float amax = 0.0f;
    for (int i = 0; i < kHeadDim; ++i) amax = std::fmax(amax, std::fabs(in[g + i]));
    const float raw = std::fmax(amax, 1e-4f) * (1.0f / 448.0f);
    int e = 0;
    const float m = std::frexp(raw, &e);  // raw = m * 2^e, m in [0.5, 1)
    const float s = std::ldexp(1.0f, m == 0.5f ? e - 1 : e);
    for (int i = 0; i < kHeadDim; ++i) {
      out[g + i] = decode_e4m3fn(encode_e4m3fn(in[g + i] / s, Saturation::kSatFinite)) * s;
    }
  }
  return out;
}

TEST(Projection, Fp8InputQuantisationQuantisesEachGroupOf128) {
  const IndexerWeights w = small_weights(256, 128, 1, 9);
  std::vector<float> x = random_values(2 * 256, 41);
  x[5] = 300.0f;  // an outlier channel: its group's scale grows, the other group's does not
  const std::vector<float> qr = random_values(2 * 128, 42, 1e-6f);  // amax below the floor
  ProjectionOptions o = all_fp32();
  o.input_quant = InputQuant::kFp8Ue8m0Block128;
  const ProjectedTokens p = project_indexer(w, x, qr, o);
  expect_matches_naive(p.k, w.wk, act_quant_naive(x), kHeadDim, 256, "k (fp8 input)");
  expect_matches_naive(p.q, w.wq_b, act_quant_naive(qr), kHeadDim, 128, "q (fp8 input)");
  // weights_proj is not an fp8 GEMM: its input is not quantised.
  expect_matches_naive(p.wproj, w.weights_proj, x, 1, 256, "wproj");
}

void expect_bad_input(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no dsaf::Error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Projection, RejectsShapeMismatchesAndNonFiniteValues) {
  const IndexerWeights good = small_weights(64, 32, 2, 1);
  const auto with = [&](const std::function<void(IndexerWeights&)>& edit) {
    IndexerWeights w = good;
    edit(w);
    return [w] { IndexerProjector p(w); };
  };
  expect_bad_input(with([](IndexerWeights& w) { w.wq_b.pop_back(); }), "wq_b");
  expect_bad_input(with([](IndexerWeights& w) { w.wk.push_back(0.0f); }), "wk");
  expect_bad_input(with([](IndexerWeights& w) { w.weights_proj.resize(64); }), "weights_proj");
  expect_bad_input(with([](IndexerWeights& w) { w.k_norm_weight.resize(127); }), "k_norm.weight");
  expect_bad_input(with([](IndexerWeights& w) { w.k_norm_bias.resize(129); }), "k_norm.bias");
  expect_bad_input(with([](IndexerWeights& w) { w.k_norm_weight.clear(); }), "without k_norm.weight");
  expect_bad_input(with([](IndexerWeights& w) { w.num_heads = 0; }), "num_heads");
  expect_bad_input(with([](IndexerWeights& w) { w.hidden = 65; }), "wk");
  expect_bad_input(with([](IndexerWeights& w) { w.wk[3] = NAN; }), "wk: non-finite");
  expect_bad_input([&] {
    ProjectionOptions o;
    o.input_quant = InputQuant::kFp8Ue8m0Block128;  // 64 and 32 are not multiples of 128
    IndexerProjector p(good, o);
  }, "divisible by 128");

  // Norm parameters are optional (a recipe without a norm needs none).
  IndexerWeights no_norm = good;
  no_norm.k_norm_weight.clear();
  no_norm.k_norm_bias.clear();
  EXPECT_NO_THROW(IndexerProjector{no_norm});

  const IndexerProjector p(good);
  const std::vector<float> x = random_values(2 * 64, 3), qr = random_values(2 * 32, 4);
  expect_bad_input([&] { p.keys(std::vector<float>(63)); }, "multiple of the width 64");
  expect_bad_input([&] { p.head_weights({}); }, "not a positive multiple");
  expect_bad_input([&] { p.queries(std::vector<float>(33)); }, "width 32");
  expect_bad_input([&] { p.project(x, random_values(3 * 32, 5)); }, "x holds 2 tokens but qr holds 3");
  std::vector<float> bad = x;
  bad[70] = INFINITY;
  expect_bad_input([&] { p.keys(bad); }, "non-finite value at element 70");
}

}  // namespace
}  // namespace dsaf::ref
