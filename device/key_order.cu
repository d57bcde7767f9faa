// File: key_order.cu — the key kernel's processing order (api.h KeyStoreOrder): the
// batch's token indices radix-sorted by position with CUB, then each token's sequence
// gathered into that order. Sorting is CUB's (stable LSD radix sort); the key bits sorted
// are those of the largest position the RoPE table has, so a 64K-row table costs two
// 8-bit passes, not four.
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <climits>
#include <string>

#include "device/api.h"
#include "device/launch.h"

namespace dsaf::dev {
namespace {

__global__ void iota_kernel(int32_t* out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = i;
}

__global__ void gather_kernel(const int32_t* __restrict__ values, const int32_t* __restrict__ index, int32_t* out,
                              int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = values[index[i]];
}

int key_bits(int rope_positions) {  // bits of the largest position, rope_positions - 1
  int bits = 1;
  while (bits < 31 && (rope_positions - 1) >> bits != 0) ++bits;
  return bits;
}

int checked_count(int64_t num_tokens) {
  if (num_tokens < 1 || num_tokens > INT_MAX) {
    throw_bad_input("key_store order: num_tokens must be in [1, 2^31), got " + std::to_string(num_tokens));
  }
  return static_cast<int>(num_tokens);
}

}  // namespace

size_t key_store_order_scratch_bytes(int64_t num_tokens) {
  const int n = checked_count(num_tokens);
  size_t bytes = 0;
  check_cuda(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr), n),
             "key_store order: scratch size");
  return bytes;
}

void build_key_store_order(const int32_t* positions, const int32_t* seq, int64_t num_tokens, int rope_positions,
                           const KeyStoreOrder& order, void* scratch, size_t scratch_bytes) {
  const int n = checked_count(num_tokens);
  if (rope_positions < 1) throw_bad_input("key_store order: rope_positions must be positive");
  if (scratch_bytes < key_store_order_scratch_bytes(num_tokens)) {
    throw_bad_input("key_store order: scratch smaller than key_store_order_scratch_bytes");
  }
  // Positions are non-negative in the table's range: their low bits order them. The sort's
  // values are the token indices, which order.seq holds until the sequences replace them.
  constexpr int kThreads = 256;
  const int blocks = std::min((n + kThreads - 1) / kThreads, 4096);
  iota_kernel<<<blocks, kThreads>>>(order.seq, n);
  check_cuda(cudaGetLastError(), "key_store order: iota launch");
  size_t bytes = scratch_bytes;
  check_cuda(cub::DeviceRadixSort::SortPairs(scratch, bytes, positions, order.positions, order.seq, order.tokens, n,
                                             0, key_bits(rope_positions)),
             "key_store order: radix sort");
  gather_kernel<<<blocks, kThreads>>>(seq, order.tokens, order.seq, n);
  check_cuda(cudaGetLastError(), "key_store order: gather launch");
}

}  // namespace dsaf::dev
