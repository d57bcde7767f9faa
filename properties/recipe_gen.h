// File: recipe_gen.h
// RapidCheck generators of valid Recipe values (not only the presets) and of score rows
// that stress top-K selection: heavy ties, and vLLM's "10LSBits" rows whose floats share
// their high 22 bits (0x3F900000 | random low 10 bits), a radix-select worst case.
#pragma once

#include <optional>
#include <vector>

#include <rapidcheck.h>

#include "reference/recipe.h"

namespace dsaf::properties {

// Every field drawn from its allowed values; combinations that Recipe::validate rejects
// are regenerated. Shrinks toward the first enum value of each field. With key_format, the
// key cache has that storage format (its other quantisation fields drawn as usual).
rc::Gen<ref::Recipe> gen_recipe(std::optional<ref::StorageFormat> key_format = std::nullopt);

rc::Gen<std::vector<double>> gen_tie_heavy_scores(int max_len);
rc::Gen<std::vector<double>> gen_shared_high_bits_scores(int max_len);

}  // namespace dsaf::properties
