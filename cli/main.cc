// File: main.cc — `dsa-fidelity`, the command line (docs/design.md "Command line").
// Thin: parse the arguments, call the oracle, print its typed results; the result files
// are written by oracle/results_io.h.
// Exit codes: 0 pass, 1 a verdict failed, 2 bad input / usage / environment.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/arguments.h"
#include "cli/capture_commands.h"
#include "cli/study_device_options.h"
#include "cli/tool_version.h"
#include "cli/verify_command.h"
#include "fixtures/fixture.h"
#include "fixtures/slice.h"
#include "fixtures/study_inputs.h"
#include "fixtures/untrusted.h"
#include "oracle/needle.h"
#include "oracle/results_io.h"
#include "oracle/selftest.h"
#include "oracle/shard_files.h"
#include "oracle/shard_plan.h"
#include "oracle/study_keys.h"
#include "oracle/sweep.h"
#include "oracle/verify.h"
#include "reference/error.h"
#include "reference/recipe.h"
#include "reference/recipe_fields.h"
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
  // Each preset with the upstream code it names and whether it was run against it
  // (verified) or only read (modelled): docs/conformance.md.
  const auto status_name = [](dsaf::ref::ProvenanceStatus status) {
    for (const auto& [value, name] : dsaf::ref::enum_names(status))
      if (value == status) return name;
    return "?";
  };
  for (const auto& r : recipes) {
    const int bytes = dsaf::ref::cache_bytes_per_token(r.key_quant.format);
    fmt::print("{:<18} {:>9}  {:<8}  {}\n", r.name,
               bytes > 0 ? fmt::format("{} B/tok", bytes) : std::string("-"),
               status_name(r.provenance.status), r.description);
    if (!r.provenance.upstream.empty()) fmt::print("{:30}from: {}\n", "", r.provenance.upstream);
    if (!r.provenance.evidence.empty()) fmt::print("{:30}{}\n", "", r.provenance.evidence);
  }
  return kExitPass;
}

int cmd_selftest(int threads, const std::string& json_path) {
  fmt::print("dsa-fidelity selftest: exhaustive codec cross-checks on {} thread(s)\n", threads);
  std::fflush(stdout);
  // A bar a check (its cases), erased when the check's verdict is printed.
  dsaf::cli::StagedProgress progress("selftest");
  int check = 0;
  const auto on_progress = [&](int64_t done, int64_t total) {
    progress("check " + std::to_string(check + 1), done, total);
  };
  const auto checks = dsaf::oracle::run_selftest(threads, [&](const dsaf::oracle::SelftestCheck& c) {
    progress.finish();
    ++check;
    if (c.skipped) {
      fmt::print("  SKIPPED  {}\n           vs {}: {}\n", c.name, c.oracle, c.note);
    } else {
      fmt::print("  {:<7}  {}\n           vs {}: {} mismatches in {} cases ({:.1f} s){}\n",
                 c.mismatches == 0 ? "ok" : "FAILED", c.name, c.oracle, c.mismatches, c.cases,
                 c.seconds, c.note.empty() ? "" : "\n           " + c.note);
    }
    std::fflush(stdout);
  }, on_progress);
  int failed = 0, skipped = 0, passed = 0;
  for (const auto& c : checks) (c.skipped ? skipped : c.mismatches ? failed : passed) += 1;
  fmt::print("selftest: {} passed, {} failed, {} skipped\n", passed, failed, skipped);
  // Atomic (temp file and rename); a --json that cannot be written is an error (exit 2).
  if (!json_path.empty()) {
    dsaf::oracle::write_text_file(json_path, dsaf::oracle::json_file_text(dsaf::oracle::selftest_to_json(checks)));
  }
  return failed ? kExitVerdictFailed : kExitPass;
}

std::string context_label(int64_t n) {
  return n % 1024 == 0 ? std::to_string(n / 1024) + "K" : std::to_string(n);
}


// What a study's table calls its activations: "fixture" or the generator's name.
std::string activations_label(const nlohmann::json& activations) {
  return activations.contains("fixture") ? "fixture" : activations.value("generator", std::string("synthetic"));
}

// Mean recall@K (p1 in brackets) per recipe and context, and the stage attribution.
void print_sweep_table(const dsaf::oracle::SweepResult& result) {
  const dsaf::oracle::SweepLayout& layout = result.layout;
  fmt::print("recall@{} vs exact (mean [p1]) — {} activations, {} queries x {} seed(s)\n", layout.topk,
             activations_label(layout.activations), layout.queries, layout.seeds.empty() ? size_t{1} : layout.seeds.size());
  fmt::print("{:<28}", "recipe");
  for (int64_t n : layout.contexts) fmt::print("{:>18}", context_label(n));
  fmt::print("\n");
  std::string last;
  for (const dsaf::oracle::SweepRow& row : result.rows) {
    if (row.recipe != last) fmt::print("{}{:<28}", last.empty() ? "" : "\n", row.recipe);
    last = row.recipe;
    fmt::print("{:>18}", fmt::format("{:.4f} [{:.4f}]", row.metrics.recall.mean, row.metrics.recall.p1));
  }
  fmt::print("\n");
  if (!result.attribution.empty()) {
    fmt::print("\nstage attribution: recall loss accounted for by each stage (loss - loss with the stage exact)\n");
    for (const dsaf::oracle::StageAttribution& a : result.attribution) {
      fmt::print("  {:<20} {:>6} {:<12} {:+.5f} of {:.5f}\n", a.recipe, context_label(a.context), a.stage,
                 a.accounted, a.recall_loss);
    }
  }
}

// Retention per margin, recipe and context.
void print_needle_table(const dsaf::oracle::NeedleResult& result) {
  const dsaf::oracle::NeedleLayout& layout = result.layout;
  fmt::print("needle retention in top-{} (% of {} depths x {} trials), {} activations\n", layout.topk,
             layout.depths.size(), layout.trials, activations_label(layout.activations));
  for (double margin : layout.margins) {
    fmt::print("\nmargin {} sigma above the K-th exact score\n{:<20}", margin, "recipe");
    for (int64_t n : layout.contexts) fmt::print("{:>8}", context_label(n));
    for (const std::string& name : layout.recipes) {
      fmt::print("\n{:<20}", name);
      for (const dsaf::oracle::NeedleSummaryRow& row : result.summary) {
        if (row.recipe != name || row.margin != margin) continue;
        if (row.cases == 0) {
          fmt::print("{:>8}", "-");
        } else {
          fmt::print("{:>7.0f}%", 100.0 * row.retention);
        }
      }
    }
    fmt::print("\n");
  }
}

// `--shard i/n` of a study: the shard and what its file records besides the results.
struct ShardRun {
  dsaf::oracle::Shard shard;
  dsaf::oracle::ShardOrigin origin;
};

// Runs a shard's units of a study (`run_units`), writes its shard file to `out_dir`.
template <class Unit, class RunUnits, class ShardJson>
int run_study_shard(const std::string& study, const std::vector<Unit>& all_units, const ShardRun& run,
                    const std::string& out_dir, RunUnits run_units, ShardJson shard_json) {
  const std::string name = dsaf::oracle::shard_file_name(study, run.shard);
  dsaf::cli::prepare_output_folder("--out", out_dir, {name.c_str()});
  const auto units = dsaf::oracle::units_of_shard(all_units, run.shard);
  fmt::print("shard {}/{}: {} of the study's {} units (a unit is a context and a {})\n", run.shard.index,
             run.shard.count, units.size(), all_units.size(), study == "sweep" ? "seed" : "trial");
  std::fflush(stdout);
  const auto results = run_units(units, dsaf::cli::progress_bar(study + " shard"));
  dsaf::oracle::write_text_file(std::filesystem::path(out_dir) / name,
                                dsaf::oracle::shard_file_text(shard_json(results)));
  fmt::print("wrote {}/{}; once every shard is done: dsa-fidelity merge --out {} {}/{}.shard-*-of-{}.json\n",
             out_dir, name, out_dir, out_dir, study, run.shard.count);
  return kExitPass;
}

int cmd_sweep(const dsaf::oracle::SweepConfig& config, const std::string& out_dir, const std::string& command_line,
              const std::optional<ShardRun>& shard) {
  if (shard) {
    return run_study_shard(
        "sweep", dsaf::oracle::sweep_units(dsaf::oracle::sweep_layout(config)), *shard, out_dir,
        [&](const auto& units, const auto& progress) { return dsaf::oracle::run_sweep_units(config, units, progress); },
        [&](const auto& results) { return dsaf::oracle::sweep_shard_json(config, shard->shard, shard->origin, results); });
  }
  dsaf::cli::prepare_output_folder("--out", out_dir, {"sweep.json", "sweep.csv"});
  const dsaf::oracle::SweepResult result = dsaf::oracle::run_sweep(config, dsaf::cli::progress_bar("sweep"));
  print_sweep_table(result);
  if (!out_dir.empty()) {
    dsaf::oracle::write_sweep_files(out_dir, result, command_line);
    fmt::print("wrote {}/sweep.json and sweep.csv\n", out_dir);
  }
  return kExitPass;
}

int cmd_needle(const dsaf::oracle::NeedleConfig& config, const std::string& out_dir, const std::string& command_line,
               const std::optional<ShardRun>& shard) {
  if (shard) {
    return run_study_shard(
        "needle", dsaf::oracle::needle_units(dsaf::oracle::needle_layout(config)), *shard, out_dir,
        [&](const auto& units, const auto& progress) { return dsaf::oracle::run_needle_units(config, units, progress); },
        [&](const auto& results) { return dsaf::oracle::needle_shard_json(config, shard->shard, shard->origin, results); });
  }
  dsaf::cli::prepare_output_folder("--out", out_dir, {"needle.json", "needle.csv"});
  const dsaf::oracle::NeedleResult result = dsaf::oracle::run_needle(config, dsaf::cli::progress_bar("needle"));
  print_needle_table(result);
  if (!out_dir.empty()) {
    dsaf::oracle::write_needle_files(out_dir, result, command_line);
    fmt::print("\nwrote {}/needle.json and needle.csv\n", out_dir);
  }
  return kExitPass;
}

// `merge`: the shard files of one sharded study into the files its unsharded run writes
// (oracle/shard_files.h), the same bytes whatever the shard count.
int cmd_merge(const std::vector<std::string>& paths, const std::string& out_dir, int64_t max_memory) {
  // Memory model: a parsed document holds about 10x its text (as `report`), the merged
  // result a fraction of that.
  int64_t text_bytes = 0;
  for (const std::string& path : paths) {
    std::error_code error;
    const auto size = std::filesystem::file_size(path, error);
    if (!error) text_bytes += static_cast<int64_t>(size);
  }
  dsaf::cli::require_memory("merge", dsaf::oracle::kStudyBaseBytes + 10 * text_bytes, max_memory,
                            "raise --max-memory (shard files hold the study's per-query metrics)");
  std::vector<dsaf::oracle::ShardFile> files;
  for (const std::string& path : paths) {
    const std::string what = "merge: '" + path + "'";
    files.push_back({path, dsaf::ref::parse_untrusted_json(dsaf::ref::read_untrusted_file(path, max_memory, what), what)});
  }
  if (dsaf::oracle::shard_study(files.front()) == "sweep") {
    const auto merged = dsaf::oracle::merge_sweep_shards(files);
    dsaf::cli::prepare_output_folder("--out", out_dir, {"sweep.json", "sweep.csv"});
    print_sweep_table(merged.result);
    dsaf::oracle::write_sweep_files(out_dir, merged.result, merged.command);
    fmt::print("merged {} shard files: wrote {}/sweep.json and sweep.csv\n", files.size(), out_dir);
    return kExitPass;
  }
  const auto merged = dsaf::oracle::merge_needle_shards(files);
  dsaf::cli::prepare_output_folder("--out", out_dir, {"needle.json", "needle.csv"});
  print_needle_table(merged.result);
  dsaf::oracle::write_needle_files(out_dir, merged.result, merged.command);
  fmt::print("\nmerged {} shard files: wrote {}/needle.json and needle.csv\n", files.size(), out_dir);
  return kExitPass;
}

// The command line as the result files name it: argv without `--shard X` / `--shard=X`,
// so that every shard of a study, and the study run whole, name the same command.
std::string study_command_line(int argc, char** argv) {
  std::string line = "dsa-fidelity";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--shard") {
      ++i;
      continue;
    }
    if (arg.rfind("--shard=", 0) == 0) continue;
    line += " " + arg;
  }
  return line;
}

// `slice`: the indexer tensors of some layers into an HDF5 fixture (fixtures/slice.h).
int cmd_slice(const std::string& checkpoint, const std::vector<int64_t>& layers, const std::string& out,
              const std::string& command_line) {
  dsaf::cli::check_output_file("--out", out, checkpoint);
  const dsaf::fixtures::Fixture fixture = dsaf::fixtures::slice_checkpoint(checkpoint, layers, command_line);
  dsaf::fixtures::write_fixture(fixture, out);
  size_t datasets = 0;
  for (const auto& [i, layer] : fixture.layers) datasets += layer.indexer.size();
  fmt::print("wrote {}: {} layer(s), {} datasets ({})\n", out, fixture.layers.size(), datasets,
             fixture.model.model_type);
  return kExitPass;
}

// `inspect`: validate any fixture (every SCHEMA.md rule, checksums) and summarise it.
int cmd_inspect(const std::string& path) {
  const dsaf::fixtures::Fixture fixture = dsaf::fixtures::open_untrusted_fixture(path);
  fmt::print("{}: valid fixture (schema {}), every checksum verified\n{}", path, fixture.schema_version,
             dsaf::fixtures::describe_fixture(fixture));
  return kExitPass;
}

// Runs `argv` (argv[0] looked up on the PATH) without a shell, so nothing in an argument is
// parsed, quoted or expanded: a path holding `'$(...)'` is only a path. stdout is inherited
// (or discarded when `quiet`); stderr is collected into `err`. Returns the exit status, or
// -1 when the program could not be started, 128 + n when signal n ended it.
int run_program(const std::vector<std::string>& argv, bool quiet, std::string& err) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return -1;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  if (quiet) posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  char buffer[4096];
  for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (err.size() < (1u << 20)) err.append(buffer, static_cast<size_t>(n));
  }
  close(pipe_fds[0]);
  if (spawned != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The last non-empty line of a program's stderr, at most 300 characters.
std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of(" \n\r\t");
  if (end == std::string::npos) return "";
  const size_t begin = text.rfind('\n', end);
  std::string line = text.substr(begin == std::string::npos ? 0 : begin + 1, end + 1 - (begin == std::string::npos ? 0 : begin + 1));
  return line.size() > 300 ? line.substr(0, 300) + "..." : line;
}

// `report` draws with matplotlib: scripts/report.py from the source tree (or
// $DSAF_REPORT_SCRIPT), run by python3 without a shell. report.py exits 2 with one line
// on a results file it cannot read; that line becomes this command's message.
int cmd_report(const std::string& results, const std::string& out_dir, int64_t max_memory) {
  if (!std::filesystem::is_regular_file(results)) {
    throw dsaf::Error(dsaf::ErrorKind::kBadInput, "report: no results file '" + results + "'");
  }
  // Memory model: Python's json holds a document in about 10x its text (boxed floats,
  // dicts), matplotlib about 200 MiB besides. Results files of sweeps and needles are kilobytes.
  constexpr int64_t kReportBaseBytes = int64_t{200} << 20;
  const int64_t planned = kReportBaseBytes + 10 * static_cast<int64_t>(std::filesystem::file_size(results));
  dsaf::cli::require_memory("report of '" + results + "'", planned, max_memory,
                            "raise --max-memory (the results of a sweep or needle are kilobytes)");
  const char* env = std::getenv("DSAF_REPORT_SCRIPT");
  const std::string script = env ? env : std::string(DSAF_SOURCE_DIR) + "/scripts/report.py";
  if (!std::filesystem::is_regular_file(script)) {
    throw dsaf::Error(dsaf::ErrorKind::kEnvironment, "report script not found: " + script);
  }
  // The first Python that has matplotlib: $DSAF_PYTHON, python3 on the PATH, the system one.
  std::string python;
  const char* env_python = std::getenv("DSAF_PYTHON");
  for (const char* candidate : {env_python, "python3", "/usr/bin/python3"}) {
    if (candidate == nullptr || *candidate == '\0') continue;
    std::string ignored;
    if (run_program({candidate, "-c", "import matplotlib"}, true, ignored) == 0) {
      python = candidate;
      break;
    }
  }
  if (python.empty()) {
    throw dsaf::Error(dsaf::ErrorKind::kEnvironment,
                      "report needs python3 with matplotlib (apt-get install python3-matplotlib)");
  }
  // report.py creates the folder once the results have been read and drawn: here only
  // what is in the way.
  if (std::filesystem::exists(out_dir) && !std::filesystem::is_directory(out_dir)) {
    throw dsaf::Error(dsaf::ErrorKind::kBadInput, "--out '" + out_dir + "': is not a directory");
  }
  std::string err;
  const int status = run_program({python, script, results, out_dir}, false, err);
  if (status == 0) return kExitPass;
  const std::string why = last_line(err);
  throw dsaf::Error(status == 2 ? dsaf::ErrorKind::kBadInput : dsaf::ErrorKind::kEnvironment,
                    why.empty() ? "report: " + script + " failed on '" + results + "' (exit " +
                                      std::to_string(status) + ")"
                                : why);
}

}  // namespace

using dsaf::cli::kNotEmpty;
using dsaf::cli::kUnsigned;

int main(int argc, char** argv) {
  CLI::App app{"dsa-fidelity: bit-exact verifier for sparse-attention indexer kernels"};
  app.require_subcommand(1);
  std::string max_memory_text;
  app.add_option("--max-memory", max_memory_text,
                 "memory a command may plan for (bytes, or with k/m/g/t; default 80% of physical memory): "
                 "sweep and needle refuse a larger estimate, file loaders read no more")
      ->check(kNotEmpty);
  app.fallthrough();
  app.set_version_flag("--version", "dsa-fidelity " + dsaf::cli::tool_version() + " (" + dsaf::cli::tool_commit() + ")");

  bool recipes_json = false;
  std::string recipes_file;
  auto* recipes = app.add_subcommand("recipes", "list presets and what each models");
  recipes->add_flag("--json", recipes_json, "print every field as JSON");
  recipes->add_option("--file", recipes_file, "also load user recipes from this JSON file")->check(kNotEmpty);

  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string selftest_json;
  auto* selftest = app.add_subcommand("selftest", "exhaustive codec cross-checks vs independent oracles");
  selftest->add_option("--threads", threads, "worker threads")->check(CLI::Range(1, 4096));
  selftest->add_option("--json", selftest_json, "write the results as JSON")->check(kNotEmpty);

  std::string recipe_names, recipe_file, contexts_text = "2k..64k", out_dir;
  std::string activation = "outliers";
  int topk = 512, activation_heads = 64;
  uint64_t activation_seed = 1;
  int study_threads = threads;
  std::string fixture_path;
  int64_t fixture_layer = -1;
  std::string shard_text;
  dsaf::cli::StudyDeviceOptions device_options;
  const auto add_study_options = [&](CLI::App* cmd) {
    dsaf::cli::add_study_device_options(cmd, device_options);
    cmd->add_option("--recipes", recipe_names, "comma-separated recipe names")->required()->check(kNotEmpty);
    cmd->add_option("--recipe-file", recipe_file, "JSON file with more recipes")->check(kNotEmpty);
    cmd->add_option("--context", contexts_text, "context lengths, e.g. 2k..64k or 4096,8192");
    cmd->add_option("--topk", topk, "K of the top-K selection");
    cmd->add_option("--activations", activation, "gaussian | heavy | outliers | clustered");
    cmd->add_option("--activation-seed", activation_seed, "seed of the synthetic activations (0 .. 2^64-1)")
        ->check(kUnsigned);
    cmd->add_option("--heads", activation_heads, "query heads");
    cmd->add_option("--threads", study_threads, "worker threads");
    cmd->add_option("--out", out_dir, "folder for the JSON and CSV results")->check(kNotEmpty);
    cmd->add_option("--fixture", fixture_path,
                    "study a fixture's real weights and activations (fixtures/SCHEMA.md) instead of synthetic ones")
        ->check(kNotEmpty);
    cmd->add_option("--fixture-layer", fixture_layer, "the fixture's activation layer (default: its only one)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--shard", shard_text,
                    "run shard I of N (0-based, e.g. 0/4) into --out as a shard file for `merge` (docs/sharding.md)")
        ->check(kNotEmpty);
  };
  int queries = 64, seeds = 1;
  bool attribution = false;
  auto* sweep = app.add_subcommand("sweep", "recipes x contexts x seeds: top-K metrics vs exact");
  add_study_options(sweep);
  sweep->add_option("--queries", queries, "query rows per context and seed");
  sweep->add_option("--seeds", seeds, "number of activation seeds");
  sweep->add_flag("--attribution", attribution, "also re-run each recipe with one stage exact at a time");
  std::string depths_text = "0.1..0.9", margins_text = "0.01,0.03,0.1,0.3", reference_text;
  int trials = 4;
  auto* needle = app.add_subcommand("needle", "needle retention in top-K vs context, depth and margin");
  add_study_options(needle);
  needle->add_option("--depths", depths_text, "needle depths in [0, 1], e.g. 0.1..0.9 or 0.1..0.9:9");
  needle->add_option("--margins", margins_text, "needle margins above the K-th exact score, in sigma");
  needle->add_option("--trials", trials, "activation seeds per context");
  needle->add_option("--reference-context", reference_text,
                     "planted fact: one query, margin measured among its last N keys (e.g. 2k), at every context");
  std::string slice_checkpoint_dir, slice_out;
  std::vector<int64_t> slice_layers;
  auto* slice = app.add_subcommand("slice", "copy layers' indexer tensors from a checkpoint into an HDF5 fixture");
  slice->add_option("--checkpoint", slice_checkpoint_dir, "checkpoint folder (config.json, *.safetensors)")->required();
  slice->add_option("--layers", slice_layers, "layer numbers, e.g. 3,10")
      ->required()
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  slice->add_option("--out", slice_out, "output .h5 file")->required();
  std::string inspect_path;
  auto* inspect = app.add_subcommand("inspect", "validate and summarise a fixture");
  inspect->add_option("file", inspect_path, "fixture .h5 file")->required();
  std::string merge_out;
  std::vector<std::string> merge_paths;
  auto* merge = app.add_subcommand("merge", "combine the shard files of a sweep or needle run with --shard");
  merge->add_option("--out", merge_out, "folder for the JSON and CSV results")->required()->check(kNotEmpty);
  merge->add_option("files", merge_paths, "every shard file of the study (*.shard-I-of-N.json), in any order")
      ->required()
      ->check(kNotEmpty);
  std::string results_path, report_out;
  auto* report = app.add_subcommand("report", "markdown + PNG plots of a sweep or needle result");
  report->add_option("results", results_path, "sweep.json or needle.json")->required();
  report->add_option("--out", report_out, "output folder")->required()->check(kNotEmpty);

  dsaf::cli::VerifyOptions verify_options;
  auto* verify = dsaf::cli::add_verify_command(app, verify_options);
  const dsaf::cli::CaptureCommands capture_commands(app);  // compare, detect

  const std::string command_line = study_command_line(argc, argv);
  if (const std::string unknown = dsaf::cli::unknown_command(app, argc, argv); !unknown.empty()) {
    std::cerr << "dsa-fidelity: " << unknown << "\n";
    return kExitBadInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e) == 0 ? kExitPass : kExitBadInput;  // --help
    // One line (CLI11's own print adds a "Run with --help" line).
    std::cerr << "dsa-fidelity: " << e.what() << " (--help lists the options)\n";
    return kExitBadInput;
  }
  try {
    const int64_t max_memory = max_memory_text.empty() ? dsaf::cli::default_memory_limit()
                                                       : dsaf::cli::parse_size("--max-memory", max_memory_text);
    dsaf::fixtures::set_read_limit(max_memory);
    if (*recipes) return cmd_recipes(recipes_json, recipes_file);
    if (*selftest) {
      if (!selftest_json.empty()) dsaf::cli::check_output_file("--json", selftest_json, "");
      return cmd_selftest(threads, selftest_json);
    }
    if (*report) return cmd_report(results_path, report_out, max_memory);
    if (*slice) return cmd_slice(slice_checkpoint_dir, slice_layers, slice_out, command_line);
    if (*inspect) return cmd_inspect(inspect_path);
    if (*merge) return cmd_merge(merge_paths, merge_out, max_memory);
    if (*verify) return dsaf::cli::run_verify_command(verify_options, command_line, max_memory);
    if (const auto code = capture_commands.run(command_line)) return *code;
    if (*sweep || *needle) {
      std::optional<ShardRun> shard;
      if (!shard_text.empty()) {
        shard = ShardRun{dsaf::oracle::parse_shard(shard_text),
                         {dsaf::cli::tool_version(), dsaf::cli::tool_commit(), command_line, ""}};
        if (out_dir.empty()) throw dsaf::Error(dsaf::ErrorKind::kUsage, "--shard needs --out (the folder for the shard file)");
      }
      if (topk < 1) throw dsaf::Error(dsaf::ErrorKind::kUsage, "--topk must be >= 1");
      if (study_threads < 1) throw dsaf::Error(dsaf::ErrorKind::kUsage, "--threads must be >= 1");
      dsaf::oracle::SyntheticSpec acts;
      acts.kind = dsaf::oracle::parse_activation_kind(activation);
      acts.seed = activation_seed;
      acts.num_heads = activation_heads;
      if (activation_heads < 1) throw dsaf::Error(dsaf::ErrorKind::kUsage, "--heads must be >= 1");
      const auto chosen = dsaf::cli::resolve_recipes("--recipes", recipe_names, recipe_file);
      const auto contexts = dsaf::cli::with_flag("--context", [&] { return dsaf::cli::parse_contexts(contexts_text); });
      // A K at or above a context selects every key: recall 1.0 that says nothing.
      for (const int64_t n : contexts) {
        if (topk >= n) {
          throw dsaf::Error(dsaf::ErrorKind::kUsage, fmt::format("--topk {} is not below the context {}: the "
                                                                 "selection would hold every key",
                                                                 topk, n));
        }
      }
      std::shared_ptr<const dsaf::oracle::ActivationSource> fixture_source;
      if (!fixture_path.empty()) {
        // A fixture brings its own activations, heads and token order.
        dsaf::cli::refuse_options(*sweep ? *sweep : *needle,
                                  {"--activations", "--activation-seed", "--heads", "--seeds"},
                                  "does not apply with --fixture (the fixture's activations are used)");
        const auto input = dsaf::fixtures::fixture_study_input(fixture_path, fixture_layer);
        fmt::print("{}\n", input.summary);
        fixture_source = input.source;
        if (shard) shard->origin.fixture_sha256 = input.sha256;
      } else if (fixture_layer >= 0) {
        throw dsaf::Error(dsaf::ErrorKind::kUsage, "--fixture-layer needs --fixture");
      }
      dsaf::cli::OpenStudyDevice device(device_options, *sweep ? *sweep : *needle);
      // The timing report's file: one a run, one a shard.
      const std::string timing_suffix =
          shard ? fmt::format(".shard-{}-of-{}", shard->shard.index, shard->shard.count) : std::string();
      if (*sweep) {
        if (queries < 1 || seeds < 1) throw dsaf::Error(dsaf::ErrorKind::kUsage, "--queries and --seeds must be >= 1");
        dsaf::oracle::SweepConfig config;
        config.recipes = chosen;
        config.contexts = contexts;
        for (int i = 1; i <= seeds; ++i) config.seeds.push_back(activation_seed * 1000003ull + i);
        config.queries = queries;
        config.topk = topk;
        config.attribution = attribution;
        config.activations = acts;
        config.source = fixture_source;
        config.threads = study_threads;
        config.device = device.device();
        device.print_plan(dsaf::oracle::sweep_layout(config).device);
        const int64_t planned = dsaf::oracle::sweep_peak_bytes(config);
        dsaf::cli::require_memory("sweep", planned, max_memory,
                                  "lower --context (its longest), --queries or --threads, or study fewer recipes");
        fmt::print("memory: about {} planned (--max-memory {})\n", dsaf::cli::size_text(planned),
                   dsaf::cli::size_text(max_memory));
        const int code = cmd_sweep(config, out_dir, command_line, shard);
        device.report(out_dir, timing_suffix);
        return code;
      }
      if (trials < 1) throw dsaf::Error(dsaf::ErrorKind::kUsage, "--trials must be >= 1");
      dsaf::oracle::NeedleConfig config;
      config.recipes = chosen;
      config.contexts = contexts;
      config.depths = dsaf::cli::with_flag("--depths", [&] { return dsaf::cli::parse_reals(depths_text); });
      config.margins = dsaf::cli::with_flag("--margins", [&] { return dsaf::cli::parse_reals(margins_text); });
      config.trials = trials;
      config.topk = topk;
      if (!reference_text.empty()) {
        const auto r = dsaf::cli::with_flag("--reference-context", [&] { return dsaf::cli::parse_contexts(reference_text); });
        if (r.size() != 1) throw dsaf::Error(dsaf::ErrorKind::kUsage, "--reference-context: one length, e.g. 2k");
        config.reference_context = r.front();
      }
      config.activations = acts;
      config.source = fixture_source;
      config.threads = study_threads;
      config.device = device.device();
      device.print_plan(dsaf::oracle::needle_layout(config).device);
      const int64_t planned = dsaf::oracle::needle_peak_bytes(config);
      dsaf::cli::require_memory("needle", planned, max_memory, "lower --context (its longest) or study fewer recipes");
      fmt::print("memory: about {} planned (--max-memory {})\n", dsaf::cli::size_text(planned),
                 dsaf::cli::size_text(max_memory));
      const int code = cmd_needle(config, out_dir, command_line, shard);
      device.report(out_dir, timing_suffix);
      return code;
    }
  } catch (const dsaf::Error& e) {
    std::cerr << "dsa-fidelity: " << e.what() << "\n";
    // A study's kernel under test disagreed with the reference: a verdict, not bad input.
    if (e.kind() == dsaf::ErrorKind::kMismatch) return kExitVerdictFailed;
    return kExitBadInput;
  } catch (const std::bad_alloc&) {
    std::cerr << "dsa-fidelity: out of memory (a shorter --context, fewer --queries, --heads or --topk need less)\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "dsa-fidelity: internal error: " << e.what() << "\n";
    return kExitBadInput;
  }
  return kExitBadInput;
}
