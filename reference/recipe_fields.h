// File: recipe_fields.h
// The one table of a recipe's numeric fields (RecipeFields, recipe.h): for each field its
// JSON path, the member that holds it and what reads it; for each enum the names its
// values have in JSON. Everything that handles fields one by one goes through this table:
// JSON in and out (recipe_json.cc), recipe detection's single-field changes and their
// names (oracle/detect.cc), the kernel ABI's conversion (device/kernel_abi_convert.h) and
// the key kernel's pinned paths (device/key_store/key_paths.cuh). A new field is one line
// here, plus the arithmetic that reads it and its tests.
//
// The table compiles with g++ and nvcc alike (constexpr, __host__ __device__ under nvcc):
// the device's pinned paths run it at compile time. Data only, no arithmetic.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "reference/recipe.h"

#if defined(__CUDACC__)
#define DSAF_HOST_DEVICE __host__ __device__
#else
#define DSAF_HOST_DEVICE
#endif

namespace dsaf::ref {

// What reads a field, as bits of FieldInfo::roles.
enum FieldRole : uint32_t {
  // A device kernel reads it (the key path, the query path or both).
  kKernelField = 1u << 0,
  // It chooses a code path in the key kernel: a pinned path compiles it as a constant, and
  // serves a recipe only when the recipe has the path's value (the other kernel fields,
  // eps and amax_floor, stay runtime values).
  kKeyCodePath = 1u << 1,
  // Recipe detection tries its other values (enums and bools: every other value; floats:
  // FieldInfo::alternatives) when it looks for the single change that explains bytes.
  kDetected = 1u << 2,
};

struct FieldInfo {
  const char* path;  // the JSON path, "key_quant.apply"
  uint32_t roles;
  // Values detection tries for a floating-point field (kDetected): eps values and amax
  // floors seen in the implementations (docs/numerics.md §8). Held by value: the table
  // also runs in device code, where no host array can be read.
  float alternatives[2] = {};
  int num_alternatives = 0;

  constexpr bool has(FieldRole role) const { return (roles & role) != 0; }
};

// An enum value and its JSON name.
template <class E>
struct EnumName {
  E value;
  const char* name;
};
template <class E, size_t N>
using EnumNames = std::array<EnumName<E>, N>;

// enum_names(E{}): the JSON names of an enum's values, in declaration order.
constexpr EnumNames<Compute, 2> enum_names(Compute) {
  return {{{Compute::kFp32, "fp32"}, {Compute::kFp64, "fp64"}}};
}
constexpr EnumNames<ReductionOrder, 4> enum_names(ReductionOrder) {
  return {{{ReductionOrder::kSequential, "sequential"},
           {ReductionOrder::kWarpTree, "warp_tree"},
           {ReductionOrder::kBlockTree, "block_tree"},
           {ReductionOrder::kWarpTreeHalves, "warp_tree_halves"}}};
}
constexpr EnumNames<NormKind, 3> enum_names(NormKind) {
  return {{{NormKind::kNone, "none"}, {NormKind::kLayerNorm, "layernorm"}, {NormKind::kRmsNorm, "rmsnorm"}}};
}
constexpr EnumNames<RsqrtKind, 2> enum_names(RsqrtKind) {
  return {{{RsqrtKind::kCorrectlyRounded, "correctly_rounded"}, {RsqrtKind::kSm90Approx, "sm90_approx"}}};
}
constexpr EnumNames<RopePairing, 2> enum_names(RopePairing) {
  return {{{RopePairing::kNeox, "neox"}, {RopePairing::kInterleaved, "interleaved"}}};
}
constexpr EnumNames<RopePlacement, 2> enum_names(RopePlacement) {
  return {{{RopePlacement::kLeading, "leading"}, {RopePlacement::kTrailing, "trailing"}}};
}
constexpr EnumNames<ContractedProduct, 4> enum_names(ContractedProduct) {
  return {{{ContractedProduct::kNone, "none"},
           {ContractedProduct::kFirst, "first"},
           {ContractedProduct::kSecond, "second"},
           {ContractedProduct::kCos, "cos"}}};
}
constexpr EnumNames<StorageFormat, 6> enum_names(StorageFormat) {
  return {{{StorageFormat::kNone, "none"},
           {StorageFormat::kFp32, "fp32"},
           {StorageFormat::kBf16, "bf16"},
           {StorageFormat::kFp8E4m3fn, "fp8_e4m3fn"},
           {StorageFormat::kFp4E2m1, "fp4_e2m1"},
           {StorageFormat::kFp4SimulatedBf16, "fp4_simulated_bf16"}}};
}
constexpr EnumNames<ProvenanceStatus, 3> enum_names(ProvenanceStatus) {
  return {{{ProvenanceStatus::kNone, "none"}, {ProvenanceStatus::kVerified, "verified"},
           {ProvenanceStatus::kModelled, "modelled"}}};
}
constexpr EnumNames<ScaleDivisor, 2> enum_names(ScaleDivisor) {
  return {{{ScaleDivisor::kDivide, "divide"}, {ScaleDivisor::kTimesReciprocal, "times_reciprocal"}}};
}
constexpr EnumNames<ScalePow2, 3> enum_names(ScalePow2) {
  return {{{ScalePow2::kNone, "none"},
           {ScalePow2::kExponentBitsCeil, "ue8m0_exponent_bits"},
           {ScalePow2::kLog2Ceil, "ue8m0_log2_ceil"}}};
}
constexpr EnumNames<ScaleApply, 2> enum_names(ScaleApply) {
  return {{{ScaleApply::kDivide, "divide"}, {ScaleApply::kTimesReciprocal, "times_reciprocal"}}};
}
constexpr EnumNames<Saturation, 2> enum_names(Saturation) {
  return {{{Saturation::kSatFinite, "satfinite"}, {Saturation::kNonSaturating, "non_saturating"}}};
}
constexpr EnumNames<Rounding, 2> enum_names(Rounding) {
  return {{{Rounding::kNearestEven, "nearest_even"},
           {Rounding::kNearestTiesTowardZero, "nearest_ties_toward_zero"}}};
}
constexpr EnumNames<Fp4ZeroSign, 2> enum_names(Fp4ZeroSign) {
  return {{{Fp4ZeroSign::kKeep, "keep"}, {Fp4ZeroSign::kPositive, "positive"}}};
}
constexpr EnumNames<Fp4Prestage, 2> enum_names(Fp4Prestage) {
  return {{{Fp4Prestage::kNone, "none"}, {Fp4Prestage::kFakeQuant, "fake_quant"}}};
}
constexpr EnumNames<ScoreAccum, 3> enum_names(ScoreAccum) {
  return {{{ScoreAccum::kFp32, "fp32"}, {ScoreAccum::kBf16, "bf16"}, {ScoreAccum::kExact, "exact"}}};
}
constexpr EnumNames<WeightsPrecision, 2> enum_names(WeightsPrecision) {
  return {{{WeightsPrecision::kFp32, "fp32"}, {WeightsPrecision::kBf16, "bf16"}}};
}
constexpr EnumNames<WeightsFold, 2> enum_names(WeightsFold) {
  return {{{WeightsFold::kSeparateFactors, "separate_factors"},
           {WeightsFold::kCombinedConstant, "combined_constant"}}};
}
constexpr EnumNames<MaskKind, 2> enum_names(MaskKind) {
  return {{{MaskKind::kCausal, "causal"}, {MaskKind::kNone, "none"}}};
}

// Calls visit(info, member) for every field, in the JSON order of recipe_to_json, where
// member is a function from a RecipeFields (const or not) to that field's reference:
//   for_each_field([&](const FieldInfo& f, auto member) { use(f.path, member(recipe)); });
template <class Visit>
DSAF_HOST_DEVICE constexpr void for_each_field(Visit&& visit) {
  constexpr uint32_t kKernel = kKernelField, kBranch = kKernelField | kKeyCodePath, kDetect = kDetected;
  const auto quant = [&](const char* format, const char* block, const char* floor, const char* divisor,
                         const char* pow2, const char* apply, const char* saturation, const char* rounding,
                         const char* zero_sign, const char* prestage, auto spec, uint32_t branch,
                         uint32_t detect) {
    visit(FieldInfo{format, kKernel | branch}, [spec](auto& r) -> auto& { return spec(r).format; });
    visit(FieldInfo{block, kKernel | branch}, [spec](auto& r) -> auto& { return spec(r).block; });
    visit(FieldInfo{floor, kKernel | kDetect, {1e-4f, 1e-10f}, 2},
          [spec](auto& r) -> auto& { return spec(r).amax_floor; });
    visit(FieldInfo{divisor, kKernel | branch | kDetect}, [spec](auto& r) -> auto& { return spec(r).divisor; });
    visit(FieldInfo{pow2, kKernel | branch | kDetect}, [spec](auto& r) -> auto& { return spec(r).pow2; });
    visit(FieldInfo{apply, kKernel | branch | kDetect}, [spec](auto& r) -> auto& { return spec(r).apply; });
    visit(FieldInfo{saturation, kKernel | branch | detect}, [spec](auto& r) -> auto& { return spec(r).saturation; });
    visit(FieldInfo{rounding, kKernel | branch | detect}, [spec](auto& r) -> auto& { return spec(r).fp4_rounding; });
    visit(FieldInfo{zero_sign, kKernel | branch | detect}, [spec](auto& r) -> auto& { return spec(r).fp4_zero_sign; });
    visit(FieldInfo{prestage, kKernel | branch | detect}, [spec](auto& r) -> auto& { return spec(r).fp4_prestage; });
  };
  const auto rounding = [&](const char* input, const char* norm, const char* rope, const char* hadamard,
                            auto spec, uint32_t branch, uint32_t detect_input_norm) {
    visit(FieldInfo{input, kKernel | branch | detect_input_norm}, [spec](auto& r) -> auto& { return spec(r).input; });
    visit(FieldInfo{norm, kKernel | branch | detect_input_norm}, [spec](auto& r) -> auto& { return spec(r).norm; });
    visit(FieldInfo{rope, kKernel | branch | kDetect}, [spec](auto& r) -> auto& { return spec(r).rope; });
    visit(FieldInfo{hadamard, kKernel | branch | kDetect}, [spec](auto& r) -> auto& { return spec(r).hadamard; });
  };

  visit(FieldInfo{"compute", 0}, [](auto& r) -> auto& { return r.compute; });
  rounding("key_rounding.input", "key_rounding.norm", "key_rounding.rope", "key_rounding.hadamard",
           [](auto& r) -> auto& { return r.key_rounding; }, kKeyCodePath, kDetect);
  rounding("query_rounding.input", "query_rounding.norm", "query_rounding.rope", "query_rounding.hadamard",
           [](auto& r) -> auto& { return r.query_rounding; }, 0, 0);
  visit(FieldInfo{"key_norm.kind", kBranch}, [](auto& r) -> auto& { return r.key_norm.kind; });
  visit(FieldInfo{"key_norm.eps", kKernel | kDetect, {1e-6f, 1e-5f}, 2},
        [](auto& r) -> auto& { return r.key_norm.eps; });
  visit(FieldInfo{"key_norm.order", kBranch | kDetect}, [](auto& r) -> auto& { return r.key_norm.order; });
  visit(FieldInfo{"key_norm.fma_contraction", kBranch | kDetect},
        [](auto& r) -> auto& { return r.key_norm.fma_contraction; });
  visit(FieldInfo{"key_norm.rsqrt", kBranch | kDetect}, [](auto& r) -> auto& { return r.key_norm.rsqrt; });
  visit(FieldInfo{"rope.pairing", kBranch | kDetect}, [](auto& r) -> auto& { return r.rope.pairing; });
  visit(FieldInfo{"rope.placement", kBranch | kDetect}, [](auto& r) -> auto& { return r.rope.placement; });
  visit(FieldInfo{"rope.fma", kBranch | kDetect}, [](auto& r) -> auto& { return r.rope.fma; });
  visit(FieldInfo{"rope.table.theta", 0}, [](auto& r) -> auto& { return r.rope.table.theta; });
  visit(FieldInfo{"rope.table.yarn_factor", 0}, [](auto& r) -> auto& { return r.rope.table.yarn_factor; });
  visit(FieldInfo{"rope.table.original_seq_len", 0}, [](auto& r) -> auto& { return r.rope.table.original_seq_len; });
  visit(FieldInfo{"rope.table.beta_fast", 0}, [](auto& r) -> auto& { return r.rope.table.beta_fast; });
  visit(FieldInfo{"rope.table.beta_slow", 0}, [](auto& r) -> auto& { return r.rope.table.beta_slow; });
  visit(FieldInfo{"hadamard", kBranch | kDetect}, [](auto& r) -> auto& { return r.hadamard; });
  quant("key_quant.format", "key_quant.block", "key_quant.amax_floor", "key_quant.divisor", "key_quant.pow2",
        "key_quant.apply", "key_quant.saturation", "key_quant.fp4_rounding", "key_quant.fp4_zero_sign",
        "key_quant.fp4_prestage", [](auto& r) -> auto& { return r.key_quant; }, kKeyCodePath, kDetect);
  quant("query_quant.format", "query_quant.block", "query_quant.amax_floor", "query_quant.divisor",
        "query_quant.pow2", "query_quant.apply", "query_quant.saturation", "query_quant.fp4_rounding",
        "query_quant.fp4_zero_sign", "query_quant.fp4_prestage", [](auto& r) -> auto& { return r.query_quant; }, 0, 0);
  visit(FieldInfo{"weights", kKernel}, [](auto& r) -> auto& { return r.weights; });
  visit(FieldInfo{"weights_fold", kKernel | kDetect}, [](auto& r) -> auto& { return r.weights_fold; });
  visit(FieldInfo{"score", 0}, [](auto& r) -> auto& { return r.score; });
  visit(FieldInfo{"mask", 0}, [](auto& r) -> auto& { return r.mask; });
  visit(FieldInfo{"topk", 0}, [](auto& r) -> auto& { return r.topk; });
  visit(FieldInfo{"page_size", 0}, [](auto& r) -> auto& { return r.page_size; });
}

// True when a and b agree on every field that has `role`.
DSAF_HOST_DEVICE constexpr bool same_fields(const RecipeFields& a, const RecipeFields& b, FieldRole role) {
  bool same = true;
  for_each_field([&](const FieldInfo& f, auto member) {
    if (f.has(role) && !(member(a) == member(b))) same = false;
  });
  return same;
}

// `to` with every field that has `role` taken from `from`.
DSAF_HOST_DEVICE constexpr RecipeFields with_fields(RecipeFields to, const RecipeFields& from, FieldRole role) {
  for_each_field([&](const FieldInfo& f, auto member) {
    if (f.has(role)) member(to) = member(from);
  });
  return to;
}

}  // namespace dsaf::ref
