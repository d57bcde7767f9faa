// File: hadamard.cc — the stride-doubling Walsh–Hadamard butterfly (hadamard.h).
#include "reference/hadamard.h"

#include <bitset>
#include <cmath>

#include "reference/numeric/bit_cast.h"
#include "reference/recipe.h"

namespace dsaf::ref {
namespace {

// fl(1/sqrt(128)) = 0x3db504f3: 1/sqrt(128) = 0.08838834764831845, and the three nearest
// fp32 values 0x3db504f2 / 0x3db504f3 / 0x3db504f4 lie 9.0e-9 below, 1.5e-9 below and
// 5.9e-9 above it (fp32 spacing here is 7.45e-9).
float hadamard_scale(float) { return float_from_bits(0x3db504f3u); }
// fp64: the correctly rounded 128^-1/2 (1.0 / std::sqrt(128.0) is one ulp below it).
double hadamard_scale(double) { return 0x1.6a09e667f3bcdp-4; }

}  // namespace

template <class T>
void apply_hadamard(T* x) {
  // Stage h pairs j with j + h for every j whose bit h is clear: blocks of 2h values,
  // the first half of each against its second half.
  for (int h = 1; h < kHeadDim; h *= 2) {
    for (int block = 0; block < kHeadDim; block += 2 * h) {
      for (int j = block; j < block + h; ++j) {
        const T a = x[j];
        const T b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  const T scale = hadamard_scale(T{});
  for (int j = 0; j < kHeadDim; ++j) x[j] = x[j] * scale;
}

int hadamard_entry(int i, int j) {
  return std::bitset<32>(static_cast<unsigned>(i & j)).count() % 2 == 0 ? 1 : -1;
}

template void apply_hadamard<float>(float*);
template void apply_hadamard<double>(double*);

}  // namespace dsaf::ref
