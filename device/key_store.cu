// File: key_store.cu — the fused key path (api.h KeyStoreArgs): one thread per token,
// norm -> RoPE -> Hadamard -> quantise -> paged store, in one launch. Variants of the
// store format are template instances of one kernel; the other recipe fields are
// runtime values, uniform across the grid.
#include <cuda_runtime.h>

#include <string>

#include "device/api.h"
#include "device/head_math.cuh"
#include "device/launch.h"

namespace dsaf::dev {
namespace {

constexpr int kThreads = 128;  // tokens per block

template <ref::StorageFormat kFormat>
__global__ void __launch_bounds__(kThreads) key_store_kernel(const KeyStoreArgs args) {
  const int64_t token = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (token >= args.num_tokens) return;
  const KernelRecipe& r = args.recipe;

  // Load (and round fp32 inputs to bf16 when the recipe says the input is bf16)
  Head x;
  load_head(static_cast<const uint8_t*>(args.input) + token * kDim * (args.input_bf16 ? 2 : 4), args.input_bf16, x);
  round_bf16_if(r.key_rounding.input, x);

  // Norm -> RoPE -> Hadamard, each optionally rounded to bf16
  norm_head(x, r.key_norm, args.norm_weight, args.norm_bias);
  if (r.key_norm.kind != ref::NormKind::kNone) round_bf16_if(r.key_rounding.norm, x);
  const int position = args.positions[token];
  rope_head(x, r.rope_pairing, r.rope_placement, r.rope_fma, args.rope_cos + position * 32, args.rope_sin + position * 32);
  round_bf16_if(r.key_rounding.rope, x);
  if (r.hadamard) {
    hadamard_head(x);
    round_bf16_if(r.key_rounding.hadamard, x);
  }

  // Paged store: page = table[seq][pos / P], slot pos % P; [P x values | P x scales]
  const int64_t page = args.page_tables[args.seq[token] * args.page_table_stride + position / args.page_size];
  const int offset = position % args.page_size;
  constexpr int kValueBytes = value_bytes(kFormat), kScaleBytes = scale_bytes(kFormat);
  uint8_t* page_base = args.cache + page * args.page_size * (kValueBytes + kScaleBytes);
  store_head<kFormat>(x, r.key_quant, page_base + offset * kValueBytes,
                      page_base + args.page_size * kValueBytes + offset * kScaleBytes);
}

}  // namespace

void launch_key_store(const KeyStoreArgs& args) {
  check_launch_args(args.recipe.key_quant, args.recipe.key_norm, args.page_size, "key_store");
  if (args.num_tokens == 0) return;
  const unsigned blocks = static_cast<unsigned>((args.num_tokens + kThreads - 1) / kThreads);
  dispatch_format(args.recipe.key_quant.format, [&](auto format) {
    key_store_kernel<decltype(format)::value><<<blocks, kThreads>>>(args);
  });
  check_cuda(cudaGetLastError(), "key_store_kernel launch");
}

}  // namespace dsaf::dev
