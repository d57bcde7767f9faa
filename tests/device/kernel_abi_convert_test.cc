// ref::RecipeFields <-> the kernel ABI's dsaf_recipe_v1 (device/kernel_abi_convert.h), on
// the host: every kernel field of the field table travels in an ABI member, every ABI
// member carries a kernel field, and every preset's kernel fields survive the round trip.
#include "device/kernel_abi_convert.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "reference/error.h"
#include "reference/recipe.h"
#include "reference/recipe_json.h"

namespace dsaf::dev {
namespace {

// The kernel fields added after version 1: v2 carries them, v1 cannot.
const std::set<std::string> kAfterV1 = {"key_quant.fp4_zero_sign", "query_quant.fp4_zero_sign",
                                         "key_quant.fp4_prestage", "query_quant.fp4_prestage"};

TEST(AbiRecipe, EveryV1MemberCarriesOneKernelFieldAndOnlyLaterFieldsLackOne) {
  std::set<std::string> kernel_fields, members;
  ref::for_each_field([&](const ref::FieldInfo& f, auto) {
    if (f.has(ref::kKernelField)) kernel_fields.insert(f.path);
  });
  dsaf_recipe_v1 a{};
  for_each_abi_v1_field(a, [&](const char* path, auto&) { EXPECT_TRUE(members.insert(path).second) << path; });
  std::set<std::string> lacking;
  for (const std::string& f : kernel_fields) {
    if (!members.count(f)) lacking.insert(f);
  }
  for (const std::string& m : members) EXPECT_TRUE(kernel_fields.count(m)) << m;
  EXPECT_EQ(lacking, kAfterV1);
}

// A field v1 has no member for cannot travel through v1: to_abi refuses a recipe that
// sets it (sglang-v4-fp4's keys are +0 at zero), and takes it at its default.
TEST(AbiRecipe, AFieldV1LacksIsRefusedUnlessItHoldsItsDefault) {
  try {
    to_abi(ref::preset("sglang-v4-fp4"));
    ADD_FAILURE() << "sglang-v4-fp4 travelled through v1";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_NE(std::string(e.what()).find("key_quant.fp4_zero_sign cannot travel through kernel ABI v1"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(to_abi(ref::preset("sglang-v4-fp8")));
}

TEST(AbiRecipe, EveryPresetV1CanCarryRoundTripsItsKernelFields) {
  const ref::RecipeFields defaults{};
  for (const ref::Recipe& preset : ref::presets()) {
    bool representable = true;
    ref::for_each_field([&](const ref::FieldInfo& f, auto member) {
      if (kAfterV1.count(f.path) && !(member(preset) == member(defaults))) representable = false;
    });
    if (!representable) continue;
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
  EXPECT_EQ(r.query_quant.apply, ref::ScaleApply::kTimesReciprocal);  // sglang-v4-fp8's own
  EXPECT_EQ(r.key_norm.eps, 1e-5f);
  EXPECT_TRUE(r.query_rounding.hadamard);
  EXPECT_FALSE(r.key_rounding.hadamard);
}

// Version 2 lists every kernel field by path: a recipe survives the trip whole, fields v1
// has no member for included, and a plug-in looks a field up by name.
TEST(AbiRecipe, V2CarriesEveryKernelFieldByPath) {
  ref::Recipe changed = ref::preset("sglang-v4-fp4");
  changed.key_norm.eps = 1e-5f;
  changed.query_quant.fp4_rounding = ref::Rounding::kNearestEven;
  const AbiRecipeV2 abi(changed);
  const ref::RecipeFields back = from_abi(*abi.get());
  ref::for_each_field([&](const ref::FieldInfo& f, auto) {
    if (!f.has(ref::kKernelField)) return;
    EXPECT_EQ(ref::field_value_json(back, f.path), ref::field_value_json(changed, f.path)) << f.path;
  });
  EXPECT_EQ(dsaf_recipe_field(abi.get(), "key_norm.eps", 0.0), static_cast<double>(1e-5f));
  EXPECT_EQ(dsaf_recipe_field(abi.get(), "key_quant.block", 0.0), 32.0);
  EXPECT_EQ(dsaf_recipe_field(abi.get(), "no.such.field", -7.0), -7.0);
  // v1's struct inside holds the same values.
  EXPECT_EQ(abi.get()->v1.key_quant.block, 32);
}

// A plug-in host may list the fields in any order: the in-order pass and the lookup of the
// rest give the same recipe (the list's fields over v1's struct, which here holds zeros).
TEST(AbiRecipe, V2FieldsInAnyOrderGiveTheSameRecipe) {
  ref::Recipe changed = ref::preset("sglang-v4-fp4");
  changed.key_norm.eps = 1e-5f;
  const AbiRecipeV2 abi(changed);
  dsaf_recipe_v2 copy = *abi.get();
  copy.v1 = dsaf_recipe_v1{};
  std::vector<dsaf_field_v2> fields(copy.fields, copy.fields + copy.num_fields);
  for (const auto& order : {std::vector<size_t>{}, std::vector<size_t>{0, 1}, std::vector<size_t>{5, 17}}) {
    std::vector<dsaf_field_v2> shuffled = fields;
    if (order.empty()) {
      std::reverse(shuffled.begin(), shuffled.end());
    } else {
      std::swap(shuffled[order[0]], shuffled[order[1]]);
    }
    copy.fields = shuffled.data();
    const ref::RecipeFields back = from_abi(copy);
    ref::for_each_field([&](const ref::FieldInfo& f, auto) {
      if (!f.has(ref::kKernelField)) return;
      EXPECT_EQ(ref::field_value_json(back, f.path), ref::field_value_json(changed, f.path)) << f.path;
    });
  }
}

// from_abi keeps the last recipe it converted: a recipe equal to it gives the kept result,
// and any change (a value, a path's text in the same buffer, v1's struct) converts again.
TEST(AbiRecipe, V2ConversionIsKeptOnlyForAnEqualRecipe) {
  const ref::Recipe base = ref::preset("sglang-v4-fp8");
  const AbiRecipeV2 abi(base);
  const auto same_kernel_fields = [](const ref::RecipeFields& a, const ref::RecipeFields& b) {
    bool same = true;
    ref::for_each_field([&](const ref::FieldInfo& f, auto) {
      if (f.has(ref::kKernelField)) same = same && ref::field_value_json(a, f.path) == ref::field_value_json(b, f.path);
    });
    return same;
  };
  EXPECT_TRUE(same_kernel_fields(from_abi(*abi.get()), base));
  EXPECT_TRUE(same_kernel_fields(from_abi(*abi.get()), base));  // kept
  // A value changed in place.
  dsaf_recipe_v2 copy = *abi.get();
  std::vector<dsaf_field_v2> fields(copy.fields, copy.fields + copy.num_fields);
  copy.fields = fields.data();
  size_t eps = 0;
  while (std::string(fields[eps].path) != "key_norm.eps") ++eps;
  fields[eps].value = 1e-3;
  EXPECT_EQ(from_abi(copy).key_norm.eps, 1e-3f);
  // A path's text changed in the same buffer: the value now lands in another field.
  std::vector<std::vector<char>> texts;
  for (const dsaf_field_v2& f : fields) texts.emplace_back(f.path, f.path + std::strlen(f.path) + 1);
  for (size_t i = 0; i < fields.size(); ++i) fields[i].path = texts[i].data();
  fields[eps].value = 1e-4;
  EXPECT_EQ(from_abi(copy).key_norm.eps, 1e-4f);
  const char* other = "key_quant.block";
  size_t block = 0;
  while (std::string(fields[block].path) != other) ++block;
  fields[block].value = 64.0;
  EXPECT_EQ(from_abi(copy).key_quant.block, 64);
  std::strcpy(texts[block].data(), "key_quant.blocX");  // same length, same pointer
  EXPECT_THROW(from_abi(copy), Error);                   // no such field: converted again, not kept
  std::strcpy(texts[block].data(), other);
  EXPECT_EQ(from_abi(copy).key_quant.block, 64);
  // v1's struct carries what the list leaves out: a change there converts again.
  std::vector<dsaf_field_v2> without_block = fields;
  without_block.erase(without_block.begin() + static_cast<std::ptrdiff_t>(block));
  copy.fields = without_block.data();
  copy.num_fields = static_cast<uint32_t>(without_block.size());
  copy.v1.key_quant.block = 32;
  EXPECT_EQ(from_abi(copy).key_quant.block, 32);
  copy.v1.key_quant.block = 128;
  EXPECT_EQ(from_abi(copy).key_quant.block, 128);
  // Back to the preset.
  EXPECT_TRUE(same_kernel_fields(from_abi(*abi.get()), base));
}

// A list without paths, or without its entries, is bad input, also right after the same
// recipe was converted whole (the kept conversion is not consulted for it).
TEST(AbiRecipe, V2RefusesAFieldWithoutAPathOrAMissingList) {
  const AbiRecipeV2 abi(ref::preset("dsv32-ref"));
  from_abi(*abi.get());
  dsaf_recipe_v2 copy = *abi.get();
  std::vector<dsaf_field_v2> fields(copy.fields, copy.fields + copy.num_fields);
  fields[3].path = nullptr;
  copy.fields = fields.data();
  EXPECT_THROW(from_abi(copy), Error);
  from_abi(*abi.get());
  copy.fields = nullptr;
  EXPECT_THROW(from_abi(copy), Error);
}

TEST(AbiRecipe, V2RefusesAFieldThisBuildDoesNotKnow) {
  const AbiRecipeV2 abi(ref::preset("dsv32-ref"));
  dsaf_recipe_v2 copy = *abi.get();
  std::vector<dsaf_field_v2> fields(copy.fields, copy.fields + copy.num_fields);
  fields.push_back({"key_quant.no_such_field", 1.0});
  copy.fields = fields.data();
  copy.num_fields = static_cast<uint32_t>(fields.size());
  EXPECT_THROW(from_abi(copy), Error);
}

}  // namespace
}  // namespace dsaf::dev
