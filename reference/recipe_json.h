// File: recipe_json.h
// Recipes as JSON (docs/design.md: "Users can define more recipes in a file (JSON) without
// recompiling"). Field paths and enum names are those of the field table
// (reference/recipe_fields.h: "key_quant.apply", "layernorm", "fp8_e4m3fn", ...). A user
// recipe may start from a preset:
//   { "base": "sglang-v4-fp8", "name": "my-kernel", "key_quant": { "apply": "divide" } }
// Unknown fields and unknown enum values are errors that name the JSON path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reference/recipe.h"

namespace dsaf::ref {

nlohmann::json recipe_to_json(const Recipe& recipe);
// Throws dsaf::Error(kBadInput) with the path of the offending field.
Recipe recipe_from_json(const nlohmann::json& json);
// One field's value as JSON (an enum by its name), by its path in the field table.
nlohmann::json field_value_json(const RecipeFields& recipe, const std::string& path);
// "a.b: x -> y; c: u -> v" for every field where the two differ (values as JSON), in the
// table's order; empty when none does.
std::string describe_field_changes(const RecipeFields& from, const RecipeFields& to);
// A file holding one recipe object or an array of them. Each name is 1-64 letters, digits,
// '-', '_', '.' or '+', unique in the file, and a preset's name only for that very preset
// (what `recipes --json` writes reads back); anything else is dsaf::Error(kBadInput).
std::vector<Recipe> load_recipe_file(const std::string& path);

// Untrusted JSON (recipe files, a checkpoint's config.json and index, safetensors headers):
// at most kMaxJsonDepth nested arrays/objects (the parser and nlohmann's own recursion stay
// bounded) and no name twice in one object (JSON leaves that undefined; we refuse it).
// Throws dsaf::Error(kBadInput) "<what>: ..." with the line and column where it can.
inline constexpr int kMaxJsonDepth = 64;
nlohmann::json parse_untrusted_json(const std::string& text, const std::string& what);
// The whole of a regular file of at most `max_bytes` (symlinks followed): a directory,
// FIFO, device or socket, or a larger file, is refused without blocking on it.
std::string read_untrusted_file(const std::string& path, int64_t max_bytes, const std::string& what);
inline constexpr int64_t kMaxJsonFileBytes = int64_t{16} << 20;  // a config or recipe file

}  // namespace dsaf::ref
