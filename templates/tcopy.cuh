/* tcopy.cuh — a matrix copied to BF16 or FP32 on the way to a GEMM operand of the GPU expert layer's BF16 and NVFP4
 * paths: dequantized (NVFP4 or MXFP8 source), transposed, Hadamard-transformed along its new rows (the unnormalized RHT-16
 * of the wgrad operands), scaled (the wgrad GEMM's outer scales and RHT divisor). MXFP8 -> FP32, not transposed, is the
 * GPU dequantizer of MXFP8 (fb_mxfp8_dequantize's values). Exactly fb_tcopy_ref (runtime/ops.c), whose comment in
 * include/fourbit/ops.h is the definition.
 * Parameters (from the generator): FB_KERNEL, FB_THREADS, FB_SRC (0 BF16, 1 FP32, 2 NVFP4, 3 MXFP8), FB_SRC_OUTER (NVFP4:
 * 0 one S_dec per tensor, 1 per row), FB_TRANS, FB_RHT (0 or 16), FB_SCALE (0, or the divisor n: v = (v * (sa * sb)) *
 * (1/n)), FB_OUT_BF16.
 * Reads p.in (rows x cols as stored: BF16, FP32, NVFP4 codes two a byte, or MXFP8 E4M3 codes one a byte), p.src_scales
 * (NVFP4: E4M3 per 16 along the rows; MXFP8: E8M0 per 32 along the rows, so cols must be a multiple of 32), p.src_s_dec
 * (NVFP4: its outer scales), p.s_dec and p.amax (FB_SCALE: sa = p.s_dec[0], sb = p.amax[0]; 0: 1), p.signs (FB_RHT),
 * p.rows, p.cols. Writes p.out: FB_TRANS 0 rows x cols, 1 cols x rows; may be p.in itself when FB_TRANS is 0 and a
 * source element is as wide as an output one (each thread reads its 16 values before it writes them; a narrower source,
 * NVFP4 or MXFP8 into FP32, would be overwritten ahead of the threads that read it).
 * A thread per 16 consecutive outputs of an out row, grid-stride. Transposed, consecutive threads take consecutive out
 * rows (= source columns), so the 16 loads of a warp's threads read consecutive addresses of each source row; each thread
 * stores 32 (BF16) or 64 (FP32) contiguous bytes. Out rows must be multiples of 16 long. */
#include "fb_formats.h"
#include "fb_kparams.h"

#ifndef FB_SRC_OUTER
#define FB_SRC_OUTER 0
#endif

static __device__ __forceinline__ float tc_load(const fb_kp_mem &p, long long r, long long c) {
  const long long e = r * p.cols + c;
#if FB_SRC == 0
  return __uint_as_float((unsigned)reinterpret_cast<const unsigned short *>(p.in)[e] << 16);
#elif FB_SRC == 1
  return reinterpret_cast<const float *>(p.in)[e];
#elif FB_SRC == 2
  const unsigned q = (reinterpret_cast<const unsigned char *>(p.in)[e >> 1] >> (4 * (unsigned)(e & 1))) & 15u;
  const float sf = fbf_e4m3_dec(reinterpret_cast<const unsigned char *>(p.src_scales)[e >> 4]);
  const float sd = reinterpret_cast<const float *>(p.src_s_dec)[FB_SRC_OUTER ? r : 0];
  return (fbf_e2m1_dec(q) * sf) * sd; /* no add anywhere: nothing to contract into an FMA */
#else /* MXFP8: fb_mxfp8_dequantize's E4M3 code times its block's E8M0 scale (NaN codes and the NaN scale 255 give NaN) */
  const float sf = fbf_e8m0_dec(reinterpret_cast<const unsigned char *>(p.src_scales)[e >> 5]);
  return fbf_e4m3_dec(reinterpret_cast<const unsigned char *>(p.in)[e]) * sf;
#endif
}

static __device__ __forceinline__ unsigned tc_bf16(float x) { /* fb_bf16_from_f32: RNE, NaN kept with the quiet bit */
  const unsigned u = __float_as_uint(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return ((u >> 16) | 0x40u) & 0xFFFFu;
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

extern "C" __global__ void __launch_bounds__(FB_THREADS) FB_KERNEL(const fb_kp_mem p) {
  const long long orows = FB_TRANS ? p.cols : p.rows, ocols = FB_TRANS ? p.rows : p.cols, nb = ocols / 16;
  const long long ng = orows * nb;
#if FB_SCALE
  const float sc = (p.s_dec ? reinterpret_cast<const float *>(p.s_dec)[0] : 1.0f) * (p.amax ? reinterpret_cast<const float *>(p.amax)[0] : 1.0f);
  const float inv = 1.0f / (float)FB_SCALE;
#endif
  for (long long g = (long long)blockIdx.x * FB_THREADS + threadIdx.x; g < ng; g += (long long)gridDim.x * FB_THREADS) {
    const long long i = FB_TRANS ? g % orows : g / nb, j0 = 16 * (FB_TRANS ? g / orows : g % nb);
    float v[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) v[j] = FB_TRANS ? tc_load(p, j0 + j, i) : tc_load(p, i, j0 + j);
#if FB_RHT
#pragma unroll
    for (int j = 0; j < 16; ++j)
      if ((p.signs >> j) & 1u) v[j] = -v[j];
#pragma unroll
    for (int h = 1; h < 16; h <<= 1)
#pragma unroll
      for (int j = 0; j < 16; ++j)
        if (!(j & h)) {
          const float a = v[j], b = v[j + h];
          v[j] = a + b, v[j + h] = a - b;
        }
#endif
#if FB_SCALE
#pragma unroll
    for (int j = 0; j < 16; ++j) v[j] = (v[j] * sc) * inv;
#endif
    const long long o = i * ocols + j0;
#if FB_OUT_BF16
    uint4 *d = reinterpret_cast<uint4 *>(reinterpret_cast<unsigned short *>(p.out) + o);
    unsigned w[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) w[k] = tc_bf16(v[2 * k]) | (tc_bf16(v[2 * k + 1]) << 16);
    d[0] = make_uint4(w[0], w[1], w[2], w[3]), d[1] = make_uint4(w[4], w[5], w[6], w[7]);
#else
    float4 *d = reinterpret_cast<float4 *>(reinterpret_cast<float *>(p.out) + o);
#pragma unroll
    for (int k = 0; k < 4; ++k) d[k] = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
#endif
  }
}
