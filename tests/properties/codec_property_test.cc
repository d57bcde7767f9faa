// Properties of the codecs over bit-pattern floats weighted toward edge classes.
#include <cmath>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "properties/float_bits.h"
#include "reference/numeric/bit_cast.h"
#include "reference/numeric/minifloat.h"

namespace dsaf::ref {
namespace {

using properties::float_bits_weighted;

// The encoded value is a nearest representable value: no other finite e4m3fn code is
// strictly closer (satfinite clamps beyond 448).
RC_GTEST_PROP(E4m3fnProperty, EncodesToANearestCode, ()) {
  const float x = *float_bits_weighted();
  RC_PRE(std::isfinite(x));
  const uint8_t code = encode_e4m3fn(x, Saturation::kSatFinite);
  const double target = std::fmax(-448.0, std::fmin(448.0, static_cast<double>(x)));
  const double chosen = std::fabs(decode_e4m3fn(code) - target);
  for (int other = 0; other < 256; ++other) {
    if ((other & 0x7F) == 0x7F) continue;
    RC_ASSERT(chosen <= std::fabs(decode_e4m3fn(static_cast<uint8_t>(other)) - target));
  }
}

// Encoding is monotone: x <= y implies decode(encode(x)) <= decode(encode(y)).
RC_GTEST_PROP(Bf16Property, RoundingIsMonotone, ()) {
  const float x = *float_bits_weighted();
  const float y = *float_bits_weighted();
  RC_PRE(!std::isnan(x) && !std::isnan(y));
  const float lo = std::fmin(x, y), hi = std::fmax(x, y);
  RC_ASSERT(round_bf16(lo) <= round_bf16(hi));
}

// Rounding is idempotent and sign-symmetric for every codec.
RC_GTEST_PROP(CodecProperty, IdempotentAndSignSymmetric, ()) {
  const float x = *float_bits_weighted();
  RC_PRE(!std::isnan(x));
  const float b = round_bf16(x);
  RC_ASSERT(float_bits(round_bf16(b)) == float_bits(b));
  RC_ASSERT(float_bits(round_bf16(-x)) == float_bits(-b));
  const float e = decode_e4m3fn(encode_e4m3fn(x, Saturation::kSatFinite));
  RC_ASSERT(encode_e4m3fn(e, Saturation::kSatFinite) == encode_e4m3fn(x, Saturation::kSatFinite));
  RC_ASSERT(float_bits(decode_e4m3fn(encode_e4m3fn(-x, Saturation::kSatFinite))) == float_bits(-e));
  for (Rounding r : {Rounding::kNearestEven, Rounding::kNearestTiesTowardZero}) {
    const uint8_t c = encode_e2m1(x, r);
    RC_ASSERT(encode_e2m1(decode_e2m1(c), r) == c);
    RC_ASSERT(encode_e2m1(-x, r) == (c ^ 0x8));
  }
}

}  // namespace
}  // namespace dsaf::ref
