/* fourbit.h — the public C API of libfourbit.
 *
 * Entry points, by module:
 *   errors    fb_status, fb_errmsg(), fb_status_name()
 *   numerics  (runtime/numerics.c) every format of ../shared/NUMERICS.md, bit by bit: element
 *             encode/decode (E2M1, E4M3, E5M2, E8M0, S2F6), NVFP4 and MXFP8 block quantizers,
 *             the backward's requantize-transpose, RHT-32, S2F6 blocks. This is the CPU reference
 *             that every GPU kernel is checked against.
 *   philox    templates/fb_philox.h (host C and NVRTC device code compile the same header)
 *   driver    (runtime/cuda_driver.c) libcuda.so.1 loaded with dlopen at first use.
 *
 * Conventions: matrices are row-major float32; blocks run along a row (the GEMM's K). NVFP4 codes
 * are packed two per byte, even element in the low nibble. Functions that can fail return
 * fb_status and leave a message in fb_errmsg().
 */
#ifndef FOURBIT_H
#define FOURBIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FB_VERSION "0.1.0"

/* ---- errors ------------------------------------------------------------------------------ */
typedef enum {
  FB_OK = 0,
  FB_EINVAL,    /* bad argument or input */
  FB_ENOMEM,
  FB_ECUDA,     /* CUDA driver (or no driver) */
  FB_ENVRTC,
  FB_ELMDB,
  FB_ENCCL,
  FB_ELUA,
  FB_ENOTFOUND,
  FB_EVARIANT,  /* a tuning candidate failed: logged, skipped */
  FB_ENUMERIC,  /* non-finite values where finite ones are required */
  FB_EIO        /* file system */
} fb_status;

/* The last error's message on this thread ("file:line: call: what"), "" if none. */
const char *fb_errmsg(void);
const char *fb_status_name(fb_status s);

/* ---- element formats (NUMERICS.md, "Element formats") ------------------------------------ */
/* All encoders are satfinite: finite overflow and +-Inf go to +-max. A negative value that
 * rounds to zero keeps its sign. NaN: E2M1 -> 0x7 (+6), E4M3 -> 0x7F, E5M2 -> 0x7F.
 * _sr variants take the 8 random bits r of NUMERICS.md "Stochastic rounding". */
float   fb_e2m1_decode(uint8_t code);          /* low 4 bits */
uint8_t fb_e2m1_encode_rn(float x);
uint8_t fb_e2m1_encode_sr(float x, uint8_t r);
float   fb_e4m3_decode(uint8_t code);          /* 0x7F/0xFF -> NaN */
uint8_t fb_e4m3_encode_rn(float x);
uint8_t fb_e4m3_encode_sr(float x, uint8_t r);
float   fb_e5m2_decode(uint8_t code);          /* IEEE-like: Inf, NaN */
uint8_t fb_e5m2_encode_rn(float x);
uint8_t fb_e5m2_encode_sr(float x, uint8_t r);
float   fb_e8m0_decode(uint8_t code);          /* 2^(code-127); 0xFF -> NaN */
uint8_t fb_e8m0_encode_up(float x);            /* the rounded-up rule of NUMERICS.md (MXFP8) */
float   fb_s2f6_decode(int8_t q);              /* q / 64 */

/* ---- stochastic rounding bits -------------------------------------------------------------- */
/* Philox4x32-10, key = (seed, stream), counter = (step, c mod 2^32, c div 2^32, 0) with
 * c = i / 16: returns r for output element i (byte i % 16 of the 128-bit block). */
uint8_t fb_sr_bits(uint32_t seed, uint32_t stream, uint32_t step, uint64_t i);

typedef enum { FB_ROUND_RN = 0, FB_ROUND_SR = 1 } fb_rounding;
typedef enum { FB_OUTER_TENSOR = 0, FB_OUTER_ROW = 1, FB_OUTER_GROUP = 2 } fb_outer;

typedef struct {
  fb_rounding rounding;
  uint32_t seed, stream, step;   /* SR only */
} fb_sr_opts;

/* ---- NVFP4 ---------------------------------------------------------------------------------- */
typedef struct {
  fb_outer outer;            /* outer-scale granularity */
  const size_t *group_offsets; /* FB_OUTER_GROUP: ngroups+1 row offsets, [0]=0, [ngroups]=rows */
  size_t ngroups;
  int four_over_six;         /* 4/6: E4M3 max taken as 256 in S_enc, per-block choice of sf6/sf4 */
  int two_d;                 /* 16x16 tiles share one block amax (tensor or group outer only) */
  fb_rounding rounding;
  uint32_t seed, stream, step;
} fb_nvfp4_opts;

/* Number of S_dec outer scales for these options and rows: 1, rows, or ngroups. */
size_t fb_nvfp4_nouter(const fb_nvfp4_opts *o, size_t rows);

/* x: rows x cols (cols % 16 == 0). codes: rows*cols/2 bytes; sf: rows*cols/16 E4M3 bytes;
 * s_dec: fb_nvfp4_nouter() floats. chose4 (may be NULL): rows*cols/16 flags, 1 where 4/6 kept sf4. */
fb_status fb_nvfp4_quantize(const float *x, size_t rows, size_t cols, const fb_nvfp4_opts *o,
                            uint8_t *codes, uint8_t *sf, float *s_dec, uint8_t *chose4);
/* y = e2m1(q) * float(sf) * S_dec, in that order (fp32). */
fb_status fb_nvfp4_dequantize(const uint8_t *codes, const uint8_t *sf, const float *s_dec,
                              size_t rows, size_t cols, const fb_nvfp4_opts *o, float *y);
/* The per-group amax and S_enc of NUMERICS.md (A with NaN ignored). four_over_six picks 256. */
float fb_nvfp4_s_enc(float amax, int four_over_six);

/* ---- MXFP8 (E4M3 elements, E8M0 scale per 32) ------------------------------------------------ */
typedef enum { FB_MX_ROWWISE = 0, FB_MX_COLWISE = 1 } fb_mx_layout;
/* ROWWISE: codes rows x cols, e8m0 rows x cols/32 (cols % 32 == 0).
 * COLWISE: blocks down a column, stored transposed: codes cols x rows, e8m0 cols x rows/32
 * (rows % 32 == 0). SR element index = row-major index in the stored (output) layout. */
fb_status fb_mxfp8_quantize(const float *x, size_t rows, size_t cols, fb_mx_layout layout,
                            const fb_sr_opts *r, uint8_t *codes, uint8_t *e8m0);
/* Dequantize a stored MXFP8 matrix (srows x scols as stored, blocks along its rows). */
fb_status fb_mxfp8_dequantize(const uint8_t *codes, const uint8_t *e8m0, size_t srows,
                              size_t scols, float *y);

/* ---- the backward's requantize-transpose ---------------------------------------------------- */
/* NVFP4 (rows x cols as quantized with o) -> FP32 -> transposed MXFP8 (cols x rows, blocks
 * along rows) with the rounding of r. rows % 32 == 0. */
fb_status fb_requant_nvfp4_to_mxfp8t(const uint8_t *codes, const uint8_t *sf, const float *s_dec,
                                     size_t rows, size_t cols, const fb_nvfp4_opts *o,
                                     const fb_sr_opts *r, uint8_t *out_codes, uint8_t *out_e8m0);
/* MXFP8 row-wise (rows x cols) -> FP32 -> transposed MXFP8 (cols x rows). */
fb_status fb_requant_mxfp8_to_mxfp8t(const uint8_t *codes, const uint8_t *e8m0, size_t rows,
                                     size_t cols, const fb_sr_opts *r, uint8_t *out_codes,
                                     uint8_t *out_e8m0);

/* ---- RHT-32 and S2F6 ------------------------------------------------------------------------ */
/* The sign mask: word 0 of Philox4x32-10, key (seed, 1), counter (step, 0, 0, 0); step 0 is
 * the default "fixed per run" mask. */
uint32_t fb_rht_signs(uint32_t seed, uint32_t step);
void fb_rht32_forward(const float *x, uint32_t signs, float *y);  /* y = H32 (s . x) */
void fb_rht32_inverse(const float *y, uint32_t signs, float *x);  /* x = s . (H32 y) / 32 */
/* E8M0 of a 32-block: smallest e in [0,254] with amax <= 127/64 * 2^(e-127) (254 if none). */
uint8_t fb_s2f6_block_exp(float amax);
/* x: rows x cols, cols % 32 == 0. rht: apply RHT-32 with `signs` to each block first.
 * q: rows*cols int8; e8m0: rows*cols/32. */
fb_status fb_s2f6_quantize(const float *x, size_t rows, size_t cols, int rht, uint32_t signs,
                           int8_t *q, uint8_t *e8m0);
fb_status fb_s2f6_dequantize(const int8_t *q, const uint8_t *e8m0, size_t rows, size_t cols,
                             int rht, uint32_t signs, float *y);


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
} fb_layer_prec;

typedef struct {
  int layers, d_model, d_ff, experts, top_k, vocab, conv_width;
} fb_model;

/* Tuning space of one kernel family: the variants left after the recipe's keep() predicate. */
#define FB_TUNE_MAXPARAMS 8
typedef struct {
  char family[16];
  int nparams;
  char param[FB_TUNE_MAXPARAMS][16];
  int nvariants;
  int *values; /* nvariants x nparams, row-major, in the product's order */
} fb_tune_family;

typedef struct {
  int first, last; /* 1-based, inclusive */
  fb_layer_prec prec;
  unsigned set;     /* FB_RULE_* bits: what the rule overrides */
  char where[256];  /* file:line of the rule */
} fb_layer_rule;
enum { FB_RULE_FWD = 1, FB_RULE_BWD = 2, FB_RULE_DISPATCH = 4, FB_RULE_COMBINE = 8 };

typedef struct fb_recipe {
  char path[512], name[64], description[256];
  uint32_t seed;
  fb_model model;
  int ep;            /* expert-parallel ranks */
  int tokens;        /* tokens per rank per step */
  fb_layer_prec base;
  char base_where[256];
  int nrules;
  fb_layer_rule *rules;
  int nfamilies;
  fb_tune_family *families;
} fb_recipe;

/* Load and validate a recipe file in a sandboxed Lua state (closed before returning). On error:
 * FB_ELUA / FB_EINVAL / FB_EIO with "file:line: field.path: message" in fb_errmsg(). */
fb_status fb_recipe_load(const char *path, fb_recipe **out);
/* Same, from memory; `name` is the chunk name used in messages; includes resolve beside `dir`. */
fb_status fb_recipe_load_buffer(const char *text, size_t len, const char *name, const char *dir, fb_recipe **out);
void fb_recipe_free(fb_recipe *r);
/* The precision of layer (1-based) after the recipe's rules; dispatch resolved. Returns out. */
const fb_layer_prec *fb_recipe_layer(const fb_recipe *r, int layer, fb_layer_prec *out);
const char *fb_format_name(fb_format f);
const char *fb_gran_name(fb_gran g);

/* ---- the plan (gen/plan.c) ------------------------------------------------------------------ */
/* A unique kernel the plan needs. name is its canonical identity (STYLE.md) without the variant's
 * tile fields, which the generator appends: e.g. gemm_fwd_nvfp4xnvfp4_nvfp4_4o6_tok_swiglu_sm90a. */
typedef enum {
  FB_OP_ROUTER = 0, FB_OP_ROUTER_BWD, FB_OP_AMAX, FB_OP_QUANT, FB_OP_PERMUTE, FB_OP_UNPERMUTE,
  FB_OP_GEMM_FWD13, FB_OP_GEMM_FWD2, FB_OP_GEMM_DGRAD2, FB_OP_GEMM_WGRAD, FB_OP_GEMM_DGRAD13,
  FB_OP_REQUANT, FB_OP_ADAMW,
  FB_OP_S2F6_Q, FB_OP_S2F6_DQ /* the combine payload's kernels on their own (tests, unfused paths) */
} fb_op;

typedef struct {
  char name[128];
  fb_op op;
  fb_qspec q;      /* the quantized output: quant, requant (its destination), permute/unpermute payload,
                      gemm output, adamw's weights */
  fb_qspec src;    /* requant: the stored source (format, outer); gemm: the operands' format */
  int col;         /* quant/requant: blocks down the columns, stored transposed */
  int in_f32;      /* the input is FP32 (master weights), not BF16 */
  int top_k, experts;
  char family[16]; /* tune family: gemm, quant, ... */
  char role[96];   /* what it computes, for people */
  int first_layer, last_layer, nlayers;
  int nvariants;   /* of its family after the recipe's keep() */
} fb_kernel_spec;

typedef struct {
  double weights_fwd, weights_bwd_copy, masters, grads, optimizer, saved_act; /* bytes per rank */
  double by_format[4]; /* quantized forward weights + saved activations, by fb_format */
} fb_plan_memory;

typedef struct fb_plan {
  const fb_recipe *recipe;
  char arch[16];         /* sm_90a, sm_100a, sm_103a */
  int nlayers;
  fb_layer_prec *layers; /* [nlayers], resolved */
  int nkernels;
  fb_kernel_spec *kernels;
  fb_plan_memory mem;
  char sha256[65];       /* of the plan's JSON, the identity generated files cite */
} fb_plan;

fb_status fb_plan_resolve(const fb_recipe *r, const char *arch, fb_plan **out);
void fb_plan_free(fb_plan *p);
/* Bits one token-expert copy moves: the payload of d values in format f plus its scales and, for
 * nvfp4 per-token, the 32-bit outer scale. */
double fb_plan_wire_bits(fb_format f, int d, int per_token_outer);
/* The whole plan as one JSON object / as tables for people, into a malloc'd string. */
fb_status fb_plan_json(const fb_plan *p, char **out);
fb_status fb_plan_text(const fb_plan *p, char **out);

/* The tag a quantized operand goes by in kernel names: nvfp4_4o6_tok_sr, mxfp8_sr, s2f6_rht32, bf16. */
void fb_qspec_tag(const fb_qspec *q, char *buf, size_t n);

/* ---- the generator (gen/gen.c) and NVRTC (gen/nvrtc.c) ----------------------------------------- */
/* One tile variant of a kernel spec: the values of the tune parameters its template uses. */
typedef struct {
  char name[192];     /* spec name + variant tag: the extern "C" kernel name and program name */
  char tmpl[32];      /* template file */
  int nparams;
  char param[FB_TUNE_MAXPARAMS][16];
  int value[FB_TUNE_MAXPARAMS];
} fb_variant;

/* The template for spec k, or NULL with the reason in *why. */
const char *fb_gen_template(const fb_kernel_spec *k, const char **why);
/* The distinct variants of k under tune family fam (values no template uses are dropped and the
 * duplicates merged); variants a hardware or template limit rules out are skipped, and counted in
 * *pruned with the first reason in why (may be NULL). *out is malloc'd. */
fb_status fb_gen_variants(const fb_kernel_spec *k, const fb_tune_family *fam, fb_variant **out, int *n,
                          int *pruned, char *why, size_t whylen);
/* The CUDA source of variant v: the generated header (STYLE.md), the parameters as #defines, then the
 * template body. origin: the recipe path; plan_sha: its plan hash ("-" if none). Deterministic. */
fb_status fb_gen_source(const fb_kernel_spec *k, const fb_variant *v, const char *origin, const char *plan_sha,
                        char **src);

/* Grid and block of variant v over a rows x cols input (ngroups: per-group scales). */
fb_status fb_launch_dims(const fb_kernel_spec *k, const fb_variant *v, long long rows, long long cols, unsigned ngroups,
                         unsigned *gx, unsigned *gy, unsigned *threads);

typedef struct {
  void *cubin;
  size_t size;
  double ms;  /* compile time */
  char *log;  /* NVRTC's log (ptxas resource usage included), "" if none */
} fb_cubin;
/* Compile src for arch (sm_90a, sm_100a, sm_103a) with the templates as in-memory headers. On failure
 * FB_ENVRTC with the kernel name and NVRTC's log in fb_errmsg(). */
fb_status fb_nvrtc_compile(const char *name, const char *src, const char *arch, fb_cubin *out);
void fb_cubin_free(fb_cubin *c);

/* ---- hashing (runtime/sha256.c) -------------------------------------------------------------- */
void fb_sha256(const void *data, size_t len, uint8_t out[32]);
void fb_sha256_hex(const void *data, size_t len, char out[65]);

/* ---- CUDA driver, loaded with dlopen ---------------------------------------------------------- */
/* FB_OK if libcuda.so.1 loaded and cuInit succeeded; otherwise FB_ECUDA with the reason. */
fb_status fb_cuda_load(void);

#ifdef __cplusplus
}
#endif
#endif
