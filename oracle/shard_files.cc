// File: shard_files.cc — shard files and their merge (shard_files.h).
#include "oracle/shard_files.h"

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "reference/error.h"
#include "reference/recipe_json.h"

namespace dsaf::oracle {
namespace {

using nlohmann::json;

// --- exact doubles -------------------------------------------------------------------

json exact_json(double value) {
  if (std::isfinite(value)) return value;
  if (std::isnan(value)) return std::signbit(value) ? "-nan" : "nan";
  return value > 0 ? "inf" : "-inf";
}

json exact_json(const std::vector<double>& values) {
  json out = json::array();
  for (const double v : values) out.push_back(exact_json(v));
  return out;
}

// An integer field read exactly: a JSON integer (not a number with a fraction or an
// exponent such as 2.5 or 1e3) that Int holds. nlohmann's get<Int> converts a float to
// Int (undefined behaviour out of range) and wraps an integer Int cannot hold, so a
// damaged file could name another shard or context without an error.
template <class Int>
Int exact_integer(const json& j, const std::string& name) {
  constexpr auto kMin = std::numeric_limits<Int>::min();
  constexpr auto kMax = std::numeric_limits<Int>::max();
  bool fits = false;
  if (j.is_number_unsigned()) {
    fits = j.get<uint64_t>() <= static_cast<uint64_t>(kMax);
  } else if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    fits = v >= 0 ? static_cast<uint64_t>(v) <= static_cast<uint64_t>(kMax)
                  : std::is_signed_v<Int> && v >= static_cast<int64_t>(kMin);
  }
  if (!fits) {
    const std::string text = j.dump();
    const std::string shown = text.size() > 40 ? text.substr(0, 40) + "..." : text;
    throw_bad_input(fmt::format("{} is {}, not an integer in [{}, {}]", name, shown, kMin, kMax));
  }
  return j.is_number_unsigned() ? static_cast<Int>(j.get<uint64_t>()) : static_cast<Int>(j.get<int64_t>());
}

template <class Int>
Int integer_at(const json& object, const char* key) {
  return exact_integer<Int>(object.at(key), key);
}

template <class Int>
std::vector<Int> integers_at(const json& object, const char* key) {
  const json& values = object.at(key);
  if (!values.is_array()) throw_bad_input(fmt::format("{} is not an array", key));
  std::vector<Int> out;
  out.reserve(values.size());
  for (const json& v : values) out.push_back(exact_integer<Int>(v, key));
  return out;
}

double exact_double(const json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "-nan") return -std::numeric_limits<double>::quiet_NaN();
  }
  throw_bad_input("a number (or \"inf\", \"-inf\", \"nan\", \"-nan\") was expected, not " + j.dump().substr(0, 40));
}

// --- the parts every shard file has ----------------------------------------------------

json recipes_json(const std::vector<ref::Recipe>& recipes) {
  json out = json::array();
  for (const ref::Recipe& r : recipes) out.push_back(ref::recipe_to_json(r));
  return out;
}

// The shard file around a study's own config and units.
json shard_json(const std::string& study, Shard shard, const ShardOrigin& origin, json config, json units) {
  if (!origin.fixture_sha256.empty()) config["fixture_sha256"] = origin.fixture_sha256;
  return {{"kind", study + "-shard"},
          {"format", kShardFormat},
          {"tool", {{"version", origin.tool_version}, {"commit", origin.tool_commit}}},
          {"shard", {{"index", shard.index}, {"count", shard.count}}},
          {"command", origin.command},
          {"config", std::move(config)},
          {"units", std::move(units)}};
}

// "config.recipes[0].key_quant" for the JSON pointer "/config/recipes/0/key_quant".
std::string field_name(const std::string& pointer) {
  std::string name;
  size_t begin = 1;
  while (begin <= pointer.size()) {
    const size_t end = std::min(pointer.find('/', begin), pointer.size());
    const std::string token = pointer.substr(begin, end - begin);
    const bool index = !token.empty() && token.find_first_not_of("0123456789") == std::string::npos;
    name += index ? "[" + token + "]" : (name.empty() ? "" : ".") + token;
    begin = end + 1;
  }
  return name;
}

std::string value_at(const json& j, const std::string& pointer) {
  const json::json_pointer at(pointer);
  if (!j.contains(at)) return "absent";
  const std::string text = j.at(at).dump();
  return text.size() > 60 ? text.substr(0, 60) + "..." : text;
}

// Throws unless `file` and `first` agree on `key` (the whole of it), naming the first
// field where they differ and both values.
void require_same(const ShardFile& file, const ShardFile& first, const std::string& key, const std::string& why) {
  const json& a = first.json.at(key);
  const json& b = file.json.at(key);
  if (a == b) return;
  const json patch = json::diff(a, b);
  const std::string pointer = "/" + key + (patch.empty() ? "" : patch[0].at("path").get<std::string>());
  throw_bad_input(fmt::format("merge: '{}' and '{}' differ in {} ({} vs {}): {}", first.path, file.path,
                              field_name(pointer), value_at(first.json, pointer), value_at(file.json, pointer), why));
}

// Runs `read` on a file's JSON; a wrong type or a missing key is dsaf::Error(kBadInput)
// naming the file.
template <class Read>
auto reading(const ShardFile& file, Read read) -> decltype(read()) {
  try {
    return read();
  } catch (const json::exception& e) {
    throw_bad_input("merge: '" + file.path + "': " + e.what());
  } catch (const Error& e) {
    if (std::string(e.what()).rfind("merge:", 0) == 0) throw;
    throw Error(e.kind(), "merge: '" + file.path + "': " + e.what());
  }
}

// The files of one study, checked as one complete set and ordered by shard index.
std::vector<const ShardFile*> check_shard_set(const std::vector<ShardFile>& files, const std::string& study) {
  if (files.empty()) throw Error(ErrorKind::kUsage, "merge: no shard files given");
  const ShardFile& first = files.front();
  for (const ShardFile& file : files) {
    if (shard_study(file) != study) {
      throw_bad_input(fmt::format("merge: '{}' is a {} shard and '{}' a {} shard: merge one study at a time",
                                  first.path, study, file.path, shard_study(file)));
    }
    require_same(file, first, "tool", "shards must come from one build of dsa-fidelity");
    require_same(file, first, "config", "they are shards of different studies");
  }
  std::map<int, const ShardFile*> by_index;
  int count = 0;
  for (const ShardFile& file : files) {
    const int index = reading(file, [&] { return integer_at<int>(file.json.at("shard"), "index"); });
    const int file_count = reading(file, [&] { return integer_at<int>(file.json.at("shard"), "count"); });
    if (&file == &first) count = file_count;
    if (file_count != count) {
      throw_bad_input(fmt::format("merge: '{}' is shard {} of {} but '{}' of {}: shards of one --shard count only",
                                  file.path, index, file_count, first.path, count));
    }
    if (index < 0 || index >= count) {
      throw_bad_input(fmt::format("merge: '{}': shard index {} is not in 0..{}", file.path, index, count - 1));
    }
    if (const auto [it, added] = by_index.emplace(index, &file); !added) {
      throw_bad_input(fmt::format("merge: '{}' and '{}' are both shard {} of {}", it->second->path, file.path,
                                  index, count));
    }
  }
  std::vector<const ShardFile*> ordered;
  std::string missing;
  for (int i = 0; i < count; ++i) {
    if (by_index.count(i)) {
      ordered.push_back(by_index.at(i));
    } else {
      missing += (missing.empty() ? "" : ", ") + std::to_string(i);
    }
  }
  if (!missing.empty()) {
    throw_bad_input(fmt::format("merge: shard(s) {} of {} missing (given {} file(s))", missing, count, files.size()));
  }
  return ordered;
}

// Whether two units are the same unit of a study.
bool same_unit(const SweepUnit& a, const SweepUnit& b) { return a.context == b.context && a.seed == b.seed; }

bool same_unit(const NeedleUnit& a, const NeedleUnit& b) { return a.context == b.context && a.trial == b.trial; }

// Every unit of the study in canonical order from the ordered shard files: each file must
// hold exactly the units the plan gives its shard.
template <class UnitResult, class Unit, class ReadUnit>
std::vector<UnitResult> gather_units(const std::vector<const ShardFile*>& shards, const std::vector<Unit>& units,
                                     ReadUnit read_unit) {
  const std::vector<int64_t> costs = context_costs(units);
  std::vector<std::optional<UnitResult>> slots(units.size());
  const int count = static_cast<int>(shards.size());
  for (int i = 0; i < count; ++i) {
    const ShardFile& file = *shards[i];
    const std::vector<size_t> planned = units_of_shard(costs, {i, count});
    const json& held = reading(file, [&]() -> const json& { return file.json.at("units"); });
    if (!held.is_array() || held.size() != planned.size()) {
      throw_bad_input(fmt::format("merge: '{}' holds {} units; the plan gives shard {} of {} {}", file.path,
                                  held.is_array() ? held.size() : 0, i, count, planned.size()));
    }
    for (size_t k = 0; k < planned.size(); ++k) {
      UnitResult result = reading(file, [&] { return read_unit(held[k]); });
      if (!same_unit(result.unit, units[planned[k]])) {
        throw_bad_input(fmt::format("merge: '{}': unit {} is not one the plan gives shard {} of {}", file.path, k, i,
                                    count));
      }
      slots[planned[k]] = std::move(result);
    }
  }
  std::vector<UnitResult> out;
  for (auto& slot : slots) out.push_back(std::move(*slot));
  return out;
}

// The merge of either study: its shard files checked as a set, the layout read from the
// first, the units gathered in canonical order and reduced.
template <class Layout, class UnitResult, class ReadLayout, class CountUnits, class ListUnits, class ReadUnit,
          class Reduce>
auto merge_shards(const std::vector<ShardFile>& files, const std::string& study, ReadLayout read_layout,
                  CountUnits count_units, ListUnits list_units, ReadUnit read_unit, Reduce reduce) {
  const std::vector<const ShardFile*> shards = check_shard_set(files, study);
  const ShardFile& first = *shards.front();
  const Layout layout = reading(first, [&] { return read_layout(first.json.at("config")); });
  // The study's units are listed only when the files hold as many: its configuration comes
  // from a file, and a damaged one may name more units than memory holds.
  uint64_t held = 0;
  for (const ShardFile* file : shards) {
    const json& units = reading(*file, [&]() -> const json& { return file->json.at("units"); });
    held += units.is_array() ? units.size() : 0;
  }
  if (count_units(layout) != held) {
    throw_bad_input(fmt::format("merge: the configuration in '{}' names {} units; the {} shard files hold {}",
                                first.path, count_units(layout), shards.size(), held));
  }
  const std::vector<UnitResult> units = gather_units<UnitResult>(shards, list_units(layout), read_unit);
  using Result = decltype(reduce(layout, units));
  return MergedShards<Result>{reading(first, [&] { return reduce(layout, units); }),
                              reading(first, [&] { return first.json.at("command").get<std::string>(); })};
}

// --- sweep ---------------------------------------------------------------------------

// The device mode's entry (study_device.h), present only in device studies: a CPU shard
// and a device shard of one study differ in their configuration and do not merge.
void add_device(json& config, const json& device) {
  if (!device.is_null()) config["device"] = device;
}

json sweep_config_json(const SweepConfig& config, const SweepLayout& layout) {
  json studied = json::array();
  for (const SweepLayout::Studied& s : layout.studied) {
    studied.push_back({{"recipe", s.recipe}, {"variant_of", s.variant_of}, {"stage", s.stage}});
  }
  json j = {{"recipes", recipes_json(config.recipes)},
          {"contexts", layout.contexts},
          {"topk", layout.topk},
          {"activations", layout.activations},
          {"seeds", layout.seeds},
          {"queries", layout.queries},
          {"page_size", layout.page_size},
          {"attribution", config.attribution},
          {"studied", studied}};
  add_device(j, layout.device);
  return j;
}

SweepLayout sweep_layout_from_json(const json& config) {
  SweepLayout layout;
  layout.topk = integer_at<int>(config, "topk");
  layout.queries = integer_at<int>(config, "queries");
  layout.page_size = integer_at<int>(config, "page_size");
  layout.seeds = integers_at<uint64_t>(config, "seeds");
  layout.activations = config.at("activations");
  layout.contexts = integers_at<int64_t>(config, "contexts");
  for (const json& s : config.at("studied")) {
    layout.studied.push_back(
        {s.at("recipe").get<std::string>(), s.at("variant_of").get<std::string>(), s.at("stage").get<std::string>()});
  }
  layout.device = config.value("device", json());
  check_sweep_layout(layout, ErrorKind::kBadInput);
  return layout;
}

// The RowMetrics fields as columns of a unit's rows.
struct MetricColumn {
  const char* name;
  double RowMetrics::*field;
};
constexpr MetricColumn kMetricColumns[] = {
    {"recall", &RowMetrics::recall},           {"jaccard", &RowMetrics::jaccard},
    {"tie_aware_recall", &RowMetrics::tie_aware_recall}, {"value_recall", &RowMetrics::value_recall},
    {"mass_recall", &RowMetrics::mass_recall}, {"kendall_tau", &RowMetrics::kendall_tau},
    {"page_recall", &RowMetrics::page_recall}};

json rows_json(const std::vector<RowMetrics>& rows) {
  json columns = json::object();
  for (const MetricColumn& c : kMetricColumns) {
    json values = json::array();
    for (const RowMetrics& row : rows) values.push_back(exact_json(row.*(c.field)));
    columns[c.name] = std::move(values);
  }
  json valid = json::array(), changed = json::array();
  for (const RowMetrics& row : rows) {
    valid.push_back(row.threshold_valid);
    changed.push_back(row.changed);
  }
  columns["threshold_valid"] = std::move(valid);
  columns["changed"] = std::move(changed);
  return columns;
}

std::vector<RowMetrics> rows_from_json(const json& columns) {
  const size_t count = columns.at("changed").size();
  std::vector<RowMetrics> rows(count);
  const auto column = [&](const char* name) -> const json& {
    const json& values = columns.at(name);
    if (!values.is_array() || values.size() != count) {
      throw_bad_input(fmt::format("rows.{} has not {} values (as rows.changed)", name, count));
    }
    return values;
  };
  for (const MetricColumn& c : kMetricColumns) {
    const json& values = column(c.name);
    for (size_t j = 0; j < count; ++j) rows[j].*(c.field) = exact_double(values[j]);
  }
  const json& valid = column("threshold_valid");
  const json& changed = column("changed");
  for (size_t j = 0; j < count; ++j) {
    rows[j].threshold_valid = valid[j].get<bool>();
    rows[j].changed = exact_integer<int>(changed[j], "rows.changed");
  }
  return rows;
}

json sweep_unit_json(const SweepUnitResult& u) {
  json studied = json::array();
  for (size_t i = 0; i < u.rows.size(); ++i) {
    studied.push_back({{"rows", rows_json(u.rows[i])}, {"score_ulp_histogram", u.score_ulp_histograms[i]}});
  }
  return {{"context", u.unit.context}, {"seed", u.unit.seed}, {"studied", studied}};
}

SweepUnitResult sweep_unit_from_json(const json& j) {
  SweepUnitResult u;
  u.unit = {integer_at<int64_t>(j, "context"), integer_at<uint64_t>(j, "seed")};
  for (const json& s : j.at("studied")) {
    u.rows.push_back(rows_from_json(s.at("rows")));
    u.score_ulp_histograms.push_back(integers_at<int64_t>(s, "score_ulp_histogram"));
  }
  return u;
}

// --- needle --------------------------------------------------------------------------

json needle_config_json(const NeedleConfig& config, const NeedleLayout& layout) {
  json j = {{"recipes", recipes_json(config.recipes)},
          {"contexts", layout.contexts},
          {"topk", layout.topk},
          {"activations", layout.activations},
          {"depths", exact_json(layout.depths)},
          {"margins", exact_json(layout.margins)},
          {"trials", layout.trials},
          {"reference_context", layout.reference_context},
          {"recipe_names", layout.recipes}};
  add_device(j, layout.device);
  return j;
}

NeedleLayout needle_layout_from_json(const json& config) {
  NeedleLayout layout;
  layout.topk = integer_at<int>(config, "topk");
  for (const json& d : config.at("depths")) layout.depths.push_back(exact_double(d));
  for (const json& m : config.at("margins")) layout.margins.push_back(exact_double(m));
  layout.trials = integer_at<int>(config, "trials");
  layout.reference_context = integer_at<int64_t>(config, "reference_context");
  layout.activations = config.at("activations");
  layout.contexts = integers_at<int64_t>(config, "contexts");
  layout.recipes = config.at("recipe_names").get<std::vector<std::string>>();
  layout.device = config.value("device", json());
  check_needle_layout(layout, ErrorKind::kBadInput);
  return layout;
}

json case_json(const NeedleCase& c) {
  json outcomes = json::array();
  for (const NeedleOutcome& o : c.recipes) {
    outcomes.push_back({{"recipe", o.recipe}, {"rank", o.rank}, {"retained", o.retained}, {"score", exact_json(o.score)}});
  }
  return {{"context", c.context},
          {"trial", c.trial},
          {"depth", exact_json(c.depth)},
          {"position", c.position},
          {"margin", exact_json(c.margin)},
          {"tau", exact_json(c.tau)},
          {"sigma", exact_json(c.sigma)},
          {"reference_keys", c.reference_keys},
          {"model_recipes", c.model_recipes},
          {"reachable", c.reachable},
          {"beta", exact_json(c.beta)},
          {"needle_exact_score", exact_json(c.needle_exact_score)},
          {"achieved_margin", exact_json(c.achieved_margin)},
          {"exact_rank", c.exact_rank},
          {"recipes", outcomes},
          {"best_exact_score_found", exact_json(c.best_exact_score_found)},
          {"lowest_exact_score_found", exact_json(c.lowest_exact_score_found)}};
}

NeedleCase case_from_json(const json& j) {
  NeedleCase c;
  c.context = integer_at<int64_t>(j, "context");
  c.trial = integer_at<int>(j, "trial");
  c.depth = exact_double(j.at("depth"));
  c.position = integer_at<int64_t>(j, "position");
  c.margin = exact_double(j.at("margin"));
  c.tau = exact_double(j.at("tau"));
  c.sigma = exact_double(j.at("sigma"));
  c.reference_keys = integer_at<int64_t>(j, "reference_keys");
  c.model_recipes = j.at("model_recipes").get<std::vector<std::string>>();
  c.reachable = j.at("reachable").get<bool>();
  c.beta = exact_double(j.at("beta"));
  c.needle_exact_score = exact_double(j.at("needle_exact_score"));
  c.achieved_margin = exact_double(j.at("achieved_margin"));
  c.exact_rank = integer_at<int64_t>(j, "exact_rank");
  for (const json& o : j.at("recipes")) {
    c.recipes.push_back({o.at("recipe").get<std::string>(), integer_at<int64_t>(o, "rank"), o.at("retained").get<bool>(),
                         exact_double(o.at("score"))});
  }
  c.best_exact_score_found = exact_double(j.at("best_exact_score_found"));
  c.lowest_exact_score_found = exact_double(j.at("lowest_exact_score_found"));
  return c;
}

json needle_unit_json(const NeedleUnitResult& u) {
  json cases = json::array();
  for (const NeedleCase& c : u.cases) cases.push_back(case_json(c));
  return {{"context", u.unit.context}, {"trial", u.unit.trial}, {"cases", cases}};
}

NeedleUnitResult needle_unit_from_json(const json& j) {
  NeedleUnitResult u;
  u.unit = {integer_at<int64_t>(j, "context"), integer_at<int>(j, "trial")};
  for (const json& c : j.at("cases")) {
    u.cases.push_back(case_from_json(c));
    if (u.cases.back().context != u.unit.context || u.cases.back().trial != u.unit.trial) {
      throw_bad_input(fmt::format("a case of context {} trial {} in the unit of context {} trial {}",
                                  u.cases.back().context, u.cases.back().trial, u.unit.context, u.unit.trial));
    }
  }
  return u;
}

}  // namespace

std::string shard_file_name(const std::string& study, Shard shard) {
  return fmt::format("{}.shard-{}-of-{}.json", study, shard.index, shard.count);
}

std::string shard_file_text(const json& shard_file) { return shard_file.dump() + "\n"; }

json sweep_shard_json(const SweepConfig& config, Shard shard, const ShardOrigin& origin,
                      const std::vector<SweepUnitResult>& units) {
  json unit_list = json::array();
  for (const SweepUnitResult& u : units) unit_list.push_back(sweep_unit_json(u));
  return shard_json("sweep", shard, origin, sweep_config_json(config, sweep_layout(config)), std::move(unit_list));
}

json needle_shard_json(const NeedleConfig& config, Shard shard, const ShardOrigin& origin,
                       const std::vector<NeedleUnitResult>& units) {
  json unit_list = json::array();
  for (const NeedleUnitResult& u : units) unit_list.push_back(needle_unit_json(u));
  return shard_json("needle", shard, origin, needle_config_json(config, needle_layout(config)), std::move(unit_list));
}

std::string shard_study(const ShardFile& file) {
  const json& j = file.json;
  const auto kind = j.is_object() && j.contains("kind") && j["kind"].is_string() ? j["kind"].get<std::string>() : "";
  if (kind != "sweep-shard" && kind != "needle-shard") {
    throw_bad_input("merge: '" + file.path + "' is not a shard file (no kind \"sweep-shard\" or \"needle-shard\")");
  }
  const json format = j.value("format", json());
  if (format != kShardFormat) {
    throw_bad_input(fmt::format("merge: '{}' has shard format {}; this build reads format {}", file.path,
                                format.dump(), kShardFormat));
  }
  for (const char* key : {"tool", "shard", "command", "config", "units"}) {
    if (!j.contains(key)) throw_bad_input(fmt::format("merge: '{}' has no \"{}\"", file.path, key));
  }
  return kind.substr(0, kind.find('-'));
}

MergedShards<SweepResult> merge_sweep_shards(const std::vector<ShardFile>& files) {
  return merge_shards<SweepLayout, SweepUnitResult>(files, "sweep", sweep_layout_from_json, sweep_unit_count,
                                                    sweep_units, sweep_unit_from_json, reduce_sweep);
}

MergedShards<NeedleResult> merge_needle_shards(const std::vector<ShardFile>& files) {
  return merge_shards<NeedleLayout, NeedleUnitResult>(files, "needle", needle_layout_from_json, needle_unit_count,
                                                      needle_units, needle_unit_from_json, reduce_needle);
}

}  // namespace dsaf::oracle
