// File: gallery_plugins.cu — the injected-bug gallery (docs/gallery.md): version-2
// plug-ins (kernel_abi.h) with every stage of our kernels (key store, query path,
// exact-order paged logits, top-K) and one classic mistake in one stage, which `verify`
// must fail in that stage and name. Compiled five times (device/CMakeLists.txt),
// DSAF_GALLERY_PLUGIN =
//   0  rope-pairing     the key path pairs RoPE dims the other way (NeoX <-> interleaved);
//   1  hadamard-query-only  the key path skips the Hadamard rotation, the query path has it;
//   2  nan-codes        some e4m3fn value codes of a correct store become NaN (0x7f / 0xff);
//   3  scale-next-page  each key's fp32 / ue8m0 scale goes to the same slot of the next page;
//   4  topk-cap         a radix top-K whose threshold-bin candidates pass through a buffer of
//                       4096 entries, those past it dropped (contract: set).
// The key-path bugs are abi_kernels.cuh's PluginBug variants; the top-K one is below.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "device/plugins/abi_kernels.cuh"

#ifndef DSAF_GALLERY_PLUGIN
#error "DSAF_GALLERY_PLUGIN must be 0..4"
#endif

namespace {

using namespace dsaf::dev;

constexpr int kVariant = DSAF_GALLERY_PLUGIN;
constexpr PluginBug kKeyBugs[] = {PluginBug::kKeyOtherRopePairing, PluginBug::kKeyWithoutHadamard,
                                  PluginBug::kNanCodes, PluginBug::kScaleOnNextPage, PluginBug::kCorrect};
constexpr PluginBug kBug = kKeyBugs[kVariant];

// The capacity of the threshold bin's candidate buffer: TileLang's DeepSeek V3.2 top-K
// selector (examples/deepseek_v32/topk_selector.py) sizes it 4096, "assume the threshold
// bucket size after first pass is less than 4K", and does not check it.
constexpr int kCandidateCap = 4096;

int fail(const std::string& message) {
  abi_last_error() = message;
  return 1;
}

// The first radix pass's bin of a score, as that selector computes it: the high byte of
// the score's fp16 bits made order-preserving (negative: all bits flipped; else the sign
// bit set), so a higher bin holds higher scores.
int first_pass_bin(float score) {
  const __half h = __float2half_rn(score);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  bits = (bits & 0x8000u) != 0 ? static_cast<uint16_t>(~bits) : static_cast<uint16_t>(bits | 0x8000u);
  return bits >> 8;
}

// One row's selection: every key of a bin above the threshold bin (the highest bin at
// which at least k keys score at or above it), then, of the threshold bin's keys, the
// first kCandidateCap in index order, and of those the best (k - above) in the
// reference's order (score desc, index asc) — exact passes over a truncated candidate set.
// Written in that order, -1 padded.
void capped_row(const float* scores, int64_t n, int k, int32_t* out) {
  std::fill(out, out + k, -1);
  const int64_t m = std::min<int64_t>(k, n);
  if (m == 0) return;
  std::vector<int64_t> count(256, 0);
  std::vector<int> bin(n);
  for (int64_t i = 0; i < n; ++i) ++count[bin[i] = first_pass_bin(scores[i])];
  int threshold = 255;
  int64_t above = 0;
  while (above + count[threshold] < m) above += count[threshold--];
  std::vector<int32_t> chosen, candidates;
  for (int64_t i = 0; i < n; ++i) {
    if (bin[i] > threshold) chosen.push_back(static_cast<int32_t>(i));
    if (bin[i] == threshold && static_cast<int64_t>(candidates.size()) < kCandidateCap) {
      candidates.push_back(static_cast<int32_t>(i));
    }
  }
  const auto better = [&](int32_t a, int32_t b) {
    const double sa = scores[a], sb = scores[b];
    return sa != sb ? sa > sb : a < b;
  };
  const int64_t wanted = std::min<int64_t>(m - above, static_cast<int64_t>(candidates.size()));
  std::partial_sort(candidates.begin(), candidates.begin() + wanted, candidates.end(), better);
  chosen.insert(chosen.end(), candidates.begin(), candidates.begin() + wanted);
  std::sort(chosen.begin(), chosen.end(), better);
  std::copy(chosen.begin(), chosen.end(), out);
}

// The capped top-K, on the host: the scores copied in, the selection copied out.
int capped_topk(const dsaf_topk_args_v1* a) {
  std::vector<int32_t> lengths(a->rows), indices(static_cast<size_t>(a->rows) * a->k);
  std::vector<float> scores(static_cast<size_t>(a->rows) * a->row_stride);
  if (cudaMemcpy(lengths.data(), a->valid_lengths, lengths.size() * 4, cudaMemcpyDeviceToHost) != cudaSuccess ||
      cudaMemcpy(scores.data(), a->scores, scores.size() * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
    return fail("topk-cap: copies to the host");
  }
  for (int r = 0; r < a->rows; ++r) {
    capped_row(scores.data() + static_cast<size_t>(r) * a->row_stride, lengths[r], a->k,
               indices.data() + static_cast<size_t>(r) * a->k);
  }
  if (cudaMemcpy(a->indices, indices.data(), indices.size() * 4, cudaMemcpyHostToDevice) != cudaSuccess) {
    return fail("topk-cap: copy back");
  }
  return 0;
}

dsaf_kernel_v2 make_table() {
  constexpr const char* kNames[] = {"gallery-rope-pairing", "gallery-hadamard-query-only", "gallery-nan-codes",
                                    "gallery-scale-next-page", "gallery-topk-cap"};
  dsaf_kernel_v2 t{};
  t.abi_version = DSAF_KERNEL_ABI_VERSION_2;
  t.name = kNames[kVariant];
  t.key_caps = builtin_key_caps();
  // NaN codes are e4m3fn codes; a misplaced scale needs a format with scales.
  if (kVariant == 2) t.key_caps.store_formats = 1u << static_cast<int>(dsaf::ref::StorageFormat::kFp8E4m3fn);
  if (kVariant == 3) {
    t.key_caps.store_formats = (1u << static_cast<int>(dsaf::ref::StorageFormat::kFp8E4m3fn)) |
                               (1u << static_cast<int>(dsaf::ref::StorageFormat::kFp4E2m1));
  }
  t.key_store = [](const dsaf_key_store_args_v2* a) { return abi_key_store<kBug>(a, AbiSchedule{}); };
  t.query_quant = [](const dsaf_query_args_v2* a) { return abi_query_quant<kBug>(a, kAutoLanesPerHead); };
  t.logits_contract = 0;
  t.paged_logits = &abi_paged_logits<false>;
  t.topk_contract = kVariant == 4 ? DSAF_TOPK_SET : DSAF_TOPK_ORDERED;
  t.topk_padding = DSAF_TOPK_PAD_MINUS_ONE;
  t.topk = kVariant == 4 ? &capped_topk : &abi_topk<>;
  t.last_error = &abi_error_text;
  return t;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const dsaf_kernel_v2* dsaf_kernel_get(uint32_t abi_version) {
  static const dsaf_kernel_v2 table = make_table();
  return abi_version == DSAF_KERNEL_ABI_VERSION_2 ? &table : nullptr;
}
