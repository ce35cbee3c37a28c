/* ops.c — CPU references of the train step's other kernels: the router (softmax, top-k, weights), permute
 * (dispatch order, padded expert offsets, payload gather), unpermute (the router-weighted combine of BF16 or
 * S2F6 + inverse RHT-32 rows), SwiGLU forward and backward, and AdamW with the next step's quantized
 * weights. The GPU templates (router.cuh, permute.cuh, unpermute.cuh, swiglu.cuh, adamw.cuh) match these
 * bit for bit, so the fp32 operation order below is part of the contract (built with -ffp-contract=off;
 * fmaf where written). exp, sigmoid and SiLU come from templates/fb_math.h, bit-identical on both sides.
 *
 * Entry points (include/fourbit.h): fb_bf16_from_f32, fb_bf16_to_f32, fb_router_ref, fb_permute_max_rows,
 * fb_permute_ref, fb_payload_planes, fb_permute_gather_ref, fb_unpermute_ref, fb_swiglu_fwd_ref,
 * fb_swiglu_bwd_ref, fb_adamw_ref.
 *
 * Choices fixed here (the templates copy them):
 *  - router: the max ignores NaN (fmaxf), so only a row of NaN (or -Inf) logits gives NaN probabilities;
 *    top-k ranks by the total order of fbo_prob_ord (NaN last, -0 below +0, then the lower index).
 *  - permute: topk_idx -1 drops an entry (row_of -1, counted nowhere); the GPU drops any index outside
 *    [0, E) the same way, the reference rejects the others.
 *  - unpermute: a dropped entry (row_of < 0) is skipped, which equals adding 0 (acc never becomes -0). */
#include "fb_error.h"
#include "fb_kparams.h"
#include "fb_math.h"
#include "fourbit.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* ---- BF16 ---------------------------------------------------------------------------------- */
uint16_t fb_bf16_from_f32(float x) {
  uint32_t u = f2u(x);
  if (isnan(x)) return (uint16_t)((u >> 16) | 0x0040u); /* keep sign and payload top, force quiet */
  uint32_t lsb = (u >> 16) & 1u;
  return (uint16_t)((u + 0x7FFFu + lsb) >> 16); /* RNE; overflow carries into Inf */
}

float fb_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ---- router -------------------------------------------------------------------------------- */
/* The rank order: p descending, NaN last, -0 below +0, ties to the lower index; one 64-bit key. */
static uint64_t prob_ord(float p, int j) {
  uint32_t u = f2u(p), key;
  if (isnan(p)) key = 0;
  else key = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return ((uint64_t)key << 32) | (uint32_t)~(uint32_t)j;
}

fb_status fb_router_ref(const float *logits, size_t tokens, int experts, int top_k, float *probs,
                        int32_t *topk_idx, float *topk_w) {
  if (!logits || !topk_idx || !topk_w) return FB_ERR(FB_EINVAL, "router: NULL argument");
  if (experts < 1 || top_k < 1 || top_k > experts || top_k > FB_MOE_MAX_TOPK)
    return FB_ERR(FB_EINVAL, "router: top_k %d with %d experts: need 1 <= top_k <= min(experts, %d)", top_k, experts,
                  FB_MOE_MAX_TOPK);
  size_t E = (size_t)experts;
  float *p = malloc(E * sizeof *p);
  if (!p) return FB_ERR(FB_ENOMEM, "router: %d experts", experts);
  for (size_t t = 0; t < tokens; ++t) {
    const float *l = logits + t * E;
    float m = -INFINITY;
    for (size_t j = 0; j < E; ++j) m = fmaxf(m, l[j]);
    float part[32] = {0};
    for (size_t j = 0; j < E; ++j) {
      p[j] = fbm_expf(l[j] - m);
      part[j % 32] = part[j % 32] + p[j];
    }
    for (int o = 16; o > 0; o >>= 1) { /* the xor butterfly of a warp, all lanes at once */
      float nx[32];
      for (int L = 0; L < 32; ++L) nx[L] = part[L] + part[L ^ o];
      memcpy(part, nx, sizeof part);
    }
    float s = part[0];
    for (size_t j = 0; j < E; ++j) p[j] = p[j] / s;
    if (probs) memcpy(probs + t * E, p, E * sizeof *p);
    uint64_t prev = UINT64_MAX;
    float S = 0.0f, ps[FB_MOE_MAX_TOPK];
    int32_t *idx = topk_idx + t * (size_t)top_k;
    for (int i = 0; i < top_k; ++i) { /* the next in rank order: the largest key below the previous one */
      uint64_t best = 0;
      int bj = 0;
      for (size_t j = 0; j < E; ++j) {
        uint64_t o = prob_ord(p[j], (int)j);
        if (o < prev && o > best) best = o, bj = (int)j;
      }
      prev = best;
      idx[i] = bj;
      ps[i] = p[bj];
      S = S + ps[i];
    }
    for (int i = 0; i < top_k; ++i) topk_w[t * (size_t)top_k + i] = ps[i] / S;
  }
  free(p);
  return FB_OK;
}

/* ---- permute ------------------------------------------------------------------------------- */
size_t fb_permute_max_rows(size_t tokens, int top_k, int experts, int tile) {
  if (top_k < 1 || experts < 1 || tile < 1) return 0;
  return tokens * (size_t)top_k + (size_t)experts * (size_t)(tile - 1);
}

fb_status fb_permute_ref(const int32_t *topk_idx, size_t tokens, int top_k, int experts, int tile, int32_t *counts,
                         long long *offsets, int32_t *row_of, int32_t *token_of, size_t *rows_total) {
  if (!topk_idx || !counts || !offsets || !row_of || !token_of) return FB_ERR(FB_EINVAL, "permute: NULL argument");
  if (top_k < 1 || experts < 1 || tile < 1)
    return FB_ERR(FB_EINVAL, "permute: top_k %d, experts %d, tile %d: each must be at least 1", top_k, experts, tile);
  size_t n = tokens * (size_t)top_k;
  if (fb_permute_max_rows(tokens, top_k, experts, tile) > INT32_MAX)
    return FB_ERR(FB_EINVAL, "permute: %zu entries: rows would overflow int32", n);
  memset(counts, 0, (size_t)experts * sizeof *counts);
  for (size_t i = 0; i < n; ++i) {
    int32_t e = topk_idx[i];
    if (e == -1) continue;
    if (e < 0 || e >= experts)
      return FB_ERR(FB_EINVAL, "permute: topk_idx[%zu] (token %zu, slot %zu) = %d: not in [0, %d) nor -1", i,
                    i / (size_t)top_k, i % (size_t)top_k, (int)e, experts);
    ++counts[e];
  }
  offsets[0] = 0;
  for (int e = 0; e < experts; ++e)
    offsets[e + 1] = offsets[e] + ((long long)counts[e] + tile - 1) / tile * tile;
  long long *next = malloc((size_t)experts * sizeof *next);
  if (!next) return FB_ERR(FB_ENOMEM, "permute: %d experts", experts);
  memcpy(next, offsets, (size_t)experts * sizeof *next);
  for (size_t i = 0; i < n; ++i) {
    int32_t e = topk_idx[i];
    if (e < 0) { row_of[i] = -1; continue; }
    long long r = next[e]++;
    row_of[i] = (int32_t)r;
    token_of[r] = (int32_t)(i / (size_t)top_k);
  }
  for (int e = 0; e < experts; ++e)
    for (long long r = offsets[e] + counts[e]; r < offsets[e + 1]; ++r) token_of[r] = -1;
  free(next);
  if (rows_total) *rows_total = (size_t)offsets[experts];
  return FB_OK;
}

fb_status fb_payload_planes(fb_format f, int per_token_outer, size_t cols, size_t bytes[3]) {
  if (!bytes) return FB_ERR(FB_EINVAL, "payload: NULL argument");
  bytes[0] = bytes[1] = bytes[2] = 0;
  if (cols == 0) return FB_ERR(FB_EINVAL, "payload: zero columns");
  switch (f) {
  case FB_FMT_BF16: bytes[0] = 2 * cols; return FB_OK;
  case FB_FMT_NVFP4:
    if (cols % 16) return FB_ERR(FB_EINVAL, "payload: NVFP4 rows of %zu values: not a multiple of 16", cols);
    bytes[0] = cols / 2, bytes[1] = cols / 16, bytes[2] = per_token_outer ? 4 : 0;
    return FB_OK;
  case FB_FMT_MXFP8:
    if (cols % 32) return FB_ERR(FB_EINVAL, "payload: MXFP8 rows of %zu values: not a multiple of 32", cols);
    bytes[0] = cols, bytes[1] = cols / 32;
    return FB_OK;
  default: return FB_ERR(FB_EINVAL, "payload: format %d is not a dispatch payload (bf16, nvfp4, mxfp8)", (int)f);
  }
}

fb_status fb_permute_gather_ref(const void *const in[3], const size_t bytes[3], size_t tokens, const int32_t *token_of,
                                size_t rows, void *const out[3]) {
  if (!in || !bytes || !out || (!token_of && rows)) return FB_ERR(FB_EINVAL, "gather: NULL argument");
  for (int p = 0; p < 3; ++p)
    if (bytes[p] && (!in[p] || !out[p])) return FB_ERR(FB_EINVAL, "gather: plane %d: NULL buffer", p);
  for (size_t r = 0; r < rows; ++r)
    if (token_of[r] >= 0 && (size_t)token_of[r] >= tokens)
      return FB_ERR(FB_EINVAL, "gather: token_of[%zu] = %d: only %zu tokens", r, (int)token_of[r], tokens);
  for (int p = 0; p < 3; ++p) {
    if (!bytes[p]) continue;
    for (size_t r = 0; r < rows; ++r) {
      uint8_t *d = (uint8_t *)out[p] + r * bytes[p];
      if (token_of[r] < 0) memset(d, 0, bytes[p]);
      else memcpy(d, (const uint8_t *)in[p] + (size_t)token_of[r] * bytes[p], bytes[p]);
    }
  }
  return FB_OK;
}

/* ---- unpermute ----------------------------------------------------------------------------- */
fb_status fb_combine_bwd_ref(const void *y, const uint8_t *y_e8m0, size_t y_rows, fb_format f, int rht, uint32_t signs,
                             const int32_t *row_of, const float *topk_w, size_t tokens, int top_k, size_t cols,
                             const float *dy, uint16_t *dY, float *dtopk_w) {
  if (!y || !row_of || !topk_w || !dy || !dY || !dtopk_w) return FB_ERR(FB_EINVAL, "combine_bwd: NULL argument");
  if (top_k < 1 || cols == 0 || cols % 32) return FB_ERR(FB_EINVAL, "combine_bwd: top_k %d, %zu columns", top_k, cols);
  if (f == FB_FMT_S2F6 ? !y_e8m0 : (f != FB_FMT_BF16 || rht))
    return FB_ERR(FB_EINVAL, "combine_bwd: a BF16 payload, or S2F6 with its E8M0 scales (and the RHT only on S2F6)");
  for (size_t i = 0; i < tokens * (size_t)top_k; ++i)
    if (row_of[i] >= 0 && (size_t)row_of[i] >= y_rows)
      return FB_ERR(FB_EINVAL, "combine_bwd: row_of[%zu] = %d: y has %zu rows", i, (int)row_of[i], y_rows);
  float *yh = malloc(cols * sizeof *yh);
  if (!yh) return FB_ERR(FB_ENOMEM, "combine_bwd: %zu columns", cols);
  for (size_t t = 0; t < tokens; ++t)
    for (int s = 0; s < top_k; ++s) {
      size_t i = t * (size_t)top_k + (size_t)s;
      int32_t r = row_of[i];
      if (r < 0) { dtopk_w[i] = 0.0f; continue; }
      if (f == FB_FMT_BF16) {
        const uint16_t *yr = (const uint16_t *)y + (size_t)r * cols;
        for (size_t j = 0; j < cols; ++j) yh[j] = fb_bf16_to_f32(yr[j]);
      } else {
        fb_status st = fb_s2f6_dequantize((const int8_t *)y + (size_t)r * cols, y_e8m0 + (size_t)r * (cols / 32), 1, cols, rht,
                                          signs, yh);
        if (st != FB_OK) { free(yh); return st; }
      }
      const float *g = dy + t * cols;
      double acc = 0;
      for (size_t j = 0; j < cols; ++j) {
        acc += (double)g[j] * (double)yh[j];
        dY[(size_t)r * cols + j] = fb_bf16_from_f32(topk_w[i] * fb_bf16_to_f32(fb_bf16_from_f32(g[j])));
      }
      dtopk_w[i] = (float)acc;
    }
  free(yh);
  return FB_OK;
}

fb_status fb_unpermute_ref(const void *y, const uint8_t *y_e8m0, size_t y_rows, fb_format f, int rht, uint32_t signs,
                           const int32_t *row_of, const float *topk_w, size_t tokens, int top_k, size_t cols,
                           float *out, uint16_t *out_bf16) {
  if (!y || !row_of || (!out && !out_bf16)) return FB_ERR(FB_EINVAL, "unpermute: NULL argument");
  if (top_k < 1 || cols == 0) return FB_ERR(FB_EINVAL, "unpermute: top_k %d, %zu columns", top_k, cols);
  if (f == FB_FMT_S2F6) {
    if (!y_e8m0) return FB_ERR(FB_EINVAL, "unpermute: S2F6 payload without its E8M0 scales");
    if (cols % 32) return FB_ERR(FB_EINVAL, "unpermute: S2F6 rows of %zu values: not a multiple of 32", cols);
  } else if (f != FB_FMT_BF16) {
    return FB_ERR(FB_EINVAL, "unpermute: payload format %d: BF16 or S2F6 only", (int)f);
  } else if (rht) {
    return FB_ERR(FB_EINVAL, "unpermute: the inverse RHT applies to the S2F6 payload only");
  }
  for (size_t i = 0; i < tokens * (size_t)top_k; ++i)
    if (row_of[i] >= 0 && (size_t)row_of[i] >= y_rows)
      return FB_ERR(FB_EINVAL, "unpermute: row_of[%zu] = %d: y has %zu rows", i, (int)row_of[i], y_rows);
  float *acc = malloc(cols * sizeof *acc);
  if (!acc) return FB_ERR(FB_ENOMEM, "unpermute: %zu columns", cols);
  for (size_t t = 0; t < tokens; ++t) {
    for (size_t j = 0; j < cols; ++j) acc[j] = 0.0f;
    for (int s = 0; s < top_k; ++s) {
      int32_t r = row_of[t * (size_t)top_k + s];
      if (r < 0) continue;
      float w = topk_w ? topk_w[t * (size_t)top_k + s] : 1.0f;
      if (f == FB_FMT_BF16) {
        const uint16_t *yr = (const uint16_t *)y + (size_t)r * cols;
        for (size_t j = 0; j < cols; ++j) acc[j] = fmaf(w, fb_bf16_to_f32(yr[j]), acc[j]);
      } else {
        const int8_t *yr = (const int8_t *)y + (size_t)r * cols;
        const uint8_t *er = y_e8m0 + (size_t)r * (cols / 32);
        for (size_t j = 0; j < cols; ++j) acc[j] = fmaf(w, fb_s2f6_decode(yr[j]) * fb_e8m0_decode(er[j / 32]), acc[j]);
      }
    }
    if (f == FB_FMT_S2F6 && rht)
      for (size_t b = 0; b < cols / 32; ++b) {
        float x[32];
        fb_rht32_inverse(acc + 32 * b, signs, x);
        memcpy(acc + 32 * b, x, sizeof x);
      }
    for (size_t j = 0; j < cols; ++j) {
      if (out) out[t * cols + j] = acc[j];
      if (out_bf16) out_bf16[t * cols + j] = fb_bf16_from_f32(acc[j]);
    }
  }
  free(acc);
  return FB_OK;
}

/* ---- SwiGLU -------------------------------------------------------------------------------- */
fb_status fb_swiglu_fwd_ref(const uint16_t *h, size_t rows, size_t f, uint16_t *a) {
  if (!h || !a) return FB_ERR(FB_EINVAL, "swiglu: NULL argument");
  if (f == 0) return FB_ERR(FB_EINVAL, "swiglu: f = 0");
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < f; ++c) {
      float g = fb_bf16_to_f32(h[r * 2 * f + c]), u = fb_bf16_to_f32(h[r * 2 * f + f + c]);
      a[r * f + c] = fb_bf16_from_f32(fbm_siluf(g) * u);
    }
  return FB_OK;
}

fb_status fb_swiglu_bwd_ref(const uint16_t *h, const uint16_t *da, size_t rows, size_t f, uint16_t *dh) {
  if (!h || !da || !dh) return FB_ERR(FB_EINVAL, "swiglu: NULL argument");
  if (f == 0) return FB_ERR(FB_EINVAL, "swiglu: f = 0");
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < f; ++c) {
      float g = fb_bf16_to_f32(h[r * 2 * f + c]), u = fb_bf16_to_f32(h[r * 2 * f + f + c]);
      float d = fb_bf16_to_f32(da[r * f + c]);
      float s = fbm_sigmoidf(g);
      float si = g * s;
      float du = d * si;
      float ds = s * (1.0f + g * (1.0f - s));
      float dg = (d * u) * ds;
      dh[r * 2 * f + c] = fb_bf16_from_f32(dg);
      dh[r * 2 * f + f + c] = fb_bf16_from_f32(du);
    }
  return FB_OK;
}

/* ---- tcopy: the BF16 / FP32 copies of the GPU expert layer's BF16 and NVFP4 backward, and MXFP8's dequantization -- */
fb_status fb_tcopy_ref(const void *x, const uint8_t *sf, const float *s_dec, fb_format src, int in_f32, int row_outer,
                       size_t rows, size_t cols, int trans, int rht, uint32_t signs, int scale, const float *scale_a,
                       const float *scale_b, int out_bf16, void *out) {
  int nv = src == FB_FMT_NVFP4 && !in_f32, mx = src == FB_FMT_MXFP8 && !in_f32;
  if (!x || !out || (nv && (!sf || !s_dec)) || (mx && !sf)) return FB_ERR(FB_EINVAL, "tcopy: NULL argument");
  if (!nv && !mx && !in_f32 && src != FB_FMT_BF16)
    return FB_ERR(FB_EINVAL, "tcopy: source format %d (BF16, FP32, NVFP4 or MXFP8)", (int)src);
  if (rht != 0 && rht != 16) return FB_ERR(FB_EINVAL, "tcopy: RHT-%d (16 only)", rht);
  if (scale < 0 || (scale && !in_f32)) return FB_ERR(FB_EINVAL, "tcopy: scaling takes FP32 sources");
  size_t orows = trans ? cols : rows, ocols = trans ? rows : cols;
  if (ocols % 16 || (nv && cols % 16)) return FB_ERR(FB_EINVAL, "tcopy: %zu x %zu: the rows copied are not 16-aligned", rows, cols);
  if (mx && cols % 32) return FB_ERR(FB_EINVAL, "tcopy: %zu x %zu MXFP8: the rows are not whole blocks of 32", rows, cols);
  float sc = (scale_a ? *scale_a : 1.0f) * (scale_b ? *scale_b : 1.0f), inv = scale ? 1.0f / (float)scale : 1.0f;
  for (size_t i = 0; i < orows; ++i)
    for (size_t j0 = 0; j0 < ocols; j0 += 16) {
      float v[16];
      for (int j = 0; j < 16; ++j) {
        size_t r = trans ? j0 + (size_t)j : i, c = trans ? i : j0 + (size_t)j, e = r * cols + c;
        if (in_f32) v[j] = ((const float *)x)[e];
        else if (mx) v[j] = fb_e4m3_decode(((const uint8_t *)x)[e]) * fb_e8m0_decode(sf[e / 32]);
        else if (!nv) v[j] = fb_bf16_to_f32(((const uint16_t *)x)[e]);
        else {
          uint8_t q = (uint8_t)((((const uint8_t *)x)[e / 2] >> (4 * (e & 1))) & 15u);
          v[j] = (fb_e2m1_decode(q) * fb_e4m3_decode(sf[e / 16])) * s_dec[row_outer ? r : 0];
        }
      }
      if (rht) {
        for (int j = 0; j < 16; ++j)
          if (signs >> j & 1u) v[j] = -v[j];
        for (int h = 1; h < 16; h <<= 1)
          for (int j = 0; j < 16; ++j)
            if (!(j & h)) {
              float a = v[j], b = v[j + h];
              v[j] = a + b, v[j + h] = a - b;
            }
      }
      if (scale)
        for (int j = 0; j < 16; ++j) v[j] = (v[j] * sc) * inv;
      for (int j = 0; j < 16; ++j) {
        size_t o = i * ocols + j0 + (size_t)j;
        if (out_bf16) ((uint16_t *)out)[o] = fb_bf16_from_f32(v[j]);
        else ((float *)out)[o] = v[j];
      }
    }
  return FB_OK;
}

/* ---- AdamW --------------------------------------------------------------------------------- */
fb_status fb_adamw_ref(float *w, float *m, float *v, const float *grad, size_t rows, size_t cols,
                       const fb_adamw_hparams *h, const fb_adamw_next *next) {
  if (!w || !m || !v || !grad || !h) return FB_ERR(FB_EINVAL, "adamw: NULL argument");
  if (rows == 0 || cols == 0) return FB_ERR(FB_EINVAL, "adamw: %zu x %zu weights", rows, cols);
  const fb_qspec *q = next ? &next->q : NULL;
  if (next) {
    if (next->experts < 1 || rows % (size_t)next->experts)
      return FB_ERR(FB_EINVAL, "adamw: %zu rows are not %d experts of equal rows", rows, next->experts);
    if (!next->codes) return FB_ERR(FB_EINVAL, "adamw: next weights: NULL codes");
    if (q->format == FB_FMT_MXFP8 && (q->e5m2 || q->rht || cols % 32 || !next->scales))
      return FB_ERR(FB_EINVAL, "adamw: MXFP8 weights need E4M3 elements, no RHT, cols %% 32 == 0 and scales");
    if (q->format == FB_FMT_NVFP4 && (q->outer == FB_GRAN_TOKEN || q->rht || cols % 16 || !next->scales || !next->s_dec))
      return FB_ERR(FB_EINVAL, "adamw: NVFP4 weights need tensor or expert outer scales, no RHT, cols %% 16 == 0, "
                               "scales and s_dec");
    if (q->format == FB_FMT_S2F6) return FB_ERR(FB_EINVAL, "adamw: S2F6 is not a weight format");
  }
  for (size_t i = 0; i < rows * cols; ++i) {
    float g = grad[i] * h->gscale;
    m[i] = h->b1 * m[i] + (1.0f - h->b1) * g;
    v[i] = h->b2 * v[i] + (1.0f - h->b2) * (g * g);
    float mhat = m[i] / h->bc1;
    float vhat = v[i] / h->bc2;
    w[i] = w[i] - h->lr * (mhat / (sqrtf(vhat) + h->eps) + h->wd * w[i]);
  }
  if (!next) return FB_OK;
  if (q->format == FB_FMT_BF16) {
    for (size_t i = 0; i < rows * cols; ++i) ((uint16_t *)next->codes)[i] = fb_bf16_from_f32(w[i]);
    return FB_OK;
  }
  if (q->format == FB_FMT_MXFP8) {
    fb_sr_opts r = {q->rounding, next->seed, next->stream, next->step};
    return fb_mxfp8_quantize(w, rows, cols, FB_MX_ROWWISE, &r, next->codes, next->scales);
  }
  size_t E = (size_t)next->experts, per = rows / E;
  size_t *goff = malloc((E + 1) * sizeof *goff);
  if (!goff) return FB_ERR(FB_ENOMEM, "adamw: %zu experts", E);
  for (size_t e = 0; e <= E; ++e) goff[e] = e * per;
  int group = q->outer == FB_GRAN_EXPERT;
  if (next->amax) {
    for (size_t g = 0; g < (group ? E : 1); ++g) next->amax[g] = 0.0f;
    for (size_t i = 0; i < rows * cols; ++i) {
      float *a = &next->amax[group ? i / (per * cols) : 0];
      *a = fmaxf(*a, fabsf(w[i]));
    }
  }
  fb_nvfp4_opts o = {.outer = group ? FB_OUTER_GROUP : FB_OUTER_TENSOR, .group_offsets = goff, .ngroups = E,
                     .four_over_six = q->four_over_six, .two_d = q->two_d, .rounding = q->rounding,
                     .seed = next->seed, .stream = next->stream, .step = next->step};
  fb_status s = fb_nvfp4_quantize(w, rows, cols, &o, next->codes, next->scales, next->s_dec, NULL);
  free(goff);
  return s;
}
