// File: shard_plan.cc — assignment of a study's work units to shards (shard_plan.h).
#include "oracle/shard_plan.h"

#include <algorithm>
#include <numeric>

#include "reference/error.h"

namespace dsaf::oracle {
namespace {

// A decimal integer of at most 9 digits (so it fits an int), else -1.
int small_decimal(const std::string& text) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoi(text);
}

}  // namespace

Shard parse_shard(const std::string& text) {
  const size_t slash = text.find('/');
  const std::string shown = "'" + text.substr(0, 40) + "'";
  const int index = slash == std::string::npos ? -1 : small_decimal(text.substr(0, slash));
  const int count = slash == std::string::npos ? -1 : small_decimal(text.substr(slash + 1));
  if (index < 0 || count < 0) {
    throw Error(ErrorKind::kUsage, "--shard " + shown + " is not INDEX/COUNT (e.g. 0/4: the first of 4 shards)");
  }
  if (count < 1) throw Error(ErrorKind::kUsage, "--shard " + shown + ": the count must be >= 1");
  if (index >= count) {
    throw Error(ErrorKind::kUsage, "--shard " + shown + ": the index must be below the count (shards are 0.." +
                                       std::to_string(count - 1) + ")");
  }
  return {index, count};
}

std::vector<int> assign_units(const std::vector<int64_t>& costs, int count) {
  if (count < 1) throw Error(ErrorKind::kUsage, "shard count " + std::to_string(count) + " < 1");
  std::vector<size_t> order(costs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return costs[a] > costs[b]; });
  std::vector<int64_t> load(static_cast<size_t>(count), 0);
  std::vector<int> owner(costs.size(), 0);
  for (const size_t unit : order) {
    // min_element returns the first of equal loads: the lower index.
    const auto least = std::min_element(load.begin(), load.end());
    owner[unit] = static_cast<int>(least - load.begin());
    *least += costs[unit];
  }
  return owner;
}

std::vector<size_t> units_of_shard(const std::vector<int64_t>& costs, Shard shard) {
  const std::vector<int> owner = assign_units(costs, shard.count);
  std::vector<size_t> mine;
  for (size_t unit = 0; unit < owner.size(); ++unit) {
    if (owner[unit] == shard.index) mine.push_back(unit);
  }
  return mine;
}

}  // namespace dsaf::oracle
