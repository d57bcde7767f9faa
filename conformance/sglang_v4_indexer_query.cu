// File: sglang_v4_indexer_query.cu
// The query path of the sglang_v4_indexer_key adapter (its table lists it): SGLang's
// DeepSeek V4 indexer query kernels from the pinned release's
// sglang/kernels/jit/csrc/deepseek_v4/main_norm_rope.cuh, fused_q_indexer_rope_hadamard_quant
// (fp8 e4m3fn q, per-head fp32 scale folded into the head weight) and
// fused_q_indexer_rope_hadamard_fp4_quant (e2m1 q, four ue8m0 block exponents), as
// dsv4/norm_rope.py instantiates them on sm_90: DType bf16 (wq_b's output), PDL on, V4's
// trailing RoPE (kRopeFirst false) and Hadamard, int32 positions. Its own translation
// unit: main_norm_rope.cuh and the key adapter's fused_norm_rope_v2.cuh both define
// sglang::quant_fp4_e2m1.
//
// Mapping (docs/upstream.md): q_input = our [tokens][heads][128] bf16 query; rope_cache /
// freqs_cis = our RoPE table interleaved as (cos, sin) pairs; weight = our head weights
// (wproj) in bf16 (verify draws bf16-exact values, key_caps.norm_params_bf16; the glue
// refuses others); weight_scale = 128^-0.5 * heads^-0.5 in fp64, rounded to fp32, as
// C4Indexer.weight_scale reaches the kernel; q_fp8 / q_fp4 and q_sf are our q_values and
// q_scales (the same layouts: 128 codes, or 64 bytes and 4 exponent bytes, a head).
#include <cuda_bf16.h>

#include <cmath>

#include "conformance/adapter_support.cuh"
#include "deepseek_v4/main_norm_rope.cuh"

namespace dsaf::conformance {

// Declared where the table is built (sglang_v4_indexer_key.cu).
int sglang_v4_query_quant(const dsaf_query_args_v2* a) {
  const int format = field_int(a->recipe, "query_quant.format", -1);
  if (format != kFormatFp8E4m3fn && format != kFormatFp4E2m1) {
    return fail("sglang-v4-indexer: packs fp8 e4m3fn or e2m1 queries only");
  }
  if (!a->input_bf16) return fail("sglang-v4-indexer: takes bf16 queries only");
  const int64_t rows = a->num_tokens * a->num_heads;
  if (rows == 0) return 0;
  static Scratch<float> freqs_scratch;
  static Scratch<uint16_t> weight_scratch;
  float* freqs_cis = freqs_scratch.get(a->rope_positions * 64);
  uint16_t* weight = weight_scratch.get(rows);
  if (freqs_cis == nullptr || weight == nullptr) return 1;
  constexpr unsigned kThreads = 256;
  rope_table_kernel<true><<<blocks_of(a->rope_positions * 32, kThreads), kThreads>>>(a->rope_cos, a->rope_sin,
                                                                                      a->rope_positions, freqs_cis);
  if (head_weights_bf16(a->wproj, rows, weight, "sglang-v4-indexer") != 0) return 1;
  const float weight_scale = static_cast<float>(std::pow(128.0, -0.5) * std::pow(static_cast<double>(a->num_heads), -0.5));
  const dim3 grid(blocks_of(rows, sglang::kFusedQNumWarps)), block(sglang::kFusedQBlockSize);  // as forward()
  if (format == kFormatFp8E4m3fn) {
    sglang::FusedQIndexerRopeHadamardQuantParams p{};
    p.q_input = a->input;
    p.q_fp8 = a->q_values;
    p.weight = weight;
    p.weights_out = a->weights;
    p.weight_scale = weight_scale;
    p.rope_cache = freqs_cis;
    p.positions = a->positions;
    p.weight_stride_batch = a->num_heads;
    p.batch_size = static_cast<uint32_t>(a->num_tokens);
    p.num_heads = static_cast<uint32_t>(a->num_heads);
    if (launch_pdl(&sglang::fused_q_indexer_rope_hadamard_quant<sglang::bf16_t, int32_t, true>, grid, block, p) != 0) {
      return 1;
    }
  } else {
    sglang::FusedQIndexerRopeHadamardFp4QuantParams p{};
    p.q_input = a->input;
    p.q_fp4 = a->q_values;
    p.q_sf = reinterpret_cast<int32_t*>(a->q_scales);
    p.weight = weight;
    p.weights_out = a->weights;
    p.weight_scale = weight_scale;
    p.freqs_cis = freqs_cis;
    p.positions = a->positions;
    p.batch_size = static_cast<uint32_t>(a->num_tokens);
    p.num_heads = static_cast<uint32_t>(a->num_heads);
    if (launch_pdl(&sglang::fused_q_indexer_rope_hadamard_fp4_quant<sglang::bf16_t, int32_t, true>, grid, block, p) !=
        0) {
      return 1;
    }
  }
  return check(cudaGetLastError(), "sglang-v4-indexer query path");
}

}  // namespace dsaf::conformance
