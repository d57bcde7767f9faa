// File: recipe.h
// A Recipe names every numeric choice of an indexer implementation as a value
// (docs/design.md "Recipes"). The reference pipeline reads only this struct; device
// kernels receive its RecipeFields, so both sides agree on *what* is computed while each
// keeps its own arithmetic. This header holds declarations only — no arithmetic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/numeric/minifloat.h"
#include "reference/numeric/rsqrt.h"

namespace dsaf::ref {

inline constexpr int kHeadDim = 128;   // index_head_dim D
inline constexpr int kRopeDims = 64;   // rotary dims of the indexer head
inline constexpr int kFp8Max = 448;    // largest finite e4m3fn
inline constexpr int kFp4Max = 6;      // largest e2m1

// Arithmetic of the pipeline. kFp64 is the oracle ("exact"): fp64 everywhere and no
// intermediate rounding or storage quantisation (Recipe::validate enforces that).
enum class Compute : uint8_t { kFp32, kFp64 };

// Order of a 128-term reduction (sum of squares, sum, max).
// kSequential: ((x0 + x1) + x2) + ... + x127.
// kWarpTree: the order of one CUDA warp holding 4 contiguous elements per lane.
//   lane l (0..31) first folds its own elements left to right:
//     p[l] = ((x[4l] + x[4l+1]) + x[4l+2]) + x[4l+3]
//   then an xor butterfly, for m = 16, 8, 4, 2, 1 in that order, on all lanes at once:
//     p[l] = p[l] + p[l ^ m]
//   The result is p[0]. Addition is commutative, so after each step the lanes of a
//   group hold bit-identical values and every lane ends with p[0].
// kBlockTree: the order of four warps holding one element per lane (Triton's tl.sum of a
//   128-element block with num_warps = 4, as read off vLLM's V3.2 key kernel's bits).
//   Group g (terms 32g..32g+31) is one warp; its lane e < 16 first folds term e onto the
//   fold of term e + 16:
//     p[e] = fold(fold(0, x[32g + e + 16]), x[32g + e])
//   (for a sum of squares under fma contraction: fma(x_e, x_e, round(x_{e+16}^2))), then
//   adds halve it, for m = 8, 4, 2, 1: p[e] = p[e] + p[e + m] (e < m); the group's sum is
//   w_g = p[0], and the result is (w_0 + w_2) + (w_1 + w_3).
// kWarpTreeHalves: 32 lanes, lane l holding one pair of each half of the head, elements
//   2l, 2l+1 and 64+2l, 65+2l (SGLang's V4.1 index-K kernel, a bf16x2 of each half a
//   lane), folded odd element first, then the rest in order:
//     p[l] = fold(fold(fold(fold(0, x[2l+1]), x[2l]), x[64+2l]), x[65+2l])
//   (the compiler fuses x[2l]^2 into the sum x[2l]^2 + x[2l+1]^2 as fma(x_2l, x_2l,
//   round(x_2l+1^2))), then kWarpTree's xor butterfly.
enum class ReductionOrder : uint8_t { kSequential, kWarpTree, kBlockTree, kWarpTreeHalves };

enum class NormKind : uint8_t { kNone, kLayerNorm, kRmsNorm };

struct NormSpec {
  NormKind kind = NormKind::kNone;
  float eps = 1e-6f;
  ReductionOrder order = ReductionOrder::kSequential;
  // Contraction that CUDA compilers do by default at the norm's `a*b + c` sites:
  // ss = fma(x, x, ss) in the sum of squares, and (LayerNorm) y = fma(n, w, b).
  bool fma_contraction = false;
  RsqrtKind rsqrt = RsqrtKind::kCorrectlyRounded;
};

enum class RopePairing : uint8_t {
  kNeox,         // pairs (i, i + 32) of the 64 rotary dims ("rotate half")
  kInterleaved,  // pairs (2i, 2i + 1) (GPT-J style)
};
enum class RopePlacement : uint8_t { kLeading, kTrailing };  // dims 0..63 or 64..127

// Which product of `a*b - c*d` / `a*b + c*d` a compiler fused into the FMA:
// kNone: round(round(a*b) -/+ round(c*d)); kFirst: fma(a, b, -/+round(c*d));
// kSecond: fma(-/+c, d, round(a*b)).
// kCos: the product with cos in both outputs, fma(a, c, -round(b*s)) and fma(b, c, round(a*s))
// (Triton's contraction of x * cos + (sign * partner) * sin): kFirst's rule on the first
// output, kSecond's on the second.
enum class ContractedProduct : uint8_t { kNone, kFirst, kSecond, kCos };
// The contraction each output of a rotated pair gets: a' = a*c - b*s, b' = a*s + b*c.
constexpr ContractedProduct first_output_fma(ContractedProduct f) {
  return f == ContractedProduct::kCos ? ContractedProduct::kFirst : f;
}
constexpr ContractedProduct second_output_fma(ContractedProduct f) {
  return f == ContractedProduct::kCos ? ContractedProduct::kSecond : f;
}

// Frequencies: f_i = theta^(-2i/64), i = 0..31, YaRN-scaled when yarn_factor > 1:
// f_i' = f_i / factor * (1 - smooth_i) + f_i * smooth_i with smooth_i = 1 -
// clamp((i - low) / (high - low), 0, 1), low/high from the beta correction dims.
struct RopeTableSpec {
  double theta = 10000.0;
  double yarn_factor = 1.0;  // 1 = no YaRN
  double original_seq_len = 4096.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

struct RopeSpec {
  RopePairing pairing = RopePairing::kNeox;
  RopePlacement placement = RopePlacement::kLeading;
  RopeTableSpec table;
  ContractedProduct fma = ContractedProduct::kNone;
};

enum class StorageFormat : uint8_t {
  kNone,               // keep the compute precision, no cache form (fp64 oracle)
  kFp32,               // 4 bytes per value, no scale
  kBf16,               // 2 bytes per value, no scale
  kFp8E4m3fn,          // 1 byte per value + one fp32 scale per block
  kFp4E2m1,            // half a byte per value + one ue8m0 byte per block
  kFp4SimulatedBf16,   // e2m1 quantise-dequantise, stored as bf16 (DeepSeek V4 ref)
};

// raw = floor(amax) / qmax   (kDivide)   or   floor(amax) * fl(1/qmax)   (kTimesReciprocal)
enum class ScaleDivisor : uint8_t { kDivide, kTimesReciprocal };
// kNone: scale = raw. kExponentBitsCeil: 2^(biased exponent of raw + (fraction != 0)).
// kLog2Ceil: exp2f(ceilf(log2f(raw))), log2f correctly rounded (differs from the
// exponent-bit rule just above powers of two, where log2f rounds down to an integer).
enum class ScalePow2 : uint8_t { kNone, kExponentBitsCeil, kLog2Ceil };
// How values meet the scale: x / s, or x * fl(1/s). Identical for power-of-two s.
enum class ScaleApply : uint8_t { kDivide, kTimesReciprocal };
// The sign of an e2m1 code whose magnitude rounds to zero: the value's (kKeep: -0 for a
// negative value, code 0x8, as a sign-magnitude encoder gives) or always +0 (kPositive:
// SGLang's V4 fp4 key kernel sets the sign bit on non-zero codes only; docs/numerics.md
// §6.2).
enum class Fp4ZeroSign : uint8_t { kKeep, kPositive };
// A first fp4 stage before the stored one (fp4 formats only): kFakeQuant replaces each
// block of 32 values by DeepSeek V4's fp4 fake quantisation of it, as SGLang's V4.1
// indexer packs do before packing (docs/numerics.md §6.5):
//   s = 2^ceil(log2(max(amax, 6 * 2^-126) * fl(1/6)))  (exponent bits),
//   y = decode(e2m1_rne(x * (1/s) + 0)) * s            (exact: s is a power of two)
// and the stored stage then quantises y with the spec's own rules. The "+ 0" turns an
// input -0 into +0 before encoding; a negative value rounding to zero still gives -0.
enum class Fp4Prestage : uint8_t { kNone, kFakeQuant };

struct QuantSpec {
  StorageFormat format = StorageFormat::kNone;
  int block = 128;               // values per scale: 128 for fp8, 32 for fp4
  float amax_floor = 1e-4f;      // amax = max(amax, floor) before the scale rule
  ScaleDivisor divisor = ScaleDivisor::kTimesReciprocal;
  ScalePow2 pow2 = ScalePow2::kExponentBitsCeil;
  ScaleApply apply = ScaleApply::kDivide;
  Saturation saturation = Saturation::kSatFinite;
  Rounding fp4_rounding = Rounding::kNearestEven;
  Fp4ZeroSign fp4_zero_sign = Fp4ZeroSign::kKeep;
  Fp4Prestage fp4_prestage = Fp4Prestage::kNone;
};

// Where a stage's fp32 result is rounded to bf16 (the DeepSeek reference keeps bf16
// tensors between stages; fused kernels keep fp32 in registers).
struct IntermediateRounding {
  bool input = false;     // inputs arrive as bf16 (rounded on load)
  bool norm = false;
  bool rope = false;
  bool hadamard = false;
};

enum class ScoreAccum : uint8_t {
  kFp32,   // dot: fp32, sequential d = 0..127; head sum fp32 sequential h = 0..H-1
  kBf16,   // DeepSeek V4 ref: bf16(dot), bf16(relu(dot) * w), bf16(fp32 head sum)
  kExact,  // fp64 throughout (exact for e4m3fn x e4m3fn dots; see score.h)
};

enum class WeightsPrecision : uint8_t { kFp32, kBf16 };

// The order in which the head weight is formed from wproj (the weights_proj output):
// kSeparateFactors: ((wproj * H^-1/2) * q_scale) * D^-1/2   (DeepSeek V3.2 §2.7)
// kCombinedConstant: (wproj * fl(H^-1/2 * D^-1/2)) * q_scale  (SGLang fused, §6.3)
enum class WeightsFold : uint8_t { kSeparateFactors, kCombinedConstant };

enum class MaskKind : uint8_t {
  kCausal,  // key s valid for query t iff s <= t (own token included)
  kNone,    // decode: every cached key is valid
};

// The numeric fields of a recipe: every choice the arithmetic reads, as plain data (no
// strings), so that the device kernels receive this very struct. reference/recipe_fields.h
// lists each field once (its JSON name, member and enum names) for JSON, detection, the
// kernel ABI and the kernels' pinned paths; reference/presets.h holds the presets' values.
struct RecipeFields {
  Compute compute = Compute::kFp32;
  IntermediateRounding key_rounding;
  IntermediateRounding query_rounding;
  NormSpec key_norm;  // the query path has no norm (q_norm sits before wq_b)
  RopeSpec rope;
  bool hadamard = true;  // Sylvester H_128, then * fl(2^-3.5) = 0x3db504f3
  QuantSpec key_quant;
  QuantSpec query_quant;
  // The head weight of head h folds the query's fp8 scale in (docs/numerics.md §2.7):
  // w_h = wproj_h * H^-1/2 * D^-1/2 * q_scale_h in the order WeightsFold names; formats
  // whose scales are powers of two applied inside the dot (fp4) fold a factor 1.
  WeightsPrecision weights = WeightsPrecision::kFp32;
  WeightsFold weights_fold = WeightsFold::kSeparateFactors;
  ScoreAccum score = ScoreAccum::kFp32;
  MaskKind mask = MaskKind::kCausal;
  int topk = 2048;
  int page_size = 64;
};

// What a preset's claim about an upstream kernel rests on (docs/upstream.md).
enum class ProvenanceStatus : uint8_t {
  kNone,      // no upstream claim: the fp64 oracle, or a recipe of the user's
  kVerified,  // byte-exact against the named kernel (conformance adapter) in a recorded GPU run
  kModelled,  // read from the named code, never run against it; `evidence` says why
};
struct Provenance {
  ProvenanceStatus status = ProvenanceStatus::kNone;
  std::string upstream;  // package and version, file, function (several joined by "; ")
  std::string evidence;  // verified: the run and its numbers; modelled: why no kernel ran
};

// A named recipe: its fields, and where they come from.
struct Recipe : RecipeFields {
  std::string name;
  std::string description;
  std::string source;  // the upstream code the recipe models (docs/numerics.md sections)
  Provenance provenance;

  // Throws dsaf::Error(kBadInput) naming the field when the combination is invalid.
  void validate() const;
};

// The fp64 oracle of a recipe: the same model math (norm kind and eps, rope pairing,
// placement and table, Hadamard, top-K, mask) in fp64 with no rounding or storage
// quantisation and exact score accumulation. The preset "exact" is exact_of(dsv32-ref).
Recipe exact_of(const Recipe& recipe);

// The nine presets (docs/design.md), in its order; their fields are reference/presets.h.
const std::vector<Recipe>& presets();
// The preset with this name; throws dsaf::Error(kUsage) listing the names otherwise.
const Recipe& preset(const std::string& name);

// Bytes per token of the paged index-K cache for this storage format (head_dim 128).
int cache_bytes_per_token(StorageFormat format);

}  // namespace dsaf::ref
