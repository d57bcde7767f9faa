// File: paged_logits_mma.cu — the fast paged decode logits kernel (api.h
// launch_paged_logits_fast) on tensor cores: mma.sync m16n8k16 with fp32 accumulators. One
// kernel template, two key formats:
//   kFp8E4m3fn cache (132 B/token): e4m3 keys and e4m3 queries, both widened to f16
//     (every e4m3 value is an f16 value), f16 x f16 -> f32; the key scale after the head sum.
//   kBf16 cache (256 B/token; also kFp4SimulatedBf16, stored the same way): bf16 keys;
//     queries as stored when bf16, widened exactly when e4m3 (every e4m3 value is a bf16
//     value); bf16 x bf16 -> f32. The launcher refuses queries bf16 cannot hold exactly.
// Same semantics, mask and output layout as the exact-order kernel (paged_logits.cu):
//   logits[r][s] = k_scale[s] * sum_h ReLU(q[r][h] . k[s]) * w[r][h]  for s < row_valid[r],
//   -inf for row_valid[r] <= s < max_context.
// The contract is BOUNDED, not byte-exact (Numerics below); tests/device/
// paged_logits_gpu_test.cu checks the bound on every score of every preset the kernel takes.
//
// Why f16 HMMA and not mma...e4m3: Hopper has no fp8 mma.sync in hardware. ptxas (CUDA 13.0,
// sm_90a) lowers one m16n8k32 e4m3 mma.sync to 12 F2FP.F16.E4M3.UNPACK_B and two
// HMMA.16816.F32 (nvdisasm), so a shared operand is unpacked again for every tile it meets.
// Here each key byte is widened once (2 F2FP per key and warp) and the query once per block.
//
// Launch shape: grid (blocks per row, rows), 4 warps per block, 3 blocks per SM (53 KB of
// shared memory each; <= 168 registers allow 3); a row's blocks take equal whole rounds of
// steps, as few blocks as fill the device (keys_per_block_for). Each warp streams its
// steps (32 fp8 / 16 bf16 keys: 4 KB of values either way) through its own ring of 2
// cp.async stages: the next step (4.6 KB) is in flight while the warp computes this one,
// ~55 KB per SM (Little's law asks for ~4 TB/s / 132 SMs x ~1 us = 30 KB). Measured
// (bench/results/LOG.md, fp8 | bf16 cache, decode 32 x 64 heads x 128K): 4 stages and 2
// blocks per SM 0.241 | 0.435 ms (run 18), 2 stages and 3 blocks 0.224 | 0.421 (run 20),
// whole 128-byte lines per copy instruction 0.195 | 0.303 (run 21), blocks sized to fill
// the device 0.196 | 0.293 (run 24). The fp8 variant is now held by the tensor pipe (58%
// of cycles) and the shared-memory reloads of the query's B fragments (59%, run 23).
//
// Fragment mapping (PTX ISA "Matrix Fragments for mma.m16n8k16 with floating point type";
// g = lane / 4, t = lane % 4). M = 16 keys, N = 8 heads, K = 16 head dims per step, 8 steps:
//   A (row-major keys): a0 = (key g, k 2t..2t+1), a1 = key g+8, a2 = (key g, k 2t+8..9), a3.
//   B ("col" = the query rows): b0 = (k 2t..2t+1, head g), b1 = (k 2t+8..9, head g).
//   C: c0, c1 = (key g, heads 2t, 2t+1), c2, c3 = (key g+8, the same heads).
// The 128 dims may be permuted, the same way in A and B (the dot does not depend on the
// order mathematically); each format takes the order its bytes arrive in:
//   bf16: step s is dims 16s..16s+15 as they are: a0 <-> b0 = word 8s+t of the row (32-bit
//     words of two bf16), a2 <-> b1 = word 8s+4+t.
//   fp8: step s is bytes 16s..16s+15; lane t's 4-byte word 4s+t splits into its two byte
//     pairs: a0 <-> b0 = f16x2 of bytes (16s+4t, +1), a2 <-> b1 = bytes (16s+4t+2, +3).
// ldmatrix.x4 (b16 view of the bytes) gives lane (g, t) bytes 4t..4t+3 of row g of each of
// four 8 x 16-byte matrices whose row addresses lanes 8j..8j+7 supply. A: matrices j = (keys
// 0-7 | 8-15) x (bytes 32c..32c+15 | 32c+16..32c+31) of a key tile, so one ldmatrix is one
// bf16 step (regs = a0..a3) or two fp8 steps (regs 0, 1: words of step 2c; 2, 3: step 2c+1).
// B lives in shared memory as [step][b0 | b1][head][t] 32-bit words, ready for ldmatrix:
// matrices (b0, b1) x (head tile 2p, 2p+1) of a step. Ring rows are 16 bytes longer than
// a key (144 / 272): row r then starts in bank quad r mod 8, so the 8 rows of a matrix hit 8
// different quads (no conflict), and the copies of 4 | 2 whole rows per instruction take the
// minimum 4 shared-memory wavefronts.
//
// Numerics. Every product is exact in fp32 (e4m3 x e4m3: 4-bit significands; bf16 x bf16:
// 8-bit), so the error comes from how the tensor core adds products, and from the fp32
// epilogue. With M_h = sum_d |q_hd k_d| (every addend and partial sum is at most M_h):
//  (a) fp8 cache: the published contract, kept for a native e4m3 path (wgmma keeps about 14
//      bits, DeepSeek-V3 report §3.3.2): at least 13 significant bits kept when a step
//      aligns its products, truncation; k = 4 x 32: each step's 32 products and the running
//      sum add < 33 x 2^-12 M_h, so |dot_h - exact_h| <= 132 x 2^-12 M_h. The f16 HMMA that
//      runs now meets it with a wide margin (its bound is (b)'s).
//  (b) bf16 cache: the block-FMA model of Fasi, Higham, Mikaitis and Pranesh ("Numerical
//      behavior of NVIDIA tensor cores", PeerJ CS 2021): products are added to the fp32
//      accumulator in blocks of G >= 4, aligned to the block's largest addend with
//      truncation past 24 significant bits, then normalised by truncation. A block adds
//      G + 1 aligned addends and one normalisation, each wrong by < 2^-23 M_h, so over
//      128 dims: 128 / G x (G + 2) <= 192 errors: |dot_h - exact_h| <= 192 x 2^-23 M_h.
//  (c) epilogue, both: relu, then __fmaf_rn(relu, w_h, sum) over the lane's H / 4 heads (one
//      rounding per head), the sum of the quad's 4 partial sums (3 additions), and for fp8
//      x k_scale: H + 4 roundings, each of a value bounded by W = sum_h |w_h| M_h (to first
//      order). ReLU is 1-Lipschitz, so
//        |fast - exact| <= k_scale x ( sum_h |w_h| E_h + (H + 4) x 2^-24 x W ),
//      E_h from (a) or (b), k_scale = 1 for bf16. The test allows 4 x 34 (fp8) and 200 (bf16)
//      in place of 132 and 192 for the second-order terms. Not covered: underflow (values
//      below 2^-126; a tensor core may flush bf16 subnormal inputs and fp32 subnormal sums).
// Deterministic: fixed orders everywhere, no atomics; each key's quad sum is formed in one
// fixed order (see the epilogue).
//
// Instructions per key and warp, 64 heads (SASS of the loop, fp8 | bf16 cache): HMMA 4 | 4,
// F2FP 2 | 0, ldmatrix 1.25 | 2.5 (B is reloaded once per step of 32 | 16 keys), FMNMX + FFMA
// 4 | 4, everything else (copies and their addresses, quad sum, store, loop) ~3.8 | ~5:
// ~15 | ~15.5 in all (the old heads-as-M e4m3 kernel: 47). The floor of this design is the
// 4 HMMA + 4 epilogue instructions per key; sm_90a's wgmma (native e4m3, 64 keys per
// instruction) would remove most of the first 4 and the F2FP.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "device/api.h"
#include "device/launch.h"
#include "device/primitives/async_copy.cuh"
#include "device/primitives/paging.cuh"
#include "device/primitives/warp.cuh"

namespace dsaf::dev {
namespace {

using ref::StorageFormat;

// Every size of the kernel, derived from the key format, the head count and the copy piece:
// 16 bytes when every key row is 16-byte aligned (a 16-byte aligned cache; fp8 pages of at
// least 4 tokens), else 4 (fp8 pages of 1 or 2 tokens: 132 B/token rows are 4-byte aligned).
template <StorageFormat kKeyFormat, int kHeadCount, int kPiece>
struct MmaTraits {
  static constexpr bool kFp8 = kKeyFormat == StorageFormat::kFp8E4m3fn;
  static constexpr int kHeads = kHeadCount;
  static constexpr int kPieceBytes = kPiece;
  static constexpr int kHeadTiles = kHeads / 8;   // n8 tiles
  static constexpr int kRowBytes = kFp8 ? 128 : 256;  // key values per token
  static constexpr int kScaleBytes = kFp8 ? 4 : 0;    // the fp8 key's fp32 scale
  static constexpr int kRowStride = kRowBytes + 16;   // ring row: see "Ring rows" above
  static constexpr int kKSteps = kHeadDim / 16;       // m16n8k16 steps: 8
  static constexpr int kLdmPerRow = kRowBytes / 32;   // A ldmatrix.x4 per key tile: 4 | 8
  static constexpr int kStepsPerLdm = kKSteps / kLdmPerRow;  // 2 | 1
  // fp8: two key tiles per step halve the B reloads (1 ldmatrix per key, not 2) for 32 more
  // accumulator registers; bf16 keys are twice the bytes, so one tile is the same 4 KB step.
  static constexpr int kKeyTiles = kFp8 ? 2 : 1;
  static constexpr int kKeysPerStep = 16 * kKeyTiles;
  static constexpr int kWarps = 4;
  static constexpr int kStages = 2;  // ring slots per warp: 1 step in flight
  static constexpr int kBlocksPerSm = 3;  // registers (<= 168, __launch_bounds__) and shared memory allow
  static constexpr int kKeysPerRound = kWarps * kKeysPerStep;  // a block's keys are whole rounds of steps
  static constexpr int kMinKeysPerBlock = 4 * kKeysPerRound;    // four steps a warp, at least
  // Dynamic shared memory, in this order (all multiples of 16 bytes).
  static constexpr int kQueryBytes = kKSteps * 2 * kHeads * 16;  // B words [step][b0|b1][head][t]
  static constexpr int kStepBytes = kKeysPerStep * kRowStride;
  static constexpr int kRingBytes = kWarps * kStages * kStepBytes;
  static constexpr int kScaleRingBytes = kWarps * kStages * kKeysPerStep * kScaleBytes;
  static constexpr int kSmemBytes = kQueryBytes + kRingBytes + kScaleRingBytes;

  static_assert(kHeads == 16 || kHeads == 32 || kHeads == 64, "head tiles come in pairs (one B ldmatrix)");
  static_assert(kPieceBytes == 16 || kPieceBytes == 4, "cp.async pieces of 16 or 4 bytes");
  static_assert(kKSteps == kLdmPerRow * kStepsPerLdm, "the ldmatrix loads cover the 128 dims");
  static_assert((kRowStride / 16) % 8 == 1, "consecutive ring rows start in consecutive bank quads");
  static_assert(kKeysPerStep * kRowBytes % 512 == 0, "a step is whole passes (16 bytes a lane)");
  static_assert(kBlocksPerSm * (kSmemBytes + 1024) <= 228 * 1024, "kBlocksPerSm blocks fit an SM (228 KB, 1 KB reserved per block)");
};

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8 x 8 b16 matrices from shared memory; lanes 8j..8j+7 give the row addresses of matrix j.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// D += A * B for one m16n8k16 tile, f16 (fp8 cache) or bf16 operands, fp32 accumulators.
template <bool kF16>
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (kF16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// e4m3 codes as f16 (exact): a pair of codes (bits 0-15) as an f16x2, and the two pairs of
// a word as two f16x2 (bytes 0-1 -> lo, 2-3 -> hi). Keys and queries go through the same
// cvt, so whatever order it gives the two halves of a pair, it is the same on both sides
// of every product. ptxas makes each cvt one F2FP.F16.E4M3.UNPACK_B (reading .H1 for hi).
__device__ __forceinline__ unsigned e4m3x2_to_f16x2(uint16_t pair) {
  unsigned r;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(r) : "h"(pair));
  return r;
}
__device__ __forceinline__ void e4m3x4_to_f16x4(unsigned word, unsigned& lo, unsigned& hi) {
  // The split inside the asm lets ptxas read the high pair as word.H1 (no shift).
  asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, l;\n\tcvt.rn.f16x2.e4m3x2 %1, h;\n\t}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(word));
}

// One e4m3 code as a bf16 (exact: 3 mantissa bits, exponents 2^-9..2^8), through f16 and f32.
__device__ __forceinline__ unsigned e4m3_to_bf16_bits(unsigned code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
  return __float_as_uint(__half2float(__half(h))) >> 16;  // exact: the low 16 bits are zero
}

// B word (step s, plane 0 = b0 | 1 = b1, lane t) of a query head `q` in its stored form: the
// pair of dims the header's mapping gives it, in the kernel's operand type (f16 | bf16).
template <class T>
__device__ __forceinline__ unsigned query_b_word(const uint8_t* q, StorageFormat q_format, int s, int plane, int t) {
  if constexpr (T::kFp8) {
    const int d = 16 * s + 4 * t + 2 * plane;  // bytes d, d + 1 of the e4m3 row
    return e4m3x2_to_f16x2(*reinterpret_cast<const uint16_t*>(q + d));
  } else {
    const int d = 16 * s + 8 * plane + 2 * t;  // bf16 dims d, d + 1; the low half is dim d
    if (q_format == StorageFormat::kFp8E4m3fn) return e4m3_to_bf16_bits(q[d]) | (e4m3_to_bf16_bits(q[d + 1]) << 16);
    return *reinterpret_cast<const unsigned*>(q + 2 * d);  // bf16 (or fp4-simulated bf16) as stored
  }
}

template <class T>
__global__ void __launch_bounds__(T::kWarps * 32, T::kBlocksPerSm) paged_logits_mma_kernel(const PagedLogitsArgs args, const int keys_per_block) {
  constexpr int kThreads = T::kWarps * 32;
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* const query_words = smem;  // B fragments
  uint8_t* const rings = smem + T::kQueryBytes;  // [warp][slot][key][kRowStride]
  float* const scale_rings = reinterpret_cast<float*>(rings + T::kRingBytes);  // [warp][slot][key]

  const int row = blockIdx.y;
  const int b = args.row_seq[row];
  const int valid = args.row_valid[row];  // keys [0, valid) of sequence b; max_context <= 2^30
  const int max_context = static_cast<int>(args.max_context);
  const int block_first = static_cast<int>(blockIdx.x) * keys_per_block;  // a multiple of kKeysPerRound
  const int block_end = min(block_first + keys_per_block, max_context);
  float* const out = args.logits + static_cast<int64_t>(row) * args.max_context;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;

  // 1. A block wholly past the row's valid keys only writes -inf.
  if (block_first >= valid) {
    for (int s = block_first + static_cast<int>(threadIdx.x); s < block_end; s += kThreads) out[s] = -INFINITY;
    return;
  }

  // 2. The block's shared inputs: the query as B words ([step][plane][head][t], word i at
  //    byte 4i); this lane's head weights.
  const int q_head_bytes = args.q_format == StorageFormat::kFp8E4m3fn ? 128 : 256;  // e4m3 or bf16 values
  const uint8_t* const q_row = args.q_values + static_cast<int64_t>(row) * T::kHeads * q_head_bytes;
  // (Loops of fixed trip count, unrolled: every thread's loads are in flight at once.)
  static_assert(T::kQueryBytes / 4 % kThreads == 0, "whole rounds");
#pragma unroll
  for (int round = 0; round < T::kQueryBytes / 4 / kThreads; ++round) {
    const int i = round * kThreads + threadIdx.x;
    const int tt = i % 4, h = (i / 4) % T::kHeads, plane = (i / (4 * T::kHeads)) % 2, s = i / (8 * T::kHeads);
    const uint8_t* const q_head = q_row + h * q_head_bytes;
    reinterpret_cast<unsigned*>(query_words)[i] = query_b_word<T>(q_head, args.q_format, s, plane, tt);
  }
  const int shift = __ffs(args.page_size) - 1;  // log2 P (the launcher checks P is a power of two)
  // Page-table entries are read where a step's copies are issued, through L1: a row's
  // entries are contiguous, so one 128-byte line serves 32 pages (2,048 keys at page 64).
  const int32_t* const table_row = args.page_tables + static_cast<int64_t>(b) * args.page_table_stride;
  float w[T::kHeadTiles][2];  // heads 8n + 2t + c: the columns of this lane's accumulators
#pragma unroll
  for (int n = 0; n < T::kHeadTiles; ++n) {
#pragma unroll
    for (int c = 0; c < 2; ++c) w[n][c] = args.weights[static_cast<int64_t>(row) * T::kHeads + 8 * n + 2 * t + c];
  }
  __syncthreads();

  // 3. This warp's steps: step i holds keys step_first(i) + [0, kKeysPerStep) and lives in
  //    ring slot i % kStages. A key row is copied by kLanesPerKey consecutive lanes, 16 bytes
  //    each (in 4-byte pieces when kPieceBytes is 4), so one cp.async instruction reads
  //    whole 128-byte lines of kKeysPerPass keys and L2 serves each line in one request.
  //    (Two lanes per key, runs 18-20, asked for one 32-byte sector of each of 16 lines per
  //    instruction: four requests per line; ncu run 19 had the L2 78% busy at 49% DRAM.)
  //    Keys past `valid` are zero-filled from an address that is valid and not read, and
  //    steps wholly past it copy nothing. fp8: lane l also copies key l's scale.
  constexpr int kLanesPerKey = T::kRowBytes / 16, kKeysPerPass = 32 / kLanesPerKey;
  constexpr int kPasses = T::kKeysPerStep / kKeysPerPass;
  static_assert(!T::kFp8 || T::kKeysPerStep == 32, "one scale per lane");
  const int step_stride = T::kWarps * T::kKeysPerStep;
  const int warp_first = block_first + warp * T::kKeysPerStep;  // then every kWarps-th step
  const auto step_first = [&](int i) { return warp_first + i * step_stride; };
  const int pass_key = lane / kLanesPerKey, chunk = lane % kLanesPerKey;
  const uint32_t ring = smem_address(rings + warp * T::kStages * T::kStepBytes);
  const uint32_t dst_lane = ring + pass_key * T::kRowStride + 16 * chunk;
  const uint32_t scale_lane = smem_address(scale_rings + warp * T::kStages * T::kKeysPerStep + lane);
  const uint32_t page_bytes = static_cast<uint32_t>(args.page_size) * (T::kRowBytes + T::kScaleBytes);
  const uint32_t scale_region = static_cast<uint32_t>(args.page_size) * T::kRowBytes;
  const int offset_mask = args.page_size - 1;
  // Steps start at multiples of kKeysPerStep, so with pages at least that long a step lies
  // in one page: one page-table read per step instead of one per pass.
  const bool step_in_one_page = args.page_size >= T::kKeysPerStep;
  const auto page_of = [&](int key) {  // the page of a valid key
    return args.cache + static_cast<uint64_t>(static_cast<uint32_t>(__ldg(table_row + (key >> shift)))) * page_bytes;
  };
  const auto issue = [&](int i) {
    const int first = step_first(i);
    if (first < block_end && first < valid) {
      const int slot = i % T::kStages;
      // Addresses first, then the copies back to back (ptxas pads each run of cp.async).
      const uint8_t* src[kPasses];
      bool read[kPasses];
      const uint8_t* scale = nullptr;
      if (step_in_one_page) {
        const uint8_t* const page = page_of(first);
        const int first_offset = first & offset_mask;  // + kKeysPerStep - 1 stays inside the page
#pragma unroll
        for (int pass = 0; pass < kPasses; ++pass) {
          const int k = kKeysPerPass * pass + pass_key;
          read[pass] = first + k < valid;
          src[pass] = page + ((first_offset + k) * T::kRowBytes + 16 * chunk);
        }
        if constexpr (T::kFp8) scale = page + (scale_region + (first_offset + lane) * T::kScaleBytes);
      } else {
#pragma unroll
        for (int pass = 0; pass < kPasses; ++pass) {
          const int s = first + kKeysPerPass * pass + pass_key;
          read[pass] = s < valid;
          const int key = min(s, valid - 1);  // the table may hold anything past the valid pages
          src[pass] = page_of(key) + ((key & offset_mask) * T::kRowBytes + 16 * chunk);
        }
        if constexpr (T::kFp8) {
          const int key = min(first + lane, valid - 1);
          scale = page_of(key) + (scale_region + (key & offset_mask) * T::kScaleBytes);
        }
      }
#pragma unroll
      for (int pass = 0; pass < kPasses; ++pass) {
        const uint32_t dst = dst_lane + slot * T::kStepBytes + kKeysPerPass * pass * T::kRowStride;
#pragma unroll
        for (int k = 0; k < 16 / T::kPieceBytes; ++k) {
          copy_async<T::kPieceBytes>(dst + T::kPieceBytes * k, src[pass] + T::kPieceBytes * k, read[pass]);
        }
      }
      if constexpr (T::kFp8) copy_async<4>(scale_lane + 4 * slot * T::kKeysPerStep, scale, first + lane < valid);
    }
    commit_async();  // an empty group keeps the group count uniform
  };

  // Per-lane parts of the ldmatrix addresses (see the header): A row 16m + (lane & 7) +
  // 8 ((lane >> 3) & 1), byte 16 (lane >> 4) + 32c; B word row (plane (lane >> 3) & 1,
  // head 8 (2p + (lane >> 4)) + (lane & 7)) of step s.
  const uint32_t a_lane = ring + ((lane & 7) + 8 * ((lane >> 3) & 1)) * T::kRowStride + 16 * (lane >> 4);
  const uint32_t b_lane =
      smem_address(query_words) + (((lane >> 3) & 1) * T::kHeads + 8 * (lane >> 4) + (lane & 7)) * 16;
  // The key this lane stores after the quad reduction (see there), and where.
  constexpr int kValues = 2 * T::kKeyTiles;  // per lane: keys g and g + 8 of each key tile
  const int store_key = 16 * (t % kValues / 2) + 8 * (t % 2) + g;
  const bool stores = t < kValues;
  float* const out_lane = out + warp_first + store_key;
  const float* const scale_store = scale_rings + warp * T::kStages * T::kKeysPerStep + store_key;

#pragma unroll
  for (int i = 0; i < T::kStages - 1; ++i) issue(i);

#pragma unroll 1
  for (int i = 0;; ++i) {
    const int first = step_first(i);
    if (first >= block_end) break;  // uniform per warp; later steps start later still
    issue(i + T::kStages - 1);
    wait_async<T::kStages - 1>();  // step i's group has landed
    __syncwarp();
    const int slot = i % T::kStages;

    if (first >= valid) {  // a wholly masked step
      for (int key = lane; key < T::kKeysPerStep; key += 32) {
        if (first + key < max_context) out[first + key] = -INFINITY;
      }
      continue;  // the slot was not written: no __syncwarp needed before it is refilled
    }

    // Dots: acc[m][n] = keys 16m.. x heads 8n.. over the 8 steps.
    float acc[T::kKeyTiles][T::kHeadTiles][4];
#pragma unroll
    for (int m = 0; m < T::kKeyTiles; ++m) {
#pragma unroll
      for (int n = 0; n < T::kHeadTiles; ++n) acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.0f;
    }
    const uint32_t a_step = a_lane + slot * T::kStepBytes;
#pragma unroll
    for (int c = 0; c < T::kLdmPerRow; ++c) {
      unsigned raw[T::kKeyTiles][4];
#pragma unroll
      for (int m = 0; m < T::kKeyTiles; ++m) ldmatrix_x4(raw[m], a_step + m * 16 * T::kRowStride + 32 * c);
#pragma unroll
      for (int e = 0; e < T::kStepsPerLdm; ++e) {
        const int s = c * T::kStepsPerLdm + e;
        unsigned a[T::kKeyTiles][4];
#pragma unroll
        for (int m = 0; m < T::kKeyTiles; ++m) {
          if constexpr (T::kFp8) {  // regs 2e (keys g) and 2e + 1 (keys g + 8) hold step s
            e4m3x4_to_f16x4(raw[m][2 * e], a[m][0], a[m][2]);
            e4m3x4_to_f16x4(raw[m][2 * e + 1], a[m][1], a[m][3]);
          } else {
            a[m][0] = raw[m][0], a[m][1] = raw[m][1], a[m][2] = raw[m][2], a[m][3] = raw[m][3];
          }
        }
#pragma unroll
        for (int p = 0; p < T::kHeadTiles / 2; ++p) {
          unsigned bw[4];  // b0, b1 of head tile 2p, then of 2p + 1
          ldmatrix_x4(bw, b_lane + (s * 2 * T::kHeads + 16 * p) * 16);
#pragma unroll
          for (int m = 0; m < T::kKeyTiles; ++m) {
            mma_16816<T::kFp8>(acc[m][2 * p], a[m], bw[0], bw[1]);
            mma_16816<T::kFp8>(acc[m][2 * p + 1], a[m], bw[2], bw[3]);
          }
        }
      }
    }

    // Epilogue: ReLU, times the head weight into a running sum over the lane's heads:
    // v[2m] for key 16m + g, v[2m + 1] for key 16m + 8 + g.
    float v[kValues];
#pragma unroll
    for (int m = 0; m < T::kKeyTiles; ++m) {
      v[2 * m] = 0.0f, v[2 * m + 1] = 0.0f;
#pragma unroll
      for (int n = 0; n < T::kHeadTiles; ++n) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          v[2 * m] = __fmaf_rn(fmaxf(acc[m][n][c], 0.0f), w[n][c], v[2 * m]);  // fmaxf(NaN, 0) = 0, as score.cc
          v[2 * m + 1] = __fmaf_rn(fmaxf(acc[m][n][2 + c], 0.0f), w[n][c], v[2 * m + 1]);
        }
      }
    }
    // Sum over the quad (lanes t = 0..3 hold the same keys, different heads), scattering
    // the sums: afterwards lane t holds the total of v[t % kValues], formed from the lanes'
    // partial sums p_t as (p0 + p2) + (p1 + p3) (kValues 4) or (p0 + p1) + (p2 + p3)
    // (kValues 2; lanes t and t ^ 2 add the same two pairs: fadd is commutative).
    float sum;
    if constexpr (kValues == 4) {
      const bool up2 = t & 2, up1 = t & 1;
      const float keep0 = up2 ? v[2] : v[0], keep1 = up2 ? v[3] : v[1];
      const float give0 = up2 ? v[0] : v[2], give1 = up2 ? v[1] : v[3];
      const float pair0 = __fadd_rn(keep0, __shfl_xor_sync(kFullMask, give0, 2));
      const float pair1 = __fadd_rn(keep1, __shfl_xor_sync(kFullMask, give1, 2));
      sum = __fadd_rn(up1 ? pair1 : pair0, __shfl_xor_sync(kFullMask, up1 ? pair0 : pair1, 1));
    } else {
      const bool up1 = t & 1;
      const float pair = __fadd_rn(up1 ? v[1] : v[0], __shfl_xor_sync(kFullMask, up1 ? v[0] : v[1], 1));
      sum = __fadd_rn(pair, __shfl_xor_sync(kFullMask, pair, 2));
    }
    // Lane (g, t < kValues) stores key store_key = 16 (t / 2) + 8 (t % 2) + g: every key of
    // the step once.
    const int s = first + store_key;
    if (stores && s < max_context) {
      if constexpr (T::kFp8) sum = __fmul_rn(sum, scale_store[slot * T::kKeysPerStep]);
      out_lane[i * step_stride] = s < valid ? sum : -INFINITY;
    }
    __syncwarp();  // the slot is refilled by a later step's issue
  }
  wait_async<0>();  // nothing may be in flight into shared memory at exit
}

const char* format_name(StorageFormat f) {
  switch (f) {
    case StorageFormat::kNone: return "none";
    case StorageFormat::kFp32: return "fp32";
    case StorageFormat::kBf16: return "bf16";
    case StorageFormat::kFp8E4m3fn: return "fp8 e4m3fn";
    case StorageFormat::kFp4E2m1: return "fp4 e2m1";
    case StorageFormat::kFp4SimulatedBf16: return "fp4-simulated bf16";
  }
  return "unknown";
}

// Keys per block. A block's fixed cost (the query converted into shared memory, the first
// step's latency before any tensor work) is paid once per block, so a row gets as few
// blocks as fill the device: blocks_per_row x rows close to a whole number of waves of
// `resident` blocks (at least 90% of the last wave used; the bench shape, 32 rows on 396
// block slots: 12 blocks per row, 384 blocks in one wave, ~85 steps per warp). Runs 18-21
// used 2,048 keys per block: 2,048 blocks, 5.2 waves, the setup paid 5-6 times per slot.
// Which block scores a key does not change its score (each key's sum is formed by one quad
// in a fixed order), so this choice cannot change a result bit.
template <class T>
int keys_per_block_for(const PagedLogitsArgs& args, int64_t resident) {
  const int64_t rows = args.rows;
  int64_t blocks_per_row = 1;
  for (int64_t waves = 1; waves <= 16; ++waves) {
    blocks_per_row = std::max<int64_t>(1, waves * resident / rows);
    if (rows * blocks_per_row * 10 >= waves * resident * 9) break;
  }
  const int64_t most = (args.max_context + T::kMinKeysPerBlock - 1) / T::kMinKeysPerBlock;
  blocks_per_row = std::min(blocks_per_row, most);
  const int64_t keys = (args.max_context + blocks_per_row - 1) / blocks_per_row;
  return static_cast<int>((keys + T::kKeysPerRound - 1) / T::kKeysPerRound * T::kKeysPerRound);
}

template <StorageFormat kKeyFormat, int kHeads, int kPiece>
void launch_instance(const PagedLogitsArgs& args) {
  using T = MmaTraits<kKeyFormat, kHeads, kPiece>;
  const auto kernel = paged_logits_mma_kernel<T>;
  const int keys_per_block =
      keys_per_block_for<T>(args, resident_blocks(kernel, T::kWarps * 32, T::kSmemBytes, "paged_logits_mma_kernel"));
  const dim3 grid(static_cast<unsigned>((args.max_context + keys_per_block - 1) / keys_per_block),
                  static_cast<unsigned>(args.rows));
  kernel<<<grid, T::kWarps * 32, T::kSmemBytes>>>(args, keys_per_block);
}

template <StorageFormat kKeyFormat, int kPiece>
void launch_format(const PagedLogitsArgs& args) {
  switch (args.num_heads) {
    case 16: return launch_instance<kKeyFormat, 16, kPiece>(args);
    case 32: return launch_instance<kKeyFormat, 32, kPiece>(args);
    case 64: return launch_instance<kKeyFormat, 64, kPiece>(args);
    default: break;
  }
  throw_bad_input("paged_logits (fast): num_heads must be 16, 32 or 64, not " + std::to_string(args.num_heads));
}

}  // namespace

void launch_paged_logits_fast(const PagedLogitsArgs& args) {
  const StorageFormat k = args.k_format, q = args.q_format;
  const bool fp8_cache = k == StorageFormat::kFp8E4m3fn;
  // fp4-simulated bf16 is stored as bf16 values (256 B/token, no scale): the same kernel.
  const bool bf16_cache = k == StorageFormat::kBf16 || k == StorageFormat::kFp4SimulatedBf16;
  if (!fp8_cache && !bf16_cache) {
    throw_bad_input(std::string("paged_logits (fast): the tensor-core kernel reads fp8 or bf16 caches, not ") +
                    format_name(k) + "; use the exact-order kernel");
  }
  if (fp8_cache && q != StorageFormat::kFp8E4m3fn) {
    throw_bad_input(std::string("paged_logits (fast): an fp8 cache takes fp8 queries, not ") + format_name(q) +
                    "; use the exact-order kernel");
  }
  const bool q_is_bf16 = q == StorageFormat::kBf16 || q == StorageFormat::kFp4SimulatedBf16;  // bf16 values as stored
  if (bf16_cache && q != StorageFormat::kFp8E4m3fn && !q_is_bf16) {
    throw_bad_input(std::string("paged_logits (fast): bf16 tensor cores multiply bf16 values, and ") + format_name(q) +
                    " queries are not all bf16 values (fp8 and bf16 queries are); use the exact-order kernel");
  }
  if (args.accum != ref::ScoreAccum::kFp32) throw_bad_input("paged_logits (fast): fp32 accumulation only");
  if (args.rows < 1 || args.rows > 65535) throw_bad_input("paged_logits (fast): rows must be in [1, 65535]");
  if (args.page_size < 1 || args.page_size > 256 || (args.page_size & (args.page_size - 1)) != 0) {
    throw_bad_input("paged_logits (fast): page size must be a power of two in [1, 256]");
  }
  if (args.max_context < 1 || args.max_context > (int64_t{1} << 30)) {
    throw_bad_input("paged_logits (fast): max_context out of range");
  }
  // Keys are copied in 4- or 16-byte pieces and query words read 2 or 4 bytes at a time.
  if (reinterpret_cast<uintptr_t>(args.cache) % 4 != 0 || reinterpret_cast<uintptr_t>(args.q_values) % 4 != 0) {
    throw_bad_input("paged_logits (fast): the cache and the query values must be 4-byte aligned");
  }
  // Whole 16-byte pieces when every key row is 16-byte aligned (MmaTraits).
  const bool wide = reinterpret_cast<uintptr_t>(args.cache) % 16 == 0 && (!fp8_cache || args.page_size >= 4);
  if (fp8_cache) {
    wide ? launch_format<StorageFormat::kFp8E4m3fn, 16>(args) : launch_format<StorageFormat::kFp8E4m3fn, 4>(args);
  } else {
    wide ? launch_format<StorageFormat::kBf16, 16>(args) : launch_format<StorageFormat::kBf16, 4>(args);
  }
  check_cuda(cudaGetLastError(), "paged_logits_mma_kernel launch");
}

}  // namespace dsaf::dev
