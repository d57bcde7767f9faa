// File: async_copy.cuh
// cp.async (sm_80+): global -> shared copies that complete in the background, so a warp
// keeps its next tiles in flight while it computes on the current one, without holding
// registers for them. Completion is tracked per thread in commit groups.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsaf::dev {

// Where a copied line should sit in L2's eviction order (PTX createpolicy, sm_80+). A
// memory-bound kernel that streams one tensor through L2 while it re-reads a small one (the
// key path: 256 MB of input rows against a 16 MB RoPE table read once per sequence) keeps
// the small one resident by marking the stream evict-first and the re-read rows evict-last;
// with equal priorities the stream pushes the table out and every re-read goes to HBM.
enum class L2Priority { kNormal, kEvictFirst, kEvictLast };

template <L2Priority kPriority>
__device__ __forceinline__ uint64_t l2_policy() {
  uint64_t policy;  // not volatile: the compiler may hoist it out of a loop
  if constexpr (kPriority == L2Priority::kEvictFirst) {
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  } else {
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
  }
  return policy;
}

// Copies kBytes (4, 8 or 16) from global src to the shared-memory address dst (the 32-bit
// form a kernel can keep per lane); read == false fills zeros.
// kPriority != kNormal: 16-byte copies only.
template <int kBytes, L2Priority kPriority = L2Priority::kNormal>
__device__ __forceinline__ void copy_async(uint32_t dst, const void* src, bool read = true) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async moves 4, 8 or 16 bytes");
  static_assert(kPriority == L2Priority::kNormal || kBytes == 16, "L2 hints on 16-byte copies");
  const int src_bytes = read ? kBytes : 0;
  if constexpr (kPriority != L2Priority::kNormal) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes), "l"(l2_policy<kPriority>()));
  } else if constexpr (kBytes == 16) {  // .cg: bypass L1, the data is used once from shared memory
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src), "n"(kBytes), "r"(src_bytes));
  }
}

// The same to a generic pointer into shared memory.
template <int kBytes, L2Priority kPriority = L2Priority::kNormal>
__device__ __forceinline__ void copy_async(void* dst, const void* src, bool read = true) {
  copy_async<kBytes, kPriority>(static_cast<uint32_t>(__cvta_generic_to_shared(dst)), src, read);
}

// Closes the copies issued since the last commit into one group.
__device__ __forceinline__ void commit_async() { asm volatile("cp.async.commit_group;\n"); }

// Waits until at most kPending of this thread's groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wait_async() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending)); }

}  // namespace dsaf::dev
