// File: score.cc — indexer scores (score.h). The head loop is innermost so that each
// head's dot stays a sequential chain while the compiler vectorises across heads:
// vectorising across independent chains changes no bits. index_scores is compiled once
// per vector width (DSAF_VECTOR_CLONES, numeric/lanes.h).
#include "reference/score.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "reference/error.h"
#include "reference/numeric/lanes.h"
#include "reference/numeric/minifloat.h"

namespace dsaf::ref {
namespace {

// The dots of kKeys keys with heads [h0, h0 + kLanes): each (key, head) its own chain
// over d = 0..127, one lane of a 64-byte GCC vector per head (one AVX-512 register, two
// AVX2 or four SSE registers; the lane arithmetic is the scalar arithmetic, element by
// element). The kKeys chains are independent, so running them side by side changes no
// bits; it hides the latency of each chain's adds behind the others'.
template <class T>
using HeadLanes = typename LaneVectors<T>::Values;
template <class T>
inline constexpr int kLanes = sizeof(HeadLanes<T>) / sizeof(T);
// Keys scored side by side: four chains keep an AVX-512 core's two adders busy (4-cycle
// latency) while every head vector of q is loaded once per four keys.
inline constexpr int kKeysInFlight = 4;

template <class T, int kKeys>
inline __attribute__((always_inline)) void lane_dots(const T* q, int num_heads, int h0, const T (*keys)[kHeadDim],
                                                     T* dots) {
  HeadLanes<T> acc[kKeys] = {};  // +0 in every lane
  for (int d = 0; d < kHeadDim; ++d) {
    HeadLanes<T> qd;
    std::memcpy(&qd, q + static_cast<size_t>(d) * num_heads + h0, sizeof(qd));
    for (int k = 0; k < kKeys; ++k) acc[k] = acc[k] + qd * keys[k][d];
  }
  for (int k = 0; k < kKeys; ++k) std::memcpy(dots + k * num_heads + h0, &acc[k], sizeof(acc[k]));
}

// dots[k * num_heads + h] = q_h . key k for the kKeys keys whose dot values start at
// key_values[k].
template <class T, int kKeys>
inline __attribute__((always_inline)) void head_dots(const std::vector<T>& q, int num_heads,
                                                     const double* const* key_values, T* dots) {
  T keys[kKeys][kHeadDim];
  for (int k = 0; k < kKeys; ++k) {
    for (int d = 0; d < kHeadDim; ++d) keys[k][d] = static_cast<T>(key_values[k][d]);  // exact: T holds the value
  }
  int h = 0;
  for (; h + kLanes<T> <= num_heads; h += kLanes<T>) lane_dots<T, kKeys>(q.data(), num_heads, h, keys, dots);
  for (; h < num_heads; ++h) {  // heads past the last full vector
    for (int k = 0; k < kKeys; ++k) {
      T acc = T(0);
      for (int d = 0; d < kHeadDim; ++d) acc = acc + q[static_cast<size_t>(d) * num_heads + h] * keys[k][d];
      dots[k * num_heads + h] = acc;
    }
  }
}

// finish(s, dots of key s) for every key s of [begin, end), kKeysInFlight keys at a time.
template <class T, class Finish>
inline __attribute__((always_inline)) void for_each_key_dots(const std::vector<T>& q, int num_heads,
                                                             const KeyMatrix& keys, int64_t begin, int64_t end,
                                                             Finish finish) {
  std::vector<T> dots(static_cast<size_t>(kKeysInFlight) * num_heads);
  const double* key_values[kKeysInFlight];
  int64_t s = begin;
  for (; s + kKeysInFlight <= end; s += kKeysInFlight) {
    for (int k = 0; k < kKeysInFlight; ++k) key_values[k] = keys.dot_values.data() + (s + k) * kHeadDim;
    head_dots<T, kKeysInFlight>(q, num_heads, key_values, dots.data());
    for (int k = 0; k < kKeysInFlight; ++k) finish(s + k, dots.data() + k * num_heads);
  }
  for (; s < end; ++s) {
    key_values[0] = keys.dot_values.data() + s * kHeadDim;
    head_dots<T, 1>(q, num_heads, key_values, dots.data());
    finish(s, dots.data());
  }
}

template <class T>
T relu(T v) { return v > T(0) ? v : T(0); }

}  // namespace

KeyMatrix::KeyMatrix(int64_t n)
    : num_keys(n), dot_values(static_cast<size_t>(n) * kHeadDim), dot_scales(static_cast<size_t>(n)) {}

void KeyMatrix::put(int64_t s, const StoredHead& key) {
  std::copy(key.dot_values.begin(), key.dot_values.end(), dot_values.begin() + s * kHeadDim);
  dot_scales[s] = key.dot_scale;
}

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
  return index_scores(query, keys, 0, n, accum);
}

DSAF_VECTOR_CLONES
std::vector<double> index_scores(const PreparedQuery& query, const KeyMatrix& keys,
                                 int64_t begin, int64_t end, ScoreAccum accum) {
  if (begin < 0 || begin > end || end > keys.num_keys) {
    throw_bad_input("scores: keys [" + std::to_string(begin) + ", " + std::to_string(end) + ") requested, " +
                    std::to_string(keys.num_keys) + " available");
  }
  const int H = query.num_heads;
  std::vector<double> scores(end - begin);
  if (accum == ScoreAccum::kExact) {
    for_each_key_dots(query.dot_values, H, keys, begin, end, [&](int64_t s, const double* dots) {
      double sum = 0.0;
      for (int h = 0; h < H; ++h) sum = sum + relu(dots[h]) * query.weights[h];
      scores[s - begin] = sum * keys.dot_scales[s];
    });
    return scores;
  }
  // fp32 operands: every stored value and weight is an fp32 (or bf16) value.
  const std::vector<float> q(query.dot_values.begin(), query.dot_values.end());
  const std::vector<float> w(query.weights.begin(), query.weights.end());
  for_each_key_dots(q, H, keys, begin, end, [&](int64_t s, const float* dots) {
    const float k_scale = static_cast<float>(keys.dot_scales[s]);
    if (accum == ScoreAccum::kFp32) {
      float sum = 0.0f;
      for (int h = 0; h < H; ++h) sum = sum + relu(dots[h]) * w[h];
      scores[s - begin] = sum * k_scale;
    } else {  // kBf16
      float sum = 0.0f;
      for (int h = 0; h < H; ++h) {
        sum = sum + round_bf16(relu(round_bf16(dots[h])) * w[h]);
      }
      float score = round_bf16(sum);
      if (k_scale != 1.0f) score = round_bf16(score * k_scale);
      scores[s - begin] = score;
    }
  });
  return scores;
}

}  // namespace dsaf::ref
