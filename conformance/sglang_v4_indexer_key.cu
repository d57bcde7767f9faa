// File: sglang_v4_indexer_key.cu
// Conformance adapter (kernel_abi.h version 2) for SGLang's DeepSeek V4 indexer key
// kernels, fused_norm_rope_indexer (fp8 e4m3fn keys, 132 B/token) and
// fused_norm_rope_indexer_fp4 (e2m1 keys, 68 B/token), and (sglang_v4_indexer_query.cu)
// its query kernels, from the pinned release's
// sglang/kernels/jit/csrc/deepseek_v4/fused_norm_rope_v2.cuh (conformance/upstream.lock),
// instantiated as SGLang's JIT does on sm_90: DType = the input dtype, decode mode, PDL
// on, no preshuffle, compiled with SGLang's JIT flags (conformance/CMakeLists.txt).
//
// Mapping (docs/upstream.md): one decode plan per token with seq_len = position + 1
// and compress_ratio 1, so the kernel's position (seq_len - ratio) is the token's and it
// stores every token; out_loc = our slot (adapter_support.cuh); freqs_cis = our RoPE
// table interleaved as (cos, sin) pairs; the norm weight in the input dtype (SGLang casts
// it to kv.dtype: verify draws bf16-exact weights, key_caps.norm_params_bf16); eps from
// the recipe. Everything else the kernel fixes itself; verify judges its bytes.
#include <cuda_bf16.h>

#include "conformance/adapter_support.cuh"
#include "deepseek_v4/fused_norm_rope_v2.cuh"

namespace dsaf::conformance {
// The query kernels (sglang_v4_indexer_query.cu, a translation unit of this adapter).
int sglang_v4_query_quant(const dsaf_query_args_v2* a);
}  // namespace dsaf::conformance

namespace {

using namespace dsaf::conformance;
using Params = sglang::FusedNormRopeStoreParams;
using DecodePlan = sglang::device::compress::DecodePlan;
using KernelFn = void (*)(Params);
constexpr auto kDecode = sglang::ForwardMode::CompressDecode;

template <typename DType, bool kFp4>
struct IndexerKernel {
  template <int kBits>
  static constexpr KernelFn at() {
    if constexpr (kFp4) {
      return &sglang::fused_norm_rope_indexer_fp4<DType, kDecode, kBits, true>;
    } else {
      return &sglang::fused_norm_rope_indexer<DType, kDecode, kBits, true, 0>;
    }
  }
};

template <typename DType, bool kFp4>
KernelFn kernel_for(int page_bits) {
  static constexpr auto table = page_bits_table<IndexerKernel<DType, kFp4>>();
  return table[page_bits];
}

// One decode plan per token: seq_len = position + 1 (the kernel reads seq_len only).
__global__ void decode_plans_kernel(const int32_t* positions, int64_t num_tokens, DecodePlan* plans) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= num_tokens) return;
  plans[t] = DecodePlan{static_cast<uint32_t>(positions[t]) + 1u, 0, 0, 0};
}

__global__ void fill_kernel(float* out, float value, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}
__global__ void fill_bf16_kernel(uint16_t* out, uint16_t value, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}

struct Buffers {
  Scratch<int64_t> slots;
  Scratch<DecodePlan> plans;
  Scratch<float> freqs_cis;
  Scratch<float> unit_weight;
  Scratch<uint16_t> unit_weight_bf16;
};
Buffers& buffers() {
  static Buffers b;
  return b;
}

int key_store(const dsaf_key_store_args_v2* a) {
  const int format = field_int(a->recipe, "key_quant.format", -1);
  if (format != kFormatFp8E4m3fn && format != kFormatFp4E2m1) {
    return fail("sglang-v4-indexer: stores fp8 e4m3fn or e2m1 keys only");
  }
  const int page_bits = page_bits_of(a->page_size);
  if (page_bits < 0) {
    return fail("sglang-v4-indexer: the page size must be a power of two of at most 256");
  }
  if (a->num_tokens == 0) return 0;
  Buffers& b = buffers();
  int64_t* slots = b.slots.get(a->num_tokens);
  DecodePlan* plans = b.plans.get(a->num_tokens);
  float* freqs_cis = b.freqs_cis.get(a->rope_positions * 64);
  if (slots == nullptr || plans == nullptr || freqs_cis == nullptr) return 1;
  constexpr unsigned kThreads = 256;
  token_slots_kernel<<<blocks_of(a->num_tokens, kThreads), kThreads>>>(
      a->positions, a->seq, a->page_tables, a->page_table_stride, a->page_size, a->num_tokens, slots);
  decode_plans_kernel<<<blocks_of(a->num_tokens, kThreads), kThreads>>>(a->positions, a->num_tokens, plans);
  rope_table_kernel<true><<<blocks_of(a->rope_positions * 32, kThreads), kThreads>>>(a->rope_cos, a->rope_sin,
                                                                                      a->rope_positions, freqs_cis);
  const void* weight = a->input_bf16 ? static_cast<const void*>(a->norm_weight_bf16) : a->norm_weight;
  if (weight == nullptr) {  // no weight: RMSNorm's unit weight
    if (a->input_bf16) {
      uint16_t* ones = b.unit_weight_bf16.get(128);
      if (ones == nullptr) return 1;
      fill_bf16_kernel<<<1, 128>>>(ones, 0x3F80, 128);
      weight = ones;
    } else {
      float* ones = b.unit_weight.get(128);
      if (ones == nullptr) return 1;
      fill_kernel<<<1, 128>>>(ones, 1.0f, 128);
      weight = ones;
    }
  }
  Params params{};
  params.input = const_cast<void*>(a->input);  // the kernel only loads it
  params.handle = plans;
  params.weight = weight;
  params.freqs_cis = freqs_cis;
  params.out_loc = slots;
  params.kvcache = a->cache;
  params.eps = static_cast<float>(dsaf_recipe_field(a->recipe, "key_norm.eps", 1e-6));
  params.compress_ratio = 1;
  params.num_tokens = static_cast<uint32_t>(a->num_tokens);
  const bool fp4 = format == kFormatFp4E2m1;
  const KernelFn kernel = a->input_bf16 ? (fp4 ? kernel_for<sglang::bf16_t, true>(page_bits) : kernel_for<sglang::bf16_t, false>(page_bits))
                                        : (fp4 ? kernel_for<float, true>(page_bits) : kernel_for<float, false>(page_bits));
  // As forward() / forward_fp4(): 8 tokens (one per warp) per 256-thread block.
  const unsigned blocks = blocks_of(a->num_tokens, sglang::kNumWarps);
  if (launch_pdl(kernel, dim3(blocks), dim3(sglang::kBlockSize), params) != 0) return 1;
  return check(cudaGetLastError(), "sglang-v4-indexer");
}

dsaf_kernel_v2 make_table() {
  dsaf_key_caps_v2 caps{};
  caps.store_formats = (1u << kFormatFp8E4m3fn) | (1u << kFormatFp4E2m1);
  caps.input_dtypes = DSAF_INPUT_BF16 | DSAF_INPUT_FP32;
  caps.norm_params_bf16 = 1;
  caps.max_position = (int64_t{1} << 31) - 1;  // int32 positions (seq_len = position + 1: uint32)
  caps.max_tokens = (int64_t{1} << 32) - 1;    // num_tokens is uint32
  dsaf_kernel_v2 t = key_store_table("sglang " DSAF_UPSTREAM_VERSION " fused_norm_rope_indexer{,_fp4}", caps, &key_store);
  t.query_quant = &sglang_v4_query_quant;
  return t;
}

}  // namespace

DSAF_ADAPTER_EXPORT(make_table)
