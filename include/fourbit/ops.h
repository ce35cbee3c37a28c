/* fourbit/ops.h — the CPU references of the train step's other kernels (runtime/ops.c): BF16 rounding, the router,
 * permute, unpermute (combine) and its backward, SwiGLU, the copy of tcopy.cuh, and AdamW. */
#ifndef FOURBIT_OPS_H
#define FOURBIT_OPS_H

#include "fourbit/base.h"
#include "fourbit/numerics.h"
#include "fourbit/recipe.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* The copy templates/tcopy.cuh makes (FB_OP_TCOPY): x (rows x cols) is BF16 (src FB_FMT_BF16, in_f32 0), FP32 (in_f32 1),
 * NVFP4 (codes, sf E4M3 per 16 along the rows, s_dec one FP32 per tensor or, row_outer, per row; an element is
 * (fb_e2m1_decode(q) * fb_e4m3_decode(sf)) * s_dec as fb_nvfp4_dequantize) or MXFP8 (E4M3 codes one a byte, sf E8M0 per
 * 32 along the rows, cols a multiple of 32; s_dec and row_outer unused; an element is fb_e4m3_decode(q) *
 * fb_e8m0_decode(sf) as fb_mxfp8_dequantize). trans: out is cols x rows (out[c][r] = x[r][c]), else rows x cols.
 * rht 16: each aligned 16 outputs of an out row, v, become the unnormalized RHT-16 of v (v_j negated where bit j of
 * signs is set, then the butterflies h = 1, 2, 4, 8: for j with bit h clear, (v_j, v_j+h) = (v_j + v_j+h, v_j - v_j+h)
 * in FP32). scale n > 0 (FP32 sources): every value v = (v * (sa * sb)) * (1.0f / n), sa = *scale_a and sb = *scale_b
 * (NULL: 1) — the wgrad GEMM's outer scales and RHT divisor. Output BF16 (out_bf16, fb_bf16_from_f32) or FP32. The out
 * row length must be a multiple of 16. */
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
