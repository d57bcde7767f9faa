// File: flashinfer_topk.cu
// Conformance adapter (kernel_abi.h version 2) for FlashInfer's native indexer top-K, from
// the pinned release's flashinfer/data/include/flashinfer/topk.cuh (conformance/upstream.lock),
// called as SGLang's --dsa-topk-backend flashinfer calls it (srt/layers/attention/dsa/
// dsa_topk_backend.py: deterministic = SGLANG_DSA_TOPK_FLASHINFER_DETERMINISTIC, default
// false; tie_break 0 unless SGLANG_DSA_TOPK_FLASHINFER_TIE_BREAK; dsa_graph_safe = true)
// and compiled with FlashInfer's JIT flags (conformance/CMakeLists.txt). One source, one
// entry per build, chosen by DSAF_FLASHINFER_TOPK:
//   1  flashinfer.top_k_page_table_transform (the decode path, PAGED): the binding
//      radix_topk_page_table_transform (data/csrc/topk.cu) calls
//      sampling::TopKPageTableTransformDispatch, here with the same arguments: page_size 1
//      and rows as wide as their stride (SGLang passes logits.contiguous() and the
//      page_size-1 table), hence the direct page-table policy.
//   2  flashinfer.top_k_ragged_transform (the extend path, RAGGED): the binding
//      radix_topk_ragged_transform calls sampling::TopKRaggedTransformDispatch.
// With dsa_graph_safe both dispatches run FilteredTopKUnifiedKernel (ShouldUseFilteredTopK
// returns true, VEC_SIZE 1: ComputeFilteredTopKVecSize) and no finalize kernel (neither
// deterministic nor a tie-break). The bindings' host pieces that need tvm-ffi (tensor
// checks, the torch stream) are spelled here on the default stream.
//
// Scope: flashinfer/topk.py sends a dsa_graph_safe fp32 call to CUB's DeviceBatchedTopK
// (data/csrc/cub_topk.cu, the wheel's vendored CCCL) instead when
// is_cub_page_table_transform_beneficial / is_cub_ragged_transform_beneficial say so
// (fewer than 128 rows of 32768 scores or more, among others) and FLASHINFER_TOPK_ALGO is
// unset or "cub"; with FLASHINFER_TOPK_ALGO set to anything else those calls run the
// kernel here. CUB's path is not this adapter's.
//
// Mapping: scores are our [rows][row_stride] fp32 matrix (max_len = row_stride), lengths
// our valid_lengths; the page-table transform is fed an identity page_size-1 table (row r
// is 0..row_stride-1, one row per score row, as CheckPageTableTransformArgs requires), the
// ragged offsets are zeros, so the written indices are the selected score positions.
//
// Contracts (verify's): entries past min(K, length) are -1 (length <= K writes 0..length-1
// then -1; a selection fills all K). The selection is exact and unordered: keys above the
// K-th score are appended in atomic-arrival order, and the keys equal to the K-th score
// claim the last slots by an atomic countdown (collect_gt_and_nondet_eq_threshold), so
// which tied keys at the cut are kept is free: set with ties. The exact keys order -0.0
// below +0.0, a tie in the reference's sense. K is at most 2048 (FILTERED_TOPK_MAX_K; the
// dispatch returns cudaErrorNotSupported beyond); lengths must lie in [0, row_stride], as
// the kernel reads them on device.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

// As the binding (data/csrc/topk.cu) includes them: sampling.cuh brings math.cuh, which
// topk.cuh uses without including it.
#include <flashinfer/sampling.cuh>
#include <flashinfer/topk.cuh>

#include "conformance/adapter_support.cuh"

#if DSAF_FLASHINFER_TOPK != 1 && DSAF_FLASHINFER_TOPK != 2
#error "DSAF_FLASHINFER_TOPK must be 1 (top_k_page_table_transform) or 2 (top_k_ragged_transform)"
#endif

namespace {

using namespace dsaf::conformance;
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

}  // namespace

DSAF_ADAPTER_EXPORT(make_table)
