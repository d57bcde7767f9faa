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
// of the recipe field it carries. The paths are literals: this runs for every field of
// every conversion, i.e. on every ABI call (building them as strings cost ~70 us a call).
template <class Abi, class Visit>
void for_each_abi_v1_field(Abi& a, Visit visit) {
  const auto quant = [&](const char* const (&path)[8], auto& q) {
    visit(path[0], q.format);
    visit(path[1], q.block);
    visit(path[2], q.amax_floor);
    visit(path[3], q.divisor);
    visit(path[4], q.pow2);
    visit(path[5], q.apply);
    visit(path[6], q.saturation);
    visit(path[7], q.fp4_rounding);
  };
  const auto rounding = [&](const char* const (&path)[4], auto& r) {
    visit(path[0], r.input);
    visit(path[1], r.norm);
    visit(path[2], r.rope);
    visit(path[3], r.hadamard);
  };
  static constexpr const char* kKeyRounding[4] = {"key_rounding.input", "key_rounding.norm", "key_rounding.rope",
                                                  "key_rounding.hadamard"};
  static constexpr const char* kQueryRounding[4] = {"query_rounding.input", "query_rounding.norm",
                                                    "query_rounding.rope", "query_rounding.hadamard"};
  static constexpr const char* kKeyQuant[8] = {"key_quant.format",     "key_quant.block",  "key_quant.amax_floor",
                                               "key_quant.divisor",    "key_quant.pow2",   "key_quant.apply",
                                               "key_quant.saturation", "key_quant.fp4_rounding"};
  static constexpr const char* kQueryQuant[8] = {"query_quant.format",     "query_quant.block",
                                                 "query_quant.amax_floor", "query_quant.divisor",
                                                 "query_quant.pow2",       "query_quant.apply",
                                                 "query_quant.saturation", "query_quant.fp4_rounding"};
  rounding(kKeyRounding, a.key_rounding);
  rounding(kQueryRounding, a.query_rounding);
  visit("key_norm.kind", a.norm_kind);
  visit("key_norm.eps", a.norm_eps);
  visit("key_norm.order", a.norm_order);
  visit("key_norm.fma_contraction", a.norm_fma);
  visit("key_norm.rsqrt", a.rsqrt);
  visit("rope.pairing", a.rope_pairing);
  visit("rope.placement", a.rope_placement);
  visit("rope.fma", a.rope_fma);
  visit("hadamard", a.hadamard);
  quant(kKeyQuant, a.key_quant);
  quant(kQueryQuant, a.query_quant);
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
// One field of the list into the recipe member it names.
template <class T>
void assign_abi_field(T& member, double value) {
  if constexpr (std::is_same_v<T, bool>) {
    member = value != 0;
  } else if constexpr (std::is_enum_v<T>) {
    member = static_cast<T>(static_cast<int>(value));
  } else {
    member = static_cast<T>(value);
  }
}

// Every call of a key store through the ABI converts its recipe, so the common case is one
// pass: a list in the field table's order (AbiRecipeV2 writes one) is matched entry by entry
// while the table is walked once (39 comparisons for today's kernel fields, against ~39 x
// 100 when each entry searched the table: ~90 us a call on a 2-core development machine).
// Entries out of that order are then looked up one by one, as before; an entry no field
// has is bad input.
inline ref::RecipeFields convert_abi_recipe(const dsaf_recipe_v2& a) {
  if (a.num_fields > 0 && a.fields == nullptr) throw_bad_input("kernel ABI v2 recipe: fields missing");
  for (uint32_t i = 0; i < a.num_fields; ++i) {
    if (a.fields[i].path == nullptr) throw_bad_input("kernel ABI v2 recipe: field " + std::to_string(i) + " has no path");
  }
  ref::RecipeFields recipe = from_abi(a.v1);
  uint32_t in_order = 0;  // entries [0, in_order) matched by the walk
  ref::for_each_field([&](const ref::FieldInfo& f, auto member) {
    if (in_order < a.num_fields && std::strcmp(f.path, a.fields[in_order].path) == 0) {
      assign_abi_field(member(recipe), a.fields[in_order].value);
      ++in_order;
    }
  });
  for (uint32_t i = in_order; i < a.num_fields; ++i) {
    bool found = false;
    ref::for_each_field([&](const ref::FieldInfo& f, auto member) {
      if (std::strcmp(f.path, a.fields[i].path) != 0) return;
      found = true;
      assign_abi_field(member(recipe), a.fields[i].value);
    });
    if (!found) throw_bad_input(std::string("kernel ABI v2 recipe: unknown field '") + a.fields[i].path + "'");
  }
  return recipe;
}

// The last v2 recipe this thread converted and its result. A study or a verify run calls the
// entry points many times with one recipe, between stretches of CPU work that leave the
// walk's code and the table cold: on the H200 host the conversion then took ~50 us of every
// key-store and query call (6 us hot), host time the idle device waits through. A recipe
// equal to the last one, field for field (v1's struct byte for byte, each entry's value bit
// for bit and its path's text), is not converted again.
struct AbiRecipeMemo {
  bool held = false;
  dsaf_recipe_v1 v1{};
  std::vector<std::string> paths;
  std::vector<double> values;
  ref::RecipeFields recipe{};

  bool holds(const dsaf_recipe_v2& a) const {
    if (!held || a.num_fields != paths.size() || (a.num_fields > 0 && a.fields == nullptr) ||
        std::memcmp(&v1, &a.v1, sizeof v1) != 0) {
      return false;
    }
    for (uint32_t i = 0; i < a.num_fields; ++i) {
      if (a.fields[i].path == nullptr || std::memcmp(&values[i], &a.fields[i].value, sizeof(double)) != 0 ||
          paths[i] != a.fields[i].path) {
        return false;
      }
    }
    return true;
  }
  void keep(const dsaf_recipe_v2& a, const ref::RecipeFields& converted) {
    held = false;  // until every member is written
    std::memcpy(&v1, &a.v1, sizeof v1);  // bytes, as holds() compares them
    paths.assign(a.num_fields, std::string());
    values.assign(a.num_fields, 0.0);
    for (uint32_t i = 0; i < a.num_fields; ++i) paths[i] = a.fields[i].path, values[i] = a.fields[i].value;
    recipe = converted;
    held = true;
  }
};

inline ref::RecipeFields from_abi(const dsaf_recipe_v2& a) {
  thread_local AbiRecipeMemo memo;
  if (memo.holds(a)) return memo.recipe;
  const ref::RecipeFields recipe = convert_abi_recipe(a);  // throws on a field it does not know
  memo.keep(a, recipe);
  return recipe;
}

}  // namespace dsaf::dev
