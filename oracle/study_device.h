// File: study_device.h
// The studies' device mode (`sweep|needle --device gpu`, docs/device-studies.md): each
// studied recipe's keys, queries, paged logits and top-K come from a kernel under test
// (device/api.h KernelUnderTest: ours, or a plug-in by path) instead of the CPU
// reference, while the exact oracle stays on the CPU. The reference recomputes a random
// sample of what the kernel produced — cache slots, query rows, logits rows, top-K rows —
// and must agree: bytes equal for keys and queries, logits bit for bit under an
// exact-order contract or within oracle/logits_bound.h's bound under a bounded one, top-K
// under the kernel's contract (topk_verdict.h). A disagreement stops the study with a
// dsaf::Error(kMismatch) that locates it (study, context, seed or trial, recipe, row, key).
//
// The kernel runs a stage for a recipe when it provides it and declares what the recipe
// needs (store format, page size, largest position, a logits contract that covers the key
// format, the study's K); otherwise ours run it (`fallback`), and the result's "device"
// entry says which kernel ran each stage. Inputs the kernel takes in bf16 are rounded to
// bf16 (ties to even) before anything sees them, so the oracle, the reference checks and
// the kernel study the same activations: query inputs always (the query ABI takes bf16),
// key inputs when the key kernel takes no fp32, norm parameters and head weights when it
// declares bf16 parameters.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "device/api.h"
#include "oracle/activations.h"
#include "reference/pipeline.h"
#include "reference/recipe.h"
#include "reference/rope.h"
#include "reference/score.h"

namespace dsaf::oracle {

// Where a stage's arithmetic runs at best, for its compute floor.
enum class ComputeUnit { kNone, kTensorFp8, kTensorBf16, kFp32Fma };

// Device time, modelled memory traffic and arithmetic of one stage, summed over a study's
// calls. Traffic is the least a kernel must move (docs/device-studies.md): keys — the input
// and the stored rows; queries — bf16 input, head weights, codes and folded weights;
// logits — the queries, every cache row of the sequence once and the logits written;
// top-K — the logits read and the indices written. Arithmetic is counted for the logits
// only (2 x heads x 128 flops per row and key scored), the one stage whose work grows as
// rows x keys; the others are memory-bound by orders of magnitude.
struct StageTiming {
  std::string kernel;  // the kernel's name
  int64_t calls = 0;
  double device_ms = 0.0;  // KernelUnderTest::last_device_ms, summed
  double bytes = 0.0;
  std::map<ComputeUnit, double> flops;  // by the unit it runs on (a stage's recipes may differ)
  double host_ms = 0.0;  // KernelUnderTest::last_host_ms, summed: the calls' time on the host
};

// The roofline: a device-to-device copy's GB/s (measured by the caller) and the dense
// arithmetic peaks in TFLOP/s (dev::ComputePeaks; 0 = unknown, no compute floor).
struct Roofline {
  double copy_gbps = 0.0;
  double tensor_fp8_tflops = 0.0, tensor_bf16_tflops = 0.0, fp32_tflops = 0.0;
  double peak_tflops(ComputeUnit unit) const;  // 0 for kNone
};

struct StudyTimings {
  // Per stage and kernel, "<stage> [<kernel name>]": stages "keys", "queries", "logits",
  // "topk" (a study's stages may run on the kernel under test and on the fallback).
  std::map<std::string, StageTiming> stages;
  // Per stage: achieved bandwidth and its fraction of the copy's; the floor, the larger
  // of the traffic at copy bandwidth and the arithmetic at its unit's peak ("memory" or
  // "compute" bound), and the fraction of it reached (floor / device time). The stage and
  // kernel with the most device time is the dominant one.
  nlohmann::json to_json(const Roofline& roofline) const;
  std::string text(const Roofline& roofline) const;
};

// The page size of the needle study's device cache (the sweep's is its config's): 64
// tokens, the index cache pages of the DeepSeek serving stacks.
inline constexpr int kNeedlePageSize = 64;

struct StudyDevice {
  const dev::KernelUnderTest* kernel = nullptr;    // null: the CPU study
  const dev::KernelUnderTest* fallback = nullptr;  // ours, for what `kernel` does not run
  // Samples per unit and recipe: query rows (sweep) or needle cases the reference
  // rechecks, and cache slots. 0 and 0 recheck nothing — a study of a kernel known to be
  // wrong, for what its fault costs in recall — though a NaN logit or an invalid top-K
  // entry still stops it (no metric is defined over them).
  int check_rows = 2;
  int check_keys = 256;
  StudyTimings* timings = nullptr;  // optional
};

// The kernels that run each stage of one recipe, and the contracts they declared.
struct StageKernels {
  const dev::KernelUnderTest* keys = nullptr;
  const dev::KernelUnderTest* queries = nullptr;
  const dev::KernelUnderTest* logits = nullptr;
  const dev::KernelUnderTest* topk = nullptr;
  int64_t key_max_tokens = 0;  // per key-store call; 0: no limit
  bool key_input_fp32 = true;
  bool logits_exact_order = true;
  dev::TopKContract topk_contract = dev::TopKContract::kOrdered;
  dev::TopKPadding topk_padding = dev::TopKPadding::kMinusOne;
};

// Throws dsaf::Error(kUsage) when neither the kernel nor ours can run a stage of the
// recipe at this K, longest context and page size (a score accumulated exactly, a format
// no kernel stores).
StageKernels stage_kernels(const StudyDevice& device, const ref::Recipe& recipe, int topk, int64_t longest,
                           int page_size);
// The result's "device" entry: the kernel, which kernel ran each stage of each recipe
// under which contract, the input rounding and the sample sizes of the checks.
nlohmann::json describe_device(const StudyDevice& device, const std::vector<ref::Recipe>& recipes, int topk,
                               int64_t longest, int page_size);

// What the kernels take in bf16 (above), for every recipe of the study.
struct InputRounding {
  bool key_input = false;
  bool norm_params = false;
  bool query_input = false;
  bool head_weights = false;
  bool any() const { return key_input || norm_params || query_input || head_weights; }
};
InputRounding input_rounding(const StudyDevice& device, const std::vector<ref::Recipe>& recipes, int topk,
                             int64_t longest, int page_size);
// `source` seen through the rounding (itself when nothing is rounded); its describe()
// adds {"rounded_to_bf16": [...]}.
std::shared_ptr<const ActivationSource> rounded_inputs(std::shared_ptr<const ActivationSource> source,
                                                       const InputRounding& rounding);
// A key input made elsewhere (the needle's), rounded as the source's are.
void round_key_input(const InputRounding& rounding, float* k_in);

// One sequence of n tokens (positions 0..n-1, page table 0, 1, 2, ...) under one recipe,
// on the device. `rope` holds at least n positions; the kernels get its first n rows.
class DeviceSequence {
 public:
  // kNow: the constructor stores the sequence's keys (one key-store call), for cache().
  // kWithPlants: nothing is stored until plant_keys, which stores the sequence and the
  // planted cases in one call (the needle: half the key-store calls of storing twice,
  // unless a kernel's token cap splits the call).
  enum class ContextStore { kNow, kWithPlants };
  DeviceSequence(const StageKernels& kernels, const ref::Recipe& recipe, const ActivationSource& acts, int64_t n,
                 int page_size, const ref::RopeTable& rope, StudyTimings* timings,
                 ContextStore context = ContextStore::kNow);
  // The cache after the key kernel stored every token's key (kNow; throws kInternal under
  // kWithPlants, whose sequence is PlantedKeys::cache's first pages()).
  const std::vector<uint8_t>& cache() const;
  // Caches that each differ from this sequence's in one key (the needle's cases): case c is
  // this sequence with the key at positions[c] stored from k_inputs[c] ([cases][128]).
  // Case c reads its own copy of the page holding its position and shares every other page,
  // so the cases take one page each, not a cache. One key-store call (kWithPlants only):
  // the sequence's n tokens through page table row 0 into pages [0, pages()), and each
  // case's page, its needle among the sequence's tokens, through row 1 + c into page
  // pages() + c; the kernel stores every token by itself, so the bytes are those of the
  // sequence stored alone with each case's page copied and its needle stored again.
  struct PlantedKeys {
    std::vector<uint8_t> cache;        // this sequence's pages, then case c's page at pages() + c
    std::vector<int32_t> page_tables;  // [cases][pages()]: case c's table
    std::vector<int64_t> pages;        // [cases]: the page case c swaps for its copy
    int64_t cases = 0;
    const int32_t* table_of(int64_t c) const { return page_tables.data() + c * (page_tables.size() / cases); }
  };
  PlantedKeys plant_keys(const std::vector<int64_t>& positions, const float* k_inputs) const;
  // The query path of token input_tokens[i]'s input at positions[i], one row each.
  dev::HostQueryResult queries(const std::vector<int64_t>& input_tokens, const std::vector<int64_t>& positions) const;
  // Logits [rows][n] of the query rows over `cache`; row i scores keys [0, valid[i]).
  std::vector<float> logits(const std::vector<uint8_t>& cache, const dev::HostQueryResult& q,
                            const std::vector<int32_t>& valid) const;
  // Logits [cases][n]: row c is query row 0 of `q` over case c's cache, all n keys. Two
  // calls: the row over the context once, and a row a case over its page alone (a sequence
  // of one page: its private copy); row c is the context's row with its page's scores from
  // the second call. Both logits contracts are per key — a key's score is a function of the
  // query row and that key's cache row — so these are the scores a call over case c's whole
  // table gives, read from the same cache bytes, for 1 + 1/n-th of a row a case of scoring.
  std::vector<float> logits(const PlantedKeys& planted, const dev::HostQueryResult& q) const;
  // The top-K kernel's entries [rows][k] over logits [rows][n].
  std::vector<int32_t> topk(const std::vector<float>& logits, const std::vector<int32_t>& valid, int k) const;
  int64_t size() const { return n_; }
  int page_size() const { return page_size_; }
  int64_t pages() const { return static_cast<int64_t>(page_table_.size()); }

 private:
  // The key kernel's store of inputs [tokens][128] at `positions` into `cache`, token t
  // through page table seq[t] of `page_tables` ([sequences][pages()]).
  std::vector<uint8_t> store(std::vector<uint8_t> cache, const std::vector<int64_t>& positions,
                             const std::vector<int32_t>& seq, const std::vector<int32_t>& page_tables,
                             const float* inputs) const;
  // The logits kernel's call: query rows q over `cache`, row i through page table
  // row_seq[i] of `page_tables` (rows of page_table_stride entries), scoring keys
  // [0, valid[i]) of rows of max_context logits.
  std::vector<float> score(const std::vector<uint8_t>& cache, const std::vector<int32_t>& page_tables,
                           int64_t page_table_stride, int64_t max_context, const std::vector<int32_t>& row_seq,
                           const dev::HostQueryResult& q, const std::vector<int32_t>& valid) const;
  StageKernels kernels_;
  const ref::Recipe& recipe_;
  const ActivationSource& acts_;
  int64_t n_;
  int page_size_;
  StudyTimings* timings_;
  ContextStore context_;
  std::vector<int32_t> page_table_;
  std::vector<float> rope_cos_, rope_sin_;  // [n][32]
  std::vector<uint8_t> cache_;
};

// The reference's checks (throw dsaf::Error(kMismatch) with `where` and the location).
// The cache slots of `positions` hold the reference's stored key of their inputs
// (k_inputs: [positions][128]); the slots are found through `page_table` (null: pages
// 0, 1, 2, ...).
void check_key_slots(const std::string& where, const ref::Recipe& recipe, const ActivationSource& acts,
                     const ref::RopeTable& rope, const std::vector<uint8_t>& cache, int page_size,
                     const std::vector<int64_t>& positions, const std::vector<float>& k_inputs,
                     const int32_t* page_table = nullptr);
// Query row `row` of the kernel's result holds the reference's codes, scales and weights;
// fp8 scales left unwritten in the whole batch (all zero: folded into the weights, which
// the logits read instead) are not compared, as verify does not.
void check_query_row(const std::string& where, const ref::Recipe& recipe, const dev::HostQueryResult& kernel,
                     int64_t row, const ref::QueryOutput& expected);
// A logits row: exact-order — every valid score's fp32 bits equal `expected` (the
// recipe's order) and the rest are -inf; bounded — |logit - exact| <= bound for every
// valid key (exact and bound from the caller, oracle/logits_bound.h).
void check_logits_row(const std::string& where, bool exact_order, const float* row, int64_t valid, int64_t n,
                      const std::vector<double>& expected, const std::vector<double>& exact,
                      const std::vector<double>& bound);
// A top-K row under the kernel's contract against the reference's selection of its logits.
void check_topk_row(const std::string& where, const StageKernels& kernels, const float* logits_row, int64_t valid,
                    int k, const int32_t* entries);
// The selection of a row as the metrics read it: the first min(k, valid) entries in the
// recipe's order — higher logit first, equal logits by lower index — whatever order the
// kernel's contract allowed, then -1. An entry outside [0, valid), or twice, among them is
// a mismatch (every row is validated so, checked in full or not).
std::vector<int32_t> canonical_selection(const std::string& where, const float* logits_row, int64_t valid, int k,
                                         const int32_t* entries);
// A NaN among a logits row's valid scores is a mismatch (no reference score is NaN).
void check_no_nan(const std::string& where, const float* logits_row, int64_t valid);
// The exact-order reference's expectation and the bounded one's for one query row.
struct LogitsExpectation {
  std::vector<double> expected, exact, bound;
};
LogitsExpectation expect_logits(const ref::Recipe& recipe, bool exact_order, const ref::QueryOutput& q,
                                const ref::KeyMatrix& keys, int64_t valid, int threads = 1);

// What a device study adds to its CPU memory model (study_keys.h), in bytes, at the longest
// context n with `rows` query rows a call: the key inputs as fp32 and the key batch's copy
// (2 x n x 512), three caches of the widest row (the stored one, a batch's copy, the
// download: 3 x n x 512), three logits arrays (the download, the top-K batch's copy, the
// row set: 3 x rows x n x 4) and two RoPE tables (the key and query batches').
inline int64_t device_study_bytes(int64_t n, int64_t rows) {
  constexpr int64_t kWidestRow = 512;  // fp32 keys; fp8 132, bf16 256, fp4 68
  return 2 * n * ref::kHeadDim * 4 + 3 * n * kWidestRow + 3 * rows * n * 4 + 2 * n * 64 * 4;
}

// Rows a unit rechecks: `count` distinct rows of [0, rows), drawn from `seed`.
std::vector<int64_t> sample_rows(int64_t rows, int count, uint64_t seed);

}  // namespace dsaf::oracle
