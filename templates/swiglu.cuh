/* swiglu.cuh — SwiGLU forward (FB_BWD 0) or backward (FB_BWD 1) on BF16; exactly fb_swiglu_fwd_ref /
 * fb_swiglu_bwd_ref (the element rules are fbo_swiglu_fwd / fbo_swiglu_bwd of fb_moe.h).
 * H is rows x 2f with the gate g = H[:, :f] and up u = H[:, f:]; f = p.cols, a multiple of 8.
 *   forward:  p.out = A = bf16(silu(g) * u), rows x f
 *   backward: p.in2 = dA (rows x f); p.out = dH = [bf16(dg) | bf16(du)], rows x 2f
 * Parameters: FB_KERNEL, FB_THREADS, FB_ROWS x FB_COLS (the tile of f-columns a CTA takes; grid-stride over
 * tiles), FB_BWD. A thread per 8 columns (16-byte loads and stores). Reads p.in (H), p.in2, p.rows, p.cols. */
#include "fb_kparams.h"
#include "fb_math.h"
#include "fb_moe.h"

static __device__ __forceinline__ void unpack8(uint4 x, float v[8]) {
  unsigned w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) v[2 * j] = __uint_as_float(w[j] << 16), v[2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
}

static __device__ __forceinline__ uint4 pack8(const float v[8]) {
  unsigned w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) w[j] = (unsigned)fbo_bf16_rne(v[2 * j]) | (unsigned)fbo_bf16_rne(v[2 * j + 1]) << 16;
  return make_uint4(w[0], w[1], w[2], w[3]);
}

extern "C" __global__ void __launch_bounds__(FB_THREADS) FB_KERNEL(const fb_kp_moe p) {
  const long long f = p.cols, ntr = (p.rows + FB_ROWS - 1) / FB_ROWS, ntc = (f + FB_COLS - 1) / FB_COLS;
  for (long long tile = blockIdx.x; tile < ntr * ntc; tile += gridDim.x) {
    const long long r0 = tile / ntc * FB_ROWS, c0 = tile % ntc * FB_COLS;
    for (int it = threadIdx.x; it < FB_ROWS * (FB_COLS / 8); it += FB_THREADS) {
      const long long r = r0 + it / (FB_COLS / 8), c = c0 + (long long)(it % (FB_COLS / 8)) * 8;
      if (r >= p.rows || c >= f) continue;
      const unsigned short *h = reinterpret_cast<const unsigned short *>(p.in) + r * 2 * f;
      float g[8], u[8];
      unpack8(*reinterpret_cast<const uint4 *>(h + c), g);
      unpack8(*reinterpret_cast<const uint4 *>(h + f + c), u);
#if FB_BWD
      float da[8], dg[8], du[8];
      unpack8(*reinterpret_cast<const uint4 *>(reinterpret_cast<const unsigned short *>(p.in2) + r * f + c), da);
#pragma unroll
      for (int j = 0; j < 8; ++j) fbo_swiglu_bwd(g[j], u[j], da[j], &dg[j], &du[j]);
      unsigned short *o = reinterpret_cast<unsigned short *>(p.out) + r * 2 * f;
      *reinterpret_cast<uint4 *>(o + c) = pack8(dg);
      *reinterpret_cast<uint4 *>(o + f + c) = pack8(du);
#else
      float a[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) a[j] = fbo_swiglu_fwd(g[j], u[j]);
      *reinterpret_cast<uint4 *>(reinterpret_cast<unsigned short *>(p.out) + r * f + c) = pack8(a);
#endif
    }
  }
}
