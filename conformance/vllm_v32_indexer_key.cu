// File: vllm_v32_indexer_key.cu
// Conformance adapter (kernel_abi.h version 2) for the CUDA kernels of vLLM's DeepSeek
// V3.2 indexer key store, from the pinned release's csrc/ (conformance/upstream.lock):
// rotary_embedding_kernel (csrc/pos_encoding_kernels.cu), then
// indexer_k_quant_and_cache_kernel (csrc/cache_kernels.cu) with its fp8 conversion
// fp8::scaled_convert (csrc/quantization/w8a8/fp8/nvidia/quant_utils.cuh), compiled
// with vLLM's flags for its _C extension (conformance/CMakeLists.txt).
//
// How far CUDA carries vLLM's key path. On H100/H200, DeepseekV32ForCausalLM
// (vllm/models/deepseek_v32/attention.py) normalises, rotates, quantises and stores the
// index key in one Triton kernel, _fused_norm_rope_kernel
// (vllm/models/deepseek_v32/common/kernels.py), which cannot run here. vLLM has no CUDA
// LayerNorm (LayerNorm.forward_cuda is torch's F.layer_norm), and its CUDA RoPE is not on
// a V3.2 path (DeepseekScalingRotaryEmbedding.forward_cuda is FlashInfer's RoPE or torch).
// indexer_k_quant_and_cache_kernel is on the production path: sparse_attn_indexer runs it
// on the Triton kernel's bf16 keys under prefill context parallelism
// (skip_k_cache_insert = not use_pcp), and on the k of deepseek_v2.Indexer. So this key
// store has no norm: it serves recipes with key_norm.kind none (the vllm-v32-cuda-store
// recipe of conformance/kernels.json) and refuses others; the rotation is
// vLLM's own CUDA RoPE kernel, so that the store's bytes can be judged through the ABI.
//
// Both kernels sit in .cu files with torch host code, so conformance/extract_upstream.py
// cuts them (and the declarations they use) verbatim out of the pinned files at build time
// into vllm_indexer_k_extract.cuh in the build folder.
//
// Mapping, as vLLM's host functions launch them:
// - rotary_embedding: on a copy of the bf16 keys [T][128] as the query, one head, no key
//   (the kernel rotates in place); positions as int64; cos_sin_cache = our table as
//   [position][cos 0..31 | sin 0..31] fp32 (vLLM dispatches cache_t on the table's dtype);
//   rot_dim 64; is_neox from rope.pairing, rope_dim_offset 0 or 64 from rope.placement;
//   inverse false; grid T, block min(heads * rot_dim / 2, 512) = 32. scalar_t is
//   __nv_bfloat16 for vLLM's c10::BFloat16: both load by widening and store by
//   __float2bfloat16 (round to nearest even); the arithmetic is fp32.
// - indexer_k_quant_and_cache<__nv_bfloat16, uint8_t, kFp8E4M3> (vLLM's dispatch for bf16
//   k and "fp8_e4m3"): slot_mapping = our slot (adapter_support.cuh); cache [pages][P][132],
//   block stride P * 132, head_dim = quant_block_size = 128; use_ue8m0 = key_quant.pow2 is
//   not none (scale_fmt "ue8m0"), use_mx_scale false (sm_90: mqa_logits_use_mx_scales() is
//   false); grid (T, 1), block (32, 4). The kernel's page is ours: [P x 128 fp8 | P x fp32].
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cassert>
#include <cstdint>

#include "conformance/adapter_support.cuh"
#include "core/cuda_compat.h"
#include "vllm_indexer_k_extract.cuh"

namespace {

using namespace dsaf::conformance;
constexpr int kHeadDim = 128;
constexpr int kRotDim = 64;
constexpr int kBytesPerToken = kHeadDim + 4;  // fp8 values + one fp32 scale
// RecipeFields enum values (reference/recipe.h): NormKind::kNone, RopePairing::kNeox,
// RopePlacement::kTrailing, ScalePow2::kNone.
constexpr int kNormNone = 0;
constexpr int kPairingNeox = 0;
constexpr int kPlacementTrailing = 1;
constexpr int kPow2None = 0;

using RotaryFn = void (*)(const int64_t*, __nv_bfloat16*, __nv_bfloat16*, const float*, int, int64_t, int64_t,
                          int64_t, int, int, int, int64_t, bool);

__global__ void widen_positions_kernel(const int32_t* positions, int64_t num_tokens, int64_t* out) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < num_tokens) out[t] = positions[t];
}

struct Buffers {
  Scratch<int64_t> slots;
  Scratch<int64_t> positions;
  Scratch<float> cos_sin;
  Scratch<__nv_bfloat16> keys;
};
Buffers& buffers() {
  static Buffers b;
  return b;
}

int key_store(const dsaf_key_store_args_v2* a) {
  if (field_int(a->recipe, "key_norm.kind", -1) != kNormNone) {
    return fail("vllm-v32-indexer-key: vLLM has no CUDA LayerNorm (the key path normalises in Triton or torch): "
                "verify against a recipe with key_norm.kind none (vllm-v32-cuda-store, "
                "a recipe of conformance/kernels.json)");
  }
  if (field_int(a->recipe, "hadamard", 0) != 0) return fail("vllm-v32-indexer-key: vLLM's key path has no Hadamard");
  if (field_int(a->recipe, "key_quant.format", -1) != kFormatFp8E4m3fn) {
    return fail("vllm-v32-indexer-key: indexer_k_quant_and_cache stores fp8 e4m3fn keys only");
  }
  if (!a->input_bf16) return fail("vllm-v32-indexer-key: the index key is bf16 (declared input dtype)");
  const int page_bits = page_bits_of(a->page_size);
  if (page_bits < 0) {
    return fail("vllm-v32-indexer-key: the page size must be a power of two of at most 256");
  }
  if (a->num_tokens == 0) return 0;
  const bool neox = field_int(a->recipe, "rope.pairing", kPairingNeox) == kPairingNeox;
  const int64_t rope_offset = field_int(a->recipe, "rope.placement", 0) == kPlacementTrailing ? kHeadDim - kRotDim : 0;
  const bool use_ue8m0 = field_int(a->recipe, "key_quant.pow2", kPow2None) != kPow2None;

  Buffers& b = buffers();
  int64_t* slots = b.slots.get(a->num_tokens);
  int64_t* positions = b.positions.get(a->num_tokens);
  float* cos_sin = b.cos_sin.get(a->rope_positions * kRotDim);
  __nv_bfloat16* keys = b.keys.get(a->num_tokens * kHeadDim);
  if (slots == nullptr || positions == nullptr || cos_sin == nullptr || keys == nullptr) return 1;
  constexpr unsigned kThreads = 256;
  token_slots_kernel<<<blocks_of(a->num_tokens, kThreads), kThreads>>>(
      a->positions, a->seq, a->page_tables, a->page_table_stride, a->page_size, a->num_tokens, slots);
  widen_positions_kernel<<<blocks_of(a->num_tokens, kThreads), kThreads>>>(a->positions, a->num_tokens, positions);
  rope_table_kernel<false><<<blocks_of(a->rope_positions * 32, kThreads), kThreads>>>(a->rope_cos, a->rope_sin,
                                                                                       a->rope_positions, cos_sin);
  if (check(cudaMemcpyAsync(keys, a->input, a->num_tokens * kHeadDim * sizeof(__nv_bfloat16),
                            cudaMemcpyDeviceToDevice),
            "cudaMemcpyAsync") != 0) {
    return 1;
  }

  const RotaryFn rotary = neox ? &vllm::rotary_embedding_kernel<__nv_bfloat16, float, true>
                               : &vllm::rotary_embedding_kernel<__nv_bfloat16, float, false>;
  const dim3 rotary_grid(static_cast<unsigned>(a->num_tokens));
  const dim3 rotary_block(std::min(1 * kRotDim / 2, 512));
  rotary<<<rotary_grid, rotary_block>>>(positions, keys, nullptr, cos_sin, kRotDim, /*query_stride=*/kHeadDim,
                                         /*key_stride=*/0, /*head_stride=*/kHeadDim, /*num_heads=*/1,
                                         /*num_kv_heads=*/1, /*head_size=*/kHeadDim, rope_offset,
                                         /*inverse=*/false);
  if (check(cudaGetLastError(), "rotary_embedding_kernel") != 0) return 1;

  // indexer_k_quant_and_cache(): grid (num_tokens, ceil(head_dim / (quant_block_size * 4))),
  // block (32, 4).
  constexpr int kVecSize = 4;
  const dim3 grid(static_cast<unsigned>(a->num_tokens), (kHeadDim + kHeadDim * kVecSize - 1) / (kHeadDim * kVecSize));
  const dim3 block(32, kVecSize);
  vllm::indexer_k_quant_and_cache_kernel<__nv_bfloat16, uint8_t, vllm::Fp8KVCacheDataType::kFp8E4M3>
      <<<grid, block>>>(keys, a->cache, slots, kHeadDim, /*quant_block_size=*/kHeadDim, a->page_size,
                        static_cast<int64_t>(a->page_size) * kBytesPerToken, use_ue8m0, /*use_mx_scale=*/false);
  // Returns once queued (docs/upstream.md: calls are stream-ordered on the default stream).
  return check(cudaGetLastError(), "indexer_k_quant_and_cache_kernel");
}

dsaf_kernel_v2 make_table() {
  dsaf_key_caps_v2 caps{};
  caps.store_formats = 1u << kFormatFp8E4m3fn;  // every page size: the kernel takes any block size (vLLM's CUDA backend: 64)
  caps.input_dtypes = DSAF_INPUT_BF16;
  caps.norm_params_bf16 = 0;                   // no norm parameters are read
  caps.max_position = (int64_t{1} << 31) - 1;  // int32 positions of the ABI
  caps.max_tokens = (int64_t{1} << 31) - 1;    // one block per token: grid.x
  return key_store_table("vllm " DSAF_UPSTREAM_VERSION " rotary_embedding + indexer_k_quant_and_cache (no norm)", caps,
                         &key_store);
}

}  // namespace

DSAF_ADAPTER_EXPORT(make_table)
