// File: mbarrier.cuh
// Shared-memory barriers (mbarrier, sm_80+; the async-copy arrival and try_wait as used
// here, sm_90) for warps that hand work to each other: a barrier completes a phase when
// its expected arrivals have come, and a waiter names the phase by its parity. Arrivals
// release and waits acquire at CTA scope (the PTX defaults): what a thread accessed before
// its own arrival is ordered before the waiter's accesses, and only that thread's (one
// lane arriving after __syncwarp does not cover the others: compute-sanitizer's racecheck
// reports the other lanes' accesses as hazards), so
// every lane that wrote or read hands over with an arrival of its own.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsaf::dev {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One thread initialises; the block synchronises before anyone arrives or waits.
__device__ __forceinline__ void barrier_init(uint64_t* bar, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(arrivals) : "memory");
}

// One arrival by the calling thread.
__device__ __forceinline__ void barrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(bar)) : "memory");
}

// One arrival, made when every cp.async the calling thread issued before it has landed
// (.noinc: the arrival is one of those the barrier was initialised to expect).
__device__ __forceinline__ void barrier_arrive_after_copies(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(shared_address(bar)) : "memory");
}

// Waits until the phase of this parity has completed (phases alternate 0, 1, 0, ...; a
// waiter may not fall two phases behind, which the hand-offs here rule out).
__device__ __forceinline__ void barrier_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "again:\n"  // a label inside braces is local to them
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra again;\n"
      "}\n" ::"r"(shared_address(bar)),
      "r"(parity)
      : "memory");
}

// The register budget of the calling warpgroup (sm_90a; every warp of the warpgroup runs
// the same one): producers that only issue copies give registers back, and the warps
// that compute take them.
template <int kRegisters>
__device__ __forceinline__ void registers_release() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void registers_claim() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

}  // namespace dsaf::dev
