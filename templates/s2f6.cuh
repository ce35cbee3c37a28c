/* s2f6.cuh — the combine payload: RHT-32 (FB_RHT) + S2F6 quantization (FB_DIR 0, as fb_s2f6_quantize), or
 * its dequantization + inverse RHT to FP32 (FB_DIR 1, as fb_s2f6_dequantize). A thread per block of 32.
 * Parameters: FB_KERNEL, FB_THREADS, FB_DIR, FB_RHT, FB_IN_F32 (quantize's input type).
 * Quantize: reads p.in (rows x cols), p.signs; writes p.out (int8), p.scales (E8M0 per 32).
 * Dequantize: reads p.in (int8 codes), p.scales, p.signs; writes p.out (FP32). */
#include "fb_formats.h"
#include "fb_kparams.h"


/* a value the compiler must keep in a register (it would rather recompute each mask in the loop: 2.5 instructions an
 * element instead of 1) */
static __device__ __forceinline__ unsigned s2_keep(unsigned x) {
#if defined(__CUDA_ARCH__)
  asm volatile("" : "+r"(x));
#endif
  return x;
}

extern "C" __global__ void __launch_bounds__(FB_THREADS) FB_KERNEL(const fb_kp_mem p) {
  const long long nblk = p.rows * p.cols / 32;
#if FB_DIR == 1
  __shared__ float stage[FB_THREADS / 32][32][33];
#endif
#if FB_DIR == 0
  /* RHT signs as bit-31 masks, one an element (hoisted): the flip is folded into the BF16 unpack (even element:
   * (w << 16) + m, a lea; odd: (w & 0xFFFF0000) ^ m, a lop3) or is one xor for FP32 input */
  unsigned sm[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) sm[i] = s2_keep(FB_RHT ? (p.signs >> i) << 31 : 0u);
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
      t[4 * k] = __uint_as_float(__float_as_uint(x.x) ^ sm[4 * k]), t[4 * k + 1] = __uint_as_float(__float_as_uint(x.y) ^ sm[4 * k + 1]);
      t[4 * k + 2] = __uint_as_float(__float_as_uint(x.z) ^ sm[4 * k + 2]), t[4 * k + 3] = __uint_as_float(__float_as_uint(x.w) ^ sm[4 * k + 3]);
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
      for (int j = 0; j < 4; ++j) {
        const int i = 8 * k + 2 * j;
        t[i] = __uint_as_float((w[j] << 16) + sm[i]); /* + 2^31 flips bit 31 only */
        t[i + 1] = __uint_as_float((w[j] & 0xFFFF0000u) ^ sm[i + 1]);
      }
    }
#endif
#if FB_RHT
    fbf_wht32(t);
#endif
    float a = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; ++j) a = fbf_absmax_nan(a, t[j]); /* NaN if any is NaN, as the reference's amax */
    const unsigned e = fbf_s2f6_exp(a);
    unsigned w[8];
    if (e - 6u <= 247u) {
      /* 6 <= e <= 253: every |t * 2^(133-e)| <= 127 and 2^(133-e) is a normal float, so one fma with 1.5 * 2^23 rounds
       * t * inv * 64 (exact but where the reference's t * inv is subnormal, and then rounds to 0 on both sides) to
       * the nearest even integer q, which sits in the low byte of the sum as two's complement: no clamp, no NaN */
      const float inv64 = __uint_as_float((260u - e) << 23);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        unsigned y[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) y[j] = __float_as_uint(fmaf(t[4 * k + j], inv64, 12582912.0f));
        w[k] = fbf_prmt(fbf_prmt(y[0], y[1], 0x0040u), fbf_prmt(y[2], y[3], 0x0040u), 0x5410u);
      }
    } else { /* NaN, Inf, a huge or a tiny amax: the general rule */
      const float inv = fbf_pow2(127 - (int)e);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        unsigned word = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) word |= fbf_s2f6_code(t[4 * k + j], inv) << (8 * j);
        w[k] = word;
      }
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
      fbf_s2f6_dec16(w, sc, t + 16 * k);
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
