/* File: kernel_abi.h
 * The versioned C ABI through which `dsa-fidelity verify --kernel lib.so` loads an
 * external implementation of the indexer's key path (and, optionally, query path) and
 * checks it byte for byte against the reference. Plain C, so any toolchain can build a
 * plug-in; all pointers are device pointers; layouts are those of reference/paged_cache.h
 * and device/api.h.
 *
 * A plug-in exports one symbol:
 *   const dsaf_kernel_v1* dsaf_kernel_get(uint32_t abi_version);
 * returning NULL when it does not speak `abi_version`. Functions return 0 on success and
 * a nonzero code on failure, with a message from last_error().
 *
 * Enum values are the numeric values of the dsaf::ref enums (reference/recipe.h and
 * reference/numeric/minifloat.h); DSAF_KERNEL_ABI_VERSION changes whenever a field or an
 * enum value does. */
#ifndef DSAF_DEVICE_KERNEL_ABI_H_
#define DSAF_DEVICE_KERNEL_ABI_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif

#endif /* DSAF_DEVICE_KERNEL_ABI_H_ */
