// File: recipe_json.h
// Recipes as JSON (DESIGN.md: "Users can define more recipes in a file (JSON) without
// recompiling"). Field names are the Recipe member names; enums are lower-case strings
// ("layernorm", "neox", "fp8_e4m3fn", ...). A user recipe may start from a preset:
//   { "base": "sglang-v4-fp8", "name": "my-kernel", "key_quant": { "apply": "divide" } }
// Unknown fields and unknown enum values are errors that name the JSON path.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reference/recipe.h"

namespace dsaf::ref {

nlohmann::json recipe_to_json(const Recipe& recipe);
// Throws dsaf::Error(kBadInput) with the path of the offending field.
Recipe recipe_from_json(const nlohmann::json& json);
// A file holding one recipe object or an array of them.
std::vector<Recipe> load_recipe_file(const std::string& path);

}  // namespace dsaf::ref
