// File: key_store.cu — the fused key path (api.h KeyStoreArgs): one lane group per token,
// norm -> RoPE -> Hadamard -> quantise -> paged store, in one launch. The store format and
// the group width (head_pipeline.cuh) are template parameters of one kernel; the other
// recipe fields are runtime values, uniform across the grid.
#include <cuda_runtime.h>

#include <string>

#include "device/api.h"
#include "device/head_pipeline.cuh"
#include "device/launch.h"
#include "device/primitives/paging.cuh"

namespace dsaf::dev {
namespace {

constexpr int kThreadsPerBlock = 256;

template <ref::StorageFormat kFormat, int kLanes>
__global__ void __launch_bounds__(kThreadsPerBlock, kMinBlocksPerSm<kLanes>)
key_store_kernel(const KeyStoreArgs args) {
  const int part = threadIdx.x % kLanes;
  const int64_t token_unclamped = static_cast<int64_t>(blockIdx.x) * (kThreadsPerBlock / kLanes) + threadIdx.x / kLanes;
  // A group past the end recomputes the last token and stores nothing: every lane of the
  // warp must take part in the shuffles.
  const bool store = token_unclamped < args.num_tokens;
  const int64_t token = store ? token_unclamped : args.num_tokens - 1;
  const KernelRecipe& r = args.recipe;

  // Independent loads first: the input row, the position and the sequence.
  HeadPart<kLanes> x;
  const size_t element_bytes = args.input_bf16 ? 2 : 4;
  load_head<kLanes>(static_cast<const uint8_t*>(args.input) + token * kHeadDim * element_bytes, args.input_bf16,
                    part, x);
  const int position = args.positions[token];
  const int64_t page_row = static_cast<int64_t>(args.seq[token]) * args.page_table_stride;
  round_head_bf16<kLanes>(r.key_rounding.input, x);

  norm_head<kLanes>(x, r.key_norm, part, args.norm_weight, args.norm_bias);
  if (r.key_norm.kind != ref::NormKind::kNone) round_head_bf16<kLanes>(r.key_rounding.norm, x);
  rope_and_rotate<kLanes>(x, part, r, r.key_rounding, position, args.rope_cos, args.rope_sin);

  // Paged store: page = table[seq][pos / P], slot pos % P; [P x values | P x scales]
  const PageSlot slot = page_slot(position, args.page_size);
  const int64_t page = args.page_tables[page_row + slot.table_index];
  const int offset = slot.offset;
  constexpr int kValueBytes = value_bytes(kFormat), kScaleBytes = scale_bytes(kFormat);
  uint8_t* page_base = args.cache + page * args.page_size * (kValueBytes + kScaleBytes);
  store_head<kFormat, kLanes>(x, part, r.key_quant, page_base + offset * kValueBytes,
                              page_base + args.page_size * kValueBytes + offset * kScaleBytes, store);
}

}  // namespace

void launch_key_store(const KeyStoreArgs& args, int lanes_per_head) {
  check_launch_args(args.recipe.key_quant, args.page_size, "key_store");
  if (args.num_tokens == 0) return;
  dispatch_lanes(lanes_per_head, "key_store", [&](auto lanes) {
    constexpr int kLanes = decltype(lanes)::value;
    constexpr int kTokensPerBlock = kThreadsPerBlock / kLanes;
    const dim3 grid(static_cast<unsigned>((args.num_tokens + kTokensPerBlock - 1) / kTokensPerBlock));
    dispatch_format(args.recipe.key_quant.format, [&](auto format) {
      key_store_kernel<decltype(format)::value, kLanes><<<grid, kThreadsPerBlock>>>(args);
    });
  });
  check_cuda(cudaGetLastError(), "key_store_kernel launch");
}

}  // namespace dsaf::dev
