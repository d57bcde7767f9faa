// File: ranges.cc — parsing of command-line value lists (ranges.h).
#include "cli/ranges.h"

#include <cmath>
#include <cstdlib>

#include "reference/error.h"

namespace dsaf::cli {
namespace {

[[noreturn]] void bad(const std::string& what, const std::string& text) {
  throw Error(ErrorKind::kUsage, what + ": cannot parse '" + text + "'");
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(sep, start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

int64_t parse_length(const std::string& text) {
  if (text.empty()) bad("context", text);
  int64_t unit = 1;
  std::string digits = text;
  const char last = static_cast<char>(std::tolower(static_cast<unsigned char>(text.back())));
  if (last == 'k') unit = 1024;
  if (last == 'm') unit = 1024 * 1024;
  if (unit != 1) digits.pop_back();
  char* end = nullptr;
  const long long value = std::strtoll(digits.c_str(), &end, 10);
  if (digits.empty() || *end != '\0' || value < 1 || value > (int64_t{1} << 40) / unit) {
    bad("context (an integer >= 1, optionally with k or m)", text);
  }
  return value * unit;
}

double parse_real(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(value)) bad("number", text);
  return value;
}

}  // namespace

std::vector<int64_t> parse_contexts(const std::string& text) {
  const size_t dots = text.find("..");
  std::vector<int64_t> out;
  if (dots == std::string::npos) {
    for (const std::string& item : split(text, ',')) out.push_back(parse_length(item));
    return out;
  }
  const int64_t from = parse_length(text.substr(0, dots));
  const int64_t to = parse_length(text.substr(dots + 2));
  if (to < from) bad("context range (lower..upper)", text);
  int64_t n = from;
  for (; n < to; n *= 2) out.push_back(n);
  if (n != to) bad("context range (upper end must be lower * 2^j)", text);
  out.push_back(to);
  return out;
}

std::vector<double> parse_reals(const std::string& text, int default_points) {
  const size_t dots = text.find("..");
  std::vector<double> out;
  if (dots == std::string::npos) {
    for (const std::string& item : split(text, ',')) out.push_back(parse_real(item));
    return out;
  }
  std::string upper = text.substr(dots + 2);
  int points = default_points;
  const size_t colon = upper.find(':');
  if (colon != std::string::npos) {
    const double count = parse_real(upper.substr(colon + 1));
    if (count < 2 || count != std::floor(count) || count > 1000) bad("point count (2..1000)", text);
    points = static_cast<int>(count);
    upper = upper.substr(0, colon);
  }
  const double from = parse_real(text.substr(0, dots));
  const double to = parse_real(upper);
  if (to < from) bad("range (lower..upper)", text);
  for (int i = 0; i < points; ++i) out.push_back(from + (to - from) * i / (points - 1));
  return out;
}

std::vector<std::string> parse_names(const std::string& text) {
  std::vector<std::string> out = split(text, ',');
  for (const std::string& name : out) {
    if (name.empty()) bad("list of names", text);
  }
  return out;
}

}  // namespace dsaf::cli
