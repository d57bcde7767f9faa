// File: fake_quant_codes_check.cc
// Host check of the identity store_fake_quantised_e2m1 (device/head/quantize.cuh) builds on,
// against the reference:
// for a Fp4Prestage::kFakeQuant recipe with a power-of-two second scale, a block's stored
// e2m1 codes are its first-stage codes shifted by j = log2(s1 / s2) (magnitude c >= 2 ->
// c + 2j, 1 -> 2j for j > 0, sign kept or dropped with a zero magnitude) whenever j >= 0
// and value(top) * 2^j <= 6, top the block's largest first-stage magnitude. Draws heads of
// many scales and shapes (zeros, signed zeros, outlier channels, e2m1-exact values, a zero
// block) under both zero-sign rules, both divisors and a second tie rule, and compares
// every block the identity covers with reference::store_head byte for byte; the others
// are counted. Exit 1 on a mismatch. Build from the repository root after a build in
// build/ (one line):
//   g++ -O2 -std=c++17 -I. bench/key_variants/fake_quant_codes_check.cc -Lbuild/reference -ldsaf_reference -o /tmp/fqc
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "reference/numeric/minifloat.h"
#include "reference/numeric/ue8m0.h"
#include "reference/presets.h"
#include "reference/quantize.h"

namespace {

using namespace dsaf::ref;

// 8 codes a word, value n in nibble n: each multiplied by 2^j (the identity above).
uint32_t codes_times_pow2(uint32_t codes, int j, Fp4ZeroSign zero_sign) {
  uint32_t shifted = 0;
  for (int n = 0; n < 8; ++n) {
    const uint32_t code = codes >> (4 * n) & 0xF, mag = code & 7;
    const uint32_t mag2 = mag >= 2 ? mag + 2 * j : mag == 1 && j > 0 ? 2 * j : mag;
    const bool negative = (code & 8) != 0 && (zero_sign == Fp4ZeroSign::kKeep || mag != 0);
    shifted |= (mag2 | (negative ? 8u : 0u)) << (4 * n);
  }
  return shifted;
}

}  // namespace

int main() {
  const QuantSpec v41 = RecipeFields(preset_fields::sglang_v41_fp4()).key_quant;
  long covered = 0, other = 0, bad_heads = 0, heads = 0;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (int variant = 0; variant < 4; ++variant) {
    QuantSpec spec = v41;
    if (variant & 1) spec.fp4_zero_sign = Fp4ZeroSign::kKeep;
    if (variant & 2) {
      spec.divisor = ScaleDivisor::kTimesReciprocal;
      spec.fp4_rounding = Rounding::kNearestTiesTowardZero;
      spec.amax_floor = 6.0f * 0x1p-120f;
    }
    for (int h = 0; h < 400000; ++h) {
      float x[128];
      const int kind = h % 8;
      const float scale = std::pow(10.0f, std::uniform_real_distribution<float>(-12, 6)(rng));
      for (int i = 0; i < 128; ++i) {
        float v = normal(rng) * scale;
        if (kind == 1 && i % 13 == 0) v *= 100;
        if (kind == 2 && rng() % 3 == 0) v = 0.0f;
        if (kind == 3) v = rng() % 2 ? -0.0f : 0.0f;
        if (kind == 4) {
          v = std::ldexp(static_cast<float>(static_cast<int>(rng() % 15) - 7), static_cast<int>(rng() % 20) - 10);
        }
        if (kind == 5 && i / 32 == 1) v = 0.0f;
        if (kind == 6) v = normal(rng) * std::pow(10.0f, static_cast<float>(static_cast<int>(rng() % 30) - 20));
        x[i] = v;
      }
      const StoredHead expected = store_head(x, spec);
      bool same = true;
      for (int b = 0; b < 4; ++b) {
        float amax = 0.0f;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
        const int first_byte = encode_ue8m0_ceil(std::fmax(amax, 6.0f * 0x1p-126f) * (1.0f / 6.0f));
        const float s1 = decode_ue8m0(static_cast<uint8_t>(first_byte));
        uint32_t words[4] = {};
        uint32_t top = 0;
        for (int k = 0; k < 4; ++k) {
          for (int n = 0; n < 8; ++n) {
            const uint8_t code = encode_e2m1(x[32 * b + 8 * k + n] * (1.0f / s1) + 0.0f, Rounding::kNearestEven);
            top = std::max<uint32_t>(top, code & 7);
            words[k] |= static_cast<uint32_t>(code) << (4 * n);
          }
        }
        const float top_value = decode_e2m1(static_cast<uint8_t>(top));
        const float floored = std::fmax(top_value * s1, spec.amax_floor);
        const int byte = encode_ue8m0_ceil(spec.divisor == ScaleDivisor::kDivide ? floored / 6.0f : floored * (1.0f / 6.0f));
        const int j = first_byte - byte;
        same = same && expected.scale_bytes[b] == byte;
        if (!(top_value == 0.0f || (j >= 0 && j <= 3 && top_value * std::ldexp(1.0f, j) <= 6.0f))) {
          ++other;
          continue;
        }
        ++covered;
        for (int k = 0; k < 4; ++k) {
          const uint32_t w = codes_times_pow2(words[k], top_value == 0.0f ? 0 : j, spec.fp4_zero_sign);
          for (int by = 0; by < 4; ++by) same = same && expected.value_bytes[16 * b + 4 * k + by] == static_cast<uint8_t>(w >> (8 * by));
        }
      }
      ++heads;
      if (!same && ++bad_heads <= 5) std::printf("mismatch: rule variant %d, head %d, kind %d\n", variant, h, kind);
    }
  }
  std::printf("%ld heads: %ld blocks covered by the identity, %ld not; %ld heads mismatching\n", heads, covered, other,
              bad_heads);
  return bad_heads == 0 ? 0 : 1;
}
