/* model_experts.c — the expert layer on the CPU: the recipe's numerics op by op (NUMERICS.md, "The expert layer,
 * op by op"), through the numerics library (numerics.c) and the op references (ops.c). The CPU fb_expert_ops of
 * include/fourbit_train.h: the oracle of the GPU expert layer and the --device cpu path.
 *
 * Entry points: fb_expert_ops_cpu(), fb_moe_stream().
 *
 * Forward, per layer (R = the permuted rows, each expert's rows padded to a multiple of 32 with zero rows):
 *   dispatch  x (tokens x d) quantized as fwd.act says, per token, then gathered into expert order
 *             (fb_permute_ref, fb_permute_gather_ref): the payload w13 reads and the backward reuses.
 *   w13       H = X^ W13^^T per expert, FP32 product of the dequantized operands; H rounded to BF16;
 *             A = SwiGLU(H) (fb_swiglu_fwd_ref, BF16), quantized as fwd.act says (NVFP4 4/6 per token ...).
 *   w2        Y = A^ W2^^T; the combine payload: S2F6 with the RHT-32 (fb_s2f6_quantize) or BF16, combined
 *             with the router weights by fb_unpermute_ref (BF16 output).
 *   weights   the FP32 masters quantized as fwd.weight says (per-expert outer scales: one group per expert).
 * Backward (the straight-through estimator: every quantizer is the identity for the gradient):
 *   dY rows = w * dy (BF16, gathered by expert); dw = <dy, Y^> per (token, slot).
 *   w2 dgrad  dA = Q_grad(dY along d) Q_saved(W2 requantized: dequantize, transpose, along d)^T; SwiGLU
 *             backward (fb_swiglu_bwd_ref) -> dH (BF16).
 *   w2 wgrad  dW2 = Q_grad(dY down the rows)^T Q_saved(A requantized from its forward copy, down the rows).
 *   w13 dgrad dX = Q_grad(dH along 2f) Q_saved(W13 requantized along 2f)^T; dX summed back to tokens
 *             (fb_unpermute_ref, weights 1).
 *   w13 wgrad dW13 = Q_grad(dH down the rows)^T Q_saved(X requantized from the dispatched payload).
 *   NVFP4 -> MXFP8 and MXFP8 -> MXFP8 requantization go through fb_requant_*_to_mxfp8t; other pairs (BF16
 *   saved tensors, an NVFP4 backward) dequantize, transpose and quantize with the same library calls.
 *   wgrad_rht n: both wgrad operands get the unnormalized RHT-n (signs fb_rht_signs(seed, 0)) along the rows,
 *   and the product is divided by n (exact: a power of two); n = 32 is fb_rht32_forward, n = 16 the same
 *   butterfly on 16 points with the low 16 bits of the signs.
 *
 * Choices of this CPU path (the GPU must match them to agree bit for bit):
 *   - Row-wise quantizers of the dispatch run on the tokens before the gather; per-token and per-tensor outer
 *     scales give the same codes either way (the permuted rows are the token rows and zero rows), and SR
 *     element indices are those of the token layout.
 *   - Per-expert outer scales of backward operands: groups of rows for dY and dH along their K; not supported
 *     on transposed (wgrad, requantized) operands (FB_EINVAL): no recipe asks for it.
 *   - E5M2 MXFP8 elements are not implemented in the numerics library: FB_EINVAL.
 *   - An MXFP8 or NVFP4 combine payload (no shipped recipe) is dequantized per row and summed in slot order with
 *     fmaf, as fb_unpermute_ref sums BF16 rows; an RHT on it is refused. */
#include "fb_error.h"
#include "fb_math.h"
#include "model_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint32_t fb_moe_stream(int layer, int operand) { return ((uint32_t)layer << 8) | (uint32_t)operand; }

/* ---- a quantized matrix and its exact dequantization ------------------------------------------- */
enum { QM_F32 = 0, QM_NVFP4, QM_MXFP8 };
typedef struct {
  int kind;
  size_t rows, cols;
  uint8_t *codes, *sf; /* NVFP4: codes rows*cols/2, sf rows*cols/16; MXFP8: codes rows*cols, sf = E8M0 */
  float *s_dec;        /* NVFP4 outer scales */
  size_t *goff;        /* NVFP4 group offsets (o.group_offsets points here) */
  fb_nvfp4_opts o;
  float *deq;          /* rows x cols: what the GEMM reads */
} qmat;

static void qm_free(qmat *m) {
  free(m->codes), free(m->sf), free(m->s_dec), free(m->goff), free(m->deq);
  memset(m, 0, sizeof *m);
}

static fb_status nv_opts(const fb_qspec *q, const size_t *goff, size_t ng, uint32_t seed, uint32_t stream,
                         uint32_t step, qmat *m) {
  memset(&m->o, 0, sizeof m->o);
  m->o.outer = q->outer == FB_GRAN_TOKEN ? FB_OUTER_ROW : FB_OUTER_TENSOR;
  if (q->outer == FB_GRAN_EXPERT) {
    if (!goff) return FB_ERR(FB_EINVAL, "experts: per-expert outer scales on a transposed operand (not supported)");
    m->goff = malloc((ng + 1) * sizeof *m->goff);
    if (!m->goff) return FB_ERR(FB_ENOMEM, "experts: groups");
    memcpy(m->goff, goff, (ng + 1) * sizeof *goff);
    m->o.outer = FB_OUTER_GROUP, m->o.group_offsets = m->goff, m->o.ngroups = ng;
  }
  m->o.four_over_six = q->four_over_six, m->o.two_d = q->two_d, m->o.rounding = q->rounding;
  m->o.seed = seed, m->o.stream = stream, m->o.step = step;
  return FB_OK;
}

/* Quantize x (rows x cols, blocks along the rows) as q says and dequantize it into m->deq. exact or BF16:
 * m->deq = x (BF16-rounded unless exact). goff/ng: expert groups of rows for per-expert outer scales. */
static fb_status qm_quantize(qmat *m, const fb_qspec *q, int exact, const float *x, size_t rows, size_t cols,
                             const size_t *goff, size_t ng, uint32_t seed, uint32_t stream, uint32_t step) {
  memset(m, 0, sizeof *m);
  m->rows = rows, m->cols = cols;
  m->deq = malloc(rows * cols * sizeof *m->deq);
  if (!m->deq) return FB_ERR(FB_ENOMEM, "experts: %zu x %zu", rows, cols);
  if (exact || q->format == FB_FMT_BF16) {
    m->kind = QM_F32;
    memcpy(m->deq, x, rows * cols * sizeof *x);
    fbr_rb_n(m->deq, rows * cols, exact);
    return FB_OK;
  }
  if (q->format == FB_FMT_NVFP4) {
    m->kind = QM_NVFP4;
    FB_TRY(nv_opts(q, goff, ng, seed, stream, step, m));
    m->codes = malloc(rows * cols / 2), m->sf = malloc(rows * cols / 16);
    m->s_dec = malloc(fb_nvfp4_nouter(&m->o, rows) * sizeof *m->s_dec);
    if (!m->codes || !m->sf || !m->s_dec) return FB_ERR(FB_ENOMEM, "experts: nvfp4 %zu x %zu", rows, cols);
    FB_TRY(fb_nvfp4_quantize(x, rows, cols, &m->o, m->codes, m->sf, m->s_dec, NULL));
    return fb_nvfp4_dequantize(m->codes, m->sf, m->s_dec, rows, cols, &m->o, m->deq);
  }
  if (q->format == FB_FMT_MXFP8) {
    if (q->e5m2) return FB_ERR(FB_EINVAL, "experts: MXFP8 with E5M2 elements is not implemented on the CPU path");
    m->kind = QM_MXFP8;
    m->codes = malloc(rows * cols), m->sf = malloc(rows * cols / 32);
    if (!m->codes || !m->sf) return FB_ERR(FB_ENOMEM, "experts: mxfp8 %zu x %zu", rows, cols);
    fb_sr_opts r = {q->rounding, seed, stream, step};
    FB_TRY(fb_mxfp8_quantize(x, rows, cols, FB_MX_ROWWISE, &r, m->codes, m->sf));
    return fb_mxfp8_dequantize(m->codes, m->sf, rows, cols, m->deq);
  }
  return FB_ERR(FB_EINVAL, "experts: %s is not a GEMM operand format", fb_format_name(q->format));
}

/* The unnormalized RHT-n (n = 16 or 32) of every n-block along the rows of t (rows x cols). */
static void rht_rows(float *t, size_t rows, size_t cols, int n, uint32_t signs) {
  for (size_t i = 0; i < rows; ++i)
    for (size_t b = 0; b < cols / (size_t)n; ++b) {
      float *x = t + i * cols + b * (size_t)n, y[32];
      if (n == 32) {
        fb_rht32_forward(x, signs, y);
      } else {
        for (int j = 0; j < n; ++j) y[j] = (signs >> j & 1u) ? -x[j] : x[j];
        for (int h = 1; h < n; h <<= 1) /* stage k: pairs (i, i + 2^k) with bit k of i clear */
          for (int j = 0; j < n; ++j)
            if (!(j & h)) {
              float u = y[j], v = y[j + h];
              y[j] = u + v, y[j + h] = u - v;
            }
      }
      memcpy(x, y, (size_t)n * sizeof *x);
    }
}

/* x (rows x cols) -> transposed (cols x rows), RHT-rht along the new rows when rht, quantized as q along the
 * new rows, dequantized into *out (malloc'd). The wgrad operand of a gradient. */
static fb_status colwise(const fb_qspec *q, int exact, const float *x, size_t rows, size_t cols, int rht,
                         uint32_t seed, uint32_t stream, uint32_t step, float **out) {
  *out = NULL;
  float *t = malloc(rows * cols * sizeof *t);
  if (!t) return FB_ERR(FB_ENOMEM, "experts: %zu x %zu", rows, cols);
  fbr_transpose(x, rows, cols, cols, t);
  if (rht && !exact) rht_rows(t, cols, rows, rht, fb_rht_signs(seed, 0));
  qmat m;
  fb_status s = qm_quantize(&m, q, exact, t, cols, rows, NULL, 0, seed, stream, step);
  free(t);
  if (s == FB_OK) *out = m.deq, m.deq = NULL;
  qm_free(&m);
  return s;
}

/* A tensor the forward saved (src, rows x cols), requantized for the backward: dequantized, transposed
 * (cols x rows), RHT when rht, quantized as q along the new rows; dequantized into *out (malloc'd). */
static fb_status requant_t(const qmat *src, const fb_qspec *q, int exact, int rht, uint32_t seed, uint32_t stream,
                           uint32_t step, float **out) {
  *out = NULL;
  size_t rows = src->rows, cols = src->cols;
  if (!exact && !rht && q->format == FB_FMT_MXFP8 && !q->e5m2 && (src->kind == QM_NVFP4 || src->kind == QM_MXFP8)) {
    uint8_t *c = malloc(rows * cols), *e = malloc(rows * cols / 32);
    float *y = malloc(rows * cols * sizeof *y);
    fb_status s = (!c || !e || !y) ? FB_ERR(FB_ENOMEM, "experts: requant %zu x %zu", rows, cols) : FB_OK;
    fb_sr_opts r = {q->rounding, seed, stream, step};
    if (s == FB_OK)
      s = src->kind == QM_NVFP4
              ? fb_requant_nvfp4_to_mxfp8t(src->codes, src->sf, src->s_dec, rows, cols, &src->o, &r, c, e)
              : fb_requant_mxfp8_to_mxfp8t(src->codes, src->sf, rows, cols, &r, c, e);
    if (s == FB_OK) s = fb_mxfp8_dequantize(c, e, cols, rows, y);
    free(c), free(e);
    if (s == FB_OK) *out = y;
    else free(y);
    return s;
  }
  return colwise(q, exact, src->deq, rows, cols, rht, seed, stream, step, out);
}

/* ---- saved state --------------------------------------------------------------------------------- */
typedef struct {
  size_t R;
  int32_t *counts, *row_of, *token_of;
  long long *offsets;
  size_t *eoff; /* offsets as size_t: expert row groups */
  float *topk_w;
  qmat X, W13, W2, A;
  float *H, *yhat;
} saved_t;

static void saved_free(saved_t *s) {
  if (!s) return;
  free(s->counts), free(s->row_of), free(s->token_of), free(s->offsets), free(s->eoff), free(s->topk_w);
  qm_free(&s->X), qm_free(&s->W13), qm_free(&s->W2), qm_free(&s->A);
  free(s->H), free(s->yhat);
  free(s);
}

static void cpu_release(void *ctx, fb_moe_layer *L) {
  (void)ctx;
  saved_free(L->saved);
  L->saved = NULL;
}

static uint16_t *to_bf16(const float *x, size_t n) {
  uint16_t *h = malloc(n * sizeof *h);
  if (h)
    for (size_t i = 0; i < n; ++i) h[i] = fb_bf16_from_f32(x[i]);
  return h;
}

/* The dispatch: quantize the tokens, gather the payload planes into expert order, dequantize. */
static fb_status dispatch(fb_moe_layer *L, saved_t *s, const float *x) {
  size_t T = (size_t)L->tokens, D = (size_t)L->d_model, R = s->R;
  qmat tok;
  fb_status rc = qm_quantize(&tok, &L->prec->fwd_act, L->exact, x, T, D, NULL, 0, L->seed,
                             fb_moe_stream(L->layer, FB_MOE_OP_X), L->step);
  if (rc != FB_OK) { qm_free(&tok); return rc; }
  qmat *X = &s->X;
  memset(X, 0, sizeof *X);
  X->kind = tok.kind, X->rows = R, X->cols = D, X->o = tok.o;
  X->deq = calloc(R * D, sizeof *X->deq);
  size_t bytes[3] = {0, 0, 0};
  const void *in[3] = {NULL, NULL, NULL};
  void *outp[3] = {NULL, NULL, NULL};
  if (!X->deq) { rc = FB_ERR(FB_ENOMEM, "experts: dispatch"); goto done; }
  if (tok.kind == QM_F32) {
    bytes[0] = D * sizeof(float), in[0] = tok.deq, outp[0] = X->deq;
  } else {
    int per_tok = tok.kind == QM_NVFP4 && tok.o.outer == FB_OUTER_ROW;
    FB_TRY_GOTO(fb_payload_planes(tok.kind == QM_NVFP4 ? FB_FMT_NVFP4 : FB_FMT_MXFP8, per_tok, D, bytes), done);
    X->codes = malloc(R * bytes[0]), X->sf = malloc(R * bytes[1]);
    X->s_dec = malloc((per_tok ? R : 1) * sizeof *X->s_dec);
    if (!X->codes || !X->sf || !X->s_dec) { rc = FB_ERR(FB_ENOMEM, "experts: dispatch payload"); goto done; }
    in[0] = tok.codes, in[1] = tok.sf, in[2] = per_tok ? tok.s_dec : NULL;
    outp[0] = X->codes, outp[1] = X->sf, outp[2] = per_tok ? X->s_dec : NULL;
    if (tok.kind == QM_NVFP4 && !per_tok) X->s_dec[0] = tok.s_dec[0];
  }
  FB_TRY_GOTO(fb_permute_gather_ref(in, bytes, T, s->token_of, R, outp), done);
  if (tok.kind == QM_NVFP4) rc = fb_nvfp4_dequantize(X->codes, X->sf, X->s_dec, R, D, &X->o, X->deq);
  else if (tok.kind == QM_MXFP8) rc = fb_mxfp8_dequantize(X->codes, X->sf, R, D, X->deq);
done:
  qm_free(&tok);
  return rc;
}

static fb_status cpu_forward(void *ctx, fb_moe_layer *L, const float *x, const int32_t *topk_idx, const float *topk_w,
                             const float *w13, const float *w2, float *y) {
  (void)ctx;
  if (L->saved) cpu_release(ctx, L);
  const fb_layer_prec *p = L->prec;
  int ex = L->exact;
  size_t T = (size_t)L->tokens, D = (size_t)L->d_model, F = (size_t)L->d_ff, E = (size_t)L->experts,
         K = (size_t)L->top_k;
  fb_status rc = FB_OK;
  saved_t *s = calloc(1, sizeof *s);
  float *A32 = NULL, *Y = NULL;
  uint16_t *hb = NULL, *ab = NULL, *yb = NULL;
  int8_t *q6 = NULL;
  uint8_t *e6 = NULL;
  size_t *g13 = NULL, *g2 = NULL;
  if (!s) return FB_ERR(FB_ENOMEM, "experts: saved state");
  L->saved = s;
  size_t maxr = fb_permute_max_rows(T, L->top_k, L->experts, 32);
  s->counts = malloc(E * sizeof *s->counts), s->offsets = malloc((E + 1) * sizeof *s->offsets);
  s->eoff = malloc((E + 1) * sizeof *s->eoff);
  s->row_of = malloc(T * K * sizeof *s->row_of), s->token_of = malloc(maxr * sizeof *s->token_of);
  s->topk_w = malloc(T * K * sizeof *s->topk_w);
  g13 = malloc((E + 1) * sizeof *g13), g2 = malloc((E + 1) * sizeof *g2);
  if (!s->counts || !s->offsets || !s->eoff || !s->row_of || !s->token_of || !s->topk_w || !g13 || !g2) {
    rc = FB_ERR(FB_ENOMEM, "experts: routing");
    goto fail;
  }
  memcpy(s->topk_w, topk_w, T * K * sizeof *topk_w);
  FB_TRY_GOTO(fb_permute_ref(topk_idx, T, L->top_k, L->experts, 32, s->counts, s->offsets, s->row_of, s->token_of,
                             &s->R), fail);
  size_t R = s->R;
  for (size_t e = 0; e <= E; ++e) s->eoff[e] = (size_t)s->offsets[e], g13[e] = e * 2 * F, g2[e] = e * D;

  /* dispatch, weights */
  FB_TRY_GOTO(dispatch(L, s, x), fail);
  FB_TRY_GOTO(qm_quantize(&s->W13, &p->fwd_weight, ex, w13, E * 2 * F, D, g13, E, L->seed,
                          fb_moe_stream(L->layer, FB_MOE_OP_W13), L->step), fail);
  FB_TRY_GOTO(qm_quantize(&s->W2, &p->fwd_weight, ex, w2, E * D, F, g2, E, L->seed,
                          fb_moe_stream(L->layer, FB_MOE_OP_W2), L->step), fail);

  /* w13 + SwiGLU */
  s->H = calloc(R * 2 * F, sizeof *s->H);
  A32 = calloc(R * F, sizeof *A32);
  Y = calloc(R * D, sizeof *Y);
  if (!s->H || !A32 || !Y) { rc = FB_ERR(FB_ENOMEM, "experts: %zu rows", R); goto fail; }
  for (size_t e = 0; e < E; ++e) {
    size_t r0 = s->eoff[e];
    FB_TRY_GOTO(fbr_gemm_nt(s->counts[e], (int)(2 * F), (int)D, s->X.deq + r0 * D, (int)D, s->W13.deq + e * 2 * F * D,
                            (int)D, s->H + r0 * 2 * F, (int)(2 * F), 0), fail);
  }
  if (ex) {
    for (size_t r = 0; r < R; ++r)
      for (size_t c = 0; c < F; ++c) A32[r * F + c] = fbm_siluf(s->H[r * 2 * F + c]) * s->H[r * 2 * F + F + c];
  } else {
    hb = to_bf16(s->H, R * 2 * F);
    ab = malloc(R * F * sizeof *ab);
    if (!hb || !ab) { rc = FB_ERR(FB_ENOMEM, "experts: swiglu"); goto fail; }
    for (size_t i = 0; i < R * 2 * F; ++i) s->H[i] = fb_bf16_to_f32(hb[i]);
    FB_TRY_GOTO(fb_swiglu_fwd_ref(hb, R, F, ab), fail);
    for (size_t i = 0; i < R * F; ++i) A32[i] = fb_bf16_to_f32(ab[i]);
  }
  FB_TRY_GOTO(qm_quantize(&s->A, &p->fwd_act, ex, A32, R, F, s->eoff, E, L->seed,
                          fb_moe_stream(L->layer, FB_MOE_OP_A), L->step), fail);

  /* w2 */
  for (size_t e = 0; e < E; ++e) {
    size_t r0 = s->eoff[e];
    FB_TRY_GOTO(fbr_gemm_nt(s->counts[e], (int)D, (int)F, s->A.deq + r0 * F, (int)F, s->W2.deq + e * D * F, (int)F,
                            Y + r0 * D, (int)D, 0), fail);
  }

  /* combine */
  const fb_qspec *c = &p->combine;
  if (!ex && c->format == FB_FMT_S2F6) {
    uint32_t signs = fb_rht_signs(L->seed, 0);
    int rht = c->rht != 0;
    if (c->rht && c->rht != 32) { rc = FB_ERR(FB_EINVAL, "experts: S2F6 combine with RHT-%d (32 only)", c->rht); goto fail; }
    q6 = malloc(R * D), e6 = malloc(R * D / 32), yb = malloc(T * D * sizeof *yb);
    s->yhat = malloc(R * D * sizeof *s->yhat);
    if (!q6 || !e6 || !yb || !s->yhat) { rc = FB_ERR(FB_ENOMEM, "experts: combine"); goto fail; }
    FB_TRY_GOTO(fb_s2f6_quantize(Y, R, D, rht, signs, q6, e6), fail);
    FB_TRY_GOTO(fb_s2f6_dequantize(q6, e6, R, D, rht, signs, s->yhat), fail);
    FB_TRY_GOTO(fb_unpermute_ref(q6, e6, R, FB_FMT_S2F6, rht, signs, s->row_of, topk_w, T, L->top_k, D, NULL, yb),
                fail);
    for (size_t i = 0; i < T * D; ++i) y[i] = fb_bf16_to_f32(yb[i]);
  } else if (!ex && c->format == FB_FMT_BF16) {
    uint16_t *pb = to_bf16(Y, R * D);
    yb = malloc(T * D * sizeof *yb);
    s->yhat = malloc(R * D * sizeof *s->yhat);
    if (!pb || !yb || !s->yhat) { free(pb); rc = FB_ERR(FB_ENOMEM, "experts: combine"); goto fail; }
    for (size_t i = 0; i < R * D; ++i) s->yhat[i] = fb_bf16_to_f32(pb[i]);
    rc = fb_unpermute_ref(pb, NULL, R, FB_FMT_BF16, 0, 0, s->row_of, topk_w, T, L->top_k, D, NULL, yb);
    free(pb);
    if (rc != FB_OK) goto fail;
    for (size_t i = 0; i < T * D; ++i) y[i] = fb_bf16_to_f32(yb[i]);
  } else {
    if (ex) {
      s->yhat = Y, Y = NULL;
    } else {
      if (c->rht) { rc = FB_ERR(FB_EINVAL, "experts: RHT on a %s combine (S2F6 only)", fb_format_name(c->format)); goto fail; }
      qmat cq;
      rc = qm_quantize(&cq, c, 0, Y, R, D, NULL, 0, L->seed, 0, L->step);
      s->yhat = cq.deq, cq.deq = NULL;
      qm_free(&cq);
      if (rc != FB_OK) goto fail;
    }
    for (size_t t = 0; t < T; ++t) {
      float *o = y + t * D;
      for (size_t j = 0; j < D; ++j) o[j] = 0.0f;
      for (size_t k = 0; k < K; ++k) {
        int32_t r = s->row_of[t * K + k];
        if (r < 0) continue;
        float w = topk_w[t * K + k];
        const float *yr = s->yhat + (size_t)r * D;
        for (size_t j = 0; j < D; ++j) o[j] = fmaf(w, yr[j], o[j]);
      }
      fbr_rb_n(o, D, ex);
    }
  }
  free(A32), free(Y), free(hb), free(ab), free(yb), free(q6), free(e6), free(g13), free(g2);
  return FB_OK;
fail:
  free(A32), free(Y), free(hb), free(ab), free(yb), free(q6), free(e6), free(g13), free(g2);
  cpu_release(ctx, L);
  return rc;
}

static fb_status cpu_backward(void *ctx, fb_moe_layer *L, const float *dy, float *dx, float *dw13, float *dw2,
                              float *dtopk_w) {
  saved_t *s = L->saved;
  if (!s) return FB_ERR(FB_EINVAL, "experts: backward of layer %d without a forward", L->layer);
  const fb_layer_prec *p = L->prec;
  int ex = L->exact, rht = ex ? 0 : p->wgrad_rht;
  size_t T = (size_t)L->tokens, D = (size_t)L->d_model, F = (size_t)L->d_ff, E = (size_t)L->experts,
         K = (size_t)L->top_k, R = s->R;
  uint32_t seed = L->seed, step = L->step;
  fb_status rc = FB_OK;
  float *dY = calloc(R * D, sizeof *dY), *dA = calloc(R * F, sizeof *dA), *dH = calloc(R * 2 * F, sizeof *dH);
  float *dXr = calloc(R * D, sizeof *dXr);
  float *W2t = NULL, *dYt = NULL, *At = NULL, *W13t = NULL, *dHt = NULL, *Xt = NULL;
  uint16_t *hb = NULL, *dab = NULL, *dhb = NULL, *dxb = NULL;
  qmat dYq = {0}, dHq = {0};
  if (!dY || !dA || !dH || !dXr) { rc = FB_ERR(FB_ENOMEM, "experts: backward %zu rows", R); goto done; }

  /* router weights' gradient and dY = w * dy gathered by expert */
  for (size_t t = 0; t < T; ++t)
    for (size_t k = 0; k < K; ++k) {
      int32_t r = s->row_of[t * K + k];
      if (r < 0) { dtopk_w[t * K + k] = 0.0f; continue; }
      const float *yr = s->yhat + (size_t)r * D, *g = dy + t * D;
      double acc = 0;
      for (size_t j = 0; j < D; ++j) acc += (double)g[j] * (double)yr[j];
      dtopk_w[t * K + k] = (float)acc;
      float w = s->topk_w[t * K + k];
      for (size_t j = 0; j < D; ++j) dY[(size_t)r * D + j] = fbr_rb(w * fbr_rb(g[j], ex), ex);
    }

  /* w2 dgrad and the SwiGLU backward */
  FB_TRY_GOTO(qm_quantize(&dYq, &p->bwd_grad, ex, dY, R, D, s->eoff, E, seed, fb_moe_stream(L->layer, FB_MOE_OP_DY_ROW),
                          step), done);
  FB_TRY_GOTO(requant_t(&s->W2, &p->bwd_saved, ex, 0, seed, fb_moe_stream(L->layer, FB_MOE_OP_W2_T), step, &W2t), done);
  for (size_t e = 0; e < E; ++e) {
    size_t r0 = s->eoff[e];
    FB_TRY_GOTO(fbr_gemm_nt(s->counts[e], (int)F, (int)D, dYq.deq + r0 * D, (int)D, W2t + e * D, (int)(E * D),
                            dA + r0 * F, (int)F, 0), done);
  }
  if (ex) {
    for (size_t r = 0; r < R; ++r)
      for (size_t c = 0; c < F; ++c) {
        float g = s->H[r * 2 * F + c], u = s->H[r * 2 * F + F + c], d = dA[r * F + c];
        float sg = fbm_sigmoidf(g);
        dH[r * 2 * F + c] = (d * u) * (sg * (1.0f + g * (1.0f - sg)));
        dH[r * 2 * F + F + c] = d * (g * sg);
      }
  } else {
    hb = to_bf16(s->H, R * 2 * F), dab = to_bf16(dA, R * F), dhb = malloc(R * 2 * F * sizeof *dhb);
    if (!hb || !dab || !dhb) { rc = FB_ERR(FB_ENOMEM, "experts: swiglu backward"); goto done; }
    FB_TRY_GOTO(fb_swiglu_bwd_ref(hb, dab, R, F, dhb), done);
    for (size_t i = 0; i < R * 2 * F; ++i) dH[i] = fb_bf16_to_f32(dhb[i]);
  }

  /* w2 wgrad: dW2_e = dY_e^T A_e, K = the expert's (padded) rows */
  FB_TRY_GOTO(colwise(&p->bwd_grad, ex, dY, R, D, rht, seed, fb_moe_stream(L->layer, FB_MOE_OP_DY_COL), step, &dYt),
              done);
  FB_TRY_GOTO(requant_t(&s->A, &p->bwd_saved, ex, rht, seed, fb_moe_stream(L->layer, FB_MOE_OP_A_T), step, &At), done);
  for (size_t e = 0; e < E; ++e) {
    size_t r0 = s->eoff[e], ke = s->eoff[e + 1] - r0;
    FB_TRY_GOTO(fbr_gemm_nt((int)D, (int)F, (int)ke, dYt + r0, (int)R, At + r0, (int)R, dw2 + e * D * F, (int)F, 0),
                done);
  }

  /* w13 dgrad */
  FB_TRY_GOTO(qm_quantize(&dHq, &p->bwd_grad, ex, dH, R, 2 * F, s->eoff, E, seed,
                          fb_moe_stream(L->layer, FB_MOE_OP_DH_ROW), step), done);
  FB_TRY_GOTO(requant_t(&s->W13, &p->bwd_saved, ex, 0, seed, fb_moe_stream(L->layer, FB_MOE_OP_W13_T), step, &W13t),
              done);
  for (size_t e = 0; e < E; ++e) {
    size_t r0 = s->eoff[e];
    FB_TRY_GOTO(fbr_gemm_nt(s->counts[e], (int)D, (int)(2 * F), dHq.deq + r0 * 2 * F, (int)(2 * F), W13t + e * 2 * F,
                            (int)(E * 2 * F), dXr + r0 * D, (int)D, 0), done);
  }

  /* w13 wgrad: dW13_e = dH_e^T X_e, X requantized from the dispatched payload */
  FB_TRY_GOTO(colwise(&p->bwd_grad, ex, dH, R, 2 * F, rht, seed, fb_moe_stream(L->layer, FB_MOE_OP_DH_COL), step, &dHt),
              done);
  FB_TRY_GOTO(requant_t(&s->X, &p->bwd_saved, ex, rht, seed, fb_moe_stream(L->layer, FB_MOE_OP_X_T), step, &Xt), done);
  for (size_t e = 0; e < E; ++e) {
    size_t r0 = s->eoff[e], ke = s->eoff[e + 1] - r0;
    FB_TRY_GOTO(fbr_gemm_nt((int)(2 * F), (int)D, (int)ke, dHt + r0, (int)R, Xt + r0, (int)R, dw13 + e * 2 * F * D,
                            (int)D, 0), done);
  }
  if (rht) {
    float inv = 1.0f / (float)rht;
    for (size_t i = 0; i < E * D * F; ++i) dw2[i] *= inv;
    for (size_t i = 0; i < E * 2 * F * D; ++i) dw13[i] *= inv;
  }

  /* dX summed back to the tokens */
  if (ex) {
    for (size_t t = 0; t < T; ++t) {
      float *o = dx + t * D;
      for (size_t j = 0; j < D; ++j) o[j] = 0.0f;
      for (size_t k = 0; k < K; ++k) {
        int32_t r = s->row_of[t * K + k];
        if (r < 0) continue;
        for (size_t j = 0; j < D; ++j) o[j] = o[j] + dXr[(size_t)r * D + j];
      }
    }
  } else {
    dxb = to_bf16(dXr, R * D);
    if (!dxb) { rc = FB_ERR(FB_ENOMEM, "experts: dX"); goto done; }
    FB_TRY_GOTO(fb_unpermute_ref(dxb, NULL, R, FB_FMT_BF16, 0, 0, s->row_of, NULL, T, L->top_k, D, dx, NULL), done);
  }
done:
  free(dY), free(dA), free(dH), free(dXr), free(W2t), free(dYt), free(At), free(W13t), free(dHt), free(Xt);
  free(hb), free(dab), free(dhb), free(dxb);
  qm_free(&dYq), qm_free(&dHq);
  cpu_release(ctx, L);
  return rc;
}

static const fb_expert_ops CPU_OPS = {"cpu", NULL, cpu_forward, cpu_backward, cpu_release};
const fb_expert_ops *fb_expert_ops_cpu(void) { return &CPU_OPS; }
