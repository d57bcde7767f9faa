// File: flashinfer_topk.cu
// Conformance adapter (kernel_abi.h version 2) for FlashInfer's indexer top-K, from the
// pinned release (conformance/upstream.lock), called as SGLang's --dsa-topk-backend
// flashinfer calls it (srt/layers/attention/dsa/dsa_topk_backend.py: deterministic =
// SGLANG_DSA_TOPK_FLASHINFER_DETERMINISTIC, default false; tie_break 0 unless
// SGLANG_DSA_TOPK_FLASHINFER_TIE_BREAK; dsa_graph_safe = true) and compiled with
// FlashInfer's JIT flags and its vendored CCCL (conformance/CMakeLists.txt). One source,
// one entry per build, chosen by DSAF_FLASHINFER_TOPK:
//   1  flashinfer.top_k_page_table_transform on the native kernel (the decode path,
//      PAGED): the binding radix_topk_page_table_transform (data/csrc/topk.cu) calls
//      sampling::TopKPageTableTransformDispatch (data/include/flashinfer/topk.cuh), here
//      with the same arguments: page_size 1 and rows as wide as their stride (SGLang
//      passes logits.contiguous() and the page_size-1 table), hence the direct page-table
//      policy.
//   2  flashinfer.top_k_ragged_transform on the native kernel (the extend path, RAGGED):
//      the binding radix_topk_ragged_transform calls sampling::TopKRaggedTransformDispatch.
//   3  flashinfer.top_k_page_table_transform on CUB: flashinfer/topk.py sends a
//      dsa_graph_safe fp32 call to cub_topk_page_table_transform (data/csrc/cub_topk.cu,
//      cub::DeviceBatchedTopK::MaxPairs of the vendored CCCL) when
//      is_cub_page_table_transform_beneficial says so -- fewer than 128 rows of 32768
//      scores or more, FLASHINFER_TOPK_ALGO unset or "cub" -- so SGLang's long-context
//      decode runs this one. Spelled here as the binding builds it: rows through a strided
//      iterator, values a counting iterator, keys discarded, each row's output a
//      transform iterator through its page-table row (identity here), the compile-time
//      segment bound 8192 or 2^21 by max_len, the requirements of tie_break 0
//      (determinism not guaranteed, tie break unspecified, unsorted), a size query and
//      then the run in a workspace kept between calls, and the -1 tail fill after.
// With dsa_graph_safe the native dispatches run FilteredTopKUnifiedKernel
// (ShouldUseFilteredTopK returns true, VEC_SIZE 1: ComputeFilteredTopKVecSize) and no
// finalize kernel (neither deterministic nor a tie-break). The bindings' host pieces that
// need tvm-ffi (tensor checks, the torch stream) are spelled here on the default stream.
//
// Mapping: scores are our [rows][row_stride] fp32 matrix (max_len = row_stride), lengths
// our valid_lengths; the page-table transform is fed an identity page_size-1 table (row r
// is 0..row_stride-1, one row per score row, as CheckPageTableTransformArgs requires), the
// ragged offsets are zeros, so the written indices are the selected score positions.
//
// Contracts (verify's): entries past min(K, length) are -1 (length <= K writes 0..length-1
// then -1; a selection fills all K). The selection is exact and unordered. Native: keys
// above the K-th score are appended in atomic-arrival order, and the keys equal to the K-th
// score claim the last slots by an atomic countdown (collect_gt_and_nondet_eq_threshold),
// so which tied keys at the cut are kept is free: set with ties. The exact keys order -0.0
// below +0.0, a tie in the reference's sense. K is at most 2048 (FILTERED_TOPK_MAX_K; the
// dispatch returns cudaErrorNotSupported beyond); lengths must lie in [0, row_stride], as
// the kernel reads them on device. CUB: unsorted output and, under tie_break 0, no promise
// about which tied keys at the cut win: set with ties as well; K up to the row length.
#if DSAF_FLASHINFER_TOPK == 3
// As data/csrc/cub_topk.cu defines and includes them.
#define CUB_DISABLE_TOPK_UNSUPPORTED_ARCH_ASSERT
#include <cuda/__execution/determinism.h>
#include <cuda/__execution/output_ordering.h>
#include <cuda/__execution/require.h>
#include <cuda/__execution/tie_break.h>
#include <cuda/std/__execution/env.h>

#include <cub/device/device_batched_topk.cuh>
#include <cuda/argument>
#include <cuda/cmath>
#include <cuda/iterator>
#include <cuda/std/limits>
#endif

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#if DSAF_FLASHINFER_TOPK != 3
// As the binding (data/csrc/topk.cu) includes them: sampling.cuh brings math.cuh, which
// topk.cuh uses without including it.
#include <flashinfer/sampling.cuh>
#include <flashinfer/topk.cuh>
#endif

#include "conformance/adapter_support.cuh"

#if DSAF_FLASHINFER_TOPK != 1 && DSAF_FLASHINFER_TOPK != 2 && DSAF_FLASHINFER_TOPK != 3
#error "DSAF_FLASHINFER_TOPK must be 1 (page table, native), 2 (ragged, native) or 3 (page table, CUB)"
#endif

namespace {

using namespace dsaf::conformance;

#if DSAF_FLASHINFER_TOPK == 3

constexpr const char* kName = "flashinfer cub_topk_page_table_transform";
constexpr int64_t kCubMaxLen = int64_t{1} << 21;  // CUB_TOPK_MAX_LEN: DeviceBatchedTopK's segment limit

// A winning window-local index through the row's page-table row (page_bits 0 for the
// page_size-1 table: the lookup itself), as CUBPageTranslate<false>.
struct PageTranslate {
  const int32_t* page_row;
  uint32_t page_bits;
  __device__ int32_t operator()(int32_t idx) const {
    return (page_row[idx >> page_bits] << page_bits) | (idx & ((int32_t{1} << page_bits) - 1));
  }
};

// Row `row`'s writer, as CUBMakePageTableRowOut<false> with no packed-layout arguments.
struct MakeRowOut {
  int32_t* out_base;
  const int32_t* page_table;
  int64_t page_stride;
  int64_t top_k;
  __host__ __device__ auto operator()(int64_t row) const {
    return cuda::make_transform_output_iterator(out_base + row * top_k,
                                                PageTranslate{page_table + row * page_stride, 0});
  }
};

// -1 past min(length, K), as CUBFillTopKTailsKernel (one 256-thread block a row).
__global__ void __launch_bounds__(256) fill_tails_kernel(int32_t* out, const int32_t* lengths, int64_t top_k) {
  const int64_t row = blockIdx.x;
  int64_t valid = lengths[row];
  valid = valid < 0 ? 0 : (valid > top_k ? top_k : valid);
  for (int64_t col = valid + threadIdx.x; col < top_k; col += blockDim.x) out[row * top_k + col] = -1;
}

// CUBBatchedTopKDispatchBounds + CUBBatchedTopKInvoke for the deferred (per-row) lengths.
template <int64_t kBound, typename KeysIn, typename KeysOut, typename ValuesIn, typename ValuesOut,
          typename Requirements>
cudaError_t max_pairs(KeysIn keys_in, KeysOut keys_out, ValuesIn values_in, ValuesOut values_out,
                      const int32_t* lengths, int64_t num_rows, int64_t max_len, int64_t top_k,
                      Requirements requirements) {
  const auto k_arg = cuda::args::immediate{top_k, cuda::args::bounds<int64_t{1}, kBound>()};
  const auto num_segs = cuda::args::immediate{num_rows};
  constexpr int32_t kLengthsFloor = cuda::std::numeric_limits<int32_t>::min();
  const auto segment_sizes =
      cuda::args::deferred_sequence{lengths, cuda::args::bounds<kLengthsFloor, int32_t{kBound}>(),
                                    cuda::args::bounds(kLengthsFloor, static_cast<int32_t>(max_len))};
  auto env = cuda::std::execution::env{requirements, cuda::stream_ref{cudaStream_t{}}};
  size_t bytes = 0;
  if (const cudaError_t e = cub::DeviceBatchedTopK::MaxPairs(nullptr, bytes, keys_in, keys_out, values_in,
                                                             values_out, segment_sizes, k_arg, num_segs, env)) {
    return e;
  }
  static Scratch<uint8_t> workspace;  // the binding's per-device cached workspace
  uint8_t* d = workspace.get(bytes > 0 ? bytes : 1);
  if (d == nullptr) return cudaErrorMemoryAllocation;
  return cub::DeviceBatchedTopK::MaxPairs(d, bytes, keys_in, keys_out, values_in, values_out, segment_sizes, k_arg,
                                          num_segs, env);
}

int topk(const dsaf_topk_args_v1* a) {
  if (a->k < 1) return fail(std::string(kName) + ": K must be >= 1");
  if (a->rows < 0 || a->row_stride < 1 || a->row_stride > kCubMaxLen) {
    return fail(std::string(kName) + ": rows must be >= 0 and the row stride in 1..2^21 (CUB_TOPK_MAX_LEN)");
  }
  if (a->rows == 0) return 0;
  static RowTable<RowFill::kIdentity> table;  // page_size-1 pages: index j of a row is page j
  const int32_t* page_table = table.get(a->rows, a->row_stride);
  if (page_table == nullptr) return 1;
  const int64_t num_rows = a->rows, max_len = a->row_stride, top_k = a->k;
  const int64_t selection_k = top_k < max_len ? top_k : max_len;  // as CUBBatchedTopKVarLenTransform
  auto keys_in = cuda::make_strided_iterator(cuda::make_counting_iterator(a->scores), max_len);
  auto keys_out = cuda::make_constant_iterator(cuda::discard_iterator{});
  auto values_in = cuda::make_constant_iterator(cuda::make_counting_iterator(int32_t{0}));
  auto values_out = cuda::make_transform_iterator(cuda::make_counting_iterator(int64_t{0}),
                                                  MakeRowOut{a->indices, page_table, table.stride(), top_k});
  namespace exec = cuda::execution;
  const auto requirements =  // tie_break 0
      exec::require(exec::determinism::not_guaranteed, exec::tie_break::unspecified, exec::output_ordering::unsorted);
  const cudaError_t status =
      max_len <= 8192 ? max_pairs<int64_t{8192}>(keys_in, keys_out, values_in, values_out, a->valid_lengths, num_rows,
                                                 max_len, selection_k, requirements)
                      : max_pairs<kCubMaxLen>(keys_in, keys_out, values_in, values_out, a->valid_lengths, num_rows,
                                              max_len, selection_k, requirements);
  if (check(status, kName) != 0) return 1;
  fill_tails_kernel<<<static_cast<unsigned>(num_rows), 256>>>(a->indices, a->valid_lengths, top_k);
  return check(cudaGetLastError(), kName);
}

dsaf_kernel_v2 make_table() {
  return set_ties_topk_table("flashinfer " DSAF_UPSTREAM_VERSION " top_k_page_table_transform (CUB DeviceBatchedTopK)",
                             0, &topk);
}

#else  // the native kernel

namespace sampling = flashinfer::sampling;

// The multi-CTA radix path's row states: flashinfer/topk.py hands every call a zeroed
// 1 MiB buffer (_get_cache_buf "radix_topk_row_states", zero_init); FilteredTopK never
// reads it.
sampling::RadixRowState* row_states() {
  static Scratch<uint8_t> buffer;
  static bool zeroed = false;
  constexpr size_t kBytes = 1024 * 1024;
  uint8_t* d = buffer.get(kBytes);
  if (d == nullptr) return nullptr;
  if (!zeroed) {
    if (check(cudaMemset(d, 0, kBytes), "cudaMemset") != 0) return nullptr;
    zeroed = true;
  }
  return reinterpret_cast<sampling::RadixRowState*>(d);
}

constexpr bool kDeterministic = false;  // SGLANG_DSA_TOPK_FLASHINFER_DETERMINISTIC's default
constexpr auto kTieBreak = sampling::TopKTieBreak::None;  // tie_break 0
constexpr bool kDsaGraphSafe = true;

#if DSAF_FLASHINFER_TOPK == 1
constexpr const char* kName = "flashinfer top_k_page_table_transform";
#else
constexpr const char* kName = "flashinfer top_k_ragged_transform";
#endif

int topk(const dsaf_topk_args_v1* a) {
  if (a->k < 1 || static_cast<uint32_t>(a->k) > sampling::FILTERED_TOPK_MAX_K) {
    return fail(std::string(kName) + ": K must be in 1.." + std::to_string(sampling::FILTERED_TOPK_MAX_K) +
                " (FILTERED_TOPK_MAX_K, the dsa_graph_safe limit), got " + std::to_string(a->k));
  }
  if (a->rows < 0 || a->row_stride < 1 || a->row_stride > INT32_MAX) {
    return fail(std::string(kName) + ": rows must be >= 0 and the row stride in 1..2^31-1");
  }
  if (a->rows == 0) return 0;
  sampling::RadixRowState* states = row_states();
  if (states == nullptr) return 1;
  const auto num_rows = static_cast<uint32_t>(a->rows);
  const auto max_len = static_cast<uint32_t>(a->row_stride);
  // The dispatches take mutable pointers; FilteredTopK only reads the scores and lengths.
  float* scores = const_cast<float*>(a->scores);
  int32_t* lengths = const_cast<int32_t*>(a->valid_lengths);
  cudaError_t status = cudaSuccess;
#if DSAF_FLASHINFER_TOPK == 1
  static RowTable<RowFill::kIdentity> table;  // page_size-1 pages: index j of a row is page j
  const int32_t* src_page_table = table.get(a->rows, a->row_stride);
  if (src_page_table == nullptr) return 1;
  status = sampling::TopKPageTableTransformDispatch<float, int32_t>(
      scores, a->indices, src_page_table, /*src_stride=*/table.stride(), lengths, /*row_starts=*/nullptr,
      /*row_to_batch=*/nullptr, num_rows, static_cast<uint32_t>(a->k), max_len, states, kDeterministic, kTieBreak,
      /*stream=*/nullptr, kDsaGraphSafe, /*page_table_row_starts=*/nullptr,
      sampling::DirectPageTableKernelPolicy<int32_t>{});
#else
  static RowTable<RowFill::kZeros> zeros;
  const int32_t* offsets = zeros.get(a->rows, 1);
  if (offsets == nullptr) return 1;
  status = sampling::TopKRaggedTransformDispatch<float, int32_t>(
      scores, a->indices, offsets, lengths, /*row_starts=*/nullptr, num_rows, static_cast<uint32_t>(a->k), max_len,
      states, kDeterministic, kTieBreak, /*stream=*/nullptr, kDsaGraphSafe);
#endif
  if (check(status, kName) != 0) return 1;
  return check(cudaGetLastError(), kName);
}

dsaf_kernel_v2 make_table() {
#if DSAF_FLASHINFER_TOPK == 1
  constexpr const char* kTableName = "flashinfer " DSAF_UPSTREAM_VERSION " top_k_page_table_transform (FilteredTopK, dsa_graph_safe)";
#else
  constexpr const char* kTableName = "flashinfer " DSAF_UPSTREAM_VERSION " top_k_ragged_transform (FilteredTopK, dsa_graph_safe)";
#endif
  return set_ties_topk_table(kTableName, 0, &topk);  // any K of 1..2048
}

#endif

}  // namespace

DSAF_ADAPTER_EXPORT(make_table)
