// File: query_quant.cu — the query path (api.h QueryArgs): one warp per (token, head),
// RoPE -> Hadamard -> per-head quantise, and the folded head weight.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "device/api.h"
#include "device/head_pipeline.cuh"
#include "device/launch.h"

namespace dsaf::dev {
namespace {

constexpr int kWarpsPerBlock = 8;

// fl(H^-1/2), fl(D^-1/2) and fl((H*D)^-1/2), computed on the host in fp64 and rounded once.
struct WeightConstants {
  float inv_sqrt_heads;
  float inv_sqrt_dim;
  float inv_sqrt_both;
};

template <ref::StorageFormat kFormat>
__global__ void __launch_bounds__(kWarpsPerBlock * kLanes)
query_quant_kernel(const QueryArgs args, const WeightConstants k) {
  const int lane = threadIdx.x % kLanes;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kLanes;
  if (row >= args.num_tokens * args.num_heads) return;
  const int64_t token = row / args.num_heads;
  const KernelRecipe& r = args.recipe;

  Head x;
  const size_t element_bytes = args.input_bf16 ? 2 : 4;
  load_head(static_cast<const uint8_t*>(args.input) + row * 128 * element_bytes, args.input_bf16, lane, x);
  round_head_bf16(r.query_rounding.input, x);
  const int position = args.positions[token];
  rope_head(x, lane, r.rope_pairing, r.rope_placement, r.rope_fma, args.rope_cos + position * 32,
            args.rope_sin + position * 32);
  round_head_bf16(r.query_rounding.rope, x);
  if (r.hadamard) {
    hadamard_head(x, lane);
    round_head_bf16(r.query_rounding.hadamard, x);
  }
  uint8_t* scales = args.q_scales + row * scale_bytes(kFormat);
  store_head<kFormat>(x, lane, r.query_quant, args.q_values + row * value_bytes(kFormat), scales);

  // Head weight: the q scale folds in for fp8 (one fp32 scale per head); 1 otherwise.
  __syncwarp();
  if (lane == 0) {
    const float q_scale = kFormat == ref::StorageFormat::kFp8E4m3fn ? *reinterpret_cast<const float*>(scales) : 1.0f;
    const float wproj = args.wproj[row];
    float w = r.weights_fold == ref::WeightsFold::kSeparateFactors
                  ? __fmul_rn(__fmul_rn(__fmul_rn(wproj, k.inv_sqrt_heads), q_scale), k.inv_sqrt_dim)
                  : __fmul_rn(__fmul_rn(wproj, k.inv_sqrt_both), q_scale);
    if (r.weights == ref::WeightsPrecision::kBf16) w = __bfloat162float(__float2bfloat16_rn(w));
    args.weights[row] = w;
  }
}

}  // namespace

void launch_query_quant(const QueryArgs& args) {
  check_launch_args(args.recipe.query_quant, args.recipe.key_norm, 64, "query_quant");
  if (args.num_heads < 1) throw_bad_input("query_quant: num_heads must be >= 1");
  const int64_t rows = args.num_tokens * args.num_heads;
  if (rows == 0) return;
  const double h = args.num_heads;
  const WeightConstants k{static_cast<float>(1.0 / std::sqrt(h)), static_cast<float>(1.0 / std::sqrt(128.0)),
                          static_cast<float>(1.0 / std::sqrt(h * 128.0))};
  const dim3 grid(static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock));
  dispatch_format(args.recipe.query_quant.format, [&](auto format) {
    query_quant_kernel<decltype(format)::value><<<grid, kWarpsPerBlock * kLanes>>>(args, k);
  });
  check_cuda(cudaGetLastError(), "query_quant_kernel launch");
}

}  // namespace dsaf::dev
