// File: hadamard.cc — the Walsh–Hadamard rotation (hadamard.h; the butterfly:
// stage_arithmetic.h).
#include "reference/hadamard.h"

#include <bitset>

#include "reference/stage_arithmetic.h"

namespace dsaf::ref {

int hadamard_entry(int i, int j) {
  return std::bitset<32>(static_cast<unsigned>(i & j)).count() % 2 == 0 ? 1 : -1;
}

template void apply_hadamard<float>(float*);
template void apply_hadamard<double>(double*);

}  // namespace dsaf::ref
