/* model_experts.c — the expert layer on the CPU: the recipe's numerics op by op (docs/numerics.md, "The expert layer,
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
 * EP (expert parallelism, L->comm of N > 1 ranks; one rank runs the same stages with copies for the exchanges):
 *   source   each rank routes its own tokens: fb_permute_ref with tile 1 orders its (token, expert) rows by expert,
 *            then token, which is also by destination rank (rank r owns experts [r E/N, (r+1) E/N)). It quantizes
 *            its tokens for the dispatch exactly as one rank does and sends each (token, expert) row once (a token
 *            whose two experts live on one rank travels twice: simple, and what the one-rank gather does).
 *   counts   every rank's rows per expert (an allgather of E int32) give each rank the global padded row offsets
 *            of the one-rank layout: the owner of experts [e0, e1) places the rows it receives (ordered by source
 *            rank, then token: the global token order, as rank r holds global tokens [r T, (r+1) T)) exactly where
 *            one rank has them, padding included. Its operands are the rows [goff[e0], goff[e1]) of one rank's.
 *   expert   w13, SwiGLU, A, w2 on those rows; the combine payload (S2F6 + RHT, or BF16) of each received row goes
 *            back to its source, which combines it with its router weights (fb_unpermute_ref) and keeps its
 *            dequantized rows for dL/dw. Backward: the source sends w * dy rows (BF16: the owner quantizes them
 *            row-wise and column-wise itself: docs/numerics.md derives neither copy from the other, and a 32-row block
 *            down an expert's rows spans sources), the owner sends dX rows back (BF16), the source sums them.
 *   wire     dispatch rows: NVFP4 codes (d/2 bytes) + E4M3 block scales (d/16) + the FP32 outer scale (4; per-row
 *            also for a per-tensor scale, which differs between sources); MXFP8 d + d/32; BF16 2d (exact: FP32 4d).
 *            Combine: S2F6 d + d/32, BF16 2d; an NVFP4/MXFP8 combine (no shipped recipe) travels dequantized (FP32).
 *   random   SR bits are keyed by the one-rank position of an element (its global row; weights by their global
 *            expert row), not by its local position: MXFP8 quantizers here take an index map (srmap), so N ranks
 *            draw what one rank draws. What still differs from one rank under EP: (1) NVFP4 operands quantized
 *            with SR (nvidia_nvfp4's gradients) use the numerics library's quantizer, whose SR index is the local
 *            row-major one; (2) per-tensor outer scales (nvidia_nvfp4) take the amax of the rank's slice (its
 *            tokens, its experts' rows or weights), not of the whole tensor; (3) nothing else in this file: the
 *            RHT signs are per run, S2F6 and RN quantizers are per row or per block. The recipes inkling2_small
 *            and tiny are therefore rank-count independent here bit for bit; model.c says what differs outside.
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
#include "comm.h"
#include "fb_error.h"
#include "fb_math.h"
#include "fb_philox.h"
#include "model_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint32_t fb_moe_stream(int layer, int operand) { return ((uint32_t)layer << 8) | (uint32_t)operand; }

/* ---- SR index maps ------------------------------------------------------------------------------------ */
/* The SR element index of (row, col) of an operand: (row0 + row) * ld + col0 + col (ld 0: the operand's cols).
 * One rank: {0, 0, 0}, the row-major index of docs/numerics.md. A rank's slice of the one-rank operand maps to the
 * index one rank gives the same element. */
typedef struct { size_t row0, ld, col0; } srmap;

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
 * m->deq = x (BF16-rounded unless exact). goff/ng: expert groups of rows for per-expert outer scales. map: the SR
 * index of the MXFP8 quantizer (NVFP4: the library's row-major index, see the file header). */
static fb_status qm_quantize(qmat *m, const fb_qspec *q, int exact, const float *x, size_t rows, size_t cols,
                             const size_t *goff, size_t ng, uint32_t seed, uint32_t stream, uint32_t step,
                             const srmap *map) {
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
    if (rows == 0 || cols % 32) return FB_ERR(FB_EINVAL, "experts: mxfp8 %zu x %zu: cols not a multiple of 32", rows, cols);
    m->kind = QM_MXFP8;
    m->codes = malloc(rows * cols), m->sf = malloc(rows * cols / 32);
    if (!m->codes || !m->sf) return FB_ERR(FB_ENOMEM, "experts: mxfp8 %zu x %zu", rows, cols);
    fb_sr_opts r = {q->rounding, seed, stream, step};
    FB_TRY(fb_mxfp8_quantize_rows_at(x, rows, cols, &r, map->row0, map->ld, map->col0, m->codes, m->sf));
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
 * new rows, dequantized into *out (malloc'd). The wgrad operand of a gradient; also the backward's requantization
 * of a saved tensor (x = its exact dequantization: NVFP4/MXFP8 -> FP32 -> transposed MXFP8, docs/numerics.md). */
static fb_status colwise(const fb_qspec *q, int exact, const float *x, size_t rows, size_t cols, int rht,
                         uint32_t seed, uint32_t stream, uint32_t step, const srmap *map, float **out) {
  *out = NULL;
  float *t = malloc(rows * cols * sizeof *t);
  if (!t) return FB_ERR(FB_ENOMEM, "experts: %zu x %zu", rows, cols);
  fbr_transpose(x, rows, cols, cols, t);
  if (rht && !exact) rht_rows(t, cols, rows, rht, fb_rht_signs(seed, 0));
  qmat m;
  fb_status s = qm_quantize(&m, q, exact, t, cols, rows, NULL, 0, seed, stream, step, map);
  free(t);
  if (s == FB_OK) *out = m.deq, m.deq = NULL;
  qm_free(&m);
  return s;
}

static uint16_t *to_bf16(const float *x, size_t n) {
  uint16_t *h = malloc((n ? n : 1) * sizeof *h);
  if (h)
    for (size_t i = 0; i < n; ++i) h[i] = fb_bf16_from_f32(x[i]);
  return h;
}

/* ---- saved state --------------------------------------------------------------------------------- */
typedef struct {
  /* routing of this rank's tokens (the source side) */
  size_t Rs;          /* (token, expert) rows it sends, in send order: by expert, then token */
  int32_t *row_of;    /* T*K: send row of each (token, slot), -1 for none */
  int32_t *tok_of;    /* Rs: token of each send row */
  float *topk_w;      /* T*K */
  float *yhat;        /* Rs x d: the combine payload of each send row as the source dequantizes it */
  /* the exchange */
  int N, me, nE, e0;
  int32_t *cnt;       /* N x E: rows of every rank for every expert */
  size_t *srows, *rrows; /* N: rows to / from each rank (forward direction) */
  /* this rank's experts (the owner side): rows [g0, g0 + R) of the one-rank layout of Rg rows */
  size_t R, Rr, Rg, g0;
  int32_t *counts;    /* nE: real rows per expert */
  size_t *eoff;       /* nE + 1: padded row offsets, local */
  int32_t *lrow;      /* Rr: local row of each received row */
  qmat X, W13, W2, A;
  float *H;
} saved_t;

static void saved_free(saved_t *s) {
  if (!s) return;
  free(s->row_of), free(s->tok_of), free(s->topk_w), free(s->yhat), free(s->cnt), free(s->srows), free(s->rrows);
  free(s->counts), free(s->eoff), free(s->lrow);
  qm_free(&s->X), qm_free(&s->W13), qm_free(&s->W2), qm_free(&s->A);
  free(s->H);
  free(s);
}

static void cpu_release(void *ctx, fb_moe_layer *L) {
  (void)ctx;
  saved_free(L->saved);
  L->saved = NULL;
}

/* Rows of rb bytes between the sources and the owners: back = 0 sources -> owners (s->srows out, s->rrows in),
 * back = 1 the reverse. One rank: a copy. *bytes (may be NULL) gets the payload bytes this rank sent. */
static fb_status xchg(fb_moe_layer *L, saved_t *s, int back, const void *send, size_t rb, void *recv, double *bytes) {
  int N = s->N;
  const size_t *out = back ? s->rrows : s->srows, *in = back ? s->srows : s->rrows;
  size_t *a = malloc(4 * (size_t)N * sizeof *a), so = 0, ro = 0;
  if (!a) return FB_ERR(FB_ENOMEM, "experts: exchange");
  size_t *sc = a, *sd = a + N, *rc_ = a + 2 * N, *rd = a + 3 * N;
  double sent = 0, remote = 0;
  for (int p = 0; p < N; ++p) {
    sc[p] = out[p] * rb, sd[p] = so, so += sc[p];
    rc_[p] = in[p] * rb, rd[p] = ro, ro += rc_[p];
    sent += (double)sc[p];
    if (p != s->me) remote += (double)sc[p];
  }
  fb_status rc;
  if (L->comm) rc = fb_comm_alltoallv(L->comm, send, sc, sd, recv, rc_, rd);
  else rc = so ? (memcpy(recv, send, so), FB_OK) : FB_OK;
  free(a);
  if (bytes) *bytes += sent;
  if (L->traffic) L->traffic->remote += remote;
  return rc;
}

/* Routing: this rank's rows, every rank's counts, the owner's layout. */
static fb_status route(fb_moe_layer *L, saved_t *s, const int32_t *topk_idx) {
  size_t T = (size_t)L->tokens, K = (size_t)L->top_k;
  int E = L->experts, N = L->comm ? fb_comm_size(L->comm) : 1, me = L->comm ? fb_comm_rank(L->comm) : 0;
  if (E % N) return FB_ERR(FB_EINVAL, "experts: %d experts do not split over %d ranks", E, N);
  s->N = N, s->me = me, s->nE = E / N, s->e0 = me * (E / N);
  fb_status rc = FB_OK;
  size_t maxr = fb_permute_max_rows(T, L->top_k, E, 1);
  int32_t *mine = malloc((size_t)E * sizeof *mine);
  long long *offs = malloc(((size_t)E + 1) * sizeof *offs);
  size_t *goff = malloc(((size_t)E + 1) * sizeof *goff);
  s->row_of = malloc(T * K * sizeof *s->row_of), s->tok_of = malloc((maxr ? maxr : 1) * sizeof *s->tok_of);
  s->cnt = malloc((size_t)N * (size_t)E * sizeof *s->cnt);
  s->srows = calloc((size_t)N, sizeof *s->srows), s->rrows = calloc((size_t)N, sizeof *s->rrows);
  s->counts = calloc((size_t)s->nE, sizeof *s->counts), s->eoff = malloc(((size_t)s->nE + 1) * sizeof *s->eoff);
  if (!mine || !offs || !goff || !s->row_of || !s->tok_of || !s->cnt || !s->srows || !s->rrows || !s->counts ||
      !s->eoff) {
    rc = FB_ERR(FB_ENOMEM, "experts: routing");
    goto out;
  }
  FB_TRY_GOTO(fb_permute_ref(topk_idx, T, L->top_k, E, 1, mine, offs, s->row_of, s->tok_of, &s->Rs), out);
  if (L->comm) FB_TRY_GOTO(fb_comm_allgather(L->comm, mine, (size_t)E * sizeof *mine, s->cnt), out);
  else memcpy(s->cnt, mine, (size_t)E * sizeof *mine);
  goff[0] = 0;
  for (int e = 0; e < E; ++e) {
    size_t g = 0;
    for (int q = 0; q < N; ++q) g += (size_t)s->cnt[(size_t)q * E + e];
    goff[e + 1] = goff[e] + (g + 31) / 32 * 32;
    if (e >= s->e0 && e < s->e0 + s->nE) s->counts[e - s->e0] = (int32_t)g;
  }
  s->Rg = goff[E], s->g0 = goff[s->e0], s->R = goff[s->e0 + s->nE] - s->g0;
  for (int j = 0; j <= s->nE; ++j) s->eoff[j] = goff[s->e0 + j] - s->g0;
  for (int q = 0; q < N; ++q)
    for (int e = 0; e < E; ++e) {
      int owner = e / s->nE;
      if (q == me) s->srows[owner] += (size_t)s->cnt[(size_t)q * E + e];
      if (owner == me) s->rrows[q] += (size_t)s->cnt[(size_t)q * E + e];
    }
  s->Rr = 0;
  for (int q = 0; q < N; ++q) s->Rr += s->rrows[q];
  s->lrow = malloc((s->Rr ? s->Rr : 1) * sizeof *s->lrow);
  if (!s->lrow) { rc = FB_ERR(FB_ENOMEM, "experts: routing"); goto out; }
  /* received rows come by source rank, then expert, then token; within an expert, source rank then token is the
   * global token order, which is the order of one rank's rows */
  size_t k = 0;
  for (int q = 0; q < N; ++q)
    for (int j = 0; j < s->nE; ++j) {
      size_t before = 0;
      for (int q2 = 0; q2 < q; ++q2) before += (size_t)s->cnt[(size_t)q2 * E + s->e0 + j];
      for (int32_t i = 0; i < s->cnt[(size_t)q * E + s->e0 + j]; ++i) s->lrow[k++] = (int32_t)(s->eoff[j] + before + (size_t)i);
    }
out:
  free(mine), free(offs), free(goff);
  return rc;
}

/* The dispatch: quantize this rank's tokens (as one rank does), send a row record per (token, expert), place the
 * received records at their rows, dequantize. Record: the payload planes of a row one after the other. */
static fb_status dispatch(fb_moe_layer *L, saved_t *s, const float *x) {
  size_t T = (size_t)L->tokens, D = (size_t)L->d_model, R = s->R;
  size_t tok0 = (size_t)s->me * T; /* this rank's first global token */
  srmap mt = {tok0, 0, 0};
  qmat tok;
  uint8_t *sb = NULL, *rb_ = NULL;
  fb_status rc = qm_quantize(&tok, &L->prec->fwd_act, L->exact, x, T, D, NULL, 0, L->seed,
                             fb_moe_stream(L->layer, FB_MOE_OP_X), L->step, &mt);
  if (rc != FB_OK) { qm_free(&tok); return rc; }
  qmat *X = &s->X;
  memset(X, 0, sizeof *X);
  X->kind = tok.kind, X->rows = R, X->cols = D, X->o = tok.o;
  size_t pl[3] = {0, 0, 0}; /* bytes of the planes in a record */
  if (tok.kind == QM_F32) pl[0] = L->exact ? 4 * D : 2 * D;
  else if (tok.kind == QM_NVFP4) pl[0] = D / 2, pl[1] = D / 16, pl[2] = 4;
  else pl[0] = D, pl[1] = D / 32;
  size_t rb = pl[0] + pl[1] + pl[2];
  if (tok.kind == QM_NVFP4) X->o.outer = FB_OUTER_ROW, X->o.group_offsets = NULL, X->o.ngroups = 0;
  X->deq = calloc(R * D + 1, sizeof *X->deq);
  sb = malloc(s->Rs * rb + 1), rb_ = malloc(s->Rr * rb + 1);
  if (tok.kind != QM_F32) {
    X->codes = calloc(R * pl[0] + 1, 1), X->sf = calloc(R * pl[1] + 1, 1);
    X->s_dec = calloc(R + 1, sizeof *X->s_dec);
  }
  if (!X->deq || !sb || !rb_ || (tok.kind != QM_F32 && (!X->codes || !X->sf || !X->s_dec))) {
    rc = FB_ERR(FB_ENOMEM, "experts: dispatch payload");
    goto done;
  }
  for (size_t i = 0; i < s->Rs; ++i) {
    size_t t = (size_t)s->tok_of[i];
    uint8_t *r = sb + i * rb;
    if (tok.kind == QM_F32) {
      if (L->exact) memcpy(r, tok.deq + t * D, 4 * D);
      else for (size_t j = 0; j < D; ++j) { uint16_t h = fb_bf16_from_f32(tok.deq[t * D + j]); memcpy(r + 2 * j, &h, 2); }
    } else {
      memcpy(r, tok.codes + t * pl[0], pl[0]);
      memcpy(r + pl[0], tok.sf + t * pl[1], pl[1]);
      if (pl[2]) memcpy(r + pl[0] + pl[1], tok.o.outer == FB_OUTER_ROW ? &tok.s_dec[t] : &tok.s_dec[0], 4);
    }
  }
  double *bytes = L->traffic ? &L->traffic->dispatch : NULL;
  if (L->traffic) {
    L->traffic->rows += (double)s->Rs, L->traffic->bf16 += (double)s->Rs * 2.0 * (double)D;
    L->traffic->dispatch_outer += (double)s->Rs * (double)pl[2];
    if (tok.kind == QM_NVFP4) L->traffic->nvfp4 += (double)s->Rs * (double)rb, L->traffic->nvfp4_bf16 += (double)s->Rs * 2.0 * (double)D;
  }
  FB_TRY_GOTO(xchg(L, s, 0, sb, rb, rb_, bytes), done);
  for (size_t k = 0; k < s->Rr; ++k) {
    size_t r = (size_t)s->lrow[k];
    const uint8_t *src = rb_ + k * rb;
    if (tok.kind == QM_F32) {
      if (L->exact) memcpy(X->deq + r * D, src, 4 * D);
      else for (size_t j = 0; j < D; ++j) { uint16_t h; memcpy(&h, src + 2 * j, 2); X->deq[r * D + j] = fb_bf16_to_f32(h); }
    } else {
      memcpy(X->codes + r * pl[0], src, pl[0]);
      memcpy(X->sf + r * pl[1], src + pl[0], pl[1]);
      if (pl[2]) memcpy(&X->s_dec[r], src + pl[0] + pl[1], 4);
    }
  }
  if (R && tok.kind == QM_NVFP4) rc = fb_nvfp4_dequantize(X->codes, X->sf, X->s_dec, R, D, &X->o, X->deq);
  else if (R && tok.kind == QM_MXFP8) rc = fb_mxfp8_dequantize(X->codes, X->sf, R, D, X->deq);
done:
  free(sb), free(rb_);
  qm_free(&tok);
  return rc;
}

static fb_status cpu_forward(void *ctx, fb_moe_layer *L, const float *x, const int32_t *topk_idx, const float *topk_w,
                             const float *w13, const float *w2, float *y) {
  (void)ctx;
  if (L->saved) cpu_release(ctx, L);
  const fb_layer_prec *p = L->prec;
  int ex = L->exact;
  size_t T = (size_t)L->tokens, D = (size_t)L->d_model, F = (size_t)L->d_ff, K = (size_t)L->top_k;
  fb_status rc = FB_OK;
  saved_t *s = calloc(1, sizeof *s);
  float *A32 = NULL, *Y = NULL;
  uint16_t *hb = NULL, *ab = NULL, *yb = NULL;
  int8_t *q6 = NULL;
  uint8_t *e6 = NULL, *cs = NULL, *cr = NULL;
  size_t *g13 = NULL, *g2 = NULL;
  if (!s) return FB_ERR(FB_ENOMEM, "experts: saved state");
  L->saved = s;
  s->topk_w = malloc(T * K * sizeof *s->topk_w);
  if (!s->topk_w) { rc = FB_ERR(FB_ENOMEM, "experts: routing"); goto fail; }
  memcpy(s->topk_w, topk_w, T * K * sizeof *topk_w);
  FB_TRY_GOTO(route(L, s, topk_idx), fail);
  size_t R = s->R, nE = (size_t)s->nE, e0 = (size_t)s->e0;
  g13 = malloc((nE + 1) * sizeof *g13), g2 = malloc((nE + 1) * sizeof *g2);
  if (!g13 || !g2) { rc = FB_ERR(FB_ENOMEM, "experts: routing"); goto fail; }
  for (size_t e = 0; e <= nE; ++e) g13[e] = e * 2 * F, g2[e] = e * D;

  /* dispatch, weights (this rank's experts: SR index of their one-rank rows) */
  FB_TRY_GOTO(dispatch(L, s, x), fail);
  srmap m13 = {e0 * 2 * F, 0, 0}, m2 = {e0 * D, 0, 0}, mrow = {s->g0, 0, 0};
  FB_TRY_GOTO(qm_quantize(&s->W13, &p->fwd_weight, ex, w13, nE * 2 * F, D, g13, nE, L->seed,
                          fb_moe_stream(L->layer, FB_MOE_OP_W13), L->step, &m13), fail);
  FB_TRY_GOTO(qm_quantize(&s->W2, &p->fwd_weight, ex, w2, nE * D, F, g2, nE, L->seed,
                          fb_moe_stream(L->layer, FB_MOE_OP_W2), L->step, &m2), fail);

  /* w13 + SwiGLU, w2 on this rank's rows */
  s->H = calloc(R * 2 * F + 1, sizeof *s->H);
  A32 = calloc(R * F + 1, sizeof *A32);
  Y = calloc(R * D + 1, sizeof *Y);
  if (!s->H || !A32 || !Y) { rc = FB_ERR(FB_ENOMEM, "experts: %zu rows", R); goto fail; }
  if (R) {
    for (size_t e = 0; e < nE; ++e) {
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
    FB_TRY_GOTO(qm_quantize(&s->A, &p->fwd_act, ex, A32, R, F, s->eoff, nE, L->seed,
                            fb_moe_stream(L->layer, FB_MOE_OP_A), L->step, &mrow), fail);
    for (size_t e = 0; e < nE; ++e) {
      size_t r0 = s->eoff[e];
      FB_TRY_GOTO(fbr_gemm_nt(s->counts[e], (int)D, (int)F, s->A.deq + r0 * F, (int)F, s->W2.deq + e * D * F, (int)F,
                              Y + r0 * D, (int)D, 0), fail);
    }
  }

  /* the combine payload of every received row, back to its source */
  const fb_qspec *c = &p->combine;
  int s2f6 = !ex && c->format == FB_FMT_S2F6, bf16 = !ex && c->format == FB_FMT_BF16;
  uint32_t signs = fb_rht_signs(L->seed, 0);
  int rht = s2f6 && c->rht != 0;
  if (s2f6 && c->rht && c->rht != 32) { rc = FB_ERR(FB_EINVAL, "experts: S2F6 combine with RHT-%d (32 only)", c->rht); goto fail; }
  if (!ex && !s2f6 && !bf16 && c->rht) {
    rc = FB_ERR(FB_EINVAL, "experts: RHT on a %s combine (S2F6 only)", fb_format_name(c->format));
    goto fail;
  }
  size_t cb = s2f6 ? D + D / 32 : bf16 ? 2 * D : 4 * D; /* record bytes */
  cs = malloc(s->Rr * cb + 1), cr = malloc(s->Rs * cb + 1);
  if (!cs || !cr) { rc = FB_ERR(FB_ENOMEM, "experts: combine"); goto fail; }
  if (s2f6) {
    q6 = malloc(R * D + 1), e6 = malloc(R * D / 32 + 1);
    if (!q6 || !e6) { rc = FB_ERR(FB_ENOMEM, "experts: combine"); goto fail; }
    if (R) FB_TRY_GOTO(fb_s2f6_quantize(Y, R, D, rht, signs, q6, e6), fail);
    for (size_t k = 0; k < s->Rr; ++k) {
      size_t r = (size_t)s->lrow[k];
      memcpy(cs + k * cb, q6 + r * D, D), memcpy(cs + k * cb + D, e6 + r * D / 32, D / 32);
    }
  } else if (bf16) {
    for (size_t k = 0; k < s->Rr; ++k)
      for (size_t j = 0; j < D; ++j) {
        uint16_t h = fb_bf16_from_f32(Y[(size_t)s->lrow[k] * D + j]);
        memcpy(cs + k * cb + 2 * j, &h, 2);
      }
  } else {
    const float *src = Y;
    qmat cq;
    memset(&cq, 0, sizeof cq);
    if (!ex && R) { /* an NVFP4 / MXFP8 combine: quantized here, travels dequantized */
      rc = qm_quantize(&cq, c, 0, Y, R, D, NULL, 0, L->seed, 0, L->step, &mrow);
      if (rc != FB_OK) { qm_free(&cq); goto fail; }
      src = cq.deq;
    }
    for (size_t k = 0; k < s->Rr; ++k) memcpy(cs + k * cb, src + (size_t)s->lrow[k] * D, 4 * D);
    qm_free(&cq);
  }
  rc = xchg(L, s, 1, cs, cb, cr, L->traffic ? &L->traffic->combine : NULL);
  if (rc != FB_OK) goto fail;

  /* combined at the source with its router weights */
  size_t Rs = s->Rs;
  s->yhat = malloc(Rs * D * sizeof *s->yhat + 1);
  if (!s->yhat) { rc = FB_ERR(FB_ENOMEM, "experts: combine"); goto fail; }
  if (s2f6) {
    free(q6), free(e6);
    q6 = malloc(Rs * D + 1), e6 = malloc(Rs * D / 32 + 1), yb = malloc(T * D * sizeof *yb);
    if (!q6 || !e6 || !yb) { rc = FB_ERR(FB_ENOMEM, "experts: combine"); goto fail; }
    for (size_t i = 0; i < Rs; ++i) memcpy(q6 + i * D, cr + i * cb, D), memcpy(e6 + i * D / 32, cr + i * cb + D, D / 32);
    if (Rs) FB_TRY_GOTO(fb_s2f6_dequantize(q6, e6, Rs, D, rht, signs, s->yhat), fail);
    FB_TRY_GOTO(fb_unpermute_ref(q6, e6, Rs, FB_FMT_S2F6, rht, signs, s->row_of, topk_w, T, L->top_k, D, NULL, yb),
                fail);
    for (size_t i = 0; i < T * D; ++i) y[i] = fb_bf16_to_f32(yb[i]);
  } else if (bf16) {
    yb = malloc(T * D * sizeof *yb);
    if (!yb) { rc = FB_ERR(FB_ENOMEM, "experts: combine"); goto fail; }
    for (size_t i = 0; i < Rs * D; ++i) {
      uint16_t h;
      memcpy(&h, cr + 2 * i, 2);
      s->yhat[i] = fb_bf16_to_f32(h);
    }
    FB_TRY_GOTO(fb_unpermute_ref(cr, NULL, Rs, FB_FMT_BF16, 0, 0, s->row_of, topk_w, T, L->top_k, D, NULL, yb), fail);
    for (size_t i = 0; i < T * D; ++i) y[i] = fb_bf16_to_f32(yb[i]);
  } else {
    memcpy(s->yhat, cr, Rs * D * sizeof *s->yhat);
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
  free(A32), free(Y), free(hb), free(ab), free(yb), free(q6), free(e6), free(cs), free(cr), free(g13), free(g2);
  return FB_OK;
fail:
  free(A32), free(Y), free(hb), free(ab), free(yb), free(q6), free(e6), free(cs), free(cr), free(g13), free(g2);
  cpu_release(ctx, L);
  return rc;
}

/* The owner's backward on its rows: dY (R x d, zero on padding rows) -> dXr (R x d), dw13, dw2 of its experts. */
static fb_status expert_backward(fb_moe_layer *L, saved_t *s, const float *dY, float *dXr, float *dw13, float *dw2) {
  const fb_layer_prec *p = L->prec;
  int ex = L->exact, rht = ex ? 0 : p->wgrad_rht;
  size_t D = (size_t)L->d_model, F = (size_t)L->d_ff, E = (size_t)L->experts, nE = (size_t)s->nE,
         e0 = (size_t)s->e0, R = s->R, Rg = s->Rg;
  uint32_t seed = L->seed, step = L->step;
  fb_status rc = FB_OK;
  if (!R) { /* no rows for these experts in this step */
    memset(dw13, 0, nE * 2 * F * D * sizeof *dw13), memset(dw2, 0, nE * D * F * sizeof *dw2);
    return FB_OK;
  }
  /* SR maps: row-wise operands are rows [g0, g0 + R) of one rank's; column-wise ones its columns; the weights'
   * transposes (F x E d, d x E 2f on one rank) hold this rank's experts from column e0 d (e0 2f) */
  srmap mrow = {s->g0, 0, 0}, mcol = {0, Rg, s->g0}, mw2t = {0, E * D, e0 * D}, mw13t = {0, E * 2 * F, e0 * 2 * F};
  float *dA = calloc(R * F, sizeof *dA), *dH = calloc(R * 2 * F, sizeof *dH);
  float *W2t = NULL, *dYt = NULL, *At = NULL, *W13t = NULL, *dHt = NULL, *Xt = NULL;
  uint16_t *hb = NULL, *dab = NULL, *dhb = NULL;
  qmat dYq = {0}, dHq = {0};
  if (!dA || !dH) { rc = FB_ERR(FB_ENOMEM, "experts: backward %zu rows", R); goto done; }

  /* w2 dgrad and the SwiGLU backward */
  FB_TRY_GOTO(qm_quantize(&dYq, &p->bwd_grad, ex, dY, R, D, s->eoff, nE, seed, fb_moe_stream(L->layer, FB_MOE_OP_DY_ROW),
                          step, &mrow), done);
  FB_TRY_GOTO(colwise(&p->bwd_saved, ex, s->W2.deq, nE * D, F, 0, seed, fb_moe_stream(L->layer, FB_MOE_OP_W2_T), step,
                      &mw2t, &W2t), done);
  for (size_t e = 0; e < nE; ++e) {
    size_t r0 = s->eoff[e];
    FB_TRY_GOTO(fbr_gemm_nt(s->counts[e], (int)F, (int)D, dYq.deq + r0 * D, (int)D, W2t + e * D, (int)(nE * D),
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
  FB_TRY_GOTO(colwise(&p->bwd_grad, ex, dY, R, D, rht, seed, fb_moe_stream(L->layer, FB_MOE_OP_DY_COL), step, &mcol,
                      &dYt), done);
  FB_TRY_GOTO(colwise(&p->bwd_saved, ex, s->A.deq, R, F, rht, seed, fb_moe_stream(L->layer, FB_MOE_OP_A_T), step, &mcol,
                      &At), done);
  for (size_t e = 0; e < nE; ++e) {
    size_t r0 = s->eoff[e], ke = s->eoff[e + 1] - r0;
    FB_TRY_GOTO(fbr_gemm_nt((int)D, (int)F, (int)ke, dYt + r0, (int)R, At + r0, (int)R, dw2 + e * D * F, (int)F, 0),
                done);
  }

  /* w13 dgrad */
  FB_TRY_GOTO(qm_quantize(&dHq, &p->bwd_grad, ex, dH, R, 2 * F, s->eoff, nE, seed,
                          fb_moe_stream(L->layer, FB_MOE_OP_DH_ROW), step, &mrow), done);
  FB_TRY_GOTO(colwise(&p->bwd_saved, ex, s->W13.deq, nE * 2 * F, D, 0, seed, fb_moe_stream(L->layer, FB_MOE_OP_W13_T),
                      step, &mw13t, &W13t), done);
  for (size_t e = 0; e < nE; ++e) {
    size_t r0 = s->eoff[e];
    FB_TRY_GOTO(fbr_gemm_nt(s->counts[e], (int)D, (int)(2 * F), dHq.deq + r0 * 2 * F, (int)(2 * F), W13t + e * 2 * F,
                            (int)(nE * 2 * F), dXr + r0 * D, (int)D, 0), done);
  }

  /* w13 wgrad: dW13_e = dH_e^T X_e, X requantized from the dispatched payload */
  FB_TRY_GOTO(colwise(&p->bwd_grad, ex, dH, R, 2 * F, rht, seed, fb_moe_stream(L->layer, FB_MOE_OP_DH_COL), step, &mcol,
                      &dHt), done);
  FB_TRY_GOTO(colwise(&p->bwd_saved, ex, s->X.deq, R, D, rht, seed, fb_moe_stream(L->layer, FB_MOE_OP_X_T), step, &mcol,
                      &Xt), done);
  for (size_t e = 0; e < nE; ++e) {
    size_t r0 = s->eoff[e], ke = s->eoff[e + 1] - r0;
    FB_TRY_GOTO(fbr_gemm_nt((int)(2 * F), (int)D, (int)ke, dHt + r0, (int)R, Xt + r0, (int)R, dw13 + e * 2 * F * D,
                            (int)D, 0), done);
  }
  if (rht) {
    float inv = 1.0f / (float)rht;
    for (size_t i = 0; i < nE * D * F; ++i) dw2[i] *= inv;
    for (size_t i = 0; i < nE * 2 * F * D; ++i) dw13[i] *= inv;
  }
done:
  free(dA), free(dH), free(W2t), free(dYt), free(At), free(W13t), free(dHt), free(Xt);
  free(hb), free(dab), free(dhb);
  qm_free(&dYq), qm_free(&dHq);
  return rc;
}

static fb_status cpu_backward(void *ctx, fb_moe_layer *L, const float *dy, float *dx, float *dw13, float *dw2,
                              float *dtopk_w) {
  saved_t *s = L->saved;
  if (!s) return FB_ERR(FB_EINVAL, "experts: backward of layer %d without a forward", L->layer);
  int ex = L->exact;
  size_t T = (size_t)L->tokens, D = (size_t)L->d_model, K = (size_t)L->top_k, R = s->R, Rs = s->Rs, Rr = s->Rr;
  size_t rb = ex ? 4 * D : 2 * D; /* dY and dX records: BF16 values (exact: FP32) */
  fb_status rc = FB_OK;
  float *dY = calloc(R * D + 1, sizeof *dY), *dXr = calloc(R * D + 1, sizeof *dXr);
  uint8_t *sb = malloc((Rs > Rr ? Rs : Rr) * rb + 1), *rbuf = malloc((Rs > Rr ? Rs : Rr) * rb + 1);
  if (!dY || !dXr || !sb || !rbuf) { rc = FB_ERR(FB_ENOMEM, "experts: backward %zu rows", R); goto done; }

  /* at the source: the router weights' gradient, and dY = w * dy per (token, expert) row */
  for (size_t t = 0; t < T; ++t)
    for (size_t k = 0; k < K; ++k) {
      int32_t r = s->row_of[t * K + k];
      if (r < 0) { dtopk_w[t * K + k] = 0.0f; continue; }
      const float *yr = s->yhat + (size_t)r * D, *g = dy + t * D;
      double acc = 0;
      for (size_t j = 0; j < D; ++j) acc += (double)g[j] * (double)yr[j];
      dtopk_w[t * K + k] = (float)acc;
      float w = s->topk_w[t * K + k];
      uint8_t *o = sb + (size_t)r * rb;
      for (size_t j = 0; j < D; ++j) {
        float v = fbr_rb(w * fbr_rb(g[j], ex), ex);
        if (ex) memcpy(o + 4 * j, &v, 4);
        else { uint16_t h = fb_bf16_from_f32(v); memcpy(o + 2 * j, &h, 2); }
      }
    }
  FB_TRY_GOTO(xchg(L, s, 0, sb, rb, rbuf, L->traffic ? &L->traffic->dy : NULL), done);
  for (size_t k = 0; k < Rr; ++k) {
    float *o = dY + (size_t)s->lrow[k] * D;
    const uint8_t *src = rbuf + k * rb;
    if (ex) memcpy(o, src, 4 * D);
    else for (size_t j = 0; j < D; ++j) { uint16_t h; memcpy(&h, src + 2 * j, 2); o[j] = fb_bf16_to_f32(h); }
  }

  /* at the owner */
  FB_TRY_GOTO(expert_backward(L, s, dY, dXr, dw13, dw2), done);

  /* dX rows back to their sources, summed there per token */
  for (size_t k = 0; k < Rr; ++k) {
    const float *src = dXr + (size_t)s->lrow[k] * D;
    uint8_t *o = sb + k * rb;
    if (ex) memcpy(o, src, 4 * D);
    else for (size_t j = 0; j < D; ++j) { uint16_t h = fb_bf16_from_f32(src[j]); memcpy(o + 2 * j, &h, 2); }
  }
  FB_TRY_GOTO(xchg(L, s, 1, sb, rb, rbuf, L->traffic ? &L->traffic->dx : NULL), done);
  if (ex) {
    const float *dXs = (const float *)(void *)rbuf;
    for (size_t t = 0; t < T; ++t) {
      float *o = dx + t * D;
      for (size_t j = 0; j < D; ++j) o[j] = 0.0f;
      for (size_t k = 0; k < K; ++k) {
        int32_t r = s->row_of[t * K + k];
        if (r < 0) continue;
        for (size_t j = 0; j < D; ++j) o[j] = o[j] + dXs[(size_t)r * D + j];
      }
    }
  } else {
    FB_TRY_GOTO(fb_unpermute_ref(rbuf, NULL, Rs, FB_FMT_BF16, 0, 0, s->row_of, NULL, T, L->top_k, D, dx, NULL), done);
  }
done:
  free(dY), free(dXr), free(sb), free(rbuf);
  cpu_release(ctx, L);
  return rc;
}

static const fb_expert_ops CPU_OPS = {"cpu", NULL, cpu_forward, cpu_backward, cpu_release};
const fb_expert_ops *fb_expert_ops_cpu(void) { return &CPU_OPS; }
