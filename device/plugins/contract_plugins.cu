// File: contract_plugins.cu — version-2 plug-ins (kernel_abi.h) that exercise what
// `verify` must respect and classify, each a real kernel's habit built from our kernels.
// Compiled five times (device/CMakeLists.txt), DSAF_CONTRACT_PLUGIN =
//   0  page64        key store and query path for pages of 64 tokens only (any other page
//                    size is refused, as production kernels with a fixed page do);
//   1  bf16-norm     takes the norm weight and bias in bf16 (its bf16 copies, widened) and
//                    bf16 input only, as SGLang's V4 kernel does in its bf16 instantiation,
//                    and never writes the q scales, as SGLang's V4 fp8 query kernel folds
//                    its per-head scale into the head weight (verify accepts that for fp8
//                    queries only);
//   2  topk-set      top-K only, each row's selection returned in reverse (contract: set);
//   3  topk-ties     top-K only, one tied key at the cut swapped for another key of the
//                    same score (contract: set-ties), where a row has one;
//   4  topk-drop     top-K only, a key strictly above the cut replaced by the best key left
//                    out (declares set: a genuine miss that verify must name).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "device/plugins/abi_kernels.cuh"

#ifndef DSAF_CONTRACT_PLUGIN
#error "DSAF_CONTRACT_PLUGIN must be 0..4"
#endif

namespace {

using namespace dsaf::dev;

constexpr int kVariant = DSAF_CONTRACT_PLUGIN;

__global__ void widen_bf16_kernel(const uint16_t* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __uint_as_float(static_cast<unsigned>(in[i]) << 16);
}

int fail(const std::string& message) {
  abi_last_error() = message;
  return 1;
}

int key_store(const dsaf_key_store_args_v2* a) {
  if (kVariant == 0 && a->page_size != 64) {
    return fail("page64: pages of " + std::to_string(a->page_size) + " tokens are not supported");
  }
  if (kVariant != 1) return abi_key_store<PluginBug::kCorrect>(a, AbiSchedule{});
  if (a->input_bf16 == 0) return fail("bf16-norm: fp32 input is not supported");
  // The kernel's own norm parameters: the bf16 copies, as fp32.
  dsaf_key_store_args_v2 widened = *a;
  float* params = nullptr;
  if (cudaMalloc(&params, 2 * 128 * sizeof(float)) != cudaSuccess) return fail("bf16-norm: cudaMalloc");
  if (a->norm_weight_bf16 != nullptr) widen_bf16_kernel<<<1, 128>>>(a->norm_weight_bf16, params, 128);
  if (a->norm_bias_bf16 != nullptr) widen_bf16_kernel<<<1, 128>>>(a->norm_bias_bf16, params + 128, 128);
  widened.norm_weight = a->norm_weight_bf16 != nullptr ? params : nullptr;
  widened.norm_bias = a->norm_bias_bf16 != nullptr ? params + 128 : nullptr;
  const int status = abi_key_store<PluginBug::kCorrect>(&widened, AbiSchedule{});
  cudaDeviceSynchronize();
  cudaFree(params);
  return status;
}

int query_quant(const dsaf_query_args_v2* a) {
  const int status = abi_query_quant<PluginBug::kCorrect>(a, kAutoLanesPerHead);
  if (status != 0 || kVariant != 1) return status;
  const int64_t rows = a->num_tokens * a->num_heads;
  const int format = static_cast<int>(dsaf_recipe_field(a->recipe, "query_quant.format", 0));
  return cudaMemset(a->q_scales, 0, static_cast<size_t>(rows) * scale_bytes(static_cast<dsaf::ref::StorageFormat>(format))) ==
                 cudaSuccess
             ? 0
             : fail("bf16-norm: cudaMemset");
}

// Our top-K, then each row changed on the host as the variant says.
int topk(const dsaf_topk_args_v1* a) {
  if (const int status = abi_topk(a); status != 0) return status;
  std::vector<int32_t> indices(static_cast<size_t>(a->rows) * a->k), lengths(a->rows);
  std::vector<float> scores(static_cast<size_t>(a->rows) * a->row_stride);
  if (cudaMemcpy(indices.data(), a->indices, indices.size() * 4, cudaMemcpyDeviceToHost) != cudaSuccess ||
      cudaMemcpy(lengths.data(), a->valid_lengths, lengths.size() * 4, cudaMemcpyDeviceToHost) != cudaSuccess ||
      cudaMemcpy(scores.data(), a->scores, scores.size() * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
    return fail("topk: copies to the host");
  }
  for (int r = 0; r < a->rows; ++r) {
    int32_t* row = indices.data() + static_cast<size_t>(r) * a->k;
    const float* s = scores.data() + static_cast<size_t>(r) * a->row_stride;
    const int m = std::min(a->k, lengths[r]);
    if (m == 0) continue;
    if (kVariant == 2) std::reverse(row, row + m);
    if (kVariant == 3 || kVariant == 4) {
      std::vector<bool> chosen(lengths[r], false);
      for (int j = 0; j < m; ++j) chosen[row[j]] = true;
      const float cut = s[row[m - 1]];  // our top-K is ordered: the last entry scores the K-th score
      if (kVariant == 3) {  // a left-out key tied with the cut takes the last tied entry's place
        for (int i = 0; i < lengths[r]; ++i) {
          if (!chosen[i] && s[i] == cut) {
            row[m - 1] = i;
            break;
          }
        }
      } else if (s[row[0]] > cut) {  // the best key, above the cut, replaced by the best left out
        int best = -1;
        for (int i = 0; i < lengths[r]; ++i) {
          if (!chosen[i] && (best < 0 || s[i] > s[best])) best = i;
        }
        if (best >= 0) row[0] = best;
      }
    }
  }
  if (cudaMemcpy(a->indices, indices.data(), indices.size() * 4, cudaMemcpyHostToDevice) != cudaSuccess) {
    return fail("topk: copy back");
  }
  return 0;
}

dsaf_kernel_v2 make_table() {
  constexpr const char* kNames[] = {"contract-page64", "contract-bf16-norm", "contract-topk-set", "contract-topk-ties",
                                    "contract-topk-drop"};
  dsaf_kernel_v2 t{};
  t.abi_version = DSAF_KERNEL_ABI_VERSION_2;
  t.name = kNames[kVariant];
  t.last_error = &abi_error_text;
  t.key_caps = builtin_key_caps();
  if (kVariant <= 1) {
    t.key_store = &key_store;
    t.query_quant = &query_quant;
    if (kVariant == 0) t.key_caps.page_sizes = 1u << 6;
    if (kVariant == 1) {
      t.key_caps.norm_params_bf16 = 1;
      t.key_caps.input_dtypes = DSAF_INPUT_BF16;
    }
    return t;
  }
  t.topk = &topk;
  t.topk_contract = kVariant == 3 ? DSAF_TOPK_SET_TIES : DSAF_TOPK_SET;
  t.topk_padding = DSAF_TOPK_PAD_MINUS_ONE;
  return t;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const dsaf_kernel_v2* dsaf_kernel_get(uint32_t abi_version) {
  static const dsaf_kernel_v2 table = make_table();
  return abi_version == DSAF_KERNEL_ABI_VERSION_2 ? &table : nullptr;
}
