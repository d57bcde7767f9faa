// File: sglang_v32_indexer_key.cu
// Conformance adapter (kernel_abi.h version 2) for SGLang's DSA (DeepSeek V3.2 family)
// indexer key path, from the pinned release (conformance/upstream.lock), in one of the
// two ways SGLang runs it (dsa_indexer.py, _fused_k_prepare_and_store), picked by
// DSAF_SGLANG_V32_PATH at compile time (conformance/CMakeLists.txt builds both):
//   0  fused     deepseek_v32/indexer_k.cuh fused_k_indexer_norm_rope_store: LayerNorm,
//                RoPE, fp8 quantisation and the paged store in one launch (taken when
//                the fused store module loads for bf16 keys, int64 slots, the page size);
//   1  fallback  fused_k_indexer_norm_rope (the same file: LayerNorm + RoPE -> bf16 keys)
//                then dsa/fused_store_index_cache.cuh fused_store_indexer_cache (fp8
//                quantisation + paged store), two launches.
// SGLang takes this path only for DSA checkpoints whose indexer RoPE is interleaved
// (use_dsa_indexer_fusion requires `not is_neox_style`; indexer_rope_interleave=True).
// The fallback's second kernel lives in a header that redefines the fp8 helpers the
// first one's header imports, so the two launches sit in two translation units
// (this file, and sglang_v32_store_index_cache.cu for the store).
//
// Mapping (docs/upstream.md): positions int32 (PosT), slots = out_cache_loc int64
// (adapter_support.cuh), cos_sin_cache = our RoPE table as [cos_0..31 | sin_0..31] per
// position, LayerNorm gamma and beta fp32 (ones and zeros when the recipe has none),
// eps from the recipe, bf16 input only (SGLang's fused store is built for bf16 keys; with
// fp32 keys the kernel's "round through DType" would not round), input row stride 128.
#include <cuda_bf16.h>

#include "conformance/adapter_support.cuh"
#include "deepseek_v32/indexer_k.cuh"

#ifndef DSAF_SGLANG_V32_PATH
#error "DSAF_SGLANG_V32_PATH must be 0 (fused) or 1 (fallback)"
#endif

namespace dsaf::conformance {
// The fallback's second launch, defined in sglang_v32_store_index_cache.cu:
// fused_store_indexer_cache on bf16 keys [n][128] and int64 slots, pages of 2^page_bits
// tokens, instantiated as SGLang's fused store module (bf16_t keys, int64_t indices, PDL
// on). 0 on success; else 1 with the error text set.
int launch_store_index_cache(const void* keys_bf16, uint8_t* cache, const int64_t* slots, uint32_t num_tokens,
                             int page_bits);
}  // namespace dsaf::conformance

namespace {

using namespace dsaf::conformance;
using sglang::bf16_t;
constexpr bool kFused = DSAF_SGLANG_V32_PATH == 0;

using StoreParams = sglang::FusedKIndexerNormRopeStoreParams;
struct FusedKernel {
  template <int kBits>
  static constexpr void (*at())(StoreParams) {
    return &sglang::fused_k_indexer_norm_rope_store<bf16_t, int32_t, true, kBits>;
  }
};

struct Buffers {
  Scratch<int64_t> slots;
  Scratch<float> cos_sin_cache;
  Scratch<float> unit_gamma;
  Scratch<float> zero_beta;
  Scratch<bf16_t> normed_keys;  // the fallback's bf16 keys between its two launches
};
Buffers& buffers() {
  static Buffers b;
  return b;
}

__global__ void fill_kernel(float* out, float value, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}

const float* or_constant(const float* given, Scratch<float>& scratch, float value) {
  if (given != nullptr) return given;
  float* out = scratch.get(128);
  if (out != nullptr) fill_kernel<<<1, 128>>>(out, value, 128);
  return out;
}

int key_store(const dsaf_key_store_args_v2* a) {
  if (field_int(a->recipe, "key_quant.format", -1) != kFormatFp8E4m3fn) {
    return fail("sglang-v32-indexer: stores fp8 e4m3fn keys only");
  }
  if (!a->input_bf16) return fail("sglang-v32-indexer: bf16 input only");
  const int page_bits = page_bits_of(a->page_size);
  if (page_bits < 0) {
    return fail("sglang-v32-indexer: the page size must be a power of two of at most 256");
  }
  if (a->num_tokens == 0) return 0;
  Buffers& b = buffers();
  int64_t* slots = b.slots.get(a->num_tokens);
  float* cos_sin_cache = b.cos_sin_cache.get(a->rope_positions * 64);
  const float* gamma = or_constant(a->norm_weight, b.unit_gamma, 1.0f);
  const float* beta = or_constant(a->norm_bias, b.zero_beta, 0.0f);
  if (slots == nullptr || cos_sin_cache == nullptr || gamma == nullptr || beta == nullptr) return 1;
  constexpr unsigned kThreads = 256;
  token_slots_kernel<<<blocks_of(a->num_tokens, kThreads), kThreads>>>(
      a->positions, a->seq, a->page_tables, a->page_table_stride, a->page_size, a->num_tokens, slots);
  rope_table_kernel<false><<<blocks_of(a->rope_positions * 32, kThreads), kThreads>>>(a->rope_cos, a->rope_sin,
                                                                                       a->rope_positions, cos_sin_cache);
  // The LayerNorm + RoPE arguments both kernels' parameter structs share.
  const auto norm_rope_args = [&](auto& p) {
    p.k_input = a->input;
    p.weight = gamma;
    p.bias = beta;
    p.cos_sin_cache = cos_sin_cache;
    p.positions = a->positions;
    p.k_input_stride_batch = 128;
    p.batch_size = static_cast<uint32_t>(a->num_tokens);
    p.eps = static_cast<float>(dsaf_recipe_field(a->recipe, "key_norm.eps", 1e-6));
  };
  // As FusedKIndexerNormRope{,Store}Kernel::forward: one warp per token, 4 per block.
  const dim3 grid(blocks_of(a->num_tokens, sglang::kFusedKIndexerNumWarps));
  const dim3 block(sglang::kFusedKIndexerBlockSize);
  if constexpr (kFused) {
    static constexpr auto kernels = page_bits_table<FusedKernel>();
    StoreParams p{};
    norm_rope_args(p);
    p.cache = a->cache;
    p.indices = slots;
    if (launch_pdl(kernels[page_bits], grid, block, p) != 0) return 1;
  } else {
    bf16_t* keys = b.normed_keys.get(static_cast<size_t>(a->num_tokens) * 128);
    if (keys == nullptr) return 1;
    sglang::FusedKIndexerNormRopeParams p{};
    norm_rope_args(p);
    p.k_out = keys;
    if (launch_pdl(&sglang::fused_k_indexer_norm_rope<bf16_t, int32_t, true>, grid, block, p) != 0) return 1;
    if (launch_store_index_cache(keys, a->cache, slots, p.batch_size, page_bits) != 0) return 1;
  }
  return check(cudaGetLastError(), "sglang-v32-indexer");
}

dsaf_kernel_v2 make_table() {
  dsaf_key_caps_v2 caps{};
  caps.store_formats = 1u << kFormatFp8E4m3fn;
  caps.input_dtypes = DSAF_INPUT_BF16;
  caps.norm_params_bf16 = 0;                   // gamma and beta fp32
  caps.max_position = (int64_t{1} << 31) - 1;  // int32 positions
  caps.max_tokens = (int64_t{1} << 32) - 1;    // batch_size is uint32
  return key_store_table(kFused ? "sglang " DSAF_UPSTREAM_VERSION " fused_k_indexer_norm_rope_store"
                                : "sglang " DSAF_UPSTREAM_VERSION " fused_k_indexer_norm_rope + fused_store_indexer_cache",
                         caps, &key_store);
}

}  // namespace

DSAF_ADAPTER_EXPORT(make_table)
