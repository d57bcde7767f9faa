// File: shard_plan.h
// Which shard of a study runs which of its work units (`sweep --shard i/n`,
// `needle --shard i/n`; docs/sharding.md). A study lists its independent units in a
// canonical order, each with a cost (sweep.h, needle.h); the plan is a function of that
// list and the shard count only, so every shard and `merge` compute the same plan, and a
// unit's result does not depend on which shard ran it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsaf::oracle {

// Shard `index` of `count` (0 <= index < count). {0, 1} is the whole study.
struct Shard {
  int index = 0;
  int count = 1;
};

// "i/n" as written on the command line: two decimal integers, n >= 1, i < n. Throws
// dsaf::Error(kUsage) saying which rule the text breaks.
Shard parse_shard(const std::string& text);

// The shard that runs each unit: longest cost first (ties in canonical order), each to the
// shard with the least cost so far (ties to the lower index). With equal costs this is
// round-robin over the canonical order; with unequal ones (contexts 2k..64k) no shard
// gets more than the longest unit above an even share.
std::vector<int> assign_units(const std::vector<int64_t>& costs, int count);

// The canonical indices of the units `shard` runs, ascending.
std::vector<size_t> units_of_shard(const std::vector<int64_t>& costs, Shard shard);

// The costs of units that cost their context (the sweep's and the needle's: their work
// grows linearly with it).
template <class Unit>
std::vector<int64_t> context_costs(const std::vector<Unit>& units) {
  std::vector<int64_t> costs;
  for (const Unit& unit : units) costs.push_back(unit.context);
  return costs;
}

// The units `shard` runs, of `units` in canonical order, in that order.
template <class Unit>
std::vector<Unit> units_of_shard(const std::vector<Unit>& units, Shard shard) {
  std::vector<Unit> mine;
  for (const size_t i : units_of_shard(context_costs(units), shard)) mine.push_back(units[i]);
  return mine;
}

}  // namespace dsaf::oracle
