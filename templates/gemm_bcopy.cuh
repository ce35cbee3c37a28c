/* gemm_bcopy.cuh — the exact BF16 copy of a block-scaled operand that the Hopper GEMMs (gemm_sm90.cuh, FB_KIND 1 and
 * 3) multiply by, made once per step: NVFP4 (FB_SRC 1) e2m1(q) * float(sf) with no outer scale (the GEMM's epilogue
 * applies it), or MXFP8 (FB_SRC 2) e4m3(q) * 2^(e-127); BF16 by round-to-nearest-even, which never acts for NVFP4
 * (at most 6 significant bits) and acts for MXFP8 only below BF16's normal range. K is permuted inside every 32-group
 * (NVFP4: position P holds element fb_gemm_kperm(P)) or 16-group (MXFP8: fb_gemm_kperm16) so that the copy meets the
 * register fragment of the decoded A operand. As fb_gemm_weights_bf16_ref / fb_gemm_mxfp8_bf16_ref (runtime/gemm_host.c).
 * Four threads per 32-group (8 outputs each); reads p.in (codes), p.scales; writes p.out (BF16, rows x cols); p.rows, p.cols (cols % 32 == 0).
 * Parameters: FB_KERNEL, FB_THREADS, FB_SRC. */
#include "fb_formats.h"
#include "fb_kparams.h"

static __device__ __forceinline__ unsigned fbb_bf16(float x) { /* RNE, NaN kept quiet */
  unsigned u = fbf_f2u(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (u >> 16) | 0x40u;
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

extern "C" __global__ void __launch_bounds__(FB_THREADS) FB_KERNEL(const fb_kp_mem p) {
  /* four threads per 32-group, each writing 8 consecutive outputs (16 bytes): a warp's store is 512 contiguous bytes */
  const long long ng = p.rows * p.cols / 32;
  for (long long it = (long long)blockIdx.x * FB_THREADS + threadIdx.x; it < 4 * ng; it += (long long)gridDim.x * FB_THREADS) {
    const long long g = it >> 2;
    const int j = (int)(it & 3); /* output positions P = 8j .. 8j+7 of the group */
    unsigned o[4];
#if FB_SRC == 1
    const uint4 c = reinterpret_cast<const uint4 *>(p.in)[g]; /* the group's 16 bytes (the quad reads the same sector) */
    const unsigned short s2 = reinterpret_cast<const unsigned short *>(p.scales)[g];
    const float sf[2] = {fbf_e4m3_dec(s2 & 0xFFu), fbf_e4m3_dec(s2 >> 8)};
    const unsigned w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      unsigned b[2];
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int P = 8 * j + 2 * h + q, e = 8 * ((P & 7) >> 1) + 4 * (P >> 4) + 2 * ((P & 15) >> 3) + (P & 1);
        b[q] = fbb_bf16(fbf_e2m1_dec((w[e >> 3] >> (4 * (e & 7))) & 15u) * sf[e >> 4]);
      }
      o[h] = b[0] | (b[1] << 16);
    }
#else
    const uint4 c = reinterpret_cast<const uint4 *>(p.in)[2 * g + (j >> 1)]; /* the 16 codes of this half of the group */
    const float sc = fbf_e8m0_dec(reinterpret_cast<const unsigned char *>(p.scales)[g]);
    const unsigned w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      unsigned b[2];
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int p16 = 8 * (j & 1) + 2 * h + q, e = 4 * ((p16 & 7) >> 1) + 2 * (p16 >> 3) + (p16 & 1); /* within the half */
        b[q] = fbb_bf16(fbf_e4m3_dec((w[e >> 2] >> (8 * (e & 3))) & 255u) * sc);
      }
      o[h] = b[0] | (b[1] << 16);
    }
#endif
    reinterpret_cast<uint4 *>(p.out)[it] = make_uint4(o[0], o[1], o[2], o[3]);
  }
}
