// File: cli_run.h
// Running the CLI binary from a test: a shell command's exit code and what it printed.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace dsaf::testing_cli {

struct CliRun {
  int exit_code;  // -1 when the command did not exit normally
  std::string out;
};

// `command` through the shell; `out` is its stdout (redirect stderr into it to read that).
inline CliRun run_shell(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace dsaf::testing_cli
