// File: arguments.cc — recipes by name and output files (arguments.h).
#include "cli/arguments.h"

#include <filesystem>

#include "cli/ranges.h"
#include "reference/error.h"
#include "reference/recipe_json.h"

namespace dsaf::cli {

std::vector<ref::Recipe> resolve_recipes(const std::string& names, const std::string& file) {
  std::vector<ref::Recipe> pool = ref::presets();
  if (!file.empty()) {
    const auto extra = ref::load_recipe_file(file);
    pool.insert(pool.end(), extra.begin(), extra.end());
  }
  std::vector<ref::Recipe> out;
  for (const std::string& name : parse_names(names)) {
    bool found = false;
    for (auto it = pool.rbegin(); it != pool.rend() && !found; ++it) {
      if (it->name == name) {
        out.push_back(*it);
        found = true;
      }
    }
    if (!found) out.push_back(ref::preset(name));  // throws, listing the presets
  }
  return out;
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

}  // namespace dsaf::cli
