/* fourbit/plan.h — the plan (gen/plan.c): a recipe resolved per layer for an arch, the kernel specs it needs (each
 * with its canonical name), its memory, and its JSON and text forms. */
#ifndef FOURBIT_PLAN_H
#define FOURBIT_PLAN_H

#include "fourbit/base.h"
#include "fourbit/recipe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the plan (gen/plan.c) ------------------------------------------------------------------ */
/* A unique kernel the plan needs. name is its canonical identity (docs/style.md) without the variant's
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
  int col;         /* quant/requant: blocks down the columns, stored transposed; quant 2 ("_both"): that and, in the
                      same pass, blocks along the rows (MXFP8 of a BF16 gradient: mx_col.cuh FB_BOTH) */
  int in_f32;      /* the input is FP32 (master weights), not BF16 */
  int top_k, experts;
  char family[16]; /* tune family: gemm, quant, ... */
  char role[96];   /* what it computes, for people */
  int first_layer, last_layer, nlayers;
  int nvariants;   /* of its family after the recipe's keep() */
  int out_bf16;    /* unpermute, gemm: BF16 (round to nearest even) output instead of FP32 */
  fb_qspec act;    /* gemm: how the A operand (activations, or dY / dH in the backward) is quantized */
  int acc_exact;   /* gemm: the recipe's gemm.accumulate = "exact": BF16 products only (the generator prunes the FP8
                      tensor-core variants; the source and the name do not depend on it) */
} fb_kernel_spec;

typedef struct {
  double weights_fwd, weights_bwd_copy, masters, grads, optimizer, saved_act; /* bytes per rank */
  double by_format[4]; /* quantized forward weights + saved activations, by fb_format */
} fb_plan_memory;

typedef struct fb_plan {
  const fb_recipe *recipe;
  char arch[16];         /* one of FB_ARCHS */
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
/* The archs fourbit generates for, as one comma-separated list (FB_ARCHS), and whether arch is one of them. The GEMM
 * families each runs (fb_arch_families): wgmma on sm_90a, mma.sync (the portable family) on all; the tcgen05 family of
 * sm_100a / sm_103a is not written yet (issue 19). */
#define FB_ARCHS "sm_89, sm_90a, sm_100a, sm_103a, sm_120a"
int fb_arch_known(const char *arch);
/* The arch of a GPU of compute capability major.minor, NULL for one fourbit does not generate for. */
const char *fb_arch_of_cc(int major, int minor);
const char *fb_arch_families(const char *arch);
fb_status fb_arch_tag(const char *arch, char *buf, size_t n);

/* Specs from what they compute (fields and tune family; role: for people, may be NULL). */
fb_kernel_spec fb_spec_amax(fb_gran outer, int in_f32, const char *role);
fb_kernel_spec fb_spec_quant(const fb_qspec *q, int col, int in_f32, const char *role);
fb_kernel_spec fb_spec_requant(const fb_qspec *dst, const fb_qspec *src, const char *role);
/* fb_spec_requant's MXFP8 requantization written as the GEMMs' exact BF16 copy of it (K-permuted, optionally regrouped
 * per expert): the requantize-transpose, regroup and bcopy of a B operand in one pass (templates/mx_col.cuh FB_KBF16) */
fb_kernel_spec fb_spec_requant_kbf16(const fb_qspec *dst, const fb_qspec *src, const char *role);
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

#ifdef __cplusplus
}
#endif
#endif
