// File: presets.h
// The numeric fields of the ten presets, as constants: reference/recipe.cc names them
// (presets()), and the key kernel compiles the quantising ones as constants
// (device/key_store/key_paths.cuh). Data only, no arithmetic. The upstream code each
// preset models, with its sections in docs/numerics.md, is the preset's `source`
// (recipe.cc).
#pragma once

#include "reference/recipe.h"

namespace dsaf::ref::preset_fields {

// Model math shared by every DeepSeek V3.2 preset (docs/numerics.md §2.3-§2.4, §5.1,
// §7.1): LayerNorm, NeoX RoPE on the leading 64 dims, YaRN table, top-2048.
constexpr RecipeFields v32_model() {
  RecipeFields r{};
  r.key_norm.kind = NormKind::kLayerNorm;
  r.key_norm.eps = 1e-6f;
  r.rope.pairing = RopePairing::kNeox;
  r.rope.placement = RopePlacement::kLeading;
  r.rope.table = {10000.0, 40.0, 4096.0, 32.0, 1.0};
  r.topk = 2048;
  return r;
}

// Model math of the DeepSeek V4 C4 indexer (docs/numerics.md §3.1-§3.2, §6.2-§6.3):
// RMSNorm, interleaved RoPE on the trailing 64 dims, top-512.
constexpr RecipeFields v4_model() {
  RecipeFields r{};
  r.key_norm.kind = NormKind::kRmsNorm;
  r.key_norm.eps = 1e-6f;
  r.rope.pairing = RopePairing::kInterleaved;
  r.rope.placement = RopePlacement::kTrailing;
  r.rope.table = {160000.0, 16.0, 65536.0, 32.0, 1.0};
  r.topk = 512;
  return r;
}

// DeepSeek's act_quant: s = 2^ceil(log2(max(amax, 1e-4) * fl(1/448))) from the exponent
// bits; y = e4m3fn(x / s).
constexpr QuantSpec fp8_ue8m0_deepseek() {
  QuantSpec q{};
  q.format = StorageFormat::kFp8E4m3fn;
  q.block = kHeadDim;
  q.amax_floor = 1e-4f;
  q.divisor = ScaleDivisor::kTimesReciprocal;
  q.pow2 = ScalePow2::kExponentBitsCeil;
  q.apply = ScaleApply::kDivide;
  return q;
}

// SGLang's fused kernels: scale = fmaxf(1e-4f, amax) / 448.f, no power of two.
constexpr QuantSpec fp8_plain(ScaleApply apply) {
  QuantSpec q{};
  q.format = StorageFormat::kFp8E4m3fn;
  q.block = kHeadDim;
  q.amax_floor = 1e-4f;
  q.divisor = ScaleDivisor::kDivide;
  q.pow2 = ScalePow2::kNone;
  q.apply = apply;
  return q;
}

// The fp64 oracle of a recipe's fields: the same model math (norm kind and eps, RoPE
// pairing, placement and table, Hadamard, top-K, mask) with no rounding, no storage
// quantisation and exact score accumulation.
constexpr RecipeFields exact_fields(RecipeFields r) {
  r.compute = Compute::kFp64;
  r.key_rounding = {};
  r.query_rounding = {};
  r.key_norm.order = ReductionOrder::kSequential;
  r.key_norm.fma_contraction = false;
  r.key_norm.rsqrt = RsqrtKind::kCorrectlyRounded;
  r.rope.fma = ContractedProduct::kNone;
  r.key_quant = QuantSpec{};
  r.query_quant = QuantSpec{};
  r.weights = WeightsPrecision::kFp32;
  r.weights_fold = WeightsFold::kSeparateFactors;
  r.score = ScoreAccum::kExact;
  return r;
}

// DeepSeek V3.2 reference after the 2025-11 RoPE fix (§2.2-§2.8, §10): bf16 tensors
// between stages, Hadamard, fp8 with ue8m0 scales for keys and queries.
constexpr RecipeFields dsv32_ref() {
  RecipeFields r = v32_model();
  r.key_rounding = {true, true, true, true};
  r.query_rounding = {true, false, true, true};
  r.hadamard = true;
  r.key_quant = fp8_ue8m0_deepseek();
  r.query_quant = fp8_ue8m0_deepseek();
  r.weights_fold = WeightsFold::kSeparateFactors;
  r.score = ScoreAccum::kFp32;
  return r;
}

constexpr RecipeFields exact() { return exact_fields(dsv32_ref()); }

// dsv32-ref with bf16 index keys (256 B/token).
constexpr RecipeFields dsv32_bf16() {
  RecipeFields r = dsv32_ref();
  r.key_quant.format = StorageFormat::kBf16;
  return r;
}

// SGLang's DSA indexer key kernel, fused_k_indexer_norm_rope_store (§5.6, §8), which SGLang
// runs for DSA checkpoints whose indexer RoPE is interleaved (indexer_rope_interleave, as
// GLM-5.x; DeepSeek V3.2's NeoX indexer takes the unfused path): bf16 input, LayerNorm in
// fp32 with warp-tree sums, fused (x - mean)^2 terms and the sm_90 rsqrtf, the affine as
// fma(x_hat, gamma, beta); interleaved RoPE on the leading 64 dims with the first product
// fused; the keys rounded to bf16 after RoPE; no Hadamard; plain amax/448 scales, keys
// times fl(1/scale). Queries (not read from a kernel): divided by the scale.
constexpr RecipeFields sglang_v32_fused() {
  RecipeFields r = v32_model();
  r.key_norm.order = ReductionOrder::kWarpTree;
  r.key_norm.fma_contraction = true;
  r.key_norm.rsqrt = RsqrtKind::kSm90Approx;
  r.rope.pairing = RopePairing::kInterleaved;
  r.rope.fma = ContractedProduct::kFirst;
  r.key_rounding = {true, false, true, false};
  r.query_rounding = {true, false, false, false};
  r.hadamard = false;
  r.key_quant = fp8_plain(ScaleApply::kTimesReciprocal);
  r.query_quant = fp8_plain(ScaleApply::kDivide);
  r.weights_fold = WeightsFold::kCombinedConstant;
  return r;
}

// vLLM V3.2 as H100/H200 production runs it (§7.1-§7.2): DeepseekV32ForCausalLM's Triton
// kernels, _fused_norm_rope_kernel (key: LayerNorm, NeoX RoPE, fp8, cache write) and
// _fused_q_kernel (query), all in fp32 registers: no bf16 rounding after the norm or RoPE;
// scale = exp2(ceil(log2(max(amax, 1e-4) / 448))) for keys and queries; no Hadamard.
// tl.rsqrt is the approximate rsqrt, and Triton fuses multiply-adds: the affine as
// fma(x_hat, w, b), the first level of the squares' sum, and the cos product of both RoPE
// outputs (rope.fma: cos). tl.sum over the 128-element block is key_norm.order:
// block_tree (four warps of one element a lane). Read off the bits of the kernel's fp32 key
// after RoPE (§7.1). Its weights_out = w * q_scale * softmax_scale * head_scale has
// power-of-two q_scale and H^-1/2 = 1/8, so it equals the separate-factors order bit for bit.
constexpr RecipeFields vllm_v32() {
  RecipeFields r = v32_model();
  r.key_norm.order = ReductionOrder::kBlockTree;
  r.key_norm.fma_contraction = true;
  r.key_norm.rsqrt = RsqrtKind::kSm90Approx;
  r.rope.fma = ContractedProduct::kCos;
  r.key_rounding = {true, false, false, false};
  r.query_rounding = {true, false, false, false};
  r.hadamard = false;
  r.key_quant = fp8_plain(ScaleApply::kDivide);
  r.key_quant.pow2 = ScalePow2::kLog2Ceil;
  r.query_quant = r.key_quant;
  r.weights_fold = WeightsFold::kSeparateFactors;
  return r;
}

// DeepSeek V4's fp4_act_quant (§3.3): blocks of 32, amax >= 6 x 2^-126, s = 2^ceil(log2(
// amax / 6)) from the exponent bits, values e2m1-rounded and kept as bf16.
constexpr QuantSpec fp4_simulated_deepseek() {
  QuantSpec q{};
  q.format = StorageFormat::kFp4SimulatedBf16;
  q.block = 32;
  q.amax_floor = 6.0f * 0x1p-126f;
  q.divisor = ScaleDivisor::kDivide;
  q.pow2 = ScalePow2::kExponentBitsCeil;
  q.apply = ScaleApply::kDivide;
  return q;
}

// DeepSeek V4 reference (§3.1-§3.3): bf16 between stages, Hadamard, fp4-simulated keys
// and queries, bf16 weights and score.
constexpr RecipeFields dsv4_ref() {
  RecipeFields r = v4_model();
  r.key_rounding = {true, true, true, true};
  r.query_rounding = {true, false, true, true};
  r.hadamard = true;
  r.key_quant = fp4_simulated_deepseek();
  r.query_quant = fp4_simulated_deepseek();
  r.weights = WeightsPrecision::kBf16;
  r.weights_fold = WeightsFold::kCombinedConstant;
  r.score = ScoreAccum::kBf16;
  return r;
}

// SGLang's V4 fused_norm_rope indexer kernel as compiled (§6.2-§6.4): fp32 throughout,
// warp-tree RMSNorm sums of fma(x, x, s), the sm_90 rsqrtf, the first RoPE product
// fused; keys and queries (fused_q_indexer_rope_hadamard_quant, §6.3) e4m3fn(x * fl(1 /
// scale)), scale = amax / 448.
constexpr RecipeFields sglang_v4_fp8() {
  RecipeFields r = v4_model();
  r.key_norm.order = ReductionOrder::kWarpTree;
  r.key_norm.fma_contraction = true;
  r.key_norm.rsqrt = RsqrtKind::kSm90Approx;
  r.rope.fma = ContractedProduct::kFirst;
  r.hadamard = true;
  r.key_quant = fp8_plain(ScaleApply::kTimesReciprocal);
  r.query_quant = fp8_plain(ScaleApply::kTimesReciprocal);
  r.weights_fold = WeightsFold::kCombinedConstant;  // w * weight_scale * scale
  return r;
}

// The seed incident's fix: the same kernel with a bf16 key store (256 B/token).
constexpr RecipeFields sglang_v4_bf16() {
  RecipeFields r = sglang_v4_fp8();
  r.key_quant.format = StorageFormat::kBf16;
  return r;
}

// SGLang's V4 fp4 option (§6.1-§6.3): e2m1 blocks of 32, scale_raw = fmaxf(1e-4f, amax)
// / 6.f rounded up to a power of two by its exponent bits, applied as the exact
// reciprocal; threshold rounding with strict '>' (midpoints toward zero); the key kernel
// sets the sign bit on non-zero codes only (a negative value rounding to zero is +0).
// fp4 queries (fused_q_indexer_rope_hadamard_fp4_quant) with bf16 RoPE and Hadamard
// outputs, the same scale, rounding and zero-sign rules.
constexpr RecipeFields sglang_v4_fp4() {
  RecipeFields r = sglang_v4_fp8();
  QuantSpec fp4{};
  fp4.format = StorageFormat::kFp4E2m1;
  fp4.block = 32;
  fp4.amax_floor = 1e-4f;
  fp4.divisor = ScaleDivisor::kDivide;
  fp4.pow2 = ScalePow2::kExponentBitsCeil;
  fp4.apply = ScaleApply::kTimesReciprocal;  // inv_scale_ue8m0: exact for powers of two
  fp4.fp4_rounding = Rounding::kNearestTiesTowardZero;
  fp4.fp4_zero_sign = Fp4ZeroSign::kPositive;
  r.key_quant = fp4;
  r.query_quant = fp4;
  r.query_rounding = {false, false, true, true};
  return r;
}

// SGLang's V4.1 low-ratio indexer packs (§6.5), index_k_kernel and index_q_kernel as
// compiled: RMSNorm over one bf16 pair of each half a lane (warp_tree_halves, fma, sm_90
// rsqrtf), bf16 after the norm and after RoPE (interleaved, trailing 64, the first product
// of each output fused), no Hadamard; two fp4 stages: the fake quantisation
// (fp4_prestage), then e2m1 blocks of 32 with ue8m0 scale 2^ceil(log2(max(amax / 6,
// 1e-4))), applied as the exact reciprocal, nearest-even codes, -0 cleared. The kernel
// floors amax / 6 at 1e-4 where this spec floors amax at 6e-4 first: under the ceiling
// to a power of two both give 2^-13 below the floor and the same scale above it
// (fl(6e-4) / 6 and 1e-4 lie in (2^-14, 2^-13); tests/reference/scale_test.cc enumerates).
// Queries take the same stages without the norm; head weights bf16(wproj * fl(D^-1/2 *
// H^-1/2)) (combined constant; an fp4 query has no per-head scale to fold).
constexpr RecipeFields sglang_v41_fp4() {
  RecipeFields r = v4_model();
  r.key_norm.order = ReductionOrder::kWarpTreeHalves;
  r.key_norm.fma_contraction = true;
  r.key_norm.rsqrt = RsqrtKind::kSm90Approx;
  r.rope.fma = ContractedProduct::kFirst;
  r.key_rounding = {true, true, true, false};
  r.query_rounding = {true, false, true, false};
  r.hadamard = false;
  QuantSpec fp4{};
  fp4.format = StorageFormat::kFp4E2m1;
  fp4.block = 32;
  fp4.amax_floor = 6e-4f;
  fp4.divisor = ScaleDivisor::kDivide;
  fp4.pow2 = ScalePow2::kExponentBitsCeil;
  fp4.apply = ScaleApply::kTimesReciprocal;
  fp4.fp4_rounding = Rounding::kNearestEven;
  fp4.fp4_zero_sign = Fp4ZeroSign::kPositive;
  fp4.fp4_prestage = Fp4Prestage::kFakeQuant;
  r.key_quant = fp4;
  r.query_quant = fp4;
  r.weights = WeightsPrecision::kBf16;
  r.weights_fold = WeightsFold::kCombinedConstant;
  return r;
}

}  // namespace dsaf::ref::preset_fields
