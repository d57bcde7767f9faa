// Tests of the per-head stages (Hadamard, RoPE, norms, 128-term reductions, rsqrt)
// against facts derived independently of the code under test: exact algebra
// (orthonormality, rotation norms), rounding-error bounds derived in the comments, and
// small independent re-implementations of the documented evaluation orders, compared
// bit for bit. Each order test also shows that a *different* order changes bits, so the
// documented order is pinned rather than incidental.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "reference/error.h"
#include "reference/numeric/bit_cast.h"
#include "reference/hadamard.h"
#include "reference/norm.h"
#include "reference/recipe.h"
#include "reference/reduction.h"
#include "reference/rope.h"
#include "reference/numeric/rsqrt.h"
#include "reference/numeric/rsqrt_table.h"

namespace dsaf::ref {
namespace {

constexpr int kN = 128;
// Unit roundoff (half an ulp of 1) of fp32 and fp64.
constexpr double kU32 = 0x1p-24;
constexpr double kU64 = 0x1p-53;

// Bit views of fp32 values (reference/numeric/bit_cast.h: memcpy, no punning).
uint32_t bits_of(float f) { return float_bits(f); }
float from_bits(uint32_t b) { return float_from_bits(b); }

using Head32 = std::array<float, kN>;
using Head64 = std::array<double, kN>;

Head32 random_head32(std::mt19937& rng, float stddev = 1.0f, float mean = 0.0f) {
  std::normal_distribution<float> dist(mean, stddev);
  Head32 x;
  for (float& v : x) v = dist(rng);
  return x;
}
Head64 random_head64(std::mt19937& rng) {
  std::normal_distribution<double> dist(0.0, 1.0);
  Head64 x;
  for (double& v : x) v = dist(rng);
  return x;
}

long double norm2(const double* x) {
  long double s = 0;
  for (int i = 0; i < kN; ++i) s += static_cast<long double>(x[i]) * x[i];
  return std::sqrt(s);
}

bool same_bits(const Head32& a, const Head32& b) {
  for (int i = 0; i < kN; ++i) {
    if (bits_of(a[i]) != bits_of(b[i])) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------
// Hadamard-128 (docs/numerics.md §2.5, §6.4).

// fl32(1/sqrt(128)) as the header documents it.
constexpr uint32_t kHadamardScaleBits = 0x3db504f3u;

// H_128 by the Sylvester recursion H_2n = [[H, H], [H, -H]], independent of
// hadamard_entry's popcount formula.
std::vector<std::vector<int>> sylvester_128() {
  std::vector<std::vector<int>> h(kN, std::vector<int>(kN, 0));
  h[0][0] = 1;
  for (int n = 1; n < kN; n *= 2) {
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        h[i][j + n] = h[i][j];
        h[i + n][j] = h[i][j];
        h[i + n][j + n] = -h[i][j];
      }
    }
  }
  return h;
}

// The documented fp32 butterfly, written as explicit blocks of 2h: strides
// h = 1, 2, ..., 64 (ascending) or 64, ..., 1 (descending); (a, b) -> (a + b, a - b);
// then * 0x3db504f3.
void butterfly32(float* x, bool ascending) {
  for (int step = 0; step < 7; ++step) {
    const int h = ascending ? (1 << step) : (64 >> step);
    for (int base = 0; base < kN; base += 2 * h) {
      for (int k = 0; k < h; ++k) {
        const float a = x[base + k];
        const float b = x[base + k + h];
        x[base + k] = a + b;
        x[base + k + h] = a - b;
      }
    }
  }
  const float scale = from_bits(kHadamardScaleBits);
  for (int i = 0; i < kN; ++i) x[i] = x[i] * scale;
}

TEST(HadamardStage, ScaleConstantIsTheNearestFp32To2ToMinus3Point5) {
  // Independent check of the header's constant: among the three fp32 values around
  // 1/sqrt(128), 0x3db504f3 is the nearest.
  const long double exact = 1.0L / std::sqrt(128.0L);
  const long double d2 = std::fabs(from_bits(kHadamardScaleBits - 1) - exact);
  const long double d3 = std::fabs(from_bits(kHadamardScaleBits) - exact);
  const long double d4 = std::fabs(from_bits(kHadamardScaleBits + 1) - exact);
  EXPECT_LT(d3, d2);
  EXPECT_LT(d3, d4);
  // The fp64 constant the oracle uses (see the one-hot test) is likewise the nearest
  // double; long double's 64-bit 1/sqrt(128) (error ~5e-21) separates the 6.0e-18 and
  // 7.8e-18 distances of the two candidates.
  const double s64 = 0x1.6a09e667f3bcdp-4;
  EXPECT_LT(std::fabs(s64 - exact), std::fabs(std::nextafter(s64, 0.0) - exact));
  EXPECT_LT(std::fabs(s64 - exact), std::fabs(std::nextafter(s64, 1.0) - exact));
}

TEST(HadamardStage, EntriesAreTheSylvesterMatrix) {
  const auto h = sylvester_128();
  for (int i = 0; i < kN; ++i) {
    for (int j = 0; j < kN; ++j) ASSERT_EQ(hadamard_entry(i, j), h[i][j]) << i << "," << j;
  }
}

TEST(HadamardStage, OneHotGivesColumnOfScaledSylvesterMatrix) {
  // On e_j every butterfly value is exactly +-1 (sums of one nonzero), so the output
  // is exactly H[i][j] times the scale: in fp64 the correctly rounded 128^-1/2
  // (0x1.6a09e667f3bcdp-4: 6.0e-18 from the real value, against 7.8e-18 for the
  // 0x...bcc that 1.0 / std::sqrt(128.0) gives), in fp32 exactly +-0x3db504f3.
  const auto h = sylvester_128();
  const double scale64 = 0x1.6a09e667f3bcdp-4;
  for (int j = 0; j < kN; ++j) {
    Head64 x64{};
    x64[j] = 1.0;
    apply_hadamard<double>(x64.data());
    Head32 x32{};
    x32[j] = 1.0f;
    apply_hadamard<float>(x32.data());
    for (int i = 0; i < kN; ++i) {
      ASSERT_EQ(x64[i], h[i][j] * scale64) << i << "," << j;
      ASSERT_EQ(x64[i], hadamard_entry(i, j) * scale64) << i << "," << j;
      const uint32_t expected = kHadamardScaleBits | (h[i][j] < 0 ? 0x8000'0000u : 0u);
      ASSERT_EQ(bits_of(x32[i]), expected) << i << "," << j;
    }
  }
}

TEST(HadamardStage, IsAnInvolutionUpToScale) {
  // H/sqrt(128) is symmetric and orthonormal, so applying it twice is the identity.
  // Error bound in fp64 (u = 2^-53): stage k of the butterfly rounds each output once
  // (relative u); its error vector has norm <= u * 2^(k/2) * |x| and the remaining
  // stages and the scale multiply it by 2^((7-k)/2) * 2^-3.5, so each of the 7 stages
  // adds <= u|x| to the final error; the scale multiply and the scale constant add
  // u|x| each: <= 9u|x| per application, 18u|x| (+O(u^2)) for two. We allow 20u|x|.
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 200; ++trial) {
    Head64 x = random_head64(rng);
    Head64 y = x;
    apply_hadamard<double>(y.data());
    apply_hadamard<double>(y.data());
    Head64 diff;
    for (int i = 0; i < kN; ++i) diff[i] = y[i] - x[i];  // exact enough: |diff| << |x|
    EXPECT_LE(norm2(diff.data()), 20 * kU64 * norm2(x.data())) << trial;
  }
}

TEST(HadamardStage, PreservesEuclideanNorm) {
  // One application: | |y| - |x| | <= |y - Hx/sqrt(128)| <= 9u|x| (see above); norms
  // taken in long double (64-bit significand) add < 2^-60 relative.
  std::mt19937 rng(777);
  for (int trial = 0; trial < 200; ++trial) {
    Head64 x = random_head64(rng);
    Head64 y = x;
    apply_hadamard<double>(y.data());
    const long double nx = norm2(x.data());
    EXPECT_LE(std::fabs(norm2(y.data()) - nx), 10 * kU64 * nx) << trial;
  }
}

TEST(HadamardStage, Fp32ButterflyIsAscendingStrideOrder) {
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 1000; ++trial) {
    const Head32 x = random_head32(rng);
    Head32 got = x;
    apply_hadamard<float>(got.data());
    Head32 expected = x;
    butterfly32(expected.data(), /*ascending=*/true);
    ASSERT_TRUE(same_bits(got, expected)) << "trial " << trial;
  }
}

TEST(HadamardStage, StrideOrderChangesFp32Bits) {
  // The same matrix evaluated with descending strides rounds differently, so the
  // order is part of the contract and the ascending-order test above pins it.
  std::mt19937 rng(99);
  int differing_heads = 0;
  for (int trial = 0; trial < 100; ++trial) {
    const Head32 x = random_head32(rng);
    Head32 asc = x;
    Head32 desc = x;
    butterfly32(asc.data(), true);
    butterfly32(desc.data(), false);
    Head32 got = x;
    apply_hadamard<float>(got.data());
    if (!same_bits(asc, desc)) {
      ++differing_heads;
      EXPECT_FALSE(same_bits(got, desc)) << trial;
    }
  }
  EXPECT_GT(differing_heads, 0);
}

// ---------------------------------------------------------------------------------
// RoPE (docs/numerics.md §2.4, §3.2; rope.h).

const RopeTableSpec kV32Table{10000.0, 40.0, 4096.0, 32.0, 1.0};
const RopeTableSpec kV4Table{160000.0, 16.0, 65536.0, 32.0, 1.0};

// YaRN find_correction_dim, written from docs/numerics.md §2.4 in long double.
long double correction_dim(long double rotations, const RopeTableSpec& s) {
  const long double pi = 3.141592653589793238462643383279503L;
  return 64.0L * std::log(static_cast<long double>(s.original_seq_len) / (rotations * 2 * pi)) /
         (2.0L * std::log(static_cast<long double>(s.theta)));
}

// Unscaled frequency theta^(-2i/64) in long double.
long double base_frequency(int i, const RopeTableSpec& s) {
  return std::exp(-(2.0L * i / 64.0L) * std::log(static_cast<long double>(s.theta)));
}

// For rotary dim `local` (0..63): pair index and partner under the pairing.
struct PairRole {
  int pair;
  bool first;
  int partner;
};
PairRole role_of(int local, RopePairing pairing) {
  if (pairing == RopePairing::kNeox) {
    return local < 32 ? PairRole{local, true, local + 32} : PairRole{local - 32, false, local - 32};
  }
  return local % 2 == 0 ? PairRole{local / 2, true, local + 1}
                        : PairRole{local / 2, false, local - 1};
}

void check_yarn(const RopeTableSpec& spec, int low, int high) {
  // The ramp ends derived from the spec, before checking that the code uses them.
  ASSERT_EQ(std::floor(correction_dim(spec.beta_fast, spec)), low);
  ASSERT_EQ(std::ceil(correction_dim(spec.beta_slow, spec)), high);
  const std::vector<double> f = rope_frequencies(spec);
  ASSERT_EQ(f.size(), 32u);
  const long double factor = spec.yarn_factor;
  for (int i = 0; i < 32; ++i) {
    const long double base = base_frequency(i, spec);
    long double expected;
    if (i <= low) {
      expected = base;  // high-frequency dims untouched
    } else if (i >= high) {
      expected = base / factor;  // low-frequency dims fully interpolated
    } else {
      const long double ramp = static_cast<long double>(i - low) / (high - low);
      expected = base / factor * ramp + base * (1 - ramp);
      EXPECT_LT(f[i], base * (1 - 1e-9L)) << i;
      EXPECT_GT(f[i], base / factor * (1 + 1e-9L)) << i;
    }
    // pow, one division and the ramp blend: a few fp64 roundings.
    EXPECT_LE(std::fabs(f[i] - expected), 8 * kU64 * expected) << "i = " << i;
  }
}

TEST(RopeFrequencies, V32YarnLeavesLowDimsAndDividesHighDimsBy40) {
  // docs/numerics.md §2.4: low = 10, high = 23; i <= 10 unchanged, i >= 23 divided by 40.
  check_yarn(kV32Table, 10, 23);
}

TEST(RopeFrequencies, V4CompressedYarnRampsFrom15To25) {
  // docs/numerics.md §3.2: theta 160000, factor 16, original 65536 -> low = 15, high = 25.
  check_yarn(kV4Table, 15, 25);
}

TEST(RopeFrequencies, NoYarnIsThePlainGeometricSeries) {
  RopeTableSpec spec = kV32Table;
  spec.yarn_factor = 1.0;
  const std::vector<double> f = rope_frequencies(spec);
  for (int i = 0; i < 32; ++i) {
    const long double base = base_frequency(i, spec);
    EXPECT_LE(std::fabs(f[i] - base), 4 * kU64 * base) << i;
  }
}

TEST(RopeStage, TableIsCosSinOfPositionTimesFrequencyRoundedToFp32) {
  // Each entry is fp32(cos(p * f_i)) of the fp64 value: within half an fp32 ulp (the
  // ulp above the stored magnitude bounds both sides) plus the fp64 angle error.
  const int positions = 4096;
  const RopeTable table(kV32Table, positions);
  const std::vector<double> f = rope_frequencies(kV32Table);
  for (int p = 0; p < positions; p += 37) {
    for (int i = 0; i < 32; ++i) {
      const long double angle = static_cast<long double>(p) * f[i];
      const float c = table.cos(p)[i];
      const float s = table.sin(p)[i];
      const auto half_ulp = [](float v) {
        const float a = std::fabs(v);
        return 0.5L * (std::nextafter(a, INFINITY) - a);
      };
      EXPECT_LE(std::fabs(c - std::cos(angle)), half_ulp(c) + 1e-12L) << p << "," << i;
      EXPECT_LE(std::fabs(s - std::sin(angle)), half_ulp(s) + 1e-12L) << p << "," << i;
    }
  }
  EXPECT_THROW(table.cos(positions), Error);
  EXPECT_THROW(table.sin(-1), Error);
}

TEST(RopeStage, TableOfGivenPositionsHoldsTheDenseRowsBitForBitAndNoOthers) {
  // The rows of the positions given (repeats, any order), each the dense table's bits; a
  // position near 2^31 needs no dense table of 512 GiB; others are refused, not read.
  const RopeTable dense(kV32Table, 4096);
  const std::vector<int32_t> positions = {4095, 0, 17, 17, 2048, 1};
  const RopeTable sparse(kV32Table, positions);
  for (const int32_t p : positions) {
    ASSERT_TRUE(sparse.holds(p));
    EXPECT_EQ(std::memcmp(sparse.cos(p), dense.cos(p), 32 * sizeof(float)), 0) << p;
    EXPECT_EQ(std::memcmp(sparse.sin(p), dense.sin(p), 32 * sizeof(float)), 0) << p;
  }
  for (const int p : {2, 16, 18, 4094, -1}) {
    EXPECT_FALSE(sparse.holds(p)) << p;
    EXPECT_THROW(sparse.cos(p), Error) << p;
  }
  const int32_t far = std::numeric_limits<int32_t>::max();
  const RopeTable far_table(kV32Table, std::vector<int32_t>{far});
  const std::vector<double> f = rope_frequencies(kV32Table);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(far_table.cos(far)[i], static_cast<float>(std::cos(far * f[i]))) << i;
  }
  EXPECT_THROW(RopeTable(kV32Table, std::vector<int32_t>{3, -2}), Error);
  EXPECT_FALSE(RopeTable(kV32Table, std::vector<int32_t>{}).holds(0));
}

TEST(RopeStage, RotationKeepsPairNormUpToTableRounding) {
  // (a', b') = (ac - bs, as + bc) gives a'^2 + b'^2 = (a^2 + b^2)(c^2 + s^2) exactly.
  // c, s are fp32 roundings of cos, sin: c = C(1 + dc), s = S(1 + ds), |dc|, |ds| <=
  // 2^-24, so c^2 + s^2 = 1 + 2(C^2 dc + S^2 ds) + O(2^-48): |c^2 + s^2 - 1| <= 2^-23
  // (+2^-46 for second order and the fp64 cos/sin), and the pair norm ratio is within
  // 2^-24 (+2^-40 slack) of 1.
  // Tighter, formula-pinning check: in fp64, |a'| error <= 2u(|ac| + |bs|) (two
  // roundings), and |ac| + |bs| <= R = |(a,b)| |(c,s)|, so
  // |a'^2 + b'^2 - R^2| <= 2|A|*2uR + 2|B|*2uR <= 8uR^2 (+O(u^2)). A sign slip (ac + bs)
  // would add 4abcs, far outside that.
  const RopeTable table(kV32Table, 4096);
  std::mt19937 rng(5);
  for (RopePairing pairing : {RopePairing::kNeox, RopePairing::kInterleaved}) {
    for (RopePlacement placement : {RopePlacement::kLeading, RopePlacement::kTrailing}) {
      RopeSpec spec;
      spec.pairing = pairing;
      spec.placement = placement;
      spec.table = kV32Table;
      const int offset = placement == RopePlacement::kLeading ? 0 : 64;
      for (int p = 0; p < 4096; p += 61) {
        const Head64 x = random_head64(rng);
        Head64 y = x;
        apply_rope<double>(y.data(), spec, table, p);
        for (int local = 0; local < 64; ++local) {
          const PairRole r = role_of(local, pairing);
          if (!r.first) continue;
          const long double c = table.cos(p)[r.pair];
          const long double s = table.sin(p)[r.pair];
          const long double cs = c * c + s * s;
          ASSERT_LE(std::fabs(cs - 1), 0x1p-23L + 0x1p-46L);
          const long double a = x[offset + local], b = x[offset + r.partner];
          const long double a2 = y[offset + local], b2 = y[offset + r.partner];
          const long double in2 = a * a + b * b;
          const long double out2 = a2 * a2 + b2 * b2;
          EXPECT_LE(std::fabs(std::sqrt(out2 / in2) - 1), 0x1p-24L + 0x1p-40L);
          EXPECT_LE(std::fabs(out2 - in2 * cs), 8 * kU64 * in2 * cs * (1 + 1e-6L))
              << "p = " << p << " pair " << r.pair;
        }
      }
    }
  }
}

TEST(RopeStage, PairsTouchExactlyTheDocumentedDims) {
  // One-hot inputs at position 1 (every angle in (0, 1], so c, s != 0): e_d must map to
  // c_i e_d + s_i e_partner when d is the first of its pair (a = 1, b = 0) and to
  // -s_i e_partner + c_i e_d when it is the second (a = 0, b = 1), with i the pair's
  // frequency index; every dim outside the 64 rotary dims passes through unchanged.
  for (const RopeTableSpec& tspec : {kV32Table, kV4Table}) {
    const RopeTable table(tspec, 2);
    const float* c = table.cos(1);
    const float* s = table.sin(1);
    for (RopePairing pairing : {RopePairing::kNeox, RopePairing::kInterleaved}) {
      for (RopePlacement placement : {RopePlacement::kLeading, RopePlacement::kTrailing}) {
        RopeSpec spec;
        spec.pairing = pairing;
        spec.placement = placement;
        spec.table = tspec;
        const int offset = placement == RopePlacement::kLeading ? 0 : 64;
        for (int d = 0; d < kN; ++d) {
          Head64 x{};
          x[d] = 1.0;
          apply_rope<double>(x.data(), spec, table, 1);
          Head64 expected{};
          if (d < offset || d >= offset + 64) {
            expected[d] = 1.0;
          } else {
            const PairRole r = role_of(d - offset, pairing);
            const int partner = offset + r.partner;
            if (r.first) {
              expected[d] = c[r.pair];
              expected[partner] = s[r.pair];
            } else {
              expected[partner] = -static_cast<double>(s[r.pair]);
              expected[d] = c[r.pair];
            }
          }
          for (int i = 0; i < kN; ++i) {
            ASSERT_EQ(x[i], expected[i]) << "pairing " << static_cast<int>(pairing)
                                         << " placement " << static_cast<int>(placement)
                                         << " d = " << d << " out " << i;
          }
        }
      }
    }
  }
}

TEST(RopeStage, PositionZeroIsTheIdentity) {
  // cos 0 = 1 and sin 0 = 0 exactly, and a*1 -/+ b*0 = a in every contraction mode.
  const RopeTable table(kV32Table, 1);
  ASSERT_EQ(table.cos(0)[31], 1.0f);
  ASSERT_EQ(table.sin(0)[31], 0.0f);
  std::mt19937 rng(8);
  for (RopePairing pairing : {RopePairing::kNeox, RopePairing::kInterleaved}) {
    for (RopePlacement placement : {RopePlacement::kLeading, RopePlacement::kTrailing}) {
      for (ContractedProduct fma : {ContractedProduct::kNone, ContractedProduct::kFirst, ContractedProduct::kSecond,
                                    ContractedProduct::kCos}) {
        RopeSpec spec;
        spec.pairing = pairing;
        spec.placement = placement;
        spec.fma = fma;
        const Head32 x32 = random_head32(rng);
        Head32 y32 = x32;
        apply_rope<float>(y32.data(), spec, table, 0);
        const Head64 x64 = random_head64(rng);
        Head64 y64 = x64;
        apply_rope<double>(y64.data(), spec, table, 0);
        for (int i = 0; i < kN; ++i) {
          ASSERT_EQ(y32[i], x32[i]) << i;
          ASSERT_EQ(y64[i], x64[i]) << i;
        }
      }
    }
  }
}

// The two outputs of one pair under each contraction (recipe.h ContractedProduct):
//   first  = a*c - b*s: kNone fl(fl(ac) - fl(bs)), kFirst fma(a, c, -fl(bs)),
//            kSecond fma(-b, s, fl(ac));
//   second = a*s + b*c: kNone fl(fl(as) + fl(bc)), kFirst fma(a, s, fl(bc)),
//            kSecond fma(b, c, fl(as));
//   kCos fuses the product with cos in both: fma(a, c, -fl(bs)) and fma(b, c, fl(as)).
std::pair<float, float> rotate_pair(float a, float b, float c, float s, ContractedProduct k) {
  switch (k) {
    case ContractedProduct::kFirst:
      return {std::fma(a, c, -(b * s)), std::fma(a, s, b * c)};
    case ContractedProduct::kSecond:
      return {std::fma(-b, s, a * c), std::fma(b, c, a * s)};
    case ContractedProduct::kCos:
      return {std::fma(a, c, -(b * s)), std::fma(b, c, a * s)};
    case ContractedProduct::kNone:
      break;
  }
  return {a * c - b * s, a * s + b * c};
}

TEST(RopeStage, ContractedProductFusesTheNamedProduct) {
  const RopeTable table(kV32Table, 4096);
  std::mt19937 rng(31337);
  std::uniform_int_distribution<int> pos(1, 4095);
  int first_vs_none = 0, second_vs_none = 0, first_vs_second = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const Head32 x = random_head32(rng);
    const int p = pos(rng);
    Head32 out[4];
    const ContractedProduct kinds[4] = {ContractedProduct::kNone, ContractedProduct::kFirst,
                                        ContractedProduct::kSecond, ContractedProduct::kCos};
    for (int k = 0; k < 4; ++k) {
      RopeSpec spec;
      spec.pairing = RopePairing::kInterleaved;
      spec.placement = RopePlacement::kTrailing;
      spec.fma = kinds[k];
      out[k] = x;
      apply_rope<float>(out[k].data(), spec, table, p);
      for (int i = 0; i < 32; ++i) {
        const int d0 = 64 + 2 * i, d1 = d0 + 1;
        const auto [e0, e1] =
            rotate_pair(x[d0], x[d1], table.cos(p)[i], table.sin(p)[i], kinds[k]);
        ASSERT_EQ(bits_of(out[k][d0]), bits_of(e0)) << "kind " << k << " pair " << i;
        ASSERT_EQ(bits_of(out[k][d1]), bits_of(e1)) << "kind " << k << " pair " << i;
      }
    }
    first_vs_none += !same_bits(out[1], out[0]);
    second_vs_none += !same_bits(out[2], out[0]);
    first_vs_second += !same_bits(out[1], out[2]);
  }
  // The three modes are observably different, so a recipe's choice matters.
  EXPECT_GT(first_vs_none, 0);
  EXPECT_GT(second_vs_none, 0);
  EXPECT_GT(first_vs_second, 0);
}

// ---------------------------------------------------------------------------------
// Norms (norm.h) and the 128-term reduction order (reduction.h).

// Independent fp32 sums in the documented orders. Warp tree: lanes fold 4 contiguous
// terms from 0; the xor butterfly leaves lanes l and l ^ m equal after each step, so
// lane 0's value is the pairwise tree p[l] += p[l + m] for l < m, m = 16, 8, 4, 2, 1.
template <class Term>
float my_sum(bool tree, Term term) {
  if (!tree) {
    float acc = 0.0f;
    for (int i = 0; i < kN; ++i) acc = term(acc, i);
    return acc;
  }
  float p[32];
  for (int l = 0; l < 32; ++l) {
    float acc = 0.0f;
    for (int j = 0; j < 4; ++j) acc = term(acc, 4 * l + j);
    p[l] = acc;
  }
  for (int m = 16; m >= 1; m /= 2) {
    for (int l = 0; l < m; ++l) p[l] = p[l] + p[l + m];
  }
  return p[0];
}

float my_sum_of_squares(const float* d, bool tree, bool fma) {
  return my_sum(tree, [&](float acc, int i) {
    return fma ? std::fma(d[i], d[i], acc) : acc + d[i] * d[i];
  });
}

// RMSNorm / LayerNorm in fp32 exactly as norm.h states them.
Head32 my_norm(const Head32& x, NormKind kind, float eps, bool tree, bool fma,
               const float* w, const float* b) {
  Head32 y;
  if (kind == NormKind::kRmsNorm) {
    const float ss = my_sum_of_squares(x.data(), tree, fma);
    const float inv = rsqrt_correctly_rounded(ss / 128.0f + eps);
    for (int i = 0; i < kN; ++i) y[i] = (x[i] * inv) * w[i];
    return y;
  }
  const float mean = my_sum(tree, [&](float acc, int i) { return acc + x[i]; }) / 128.0f;
  Head32 d;
  for (int i = 0; i < kN; ++i) d[i] = x[i] - mean;
  const float ss = my_sum_of_squares(d.data(), tree, fma);
  const float inv = rsqrt_correctly_rounded(ss / 128.0f + eps);
  for (int i = 0; i < kN; ++i) {
    const float n = d[i] * inv;
    y[i] = fma ? std::fma(n, w[i], b[i]) : n * w[i] + b[i];
  }
  return y;
}

NormSpec norm_spec(NormKind kind, bool tree, bool fma) {
  NormSpec spec;
  spec.kind = kind;
  spec.eps = 1e-6f;
  spec.order = tree ? ReductionOrder::kWarpTree : ReductionOrder::kSequential;
  spec.fma_contraction = fma;
  return spec;
}

struct NormParams {
  std::array<float, kN> w;
  std::array<float, kN> b;
};
NormParams random_params(std::mt19937& rng) {
  std::uniform_real_distribution<float> wd(0.5f, 1.5f), bd(-0.5f, 0.5f);
  NormParams p;
  for (int i = 0; i < kN; ++i) {
    p.w[i] = wd(rng);
    p.b[i] = bd(rng);
  }
  return p;
}

TEST(NormStage, Fp32MatchesIndependentOrderModelBitForBit) {
  std::mt19937 rng(4242);
  for (NormKind kind : {NormKind::kRmsNorm, NormKind::kLayerNorm}) {
    for (bool tree : {false, true}) {
      for (bool fma : {false, true}) {
        for (int trial = 0; trial < 200; ++trial) {
          const Head32 x = random_head32(rng, 2.0f, 0.25f);
          const NormParams p = random_params(rng);
          Head32 got = x;
          apply_norm<float>(got.data(), norm_spec(kind, tree, fma), p.w.data(), p.b.data());
          const Head32 expected = my_norm(x, kind, 1e-6f, tree, fma, p.w.data(), p.b.data());
          ASSERT_TRUE(same_bits(got, expected))
              << "kind " << static_cast<int>(kind) << " tree " << tree << " fma " << fma
              << " trial " << trial;
        }
      }
    }
  }
}

TEST(NormStage, OrderAndContractionEachChangeBits) {
  // Warp tree vs sequential, and fma vs separate rounding, each change some output:
  // both choices are part of the recipe, not noise.
  std::mt19937 rng(17);
  for (NormKind kind : {NormKind::kRmsNorm, NormKind::kLayerNorm}) {
    int order_differs = 0, fma_differs = 0;
    for (int trial = 0; trial < 300; ++trial) {
      const Head32 x = random_head32(rng, 3.0f, 0.5f);
      const NormParams p = random_params(rng);
      Head32 seq = x, tree = x, fused = x;
      apply_norm<float>(seq.data(), norm_spec(kind, false, false), p.w.data(), p.b.data());
      apply_norm<float>(tree.data(), norm_spec(kind, true, false), p.w.data(), p.b.data());
      apply_norm<float>(fused.data(), norm_spec(kind, false, true), p.w.data(), p.b.data());
      order_differs += !same_bits(seq, tree);
      fma_differs += !same_bits(seq, fused);
    }
    EXPECT_GT(order_differs, 0) << "kind " << static_cast<int>(kind);
    EXPECT_GT(fma_differs, 0) << "kind " << static_cast<int>(kind);
  }
}

TEST(NormStage, RmsNormWithinDerivedFp32BoundOfExact) {
  // u = 2^-24. The sum of 128 squares has relative error <= D*u, D = 128 sequential
  // (127 adds after the exact first fold, plus each product's rounding) or 9 for the
  // warp tree (3 in-lane adds + 5 butterfly adds + product); `/128` is exact; `+ eps`
  // adds u; the correctly rounded rsqrt halves the input error and adds u; the two
  // multiplies add u each: |y^ - y| <= ((D + 1)/2 + 3) u |y| to first order. Weights
  // are fp32 values, so exact.
  std::mt19937 rng(1);
  for (bool tree : {false, true}) {
    for (bool fma : {false, true}) {
      const double depth = tree ? 9 : 128;
      const double rel = ((depth + 1) / 2 + 3) * kU32 * 1.01;
      for (int trial = 0; trial < 200; ++trial) {
        const Head32 x = random_head32(rng, std::exp2(static_cast<float>(trial % 20 - 10)));
        const NormParams p = random_params(rng);
        Head32 y = x;
        apply_norm<float>(y.data(), norm_spec(NormKind::kRmsNorm, tree, fma), p.w.data(),
                          nullptr);
        long double ss = 0;
        for (float v : x) ss += static_cast<long double>(v) * v;
        const long double inv = 1 / std::sqrt(ss / 128 + static_cast<long double>(1e-6f));
        for (int i = 0; i < kN; ++i) {
          const long double exact = x[i] * inv * p.w[i];
          ASSERT_LE(std::fabs(y[i] - exact), rel * std::fabs(exact))
              << "tree " << tree << " fma " << fma << " trial " << trial << " i " << i;
        }
      }
    }
  }
}

TEST(NormStage, LayerNormWithinDerivedFp32BoundOfExact) {
  // Per element, first order in u = 2^-24 (D = adds on the longest path: 127
  // sequential, 8 warp tree), with A = sum|x|, d_i = x_i - mean, r = exact inv_std:
  //  mean:  |m^ - m| <= D u A / 128 =: dm                (the /128 is exact)
  //  d^_i:  |d^_i - d_i| <= dm + u(|d_i| + dm) =: e_i
  //  var:   sum d^_i^2 differs from V = sum d_i^2 by <= sum(2|d_i| e_i + e_i^2); its
  //         evaluation adds (D + 1) u sum d^^2, `/128` is exact, `+ eps` adds u v^.
  //         rho_v = |v^ - v| / v.
  //  rsqrt: rho_r = rho_v / 2 (1 + rho_v) + u.
  //  y:     |y^_i - y_i| <= |w_i| (e_i r (1 + rho_r) + |d_i| r rho_r + 2u |d^_i r^|)
  //                        + u |y_i|          (+ the same slack 1.01 for second order)
  std::mt19937 rng(2);
  for (bool tree : {false, true}) {
    for (bool fma : {false, true}) {
      const long double depth = tree ? 8 : 127;
      const long double u = kU32;
      for (int trial = 0; trial < 200; ++trial) {
        const Head32 x = random_head32(rng, 1.5f, trial % 2 ? 0.5f : -2.0f);
        const NormParams p = random_params(rng);
        Head32 y = x;
        apply_norm<float>(y.data(), norm_spec(NormKind::kLayerNorm, tree, fma), p.w.data(),
                          p.b.data());
        long double sum = 0, abs_sum = 0;
        for (float v : x) {
          sum += v;
          abs_sum += std::fabs(v);
        }
        const long double mean = sum / 128;
        long double var_sum = 0;
        for (float v : x) var_sum += (v - mean) * (v - mean);
        const long double eps = static_cast<long double>(1e-6f);
        const long double v = var_sum / 128 + eps;
        const long double r = 1 / std::sqrt(v);
        const long double dm = depth * u * abs_sum / 128;
        long double var_err = 0, sum_dhat2 = 0;
        std::array<long double, kN> e{};
        for (int i = 0; i < kN; ++i) {
          const long double d = x[i] - mean;
          e[i] = dm + u * (std::fabs(d) + dm);
          var_err += 2 * std::fabs(d) * e[i] + e[i] * e[i];
          sum_dhat2 += (std::fabs(d) + e[i]) * (std::fabs(d) + e[i]);
        }
        const long double v_err =
            (var_err + (depth + 1) * u * sum_dhat2) / 128 + u * (v + var_err / 128);
        const long double rho_v = v_err / v;
        const long double rho_r = rho_v / 2 * (1 + rho_v) + u;
        for (int i = 0; i < kN; ++i) {
          const long double d = x[i] - mean;
          const long double exact = d * r * p.w[i] + p.b[i];
          const long double bound =
              1.01L * (p.w[i] * (e[i] * r * (1 + rho_r) + std::fabs(d) * r * rho_r +
                                 2 * u * (std::fabs(d) + e[i]) * r * (1 + rho_r)) +
                       u * std::fabs(exact));
          ASSERT_LE(std::fabs(y[i] - exact), bound)
              << "tree " << tree << " fma " << fma << " trial " << trial << " i " << i;
        }
      }
    }
  }
}

TEST(NormStage, Sm90RsqrtChangesNormBitsOnSomeInputs) {
  // With the measured rsqrtf model, RMSNorm differs from the correctly rounded one on
  // some inputs (21.7% of rsqrt arguments differ; docs/numerics.md §6.4), and never by more
  // than the product of a 2-ulp rsqrt error through two fp32 multiplies.
  std::mt19937 rng(41);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::array<float, kN> w{};
  w.fill(1.0f);
  NormSpec cr = norm_spec(NormKind::kRmsNorm, false, false);
  NormSpec approx = cr;
  approx.rsqrt = RsqrtKind::kSm90Approx;
  int differing_heads = 0;
  for (int trial = 0; trial < 200; ++trial) {
    Head32 a{}, b{};
    for (int i = 0; i < kN; ++i) a[i] = b[i] = normal(rng);
    apply_norm<float>(a.data(), cr, w.data(), nullptr);
    apply_norm<float>(b.data(), approx, w.data(), nullptr);
    differing_heads += a != b;
    for (int i = 0; i < kN; ++i) ASSERT_LE(std::fabs(a[i] - b[i]), 4 * 0x1p-23f * std::fabs(a[i]));
  }
  EXPECT_GT(differing_heads, 0);
}

// Expression trees: T = std::string records how reduce_128 associates its terms.
std::string leaf_lane(int l) {
  // fold from the identity "": x_{4l}, then left to right.
  std::string s = "x" + std::to_string(4 * l);
  for (int j = 1; j < 4; ++j) s = "(" + s + "+x" + std::to_string(4 * l + j) + ")";
  return s;
}
int bit_reverse5(int v) {
  int r = 0;
  for (int b = 0; b < 5; ++b) r |= ((v >> b) & 1) << (4 - b);
  return r;
}
// Balanced tree over lanes [lo, hi) of a sequence.
std::string balanced(const std::vector<std::string>& leaves, int lo, int hi) {
  if (hi - lo == 1) return leaves[lo];
  const int mid = (lo + hi) / 2;
  return "(" + balanced(leaves, lo, mid) + "+" + balanced(leaves, mid, hi) + ")";
}

std::string reduce_expression(ReductionOrder order) {
  return reduce_128<std::string>(
      order, std::string(),
      [](const std::string& acc, int i) {
        return acc.empty() ? "x" + std::to_string(i) : "(" + acc + "+x" + std::to_string(i) + ")";
      },
      [](const std::string& a, const std::string& b) { return "(" + a + "+" + b + ")"; });
}

TEST(Reduce128, SequentialIsLeftToRight) {
  std::string expected = "x0";
  for (int i = 1; i < kN; ++i) expected = "(" + expected + "+x" + std::to_string(i) + ")";
  EXPECT_EQ(reduce_expression(ReductionOrder::kSequential), expected);
}

TEST(Reduce128, WarpTreeIsLaneFoldsThenBitReversedPairwiseTree) {
  // Lane 0 of the xor butterfly m = 16, 8, 4, 2, 1 first combines (own, lane ^ 16),
  // then that with the partial of lane 8, and so on: a balanced binary tree whose
  // leaves, left to right, are the lanes in 5-bit-reversed order 0, 16, 8, 24, 4, ...
  std::vector<std::string> leaves;
  for (int k = 0; k < 32; ++k) leaves.push_back(leaf_lane(bit_reverse5(k)));
  EXPECT_EQ(reduce_expression(ReductionOrder::kWarpTree), balanced(leaves, 0, 32));
}

TEST(Reduce128, WarpTreeHalvesFoldsOnePairOfEachHalfOddFirstThenTheButterfly) {
  // Lane l holds x_{2l}, x_{2l+1} (head half) and x_{64+2l}, x_{65+2l} (tail half) and
  // folds x_{2l+1} first (SGLang's V4.1 SASS: FMUL of the odd square, FFMA of the rest);
  // the butterfly is kWarpTree's (leaves in 5-bit-reversed lane order).
  std::vector<std::string> leaves;
  for (int k = 0; k < 32; ++k) {
    const int l = bit_reverse5(k);
    leaves.push_back("(((x" + std::to_string(2 * l + 1) + "+x" + std::to_string(2 * l) + ")+x" +
                     std::to_string(64 + 2 * l) + ")+x" + std::to_string(65 + 2 * l) + ")");
  }
  EXPECT_EQ(reduce_expression(ReductionOrder::kWarpTreeHalves), balanced(leaves, 0, 32));
}

TEST(Reduce128, BlockTreeIsFourWarpButterfliesPairedAcross) {
  // Group g's lane 0 folds x_{32g} onto x_{32g+16}, then adds the partials of lanes 8, 4,
  // 2, 1 (each of which did the same with its own +16 term): in group-local indices the
  // tree ((((e0 e8) (e4 e12)) ((e2 e10) (e6 e14))) ...), e = (x_{e+16} + x_e); the groups
  // pair as (g0 + g2) + (g1 + g3).
  const auto group = [](int g) {
    std::vector<std::string> leaves;
    for (int k = 0; k < 16; ++k) {
      const int e = ((k & 1) << 3) | ((k & 2) << 1) | ((k & 4) >> 1) | ((k & 8) >> 3);  // 4-bit reverse
      leaves.push_back("(x" + std::to_string(32 * g + e + 16) + "+x" + std::to_string(32 * g + e) + ")");
    }
    return balanced(leaves, 0, 16);
  };
  EXPECT_EQ(reduce_expression(ReductionOrder::kBlockTree),
            "((" + group(0) + "+" + group(2) + ")+(" + group(1) + "+" + group(3) + "))");
}

TEST(Reduce128, OrdersGiveTheHandDerivedFp32Sums) {
  // x0 = 2^24, x1..x127 = 1 (fp32 ulp at 2^24 is 2).
  // Sequential: 2^24 + 1 is a tie, to even 2^24, 127 times: 2^24.
  // Warp tree: lane 0 folds to 2^24 the same way; lanes 1..31 hold 4. Lane 0 then adds
  // 4 (m=16), 8 (m=8: lanes 1..7 hold 4+4), 16, 32, 64, all exact: 2^24 + 124.
  std::array<float, kN> x;
  x.fill(1.0f);
  x[0] = 0x1p24f;
  const auto add = [&](float acc, int i) { return acc + x[i]; };
  const auto combine = [](float a, float b) { return a + b; };
  EXPECT_EQ(reduce_128<float>(ReductionOrder::kSequential, 0.0f, add, combine), 16777216.0f);
  EXPECT_EQ(reduce_128<float>(ReductionOrder::kWarpTree, 0.0f, add, combine), 16777340.0f);
  // Block tree: group 0's lane 0 folds 1 + 2^24 = 2^24 (a tie, to even); lanes 1..15
  // hold 2. Lane 0 then adds lane 8's 2, lane 4's 4, lane 2's 8, lane 1's 16, all exact:
  // 2^24 + 30. Groups 1..3 sum to 32 each: (2^24 + 30 + 32) + (32 + 32) = 2^24 + 126.
  EXPECT_EQ(reduce_128<float>(ReductionOrder::kBlockTree, 0.0f, add, combine), 16777342.0f);
}

TEST(Reduce128, FloatSumsFollowTheIndependentOrderModelAndMaxIsOrderFree) {
  std::mt19937 rng(55);
  int differ = 0;
  for (int trial = 0; trial < 500; ++trial) {
    const Head32 x = random_head32(rng, 10.0f);
    const auto add = [&](float acc, int i) { return acc + x[i]; };
    const auto combine = [](float a, float b) { return a + b; };
    const float seq = reduce_128<float>(ReductionOrder::kSequential, 0.0f, add, combine);
    const float tree = reduce_128<float>(ReductionOrder::kWarpTree, 0.0f, add, combine);
    ASSERT_EQ(bits_of(seq), bits_of(my_sum(false, add)));
    ASSERT_EQ(bits_of(tree), bits_of(my_sum(true, add)));
    differ += bits_of(seq) != bits_of(tree);
    // max is exact, hence associative: both orders return the true maximum.
    const auto fmax_fold = [&](float acc, int i) { return std::fmax(acc, std::fabs(x[i])); };
    const auto fmax_comb = [](float a, float b) { return std::fmax(a, b); };
    float true_max = 0;
    for (float v : x) true_max = std::max(true_max, std::fabs(v));
    ASSERT_EQ(reduce_128<float>(ReductionOrder::kSequential, 0.0f, fmax_fold, fmax_comb), true_max);
    ASSERT_EQ(reduce_128<float>(ReductionOrder::kWarpTree, 0.0f, fmax_fold, fmax_comb), true_max);
  }
  EXPECT_GT(differ, 0);
}

// ---------------------------------------------------------------------------------
// rsqrt_correctly_rounded (rsqrt.h).

TEST(RsqrtCorrectlyRounded, ExactPowersAndSqrt2Values) {
  EXPECT_EQ(rsqrt_correctly_rounded(4.0f), 0.5f);
  EXPECT_EQ(rsqrt_correctly_rounded(1.0f), 1.0f);
  EXPECT_EQ(rsqrt_correctly_rounded(0.25f), 2.0f);
  EXPECT_EQ(rsqrt_correctly_rounded(16.0f), 0.25f);
  EXPECT_EQ(rsqrt_correctly_rounded(0x1p-126f), 0x1p63f);  // smallest normal
  EXPECT_EQ(rsqrt_correctly_rounded(0x1p-148f), 0x1p74f);  // subnormal, even power
  EXPECT_EQ(rsqrt_correctly_rounded(0x1p-140f), 0x1p70f);
  EXPECT_EQ(rsqrt_correctly_rounded(0x1p126f), 0x1p-63f);
  // Odd powers give 2^-k/2 * sqrt(2)^-1 = mantissa of fl(sqrt 2) / 2: the fp32 nearest
  // to sqrt(2) = 1.41421356... is 0x3fb504f3 = 1.41421353816986 (1.3e-8 below,
  // while 0x3fb504f4 is 1.0e-7 above — both are checked here).
  const long double sqrt2 = std::sqrt(2.0L);
  ASSERT_LT(std::fabs(from_bits(0x3fb504f3u) - sqrt2), std::fabs(from_bits(0x3fb504f4u) - sqrt2));
  ASSERT_LT(std::fabs(from_bits(0x3fb504f3u) - sqrt2), std::fabs(from_bits(0x3fb504f2u) - sqrt2));
  EXPECT_EQ(bits_of(rsqrt_correctly_rounded(2.0f)), 0x3f3504f3u);    // 2^-0.5
  EXPECT_EQ(bits_of(rsqrt_correctly_rounded(128.0f)), 0x3db504f3u);  // 2^-3.5
  EXPECT_EQ(rsqrt_correctly_rounded(0x1p-149f), std::ldexp(from_bits(0x3fb504f3u), 74));
  EXPECT_EQ(rsqrt_correctly_rounded(0x1p-147f), std::ldexp(from_bits(0x3fb504f3u), 73));
}

TEST(RsqrtCorrectlyRounded, SpecialValues) {
  EXPECT_EQ(rsqrt_correctly_rounded(0.0f), INFINITY);
  EXPECT_EQ(rsqrt_correctly_rounded(-0.0f), -INFINITY);
  EXPECT_TRUE(std::isnan(rsqrt_correctly_rounded(-1.0f)));
  EXPECT_TRUE(std::isnan(rsqrt_correctly_rounded(NAN)));
  EXPECT_EQ(bits_of(rsqrt_correctly_rounded(INFINITY)), 0u);
}

// Positive finite float as M * 2^E with integer M.
void decompose(float f, uint64_t& m, int& e) {
  const uint32_t b = bits_of(f);
  const uint32_t biased = b >> 23;
  m = biased == 0 ? (b & 0x7F'FFFFu) : ((b & 0x7F'FFFFu) | 0x80'0000u);
  e = (biased == 0 ? 1 : static_cast<int>(biased)) - 150;
}

__extension__ typedef unsigned __int128 U128;  // exact 76-bit products

// Sign of (mid^2 * x - 1) computed exactly, where mid = (p + q) / 2.
int sign_of_mid_squared_x_minus_1(float p, float q, float x) {
  uint64_t mp, mq, mx;
  int ep, eq, ex;
  decompose(p, mp, ep);
  decompose(q, mq, eq);
  decompose(x, mx, ex);
  const int e0 = std::min(ep, eq);
  const uint64_t mid = (mp << (ep - e0)) + (mq << (eq - e0));  // p + q = mid * 2^e0
  // mid^2 * x = mid^2 * mx * 2^(2 e0 + ex - 2); mid < 2^26, mx < 2^24: fits 2^76.
  const U128 v = static_cast<U128>(mid) * mid * mx;
  const int shift = -(2 * e0 + ex - 2);  // compare v against 2^shift
  if (shift < 0) return 1;
  if (shift > 126) return -1;
  const U128 one = static_cast<U128>(1) << shift;
  return v < one ? -1 : (v > one ? 1 : 0);
}

TEST(RsqrtCorrectlyRounded, LiesStrictlyBetweenNeighbourMidpoints) {
  // r is the correctly rounded 1/sqrt(x) iff 1/sqrt(x) lies between the midpoints to
  // r's neighbours: lo^2 x < 1 < hi^2 x, decided here in exact integer arithmetic
  // (independent of the code under test, which searches for r).
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> bits(1, 0x7F7F'FFFFu);
  std::vector<float> xs;
  for (int i = 0; i < 200000; ++i) xs.push_back(from_bits(bits(rng)));
  for (uint32_t b = 1; b < 4096; ++b) xs.push_back(from_bits(b));  // small subnormals
  for (uint32_t b = 0x3f80'0000u; b < 0x3f80'0000u + 4096; ++b) xs.push_back(from_bits(b));
  for (float x : xs) {
    const float r = rsqrt_correctly_rounded(x);
    ASSERT_TRUE(std::isfinite(r) && r > 0) << x;
    const float below = std::nextafter(r, 0.0f);
    const float above = std::nextafter(r, INFINITY);
    ASSERT_LT(sign_of_mid_squared_x_minus_1(below, r, x), 0) << "x bits " << bits_of(x);
    ASSERT_GT(sign_of_mid_squared_x_minus_1(r, above, x), 0) << "x bits " << bits_of(x);
  }
}

TEST(RsqrtSm90Model, ReproducesTheMeasuredFactsOfNumerics64) {
  // docs/numerics.md §6.4 (a measurement independent of this table's loader): on [1, 4) sm_90
  // rsqrtf differs from the correctly rounded value on 3,634,130 of 16,777,216 inputs,
  // 3,634,122 by 1 ulp and 8 by 2 ulp, none by more; the first differing input is
  // 0x3f800001.
  int64_t differ = 0, by_two = 0, worse = 0;
  uint32_t first = 0;
  for (uint32_t i = 0; i < (1u << 24); ++i) {
    const float x = from_bits(0x3F800000u + i);
    const int64_t d = static_cast<int64_t>(bits_of(rsqrt(x, RsqrtKind::kSm90Approx))) -
                      static_cast<int64_t>(bits_of(rsqrt_correctly_rounded(x)));
    if (d == 0) continue;
    if (differ++ == 0) first = 0x3F800000u + i;
    by_two += std::llabs(d) == 2;
    worse += std::llabs(d) > 2;
  }
  EXPECT_EQ(differ, 3634130);
  EXPECT_EQ(by_two, 8);
  EXPECT_EQ(worse, 0);
  EXPECT_EQ(first, 0x3F800001u);
  // Special values as measured on the H200 (reference/data/README.md).
  EXPECT_EQ(bits_of(rsqrt(0.0f, RsqrtKind::kSm90Approx)), 0x7F800000u);
  EXPECT_EQ(bits_of(rsqrt(-0.0f, RsqrtKind::kSm90Approx)), 0xFF800000u);
  EXPECT_EQ(bits_of(rsqrt(INFINITY, RsqrtKind::kSm90Approx)), 0x00000000u);
  EXPECT_EQ(bits_of(rsqrt(-1.0f, RsqrtKind::kSm90Approx)), 0x7FFFFFFFu);
  EXPECT_EQ(bits_of(rsqrt(NAN, RsqrtKind::kSm90Approx)), 0x7FFFFFFFu);
}

TEST(RsqrtSm90Model, PeriodicInTheExponentAndSubnormalsFollowTheReduction) {
  // The model is rsqrt(x * 4^k) = rsqrt(x) * 2^-k, measured on the GPU for all inputs
  // and k in [-75, 63]; the H200 gave rsqrtf(2^-149) = 0x64b504f2 (one below the
  // correctly rounded 0x64b504f3 = 2^74.5).
  EXPECT_EQ(bits_of(rsqrt(0x1p-149f, RsqrtKind::kSm90Approx)), 0x64B504F2u);
  EXPECT_EQ(bits_of(rsqrt(0x1p-126f, RsqrtKind::kSm90Approx)), 0x5F000000u);
  std::mt19937 rng(43);
  std::uniform_int_distribution<uint32_t> mantissa(0, (1u << 24) - 1);
  for (int trial = 0; trial < 20000; ++trial) {
    const float x = from_bits(0x3F800000u + mantissa(rng));
    for (int k : {-60, -7, 1, 30, 63}) {
      ASSERT_EQ(bits_of(rsqrt(std::ldexp(x, 2 * k), RsqrtKind::kSm90Approx)),
                bits_of(std::ldexp(rsqrt(x, RsqrtKind::kSm90Approx), -k)));
    }
  }
}

TEST(RsqrtSm90Model, LoaderRejectsMissingAndDamagedTables) {
  try {
    load_sm90_rsqrt_deltas("/nonexistent/rsqrt.xz");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kEnvironment);
  }
  const std::string path = testing::TempDir() + "damaged_rsqrt.xz";
  std::ofstream(path) << "not an xz stream";
  try {
    load_sm90_rsqrt_deltas(path);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
  }
  EXPECT_THROW(set_sm90_rsqrt_deltas(std::vector<int8_t>(10)), Error);
}

}  // namespace
}  // namespace dsaf::ref
