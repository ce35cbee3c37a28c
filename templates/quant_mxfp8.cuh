/* quant_mxfp8.cuh — MXFP8 (E4M3 + E8M0 per 32) along rows, exactly as fb_mxfp8_quantize(FB_MX_ROWWISE).
 * Parameters: FB_KERNEL, FB_THREADS, FB_SR, FB_IN_F32. A thread per block of 32, grid-stride.
 * Reads p.in (rows x cols); writes p.out (rows*cols E4M3 codes), p.scales (E8M0, rows*cols/32). */
#include "fb_formats.h"
#include "fb_kparams.h"
#include "fb_philox.h"

/* Block b's 32 inputs as raw words (BF16 pairs, or FP32), then as floats: the raw words of the next
 * block are what stays in flight while one is quantized. */
#if FB_IN_F32
#define NRAW 8
typedef float4 raw_t;
#else
#define NRAW 4
typedef uint4 raw_t;
#endif
static __device__ __forceinline__ void load_raw(const fb_kp_mem &p, long long b, raw_t t[NRAW]) {
  const raw_t *s = reinterpret_cast<const raw_t *>(p.in) + b * NRAW;
#pragma unroll
  for (int k = 0; k < NRAW; ++k) t[k] = s[k];
}
static __device__ __forceinline__ void unpack(const raw_t t[NRAW], float v[32]) {
#pragma unroll
  for (int k = 0; k < NRAW; ++k) {
#if FB_IN_F32
    v[4 * k] = t[k].x, v[4 * k + 1] = t[k].y, v[4 * k + 2] = t[k].z, v[4 * k + 3] = t[k].w;
#else
    unsigned w[4] = {t[k].x, t[k].y, t[k].z, t[k].w};
#pragma unroll
    for (int j = 0; j < 4; ++j) v[8 * k + 2 * j] = __uint_as_float(w[j] << 16), v[8 * k + 2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
#endif
  }
}

extern "C" __global__ void __launch_bounds__(FB_THREADS) FB_KERNEL(const fb_kp_mem p) {
  const long long nblk = p.rows * p.cols / 32, stride = (long long)gridDim.x * FB_THREADS;
  long long b = (long long)blockIdx.x * FB_THREADS + threadIdx.x;
  raw_t nxt[NRAW];
  if (b < nblk) load_raw(p, b, nxt);
  for (; b < nblk; b += stride) {
    float v[32];
    unpack(nxt, v);
    if (b + stride < nblk) load_raw(p, b + stride, nxt); /* in flight while this block is quantized */
    float a = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; ++j) a = fbf_absmax_nan(a, v[j]); /* NaN propagates: the scale becomes 0xFF */
    unsigned e = fbf_e8m0_up(a * (1.0f / 448.0f));
    unsigned w[8];
#if FB_SR
    unsigned r[8];
    unsigned long long c0 = (unsigned long long)b * 2; /* the block's first element / 16 */
    if (p.sr_ld) { /* the map (fb_kparams.h): row i = 32 b / cols */
      const long long i = b * 32 / p.cols;
      c0 = (unsigned long long)((i + p.sr_row0) * p.sr_ld + p.sr_col0 + (b * 32 - i * p.cols)) >> 4;
    }
    for (int h = 0; h < 2; ++h) {
      unsigned long long c = c0 + h;
      fb_u32 ctr[4] = {p.step, (fb_u32)c, (fb_u32)(c >> 32), 0u}, key[2] = {p.seed, p.stream};
      fb_philox4x32_10(ctr, key, r + 4 * h);
    }
    if (e <= FBF_SRZ_EMAX) { /* every finite block but the huge: no branch per element (fb_formats.h) */
      const float s = fbf_srz_scale(e);
#pragma unroll
      for (int k = 0; k < 8; ++k) w[k] = fbf_e4m3x4_srz(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3], s, r[k]);
    } else {
      const float inv = fbf_pow2(127 - (int)e);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        unsigned rw = r[k];
        w[k] = fbf_e4m3x2_sr(v[4 * k] * inv, v[4 * k + 1] * inv, rw & 255u, (rw >> 8) & 255u) |
               fbf_e4m3x2_sr(v[4 * k + 2] * inv, v[4 * k + 3] * inv, (rw >> 16) & 255u, rw >> 24) << 16;
      }
    }
#else
    const float inv = fbf_pow2(127 - (int)e);
#pragma unroll
    for (int k = 0; k < 8; ++k) /* four codes a word, two per conversion */
      w[k] = fbf_e4m3x2_rn(v[4 * k] * inv, v[4 * k + 1] * inv) | fbf_e4m3x2_rn(v[4 * k + 2] * inv, v[4 * k + 3] * inv) << 16;
#endif
    uint4 *o = reinterpret_cast<uint4 *>(p.out) + b * 2;
    o[0] = make_uint4(w[0], w[1], w[2], w[3]);
    o[1] = make_uint4(w[4], w[5], w[6], w[7]);
    reinterpret_cast<unsigned char *>(p.scales)[b] = (unsigned char)e;
  }
}
