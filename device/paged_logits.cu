// File: paged_logits.cu — decode indexer logits over a paged key cache, in the
// reference's exact fp32 order (api.h PagedLogitsArgs; reference/score.h):
//
//   I[t, s] = k_scale[s] * sum_h ReLU( q[t, h] . k[s] ) * w[t, h]
//
// Two keys per thread against one query row: the 128-term dot of every head is its own
// sequential chain (acc = acc + q_d * k_d, each op rounded; one fma where the product is
// exact, which is the same bits), the head sum is sequential in h, and the key scale
// multiplies last — the order of reference/score.cc, so the fp32 result is byte-equal.
// Variants (cache format, head count, accumulation) are template parameters.
//
// Bound: the chain is one dependent fp32 operation per multiply-add, 64 heads x 128 dims =
// 8,192 per key and query row. On the H200 (132 SMs x 128 fp32 lanes at 1.98 GHz, 33.5 T
// fma/s) the decode case (32 rows x 131,072 keys) needs 34.4 G of them: >= 1.03 ms, 13% of
// the copy bandwidth for its 571 MB; the separate multiply and add of an inexact product
// doubles that. docs/key-path-speed.md has the measured times.
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

constexpr int kKeysPerBlock = 256;

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

// ---- When a fused multiply-add gives the reference's bits ----------------------------
// The reference rounds q_d * k_d, then acc + product. When the product is exact in fp32,
// round(acc + round(q_d k_d)) = round(acc + q_d k_d) = fma(q_d, k_d, acc): one instruction
// instead of two, the same bits. The product of two finite fp32 values is exact when
//   (a) their significands have at most 24 bits together: e4m3fn values have 4 (m * 2^e,
//       m <= 15), e2m1 values times a power of two 2, bf16 8, fp32 24; and
//   (b) it is a normal number: with e = floor(log2 |v|) over a row's nonzero query values
//       in [q_lo, q_hi] and a key's in [k_lo, k_hi], q_lo + k_lo >= -126 keeps every
//       product >= 2^-126, and q_hi + k_hi <= 126 keeps it < 2^128 (a 24-bit significand
//       below 2^128 is at most FLT_MAX).
// Zeros give exact products; a subnormal, infinite or NaN value fails (b) (its e counts as
// -1000 or +1000), and then the key takes the separate multiply and add.
constexpr int kNoValueLo = 1000, kNoValueHi = -1000;  // the range of a head with no nonzero value

__device__ __forceinline__ void widen_exponent_range(float v, int& lo, int& hi) {
  const unsigned bits = __float_as_uint(v);
  if ((bits & 0x7FFF'FFFFu) == 0) return;
  const int biased = static_cast<int>((bits >> 23) & 0xFF);
  const int e = biased == 0 ? -1000 : biased == 255 ? 1000 : biased - 127;
  lo = min(lo, e);
  hi = max(hi, e);
}

__host__ __device__ constexpr int significand_bits(ref::StorageFormat f) {
  return f == ref::StorageFormat::kFp8E4m3fn ? 4 : f == ref::StorageFormat::kFp4E2m1 ? 2 : f == ref::StorageFormat::kFp32 ? 24 : 8;
}

// acc + q * k in the reference's rounding: fused when the products are exact (above).
template <bool kFused>
__device__ __forceinline__ float accumulate(float acc, float q, float k) {
  if constexpr (kFused) {
    return __fmaf_rn(q, k, acc);
  } else {
    return __fadd_rn(acc, __fmul_rn(q, k));
  }
}

// A thread's keys: their value and scale pointers; key j is used when valid[j].
template <ref::StorageFormat kKeyFormat, int kKeys>
struct ThreadKeys {
  const uint8_t* values[kKeys];
  const uint8_t* scales[kKeys];
  bool valid[kKeys];
};

// Word `word` (0..kValueBytes/4) of key j: one 16-byte load per chunk where every slot is
// 16-byte aligned, else 4-byte loads (a slot is only 4-byte aligned for fp8 and fp4 pages
// of 1 or 2 tokens: P x 132 or P x 68 bytes per page).
__device__ __forceinline__ uint4 load_chunk(const uint8_t* values, int chunk, bool aligned16) {
  if (aligned16) return reinterpret_cast<const uint4*>(values)[chunk];
  const unsigned* w = reinterpret_cast<const unsigned*>(values) + 4 * chunk;
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// The dots of every head against kKeys keys, each head's dot its own sequential chain over
// d = 0..127 (the reference's order). A key's values are decoded word by word in d order;
// each query value read from shared memory serves all kKeys keys.
template <bool kFused, ref::StorageFormat kKeyFormat, int kHeads, int kKeys>
__device__ __forceinline__ void key_dots(const float (&q)[kHeadDim][kHeads], const ThreadKeys<kKeyFormat, kKeys>& keys,
                                         bool aligned16, float (&dots)[kKeys][kHeads]) {
  constexpr int kValueBytes = value_bytes(kKeyFormat);
  constexpr int kPerWord = kValuesPerWord<kKeyFormat>;
#pragma unroll
  for (int j = 0; j < kKeys; ++j) {
#pragma unroll
    for (int h = 0; h < kHeads; ++h) dots[j][h] = 0.0f;
  }
#pragma unroll 1
  for (int chunk = 0; chunk < kValueBytes / 16; ++chunk) {
    uint4 words[kKeys];
    float block_scale[kKeys];
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      words[j] = load_chunk(keys.values[j], chunk, aligned16);
      // fp4: a chunk is 32 values, one scale block (pow2_scale(scales[d / 32]) of every d in it).
      block_scale[j] = kKeyFormat == ref::StorageFormat::kFp4E2m1 ? pow2_scale(keys.scales[j][chunk]) : 1.0f;
    }
#pragma unroll 1
    for (int k = 0; k < 4; ++k) {  // word k of the chunk is words[j].x; the rest move down
#pragma unroll
      for (int i = 0; i < kPerWord; ++i) {
        const int d = (4 * chunk + k) * kPerWord + i;
        float kv[kKeys];
#pragma unroll
        for (int j = 0; j < kKeys; ++j) kv[j] = word_value<kKeyFormat>(words[j].x, i, block_scale[j]);
#pragma unroll
        for (int h = 0; h < kHeads; h += 4) {
          const float4 q4 = *reinterpret_cast<const float4*>(&q[d][h]);
#pragma unroll
          for (int j = 0; j < kKeys; ++j) {
            dots[j][h] = accumulate<kFused>(dots[j][h], q4.x, kv[j]);
            dots[j][h + 1] = accumulate<kFused>(dots[j][h + 1], q4.y, kv[j]);
            dots[j][h + 2] = accumulate<kFused>(dots[j][h + 2], q4.z, kv[j]);
            dots[j][h + 3] = accumulate<kFused>(dots[j][h + 3], q4.w, kv[j]);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < kKeys; ++j) words[j] = make_uint4(words[j].y, words[j].z, words[j].w, 0u);
    }
  }
}

// The exponent range of a key's nonzero dot values. e4m3fn codes are known without
// reading them: every nonzero one lies in [2^-9, 448], so e in [-9, 8].
template <ref::StorageFormat kKeyFormat>
__device__ __forceinline__ void key_exponent_range(const uint8_t* values, const uint8_t* scales, bool aligned16,
                                                   int& lo, int& hi) {
  if constexpr (kKeyFormat == ref::StorageFormat::kFp8E4m3fn) {
    lo = -9;
    hi = 8;
  } else {
    lo = kNoValueLo;
    hi = kNoValueHi;
#pragma unroll 1
    for (int chunk = 0; chunk < value_bytes(kKeyFormat) / 16; ++chunk) {
      const uint4 w = load_chunk(values, chunk, aligned16);
      const float block_scale = kKeyFormat == ref::StorageFormat::kFp4E2m1 ? pow2_scale(scales[chunk]) : 1.0f;
      const unsigned word[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
#pragma unroll
        for (int i = 0; i < kValuesPerWord<kKeyFormat>; ++i) {
          widen_exponent_range(word_value<kKeyFormat>(word[k], i, block_scale), lo, hi);
        }
      }
    }
  }
}

// kKeysPerThread keys a thread, kKeysPerBlock / kKeysPerThread threads a block: key s of the
// block's range is thread s % kThreads's key s / kThreads.
constexpr int kKeysPerThread = 2;
constexpr int kLogitThreads = kKeysPerBlock / kKeysPerThread;

template <ref::StorageFormat kKeyFormat, int kHeads, ref::ScoreAccum kAccum>
__global__ void __launch_bounds__(kLogitThreads)
paged_logits_kernel(const PagedLogitsArgs args) {
  const int row = blockIdx.y;
  const int b = args.row_seq[row];
  const int64_t valid = args.row_valid[row];  // keys [0, valid) of sequence b
  const int64_t block_begin = static_cast<int64_t>(blockIdx.x) * kKeysPerBlock;
  float* out = args.logits + static_cast<int64_t>(row) * args.max_context;
  if (block_begin >= valid) {  // the whole block is masked
    for (int j = 0; j < kKeysPerThread; ++j) {
      const int64_t s = block_begin + j * kLogitThreads + threadIdx.x;
      if (s < args.max_context) out[s] = -INFINITY;
    }
    return;
  }

  // The query's heads, decoded once per block, d-major so a thread reads 4 heads at once,
  // and the exponent range of their nonzero values.
  __shared__ __align__(16) float q[kHeadDim][kHeads];
  __shared__ float w[kHeads];
  __shared__ int q_range[2];  // lo, hi
  if (threadIdx.x == 0) {
    q_range[0] = kNoValueLo;
    q_range[1] = kNoValueHi;
  }
  __syncthreads();
  const int q_value_bytes = value_bytes(args.q_format), q_scale_bytes = scale_bytes(args.q_format);
  int lo = kNoValueLo, hi = kNoValueHi;
  for (int i = threadIdx.x; i < kHeads * kHeadDim; i += kLogitThreads) {
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
    widen_exponent_range(v, lo, hi);
  }
  atomicMin(&q_range[0], lo);
  atomicMax(&q_range[1], hi);
  for (int h = threadIdx.x; h < kHeads; h += kLogitThreads) w[h] = args.weights[static_cast<int64_t>(row) * kHeads + h];
  __syncthreads();

  // The thread's keys: page table row b, page s / P, offset s % P; [P x values | P x scales].
  // A key past the valid range reads the block's first key instead (always valid here)
  // and is not written.
  constexpr int kValueBytes = value_bytes(kKeyFormat), kScaleBytes = scale_bytes(kKeyFormat);
  ThreadKeys<kKeyFormat, kKeysPerThread> keys;
  bool aligned16 = true;
  int k_lo = kNoValueLo, k_hi = kNoValueHi;
#pragma unroll
  for (int j = 0; j < kKeysPerThread; ++j) {
    const int64_t s = block_begin + j * kLogitThreads + threadIdx.x;
    keys.valid[j] = s < valid;
    const PageSlot slot = page_slot(keys.valid[j] ? s : block_begin, args.page_size);
    const int64_t page = args.page_tables[b * args.page_table_stride + slot.table_index];
    const uint8_t* page_base = args.cache + page * args.page_size * (kValueBytes + kScaleBytes);
    keys.values[j] = page_base + slot.offset * kValueBytes;
    keys.scales[j] = page_base + args.page_size * kValueBytes + slot.offset * kScaleBytes;
    aligned16 = aligned16 && (reinterpret_cast<uintptr_t>(keys.values[j]) & 15) == 0;
  }
#pragma unroll
  for (int j = 0; j < kKeysPerThread; ++j) {
    int key_lo, key_hi;
    key_exponent_range<kKeyFormat>(keys.values[j], keys.scales[j], aligned16, key_lo, key_hi);
    k_lo = min(k_lo, key_lo);
    k_hi = max(k_hi, key_hi);
  }
  const bool fused = significand_bits(args.q_format) + significand_bits(kKeyFormat) <= 24 &&
                     q_range[0] + k_lo >= -126 && q_range[1] + k_hi <= 126;

  float dots[kKeysPerThread][kHeads];
  if (fused) {
    key_dots<true>(q, keys, aligned16, dots);
  } else {
    key_dots<false>(q, keys, aligned16, dots);
  }
#pragma unroll
  for (int j = 0; j < kKeysPerThread; ++j) {
    const int64_t s = block_begin + j * kLogitThreads + threadIdx.x;
    if (s >= args.max_context) continue;
    out[s] = keys.valid[j] ? head_sum<kAccum>(dots[j], w, key_scale<kKeyFormat>(keys.scales[j])) : -INFINITY;
  }
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
        paged_logits_kernel<kFormat, kHeads, ref::ScoreAccum::kFp32><<<grid, kLogitThreads>>>(args);
      } else {
        paged_logits_kernel<kFormat, kHeads, ref::ScoreAccum::kBf16><<<grid, kLogitThreads>>>(args);
      }
    });
  });
  check_cuda(cudaGetLastError(), "paged_logits_kernel launch");
}

}  // namespace dsaf::dev
