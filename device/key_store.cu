// File: key_store.cu — the fused key path (api.h KeyStoreArgs): one warp per token,
// norm -> RoPE -> Hadamard -> quantise -> paged store, in one launch. Variants of the
// store format are template instances of one kernel; the other recipe fields are
// runtime values read once per warp.
#include <cuda_runtime.h>

#include <string>

#include "device/api.h"
#include "device/head_pipeline.cuh"
#include "device/launch.h"

namespace dsaf::dev {
namespace {

constexpr int kWarpsPerBlock = 8;  // 256 threads: enough warps in flight per SM for loads

template <ref::StorageFormat kFormat>
__global__ void __launch_bounds__(kWarpsPerBlock * kLanes)
key_store_kernel(const KeyStoreArgs args) {
  const int lane = threadIdx.x % kLanes;
  const int64_t token = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kLanes;
  if (token >= args.num_tokens) return;
  const KernelRecipe& r = args.recipe;

  // Load (and round bf16 inputs given as fp32, when the recipe says so)
  Head x;
  const size_t element_bytes = args.input_bf16 ? 2 : 4;
  load_head(static_cast<const uint8_t*>(args.input) + token * 128 * element_bytes, args.input_bf16, lane, x);
  round_head_bf16(r.key_rounding.input, x);

  // Norm -> RoPE -> Hadamard, each optionally rounded to bf16
  norm_head(x, r.key_norm, lane, args.norm_weight, args.norm_bias);
  if (r.key_norm.kind != ref::NormKind::kNone) round_head_bf16(r.key_rounding.norm, x);
  const int position = args.positions[token];
  rope_head(x, lane, r.rope_pairing, r.rope_placement, r.rope_fma, args.rope_cos + position * 32,
            args.rope_sin + position * 32);
  round_head_bf16(r.key_rounding.rope, x);
  if (r.hadamard) {
    hadamard_head(x, lane);
    round_head_bf16(r.key_rounding.hadamard, x);
  }

  // Paged store: page = table[seq][pos / P], slot pos % P; [P x values | P x scales]
  const int64_t page = args.page_tables[args.seq[token] * args.page_table_stride + position / args.page_size];
  const int offset = position % args.page_size;
  uint8_t* page_base = args.cache + page * args.page_size * (value_bytes(kFormat) + scale_bytes(kFormat));
  store_head<kFormat>(x, lane, r.key_quant, page_base + offset * value_bytes(kFormat),
                      page_base + args.page_size * value_bytes(kFormat) + offset * scale_bytes(kFormat));
}

}  // namespace

void launch_key_store(const KeyStoreArgs& args) {
  check_launch_args(args.recipe.key_quant, args.recipe.key_norm, args.page_size, "key_store");
  if (args.num_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>((args.num_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock));
  const dim3 block(kWarpsPerBlock * kLanes);
  dispatch_format(args.recipe.key_quant.format, [&](auto format) {
    key_store_kernel<decltype(format)::value><<<grid, block>>>(args);
  });
  check_cuda(cudaGetLastError(), "key_store_kernel launch");
}

}  // namespace dsaf::dev
