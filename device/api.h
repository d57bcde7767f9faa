// File: api.h
// Host-side declarations of device/: compiles with g++ and includes no CUDA header,
// so the oracle and the CLI build without nvcc (they then report "device: not built").
// Kernels receive the reference's Recipe (argument structs and enums only).
#pragma once

#include <string>

#include "reference/recipe.h"

namespace dsaf::dev {

// What the CUDA runtime sees. Without a CUDA build: built = false.
struct GpuInfo {
  bool built = false;       // dsaf_device was compiled
  int device_count = 0;     // cudaGetDeviceCount (0 on error)
  std::string name;         // device 0
  int sm_major = 0;
  int sm_minor = 0;
  std::string error;        // why device_count is 0, if the runtime said
};

GpuInfo query_gpu();

}  // namespace dsaf::dev
