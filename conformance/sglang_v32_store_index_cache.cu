// File: sglang_v32_store_index_cache.cu — the second launch of SGLang's DSA indexer key
// fallback (sglang_v32_indexer_key.cu declares it and says what it is). A translation unit
// of its own: dsa/fused_store_index_cache.cuh defines fp8 helpers that clash with the ones
// deepseek_v32/indexer_k.cuh imports.
#include "conformance/adapter_support.cuh"
#include "dsa/fused_store_index_cache.cuh"

namespace dsaf::conformance {
namespace {

struct StoreKernel {
  template <int kBits>
  static constexpr void (*at())(sglang::FusedStoreCacheParam) {
    return &sglang::fused_store_indexer_cache<sglang::bf16_t, int64_t, kBits, true>;
  }
};

}  // namespace

int launch_store_index_cache(const void* keys_bf16, uint8_t* cache, const int64_t* slots, uint32_t num_tokens,
                             int page_bits) {
  static constexpr auto kernels = page_bits_table<StoreKernel>();
  sglang::FusedStoreCacheParam p{};
  p.input = keys_bf16;
  p.cache = cache;
  p.indices = slots;
  p.num_tokens = num_tokens;
  // As FusedStoreCacheIndexerKernel::run: one warp per token, 128-thread blocks.
  constexpr unsigned kBlock = 128;
  const unsigned grid = blocks_of(int64_t{num_tokens} * 32, kBlock);
  return launch_pdl(kernels[page_bits], dim3(grid), dim3(kBlock), p);
}

}  // namespace dsaf::conformance
