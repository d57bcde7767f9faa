// File: verdict.cc — byte-exact, ulp-bounded, metric-level and determinism verdicts
// (verdict.h).
#include "oracle/verdict.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

#include "reference/error.h"
#include "reference/numeric/bit_cast.h"
#include "reference/numeric/minifloat.h"
#include "reference/numeric/ue8m0.h"

namespace dsaf::oracle {
namespace {

using ref::StorageFormat;

// printf into a std::string (the reports are small; no fmt dependency here).
[[gnu::format(printf, 1, 2)]] std::string printf_string(const char* pattern, ...) {
  va_list args;
  va_start(args, pattern);
  va_list copy;
  va_copy(copy, args);
  const int size = std::vsnprintf(nullptr, 0, pattern, copy);
  va_end(copy);
  std::string out(static_cast<size_t>(size > 0 ? size : 0), '\0');
  if (size > 0) std::vsnprintf(out.data(), out.size() + 1, pattern, args);
  va_end(args);
  return out;
}

uint32_t load_u16(const uint8_t* p) {
  return static_cast<uint32_t>(p[0] | (p[1] << 8));
}
uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// Values per fp4 ue8m0 scale (32): the head over its scale bytes.
int fp4_block() {
  return ref::kHeadDim / ref::scale_bytes_per_head(StorageFormat::kFp4E2m1);
}

// The codec name of a cache field, as the report prints it.
const char* codec_name(StorageFormat format, CacheField field) {
  if (field == CacheField::kScale) {
    return format == StorageFormat::kFp4E2m1 ? "ue8m0" : "fp32";
  }
  switch (format) {
    case StorageFormat::kFp8E4m3fn: return "e4m3fn";
    case StorageFormat::kFp4E2m1: return "e2m1";
    case StorageFormat::kBf16:
    case StorageFormat::kFp4SimulatedBf16: return "bf16";
    case StorageFormat::kFp32: return "fp32";
    case StorageFormat::kNone: break;
  }
  return "none";
}

// Hex digits of one code of the field (e2m1 1, e4m3fn / ue8m0 2, bf16 4, fp32 8).
int code_digits(StorageFormat format, CacheField field) {
  const std::string name = codec_name(format, field);
  if (name == "e2m1") return 1;
  if (name == "bf16") return 4;
  if (name == "fp32") return 8;
  return 2;
}

// Reads element `element` of `field` of the token at `at` from a cache: its raw code and
// the code's decoded value (unscaled).
void read_element(const ref::PagedCacheLayout& layout, const std::vector<uint8_t>& cache,
                  ref::CacheLocation at, CacheField field, int element, uint32_t& code,
                  double& value) {
  const StorageFormat format = layout.format();
  if (field == CacheField::kScale) {
    const uint8_t* p = cache.data() + layout.scale_offset(at);
    if (format == StorageFormat::kFp4E2m1) {
      code = p[element];
      value = ref::decode_ue8m0(p[element]);
    } else {  // fp8: one fp32 scale
      code = load_u32(p);
      value = ref::float_from_bits(code);
    }
    return;
  }
  const uint8_t* p = cache.data() + layout.value_offset(at);
  switch (format) {
    case StorageFormat::kFp8E4m3fn:
      code = p[element];
      value = ref::decode_e4m3fn(p[element]);
      break;
    case StorageFormat::kFp4E2m1:
      code = (p[element / 2] >> (4 * (element % 2))) & 0xF;
      value = ref::decode_e2m1(static_cast<uint8_t>(code));
      break;
    case StorageFormat::kBf16:
    case StorageFormat::kFp4SimulatedBf16:
      code = load_u16(p + 2 * element);
      value = ref::decode_bf16(static_cast<uint16_t>(code));
      break;
    case StorageFormat::kFp32:
      code = load_u32(p + 4 * element);
      value = ref::float_from_bits(code);
      break;
    case StorageFormat::kNone: break;
  }
}

// The token slot (page * page_size + slot within the page) that byte `offset` belongs to.
int64_t slot_of_byte(const ref::PagedCacheLayout& layout, int64_t offset) {
  const int64_t page = offset / layout.page_bytes();
  const int64_t in_page = offset % layout.page_bytes();
  const int value_bytes = ref::value_bytes_per_head(layout.format());
  const int scale_bytes = ref::scale_bytes_per_head(layout.format());
  const int64_t value_region = static_cast<int64_t>(layout.page_size()) * value_bytes;
  const int64_t slot =
      in_page < value_region ? in_page / value_bytes : (in_page - value_region) / scale_bytes;
  return page * layout.page_size() + slot;
}

struct Owner {
  int64_t sequence = -1;
  int64_t position = -1;
};

// Places byte `offset` in the cache and reads the element it belongs to from both buffers.
ByteMismatch locate_byte(const ref::PagedCacheLayout& layout, const std::vector<Owner>& owners,
                         const std::vector<uint8_t>& expected, const std::vector<uint8_t>& actual,
                         int64_t offset) {
  ByteMismatch m;
  m.byte_offset = offset;
  m.expected_byte = expected[offset];
  m.actual_byte = actual[offset];
  m.in_cache = true;
  m.format = layout.format();

  const int value_bytes = ref::value_bytes_per_head(layout.format());
  const int scale_bytes = ref::scale_bytes_per_head(layout.format());
  const int64_t value_region = static_cast<int64_t>(layout.page_size()) * value_bytes;
  m.page = offset / layout.page_bytes();
  const int64_t in_page = offset % layout.page_bytes();
  int byte_in_field = 0;
  if (in_page < value_region) {
    m.field = CacheField::kValue;
    m.slot = static_cast<int>(in_page / value_bytes);
    byte_in_field = static_cast<int>(in_page % value_bytes);
  } else {
    m.field = CacheField::kScale;
    m.slot = static_cast<int>((in_page - value_region) / scale_bytes);
    byte_in_field = static_cast<int>((in_page - value_region) % scale_bytes);
  }
  const Owner owner = owners[m.page * layout.page_size() + m.slot];
  m.owned = owner.sequence >= 0;
  m.sequence = owner.sequence;
  m.position = owner.position;

  // Which element of the head the byte holds.
  const StorageFormat format = layout.format();
  if (m.field == CacheField::kScale) {
    m.element = format == StorageFormat::kFp4E2m1 ? byte_in_field : 0;
  } else if (format == StorageFormat::kFp4E2m1) {
    // Two nibbles per byte, element 2i low: name the first nibble that differs.
    const bool low_differs = ((m.expected_byte ^ m.actual_byte) & 0xF) != 0;
    m.element = 2 * byte_in_field + (low_differs ? 0 : 1);
  } else {
    m.element = byte_in_field / (value_bytes / ref::kHeadDim);
  }
  const ref::CacheLocation at{m.page, m.slot};
  read_element(layout, expected, at, m.field, m.element, m.expected_code, m.expected_value);
  read_element(layout, actual, at, m.field, m.element, m.actual_code, m.actual_value);
  return m;
}

std::string float_with_bits(float x) {
  return printf_string("%.9g (0x%08x)", static_cast<double>(x), ref::float_bits(x));
}

std::string describe_element(const UlpElement& e) {
  std::string out = printf_string("index %lld", static_cast<long long>(e.index));
  if (!e.coordinates.empty()) {
    out += " [";
    for (size_t i = 0; i < e.coordinates.size(); ++i) {
      out += printf_string("%s%lld", i ? ", " : "", static_cast<long long>(e.coordinates[i]));
    }
    out += "]";
  }
  out += ": expected " + float_with_bits(e.expected) + ", actual " + float_with_bits(e.actual);
  if (!std::isnan(e.exact)) out += printf_string(", exact %.17g", e.exact);
  if (std::isfinite(e.expected) && std::isfinite(e.actual)) {
    out += printf_string(", %llu ulp", static_cast<unsigned long long>(e.ulp));
  }
  return out;
}

// Non-finite class of an fp32 value; 0 = finite.
enum class Anomaly { kFinite, kNan, kPosInf, kNegInf };
Anomaly anomaly_of(float x) {
  if (std::isnan(x)) return Anomaly::kNan;
  if (std::isinf(x)) return x > 0 ? Anomaly::kPosInf : Anomaly::kNegInf;
  return Anomaly::kFinite;
}

int64_t monotone(float x) {
  const uint32_t bits = ref::float_bits(x);
  const int64_t magnitude = bits & 0x7FFF'FFFFu;
  return (bits & 0x8000'0000u) ? -magnitude : magnitude;
}

template <class T>
void check_same_length(const std::vector<T>& x, const std::vector<T>& y, const char* what) {
  if (x.size() != y.size()) {
    throw_bad_input(
        printf_string("%s: tensors differ in length (%zu vs %zu)", what, x.size(), y.size()));
  }
}

template <class T>
double calc_diff_impl(const std::vector<T>& x, const std::vector<T>& y) {
  check_same_length(x, y, "calc_diff");
  double sum_xy = 0.0;
  double sum_squares = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    const double yi = y[i];
    sum_xy += xi * yi;
    sum_squares += xi * xi + yi * yi;
  }
  if (sum_squares == 0.0) return 0.0;
  return 1.0 - 2.0 * sum_xy / sum_squares;
}

template <class T>
double cosine_impl(const std::vector<T>& x, const std::vector<T>& y) {
  check_same_length(x, y, "cosine_similarity");
  double sum_xy = 0.0;
  double sum_xx = 0.0;
  double sum_yy = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    const double yi = y[i];
    sum_xy += xi * yi;
    sum_xx += xi * xi;
    sum_yy += yi * yi;
  }
  if (sum_xx == 0.0 && sum_yy == 0.0) return 1.0;
  if (sum_xx == 0.0 || sum_yy == 0.0) return 0.0;
  return sum_xy / (std::sqrt(sum_xx) * std::sqrt(sum_yy));
}

template <class T>
MetricVerdict metric_impl(const std::vector<T>& expected, const std::vector<T>& actual,
                          double max_calc_diff) {
  MetricVerdict v;
  v.max_calc_diff = max_calc_diff;
  v.elements = static_cast<int64_t>(expected.size());
  v.calc_diff = calc_diff_impl(expected, actual);
  v.cosine = cosine_impl(expected, actual);
  v.pass = v.calc_diff <= max_calc_diff;  // NaN fails
  return v;
}

}  // namespace

const char* to_string(CacheField field) {
  return field == CacheField::kValue ? "value" : "scale";
}

// ---------------------------------------------------------------------------------------
// 1. Byte-exact

std::string ByteMismatch::describe() const {
  const std::string bytes =
      printf_string("byte %lld (expected 0x%02x, actual 0x%02x)",
                    static_cast<long long>(byte_offset), expected_byte, actual_byte);
  if (!in_cache) return bytes;
  std::string where =
      owned ? printf_string("sequence %lld position %lld (page %lld slot %d)",
                            static_cast<long long>(sequence), static_cast<long long>(position),
                            static_cast<long long>(page), slot)
            : printf_string("page %lld slot %d (owned by no token)", static_cast<long long>(page),
                            slot);
  std::string element_name;
  if (field == CacheField::kValue) {
    element_name = printf_string("value element %d", element);
  } else if (format == StorageFormat::kFp4E2m1) {
    element_name = printf_string("scale %d (elements %d..%d)", element, fp4_block() * element,
                                 fp4_block() * (element + 1) - 1);
  } else {
    element_name = "scale";
  }
  const int digits = code_digits(format, field);
  return where + ", " + element_name + ", " + bytes + ": expected " + codec_name(format, field) +
         " " + printf_string("0x%0*x = %.9g", digits, expected_code, expected_value) + ", actual " +
         printf_string("0x%0*x = %.9g", digits, actual_code, actual_value);
}

std::string ByteVerdict::describe() const {
  std::string out = pass ? "PASS byte-exact: " : "FAIL byte-exact: ";
  if (expected_size != actual_size) {
    out +=
        printf_string("sizes differ (expected %lld bytes, actual %lld); ",
                      static_cast<long long>(expected_size), static_cast<long long>(actual_size));
  }
  out += printf_string("%lld bytes compared%s, %lld differ", static_cast<long long>(bytes),
                       cache ? " as a paged cache" : "", static_cast<long long>(mismatches));
  if (cache) out += " in token-owned slots";
  out += ".";
  if (first) out += " First mismatch: " + first->describe() + ".";
  if (cache) {
    out += printf_string(
        " %lld untouched-region writes (bytes of slots no token owns, which a "
        "kernel must not touch)",
        static_cast<long long>(untouched_region_writes));
    out += first_untouched ? "; first: " + first_untouched->describe() + "." : ".";
  }
  return out;
}

ByteVerdict compare_bytes(const std::vector<uint8_t>& expected,
                          const std::vector<uint8_t>& actual) {
  ByteVerdict v;
  v.expected_size = static_cast<int64_t>(expected.size());
  v.actual_size = static_cast<int64_t>(actual.size());
  v.bytes = std::min(v.expected_size, v.actual_size);
  for (int64_t i = 0; i < v.bytes; ++i) {
    if (expected[i] == actual[i]) continue;
    if (v.mismatches++ == 0) {
      ByteMismatch m;
      m.byte_offset = i;
      m.expected_byte = expected[i];
      m.actual_byte = actual[i];
      v.first = m;
    }
  }
  v.pass = v.mismatches == 0 && v.expected_size == v.actual_size;
  return v;
}

ByteVerdict compare_paged_cache(const ref::PagedCacheLayout& layout, const CacheOwnership& owners,
                                const std::vector<uint8_t>& expected,
                                const std::vector<uint8_t>& actual) {
  const int64_t page_bytes = layout.page_bytes();
  if (expected.size() != actual.size() || static_cast<int64_t>(expected.size()) % page_bytes != 0) {
    throw_bad_input(
        printf_string("paged caches of %zu and %zu bytes: both must be the same whole "
                      "number of %lld-byte pages",
                      expected.size(), actual.size(), static_cast<long long>(page_bytes)));
  }
  if (owners.page_tables.size() != owners.seq_lens.size()) {
    throw_bad_input(printf_string("%zu page tables but %zu sequence lengths",
                                  owners.page_tables.size(), owners.seq_lens.size()));
  }
  const int64_t num_pages = static_cast<int64_t>(expected.size()) / page_bytes;

  // Owner of every token slot, first (sequence, position) wins.
  std::vector<Owner> slot_owner(static_cast<size_t>(num_pages * layout.page_size()));
  for (size_t s = 0; s < owners.page_tables.size(); ++s) {
    for (int64_t pos = 0; pos < owners.seq_lens[s]; ++pos) {
      const ref::CacheLocation at = layout.locate(owners.page_tables[s], pos, num_pages);
      Owner& owner = slot_owner[at.page * layout.page_size() + at.offset];
      if (owner.sequence < 0) owner = {static_cast<int64_t>(s), pos};
    }
  }

  ByteVerdict v;
  v.cache = true;
  v.expected_size = v.actual_size = v.bytes = static_cast<int64_t>(expected.size());
  for (int64_t i = 0; i < v.bytes; ++i) {
    if (expected[i] == actual[i]) continue;
    const bool owned = slot_owner[slot_of_byte(layout, i)].sequence >= 0;
    int64_t& count = owned ? v.mismatches : v.untouched_region_writes;
    std::optional<ByteMismatch>& first = owned ? v.first : v.first_untouched;
    if (count++ == 0) first = locate_byte(layout, slot_owner, expected, actual, i);
  }
  v.pass = v.mismatches == 0 && v.untouched_region_writes == 0;
  return v;
}

// ---------------------------------------------------------------------------------------
// 2. ULP-bounded

uint64_t ulp_distance(float a, float b) {
  const int64_t d = monotone(a) - monotone(b);
  return static_cast<uint64_t>(d < 0 ? -d : d);
}

int ulp_bucket(uint64_t d) {
  int k = 0;
  while (d != 0) {
    ++k;
    d >>= 1;
  }
  return std::min(k, kUlpBuckets - 1);
}

std::string UlpVerdict::describe() const {
  std::string out = pass ? "PASS" : "FAIL";
  out += printf_string(
      " ulp-bounded (budget: max %llu ulp, mismatch fraction %g, round-side flips %s): "
      "%lld elements, %lld NaN/Inf position mismatches, %lld round-side flips, %lld "
      "other mismatches; charged %lld",
      static_cast<unsigned long long>(budget.max_ulp), budget.max_mismatch_fraction,
      budget.forgive_round_side_flips ? "forgiven" : "charged", static_cast<long long>(elements),
      static_cast<long long>(anomaly_mismatches), static_cast<long long>(round_side_flips),
      static_cast<long long>(other_mismatches), static_cast<long long>(charged));
  out +=
      printf_string(" (fraction %g); max %llu ulp; histogram {",
                    elements ? static_cast<double>(charged) / static_cast<double>(elements) : 0.0,
                    static_cast<unsigned long long>(max_ulp));
  bool any = false;
  for (int k = 0; k < static_cast<int>(histogram.size()); ++k) {
    if (histogram[k] == 0) continue;
    const std::string range = k <= 1 ? printf_string("%d", k)
                                     : printf_string("%llu-%llu", 1ull << (k - 1), (1ull << k) - 1);
    out += printf_string("%s%s ulp: %lld", any ? ", " : "", range.c_str(),
                         static_cast<long long>(histogram[k]));
    any = true;
  }
  out += "}.";
  if (zero_sign_flips) {
    out += printf_string(" %lld +0/-0 pairs (0 ulp, different bits).",
                         static_cast<long long>(zero_sign_flips));
  }
  if (first_anomaly) out += " First NaN/Inf mismatch at " + describe_element(*first_anomaly) + ".";
  if (first_mismatch) out += " First other mismatch at " + describe_element(*first_mismatch) + ".";
  if (first_flip) out += " First round-side flip at " + describe_element(*first_flip) + ".";
  if (worst && worst->ulp > 1 && !(first_mismatch && first_mismatch->index == worst->index)) {
    out += " Worst at " + describe_element(*worst) + ".";
  }
  if (!have_exact) {
    out +=
        " No exact reference was given, so 1-ulp differences cannot be classified as "
        "round-side flips.";
  }
  return out;
}

UlpVerdict compare_ulp(const std::vector<float>& expected, const std::vector<float>& actual,
                       const UlpBudget& budget, const std::vector<double>& exact,
                       const std::vector<int64_t>& shape) {
  check_same_length(expected, actual, "compare_ulp");
  if (!exact.empty() && exact.size() != expected.size()) {
    throw_bad_input(printf_string("compare_ulp: exact tensor has %zu elements, the results %zu",
                                  exact.size(), expected.size()));
  }
  if (!(budget.max_mismatch_fraction >= 0.0)) {
    throw_bad_input("compare_ulp: max_mismatch_fraction must be >= 0");
  }
  if (!shape.empty()) {
    int64_t product = 1;
    for (int64_t extent : shape) product *= extent;
    if (product != static_cast<int64_t>(expected.size())) {
      throw_bad_input(printf_string("compare_ulp: shape holds %lld elements, the tensors %zu",
                                    static_cast<long long>(product), expected.size()));
    }
  }

  UlpVerdict v;
  v.budget = budget;
  v.elements = static_cast<int64_t>(expected.size());
  v.have_exact = !exact.empty();
  const auto element = [&](int64_t i, uint64_t ulp) {
    UlpElement e;
    e.index = i;
    int64_t rest = i;
    e.coordinates.assign(shape.size(), 0);
    for (size_t d = shape.size(); d-- > 0;) {
      e.coordinates[d] = rest % shape[d];
      rest /= shape[d];
    }
    e.expected = expected[i];
    e.actual = actual[i];
    e.exact = v.have_exact ? exact[i] : std::nan("");
    e.ulp = ulp;
    return e;
  };

  uint64_t max_charged_ulp = 0;
  for (int64_t i = 0; i < v.elements; ++i) {
    const float a = expected[i];
    const float b = actual[i];
    const Anomaly class_a = anomaly_of(a);
    if (class_a != anomaly_of(b)) {
      if (v.anomaly_mismatches++ == 0) v.first_anomaly = element(i, 0);
      continue;
    }
    if (class_a != Anomaly::kFinite) continue;  // same NaN / Inf position

    const uint64_t ulp = ulp_distance(a, b);
    ++v.histogram[ulp_bucket(ulp)];
    if (ulp == 0) {
      if (ref::float_bits(a) != ref::float_bits(b)) ++v.zero_sign_flips;
      continue;
    }
    if (ulp > v.max_ulp) {
      v.max_ulp = ulp;
      v.worst = element(i, ulp);
    }
    const double lo = std::min(a, b);
    const double hi = std::max(a, b);
    const bool flip = ulp == 1 && v.have_exact && lo < exact[i] && exact[i] < hi;
    if (flip) {
      if (v.round_side_flips++ == 0) v.first_flip = element(i, ulp);
      if (budget.forgive_round_side_flips) continue;
    } else if (v.other_mismatches++ == 0) {
      v.first_mismatch = element(i, ulp);
    }
    ++v.charged;
    max_charged_ulp = std::max(max_charged_ulp, ulp);
  }
  v.pass = v.anomaly_mismatches == 0 && max_charged_ulp <= budget.max_ulp &&
           static_cast<double>(v.charged) <=
               budget.max_mismatch_fraction * static_cast<double>(v.elements);
  return v;
}

// ---------------------------------------------------------------------------------------
// 3. Metric-level

double calc_diff(const std::vector<float>& x, const std::vector<float>& y) {
  return calc_diff_impl(x, y);
}
double calc_diff(const std::vector<double>& x, const std::vector<double>& y) {
  return calc_diff_impl(x, y);
}
double cosine_similarity(const std::vector<float>& x, const std::vector<float>& y) {
  return cosine_impl(x, y);
}
double cosine_similarity(const std::vector<double>& x, const std::vector<double>& y) {
  return cosine_impl(x, y);
}

MetricVerdict compare_metric(const std::vector<float>& expected, const std::vector<float>& actual,
                             double max_calc_diff) {
  return metric_impl(expected, actual, max_calc_diff);
}
MetricVerdict compare_metric(const std::vector<double>& expected, const std::vector<double>& actual,
                             double max_calc_diff) {
  return metric_impl(expected, actual, max_calc_diff);
}

std::string MetricVerdict::describe() const {
  return printf_string(
      "%s metric-level (budget calc_diff <= %g): over %lld elements, calc_diff = "
      "%.6g (DeepGEMM: 1 - 2*sum(x*y)/sum(x*x + y*y), fp64) and cosine similarity "
      "%.9g. A global scalar can hide a few large element errors: it is reported "
      "for comparability with DeepGEMM and FlashMLA, not as proof of agreement.",
      pass ? "PASS" : "FAIL", max_calc_diff, static_cast<long long>(elements), calc_diff, cosine);
}

// ---------------------------------------------------------------------------------------
// 4. Determinism

std::string DeterminismVerdict::describe() const {
  std::string out;
  if (pass) {
    out = printf_string("PASS determinism: all %d runs are bitwise identical (%lld bytes).", runs,
                        static_cast<long long>(baseline_size));
  } else {
    out = printf_string(
        "FAIL determinism: %d of the %d later runs differ from run 1; the first "
        "is run %d",
        differing_runs, runs - 1, first_differing_run);
    if (baseline_size != differing_size) {
      out += printf_string(", whose size differs (%lld bytes vs %lld)",
                           static_cast<long long>(differing_size),
                           static_cast<long long>(baseline_size));
    }
    if (first_byte >= 0) {
      out += printf_string(", at byte %lld (run 1: 0x%02x, run %d: 0x%02x)",
                           static_cast<long long>(first_byte), baseline_byte, first_differing_run,
                           differing_byte);
    }
    out += ".";
  }
  out +=
      " Repeatability does not prove correctness: a kernel can return the same wrong "
      "bytes every time (DeepGEMM #433), so compare against the reference too.";
  return out;
}

DeterminismVerdict check_determinism(const std::function<std::vector<uint8_t>()>& run, int runs) {
  if (runs < 2) throw_bad_input(printf_string("check_determinism needs >= 2 runs, got %d", runs));
  DeterminismVerdict v;
  v.runs = runs;
  const std::vector<uint8_t> baseline = run();
  v.baseline_size = v.differing_size = static_cast<int64_t>(baseline.size());
  for (int r = 2; r <= runs; ++r) {
    const std::vector<uint8_t> output = run();
    if (output == baseline) continue;
    if (v.differing_runs++ > 0) continue;
    v.first_differing_run = r;
    v.differing_size = static_cast<int64_t>(output.size());
    const size_t common = std::min(output.size(), baseline.size());
    const auto diff = std::mismatch(baseline.begin(), baseline.begin() + common, output.begin());
    if (diff.first != baseline.begin() + common) {
      v.first_byte = diff.first - baseline.begin();
      v.baseline_byte = *diff.first;
      v.differing_byte = *diff.second;
    }
  }
  v.pass = v.differing_runs == 0;
  return v;
}

}  // namespace dsaf::oracle
