// File: recipe.cc — recipe validation and the nine presets (docs/design.md, docs/numerics.md).
#include "reference/recipe.h"

#include <cmath>

#include <string>
#include <utility>

#include "reference/error.h"
#include "reference/presets.h"

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
  const bool fp4 = q.format == StorageFormat::kFp4E2m1 || q.format == StorageFormat::kFp4SimulatedBf16;
  require(fp4 || q.fp4_prestage == Fp4Prestage::kNone, r, side + "_quant.fp4_prestage applies to fp4 formats only");
  require(q.amax_floor > 0.0f && std::isfinite(q.amax_floor), r, side + "_quant.amax_floor must be positive and finite");
  // Power-of-two scales read the exponent of amax_floor / qmax, which must be a normal
  // fp32 (see ue8m0_of in quantize.cc): floor >= qmax * 2^-126.
  if (q.pow2 != ScalePow2::kNone) {
    const float qmax = fp4 ? kFp4Max : kFp8Max;
    require(q.amax_floor >= qmax * 0x1p-126f, r,
            side + "_quant.amax_floor must be >= qmax * 2^-126 for a power-of-two scale rule");
  }
}

Recipe named(const std::string& name, const std::string& description, const std::string& source,
             const RecipeFields& fields, Provenance provenance = {}) {
  Recipe r;
  static_cast<RecipeFields&>(r) = fields;
  r.name = name;
  r.description = description;
  r.source = source;
  r.provenance = std::move(provenance);
  return r;
}

// Each preset's claim about the upstream code it names (docs/conformance.md holds the
// runs; the kernels are built from conformance/upstream.lock).
Provenance verified(std::string upstream, std::string run) {
  return {ProvenanceStatus::kVerified, std::move(upstream), std::move(run)};
}
Provenance modelled(std::string upstream, std::string why) {
  return {ProvenanceStatus::kModelled, std::move(upstream), std::move(why)};
}
constexpr const char* kSglangV4Kernels = "sglang 0.5.23 sglang/kernels/jit/csrc/deepseek_v4/fused_norm_rope_v2.cuh";
constexpr const char* kSglangV4QueryKernels = "sglang/kernels/jit/csrc/deepseek_v4/main_norm_rope.cuh";
constexpr const char* kDeepSeekReference =
    "not runnable here: DeepSeek's reference is PyTorch and TileLang code, and the GPU host has neither";

std::vector<Recipe> make_presets() {
  namespace f = preset_fields;
  std::vector<Recipe> all = {
      named("exact", "the oracle: DeepSeek V3.2 model math in fp64, no rounding, no quantisation",
            "docs/numerics.md §2 (formulas), fp64 throughout", f::exact()),
      named("dsv32-ref",
            "DeepSeek V3.2 reference (post-2025-11 fix): LayerNorm, NeoX rope on leading dims, "
            "Hadamard, fp8 ue8m0 scales, bf16 intermediates",
            "docs/numerics.md §2.2-§2.8, §10", f::dsv32_ref(),
            modelled("DeepSeek-V3.2-Exp inference/model.py (Indexer), inference/kernel.py (act_quant)",
                     kDeepSeekReference)),
      named("dsv32-bf16", "dsv32-ref with bf16 index keys (256 B/token)", "docs/numerics.md §2.2-§2.8, §10",
            f::dsv32_bf16()),
      named("sglang-v32-fused",
            "SGLang's fused DSA indexer key kernel (checkpoints with interleaved indexer rope): "
            "LayerNorm as compiled, interleaved rope on leading dims, bf16 keys after rope, no "
            "Hadamard, plain amax/448 scales",
            "docs/numerics.md §5.6, §8; read from the kernel (docs/upstream.md)", f::sglang_v32_fused(),
            verified("sglang 0.5.23 sglang/kernels/jit/csrc/deepseek_v32/indexer_k.cuh "
                     "fused_k_indexer_norm_rope_store; fused_k_indexer_norm_rope + "
                     "dsa/fused_store_index_cache.cuh fused_store_indexer_cache (the fallback)",
                     "keys: in the recorded H200 conformance run (docs/conformance.md), both paths byte-exact on "
                     "12,684 tokens (every page size 1-256, "
                     "prefill and decode, bf16 input) and the same bytes as our kernel on 1M tokens; the "
                     "query side is not read from a kernel")),
      named("vllm-v32",
            "vLLM V3.2 as production runs it (Triton): LayerNorm and NeoX rope in fp32 registers, no "
            "bf16 rounding, no Hadamard, exp2(ceil(log2)) scales with amax floor 1e-4",
            "docs/numerics.md §7.1-§7.2", f::vllm_v32(),
            verified("vllm 0.33.0 vllm/models/deepseek_v32/common/kernels.py _fused_norm_rope_kernel (key), "
                     "_fused_q_kernel (query)",
                     "keys: in the recorded H200 conformance run (docs/conformance.md), the Triton kernel run "
                     "from the pinned sdist "
                     "(conformance/vllm_triton_key_capture.py) wrote a 131,072-token cache capture that "
                     "compares byte-exact (127,047 written tokens, 16,770,204 bytes); the query side is not "
                     "read from a kernel. The CUDA kernels on vLLM's other path, rotary_embedding_kernel + "
                     "indexer_k_quant_and_cache_kernel, are byte-exact against conformance/kernels.json's "
                     "recipe vllm-v32-cuda-store")),
      named("dsv4-ref",
            "DeepSeek V4 reference: RMSNorm, interleaved rope on trailing dims, Hadamard, "
            "fp4-simulated bf16 keys and queries, bf16 weights and score",
            "docs/numerics.md §3.1-§3.3", f::dsv4_ref(),
            modelled("DeepSeek V4 inference/model.py (Indexer), inference/kernel.py (fp4_act_quant)",
                     kDeepSeekReference)),
      named("sglang-v4-fp8",
            "SGLang V4 fused_norm_rope indexer kernel as compiled: fp32 throughout, FMA "
            "contraction, sm_90 rsqrtf, warp-tree reductions, fp8 with plain scales (132 B/token)",
            "docs/numerics.md §6.2-§6.4; rope FMA placement read from the kernel's sm_90a SASS; "
            "rsqrtf from the measured table (reference/data/)",
            f::sglang_v4_fp8(),
            verified(std::string(kSglangV4Kernels) + " fused_norm_rope_indexer (key); " + kSglangV4QueryKernels +
                         " fused_q_indexer_rope_hadamard_quant (query)",
                     "in the recorded H200 conformance run (docs/conformance.md): keys byte-exact on 28,480 "
                     "tokens (every page size 1-256, prefill and decode, bf16 and fp32 input) and the same bytes "
                     "as our kernel on 1M tokens; queries byte-exact in their codes and bit-exact in their head "
                     "weights on 262,144 heads (the kernel folds the q scale into the weight and writes none)")),
      named("sglang-v4-bf16", "the seed incident's fix: sglang-v4-fp8 with a bf16 key store (256 B/token)",
            "docs/numerics.md §6.2-§6.4", f::sglang_v4_bf16(),
            modelled(std::string(kSglangV4Kernels) + " fused_norm_rope_indexer (its values, stored as bf16)",
                     "sglang 0.5.23 has no bf16 indexer key store: FusedNormRopeKernel allows the bf16 "
                     "store for the head_dim-512 latent only (a static_assert), so no kernel stores "
                     "what this preset describes")),
      named("sglang-v4-fp4",
            "SGLang V4 fp4 indexer: e2m1 blocks of 32, ue8m0 scales, threshold rounding "
            "(ties toward zero), 68 B/token; fp4 q with bf16 rope/Hadamard outputs",
            "docs/numerics.md §6.1-§6.3", f::sglang_v4_fp4(),
            verified(std::string(kSglangV4Kernels) + " fused_norm_rope_indexer_fp4 (key); " + kSglangV4QueryKernels +
                         " fused_q_indexer_rope_hadamard_fp4_quant (query)",
                     "in the recorded H200 conformance run (docs/conformance.md): keys byte-exact on 28,480 "
                     "tokens (every page size 1-256, prefill and decode, bf16 and fp32 input) and the same bytes "
                     "as our kernel on 1M tokens; queries byte-exact in codes and scales and bit-exact in head "
                     "weights on 262,144 heads")),
      named("sglang-v41-fp4",
            "SGLang V4.1 low-ratio indexer packs: RMSNorm over a pair of each half a lane, bf16 after "
            "norm and rope, no Hadamard, two fp4 stages (fake quantisation, then e2m1 with ue8m0 "
            "scales floored at 1e-4 after the divide), 68 B/token; fp4 q with bf16 head weights",
            "docs/numerics.md §6.5; reduction and rope FMA placement read from the kernels' sm_90a SASS",
            f::sglang_v41_fp4(),
            verified("sglang 0.5.23 sglang/kernels/jit/csrc/deepseek_v4/fp4_indexer_rope.cuh index_k_kernel "
                     "(key), index_q_kernel (query)",
                     "in the recorded H200 conformance run (docs/conformance.md): keys byte-exact on 12,684 tokens "
                     "(every page size 1-256, prefill and decode, bf16 input), queries byte-exact in codes and "
                     "scales and bit-exact in head weights on 262,144 heads")),
  };
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
  return named(recipe.name + "+exact", "fp64 oracle of " + recipe.name, recipe.source,
               preset_fields::exact_fields(recipe));
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
