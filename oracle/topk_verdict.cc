// File: topk_verdict.cc — a top-K row judged under a contract (topk_verdict.h).
#include "oracle/topk_verdict.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <set>

#include "reference/error.h"

namespace dsaf::oracle {
namespace {

// How many keys describe() spells out per list.
constexpr size_t kShown = 4;

std::string key_text(const TopKKey& key) {
  uint32_t bits;
  std::memcpy(&bits, &key.score, 4);
  char text[128];
  std::snprintf(text, sizeof text, "index %d (score %.9g = 0x%08x, exact rank %lld, %+.3g from the K-th score)",
                key.index, static_cast<double>(key.score), bits, static_cast<long long>(key.rank), key.gap);
  return text;
}

std::string keys_text(const std::vector<TopKKey>& keys) {
  std::string out;
  for (size_t i = 0; i < std::min(kShown, keys.size()); ++i) out += (i ? "; " : "") + key_text(keys[i]);
  if (keys.size() > kShown) out += "; ... (" + std::to_string(keys.size() - kShown) + " more)";
  return out;
}

}  // namespace

const char* to_string(TopKContractKind contract) {
  switch (contract) {
    case TopKContractKind::kOrdered: return "ordered";
    case TopKContractKind::kSet: return "set";
    case TopKContractKind::kSetTies: return "set-ties";
  }
  return "?";
}

TopKContractKind parse_topk_contract(const std::string& name) {
  for (TopKContractKind c : {TopKContractKind::kOrdered, TopKContractKind::kSet, TopKContractKind::kSetTies}) {
    if (name == to_string(c)) return c;
  }
  throw Error(ErrorKind::kUsage, "unknown top-K contract '" + name + "' (ordered, set, set-ties)");
}

TopKRowVerdict judge_topk_row(const std::vector<float>& scores, int k, const std::vector<int32_t>& actual,
                              TopKContractKind contract, TopKPaddingKind padding) {
  if (k < 1 || static_cast<int64_t>(actual.size()) != k) {
    throw_bad_input("top-K row: " + std::to_string(actual.size()) + " entries for K " + std::to_string(k));
  }
  // The order below is a strict weak order only without NaN (stable_sort's precondition).
  for (size_t i = 0; i < scores.size(); ++i) {
    if (std::isnan(scores[i])) {
      throw_bad_input("top-K row: NaN score at position " + std::to_string(i) + " (no top-K order holds NaN)");
    }
  }
  TopKRowVerdict v;
  const int64_t n = static_cast<int64_t>(scores.size());
  v.length = n;
  v.k = k;
  const int64_t m = std::min<int64_t>(k, n);
  // The reference order (topk.h): higher score first (as doubles: -0.0 == +0.0), then
  // lower index; rank[i] = position of i in it, from 1.
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return static_cast<double>(scores[a]) > static_cast<double>(scores[b]);
  });
  std::vector<int64_t> rank(n);
  for (int64_t r = 0; r < n; ++r) rank[order[r]] = r + 1;
  v.has_cut = m > 0;
  const double tau = m > 0 ? static_cast<double>(scores[order[m - 1]]) : 0.0;
  v.cut_score = m > 0 ? scores[order[m - 1]] : 0.0f;

  std::set<int32_t> seen;
  for (int64_t j = 0; j < k; ++j) {
    const int32_t a = actual[j];
    if (j >= m) {
      if (padding == TopKPaddingKind::kMinusOne && a != -1) ++v.wrong_padding;
      continue;
    }
    std::string problem;
    if (a == -1) {
      problem = "entry " + std::to_string(j) + " is -1, but the row has " + std::to_string(n) + " valid positions";
    } else if (a < 0 || a >= n) {
      problem = "entry " + std::to_string(j) + " is " + std::to_string(a) + ", outside the row's [0, " +
                std::to_string(n) + ")";
    } else if (!seen.insert(a).second) {
      problem = "entry " + std::to_string(j) + " repeats index " + std::to_string(a);
    }
    if (!problem.empty() && v.invalid.size() < kShown) v.invalid.push_back(problem);
    v.invalid_count += !problem.empty();
  }
  bool in_order = v.invalid_count == 0;
  for (int64_t j = 0; j < m && in_order; ++j) in_order = actual[j] == order[j];
  v.identical = in_order && v.wrong_padding == 0;

  const std::set<int32_t> expected(order.begin(), order.begin() + m);
  const auto key = [&](int32_t i) { return TopKKey{i, scores[i], rank[i], static_cast<double>(scores[i]) - tau}; };
  int64_t missing = 0, extra = 0;
  for (int32_t i : expected) {
    if (seen.count(i)) continue;
    ++missing;
    if (static_cast<double>(scores[i]) > tau) {
      v.misses.push_back(key(i));
    } else {
      ++v.tie_swaps;  // scores[i] == tau: E holds nothing below the cut
    }
  }
  for (int32_t i : seen) {
    if (expected.count(i)) continue;
    ++extra;
    if (static_cast<double>(scores[i]) < tau) v.intruders.push_back(key(i));  // nothing outside E is above the cut
  }
  std::sort(v.misses.begin(), v.misses.end(), [](const TopKKey& a, const TopKKey& b) { return a.rank < b.rank; });
  std::sort(v.intruders.begin(), v.intruders.end(), [](const TopKKey& a, const TopKKey& b) { return a.rank < b.rank; });
  v.order_only = v.invalid_count == 0 && missing == 0 && extra == 0 && !in_order;
  if (v.misses.size() >= 2) {
    float best_missing = v.misses[0].score;  // misses are sorted by rank: the first scores highest
    int32_t first_missing = v.misses[0].index;
    for (const TopKKey& miss : v.misses) first_missing = std::min(first_missing, miss.index);
    int32_t last_kept = -1;  // the highest selected index scoring at most best_missing
    for (int32_t i : seen) {
      if (static_cast<double>(scores[i]) <= static_cast<double>(best_missing)) last_kept = std::max(last_kept, i);
    }
    v.misses_in_index_order = last_kept < first_missing;
  }

  const bool entries_ok = v.invalid_count == 0 && v.wrong_padding == 0;
  switch (contract) {
    case TopKContractKind::kOrdered: v.pass = v.identical; break;
    case TopKContractKind::kSet: v.pass = entries_ok && missing == 0 && extra == 0; break;
    case TopKContractKind::kSetTies: v.pass = entries_ok && v.misses.empty() && v.intruders.empty(); break;
  }
  return v;
}

std::string TopKRowVerdict::describe() const {
  std::string out = "length " + std::to_string(length) + ", K " + std::to_string(k);
  if (has_cut) {
    uint32_t bits;
    std::memcpy(&bits, &cut_score, 4);
    char text[64];
    std::snprintf(text, sizeof text, ", K-th score %.9g = 0x%08x", static_cast<double>(cut_score), bits);
    out += text;
  }
  out += ": ";
  std::vector<std::string> parts;
  if (identical) parts.push_back("identical to the reference, in order");
  for (const std::string& line : invalid) parts.push_back("invalid: " + line);
  if (invalid_count > static_cast<int64_t>(invalid.size())) {
    parts.push_back(std::to_string(invalid_count - static_cast<int64_t>(invalid.size())) + " more invalid entries");
  }
  if (wrong_padding > 0) {
    parts.push_back(std::to_string(wrong_padding) + " entries past the row's valid positions are not -1");
  }
  if (order_only) parts.push_back("the same indices as the reference in another order (order only)");
  if (tie_swaps > 0) {
    parts.push_back(std::to_string(tie_swaps) + " tie substitution(s) at the cut (keys scoring the K-th score)");
  }
  if (!misses.empty()) {
    parts.push_back(std::to_string(misses.size()) + " key(s) above the cut missing: " + keys_text(misses));
  }
  if (!intruders.empty()) {
    parts.push_back(std::to_string(intruders.size()) + " key(s) below the cut selected: " + keys_text(intruders));
  }
  if (misses_in_index_order) {
    parts.push_back("the missing keys all come after every selected key that scores no more than they do "
                    "(lost in index order, as past a full candidate buffer)");
  }
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
  return out;
}

}  // namespace dsaf::oracle
