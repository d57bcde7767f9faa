// File: measure_rsqrt_sm90.cu
// Measures the GPU's rsqrtf() (MUFU.RSQ plus the compiler's special-case code, as nvcc
// emits it without --use_fast_math) against the correctly rounded __frsqrt_rn, for the
// reference's sm_90 rsqrt model (reference/numeric/rsqrt.h, docs/numerics.md §6.4):
//  1. deltas[i] = bits(rsqrtf(x_i)) - bits(__frsqrt_rn(x_i)) for the 2^24 fp32 x_i in [1, 4)
//     (x_i = bits 0x3F800000 + i), written as int8 to argv[1];
//  2. periodicity: rsqrtf(x_i * 4^k) == rsqrtf(x_i) * 2^-k for every i and every k in
//     [-75, 63] whose scaled input is exact (this reaches fp32 subnormals), counted per k;
//  3. special values (+-0, +-inf, NaN, negatives, subnormals) printed for the model.
// Usage: measure_rsqrt_sm90 DELTAS.bin > stats.json
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#define CHECK(expr)                                                                  \
  do {                                                                               \
    cudaError_t status_ = (expr);                                                    \
    if (status_ != cudaSuccess) {                                                    \
      std::fprintf(stderr, "%s: %s\n", #expr, cudaGetErrorString(status_));          \
      return 2;                                                                      \
    }                                                                                \
  } while (0)

namespace {

constexpr uint32_t kCount = 1u << 24;
constexpr int kMinK = -75;
constexpr int kMaxK = 63;

__global__ void deltas_kernel(int8_t* deltas, uint32_t* histogram) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= kCount) return;
  const float x = __uint_as_float(0x3F800000u + i);
  const int delta = static_cast<int>(__float_as_uint(rsqrtf(x))) -
                    static_cast<int>(__float_as_uint(__frsqrt_rn(x)));
  deltas[i] = static_cast<int8_t>(delta);
  atomicAdd(&histogram[min(max(delta + 8, 0), 16)], 1u);
}

__global__ void periodicity_kernel(uint32_t* violations, uint32_t* checked) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= kCount) return;
  const float x = __uint_as_float(0x3F800000u + i);
  const float base = rsqrtf(x);
  for (int k = kMinK; k <= kMaxK; ++k) {
    const float scaled = ldexpf(x, 2 * k);
    if (ldexpf(scaled, -2 * k) != x) continue;  // scaling was not exact (deep subnormal)
    atomicAdd(&checked[k - kMinK], 1u);
    if (__float_as_uint(rsqrtf(scaled)) != __float_as_uint(ldexpf(base, -k))) {
      atomicAdd(&violations[k - kMinK], 1u);
    }
  }
}

__global__ void specials_kernel(const float* in, float* out, int n) {
  const int i = threadIdx.x;
  if (i < n) out[i] = rsqrtf(in[i]);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DELTAS.bin\n", argv[0]);
    return 2;
  }
  int8_t* d_deltas;
  uint32_t *d_hist, *d_viol, *d_checked;
  constexpr int kKs = kMaxK - kMinK + 1;
  CHECK(cudaMalloc(&d_deltas, kCount));
  CHECK(cudaMalloc(&d_hist, 17 * sizeof(uint32_t)));
  CHECK(cudaMalloc(&d_viol, kKs * sizeof(uint32_t)));
  CHECK(cudaMalloc(&d_checked, kKs * sizeof(uint32_t)));
  CHECK(cudaMemset(d_hist, 0, 17 * sizeof(uint32_t)));
  CHECK(cudaMemset(d_viol, 0, kKs * sizeof(uint32_t)));
  CHECK(cudaMemset(d_checked, 0, kKs * sizeof(uint32_t)));
  deltas_kernel<<<kCount / 256, 256>>>(d_deltas, d_hist);
  CHECK(cudaGetLastError());
  periodicity_kernel<<<kCount / 256, 256>>>(d_viol, d_checked);
  CHECK(cudaGetLastError());
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -1.0f, 0x1p-149f,
                            0x1p-140f, 3.0f * 0x1p-130f, 0x1p-126f, 0x1.fffffep127f};
  const int n_specials = sizeof(specials) / sizeof(specials[0]);
  float *d_in, *d_out;
  CHECK(cudaMalloc(&d_in, sizeof(specials)));
  CHECK(cudaMalloc(&d_out, sizeof(specials)));
  CHECK(cudaMemcpy(d_in, specials, sizeof(specials), cudaMemcpyHostToDevice));
  specials_kernel<<<1, 32>>>(d_in, d_out, n_specials);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());

  std::vector<int8_t> deltas(kCount);
  uint32_t hist[17], viol[kKs], checked[kKs];
  float results[sizeof(specials) / sizeof(float)];
  CHECK(cudaMemcpy(deltas.data(), d_deltas, kCount, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hist, d_hist, sizeof hist, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(viol, d_viol, sizeof viol, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(checked, d_checked, sizeof checked, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(results, d_out, sizeof results, cudaMemcpyDeviceToHost));
  FILE* f = std::fopen(argv[1], "wb");
  if (f == nullptr || std::fwrite(deltas.data(), 1, kCount, f) != kCount) return 2;
  std::fclose(f);

  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("{\n  \"device\": \"%s\", \"sm\": \"%d.%d\",\n", prop.name, prop.major, prop.minor);
  std::printf("  \"inputs\": %u,\n  \"delta_histogram\": {", kCount);
  bool first = true;
  for (int d = 0; d < 17; ++d) {
    if (hist[d] == 0) continue;
    std::printf("%s\"%d\": %u", first ? "" : ", ", d - 8, hist[d]);
    first = false;
  }
  uint32_t total_viol = 0, total_checked = 0;
  for (int k = 0; k < kKs; ++k) {
    total_viol += viol[k];
    total_checked += checked[k];
  }
  std::printf("},\n  \"periodicity\": {\"k_range\": [%d, %d], \"checked\": %u, \"violations\": %u, "
              "\"violations_by_k\": {", kMinK, kMaxK, total_checked, total_viol);
  first = true;
  for (int k = 0; k < kKs; ++k) {
    if (viol[k] == 0) continue;
    std::printf("%s\"%d\": %u", first ? "" : ", ", k + kMinK, viol[k]);
    first = false;
  }
  std::printf("}},\n  \"specials\": [");
  for (int i = 0; i < n_specials; ++i) {
    uint32_t in_bits, out_bits;
    std::memcpy(&in_bits, &specials[i], 4);
    std::memcpy(&out_bits, &results[i], 4);
    std::printf("%s[\"0x%08x\", \"0x%08x\"]", i ? ", " : "", in_bits, out_bits);
  }
  std::printf("]\n}\n");
  return 0;
}
