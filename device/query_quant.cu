// File: query_quant.cu — the query path (api.h QueryArgs): one lane group per (token, head),
// RoPE -> Hadamard -> per-head quantise, and the folded head weight.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "device/api.h"
#include "device/head/head_io.cuh"
#include "device/head/quantize.cuh"
#include "device/head/transform.cuh"
#include "device/launch.h"

namespace dsaf::dev {
namespace {

constexpr int kThreadsPerBlock = 256;

// Blocks of 256 threads to keep resident per SM (__launch_bounds__' second argument): the
// register budget is capped at 65536 / (256 x this) per thread: 8 lanes 64 registers, 4:
// 128, 2 and 1: 255 (a lane then holds 64 or 128 values).
template <int kLanes>
inline constexpr int kMinBlocksPerSm = kLanes == 8 ? 4 : kLanes == 4 ? 2 : 1;

// fl(H^-1/2), fl(D^-1/2) and fl((H*D)^-1/2), computed on the host in fp64 and rounded once.
struct WeightConstants {
  float inv_sqrt_heads;
  float inv_sqrt_dim;
  float inv_sqrt_both;
};

template <ref::StorageFormat kFormat, int kLanes>
__global__ void __launch_bounds__(kThreadsPerBlock, kMinBlocksPerSm<kLanes>)
query_quant_kernel(const QueryArgs args, const WeightConstants k) {
  const int part = threadIdx.x % kLanes;
  const int64_t rows = args.num_tokens * args.num_heads;
  const int64_t row_unclamped = static_cast<int64_t>(blockIdx.x) * (kThreadsPerBlock / kLanes) + threadIdx.x / kLanes;
  const bool store = row_unclamped < rows;  // else recompute the last row, store nothing
  const int64_t row = store ? row_unclamped : rows - 1;
  const int64_t token = row / args.num_heads;
  const ref::RecipeFields& r = args.recipe;

  HeadPart<kLanes> x;
  const size_t element_bytes = args.input_bf16 ? 2 : 4;
  load_head<kLanes>(static_cast<const uint8_t*>(args.input) + row * kHeadDim * element_bytes, args.input_bf16,
                    part, x);
  round_head_bf16<kLanes>(r.query_rounding.input, x);
  const int64_t position = args.positions[token];
  rope_and_rotate<kLanes>(x, part, r, r.query_rounding, args.rope_cos + position * 32, args.rope_sin + position * 32);
  const float q_scale = store_head<kFormat, kLanes>(x, part, r.query_quant, args.q_values + row * value_bytes(kFormat),
                                                    args.q_scales + row * scale_bytes(kFormat), store);

  // Head weight: the q scale folds in for fp8 (one fp32 scale per head; store_head
  // returns 1 for the other formats).
  if (store && part == 0) {
    const float wproj = args.wproj[row];
    float w = r.weights_fold == ref::WeightsFold::kSeparateFactors
                  ? __fmul_rn(__fmul_rn(__fmul_rn(wproj, k.inv_sqrt_heads), q_scale), k.inv_sqrt_dim)
                  : __fmul_rn(__fmul_rn(wproj, k.inv_sqrt_both), q_scale);
    if (r.weights == ref::WeightsPrecision::kBf16) w = to_bf16_and_back(w);
    args.weights[row] = w;
  }
}

}  // namespace

void launch_query_quant(const QueryArgs& args, int lanes_per_head) {
  check_launch_args(args.recipe.query_quant, 64, "query_quant");
  if (args.num_heads < 1) throw_bad_input("query_quant: num_heads must be >= 1");
  const int64_t rows = args.num_tokens * args.num_heads;
  if (rows == 0) return;
  if (lanes_per_head == kAutoLanesPerHead) lanes_per_head = kDefaultLanesPerHead;
  const double h = args.num_heads;
  const WeightConstants k{static_cast<float>(1.0 / std::sqrt(h)), static_cast<float>(1.0 / std::sqrt(128.0)),
                          static_cast<float>(1.0 / std::sqrt(h * 128.0))};
  dispatch_lanes(lanes_per_head, "query_quant", [&](auto lanes) {
    constexpr int kLanes = decltype(lanes)::value;
    constexpr int kRowsPerBlock = kThreadsPerBlock / kLanes;
    const dim3 grid(static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock));
    dispatch_format(args.recipe.query_quant.format, [&](auto format) {
      query_quant_kernel<decltype(format)::value, kLanes><<<grid, kThreadsPerBlock>>>(args, k);
    });
  });
  check_cuda(cudaGetLastError(), "query_quant_kernel launch");
}

}  // namespace dsaf::dev
