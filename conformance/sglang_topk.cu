// File: sglang_topk.cu
// Conformance adapter (kernel_abi.h version 2) for the top-K kernels SGLang runs on the
// DeepSeek indexer path, from the pinned release's sglang/kernels/jit
// (conformance/upstream.lock), instantiated as SGLang's JIT does on sm_90: PDL on
// (make_cpp_args(is_arch_support_pdl())), SGLang's JIT flags. One source, one kernel per
// build, chosen by DSAF_SGLANG_TOPK (conformance/CMakeLists.txt):
//   1  deepseek_v4/topk_v2.cuh, TopKKernel<true>::transform_paged in PAGE_TABLE mode: the
//      decode path of DeepSeek V4's C4 indexer (dsv4/indexer.py, topk_transform_paged_v2)
//      and of V3.2 DSA (dsa_topk_backend.py, _topk_transform_v2_paged); the default
//      (--dsa-topk-backend sgl-kernel, SGLANG_OPT_USE_TOPK_V2=1, SGLANG_DSA_FUSE_TOPK=1).
//   2  the same file's topk_ragged_kernel<true> (TopKKernel<true>::transform_ragged): the
//      extend (prefill) path of V3.2 DSA (_topk_transform_v2_ragged), row_starts absent.
//   3  deepseek_v4/topk_v1.cuh, topk_transform_kernel<true>: V4's paged top-K with
//      SGLANG_OPT_USE_TOPK_V2=0 (topk_transform_paged), K <= 1024.
//
// Mapping (docs/conformance.md): scores are our [rows][row_stride] fp32 matrix, the
// score width max_seq_len = row_stride, seq_lens = valid_lengths. The page-table transform
// the kernels fuse in is fed an identity table (page p of every row is page p, pages of
// kPageSize tokens, as DSA's FlashMLA pool), so the written indices are the selected
// score positions; ragged's out_offsets are zeros. The host wrappers call tvm-ffi
// (TVMFFIEnvGetStream), so the launches below are theirs, spelled with cudaLaunchKernelEx
// on the default stream.
//
// Contracts (verify's): entries past min(K, length) are -1 (the trivial path writes
// 0..length-1 then -1; a selection fills all K). The selection is exact but unordered:
// keys above the K-th score land in atomic-arrival order, and which keys equal to the K-th
// score fill the last slots is decided by arrival order once more than 128 of them share
// the threshold bin (topk_impl.cuh handle_tie: rank by (score, index) up to 128 ties, radix
// select with atomic slots beyond; legacy_radix_topk.cuh the same with atomics only): set
// with ties. The exact keys order -0.0 below +0.0, a tie in the reference's sense.
// Lengths must lie in [0, row_stride]: the kernels read them on device as uint32, as
// upstream they must be non-negative.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "conformance/adapter_support.cuh"

#if DSAF_SGLANG_TOPK == 1 || DSAF_SGLANG_TOPK == 2
#include "deepseek_v4/topk_v2.cuh"
#if DSAF_SGLANG_TOPK == 1
#include "occupancy/cluster_probe.cuh"
#endif
#elif DSAF_SGLANG_TOPK == 3
#include "deepseek_v4/topk_v1.cuh"
#else
#error "DSAF_SGLANG_TOPK must be 1 (topk_v2 paged), 2 (topk_v2 ragged) or 3 (topk_v1)"
#endif

namespace {

using namespace dsaf::conformance;

// cudaLaunchKernelEx on the default stream, with programmatic dependent launch when
// `pdl` (LaunchKernel::config({.use_pdl = true})) and a (1, cluster_y, 1) cluster when
// cluster_y > 0 (.cluster_dim = dim3{1, kClusterSize}).
template <typename Params>
int launch(void (*kernel)(Params), dim3 grid, unsigned block, size_t smem, bool pdl, unsigned cluster_y,
           const Params& params) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(block);
  config.dynamicSmemBytes = smem;
  config.stream = nullptr;
  cudaLaunchAttribute attributes[2]{};
  unsigned count = 0;
  if (pdl) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_y > 0) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count++].val.clusterDim = {1, cluster_y, 1};
  }
  config.attrs = attributes;
  config.numAttrs = count;
  return check(cudaLaunchKernelEx(&config, kernel, params), "cudaLaunchKernelEx");
}

int check_args(const dsaf_topk_args_v1* a, uint32_t max_k, const char* name) {
  if (a->k < 1 || static_cast<uint32_t>(a->k) > max_k) {
    return fail(std::string(name) + ": K must be in 1.." + std::to_string(max_k) + ", got " + std::to_string(a->k));
  }
  if (a->rows < 0 || a->row_stride < 1 || a->row_stride > INT32_MAX) {
    return fail(std::string(name) + ": rows must be >= 0 and the row stride in 1..2^31-1");
  }
  return 0;
}

#if DSAF_SGLANG_TOPK != 2

constexpr int kPageBits = 6;  // identity table of 64-token pages (any power of two maps i to i)

// The identity page table (adapter_support.cuh): `rows` rows of the row's pages.
using IdentityTable = RowTable<RowFill::kIdentity>;

#endif

#if DSAF_SGLANG_TOPK == 1 || DSAF_SGLANG_TOPK == 2

using sglang::kBlockSize;
using sglang::kMaxTopK;

// The topk_v2 kernels load 16-byte vectors from each row (score_stride % 4 == 0, rows
// 16-byte aligned: the wrappers' RuntimeCheck). Other layouts are copied into a padded
// matrix of the same width first; the pad columns are never selected (the kernels mask
// what lies past a row's length).
struct AlignedScores {
  Scratch<float> copy;
  int get(const dsaf_topk_args_v1* a, const float** scores, int64_t* stride) {
    *scores = a->scores;
    *stride = a->row_stride;
    if (a->row_stride % 4 == 0 && reinterpret_cast<uintptr_t>(a->scores) % 16 == 0) return 0;
    const int64_t padded = (a->row_stride + 3) / 4 * 4;
    float* d = copy.get(static_cast<size_t>(a->rows) * padded);
    if (d == nullptr) return 1;
    if (check(cudaMemcpy2DAsync(d, padded * sizeof(float), a->scores, a->row_stride * sizeof(float),
                                a->row_stride * sizeof(float), a->rows, cudaMemcpyDeviceToDevice),
              "padded scores") != 0) {
      return 1;
    }
    *scores = d;
    *stride = padded;
    return 0;
  }
};

#endif  // topk_v2

#if DSAF_SGLANG_TOPK == 1

#if SUPPORT_CLUSTER
// The cluster counts SGLang's loader probes on the device and compiles in
// (kernels/ops/attention/dsv4/topk.py: -DSGL_TOPK_V2_MAX_C8_OCC2, -DSGL_TOPK_V2_MAX_C16_OCC1
// from get_max_active_clusters, 0 where no cluster fits). They pick the cluster paths, so
// a build whose values differ from this device's would not be the kernel SGLang runs here:
// the adapter refuses it and names the values to configure.
int check_cluster_build() {
  static const std::string error = [] {
    uint32_t c8 = 0, c16 = 0;
    try {
      c8 = sglang::get_max_active_clusters(8, 2);
      c16 = sglang::get_max_active_clusters(16, 1);
    } catch (const std::exception& e) {
      return std::string("sglang topk_v2: the cluster occupancy probe failed: ") + e.what();
    }
    if (c8 == sglang::kNumPersistentClusters && c16 == sglang::kMaxCluster16BatchSize) return std::string();
    return "sglang topk_v2: built with SGL_TOPK_V2_MAX_C8_OCC2=" + std::to_string(sglang::kNumPersistentClusters) +
           " and SGL_TOPK_V2_MAX_C16_OCC1=" + std::to_string(sglang::kMaxCluster16BatchSize) +
           ", but this device probes " + std::to_string(c8) + " and " + std::to_string(c16) +
           " (SGLang's JIT compiles the probed values in): reconfigure with -DDSAF_SGLANG_TOPK_V2_CLUSTERS=\"" +
           std::to_string(c8) + ";" + std::to_string(c16) + "\" and rebuild";
  }();
  return error.empty() ? 0 : fail(error);
}
#else
int check_cluster_build() { return 0; }
#endif

constexpr auto kMode = sglang::TopKMode::PAGE_TABLE;

struct Buffers {
  AlignedScores scores;
  IdentityTable table;
  Scratch<sglang::PlanItem> metadata;
};

template <int kLevel>
int launch_main(uint32_t batch, const sglang::TopKPagedParams& params) {
  return launch(sglang::topk_main_kernel<true, kLevel, kMode>, dim3(batch), kBlockSize, 0, true, 0, params);
}

// TopKKernel<true>::launch<PAGE_TABLE>, step for step: the cluster paths for wide scores
// and few rows (cluster-16 kernel, cluster-8 kernel, or the persistent cluster pool plus
// the level-3 main kernel), else the main kernel at the level of the score width.
int dispatch(const sglang::TopKPagedParams& params, uint32_t max_seq_len) {
  const uint32_t batch = params.batch_size;
#if SUPPORT_CLUSTER
  const bool use_cluster = max_seq_len > params.static_cluster_floor && batch <= sglang::kClusterMaxBatch;
  if (use_cluster) {
    if constexpr (sglang::kMaxCluster16BatchSize > 0) {
      if (batch <= sglang::kMaxCluster16BatchSize) {
        constexpr uint32_t kClusterSize = 16;
        const auto kernel = sglang::topk_small_batch_cluster_kernel<true, kMode, kClusterSize, 1>;
        static const cudaError_t allowed =  // once, as runtime::init_per_device
            cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        if (check(allowed, "cudaFuncSetAttribute(NonPortableClusterSizeAllowed)") != 0) return 1;
        return launch(kernel, dim3(batch, kClusterSize), kBlockSize, 0, true, kClusterSize, params);
      }
    }
    if constexpr (sglang::kNumPersistentClusters > 0) {
      constexpr uint32_t kClusterSize = 8;
      if (batch <= sglang::kNumPersistentClusters) {
        return launch(sglang::topk_small_batch_cluster_kernel<true, kMode, kClusterSize, 2>, dim3(batch, kClusterSize),
                      kBlockSize, 0, true, kClusterSize, params);
      }
      const uint32_t clusters = batch < sglang::kNumPersistentClusters ? batch : sglang::kNumPersistentClusters;
      if (launch(sglang::topk_persistent_cluster_kernel<true, kClusterSize>, dim3(clusters, kClusterSize), kBlockSize,
                 0, true, kClusterSize, params) != 0) {
        return 1;
      }
      return launch_main<3>(batch, params);
    }
  }
#endif
  if (max_seq_len <= sglang::kReg2MaxSeqLen) return launch_main<0>(batch, params);
  if (max_seq_len <= sglang::kReg4MaxSeqLen) return launch_main<1>(batch, params);
  return launch_main<2>(batch, params);
}

int topk(const dsaf_topk_args_v1* a) {
  constexpr const char* kName = "sglang topk_v2 paged";
  if (check_args(a, kMaxTopK, kName) != 0 || check_cluster_build() != 0) return 1;
  if (a->rows == 0) return 0;
  static Buffers b;
  const float* scores = nullptr;
  int64_t stride = 0;
  if (b.scores.get(a, &scores, &stride) != 0) return 1;
  const auto batch = static_cast<uint32_t>(a->rows);
  const auto max_seq_len = static_cast<uint32_t>(a->row_stride);
  const int64_t pages = (a->row_stride + (1 << kPageBits) - 1) >> kPageBits;
  const int32_t* table = b.table.get(a->rows, pages);
  sglang::PlanItem* metadata = b.metadata.get(static_cast<size_t>(batch) + 1);  // plan_topk_v2's (B + 1, 2)
  if (table == nullptr || metadata == nullptr) return 1;
  const sglang::TopKPagedParams params{
      .scores = scores,
      .seq_lens = a->valid_lengths,
      .page_table = table,
      .page_indices = a->indices,
      .raw_indices = nullptr,
      .metadata = metadata,
      .score_stride = stride,
      .page_table_stride = b.table.stride(),
      .topk = static_cast<uint32_t>(a->k),
      .page_bits = kPageBits,
      .static_cluster_floor = sglang::TopKKernel<true>::get_static_cluster_floor(batch),
      .batch_size = batch,
      .out_stride = a->k,
      .token_seq_lens = nullptr,
      .out_offsets = nullptr,
      .pool_bits = 0,
      .out_cols = static_cast<uint32_t>(a->k),
  };
#if SUPPORT_CLUSTER
  // plan_topk_v2(seq_lens) (static_threshold -1), which production runs once per forward
  // before the layers' transforms: only batches the persistent pool may take get a plan.
  if (sglang::kNumPersistentClusters > 0 && batch > sglang::kNumPersistentClusters &&
      batch <= sglang::kClusterMaxBatch) {
    sglang::topk_plan_cluster<<<1, kBlockSize>>>(reinterpret_cast<const uint32_t*>(a->valid_lengths), metadata,
                                                batch, -1);
    if (check(cudaGetLastError(), "topk_plan_cluster") != 0) return 1;
  }
#endif
  if (dispatch(params, max_seq_len) != 0) return 1;
  return check(cudaGetLastError(), kName);
}

constexpr const char* kKernelName = "sglang " DSAF_UPSTREAM_VERSION " topk_v2 transform_paged (PAGE_TABLE, PDL)";
constexpr int32_t kTopKSupported = 0;  // any K of 1..2048 (kMaxTopK)

#elif DSAF_SGLANG_TOPK == 2

int topk(const dsaf_topk_args_v1* a) {
  constexpr const char* kName = "sglang topk_v2 ragged";
  if (check_args(a, kMaxTopK, kName) != 0) return 1;
  if (a->rows == 0) return 0;
  static AlignedScores aligned;
  static RowTable<RowFill::kZeros> zeros;
  const float* scores = nullptr;
  int64_t stride = 0;
  if (aligned.get(a, &scores, &stride) != 0) return 1;
  const int32_t* offsets = zeros.get(a->rows, 1);
  if (offsets == nullptr) return 1;
  // row_starts absent: every window starts at column 0, so the kernel's in-place mask of
  // the columns ahead of an unaligned window (rem != 0) never runs and the scores stay
  // unwritten (the const_cast only matches the parameter's type).
  const sglang::TopKRaggedParams params{
      .scores = const_cast<float*>(scores),
      .seq_lens = a->valid_lengths,
      .row_starts = nullptr,
      .out_offsets = offsets,
      .topk_indices = a->indices,
      .score_stride = stride,
      .topk = static_cast<uint32_t>(a->k),
  };
  if (launch(sglang::topk_ragged_kernel<true>, dim3(static_cast<unsigned>(a->rows)), kBlockSize, 0, true, 0,
             params) != 0) {
    return 1;
  }
  return check(cudaGetLastError(), kName);
}

constexpr const char* kKernelName = "sglang " DSAF_UPSTREAM_VERSION " topk_v2 transform_ragged (PDL)";
constexpr int32_t kTopKSupported = 0;  // any K of 1..2048 (kMaxTopK)

#elif DSAF_SGLANG_TOPK == 3

int topk(const dsaf_topk_args_v1* a) {
  constexpr const char* kName = "sglang topk_v1";
  if (check_args(a, sglang::kMaxTopK, kName) != 0) return 1;
  if (a->rows == 0) return 0;
  static IdentityTable identity;
  const int64_t pages = (a->row_stride + (1 << kPageBits) - 1) >> kPageBits;
  const int32_t* table = identity.get(a->rows, pages);
  if (table == nullptr) return 1;
  constexpr auto kernel = sglang::TopKKernel<true>::kernel;
  constexpr size_t kSmem = sglang::kSMEM + sizeof(int32_t);  // the wrapper's kSMEM_
  static const cudaError_t opted_in =  // runtime::set_max_dynamic_smem_per_device
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem));
  if (check(opted_in, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)") != 0) return 1;
  const sglang::TopKParams params{
      a->scores, a->valid_lengths, table, a->indices, /*raw_indices=*/nullptr, a->row_stride, identity.stride(),
      kPageBits, static_cast<uint32_t>(a->k),
  };
  if (launch(kernel, dim3(static_cast<unsigned>(a->rows)), sglang::kTopKBlockSize, kSmem, true, 0, params) != 0) {
    return 1;
  }
  return check(cudaGetLastError(), kName);
}

constexpr const char* kKernelName = "sglang " DSAF_UPSTREAM_VERSION " topk_v1 topk_transform (PDL)";
constexpr int32_t kTopKSupported = 512;  // DeepSeek V4's index_topk; the kernel takes any K of 1..1024

#endif

dsaf_kernel_v2 make_table() { return set_ties_topk_table(kKernelName, kTopKSupported, &topk); }

}  // namespace

DSAF_ADAPTER_EXPORT(make_table)
