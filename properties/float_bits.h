// File: float_bits.h
// RapidCheck generators of fp32 values built from bit patterns, weighted toward the
// classes where codecs go wrong: +-0, subnormals, +-inf, NaN, the e4m3fn boundaries
// 448 / 464 / 480, rounding midpoints of the narrow formats and their fp32 neighbours.
// RapidCheck's own float generator produces none of these (rapidcheck issue #139).
// Shrinking goes toward smaller bit patterns, i.e. toward +0 and short mantissas.
#pragma once

#include <cstdint>
#include <vector>

#include <rapidcheck.h>

namespace dsaf::properties {

// Any fp32 bit pattern, uniformly.
rc::Gen<float> any_float_bits();

// Edge values of the indexer's formats and their fp32 neighbours (+-1 ulp).
const std::vector<float>& edge_floats();

// A mix: one third uniform bit patterns, one third edge values, one third finite values
// of moderate magnitude (|x| in [2^-20, 2^20]) where scale rules operate.
rc::Gen<float> float_bits_weighted();

}  // namespace dsaf::properties
