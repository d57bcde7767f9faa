// File: sglang_v4_style_kernel.cuh
// A test kernel written as docs/numerics.md §6.4 describes SGLang's V4 `fused_norm_rope_indexer`
// (sglang @ 0094505, jit_kernel/csrc/deepseek_v4/fused_norm_rope_v2.cuh), in plain CUDA
// arithmetic, compiled the way SGLang compiles its JIT kernels: -O3, FMA contraction on
// (nvcc default), no fast-math — so nvcc decides every contraction and rsqrtf is the
// hardware MUFU.RSQ. This is NOT our kernel: it is the foreign implementation against
// which the reference's sglang-v4-* presets must be byte-exact.
// Not specified by §6.4 and chosen here: fp4 nibbles pack element 2i in the low nibble,
// and a code's sign bit is the sign of d * inv (so -0 and small negatives give 0x8).
#pragma once

#include <cstdint>

namespace dsaf::test {

enum class SglangStore { kFp8, kBf16, kFp4 };

struct SglangStyleArgs {
  const float* input;          // [T][128] fp32 (bf16 inputs passed as their fp32 values)
  const int32_t* positions;    // [T]
  const int64_t* slots;        // [T]: page << page_bits | offset
  const float* freqs_cis;      // [positions][64]: (cos, sin) interleaved, as freqs_cis
  const float* weight;         // [128] RMSNorm weight
  float eps;
  uint8_t* cache;
  int page_bits;
  int64_t num_tokens;
};

// Launches one warp per token (stream 0).
void launch_sglang_style(SglangStore store, const SglangStyleArgs& args);

}  // namespace dsaf::test
