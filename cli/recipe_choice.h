// File: recipe_choice.h
// Recipes named on the command line: presets plus those of an optional recipe file (a
// file's recipe of the same name wins; the last one of that name in the file).
#pragma once

#include <string>
#include <vector>

#include "reference/recipe.h"

namespace dsaf::cli {

// `names`: comma-separated (ranges.h parse_names). Throws dsaf::Error(kUsage) listing the
// presets for an unknown name, (kBadInput) for a bad recipe file.
std::vector<ref::Recipe> resolve_recipes(const std::string& names, const std::string& file);

}  // namespace dsaf::cli
