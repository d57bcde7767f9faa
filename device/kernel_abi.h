/* File: kernel_abi.h
 * The versioned C ABI through which `dsa-fidelity verify --kernel lib.so` loads an
 * external implementation of the indexer's stages and checks it against the reference.
 * Plain C, so any toolchain can build a plug-in; all pointers are device pointers;
 * layouts are those of reference/paged_cache.h and device/api.h. docs/verify.md has a
 * minimal adapter and explains every field.
 *
 * Version 2 (dsaf_kernel_v2 below) is the current one: a plug-in declares what it
 * supports (store formats, page sizes, input dtypes, norm parameter dtype, largest
 * position and token count per call), which entry points it has (key store, query path,
 * paged logits, top-K: each optional, at least one), and the contracts of its logits
 * and top-K. It exports
 *   const dsaf_kernel_v2* dsaf_kernel_get(uint32_t abi_version);
 * returning NULL for a version it does not speak; verify asks for version 2 first, then
 * for version 1 (dsaf_kernel_v1 and the optional dsaf_scoring_get, kept unchanged).
 * Functions return 0 on success and a nonzero code on failure, with a message from
 * last_error().
 *
 * Enum values are the numeric values of the dsaf::ref enums (reference/recipe.h and
 * reference/numeric/minifloat.h); a version changes whenever a field or an enum value
 * does. */
#ifndef DSAF_DEVICE_KERNEL_ABI_H_
#define DSAF_DEVICE_KERNEL_ABI_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Version 1 ------------------------------------------------------------------------ */
#define DSAF_KERNEL_ABI_VERSION 1u

typedef struct {
  int32_t format;          /* StorageFormat */
  int32_t block;
  float amax_floor;
  int32_t divisor;         /* ScaleDivisor */
  int32_t pow2;            /* ScalePow2 */
  int32_t apply;           /* ScaleApply */
  int32_t saturation;      /* Saturation */
  int32_t fp4_rounding;    /* Rounding */
} dsaf_quant_v1;

typedef struct {
  uint8_t input, norm, rope, hadamard; /* round to bf16 after each stage (0/1) */
} dsaf_rounding_v1;

typedef struct {
  dsaf_rounding_v1 key_rounding, query_rounding;
  int32_t norm_kind;       /* NormKind */
  float norm_eps;
  int32_t norm_order;      /* ReductionOrder */
  int32_t norm_fma;        /* 0/1 */
  int32_t rsqrt;           /* RsqrtKind */
  int32_t rope_pairing;    /* RopePairing */
  int32_t rope_placement;  /* RopePlacement */
  int32_t rope_fma;        /* ContractedProduct */
  int32_t hadamard;        /* 0/1 */
  dsaf_quant_v1 key_quant, query_quant;
  int32_t weights;         /* WeightsPrecision */
  int32_t weights_fold;    /* WeightsFold */
} dsaf_recipe_v1;

typedef struct {
  const void* input; int32_t input_bf16; int64_t num_tokens;
  const int32_t* positions; const int32_t* seq;
  const int32_t* page_tables; int64_t page_table_stride;
  const float* rope_cos; const float* rope_sin;   /* [positions][32] */
  const float* norm_weight; const float* norm_bias;
  uint8_t* cache; int32_t page_size;
  dsaf_recipe_v1 recipe;
} dsaf_key_store_args_v1;

typedef struct {
  const void* input; int32_t input_bf16; int64_t num_tokens; int32_t num_heads;
  const int32_t* positions; const float* wproj;
  const float* rope_cos; const float* rope_sin;
  uint8_t* q_values; uint8_t* q_scales; float* weights;
  dsaf_recipe_v1 recipe;
} dsaf_query_args_v1;

typedef struct {
  uint32_t abi_version;
  const char* name;
  int (*key_store)(const dsaf_key_store_args_v1* args);
  int (*query_quant)(const dsaf_query_args_v1* args); /* may be NULL */
  const char* (*last_error)(void);
} dsaf_kernel_v1;

typedef const dsaf_kernel_v1* (*dsaf_kernel_get_fn)(uint32_t abi_version);

/* ---- Scoring and selection (optional second symbol) ------------------------------------
 * A plug-in may also export
 *   const dsaf_scoring_v1* dsaf_scoring_get(uint32_t abi_version);
 * for its paged indexer logits and/or top-K (either entry may be NULL), which `verify`
 * then checks against the reference (device/api.h PagedLogitsArgs and TopKArgs give the
 * semantics; ref::index_scores and ref::select_topk are the references). */
#define DSAF_SCORING_ABI_VERSION 1u

typedef struct {
  const uint8_t* q_values; const uint8_t* q_scales; const float* weights; /* [rows][H][...] */
  int32_t q_format, k_format; /* StorageFormat */
  int32_t accum;              /* ScoreAccum: kFp32 or kBf16 */
  int32_t rows, num_heads;
  const int32_t* row_seq; const int32_t* row_valid; /* [rows] */
  const uint8_t* cache; int32_t page_size;
  const int32_t* page_tables; int64_t page_table_stride;
  int64_t max_context; float* logits; /* [rows][max_context]; -inf from row_valid on */
} dsaf_paged_logits_args_v1;

typedef struct {
  const float* scores; int64_t row_stride; int32_t rows;
  const int32_t* valid_lengths; /* [rows] */
  int32_t k; int32_t* indices;  /* [rows][k], (score desc, index asc), -1 padded */
} dsaf_topk_args_v1;

/* logits_contract: 0 = exact-order (byte-equal to the reference's fp32 or bf16 order),
 * 1 = bounded: every logit within the tensor-core bound of oracle/logits_bound.h of the
 * exact score (fp8 or bf16-stored caches, fp32 accumulation; verify fails a score past it,
 * and for other formats reports the error only), with the top-K overlap reported. */
typedef struct {
  uint32_t abi_version;
  const char* name;
  int32_t logits_contract;
  int (*paged_logits)(const dsaf_paged_logits_args_v1* args); /* may be NULL */
  int (*topk)(const dsaf_topk_args_v1* args);                 /* may be NULL */
  const char* (*last_error)(void);
} dsaf_scoring_v1;

typedef const dsaf_scoring_v1* (*dsaf_scoring_get_fn)(uint32_t abi_version);

/* ---- Version 2 ------------------------------------------------------------------------ */
#define DSAF_KERNEL_ABI_VERSION_2 2u

/* A recipe field: its path in the field table (reference/recipe_fields.h, e.g.
 * "key_quant.apply") and its value as a double (enums and bools as their numeric values;
 * every int and float field is exact in a double). */
typedef struct {
  const char* path;
  double value;
} dsaf_field_v2;

/* The recipe: v1's fixed struct, and every field the kernels read by path (v1's included,
 * and any field added after v1; dsaf_recipe_field looks one up). */
typedef struct {
  dsaf_recipe_v1 v1;
  uint32_t num_fields;
  const dsaf_field_v2* fields;
} dsaf_recipe_v2;

/* The value of a field of `recipe` by path, or `fallback` when it is not listed. */
static inline double dsaf_recipe_field(const dsaf_recipe_v2* recipe, const char* path, double fallback) {
  uint32_t i;
  for (i = 0; i < recipe->num_fields; ++i) {
    const char* a = recipe->fields[i].path;
    const char* b = path;
    while (*a != 0 && *a == *b) ++a, ++b;
    if (*a == *b) return recipe->fields[i].value;
  }
  return fallback;
}

/* Input dtypes of the key path (bits). */
#define DSAF_INPUT_BF16 1u
#define DSAF_INPUT_FP32 2u

/* What the key store supports; verify draws cases inside it and reports what the recipe
 * needs that it leaves out. */
typedef struct {
  uint32_t store_formats;    /* bit f: StorageFormat f (1 fp32, 2 bf16, 3 fp8 e4m3fn, 4 e2m1 fp4, 5 fp4 in bf16) */
  uint32_t page_sizes;       /* bit p: pages of 2^p tokens, p = 0..8 */
  uint32_t input_dtypes;     /* DSAF_INPUT_* bits */
  int32_t norm_params_bf16;  /* 1: the kernel takes its parameters in bf16 -- the norm weight and bias, and the
                                query path's head weights (wproj) -- so verify draws values bf16 holds
                                exactly; 0: fp32 */
  int64_t max_position;      /* largest position of a token (0: no limit) */
  int64_t max_tokens;        /* largest num_tokens of one call (0: no limit) */
} dsaf_key_caps_v2;

/* Key path: for each token t, input[t] -> norm -> RoPE(positions[t]) -> Hadamard ->
 * quantise -> cache slot page_tables[seq[t] * stride + positions[t] / P], offset
 * positions[t] % P. The norm parameters come as fp32 and as bf16 bits (the same values
 * rounded to nearest even; exact when norm_params_bf16 was declared). */
typedef struct {
  const void* input; int32_t input_bf16; int64_t num_tokens;
  const int32_t* positions; const int32_t* seq;
  const int32_t* page_tables; int64_t page_table_stride;
  const float* rope_cos; const float* rope_sin;  /* [rope_positions][32] each */
  int64_t rope_positions;
  const float* norm_weight; const float* norm_bias;                 /* [128] fp32 or NULL */
  const uint16_t* norm_weight_bf16; const uint16_t* norm_bias_bf16; /* [128] bf16 bits or NULL */
  uint8_t* cache; int64_t cache_bytes; int32_t page_size;
  const dsaf_recipe_v2* recipe;
} dsaf_key_store_args_v2;

typedef struct {
  const void* input; int32_t input_bf16; int64_t num_tokens; int32_t num_heads;
  const int32_t* positions; const float* wproj;
  const float* rope_cos; const float* rope_sin; int64_t rope_positions;
  uint8_t* q_values; uint8_t* q_scales; float* weights;
  const dsaf_recipe_v2* recipe;
} dsaf_query_args_v2;

/* Top-K contracts (docs/verify.md): ordered = index for index in (score desc, index asc);
 * set = the same indices in any order; set_ties = the same set up to keys whose score
 * equals the K-th score (which of the tied keys at the cut are kept is free). Padding:
 * entries past min(k, length) of a row are -1, or are not read. */
#define DSAF_TOPK_ORDERED 0
#define DSAF_TOPK_SET 1
#define DSAF_TOPK_SET_TIES 2
#define DSAF_TOPK_PAD_MINUS_ONE 0
#define DSAF_TOPK_PAD_UNREAD 1

typedef struct {
  uint32_t abi_version; /* 2 */
  const char* name;
  dsaf_key_caps_v2 key_caps;
  int (*key_store)(const dsaf_key_store_args_v2* args);        /* may be NULL */
  int (*query_quant)(const dsaf_query_args_v2* args);          /* may be NULL */
  int32_t logits_contract;                                     /* as dsaf_scoring_v1 */
  int (*paged_logits)(const dsaf_paged_logits_args_v1* args);  /* may be NULL */
  int32_t topk_contract;                                       /* DSAF_TOPK_ORDERED / _SET / _SET_TIES */
  int32_t topk_padding;                                        /* DSAF_TOPK_PAD_* */
  int32_t topk_k;                                              /* the one K it supports, or 0: any of 1..2048 */
  int (*topk)(const dsaf_topk_args_v1* args);                  /* may be NULL */
  const char* (*last_error)(void);
} dsaf_kernel_v2;

typedef const dsaf_kernel_v2* (*dsaf_kernel_get_v2_fn)(uint32_t abi_version);

#ifdef __cplusplus
}
#endif

#endif /* DSAF_DEVICE_KERNEL_ABI_H_ */
