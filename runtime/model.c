/* model.c — the runtime's MoE language model on the CPU: parameters, forward, backward (docs/design.md "Runtime").
 *
 *   embedding; L x [RMSNorm -> causal depthwise convolution (width conv_width, within each sequence)
 *   -> residual -> RMSNorm -> router (BF16 GEMM, fb_router_ref: softmax, top-k, renormalized weights)
 *   -> top-k experts (fb_expert_ops: the recipe's numerics) -> residual]; RMSNorm; LM head; cross-entropy;
 *   + aux_coef * the load-balancing loss (1/L) sum_l E sum_e f_e P_e (f_e: the fraction of the layer's
 *   token-slots routed to e, P_e: the mean router probability of e; 1 when balanced; its gradient flows
 *   through P_e only, as in Switch Transformer).
 *
 * Entry points (model_internal.h): fbr_model_init, fbr_model_free, fbr_model_run.
 *
 * BF16 numerics (not in exact mode): every non-expert parameter is read as its BF16 value; GEMM operands are
 * BF16 (gradients rounded where they enter a GEMM), accumulation FP32; RMSNorm, convolution and the combined
 * expert output are BF16 values; the residual stream, the logits, the loss (double) and the weight gradients
 * are FP32. The backward of a rounding is the identity (the straight-through estimator).
 *
 * Expert parallelism (t->nranks > 1): this rank runs its sequences of the global batch and its experts
 * (model_experts.c); everything per token is what one rank computes for that token, bit for bit. The global
 * figures are gathered, not reduced: the router outputs for the aux loss and the per-token cross-entropies are
 * allgathered and summed in token order, so the loss and aux of step 1 equal one rank's bit for bit at any rank
 * count. What differs from one rank: every non-expert weight gradient is a sum over tokens, accumulated in FP32
 * per rank and then summed over the ranks (fb_comm_allreduce_f32, rank order), i.e. in another order than one
 * rank's single pass (about 1 ulp per addition; in exact mode that is all), and the gradient norm adds the
 * expert tensors' squares per rank; the masters then differ in low bits from step 2 on, which a quantized forward
 * can turn into flipped codes. */
#include "comm.h"
#include "fb_error.h"
#include "fb_philox.h"
#include "model_dense.h"
#include "model_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { INIT_STREAM = 0x1A170000u };

/* A standard normal from Philox (Box-Muller in double), element i of stream. */
static double gauss(uint32_t seed, uint32_t stream, uint64_t i) {
  fb_u32 ctr[4] = {(fb_u32)i, (fb_u32)(i >> 32), 0, 0}, key[2] = {seed, stream}, o[4];
  fb_philox4x32_10(ctr, key, o);
  double u1 = ((double)o[0] + 1.0) / 4294967297.0, u2 = (double)o[1] / 4294967296.0;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* k0: the index of this rank's first element in the one-rank tensor (its experts' rows), so that N ranks
 * initialize what one rank does. */
static fb_status add_param(fb_trainer *t, int i, const char *name, size_t rows, size_t cols, size_t k0, double std,
                           double one, int decay, int expert) {
  fbr_param *p = &t->p[i];
  snprintf(p->name, sizeof p->name, "%s", name);
  p->rows = rows, p->cols = cols, p->decay = decay, p->expert = expert;
  size_t n = rows * cols;
  p->w = malloc(n * sizeof *p->w), p->g = calloc(n, sizeof *p->g);
  p->m = calloc(n, sizeof *p->m), p->v = calloc(n, sizeof *p->v);
  p->wb = expert ? NULL : malloc(n * sizeof *p->wb);
  if (!p->w || !p->g || !p->m || !p->v || (!expert && !p->wb)) return FB_ERR(FB_ENOMEM, "parameter %s: %zu values (%zu bytes each for the weights, gradients and AdamW moments)", name, n, n * sizeof *p->w);
  for (size_t k = 0; k < n; ++k) p->w[k] = (float)(one + std * gauss(t->o.seed, INIT_STREAM + (uint32_t)i, k0 + k));
  return FB_OK;
}

#define ALLOC(ptr, n) do { (ptr) = calloc((size_t)(n), sizeof *(ptr)); \
  if (!(ptr)) return FB_ERR(FB_ENOMEM, "%zu bytes for the model's activations and gradients (%zu x %zu bytes, %s)", \
                           (size_t)(n) * sizeof *(ptr), (size_t)(n), sizeof *(ptr), #ptr); } while (0)

fb_status fbr_model_init(fb_trainer *t) {
  const fb_model *M = &t->M;
  size_t L = (size_t)M->layers, D = (size_t)M->d_model, F = (size_t)M->d_ff, E = (size_t)M->experts,
         V = (size_t)M->vocab, W = (size_t)M->conv_width, T = (size_t)t->T, K = (size_t)M->top_k;
  size_t nE = (size_t)t->nE, e0 = (size_t)t->e0, Tg = (size_t)t->Tg;
  t->np = P_GLOBAL + (int)L * P_PER_LAYER;
  t->p = calloc((size_t)t->np, sizeof *t->p);
  if (!t->p) return FB_ERR(FB_ENOMEM, "%zu bytes for the parameter table", (size_t)t->np * sizeof *t->p);
  FB_TRY(add_param(t, P_EMB, "embedding", V, D, 0, 1.0, 0.0, 0, 0));
  FB_TRY(add_param(t, P_NF, "final_norm", 1, D, 0, 0.0, 1.0, 0, 0));
  FB_TRY(add_param(t, P_HEAD, "lm_head", V, D, 0, 1.0 / sqrt((double)D), 0.0, 1, 0));
  for (size_t l = 0; l < L; ++l) {
    char nm[40];
    int b = P_GLOBAL + (int)l * P_PER_LAYER;
#define NAME(s) (snprintf(nm, sizeof nm, "layer%zu.%s", l + 1, s), nm)
    FB_TRY(add_param(t, b + P_N1, NAME("norm1"), 1, D, 0, 0.0, 1.0, 0, 0));
    FB_TRY(add_param(t, b + P_CONV, NAME("conv"), D, W, 0, 0.5 / sqrt((double)W), 0.0, 1, 0));
    FB_TRY(add_param(t, b + P_N2, NAME("norm2"), 1, D, 0, 0.0, 1.0, 0, 0));
    FB_TRY(add_param(t, b + P_ROUTER, NAME("router"), E, D, 0, 0.02, 0.0, 1, 0));
    FB_TRY(add_param(t, b + P_W13, NAME("w13"), nE * 2 * F, D, e0 * 2 * F * D, 1.0 / sqrt((double)D), 0.0, 1, 1));
    FB_TRY(add_param(t, b + P_W2, NAME("w2"), nE * D, F, e0 * D * F, 1.0 / sqrt((double)F * 2.0 * (double)L), 0.0, 1,
                     1));
#undef NAME
  }
  ALLOC(t->tokens, (size_t)t->nseq_g * (size_t)(t->o.seq_len + 1));
  ALLOC(t->ce_tok, Tg);
  if (t->nranks > 1) { ALLOC(t->gprobs, Tg * E); ALLOC(t->gidx, Tg * K); }
  ALLOC(t->inp, T);
  ALLOC(t->tgt, T);
  ALLOC(t->act, L);
  for (size_t l = 0; l < L; ++l) {
    fbr_layer_act *a = &t->act[l];
    ALLOC(a->x_in, T * D); ALLOC(a->n1, T * D); ALLOC(a->r1, T); ALLOC(a->xm, T * D); ALLOC(a->n2, T * D);
    ALLOC(a->r2, T); ALLOC(a->probs, T * E); ALLOC(a->topk_w, T * K); ALLOC(a->topk_idx, T * K); ALLOC(a->gcnt, E);
    fb_moe_layer *m = &a->moe;
    m->layer = (int)l + 1, m->prec = &t->plan->layers[l];
    m->tokens = t->T, m->d_model = M->d_model, m->d_ff = M->d_ff, m->experts = M->experts, m->top_k = M->top_k;
    m->seed = t->o.seed, m->exact = t->o.exact;
    m->comm = t->nranks > 1 ? t->comm : NULL, m->traffic = &t->traffic;
  }
  ALLOC(t->xf, T * D); ALLOC(t->rf, T); ALLOC(t->hf, T * D); ALLOC(t->logits, T * V);
  ALLOC(t->dx, T * D); ALLOC(t->dn, T * D); ALLOC(t->dtmp, T * (D > E * K ? D : E * K) + T * E);
  ALLOC(t->dlog, T * (V > E ? V : E));
  return FB_OK;
}

void fbr_model_free(fb_trainer *t) {
  if (t->p)
    for (int i = 0; i < t->np; ++i) free(t->p[i].w), free(t->p[i].g), free(t->p[i].m), free(t->p[i].v), free(t->p[i].wb);
  free(t->p);
  if (t->act)
    for (int l = 0; l < t->M.layers; ++l) {
      fbr_layer_act *a = &t->act[l];
      if (a->moe.saved && t->ops) t->ops->release(t->ops->ctx, &a->moe);
      free(a->x_in), free(a->n1), free(a->r1), free(a->xm), free(a->n2), free(a->r2), free(a->probs), free(a->topk_w);
      free(a->topk_idx), free(a->gcnt);
    }
  free(t->act);
  free(t->tokens), free(t->inp), free(t->tgt), free(t->xf), free(t->rf), free(t->hf), free(t->logits);
  free(t->dx), free(t->dn), free(t->dtmp), free(t->dlog), free(t->gprobs), free(t->gidx), free(t->ce_tok);
}

/* Refresh the BF16 copies the forward reads. */
static void refresh_wb(fb_trainer *t) {
  for (int i = 0; i < t->np; ++i) {
    fbr_param *p = &t->p[i];
    if (p->expert) continue;
    size_t n = p->rows * p->cols;
    memcpy(p->wb, p->w, n * sizeof *p->w);
    fbr_rb_n(p->wb, n, t->o.exact);
  }
}

void fbr_model_batch(fb_trainer *t, uint32_t step) {
  size_t S = (size_t)t->o.seq_len;
  fb_markov_batch(t->data, step, t->nseq_g, t->o.seq_len, t->tokens);
  for (size_t b = 0; b < (size_t)t->nseq; ++b) {
    const int32_t *sq = t->tokens + ((size_t)t->rank * (size_t)t->nseq + b) * (S + 1); /* this rank's sequences */
    for (size_t j = 0; j < S; ++j) t->inp[b * S + j] = sq[j], t->tgt[b * S + j] = sq[j + 1];
  }
}

fb_status fbr_model_run(fb_trainer *t, uint32_t step, int grad, double *ce_out, double *aux_out) {
  const fb_model *M = &t->M;
  int ex = t->o.exact;
  size_t L = (size_t)M->layers, D = (size_t)M->d_model, E = (size_t)M->experts, V = (size_t)M->vocab,
         W = (size_t)M->conv_width, T = (size_t)t->T, K = (size_t)M->top_k, S = (size_t)t->o.seq_len;
  size_t Tg = (size_t)t->Tg;
  fbr_param *P = t->p;
  fb_status rc = FB_OK;

  fbr_model_batch(t, step);
  refresh_wb(t);

  /* ---- forward ---- */
  float *x = t->xf; /* the residual stream, FP32 */
  for (size_t i = 0; i < T; ++i) memcpy(x + i * D, P[P_EMB].wb + (size_t)t->inp[i] * D, D * sizeof *x);
  double aux = 0;
  for (size_t l = 0; l < L; ++l) {
    fbr_layer_act *a = &t->act[l];
    fbr_param *lp = P + P_GLOBAL + l * P_PER_LAYER;
    memcpy(a->x_in, x, T * D * sizeof *x);
    fbr_rmsnorm_fwd(a->x_in, lp[P_N1].wb, T, D, ex, a->n1, a->r1);
    fbr_conv_fwd(a->x_in, a->n1, lp[P_CONV].wb, T, D, W, S, ex, a->xm);
    fbr_rmsnorm_fwd(a->xm, lp[P_N2].wb, T, D, ex, a->n2, a->r2);
    float *lg = t->dlog; /* router logits, T x E */
    FB_TRY(fbr_gemm_nt((int)T, (int)E, (int)D, a->n2, (int)D, lp[P_ROUTER].wb, (int)D, lg, (int)E, 0));
    FB_TRY(fb_router_ref(lg, T, M->experts, M->top_k, a->probs, a->topk_idx, a->topk_w));
    const float *gp = a->probs;
    const int32_t *gi = a->topk_idx;
    if (t->nranks > 1) { /* the global batch's router outputs, in token order */
      FB_TRY(fb_comm_allgather(t->comm, a->probs, T * E * sizeof *a->probs, t->gprobs));
      FB_TRY(fb_comm_allgather(t->comm, a->topk_idx, T * K * sizeof *a->topk_idx, t->gidx));
      gp = t->gprobs, gi = t->gidx;
    }
    double *pe = (double *)t->dtmp; /* E doubles of scratch (dtmp holds T (D + E) >= 2 E floats) */
    fbr_aux_counts(gp, gi, Tg, E, K, a->gcnt, pe);
    aux += fbr_aux_term(a->gcnt, pe, Tg, E, K, L);
    a->moe.step = step;
    FB_TRY(t->ops->forward(t->ops->ctx, &a->moe, a->n2, a->topk_idx, a->topk_w, lp[P_W13].w, lp[P_W2].w, t->dn));
    for (size_t i = 0; i < T * D; ++i) x[i] = a->xm[i] + t->dn[i];
  }
  fbr_rmsnorm_fwd(x, P[P_NF].wb, T, D, ex, t->hf, t->rf);
  FB_TRY(fbr_gemm_nt((int)T, (int)V, (int)D, t->hf, (int)D, P[P_HEAD].wb, (int)D, t->logits, (int)V, 0));
  double ce = 0;
  fbr_ce_fwd(t->logits, t->tgt, T, V, t->ce_tok + (size_t)t->rank * T); /* the logits become the probabilities */
  if (t->nranks > 1) {
    rc = fb_comm_allgather(t->comm, t->ce_tok + (size_t)t->rank * T, T * sizeof *t->ce_tok, t->ce_tok);
    if (rc != FB_OK) goto fail;
  }
  for (size_t i = 0; i < Tg; ++i) ce += t->ce_tok[i];
  ce /= (double)Tg;
  *ce_out = ce, *aux_out = aux;
  t->last_ce = ce, t->last_aux = aux;
  if (!grad) {
    for (size_t l = 0; l < L; ++l) t->ops->release(t->ops->ctx, &t->act[l].moe);
    return FB_OK;
  }

  /* ---- backward ---- */
  float *dl = t->dlog;
  fbr_ce_bwd(t->logits, t->tgt, T, V, Tg, ex, dl);
  FB_TRY(fbr_gemm_tn((int)V, (int)D, (int)T, dl, (int)V, t->hf, (int)D, P[P_HEAD].g, (int)D, 0));
  fbr_gemm_nn((int)T, (int)D, (int)V, dl, (int)V, P[P_HEAD].wb, (int)D, t->dn, (int)D, 0);
  memset(P[P_NF].g, 0, D * sizeof(float));
  fbr_rmsnorm_bwd(x, P[P_NF].wb, t->rf, t->dn, T, D, t->dx, P[P_NF].g, 0);
  float *dx = t->dx, *dn = t->dn, *dtw = t->dtmp, *dp = t->dtmp + T * (D > E * K ? D : E * K);
  for (size_t l = L; l-- > 0;) {
    fbr_layer_act *a = &t->act[l];
    fbr_param *lp = P + P_GLOBAL + l * P_PER_LAYER;
    /* experts: dx is the gradient of the layer's output = xm + moe(n2) */
    rc = t->ops->backward(t->ops->ctx, &a->moe, dx, dn, lp[P_W13].g, lp[P_W2].g, dtw);
    if (rc != FB_OK) goto fail;
    /* router: through the renormalized top-k weights and the load-balancing loss */
    float *dlr = dl; /* T x E router logit gradients */
    fbr_router_bwd(a->probs, a->topk_idx, a->topk_w, dtw, a->gcnt, T, E, K, L, Tg, t->o.aux_coef, ex, dp, dlr);
    FB_TRY(fbr_gemm_tn((int)E, (int)D, (int)T, dlr, (int)E, a->n2, (int)D, lp[P_ROUTER].g, (int)D, 0));
    fbr_gemm_nn((int)T, (int)D, (int)E, dlr, (int)E, lp[P_ROUTER].wb, (int)D, dn, (int)D, 1);
    /* norm 2: dxm = dx + norm2'(dn) */
    memset(lp[P_N2].g, 0, D * sizeof(float));
    fbr_rmsnorm_bwd(a->xm, lp[P_N2].wb, a->r2, dn, T, D, dx, lp[P_N2].g, 1);
    /* convolution: dn1 from dxm */
    fbr_conv_bwd(dx, a->n1, lp[P_CONV].wb, T, D, W, S, lp[P_CONV].g, dn);
    memset(lp[P_N1].g, 0, D * sizeof(float));
    fbr_rmsnorm_bwd(a->x_in, lp[P_N1].wb, a->r1, dn, T, D, dx, lp[P_N1].g, 1);
  }
  fbr_embed_bwd(dx, t->inp, T, D, V, P[P_EMB].g);
  /* replicated parameters: the sum of every rank's tokens' gradients (the 1/T of the mean is in dl already) */
  if (t->nranks > 1)
    for (int i = 0; i < t->np; ++i)
      if (!P[i].expert) FB_TRY(fb_comm_allreduce_f32(t->comm, P[i].g, P[i].rows * P[i].cols));
  return FB_OK;
fail:
  for (size_t l = 0; l < L; ++l) t->ops->release(t->ops->ctx, &t->act[l].moe);
  return rc;
}
