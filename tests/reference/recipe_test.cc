// Recipes: the ten presets of docs/design.md, JSON round trips and strict parsing errors.
#include "reference/recipe.h"

#include <fstream>

#include <gtest/gtest.h>

#include "reference/error.h"
#include "reference/recipe_json.h"

namespace dsaf::ref {
namespace {

TEST(RecipePresets, AreTheTenOfTheDesignInOrder) {
  const std::vector<std::string> expected = {
      "exact",         "dsv32-ref",      "dsv32-bf16",     "sglang-v32-fused", "vllm-v32",
      "dsv4-ref",      "sglang-v4-fp8",  "sglang-v4-bf16", "sglang-v4-fp4",    "sglang-v41-fp4"};
  std::vector<std::string> names;
  for (const Recipe& r : presets()) names.push_back(r.name);
  EXPECT_EQ(names, expected);
  EXPECT_THROW(preset("no-such-recipe"), Error);
}

TEST(RecipePresets, StorageBytesPerTokenMatchTheDesign) {
  EXPECT_EQ(cache_bytes_per_token(preset("dsv32-ref").key_quant.format), 132);
  EXPECT_EQ(cache_bytes_per_token(preset("dsv32-bf16").key_quant.format), 256);
  EXPECT_EQ(cache_bytes_per_token(preset("sglang-v4-fp8").key_quant.format), 132);
  EXPECT_EQ(cache_bytes_per_token(preset("sglang-v4-bf16").key_quant.format), 256);
  EXPECT_EQ(cache_bytes_per_token(preset("sglang-v4-fp4").key_quant.format), 68);
}

TEST(RecipeJson, EveryPresetRoundTrips) {
  for (const Recipe& r : presets()) {
    const nlohmann::json j = recipe_to_json(r);
    const Recipe back = recipe_from_json(j);
    EXPECT_EQ(recipe_to_json(back), j) << r.name;
  }
}

TEST(RecipeJson, UserRecipeStartsFromAPresetAndOverridesFields) {
  const Recipe r = recipe_from_json(nlohmann::json::parse(R"({
    "base": "sglang-v4-fp8", "name": "mine", "key_quant": {"apply": "divide"}})"));
  EXPECT_EQ(r.name, "mine");
  EXPECT_EQ(r.key_quant.apply, ScaleApply::kDivide);
  EXPECT_EQ(r.key_norm.kind, NormKind::kRmsNorm);  // inherited
}

TEST(RecipeJson, ErrorsNameTheOffendingField) {
  const auto message = [](const char* text) -> std::string {
    try {
      recipe_from_json(nlohmann::json::parse(text));
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message(R"({"base":"exact","name":"x","rope":{"pairng":"neox"}})").find("recipe.rope.pairng: unknown field"), std::string::npos);
  EXPECT_NE(message(R"({"base":"exact","name":"x","rope":{"pairing":"gptj"}})").find("recipe.rope.pairing: \"gptj\" is not one of"), std::string::npos);
  EXPECT_NE(message(R"({"base":"exact","name":"x","topk":"many"})").find("recipe.topk: wrong type"), std::string::npos);
  // fp64 compute cannot store fp8 keys.
  EXPECT_NE(message(R"({"base":"exact","name":"x","key_quant":{"format":"fp8_e4m3fn"}})").find("fp64 compute"), std::string::npos);
  EXPECT_NE(message(R"({"base":"dsv32-ref","name":"x","page_size":48})").find("page_size"), std::string::npos);
  // Found by fuzz_recipe_json (fuzz/crashes/): numbers that do not fit their field.
  EXPECT_NE(message(R"({"base":"dsv32-ref","name":"x","topk":1e20})").find("recipe.topk: wrong type"), std::string::npos);
  EXPECT_NE(message(R"({"base":"dsv32-ref","name":"x","page_size":64.9})").find("recipe.page_size: wrong type"), std::string::npos);
  EXPECT_NE(message(R"({"base":"dsv32-ref","name":"x","topk":4294967297})").find("recipe.topk: out of range"), std::string::npos);
  EXPECT_NE(message(R"({"base":"dsv32-ref","name":"x","key_norm":{"eps":1e39}})").find("recipe.key_norm.eps: not a finite"), std::string::npos);
}

TEST(RecipeJson, NumbersBeyondADoubleAreBadInputNotAForeignException) {
  const std::string path = ::testing::TempDir() + "dsaf_recipe_overflow.json";
  std::ofstream(path) << R"({"base":"dsv32-ref","name":"x","rope":{"table":{"theta":1e999}}})";
  try {
    load_recipe_file(path);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
}

TEST(RecipeExactOf, KeepsModelMathAndDropsEveryRounding) {
  const Recipe e = exact_of(preset("sglang-v4-fp8"));
  EXPECT_EQ(e.compute, Compute::kFp64);
  EXPECT_EQ(e.key_norm.kind, NormKind::kRmsNorm);
  EXPECT_EQ(e.rope.pairing, RopePairing::kInterleaved);
  EXPECT_EQ(e.rope.placement, RopePlacement::kTrailing);
  EXPECT_EQ(e.key_norm.rsqrt, RsqrtKind::kCorrectlyRounded);
  EXPECT_EQ(e.key_quant.format, StorageFormat::kNone);
  EXPECT_EQ(e.score, ScoreAccum::kExact);
  EXPECT_NO_THROW(e.validate());
}

}  // namespace
}  // namespace dsaf::ref
