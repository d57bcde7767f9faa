// File: fuzz_cli_arguments.cc
// libFuzzer target: the command line's own parsers (cli/arguments.h) on arbitrary text —
// the value lists of --context, --depths / --margins and --recipes, sizes (--max-memory),
// and the validators CLI11 runs on --seed and on every path option (kUnsigned, kNotEmpty).
// The input is split at NUL bytes into argument strings, each parsed by every parser.
// Rejection must be a dsaf::Error; what is accepted must mean what the header says:
//   contexts: each >= 1; a "a..b" range doubles from a to exactly b;
//   reals: finite, and for "a..b[:n]" n evenly spaced values from a to b (n >= 2);
//   names: non-empty, as many as the commas say plus one;
//   sizes: >= 1 and the digits times the unit;
//   kUnsigned accepts exactly the strings of 1..20 decimal digits.
// CLI11 itself (a well-kept library) is not the target; its option parsing of these
// strings ends in the parsers here.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cli/arguments.h"
#include "fuzz/harness.h"
#include "reference/error.h"

namespace {

void require(bool ok, const char* what) {
  if (!ok) dsaf::fuzz::property_failed(what);
}

void check_contexts(const std::string& text) {
  std::vector<int64_t> contexts;
  try {
    contexts = dsaf::cli::parse_contexts(text);
  } catch (const dsaf::Error&) {
    return;
  }
  require(!contexts.empty(), "parse_contexts accepted an empty list");
  for (int64_t n : contexts) require(n >= 1, "parse_contexts accepted a context below 1");
  if (text.find("..") != std::string::npos && text.find(',') == std::string::npos) {
    for (size_t i = 1; i < contexts.size(); ++i) {
      require(contexts[i] == 2 * contexts[i - 1], "a context range does not double");
    }
  }
}

void check_reals(const std::string& text) {
  std::vector<double> reals;
  try {
    reals = dsaf::cli::parse_reals(text);
  } catch (const dsaf::Error&) {
    return;
  }
  require(!reals.empty(), "parse_reals accepted an empty list");
  for (double v : reals) require(std::isfinite(v), "parse_reals accepted a non-finite value");
  if (text.find("..") != std::string::npos && text.find(',') == std::string::npos) {
    require(reals.size() >= 2, "a real range has fewer than 2 points");
    const double step = reals[1] - reals[0];
    for (size_t i = 2; i < reals.size(); ++i) {
      const double d = reals[i] - reals[i - 1];
      require(std::fabs(d - step) <= 1e-9 * std::max({1.0, std::fabs(reals.front()), std::fabs(reals.back())}),
              "a real range is not evenly spaced");
    }
  }
}

void check_names(const std::string& text) {
  std::vector<std::string> names;
  try {
    names = dsaf::cli::parse_names(text);
  } catch (const dsaf::Error&) {
    return;
  }
  size_t commas = 0;
  for (char c : text) commas += c == ',';
  require(names.size() == commas + 1, "parse_names returned another count than the commas say");
  for (const std::string& n : names) require(!n.empty(), "parse_names accepted an empty name");
}

void check_size(const std::string& text) {
  int64_t bytes = 0;
  try {
    bytes = dsaf::cli::parse_size("--max-memory", text);
  } catch (const dsaf::Error&) {
    return;
  }
  require(bytes >= 1, "parse_size accepted a size below 1");
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const int64_t value = std::stoll(text.substr(0, digits));
  const std::string unit = text.substr(digits);
  const int shift = unit.empty() ? 0 : unit == "k" || unit == "K" ? 10 : unit == "m" || unit == "M" ? 20
                                     : unit == "g" || unit == "G" ? 30 : 40;
  require(bytes == (value << shift), "parse_size's bytes are not the digits times the unit");
}

void check_validators(const std::string& text) {
  std::string copy = text;
  const bool accepted = dsaf::cli::kUnsigned(copy).empty();
  bool digits = !text.empty() && text.size() <= 20;
  for (char c : text) digits = digits && c >= '0' && c <= '9';
  require(accepted == digits, "kUnsigned does not accept exactly 1..20 decimal digits");
  copy = text;
  require(dsaf::cli::kNotEmpty(copy).empty() == !text.empty(), "kNotEmpty does not refuse exactly the empty value");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  size_t start = 0;
  while (start <= input.size()) {
    size_t end = input.find('\0', start);
    if (end == std::string::npos) end = input.size();
    const std::string arg = input.substr(start, end - start);
    check_contexts(arg);
    check_reals(arg);
    check_names(arg);
    check_size(arg);
    check_validators(arg);
    start = end + 1;
  }
  return 0;
}
