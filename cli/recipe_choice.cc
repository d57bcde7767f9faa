// File: recipe_choice.cc — recipes by name (recipe_choice.h).
#include "cli/recipe_choice.h"

#include "cli/ranges.h"
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

}  // namespace dsaf::cli
