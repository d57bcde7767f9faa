// ref::RecipeFields <-> the kernel ABI's dsaf_recipe_v1 (device/kernel_abi_convert.h), on
// the host: every kernel field of the field table travels in an ABI member, every ABI
// member carries a kernel field, and every preset's kernel fields survive the round trip.
#include "device/kernel_abi_convert.h"

#include <set>
#include <string>

#include <gtest/gtest.h>

#include "reference/recipe.h"
#include "reference/recipe_json.h"

namespace dsaf::dev {
namespace {

TEST(AbiRecipe, EveryKernelFieldHasOneV1MemberAndNoMemberIsSpare) {
  std::set<std::string> kernel_fields, members;
  ref::for_each_field([&](const ref::FieldInfo& f, auto) {
    if (f.has(ref::kKernelField)) kernel_fields.insert(f.path);
  });
  dsaf_recipe_v1 a{};
  for_each_abi_v1_field(a, [&](const char* path, auto&) { EXPECT_TRUE(members.insert(path).second) << path; });
  EXPECT_EQ(members, kernel_fields);
}

TEST(AbiRecipe, EveryPresetRoundTripsItsKernelFields) {
  for (const ref::Recipe& preset : ref::presets()) {
    const ref::RecipeFields back = from_abi(to_abi(preset));
    ref::for_each_field([&](const ref::FieldInfo& f, auto) {
      if (!f.has(ref::kKernelField)) return;
      EXPECT_EQ(ref::field_value_json(back, f.path), ref::field_value_json(preset, f.path))
          << preset.name << ": " << f.path;
    });
  }
}

// A member written by hand lands in the field it names (the mapping is by path, so a
// swapped pair of lines in for_each_abi_v1_field would put a value in the wrong field).
TEST(AbiRecipe, MembersLandInTheFieldsTheyName) {
  dsaf_recipe_v1 a = to_abi(ref::preset("sglang-v4-fp8"));
  a.rope_pairing = static_cast<int32_t>(ref::RopePairing::kNeox);
  a.key_quant.apply = static_cast<int32_t>(ref::ScaleApply::kDivide);
  a.norm_eps = 1e-5f;
  a.query_rounding.hadamard = 1;
  const ref::RecipeFields r = from_abi(a);
  EXPECT_EQ(r.rope.pairing, ref::RopePairing::kNeox);
  EXPECT_EQ(r.key_quant.apply, ref::ScaleApply::kDivide);
  EXPECT_EQ(r.query_quant.apply, ref::ScaleApply::kDivide);  // sglang-v4-fp8's own
  EXPECT_EQ(r.key_norm.eps, 1e-5f);
  EXPECT_TRUE(r.query_rounding.hadamard);
  EXPECT_FALSE(r.key_rounding.hadamard);
}

}  // namespace
}  // namespace dsaf::dev
