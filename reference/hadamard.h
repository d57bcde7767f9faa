// File: hadamard.h
// Hadamard-128 rotation: y = (H_128 x) / sqrt(128), with H the Sylvester
// (natural-order, symmetric) +-1 matrix, H[i][j] = (-1)^popcount(i & j) — the matrix of
// scipy.linalg.hadamard and of fast-hadamard-transform (docs/numerics.md §2.5).
//
// Evaluated as the butterfly with strides h = 1, 2, 4, ..., 64 in that order: for each
// pair (j, j + h) with j & h == 0,  (a, b) -> (a + b, a - b). This is the order of
// SGLang's warp kernel (two in-lane stages h = 1, 2, then shfl_xor masks 1..16 = strides
// 4..64; docs/numerics.md §6.4). Each add rounds to T. Then every value is multiplied by the
// scale: in fp32 the constant fl(2^-3.5) = 0x3db504f3 (what nvcc folds rsqrtf(128.f)
// to); in fp64 the correctly rounded fp64 value of 1/sqrt(128).
#pragma once

namespace dsaf::ref {

template <class T>
void apply_hadamard(T* x);

// H_128[i][j] as +-1, for tests and oracles.
int hadamard_entry(int i, int j);

}  // namespace dsaf::ref
