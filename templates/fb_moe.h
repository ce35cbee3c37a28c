/* fb_moe.h — the per-element rules of the MoE and optimizer kernels (router.cuh, unpermute.cuh, swiglu.cuh,
 * adamw.cuh), in the fp32 operation order of their CPU references (runtime/ops.c). Shared by NVRTC device
 * code and host C, so that tests/test_ops.c checks each function here against the reference on the CPU;
 * the GPU tests then check the kernels built from them. Uses fb_math.h for exp, sigmoid and SiLU.
 *
 * Entry points:
 *   fbo_bf16_rne(x), fbo_bf16_f32(h)     FP32 <-> BF16 bits (round to nearest even; NaN stays NaN, quiet)
 *   fbo_prob_ord(p, j)                   the router's top-k order as one 64-bit key (larger = ranked first)
 *   fbo_swiglu_fwd(g, u)                 silu(g) * u
 *   fbo_swiglu_bwd(g, u, da, &dg, &du)   the SwiGLU backward
 *   fbo_adamw(&w, &m, &v, grad, ...)     one AdamW step of one element */
#ifndef FB_MOE_H
#define FB_MOE_H
#include "fb_formats.h"
#include "fb_math.h"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FBO_FN __host__ __device__ static __forceinline__
#else
#define FBO_FN static inline
#endif

FBO_FN unsigned fbo_f2u(float f) { return fbf_f2u(f); }

FBO_FN unsigned short fbo_bf16_rne(float x) {
  unsigned u = fbo_f2u(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

FBO_FN float fbo_bf16_f32(unsigned short h) { return fbm_u2f((unsigned)h << 16); }

/* Top-k order: p descending, ties to the lower expert index j. The float is mapped to an unsigned key that
 * orders like its value (-0 just below +0) with NaN below everything, so that the order is total and any
 * selection algorithm picks the same experts; the low word is ~j. Every key is > 0. */
FBO_FN unsigned long long fbo_prob_ord(float p, int j) {
  unsigned u = fbo_f2u(p);
  unsigned key = (u & 0x7FFFFFFFu) > 0x7F800000u ? 0u : ((u & 0x80000000u) ? ~u : (u | 0x80000000u));
  return ((unsigned long long)key << 32) | (unsigned long long)(~(unsigned)j);
}

FBO_FN float fbo_swiglu_fwd(float g, float u) { return fbm_siluf(g) * u; }

FBO_FN void fbo_swiglu_bwd(float g, float u, float da, float *dg, float *du) {
  float s = fbm_sigmoidf(g);
  float si = g * s;
  *du = da * si;
  float ds = s * (1.0f + g * (1.0f - s));
  *dg = (da * u) * ds;
}

FBO_FN void fbo_adamw(float *w, float *m, float *v, float grad, float lr, float b1, float b2, float eps, float wd,
                      float bc1, float bc2, float gscale) {
  float g = grad * gscale;
  float mm = b1 * *m + (1.0f - b1) * g;
  float vv = b2 * *v + (1.0f - b2) * (g * g);
  float mhat = mm / bc1, vhat = vv / bc2;
  *m = mm, *v = vv;
  *w = *w - lr * (mhat / (sqrtf(vhat) + eps) + wd * *w);
}

#endif
