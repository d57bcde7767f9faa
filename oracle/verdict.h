// File: verdict.h
// The three-level verdicts of docs/verification.md §8, plus run-to-run determinism, for any
// pair of tensors or cache buffers ("expected" = the reference, "actual" = the
// implementation under test):
//  1. byte-exact: DeepGEMM's assert_bitwise_equal, and for a paged index-K cache the
//     first mismatch located as (sequence, position), page, field, element, both codes
//     and both decoded values, the differing bytes split into value and scale fields, and
//     NaN codes where the reference has a number counted; bytes of slots no token owns must
//     stay untouched (SGLang's 0xAA sentinel test);
//  2. ulp-bounded: an ulp-distance histogram, a budget (max ulp and the fraction of
//     elements that may differ, as FlashInfer's max_mismatch_pct), TransformerEngine's
//     round-side-flip classification, and NaN / ±Inf positions that must agree exactly
//     (DeepGEMM's -inf mask check, FlashMLA's "anomalies");
//  3. metric-level: DeepGEMM calc_diff and cosine similarity, for comparability only.
// Budgets are parameters whose defaults are zero: the default verdict is exact.
// Every result has `pass` and `describe()`, one readable paragraph.
// One source file per section: verdict_bytes.cc, verdict_ulp.cc, verdict_metric.cc,
// verdict_determinism.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "reference/paged_cache.h"

namespace dsaf::oracle {

// ---------------------------------------------------------------------------------------
// 1. Byte-exact

enum class CacheField : uint8_t { kValue, kScale };
const char* to_string(CacheField field);

// One differing byte. With a cache layout, the byte is placed in the cache: its page,
// token slot, field and element, and the element is read from both buffers and decoded
// with the reference codec of the layout's StorageFormat:
//   value field: fp8 -> e4m3fn code, bf16 / fp4-simulated-bf16 -> bf16 code (2 bytes,
//     little-endian), fp32 -> fp32 bits, fp4 -> e2m1 nibble (element 2i in the low nibble;
//     the first differing nibble of the byte is named);
//   scale field: fp8 -> the fp32 scale (4 bytes, element 0), fp4 -> the ue8m0 byte of
//     block `element` (head elements 32*element .. 32*element + 31).
// Decoded values are the codes' values, unscaled (an fp8 code is not multiplied by its
// scale). Without a layout only byte_offset and the two bytes are set.
struct ByteMismatch {
  int64_t byte_offset = 0;
  uint8_t expected_byte = 0;
  uint8_t actual_byte = 0;

  bool in_cache = false;    // a layout placed the byte (the fields below are set)
  ref::StorageFormat format = ref::StorageFormat::kNone;
  bool owned = false;       // the slot belongs to a token (sequence, position)
  int64_t sequence = -1;    // owner, when owned
  int64_t position = -1;
  int64_t page = -1;        // physical page
  int slot = -1;            // token slot within the page
  CacheField field = CacheField::kValue;
  int element = -1;         // head element (value) or scale index (scale)
  uint32_t expected_code = 0;
  uint32_t actual_code = 0;
  double expected_value = 0.0;
  double actual_value = 0.0;

  std::string describe() const;
};

struct ByteVerdict {
  bool pass = true;
  int64_t bytes = 0;              // bytes compared
  int64_t expected_size = 0;      // plain compare: sizes may differ (then pass = false)
  int64_t actual_size = 0;
  int64_t mismatches = 0;         // differing bytes of token-owned slots (plain: all)
  int64_t value_mismatches = 0;   // paged cache: those of `mismatches` in value fields,
  int64_t scale_mismatches = 0;   // and in scale fields
  // Paged cache: elements of token-owned slots whose actual code decodes to NaN where the
  // expected one does not (e4m3fn 0x7f / 0xff, a bf16 or fp32 NaN, an fp32 scale NaN, a
  // ue8m0 0xff; e2m1 has no NaN), each counted once however many of its bytes differ.
  int64_t nan_codes = 0;
  std::optional<ByteMismatch> first_nan;        // the first of them
  // Differing bytes in slots that no token owns: a kernel must not write there.
  int64_t untouched_region_writes = 0;
  std::optional<ByteMismatch> first;            // lowest offset among `mismatches`
  std::optional<ByteMismatch> first_untouched;  // lowest offset among the writes
  bool cache = false;             // compared as a paged cache

  std::string describe() const;
};

// Byte-for-byte comparison of two buffers; a size difference fails (the common prefix is
// compared) and the first mismatch is reported by byte offset.
ByteVerdict compare_bytes(const std::vector<uint8_t>& expected,
                          const std::vector<uint8_t>& actual);

// Which token owns each cache slot: sequence s holds positions [0, seq_lens[s]) through
// page_tables[s] (PagedCacheLayout::locate). A slot named by several (sequence, position)
// pairs (a shared prefix page) is reported as its first owner in (s, pos) order.
struct CacheOwnership {
  std::vector<std::vector<int32_t>> page_tables;
  std::vector<int64_t> seq_lens;
};

// Compares two paged index-K caches of `layout` (num_pages * page_bytes() bytes each).
// Throws dsaf::Error(kBadInput) when the sizes differ or are not a whole number of
// pages, when page_tables and seq_lens differ in length, or when a position's page-table
// entry is missing or out of range.
ByteVerdict compare_paged_cache(const ref::PagedCacheLayout& layout,
                                const CacheOwnership& owners,
                                const std::vector<uint8_t>& expected,
                                const std::vector<uint8_t>& actual);

// ---------------------------------------------------------------------------------------
// 2. ULP-bounded (fp32)

// ulp_distance(a, b) for finite a, b: |m(a) - m(b)| with the monotone mapping
// m(x) = bits(x) for x >= +0 and -(bits(x) & 0x7FFFFFFF) for negative sign, so adjacent
// fp32 values are 1 apart and +0, -0 are both 0.
uint64_t ulp_distance(float a, float b);

// Histogram bucket of a distance d: 0 for d = 0, else k with 2^(k-1) <= d < 2^k
// (1 | 2-3 | 4-7 | ...); finite fp32 distances are < 2^32, so k <= 32.
inline constexpr int kUlpBuckets = 33;
int ulp_bucket(uint64_t d);

struct UlpBudget {
  // Largest ulp distance of a charged mismatch.
  uint64_t max_ulp = 0;
  // Largest fraction of elements that may be charged mismatches (FlashInfer's
  // max_mismatch_pct / 100).
  double max_mismatch_fraction = 0.0;
  // TransformerEngine forgives round-side flips; when true they are not charged.
  bool forgive_round_side_flips = false;
};

// One element of an ulp comparison. `exact` is NaN when no exact tensor was given.
struct UlpElement {
  int64_t index = 0;
  std::vector<int64_t> coordinates;  // index split by the shape, when one was given
  float expected = 0.0f;
  float actual = 0.0f;
  double exact = 0.0;
  uint64_t ulp = 0;
};

// Classification of every element:
//   anomaly mismatch  the two differ in class among {finite, NaN, +Inf, -Inf}
//                     (NaN payloads are not compared); fails any budget;
//   equal             ulp distance 0 (this includes +0 vs -0, counted in zero_sign_flips);
//   round-side flip   1 ulp apart and the exact value lies strictly between them: both are
//                     valid roundings of a value near the exact one (needs `exact`);
//   other mismatch    every other finite difference.
// Charged mismatches = other mismatches + (flips unless the budget forgives them).
// pass iff no anomaly, every charged mismatch is <= max_ulp and
// charged <= max_mismatch_fraction * elements.
struct UlpVerdict {
  bool pass = true;
  UlpBudget budget;
  int64_t elements = 0;
  std::vector<int64_t> histogram = std::vector<int64_t>(kUlpBuckets, 0);  // finite pairs
  uint64_t max_ulp = 0;  // over all finite pairs
  int64_t anomaly_mismatches = 0;
  int64_t round_side_flips = 0;
  int64_t other_mismatches = 0;
  int64_t charged = 0;
  int64_t zero_sign_flips = 0;  // +0 vs -0: equal in ulp, differing in bits
  bool have_exact = false;
  std::optional<UlpElement> first_anomaly;
  std::optional<UlpElement> first_mismatch;  // first other (non-flip) mismatch
  std::optional<UlpElement> first_flip;
  std::optional<UlpElement> worst;           // largest distance, first of equals

  std::string describe() const;
};

// `exact` (same length, or empty) is the fp64 oracle for flip classification; `shape`
// (product = size, or empty) only turns indices into coordinates in the report.
// Throws dsaf::Error(kBadInput) on length mismatches or a negative budget fraction.
UlpVerdict compare_ulp(const std::vector<float>& expected, const std::vector<float>& actual,
                       const UlpBudget& budget = {}, const std::vector<double>& exact = {},
                       const std::vector<int64_t>& shape = {});

// ---------------------------------------------------------------------------------------
// 3. Metric-level

// DeepGEMM calc_diff, in fp64: 1 - 2 * sum(x*y) / sum(x*x + y*y); 0 when both are all
// zero. Equals sum((x - y)^2) / sum(x^2 + y^2), so 0 iff x == y and 1 for orthogonal x, y.
double calc_diff(const std::vector<float>& x, const std::vector<float>& y);
double calc_diff(const std::vector<double>& x, const std::vector<double>& y);
// sum(x*y) / sqrt(sum(x*x) * sum(y*y)) in fp64; 1 when both are all zero, 0 when only
// one is.
double cosine_similarity(const std::vector<float>& x, const std::vector<float>& y);
double cosine_similarity(const std::vector<double>& x, const std::vector<double>& y);

struct MetricVerdict {
  bool pass = true;        // calc_diff <= max_calc_diff (NaN fails)
  double max_calc_diff = 0.0;
  int64_t elements = 0;
  double calc_diff = 0.0;
  double cosine = 1.0;

  std::string describe() const;
};

// Throws dsaf::Error(kBadInput) when the lengths differ.
MetricVerdict compare_metric(const std::vector<float>& expected, const std::vector<float>& actual,
                             double max_calc_diff = 0.0);
MetricVerdict compare_metric(const std::vector<double>& expected,
                             const std::vector<double>& actual, double max_calc_diff = 0.0);

// ---------------------------------------------------------------------------------------
// 4. Determinism

// Calls are numbered 1..runs; every call is compared with the first.
struct DeterminismVerdict {
  bool pass = true;
  int runs = 0;
  int differing_runs = 0;
  int first_differing_run = 0;   // 0 when all agree
  int64_t first_byte = -1;       // first differing byte of that run (-1: size only)
  uint8_t baseline_byte = 0;
  uint8_t differing_byte = 0;
  int64_t baseline_size = 0;
  int64_t differing_size = 0;

  // States that repeatability does not prove correctness (DeepGEMM #433).
  std::string describe() const;
};

// Calls `run` `runs` times (>= 2, else dsaf::Error(kBadInput)) and compares the outputs
// bit for bit.
DeterminismVerdict check_determinism(const std::function<std::vector<uint8_t>()>& run,
                                     int runs);

}  // namespace dsaf::oracle
