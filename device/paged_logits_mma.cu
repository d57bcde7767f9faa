// File: paged_logits_mma.cu — the fast paged decode logits kernel (api.h
// launch_paged_logits_fast) on Hopper's warpgroup tensor-core instruction (wgmma, sm_90a)
// with fp32 accumulators. One kernel template, two key formats:
//   kFp8E4m3fn cache (132 B/token): e4m3 keys x e4m3 queries (wgmma m64n64k32 .e4m3), the
//     key scale after the head sum. This is the instruction DeepGEMM's fp8 paged MQA logits
//     kernel runs, so the fast kernel has the accumulator a serving stack has.
//   kBf16 cache (256 B/token; also kFp4SimulatedBf16, stored the same way): bf16 keys;
//     queries as stored when bf16, widened exactly when e4m3 (every e4m3 value is a bf16
//     value); wgmma m64n64k16 .bf16. The launcher refuses queries bf16 cannot hold exactly.
// Same semantics, mask and output layout as the exact-order kernel (paged_logits.cu):
//   logits[r][s] = k_scale[s] * sum_h ReLU(q[r][h] . k[s]) * w[r][h]  for s < row_valid[r],
//   -inf for row_valid[r] <= s < max_context.
// The contract is BOUNDED, not byte-exact (Numerics below); tests/device/
// paged_logits_gpu_test.cu checks the bound on every score of every preset the kernel takes.
//
// Launch shape: grid (blocks per row, rows); a block is one warpgroup (4 warps, 128
// threads); a row's blocks take equal whole numbers of steps, as few blocks as fill the
// device (keys_per_block_for). A block walks its keys in steps of 64 (wgmma's M): step i
// lives in ring slot i % kStages, kStages - 1 steps are in flight (cp.async, every thread
// copying its share) while the tensor core works on one. Per step and warp the loop issues
// a handful of copies, one barrier, 4 (fp8) or 8 (bf16) wgmma and the epilogue. On the
// H200 (decode 32 x 64 heads x 128K; bench/results/LOG.md): fp8 0.150 ms = 91% of copy,
// bf16 0.269 ms = 96%. An mma.sync kernel is held back by the tensor pipe and the
// shared-memory reloads of the query's fragments (68% / 86% of copy), which wgmma reads
// from shared memory itself.
//
// Shared-memory operands (PTX ISA, "Shared Memory Matrix Layout", 128-byte swizzling,
// K-major, which e4m3 wgmma requires for both operands): row r of a 64-row tile (a key of
// the step, or a query head) has its 16-byte chunk c (dims 16c.. of fp8, 8c.. of bf16) at
//   tile + (c / 8) x 8 KB + r x 128 + ((c mod 8) xor (r mod 8)) x 16,
// in 1024-byte-aligned atoms of 8 rows x 128 bytes. A row's 8 chunks are then a permutation
// of the 8 bank quads of its 128 bytes, so a warp's copy of 4 whole rows takes the minimum
// 4 shared-memory wavefronts. A matrix descriptor (sw128_descriptor) names the tile by its
// start address, the 1024-byte distance between 8-row groups and the swizzle mode; the
// hardware applies the xor to the final address bits (4-6 with 7-9), so the k slice s of
// 32 bytes (k32 e4m3 | k16 bf16) starts at tile + (s / 4) x 8 KB + (s mod 4) x 32.
// The query tile always has 64 rows (wgmma's N): for 16 or 32 heads the rest are zero and
// the epilogue reads only the real heads' columns.
//
// Accumulator fragment (PTX ISA, "Register fragment for matrix D", m64nNk*): warp w, lane
// (g = lane / 4, t = lane % 4): d[4n + c] = (key 16w + g, head 8n + 2t + c),
// d[4n + 2 + c] = (key 16w + g + 8, the same head), c in {0, 1}.
//
// Numerics. Every product is exact in fp32 (e4m3 x e4m3: 4-bit significands; bf16 x bf16:
// 8-bit), so the error comes from how the tensor core adds products, and from the fp32
// epilogue. With M_h = sum_d |q_hd k_d| (every addend and partial sum is at most M_h):
//  (a) fp8 cache: Hopper's e4m3 accumulation keeps about 14 significant bits (DeepSeek-V3
//      report §3.3.2, measured on H800). Model: one k32 instruction aligns its 32 products
//      and the running sum to the largest of them, keeps at least 13 significant bits by
//      truncation, and normalises once: 34 errors, each < 2^-12 M_h; 4 instructions over
//      the 128 dims: |dot_h - exact_h| <= 136 x 2^-12 M_h. The model is an assumption about
//      undocumented hardware, and the test is what holds it to account: it checks this
//      bound on every score of every case (and reports the largest fraction of it used).
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
//      E_h from (a) or (b), k_scale = 1 for bf16. The test takes 4 x 34 x 2^-12 (fp8) and
//      200 x 2^-23 (bf16; 8 for second-order terms). Not covered: underflow (values below
//      2^-126; a tensor core may flush bf16 subnormal inputs and fp32 subnormal sums).
// Deterministic: fixed orders everywhere, no atomics; each key's quad sum is formed in one
// fixed order (see the epilogue).
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
struct WgmmaTraits {
  static constexpr bool kFp8 = kKeyFormat == StorageFormat::kFp8E4m3fn;
  static constexpr int kHeads = kHeadCount;
  static constexpr int kPieceBytes = kPiece;
  static constexpr int kHeadTiles = kHeads / 8;        // 8-head column groups the epilogue reads
  static constexpr int kRowBytes = kFp8 ? 128 : 256;   // key values per token
  static constexpr int kScaleBytes = kFp8 ? 4 : 0;     // the fp8 key's fp32 scale
  static constexpr int kChunksPerRow = kRowBytes / 16;
  static constexpr int kKeysPerStep = 64;              // wgmma M; the query tile's N is 64 too
  static constexpr int kThreads = 128;                 // one warpgroup
  static constexpr int kAtomColumnBytes = 64 * 128;    // 128 bytes of each of a tile's 64 rows
  static constexpr int kTileBytes = 64 * kRowBytes;    // a step of keys, or the query
  static constexpr int kSlices = kRowBytes / 32;       // wgmma per step: k32 e4m3 | k16 bf16
  // Ring slots and blocks per SM: fp8 4 x 8 KB and 5 blocks (3 steps = 25 KB in flight per
  // block), bf16 3 x 16 KB and 3 blocks (32 KB per block); Little's law asks for ~30 KB per
  // SM (~4 TB/s / 132 SMs x ~1 us).
  static constexpr int kStages = kFp8 ? 4 : 3;
  static constexpr int kBlocksPerSm = kFp8 ? 5 : 3;
  static constexpr int kKeysPerRound = kKeysPerStep;          // a block's keys are whole steps
  static constexpr int kMinKeysPerBlock = 4 * kKeysPerStep;  // four steps a block, at least
  // Dynamic shared memory: 1 KB of slack to align the tiles to 1024 bytes (swizzle atoms),
  // the query tile, the ring, the ring's key scales.
  static constexpr int kScaleRingBytes = kStages * kKeysPerStep * kScaleBytes;
  static constexpr int kSmemBytes = 1024 + kTileBytes + kStages * kTileBytes + kScaleRingBytes;

  static_assert(kHeads == 16 || kHeads == 32 || kHeads == 64, "at most wgmma's N = 64 heads");
  static_assert(kPieceBytes == 16 || kPieceBytes == 4, "cp.async pieces of 16 or 4 bytes");
  static_assert(kThreads % kChunksPerRow == 0 && (kThreads / kChunksPerRow) % 8 == 0,
                "a thread's rows of a step share their row mod 8, so its swizzled chunk is fixed");
  static_assert(kBlocksPerSm * (kSmemBytes + 1024) <= 228 * 1024, "kBlocksPerSm blocks fit an SM (228 KB, 1 KB reserved per block)");
};

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Byte offset of 16-byte chunk c of row r in a 64-row tile (the header's layout).
__device__ __forceinline__ uint32_t sw128_offset(int r, int c) {
  return (c / 8) * (64 * 128) + r * 128 + (((c % 8) ^ (r % 8)) << 4);
}

// wgmma matrix descriptor of a K-major 128-byte-swizzled operand starting at `address`
// (PTX ISA, "Matrix Descriptor Format"): bits 0-13 address / 16, 16-29 leading byte offset
// / 16 (unused by swizzled K-major layouts; 1 by convention), 32-45 stride byte offset / 16
// (1024: the next 8 rows), 62-63 swizzle mode (1: 128 bytes). Base offset 0: every atom is
// 1024-byte aligned.
__device__ __forceinline__ uint64_t sw128_descriptor(uint32_t address) {
  constexpr uint64_t kLeading = 1, kStride = 1024 >> 4, kSwizzle128 = 1;
  return static_cast<uint64_t>((address & 0x3FFFFu) >> 4) | (kLeading << 16) | (kStride << 32) | (kSwizzle128 << 62);
}

// D (+)= A x B for a 64 x 64 tile and one k slice, A and B from shared memory; accumulate
// false overwrites D. The instruction is asynchronous: wgmma_wait_all before D is read.
#define DSAF_WGMMA_64X64(INSTRUCTION, OPERANDS)                                                                        \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" INSTRUCTION                                       \
               " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "  \
               "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1" OPERANDS ";\n}\n"      \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),  \
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),        \
                 "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),      \
                 "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),      \
                 "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                                           \
               : "l"(a), "l"(b), "r"(static_cast<int>(accumulate))                                                 \
               : "memory")
template <bool kFp8>
__device__ __forceinline__ void wgmma_64x64(float (&d)[32], uint64_t a, uint64_t b, bool accumulate) {
  if constexpr (kFp8) {
    // (e4m3 has no transpose operands: both K-major)
    DSAF_WGMMA_64X64("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3", "");
  } else {
    DSAF_WGMMA_64X64("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16", ", 0, 0");  // both K-major
  }
}
#undef DSAF_WGMMA_64X64

// Orders this warp's earlier register accesses of the accumulators before the next wgmma.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// The compiler does not know that wgmma writes the accumulators in the background: each
// is passed through an empty asm after the wait, so no read of it moves above the wait.
__device__ __forceinline__ void pin_accumulators(float (&d)[32]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// Makes this thread's shared-memory writes (st.shared, cp.async: the generic proxy) visible
// to the tensor core's reads (the async proxy); a barrier then publishes them to the warpgroup.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// One e4m3 code as a bf16 (exact: 3 mantissa bits, exponents 2^-9..2^8), through f16 and f32.
__device__ __forceinline__ unsigned e4m3_to_bf16_bits(unsigned code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
  return __float_as_uint(__half2float(__half(h))) >> 16;  // exact: the low 16 bits are zero
}

// 16-byte chunk c of query head `q` as the kernel's B operand row: the stored bytes (e4m3
// for an fp8 cache, bf16 as stored for a bf16 one), or e4m3 dims 8c..8c+7 widened to bf16.
template <class T>
__device__ __forceinline__ uint4 query_chunk(const uint8_t* q, StorageFormat q_format, int c) {
  unsigned w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if (!T::kFp8 && q_format == StorageFormat::kFp8E4m3fn) {
      const int d = 8 * c + 2 * j;  // the low half is dim d
      w[j] = e4m3_to_bf16_bits(q[d]) | (e4m3_to_bf16_bits(q[d + 1]) << 16);
    } else {
      w[j] = reinterpret_cast<const unsigned*>(q + 16 * c)[j];  // 4-byte aligned (the launcher checks)
    }
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

template <class T>
__global__ void __launch_bounds__(T::kThreads, T::kBlocksPerSm) paged_logits_mma_kernel(const PagedLogitsArgs args, const int keys_per_block) {
  extern __shared__ __align__(1024) uint8_t smem[];
  // Tiles from the first 1024-byte boundary (the slack is in kSmemBytes).
  const uint32_t smem_base = smem_address(smem);
  const uint32_t pad = ((smem_base + 1023u) & ~1023u) - smem_base;
  uint8_t* const query_tile = smem + pad;
  const uint32_t query_address = smem_base + pad;
  const uint32_t ring = query_address + T::kTileBytes;  // [slot][64-key tile]
  const uint32_t scale_ring = ring + T::kStages * T::kTileBytes;  // [slot][key] fp32
  const float* const scales = reinterpret_cast<const float*>(query_tile + (1 + T::kStages) * T::kTileBytes);

  const int row = blockIdx.y;
  const int b = args.row_seq[row];
  const int valid = args.row_valid[row];  // keys [0, valid) of sequence b; max_context <= 2^30
  const int max_context = static_cast<int>(args.max_context);
  const int block_first = static_cast<int>(blockIdx.x) * keys_per_block;  // a multiple of 64
  const int block_end = min(block_first + keys_per_block, max_context);
  float* const out = args.logits + static_cast<int64_t>(row) * args.max_context;
  const int thread = threadIdx.x, lane = thread % 32, warp = thread / 32;
  const int g = lane / 4, t = lane % 4;

  // 1. A block wholly past the row's valid keys only writes -inf.
  if (block_first >= valid) {
    for (int s = block_first + thread; s < block_end; s += T::kThreads) out[s] = -INFINITY;
    return;
  }

  // 2. The block's shared inputs: the query tile (heads past kHeads zero), this lane's head weights.
  const int q_head_bytes = args.q_format == StorageFormat::kFp8E4m3fn ? 128 : 256;  // e4m3 or bf16 values
  const uint8_t* const q_row = args.q_values + static_cast<int64_t>(row) * T::kHeads * q_head_bytes;
  constexpr int kQueryChunks = 64 * T::kChunksPerRow;
  static_assert(kQueryChunks % T::kThreads == 0, "whole rounds");
#pragma unroll
  for (int round = 0; round < kQueryChunks / T::kThreads; ++round) {  // every thread's loads in flight at once
    const int i = round * T::kThreads + thread, h = i / T::kChunksPerRow, c = i % T::kChunksPerRow;
    const uint4 chunk = h < T::kHeads ? query_chunk<T>(q_row + h * q_head_bytes, args.q_format, c) : make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(query_tile + sw128_offset(h, c)) = chunk;
  }
  fence_proxy_async();  // the tile is read by the tensor core (the barrier below publishes it)
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

  // 3. The block's steps: step i holds keys block_first + 64 i + [0, 64) in ring slot
  //    i % kStages. Chunk c of a key row is copied by thread c + kChunksPerRow x (key mod
  //    kKeysPerPass), 16 bytes (in 4-byte pieces when kPieceBytes is 4), so one warp
  //    instruction reads whole 128-byte lines and L2 serves each line in one request (runs
  //    18-21: one sector of many lines per instruction kept the L2 busy at half the DRAM
  //    rate). Keys past `valid` are zero-filled from an address that is valid and not read;
  //    steps wholly past it copy nothing. fp8: thread k < 64 also copies key k's scale.
  constexpr int kKeysPerPass = T::kThreads / T::kChunksPerRow, kPasses = T::kKeysPerStep / kKeysPerPass;
  const int pass_key = thread / T::kChunksPerRow, chunk = thread % T::kChunksPerRow;
  // Every key pass_key + kKeysPerPass x j has the row mod 8 of pass_key: one swizzled offset.
  const uint32_t dst_thread = ring + sw128_offset(pass_key, chunk);
  const uint32_t page_bytes = static_cast<uint32_t>(args.page_size) * (T::kRowBytes + T::kScaleBytes);
  const uint32_t scale_region = static_cast<uint32_t>(args.page_size) * T::kRowBytes;
  const int offset_mask = args.page_size - 1;
  // Steps start at multiples of 64, so with pages at least that long a step lies in one
  // page: one page-table read per step instead of one per key.
  const bool step_in_one_page = args.page_size >= T::kKeysPerStep;
  const auto page_of = [&](int key) {  // the page of a valid key
    return args.cache + static_cast<uint64_t>(static_cast<uint32_t>(__ldg(table_row + (key >> shift)))) * page_bytes;
  };
  const auto step_first = [&](int i) { return block_first + i * T::kKeysPerStep; };
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
        const int first_offset = first & offset_mask;  // + 63 stays inside the page
#pragma unroll
        for (int j = 0; j < kPasses; ++j) {
          const int k = pass_key + kKeysPerPass * j;
          read[j] = first + k < valid;
          src[j] = page + ((first_offset + k) * T::kRowBytes + 16 * chunk);
        }
        if constexpr (T::kFp8) scale = page + (scale_region + (first_offset + thread % 64) * T::kScaleBytes);
      } else {
#pragma unroll
        for (int j = 0; j < kPasses; ++j) {
          const int s = first + pass_key + kKeysPerPass * j;
          read[j] = s < valid;
          const int key = min(s, valid - 1);  // the table may hold anything past the valid pages
          src[j] = page_of(key) + ((key & offset_mask) * T::kRowBytes + 16 * chunk);
        }
        if constexpr (T::kFp8) {
          const int key = min(first + thread % 64, valid - 1);
          scale = page_of(key) + (scale_region + (key & offset_mask) * T::kScaleBytes);
        }
      }
#pragma unroll
      for (int j = 0; j < kPasses; ++j) {
        const uint32_t dst = dst_thread + slot * T::kTileBytes + kKeysPerPass * j * 128;
#pragma unroll
        for (int p = 0; p < 16 / T::kPieceBytes; ++p) {
          copy_async<T::kPieceBytes>(dst + T::kPieceBytes * p, src[j] + T::kPieceBytes * p, read[j]);
        }
      }
      if constexpr (T::kFp8) {
        if (thread < 64) copy_async<4>(scale_ring + 4 * (slot * T::kKeysPerStep + thread), scale, first + thread < valid);
      }
    }
    commit_async();  // an empty group keeps the group count uniform
  };

  // The key this lane stores after the quad reduction (see there).
  const int store_key = 16 * warp + 8 * t + g;  // t < 2
  float acc[32];

#pragma unroll
  for (int i = 0; i < T::kStages - 1; ++i) issue(i);

#pragma unroll 1
  for (int i = 0;; ++i) {
    const int first = step_first(i);
    if (first >= block_end) break;  // uniform per block
    wait_async<T::kStages - 2>();   // this thread's copies of step i have landed
    fence_proxy_async();            // ... for the tensor core
    // Every thread's copies of step i are visible, and every thread is past step i - 1's
    // wgmma_wait_all: its slot may be refilled.
    __syncthreads();
    issue(i + T::kStages - 1);
    const int slot = i % T::kStages;

    if (first >= valid) {  // a wholly masked step
      if (thread < T::kKeysPerStep && first + thread < max_context) out[first + thread] = -INFINITY;
      continue;
    }

    // Dots: acc = keys x heads of this step, over the kSlices k slices.
    wgmma_fence();
    const uint32_t key_tile = ring + slot * T::kTileBytes;
#pragma unroll
    for (int s = 0; s < T::kSlices; ++s) {
      const uint32_t k_offset = (s / 4) * T::kAtomColumnBytes + (s % 4) * 32;
      wgmma_64x64<T::kFp8>(acc, sw128_descriptor(key_tile + k_offset), sw128_descriptor(query_address + k_offset), s > 0);
    }
    wgmma_commit();
    wgmma_wait_all();
    pin_accumulators(acc);

    // Epilogue: ReLU, times the head weight into a running sum over the lane's heads:
    // v0 for key 16w + g, v1 for key 16w + g + 8.
    float v0 = 0.0f, v1 = 0.0f;
#pragma unroll
    for (int n = 0; n < T::kHeadTiles; ++n) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        v0 = __fmaf_rn(fmaxf(acc[4 * n + c], 0.0f), w[n][c], v0);  // fmaxf(NaN, 0) = 0, as score.cc
        v1 = __fmaf_rn(fmaxf(acc[4 * n + 2 + c], 0.0f), w[n][c], v1);
      }
    }
    // Sum over the quad (lanes t = 0..3 hold the same keys, different heads): lane t ends
    // with the total of its key 16w + 8 (t % 2) + g, formed from the lanes' partial sums
    // p_0..p_3 as (p0 + p1) + (p2 + p3) (lanes t and t ^ 2 add the same pairs: fadd is
    // commutative).
    const bool up1 = t & 1;
    const float pair = __fadd_rn(up1 ? v1 : v0, __shfl_xor_sync(kFullMask, up1 ? v0 : v1, 1));
    float sum = __fadd_rn(pair, __shfl_xor_sync(kFullMask, pair, 2));
    const int s = first + store_key;
    if (t < 2 && s < max_context) {
      if constexpr (T::kFp8) sum = __fmul_rn(sum, scales[slot * T::kKeysPerStep + store_key]);
      out[s] = s < valid ? sum : -INFINITY;
    }
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
// `resident` blocks (at least 90% of the last wave used; the bench shape, fp8: 32 rows on
// 660 block slots, 5 per SM: 20 blocks per row, 640 blocks in one wave, 103 steps of 64
// keys per block). A fixed 2,048 keys per block gives 5.2 waves, the setup paid 5-6 times
// per slot.
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
  using T = WgmmaTraits<kKeyFormat, kHeads, kPiece>;
  const auto kernel = paged_logits_mma_kernel<T>;
  const int keys_per_block =
      keys_per_block_for<T>(args, resident_blocks(kernel, T::kThreads, T::kSmemBytes, "paged_logits_mma_kernel"));
  const dim3 grid(static_cast<unsigned>((args.max_context + keys_per_block - 1) / keys_per_block),
                  static_cast<unsigned>(args.rows));
  kernel<<<grid, T::kThreads, T::kSmemBytes>>>(args, keys_per_block);
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
  // Whole 16-byte pieces when every key row is 16-byte aligned (WgmmaTraits).
  const bool wide = reinterpret_cast<uintptr_t>(args.cache) % 16 == 0 && (!fp8_cache || args.page_size >= 4);
  if (fp8_cache) {
    wide ? launch_format<StorageFormat::kFp8E4m3fn, 16>(args) : launch_format<StorageFormat::kFp8E4m3fn, 4>(args);
  } else {
    wide ? launch_format<StorageFormat::kBf16, 16>(args) : launch_format<StorageFormat::kBf16, 4>(args);
  }
  check_cuda(cudaGetLastError(), "paged_logits_mma_kernel launch");
}

}  // namespace dsaf::dev
