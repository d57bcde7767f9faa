// File: launch.h
// Host-side launch helpers shared by the device launchers: argument checks, CUDA error
// reporting, and the one runtime -> compile-time dispatch on the storage format.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>

#include "device/api.h"
#include "reference/error.h"

namespace dsaf::dev {

inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(ErrorKind::kEnvironment, std::string(what) + ": " + cudaGetErrorName(status) + " (" +
                                             cudaGetErrorString(status) + ")");
  }
}

inline void check_launch_args(const ref::QuantSpec& q, int page_size, const char* kernel) {
  const std::string name(kernel);
  if (q.format == ref::StorageFormat::kNone) throw_bad_input(name + ": storage format 'none' has no kernel");
  if (q.format == ref::StorageFormat::kFp8E4m3fn && q.block != 128) throw_bad_input(name + ": fp8 block must be 128");
  if ((q.format == ref::StorageFormat::kFp4E2m1 || q.format == ref::StorageFormat::kFp4SimulatedBf16) &&
      (q.block != 32 || q.pow2 == ref::ScalePow2::kNone)) {
    throw_bad_input(name + ": fp4 needs blocks of 32 and a power-of-two scale rule");
  }
  if (page_size < 1 || page_size > 256 || (page_size & (page_size - 1)) != 0) {
    throw_bad_input(name + ": page size must be a power of two in [1, 256]");
  }
}

// Blocks of `kernel` (threads per block, dynamic shared memory bytes) resident on the
// current device at once, at least 1, after opting the kernel in to its shared memory.
// Worked out once per kernel, device, block size and shared memory, and kept: the
// attribute call and the occupancy query are host work inside every launch, and so inside
// every timed call of an entry point, whose idle device waits for its first launch to be
// queued. A process may switch devices: the device is part of the key. A device reset
// (cudaDeviceReset) clears the shared-memory attribute and not this record: launches past
// 48 KB of dynamic shared memory would then fail with a CUDA error (nothing here resets).
template <class Kernel>
int resident_blocks(Kernel kernel, int threads, int shared_bytes, const char* name) {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  using Key = std::tuple<const void*, int, int, int>;
  static std::mutex mutex;
  static std::map<Key, int> known;  // under mutex
  const Key key{reinterpret_cast<const void*>(kernel), device, threads, shared_bytes};
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto it = known.find(key);
    if (it != known.end()) return it->second;
  }
  const std::string what(name);
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes),
             (what + " shared memory").c_str());
  int sms = 0, per_sm = 0;
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count");
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, shared_bytes),
             (what + " occupancy").c_str());
  const int blocks = sms * per_sm > 1 ? sms * per_sm : 1;
  const std::lock_guard<std::mutex> lock(mutex);
  known.emplace(key, blocks);
  return blocks;
}

// Calls f(std::integral_constant<int, L>{}) for a lane-group width L in {1, 2, 4, 8}
// (api.h lanes_per_head; the launchers resolve kAutoLanesPerHead before calling this).
// Wider groups (16, 32 lanes per head) measured slower on every recipe on the H200
// (bench/results/LOG.md) and are not compiled.
template <class F>
void dispatch_lanes(int lanes_per_head, const char* kernel, F f) {
  switch (lanes_per_head) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 8: return f(std::integral_constant<int, 8>{});
    default: break;
  }
  throw_bad_input(std::string(kernel) + ": lanes per head must be 1, 2, 4 or 8");
}

// Calls f(std::integral_constant<StorageFormat, F>{}) for the runtime format.
template <class F>
void dispatch_format(ref::StorageFormat format, F f) {
  using ref::StorageFormat;
  switch (format) {
    case StorageFormat::kFp32: return f(std::integral_constant<StorageFormat, StorageFormat::kFp32>{});
    case StorageFormat::kBf16: return f(std::integral_constant<StorageFormat, StorageFormat::kBf16>{});
    case StorageFormat::kFp8E4m3fn: return f(std::integral_constant<StorageFormat, StorageFormat::kFp8E4m3fn>{});
    case StorageFormat::kFp4E2m1: return f(std::integral_constant<StorageFormat, StorageFormat::kFp4E2m1>{});
    case StorageFormat::kFp4SimulatedBf16:
      return f(std::integral_constant<StorageFormat, StorageFormat::kFp4SimulatedBf16>{});
    case StorageFormat::kNone: break;
  }
  throw_bad_input("no kernel for this storage format");
}

}  // namespace dsaf::dev
