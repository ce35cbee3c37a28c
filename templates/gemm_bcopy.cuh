/* gemm_bcopy.cuh — the exact BF16 copy of a block-scaled operand that the Hopper GEMMs (gemm_sm90.cuh, FB_KIND 1 and
 * 3) multiply by, made once per step: NVFP4 (FB_SRC 1) e2m1(q) * float(sf) with no outer scale (the GEMM's epilogue
 * applies it), or MXFP8 (FB_SRC 2) e4m3(q) * 2^(e-127); BF16 by round-to-nearest-even, which never acts for NVFP4
 * (at most 6 significant bits) and acts for MXFP8 only below BF16's normal range. K is permuted inside every 32-group
 * (NVFP4: position P holds element fb_gemm_kperm(P)) or 16-group (MXFP8: fb_gemm_kperm16) so that the copy meets the
 * register fragment of the decoded A operand. As fb_gemm_weights_bf16_ref / fb_gemm_mxfp8_bf16_ref (runtime/gemm_host.c).
 * A thread per 32-group; reads p.in (codes), p.scales; writes p.out (BF16, rows x cols); p.rows, p.cols (cols % 32 == 0).
 * FB_PAIR 1 (tune value pair): lane pairs write their two groups' 128 contiguous bytes as whole sectors (fb_store.h
 * fbf_store64_pair), so the loop runs by warps: a lane past the last group computes on a zero block and stores nothing;
 * 0: each lane stores its own 64 bytes (half sectors a store instruction).
 * Parameters: FB_KERNEL, FB_THREADS, FB_SRC, FB_PAIR. */
#include "fb_formats.h"
#include "fb_kparams.h"
#include "fb_store.h"
#ifndef FB_PAIR
#define FB_PAIR 0
#endif

extern "C" __global__ void __launch_bounds__(FB_THREADS) FB_KERNEL(const fb_kp_mem p) {
  const long long ng = p.rows * p.cols / 32;
  const bool odd = threadIdx.x & 1;
  for (long long g0 = (long long)blockIdx.x * FB_THREADS + (threadIdx.x & ~31u); g0 < ng; g0 += (long long)gridDim.x * FB_THREADS) {
    const long long g = g0 + (threadIdx.x & 31);
    const bool in = g < ng;
    unsigned o[16];
#if FB_SRC == 1
    float v[32];
    const uint4 c = in ? reinterpret_cast<const uint4 *>(p.in)[g] : make_uint4(0u, 0u, 0u, 0u);
    const unsigned short s2 = in ? reinterpret_cast<const unsigned short *>(p.scales)[g] : (unsigned short)0;
    const float sf[2] = {fbf_e4m3_dec(s2 & 0xFFu), fbf_e4m3_dec(s2 >> 8)};
    const unsigned w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = fbf_e2m1_dec((w[i >> 3] >> (4 * (i & 7))) & 15u) * sf[i >> 4];
#pragma unroll
    for (int P = 0; P < 32; P += 2) {
      const int e0 = 8 * (((P & 15) & 7) >> 1) + 4 * (P >> 4) + 2 * ((P & 15) >> 3) + (P & 1), e1 = e0 + 1;
      o[P / 2] = fbf_bf16_rne(v[e0]) | (fbf_bf16_rne(v[e1]) << 16);
    }
#else /* the block's copy as the fused requantizer writes it too (mx_col.cuh FB_KBF16) */
    const uint4 z = make_uint4(0u, 0u, 0u, 0u);
    const uint4 c0 = in ? reinterpret_cast<const uint4 *>(p.in)[2 * g] : z, c1 = in ? reinterpret_cast<const uint4 *>(p.in)[2 * g + 1] : z;
    const unsigned w[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
    fbf_mx_block_kbf16(w, in ? reinterpret_cast<const unsigned char *>(p.scales)[g] : 127u, o);
#endif
#if FB_PAIR
    fbf_store64_pair((unsigned long long)p.out + (unsigned long long)g * 64u, o, in, odd);
#else
    (void)odd;
    if (in) {
      uint4 *d = reinterpret_cast<uint4 *>(p.out) + 4 * g;
#pragma unroll
      for (int k = 0; k < 4; ++k) d[k] = make_uint4(o[4 * k], o[4 * k + 1], o[4 * k + 2], o[4 * k + 3]);
    }
#endif
  }
}
