// File: fuzz_recipe_json.cc
// libFuzzer target: bytes -> a recipe file -> load_recipe_file (reference/recipe_json.h),
// which parses the JSON strictly and runs Recipe::validate on every recipe. The bytes go
// through a scratch file because load_recipe_file is the entry point the CLI uses (its
// own exception mapping is part of what is fuzzed). Rejection must be a dsaf::Error.
// Every accepted recipe must round-trip:
//   recipe_from_json(recipe_to_json(r)) is accepted and writes the same JSON, and
//   the dumped text of recipe_to_json(r), parsed again, is accepted too (what the CLI
//   writes, it can read back).
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz/harness.h"
#include "reference/error.h"
#include "reference/recipe.h"
#include "reference/recipe_json.h"

namespace {

using dsaf::fuzz::property_failed;
using nlohmann::json;

void check_round_trip(const dsaf::ref::Recipe& recipe) {
  const json written = dsaf::ref::recipe_to_json(recipe);
  try {
    if (dsaf::ref::recipe_to_json(dsaf::ref::recipe_from_json(written)) != written) {
      property_failed("recipe_to_json(recipe_from_json(recipe_to_json(r))) differs");
    }
  } catch (const dsaf::Error& e) {
    std::fprintf(stderr, "%s\n%s\n", written.dump().c_str(), e.what());
    property_failed("an accepted recipe's JSON object is rejected");
  }
  const std::string text = written.dump();
  try {
    dsaf::ref::recipe_from_json(json::parse(text));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n%s\n", text.c_str(), e.what());
    property_failed("an accepted recipe's dumped JSON text is rejected");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static dsaf::fuzz::ScratchFile scratch(".json");
  std::vector<dsaf::ref::Recipe> recipes;
  try {
    recipes = dsaf::ref::load_recipe_file(scratch.write(data, size));
  } catch (const dsaf::Error&) {
    return 0;
  }
  for (const dsaf::ref::Recipe& r : recipes) check_round_trip(r);
  return 0;
}
