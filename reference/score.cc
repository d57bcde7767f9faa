// File: score.cc — indexer scores (score.h). The head loop is innermost so that each
// head's dot stays a sequential chain while the compiler vectorises across heads:
// vectorising across independent chains changes no bits.
#include "reference/score.h"

#include <string>

#include "reference/error.h"
#include "reference/numeric/minifloat.h"

namespace dsaf::ref {
namespace {

template <class T>
void head_dots(const std::vector<T>& q, int num_heads, const double* key, T* dots) {
  for (int h = 0; h < num_heads; ++h) dots[h] = T(0);
  for (int d = 0; d < kHeadDim; ++d) {
    const T k = static_cast<T>(key[d]);
    const T* qd = q.data() + static_cast<size_t>(d) * num_heads;
    for (int h = 0; h < num_heads; ++h) dots[h] = dots[h] + qd[h] * k;
  }
}

template <class T>
T relu(T v) { return v > T(0) ? v : T(0); }

}  // namespace

void KeyMatrix::append(const StoredHead& key) {
  dot_values.insert(dot_values.end(), key.dot_values.begin(), key.dot_values.end());
  dot_scales.push_back(key.dot_scale);
  ++num_keys;
}

PreparedQuery prepare_query(const std::vector<StoredHead>& heads,
                            const std::vector<double>& weights) {
  if (heads.size() != weights.size() || heads.empty()) {
    throw_bad_input("query: need one weight per head and at least one head");
  }
  PreparedQuery q;
  q.num_heads = static_cast<int>(heads.size());
  q.weights = weights;
  q.dot_values.resize(static_cast<size_t>(kHeadDim) * q.num_heads);
  for (int h = 0; h < q.num_heads; ++h) {
    for (int d = 0; d < kHeadDim; ++d) q.dot_values[d * q.num_heads + h] = heads[h].dot_values[d];
  }
  return q;
}

std::vector<double> index_scores(const PreparedQuery& query, const KeyMatrix& keys,
                                 int64_t n, ScoreAccum accum) {
  if (n < 0 || n > keys.num_keys) {
    throw_bad_input("scores: " + std::to_string(n) + " keys requested, " +
                    std::to_string(keys.num_keys) + " available");
  }
  const int H = query.num_heads;
  std::vector<double> scores(n);
  if (accum == ScoreAccum::kExact) {
    std::vector<double> dots(H);
    for (int64_t s = 0; s < n; ++s) {
      head_dots(query.dot_values, H, keys.dot_values.data() + s * kHeadDim, dots.data());
      double sum = 0.0;
      for (int h = 0; h < H; ++h) sum = sum + relu(dots[h]) * query.weights[h];
      scores[s] = sum * keys.dot_scales[s];
    }
    return scores;
  }
  // fp32 operands: every stored value and weight is an fp32 (or bf16) value.
  std::vector<float> q(query.dot_values.begin(), query.dot_values.end());
  std::vector<float> w(query.weights.begin(), query.weights.end());
  std::vector<float> dots(H);
  for (int64_t s = 0; s < n; ++s) {
    head_dots(q, H, keys.dot_values.data() + s * kHeadDim, dots.data());
    const float k_scale = static_cast<float>(keys.dot_scales[s]);
    if (accum == ScoreAccum::kFp32) {
      float sum = 0.0f;
      for (int h = 0; h < H; ++h) sum = sum + relu(dots[h]) * w[h];
      scores[s] = sum * k_scale;
    } else {  // kBf16
      float sum = 0.0f;
      for (int h = 0; h < H; ++h) {
        sum = sum + round_bf16(relu(round_bf16(dots[h])) * w[h]);
      }
      float score = round_bf16(sum);
      if (k_scale != 1.0f) score = round_bf16(score * k_scale);
      scores[s] = score;
    }
  }
  return scores;
}

}  // namespace dsaf::ref
