/* unpermute.cuh — combine: each token's k expert rows summed back, router-weighted; exactly fb_unpermute_ref.
 * out[t][j] = acc, acc = fmaf(w[t,slot], y[row_of[t,slot]][j], acc) over slot = 0..k-1 in order from 0.0f.
 * Parameters: FB_KERNEL, FB_THREADS, FB_ROWS (tokens per CTA), FB_S2F6 (y is S2F6 codes + E8M0 per 32 in the
 * rotated domain: y = (q / 64.0f) * e8m0; else BF16), FB_RHT (S2F6: the inverse RHT-32 once per token and
 * block, as fb_rht32_inverse), FB_OUT_BF16 (BF16 round-to-nearest-even output instead of FP32).
 * Reads p.in (y rows, cols values each), p.in_scales (S2F6: E8M0, cols/32 per row), p.row_of (int32
 * [rows*top_k]; < 0: skipped), p.topk_w (FP32 rows x top_k; 0: every weight is 1), p.rows (tokens), p.cols,
 * p.top_k, p.signs. Writes p.out (rows x cols).
 * A thread per (token, block of 32 values) for S2F6, per (token, 8 values) for BF16 (cols % 8 == 0). */
#include "fb_formats.h"
#include "fb_kparams.h"
#include "fb_moe.h"

#if FB_RHT && !FB_S2F6
#error "unpermute: the inverse RHT applies to the S2F6 payload only"
#endif
#if FB_S2F6
#define FB_W 32
#else
#define FB_W 8
#endif

extern "C" __global__ void __launch_bounds__(FB_THREADS) FB_KERNEL(const fb_kp_moe p) {
  const long long nv = p.cols / FB_W;
  const int K = p.top_k;
  const int *row_of = reinterpret_cast<const int *>(p.row_of);
  const float *tw = reinterpret_cast<const float *>(p.topk_w);
  for (long long it = threadIdx.x; it < FB_ROWS * nv; it += FB_THREADS) {
    const long long t = (long long)blockIdx.x * FB_ROWS + it / nv, b = it % nv;
    if (t >= p.rows) break;
    float acc[FB_W];
#pragma unroll
    for (int j = 0; j < FB_W; ++j) acc[j] = 0.0f;
    for (int s = 0; s < K; ++s) {
      const int r = row_of[t * K + s];
      if (r < 0) continue;
      const float w = p.topk_w ? tw[t * K + s] : 1.0f;
#if FB_S2F6
      const uint4 *src = reinterpret_cast<const uint4 *>(reinterpret_cast<const signed char *>(p.in) + (long long)r * p.cols) + b * 2;
      const float sc = fbf_e8m0_dec(reinterpret_cast<const unsigned char *>(p.in_scales)[(long long)r * nv + b]);
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        uint4 x = src[k];
        unsigned q[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          float y = ((float)(signed char)(q[j >> 2] >> (8 * (j & 3))) / 64.0f) * sc;
          acc[16 * k + j] = fmaf(w, y, acc[16 * k + j]);
        }
      }
#else
      uint4 x = reinterpret_cast<const uint4 *>(reinterpret_cast<const unsigned short *>(p.in) + (long long)r * p.cols)[b];
      unsigned q[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        acc[2 * j] = fmaf(w, __uint_as_float(q[j] << 16), acc[2 * j]);
        acc[2 * j + 1] = fmaf(w, __uint_as_float(q[j] & 0xFFFF0000u), acc[2 * j + 1]);
      }
#endif
    }
#if FB_RHT
    fbf_wht32(acc);
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      float v = acc[i] / 32.0f;
      acc[i] = (p.signs >> i) & 1u ? -v : v;
    }
#endif
#if FB_OUT_BF16
    uint4 *o = reinterpret_cast<uint4 *>(reinterpret_cast<unsigned short *>(p.out) + t * p.cols) + b * (FB_W / 8);
#pragma unroll
    for (int k = 0; k < FB_W / 8; ++k) {
      unsigned h[4];
#pragma unroll
      for (int j = 0; j < 4; ++j)
        h[j] = (unsigned)fbo_bf16_rne(acc[8 * k + 2 * j]) | (unsigned)fbo_bf16_rne(acc[8 * k + 2 * j + 1]) << 16;
      o[k] = make_uint4(h[0], h[1], h[2], h[3]);
    }
#else
    float4 *o = reinterpret_cast<float4 *>(reinterpret_cast<float *>(p.out) + t * p.cols) + b * (FB_W / 4);
#pragma unroll
    for (int k = 0; k < FB_W / 4; ++k) o[k] = make_float4(acc[4 * k], acc[4 * k + 1], acc[4 * k + 2], acc[4 * k + 3]);
#endif
  }
}
