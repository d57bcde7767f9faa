// File: verdict_metric.cc — metric-level verdicts: DeepGEMM calc_diff and cosine
// similarity, for comparability only (verdict.h, section 3).
#include <cmath>

#include "oracle/verdict.h"
#include "oracle/verdict_text.h"

namespace dsaf::oracle {
namespace {

using verdict_detail::check_same_length;
using verdict_detail::printf_string;

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

}  // namespace dsaf::oracle
