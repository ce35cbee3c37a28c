/* fourbit.h — the public C API of libfourbit.
 *
 * Entry points, by module:
 *   errors    fb_status, fb_errmsg(), fb_status_name()
 *   numerics  (runtime/numerics.c) every format of docs/numerics.md, bit by bit: element
 *             encode/decode (E2M1, E4M3, E5M2, E8M0, S2F6), NVFP4 and MXFP8 block quantizers,
 *             the backward's requantize-transpose, RHT-32, S2F6 blocks. This is the CPU reference
 *             that every GPU kernel is checked against.
 *   ops       (runtime/ops.c) CPU references of the router, permute, unpermute, SwiGLU and AdamW
 *             kernels, and BF16 rounding.
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

/* ---- element formats (docs/numerics.md, "Element formats") ------------------------------------ */
/* All encoders are satfinite: finite overflow and +-Inf go to +-max. A negative value that
 * rounds to zero keeps its sign. NaN: E2M1 -> 0x7 (+6), E4M3 -> 0x7F, E5M2 -> 0x7F.
 * _sr variants take the 8 random bits r of docs/numerics.md "Stochastic rounding". */
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
uint8_t fb_e8m0_encode_up(float x);            /* the rounded-up rule of docs/numerics.md (MXFP8) */
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
/* The per-group amax and S_enc of docs/numerics.md (A with NaN ignored). four_over_six picks 256. */
float fb_nvfp4_s_enc(float amax, int four_over_six);

/* ---- MXFP8 (E4M3 elements, E8M0 scale per 32) ------------------------------------------------ */
typedef enum { FB_MX_ROWWISE = 0, FB_MX_COLWISE = 1 } fb_mx_layout;
/* ROWWISE: codes rows x cols, e8m0 rows x cols/32 (cols % 32 == 0).
 * COLWISE: blocks down a column, stored transposed: codes cols x rows, e8m0 cols x rows/32
 * (rows % 32 == 0). SR element index = row-major index in the stored (output) layout. */
fb_status fb_mxfp8_quantize(const float *x, size_t rows, size_t cols, fb_mx_layout layout,
                            const fb_sr_opts *r, uint8_t *codes, uint8_t *e8m0);
/* ROWWISE for a slice of a larger operand: SR element index of (row, col) = (row0 + row) * ld + col0 + col (ld 0:
 * cols; ld and col0 multiples of 32), so that a rank's rows draw the bits one rank draws for them. */
fb_status fb_mxfp8_quantize_rows_at(const float *x, size_t rows, size_t cols, const fb_sr_opts *r, size_t row0, size_t ld,
                                    size_t col0, uint8_t *codes, uint8_t *e8m0);
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
/* A unique kernel the plan needs. name is its canonical identity (docs/style.md "Kernel names") without the variant's
 * tile fields, which the generator appends: e.g. gemm_fwd_nvfp4xnvfp4_nvfp4_4o6_tok_swiglu_sm90a. */
typedef enum {
  FB_OP_TCOPY = 64, /* a matrix copied to BF16 / FP32: dequantized, transposed, RHT-16, scaled (templates/tcopy.cuh;
                       numbered apart from the plan's ops; not a plan kernel: the GPU expert layer's BF16 and NVFP4
                       backward build it) */
  FB_OP_ROUTER = 0, FB_OP_ROUTER_BWD, FB_OP_AMAX, FB_OP_QUANT, FB_OP_PERMUTE, FB_OP_UNPERMUTE,
  FB_OP_GEMM_FWD13, FB_OP_GEMM_FWD2, FB_OP_GEMM_DGRAD2, FB_OP_GEMM_WGRAD, FB_OP_GEMM_DGRAD13,
  FB_OP_REQUANT, FB_OP_ADAMW,
  FB_OP_S2F6_Q, FB_OP_S2F6_DQ, /* the combine payload's kernels on their own (tests, unfused paths) */
  FB_OP_SWIGLU_FWD, FB_OP_SWIGLU_BWD, /* SwiGLU on its own (tests, unfused paths; the GEMMs fuse it) */
  FB_OP_BCOPY,      /* sm_90a: the exact BF16 copy (K-permuted) of an NVFP4/MXFP8 GEMM operand (q: its format) */
  FB_OP_COMBINE_BWD, /* the combine's backward: dY rows in expert order and dL/dtopk_w (q: the combine payload) */
  FB_OP_DENSE       /* the GPU-resident train step's non-expert pieces (templates/dense.cuh; not a plan kernel) */
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
  int out_bf16;    /* unpermute, gemm: BF16 (round to nearest even) output instead of FP32 */
  fb_qspec act;    /* gemm: how the A operand (activations, or dY / dH in the backward) is quantized */
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

/* ---- kernel names and specs (gen/kname.c, gen/specs.c) --------------------------------------------------------- */
/* The one naming authority: the canonical name of spec k for arch ("sm_90a", ...), <body>_<archtag> (gen/kname.c
 * gives the grammar). The name carries every field the generated source depends on. */
fb_status fb_kernel_name(const fb_kernel_spec *k, const char *arch, char *buf, size_t n);
/* k->name = fb_kernel_name(k, arch). */
fb_status fb_kernel_spec_name(fb_kernel_spec *k, const char *arch);
/* The inverse: a kernel or variant name -> the fields its name carries (the rest zero), the arch ("sm_90a") and, in
 * *tail (may be NULL), where the variant's tag starts in name. Only canonical names parse. */
fb_status fb_kernel_parse(const char *name, fb_kernel_spec *k, char *arch, size_t archlen, size_t *tail);
/* sm_90a -> sm90a */
fb_status fb_arch_tag(const char *arch, char *buf, size_t n);

/* Specs from what they compute (fields and tune family; role: for people, may be NULL). */
fb_kernel_spec fb_spec_amax(fb_gran outer, int in_f32, const char *role);
fb_kernel_spec fb_spec_quant(const fb_qspec *q, int col, int in_f32, const char *role);
fb_kernel_spec fb_spec_requant(const fb_qspec *dst, const fb_qspec *src, const char *role);
fb_kernel_spec fb_spec_bcopy(fb_format f, const char *role);
fb_kernel_spec fb_spec_permute(const fb_qspec *payload, const char *role);
fb_kernel_spec fb_spec_unpermute(const fb_qspec *payload, int out_bf16, const char *role);
fb_kernel_spec fb_spec_combine_bwd(const fb_qspec *payload, const char *role);
fb_kernel_spec fb_spec_swiglu(int bwd, const char *role);
fb_kernel_spec fb_spec_tcopy(fb_format src, fb_gran outer, int in_f32, int trans, int rht, int scale, int out_bf16, const char *role);
fb_kernel_spec fb_spec_gemm(fb_op op, const fb_qspec *out, const fb_qspec *b, const fb_qspec *a, const char *role);
fb_kernel_spec fb_spec_router(int bwd, int top_k, int experts, const char *role);
fb_kernel_spec fb_spec_adamw(const fb_qspec *w, const char *role);
fb_kernel_spec fb_spec_dense(const char *role);
/* The GPU expert layer's GEMM of a layer precision: which 0 w13 fwd, 1 w2 fwd, 2 dgrad, 3 wgrad. */
fb_kernel_spec fb_spec_gpu_gemm(const fb_layer_prec *p, int which);

/* A kernel the GPU expert layer runs, with the GEMM shape its variant must divide (gemm 0: any variant; mode 0: N and
 * K fixed, mode 1 (wgrad): M and N fixed, K the rows per expert). */
typedef struct {
  fb_kernel_spec k;
  int gemm, mode, M, N, K;
} fb_layer_kernel;
/* Every kernel runtime/experts_gpu.c runs for layer precision p of model m (sm_90a), unnamed; the plan lists them. */
fb_status fb_gpu_layer_kernels(const fb_layer_prec *p, const fb_model *m, fb_layer_kernel *out, int cap, int *n);
/* The GPU-resident train step's own kernels (runtime/train_gpu.c): dense.cuh, the router, AdamW with BF16 copies. */
fb_status fb_gpu_step_kernels(const fb_model *m, fb_kernel_spec *out, int cap, int *n);
#define FB_GPU_LAYER_MAXK 48

/* ---- the generator (gen/gen.c) and NVRTC (gen/nvrtc.c) ----------------------------------------- */
/* One tile variant of a kernel spec: the values of the tune parameters its template uses. */
typedef struct {
  char name[192];     /* spec name + variant tag: the extern "C" kernel name and program name */
  char tmpl[32];      /* template file */
  int nparams;
  char param[FB_TUNE_MAXPARAMS][16];
  int value[FB_TUNE_MAXPARAMS];
} fb_variant;

/* Whether spec k's template has one fixed variant and no tune family (dense.cuh: FB_DENSE_THREADS threads); then
 * fb_gen_variants takes fam NULL. */
int fb_gen_fixed(const fb_kernel_spec *k);
#define FB_DENSE_THREADS 256
/* The template for spec k, or NULL with the reason in *why. */
const char *fb_gen_template(const fb_kernel_spec *k, const char **why);
/* The distinct variants of k under tune family fam (values no template uses are dropped and the
 * duplicates merged); variants a hardware or template limit rules out are skipped, and counted in
 * *pruned with the first reason in why (may be NULL). *out is malloc'd. */
fb_status fb_gen_variants(const fb_kernel_spec *k, const fb_tune_family *fam, fb_variant **out, int *n,
                          int *pruned, char *why, size_t whylen);
/* The CUDA source of variant v: the generated header (docs/style.md "Generated source"), the parameters as #defines, then the
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
  int ptxas;  /* 1: the log holds ptxas's report (a compile); 0: none, the cubin came from the CUDA driver's
                 compute cache, which NVRTC (CUDA 12.9+) consults where a driver is loaded (CUDA_CACHE_DISABLE=1
                 turns it off), so ms is a cache lookup, not a compile */
} fb_cubin;
/* Compile src for arch (sm_90a, sm_100a, sm_103a) with the templates as in-memory headers. On failure
 * FB_ENVRTC with the kernel name and NVRTC's log in fb_errmsg(). */
fb_status fb_nvrtc_compile(const char *name, const char *src, const char *arch, fb_cubin *out);
void fb_cubin_free(fb_cubin *c);
/* The NVRTC options every kernel is compiled with (besides the arch), as one string. */
const char *fb_nvrtc_options(void);

/* ---- the LMDB kernel cache (cache/cache.c) ------------------------------------------------------ */
typedef struct fb_cache fb_cache;
/* Open (creating) the cache environment in dir: a local disk, not a network file system. */
fb_status fb_cache_open(const char *dir, fb_cache **out);
void fb_cache_close(fb_cache *c);
/* The content address of a compiled kernel: sha256 of its source, arch, NVRTC version and options. */
void fb_cache_kernel_key(const char *src, const char *arch, uint8_t key[32]);
fb_status fb_cache_put_kernel(fb_cache *c, const uint8_t key[32], const char *src, const void *cubin, size_t size);
/* FB_ENOTFOUND when absent; an entry of another format or failing its checksum is reported, not loaded. */
fb_status fb_cache_get_kernel(fb_cache *c, const uint8_t key[32], void **cubin, size_t *size);
/* fb_cache_open with an initial map size in bytes (0: 256 MiB); the map doubles whenever it is full. */
fb_status fb_cache_open_ex(const char *dir, size_t mapsize, fb_cache **out);
const char *fb_cache_dir(const fb_cache *c);
size_t fb_cache_mapsize(fb_cache *c);
/* $FOURBIT_CACHE, else ~/.cache/fourbit, into buf. */
const char *fb_cache_default_dir(char *buf, size_t n);

/* What winners are keyed by: the device (GPU name, compute capability, SMs, memory, driver) and the
 * toolchain (NVRTC and fourbit versions). */
typedef struct {
  char gpu[96];
  int cc_major, cc_minor, sm_count, driver_version;
  unsigned long long mem_bytes;
  int nvrtc_major, nvrtc_minor;
  char fourbit[16];
} fb_fingerprint;
void fb_fingerprint_text(const fb_fingerprint *fp, char *buf, size_t n); /* for people, and what the id hashes */
void fb_fingerprint_id(const fb_fingerprint *fp, char id[17]);            /* 16 hex digits */
void fb_fingerprint_toolchain(fb_fingerprint *fp);                        /* fill the NVRTC and fourbit fields */

/* Shape buckets: the tokens per rank rounded up to a power of two. */
long long fb_cache_bucket(long long shape);

/* The tuned variant of a kernel spec for one fingerprint and shape bucket. */
typedef struct {
  fb_fingerprint fp;
  char spec[128];            /* kernel spec name (the plan's) */
  long long bucket, shape;   /* bucket, and the tokens per rank it was measured at */
  char arch[16];
  char variant[192];         /* the winner's full name */
  uint8_t kernel[32];        /* its cubin's key in `kernels` */
  double median_ms, spread_ms;
  int runs;
  char runner_up[192];
  double runner_up_ms;
  char default_variant[192]; /* what runs untuned, and its time */
  double default_ms;
  int candidates, failed;
  char recipe[64], recipe_sha[65];
  long long date;            /* unix seconds */
  char host[64];
} fb_winner;
void fb_winner_stamp(fb_winner *w); /* date and host of now, here */

typedef enum { FB_TRIAL_OK = 0, FB_TRIAL_COMPILE, FB_TRIAL_WRONG, FB_TRIAL_FAULT, FB_TRIAL_TIMEOUT } fb_trial_status;
const char *fb_trial_status_name(fb_trial_status s);
/* One measured (or failed) candidate: failures are kept so that a later sweep does not retry them. */
typedef struct {
  fb_fingerprint fp;
  char spec[128];
  long long bucket, shape;
  char variant[192];
  fb_trial_status status;
  double median_ms, spread_ms;
  int runs;
  long wrong;
  char message[256];
  char recipe[64];
  long long date;
} fb_trial;

fb_status fb_cache_put_winner(fb_cache *c, const fb_winner *w);
/* The winner of spec for fp at shape's bucket, else the nearest bucket (log distance; ties to the larger).
 * note (may be NULL) says which: exact, nearest, or why none (bad entries skipped; winners that exist only for
 * other fingerprints, ignored). FB_ENOTFOUND when none is usable. Bad and foreign entries are never loaded. */
fb_status fb_cache_get_winner(fb_cache *c, const fb_fingerprint *fp, const char *spec, long long shape, fb_winner *out,
                              char *note, size_t notelen);
fb_status fb_cache_put_trial(fb_cache *c, const fb_trial *t);
fb_status fb_cache_get_trial(fb_cache *c, const fb_fingerprint *fp, const char *spec, long long bucket, const char *variant,
                             fb_trial *out);

typedef enum { FB_DB_KERNELS = 0, FB_DB_WINNERS = 1, FB_DB_TRIALS = 2 } fb_cache_db;
const char *fb_cache_db_name(fb_cache_db db);
typedef struct {
  fb_cache_db db;
  const char *key;          /* printable: hex for kernels */
  size_t size;              /* value bytes */
  const char *why;          /* NULL when good, else what is wrong (format, checksum, foreign key) */
  size_t cubin_size;        /* kernels */
  const fb_winner *winner;  /* winners, when good */
  const fb_trial *trial;    /* trials, when good */
} fb_cache_entry;
/* Return nonzero to stop. Pointers are valid during the call only. */
typedef int (*fb_cache_visit)(const fb_cache_entry *e, void *arg);
fb_status fb_cache_iterate(fb_cache *c, fb_cache_db db, fb_cache_visit fn, void *arg);
typedef struct {
  long entries[3], bad[3]; /* by fb_cache_db */
} fb_cache_counts;
/* Every entry checked (format, checksum, key against value; a winner's cubin present and good); bad ones go
 * to fn (may be NULL). */
fb_status fb_cache_verify(fb_cache *c, fb_cache_counts *n, fb_cache_visit bad, void *arg);

/* Export: one buffer (FBX1, versioned, sha256 at the end) of the good entries; with a filter, the winners and
 * trials whose fingerprint (id prefix or text substring) and recipe (name or sha prefix) match, and the
 * cubins those winners use. *data is malloc'd. */
typedef struct {
  const char *fingerprint, *recipe; /* NULL or "": any */
} fb_cache_filter;
fb_status fb_cache_export(fb_cache *c, const fb_cache_filter *f, void **data, size_t *size, fb_cache_counts *n);
/* Import (merge) an export: the whole file is checked first (FB_EINVAL, nothing written, if any of it is bad),
 * then written in one transaction. A winner already here under the same key: the faster median stays, and
 * note() says which. Trials and good cubins already here stay. */
typedef void (*fb_cache_note)(const char *msg, void *arg);
fb_status fb_cache_import(fb_cache *c, const void *data, size_t size, const char *name, fb_cache_note note, void *arg,
                          fb_cache_counts *added, int *kept_local);
/* Drop the cubins no good winner uses (dry_run: only count). */
fb_status fb_cache_gc(fb_cache *c, long *dropped, long *kept, int dry_run);

/* ---- hashing (runtime/sha256.c) -------------------------------------------------------------- */
void fb_sha256(const void *data, size_t len, uint8_t out[32]);
void fb_sha256_hex(const void *data, size_t len, char out[65]);

/* ---- CUDA driver, loaded with dlopen ---------------------------------------------------------- */
/* FB_OK if libcuda.so.1 loaded and cuInit succeeded; otherwise FB_ECUDA with the reason. */
fb_status fb_cuda_load(void);

/* ---- other ops of the train step (runtime/ops.c) ---- */
/* CPU references of the router, permute, unpermute (combine), SwiGLU and AdamW kernels; the GPU templates
 * router.cuh, permute.cuh, unpermute.cuh, swiglu.cuh and adamw.cuh match them bit for bit. BF16 values are
 * uint16_t bit patterns. */
uint16_t fb_bf16_from_f32(float x);   /* round to nearest even; NaN stays NaN (quiet bit set) */
float fb_bf16_to_f32(uint16_t h);

/* Router, per token t (logits tokens x experts, row-major):
 *   m = max_j l_j (NaN ignored); e_j = fbm_expf(l_j - m);
 *   s = the sum of a warp: partial_L = e_L + e_{L+32} + ... (L = 0..31, increasing j, from 0.0f), then
 *       partial_L = partial_L + partial_{L^o} for o = 16, 8, 4, 2, 1; s = partial_0;
 *   p_j = e_j / s; top-k by p descending, ties to the lower index (NaN ranks last);
 *   w_i = p_{sel_i} / S, S = p_{sel_0} + p_{sel_1} + ... in rank order from 0.0f.
 * 1 <= top_k <= min(experts, 64). probs (tokens x experts) may be NULL; topk_idx, topk_w: tokens x top_k. */
fb_status fb_router_ref(const float *logits, size_t tokens, int experts, int top_k, float *probs,
                        int32_t *topk_idx, float *topk_w);

/* Permute (dispatch). Entry i = t*top_k + slot with expert e = topk_idx[i] goes to row
 * offsets[e] + (entries of expert e before i), offsets[0] = 0, offsets[e+1] = offsets[e] + roundup(counts[e],
 * tile). topk_idx -1 drops the entry (row_of -1); other values outside [0, experts) are FB_EINVAL.
 * token_of must hold fb_permute_max_rows() entries: token of each row < *rows_total, -1 on padding rows. */
size_t fb_permute_max_rows(size_t tokens, int top_k, int experts, int tile);
fb_status fb_permute_ref(const int32_t *topk_idx, size_t tokens, int top_k, int experts, int tile, int32_t *counts,
                         long long *offsets, int32_t *row_of, int32_t *token_of, size_t *rows_total);
/* Bytes per row of a payload's planes: [0] BF16 values or codes, [1] block scales, [2] the per-row FP32
 * outer scale. BF16: 2*cols; NVFP4: cols/2, cols/16 E4M3, 4 if per_token_outer; MXFP8: cols, cols/32 E8M0. */
fb_status fb_payload_planes(fb_format f, int per_token_outer, size_t cols, size_t bytes[3]);
/* out plane p, row r = in plane p, row token_of[r] (tokens rows), or zero bytes where token_of[r] < 0.
 * Planes with bytes[p] == 0 are skipped (their pointers may be NULL). */
fb_status fb_permute_gather_ref(const void *const in[3], const size_t bytes[3], size_t tokens, const int32_t *token_of,
                                size_t rows, void *const out[3]);

/* Unpermute (combine): out[t][j] = acc, acc = fmaf(w[t,slot], y[row_of[t,slot]][j], acc) over slot = 0..k-1
 * in order from 0.0f; w = 1 where topk_w is NULL; entries with row_of < 0 are skipped. y (y_rows x cols):
 * FB_FMT_BF16 (uint16_t), or FB_FMT_S2F6 (int8 codes, y_e8m0 per 32: y = (q / 64.0f) * e8m0) summed in the
 * rotated domain, then, with rht, fb_rht32_inverse(signs) once per 32-block. out (FP32) and out_bf16
 * (RNE of the same value) may each be NULL, not both. */
fb_status fb_unpermute_ref(const void *y, const uint8_t *y_e8m0, size_t y_rows, fb_format f, int rht, uint32_t signs,
                           const int32_t *row_of, const float *topk_w, size_t tokens, int top_k, size_t cols,
                           float *out, uint16_t *out_bf16);

/* The combine's backward (templates/combine_bwd.cuh): for every entry (t, slot) with r = row_of[t,slot] >= 0,
 * dY[r][j] = bf16(w[t,slot] * bf16(dy[t][j])) (BF16 round to nearest even, both), and dtopk_w[t,slot] =
 * sum over j in order of (double)dy[t][j] * (double)Yhat[r][j], in double, rounded to float; 0 where r < 0.
 * Yhat: the y payload as fb_unpermute_ref reads it, one row at a time (S2F6: (q / 64.0f) * e8m0, then with rht
 * fb_rht32_inverse per 32-block, exactly fb_s2f6_dequantize; BF16 rows). dY rows no entry names are untouched. */
fb_status fb_combine_bwd_ref(const void *y, const uint8_t *y_e8m0, size_t y_rows, fb_format f, int rht, uint32_t signs,
                             const int32_t *row_of, const float *topk_w, size_t tokens, int top_k, size_t cols,
                             const float *dy, uint16_t *dY, float *dtopk_w);

/* SwiGLU, H rows x 2f BF16 with g = H[:, :f], u = H[:, f:]. Forward: A = bf16(fbm_siluf(g) * u).
 * Backward with dA (rows x f): s = fbm_sigmoidf(g); du = dA * (g * s); ds = s * (1 + g * (1 - s));
 * dg = (dA * u) * ds; dH = [bf16(dg) | bf16(du)] (rows x 2f). */
fb_status fb_swiglu_fwd_ref(const uint16_t *h, size_t rows, size_t f, uint16_t *a);
fb_status fb_swiglu_bwd_ref(const uint16_t *h, const uint16_t *da, size_t rows, size_t f, uint16_t *dh);

/* The copy templates/tcopy.cuh makes (FB_OP_TCOPY): x (rows x cols) is BF16 (src FB_FMT_BF16, in_f32 0), FP32 (in_f32 1)
 * or NVFP4 (codes, sf E4M3 per 16 along the rows, s_dec one FP32 per tensor or, row_outer, per row; an element is
 * (fb_e2m1_decode(q) * fb_e4m3_decode(sf)) * s_dec as fb_nvfp4_dequantize). trans: out is cols x rows (out[c][r] =
 * x[r][c]), else rows x cols. rht 16: each aligned 16 outputs of an out row, v, become the unnormalized RHT-16 of v
 * (v_j negated where bit j of signs is set, then the butterflies h = 1, 2, 4, 8: for j with bit h clear, (v_j, v_j+h)
 * = (v_j + v_j+h, v_j - v_j+h) in FP32). scale n > 0 (FP32 sources): every value v = (v * (sa * sb)) * (1.0f / n),
 * sa = *scale_a and sb = *scale_b (NULL: 1) — the wgrad GEMM's outer scales and RHT divisor. Output BF16 (out_bf16,
 * fb_bf16_from_f32) or FP32. The out row length must be a multiple of 16. */
fb_status fb_tcopy_ref(const void *x, const uint8_t *sf, const float *s_dec, fb_format src, int in_f32, int row_outer,
                       size_t rows, size_t cols, int trans, int rht, uint32_t signs, int scale, const float *scale_a,
                       const float *scale_b, int out_bf16, void *out);

/* AdamW, per element in this fp32 order: g = grad * gscale; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*(g*g);
 * mhat = m / bc1; vhat = v / bc2; w = w - lr * (mhat / (sqrtf(vhat) + eps) + wd * w). */
typedef struct {
  float lr, b1, b2, eps, wd;
  float bc1, bc2; /* bias corrections 1 - b1^t, 1 - b2^t */
  float gscale;   /* gradient scale (loss scale, clipping) */
} fb_adamw_hparams;

/* The next step's forward weights, written from the new masters (rows = experts x N, cols = K). */
typedef struct {
  fb_qspec q;                  /* bf16; mxfp8 (row-wise, E4M3); nvfp4 with tensor or expert outer (two_d) */
  int experts;                 /* divides rows; nvfp4 expert outer: one S_dec per expert */
  uint32_t seed, stream, step; /* q.rounding == FB_ROUND_SR */
  void *codes;                 /* bf16: rows*cols uint16_t; mxfp8: rows*cols E4M3; nvfp4: rows*cols/2 */
  uint8_t *scales;             /* mxfp8: rows*cols/32 E8M0; nvfp4: rows*cols/16 E4M3 */
  float *s_dec;                /* nvfp4: 1 (tensor) or experts */
  float *amax;                 /* nvfp4, may be NULL: max |w| (NaN ignored) per tensor [1] or expert
                                  [experts], what the GPU's AdamW pass leaves for the quantizer */
} fb_adamw_next;

/* w, m, v updated in place (rows x cols); next may be NULL (masters only). */
fb_status fb_adamw_ref(float *w, float *m, float *v, const float *grad, size_t rows, size_t cols,
                       const fb_adamw_hparams *h, const fb_adamw_next *next);

#ifdef __cplusplus
}
#endif
#endif
