// The command line against hostile-but-fair input (issue 26's categories): every case
// runs the real binary in a scratch folder and must exit with its code (2: bad input or
// usage), print exactly one line on stderr naming the offending argument or file, finish
// within 10 s, and leave every file of the scratch folder as it was (no output, partial or
// whole, and no input touched). The cases are built from tables: each bad recipe file
// through every command that reads one, each non-file path through every input argument,
// each bad output path through every output argument, and the bad values of each flag.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/cli/cli_run.h"

namespace {

namespace fs = std::filesystem;

struct Case {
  std::string args;    // after the binary; {d} is the scratch folder
  std::string needle;  // a piece of the one stderr line
  int exit_code = 2;
};

// Runs `args` in `dir` under a 10 s limit (exit 124 when it is hit); `out` is the stderr.
dsaf::testing_cli::CliRun run_cli(const std::string& dir, const std::string& args) {
  return dsaf::testing_cli::run_shell("cd '" + dir + "' && timeout 10 " + std::string(DSAF_CLI_PATH) + " " + args +
                                      " 2>&1 >/dev/null");
}

// Every entry below `dir` (links not followed): its kind, and for a file its size and
// modification time (a folder's own times change when a command makes and removes a
// temporary file in it, which leaves nothing behind).
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied);
       it != fs::recursive_directory_iterator(); ++it) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode) || S_ISFIFO(st.st_mode)) it.disable_recursion_pending();
    out[it->path().string()] =
        S_ISDIR(st.st_mode) ? std::to_string(st.st_mode)
                            : std::to_string(st.st_mode) + " " + std::to_string(st.st_size) + " " +
                                  std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
  }
  return out;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// The scratch folder: bad recipe files, paths that are not regular files, a fake
// checkpoint or two, and copies of the shipped captures and fixture.
std::string make_scratch() {
  const std::string d = testing::TempDir() + "dsaf_hostile_cli";
  fs::remove_all(d);
  fs::create_directories(d + "/folder");
  fs::create_directories(d + "/out");
  write(d + "/good.json", R"([{"base": "dsv32-ref", "name": "mine", "hadamard": false}])");
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += '[';
  write(d + "/deep.json", deep);
  write(d + "/dupkey.json", R"({"base": "exact", "name": "x", "name": "y"})");
  write(d + "/nul_after.json", std::string(R"({"base": "exact", "name": "x"})") + '\0' + "junk");
  write(d + "/nul_name.json", R"({"base": "exact", "name": "a\u0000b"})");
  write(d + "/garbage_after.json", R"({"base": "exact", "name": "x"} {})");
  write(d + "/empty.json", "");
  write(d + "/not_json.json", "{ not json");
  write(d + "/unknown_field.json", R"({"base": "exact", "name": "x", "bogus": 1})");
  write(d + "/unknown_base.json", R"({"base": "no-such-preset", "name": "x"})");
  write(d + "/bad_enum.json", R"({"base": "dsv32-ref", "name": "x", "rope": {"pairing": "sideways"}})");
  write(d + "/wrong_type.json", R"({"base": "dsv32-ref", "name": "x", "hadamard": "yes"})");
  write(d + "/huge_number.json", R"({"base": "dsv32-ref", "name": "x", "topk": 1e999})");
  write(d + "/float_for_int.json", R"({"base": "dsv32-ref", "name": "x", "topk": 2.5})");
  write(d + "/fp8_block.json", R"({"base": "dsv32-ref", "name": "x", "key_quant": {"block": 32}})");
  write(d + "/prestage_fp8.json", R"({"base": "dsv32-ref", "name": "x", "key_quant": {"fp4_prestage": "fake_quant"}})");
  write(d + "/negative_floor.json", R"({"base": "dsv32-ref", "name": "x", "key_quant": {"amax_floor": -1}})");
  write(d + "/long_name.json", R"({"base": "exact", "name": ")" + std::string(65, 'a') + R"("})");
  write(d + "/comma_name.json", R"({"base": "exact", "name": "a,b"})");
  write(d + "/shadow.json", R"({"base": "dsv32-ref", "name": "sglang-v4-fp8"})");
  write(d + "/twice.json", R"([{"base": "exact", "name": "x"}, {"base": "exact", "name": "x"}])");
  write(d + "/top_string.json", R"("dsv32-ref")");
  write(d + "/array_of_numbers.json", "[1, 2, 3]");
  {  // more than the 16 MiB a recipe file may hold (sparse: no disk used)
    std::ofstream(d + "/big.json").close();
    fs::resize_file(d + "/big.json", (int64_t{17} << 20));
  }
  ::mkfifo((d + "/fifo").c_str(), 0600);
  fs::create_symlink(d + "/loop_a", d + "/loop_b");
  fs::create_symlink(d + "/loop_b", d + "/loop_a");
  write(d + "/empty.h5", "");
  write(d + "/text.h5", "this is not HDF5\n");
  fs::copy_file(std::string(DSAF_FIXTURE_DATA) + "/sglang_v4_fp8_cache_capture.h5", d + "/capture.h5");
  fs::copy_file(std::string(DSAF_FIXTURE_DATA) + "/dsv32_indexer_synthetic.h5", d + "/fixture.h5");
  {  // a capture cut short
    std::ifstream in(d + "/capture.h5", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    write(d + "/capture_cut.h5", bytes.substr(0, bytes.size() / 2));
  }
  // Checkpoints: none of them sliceable; the config is complete where the case is about
  // the weights.
  const std::string config =
      R"({"model_type": "deepseek_v32", "hidden_size": 512, "q_lora_rank": 256, "index_n_heads": 4,
          "index_head_dim": 128, "qk_rope_head_dim": 64, "index_topk": 64, "rope_theta": 10000.0,
          "rope_scaling": {"type": "yarn", "factor": 40},
          "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})";
  fs::create_directories(d + "/ckpt_no_config");
  fs::create_directories(d + "/ckpt_bad_config");
  write(d + "/ckpt_bad_config/config.json", "{");
  fs::create_directories(d + "/ckpt_dir_config/config.json");
  fs::create_directories(d + "/ckpt_fifo_config");
  ::mkfifo((d + "/ckpt_fifo_config/config.json").c_str(), 0600);
  fs::create_directories(d + "/ckpt_deep_config");
  write(d + "/ckpt_deep_config/config.json", deep);
  fs::create_directories(d + "/ckpt_no_weights");
  write(d + "/ckpt_no_weights/config.json", config);
  fs::create_directories(d + "/ckpt_garbage_weights");
  write(d + "/ckpt_garbage_weights/config.json", config);
  write(d + "/ckpt_garbage_weights/model.safetensors", "garbage");
  fs::create_directories(d + "/ckpt_fifo_weights");
  write(d + "/ckpt_fifo_weights/config.json", config);
  ::mkfifo((d + "/ckpt_fifo_weights/model.safetensors").c_str(), 0600);
  fs::create_directories(d + "/ckpt_bad_index");
  write(d + "/ckpt_bad_index/config.json", config);
  write(d + "/ckpt_bad_index/model.safetensors.index.json", R"({"weight_map": {"a": "../../etc/passwd"}})");
  write(d + "/results_bad.json", "{ not json");
  write(d + "/results_wrong.json", R"({"kind": "neither"})");
  return d;
}

// Each bad recipe file, with a piece of its message.
const std::vector<std::pair<std::string, std::string>> kBadRecipeFiles = {
    {"deep.json", "nested deeper than"},
    {"dupkey.json", "appears twice in one object"},
    {"nul_after.json", "NUL byte"},
    {"nul_name.json", "recipe name 'a?b'"},
    {"garbage_after.json", "not valid JSON"},
    {"empty.json", "not valid JSON"},
    {"not_json.json", "not valid JSON"},
    {"unknown_field.json", "bogus"},
    {"unknown_base.json", "no-such-preset"},
    {"bad_enum.json", "sideways"},
    {"wrong_type.json", "hadamard"},
    {"huge_number.json", "not valid JSON"},
    {"float_for_int.json", "topk"},
    {"fp8_block.json", "block"},
    {"prestage_fp8.json", "fp4_prestage"},
    {"negative_floor.json", "amax_floor"},
    {"long_name.json", "recipe name"},
    {"comma_name.json", "recipe name 'a,b'"},
    {"shadow.json", "differs from the preset"},
    {"twice.json", "two recipes are named 'x'"},
    {"top_string.json", "recipe"},
    {"array_of_numbers.json", "recipe"},
    {"big.json", "more than the"},
    {"folder", "is a directory"},
    {"fifo", "not a regular file"},
    {"loop_a", "cannot open"},
    {"/dev/null", "not a regular file"},
    {"missing.json", "cannot open"},
};

// Commands that read a recipe file through `--file` or `--recipe-file`.
const std::vector<std::string> kRecipeFileCommands = {
    "recipes --file {f}",
    "sweep --recipes dsv32-ref --context 512 --topk 16 --recipe-file {f}",
    "needle --recipes dsv32-ref --context 512 --topk 16 --recipe-file {f}",
    "verify --recipe dsv32-ref --recipe-file {f}",
    "compare --capture capture.h5 --recipe sglang-v4-fp8 --recipe-file {f}",
    "detect --capture capture.h5 --recipe-file {f}",
};

// Paths that are not a usable input file, with a piece of the message.
const std::vector<std::pair<std::string, std::string>> kBadInputPaths = {
    {"folder", "directory"},  {"fifo", "not a regular file"}, {"loop_a", "loop_a"},
    {"/dev/null", "/dev/null"}, {"missing.h5", "missing.h5"}, {"empty.h5", "empty.h5"},
    {"text.h5", "text.h5"},
};

// Commands that read an HDF5 input.
const std::vector<std::string> kHdf5InputCommands = {
    "inspect {f}",
    "compare --capture {f} --recipe sglang-v4-fp8",
    "detect --capture {f}",
    "sweep --recipes dsv32-ref --context 512 --topk 16 --fixture {f}",
    "needle --recipes dsv32-ref --context 512 --topk 16 --fixture {f}",
};

// Output paths a command must refuse before it works (none of them may change).
const std::vector<std::pair<std::string, std::string>> kBadOutputFiles = {
    {"folder", "directory"}, {"fifo", "fifo"}, {"/dev/full", "/dev/full"}, {"missing_dir/x.json", "missing_dir"},
};
const std::vector<std::string> kOutputFileCommands = {
    "selftest --threads 1 --json {f}",
    "compare --capture capture.h5 --recipe sglang-v4-fp8 --json {f}",
    "detect --capture capture.h5 --json {f}",
    "slice --checkpoint ckpt_no_weights --layers 0 --out {f}",
};

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const std::string& command : kRecipeFileCommands) {
    for (const auto& [file, needle] : kBadRecipeFiles) cases.push_back({replace_all(command, "{f}", file), needle});
  }
  for (const std::string& command : kHdf5InputCommands) {
    for (const auto& [file, needle] : kBadInputPaths) cases.push_back({replace_all(command, "{f}", file), needle});
  }
  for (const std::string& command : kOutputFileCommands) {
    for (const auto& [file, needle] : kBadOutputFiles) cases.push_back({replace_all(command, "{f}", file), needle});
  }
  const std::vector<Case> more = {
      // a capture cut short, a fixture where a capture belongs and the reverse
      {"compare --capture capture_cut.h5 --recipe sglang-v4-fp8", "capture_cut.h5"},
      {"detect --capture capture_cut.h5", "capture_cut.h5"},
      {"inspect capture_cut.h5", "capture_cut.h5"},
      {"compare --capture fixture.h5 --recipe sglang-v4-fp8", "fixture.h5"},
      {"sweep --recipes dsv32-ref --context 512 --topk 16 --fixture capture.h5", "capture.h5"},
      {"compare --capture capture.h5 --recipe no-such-recipe", "no-such-recipe"},
      {"detect --capture capture.h5 --recipes exact,no-such-recipe", "no-such-recipe"},
      {"compare --capture capture.h5 --recipe ''", "--recipe"},
      {"compare --capture '' --recipe sglang-v4-fp8", "--capture"},
      // slice: checkpoints that are not
      {"slice --checkpoint ckpt_no_config --layers 0 --out out/x.h5", "config.json"},
      {"slice --checkpoint ckpt_bad_config --layers 0 --out out/x.h5", "config.json"},
      {"slice --checkpoint ckpt_dir_config --layers 0 --out out/x.h5", "config.json"},
      {"slice --checkpoint ckpt_fifo_config --layers 0 --out out/x.h5", "config.json"},
      {"slice --checkpoint ckpt_deep_config --layers 0 --out out/x.h5", "nested deeper"},
      {"slice --checkpoint ckpt_no_weights --layers 0 --out out/x.h5", "safetensors"},
      {"slice --checkpoint ckpt_garbage_weights --layers 0 --out out/x.h5", "model.safetensors"},
      {"slice --checkpoint ckpt_fifo_weights --layers 0 --out out/x.h5", "model.safetensors"},
      {"slice --checkpoint ckpt_bad_index --layers 0 --out out/x.h5", "index"},
      {"slice --checkpoint missing_ckpt --layers 0 --out out/x.h5", "missing_ckpt"},
      {"slice --checkpoint good.json --layers 0 --out out/x.h5", "good.json"},
      {"slice --checkpoint ckpt_garbage_weights --layers -1 --out out/x.h5", "layer"},
      {"slice --checkpoint ckpt_garbage_weights --layers abc --out out/x.h5", "--layers"},
      {"slice --checkpoint ckpt_garbage_weights --layers 0 --out ckpt_garbage_weights/config.json", "config.json"},
      {"slice --checkpoint ckpt_garbage_weights --layers 0 --out ckpt_garbage_weights/model.safetensors",
       "model.safetensors"},
      {"slice --checkpoint ckpt_garbage_weights --layers 0 --out ''", "--out"},
      // report
      {"report results_bad.json --out out/r", "results_bad.json"},
      {"report results_wrong.json --out out/r", "results_wrong.json"},
      {"report folder --out out/r", "folder"},
      {"report fifo --out out/r", "fifo"},
      {"report missing.json --out out/r", "missing.json"},
      {"report \"\\$(touch pwned).json\" --out out/r", "touch pwned"},
      {"report results_bad.json --out ''", "--out"},
      // verify: values that must be refused before a GPU is asked for
      {"verify --recipe no-such-recipe", "no-such-recipe"},
      {"verify --recipe dsv32-ref,exact", "--recipe"},
      {"verify --recipe dsv32-ref --cases -5", "--cases"},
      {"verify --recipe dsv32-ref --cases abc", "--cases"},
      {"verify --recipe dsv32-ref --seed -1", "--seed"},
      {"verify --recipe dsv32-ref --topk-contract sorted", "sorted"},
      {"verify --recipe dsv32-ref --kernel folder", "folder"},
      {"verify --recipe dsv32-ref --kernel fifo", "fifo"},
      {"verify --recipe dsv32-ref --kernel ./missing.so", "missing.so"},
      {"verify --recipe dsv32-ref --kernel ./good.json", "good.json"},
      {"verify --recipe dsv32-ref --kernel builtin:3", "builtin:3"},
      // studies: values
      {"sweep --recipes dsv32-ref --context 2k..3k --topk 16", "context"},
      {"sweep --recipes dsv32-ref --context 0 --topk 16", "context"},
      {"sweep --recipes dsv32-ref --context -512 --topk 16", "context"},
      {"sweep --recipes dsv32-ref --context abc --topk 16", "abc"},
      {"sweep --recipes dsv32-ref --context 99999999999999999999 --topk 16", "context"},
      {"sweep --recipes dsv32-ref --context 512 --topk 2147483647", "--topk"},
      {"sweep --recipes dsv32-ref --context 512 --topk 0", "--topk"},
      {"sweep --recipes dsv32-ref --context 512 --topk 16 --queries 0", "--queries"},
      {"sweep --recipes dsv32-ref --context 512 --topk 16 --seeds 0", "--seeds"},
      {"sweep --recipes dsv32-ref --context 512 --topk 16 --heads 0", "--heads"},
      {"sweep --recipes dsv32-ref --context 512 --topk 16 --threads 0", "--threads"},
      {"sweep --recipes dsv32-ref --context 512 --topk 16 --activations wild", "wild"},
      {"sweep --recipes dsv32-ref --context 512 --topk 16 --activation-seed x", "--activation-seed"},
      {"sweep --recipes dsv32-ref,,exact --context 512 --topk 16", "names"},
      {"sweep --recipes '' --context 512 --topk 16", "--recipes"},
      {"sweep --recipes dsv32-ref --context 512 --topk 16 --fixture fixture.h5 --heads 4", "--heads"},
      {"sweep --recipes dsv32-ref --context 512 --topk 16 --fixture fixture.h5 --seeds 2", "--seeds"},
      {"sweep --recipes dsv32-ref --context 512 --topk 16 --fixture fixture.h5 --activations heavy", "--activations"},
      {"sweep --recipes dsv32-ref --context 512 --topk 16 --fixture fixture.h5 --activation-seed 3",
       "--activation-seed"},
      {"sweep --recipes dsv32-ref --context 512 --topk 16 --fixture fixture.h5 --fixture-layer -2", "--fixture-layer"},
      {"sweep --recipes dsv32-ref --context 512 --topk 16 --fixture-layer 0", "--fixture-layer needs --fixture"},
      {"sweep --recipes dsv32-ref --context 512 --topk 16 --out folder/../fifo", "fifo"},
      {"needle --recipes dsv32-ref --context 512 --topk 16 --trials 0", "--trials"},
      {"needle --recipes dsv32-ref --context 512 --topk 16 --depths 1.5", "depths"},
      {"needle --recipes dsv32-ref --context 512 --topk 16 --depths 0.9..0.1", "depths"},
      {"needle --recipes dsv32-ref --context 512 --topk 16 --margins x", "margins"},
      {"needle --recipes dsv32-ref --context 512 --topk 16 --margins -0.5", "margins: -0.5"},
      {"needle --recipes dsv32-ref --context 512 --topk 16 --fixture fixture.h5 --heads 4", "--heads"},
      {"needle --recipes dsv32-ref --context 512 --topk 512", "not below the context 512"},
      {"needle --recipes dsv32-ref --context 512 --topk 16 --out fifo", "fifo"},
      {"needle --recipes dsv32-ref --context 512 --topk 16 --out /dev/null", "/dev/null"},
      // usage
      {"", "subcommand"},
      {"no-such-command", "unknown command 'no-such-command'"},
      {"selftest --threads 99999", "--threads"},
      {"selftest --threads -1", "--threads"},
      {"inspect", "file"},
      {"inspect a.h5 b.h5", "b.h5"},
  };
  cases.insert(cases.end(), more.begin(), more.end());
#if !defined(DSAF_CLI_HAS_DEVICE)
  // Without CUDA at build time verify stops at its --kernel with that one line.
  for (Case& c : cases) {
    if (c.args.find("--kernel") != std::string::npos) c.needle = "verify needs the device build";
  }
#endif
  return cases;
}

TEST(CliHostile, EveryCaseExitsWithOneLineNamingTheCulpritAndChangesNothing) {
  const std::string dir = make_scratch();
  const std::vector<Case> cases = all_cases();
  EXPECT_GE(cases.size(), 150u);
  auto before = snapshot(dir);
  int failures = 0;
  for (const Case& c : cases) {
    // A device path only while it is one (a host where an earlier broken run replaced
    // /dev/full by a file would otherwise see its own damage).
    struct stat dev {};
    if (c.args.find("/dev/full") != std::string::npos && (::stat("/dev/full", &dev) != 0 || !S_ISCHR(dev.st_mode))) {
      ADD_FAILURE() << "/dev/full is not a character device on this host: case skipped: " << c.args;
      continue;
    }
    const dsaf::testing_cli::CliRun o = run_cli(dir, replace_all(c.args, "{d}", dir));
    const bool ok = o.exit_code == c.exit_code && o.out.find(c.needle) != std::string::npos &&
                    std::count(o.out.begin(), o.out.end(), '\n') == 1;
    EXPECT_TRUE(ok) << "dsa-fidelity " << c.args << "\n  exit " << o.exit_code << " (want " << c.exit_code
                    << "), stderr: " << o.out;
    const auto after = snapshot(dir);
    if (after != before) {
      for (const auto& [path, state] : after) {
        if (!before.count(path) || before.at(path) != state) ADD_FAILURE() << c.args << ": changed or created " << path;
      }
      for (const auto& [path, state] : before) {
        if (!after.count(path)) ADD_FAILURE() << c.args << ": removed " << path;
      }
      make_scratch();
      before = snapshot(dir);
    }
    failures += !ok;
    if (failures > 40) break;  // a broken build: enough lines to read
  }
  EXPECT_FALSE(fs::exists(dir + "/pwned"));
}

}  // namespace
