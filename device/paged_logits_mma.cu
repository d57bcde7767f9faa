// File: paged_logits_mma.cu — the fast paged decode logits kernel (api.h
// launch_paged_logits_fast): fp8 e4m3 tensor-core MMA (mma.sync m16n8k32, fp32
// accumulators) for an fp8 cache and fp8 queries. Same semantics, mask and layout as the
// exact-order kernel (paged_logits.cu); the contract is BOUNDED, not byte-exact:
//
// Products of two e4m3 values are exact in fp32 (4-bit x 4-bit significands), so all the
// error is in how the tensor core adds them. Hopper's fp8 MMA does not keep a full fp32
// sum (DeepSeek-V3 report §3.3.2: about 14 significant bits are kept when aligning
// products); we assume at least 13 and truncation. Each of the 128/32 = 4 MMA steps then
// adds its 32 products and the running sum with an error below 2^-12 * sum_d |q_d k_d|
// (every aligned addend and the sum are bounded by that total), so per head
//     |dot_h - exact_h| <= 4 * 33 * 2^-12 * M_h,  M_h = sum_d |q_d k_d|   (132 * 2^-12).
// ReLU is 1-Lipschitz; the epilogue (relu * w, the head sum in a fixed tree, * k_scale) is
// fp32 with H + 2 roundings of values bounded by T = sum_h |w_h| * M_h, so
//     |fast - exact| <= k_scale * ( sum_h |w_h| * 132 * 2^-12 * M_h + (H + 2) * 2^-24 * T ).
// tests/device/paged_logits_gpu_test.cu checks this bound on every score and reports how
// much of it was used.
//
// The head dimension is permuted consistently in q and k (the sum does not depend on its
// order mathematically): lane (g, t) of a warp owns bytes [32t, 32t + 32) of key row g,
// and MMA step s reads its words 2s and 2s + 1, so a key row is two 16-byte copies. Keys
// stream through a per-warp ring of cp.async stages, so each warp keeps several steps of
// keys in flight while its tensor cores work on an earlier one.
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "device/api.h"
#include "device/head_pipeline.cuh"
#include "device/launch.h"
#include "device/primitives/paging.cuh"

namespace dsaf::dev {
namespace {

constexpr int kWarps = 4;
constexpr int kKeysPerWarpStep = 16;       // two n8 tiles per step
constexpr int kKeysPerBlock = 1024;        // 16 steps per warp
constexpr int kStages = 4;                 // cp.async ring per warp: 4 x 2 KB of keys in flight
constexpr int kRowStride = 144;            // bytes per key row in the ring: 128 + 16 breaks bank conflicts
constexpr int kSteps = 4;                  // k = 128 = 4 x 32
constexpr int kMinBlocks = 4;  // 16 warps per SM, each with kStages steps of keys in flight

// D += A * B for one m16n8k32 e4m3 tile (fp32 accumulators).
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The 8 words lane t owns of a 128-byte key row (two 16-byte loads where aligned: a slot is
// 4-byte aligned only, for page sizes 1 and 2).
__device__ __forceinline__ void load_key_words(const uint8_t* row, int t, unsigned (&w)[8]) {
  const uint8_t* src = row + 32 * t;
  if ((reinterpret_cast<uintptr_t>(src) & 15) == 0) {
    const uint4 lo = reinterpret_cast<const uint4*>(src)[0], hi = reinterpret_cast<const uint4*>(src)[1];
    w[0] = lo.x, w[1] = lo.y, w[2] = lo.z, w[3] = lo.w, w[4] = hi.x, w[5] = hi.y, w[6] = hi.z, w[7] = hi.w;
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = reinterpret_cast<const unsigned*>(src)[i];
  }
}

// cp.async of `bytes` (4 or 16) from global to shared; src_bytes = 0 fills zeros instead.
template <int kBytes>
__device__ __forceinline__ void copy_async(void* dst, const void* src, bool read) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int src_bytes = read ? kBytes : 0;
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(d), "l"(src), "n"(kBytes), "r"(src_bytes));
  }
}
__device__ __forceinline__ void commit_async() { asm volatile("cp.async.commit_group;\n"); }
template <int kPending>
__device__ __forceinline__ void wait_async() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending)); }

template <int kHeads>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
paged_logits_mma_kernel(const PagedLogitsArgs args) {
  constexpr int kTiles = kHeads / 16;  // m16 tiles of heads
  const int row = blockIdx.y;
  const int b = args.row_seq[row];
  const int64_t valid = args.row_valid[row];  // keys [0, valid) of sequence b
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;  // mma group (row / key) and thread in group
  float* out = args.logits + static_cast<int64_t>(row) * args.max_context;
  const int64_t block_first = static_cast<int64_t>(blockIdx.x) * kKeysPerBlock;

  // A fragments, built once per block into shared memory (every warp reads them all):
  // q rows h = 16 m + g (regs 0, 2) and h + 8 (regs 1, 3); words 2s, 2s + 1 of the 32
  // bytes lane t owns. Registers hold only the weights of this lane's rows.
  __shared__ uint4 a_frag[kTiles][kSteps][32];
  const uint8_t* q = args.q_values + static_cast<int64_t>(row) * kHeads * kHeadDim;
  for (int m = warp; m < kTiles; m += kWarps) {
    unsigned lo[8], hi[8];
    load_key_words(q + (16 * m + g) * kHeadDim, t, lo);
    load_key_words(q + (16 * m + g + 8) * kHeadDim, t, hi);
#pragma unroll
    for (int s = 0; s < kSteps; ++s) a_frag[m][s][lane] = make_uint4(lo[2 * s], hi[2 * s], lo[2 * s + 1], hi[2 * s + 1]);
  }
  float w_lo[kTiles], w_hi[kTiles];
#pragma unroll
  for (int m = 0; m < kTiles; ++m) {
    w_lo[m] = args.weights[static_cast<int64_t>(row) * kHeads + 16 * m + g];
    w_hi[m] = args.weights[static_cast<int64_t>(row) * kHeads + 16 * m + g + 8];
  }
  __syncthreads();

  // Each warp streams its steps of 16 keys (step i: keys block_first + (i kWarps + warp) 16
  // + [0, 16)) through its own ring of kStages slots: lane (g, t) copies its 32 bytes of
  // keys g and 8 + g, lanes t = 0 their scales; masked keys are zero-filled.
  constexpr int kValueBytes = 128, kScaleBytes = 4;
  constexpr int kWarpSteps = kKeysPerBlock / (kWarps * kKeysPerWarpStep);
  __shared__ __align__(16) uint8_t ring[kWarps][kStages][kKeysPerWarpStep][kRowStride];
  __shared__ float ring_scale[kWarps][kStages][kKeysPerWarpStep];
  const auto step_first = [&](int i) { return block_first + (static_cast<int64_t>(i) * kWarps + warp) * kKeysPerWarpStep; };
  const auto issue = [&](int i) {
    if (i < kWarpSteps) {
      const int stage = i % kStages;
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        const int key = 8 * n + g;
        const int64_t s = step_first(i) + key;
        const bool read = s < valid;
        const uint8_t* src = args.cache;  // any valid address when nothing is read
        const uint8_t* scale = args.cache;
        if (read) {
          const PageSlot slot = page_slot(s, args.page_size);
          const int64_t page = args.page_tables[b * args.page_table_stride + slot.table_index];
          const int offset = slot.offset;
          const uint8_t* base = args.cache + page * args.page_size * (kValueBytes + kScaleBytes);
          src = base + offset * kValueBytes + 32 * t;
          scale = base + args.page_size * kValueBytes + offset * kScaleBytes;
        }
        uint8_t* dst = &ring[warp][stage][key][32 * t];
        if ((reinterpret_cast<uintptr_t>(src) & 15) == 0) {
          copy_async<16>(dst, src, read);
          copy_async<16>(dst + 16, src + 16, read);
        } else {  // a 4-byte-aligned slot (page sizes 1 and 2)
#pragma unroll
          for (int w = 0; w < 8; ++w) copy_async<4>(dst + 4 * w, src + 4 * w, read);
        }
        if (t == 0) copy_async<4>(&ring_scale[warp][stage][key], scale, read);
      }
    }
    commit_async();  // an empty group past the end keeps the group count uniform
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) issue(i);

#pragma unroll 1
  for (int i = 0; i < kWarpSteps; ++i) {
    const int64_t first = step_first(i);
    if (first >= args.max_context) break;  // uniform per warp; later steps start later still
    issue(i + kStages - 1);
    wait_async<kStages - 1>();  // step i's group has landed
    __syncwarp();
    const int stage = i % kStages;
    unsigned k[2][8];
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      const uint4 lo = *reinterpret_cast<const uint4*>(&ring[warp][stage][8 * n + g][32 * t]);
      const uint4 hi = *reinterpret_cast<const uint4*>(&ring[warp][stage][8 * n + g][32 * t + 16]);
      k[n][0] = lo.x, k[n][1] = lo.y, k[n][2] = lo.z, k[n][3] = lo.w;
      k[n][4] = hi.x, k[n][5] = hi.y, k[n][6] = hi.z, k[n][7] = hi.w;
    }
    float partial[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};  // [tile][column 2t + c]
#pragma unroll
    for (int m = 0; m < kTiles; ++m) {
      float d[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const uint4 a4 = a_frag[m][s][lane];
        const unsigned a[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
        for (int n = 0; n < 2; ++n) mma_e4m3(d[n], a, k[n][2 * s], k[n][2 * s + 1]);
      }
      // d[n][0], d[n][1]: head 16m + g, keys 2t, 2t + 1 of tile n; d[n][2], d[n][3]: head + 8
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          partial[n][c] = __fadd_rn(partial[n][c], __fmul_rn(fmaxf(d[n][c], 0.0f), w_lo[m]));
          partial[n][c] = __fadd_rn(partial[n][c], __fmul_rn(fmaxf(d[n][2 + c], 0.0f), w_hi[m]));
        }
      }
    }
    // Sum over the 8 groups g (lanes with the same t): xor 4, 8, 16.
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
#pragma unroll
        for (int mask = 4; mask < 32; mask *= 2) {
          partial[n][c] = __fadd_rn(partial[n][c], __shfl_xor_sync(kFullMask, partial[n][c], mask));
        }
      }
    }
    // Lanes g = 0 store keys 8n + 2t + c.
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int key = 8 * n + 2 * t + c;
        const int64_t s = first + key;
        if (g == 0 && s < args.max_context) {
          out[s] = s < valid ? __fmul_rn(partial[n][c], ring_scale[warp][stage][key]) : -INFINITY;
        }
      }
    }
    __syncwarp();  // the slot is refilled by the next step's issue
  }
  wait_async<0>();  // nothing may be in flight into shared memory at exit
}

}  // namespace

void launch_paged_logits_fast(const PagedLogitsArgs& args) {
  if (args.k_format != ref::StorageFormat::kFp8E4m3fn || args.q_format != ref::StorageFormat::kFp8E4m3fn) {
    throw_bad_input("paged_logits (fast): the tensor-core kernel takes an fp8 cache and fp8 queries; "
                    "use the exact-order kernel for other formats");
  }
  if (args.accum != ref::ScoreAccum::kFp32) throw_bad_input("paged_logits (fast): fp32 accumulation only");
  if (args.rows < 1 || args.rows > 65535) throw_bad_input("paged_logits (fast): rows must be in [1, 65535]");
  if (args.page_size < 1 || args.page_size > 256 || (args.page_size & (args.page_size - 1)) != 0) {
    throw_bad_input("paged_logits (fast): page size must be a power of two in [1, 256]");
  }
  if (args.max_context < 1 || args.max_context > (int64_t{1} << 30)) {
    throw_bad_input("paged_logits (fast): max_context out of range");
  }
  const dim3 grid(static_cast<unsigned>((args.max_context + kKeysPerBlock - 1) / kKeysPerBlock),
                  static_cast<unsigned>(args.rows));
  switch (args.num_heads) {
    case 16: paged_logits_mma_kernel<16><<<grid, kWarps * 32>>>(args); break;
    case 32: paged_logits_mma_kernel<32><<<grid, kWarps * 32>>>(args); break;
    case 64: paged_logits_mma_kernel<64><<<grid, kWarps * 32>>>(args); break;
    default: throw_bad_input("paged_logits (fast): num_heads must be 16, 32 or 64");
  }
  check_cuda(cudaGetLastError(), "paged_logits_mma_kernel launch");
}

}  // namespace dsaf::dev
