// File: sglang_v41_indexer_rope.cu
// Conformance adapter (kernel_abi.h version 2) for SGLang's DeepSeek V4.1 low-ratio
// indexer kernels, from the pinned release's
// sglang/kernels/jit/csrc/deepseek_v4/fp4_indexer_rope.cuh (conformance/upstream.lock):
//   key store   index_k_kernel: RMSNorm, RoPE on the trailing 64 dims, two fp4 stages, the
//               68-byte slot (index_k_norm_rope_pack_store);
//   query path  index_q_kernel with the head-weight epilogue (index_q_rope_pack_weights):
//               RoPE, the same two fp4 stages, weights = bf16(head_weights * weight_scale).
// Instantiated as SGLang's JIT does on sm_90 (kHeadDim 128, kRopeDim 64, PDL on, int32
// positions), compiled with SGLang's JIT flags (conformance/CMakeLists.txt).
//
// Mapping (docs/upstream.md):
//  * ratio 1 (kRatio = 1): the kernel's group position `position & ~(ratio - 1)` is the
//    token's own position, which is what our ABI's key store rotates by;
//  * the kernel reserves slot 0 ("0 publishes nothing"): it is handed every slot plus one
//    page and a cache base one page lower, so that its address arithmetic
//    (base + (slot / P) * P * 68 ...) lands on our slot; the lowered base is never
//    dereferenced (slot >= P always);
//  * freqs_cis = our RoPE table interleaved as (cos, sin) pairs; the norm weight and the
//    head weights in bf16 (verify draws bf16-exact values, key_caps.norm_params_bf16; the
//    glue refuses a head weight bf16 cannot hold rather than round it);
//  * weight_scale = head_dim^-0.5 * heads^-0.5 in fp64, rounded to fp32, as the Python
//    caller (DeepseekV41Indexer.head_weight_scale) passes it.
#include <cuda_bf16.h>

#include <cmath>

#include "conformance/adapter_support.cuh"
#include "deepseek_v4/fp4_indexer_rope.cuh"

namespace {

using namespace dsaf::conformance;
constexpr int64_t kHeadDim = 128, kRopeDim = 64;
constexpr int64_t kSlotBytes = 68;  // 64 payload bytes + 4 ue8m0 block exponents
using KeyFn = void (*)(sglang::IndexKParams);
using QueryFn = void (*)(sglang::IndexQParams);

struct IndexKKernel {
  template <int kBits>
  static constexpr KeyFn at() {
    return &sglang::index_k_kernel<true, kHeadDim, kRopeDim, (1u << kBits), 1, int32_t>;
  }
};

__global__ void unit_bf16_kernel(uint16_t* out) { out[threadIdx.x] = 0x3F80; }  // bf16 1.0

struct Buffers {
  Scratch<int64_t> slots;
  Scratch<float> freqs_cis;
  Scratch<uint16_t> unit_weight;
  Scratch<uint16_t> head_weights;
};
Buffers& buffers() {
  static Buffers b;
  return b;
}

float* freqs_cis_of(const float* cos, const float* sin, int64_t positions) {
  float* freqs_cis = buffers().freqs_cis.get(positions * 64);
  if (freqs_cis == nullptr) return nullptr;
  constexpr unsigned kThreads = 256;
  rope_table_kernel<true><<<blocks_of(positions * 32, kThreads), kThreads>>>(cos, sin, positions, freqs_cis);
  return freqs_cis;
}

int key_store(const dsaf_key_store_args_v2* a) {
  if (field_int(a->recipe, "key_quant.format", -1) != kFormatFp4E2m1) {
    return fail("sglang-v41-indexer: stores e2m1 keys only");
  }
  if (!a->input_bf16) return fail("sglang-v41-indexer: takes bf16 input only");
  const int page_bits = page_bits_of(a->page_size);
  if (page_bits < 0) return fail("sglang-v41-indexer: the page size must be a power of two of at most 256");
  if (a->num_tokens == 0) return 0;
  Buffers& b = buffers();
  int64_t* slots = b.slots.get(a->num_tokens);
  float* freqs_cis = freqs_cis_of(a->rope_cos, a->rope_sin, a->rope_positions);
  if (slots == nullptr || freqs_cis == nullptr) return 1;
  constexpr unsigned kThreads = 256;
  // Slot 0 is the kernel's reserved dummy: every slot one page on, the base one page down.
  token_slots_kernel<<<blocks_of(a->num_tokens, kThreads), kThreads>>>(
      a->positions, a->seq, a->page_tables, a->page_table_stride, a->page_size, a->num_tokens, slots, 1);
  const uint16_t* weight = a->norm_weight_bf16;
  if (weight == nullptr) {  // RMSNorm's unit weight
    uint16_t* ones = b.unit_weight.get(kHeadDim);
    if (ones == nullptr) return 1;
    unit_bf16_kernel<<<1, kHeadDim>>>(ones);
    weight = ones;
  }
  sglang::IndexKParams params{};
  params.input = static_cast<const sglang::bf16_t*>(a->input);
  params.norm_weight = reinterpret_cast<const sglang::bf16_t*>(weight);
  params.freqs_cis = freqs_cis;
  params.positions = a->positions;
  params.loc = slots;
  const uintptr_t page_bytes = static_cast<uintptr_t>(a->page_size) * kSlotBytes;
  params.cache = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(a->cache) - page_bytes);
  params.num_tokens = static_cast<uint32_t>(a->num_tokens);
  params.eps = static_cast<float>(dsaf_recipe_field(a->recipe, "key_norm.eps", 1e-6));
  static constexpr auto table = page_bits_table<IndexKKernel>();
  constexpr unsigned kBlock = sglang::kFp4RopeWarpsPerCTA * 32;  // one warp per token, as run_index_k
  if (launch_pdl(table[page_bits], dim3(blocks_of(a->num_tokens, sglang::kFp4RopeWarpsPerCTA)), dim3(kBlock),
                 params) != 0) {
    return 1;
  }
  return check(cudaGetLastError(), "sglang-v41-indexer key store");
}

int query_quant(const dsaf_query_args_v2* a) {
  if (field_int(a->recipe, "query_quant.format", -1) != kFormatFp4E2m1) {
    return fail("sglang-v41-indexer: packs e2m1 queries only");
  }
  if (!a->input_bf16) return fail("sglang-v41-indexer: takes bf16 queries only");
  const int64_t rows = a->num_tokens * a->num_heads;
  if (rows == 0) return 0;
  Buffers& b = buffers();
  float* freqs_cis = freqs_cis_of(a->rope_cos, a->rope_sin, a->rope_positions);
  uint16_t* head_weights = b.head_weights.get(rows);
  if (freqs_cis == nullptr || head_weights == nullptr) return 1;
  if (head_weights_bf16(a->wproj, rows, head_weights, "sglang-v41-indexer") != 0) return 1;
  sglang::IndexQParams params{};
  params.input = static_cast<const sglang::bf16_t*>(a->input);
  params.freqs_cis = freqs_cis;
  params.positions = a->positions;
  params.payload = reinterpret_cast<int8_t*>(a->q_values);
  params.scale = reinterpret_cast<int32_t*>(a->q_scales);
  params.head_weights = reinterpret_cast<const sglang::bf16_t*>(head_weights);
  params.weights_out = a->weights;
  params.weight_scale = static_cast<float>(std::pow(static_cast<double>(kHeadDim), -0.5) *
                                           std::pow(static_cast<double>(a->num_heads), -0.5));
  params.num_rows = static_cast<uint32_t>(rows);
  params.heads = static_cast<uint32_t>(a->num_heads);
  constexpr QueryFn kernel = &sglang::index_q_kernel<true, kHeadDim, kRopeDim, int32_t, true>;
  constexpr unsigned kBlock = sglang::kFp4RopeWarpsPerCTA * 32;  // one warp per (token, head), as launch()
  if (launch_pdl(kernel, dim3(blocks_of(rows, sglang::kFp4RopeWarpsPerCTA)), dim3(kBlock), params) != 0) return 1;
  return check(cudaGetLastError(), "sglang-v41-indexer query path");
}

dsaf_kernel_v2 make_table() {
  dsaf_key_caps_v2 caps{};
  caps.store_formats = 1u << kFormatFp4E2m1;
  caps.input_dtypes = DSAF_INPUT_BF16;
  caps.norm_params_bf16 = 1;
  caps.max_position = (int64_t{1} << 31) - 1;  // int32 positions
  caps.max_tokens = (int64_t{1} << 32) - 1;    // num_tokens is uint32
  dsaf_kernel_v2 t = key_store_table("sglang " DSAF_UPSTREAM_VERSION " index_k / index_q rope pack (V4.1 fp4)",
                                     caps, &key_store);
  t.query_quant = &query_quant;
  return t;
}

}  // namespace

DSAF_ADAPTER_EXPORT(make_table)
