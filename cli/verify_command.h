// File: verify_command.h
// `dsa-fidelity verify`: options, and the run (oracle/verify.h) with its report, JSON and
// exit code: 0 every stage the kernel provides passed, 1 a verdict failed, 2 bad input,
// no GPU, or nothing the recipe needs could be verified.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace dsaf::cli {

struct VerifyOptions {
  std::string recipe, recipe_file, kernel = "builtin", json, topk_contract, save_capture;
  int64_t cases = 10000;
  uint64_t seed = 1;
};

CLI::App* add_verify_command(CLI::App& app, VerifyOptions& options);
// `max_memory`: the limit verify's memory model (oracle/verify.h verify_peak_bytes) must
// fit; over it, verify is refused (exit 2) before a kernel is opened.
int run_verify_command(const VerifyOptions& options, const std::string& command_line, int64_t max_memory);

}  // namespace dsaf::cli
