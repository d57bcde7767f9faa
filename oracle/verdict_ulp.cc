// File: verdict_ulp.cc — ulp-bounded fp32 verdicts: distance histogram, budget,
// round-side flips and NaN / Inf positions (verdict.h, section 2).
#include <algorithm>
#include <cmath>

#include "oracle/verdict.h"
#include "oracle/verdict_text.h"
#include "reference/error.h"
#include "reference/numeric/bit_cast.h"

namespace dsaf::oracle {
namespace {

using verdict_detail::check_same_length;
using verdict_detail::printf_string;

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

}  // namespace

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

}  // namespace dsaf::oracle
