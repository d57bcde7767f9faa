// Reference speed on one query against 32K cached fp8 keys: the scores + top-512 alone
// in each score accumulation mode (one core), and the whole job with the key path.
#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "oracle/parallel.h"
#include "reference/numeric/minifloat.h"
#include "reference/pipeline.h"
#include "reference/recipe.h"
#include "reference/rope.h"
#include "reference/score.h"
#include "reference/topk.h"

namespace {

using namespace dsaf::ref;

constexpr int kHeads = 64;
constexpr int64_t kKeys = 32768;

struct Problem {
  PreparedQuery query;
  KeyMatrix keys;
};

// Random finite e4m3fn codes for q and k (never zeros: timing on zeros flatters).
const Problem& problem() {
  static const Problem p = [] {
    std::mt19937 rng(2026);
    std::uniform_int_distribution<int> code(0, 0x7E);
    std::uniform_int_distribution<int> sign(0, 1);
    const auto random_head = [&] {
      StoredHead h;
      for (double& v : h.dot_values) v = decode_e4m3fn(static_cast<uint8_t>(code(rng) | sign(rng) << 7));
      h.dot_scale = 0x1p-8;
      return h;
    };
    Problem out;
    std::vector<StoredHead> heads;
    std::vector<double> weights;
    std::normal_distribution<float> normal(0.0f, 0.01f);
    for (int h = 0; h < kHeads; ++h) {
      heads.push_back(random_head());
      weights.push_back(normal(rng));
    }
    out.query = prepare_query(heads, weights);
    for (int64_t s = 0; s < kKeys; ++s) out.keys.append(random_head());
    return out;
  }();
  return p;
}

void BM_ScoresAndTop512(benchmark::State& state) {
  const auto accum = static_cast<ScoreAccum>(state.range(0));
  const Problem& p = problem();
  for (auto _ : state) {
    const std::vector<double> scores = index_scores(p.query, p.keys, kKeys, accum);
    benchmark::DoNotOptimize(select_topk(scores, kKeys, 512));
  }
  state.SetLabel(accum == ScoreAccum::kExact ? "exact" : accum == ScoreAccum::kFp32 ? "fp32" : "bf16");
}

// The whole per-query reference job of a study: 32K keys through the dsv32-ref key path
// (bf16 inputs, LayerNorm, RoPE, Hadamard, fp8 with ue8m0 scales), one 64-head query
// through the query path, the fp32 scores and the top-512; on one thread and with the
// keys split over every core (the split changes no result: each key is its own job).
// The baseline bench/torch_reference_cpu.py runs the same job in PyTorch.
void BM_KeyPathScoresTop512(benchmark::State& state) {
  const Recipe& recipe = preset("dsv32-ref");
  std::mt19937 rng(2026);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto bf16_values = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = round_bf16(normal(rng));
    return v;
  };
  const std::vector<float> k_in = bf16_values(static_cast<size_t>(kKeys) * kHeadDim);
  const std::vector<float> q_in = bf16_values(static_cast<size_t>(kHeads) * kHeadDim);
  const std::vector<float> wproj = bf16_values(kHeads);
  std::vector<float> gamma = bf16_values(kHeadDim), beta = bf16_values(kHeadDim);
  for (float& g : gamma) g = round_bf16(1.0f + 0.1f * g);
  for (float& b : beta) b = round_bf16(0.1f * b);
  const RopeTable rope(recipe.rope.table, static_cast<int>(kKeys));
  const NormParams norm{gamma.data(), beta.data()};
  std::vector<int> positions(kKeys);
  std::iota(positions.begin(), positions.end(), 0);
  const int threads = static_cast<int>(state.range(0));
  // Filled in place every run, as oracle::build_keys fills its matrix. Allocated once: the
  // 33.5 MB matrix is above glibc's largest mmap threshold (32 MB), so a fresh one per run
  // would pay ~8,200 page faults that the baseline does not (its 16 MB tensors come back
  // from malloc's heap).
  KeyMatrix keys(kKeys);
  for (auto _ : state) {
    dsaf::oracle::parallel_for(kKeys, threads, [&](int64_t begin, int64_t end) {
      run_key_paths(recipe, k_in.data() + begin * kHeadDim, positions.data() + begin, end - begin, norm, rope,
                    keys, begin);
    });
    const QueryOutput q = run_query_path(recipe, q_in.data(), kHeads, wproj.data(), static_cast<int>(kKeys - 1), rope);
    const PreparedQuery prepared = prepare_query(q.heads, q.weights);
    std::vector<double> scores(kKeys);
    dsaf::oracle::parallel_for(kKeys, threads, [&](int64_t begin, int64_t end) {
      const std::vector<double> part = index_scores(prepared, keys, begin, end, recipe.score);
      std::copy(part.begin(), part.end(), scores.begin() + begin);
    });
    benchmark::DoNotOptimize(select_topk(scores, kKeys, 512));
  }
  state.SetLabel(std::to_string(threads) + (threads == 1 ? " thread" : " threads"));
}

}  // namespace

BENCHMARK(BM_KeyPathScoresTop512)
    ->Arg(1)
    ->Arg(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())))
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_ScoresAndTop512)
    ->Arg(static_cast<int>(ScoreAccum::kFp32))
    ->Arg(static_cast<int>(ScoreAccum::kExact))
    ->Arg(static_cast<int>(ScoreAccum::kBf16))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
