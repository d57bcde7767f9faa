// File: rope_contraction_check.cu
// Runs rope_pair (rope_contraction_probe.cu) on random inputs and counts agreement with
// the three ContractedProduct choices of the reference's RopeSpec, computed on the host
// with std::fma. Prints JSON.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

extern "C" __global__ void rope_pair(const float4* in, const float4* freqs, float2* out, int n);

int main() {
  const int n = 1 << 22;
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::uniform_real_distribution<double> angle(0.0, 6.283185307179586);
  std::vector<float4> in(n), freqs(n);
  for (int i = 0; i < n; ++i) {
    in[i] = make_float4(normal(rng), normal(rng), 0, 0);
    const double a = angle(rng);
    freqs[i] = make_float4(static_cast<float>(std::cos(a)), static_cast<float>(std::sin(a)), 0, 0);
  }
  float4 *d_in, *d_freqs;
  float2* d_out;
  cudaMalloc(&d_in, n * sizeof(float4));
  cudaMalloc(&d_freqs, n * sizeof(float4));
  cudaMalloc(&d_out, n * sizeof(float2));
  cudaMemcpy(d_in, in.data(), n * sizeof(float4), cudaMemcpyHostToDevice);
  cudaMemcpy(d_freqs, freqs.data(), n * sizeof(float4), cudaMemcpyHostToDevice);
  rope_pair<<<n / 256, 256>>>(d_in, d_freqs, d_out, n);
  std::vector<float2> out(n);
  if (cudaMemcpy(out.data(), d_out, n * sizeof(float2), cudaMemcpyDeviceToHost) != cudaSuccess) return 2;
  long agree[3][2] = {};  // [none, first, second][real, imag]
  for (int i = 0; i < n; ++i) {
    const float xr = in[i].x, xi = in[i].y, c = freqs[i].x, s = freqs[i].y;
    const float real[3] = {xr * c - xi * s, std::fma(xr, c, -(xi * s)), std::fma(-xi, s, xr * c)};
    const float imag[3] = {xr * s + xi * c, std::fma(xr, s, xi * c), std::fma(xi, c, xr * s)};
    for (int m = 0; m < 3; ++m) {
      agree[m][0] += std::memcmp(&real[m], &out[i].x, 4) == 0;
      agree[m][1] += std::memcmp(&imag[m], &out[i].y, 4) == 0;
    }
  }
  std::printf("{\"cases\": %d, \"real_agree\": {\"none\": %ld, \"first\": %ld, \"second\": %ld}, "
              "\"imag_agree\": {\"none\": %ld, \"first\": %ld, \"second\": %ld}}\n",
              n, agree[0][0], agree[1][0], agree[2][0], agree[0][1], agree[1][1], agree[2][1]);
  return 0;
}
