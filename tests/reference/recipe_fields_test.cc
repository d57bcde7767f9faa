// The recipe field table (reference/recipe_fields.h): every member of RecipeFields is in
// it once, under a unique path that JSON reads and writes; enum names are unique and
// complete; the role queries (same_fields, with_fields) do what they say.
#include "reference/recipe_fields.h"

#include <cstring>
#include <set>
#include <string>
#include <type_traits>

#include <gtest/gtest.h>

#include "reference/error.h"
#include "reference/presets.h"
#include "reference/recipe_json.h"

namespace dsaf::ref {
namespace {

// The JSON of a recipe holds one leaf per table field (plus the name fields and the
// derived byte count), at the field's path: a member missing from the table would be
// missing from the JSON, and one listed twice would show up as a duplicate path.
TEST(RecipeFieldTable, PathsAreUniqueAndAreTheJsonLeaves) {
  std::set<std::string> paths;
  for_each_field([&](const FieldInfo& f, auto) { EXPECT_TRUE(paths.insert(f.path).second) << f.path; });
  std::set<std::string> leaves;
  const auto walk = [&](const auto& self, const nlohmann::json& j, const std::string& prefix) -> void {
    for (const auto& item : j.items()) {
      const std::string path = prefix.empty() ? item.key() : prefix + "." + item.key();
      if (item.value().is_object()) {
        self(self, item.value(), path);
      } else {
        leaves.insert(path);
      }
    }
  };
  walk(walk, recipe_to_json(preset("sglang-v4-fp8")), "");
  for (const char* outside : {"name", "description", "source", "provenance.status", "provenance.upstream",
                              "provenance.evidence", "cache_bytes_per_token"}) {
    EXPECT_EQ(leaves.erase(outside), 1u) << outside;
  }
  EXPECT_EQ(leaves, paths);
}

// Every field changed alone changes the JSON, and reading the JSON back restores exactly
// that field: a table entry bound to the wrong member, or one that JSON does not read,
// fails here.
TEST(RecipeFieldTable, EveryFieldRoundTripsThroughJsonOnItsOwn) {
  const Recipe base = preset("dsv32-ref");
  int fields = 0;
  for_each_field([&](const FieldInfo& f, auto member) {
    ++fields;
    Recipe changed = base;
    using T = std::decay_t<decltype(member(changed))>;
    if constexpr (std::is_enum_v<T>) {
      const auto names = enum_names(T{});
      member(changed) = names[(static_cast<size_t>(member(base)) + 1) % names.size()].value;
    } else if constexpr (std::is_same_v<T, bool>) {
      member(changed) = !member(base);
    } else {
      member(changed) = member(base) + 1;
    }
    const std::string change = describe_field_changes(base, changed);
    EXPECT_EQ(change.rfind(std::string(f.path) + ": ", 0), 0u) << f.path << ": " << change;
    EXPECT_EQ(change.find(';'), std::string::npos) << "more than one field changed: " << change;
    nlohmann::json j = recipe_to_json(base);
    std::string pointer = "/" + std::string(f.path);
    for (char& c : pointer) c = c == '.' ? '/' : c;
    j[nlohmann::json::json_pointer(pointer)] = field_value_json(changed, f.path);
    Recipe back = base;
    try {
      back = recipe_from_json(j);
    } catch (const Error&) {
      return;  // the change is an invalid recipe (validate), which the JSON path refuses
    }
    EXPECT_EQ(describe_field_changes(changed, back), "") << f.path;
  });
  EXPECT_GT(fields, 40);
}

TEST(RecipeFieldTable, EnumNamesAreUniqueAndListEveryValue) {
  const auto check = [](auto e) {
    using E = decltype(e);
    std::set<std::string> names;
    const auto list = enum_names(E{});
    for (size_t i = 0; i < list.size(); ++i) {
      EXPECT_EQ(static_cast<size_t>(list[i].value), i) << list[i].name << ": declaration order";
      EXPECT_TRUE(names.insert(list[i].name).second) << list[i].name;
    }
  };
  for_each_field([&](const FieldInfo&, auto member) {
    const RecipeFields r{};
    using T = std::decay_t<decltype(member(r))>;
    if constexpr (std::is_enum_v<T>) check(T{});
  });
}

// The roles the kernels rely on: 21 fields choose a key-kernel code path; eps and
// amax_floor are kernel fields that do not (they stay runtime values in a pinned path).
TEST(RecipeFieldTable, KeyCodePathFieldsAreTheKeyKernelsBranches) {
  std::set<std::string> branch, kernel;
  for_each_field([&](const FieldInfo& f, auto) {
    if (f.has(kKernelField)) kernel.insert(f.path);
    if (f.has(kKeyCodePath)) {
      branch.insert(f.path);
      EXPECT_TRUE(f.has(kKernelField)) << f.path;
    }
  });
  EXPECT_EQ(branch.size(), 21u);
  EXPECT_EQ(branch.count("key_norm.eps") + branch.count("key_quant.amax_floor"), 0u);
  EXPECT_EQ(kernel.count("key_norm.eps") + kernel.count("key_quant.amax_floor"), 2u);
  EXPECT_EQ(kernel.count("rope.table.theta") + kernel.count("score") + kernel.count("topk"), 0u);
}

TEST(RecipeFieldTable, SameAndWithFieldsActOnTheirRoleOnly) {
  constexpr RecipeFields fp8 = preset_fields::sglang_v4_fp8();
  RecipeFields other = preset_fields::dsv32_ref();
  EXPECT_FALSE(same_fields(fp8, other, kKeyCodePath));
  const RecipeFields pinned = with_fields(other, fp8, kKeyCodePath);
  EXPECT_TRUE(same_fields(pinned, fp8, kKeyCodePath));
  // What kKeyCodePath does not cover stays the runtime recipe's.
  EXPECT_EQ(pinned.key_norm.eps, other.key_norm.eps);
  EXPECT_EQ(pinned.rope.table.theta, other.rope.table.theta);
  EXPECT_EQ(pinned.query_quant.apply, other.query_quant.apply);
  static_assert(same_fields(preset_fields::sglang_v4_fp8(), preset_fields::sglang_v4_fp8(), kKeyCodePath),
                "the table runs at compile time");
}

// The presets of recipe.cc are the constants of presets.h, field for field.
TEST(RecipeFieldTable, PresetsAreTheirConstantFields) {
  const std::pair<const char*, RecipeFields> constants[] = {
      {"exact", preset_fields::exact()},
      {"dsv32-ref", preset_fields::dsv32_ref()},
      {"dsv32-bf16", preset_fields::dsv32_bf16()},
      {"sglang-v32-fused", preset_fields::sglang_v32_fused()},
      {"vllm-v32", preset_fields::vllm_v32()},
      {"dsv4-ref", preset_fields::dsv4_ref()},
      {"sglang-v4-fp8", preset_fields::sglang_v4_fp8()},
      {"sglang-v4-bf16", preset_fields::sglang_v4_bf16()},
      {"sglang-v4-fp4", preset_fields::sglang_v4_fp4()}};
  for (const auto& [name, fields] : constants) {
    EXPECT_EQ(describe_field_changes(preset(name), fields), "") << name;
  }
}

}  // namespace
}  // namespace dsaf::ref
