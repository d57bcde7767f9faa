// File: capture_commands.cc — `compare` and `detect` on a cache capture (capture_commands.h).
#include "cli/capture_commands.h"

#include <algorithm>
#include <functional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/arguments.h"
#include "fixtures/cache_capture.h"
#include "fixtures/cache_capture_observation.h"
#include "oracle/compare.h"
#include "oracle/detect.h"
#include "oracle/results_io.h"
#include "reference/error.h"
#include "reference/recipe.h"
#include "reference/recipe_json.h"
#include "reference/rope.h"

namespace dsaf::cli {
namespace {

constexpr int kExitPass = 0;
constexpr int kExitVerdictFailed = 1;

// One paragraph: what wrote the capture, what it holds.
std::string capture_summary(const std::string& path, const fixtures::CacheCapture& c) {
  const std::vector<int64_t> slots = c.token_slots();
  const int64_t written = std::count_if(slots.begin(), slots.end(), [](int64_t s) { return s >= 0; });
  const std::string placement =
      c.slots.empty() ? fmt::format("page tables of {} sequences", c.page_tables.size() / c.page_table_stride)
                      : std::string("a slot map");
  std::string out = fmt::format("capture {}: engine '{}', kernel '{}'{}{}\n", path, c.engine, c.kernel,
                                c.version.empty() ? "" : ", version '" + c.version + "'",
                                c.recipe.empty() ? "" : "; claims recipe " + c.recipe);
  out += fmt::format(
      "  {} tokens ({} written) of {} keys, placed by {}; page size {}, {} cache of {} pages; RoPE table of {} "
      "rows from the capture; norm {}",
      c.tokens(), written, fixtures::tensor_dtype_name(c.k_dtype), placement, c.page_size,
      fixtures::cache_format_name(c.format), c.num_pages(), c.rope_cos.size() / ref::kRopePairs,
      c.norm_weight.empty() ? "none" : c.norm_bias.empty() ? "weight" : "weight and bias");
  if (c.synthetic) out += "\n  synthetic: " + c.synthetic_label;
  return out;
}

std::vector<std::string> output_names(const fixtures::CacheCapture& c) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : c.outputs) names.push_back(name);
  return names;
}

nlohmann::json capture_json(const std::string& path, const fixtures::CacheCapture& c, const std::string& command_line) {
  return {{"command", command_line},  {"capture", path},     {"engine", c.engine},
          {"kernel", c.kernel},       {"version", c.version}, {"claimed_recipe", c.recipe},
          {"not_compared", output_names(c)}};
}

void print_outputs_note(const fixtures::CacheCapture& c) {
  if (c.outputs.empty()) return;
  fmt::print("query/logits/top-K datasets present but not compared: {} (this version compares the key cache only)\n",
             fmt::join(output_names(c), ", "));
}

int run_compare(const std::string& path, const fixtures::CacheCapture& capture, const ref::Recipe& recipe,
                const std::string& json_path, const std::string& command_line) {
  const oracle::KeyObservation obs = fixtures::observation_of(capture);
  fmt::print("compare: {} against recipe {}\n{}\n", path, recipe.name, capture_summary(path, capture));
  const oracle::CaptureVerdict verdict = oracle::compare_capture(obs, recipe);
  fmt::print("key cache: {}\n", verdict.describe());
  nlohmann::json j = capture_json(path, capture, command_line);
  j["recipe"] = recipe.name;
  j["verdict"] = oracle::to_json(verdict);
  j["pass"] = verdict.pass;
  if (!verdict.pass) {
    // Which single field of the recipe, changed, reproduces the bytes (detect.h).
    StagedProgress progress("compare");
    const oracle::Detection d = oracle::detect_capture(obs, {recipe}, std::ref(progress));
    progress.finish();
    for (const oracle::FieldChange& c : d.explaining) fmt::print("  explained by one recipe field: {}\n", c.change);
    if (d.explaining.empty()) fmt::print("  no single recipe field explains it\n");
    j["explaining"] = oracle::to_json(d)["explaining"];
  }
  print_outputs_note(capture);
  if (!json_path.empty()) oracle::write_text_file(json_path, oracle::json_file_text(j));
  fmt::print("{}\n", verdict.pass ? "PASSED" : "FAILED");
  return verdict.pass ? kExitPass : kExitVerdictFailed;
}

int run_detect(const std::string& path, const fixtures::CacheCapture& capture, const std::vector<ref::Recipe>& candidates,
               const std::string& json_path, const std::string& command_line) {
  std::vector<std::string> names;
  for (const ref::Recipe& r : candidates) names.push_back(r.name);
  fmt::print("detect: {} against {} recipes ({})\n{}\n", path, candidates.size(), fmt::join(names, ", "),
             capture_summary(path, capture));
  StagedProgress progress("detect");
  const oracle::Detection d = oracle::detect_capture(fixtures::observation_of(capture), candidates, std::ref(progress));
  progress.finish();
  fmt::print("{}\n", d.describe());
  print_outputs_note(capture);
  const bool matched = !d.matches.empty();
  if (!json_path.empty()) {
    nlohmann::json j = capture_json(path, capture, command_line);
    j["detection"] = oracle::to_json(d);
    j["pass"] = matched;
    oracle::write_text_file(json_path, oracle::json_file_text(j));
  }
  fmt::print("{}\n", matched ? "MATCHED" : "NO EXACT MATCH");
  return matched ? kExitPass : kExitVerdictFailed;
}

void add_common_options(CLI::App* cmd, std::string& capture, std::string& recipe_file, std::string& json) {
  cmd->add_option("--capture", capture, "cache capture .h5 file (fixtures/SCHEMA.md §10)")->required()->check(kNotEmpty);
  cmd->add_option("--recipe-file", recipe_file, "JSON file with more recipes")->check(kNotEmpty);
  cmd->add_option("--json", json, "write the result as JSON")->check(kNotEmpty);
}

}  // namespace

CaptureCommands::CaptureCommands(CLI::App& app) {
  compare_ = app.add_subcommand("compare", "compare a captured key cache with a recipe's bytes (or detect the recipe)");
  add_common_options(compare_, capture_path_, recipe_file_, json_path_);
  compare_->add_option("--recipe", recipe_, "recipe the kernel implements; without it, detect the recipe")
      ->check(kNotEmpty);
  detect_ = app.add_subcommand("detect", "which recipe reproduces a captured key cache, else the field that explains it");
  add_common_options(detect_, capture_path_, recipe_file_, json_path_);
  detect_->add_option("--recipes", recipes_, "comma-separated candidates (default: the presets and the file's recipes)")
      ->check(kNotEmpty);
}

std::optional<int> CaptureCommands::run(const std::string& command_line) const {
  if (!compare_->parsed() && !detect_->parsed()) return std::nullopt;
  if (!json_path_.empty()) check_output_file("--json", json_path_, "");
  const bool one_recipe = compare_->parsed() && !recipe_.empty();
  std::vector<ref::Recipe> candidates;
  if (one_recipe || !recipes_.empty()) {
    candidates = resolve_recipes(one_recipe ? "--recipe" : "--recipes", one_recipe ? recipe_ : recipes_, recipe_file_);
    if (one_recipe && candidates.size() != 1) throw Error(ErrorKind::kUsage, "--recipe takes one recipe");
  } else {
    candidates = ref::presets();
    if (!recipe_file_.empty()) {
      for (ref::Recipe& r : ref::load_recipe_file(recipe_file_)) candidates.push_back(std::move(r));
    }
  }
  const fixtures::CacheCapture capture = fixtures::read_cache_capture(capture_path_);
  if (one_recipe) return run_compare(capture_path_, capture, candidates[0], json_path_, command_line);
  return run_detect(capture_path_, capture, candidates, json_path_, command_line);
}

}  // namespace dsaf::cli
