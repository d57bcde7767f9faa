// File: compare.h
// A key cache an implementation wrote, against a recipe (`dsa-fidelity compare`): the
// key path's inputs as the implementation was fed them, the slot it wrote each token to,
// the RoPE table it used, and the bytes it wrote. The reference (reference/pipeline.h)
// runs every written token under the recipe and the two caches are compared byte for
// byte over the slots those tokens own, the first difference located as in
// oracle/verdict.h (page, slot, field, element, both codes) and named by its token.
//
// Only written slots are compared: the rest of a captured cache is whatever the engine's
// buffer held (other requests, stale pages), so untouched-region writes are not checked
// here — `verify` checks them, on buffers it fills with a sentinel itself.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "oracle/verdict.h"
#include "reference/recipe.h"

namespace dsaf::oracle {

// One capture of the key path: T tokens at any positions, of one or several sequences.
struct KeyObservation {
  std::vector<float> key_inputs;   // [T][128]: the key path's input (before the norm)
  std::vector<float> norm_weight;  // 128, or empty when no recipe needs it
  std::vector<float> norm_bias;    // 128, or empty
  std::vector<int32_t> positions;  // [T]: RoPE position of each token, any order
  // [T]: slot = page * page_size + offset of each token, negative = not written. A slot
  // holds at most one token (dsaf::Error kBadInput otherwise).
  std::vector<int64_t> slots;
  // [T] or empty: the sequence of each token, for the report (page-table captures).
  std::vector<int32_t> sequences;
  // The RoPE table the implementation used, [R][32] each with every position < R; empty:
  // the recipe's own table (reference/rope.h), for positions 0..max(positions).
  std::vector<float> rope_cos;
  std::vector<float> rope_sin;
  int page_size = 64;
  ref::StorageFormat layout = ref::StorageFormat::kFp8E4m3fn;  // the cache's layout format
  int64_t num_pages = 0;
  std::vector<uint8_t> cache;  // the observed bytes: num_pages x page bytes of `layout`

  int64_t tokens() const { return static_cast<int64_t>(positions.size()); }
};

// True when the observation holds the norm parameters the recipe's key norm reads
// (RMSNorm: a weight; LayerNorm: a weight and a bias).
bool inputs_fit(const KeyObservation& obs, const ref::Recipe& recipe);

// True when the recipe's key cache has the observation's page layout (same value and scale
// bytes per token: fp4_simulated_bf16 has the bf16 layout).
bool layout_fits(const KeyObservation& obs, const ref::Recipe& recipe);

// The cache the recipe writes for the observation's inputs: the observed bytes with
// every written slot replaced by the reference's bytes for its token. Throws
// dsaf::Error(kBadInput) for an inconsistent observation or a recipe whose layout does
// not fit.
std::vector<uint8_t> expected_cache(const ref::Recipe& recipe, const KeyObservation& obs);

struct CaptureVerdict {
  std::string recipe;
  bool pass = true;
  bool supplied_rope = false;       // rotated with the observation's RoPE table
  int64_t tokens = 0;               // tokens of the observation
  int64_t written_tokens = 0;       // tokens with a slot: the ones compared
  int64_t bytes = 0;                // bytes compared (written tokens x bytes per token)
  int64_t mismatches = 0;           // differing bytes among them
  int64_t mismatched_tokens = 0;    // written tokens with at least one differing byte
  // The lowest differing cache byte, located (page, slot, field, element, both codes);
  // its `sequence` is the token's sequence (-1 without sequences) and `position` its
  // RoPE position.
  std::optional<ByteMismatch> first;
  int64_t first_token = -1;         // the token that owns it

  std::string describe() const;
};

// Compares the observed cache with expected_cache(recipe, obs) over the written slots.
// Throws dsaf::Error(kBadInput) as expected_cache.
CaptureVerdict compare_capture(const KeyObservation& obs, const ref::Recipe& recipe);

nlohmann::json to_json(const CaptureVerdict& verdict);

}  // namespace dsaf::oracle
