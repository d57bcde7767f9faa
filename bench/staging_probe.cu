// L2 sectors per byte for the ways a warp can stage 256-byte rows in shared memory. Each
// warp stages a tile of 32 rows, 8 KB, then reads it back; the question is how
// many 32-byte sectors the L2 serves for the 256 MB that 1M rows hold (8.4 M is the
// minimum). Profile with Nsight Compute:
//   ncu --metrics lts__t_sectors_srcunit_tex_op_read.sum,gpu__time_duration.sum bench/staging_probe
// On the H200, cp.async of 16 bytes a lane reads 12.6 M sectors when the rows sit
// 272 bytes apart in shared memory (16 bytes of padding) and 8.4 M at 256 or 288: a sector
// whose two 16-byte halves land in different aligned 32-byte words of shared memory is read
// twice. The 128-byte swizzle keeps halves together (8.4 M); cp.async.bulk at 272 reads
// 9.3 M, ld.global + st.shared 8.4-8.7 M. The key kernel's staging
// (device/key_store/staging.cuh, KeyRing) keeps its copies 32-byte aligned because of it.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

namespace {

constexpr int kRows = 1 << 20;
constexpr int kRowBytes = 256;
constexpr int kWarps = 8;  // per block, one tile of 32 rows each

enum class Staging {
  kCpAsync16,          // cp.async.cg, 16 bytes a lane, two rows a warp instruction
  kCpAsync16Swizzled,  // the same into 128-byte-swizzled rows (chunk ^ row % 8), as wgmma tiles
  kBulkRow,            // cp.async.bulk, one 256-byte row a lane, completing on an mbarrier
  kLoadStore16,        // ld.global 16 bytes a lane into registers, then st.shared
};

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

template <Staging kStaging, int kStride>
__global__ void __launch_bounds__(kWarps * 32) stage_rows(const uint8_t* __restrict__ in, uint32_t* out) {
  extern __shared__ __align__(128) uint8_t shared[];
  __shared__ __align__(8) uint64_t landed[kWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint8_t* tile = shared + warp * 32 * kStride;
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * 32;
  const uint8_t* src = in + first * kRowBytes;
  const int c = lane % 16, k0 = lane / 16;  // chunk c of rows k0, k0 + 2, ...
  if constexpr (kStaging == Staging::kCpAsync16 || kStaging == Staging::kCpAsync16Swizzled) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int k = k0 + 2 * j;
      const int slot = kStaging == Staging::kCpAsync16 ? c : (c & 8) | ((c & 7) ^ (k & 7));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(tile + k * kStride + 16 * slot)),
                   "l"(src + k * kRowBytes + 16 * c));
    }
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
  } else if constexpr (kStaging == Staging::kBulkRow) {
    const uint32_t bar = shared_address(&landed[warp]);
    if (lane == 0) {
      asm volatile("mbarrier.init.shared.b64 [%0], 1;\n" ::"r"(bar));
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;\n" ::"r"(bar), "r"(32 * kRowBytes) : "memory");
    }
    __syncwarp();
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     shared_address(tile + lane * kStride)),
                 "l"(src + lane * kRowBytes), "n"(kRowBytes), "r"(bar) : "memory");
    asm volatile("{\n.reg .pred done;\nwait:\nmbarrier.try_wait.parity.shared.b64 done, [%0], 0;\n@!done bra wait;\n}\n" ::"r"(
                     bar) : "memory");
  } else {
    uint4 v[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) v[j] = __ldcs(reinterpret_cast<const uint4*>(src + (k0 + 2 * j) * kRowBytes) + c);
#pragma unroll
    for (int j = 0; j < 16; ++j) *reinterpret_cast<uint4*>(tile + (k0 + 2 * j) * kStride + 16 * c) = v[j];
  }
  __syncwarp();
  // Every staged byte feeds the output (lane l folds the words of row l), so no copy is dead.
  uint32_t x = 0;
  for (int w = 0; w < kRowBytes / 4; ++w) x ^= reinterpret_cast<const uint32_t*>(tile + lane * kStride)[(w + lane) % 64];
  out[first + lane] = x;
}

template <Staging kStaging, int kStride>
void time_staging(const uint8_t* in, uint32_t* out, const char* name) {
  const int shared_bytes = kWarps * 32 * kStride;
  cudaFuncSetAttribute(stage_rows<kStaging, kStride>, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes);
  const unsigned blocks = kRows / 32 / kWarps;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < 3; ++i) stage_rows<kStaging, kStride><<<blocks, kWarps * 32, shared_bytes>>>(in, out);
  cudaEventRecord(start);
  constexpr int kLaunches = 20;
  for (int i = 0; i < kLaunches; ++i) stage_rows<kStaging, kStride><<<blocks, kWarps * 32, shared_bytes>>>(in, out);
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  std::printf("%-26s rows %3d bytes apart: %.4f ms a launch (%s)\n", name, kStride, ms / kLaunches,
              cudaGetErrorString(cudaGetLastError()));
}

}  // namespace

int main() {
  uint8_t* in;
  uint32_t* out;
  if (cudaMalloc(&in, size_t{kRows} * kRowBytes) != cudaSuccess || cudaMalloc(&out, size_t{kRows} * 4) != cudaSuccess) {
    std::fprintf(stderr, "staging_probe: no GPU memory (%s)\n", cudaGetErrorString(cudaGetLastError()));
    return 2;
  }
  cudaMemset(in, 1, size_t{kRows} * kRowBytes);
  time_staging<Staging::kCpAsync16, 256>(in, out, "cp.async 16 B");
  time_staging<Staging::kCpAsync16, 272>(in, out, "cp.async 16 B");
  time_staging<Staging::kCpAsync16, 288>(in, out, "cp.async 16 B");
  time_staging<Staging::kCpAsync16Swizzled, 256>(in, out, "cp.async 16 B, swizzled");
  time_staging<Staging::kBulkRow, 256>(in, out, "cp.async.bulk 256 B");
  time_staging<Staging::kBulkRow, 272>(in, out, "cp.async.bulk 256 B");
  time_staging<Staging::kLoadStore16, 256>(in, out, "ld.global + st.shared 16 B");
  time_staging<Staging::kLoadStore16, 272>(in, out, "ld.global + st.shared 16 B");
  return 0;
}
