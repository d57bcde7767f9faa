// File: verify.h
// `dsa-fidelity verify`: runs a kernel under test (device/api.h KernelUnderTest: our
// kernels or a plug-in) on random tensors and random page layouts — every page size
// 1..256, prefill batches (whole sequences) and decode batches (one new token per
// sequence), bf16 and fp32 inputs, edge rows — and compares its bytes with the reference:
// the key cache (byte-exact, first mismatch located), and, when the kernel has a query
// path, the q codes, q scales and head weights. A failure is diagnosed: which single
// recipe field, changed, reproduces the kernel's bytes exactly, or whether its keys sit
// a fixed number of slots away from where the page table puts them. When the kernel also
// scores and selects, its paged logits and top-K are checked last (verify_scoring).
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "device/api.h"
#include "reference/recipe.h"

namespace dsaf::oracle {

struct VerifyConfig {
  ref::Recipe recipe;
  int64_t min_key_tokens = 10000;   // key tokens across all batches
  // Query tokens (x num_heads heads). Dividing by a non-power-of-two scale instead of
  // multiplying by its reciprocal changes an e4m3fn code about once in 10^6 values, so
  // 4096 x 64 heads x 128 values give such a bug a few dozen chances to show.
  int64_t query_tokens = 4096;
  int num_heads = 64;
  uint64_t seed = 1;
};

struct VerifyReport {
  bool pass = true;
  std::string text;       // human-readable, one verdict per stage, diagnosis on failure
  nlohmann::json json;
};

VerifyReport run_verify(const dev::KernelUnderTest& kernel, const VerifyConfig& config);

// The scoring stages run_verify ends with (verify_scoring.cc): paged logits and top-K,
// when the kernel provides them (kernel_abi.h dsaf_scoring_v1).
void verify_scoring(const dev::KernelUnderTest& kernel, const VerifyConfig& config, std::mt19937_64& rng,
                    VerifyReport& report);

}  // namespace dsaf::oracle
