// File: gpu_timing.h — what every GPU benchmark needs: error checks, a median of CUDA
// event timings, the device-to-device copy bandwidth all fractions are taken of, device
// arrays and the JSON write. Header-only; for bench/*.cu.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "device/api.h"

#define BENCH_CHECK(expr)                                                                          \
  do {                                                                                             \
    cudaError_t s_ = (expr);                                                                       \
    if (s_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(s_));   \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)

namespace dsaf::bench {

// Median of `runs` timings (ms) of f after `warmups` untimed calls, with CUDA events on
// stream 0. calls > 1 times that many back-to-back calls per event pair and divides: the
// launches queue up, so the host's launch overhead (a few us) is not counted in kernel time.
template <class F>
float median_ms(F f, int runs = 21, int calls = 1, int warmups = 3) {
  cudaEvent_t start, stop;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < warmups; ++i) f();
  std::vector<float> t(runs);
  for (float& ms : t) {
    BENCH_CHECK(cudaEventRecord(start));
    for (int c = 0; c < calls; ++c) f();
    BENCH_CHECK(cudaEventRecord(stop));
    BENCH_CHECK(cudaEventSynchronize(stop));
    BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
    ms /= static_cast<float>(calls);
  }
  BENCH_CHECK(cudaEventDestroy(start));
  BENCH_CHECK(cudaEventDestroy(stop));
  std::sort(t.begin(), t.end());
  return t[runs / 2];
}

// Measured device-to-device copy bandwidth (GB/s, bytes read + written): device/api.h's
// copy_bandwidth_gbps, the roofline of every fraction the benchmarks and studies report.
inline double copy_bandwidth_gbps() { return dev::copy_bandwidth_gbps(); }

// A device copy of a host vector, freed on scope exit.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count) { BENCH_CHECK(cudaMalloc(&ptr_, std::max<size_t>(1, count) * sizeof(T))); }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    BENCH_CHECK(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return ptr_; }

 private:
  T* ptr_ = nullptr;
};

inline bool write_file(const char* path, const std::string& text) {
  FILE* f = std::fopen(path, "w");
  if (f == nullptr) return false;
  const bool ok = std::fputs(text.c_str(), f) >= 0;
  return std::fclose(f) == 0 && ok;
}

}  // namespace dsaf::bench
