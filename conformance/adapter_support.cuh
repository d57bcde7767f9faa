// File: adapter_support.cuh
// What every conformance adapter (conformance/*.cu) shares: the error text of the ABI,
// device scratch, the index and table rearrangements between our ABI's arguments
// (device/kernel_abi.h) and an upstream kernel's, and a PDL launch. Adapters include the
// ABI header and the upstream sources only: no dsa-fidelity arithmetic (the reference
// and our kernels are what they are checked against), and nothing here computes a value
// the cache stores — the glue kernels move and index, never round.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "device/kernel_abi.h"

namespace dsaf::conformance {

// StorageFormat values of the ABI (kernel_abi.h: numeric values of dsaf::ref's enums).
constexpr int kFormatBf16 = 2;
constexpr int kFormatFp8E4m3fn = 3;
constexpr int kFormatFp4E2m1 = 4;

inline std::string& error_text() {
  static thread_local std::string text;
  return text;
}
inline const char* last_error() { return error_text().c_str(); }
inline int fail(std::string message) {
  error_text() = std::move(message);
  return 1;
}
inline int check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return 0;
  return fail(std::string(what) + ": " + cudaGetErrorString(status));
}

// A device buffer that grows to the largest size asked of it and lives as long as the
// plug-in (verify calls an adapter many times; reallocating per call would dominate).
template <typename T>
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { cudaFree(data_); }
  // Null (with the error text set) when the allocation fails.
  T* get(size_t count) {
    if (count <= size_) return data_;
    cudaFree(data_);
    data_ = nullptr;
    size_ = 0;
    if (check(cudaMalloc(&data_, count * sizeof(T)), "cudaMalloc") != 0) return nullptr;
    size_ = count;
    return data_;
  }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

// The flat cache slot of each token, as upstream kernels take it (out_loc, out_cache_loc):
// page_tables[seq[t] * stride + positions[t] / P] * P + positions[t] % P — the slot
// kernel_abi.h defines for the key store — plus `pages_before` whole pages, for a kernel
// whose cache base the adapter moves down by that many pages (one that reserves slot 0).
static __global__ void token_slots_kernel(const int32_t* positions, const int32_t* seq, const int32_t* page_tables,
                                   int64_t stride, int32_t page_size, int64_t num_tokens, int64_t* slots,
                                   int64_t pages_before = 0) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= num_tokens) return;
  const int32_t pos = positions[t];
  const int64_t page = page_tables[static_cast<int64_t>(seq[t]) * stride + pos / page_size];
  slots[t] = (page + pages_before) * page_size + pos % page_size;
}

// RoPE tables in the two layouts upstream kernels read, from ours ([positions][32] cos
// and sin): `kInterleaved` is freqs_cis as torch.view_as_real gives it, (cos_i, sin_i)
// pairs; otherwise cos_sin_cache, [cos_0..cos_31 | sin_0..sin_31].
template <bool kInterleaved>
__global__ void rope_table_kernel(const float* cos, const float* sin, int64_t positions, float* table) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= positions * 32) return;
  const int64_t p = i / 32;
  const int64_t j = i % 32;
  if (kInterleaved) {
    table[p * 64 + 2 * j] = cos[i];
    table[p * 64 + 2 * j + 1] = sin[i];
  } else {
    table[p * 64 + j] = cos[i];
    table[p * 64 + 32 + j] = sin[i];
  }
}

// fp32 values as bf16 bits, for upstream kernels that take a parameter in bf16 (head
// weights): a value bf16 does not hold exactly raises *inexact rather than being rounded
// (glue moves values; verify draws bf16-exact ones for kernels that declare
// key_caps.norm_params_bf16).
static __global__ void bf16_bits_kernel(const float* in, int64_t n, uint16_t* out, int* inexact) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint32_t bits = __float_as_uint(in[i]);
  if ((bits & 0xFFFFu) != 0) atomicOr(inexact, 1);
  out[i] = static_cast<uint16_t>(bits >> 16);
}

// The index tables upstream top-K kernels take beside the scores, filled once per growth
// (their contents do not depend on the scores): kIdentity, table[r * stride + j] = j (an
// identity page table: the kernel's fused page-table transform then maps every score
// index to itself); kZeros, every entry 0 (ragged output offsets).
enum class RowFill { kIdentity, kZeros };

static __global__ void identity_rows_kernel(int32_t* table, int64_t rows, int64_t stride) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * stride) table[i] = static_cast<int32_t>(i % stride);
}

template <RowFill kFill>
class RowTable {
 public:
  // A table of at least `rows` x `stride` entries (its stride is stride(), which may be
  // wider than asked), or null with the error text set.
  const int32_t* get(int64_t rows, int64_t stride) {
    if (rows <= rows_ && stride <= stride_) return data_.get(0);
    const int64_t r = rows > rows_ ? rows : rows_;
    const int64_t s = stride > stride_ ? stride : stride_;
    int32_t* d = data_.get(static_cast<size_t>(r * s));
    if (d == nullptr) return nullptr;
    if (kFill == RowFill::kZeros) {
      if (check(cudaMemset(d, 0, static_cast<size_t>(r * s) * sizeof(int32_t)), "cudaMemset") != 0) return nullptr;
    } else {
      constexpr unsigned kThreads = 256;
      identity_rows_kernel<<<static_cast<unsigned>((r * s + kThreads - 1) / kThreads), kThreads>>>(d, r, s);
      if (check(cudaGetLastError(), "identity table") != 0) return nullptr;
    }
    rows_ = r;
    stride_ = s;
    return d;
  }
  int64_t stride() const { return stride_; }

 private:
  Scratch<int32_t> data_;
  int64_t rows_ = 0, stride_ = 0;
};

// `n` head weights as bf16 bits in `out` (bf16_bits_kernel); non-zero, with the error text
// set, when one is not a bf16 value or a CUDA call fails.
static inline int head_weights_bf16(const float* weights, int64_t n, uint16_t* out, const char* adapter) {
  static Scratch<int> flag;
  int* inexact = flag.get(1);
  if (inexact == nullptr || check(cudaMemset(inexact, 0, sizeof(int)), "cudaMemset") != 0) return 1;
  constexpr unsigned kThreads = 256;
  bf16_bits_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads>>>(weights, n, out, inexact);
  int host = 0;
  if (check(cudaMemcpy(&host, inexact, sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy") != 0) return 1;
  if (host != 0) return fail(std::string(adapter) + ": the head weights (wproj) must be bf16 values");
  return 0;
}

// Page sizes of the ABI (kernel_abi.h key_caps.page_sizes): 2^0 .. 2^8 tokens.
constexpr int kPageBitsCount = 9;

// log2 of the page size when it is one the ABI allows (a power of two, 1..256), else -1.
inline int page_bits_of(int32_t page_size) {
  for (int bits = 0; bits < kPageBitsCount; ++bits) {
    if (page_size == (1 << bits)) return bits;
  }
  return -1;
}

// The instantiations of a kernel template over its page bits, indexed by them:
// table[b] = Select::template at<b>(), for b = 0..8 (upstream kernels take the page size
// as a template parameter).
template <typename Select, int... kBits>
constexpr auto page_bits_table(std::integer_sequence<int, kBits...>) {
  return std::array{Select::template at<kBits>()...};
}
template <typename Select>
constexpr auto page_bits_table() {
  return page_bits_table<Select>(std::make_integer_sequence<int, kPageBitsCount>{});
}

inline unsigned blocks_of(int64_t n, unsigned threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

// Launches `kernel(params)` on the default stream with programmatic dependent launch on,
// as SGLang's host::LaunchKernel(...).enable_pdl(true) does on sm_90 (the kernels'
// griddepcontrol instructions then have a primary to wait for; without the attribute
// they are no-ops, so this matters for timing only).
template <typename Params>
int launch_pdl(void (*kernel)(Params), dim3 grid, dim3 block, const Params& params) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.stream = nullptr;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return check(cudaLaunchKernelEx(&config, kernel, params), "cudaLaunchKernelEx");
}

// The table of a key-store adapter: what its kernel takes (`caps`; every ABI page size
// unless `page_sizes` says otherwise) and its one entry point.
inline dsaf_kernel_v2 key_store_table(const char* name, dsaf_key_caps_v2 caps,
                                      int (*key_store)(const dsaf_key_store_args_v2*)) {
  dsaf_kernel_v2 t{};
  t.abi_version = DSAF_KERNEL_ABI_VERSION_2;
  t.name = name;
  if (caps.page_sizes == 0) caps.page_sizes = (1u << kPageBitsCount) - 1;
  t.key_caps = caps;
  t.key_store = key_store;
  t.last_error = &last_error;
  return t;
}

// The table of a top-K adapter. Every upstream top-K adapted here emits its selection in
// atomic (arrival) order and keeps the keys tied with the K-th score in arrival order too,
// writing -1 past a short row's length (each adapter's comment cites the lines): the
// set-ties contract with -1 padding. topk_k: the one K it takes, or 0 for any of 1..2048.
inline dsaf_kernel_v2 set_ties_topk_table(const char* name, int32_t topk_k, int (*topk)(const dsaf_topk_args_v1*)) {
  dsaf_kernel_v2 t{};
  t.abi_version = DSAF_KERNEL_ABI_VERSION_2;
  t.name = name;
  t.topk_contract = DSAF_TOPK_SET_TIES;
  t.topk_padding = DSAF_TOPK_PAD_MINUS_ONE;
  t.topk_k = topk_k;
  t.topk = topk;
  t.last_error = &last_error;
  return t;
}

// A recipe field by path (kernel_abi.h), as an int.
inline int field_int(const dsaf_recipe_v2* recipe, const char* path, int fallback) {
  return static_cast<int>(dsaf_recipe_field(recipe, path, fallback));
}

}  // namespace dsaf::conformance

// Defines the plug-in's one exported symbol (kernel_abi.h) over the table `make_table()`
// builds (once, on first use). Every adapter ends with it.
#define DSAF_ADAPTER_EXPORT(make_table)                                                               \
  extern "C" __attribute__((visibility("default"))) const dsaf_kernel_v2* dsaf_kernel_get(uint32_t v) { \
    static const dsaf_kernel_v2 table = make_table();                                                 \
    return v == DSAF_KERNEL_ABI_VERSION_2 ? &table : nullptr;                                         \
  }
