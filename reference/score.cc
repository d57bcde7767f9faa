// File: score.cc — indexer scores (score.h). The head loop is innermost so that each
// head's dot stays a sequential chain while the compiler vectorises across heads:
// vectorising across independent chains changes no bits. index_scores is compiled for
// AVX-512, AVX2 and baseline x86-64 and picks one at load time (GCC target_clones): the
// lanes are wider, the operations per lane the same, and -ffp-contract=off (this folder's
// CMakeLists) keeps every multiply and add separately rounded on every clone.
#include "reference/score.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "reference/error.h"
#include "reference/numeric/minifloat.h"

namespace dsaf::ref {
namespace {

// The dots of heads [h0, h0 + kLanes): each its own chain over d = 0..127, one lane of a
// 64-byte GCC vector per head (one AVX-512 register, two AVX2 or four SSE registers; the
// lane arithmetic is the scalar arithmetic, element by element).
typedef float Fp32Lanes __attribute__((vector_size(64)));
typedef double Fp64Lanes __attribute__((vector_size(64)));
template <class T>
struct LanesOf;
template <>
struct LanesOf<float> { using type = Fp32Lanes; };
template <>
struct LanesOf<double> { using type = Fp64Lanes; };
template <class T>
using Lanes = typename LanesOf<T>::type;
template <class T>
inline constexpr int kLanes = sizeof(Lanes<T>) / sizeof(T);

template <class T>
inline __attribute__((always_inline)) void lane_dots(const T* q, int num_heads, int h0, const T* key, T* dots) {
  Lanes<T> acc{};  // +0 in every lane
  for (int d = 0; d < kHeadDim; ++d) {
    Lanes<T> qd;
    std::memcpy(&qd, q + static_cast<size_t>(d) * num_heads + h0, sizeof(qd));
    acc = acc + qd * key[d];
  }
  std::memcpy(dots + h0, &acc, sizeof(acc));
}

template <class T>
inline __attribute__((always_inline)) void head_dots(const std::vector<T>& q, int num_heads, const double* key_values,
                                                     T* dots) {
  T key[kHeadDim];
  for (int d = 0; d < kHeadDim; ++d) key[d] = static_cast<T>(key_values[d]);  // exact: T holds the value
  int h = 0;
  for (; h + kLanes<T> <= num_heads; h += kLanes<T>) lane_dots(q.data(), num_heads, h, key, dots);
  for (; h < num_heads; ++h) {  // heads past the last full vector
    T acc = T(0);
    for (int d = 0; d < kHeadDim; ++d) acc = acc + q[static_cast<size_t>(d) * num_heads + h] * key[d];
    dots[h] = acc;
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

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define DSAF_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DSAF_VECTOR_CLONES
#endif

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
    std::vector<double> dots(H);
    for (int64_t s = begin; s < end; ++s) {
      head_dots(query.dot_values, H, keys.dot_values.data() + s * kHeadDim, dots.data());
      double sum = 0.0;
      for (int h = 0; h < H; ++h) sum = sum + relu(dots[h]) * query.weights[h];
      scores[s - begin] = sum * keys.dot_scales[s];
    }
    return scores;
  }
  // fp32 operands: every stored value and weight is an fp32 (or bf16) value.
  std::vector<float> q(query.dot_values.begin(), query.dot_values.end());
  std::vector<float> w(query.weights.begin(), query.weights.end());
  std::vector<float> dots(H);
  for (int64_t s = begin; s < end; ++s) {
    head_dots(q, H, keys.dot_values.data() + s * kHeadDim, dots.data());
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
  }
  return scores;
}

}  // namespace dsaf::ref
