/* model_dense.h — the CPU arithmetic of the model's non-expert pieces (runtime/model_dense.c), factored out of model.c
 * so that the fake CUDA driver (tests/gpu/mock_libcuda.c) carries out the GPU-resident train step's kernels
 * (templates/dense.cuh) with the very functions the CPU path runs. Every function is the CPU path's arithmetic, in its
 * order: the GPU kernels compute the same formulas, reductions in another (fixed) order where they have to.
 * ex: exact mode (no BF16 rounding). Matrices row-major; T tokens, D d_model, S tokens per sequence (T % S == 0). */
#ifndef FB_MODEL_DENSE_H
#define FB_MODEL_DENSE_H
#include <stddef.h>
#include <stdint.h>

#define FBR_NORM_EPS 1e-6f

/* y = rb(x * r * g), r = 1 / sqrtf((float)(sum x^2 / D in double) + eps) per row. */
void fbr_rmsnorm_fwd(const float *x, const float *g, size_t T, size_t D, int ex, float *y, float *r);
/* dx = (or +=, acc) the input gradient; dg += the weight gradient (the caller zeroes dg first). */
void fbr_rmsnorm_bwd(const float *x, const float *g, const float *r, const float *dy, size_t T, size_t D, float *dx,
                     float *dg, int acc);
/* Causal depthwise convolution within each sequence, then the residual: xm = x_in + rb(sum_j k[d][j] n1[i-j][d]). */
void fbr_conv_fwd(const float *x_in, const float *n1, const float *k, size_t T, size_t D, size_t W, size_t S, int ex,
                  float *xm);
/* From dxm (T x D): dk (D x W) and dn1 (T x D), both overwritten. */
void fbr_conv_bwd(const float *dxm, const float *n1, const float *k, size_t T, size_t D, size_t W, size_t S, float *dk,
                  float *dn1);
/* Load-balancing statistics of a layer over the global batch's Tg tokens: cnt[e] (token-slots routed to e) and
 * pe[e] = sum_t probs[t][e] in double, token order. */
void fbr_aux_counts(const float *probs, const int32_t *topk_idx, size_t Tg, size_t E, size_t K, int32_t *cnt,
                    double *pe);
/* The layer's term of the aux loss: E * sum_e (cnt_e / (Tg K)) (pe_e / Tg) / L. */
double fbr_aux_term(const int32_t *cnt, const double *pe, size_t Tg, size_t E, size_t K, size_t L);
/* Cross-entropy per token (log-softmax in double); the logits (T x V) become the probabilities (FP32). */
void fbr_ce_fwd(float *logits, const int32_t *tgt, size_t T, size_t V, double *ce_tok);
/* dl = rb((p - onehot(tgt)) / Tg). */
void fbr_ce_bwd(const float *probs, const int32_t *tgt, size_t T, size_t V, size_t Tg, int ex, float *dl);
/* The router's backward, per token: through the renormalized top-k weights (dtw: dL/dtopk_w) and the load-balancing
 * loss (gcnt: the layer's global counts); dp (T x E) is scratch; dlr (T x E) = rb(the logit gradient). */
void fbr_router_bwd(const float *probs, const int32_t *topk_idx, const float *topk_w, const float *dtw,
                    const int32_t *gcnt, size_t T, size_t E, size_t K, size_t L, size_t Tg, float aux_coef, int ex,
                    float *dp, float *dlr);
/* ge (V x D) = sum over positions i in increasing order of dx[i] into row inp[i] (overwritten). */
void fbr_embed_bwd(const float *dx, const int32_t *inp, size_t T, size_t D, size_t V, float *ge);
#endif
