// File: api.h
// Host-side declarations of device/: compiles with g++ and includes no CUDA header,
// so the oracle and the CLI build without nvcc (they then report "device: not built").
// Kernels receive the reference's Recipe through the plain-data KernelRecipe below
// (argument structs and enums only: no arithmetic is shared with reference/).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reference/recipe.h"

namespace dsaf::dev {

// What the CUDA runtime sees. Without a CUDA build: built = false.
struct GpuInfo {
  bool built = false;       // dsaf_device was compiled
  int device_count = 0;     // cudaGetDeviceCount (0 on error)
  std::string name;         // device 0
  int sm_major = 0;
  int sm_minor = 0;
  std::string error;        // why device_count is 0, if the runtime said
};

GpuInfo query_gpu();

// The numeric fields of a Recipe that kernels read, as plain data (no std::string).
struct KernelRecipe {
  ref::IntermediateRounding key_rounding;
  ref::IntermediateRounding query_rounding;
  ref::NormSpec key_norm;
  ref::RopePairing rope_pairing;
  ref::RopePlacement rope_placement;
  ref::ContractedProduct rope_fma;
  bool hadamard;
  ref::QuantSpec key_quant;
  ref::QuantSpec query_quant;
  ref::WeightsPrecision weights;
  ref::WeightsFold weights_fold;
};
KernelRecipe kernel_recipe(const ref::Recipe& recipe);

// Fused key path, one launch (device/key_store.cu): for each token t,
//   k = input[t] (bf16 or fp32) -> norm -> RoPE(positions[t]) -> Hadamard -> quantise ->
//   paged store at page_tables[seq[t] * page_table_stride + positions[t] / P], offset
//   positions[t] % P, in the layout of reference/paged_cache.h.
// All pointers are device pointers. The RoPE table is [rope_positions][32] cos and sin
// (the reference's RopeTable, copied). Page tables are validated by the caller
// (launch_key_store checks nothing on the device side).
struct KeyStoreArgs {
  const void* input = nullptr;        // [num_tokens][128]
  bool input_bf16 = true;             // bf16 bits, else fp32
  int64_t num_tokens = 0;
  const int32_t* positions = nullptr;  // [num_tokens]
  const int32_t* seq = nullptr;        // [num_tokens] sequence of each token
  const int32_t* page_tables = nullptr;
  int64_t page_table_stride = 0;       // entries per sequence
  const float* rope_cos = nullptr;
  const float* rope_sin = nullptr;
  const float* norm_weight = nullptr;  // [128] or null
  const float* norm_bias = nullptr;    // [128] or null
  uint8_t* cache = nullptr;            // num_pages * page bytes
  int page_size = 64;
  KernelRecipe recipe{};
};

// Query path (device/query_quant.cu), one lane group per (token, head):
//   q = input[t][h] -> RoPE(positions[t]) -> Hadamard -> quantise (per head), and
//   weights[t][h] = wproj[t][h] * H^-1/2 * D^-1/2 * q_scale (Recipe::weights_fold order).
// Outputs: q_values [T][H][value bytes of the query format], q_scales [T][H][scale bytes]
// (fp32 little-endian for fp8, ue8m0 x4 for fp4), weights [T][H] fp32.
struct QueryArgs {
  const void* input = nullptr;  // [T][H][128]
  bool input_bf16 = true;
  int64_t num_tokens = 0;
  int num_heads = 64;
  const int32_t* positions = nullptr;
  const float* wproj = nullptr;  // [T][H]
  const float* rope_cos = nullptr;
  const float* rope_sin = nullptr;
  uint8_t* q_values = nullptr;
  uint8_t* q_scales = nullptr;
  float* weights = nullptr;
  KernelRecipe recipe{};
};

// Launchers (stream 0). They throw dsaf::Error (kBadInput) for arguments the kernels do
// not support and (kEnvironment) for CUDA errors, naming the call.
// `lanes_per_head` (4, 8, 16 or 32) is how many lanes share one 128-value head: a tuning
// knob with no effect on any result bit (device/head_pipeline.cuh). The default is the
// fastest on the H200 (bench/key_store_bench.cu measures them all).
inline constexpr int kDefaultLanesPerHead = 8;
void launch_key_store(const KeyStoreArgs& args, int lanes_per_head = kDefaultLanesPerHead);
void launch_query_quant(const QueryArgs& args, int lanes_per_head = kDefaultLanesPerHead);

}  // namespace dsaf::dev

namespace dsaf::dev {

// ---- Kernel under test: our kernels or a plug-in (device/kernel_abi.h), on host data ----

// One key-path batch in host memory (the layouts of KeyStoreArgs).
struct HostKeyBatch {
  std::vector<uint16_t> input_bf16;  // [T][128] bf16 bits, or
  std::vector<float> input_f32;      // [T][128] fp32 (exactly one of the two is used)
  bool bf16 = true;
  std::vector<int32_t> positions, seq, page_tables;
  int64_t page_table_stride = 0;
  int page_size = 64;
  std::vector<float> rope_cos, rope_sin;  // [positions][32]
  std::vector<float> norm_weight, norm_bias;
  std::vector<uint8_t> cache;             // initial bytes (num_pages * page bytes)
  KernelRecipe recipe{};
};

struct HostQueryBatch {
  std::vector<uint16_t> input_bf16;  // [T][H][128]
  int64_t num_tokens = 0;
  int num_heads = 64;
  std::vector<int32_t> positions;
  std::vector<float> wproj;  // [T][H]
  std::vector<float> rope_cos, rope_sin;
  KernelRecipe recipe{};
};

struct HostQueryResult {
  std::vector<uint8_t> values, scales;
  std::vector<float> weights;
};

class KernelUnderTest {
 public:
  virtual ~KernelUnderTest() = default;
  virtual std::string name() const = 0;
  virtual bool has_query_path() const = 0;
  // Runs the key path on the batch; returns the cache bytes after it.
  virtual std::vector<uint8_t> key_store(const HostKeyBatch& batch) const = 0;
  virtual HostQueryResult query_quant(const HostQueryBatch& batch) const = 0;
};

// "builtin" (our kernels) or the path of a plug-in shared library. Throws dsaf::Error
// (kEnvironment) without a CUDA device or when the library cannot be loaded, (kBadInput)
// when it does not export dsaf_kernel_get for ABI version 1. Defined only in CUDA builds.
std::unique_ptr<KernelUnderTest> open_kernel(const std::string& spec);

}  // namespace dsaf::dev
