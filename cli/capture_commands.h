// File: capture_commands.h
// `dsa-fidelity compare` and `dsa-fidelity detect`: a cache capture (fixtures/SCHEMA.md
// §10, fixtures/cache_capture.h) against one recipe (oracle/compare.h) or against the
// presets and a recipe file's recipes (oracle/detect.h):
//
//   compare --capture F.h5 [--recipe R] [--recipe-file F.json] [--json OUT.json]
//       with --recipe: the byte-exact verdict over the written slots, the first mismatch
//       located, and on a mismatch the single recipe field that explains it;
//       exit 0 pass, 1 mismatch. Without --recipe: as `detect`.
//   detect --capture F.h5 [--recipes A,B] [--recipe-file F.json] [--json OUT.json]
//       which recipes reproduce the bytes exactly, else the closest and the single field
//       change that explains the rest; exit 0 when a recipe matches exactly, else 1.
//
// Only the key cache is compared; query outputs, logits and top-K indices a capture holds
// are named as present but not compared. Bad input throws dsaf::Error (exit 2 in main).
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace dsaf::cli {

class CaptureCommands {
 public:
  // Adds both subcommands to `app`; they bind to this object's members, so it must
  // outlive the parse.
  explicit CaptureCommands(CLI::App& app);
  CaptureCommands(const CaptureCommands&) = delete;
  CaptureCommands& operator=(const CaptureCommands&) = delete;

  // After parsing: the exit code of the chosen command, or nullopt when neither was chosen.
  std::optional<int> run(const std::string& command_line) const;

 private:
  CLI::App* compare_ = nullptr;
  CLI::App* detect_ = nullptr;
  std::string capture_path_;
  std::string recipe_;       // compare --recipe
  std::string recipes_;      // detect --recipes
  std::string recipe_file_;
  std::string json_path_;
};

}  // namespace dsaf::cli
