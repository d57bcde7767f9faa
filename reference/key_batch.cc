// File: key_batch.cc — the key path of many tokens at once (pipeline.h, run_key_paths).
// A block of Lanes<T>::kCount tokens (16 in fp32, 8 in fp64) runs in the lanes of one
// vector: lane j is token j's scalar key path (pipeline.cc) step for step, through the same
// stage templates (stage_arithmetic.h) and the lane-wise codecs (numeric/lanes.h), so each
// lane gives the scalar bits. Stores the lanes cannot run (fp4 formats) take the scalar
// store_head on each lane's values. A block the scalar path would reject anywhere
// (non-finite input or result, a position outside the RoPE table, missing norm
// parameters, a rounding or format its compute type does not allow) runs token by token
// through run_key_path instead, so it throws what run_key_path throws, for the same token.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "reference/error.h"
#include "reference/numeric/lanes.h"
#include "reference/numeric/minifloat.h"
#include "reference/pipeline.h"
#include "reference/stage_arithmetic.h"

namespace dsaf::ref {
namespace {

// Whether the scalar key path gets past its checks for every token of [begin, end):
// finite inputs, the norm's parameters, positions inside the table.
bool block_passes_checks(const Recipe& recipe, const float* k_in, const int* positions, int64_t begin,
                         int64_t end, const NormParams& norm, const RopeTable& rope) {
  const NormKind kind = recipe.key_norm.kind;
  if (kind != NormKind::kNone &&
      (norm.weight == nullptr || (kind == NormKind::kLayerNorm && norm.bias == nullptr))) {
    return false;
  }
  // A value is finite when its exponent field is not all ones; OR-ing the test over the
  // block (no early exit) lets the compiler run it in vector lanes.
  uint32_t non_finite = 0;
  for (int64_t e = begin * kHeadDim; e < end * kHeadDim; ++e) {
    non_finite |= static_cast<uint32_t>((float_bits(k_in[e]) & 0x7F80'0000u) == 0x7F80'0000u);
  }
  for (int64_t t = begin; t < end; ++t) {
    if (!rope.holds(positions[t])) return false;
  }
  return non_finite == 0;
}

bool any_rounding(const IntermediateRounding& r) { return r.input || r.norm || r.rope || r.hadamard; }

template <class T>
void round_to_bf16_if(bool enabled, Lanes<T>* x) {
  if constexpr (std::is_same_v<T, float>) {
    if (!enabled) return;
    for (int i = 0; i < kHeadDim; ++i) x[i] = round_bf16(x[i]);
  }
}

// The token of lane j: lanes past the block's last token repeat it (their results are
// dropped), so every lane computes on valid inputs.
int64_t token_of_lane(int64_t begin, int count, int j) { return begin + std::min(j, count - 1); }

// values[j][i] = x[i][j] for lanes j < count: lane j's 128 values as one key's row of
// doubles (every fp32 value is a double exactly).
void store_transposed(const Fp32Lanes* x, int count, double* values) {
  float rows[Fp32Lanes::kCount][kHeadDim];
  for (int i = 0; i < kHeadDim; ++i) {
    for (int j = 0; j < Fp32Lanes::kCount; ++j) rows[j][i] = x[i][j];
  }
  for (int j = 0; j < count; ++j) {
    for (int i = 0; i < kHeadDim; ++i) values[j * kHeadDim + i] = rows[j][i];
  }
}

// Writes each lane's stored key, as store_head's dot values and scale, to keys
// [slot, slot + count).
void store_lanes(const QuantSpec& spec, const Fp32Lanes* x, int count, KeyMatrix& keys, int64_t slot) {
  double* values = keys.dot_values.data() + slot * kHeadDim;
  double* scales = keys.dot_scales.data() + slot;
  switch (spec.format) {
    case StorageFormat::kNone:
    case StorageFormat::kFp32:
      store_transposed(x, count, values);
      std::fill(scales, scales + count, 1.0);
      return;
    case StorageFormat::kBf16: {
      Fp32Lanes rounded[kHeadDim];
      for (int i = 0; i < kHeadDim; ++i) rounded[i] = round_bf16(x[i]);
      store_transposed(rounded, count, values);
      std::fill(scales, scales + count, 1.0);
      return;
    }
    case StorageFormat::kFp8E4m3fn: {
      Fp32Lanes amax(0.0f);
      for (int i = 0; i < kHeadDim; ++i) amax = greater_of(abs(x[i]), amax);
      Fp32Lanes scale;
      for (int j = 0; j < Fp32Lanes::kCount; ++j) scale.set(j, block_scale(amax[j], spec, kFp8Max));
      const Fp32Lanes reciprocal = Fp32Lanes(1.0f) / scale;
      LaneBits<float> codes[kHeadDim];
      for (int i = 0; i < kHeadDim; ++i) {
        const Fp32Lanes scaled = spec.apply == ScaleApply::kDivide ? x[i] / scale : x[i] * reciprocal;
        codes[i] = encode_e4m3fn(scaled, spec.saturation);
      }
      Fp32Lanes decoded[kHeadDim];
      for (int i = 0; i < kHeadDim; ++i) decoded[i] = decode_e4m3fn(codes[i]);
      store_transposed(decoded, count, values);
      for (int j = 0; j < count; ++j) scales[j] = scale[j];
      return;
    }
    case StorageFormat::kFp4E2m1:
    case StorageFormat::kFp4SimulatedBf16:
      for (int j = 0; j < count; ++j) {
        float head[kHeadDim];
        for (int i = 0; i < kHeadDim; ++i) head[i] = x[i][j];
        keys.put(slot + j, store_head(head, spec));
      }
      return;
  }
}

void store_lanes(const QuantSpec&, const Fp64Lanes* x, int count, KeyMatrix& keys, int64_t slot) {
  // fp64 compute stores unquantised (key_block checked the format).
  for (int j = 0; j < count; ++j) {
    for (int i = 0; i < kHeadDim; ++i) keys.dot_values[(slot + j) * kHeadDim + i] = x[i][j];
    keys.dot_scales[slot + j] = 1.0;
  }
}

// The key path of tokens [begin, begin + count) in the lanes of one Lanes<T>, stored to
// keys from `slot`. False (nothing stored) where the scalar path would throw.
template <class T>
bool key_block(const Recipe& recipe, const float* k_in, const int* positions, int64_t begin, int count,
               const NormParams& norm, const RopeTable& rope, KeyMatrix& keys, int64_t slot) {
  using L = Lanes<T>;
  if constexpr (std::is_same_v<T, double>) {
    if (recipe.key_quant.format != StorageFormat::kNone || any_rounding(recipe.key_rounding)) return false;
  }
  L x[kHeadDim];
  for (int j = 0; j < L::kCount; ++j) {
    const float* in = k_in + token_of_lane(begin, count, j) * kHeadDim;
    for (int i = 0; i < kHeadDim; ++i) x[i].set(j, static_cast<T>(in[i]));
  }
  round_to_bf16_if(recipe.key_rounding.input, x);
  if (recipe.key_norm.kind != NormKind::kNone) {
    apply_norm(x, recipe.key_norm, norm.weight, norm.bias);
    round_to_bf16_if(recipe.key_rounding.norm, x);
  }
  L cos[kRopePairs], sin[kRopePairs];
  for (int j = 0; j < L::kCount; ++j) {
    const int position = positions[token_of_lane(begin, count, j)];
    const float* cos_row = rope.cos(position);
    const float* sin_row = rope.sin(position);
    for (int i = 0; i < kRopePairs; ++i) {
      cos[i].set(j, static_cast<T>(cos_row[i]));
      sin[i].set(j, static_cast<T>(sin_row[i]));
    }
  }
  rotate_pairs(x, recipe.rope, cos, sin);
  round_to_bf16_if(recipe.key_rounding.rope, x);
  if (recipe.hadamard) {
    apply_hadamard(x);
    round_to_bf16_if(recipe.key_rounding.hadamard, x);
  }
  for (int i = 0; i < kHeadDim; ++i) {
    if (!all_finite(x[i])) return false;  // store_head rejects it: the scalar path names it
  }
  store_lanes(recipe.key_quant, x, count, keys, slot);
  return true;
}

}  // namespace

DSAF_VECTOR_CLONES __attribute__((flatten))
void run_key_paths(const Recipe& recipe, const float* k_in, const int* positions, int64_t count,
                   const NormParams& norm, const RopeTable& rope, KeyMatrix& keys, int64_t first_slot) {
  if (count < 0 || first_slot < 0 || first_slot > keys.num_keys - count) {
    throw_bad_input("key paths: " + std::to_string(count) + " keys from slot " + std::to_string(first_slot) +
                    " do not fit a key matrix of " + std::to_string(keys.num_keys));
  }
  const bool fp64 = recipe.compute == Compute::kFp64;
  const int lanes = fp64 ? Fp64Lanes::kCount : Fp32Lanes::kCount;
  for (int64_t begin = 0; begin < count; begin += lanes) {
    const int n = static_cast<int>(std::min<int64_t>(lanes, count - begin));
    const bool in_lanes =
        block_passes_checks(recipe, k_in, positions, begin, begin + n, norm, rope) &&
        (fp64 ? key_block<double>(recipe, k_in, positions, begin, n, norm, rope, keys, first_slot + begin)
              : key_block<float>(recipe, k_in, positions, begin, n, norm, rope, keys, first_slot + begin));
    if (in_lanes) continue;
    for (int64_t t = begin; t < begin + n; ++t) {
      keys.put(first_slot + t, run_key_path(recipe, k_in + t * kHeadDim, positions[t], norm, rope));
    }
  }
}

}  // namespace dsaf::ref
