// File: key_paths.cuh
// Key-path recipes compiled as constants. The key kernel reads its recipe at run time, so
// every field that chooses a code path (norm kind, reduction order, contractions, RoPE
// pairing and placement, roundings, scale rule) costs a branch per token and, worse,
// makes the register allocator plan for every path at once (the generic kernel spills at
// 1-2 lanes per head). A KeyPath type pins those fields to constants; the launcher uses a
// pinned instantiation when the runtime recipe has exactly those fields and the generic
// one otherwise. The values eps and amax_floor stay runtime arguments. Nothing here
// computes: the constants restate a preset's fields (reference/recipe.cc) and
// launch_key_store checks them field by field against the recipe it is given.
#pragma once

#include "device/api.h"

namespace dsaf::dev {

// Calls f(a.x, b.x) for every KernelRecipe field that selects a key-kernel code path.
template <class F>
__host__ __device__ constexpr void for_each_key_path_field(KernelRecipe& a, const KernelRecipe& b, F f) {
  f(a.key_rounding.input, b.key_rounding.input);
  f(a.key_rounding.norm, b.key_rounding.norm);
  f(a.key_rounding.rope, b.key_rounding.rope);
  f(a.key_rounding.hadamard, b.key_rounding.hadamard);
  f(a.key_norm.kind, b.key_norm.kind);
  f(a.key_norm.order, b.key_norm.order);
  f(a.key_norm.fma_contraction, b.key_norm.fma_contraction);
  f(a.key_norm.rsqrt, b.key_norm.rsqrt);
  f(a.rope_pairing, b.rope_pairing);
  f(a.rope_placement, b.rope_placement);
  f(a.rope_fma, b.rope_fma);
  f(a.hadamard, b.hadamard);
  f(a.key_quant.format, b.key_quant.format);
  f(a.key_quant.block, b.key_quant.block);
  f(a.key_quant.divisor, b.key_quant.divisor);
  f(a.key_quant.pow2, b.key_quant.pow2);
  f(a.key_quant.apply, b.key_quant.apply);
  f(a.key_quant.saturation, b.key_quant.saturation);
  f(a.key_quant.fp4_rounding, b.key_quant.fp4_rounding);
}

// Every field read from the arguments.
struct RuntimeKeyPath {
  static constexpr bool kPinned = false;
  static constexpr bool kProducerWarps = false;  // key_store.cu, key_store_specialized_kernel
  static constexpr const char* kName = "generic";
};

// The SGLang V4 indexer kernel's key path (presets sglang-v4-fp8/-bf16/-fp4): fp32
// throughout, RMSNorm with warp-tree sums of fma(x, x, s) and the sm_90 rsqrtf, RoPE on
// interleaved pairs of the trailing 64 dims with the first product fused, Hadamard; fp8
// with scale = max(amax, floor) / 448 applied as * (1 / scale), or e2m1 with ue8m0 scales
// and ties toward zero.
template <ref::StorageFormat kFormat>
struct SglangV4KeyPath {
  static constexpr bool kPinned = true;
  static constexpr const char* kName = kFormat == ref::StorageFormat::kFp8E4m3fn ? "sglang-v4-fp8"
                                       : kFormat == ref::StorageFormat::kBf16    ? "sglang-v4-bf16"
                                                                                  : "sglang-v4-fp4";
  // The fastest lane-group width at 1M tokens (key_store.cu, fastest_key_lanes).
  static constexpr int kFastestLanes = kFormat == ref::StorageFormat::kBf16 ? 2 : 1;
  // At 1 lane, producer warps cost more than they give (H200 run 71: fp8 0.136 against 0.131 ms).
  static constexpr bool kProducerWarps = false;
  static constexpr KernelRecipe recipe() {
    KernelRecipe r{};
    r.key_rounding = {false, false, false, false};
    r.key_norm.kind = ref::NormKind::kRmsNorm;
    r.key_norm.order = ref::ReductionOrder::kWarpTree;
    r.key_norm.fma_contraction = true;
    r.key_norm.rsqrt = ref::RsqrtKind::kSm90Approx;
    r.rope_pairing = ref::RopePairing::kInterleaved;
    r.rope_placement = ref::RopePlacement::kTrailing;
    r.rope_fma = ref::ContractedProduct::kFirst;
    r.hadamard = true;
    r.key_quant.format = kFormat;
    r.key_quant.saturation = ref::Saturation::kSatFinite;
    r.key_quant.divisor = ref::ScaleDivisor::kDivide;
    r.key_quant.apply = ref::ScaleApply::kTimesReciprocal;
    if (kFormat == ref::StorageFormat::kFp4E2m1) {
      r.key_quant.block = 32;
      r.key_quant.pow2 = ref::ScalePow2::kExponentBitsCeil;
      r.key_quant.fp4_rounding = ref::Rounding::kNearestTiesTowardZero;
    } else {
      r.key_quant.block = 128;
      r.key_quant.pow2 = ref::ScalePow2::kNone;
      r.key_quant.fp4_rounding = ref::Rounding::kNearestEven;
    }
    return r;
  }
};

// The DeepSeek V3.2 reference's key path (presets dsv32-ref, fp8, and dsv32-bf16): bf16
// rounding after every stage, LayerNorm with sequential sums and the correctly rounded
// rsqrt, no contractions, NeoX RoPE on the leading 64 dims, Hadamard; fp8 with ue8m0
// scales, 2^ceil(log2(max(amax, floor) x fl(1/448))) from the exponent bits, applied by
// division. The generic kernel ran these presets at 17% (fp8) and 35% (bf16) of copy
// (H200 run 66, tile order + hand-out): their runtime fields cost branches and registers at
// every stage; pinned, at 1 lane, 41% and 53% (run 69: 0.234 and 0.239 ms at 1M tokens),
// with producer warps 43% and 60% (run 71: 0.227 and 0.212 ms).
template <ref::StorageFormat kFormat>
struct Dsv32KeyPath {
  static constexpr bool kPinned = true;
  static constexpr const char* kName = kFormat == ref::StorageFormat::kFp8E4m3fn ? "dsv32-ref" : "dsv32-bf16";
  // Sequential sums: in a wider group each lane's part of the chain runs while the others idle.
  static constexpr int kFastestLanes = 1;
  // At 1 lane the tiles run on compute warps fed by producer warps (H200 run 71: bf16 0.212
  // against 0.239 ms, fp8 0.227 against 0.234).
  static constexpr bool kProducerWarps = true;
  static constexpr KernelRecipe recipe() {
    KernelRecipe r{};
    r.key_rounding = {true, true, true, true};
    r.key_norm.kind = ref::NormKind::kLayerNorm;
    r.key_norm.order = ref::ReductionOrder::kSequential;
    r.key_norm.fma_contraction = false;
    r.key_norm.rsqrt = ref::RsqrtKind::kCorrectlyRounded;
    r.rope_pairing = ref::RopePairing::kNeox;
    r.rope_placement = ref::RopePlacement::kLeading;
    r.rope_fma = ref::ContractedProduct::kNone;
    r.hadamard = true;
    r.key_quant.format = kFormat;
    r.key_quant.block = 128;
    r.key_quant.divisor = ref::ScaleDivisor::kTimesReciprocal;
    r.key_quant.pow2 = ref::ScalePow2::kExponentBitsCeil;
    r.key_quant.apply = ref::ScaleApply::kDivide;
    r.key_quant.saturation = ref::Saturation::kSatFinite;
    r.key_quant.fp4_rounding = ref::Rounding::kNearestEven;
    return r;
  }
};

// True when `recipe` has exactly the pinned fields of Path.
template <class Path>
bool key_path_matches(const KernelRecipe& recipe) {
  if constexpr (!Path::kPinned) {
    return true;
  } else {
    KernelRecipe copy = recipe;
    bool same = true;
    for_each_key_path_field(copy, Path::recipe(), [&](const auto& x, const auto& y) { same = same && x == y; });
    return same;
  }
}

// The recipe the kernel computes with: the runtime one, with Path's fields as constants.
template <class Path>
__device__ __forceinline__ KernelRecipe pinned_recipe(const KernelRecipe& runtime) {
  KernelRecipe r = runtime;
  if constexpr (Path::kPinned) {
    constexpr KernelRecipe fixed = Path::recipe();
    for_each_key_path_field(r, fixed, [](auto& x, const auto& y) { x = y; });
  }
  return r;
}

}  // namespace dsaf::dev
