// File: topk.cc — deterministic top-K (topk.h): partition by a strict total order,
// then sort the selected part. O(n + K log K).
#include "reference/topk.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "reference/error.h"

namespace dsaf::ref {

std::vector<int32_t> select_topk(const std::vector<double>& scores, int64_t n_valid, int k) {
  if (k < 1) throw_bad_input("top-K: K must be >= 1");
  if (n_valid < 0 || n_valid > static_cast<int64_t>(scores.size())) {
    throw_bad_input("top-K: " + std::to_string(n_valid) + " valid positions but " +
                    std::to_string(scores.size()) + " scores");
  }
  for (int64_t i = 0; i < n_valid; ++i) {
    if (std::isnan(scores[i])) throw_bad_input("top-K: NaN score at position " + std::to_string(i));
  }
  std::vector<int32_t> order(n_valid);
  std::iota(order.begin(), order.end(), 0);
  const auto before = [&](int32_t a, int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  };
  const int64_t take = std::min<int64_t>(k, n_valid);
  std::nth_element(order.begin(), order.begin() + take - (take > 0), order.end(), before);
  std::sort(order.begin(), order.begin() + take, before);
  order.resize(take);
  order.resize(k, -1);
  return order;
}

}  // namespace dsaf::ref
