// File: kernel_abi_convert.h
// ref::RecipeFields <-> the kernel ABI's recipes (kernel_abi.h) through the field table
// (reference/recipe_fields.h). Version 1: every kernel field (kKernelField) that v1 has
// travels in the member for_each_abi_v1_field names for its path, enums by their numeric
// value; a kernel field v1 lacks cannot travel (to_abi refuses it unless it holds its
// default). Version 2: v1's struct plus every kernel field by path, so fields added after
// v1 travel too. tests/device/kernel_abi_convert_test.cc checks both directions.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "device/kernel_abi.h"
#include "reference/error.h"
#include "reference/recipe_fields.h"

namespace dsaf::dev {

// Calls visit(path, member) for every member of dsaf_recipe_v1, by the field-table path
// of the recipe field it carries.
template <class Abi, class Visit>
void for_each_abi_v1_field(Abi& a, Visit visit) {
  const auto quant = [&](const char* side, auto& q) {
    const std::string s(side);
    visit((s + ".format").c_str(), q.format);
    visit((s + ".block").c_str(), q.block);
    visit((s + ".amax_floor").c_str(), q.amax_floor);
    visit((s + ".divisor").c_str(), q.divisor);
    visit((s + ".pow2").c_str(), q.pow2);
    visit((s + ".apply").c_str(), q.apply);
    visit((s + ".saturation").c_str(), q.saturation);
    visit((s + ".fp4_rounding").c_str(), q.fp4_rounding);
  };
  const auto rounding = [&](const char* side, auto& r) {
    const std::string s(side);
    visit((s + ".input").c_str(), r.input);
    visit((s + ".norm").c_str(), r.norm);
    visit((s + ".rope").c_str(), r.rope);
    visit((s + ".hadamard").c_str(), r.hadamard);
  };
  rounding("key_rounding", a.key_rounding);
  rounding("query_rounding", a.query_rounding);
  visit("key_norm.kind", a.norm_kind);
  visit("key_norm.eps", a.norm_eps);
  visit("key_norm.order", a.norm_order);
  visit("key_norm.fma_contraction", a.norm_fma);
  visit("key_norm.rsqrt", a.rsqrt);
  visit("rope.pairing", a.rope_pairing);
  visit("rope.placement", a.rope_placement);
  visit("rope.fma", a.rope_fma);
  visit("hadamard", a.hadamard);
  quant("key_quant", a.key_quant);
  quant("query_quant", a.query_quant);
  visit("weights", a.weights);
  visit("weights_fold", a.weights_fold);
}

// Calls f(abi member, recipe member) for every kernel field that v1 has. A kernel field
// without a v1 member is bad input (strict) unless it holds its default value.
template <class Abi, class Recipe, class F>
void pair_abi_v1_fields(Abi& a, Recipe& r, F f, bool strict = true) {
  const ref::RecipeFields defaults{};
  ref::for_each_field([&](const ref::FieldInfo& field, auto member) {
    if (!field.has(ref::kKernelField)) return;
    bool found = false;
    for_each_abi_v1_field(a, [&](const char* path, auto& abi) {
      if (std::strcmp(path, field.path) != 0) return;
      found = true;
      f(abi, member(r));
    });
    if (strict && !found && !(member(r) == member(defaults))) {
      throw_bad_input(std::string("recipe field ") + field.path + " cannot travel through kernel ABI v1");
    }
  });
}

inline dsaf_recipe_v1 to_abi(const ref::RecipeFields& recipe, bool strict = true) {
  dsaf_recipe_v1 a{};
  pair_abi_v1_fields(
      a, recipe, [](auto& abi, const auto& value) { abi = static_cast<std::decay_t<decltype(abi)>>(value); }, strict);
  return a;
}

inline ref::RecipeFields from_abi(const dsaf_recipe_v1& a) {
  ref::RecipeFields recipe{};
  pair_abi_v1_fields(a, recipe, [](const auto& abi, auto& value) {
    using T = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<T, bool>) {
      value = abi != 0;
    } else {
      value = static_cast<T>(abi);
    }
  });
  return recipe;
}

// A recipe as ABI v2 passes it, with the storage its field list points into.
class AbiRecipeV2 {
 public:
  explicit AbiRecipeV2(const ref::RecipeFields& recipe) {
    ref::for_each_field([&](const ref::FieldInfo& f, auto member) {
      if (!f.has(ref::kKernelField)) return;
      using T = std::decay_t<decltype(member(recipe))>;
      if constexpr (std::is_enum_v<T>) {
        fields_.push_back({f.path, static_cast<double>(static_cast<int>(member(recipe)))});
      } else {
        fields_.push_back({f.path, static_cast<double>(member(recipe))});
      }
    });
    recipe_.v1 = to_abi(recipe, /*strict=*/false);
    recipe_.num_fields = static_cast<uint32_t>(fields_.size());
    recipe_.fields = fields_.data();
  }
  AbiRecipeV2(const AbiRecipeV2&) = delete;
  AbiRecipeV2& operator=(const AbiRecipeV2&) = delete;
  const dsaf_recipe_v2* get() const { return &recipe_; }

 private:
  std::vector<dsaf_field_v2> fields_;
  dsaf_recipe_v2 recipe_{};
};

// v1's struct, then every listed field by path (a path the table does not know is bad
// input: the plug-in and this build disagree on the recipe).
inline ref::RecipeFields from_abi(const dsaf_recipe_v2& a) {
  ref::RecipeFields recipe = from_abi(a.v1);
  for (uint32_t i = 0; i < a.num_fields; ++i) {
    bool found = false;
    ref::for_each_field([&](const ref::FieldInfo& f, auto member) {
      if (std::strcmp(f.path, a.fields[i].path) != 0) return;
      found = true;
      using T = std::decay_t<decltype(member(recipe))>;
      if constexpr (std::is_same_v<T, bool>) {
        member(recipe) = a.fields[i].value != 0;
      } else if constexpr (std::is_enum_v<T>) {
        member(recipe) = static_cast<T>(static_cast<int>(a.fields[i].value));
      } else {
        member(recipe) = static_cast<T>(a.fields[i].value);
      }
    });
    if (!found) throw_bad_input(std::string("kernel ABI v2 recipe: unknown field '") + a.fields[i].path + "'");
  }
  return recipe;
}

}  // namespace dsaf::dev
