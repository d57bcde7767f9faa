// File: verify.h
// `dsa-fidelity verify`: runs a kernel under test (device/api.h KernelUnderTest: our
// kernels or a plug-in) on random tensors and random page layouts inside what the kernel
// declares it supports (KernelCapabilities: store formats, page sizes 1..256, bf16 and
// fp32 input, bf16 norm parameters, largest position and token count) — prefill batches
// (whole sequences) and decode batches (one new token per sequence), edge rows — and
// compares each stage it provides with the reference: the key cache (byte-exact, first
// mismatch located), the q codes, q scales and head weights, the paged logits (bit for bit
// for an exact-order contract, within the tensor-core bound for a bounded one) and the
// top-K (under its contract, every differing row classified: topk_verdict.h). A key or
// query failure is diagnosed: which single recipe field, changed, reproduces the kernel's
// bytes exactly, whether its keys sit a fixed number of slots away from where the page
// table puts them, or whether its scales sit on the next or previous page; NaN codes in
// the cache are counted (verdict.h); a field the key cache departs from while the
// byte-exact query path follows it is reported as the two sides disagreeing. What the
// recipe needs but the kernel does not declare is reported as not covered.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "device/api.h"
#include "reference/recipe.h"

namespace dsaf::oracle {

struct VerifyConfig {
  ref::Recipe recipe;
  // The top-K contract to check against, when not the one the kernel declares.
  std::optional<dev::TopKContract> topk_contract;
  // Keep one key batch and the cache the kernel wrote for it (VerifyReport::saved): the
  // first that failed, else the first.
  bool keep_key_batch = false;
  int64_t min_key_tokens = 10000;   // key tokens across all batches
  // Query tokens (x num_heads heads). Dividing by a non-power-of-two scale instead of
  // multiplying by its reciprocal changes an e4m3fn code about once in 10^6 values, so
  // 4096 x 64 heads x 128 values give such a bug a few dozen chances to show.
  int64_t query_tokens = 4096;
  int num_heads = 64;
  uint64_t seed = 1;
  // Called as the work advances: (stage, units done, units of the stage). Units: key
  // tokens (of min_key_tokens), query tokens, paged-logits cases, top-K batches. Empty: none.
  std::function<void(const std::string& stage, int64_t done, int64_t total)> progress;
};

// A key batch as the kernel was given it, and the cache bytes it wrote.
struct SavedKeyBatch {
  dev::HostKeyBatch batch;
  std::vector<uint8_t> kernel_cache;
  bool failed = false;
  int64_t index = 0;  // the batch's number in the key stage
};

struct VerifyReport {
  bool pass = true;
  std::optional<SavedKeyBatch> saved;  // with VerifyConfig::keep_key_batch
  int stages_run = 0;     // stages compared (a kernel with none of the recipe's: nothing verified)
  std::string text;       // human-readable, one verdict per stage, diagnosis on failure
  // {"capabilities", "stages": [every verdict], "coverage": {...}, and, when the key and
  // query paths disagree, "key_query_disagreement": [the changes]}; the CLI adds the
  // kernel, recipe, seed, pass and the reproduce command.
  nlohmann::json json;
};

VerifyReport run_verify(const dev::KernelUnderTest& kernel, const VerifyConfig& config);

// verify's memory model, in bytes: what run_verify holds at its peak on the host, which
// does not grow with min_key_tokens (key batches are drawn, run and dropped one at a time:
// at most 6 sequences of 1,024 positions, or 64 decode tokens). The peak is the query
// stage, alive while the scoring stages run: R = query_tokens x num_heads rows of 128
// values held as fp32 and bf16 (6 B a value), and three query results (the kernel's, the
// reference's, one diagnosis candidate) of up to 256 value bytes, 8 scale bytes and a
// 4-byte weight a row; then the top-K batch: 32 rows of 131,072 fp32 scores with the
// reference's selection of a row (16 B a score); the process itself: kVerifyBaseBytes
// (code, CUDA runtime, the plug-in's host staging of one batch).
int64_t verify_peak_bytes(const VerifyConfig& config);
inline constexpr int64_t kVerifyBaseBytes = int64_t{256} << 20;

// The scoring stages run_verify ends with (verify_scoring.cc): paged logits and top-K,
// when the kernel provides them (kernel_abi.h dsaf_scoring_v1).
void verify_scoring(const dev::KernelUnderTest& kernel, const dev::KernelCapabilities& caps,
                    const VerifyConfig& config, std::mt19937_64& rng, VerifyReport& report);

}  // namespace dsaf::oracle
