// File: study_keys.h
// The building blocks of the CPU studies (sweep.h, needle.h): a recipe's keys and
// queries on an activation source, and the stage-attribution variants of a recipe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "oracle/activations.h"
#include "reference/recipe.h"
#include "reference/rope.h"
#include "reference/score.h"

namespace dsaf::oracle {

// Called with (work done, work total) after each unit of work.
using Progress = std::function<void(int64_t, int64_t)>;

// Keys of positions [0, n) under a recipe (key path of every token).
ref::KeyMatrix build_keys(const ref::Recipe& recipe, const ActivationSource& acts,
                          int64_t n, const ref::RopeTable& rope, int threads);
// The query of token t under a recipe (query path + folded head weights), at position t,
// or at `position` with token t's input (the needle's planted-fact mode asks one question
// at the end of contexts of every length).
ref::PreparedQuery build_query(const ref::Recipe& recipe, const ActivationSource& acts,
                               int64_t t, const ref::RopeTable& rope);
ref::PreparedQuery build_query(const ref::Recipe& recipe, const ActivationSource& acts,
                               int64_t t, int64_t position, const ref::RopeTable& rope);

// Stage attribution (issue: "re-run with one stage made exact at a time"): the recipe
// with one stage's lossy choices replaced by exact-as-fp32 ones, named "<recipe>~<stage>":
//   norm      no bf16 rounding after the norm, sequential order, no FMA, exact rsqrt
//   rope      no bf16 rounding after RoPE (query and key), no FMA contraction
//   hadamard  no bf16 rounding after the Hadamard rotation
//   key-quant keys stored as fp32
//   query-quant queries stored as fp32
//   score     exact (fp64) score accumulation
// Stages the recipe does not have are omitted. fp32 arithmetic remains everywhere else,
// so "exact" here means: the stage contributes fp32 rounding only.
std::vector<std::pair<std::string, ref::Recipe>> stage_variants(const ref::Recipe& recipe);

// The studies' memory model (sweep_peak_bytes, needle_peak_bytes), in bytes:
//   a key matrix of n keys: n x (128 + 1) doubles (ref::KeyMatrix: dot values and scales);
//   a RoPE table of the study's longest context: 64 floats a position (cos and sin);
//   a score row of n keys: n doubles; a top-K selection: K int64 indices;
//   the process itself (code, libraries, the activation generator): kStudyBaseBytes.
inline constexpr int64_t kKeyMatrixBytesPerKey = 129 * 8;
inline constexpr int64_t kRopeBytesPerPosition = 64 * 4;
inline constexpr int64_t kStudyBaseBytes = int64_t{64} << 20;
// How many distinct oracles (ref::exact_of models) and RoPE tables a recipe list needs.
int64_t distinct_oracles(const std::vector<ref::Recipe>& recipes);
int64_t distinct_rope_tables(const std::vector<ref::Recipe>& recipes);

}  // namespace dsaf::oracle
