// File: arguments.h
// Command-line arguments parsed and checked before a command runs: value lists, recipes
// named on the command line (presets plus those of an optional recipe file, whose names
// are unique and shadow no preset: reference/recipe_json.h load_recipe_file), and the
// output files a command will write; the progress bar of a long command.
//
// Value lists. Malformed text throws dsaf::Error (kUsage) naming it.
//   contexts: "2k..64k" = 2048, 4096, ..., 65536 (doubling, both ends included, the upper
//             end must be reached exactly); "4096,8192"; "3000". k = 1024, m = 1024^2.
//   reals:    "0.1..0.9" = 5 evenly spaced values; "0.1..0.9:9" = 9 values; "0.1,0.5".
//   names:    "a,b,c" (no empty names).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "reference/error.h"
#include "reference/recipe.h"

namespace dsaf::cli {

// An option given with an empty value is an error, not "not given".
inline const CLI::Validator kNotEmpty(
    [](const std::string& value) { return value.empty() ? std::string("the value is empty") : std::string(); },
    "NOT EMPTY");

// A decimal integer in 0 .. 2^64-1, as its digits only (CLI11 would take "-1" for 2^64-1).
inline const CLI::Validator kUnsigned(
    [](const std::string& value) {
      return value.empty() || value.size() > 20 || value.find_first_not_of("0123456789") != std::string::npos
                 ? std::string("'" + value.substr(0, 40) + "' is not an integer in 0 .. 18446744073709551615")
                 : std::string();
    },
    "UINT");

// "unknown command 'x' (commands: ...)" when argv[1] names no subcommand of `app` (CLI11
// would say only that a subcommand is required), else "".
std::string unknown_command(const CLI::App& app, int argc, char** argv);
// Throws dsaf::Error(kUsage) "<option> <why>" for the first of `options` given to `cmd`:
// options that another one makes meaningless, which would otherwise be silently ignored.
void refuse_options(const CLI::App& cmd, std::initializer_list<const char*> options, const std::string& why);

// Runs `parse` (one of the value-list parsers below), naming `flag` in its error.
template <class Parse>
auto with_flag(const std::string& flag, Parse parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const Error& e) {
    throw Error(e.kind(), flag + ": " + e.what());
  }
}

std::vector<int64_t> parse_contexts(const std::string& text);
std::vector<double> parse_reals(const std::string& text, int default_points = 5);
std::vector<std::string> parse_names(const std::string& text);

// Memory. A size: bytes, or a number with k, m, g or t (powers of 1024), e.g. "512m",
// "8g". The default limit of a command is 80% of the machine's physical memory.
int64_t parse_size(const std::string& flag, const std::string& text);
int64_t default_memory_limit();
// Throws dsaf::Error(kUsage), one line, when `estimate` (a command's memory model) is over
// `limit`: what needs it, both sizes, and `lower` (the flags that shrink the estimate).
void require_memory(const std::string& what, int64_t estimate, int64_t limit, const std::string& lower);
// "312 MiB", "44.8 GiB".
std::string size_text(int64_t bytes);

// `names`: comma-separated (parse_names), given as `flag`. Throws dsaf::Error(kUsage) naming
// the flag and listing the presets for an unknown name, (kBadInput) for a bad recipe file.
std::vector<ref::Recipe> resolve_recipes(const std::string& flag, const std::string& names, const std::string& file);

// An output file a command may write (by temp file and rename): not empty, not an existing
// directory, device, FIFO or socket (a rename would replace the node), in a folder that
// exists, and not one of the files the command reads from `input_dir` (for a checkpoint:
// config.json, *.safetensors, *.safetensors.index.json; symlinks resolved; "" for none).
// Throws dsaf::Error naming `flag`. Called before any work starts.
void check_output_file(const std::string& flag, const std::string& out, const std::string& input_dir);
// A folder a command writes `files` into, created (with its parents) and each file checked
// (check_output_file) before the work starts: minutes of work must not end in "cannot
// write". Nothing for an empty `dir` (no output asked for).
void prepare_output_folder(const std::string& flag, const std::string& dir, std::initializer_list<const char*> files);

// Progress on stderr when it is a terminal (nothing otherwise, so logs and pipes stay
// clean): a bar of units done, the time elapsed and an estimate of the time left,
// elapsed x (total - done) / done. progress_bar(what)(done, total) redraws the line and
// ends it when done == total.
using ProgressBar = std::function<void(int64_t done, int64_t total)>;
ProgressBar progress_bar(const std::string& what);
// A command of several stages (verify): one bar a stage, each with its own estimate, a
// stage's line ended when the next begins; finish() ends the last. Printing to stdout
// between calls is fine: a bar is erased before the next stage starts drawing.
class StagedProgress {
 public:
  explicit StagedProgress(std::string command) : command_(std::move(command)) {}
  void operator()(const std::string& stage, int64_t done, int64_t total);
  void finish();

 private:
  std::string command_, stage_;
  ProgressBar bar_;
};

}  // namespace dsaf::cli
