// File: arguments.cc — value lists, recipes by name, output files, progress (arguments.h).
#include "cli/arguments.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "reference/error.h"
#include "reference/recipe_json.h"

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
  if (to < from || !std::isfinite(to - from)) bad("range (lower..upper, a finite span)", text);
  for (int i = 0; i < points; ++i) {
    const double v = from + (to - from) * i / (points - 1);
    if (!std::isfinite(v)) bad("range (lower..upper, a finite span)", text);  // (to - from) * i overflowed
    out.push_back(v);
  }
  return out;
}

std::vector<std::string> parse_names(const std::string& text) {
  std::vector<std::string> out = split(text, ',');
  for (const std::string& name : out) {
    if (name.empty()) bad("list of names", text);
  }
  return out;
}


std::vector<ref::Recipe> resolve_recipes(const std::string& flag, const std::string& names, const std::string& file) {
  std::vector<ref::Recipe> pool = ref::presets();
  if (!file.empty()) {
    const auto extra = ref::load_recipe_file(file);
    pool.insert(pool.end(), extra.begin(), extra.end());
  }
  std::vector<ref::Recipe> out;
  for (const std::string& name : with_flag(flag, [&] { return parse_names(names); })) {
    bool found = false;
    for (auto it = pool.rbegin(); it != pool.rend() && !found; ++it) {
      if (it->name == name) {
        out.push_back(*it);
        found = true;
      }
    }
    if (!found) out.push_back(with_flag(flag, [&] { return ref::preset(name); }));  // throws, listing the presets
  }
  return out;
}

std::string unknown_command(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return "";
  std::string names;
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == argv[1]) return "";
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  return "unknown command '" + std::string(argv[1]).substr(0, 60) + "' (commands: " + names + ")";
}

void refuse_options(const CLI::App& cmd, std::initializer_list<const char*> options, const std::string& why) {
  for (const char* option : options) {
    if (cmd.get_option_no_throw(option) != nullptr && cmd.count(option) > 0) {
      throw Error(ErrorKind::kUsage, std::string(option) + " " + why);
    }
  }
}

int64_t parse_size(const std::string& flag, const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string unit = text.substr(digits);
  int shift = -1;
  if (unit.empty()) shift = 0;
  if (unit == "k" || unit == "K") shift = 10;
  if (unit == "m" || unit == "M") shift = 20;
  if (unit == "g" || unit == "G") shift = 30;
  if (unit == "t" || unit == "T") shift = 40;
  if (digits == 0 || digits > 12 || shift < 0) {
    throw Error(ErrorKind::kUsage, flag + ": '" + text.substr(0, 40) + "' is not a size (e.g. 4096, 512m, 8g)");
  }
  const int64_t value = std::stoll(text.substr(0, digits));
  if (value < 1 || value > (int64_t{1} << (62 - shift))) {
    throw Error(ErrorKind::kUsage, flag + ": '" + text + "' is out of range");
  }
  return value << shift;
}

int64_t default_memory_limit() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return int64_t{1} << 62;  // unknown: no default limit
  return static_cast<int64_t>(pages) * page / 10 * 8;
}

void require_memory(const std::string& what, int64_t estimate, int64_t limit, const std::string& lower) {
  if (estimate <= limit) return;
  throw Error(ErrorKind::kUsage, what + " needs about " + size_text(estimate) + ", more than the " + size_text(limit) +
                                     " allowed (--max-memory; default 80% of physical memory): " + lower);
}

std::string size_text(int64_t bytes) {
  char text[32];
  const bool gib = bytes >= (int64_t{1} << 30);
  std::snprintf(text, sizeof text, gib ? "%.1f GiB" : "%.0f MiB",
                static_cast<double>(bytes) / (gib ? (int64_t{1} << 30) : (int64_t{1} << 20)));
  return text;
}

void prepare_output_folder(const std::string& flag, const std::string& dir, std::initializer_list<const char*> files) {
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(ErrorKind::kEnvironment, flag + ": cannot create '" + dir + "': " + ec.message());
  for (const char* file : files) check_output_file(flag, (std::filesystem::path(dir) / file).string(), "");
}

void check_output_file(const std::string& flag, const std::string& out, const std::string& input_dir) {
  namespace fs = std::filesystem;
  using dsaf::Error;
  using dsaf::ErrorKind;
  if (out.empty()) throw Error(ErrorKind::kUsage, flag + " is empty");
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(out, ec);
  if (fs::exists(status) && !fs::is_regular_file(status) && !fs::is_symlink(status)) {
    const char* what = fs::is_directory(status) ? "a directory" : "a device, FIFO or socket";
    throw Error(ErrorKind::kBadInput, flag + " '" + out + "' is " + what + ", not a file it may replace");
  }
  const fs::path parent = fs::absolute(out, ec).parent_path();
  if (!fs::is_directory(parent, ec)) {
    throw Error(ErrorKind::kBadInput, flag + " '" + out + "': the folder '" + parent.string() + "' does not exist");
  }
  const fs::path dir = fs::canonical(input_dir, ec);
  if (ec) return;  // the command reports its missing input itself
  const fs::path where = fs::weakly_canonical(out, ec);
  if (ec || where.parent_path() != dir) return;
  const std::string name = where.filename().string();
  const auto ends_with = [&](const std::string& tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (name == "config.json" || ends_with(".safetensors") || ends_with(".safetensors.index.json")) {
    throw Error(ErrorKind::kBadInput, flag + " '" + out + "' is " + where.string() +
                                          ", an input of this command: write it elsewhere");
  }
}

ProgressBar progress_bar(const std::string& what) {
  if (!isatty(STDERR_FILENO)) return nullptr;
  const auto start = std::chrono::steady_clock::now();
  return [what, start](int64_t done, int64_t total) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    constexpr int kWidth = 30;
    const int filled = total > 0 ? static_cast<int>(kWidth * std::clamp<int64_t>(done, 0, total) / total) : kWidth;
    const std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '.');
    const double left = done > 0 ? elapsed * static_cast<double>(total - done) / static_cast<double>(done) : 0.0;
    std::fprintf(stderr, "\r%s [%s] %lld/%lld  %.0f s elapsed, about %.0f s left   ", what.c_str(), bar.c_str(),
                 static_cast<long long>(done), static_cast<long long>(total), elapsed, left);
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
}

void StagedProgress::operator()(const std::string& stage, int64_t done, int64_t total) {
  if (!isatty(STDERR_FILENO)) return;
  if (stage != stage_) {
    finish();
    stage_ = stage;
    bar_ = progress_bar(command_ + ": " + stage);
  }
  if (bar_ && done < total) bar_(done, total);
}

void StagedProgress::finish() {
  if (bar_) std::fprintf(stderr, "\r\033[K");  // erase the bar: the stage's verdict follows on stdout
  std::fflush(stderr);
  bar_ = nullptr;
  stage_.clear();
}

}  // namespace dsaf::cli
