// File: gpu_info.cu — query_gpu(), copy_bandwidth_gbps() and compute_peaks() (api.h):
// what the CUDA runtime has, and the roofline: the copy bandwidth and the arithmetic peaks.
#include <cuda_runtime.h>

#include <algorithm>

#include "device/api.h"
#include "device/launch.h"

namespace dsaf::dev {

GpuInfo query_gpu() {
  GpuInfo info;
  info.built = true;
  const cudaError_t status = cudaGetDeviceCount(&info.device_count);
  if (status != cudaSuccess) {
    info.device_count = 0;
    info.error = std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
    return info;
  }
  if (info.device_count > 0) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
      info.name = prop.name;
      info.sm_major = prop.major;
      info.sm_minor = prop.minor;
    }
  }
  return info;
}

double copy_bandwidth_gbps() {
  if (query_gpu().device_count == 0) throw Error(ErrorKind::kEnvironment, "copy bandwidth: no CUDA device");
  // 2 GiB each way: far past the 50 MB L2, so every byte crosses HBM once read, once
  // written. The median of 7 copies after one to warm up.
  constexpr size_t kBytes = size_t{1} << 31;
  constexpr int kRuns = 7;
  void* from = nullptr;
  void* to = nullptr;
  check_cuda(cudaMalloc(&from, kBytes), "copy bandwidth: cudaMalloc");
  if (cudaMalloc(&to, kBytes) != cudaSuccess) {
    cudaFree(from);
    throw Error(ErrorKind::kEnvironment, "copy bandwidth: cudaMalloc failed");
  }
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  float ms[kRuns + 1] = {};
  cudaError_t status = cudaMemset(from, 1, kBytes);
  for (int rep = 0; rep <= kRuns && status == cudaSuccess; ++rep) {
    cudaEventRecord(start, 0);
    status = cudaMemcpyAsync(to, from, kBytes, cudaMemcpyDeviceToDevice, 0);
    cudaEventRecord(stop, 0);
    cudaEventSynchronize(stop);
    cudaEventElapsedTime(&ms[rep], start, stop);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(from);
  cudaFree(to);
  check_cuda(status, "copy bandwidth: cudaMemcpy");
  std::sort(ms + 1, ms + kRuns + 1);
  return 2.0 * static_cast<double>(kBytes) / (static_cast<double>(ms[1 + kRuns / 2]) * 1e6);
}

ComputePeaks compute_peaks() {
  if (query_gpu().device_count == 0) throw Error(ErrorKind::kEnvironment, "compute peaks: no CUDA device");
  int major = 0, sms = 0, clock_khz = 0;
  check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), "compute capability");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SM count");
  check_cuda(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0), "SM clock");
  ComputePeaks p;
  p.sms = sms;
  p.clock_ghz = clock_khz * 1e-6;
  if (major == 9) {
    const double per_clock = sms * p.clock_ghz * 1e9 / 1e12;  // TFLOP/s per flop per SM and clock
    p.tensor_fp8_tflops = 8192 * per_clock;
    p.tensor_bf16_tflops = 4096 * per_clock;
    p.fp32_tflops = 256 * per_clock;
  }
  return p;
}

}  // namespace dsaf::dev
