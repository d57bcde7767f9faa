// File: paged_logits.cu — decode indexer logits over a paged key cache, in the
// reference's exact fp32 order (api.h PagedLogitsArgs; reference/score.h):
//
//   I[t, s] = k_scale[s] * sum_h ReLU( q[t, h] . k[s] ) * w[t, h]
//
// One thread per (query row, key): the 128-term dot of every head is its own sequential
// chain (acc = acc + q_d * k_d, each op rounded), the head sum is sequential in h, and the
// key scale multiplies last — the order of reference/score.cc, so the fp32 result is
// byte-equal. Variants (cache format, head count, accumulation) are template parameters.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "device/api.h"
#include "device/head/head_io.cuh"
#include "device/head/quantize.cuh"
#include "device/launch.h"
#include "device/primitives/paging.cuh"

namespace dsaf::dev {
namespace {

constexpr int kKeysPerBlock = 128;

// The value that enters the dot for element d of a stored head (quantize.h StoredHead::
// dot_values): e4m3 codes unscaled (fp8's scale multiplies after the head sum), e2m1
// codes times their block's power of two (one fp32 rounding of an exact product, as the
// reference's cast of code * 2^e), bf16 and fp32 values as stored.
template <ref::StorageFormat kFormat>
__device__ __forceinline__ float dot_value(const uint8_t* values, const uint8_t* scales, int d) {
  if constexpr (kFormat == ref::StorageFormat::kFp8E4m3fn) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw(values[d], __NV_E4M3);  // exact: e4m3 is a subset of fp16
    return __half2float(__half(h));
  } else if constexpr (kFormat == ref::StorageFormat::kFp4E2m1) {
    const unsigned code = (values[d / 2] >> (4 * (d & 1))) & 0xF;
    return __fmul_rn(e2m1_value(code), pow2_scale(scales[d / 32]));
  } else if constexpr (kFormat == ref::StorageFormat::kFp32) {
    return reinterpret_cast<const float*>(values)[d];
  } else {  // kBf16, kFp4SimulatedBf16
    return __uint_as_float(static_cast<unsigned>(reinterpret_cast<const uint16_t*>(values)[d]) << 16);
  }
}

// Values per 32-bit word of a stored head, and value i of word `word` as it enters the dot
// (the same value dot_value gives; `block_scale` is fp4's pow2_scale of the word's block).
template <ref::StorageFormat kFormat>
inline constexpr int kValuesPerWord = kFormat == ref::StorageFormat::kFp8E4m3fn ? 4
                                      : kFormat == ref::StorageFormat::kFp4E2m1 ? 8
                                      : kFormat == ref::StorageFormat::kFp32    ? 1
                                                                                : 2;  // kBf16, kFp4SimulatedBf16
template <ref::StorageFormat kFormat>
__device__ __forceinline__ float word_value(unsigned word, int i, float block_scale) {
  if constexpr (kFormat == ref::StorageFormat::kFp8E4m3fn) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>((word >> (8 * i)) & 0xFF), __NV_E4M3);
    return __half2float(__half(h));
  } else if constexpr (kFormat == ref::StorageFormat::kFp4E2m1) {
    return __fmul_rn(e2m1_value((word >> (4 * i)) & 0xF), block_scale);  // low nibble first
  } else if constexpr (kFormat == ref::StorageFormat::kFp32) {
    return __uint_as_float(word);
  } else {  // kBf16, kFp4SimulatedBf16: little-endian, element 2k in the low half
    return __uint_as_float(i == 0 ? word << 16 : word & 0xFFFF'0000u);
  }
}

// The multiplier after the head sum: the fp8 key's fp32 scale, else 1.
template <ref::StorageFormat kFormat>
__device__ __forceinline__ float key_scale(const uint8_t* scales) {
  if constexpr (kFormat == ref::StorageFormat::kFp8E4m3fn) return *reinterpret_cast<const float*>(scales);
  return 1.0f;
}

__device__ __forceinline__ float relu(float v) { return v > 0.0f ? v : 0.0f; }  // NaN -> 0, as score.cc

// score.cc kBf16: dot_h = bf16(dot), term_h = bf16(relu(dot_h) * w_h), I = bf16(sum of
// terms in fp32), then bf16(I * k_scale) when the key has a scale other than 1.
template <ref::ScoreAccum kAccum, int kHeads>
__device__ __forceinline__ float head_sum(const float (&dots)[kHeads], const float* w, float k_scale) {
  float sum = 0.0f;
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    if constexpr (kAccum == ref::ScoreAccum::kFp32) {
      sum = __fadd_rn(sum, __fmul_rn(relu(dots[h]), w[h]));
    } else {
      sum = __fadd_rn(sum, to_bf16_and_back(__fmul_rn(relu(to_bf16_and_back(dots[h])), w[h])));
    }
  }
  if constexpr (kAccum == ref::ScoreAccum::kFp32) return __fmul_rn(sum, k_scale);
  const float score = to_bf16_and_back(sum);
  return k_scale != 1.0f ? to_bf16_and_back(__fmul_rn(score, k_scale)) : score;
}

template <ref::StorageFormat kKeyFormat, int kHeads, ref::ScoreAccum kAccum>
__global__ void __launch_bounds__(kKeysPerBlock)
paged_logits_kernel(const PagedLogitsArgs args) {
  const int row = blockIdx.y;
  const int b = args.row_seq[row];
  const int64_t valid = args.row_valid[row];  // keys [0, valid) of sequence b
  const int64_t s = static_cast<int64_t>(blockIdx.x) * kKeysPerBlock + threadIdx.x;
  float* out = args.logits + static_cast<int64_t>(row) * args.max_context;
  if (static_cast<int64_t>(blockIdx.x) * kKeysPerBlock >= valid) {  // the whole block is masked
    if (s < args.max_context) out[s] = -INFINITY;
    return;
  }

  // The query's heads, decoded once per block, d-major so a thread reads 4 heads at once.
  __shared__ __align__(16) float q[kHeadDim][kHeads];
  __shared__ float w[kHeads];
  const int q_value_bytes = value_bytes(args.q_format), q_scale_bytes = scale_bytes(args.q_format);
  for (int i = threadIdx.x; i < kHeads * kHeadDim; i += kKeysPerBlock) {
    const int h = i / kHeadDim, d = i % kHeadDim;
    const uint8_t* qv = args.q_values + (static_cast<int64_t>(row) * kHeads + h) * q_value_bytes;
    const uint8_t* qs = args.q_scales + (static_cast<int64_t>(row) * kHeads + h) * q_scale_bytes;
    float v;
    switch (args.q_format) {
      case ref::StorageFormat::kFp8E4m3fn: v = dot_value<ref::StorageFormat::kFp8E4m3fn>(qv, qs, d); break;
      case ref::StorageFormat::kFp4E2m1: v = dot_value<ref::StorageFormat::kFp4E2m1>(qv, qs, d); break;
      case ref::StorageFormat::kFp32: v = dot_value<ref::StorageFormat::kFp32>(qv, qs, d); break;
      default: v = dot_value<ref::StorageFormat::kBf16>(qv, qs, d); break;
    }
    q[d][h] = v;
  }
  for (int h = threadIdx.x; h < kHeads; h += kKeysPerBlock) w[h] = args.weights[static_cast<int64_t>(row) * kHeads + h];
  __syncthreads();
  if (s >= args.max_context) return;
  if (s >= valid) {
    out[s] = -INFINITY;
    return;
  }

  // The key's slot: page table row b, page s / P, offset s % P; [P x values | P x scales].
  constexpr int kValueBytes = value_bytes(kKeyFormat), kScaleBytes = scale_bytes(kKeyFormat);
  const PageSlot slot = page_slot(s, args.page_size);
  const int64_t page = args.page_tables[b * args.page_table_stride + slot.table_index];
  const int offset = slot.offset;
  const uint8_t* page_base = args.cache + page * args.page_size * (kValueBytes + kScaleBytes);
  const uint8_t* values = page_base + offset * kValueBytes;
  const uint8_t* scales = page_base + args.page_size * kValueBytes + offset * kScaleBytes;

  // The key's values 16 bytes at a time: one 16-byte load where the slot is 16-byte aligned,
  // else four words (a slot is only 4-byte aligned for fp8 and fp4 pages of 1 or 2 tokens:
  // P x 132 or P x 68 bytes per page). Each word is decoded value by value in d order, so
  // the arithmetic (and its order) is the reference's, as before.
  constexpr int kPerWord = kValuesPerWord<kKeyFormat>;
  const bool aligned16 = (reinterpret_cast<uintptr_t>(values) & 15) == 0;
  float dots[kHeads];
#pragma unroll
  for (int h = 0; h < kHeads; ++h) dots[h] = 0.0f;
#pragma unroll 1
  for (int chunk = 0; chunk < kValueBytes / 16; ++chunk) {
    uint4 words;
    if (aligned16) {
      words = reinterpret_cast<const uint4*>(values)[chunk];
    } else {
      const unsigned* w = reinterpret_cast<const unsigned*>(values) + 4 * chunk;
      words = make_uint4(w[0], w[1], w[2], w[3]);
    }
    // fp4: a chunk is 32 values, one scale block (pow2_scale(scales[d / 32]) of every d in it).
    const float block_scale = kKeyFormat == ref::StorageFormat::kFp4E2m1 ? pow2_scale(scales[chunk]) : 1.0f;
#pragma unroll 1
    for (int k = 0; k < 4; ++k) {  // word k of the chunk is words.x; the rest move down
#pragma unroll
      for (int i = 0; i < kPerWord; ++i) {
        const int d = (4 * chunk + k) * kPerWord + i;
        const float kv = word_value<kKeyFormat>(words.x, i, block_scale);
#pragma unroll
        for (int h = 0; h < kHeads; h += 4) {
          const float4 q4 = *reinterpret_cast<const float4*>(&q[d][h]);
          dots[h] = __fadd_rn(dots[h], __fmul_rn(q4.x, kv));
          dots[h + 1] = __fadd_rn(dots[h + 1], __fmul_rn(q4.y, kv));
          dots[h + 2] = __fadd_rn(dots[h + 2], __fmul_rn(q4.z, kv));
          dots[h + 3] = __fadd_rn(dots[h + 3], __fmul_rn(q4.w, kv));
        }
      }
      words = make_uint4(words.y, words.z, words.w, 0u);
    }
  }
  out[s] = head_sum<kAccum>(dots, w, key_scale<kKeyFormat>(scales));
}

template <class F>
void dispatch_heads(int heads, F f) {
  switch (heads) {
    case 8: return f(std::integral_constant<int, 8>{});
    case 16: return f(std::integral_constant<int, 16>{});
    case 32: return f(std::integral_constant<int, 32>{});
    case 64: return f(std::integral_constant<int, 64>{});
    default: break;
  }
  throw_bad_input("paged_logits: num_heads must be 8, 16, 32 or 64, not " + std::to_string(heads));
}

}  // namespace

void launch_paged_logits(const PagedLogitsArgs& args) {
  if (args.rows < 1 || args.rows > 65535) throw_bad_input("paged_logits: rows must be in [1, 65535]");
  if (args.page_size < 1 || args.page_size > 256 || (args.page_size & (args.page_size - 1)) != 0) {
    throw_bad_input("paged_logits: page size must be a power of two in [1, 256]");
  }
  if (args.max_context < 1 || args.max_context > (int64_t{1} << 31) / kKeysPerBlock * kKeysPerBlock) {
    throw_bad_input("paged_logits: max_context out of range");
  }
  if (args.accum != ref::ScoreAccum::kFp32 && args.accum != ref::ScoreAccum::kBf16) {
    throw_bad_input("paged_logits: exact (fp64) accumulation is a reference mode; the kernel does fp32 or bf16");
  }
  const dim3 grid(static_cast<unsigned>((args.max_context + kKeysPerBlock - 1) / kKeysPerBlock),
                  static_cast<unsigned>(args.rows));
  dispatch_format(args.k_format, [&](auto format) {
    dispatch_heads(args.num_heads, [&](auto heads) {
      constexpr ref::StorageFormat kFormat = decltype(format)::value;
      constexpr int kHeads = decltype(heads)::value;
      if (args.accum == ref::ScoreAccum::kFp32) {
        paged_logits_kernel<kFormat, kHeads, ref::ScoreAccum::kFp32><<<grid, kKeysPerBlock>>>(args);
      } else {
        paged_logits_kernel<kFormat, kHeads, ref::ScoreAccum::kBf16><<<grid, kKeysPerBlock>>>(args);
      }
    });
  });
  check_cuda(cudaGetLastError(), "paged_logits_kernel launch");
}

}  // namespace dsaf::dev
