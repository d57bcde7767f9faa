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

// The key-path fields the presets of one model share (reference/recipe.cc v32_model and
// v4_model; NormSpec's defaults): sequential sums, the correctly rounded rsqrt, no
// contractions; V3.2 LayerNorm with NeoX RoPE on the leading 64 dims, V4 RMSNorm with
// interleaved RoPE on the trailing 64 dims. As a base that every path sets for itself: no
// roundings, no Hadamard (Recipe's default has one), and its store format's scale fields.
constexpr KernelRecipe model_key_fields(ref::NormKind norm, ref::RopePairing pairing, ref::RopePlacement placement,
                                        ref::StorageFormat format) {
  KernelRecipe r{};
  r.key_rounding = {false, false, false, false};
  r.key_norm.kind = norm;
  r.key_norm.order = ref::ReductionOrder::kSequential;
  r.key_norm.fma_contraction = false;
  r.key_norm.rsqrt = ref::RsqrtKind::kCorrectlyRounded;
  r.rope_pairing = pairing;
  r.rope_placement = placement;
  r.rope_fma = ref::ContractedProduct::kNone;
  r.hadamard = false;
  r.key_quant.format = format;
  r.key_quant.block = 128;
  r.key_quant.saturation = ref::Saturation::kSatFinite;
  r.key_quant.fp4_rounding = ref::Rounding::kNearestEven;
  return r;
}
constexpr KernelRecipe v32_key_fields(ref::StorageFormat format) {
  return model_key_fields(ref::NormKind::kLayerNorm, ref::RopePairing::kNeox, ref::RopePlacement::kLeading, format);
}
constexpr KernelRecipe v4_key_fields(ref::StorageFormat format) {
  return model_key_fields(ref::NormKind::kRmsNorm, ref::RopePairing::kInterleaved, ref::RopePlacement::kTrailing,
                          format);
}

// A quantising path's scale rule: how the raw scale is made (divide by qmax, or times its
// reciprocal), rounded to a power of two (or not), and applied to the values.
constexpr KernelRecipe with_scale_rule(KernelRecipe r, ref::ScaleDivisor divisor, ref::ScalePow2 pow2,
                                       ref::ScaleApply apply) {
  r.key_quant.divisor = divisor;
  r.key_quant.pow2 = pow2;
  r.key_quant.apply = apply;
  return r;
}

// How paths whose norm sums sequentially (the V3.2 presets, dsv4-ref) are launched. Their
// fastest width is 1 lane: in a wider group each lane's part of the chain runs while the
// others idle. At 1 lane their tiles run on compute warps fed by producer warps
// (key_store.cu), measured for the dsv32 paths (H200 run 71: dsv32-bf16 0.212 against 0.239
// ms, dsv32-ref 0.227 against 0.234) and inherited by the others (run 84 timed them with
// producer warps only; at 1 lane they were the fastest of the four widths).
struct SequentialNormTuning {
  static constexpr bool kPinned = true;
  static constexpr int kFastestLanes = 1;
  static constexpr bool kProducerWarps = true;
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
    KernelRecipe r = v4_key_fields(kFormat);
    r.key_norm.order = ref::ReductionOrder::kWarpTree;
    r.key_norm.fma_contraction = true;
    r.key_norm.rsqrt = ref::RsqrtKind::kSm90Approx;
    r.rope_fma = ref::ContractedProduct::kFirst;
    r.hadamard = true;
    constexpr bool kE2m1 = kFormat == ref::StorageFormat::kFp4E2m1;
    const ref::ScalePow2 pow2 = kE2m1 ? ref::ScalePow2::kExponentBitsCeil : ref::ScalePow2::kNone;
    r = with_scale_rule(r, ref::ScaleDivisor::kDivide, pow2, ref::ScaleApply::kTimesReciprocal);
    if (kE2m1) {
      r.key_quant.block = 32;
      r.key_quant.fp4_rounding = ref::Rounding::kNearestTiesTowardZero;
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
struct Dsv32KeyPath : SequentialNormTuning {
  static constexpr const char* kName = kFormat == ref::StorageFormat::kFp8E4m3fn ? "dsv32-ref" : "dsv32-bf16";
  static constexpr KernelRecipe recipe() {
    KernelRecipe r = with_scale_rule(v32_key_fields(kFormat), ref::ScaleDivisor::kTimesReciprocal,
                                     ref::ScalePow2::kExponentBitsCeil, ref::ScaleApply::kDivide);
    r.key_rounding = {true, true, true, true};
    r.hadamard = true;
    return r;
  }
};

// The other presets, each one path for its one store format; pinned, they run 1.5-2.8x
// faster than on the generic kernel (H200 run 84, bench/results/LOG.md).
//
// SGLang's fused V3.2 indexer path (sglang-v32-fused): input rounded to bf16, then fp32
// throughout; no Hadamard; fp8 with scale = max(amax, floor) / 448 applied as * (1 / scale).
struct SglangV32FusedKeyPath : SequentialNormTuning {
  static constexpr const char* kName = "sglang-v32-fused";
  static constexpr KernelRecipe recipe() {
    KernelRecipe r = with_scale_rule(v32_key_fields(ref::StorageFormat::kFp8E4m3fn), ref::ScaleDivisor::kDivide,
                                     ref::ScalePow2::kNone, ref::ScaleApply::kTimesReciprocal);
    r.key_rounding = {true, false, false, false};
    r.hadamard = false;
    return r;
  }
};

// vLLM's V3.2 path (vllm-v32): bf16 rounding of the input and after norm and RoPE; no
// Hadamard; fp8 with scale = 2^ceil(log2(max(amax, floor) / 448)), applied by division.
struct VllmV32KeyPath : SequentialNormTuning {
  static constexpr const char* kName = "vllm-v32";
  static constexpr KernelRecipe recipe() {
    KernelRecipe r = with_scale_rule(v32_key_fields(ref::StorageFormat::kFp8E4m3fn), ref::ScaleDivisor::kDivide,
                                     ref::ScalePow2::kLog2Ceil, ref::ScaleApply::kDivide);
    r.key_rounding = {true, true, true, false};
    r.hadamard = false;
    return r;
  }
};

// The DeepSeek V4 reference's key path (dsv4-ref): bf16 rounding after every stage,
// Hadamard; fp4 simulated in bf16, blocks of 32 with ue8m0 scales from the exponent bits,
// applied by division.
struct Dsv4KeyPath : SequentialNormTuning {
  static constexpr const char* kName = "dsv4-ref";
  static constexpr KernelRecipe recipe() {
    constexpr ref::StorageFormat kFp4InBf16 = ref::StorageFormat::kFp4SimulatedBf16;
    KernelRecipe r = with_scale_rule(v4_key_fields(kFp4InBf16), ref::ScaleDivisor::kDivide,
                                     ref::ScalePow2::kExponentBitsCeil, ref::ScaleApply::kDivide);
    r.key_rounding = {true, true, true, true};
    r.hadamard = true;
    r.key_quant.block = 32;
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
