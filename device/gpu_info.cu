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

KernelRecipe kernel_recipe(const ref::Recipe& r) {
  KernelRecipe k;
  k.key_rounding = r.key_rounding;
  k.query_rounding = r.query_rounding;
  k.key_norm = r.key_norm;
  k.rope_pairing = r.rope.pairing;
  k.rope_placement = r.rope.placement;
  k.rope_fma = r.rope.fma;
  k.hadamard = r.hadamard;
  k.key_quant = r.key_quant;
  k.query_quant = r.query_quant;
  k.weights = r.weights;
  k.weights_fold = r.weights_fold;
  return k;
}

}  // namespace dsaf::dev
