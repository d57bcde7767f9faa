// File: vllm_topk.cu
// Conformance adapters (kernel_abi.h version 2, top-K only) for the top-K kernels of
// vLLM's DeepSeek V3.2 sparse-attention indexer, from the pinned release's csrc/
// (conformance/upstream.lock), compiled with vLLM's flags (conformance/CMakeLists.txt).
// One source, one kernel per build, chosen by a define:
//
//   DSAF_VLLM_TOPK_PREFILL=0   topKPerRowPrefill<512, false> (csrc/sampler.cu), as
//                              top_k_per_row_prefill launches it: rows 0..12287 insertion
//                              sort, rows from 12288 on topKPerRowPrefill<512, true>.
//                              The prefill top-K of sparse_attn_indexer.
//   DSAF_VLLM_TOPK_PREFILL=1   topKPerRowPrefill<512, true> on every row (the kernel of
//                              prefill chunks past 12288 rows).
//   DSAF_VLLM_TOPK_COOPERATIVE=CS  cooperative_topk_cs{8,4,2}<2048> (csrc/cooperative_topk.cuh),
//                              launched as cooperative_topk() does, with the cluster size
//                              fixed: on sm_90 vLLM takes CS 8 for <= 8 rows, 4 for <= 33,
//                              2 for <= 64. The decode top-K of the "auto" backend for
//                              <= 64 rows (vllm/model_executor/layers/indexer_topk.py).
//   DSAF_VLLM_TOPK_FILTERED    FilteredTopKRaggedTransform<float, int32_t, 2048>
//                              (csrc/persistent_topk.cuh): what persistent_topk() runs for
//                              more than 32 rows, i.e. "auto" decode with > 64 rows whose
//                              longest context is below 65536.
//   DSAF_VLLM_TOPK_SAMPLED     sampled_topk_kernel<2048> (csrc/sampled_topk.cuh): what
//                              persistent_topk() runs for > 64 rows and a longest context of
//                              >= 65536 (rows shorter than that take filtered_topk_row inside).
//   DSAF_VLLM_TOPK_PERSISTENT  persistent_topk_kernel<2048, VEC> (csrc/persistent_topk.cuh),
//                              with launch_persistent_topk's sizing: persistent_topk() for
//                              <= 32 rows (the explicit "persistent" backend).
// The headers of the last four are self-contained (CUDA runtime, cub, cuda/ptx) and are
// included as they are; sampler.cu holds torch host code, so conformance/extract_upstream.py
// cuts the prefill kernels and their device helpers verbatim out of it at build time.
//
// Contract (every kernel): the indices of a row are written in atomic order, not by score
// (ordered fails); the selection is exact on the fp32 order key (coarse fp16/fp32 bins,
// then radix rounds down to all 32 bits), and keys whose score equals the K-th score are
// kept in atomic order when they do not all fit (topK tie handling: the final radix round
// `atomicAdd(&..., -1)` slots, or the prefill kernels' stable sort of the threshold bin in
// arrival order), so the contract is set_ties. +0.0 and -0.0 have distinct order keys
// (+0 ranks above -0): a tie under the reference, decided by key here, which set_ties
// allows. A row of length n <= K gets 0..n-1 followed by -1 (the kernels' trivial paths),
// so padding is -1. K: the prefill kernels take K at run time (any of 1..2048); the others
// are built for K = 2048, V3.2's index_topk (vLLM instantiates 512, 1024, 2048).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "conformance/adapter_support.cuh"

#if defined(DSAF_VLLM_TOPK_PREFILL)
#include <cub/cub.cuh>
#include <cuda_fp16.h>

#include <cfloat>
#include <cmath>

#include "core/cuda_compat.h"
#include "vllm_topk_per_row_extract.cuh"
#elif defined(DSAF_VLLM_TOPK_COOPERATIVE)
#include "cooperative_topk.cuh"
#elif defined(DSAF_VLLM_TOPK_FILTERED) || defined(DSAF_VLLM_TOPK_PERSISTENT)
#include "persistent_topk.cuh"
#elif defined(DSAF_VLLM_TOPK_SAMPLED)
#include "sampled_topk.cuh"
#else
#error "define one of DSAF_VLLM_TOPK_PREFILL, _COOPERATIVE, _FILTERED, _SAMPLED, _PERSISTENT"
#endif

namespace {

using namespace dsaf::conformance;
constexpr int kIndexTopK = 2048;

// The bound on a row's length the launchers are sized by. vLLM's host passes
// attn_metadata.max_seq_len, which the ABI does not carry; the row stride bounds every
// row's length (the ABI's contract), and under CUDA graphs vLLM passes such a static bound
// too. The kernels clamp each row's length on the device (sampled_topk_kernel to
// min(length, max_length), persistent_topk_kernel to min(length, stride, max_seq_len)),
// so a looser bound changes only what a launch provisions, never a row's length, and the
// call needs no copy of the lengths to the host.
[[maybe_unused]] int host_length_bound(const dsaf_topk_args_v1* a) {
  return static_cast<int>(std::min<int64_t>(a->row_stride, INT32_MAX));
}

[[maybe_unused]] int device_attribute(cudaDeviceAttr attribute, int* value) {
  int device = 0;
  if (check(cudaGetDevice(&device), "cudaGetDevice") != 0) return 1;
  return check(cudaDeviceGetAttribute(value, attribute, device), "cudaDeviceGetAttribute");
}

#if defined(DSAF_VLLM_TOPK_PREFILL)

constexpr bool kAllRadix = DSAF_VLLM_TOPK_PREFILL != 0;
constexpr int kTopKArg = 0;  // K at run time
const char* const kName = kAllRadix ? "vllm " DSAF_UPSTREAM_VERSION " topKPerRowPrefill<512, radix sort>"
                                    : "vllm " DSAF_UPSTREAM_VERSION " top_k_per_row_prefill";

Scratch<int32_t>& row_starts() {
  static Scratch<int32_t> s;
  return s;
}

// top_k_per_row_prefill(logits, rowStarts = 0, rowEnds = lengths, indices, rows, stride0,
// stride1 = 1, K): block 512, dynamic shared memory K int32.
int run(const dsaf_topk_args_v1* a) {
  constexpr int kThreads = 512;
  constexpr int kSortingAlgorithmThreshold = 12288;
  if (a->k < 1 || a->k > kIndexTopK) return fail("vllm-topk-prefill: K must be in 1..2048");
  if (a->row_stride > INT32_MAX) return fail("vllm-topk-prefill: the row stride is an int");
  int32_t* starts = row_starts().get(static_cast<size_t>(a->rows));
  if (starts == nullptr) return 1;
  if (check(cudaMemset(starts, 0, a->rows * sizeof(int32_t)), "cudaMemset") != 0) return 1;
  const size_t smem = static_cast<size_t>(a->k) * sizeof(int32_t);
  const int stride0 = static_cast<int>(a->row_stride);
  const int insertion_rows = kAllRadix ? 0 : std::min(a->rows, kSortingAlgorithmThreshold);
  if (insertion_rows > 0) {
    vllm::topKPerRowPrefill<kThreads, false><<<insertion_rows, kThreads, smem>>>(
        a->scores, starts, a->valid_lengths, a->indices, stride0, 1, a->k, 0);
  }
  if (a->rows > insertion_rows) {
    vllm::topKPerRowPrefill<kThreads, true><<<a->rows - insertion_rows, kThreads, smem>>>(
        a->scores, starts, a->valid_lengths, a->indices, stride0, 1, a->k, insertion_rows);
  }
  return check(cudaGetLastError(), "topKPerRowPrefill");
}

#elif defined(DSAF_VLLM_TOPK_COOPERATIVE)

namespace ct = vllm::cooperative;
namespace hist4096 = vllm::topk_histogram_4096;
constexpr uint32_t kCluster = DSAF_VLLM_TOPK_COOPERATIVE;
static_assert(kCluster == 2 || kCluster == 4 || kCluster == 8, "sm_90 cluster sizes of cooperative_topk");
constexpr int kTopKArg = kIndexTopK;
const char* const kName = kCluster == 8   ? "vllm " DSAF_UPSTREAM_VERSION " cooperative_topk_cs8<2048>"
                          : kCluster == 4 ? "vllm " DSAF_UPSTREAM_VERSION " cooperative_topk_cs4<2048>"
                                          : "vllm " DSAF_UPSTREAM_VERSION " cooperative_topk_cs2<2048>";

Scratch<uint8_t>& tie_workspace() {
  static Scratch<uint8_t> s;
  return s;
}

// launch_cooperative_topk_impl / launch_cooperative_cluster: grid (rows, CS), block
// kBlockSize, cluster (1, CS, 1), dynamic shared memory kSmemSize8 (CS 8) or kSmemSize4
// (CS 4 and 2); tie workspace rows x kCoarseTieCapacity Ties.
int run(const dsaf_topk_args_v1* a) {
  if (a->rows > 64) return fail("vllm-topk-cooperative: vLLM's cooperative_topk takes <= 64 rows");
  if (a->row_stride % 4 != 0 || a->row_stride > UINT32_MAX) {
    return fail("vllm-topk-cooperative: vLLM requires a row stride that is a multiple of 4 (TMA alignment)");
  }
  auto kernel = []() {
    if constexpr (kCluster == 8) {
      return &ct::cooperative_topk_cs8<kIndexTopK>;
    } else if constexpr (kCluster == 4) {
      return &ct::cooperative_topk_cs4<kIndexTopK>;
    } else {
      return &ct::cooperative_topk_cs2<kIndexTopK>;
    }
  }();
  const size_t smem = kCluster == 8 ? ct::kSmemSize8 : ct::kSmemSize4;
  auto* ties = reinterpret_cast<hist4096::Tie*>(
      tie_workspace().get(static_cast<size_t>(a->rows) * ct::kCoarseTieCapacity * sizeof(hist4096::Tie)));
  if (ties == nullptr) return 1;
  ct::CooperativeTopKParams<kIndexTopK> params;
  params.input = a->scores;
  params.output = a->indices;
  params.lengths = a->valid_lengths;
  params.tie_ws = ties;
  params.num_rows = static_cast<uint32_t>(a->rows);
  params.stride = static_cast<uint32_t>(a->row_stride);
  if (check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
            "cudaFuncSetAttribute") != 0) {
    return 1;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(params.num_rows, kCluster);
  config.blockDim = dim3(hist4096::kBlockSize);
  config.dynamicSmemBytes = smem;
  config.stream = nullptr;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = 1;
  attribute.val.clusterDim.y = kCluster;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return check(cudaLaunchKernelEx(&config, kernel, params), "cooperative_topk launch");
}

#elif defined(DSAF_VLLM_TOPK_FILTERED)

constexpr int kTopKArg = kIndexTopK;
const char* const kName = "vllm " DSAF_UPSTREAM_VERSION " FilteredTopKRaggedTransform<float, int32_t, 2048>";

// persistent_topk() for 32 < rows: FilteredTopKRaggedTransform(logits, output, lengths,
// rows, K, stride, stream), its own launcher (vec size from the stride and alignment).
int run(const dsaf_topk_args_v1* a) {
  if (a->row_stride > UINT32_MAX) return fail("vllm-topk-filtered: the row stride is a uint32");
  return check(vllm::FilteredTopKRaggedTransform<float, int32_t, kIndexTopK>(
                   a->scores, a->indices, a->valid_lengths, static_cast<uint32_t>(a->rows), kIndexTopK,
                   static_cast<uint32_t>(a->row_stride), nullptr),
               "FilteredTopKRaggedTransform");
}

#elif defined(DSAF_VLLM_TOPK_SAMPLED)

constexpr int kTopKArg = kIndexTopK;
const char* const kName = "vllm " DSAF_UPSTREAM_VERSION " sampled_topk_kernel<2048>";

// persistent_topk() for > 64 rows with max_seq_len >= kMinSampledLength: grid rows,
// block kThreads, dynamic shared memory FILTERED_TOPK_SMEM_DYNAMIC, max_length = the
// host's bound (host_length_bound).
int run(const dsaf_topk_args_v1* a) {
  auto kernel = vllm::sampled_topk::sampled_topk_kernel<kIndexTopK>;
  constexpr size_t smem = vllm::filtered_topk::FILTERED_TOPK_SMEM_DYNAMIC;
  if (check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
            "cudaFuncSetAttribute") != 0) {
    return 1;
  }
  kernel<<<a->rows, vllm::sampled_topk::kThreads, smem>>>(a->scores, a->valid_lengths, a->indices, a->row_stride,
                                                          host_length_bound(a));
  return check(cudaGetLastError(), "sampled_topk_kernel");
}

#elif defined(DSAF_VLLM_TOPK_PERSISTENT)

namespace P = vllm::persistent;
constexpr int kTopKArg = kIndexTopK;
const char* const kName = "vllm " DSAF_UPSTREAM_VERSION " persistent_topk_kernel<2048>";

Scratch<uint8_t>& row_states() {
  static Scratch<uint8_t> s;
  return s;
}

template <uint32_t kVec>
void (*persistent_kernel())(P::PersistentTopKParams) {
  return &P::persistent_topk_kernel<kIndexTopK, kVec>;
}

// launch_persistent_topk's cooperative branch (persistent_topk() for <= 32 rows): shared
// memory per block and chunk size from the row stride, groups of ctas_per_group CTAs per
// row, as many groups as stay resident, row states zeroed before the launch.
int run(const dsaf_topk_args_v1* a) {
  const int length_bound = host_length_bound(a);
  int num_sms = 0, max_smem = 0;
  if (device_attribute(cudaDevAttrMultiProcessorCount, &num_sms) != 0 ||
      device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, &max_smem) != 0) {
    return 1;
  }
  if (a->row_stride > UINT32_MAX) return fail("vllm-topk-persistent: the row stride is a uint32");
  const uint32_t stride = static_cast<uint32_t>(a->row_stride);
  int effective_max_smem = max_smem;
  if (a->rows <= 4) {
    effective_max_smem = std::min(max_smem, static_cast<int>(P::kSmemMedium));
  } else if (a->rows <= 8) {
    effective_max_smem = std::min(max_smem, 48 * 1024);
  }
  uint32_t max_chunk = static_cast<uint32_t>((static_cast<size_t>(effective_max_smem) - P::kFixedSmemLarge) /
                                             sizeof(uint32_t));
  const auto base = reinterpret_cast<uintptr_t>(a->scores);
  uint32_t vec = 1;
  if (stride % 4 == 0 && base % 16 == 0) {
    vec = 4;
  } else if (stride % 2 == 0 && base % 8 == 0) {
    vec = 2;
  }
  max_chunk = max_chunk / vec * vec;
  max_chunk = std::max<uint32_t>(max_chunk, vec * P::kThreadsPerBlock);
  const uint32_t ctas_per_group = (stride + max_chunk - 1) / max_chunk;
  uint32_t chunk = (stride + ctas_per_group - 1) / ctas_per_group;
  chunk = std::min((chunk + vec - 1) / vec * vec, max_chunk);
  const size_t smem = std::max(P::kFixedSmemLarge + chunk * sizeof(uint32_t), P::kSmemMedium);
  auto kernel = vec == 4 ? persistent_kernel<4>() : vec == 2 ? persistent_kernel<2>() : persistent_kernel<1>();

  int occupancy = 1;
  if (check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occupancy, kernel, P::kThreadsPerBlock, smem),
            "cudaOccupancyMaxActiveBlocksPerMultiprocessor") != 0) {
    return 1;
  }
  occupancy = std::max(occupancy, 1);
  const bool needs_cooperative = static_cast<uint32_t>(length_bound) > P::RADIX_THRESHOLD;
  const uint32_t hw_resident_cap = static_cast<uint32_t>(num_sms) * static_cast<uint32_t>(occupancy);
  uint32_t max_resident = hw_resident_cap;
  if (needs_cooperative) {
    const uint32_t headroom = occupancy > 1 ? static_cast<uint32_t>(num_sms) : 1u;
    if (max_resident >= headroom + ctas_per_group) max_resident -= headroom;
  }
  uint32_t num_groups = std::min(max_resident / ctas_per_group, static_cast<uint32_t>(a->rows));
  num_groups = std::max(num_groups, 1u);
  const uint32_t total_ctas = num_groups * ctas_per_group;
  if (needs_cooperative && total_ctas > hw_resident_cap) {
    return fail("vllm-topk-persistent: vLLM falls back to FilteredTopK here (the cooperative launch does not fit)");
  }
  const size_t state_bytes = num_groups * sizeof(P::RadixRowState);
  uint8_t* states = row_states().get(state_bytes);
  if (states == nullptr) return 1;
  if (check(cudaMemsetAsync(states, 0, state_bytes), "cudaMemsetAsync") != 0) return 1;

  P::PersistentTopKParams params;
  params.input = a->scores;
  params.output = a->indices;
  params.lengths = a->valid_lengths;
  params.num_rows = static_cast<uint32_t>(a->rows);
  params.stride = stride;
  params.top_k = kIndexTopK;
  params.chunk_size = chunk;
  params.row_states = reinterpret_cast<P::RadixRowState*>(states);
  params.ctas_per_group = ctas_per_group;
  params.max_seq_len = static_cast<uint32_t>(length_bound);
  if (check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
            "cudaFuncSetAttribute") != 0) {
    return 1;
  }
  kernel<<<total_ctas, P::kThreadsPerBlock, smem>>>(params);
  return check(cudaGetLastError(), "persistent_topk_kernel");
}

#endif

int topk(const dsaf_topk_args_v1* a) {
  if (kTopKArg != 0 && a->k != kTopKArg) return fail(std::string(kName) + ": built for K = 2048 only");
  if (a->rows < 0) return fail("vllm-topk: negative row count");
  if (a->rows == 0) return 0;
  // Returns once the launch is queued, as vLLM's launchers do and every other adapter's
  // call: a launch error is reported here, a fault in the kernel by the caller's next
  // synchronisation.
  return run(a);
}

dsaf_kernel_v2 make_table() { return set_ties_topk_table(kName, kTopKArg, &topk); }

}  // namespace

DSAF_ADAPTER_EXPORT(make_table)
