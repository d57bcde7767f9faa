// File: float_bits.cc — bit-pattern float generators (float_bits.h).
#include "properties/float_bits.h"

#include <cmath>
#include <cstring>

namespace dsaf::properties {
namespace {

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace

rc::Gen<float> any_float_bits() {
  return rc::gen::map(rc::gen::arbitrary<uint32_t>(), from_bits);
}

const std::vector<float>& edge_floats() {
  static const std::vector<float> values = [] {
    std::vector<float> base = {
        0.0f, 0x1p-149f, 0x1p-126f, 0x1p-133f,             // zero, fp32/bf16 subnormals
        0x1p-10f, 0x1p-9f, 1.5f * 0x1p-9f, 0x1p-6f,        // e4m3fn subnormal range
        0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f,  // e2m1 midpoints and max
        1.0f, 1.0625f, 1.0f + 0x1p-8f,                     // e4m3fn / bf16 ties at 1
        448.0f, 464.0f, 480.0f, 1e9f, 3.4028235e38f,        // e4m3fn overflow boundaries
        INFINITY, NAN};
    std::vector<float> out;
    for (float v : base) {
      for (float s : {1.0f, -1.0f}) {
        const float x = s * v;
        out.push_back(x);
        if (std::isfinite(x)) {
          out.push_back(std::nextafter(x, INFINITY));
          out.push_back(std::nextafter(x, -INFINITY));
        }
      }
    }
    return out;
  }();
  return values;
}

rc::Gen<float> float_bits_weighted() {
  const auto moderate = rc::gen::map(
      rc::gen::tuple(rc::gen::inRange(-20, 21), rc::gen::inRange<uint32_t>(0, 1u << 23),
                     rc::gen::arbitrary<bool>()),
      [](const std::tuple<int, uint32_t, bool>& t) {
        const float m = 1.0f + std::get<1>(t) * 0x1p-23f;
        return (std::get<2>(t) ? -1.0f : 1.0f) * std::ldexp(m, std::get<0>(t));
      });
  return rc::gen::oneOf(any_float_bits(), rc::gen::elementOf(edge_floats()), moderate);
}

}  // namespace dsaf::properties
