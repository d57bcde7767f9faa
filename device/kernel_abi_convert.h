// File: kernel_abi_convert.h
// KernelRecipe <-> dsaf_recipe_v1 (kernel_abi.h): field by field, enums by value.
#pragma once

#include "device/api.h"
#include "device/kernel_abi.h"

namespace dsaf::dev {

inline dsaf_quant_v1 to_abi(const ref::QuantSpec& q) {
  return {static_cast<int32_t>(q.format), q.block, q.amax_floor, static_cast<int32_t>(q.divisor),
          static_cast<int32_t>(q.pow2), static_cast<int32_t>(q.apply), static_cast<int32_t>(q.saturation),
          static_cast<int32_t>(q.fp4_rounding)};
}
inline ref::QuantSpec from_abi(const dsaf_quant_v1& q) {
  ref::QuantSpec s;
  s.format = static_cast<ref::StorageFormat>(q.format);
  s.block = q.block;
  s.amax_floor = q.amax_floor;
  s.divisor = static_cast<ref::ScaleDivisor>(q.divisor);
  s.pow2 = static_cast<ref::ScalePow2>(q.pow2);
  s.apply = static_cast<ref::ScaleApply>(q.apply);
  s.saturation = static_cast<ref::Saturation>(q.saturation);
  s.fp4_rounding = static_cast<ref::Rounding>(q.fp4_rounding);
  return s;
}
inline dsaf_rounding_v1 to_abi(const ref::IntermediateRounding& r) {
  return {r.input, r.norm, r.rope, r.hadamard};
}
inline ref::IntermediateRounding from_abi(const dsaf_rounding_v1& r) {
  return {r.input != 0, r.norm != 0, r.rope != 0, r.hadamard != 0};
}

inline dsaf_recipe_v1 to_abi(const KernelRecipe& k) {
  dsaf_recipe_v1 a{};
  a.key_rounding = to_abi(k.key_rounding);
  a.query_rounding = to_abi(k.query_rounding);
  a.norm_kind = static_cast<int32_t>(k.key_norm.kind);
  a.norm_eps = k.key_norm.eps;
  a.norm_order = static_cast<int32_t>(k.key_norm.order);
  a.norm_fma = k.key_norm.fma_contraction;
  a.rsqrt = static_cast<int32_t>(k.key_norm.rsqrt);
  a.rope_pairing = static_cast<int32_t>(k.rope_pairing);
  a.rope_placement = static_cast<int32_t>(k.rope_placement);
  a.rope_fma = static_cast<int32_t>(k.rope_fma);
  a.hadamard = k.hadamard;
  a.key_quant = to_abi(k.key_quant);
  a.query_quant = to_abi(k.query_quant);
  a.weights = static_cast<int32_t>(k.weights);
  a.weights_fold = static_cast<int32_t>(k.weights_fold);
  return a;
}

inline KernelRecipe from_abi(const dsaf_recipe_v1& a) {
  KernelRecipe k;
  k.key_rounding = from_abi(a.key_rounding);
  k.query_rounding = from_abi(a.query_rounding);
  k.key_norm = {static_cast<ref::NormKind>(a.norm_kind), a.norm_eps, static_cast<ref::ReductionOrder>(a.norm_order),
                a.norm_fma != 0, static_cast<ref::RsqrtKind>(a.rsqrt)};
  k.rope_pairing = static_cast<ref::RopePairing>(a.rope_pairing);
  k.rope_placement = static_cast<ref::RopePlacement>(a.rope_placement);
  k.rope_fma = static_cast<ref::ContractedProduct>(a.rope_fma);
  k.hadamard = a.hadamard != 0;
  k.key_quant = from_abi(a.key_quant);
  k.query_quant = from_abi(a.query_quant);
  k.weights = static_cast<ref::WeightsPrecision>(a.weights);
  k.weights_fold = static_cast<ref::WeightsFold>(a.weights_fold);
  return k;
}

}  // namespace dsaf::dev
