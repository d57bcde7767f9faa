// The command line as a user meets it: exit codes and the JSON of `recipes`.
#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli/cli_run.h"

namespace {

using dsaf::testing_cli::CliRun;
using dsaf::testing_cli::run_shell;

CliRun run(const std::string& args) { return run_shell(std::string(DSAF_CLI_PATH) + " " + args + " 2>/dev/null"); }

TEST(CliRecipes, JsonListsAllTenPresetsWithTheirFields) {
  const CliRun r = run("recipes --json");
  ASSERT_EQ(r.exit_code, 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 10u);
  for (const auto& recipe : j) {
    for (const char* field : {"name", "key_norm", "rope", "hadamard", "key_quant", "query_quant",
                              "score", "topk", "page_size", "source"}) {
      EXPECT_TRUE(recipe.contains(field)) << field;
    }
  }
  EXPECT_EQ(j[6]["name"], "sglang-v4-fp8");
  EXPECT_EQ(j[6]["key_norm"]["rsqrt"], "sm90_approx");
  EXPECT_EQ(j[8]["cache_bytes_per_token"], 68);
  EXPECT_EQ(j[9]["name"], "sglang-v41-fp4");
  EXPECT_EQ(j[9]["key_norm"]["order"], "warp_tree_halves");
  EXPECT_EQ(j[9]["key_quant"]["fp4_prestage"], "fake_quant");
}

TEST(CliExitCodes, BadUsageAndBadInputExitTwo) {
  EXPECT_EQ(run("").exit_code, 2);
  EXPECT_EQ(run("no-such-command").exit_code, 2);
  EXPECT_EQ(run("recipes --file /nonexistent.json").exit_code, 2);
  const std::string path = testing::TempDir() + "bad_recipe.json";
  std::ofstream(path) << R"({"base": "exact", "name": "x", "bogus": 1})";
  EXPECT_EQ(run("recipes --file " + path).exit_code, 2);
  std::ofstream(path) << "{ not json";
  EXPECT_EQ(run("recipes --file " + path).exit_code, 2);
}

TEST(CliRecipes, LoadsAUserRecipeFile) {
  const std::string path = testing::TempDir() + "good_recipe.json";
  std::ofstream(path) << R"([{"base": "dsv32-ref", "name": "mine", "hadamard": false}])";
  const CliRun r = run("recipes --json --file " + path);
  ASSERT_EQ(r.exit_code, 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 11u);
  EXPECT_EQ(j[10]["name"], "mine");
  EXPECT_EQ(j[10]["hadamard"], false);
}

}  // namespace

namespace {

// Bad input to the studies: exit code 2 and exactly one line on stderr.
// "__timeout__ ARGS": the run is killed after 10 s (a hang then reads as exit 124).
CliRun run_capturing_stderr(const std::string& args, const std::string& cwd = "") {
  const std::string prefix = "__timeout__ ";
  const bool limited = args.rfind(prefix, 0) == 0;
  return run_shell((cwd.empty() ? "" : "cd '" + cwd + "' && ") + (limited ? "timeout 10 " : "") +
                   std::string(DSAF_CLI_PATH) + " " + (limited ? args.substr(prefix.size()) : args) + " 2>&1 >/dev/null");
}

TEST(CliStudies, BadInputExitsTwoWithOneClearLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"needle --recipes no-such-recipe --context 2k", "unknown recipe"},
      {"needle --recipes exact --context 2k..3k", "context range"},
      {"needle --recipes exact --context 0", "context"},
      {"needle --recipes exact --context 2k --topk 0", "--topk"},
      {"sweep --recipes exact --context 2k --topk -5", "--topk"},
      {"needle --recipes exact --context 2k --depths 0.5..2", "depths"},
      {"sweep --recipes exact --context 2k --activations uniform", "activation kind"},
      {"sweep --recipes exact, --context 2k", "list of names"},
      {"report /nonexistent.json --out /tmp/x", "no results file"},
      // Accepted before with exit 0 (issue 26 item 8), or printed on two lines (item 9):
      {"needle --recipes exact --context 64 --topk 64", "not below the context 64"},
      {"sweep --recipes exact --context 2k --topk 4096", "not below the context 2048"},
      {"needle --recipes exact --context 2k --margins -1", "margins: -1 is not a finite number >= 0"},
      {"needle --recipes exact --context 2k --activation-seed -1", "'-1' is not an integer in 0 .. 18446744073709551615"},
      {"sweep --recipes exact --context 2k --activation-seed 123456789012345678901", "--activation-seed"},
      {"selftest --threads 0", "not in range 1 to 4096"},
      {"recipes --no-such-flag", "--no-such-flag"},
      {"sweep --recipes exact --context 2k --out ''", "--out: the value is empty"},
      {"needle --recipes exact --context 2k --fixture ''", "--fixture: the value is empty"},
      {"recipes --file ''", "--file: the value is empty"},
      {"sweep --recipes sglang-v4-fp8 --context 2k --kernel builtin", "--kernel needs --device gpu"},
      {"needle --recipes sglang-v4-fp8 --context 2k --check-rows 3", "--check-rows needs --device gpu"},
      {"needle --recipes sglang-v4-fp8 --context 2k --device tpu", "--device 'tpu': cpu or gpu"},
      {"sweep --recipes sglang-v4-fp8 --context 2k --device gpu --check-keys -1", "--check-keys"},
  };
  for (const auto& [args, needle] : cases) {
    const CliRun r = run_capturing_stderr(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_NE(r.out.find(needle), std::string::npos) << args << " -> " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << " -> " << r.out;
  }
}

TEST(CliStudies, SmallNeedleAndSweepRunAndWriteResults) {
  const std::string dir = testing::TempDir() + "dsaf_cli_study";
  CliRun r = run("needle --recipes dsv32-ref,exact --context 512 --topk 16 --heads 4 --trials 1 "
                 "--depths 0.5 --margins 0.5 --threads 1 --out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("dsv32-ref"), std::string::npos);
  std::ifstream needle_json(dir + "/needle.json");
  const nlohmann::json n = nlohmann::json::parse(needle_json);
  EXPECT_EQ(n["kind"], "needle");
  EXPECT_EQ(n["activations"]["generator"], "outliers");
  r = run("sweep --recipes dsv32-ref --context 256,512 --queries 2 --topk 16 --heads 4 --out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::ifstream sweep_csv(dir + "/sweep.csv");
  std::string header;
  std::getline(sweep_csv, header);
  EXPECT_EQ(header.rfind("recipe,context,", 0), 0u);
}

// The planted-fact mode end to end: the result names its window, and `report` reads the
// exact oracle's retention from the cases: the `exact` recipe, scored by its own oracle,
// loses nothing beyond it, and its crossover is the oracle row's.
TEST(CliStudies, PlantedNeedleReportsTheOracleAndTheCrossover) {
  const std::string dir = testing::TempDir() + "dsaf_cli_planted";
  CliRun r = run("needle --recipes exact,dsv32-ref --context 256,1024 --topk 16 --heads 4 --trials 2 "
                 "--activations gaussian --depths 0.2,0.8 --margins 0.2,2 --reference-context 256 --out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::ifstream needle_json(dir + "/needle.json");
  const nlohmann::json n = nlohmann::json::parse(needle_json);
  EXPECT_EQ(n["reference_context"], 256);
  r = run("report " + dir + "/needle.json --out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::ifstream md(dir + "/report.md");
  const std::string report((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  const auto row = [&](const std::string& start) {
    const size_t at = report.find("\n| " + start + " |");
    return at == std::string::npos ? std::string() : report.substr(at + 1, report.find('\n', at + 1) - at - 1);
  };
  ASSERT_NE(report.find("### crossover"), std::string::npos) << report;
  ASSERT_NE(report.find("### lost beyond the oracle"), std::string::npos) << report;
  const std::string exact_crossover = row("exact");
  const std::string oracle_crossover = row("oracle of exact, dsv32-ref");
  ASSERT_FALSE(exact_crossover.empty());
  EXPECT_EQ(exact_crossover.substr(exact_crossover.find(" | ")), oracle_crossover.substr(oracle_crossover.find(" | ")));
  const size_t lost_table = report.find("### lost beyond the oracle");
  const size_t exact_lost = report.find("\n| exact |", lost_table);
  ASSERT_NE(exact_lost, std::string::npos);
  const std::string lost_row = report.substr(exact_lost + 1, report.find('\n', exact_lost + 1) - exact_lost - 1);
  int cells = 0;  // every cell, the total included, is "0/kept (+0)"
  for (size_t at = lost_row.find(" | "); at != std::string::npos; at = lost_row.find(" | ", at + 3)) {
    if (at + 3 >= lost_row.size()) break;
    ++cells;
    EXPECT_EQ(lost_row.compare(at + 3, 2, "0/"), 0) << lost_row;
  }
  EXPECT_EQ(cells, 3) << lost_row;  // 256, 1024, all
  // A margin no needle reaches (heavy-tailed scores leave large margins unreachable): its
  // oracle cells are empty, as the summary's, and the report still draws.
  nlohmann::json unreachable = n;
  for (auto& c : unreachable["cases"]) {
    if (c["margin"] == 2.0) c["reachable"] = false;
  }
  std::ofstream(dir + "/unreachable.json") << unreachable.dump();
  r = run("report " + dir + "/unreachable.json --out " + dir + "/unreachable");
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The JSON and CSV of a study describe the same rows, and the JSON names the command.
TEST(CliStudies, ResultFilesAgreeAndNameTheCommand) {
  const std::string dir = testing::TempDir() + "dsaf_cli_results";
  const std::string sweep_args =
      "sweep --recipes dsv32-ref --context 256 --queries 2 --topk 8 --heads 4 --attribution --out " + dir;
  CliRun r = run(sweep_args);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("stage attribution"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wrote " + dir + "/sweep.json and sweep.csv"), std::string::npos) << r.out;
  std::ifstream sweep_json(dir + "/sweep.json");
  const nlohmann::json s = nlohmann::json::parse(sweep_json);
  EXPECT_EQ(s["command"], "dsa-fidelity " + sweep_args);
  const std::vector<std::string> sweep_csv = lines_of(dir + "/sweep.csv");
  ASSERT_EQ(sweep_csv.size(), s["rows"].size() + 1);
  for (size_t i = 0; i < s["rows"].size(); ++i) {
    const nlohmann::json& row = s["rows"][i];
    const std::string prefix = row["recipe"].get<std::string>() + ",256," + row.value("variant_of", "") + "," +
                               row.value("stage", "") + ",";
    EXPECT_EQ(sweep_csv[i + 1].rfind(prefix, 0), 0u) << sweep_csv[i + 1];
  }
  EXPECT_FALSE(s["attribution"].empty());

  const std::string needle_args =
      "needle --recipes exact,dsv32-ref --context 256 --topk 8 --heads 4 --trials 1 --depths 0.5 "
      "--margins 0.5,2 --out " + dir;
  r = run(needle_args);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::ifstream needle_json(dir + "/needle.json");
  const nlohmann::json n = nlohmann::json::parse(needle_json);
  EXPECT_EQ(n["command"], "dsa-fidelity " + needle_args);
  const std::vector<std::string> needle_csv = lines_of(dir + "/needle.csv");
  ASSERT_EQ(needle_csv.size(), n["summary"].size() + 1);
  EXPECT_EQ(needle_csv[0], "recipe,context,margin_sigma,cases,retention,rank_p50,rank_worst");
  EXPECT_EQ(needle_csv[1].rfind("exact,256,0.5,", 0), 0u) << needle_csv[1];
}

// A result file that cannot be written: exit 2, one line naming it, found before the run
// (the study's progress line never appears) and neither result file written.
TEST(CliStudies, UnwritableResultFileExitsTwoBeforeTheRun) {
  const std::string dir = testing::TempDir() + "dsaf_cli_unwritable";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/sweep.json");  // a folder where the file goes
  const CliRun r =
      run_capturing_stderr("sweep --recipes exact --context 64 --queries 1 --topk 4 --heads 2 --out " + dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--out '" + dir + "/sweep.json' is a directory"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/sweep.csv"));
}

}  // namespace

namespace {

// verify needs a GPU: without one (CI) it exits 2 with one line; with one (the GPU host)
// our own kernels pass.
// A command that needs a GPU: without one (or without the device build) it exits 2 with
// one line saying so; with one it passes. True when it ran on a GPU.
bool exits_two_without_a_gpu(const CliRun& r) {
  if (r.exit_code != 2) {
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return true;
  }
  EXPECT_TRUE(r.out.find("needs a GPU") != std::string::npos || r.out.find("needs the device build") != std::string::npos)
      << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  return false;
}

TEST(CliVerify, ExitsTwoWithoutAGpuAndPassesOurKernelsWithOne) {
  exits_two_without_a_gpu(run_capturing_stderr("verify --recipe sglang-v4-fp8 --cases 2000"));
  EXPECT_EQ(run_capturing_stderr("verify --recipe no-such-recipe").exit_code, 2);
}

TEST(CliStudies, TheDeviceModeExitsTwoWithoutAGpuAndRunsWithOne) {
  const std::string args = "sweep --recipes sglang-v4-fp8 --context 2k --queries 2 --topk 64 --heads 8 --device gpu";
  if (exits_two_without_a_gpu(run_capturing_stderr(args))) {
    const CliRun r = run(args);  // the stage table is on stdout
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_NE(r.out.find("device time per stage"), std::string::npos) << r.out;
  }
}

}  // namespace

namespace {

// One argument for the test harness's own shell (popen): single-quoted, so what the
// argument holds reaches the CLI unexpanded.
std::string shell_word(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// `report` starts Python without a shell: a results path or an output folder holding
// shell syntax is only a name. (Before, the paths were pasted into a std::system line
// inside single quotes, so a quote in the name ran what followed.)
TEST(CliReport, ShellSyntaxInThePathsRunsNothing) {
  const std::filesystem::path root = testing::TempDir() + "dsaf_cli_report_injection";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  // Run from `root`, so that an injected `touch INJECTED` would leave its file there.
  const auto run_in_root = [&](const std::string& args) { return run_capturing_stderr(args, root.string()); };
  const std::string payload = "x'$(touch INJECTED)'y";
  std::ofstream(root / (payload + ".json")) << "{ not json";
  for (const std::string& args : {"report " + shell_word(payload + ".json") + " --out out",
                                  "report missing.json --out " + shell_word(payload),
                                  "report " + shell_word(payload + ".json") + " --out " + shell_word(payload)}) {
    const CliRun r = run_in_root(args);
    EXPECT_EQ(r.exit_code, 2) << args << " -> " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << " -> " << r.out;
    EXPECT_FALSE(std::filesystem::exists(root / "INJECTED")) << "the shell ran the path: " << args;
  }
}

// A results file report.py cannot read is one line and exit 2, not a Python traceback.
TEST(CliReport, MalformedResultsGiveOneLineNotATraceback) {
  const std::filesystem::path root = testing::TempDir() + "dsaf_cli_report_malformed";
  std::filesystem::create_directories(root);
  const std::vector<std::pair<std::string, std::string>> files = {
      {"truncated.json", "{\"kind\": \"sweep\", \"rows\": ["},
      {"wrong_kind.json", "{\"kind\": \"other\"}"},
      {"not_an_object.json", "[1, 2, 3]"},
      {"missing_fields.json", "{\"kind\": \"sweep\"}"},
      {"wrong_types.json", "{\"kind\": \"needle\", \"summary\": 7}"},
      {"binary.json", std::string("\xff\xfe\x00\x01", 4)},
  };
  for (const auto& [name, text] : files) {
    std::ofstream(root / name, std::ios::binary) << text;
    const CliRun r = run_capturing_stderr("report " + shell_word((root / name).string()) + " --out " +
                                          shell_word((root / "out").string()));
    EXPECT_EQ(r.exit_code, 2) << name << " -> " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << name << " -> " << r.out;
    EXPECT_EQ(r.out.find("Traceback"), std::string::npos) << name << " -> " << r.out;
  }
}

}  // namespace

namespace {

// Untrusted JSON: nesting 10^5 deep crashed the CLI (unbounded recursion while building
// the error message), duplicate names were taken (last wins), and a FIFO or a directory
// as the file hung or gave "basic_filebuf::underflow". Now each is exit 2 with one short
// line naming the file, within the time limit.
TEST(CliHostileJson, DeepNestingDuplicatesFifosAndFoldersExitTwoWithOneLine) {
  const std::filesystem::path root = testing::TempDir() + "dsaf_cli_hostile_json";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root / "checkpoint");
  const std::string deep_arrays = std::string(100000, '[') + std::string(100000, ']');
  std::string deep_objects;
  for (int i = 0; i < 50000; ++i) deep_objects += "{\"a\":";
  deep_objects += "1" + std::string(50000, '}');
  const std::vector<std::pair<std::string, std::string>> files = {
      {"deep_arrays.json", deep_arrays},
      {"deep_objects.json", deep_objects},
      {"deep_in_a_field.json", "{\"base\": \"exact\", \"name\": \"x\", \"description\": " + deep_arrays + "}"},
      {"duplicate_name.json", R"({"base": "exact", "name": "x", "name": "y"})"},
      {"duplicate_nested.json", R"({"base": "exact", "name": "x", "key_quant": {"block": 64, "block": 128}})"},
      // Names the command line could not pick, or that would change what a preset means:
      {"two_of_a_name.json", R"([{"base": "exact", "name": "a"}, {"base": "exact", "name": "a"}])"},
      {"shadows_a_preset.json", R"({"base": "dsv32-ref", "name": "dsv32-ref", "hadamard": false})"},
      {"comma_in_name.json", R"({"base": "exact", "name": "a,b"})"},
      {"nul_in_name.json", R"({"base": "exact", "name": "a\u0000b"})"},
  };
  std::vector<std::pair<std::string, std::string>> cases;  // args, what the line must name
  for (const auto& [name, text] : files) {
    std::ofstream(root / name) << text;
    cases.push_back({"recipes --file " + (root / name).string(), (root / name).string()});
    cases.push_back({"verify --recipe exact --recipe-file " + (root / name).string(), (root / name).string()});
  }
  ASSERT_EQ(mkfifo((root / "fifo.json").c_str(), 0644), 0);
  cases.push_back({"recipes --file " + (root / "fifo.json").string(), "fifo.json"});
  cases.push_back({"recipes --file " + root.string(), root.string()});
  std::ofstream(root / "checkpoint" / "config.json") << deep_objects;
  cases.push_back({"slice --checkpoint " + (root / "checkpoint").string() + " --layers 0 --out " +
                       (root / "out.h5").string(),
                   "config.json"});
  for (const auto& [args, needle] : cases) {
    const CliRun r = run_capturing_stderr("__timeout__ " + args);
    EXPECT_EQ(r.exit_code, 2) << args << " -> " << r.out.substr(0, 300);
    EXPECT_NE(r.out.find(needle), std::string::npos) << args << " -> " << r.out.substr(0, 300);
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args;
    EXPECT_LT(r.out.size(), 400u) << args;
  }
  EXPECT_FALSE(std::filesystem::exists(root / "out.h5"));
  // What `recipes --json` writes (every preset) reads back unchanged.
  std::ofstream(root / "all.json") << run("recipes --json").out;
  EXPECT_EQ(run("recipes --json --file " + (root / "all.json").string()).exit_code, 0);
}

}  // namespace

namespace {

// A full disk at the end of a study (a file-size limit fails write() the same way): exit 2
// naming the reason, and neither result file nor a temp file left. (Before, sweep.json
// was left truncated at the limit.)
TEST(CliStudies, AFullDiskLeavesNeitherResultFile) {
  const std::filesystem::path dir = testing::TempDir() + "dsaf_cli_full_disk";
  std::filesystem::remove_all(dir);
  // SIGXFSZ ignored (it stays ignored through exec), files limited to 1 KiB.
  const std::string command = "bash -c \"trap '' XFSZ; ulimit -f 1; exec " + std::string(DSAF_CLI_PATH) +
                              " sweep --recipes exact --context 256 --queries 2 --topk 4 --heads 2 --out " +
                              dir.string() + "\" 2>&1 >/dev/null";
  const CliRun r = run_shell(command);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("File too large"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::is_directory(dir));
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "a partial or temp result file was left";
}

}  // namespace

namespace {

// `inspect` on what is not a file said "no such file" for all of these.
TEST(CliInspect, NamesWhatThePathIsWhenItIsNotAFile) {
  const std::filesystem::path root = testing::TempDir() + "dsaf_cli_inspect_nodes";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root / "folder.h5");
  ASSERT_EQ(mkfifo((root / "fifo.h5").c_str(), 0644), 0);
  std::filesystem::create_symlink(root / "loop_b.h5", root / "loop_a.h5");
  std::filesystem::create_symlink(root / "loop_a.h5", root / "loop_b.h5");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {(root / "folder.h5").string(), "is a directory"},
      {(root / "fifo.h5").string(), "is not a regular file"},
      {"/dev/null", "is not a regular file"},
      {(root / "loop_a.h5").string(), "symbolic links"},
      {(root / "missing.h5").string(), "no such file"},
  };
  for (const auto& [path, needle] : cases) {
    const CliRun r = run_capturing_stderr("__timeout__ inspect " + path);
    EXPECT_EQ(r.exit_code, 2) << path << " -> " << r.out;
    EXPECT_NE(r.out.find(needle), std::string::npos) << path << " -> " << r.out;
    EXPECT_NE(r.out.find(path), std::string::npos) << path << " -> " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << path << " -> " << r.out;
  }
}

}  // namespace

namespace {

// A command run without a shell, with its peak resident memory (wait4's rusage of that
// child) and stdout with stderr.
struct Measured {
  int exit_code = -1;
  int64_t max_rss_bytes = 0;
  std::string out;
};
Measured run_measured(const std::vector<std::string>& args) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t child = fork();
  if (child == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  Measured m;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) m.out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  struct rusage usage {};
  wait4(child, &status, 0, &usage);
  m.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  m.max_rss_bytes = static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux: kilobytes
  return m;
}

// "memory: about 158 MiB planned (...)" -> bytes.
int64_t planned_bytes(const std::string& out) {
  const size_t at = out.find("memory: about ");
  if (at == std::string::npos) return -1;
  const double value = std::stod(out.substr(at + 14));
  const bool gib = out.compare(out.find(' ', at + 14) + 1, 3, "GiB") == 0;
  return static_cast<int64_t>(value * (gib ? (1 << 30) : (1 << 20)));
}

// The studies' memory model (oracle/study_keys.h) is an upper bound of what they use, and
// not a loose one: measured peak RSS <= the plan <= 3 x the measured peak, at a context
// where the key matrices dominate.
TEST(CliResources, TheMemoryPlanBoundsTheMeasuredPeak) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's shadow memory and quarantine are not the program's own";
#endif
  const std::string cli = DSAF_CLI_PATH;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{cli, "sweep", "--recipes", "dsv32-ref,sglang-v4-fp8", "--context", "32k", "--topk",
                                 "512", "--queries", "8", "--heads", "4", "--threads", "2"},
        std::vector<std::string>{cli, "needle", "--recipes", "dsv32-ref,sglang-v4-fp8", "--context", "32k", "--topk",
                                 "512", "--heads", "4", "--trials", "1", "--depths", "0.5", "--margins", "0.5",
                                 "--threads", "2"}}) {
    const Measured m = run_measured(args);
    ASSERT_EQ(m.exit_code, 0) << args[1] << ": " << m.out;
    const int64_t plan = planned_bytes(m.out);
    ASSERT_GT(plan, 0) << m.out;
    EXPECT_LE(m.max_rss_bytes, plan) << args[1] << ": measured " << m.max_rss_bytes << " B, planned " << plan;
    EXPECT_LE(plan, 3 * m.max_rss_bytes) << args[1] << ": measured " << m.max_rss_bytes << " B, planned " << plan;
  }
}

// verify's memory model (oracle/verify.h verify_peak_bytes) bounds what it uses with our
// kernels on a GPU, the CUDA runtime included: peak RSS <= the plan <= 3 x the peak.
TEST(CliResources, VerifysMemoryPlanBoundsTheMeasuredPeak) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's shadow memory and quarantine are not the program's own";
#endif
  const Measured m = run_measured({DSAF_CLI_PATH, "verify", "--recipe", "sglang-v4-fp8", "--cases", "2000"});
  if (m.exit_code == 2 && m.out.find("needs a GPU") != std::string::npos) GTEST_SKIP() << "no GPU: " << m.out;
  ASSERT_EQ(m.exit_code, 0) << m.out;
  const int64_t plan = planned_bytes(m.out);
  ASSERT_GT(plan, 0) << m.out;
  EXPECT_LE(m.max_rss_bytes, plan) << "measured " << m.max_rss_bytes << " B, planned " << plan;
  EXPECT_LE(plan, 3 * m.max_rss_bytes) << "measured " << m.max_rss_bytes << " B, planned " << plan;
}

TEST(CliResources, APlanOverTheLimitIsRefusedBeforeTheRun) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--max-memory 8g sweep --recipes dsv32-ref --context 16m --topk 512", "sweep needs about"},
      {"--max-memory 64m needle --recipes dsv32-ref --context 64k --topk 512", "more than the 64 MiB allowed"},
      {"needle --max-memory 64m --recipes dsv32-ref --context 64k --topk 512", "lower --context"},
      {"--max-memory 2x recipes", "--max-memory: '2x' is not a size"},
      {"--max-memory 0 recipes", "--max-memory"},
      {"--max-memory 1k inspect " + std::string(DSAF_FIXTURE_DATA) + "/dsv32_indexer_synthetic.h5", "size limit"},
      // verify's plan does not depend on the kernel: refused before one is opened (no GPU needed).
      {"--max-memory 300m verify --recipe sglang-v4-fp8 --kernel builtin", "verify needs about"},
      {"--max-memory 300m verify --recipe sglang-v4-fp8 --kernel ./no-such-plugin.so", "--cases does not change it"},
      {"--max-memory 150m report " + std::string(DSAF_FIXTURE_DATA) + "/dsv32_indexer_synthetic.h5 --out out",
       "report of"},
  };
  for (const auto& [args, needle] : cases) {
    const CliRun r = run_capturing_stderr("__timeout__ " + args);
    EXPECT_EQ(r.exit_code, 2) << args << " -> " << r.out;
    EXPECT_NE(r.out.find(needle), std::string::npos) << args << " -> " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << " -> " << r.out;
  }
}

}  // namespace
