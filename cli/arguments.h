// File: arguments.h
// Command-line arguments checked before a command runs: recipes named on the command line
// (presets plus those of an optional recipe file, whose names are unique and shadow no
// preset: reference/recipe_json.h load_recipe_file), and the output files a command will
// write.
#pragma once

#include <string>
#include <vector>

#include "reference/recipe.h"

namespace dsaf::cli {

// `names`: comma-separated (ranges.h parse_names). Throws dsaf::Error(kUsage) listing the
// presets for an unknown name, (kBadInput) for a bad recipe file.
std::vector<ref::Recipe> resolve_recipes(const std::string& names, const std::string& file);

// An output file a command may write (by temp file and rename): not empty, not an existing
// directory, device, FIFO or socket (a rename would replace the node), in a folder that
// exists, and not one of the files the command reads from `input_dir` (for a checkpoint:
// config.json, *.safetensors, *.safetensors.index.json; symlinks resolved; "" for none).
// Throws dsaf::Error naming `flag`. Called before any work starts.
void check_output_file(const std::string& flag, const std::string& out, const std::string& input_dir);

}  // namespace dsaf::cli
