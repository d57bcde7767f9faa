// File: recipe_json.cc — Recipe <-> JSON with strict field checking (recipe_json.h).
#include "reference/recipe_json.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <type_traits>
#include <utility>

#include "reference/error.h"

namespace dsaf::ref {
namespace {

using nlohmann::json;

template <class E>
using Names = std::vector<std::pair<E, const char*>>;

const Names<Compute> kCompute = {{Compute::kFp32, "fp32"}, {Compute::kFp64, "fp64"}};
const Names<ReductionOrder> kOrder = {{ReductionOrder::kSequential, "sequential"},
                                      {ReductionOrder::kWarpTree, "warp_tree"}};
const Names<NormKind> kNorm = {{NormKind::kNone, "none"},
                               {NormKind::kLayerNorm, "layernorm"},
                               {NormKind::kRmsNorm, "rmsnorm"}};
const Names<RsqrtKind> kRsqrt = {{RsqrtKind::kCorrectlyRounded, "correctly_rounded"},
                                 {RsqrtKind::kSm90Approx, "sm90_approx"}};
const Names<RopePairing> kPairing = {{RopePairing::kNeox, "neox"},
                                     {RopePairing::kInterleaved, "interleaved"}};
const Names<RopePlacement> kPlacement = {{RopePlacement::kLeading, "leading"},
                                         {RopePlacement::kTrailing, "trailing"}};
const Names<ContractedProduct> kContracted = {{ContractedProduct::kNone, "none"},
                                              {ContractedProduct::kFirst, "first"},
                                              {ContractedProduct::kSecond, "second"}};
const Names<StorageFormat> kFormat = {{StorageFormat::kNone, "none"},
                                      {StorageFormat::kFp32, "fp32"},
                                      {StorageFormat::kBf16, "bf16"},
                                      {StorageFormat::kFp8E4m3fn, "fp8_e4m3fn"},
                                      {StorageFormat::kFp4E2m1, "fp4_e2m1"},
                                      {StorageFormat::kFp4SimulatedBf16, "fp4_simulated_bf16"}};
const Names<ScaleDivisor> kDivisor = {{ScaleDivisor::kDivide, "divide"},
                                      {ScaleDivisor::kTimesReciprocal, "times_reciprocal"}};
const Names<ScalePow2> kPow2 = {{ScalePow2::kNone, "none"},
                                {ScalePow2::kExponentBitsCeil, "ue8m0_exponent_bits"},
                                {ScalePow2::kLog2Ceil, "ue8m0_log2_ceil"}};
const Names<ScaleApply> kApply = {{ScaleApply::kDivide, "divide"},
                                  {ScaleApply::kTimesReciprocal, "times_reciprocal"}};
const Names<Saturation> kSaturation = {{Saturation::kSatFinite, "satfinite"},
                                       {Saturation::kNonSaturating, "non_saturating"}};
const Names<Rounding> kRounding = {{Rounding::kNearestEven, "nearest_even"},
                                   {Rounding::kNearestTiesTowardZero, "nearest_ties_toward_zero"}};
const Names<ScoreAccum> kScore = {{ScoreAccum::kFp32, "fp32"},
                                  {ScoreAccum::kBf16, "bf16"},
                                  {ScoreAccum::kExact, "exact"}};
const Names<WeightsPrecision> kWeights = {{WeightsPrecision::kFp32, "fp32"},
                                          {WeightsPrecision::kBf16, "bf16"}};
const Names<WeightsFold> kFold = {{WeightsFold::kSeparateFactors, "separate_factors"},
                                  {WeightsFold::kCombinedConstant, "combined_constant"}};
const Names<MaskKind> kMask = {{MaskKind::kCausal, "causal"}, {MaskKind::kNone, "none"}};

template <class E>
std::string name_of(const Names<E>& names, E value) {
  for (const auto& [v, n] : names) {
    if (v == value) return n;
  }
  throw Error(ErrorKind::kInternal, "enum value without a name");
}

// Reads an object field by field; every key must be consumed, or it is an error.
class Reader {
 public:
  Reader(const json& object, std::string path) : object_(object), path_(std::move(path)) {
    if (!object_.is_object()) throw_bad_input(path_ + ": expected a JSON object");
    for (const auto& item : object_.items()) unread_.push_back(item.key());
  }
  ~Reader() = default;

  // Integers must be JSON integers within T's range (nlohmann would cast 1e20 or 64.9 to
  // int: undefined or silently truncated); floating fields must stay finite in T (1e39
  // would become fp32 +inf, which JSON cannot even write back).
  template <class T>
  void field(const char* key, T& out) {
    if (!take(key)) return;
    const json& v = object_.at(key);
    const auto wrong = [&](const char* what) { throw_bad_input(path_ + "." + key + ": " + what + " (" + v.dump() + ")"); };
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (!v.is_number_integer()) wrong("wrong type: expected an integer");
      const bool in_range = v.is_number_unsigned()
                                ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                                : v.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                                      v.get<int64_t>() <= static_cast<int64_t>(std::numeric_limits<T>::max());
      if (!in_range) wrong("out of range");
      out = v.get<T>();
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!v.is_number()) wrong("wrong type: expected a number");
      const double d = v.get<double>();
      if (!std::isfinite(d) || !std::isfinite(static_cast<T>(d))) wrong("not a finite value of the field's type");
      out = static_cast<T>(d);
    } else {
      try {
        out = v.get<T>();
      } catch (const json::exception&) {
        wrong("wrong type");
      }
    }
  }
  template <class E>
  void enumeration(const char* key, const Names<E>& names, E& out) {
    if (!take(key)) return;
    const json& v = object_.at(key);
    std::string allowed;
    for (const auto& [value, name] : names) {
      if (v.is_string() && v.get<std::string>() == name) {
        out = value;
        return;
      }
      allowed += (allowed.empty() ? "" : ", ") + std::string(name);
    }
    throw_bad_input(path_ + "." + key + ": " + v.dump() + " is not one of: " + allowed);
  }
  // A nested object: calls read(Reader&) on it.
  template <class F>
  void object(const char* key, F read) {
    if (!take(key)) return;
    Reader nested(object_.at(key), path_ + "." + key);
    read(nested);
    nested.finish();
  }
  void finish() const {
    if (!unread_.empty()) {
      throw_bad_input(path_ + "." + unread_.front() + ": unknown field");
    }
  }

 private:
  bool take(const std::string& key) {
    for (auto it = unread_.begin(); it != unread_.end(); ++it) {
      if (*it == key) {
        unread_.erase(it);
        return true;
      }
    }
    return false;
  }
  const json& object_;
  std::string path_;
  std::vector<std::string> unread_;
};

json rounding_json(const IntermediateRounding& r) {
  return {{"input", r.input}, {"norm", r.norm}, {"rope", r.rope}, {"hadamard", r.hadamard}};
}
void read_rounding(Reader& in, IntermediateRounding& r) {
  in.field("input", r.input);
  in.field("norm", r.norm);
  in.field("rope", r.rope);
  in.field("hadamard", r.hadamard);
}

json quant_json(const QuantSpec& q) {
  return {{"format", name_of(kFormat, q.format)},
          {"block", q.block},
          {"amax_floor", q.amax_floor},
          {"divisor", name_of(kDivisor, q.divisor)},
          {"pow2", name_of(kPow2, q.pow2)},
          {"apply", name_of(kApply, q.apply)},
          {"saturation", name_of(kSaturation, q.saturation)},
          {"fp4_rounding", name_of(kRounding, q.fp4_rounding)}};
}
void read_quant(Reader& in, QuantSpec& q) {
  in.enumeration("format", kFormat, q.format);
  in.field("block", q.block);
  in.field("amax_floor", q.amax_floor);
  in.enumeration("divisor", kDivisor, q.divisor);
  in.enumeration("pow2", kPow2, q.pow2);
  in.enumeration("apply", kApply, q.apply);
  in.enumeration("saturation", kSaturation, q.saturation);
  in.enumeration("fp4_rounding", kRounding, q.fp4_rounding);
}

}  // namespace

json recipe_to_json(const Recipe& r) {
  const RopeTableSpec& t = r.rope.table;
  return {
      {"name", r.name},
      {"description", r.description},
      {"source", r.source},
      {"compute", name_of(kCompute, r.compute)},
      {"key_rounding", rounding_json(r.key_rounding)},
      {"query_rounding", rounding_json(r.query_rounding)},
      {"key_norm",
       {{"kind", name_of(kNorm, r.key_norm.kind)},
        {"eps", r.key_norm.eps},
        {"order", name_of(kOrder, r.key_norm.order)},
        {"fma_contraction", r.key_norm.fma_contraction},
        {"rsqrt", name_of(kRsqrt, r.key_norm.rsqrt)}}},
      {"rope",
       {{"pairing", name_of(kPairing, r.rope.pairing)},
        {"placement", name_of(kPlacement, r.rope.placement)},
        {"fma", name_of(kContracted, r.rope.fma)},
        {"table",
         {{"theta", t.theta},
          {"yarn_factor", t.yarn_factor},
          {"original_seq_len", t.original_seq_len},
          {"beta_fast", t.beta_fast},
          {"beta_slow", t.beta_slow}}}}},
      {"hadamard", r.hadamard},
      {"key_quant", quant_json(r.key_quant)},
      {"query_quant", quant_json(r.query_quant)},
      {"weights", name_of(kWeights, r.weights)},
      {"weights_fold", name_of(kFold, r.weights_fold)},
      {"score", name_of(kScore, r.score)},
      {"mask", name_of(kMask, r.mask)},
      {"topk", r.topk},
      {"page_size", r.page_size},
      {"cache_bytes_per_token", cache_bytes_per_token(r.key_quant.format)},
  };
}

Recipe recipe_from_json(const json& j) {
  Reader in(j, "recipe");
  Recipe r;
  std::string base;
  in.field("base", base);
  if (!base.empty()) r = preset(base);
  in.field("name", r.name);
  in.field("description", r.description);
  in.field("source", r.source);
  in.enumeration("compute", kCompute, r.compute);
  in.object("key_rounding", [&](Reader& o) { read_rounding(o, r.key_rounding); });
  in.object("query_rounding", [&](Reader& o) { read_rounding(o, r.query_rounding); });
  in.object("key_norm", [&](Reader& o) {
    o.enumeration("kind", kNorm, r.key_norm.kind);
    o.field("eps", r.key_norm.eps);
    o.enumeration("order", kOrder, r.key_norm.order);
    o.field("fma_contraction", r.key_norm.fma_contraction);
    o.enumeration("rsqrt", kRsqrt, r.key_norm.rsqrt);
  });
  in.object("rope", [&](Reader& o) {
    o.enumeration("pairing", kPairing, r.rope.pairing);
    o.enumeration("placement", kPlacement, r.rope.placement);
    o.enumeration("fma", kContracted, r.rope.fma);
    o.object("table", [&](Reader& t) {
      t.field("theta", r.rope.table.theta);
      t.field("yarn_factor", r.rope.table.yarn_factor);
      t.field("original_seq_len", r.rope.table.original_seq_len);
      t.field("beta_fast", r.rope.table.beta_fast);
      t.field("beta_slow", r.rope.table.beta_slow);
    });
  });
  in.field("hadamard", r.hadamard);
  in.object("key_quant", [&](Reader& o) { read_quant(o, r.key_quant); });
  in.object("query_quant", [&](Reader& o) { read_quant(o, r.query_quant); });
  in.enumeration("weights", kWeights, r.weights);
  in.enumeration("weights_fold", kFold, r.weights_fold);
  in.enumeration("score", kScore, r.score);
  in.enumeration("mask", kMask, r.mask);
  in.field("topk", r.topk);
  in.field("page_size", r.page_size);
  int ignored_bytes = 0;  // derived, written by recipe_to_json; accepted and ignored
  in.field("cache_bytes_per_token", ignored_bytes);
  in.finish();
  r.validate();
  return r;
}

std::vector<Recipe> load_recipe_file(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw_bad_input("cannot open recipe file '" + path + "'");
  json j;
  try {
    j = json::parse(file);
  } catch (const json::exception& e) {  // parse errors, and numbers beyond a double (1e999)
    throw_bad_input("recipe file '" + path + "': " + e.what());
  }
  std::vector<Recipe> out;
  if (j.is_array()) {
    for (const json& item : j) out.push_back(recipe_from_json(item));
  } else {
    out.push_back(recipe_from_json(j));
  }
  return out;
}

}  // namespace dsaf::ref
