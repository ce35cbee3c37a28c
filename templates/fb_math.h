/* fb_math.h — transcendental functions that host C and NVRTC device code compute bit-identically, so that
 * kernels using them (router softmax, SwiGLU) can be checked bit-exactly against the CPU reference. The
 * libraries' expf differ between glibc and CUDA (both are within an ulp or two, not equal); these use only
 * IEEE add/multiply, fmaf and exact scaling, which are correctly rounded on both.
 * Entry points: fbm_expf(x) (max error ~2 ulp over the float range), fbm_sigmoidf(x), fbm_siluf(x). */
#ifndef FB_MATH_H
#define FB_MATH_H

#include "fb_formats.h"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FBM_FN __host__ __device__ static __forceinline__
#else
#define FBM_FN static inline
#include <math.h>
#endif

FBM_FN float fbm_u2f(unsigned u) { return fbf_u2f(u); }

/* e^x: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite, two-part ln2), e^r by a degree-7 Taylor polynomial in
 * Horner form with fmaf, then scaled by 2^n in two exact steps (so that subnormal results round once). */
FBM_FN float fbm_expf(float x) {
  /* branch-free: the polynomial path runs on x clamped into its range and the special cases are selected at the
     end (in-range results are the same operations as before; a GPU epilogue evaluating many of these in a row keeps
     them in one basic block, so their latencies overlap) */
  const float xc = fminf(fmaxf(x, -104.0f), 88.8f);
  float n = rintf(xc * 1.44269504088896341f);
  float r = fmaf(n, -0.693145751953125f, xc);  /* ln2 high part: 12 bits, n * hi exact */
  r = fmaf(n, -1.42860677e-06f, r);            /* ln2 - hi */
  float p = 1.98412698e-04f;                   /* 1/7! */
  p = fmaf(p, r, 1.38888889e-03f);             /* 1/6! */
  p = fmaf(p, r, 8.33333333e-03f);             /* 1/5! */
  p = fmaf(p, r, 4.16666667e-02f);             /* 1/4! */
  p = fmaf(p, r, 1.66666667e-01f);             /* 1/3! */
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  int k = (int)n, k1 = k / 2, k2 = k - k1; /* 2^k = 2^k1 * 2^k2, each a normal float */
  float e = (p * fbm_u2f((unsigned)(k1 + 127) << 23)) * fbm_u2f((unsigned)(k2 + 127) << 23);
  e = x > 88.8f ? fbm_u2f(0x7F800000u) : e; /* +Inf */
  e = x < -104.0f ? 0.0f : e;
  return x != x ? x : e;
}

FBM_FN float fbm_sigmoidf(float x) { return 1.0f / (1.0f + fbm_expf(-x)); }
FBM_FN float fbm_siluf(float x) { return x / (1.0f + fbm_expf(-x)); }

#endif
