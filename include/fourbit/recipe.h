/* fourbit/recipe.h — recipes (recipes/loader.c): the operand formats, the per-layer precision, the model's sizes
 * and the tune families, loaded from a Lua file in a sandbox into C structs. */
#ifndef FOURBIT_RECIPE_H
#define FOURBIT_RECIPE_H

#include "fourbit/base.h"
#include "fourbit/numerics.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- recipes (recipes/loader.c) ------------------------------------------------------------- */
typedef enum { FB_FMT_BF16 = 0, FB_FMT_NVFP4, FB_FMT_MXFP8, FB_FMT_S2F6 } fb_format;
typedef enum { FB_GRAN_TENSOR = 0, FB_GRAN_TOKEN, FB_GRAN_EXPERT } fb_gran;

/* How one operand is quantized. Fields that do not apply to its format are zero. */
typedef struct {
  fb_format format;
  fb_gran outer;        /* nvfp4: outer-scale granularity */
  int four_over_six;    /* nvfp4 */
  int two_d;            /* nvfp4: 16x16 blocks */
  fb_rounding rounding;
  int e5m2;             /* mxfp8: E5M2 elements instead of E4M3 */
  int rht;              /* 0, 16 or 32: random Hadamard transform before quantizing */
} fb_qspec;

/* The precision of one expert layer. dispatch is the wire format of the tokens sent to the experts
 * (the forward's activation format, or bf16 when they are quantized on arrival). */
typedef struct {
  fb_qspec fwd_act, fwd_weight; /* fwd_act.format == fwd_weight.format: the forward GEMMs' format */
  fb_qspec bwd_grad, bwd_saved; /* backward GEMMs' format; bwd_saved: requantization of saved tensors */
  int wgrad_rht;                /* 0, 16, 32 on the wgrad operands */
  fb_format dispatch;           /* resolved by the plan when dispatch_fwd */
  int dispatch_fwd;             /* dispatch = "fwd": the forward's activation format */
  fb_qspec combine;
  int gemm_exact;               /* the recipe's gemm.accumulate = "exact" (every layer): MXFP8 GEMMs multiply BF16
                                   products only, never on the FP8 tensor cores (docs/numerics.md "GEMM accumulation") */
} fb_layer_prec;

typedef struct {
  int layers, d_model, d_ff, experts, top_k, vocab, conv_width;
} fb_model;

/* Tuning space of one kernel family: the variants left after the recipe's keep() predicate. */
#define FB_TUNE_MAXPARAMS 10
typedef struct {
  char family[16];
  int nparams;
  char param[FB_TUNE_MAXPARAMS][16];
  int nvariants;
  int *values; /* nvariants x nparams, row-major, in the product's order */
} fb_tune_family;

/* A tune parameter (recipes/loader.c FB_TUNE_PARAMS, NULL-terminated): its name in recipes and variants, its legal
 * values (check: NULL when legal, else what it takes), and whether 0 means "off": a family may leave it out (then 0),
 * and at 0 it adds no name tag, no #define and no header entry, so the kernels of families made before it keep their
 * names and source text. Which templates read it: their rows in gen/templates.c. */
typedef struct {
  const char *name;
  const char *(*check)(long long x);
  int zero_is_off;
} fb_tune_param;
extern const fb_tune_param FB_TUNE_PARAMS[];
const fb_tune_param *fb_tune_param_find(const char *name); /* NULL: no such parameter */

/* A recipe's path (and an include's) is kept whole in messages: up to FB_RECIPE_PATH_MAX - 1 bytes (Linux's
 * PATH_MAX); a longer one is refused. "file:line" adds the line. */
#define FB_RECIPE_PATH_MAX 4096
#define FB_RECIPE_WHERE_MAX (FB_RECIPE_PATH_MAX + 24)

typedef struct {
  int first, last; /* 1-based, inclusive */
  fb_layer_prec prec;
  unsigned set;     /* FB_RULE_* bits: what the rule overrides */
  char where[FB_RECIPE_WHERE_MAX]; /* file:line of the rule */
} fb_layer_rule;
enum { FB_RULE_FWD = 1, FB_RULE_BWD = 2, FB_RULE_DISPATCH = 4, FB_RULE_COMBINE = 8 };

typedef struct fb_recipe {
  char path[FB_RECIPE_PATH_MAX], name[64], description[256];
  uint32_t seed;
  fb_model model;
  int ep;            /* expert-parallel ranks */
  int tokens;        /* tokens per rank per step */
  fb_layer_prec base;
  char base_where[FB_RECIPE_WHERE_MAX];
  int nrules;
  fb_layer_rule *rules;
  int nfamilies;
  fb_tune_family *families;
} fb_recipe;

/* Load and validate a recipe file in a sandboxed Lua state (closed before returning). On error:
 * FB_ELUA / FB_EINVAL / FB_EIO with "file:line: field.path: message" in fb_errmsg(). */
fb_status fb_recipe_load(const char *path, fb_recipe **out);
/* The sandbox's instruction limit per load (Lua VM instructions; 2e8 by default, about 1-2 s). The recipe fuzzer
 * lowers it; a process that loads recipes from several threads must not change it while they run. */
extern long long fb_recipe_instr_limit;
/* Same, from memory; `name` is the chunk name used in messages; includes resolve beside `dir`. */
fb_status fb_recipe_load_buffer(const char *text, size_t len, const char *name, const char *dir, fb_recipe **out);
void fb_recipe_free(fb_recipe *r);
/* The precision of layer (1-based) after the recipe's rules; dispatch resolved. Returns out. */
const fb_layer_prec *fb_recipe_layer(const fb_recipe *r, int layer, fb_layer_prec *out);
const char *fb_format_name(fb_format f);
const char *fb_gran_name(fb_gran g);

#ifdef __cplusplus
}
#endif
#endif
