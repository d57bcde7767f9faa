// File: pipeline.h
// The indexer's per-token paths under a Recipe (docs/design.md "Pipeline under test"):
//   key   k_in[128] -> [bf16] -> norm -> [bf16] -> RoPE -> [bf16] -> Hadamard -> [bf16]
//                    -> store (quantise)                       [..] = Recipe rounding
//   query q_in[H][128] -> [bf16] -> RoPE -> [bf16] -> Hadamard -> [bf16] -> store, and
//         w_h = wproj_h * H^-1/2 * D^-1/2 * q_scale_h (Recipe::weights_fold order)
// Arithmetic in fp32 (or fp64 for the oracle). Inputs are fp32 values; a bf16 input is
// passed as its fp32 value. Non-finite inputs are rejected (dsaf::Error, kBadInput).
#pragma once

#include <vector>

#include "reference/quantize.h"
#include "reference/recipe.h"
#include "reference/rope.h"
#include "reference/score.h"

namespace dsaf::ref {

struct NormParams {
  const float* weight = nullptr;  // 128 values (RMSNorm, LayerNorm)
  const float* bias = nullptr;    // 128 values (LayerNorm)
};

StoredHead run_key_path(const Recipe& recipe, const float* k_in, int position,
                        const NormParams& norm, const RopeTable& rope);

// The key paths of `count` tokens (k_in: [count][128], positions: [count]) into keys
// [first_slot, first_slot + count) of `keys`: key t gets exactly what
// keys.put(first_slot + t, run_key_path(recipe, k_in + 128 t, positions[t], ...)) gives it,
// and a bad token throws what run_key_path throws for it (key_batch.cc: 16 tokens in the
// lanes of a vector; tests/reference/key_batch_test.cc compares the two paths bit for bit).
void run_key_paths(const Recipe& recipe, const float* k_in, const int* positions, int64_t count,
                   const NormParams& norm, const RopeTable& rope, KeyMatrix& keys, int64_t first_slot);

struct QueryOutput {
  std::vector<StoredHead> heads;
  std::vector<double> weights;  // folded head weights (fp32 values, or fp64 for the oracle)
};

// q_in: [num_heads][128]; wproj: [num_heads] (the weights_proj output for this token).
QueryOutput run_query_path(const Recipe& recipe, const float* q_in, int num_heads,
                           const float* wproj, int position, const RopeTable& rope);

}  // namespace dsaf::ref
