// File: recipe.cc — recipe validation and the nine presets (DESIGN.md, NUMERICS.md).
#include "reference/recipe.h"

#include <cmath>

#include <string>

#include "reference/error.h"

namespace dsaf::ref {
namespace {

void require(bool ok, const Recipe& r, const std::string& what) {
  if (!ok) throw_bad_input("recipe '" + r.name + "': " + what);
}

void validate_quant(const Recipe& r, const QuantSpec& q, const std::string& side) {
  switch (q.format) {
    case StorageFormat::kFp8E4m3fn:
      require(q.block == kHeadDim, r, side + "_quant.block must be 128 for fp8 (one scale per head)");
      break;
    case StorageFormat::kFp4E2m1:
    case StorageFormat::kFp4SimulatedBf16:
      require(q.block == 32, r, side + "_quant.block must be 32 for fp4");
      require(q.pow2 != ScalePow2::kNone, r,
              side + "_quant.pow2 must round fp4 scales to a power of two (ue8m0)");
      break;
    default:
      break;
  }
  require(q.amax_floor > 0.0f && std::isfinite(q.amax_floor), r, side + "_quant.amax_floor must be positive and finite");
  // Power-of-two scales read the exponent of amax_floor / qmax, which must be a normal
  // fp32 (see ue8m0_of in quantize.cc): floor >= qmax * 2^-126.
  if (q.pow2 != ScalePow2::kNone) {
    const bool fp4 = q.format == StorageFormat::kFp4E2m1 || q.format == StorageFormat::kFp4SimulatedBf16;
    const float qmax = fp4 ? kFp4Max : kFp8Max;
    require(q.amax_floor >= qmax * 0x1p-126f, r,
            side + "_quant.amax_floor must be >= qmax * 2^-126 for a power-of-two scale rule");
  }
}

// Model math shared by every DeepSeek V3.2 preset (NUMERICS §2.3-§2.4, §5.1, §7.1).
Recipe v32_model() {
  Recipe r;
  r.key_norm.kind = NormKind::kLayerNorm;
  r.key_norm.eps = 1e-6f;
  r.rope.pairing = RopePairing::kNeox;
  r.rope.placement = RopePlacement::kLeading;
  r.rope.table = {10000.0, 40.0, 4096.0, 32.0, 1.0};
  r.topk = 2048;
  return r;
}

// Model math of the DeepSeek V4 C4 indexer (NUMERICS §3.1-§3.2, §6.2-§6.3).
Recipe v4_model() {
  Recipe r;
  r.key_norm.kind = NormKind::kRmsNorm;
  r.key_norm.eps = 1e-6f;
  r.rope.pairing = RopePairing::kInterleaved;
  r.rope.placement = RopePlacement::kTrailing;
  r.rope.table = {160000.0, 16.0, 65536.0, 32.0, 1.0};
  r.topk = 512;
  return r;
}

QuantSpec fp8_ue8m0_deepseek() {
  QuantSpec q;  // act_quant: s = 2^ceil_log2(max(amax,1e-4) * (1/448)); y = e4m3(x / s)
  q.format = StorageFormat::kFp8E4m3fn;
  q.block = kHeadDim;
  q.amax_floor = 1e-4f;
  q.divisor = ScaleDivisor::kTimesReciprocal;
  q.pow2 = ScalePow2::kExponentBitsCeil;
  q.apply = ScaleApply::kDivide;
  return q;
}

QuantSpec fp8_plain(ScaleApply apply) {
  QuantSpec q;  // SGLang fused: scale = fmaxf(1e-4f, amax) / 448.f, no power-of-two rounding
  q.format = StorageFormat::kFp8E4m3fn;
  q.block = kHeadDim;
  q.amax_floor = 1e-4f;
  q.divisor = ScaleDivisor::kDivide;
  q.pow2 = ScalePow2::kNone;
  q.apply = apply;
  return q;
}

std::vector<Recipe> make_presets() {
  std::vector<Recipe> all;

  Recipe dsv32 = v32_model();
  dsv32.name = "dsv32-ref";
  dsv32.description =
      "DeepSeek V3.2 reference (post-2025-11 fix): LayerNorm, NeoX rope on leading dims, "
      "Hadamard, fp8 ue8m0 scales, bf16 intermediates";
  dsv32.source = "NUMERICS §2.2-§2.8, §10";
  dsv32.key_rounding = {true, true, true, true};
  dsv32.query_rounding = {true, false, true, true};
  dsv32.hadamard = true;
  dsv32.key_quant = fp8_ue8m0_deepseek();
  dsv32.query_quant = fp8_ue8m0_deepseek();
  dsv32.weights_fold = WeightsFold::kSeparateFactors;
  dsv32.score = ScoreAccum::kFp32;

  Recipe exact = exact_of(dsv32);
  exact.name = "exact";
  exact.description =
      "the oracle: DeepSeek V3.2 model math in fp64, no rounding, no quantisation";
  exact.source = "NUMERICS §2 (formulas), fp64 throughout";
  all.push_back(exact);
  all.push_back(dsv32);

  Recipe dsv32_bf16 = dsv32;
  dsv32_bf16.name = "dsv32-bf16";
  dsv32_bf16.description = "dsv32-ref with bf16 index keys (256 B/token)";
  dsv32_bf16.key_quant.format = StorageFormat::kBf16;
  all.push_back(dsv32_bf16);

  Recipe sgl32 = v32_model();
  sgl32.name = "sglang-v32-fused";
  sgl32.description =
      "SGLang fused V3.2 indexer path: no Hadamard, plain amax/448 scales, fp32 throughout "
      "(modelled from the formulas; compile-level FMA/rsqrt not read for this kernel)";
  sgl32.source = "NUMERICS §5.6, §6.2-§6.3 (quant block), §8";
  sgl32.key_rounding = {true, false, false, false};
  sgl32.query_rounding = {true, false, false, false};
  sgl32.hadamard = false;
  sgl32.key_quant = fp8_plain(ScaleApply::kTimesReciprocal);
  sgl32.query_quant = fp8_plain(ScaleApply::kDivide);
  sgl32.weights_fold = WeightsFold::kCombinedConstant;
  all.push_back(sgl32);

  Recipe vllm = v32_model();
  vllm.name = "vllm-v32";
  vllm.description =
      "vLLM V3.2: no Hadamard, exp2f(ceilf(log2f)) scales, q amax floor 1e-10, bf16 "
      "rounding after norm and rope";
  vllm.source = "NUMERICS §7.1-§7.2";
  vllm.key_rounding = {true, true, true, false};
  vllm.query_rounding = {true, false, true, false};
  vllm.hadamard = false;
  vllm.key_quant = fp8_plain(ScaleApply::kDivide);
  vllm.key_quant.pow2 = ScalePow2::kLog2Ceil;
  vllm.query_quant = vllm.key_quant;
  vllm.query_quant.amax_floor = 1e-10f;
  // weights_out = w * q_scale * softmax_scale * head_scale; q_scale and H^-1/2 = 1/8 are
  // powers of two, so this equals the kSeparateFactors order bit for bit.
  vllm.weights_fold = WeightsFold::kSeparateFactors;
  all.push_back(vllm);

  Recipe dsv4 = v4_model();
  dsv4.name = "dsv4-ref";
  dsv4.description =
      "DeepSeek V4 reference: RMSNorm, interleaved rope on trailing dims, Hadamard, "
      "fp4-simulated bf16 keys and queries, bf16 weights and score";
  dsv4.source = "NUMERICS §3.1-§3.3";
  dsv4.key_rounding = {true, true, true, true};
  dsv4.query_rounding = {true, false, true, true};
  dsv4.hadamard = true;
  QuantSpec fp4_sim;  // fp4_act_quant: amax >= 6*2^-126, s = 2^ceil(log2(amax/6)) (bit trick)
  fp4_sim.format = StorageFormat::kFp4SimulatedBf16;
  fp4_sim.block = 32;
  fp4_sim.amax_floor = 6.0f * 0x1p-126f;
  fp4_sim.divisor = ScaleDivisor::kDivide;
  fp4_sim.pow2 = ScalePow2::kExponentBitsCeil;
  fp4_sim.apply = ScaleApply::kDivide;
  dsv4.key_quant = fp4_sim;
  dsv4.query_quant = fp4_sim;
  dsv4.weights = WeightsPrecision::kBf16;
  dsv4.weights_fold = WeightsFold::kCombinedConstant;
  dsv4.score = ScoreAccum::kBf16;
  all.push_back(dsv4);

  Recipe sgl4 = v4_model();
  sgl4.name = "sglang-v4-fp8";
  sgl4.description =
      "SGLang V4 fused_norm_rope indexer kernel as compiled: fp32 throughout, FMA "
      "contraction, sm_90 rsqrtf, warp-tree reductions, fp8 with plain scales (132 B/token)";
  sgl4.source =
      "NUMERICS §6.2-§6.4; rope FMA placement read from sm_90a SASS (bench/results/LOG.md, "
      "2026-11-29 run 2); rsqrtf from the measured table (reference/data/)";
  sgl4.key_norm.order = ReductionOrder::kWarpTree;
  sgl4.key_norm.fma_contraction = true;
  sgl4.key_norm.rsqrt = RsqrtKind::kSm90Approx;
  sgl4.rope.fma = ContractedProduct::kFirst;
  sgl4.hadamard = true;
  sgl4.key_quant = fp8_plain(ScaleApply::kTimesReciprocal);  // inv = 1/scale; cvt(d * inv)
  sgl4.query_quant = fp8_plain(ScaleApply::kDivide);         // §6.3: e4m3(x / scale)
  sgl4.weights_fold = WeightsFold::kCombinedConstant;        // w * weight_scale * scale
  all.push_back(sgl4);

  Recipe sgl4_bf16 = sgl4;
  sgl4_bf16.name = "sglang-v4-bf16";
  sgl4_bf16.description =
      "the seed incident's fix: sglang-v4-fp8 with a bf16 key store (256 B/token)";
  sgl4_bf16.key_quant.format = StorageFormat::kBf16;
  all.push_back(sgl4_bf16);

  Recipe sgl4_fp4 = sgl4;
  sgl4_fp4.name = "sglang-v4-fp4";
  sgl4_fp4.description =
      "SGLang V4 fp4 indexer: e2m1 blocks of 32, ue8m0 scales, threshold rounding "
      "(ties toward zero), 68 B/token; fp4 q with bf16 rope/Hadamard outputs";
  sgl4_fp4.source = "NUMERICS §6.1-§6.3";
  QuantSpec fp4;  // scale_raw = fmaxf(1e-4f, amax) / 6.f; ue8m0 = cast_to_ue8m0 (ceil)
  fp4.format = StorageFormat::kFp4E2m1;
  fp4.block = 32;
  fp4.amax_floor = 1e-4f;
  fp4.divisor = ScaleDivisor::kDivide;
  fp4.pow2 = ScalePow2::kExponentBitsCeil;
  fp4.apply = ScaleApply::kTimesReciprocal;  // inv_scale_ue8m0: exact for powers of two
  fp4.fp4_rounding = Rounding::kNearestTiesTowardZero;
  sgl4_fp4.key_quant = fp4;
  sgl4_fp4.query_quant = fp4;
  sgl4_fp4.query_rounding = {false, false, true, true};
  all.push_back(sgl4_fp4);

  for (const Recipe& r : all) r.validate();
  return all;
}

}  // namespace

void Recipe::validate() const {
  const Recipe& r = *this;
  require(!name.empty(), r, "name is empty");
  if (compute == Compute::kFp64) {
    const auto no_rounding = [](const IntermediateRounding& x) {
      return !x.input && !x.norm && !x.rope && !x.hadamard;
    };
    require(no_rounding(key_rounding) && no_rounding(query_rounding), r,
            "fp64 compute cannot round intermediates");
    require(key_quant.format == StorageFormat::kNone &&
                query_quant.format == StorageFormat::kNone,
            r, "fp64 compute needs storage format 'none' for keys and queries");
    require(score == ScoreAccum::kExact, r, "fp64 compute needs score 'exact'");
    require(weights == WeightsPrecision::kFp32, r, "fp64 compute cannot round weights");
  } else {
    require(key_quant.format != StorageFormat::kNone &&
                query_quant.format != StorageFormat::kNone,
            r, "storage format 'none' needs fp64 compute; use 'fp32'");
  }
  require(key_norm.eps >= 0.0f && std::isfinite(key_norm.eps), r, "key_norm.eps must be finite and >= 0");
  validate_quant(r, key_quant, "key");
  validate_quant(r, query_quant, "query");
  require(rope.table.theta > 1.0, r, "rope.table.theta must be > 1");
  require(rope.table.yarn_factor >= 1.0, r, "rope.table.yarn_factor must be >= 1");
  require(rope.table.original_seq_len > 0 && rope.table.beta_fast > 0 &&
              rope.table.beta_slow > 0,
          r, "rope.table lengths and betas must be positive");
  require(topk >= 1, r, "topk must be >= 1");
  require(page_size >= 1 && page_size <= 256 && (page_size & (page_size - 1)) == 0, r,
          "page_size must be a power of two in [1, 256]");
}

Recipe exact_of(const Recipe& recipe) {
  Recipe r = recipe;
  r.name = recipe.name + "+exact";
  r.description = "fp64 oracle of " + recipe.name;
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

const std::vector<Recipe>& presets() {
  static const std::vector<Recipe> all = make_presets();
  return all;
}

const Recipe& preset(const std::string& name) {
  std::string names;
  for (const Recipe& r : presets()) {
    if (r.name == name) return r;
    names += (names.empty() ? "" : ", ") + r.name;
  }
  throw Error(ErrorKind::kUsage, "unknown recipe '" + name + "' (presets: " + names + ")");
}

}  // namespace dsaf::ref
