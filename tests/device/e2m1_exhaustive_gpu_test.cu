// The device e2m1 encoder (device/head/quantize.cuh e2m1_code, on fp32's subnormal grid) and its
// rounding to the grid value (e2m1_round, which the fp4-simulated store and the fake
// quantisation use) against a brute-force nearest-of-eight search on every one of the 2^32
// floats, for both tie rules and both zero-sign rules the recipes use. The search is the definition, written independently of the encoder:
// the distance to each representable magnitude, in double; the smaller code on a tie
// toward zero, the even code on a tie to even; from 6 up (infinities too) 6 is the nearest,
// NaN gives +6, and every other input keeps its sign bit (zero codes included). Doubles
// order the distances right below 6: a float that is not a midpoint is at least 2^-26
// from the nearest one (the float spacing just below 0.25), so its two distances differ by
// far more than the rounding of a double below 8 (2^-50), and at a midpoint both distances
// are exact. (Far above 6 they are not: a search of every float fails on the 603,979,775
// finite floats of each sign above 2^56, where the distances to 4 and 6 round to the same
// double.)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "device/head/head_io.cuh"
#include "device/head/quantize.cuh"
#include "tests/device/gpu_test_support.h"

namespace dsaf::test {
namespace {

// kPositive: the sign bit only on a non-zero magnitude (SGLang's `if (x < 0 && idx != 0)`).
__device__ unsigned brute_force_e2m1(float v, ref::Rounding rounding, ref::Fp4ZeroSign zero_sign) {
  if (isnan(v)) return 0x7;
  const double magnitudes[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  const double mag = fabs(static_cast<double>(v));
  if (mag >= 6.0) return 0x7 | (signbit(v) ? 0x8u : 0u);
  unsigned best = 0;
  for (unsigned c = 1; c < 8; ++c) {
    const double d = fabs(mag - magnitudes[c]), best_d = fabs(mag - magnitudes[best]);
    const bool tie_goes_up = rounding == ref::Rounding::kNearestEven && (c & 1) == 0;
    if (d < best_d || (d == best_d && tie_goes_up)) best = c;
  }
  const bool sign = zero_sign == ref::Fp4ZeroSign::kPositive ? best != 0 && v < 0.0f : signbit(v);
  return best | (sign ? 0x8u : 0u);
}

// The value of a code, from the table of magnitudes: -0 for 0x8.
__device__ float brute_force_value(unsigned code) {
  const float magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float mag = magnitudes[code & 7];
  return (code & 8) ? -mag : mag;
}

struct Mismatches {
  unsigned long long count;
  unsigned long long first;  // the smallest mismatching bit pattern (or 2^32)
};

// out[0]: codes that differ; out[1]: values whose bits differ.
__global__ void compare_all_floats(ref::Rounding rounding, ref::Fp4ZeroSign zero_sign, Mismatches* out) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t{1} << 32);
       i += stride) {
    const float v = __uint_as_float(static_cast<unsigned>(i));
    const unsigned expected = brute_force_e2m1(v, rounding, zero_sign);
    if (dev::e2m1_code(v, rounding, zero_sign) != expected) {
      atomicAdd(&out[0].count, 1ull);
      atomicMin(&out[0].first, static_cast<unsigned long long>(i));
    }
    if (__float_as_uint(dev::e2m1_round(v, rounding, zero_sign)) != __float_as_uint(brute_force_value(expected))) {
      atomicAdd(&out[1].count, 1ull);
      atomicMin(&out[1].first, static_cast<unsigned long long>(i));
    }
  }
}

TEST(E2m1Exhaustive, DeviceEncoderAndRoundingMatchNearestSearchOnEveryFloat) {
  DSAF_REQUIRE_GPU();
  for (const ref::Rounding rounding : {ref::Rounding::kNearestEven, ref::Rounding::kNearestTiesTowardZero}) {
    for (const ref::Fp4ZeroSign zero_sign : {ref::Fp4ZeroSign::kKeep, ref::Fp4ZeroSign::kPositive}) {
      const std::string rule = std::string(rounding == ref::Rounding::kNearestEven ? "ties to even" : "ties toward zero") +
                               (zero_sign == ref::Fp4ZeroSign::kKeep ? ", zero keeps its sign" : ", zero is +0");
      DeviceBuffer<Mismatches> result(std::vector<Mismatches>(2, Mismatches{0, uint64_t{1} << 32}));
      compare_all_floats<<<132 * 16, 256>>>(rounding, zero_sign, result.get());
      cuda_ok(cudaGetLastError(), "compare_all_floats launch");
      const std::vector<Mismatches> m = result.download();
      EXPECT_EQ(m[0].count, 0u) << rule << ": e2m1_code, first mismatch at bits 0x" << std::hex << m[0].first;
      EXPECT_EQ(m[1].count, 0u) << rule << ": e2m1_round, first mismatch at bits 0x" << std::hex << m[1].first;
      std::printf("[ e2m1 ] %s: 4,294,967,296 floats, %llu code and %llu value mismatches\n", rule.c_str(),
                  m[0].count, m[1].count);
    }
  }
}

}  // namespace
}  // namespace dsaf::test
