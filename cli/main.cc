// File: main.cc — `dsa-fidelity`, the command line (DESIGN.md "Command line").
// Exit codes: 0 pass, 1 a verdict failed, 2 bad input / usage / environment.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "oracle/selftest.h"
#include "reference/error.h"
#include "reference/recipe.h"
#include "reference/recipe_json.h"

namespace {

constexpr int kExitPass = 0;
constexpr int kExitVerdictFailed = 1;
constexpr int kExitBadInput = 2;

int cmd_recipes(bool as_json, const std::string& file) {
  std::vector<dsaf::ref::Recipe> recipes = dsaf::ref::presets();
  if (!file.empty()) {
    const auto extra = dsaf::ref::load_recipe_file(file);
    recipes.insert(recipes.end(), extra.begin(), extra.end());
  }
  if (as_json) {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& r : recipes) all.push_back(dsaf::ref::recipe_to_json(r));
    std::cout << all.dump(2) << "\n";
    return kExitPass;
  }
  for (const auto& r : recipes) {
    const int bytes = dsaf::ref::cache_bytes_per_token(r.key_quant.format);
    fmt::print("{:<18} {:>9}  {}\n", r.name,
               bytes > 0 ? fmt::format("{} B/tok", bytes) : std::string("-"), r.description);
  }
  return kExitPass;
}

int cmd_selftest(int threads, const std::string& json_path) {
  fmt::print("dsa-fidelity selftest: exhaustive codec cross-checks on {} thread(s)\n", threads);
  const auto checks = dsaf::oracle::run_selftest(threads, [](const dsaf::oracle::SelftestCheck& c) {
    if (c.skipped) {
      fmt::print("  SKIPPED  {}\n           vs {}: {}\n", c.name, c.oracle, c.note);
    } else {
      fmt::print("  {:<7}  {}\n           vs {}: {} mismatches in {} cases ({:.1f} s){}\n",
                 c.mismatches == 0 ? "ok" : "FAILED", c.name, c.oracle, c.mismatches, c.cases,
                 c.seconds, c.note.empty() ? "" : "\n           " + c.note);
    }
    std::fflush(stdout);
  });
  int failed = 0, skipped = 0, passed = 0;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : checks) {
    (c.skipped ? skipped : c.mismatches ? failed : passed) += 1;
    out.push_back({{"check", c.name}, {"oracle", c.oracle}, {"cases", c.cases},
                   {"mismatches", c.mismatches}, {"skipped", c.skipped}, {"note", c.note},
                   {"seconds", c.seconds}});
  }
  fmt::print("selftest: {} passed, {} failed, {} skipped\n", passed, failed, skipped);
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return failed ? kExitVerdictFailed : kExitPass;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dsa-fidelity: bit-exact verifier for sparse-attention indexer kernels"};
  app.require_subcommand(1);

  bool recipes_json = false;
  std::string recipes_file;
  auto* recipes = app.add_subcommand("recipes", "list presets and what each models");
  recipes->add_flag("--json", recipes_json, "print every field as JSON");
  recipes->add_option("--file", recipes_file, "also load user recipes from this JSON file");

  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string selftest_json;
  auto* selftest = app.add_subcommand("selftest", "exhaustive codec cross-checks vs independent oracles");
  selftest->add_option("--threads", threads, "worker threads")->check(CLI::PositiveNumber);
  selftest->add_option("--json", selftest_json, "write the results as JSON");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitPass : kExitBadInput;
  }
  try {
    if (*recipes) return cmd_recipes(recipes_json, recipes_file);
    if (*selftest) return cmd_selftest(threads, selftest_json);
  } catch (const dsaf::Error& e) {
    std::cerr << "dsa-fidelity: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "dsa-fidelity: internal error: " << e.what() << "\n";
    return kExitBadInput;
  }
  return kExitBadInput;
}
