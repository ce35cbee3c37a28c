/* model_dense.c — the CPU arithmetic of the model's non-expert pieces (model_dense.h): RMSNorm, the causal
 * convolution, the load-balancing statistics, cross-entropy, the router's backward and the embedding's gradient.
 * model.c runs them; the fake CUDA driver (tests/gpu/mock_libcuda.c) runs them for the GPU-resident step's kernels.
 * Compiled with -ffp-contract=off like the rest: no fused multiply-add. */
#include "model_dense.h"

#include "fourbit.h"

#include <math.h>
#include <string.h>

static float rb(float x, int ex) { return ex ? x : fb_bf16_to_f32(fb_bf16_from_f32(x)); }

void fbr_rmsnorm_fwd(const float *x, const float *g, size_t T, size_t D, int ex, float *y, float *r) {
  for (size_t t = 0; t < T; ++t) {
    const float *xr = x + t * D;
    double ss = 0;
    for (size_t i = 0; i < D; ++i) ss += (double)xr[i] * (double)xr[i];
    float rr = 1.0f / sqrtf((float)(ss / (double)D) + FBR_NORM_EPS);
    r[t] = rr;
    for (size_t i = 0; i < D; ++i) y[t * D + i] = rb(xr[i] * rr * g[i], ex);
  }
}

void fbr_rmsnorm_bwd(const float *x, const float *g, const float *r, const float *dy, size_t T, size_t D, float *dx,
                     float *dg, int acc) {
  for (size_t t = 0; t < T; ++t) {
    const float *xr = x + t * D, *d = dy + t * D;
    float rr = r[t];
    double s = 0;
    for (size_t i = 0; i < D; ++i) s += (double)g[i] * (double)d[i] * (double)xr[i], dg[i] += d[i] * xr[i] * rr;
    float c = (float)(s * (double)rr * (double)rr * (double)rr / (double)D);
    for (size_t i = 0; i < D; ++i) {
      float v = rr * g[i] * d[i] - xr[i] * c;
      dx[t * D + i] = acc ? dx[t * D + i] + v : v;
    }
  }
}

void fbr_conv_fwd(const float *x_in, const float *n1, const float *k, size_t T, size_t D, size_t W, size_t S, int ex,
                  float *xm) {
  for (size_t i = 0; i < T; ++i) {
    size_t pos = i % S;
    for (size_t d = 0; d < D; ++d) {
      float c = 0.0f;
      for (size_t j = 0; j < W && j <= pos; ++j) c = c + k[d * W + j] * n1[(i - j) * D + d];
      xm[i * D + d] = x_in[i * D + d] + rb(c, ex);
    }
  }
}

void fbr_conv_bwd(const float *dxm, const float *n1, const float *k, size_t T, size_t D, size_t W, size_t S, float *dk,
                  float *dn1) {
  memset(dk, 0, D * W * sizeof *dk);
  memset(dn1, 0, T * D * sizeof *dn1);
  for (size_t i = 0; i < T; ++i) {
    size_t pos = i % S;
    for (size_t d = 0; d < D; ++d) {
      float g = dxm[i * D + d];
      for (size_t j = 0; j < W && j <= pos; ++j) {
        dk[d * W + j] += g * n1[(i - j) * D + d];
        dn1[(i - j) * D + d] += k[d * W + j] * g;
      }
    }
  }
}

void fbr_aux_counts(const float *probs, const int32_t *topk_idx, size_t Tg, size_t E, size_t K, int32_t *cnt,
                    double *pe) {
  for (size_t e = 0; e < E; ++e) {
    size_t c = 0;
    double p = 0;
    for (size_t i = 0; i < Tg * K; ++i) c += (size_t)topk_idx[i] == e;
    for (size_t i = 0; i < Tg; ++i) p += probs[i * E + e];
    cnt[e] = (int32_t)c, pe[e] = p;
  }
}

double fbr_aux_term(const int32_t *cnt, const double *pe, size_t Tg, size_t E, size_t K, size_t L) {
  double fsum = 0;
  for (size_t e = 0; e < E; ++e) fsum += ((double)cnt[e] / (double)(Tg * K)) * (pe[e] / (double)Tg);
  return (double)E * fsum / (double)L;
}

void fbr_ce_fwd(float *logits, const int32_t *tgt, size_t T, size_t V, double *ce_tok) {
  for (size_t i = 0; i < T; ++i) {
    float *lr = logits + i * V;
    double m = -INFINITY, s = 0;
    for (size_t v = 0; v < V; ++v) m = fmax(m, (double)lr[v]);
    for (size_t v = 0; v < V; ++v) s += exp((double)lr[v] - m);
    double lse = m + log(s);
    ce_tok[i] = lse - (double)lr[tgt[i]];
    for (size_t v = 0; v < V; ++v) lr[v] = (float)exp((double)lr[v] - lse);
  }
}

void fbr_ce_bwd(const float *probs, const int32_t *tgt, size_t T, size_t V, size_t Tg, int ex, float *dl) {
  for (size_t i = 0; i < T; ++i)
    for (size_t v = 0; v < V; ++v) {
      float g = probs[i * V + v] - (v == (size_t)tgt[i] ? 1.0f : 0.0f);
      dl[i * V + v] = rb(g / (float)Tg, ex);
    }
}

void fbr_router_bwd(const float *probs, const int32_t *topk_idx, const float *topk_w, const float *dtw,
                    const int32_t *gcnt, size_t T, size_t E, size_t K, size_t L, size_t Tg, float aux_coef, int ex,
                    float *dp, float *dlr) {
  for (size_t i = 0; i < T; ++i) {
    const float *pr = probs + i * E;
    float *d = dp + i * E;
    double Ssum = 0, dw = 0;
    for (size_t k = 0; k < K; ++k) Ssum += pr[topk_idx[i * K + k]];
    for (size_t k = 0; k < K; ++k) dw += (double)dtw[i * K + k] * (double)topk_w[i * K + k];
    for (size_t e = 0; e < E; ++e) d[e] = 0.0f;
    for (size_t k = 0; k < K; ++k) d[topk_idx[i * K + k]] = (float)(((double)dtw[i * K + k] - dw) / Ssum);
  }
  for (size_t e = 0; e < E; ++e) {
    size_t cnt = (size_t)gcnt[e];
    float ga = (float)((double)aux_coef * (double)E / (double)L * ((double)cnt / (double)(Tg * K)) / (double)Tg);
    for (size_t i = 0; i < T; ++i) dp[i * E + e] += ga;
  }
  for (size_t i = 0; i < T; ++i) {
    const float *pr = probs + i * E;
    double s = 0;
    for (size_t e = 0; e < E; ++e) s += (double)pr[e] * (double)dp[i * E + e];
    for (size_t e = 0; e < E; ++e) dlr[i * E + e] = rb((float)((double)pr[e] * ((double)dp[i * E + e] - s)), ex);
  }
}

void fbr_embed_bwd(const float *dx, const int32_t *inp, size_t T, size_t D, size_t V, float *ge) {
  memset(ge, 0, V * D * sizeof *ge);
  for (size_t i = 0; i < T; ++i) {
    float *g = ge + (size_t)inp[i] * D;
    for (size_t d = 0; d < D; ++d) g[d] += dx[i * D + d];
  }
}
