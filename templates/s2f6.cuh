/* s2f6.cuh — the combine payload: RHT-32 (FB_RHT) + S2F6 quantization (FB_DIR 0, as fb_s2f6_quantize), or
 * its dequantization + inverse RHT to FP32 (FB_DIR 1, as fb_s2f6_dequantize). A thread per block of 32.
 * Parameters: FB_KERNEL, FB_THREADS, FB_DIR, FB_RHT, FB_IN_F32 (quantize's input type).
 * Quantize: reads p.in (rows x cols), p.signs; writes p.out (int8), p.scales (E8M0 per 32).
 * Dequantize: reads p.in (int8 codes), p.scales, p.signs; writes p.out (FP32). */
#include "fb_formats.h"
#include "fb_kparams.h"


extern "C" __global__ void __launch_bounds__(FB_THREADS) FB_KERNEL(const fb_kp_mem p) {
  const long long nblk = p.rows * p.cols / 32;
#if FB_DIR == 1
  __shared__ float stage[FB_THREADS / 32][32][33];
#endif
#if FB_DIR == 0 && !FB_IN_F32
  /* the next block's 64 input bytes are in flight while this one is transformed and quantized */
  uint4 nxt[4];
  {
    const long long b = (long long)blockIdx.x * FB_THREADS + threadIdx.x;
    if (b < nblk)
#pragma unroll
      for (int k = 0; k < 4; ++k) nxt[k] = reinterpret_cast<const uint4 *>(p.in)[b * 4 + k];
  }
#endif
  /* warp-uniform trip count: the dequantizer's warps store cooperatively */
  for (long long bw = (long long)blockIdx.x * FB_THREADS + (threadIdx.x & ~31); bw < nblk; bw += (long long)gridDim.x * FB_THREADS) {
    const long long b = bw + (threadIdx.x & 31);
    const bool live = b < nblk;
    float t[32];
#if FB_DIR == 0
    if (!live) continue;
#if FB_IN_F32
    const float4 *s = reinterpret_cast<const float4 *>(p.in) + b * 8;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      float4 x = s[k];
      t[4 * k] = x.x, t[4 * k + 1] = x.y, t[4 * k + 2] = x.z, t[4 * k + 3] = x.w;
    }
#else
    uint4 cur[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) cur[k] = nxt[k];
    const long long bn = b + (long long)gridDim.x * FB_THREADS;
    if (bn < nblk)
#pragma unroll
      for (int k = 0; k < 4; ++k) nxt[k] = reinterpret_cast<const uint4 *>(p.in)[bn * 4 + k];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      uint4 x = cur[k];
      unsigned w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) t[8 * k + 2 * j] = __uint_as_float(w[j] << 16), t[8 * k + 2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
    }
#endif
#if FB_RHT
#pragma unroll
    for (int i = 0; i < 32; ++i) t[i] = (p.signs >> i) & 1u ? -t[i] : t[i];
    fbf_wht32(t);
#endif
    float a = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      float x = fabsf(t[j]);
      if (x > a || x != x) a = a != a ? a : x;
    }
    unsigned e = fbf_s2f6_exp(a);
    float inv = fbf_pow2(127 - (int)e);
    unsigned w[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      unsigned word = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) word |= fbf_s2f6_code(t[4 * k + j], inv) << (8 * j);
      w[k] = word;
    }
    uint4 *o = reinterpret_cast<uint4 *>(p.out) + b * 2;
    o[0] = make_uint4(w[0], w[1], w[2], w[3]);
    o[1] = make_uint4(w[4], w[5], w[6], w[7]);
    reinterpret_cast<unsigned char *>(p.scales)[b] = (unsigned char)e;
#else
    const uint4 *s = reinterpret_cast<const uint4 *>(p.in) + (live ? b : 0) * 2;
    float sc = fbf_e8m0_dec(reinterpret_cast<const unsigned char *>(p.scales)[live ? b : 0]);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      uint4 x = s[k];
      unsigned w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int j = 0; j < 16; ++j) t[16 * k + j] = ((float)(signed char)(w[j >> 2] >> (8 * (j & 3))) / 64.0f) * sc;
    }
#if FB_RHT
    fbf_wht32(t);
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      float v = t[i] / 32.0f;
      t[i] = (p.signs >> i) & 1u ? -v : v;
    }
#endif
    /* stage the warp's 32 blocks in shared memory, then store them coalesced: the blocks of a warp's lanes
     * are consecutive, so its 32 x 32 floats are one contiguous run */
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
#pragma unroll
    for (int j = 0; j < 32; ++j) stage[wid][lane][j] = t[j];
    __syncwarp();
    const long long b0 = b - lane;
    float *o = reinterpret_cast<float *>(p.out) + b0 * 32;
#pragma unroll 4
    for (int it = 0; it < 32; ++it)
      if (b0 + it < nblk) o[it * 32 + lane] = stage[wid][it][lane];
    __syncwarp();
#endif
  }
}
