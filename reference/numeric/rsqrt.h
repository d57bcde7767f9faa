// File: rsqrt.h
// Reciprocal square root in fp32, in the two flavours that decide bits on a GPU:
//  * kCorrectlyRounded: 1/sqrt(x) rounded once to nearest (CUDA __frsqrt_rn);
//    computed here with exact integer arithmetic, not through fp64.
//  * kSm90Approx: the hardware MUFU.RSQ behind CUDA's rsqrtf() on sm_90. It is not
//    correctly rounded; measured on an H200 it differs on 21.7% of inputs in [1, 4),
//    by at most 2 ulp, and rsqrtf(x * 4^k) == rsqrtf(x) * 2^-k (docs/numerics.md §6.4). So one
//    table over [1, 4) (a signed ulp delta per input) models it completely. The table
//    was measured on an H200 and is committed in reference/data/ (provenance there).
#pragma once

#include <cstdint>
#include <vector>

namespace dsaf::ref {

enum class RsqrtKind : uint8_t { kCorrectlyRounded, kSm90Approx };

// 1/sqrt(x) correctly rounded (ties cannot occur). x = +0 -> +inf, -0 -> -inf,
// x < 0 -> NaN, +inf -> +0, NaN -> NaN.
float rsqrt_correctly_rounded(float x);

// Number of inputs in [1, 4): 2 binades of 2^23 mantissas.
inline constexpr uint32_t kRsqrtTableSize = uint32_t{1} << 24;

// Installs the sm_90 model: deltas[i] = bits(rsqrtf(x_i)) - bits(rsqrt_rn(x_i)) for
// x_i = the i-th fp32 value in [1, 4) in increasing order. Without a call, the first
// kSm90Approx use loads the committed table (reference/data/, rsqrt_table.h).
void set_sm90_rsqrt_deltas(std::vector<int8_t> deltas);
bool has_sm90_rsqrt_model();

// rsqrt(x, kind). kSm90Approx loads the committed table on first use; if it cannot be
// read, dsaf::Error (kEnvironment) is thrown: no recipe silently falls back to the
// correctly rounded value.
float rsqrt(float x, RsqrtKind kind);

}  // namespace dsaf::ref
