// File: gpu_test_support.h
// GPU test helpers: skip without a GPU (CTest label `gpu`; CI reports SKIPPED), RAII
// device buffers, and random page layouts shared by the device tests.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "device/api.h"
#include "reference/numeric/minifloat.h"
#include "reference/recipe.h"

#define DSAF_REQUIRE_GPU()                                                           \
  do {                                                                               \
    const ::dsaf::dev::GpuInfo gpu_ = ::dsaf::dev::query_gpu();                      \
    if (gpu_.device_count == 0) GTEST_SKIP() << "no GPU: " << gpu_.error;            \
  } while (0)

namespace dsaf::test {

inline void cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

// A device copy of a host vector (and back).
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count) : count_(count) {
    cuda_ok(cudaMalloc(&ptr_, std::max<size_t>(1, count) * sizeof(T)), "cudaMalloc");
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    cuda_ok(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return ptr_; }
  void upload(const std::vector<T>& host) {  // as many elements as the buffer holds
    if (host.size() != count_) throw std::logic_error("DeviceBuffer::upload: size mismatch");
    cuda_ok(cudaMemcpy(ptr_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    cuda_ok(cudaDeviceSynchronize(), "kernel");
    cuda_ok(cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t count_;
};

// A batch of sequences in a paged cache: each sequence has its own page table drawn from
// a shuffled pool with spare pages (gaps), so no page is shared and some stay unused.
struct PagedBatch {
  int page_size = 64;
  std::vector<int64_t> seq_lens;
  int64_t pages_per_seq = 0;               // page-table stride
  std::vector<int32_t> page_tables;        // [seqs][pages_per_seq]
  int64_t num_pages = 0;
  std::vector<int32_t> token_seq, token_pos;  // one entry per token, tokens in order
};

// Sequence lengths are multiples of len_multiple (in [len_multiple, max_len]).
inline PagedBatch random_batch(std::mt19937& rng, int page_size, int max_seqs, int64_t max_len,
                               int64_t len_multiple = 1) {
  PagedBatch b;
  b.page_size = page_size;
  const int seqs = std::uniform_int_distribution<int>(1, max_seqs)(rng);
  for (int s = 0; s < seqs; ++s) {
    b.seq_lens.push_back(len_multiple * std::uniform_int_distribution<int64_t>(1, max_len / len_multiple)(rng));
  }
  const int64_t longest = *std::max_element(b.seq_lens.begin(), b.seq_lens.end());
  b.pages_per_seq = (longest + page_size - 1) / page_size;
  b.num_pages = b.pages_per_seq * seqs + std::uniform_int_distribution<int>(0, 3)(rng);
  std::vector<int32_t> pool(b.num_pages);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  b.page_tables.assign(pool.begin(), pool.begin() + b.pages_per_seq * seqs);
  for (int s = 0; s < seqs; ++s) {
    for (int64_t p = 0; p < b.seq_lens[s]; ++p) {
      b.token_seq.push_back(s);
      b.token_pos.push_back(static_cast<int32_t>(p));
    }
  }
  return b;
}

inline std::vector<int32_t> table_of(const PagedBatch& b, int seq) {
  return {b.page_tables.begin() + seq * b.pages_per_seq, b.page_tables.begin() + (seq + 1) * b.pages_per_seq};
}

// One row of 128 key or query inputs; the kind is drawn per row so every batch mixes them:
// zeros, tiny (1e-30), huge (1e15), a single spike, outlier channels (80x), Gaussian.
inline void random_row(std::mt19937& rng, float* out) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
  for (int i = 0; i < ref::kHeadDim; ++i) {
    switch (kind) {
      case 0: out[i] = 0.0f; break;                                   // all zeros
      case 1: out[i] = normal(rng) * 1e-30f; break;                   // tiny
      case 2: out[i] = normal(rng) * 1e15f; break;                    // huge
      case 3: out[i] = i == 7 ? 1000.0f : normal(rng) * 1e-3f; break;  // one spike
      case 4: case 5: out[i] = normal(rng) * (i % 29 == 3 ? 80.0f : 1.0f); break;  // outliers
      default: out[i] = normal(rng); break;
    }
  }
}

// Rounds a row to bf16 values when the batch stores bf16 input bits.
inline std::vector<uint16_t> to_bf16_bits(std::vector<float>& values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    bits[i] = ref::encode_bf16(values[i]);
    values[i] = ref::decode_bf16(bits[i]);
  }
  return bits;
}

}  // namespace dsaf::test
