// File: key_batch_test.cc — run_key_paths (16 tokens in the lanes of a vector) against
// run_key_path (one token at a time): the same bits in every preset, on rows that reach
// every branch of the lane code (each store format, e4m3fn codes outside the shortcut's
// range, fp4 blocks, all-zero rows), and the same exception for the same bad token.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "reference/error.h"
#include "reference/numeric/minifloat.h"
#include "reference/pipeline.h"

namespace dsaf::ref {
namespace {

constexpr int kPositions = 4096;

struct Batch {
  std::vector<float> k_in;
  std::vector<int> positions;
  std::vector<float> gamma, beta;
  int64_t count() const { return static_cast<int64_t>(positions.size()); }
  NormParams norm() const { return {gamma.data(), beta.data()}; }
};

// `count` bf16 rows: most N(0, 1) with a few outlier channels; every 7th row scaled by a
// power of two from 2^-40 to 2^40 (fp8 codes below 2^-6, subnormal and zero codes, large
// scales); every 23rd row all zeros (amax below the floor).
Batch make_batch(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> position(0, kPositions - 1), channel(0, kHeadDim - 1), power(-40, 40);
  Batch b;
  b.k_in.resize(static_cast<size_t>(count) * kHeadDim);
  for (int t = 0; t < count; ++t) {
    float* row = b.k_in.data() + static_cast<size_t>(t) * kHeadDim;
    for (int i = 0; i < kHeadDim; ++i) row[i] = normal(rng);
    for (int o = 0; o < 3; ++o) row[channel(rng)] *= 40.0f;
    if (t % 7 == 3) {
      const float scale = std::ldexp(1.0f, power(rng));
      for (int i = 0; i < kHeadDim; ++i) row[i] *= scale;
    }
    if (t % 23 == 5) std::fill(row, row + kHeadDim, 0.0f);
    for (int i = 0; i < kHeadDim; ++i) row[i] = round_bf16(row[i]);
    b.positions.push_back(position(rng));
  }
  for (int i = 0; i < kHeadDim; ++i) {
    b.gamma.push_back(round_bf16(1.0f + 0.1f * normal(rng)));
    b.beta.push_back(round_bf16(0.1f * normal(rng)));
  }
  return b;
}

// The keys of a batch from slot `first` of a matrix of count + first + 2 keys, token by
// token (scalar) or in lanes.
KeyMatrix scalar_keys(const Recipe& r, const Batch& b, const RopeTable& rope, int64_t first) {
  KeyMatrix keys(b.count() + first + 2);
  for (int64_t t = 0; t < b.count(); ++t) {
    keys.put(first + t, run_key_path(r, b.k_in.data() + t * kHeadDim, b.positions[t], b.norm(), rope));
  }
  return keys;
}
KeyMatrix lane_keys(const Recipe& r, const Batch& b, const RopeTable& rope, int64_t first) {
  KeyMatrix keys(b.count() + first + 2);
  run_key_paths(r, b.k_in.data(), b.positions.data(), b.count(), b.norm(), rope, keys, first);
  return keys;
}

// Index of the first differing double (by bits), or -1.
int64_t first_difference(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0) return static_cast<int64_t>(i);
  }
  return -1;
}

void expect_same_keys(const KeyMatrix& want, const KeyMatrix& got, const std::string& what) {
  const int64_t value = first_difference(want.dot_values, got.dot_values);
  EXPECT_EQ(value, -1) << what << ": key " << value / kHeadDim << " element " << value % kHeadDim
                       << " scalar " << want.dot_values[value] << " lanes " << got.dot_values[value];
  const int64_t scale = first_difference(want.dot_scales, got.dot_scales);
  EXPECT_EQ(scale, -1) << what << ": scale of key " << scale;
}

// Every preset, 1,000 tokens (not a multiple of 16 or 8) from slot 3: the same bits.
TEST(KeyBatch, EveryPresetGivesTheScalarBits) {
  const Batch b = make_batch(1000, 2026);
  for (const Recipe& r : presets()) {
    const RopeTable rope(r.rope.table, kPositions);
    expect_same_keys(scalar_keys(r, b, rope, 3), lane_keys(r, b, rope, 3), r.name);
  }
}

// Every batch length around a block boundary, in the fp32 and the fp64 (8-lane) kernels.
TEST(KeyBatch, BlockTailsGiveTheScalarBits) {
  for (const char* name : {"dsv32-ref", "exact", "sglang-v4-fp4"}) {
    const Recipe& r = preset(name);
    const RopeTable rope(r.rope.table, kPositions);
    for (int count : {0, 1, 7, 8, 9, 15, 16, 17, 33}) {
      const Batch b = make_batch(count, 7 + count);
      expect_same_keys(scalar_keys(r, b, rope, 0), lane_keys(r, b, rope, 0),
                       std::string(name) + " x " + std::to_string(count));
    }
  }
}

// The message of the dsaf::Error a call throws ("" if none).
template <class Call>
std::string error_of(Call call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(KeyBatch, BadTokensThrowWhatTheScalarPathThrows) {
  const Recipe& r = preset("dsv32-ref");
  const RopeTable rope(r.rope.table, kPositions);
  Batch nan_input = make_batch(40, 1);
  nan_input.k_in[37 * kHeadDim + 5] = kQuietNan;
  Batch bad_position = make_batch(40, 2);
  bad_position.positions[21] = kPositions;
  Batch both = make_batch(40, 3);  // a bad position before a NaN in the same block
  both.positions[18] = -1;
  both.k_in[20 * kHeadDim] = std::numeric_limits<float>::infinity();
  Batch overflow = make_batch(40, 4);  // finite input whose LayerNorm overflows to inf
  for (int i = 0; i < kHeadDim; ++i) overflow.k_in[30 * kHeadDim + i] = i == 0 ? 3e38f : -3e38f;
  for (const Batch* b : {&nan_input, &bad_position, &both, &overflow}) {
    const std::string want = error_of([&] { scalar_keys(r, *b, rope, 0); });
    EXPECT_FALSE(want.empty());
    EXPECT_EQ(error_of([&] { lane_keys(r, *b, rope, 0); }), want);
  }
  Batch no_norm = make_batch(20, 5);
  no_norm.beta.clear();
  const NormParams missing_bias{no_norm.gamma.data(), nullptr};
  KeyMatrix keys(20);
  EXPECT_THROW(run_key_paths(r, no_norm.k_in.data(), no_norm.positions.data(), 20, missing_bias, rope, keys, 0),
               Error);
  EXPECT_THROW(run_key_paths(r, no_norm.k_in.data(), no_norm.positions.data(), 20, {no_norm.gamma.data(), no_norm.gamma.data()},
                             rope, keys, 1),
               Error);  // 20 keys from slot 1 do not fit 20 slots
}

}  // namespace
}  // namespace dsaf::ref
