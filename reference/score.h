// File: score.h
// Indexer scores of one query token against cached keys (docs/numerics.md §2.8, §3.2, §4.1):
//
//   I[t, s] = k_scale[s] * sum_h ReLU( q[t, h] . k[s] ) * w[t, h]
//
// with the key scale applied after the head sum (DeepSeek fp8_index, DeepGEMM SM90).
// q[t, h] and k[s] are StoredHead::dot_values; w already holds the folded q scale.
//
// Accumulation (Recipe::score):
//  kFp32 — dot: acc = +0; acc = acc + q_d * k_d for d = 0..127 (each op rounded to fp32);
//          ReLU: dot > 0 ? dot : 0; term_h = relu * w_h; sum = +0; sum = sum + term_h for
//          h = 0..H-1; I = sum * k_scale.
//  kBf16 — the DeepSeek V4 reference in bf16 tensors: dot_h = bf16(fp32 dot as above),
//          term_h = bf16(relu(dot_h) * w_h), I = bf16(fp32 sequential sum of term_h),
//          then bf16(I * k_scale) when a key scale exists.
//  kExact — fp64 throughout. For e4m3fn x e4m3fn this dot is EXACT: an e4m3fn value is
//          m * 2^e with integer m <= 15 and e >= -9 (smallest subnormal 2^-9), so each
//          product is an integer multiple of 2^-18 with |product| <= 448^2 = 200704 < 2^18;
//          a sum of 128 of them is a multiple of 2^-18 below 128 * 2^18 = 2^25 in
//          magnitude, i.e. an integer below 2^43 in units of 2^-18, which every partial
//          sum represents exactly in fp64's 53-bit significand. For other formats kExact
//          is fp64 accumulation (not exact in general).
#pragma once

#include <cstdint>
#include <vector>

#include "reference/quantize.h"
#include "reference/recipe.h"

namespace dsaf::ref {

// A query token ready to score: H heads and their weights.
struct PreparedQuery {
  int num_heads = 0;
  std::vector<double> dot_values;  // transposed: [128][H], d-major
  std::vector<double> weights;     // [H]
};

// Keys in the compact form the scorer streams: [n][128] values + n post-dot scales.
struct KeyMatrix {
  int64_t num_keys = 0;
  std::vector<double> dot_values;  // [n][128]
  std::vector<double> dot_scales;  // [n]
  KeyMatrix() = default;
  explicit KeyMatrix(int64_t n);  // n keys, to be filled with put (each key from any thread)
  void append(const StoredHead& key);
  void put(int64_t s, const StoredHead& key);  // key s of [0, num_keys)
};

PreparedQuery prepare_query(const std::vector<StoredHead>& heads, const std::vector<double>& weights);

// Scores of keys [0, n) for one query. Results are fp32 values (kFp32/kBf16) or fp64.
std::vector<double> index_scores(const PreparedQuery& query, const KeyMatrix& keys,
                                 int64_t n, ScoreAccum accum);
// Scores of keys [begin, end): entries begin..end-1 of the above (each key's score
// depends on that key alone), so key ranges can be scored on separate threads.
std::vector<double> index_scores(const PreparedQuery& query, const KeyMatrix& keys,
                                 int64_t begin, int64_t end, ScoreAccum accum);

}  // namespace dsaf::ref
