// File: gpu_info.cu — query_gpu() (api.h): asks the CUDA runtime what is present.
#include <cuda_runtime.h>

#include "device/api.h"

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

}  // namespace dsaf::dev
