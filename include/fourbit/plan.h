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
/* A unique kernel the plan needs. name is its canonical identity (STYLE.md) without the variant's
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

#ifdef __cplusplus
}
#endif
#endif
