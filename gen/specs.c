/* specs.c — kernel specs from what they compute: one constructor per op, used by the plan (gen/plan.c), the GPU
 * expert layer (runtime/experts_gpu.c) and the GPU-resident train step (runtime/train_gpu.c) alike, and the list of
 * the kernels those two run for a layer precision, which the plan includes so that `fourbit tune` tunes every kernel
 * the runtime launches. A constructor fills the fields and the tune family; the name is given by fb_kernel_name()
 * where the spec is used (plan.c's add, the GPU layer's kernel table), never written by hand.
 *
 * Entry points: fb_spec_*(), fb_gpu_layer_kernels(), fb_gpu_step_kernels(). */
#include "fb_error.h"
#include "fourbit.h"

#include <stdio.h>
#include <string.h>

static fb_kernel_spec spec(fb_op op, const char *family, const char *role) {
  fb_kernel_spec k;
  memset(&k, 0, sizeof k);
  k.op = op;
  snprintf(k.family, sizeof k.family, "%s", family);
  snprintf(k.role, sizeof k.role, "%s", role ? role : "");
  return k;
}

fb_kernel_spec fb_spec_amax(fb_gran outer, int in_f32, const char *role) {
  fb_kernel_spec k = spec(FB_OP_AMAX, "amax", role);
  k.q.outer = outer, k.in_f32 = in_f32;
  return k;
}

fb_kernel_spec fb_spec_quant(const fb_qspec *q, int col, int in_f32, const char *role) {
  fb_kernel_spec k = spec(FB_OP_QUANT, "quant", role);
  k.q = *q, k.col = col, k.in_f32 = in_f32;
  return k;
}

fb_kernel_spec fb_spec_requant(const fb_qspec *dst, const fb_qspec *src, const char *role) {
  fb_kernel_spec k = spec(FB_OP_REQUANT, "requant", role);
  k.q = *dst, k.col = 1;
  k.src.format = src->format, k.src.outer = src->outer, k.src.four_over_six = src->four_over_six, k.src.two_d = src->two_d;
  if (src->format != FB_FMT_NVFP4) k.src.outer = FB_GRAN_TENSOR, k.src.four_over_six = k.src.two_d = 0;
  return k;
}

fb_kernel_spec fb_spec_requant_kbf16(const fb_qspec *dst, const fb_qspec *src, const char *role) {
  fb_kernel_spec k = fb_spec_requant(dst, src, role);
  k.out_bf16 = 1;
  return k;
}

fb_kernel_spec fb_spec_bcopy(fb_format f, const char *role) {
  fb_kernel_spec k = spec(FB_OP_BCOPY, "quant", role);
  k.q.format = f;
  return k;
}

fb_kernel_spec fb_spec_permute(const fb_qspec *payload, const char *role) {
  fb_kernel_spec k = spec(FB_OP_PERMUTE, "permute", role);
  k.q.format = payload->format, k.q.outer = payload->format == FB_FMT_NVFP4 ? payload->outer : FB_GRAN_TENSOR;
  return k;
}

fb_kernel_spec fb_spec_unpermute(const fb_qspec *payload, int out_bf16, const char *role) {
  fb_kernel_spec k = spec(FB_OP_UNPERMUTE, "combine", role);
  k.q.format = payload->format, k.q.rht = payload->format == FB_FMT_S2F6 ? payload->rht : 0;
  k.out_bf16 = out_bf16;
  return k;
}

fb_kernel_spec fb_spec_combine_bwd(const fb_qspec *payload, const char *role) {
  fb_kernel_spec k = spec(FB_OP_COMBINE_BWD, "combine", role);
  k.q.format = payload->format, k.q.rht = payload->format == FB_FMT_S2F6 ? payload->rht : 0;
  return k;
}

fb_kernel_spec fb_spec_swiglu(int bwd, const char *role) { return spec(bwd ? FB_OP_SWIGLU_BWD : FB_OP_SWIGLU_FWD, "swiglu", role); }

/* tcopy.cuh (fb_tcopy_ref): a src (BF16, NVFP4 with a tensor or row outer scale, or MXFP8 with E4M3 codes) or FP32
 * (in_f32) matrix, transposed (trans), RHT-16 along the out rows (rht), scaled by two outer scales and 1/scale (scale > 0;
 * carried in act.rht), BF16 or FP32 out. */
fb_kernel_spec fb_spec_tcopy(fb_format src, fb_gran outer, int in_f32, int trans, int rht, int scale, int out_bf16, const char *role) {
  fb_kernel_spec k = spec(FB_OP_TCOPY, "quant", role);
  k.src.format = in_f32 ? FB_FMT_BF16 : src, k.src.outer = src == FB_FMT_NVFP4 && !in_f32 ? outer : FB_GRAN_TENSOR;
  k.in_f32 = in_f32, k.col = trans, k.q.rht = rht, k.act.rht = scale, k.out_bf16 = out_bf16;
  return k;
}

/* A grouped GEMM: out (fwd2: the combine payload), b (the B operand: weights, or the saved operand of the backward),
 * a (the A operand's quantization). fwd and dgrad write BF16, wgrad FP32. */
fb_kernel_spec fb_spec_gemm(fb_op op, const fb_qspec *out, const fb_qspec *b, const fb_qspec *a, const char *role) {
  fb_kernel_spec k = spec(op, "gemm", role);
  if (out) k.q = *out;
  k.src = *b, k.act = *a;
  k.out_bf16 = op != FB_OP_GEMM_WGRAD;
  return k;
}

fb_kernel_spec fb_spec_router(int bwd, int top_k, int experts, const char *role) {
  fb_kernel_spec k = spec(bwd ? FB_OP_ROUTER_BWD : FB_OP_ROUTER, "router", role);
  k.top_k = top_k, k.experts = experts;
  return k;
}

fb_kernel_spec fb_spec_adamw(const fb_qspec *w, const char *role) {
  fb_kernel_spec k = spec(FB_OP_ADAMW, "adamw", role);
  if (w) k.q = *w;
  if (k.q.format == FB_FMT_BF16) memset(&k.q, 0, sizeof k.q);
  return k;
}

fb_kernel_spec fb_spec_dense(const char *role) { return spec(FB_OP_DENSE, "dense", role); }

/* ---- what the GPU expert layer runs ---------------------------------------------------------------------------- */
typedef struct {
  fb_layer_kernel *out;
  int cap, n;
} klist;

static fb_status push(klist *l, fb_kernel_spec k, int gemm, int mode, int M, int N, int K) {
  if (l->n == l->cap) return FB_ERR(FB_EINVAL, "gpu layer kernels: more than %d", l->cap);
  fb_layer_kernel *e = &l->out[l->n++];
  memset(e, 0, sizeof *e);
  e->k = k, e->gemm = gemm, e->mode = mode, e->M = M, e->N = N, e->K = K;
  return FB_OK;
}
#define PUSH(k) FB_TRY(push(l, (k), 0, 0, 0, 0, 0))

/* which: 0 w13 fwd (H and A, SwiGLU epilogue), 1 w2 fwd (the combine payload), 2 dgrad (BF16), 3 wgrad (FP32) */
fb_kernel_spec fb_spec_gpu_gemm(const fb_layer_prec *p, int which) {
  const fb_qspec *w = which < 2 ? &p->fwd_weight : &p->bwd_saved, *a = which < 2 ? &p->fwd_act : &p->bwd_grad;
  fb_kernel_spec k;
  switch (which) {
  case 0: k = fb_spec_gemm(FB_OP_GEMM_FWD13, &p->fwd_act, w, a, "w13 fwd H = X W13^T; epilogue SwiGLU -> A (BF16)"); break;
  case 1: k = fb_spec_gemm(FB_OP_GEMM_FWD2, &p->combine, w, a, "w2 fwd Y = A W2^T; epilogue: the combine payload"); break;
  case 2: k = fb_spec_gemm(FB_OP_GEMM_DGRAD13, NULL, w, a, "dgrad dA = dY W2, dX = dH W13 (BF16; SwiGLU backward apart)"); break;
  default: k = fb_spec_gemm(FB_OP_GEMM_WGRAD, NULL, w, a, "wgrad dW2 = dY^T A, dW13 = dH^T X (K = rows per expert)"); break;
  }
  k.acc_exact = p->gemm_exact;
  return k;
}

fb_status fb_gpu_layer_kernels(const fb_layer_prec *p, const fb_model *M, fb_layer_kernel *out, int cap, int *n) {
  klist lst = {out, cap, 0}, *l = &lst;
  *n = 0;
  int D = M->d_model, F = M->d_ff;
  fb_format FF = p->fwd_act.format, B = p->bwd_grad.format;
  fb_qspec bf = {0}, pq = {0}; /* the exchange's regathers: S2F6 combine rows (as MXFP8 bytes), dY and dX rows (BF16) */
  pq.outer = FB_GRAN_TOKEN;
  /* the layer's quantizers take no RHT (tcopy.cuh applies it before them) */
  fb_qspec act = p->fwd_act, grad = p->bwd_grad, wq = p->fwd_weight, sq = p->bwd_saved;
  act.rht = grad.rht = wq.rht = sq.rht = 0;
  /* dispatch: quantized tokens, or BF16 rows quantized on arrival */
  if (FF != FB_FMT_BF16) PUSH(fb_spec_quant(&act, 0, 0, "dispatch: quantize tokens (before sending, or on arrival)"));
  if (p->dispatch != FB_FMT_BF16) PUSH(fb_spec_permute(&p->fwd_act, "dispatch: rows sorted by expert, padded to the GEMM tile"));
  pq.format = FB_FMT_MXFP8;
  PUSH(fb_spec_permute(&pq, "exchange: the S2F6 combine rows regathered (as MXFP8 bytes)"));
  pq.format = FB_FMT_BF16;
  PUSH(fb_spec_permute(&pq, "BF16 rows gathered by expert (dispatch, dY, regathers)"));
  if (FF == FB_FMT_NVFP4 && p->fwd_act.outer == FB_GRAN_TENSOR)
    PUSH(fb_spec_amax(FB_GRAN_TENSOR, 0, "amax of the BF16 activations (per-tensor outer scale)"));
  /* weights, from the FP32 masters */
  if (FF == FB_FMT_BF16) {
    PUSH(fb_spec_tcopy(FB_FMT_BF16, FB_GRAN_TENSOR, 1, 0, 0, 0, 1, "weights: BF16 copy of the FP32 masters"));
  } else {
    PUSH(fb_spec_quant(&wq, 0, 1, "weights: quantize the FP32 masters"));
    PUSH(fb_spec_bcopy(p->fwd_weight.format, "weights: exact BF16 copy for the Hopper GEMM"));
  }
  if (p->fwd_weight.format == FB_FMT_NVFP4 && p->fwd_weight.outer != FB_GRAN_TOKEN)
    PUSH(fb_spec_amax(p->fwd_weight.outer == FB_GRAN_EXPERT ? FB_GRAN_EXPERT : FB_GRAN_TENSOR, 1,
                      "amax of the FP32 masters (the weights' outer scales)"));
  PUSH(fb_spec_swiglu(1, "SwiGLU backward: dH from dA and the saved H"));
  PUSH(fb_spec_unpermute(&p->combine, 1, "combine: dequantize, inverse RHT, router-weighted sum (BF16 out)"));
  PUSH(fb_spec_combine_bwd(&p->combine, "combine backward: dY rows by expert and d(router weights)"));
  PUSH(fb_spec_unpermute(&bf, 0, "dX summed back to tokens"));
  FB_TRY(push(l, fb_spec_gpu_gemm(p, 0), 1, 0, 0, 2 * F, D));
  FB_TRY(push(l, fb_spec_gpu_gemm(p, 1), 1, 0, 0, D, F));
  FB_TRY(push(l, fb_spec_gpu_gemm(p, 2), 1, 0, 0, F, D));
  FB_TRY(push(l, fb_spec_gpu_gemm(p, 2), 1, 0, 0, D, 2 * F));
  if (B == FB_FMT_MXFP8) {
    PUSH(fb_spec_quant(&grad, 0, 0, "quantize dY and dH along K of dgrad"));
    PUSH(fb_spec_quant(&grad, 1, 0, "quantize dY and dH down the rows for wgrad (transposed)"));
    PUSH(fb_spec_quant(&grad, 2, 0, "quantize dY and dH along K of dgrad and down the rows for wgrad in one pass (one read)"));
    PUSH(fb_spec_requant(&p->bwd_saved, &p->fwd_weight, "weights: dequantize, transpose, requantize for dgrad (FP8 GEMMs)"));
    PUSH(fb_spec_requant(&p->bwd_saved, &p->fwd_act, "saved X and A: dequantize, transpose, requantize for wgrad (FP8 GEMMs)"));
    if (FF != FB_FMT_BF16) {
      PUSH(fb_spec_requant_kbf16(&p->bwd_saved, &p->fwd_weight, "weights: requantized for dgrad as the BF16-product GEMMs' copy"));
      PUSH(fb_spec_requant_kbf16(&p->bwd_saved, &p->fwd_act, "saved X and A: requantized for wgrad as the BF16-product GEMMs' copy"));
    } else
      PUSH(fb_spec_bcopy(FB_FMT_MXFP8, "requantized W, X, A: exact BF16 copy for the Hopper GEMM"));
    FB_TRY(push(l, fb_spec_gpu_gemm(p, 3), 1, 1, D, F, 0));
    FB_TRY(push(l, fb_spec_gpu_gemm(p, 3), 1, 1, 2 * F, D, 0));
    *n = l->n;
    return FB_OK;
  }
  /* a BF16 or NVFP4 backward: the transposed copies of the saved tensors (and of dY, dH: BF16 rows), the row-wise and
     transposed quantizers, the BF16 wgrad GEMM and its scaling */
  int bo = B == FB_FMT_BF16, rht = p->wgrad_rht;
  fb_gran ao = FF == FB_FMT_NVFP4 ? p->fwd_act.outer : FB_GRAN_TENSOR;
  PUSH(fb_spec_tcopy(FF, FB_GRAN_TENSOR, 0, 1, 0, 0, bo, "W2^T, W13^T: the saved weights transposed"));
  PUSH(fb_spec_tcopy(FF, ao, 0, 1, rht, 0, bo, "A^T, X^T: the saved activations transposed (RHT-16 for wgrad)"));
  PUSH(fb_spec_tcopy(FB_FMT_BF16, FB_GRAN_TENSOR, 0, 1, rht, 0, bo, "dY^T, dH^T transposed (RHT-16 for wgrad)"));
  if (!bo) {
    PUSH(fb_spec_quant(&grad, 0, 0, "quantize dY and dH along K of dgrad"));
    PUSH(fb_spec_quant(&grad, 0, 1, "quantize the FP32 dY^T, dH^T for wgrad"));
    PUSH(fb_spec_quant(&sq, 0, 1, "quantize the FP32 W^T, A^T, X^T for the backward"));
    PUSH(fb_spec_amax(FB_GRAN_TENSOR, 0, "amax of BF16 dY, dH (per-tensor outer scale)"));
    PUSH(fb_spec_amax(FB_GRAN_TENSOR, 1, "amax of FP32 copies (per-tensor outer scale)"));
    PUSH(fb_spec_bcopy(FB_FMT_NVFP4, "backward operands: exact BF16 copy for the Hopper GEMM"));
  }
  if (!bo || rht) PUSH(fb_spec_tcopy(FB_FMT_BF16, FB_GRAN_TENSOR, 1, 0, 0, rht ? rht : 1, 0, "wgrad: the FP32 product scaled"));
  fb_layer_prec pb = *p;
  memset(&pb.bwd_grad, 0, sizeof pb.bwd_grad), memset(&pb.bwd_saved, 0, sizeof pb.bwd_saved);
  FB_TRY(push(l, fb_spec_gpu_gemm(&pb, 3), 1, 1, D, F, 0));
  FB_TRY(push(l, fb_spec_gpu_gemm(&pb, 3), 1, 1, 2 * F, D, 0));
  *n = l->n;
  return FB_OK;
}

fb_status fb_gpu_step_kernels(const fb_model *M, fb_kernel_spec *out, int cap, int *n) {
  *n = 0;
  if (cap < 3) return FB_ERR(FB_EINVAL, "gpu step kernels: room for 3");
  out[0] = fb_spec_dense("the GPU-resident step's non-expert pieces (templates/dense.cuh; one fixed variant)");
  out[1] = fb_spec_router(0, M->top_k, M->experts, "router: softmax over experts, top-k, weights");
  out[2] = fb_spec_adamw(NULL, "AdamW on the FP32 masters of the non-expert parameters (BF16 copies)");
  *n = 3;
  return FB_OK;
}
