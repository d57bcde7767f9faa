// File: recipe_gen.cc — recipe and score-row generators (recipe_gen.h).
#include "properties/recipe_gen.h"

#include <cstring>

#include "reference/error.h"

namespace dsaf::properties {
namespace {

template <class E>
E gen_enum(int count) {
  return static_cast<E>(*rc::gen::inRange(0, count));
}

ref::QuantSpec gen_quant(std::optional<ref::StorageFormat> format = std::nullopt) {
  ref::QuantSpec q;
  q.format = format ? *format : static_cast<ref::StorageFormat>(*rc::gen::inRange(1, 6));  // not kNone (fp32 compute)
  const bool fp4 = q.format == ref::StorageFormat::kFp4E2m1 || q.format == ref::StorageFormat::kFp4SimulatedBf16;
  q.block = fp4 ? 32 : 128;
  q.amax_floor = *rc::gen::element(1e-4f, 1e-10f, 1e-30f);
  q.divisor = gen_enum<ref::ScaleDivisor>(2);
  q.pow2 = fp4 ? static_cast<ref::ScalePow2>(*rc::gen::inRange(1, 3)) : gen_enum<ref::ScalePow2>(3);
  q.apply = gen_enum<ref::ScaleApply>(2);
  q.saturation = gen_enum<ref::Saturation>(2);
  q.fp4_rounding = gen_enum<ref::Rounding>(2);
  q.fp4_zero_sign = gen_enum<ref::Fp4ZeroSign>(2);
  q.fp4_prestage = fp4 ? gen_enum<ref::Fp4Prestage>(2) : ref::Fp4Prestage::kNone;
  return q;
}

ref::IntermediateRounding gen_rounding() {
  return {*rc::gen::arbitrary<bool>(), *rc::gen::arbitrary<bool>(), *rc::gen::arbitrary<bool>(),
          *rc::gen::arbitrary<bool>()};
}

}  // namespace

rc::Gen<ref::Recipe> gen_recipe(std::optional<ref::StorageFormat> key_format) {
  return rc::gen::exec([key_format] {
    for (;;) {
      ref::Recipe r;
      r.name = "generated";
      r.key_rounding = gen_rounding();
      r.query_rounding = gen_rounding();
      r.key_norm.kind = gen_enum<ref::NormKind>(3);
      r.key_norm.eps = *rc::gen::element(1e-6f, 1e-5f);
      r.key_norm.order = gen_enum<ref::ReductionOrder>(4);
      r.key_norm.fma_contraction = *rc::gen::arbitrary<bool>();
      r.key_norm.rsqrt = gen_enum<ref::RsqrtKind>(2);
      r.rope.pairing = gen_enum<ref::RopePairing>(2);
      r.rope.placement = gen_enum<ref::RopePlacement>(2);
      r.rope.fma = gen_enum<ref::ContractedProduct>(4);
      r.rope.table = *rc::gen::element(ref::RopeTableSpec{10000.0, 40.0, 4096.0, 32.0, 1.0},
                                       ref::RopeTableSpec{160000.0, 16.0, 65536.0, 32.0, 1.0},
                                       ref::RopeTableSpec{10000.0, 1.0, 4096.0, 32.0, 1.0});
      r.hadamard = *rc::gen::arbitrary<bool>();
      r.key_quant = gen_quant(key_format);
      r.query_quant = gen_quant();
      r.weights = gen_enum<ref::WeightsPrecision>(2);
      r.weights_fold = gen_enum<ref::WeightsFold>(2);
      r.score = gen_enum<ref::ScoreAccum>(3);
      r.topk = *rc::gen::inRange(1, 64);
      r.page_size = 1 << *rc::gen::inRange(0, 9);
      try {
        r.validate();
        return r;
      } catch (const Error&) {
        continue;  // e.g. a power-of-two rule with a floor below qmax * 2^-126
      }
    }
  });
}

rc::Gen<std::vector<double>> gen_tie_heavy_scores(int max_len) {
  return rc::gen::exec([=] {
    const int n = *rc::gen::inRange(1, max_len + 1);
    const int distinct = *rc::gen::inRange(1, 5);
    std::vector<double> row;
    for (int i = 0; i < n; ++i) row.push_back(0.25 * *rc::gen::inRange(0, distinct));
    return row;
  });
}

rc::Gen<std::vector<double>> gen_shared_high_bits_scores(int max_len) {
  return rc::gen::exec([=] {
    const int n = *rc::gen::inRange(1, max_len + 1);
    std::vector<double> row;
    for (int i = 0; i < n; ++i) {
      const uint32_t bits = 0x3F900000u | *rc::gen::inRange<uint32_t>(0, 1024);
      float f;
      std::memcpy(&f, &bits, 4);
      row.push_back(f);
    }
    return row;
  });
}

}  // namespace dsaf::properties
