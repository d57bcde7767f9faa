// Reference speed: scores + top-512 of one query (64 heads x 128 dims) against 32K
// cached fp8 keys, on one core, in each score accumulation mode. Issue budget: < 0.5 s.
#include <random>

#include <benchmark/benchmark.h>

#include "reference/numeric/minifloat.h"
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

}  // namespace

BENCHMARK(BM_ScoresAndTop512)
    ->Arg(static_cast<int>(ScoreAccum::kFp32))
    ->Arg(static_cast<int>(ScoreAccum::kExact))
    ->Arg(static_cast<int>(ScoreAccum::kBf16))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
