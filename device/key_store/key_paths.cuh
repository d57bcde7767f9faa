// File: key_paths.cuh
// The key kernel's pinned paths: recipes it compiles as constants. The kernel reads its
// recipe at run time, so every field that chooses a code path (the field table's
// kKeyCodePath fields, reference/recipe_fields.h: norm kind, reduction order,
// contractions, RoPE pairing and placement, roundings, scale rule) costs a branch per token
// and, worse, makes the register allocator plan for every path at once (the generic
// kernel spills at 1-2 lanes per head). A pinned path holds one preset's fields
// (reference/presets.h) as constants; the launcher uses it when the runtime recipe has
// exactly those kKeyCodePath fields, and the generic instantiation otherwise. The values
// eps and amax_floor stay runtime arguments. Nothing here computes.
#pragma once

#include <cstdint>
#include <utility>

#include "device/api.h"
#include "reference/presets.h"
#include "reference/recipe_fields.h"

namespace dsaf::dev::key_kernel {

struct PinnedKeyPath {
  const char* name;          // the preset whose fields it pins
  ref::RecipeFields fields;  // that preset's
  // The fastest lane-group width at 1M tokens (docs/key-path-speed.md): 1 lane issues
  // the fewest instructions a token; bf16 stores at 2 lanes hold fewer values a lane;
  // sglang-v41-fp4 (two fp4 encodes a value) measured fastest at 4 (H100).
  int fastest_lanes;
  // At 1 lane, run on producer and compute warps (producer_kernel.cuh). Faster for the
  // paths whose norm sums sequentially; the sglang-v4 paths lose more to the hand-offs than
  // the producers give back (docs/key-path-speed.md).
  bool producer_warps;
  // The fastest width for fp32 input, which is not staged (staging.cuh: each lane reads its
  // part of a token's 512 bytes from global memory as it computes), so the narrowest
  // widths, whose few warps rely on the staging, lose their lead; measured per path in the
  // studies' shape, one sequence (docs/key-path-speed.md, "fp32 input has widths of its own").
  int fp32_input_lanes;
};

// A kernel's template argument kPath is its path's index here (mangled ...ELi<index>E; the
// profiling scripts in bench/ and scripts/gpu_check.sh pick sglang-v4-fp8, index 0, and
// sglang-v4-bf16, index 1, by it).
inline constexpr PinnedKeyPath kPinnedKeyPaths[] = {
    {"sglang-v4-fp8", ref::preset_fields::sglang_v4_fp8(), 1, false, 2},
    {"sglang-v4-bf16", ref::preset_fields::sglang_v4_bf16(), 2, false, 2},
    {"sglang-v4-fp4", ref::preset_fields::sglang_v4_fp4(), 1, false, 2},
    {"dsv32-ref", ref::preset_fields::dsv32_ref(), 1, true, 2},
    {"dsv32-bf16", ref::preset_fields::dsv32_bf16(), 1, true, 2},
    {"sglang-v32-fused", ref::preset_fields::sglang_v32_fused(), 1, true, 2},
    {"vllm-v32", ref::preset_fields::vllm_v32(), 1, true, 2},
    {"dsv4-ref", ref::preset_fields::dsv4_ref(), 1, true, 4},
    {"sglang-v41-fp4", ref::preset_fields::sglang_v41_fp4(), 4, false, 4},
};
inline constexpr int kNumPinnedKeyPaths = sizeof(kPinnedKeyPaths) / sizeof(kPinnedKeyPaths[0]);
inline constexpr int kGenericKeyPath = -1;  // every field read from the arguments

// A recipe matches at most one pinned path.
constexpr bool pinned_paths_distinct() {
  for (int a = 0; a < kNumPinnedKeyPaths; ++a) {
    for (int b = a + 1; b < kNumPinnedKeyPaths; ++b) {
      if (ref::same_fields(kPinnedKeyPaths[a].fields, kPinnedKeyPaths[b].fields, ref::kKeyCodePath)) return false;
    }
  }
  return true;
}
static_assert(pinned_paths_distinct(), "two pinned key paths with the same code-path fields");

// The recipe the kernel computes with: the runtime one, with path kPath's kKeyCodePath
// fields as constants.
template <int kPath>
__device__ __forceinline__ ref::RecipeFields pinned_recipe(const ref::RecipeFields& runtime) {
  if constexpr (kPath == kGenericKeyPath) {
    return runtime;
  } else {
    constexpr ref::RecipeFields kFixed = kPinnedKeyPaths[kPath].fields;
    return ref::with_fields(runtime, kFixed, ref::kKeyCodePath);
  }
}

// Path kPath, when it stores kFormat and `recipe` has its code-path fields: calls
// f(integral_constant<int, kPath>) and returns true.
template <ref::StorageFormat kFormat, int kPath, class F>
bool dispatch_if_pinned(const ref::RecipeFields& recipe, F& f) {
  if constexpr (kPinnedKeyPaths[kPath].fields.key_quant.format != kFormat) {
    return false;
  } else {
    if (!ref::same_fields(recipe, kPinnedKeyPaths[kPath].fields, ref::kKeyCodePath)) return false;
    f(std::integral_constant<int, kPath>{});
    return true;
  }
}

template <ref::StorageFormat kFormat, class F, int... kPaths>
void dispatch_key_path(const ref::RecipeFields& recipe, F& f, std::integer_sequence<int, kPaths...>) {
  if (!(dispatch_if_pinned<kFormat, kPaths>(recipe, f) || ...)) f(std::integral_constant<int, kGenericKeyPath>{});
}

// Calls f(integral_constant<int, P>) with the pinned path P that serves `recipe` in the
// store format kFormat, or kGenericKeyPath.
template <ref::StorageFormat kFormat, class F>
void dispatch_key_path(const ref::RecipeFields& recipe, F f) {
  dispatch_key_path<kFormat>(recipe, f, std::make_integer_sequence<int, kNumPinnedKeyPaths>{});
}

}  // namespace dsaf::dev::key_kernel
