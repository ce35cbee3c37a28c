/* combine_bwd.cuh — the combine's backward (docs/numerics.md, the expert layer op by op: the gradient that enters the
 * w2 GEMMs and the router weights' gradient), exactly as runtime/model_experts.c computes them on the host:
 * for every token t and slot s whose entry has a row r = row_of[t*k + s] >= 0,
 *   dY[r][j]       = bf16(w[t,s] * bf16(dy[t][j]))          (BF16, round to nearest even both times)
 *   dtopk_w[t, s]  = sum_j dy[t][j] * Yhat[r][j]            (in double; the products are exact in double)
 * and dtopk_w[t, s] = 0 for a dropped entry (r < 0). Yhat is the combine payload as the forward's combine read it:
 * FB_S2F6 1: S2F6 codes / 64 * E8M0 per 32, inverse RHT-32 (FB_RHT) per block, as fb_s2f6_dequantize; FB_S2F6 0:
 * BF16 rows. dY rows that no entry names (the padding of each expert's rows) are not written: the caller zeroes them.
 * The host sums the dot product in order of j; here each thread sums its blocks of 32 in order and the CTA adds the
 * threads' sums in a tree, all in double: the float result equals the host's unless the two double sums straddle
 * a float rounding boundary (a relative difference of ~1e-16 before the rounding to float).
 * Parameters: FB_KERNEL, FB_THREADS, FB_S2F6, FB_RHT.
 * Reads p.in (Yhat's payload rows), p.in_scales (S2F6: E8M0, cols/32 per row), p.in2 (dy: FP32 rows x cols),
 * p.row_of, p.topk_w, p.rows (tokens), p.cols (cols % 32 == 0), p.top_k, p.signs. Writes p.out (dY: BF16, rows in
 * expert order), p.grad_w (FP32 rows x top_k). A CTA per token, a thread per block of 32 values. */
#include "fb_formats.h"
#include "fb_kparams.h"
#include "fb_moe.h"

#if FB_RHT && !FB_S2F6
#error "combine_bwd: the inverse RHT applies to the S2F6 payload only"
#endif

extern "C" __global__ void __launch_bounds__(FB_THREADS) FB_KERNEL(const fb_kp_moe p) {
  __shared__ double part[FB_THREADS / 32];
  const long long t = blockIdx.x, nb = p.cols / 32;
  const int K = p.top_k, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int *row_of = reinterpret_cast<const int *>(p.row_of);
  const float *tw = reinterpret_cast<const float *>(p.topk_w);
  const float *dyt = reinterpret_cast<const float *>(p.in2) + t * p.cols;
  if (t >= p.rows) return;
  for (int s = 0; s < K; ++s) {
    const int r = row_of[t * K + s];
    if (r < 0) { /* uniform over the CTA */
      if (threadIdx.x == 0) reinterpret_cast<float *>(p.grad_w)[t * K + s] = 0.0f;
      continue;
    }
    const float w = tw[t * K + s];
    double acc = 0.0;
    for (long long b = threadIdx.x; b < nb; b += FB_THREADS) {
      float g[32], y[32];
      const float4 *gs = reinterpret_cast<const float4 *>(dyt + b * 32);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        float4 v = gs[k];
        g[4 * k] = v.x, g[4 * k + 1] = v.y, g[4 * k + 2] = v.z, g[4 * k + 3] = v.w;
      }
#if FB_S2F6
      const uint4 *src = reinterpret_cast<const uint4 *>(reinterpret_cast<const signed char *>(p.in) + (long long)r * p.cols) + b * 2;
      const float sc = fbf_e8m0_dec(reinterpret_cast<const unsigned char *>(p.in_scales)[(long long)r * nb + b]);
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        uint4 x = src[k];
        unsigned q[4] = {x.x, x.y, x.z, x.w};
        fbf_s2f6_dec16(q, sc, y + 16 * k);
      }
#if FB_RHT
      fbf_wht32(y);
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        float v = y[i] / 32.0f;
        y[i] = (p.signs >> i) & 1u ? -v : v;
      }
#endif
#else
      const uint4 *src = reinterpret_cast<const uint4 *>(reinterpret_cast<const unsigned short *>(p.in) + (long long)r * p.cols) + b * 4;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        uint4 x = src[k];
        unsigned q[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) y[8 * k + 2 * j] = __uint_as_float(q[j] << 16), y[8 * k + 2 * j + 1] = __uint_as_float(q[j] & 0xFFFF0000u);
      }
#endif
      unsigned h[16];
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        acc += (double)g[j] * (double)y[j];
        const unsigned short d = fbo_bf16_rne(w * fbo_bf16_f32(fbo_bf16_rne(g[j])));
        if (j & 1) h[j >> 1] |= (unsigned)d << 16;
        else h[j >> 1] = d;
      }
      uint4 *o = reinterpret_cast<uint4 *>(reinterpret_cast<unsigned short *>(p.out) + (long long)r * p.cols) + b * 4;
#pragma unroll
      for (int k = 0; k < 4; ++k) o[k] = make_uint4(h[4 * k], h[4 * k + 1], h[4 * k + 2], h[4 * k + 3]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, o);
    if (lane == 0) part[warp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      double sum = 0.0;
      for (int i = 0; i < FB_THREADS / 32; ++i) sum += part[i];
      reinterpret_cast<float *>(p.grad_w)[t * K + s] = (float)sum;
    }
    __syncthreads();
  }
}
