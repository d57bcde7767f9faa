// File: topk.h
// Deterministic top-K selection over one row of scores.
// Order: higher score first; equal scores by lower index first (CCCL/RAFT
// "prefer smaller index"). The selection is the first K of that total order, returned
// in that order. When fewer than K positions are valid, all valid positions are
// returned and the rest is -1. NaN scores are bad input (dsaf::Error, kBadInput).
#pragma once

#include <cstdint>
#include <vector>

namespace dsaf::ref {

// scores[0, n_valid) are the valid positions (the causal mask is applied by passing
// n_valid = t + 1 for query position t in prefill, the context length in decode).
std::vector<int32_t> select_topk(const std::vector<double>& scores, int64_t n_valid, int k);

}  // namespace dsaf::ref
