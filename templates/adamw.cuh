/* adamw.cuh — AdamW on FP32 masters that also writes the next step's forward weights; exactly fb_adamw_ref
 * (the element rule is fbo_adamw of fb_moe.h). Weights are experts stacked: rows = E*N, cols = K.
 * Parameters: FB_KERNEL, FB_THREADS, FB_VEC (elements a thread updates per step: BF16 and NVFP4), FB_WFMT,
 * FB_AMAX, FB_SR:
 *   FB_WFMT 0  BF16: p.out = the RNE BF16 copy of the new masters
 *   FB_WFMT 1  NVFP4: atomically maxes |w_new| (NaN ignored) per tensor (FB_AMAX 0: p.amax[0]) or per expert
 *              (FB_AMAX 1: p.amax[e]), as templates/amax.cuh does; p.amax must hold zeros before the launch.
 *              quant_nvfp4.cuh with FB_IN_F32 1 then quantizes the new masters in a second launch.
 *   FB_WFMT 2  MXFP8, fused: a lane per 4 elements, 8 lanes per block of 32 along a row, quantized as fb_mxfp8_quantize
 *              (FB_SR: stochastic rounding, Philox key (p.seed, p.stream), counter p.step; else RN); p.out
 *              E4M3 codes, p.out_scales E8M0.
 * Reads and writes p.master, p.m, p.v; reads p.in (the gradient FP32), p.rows, p.cols, p.experts and the
 * hyperparameters p.lr, b1, b2, eps, wd, bc1, bc2, gscale. If p.flags is set, bit 0 marks a non-finite
 * new weight.
 * BF16 / NVFP4: each CTA takes one contiguous span of vectors, so that a thread's running amax stays with one
 * expert for long stretches; a warp flushes (reduce, one atomicMax per expert) only when an expert ends. */
#include "fb_formats.h"
#include "fb_kparams.h"
#include "fb_moe.h"
#if FB_SR
#include "fb_philox.h"
#endif

#ifndef FB_VEC
#define FB_VEC 4
#endif
#define FB_FULL 0xFFFFFFFFu

static __device__ __forceinline__ void upd(const fb_kp_moe &p, float &w, float &m, float &v, float g) {
  fbo_adamw(&w, &m, &v, g, p.lr, p.b1, p.b2, p.eps, p.wd, p.bc1, p.bc2, p.gscale);
}

template <int N> static __device__ __forceinline__ void ld(const float *s, float x[N]) {
  if (N % 4 == 0) {
#pragma unroll
    for (int k = 0; k < N / 4; ++k) {
      float4 t = reinterpret_cast<const float4 *>(s)[k];
      x[4 * k] = t.x, x[4 * k + 1] = t.y, x[4 * k + 2] = t.z, x[4 * k + 3] = t.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) x[k] = s[k];
  }
}

template <int N> static __device__ __forceinline__ void st(float *d, const float x[N]) {
  if (N % 4 == 0) {
#pragma unroll
    for (int k = 0; k < N / 4; ++k) reinterpret_cast<float4 *>(d)[k] = make_float4(x[4 * k], x[4 * k + 1], x[4 * k + 2], x[4 * k + 3]);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) d[k] = x[k];
  }
}

static __device__ __forceinline__ void flag(const fb_kp_moe &p, unsigned bad) {
  if (__any_sync(FB_FULL, bad) && (threadIdx.x & 31) == 0 && p.flags) atomicOr(reinterpret_cast<unsigned *>(p.flags), 1u);
}

#if FB_WFMT == 2
/* A lane per 4 consecutive elements, so that each of the warp's loads and stores is 512 (128) contiguous bytes; the
 * 8 lanes of a block of 32 meet for its amax (three shuffles). cols % 32 == 0: no block straddles rows, and the
 * 8 lanes of a block are all in range or all out. */
extern "C" __global__ void __launch_bounds__(FB_THREADS) FB_KERNEL(const fb_kp_moe p) {
  const long long nvec = p.rows * p.cols / 4;
  const int lane = threadIdx.x & 31;
  unsigned bad = 0;
  /* warp-uniform trip count: the shuffles need every lane */
  for (long long wv = (long long)blockIdx.x * FB_THREADS + (threadIdx.x & ~31); wv < nvec; wv += (long long)gridDim.x * FB_THREADS) {
    const long long vi = wv + lane, i = vi * 4;
    const bool ok = vi < nvec;
    float w[4] = {0.0f, 0.0f, 0.0f, 0.0f}, a = 0.0f;
    if (ok) {
      float m[4], v[4], g[4];
      ld<4>(reinterpret_cast<const float *>(p.master) + i, w);
      ld<4>(reinterpret_cast<const float *>(p.m) + i, m);
      ld<4>(reinterpret_cast<const float *>(p.v) + i, v);
      ld<4>(reinterpret_cast<const float *>(p.in) + i, g);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        upd(p, w[j], m[j], v[j], g[j]);
        bad |= (unsigned)!(fabsf(w[j]) <= FBF_FLT_MAX);
        a = fbf_absmax_nan(a, w[j]); /* NaN propagates: the scale becomes 0xFF */
      }
      st<4>(reinterpret_cast<float *>(p.master) + i, w);
      st<4>(reinterpret_cast<float *>(p.m) + i, m);
      st<4>(reinterpret_cast<float *>(p.v) + i, v);
    }
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) a = fbf_absmax_nan(a, __shfl_xor_sync(FB_FULL, a, o));
    if (!ok) continue;
    const unsigned e = fbf_e8m0_up(a * (1.0f / 448.0f));
    unsigned q;
#if FB_SR
    /* element i's random byte: byte i % 16 of Philox(counter i / 16): word vi % 4 of the call */
    unsigned r4[4];
    {
      const unsigned long long c = (unsigned long long)vi >> 2;
      fb_u32 ctr[4] = {p.step, (fb_u32)c, (fb_u32)(c >> 32), 0u}, key[2] = {p.seed, p.stream};
      fb_philox4x32_10(ctr, key, r4);
    }
    const unsigned rw = (vi & 2) ? ((vi & 1) ? r4[3] : r4[2]) : ((vi & 1) ? r4[1] : r4[0]);
    if (e <= FBF_SRZ_EMAX) { /* fb_formats.h's branch-free block SR */
      q = fbf_e4m3x4_srz(w[0], w[1], w[2], w[3], fbf_srz_scale(e), rw);
    } else {
      const float inv = fbf_pow2(127 - (int)e);
      q = fbf_e4m3x2_sr(w[0] * inv, w[1] * inv, rw & 255u, (rw >> 8) & 255u) |
          fbf_e4m3x2_sr(w[2] * inv, w[3] * inv, (rw >> 16) & 255u, rw >> 24) << 16;
    }
#else
    const float inv = fbf_pow2(127 - (int)e);
    q = fbf_e4m3x2_rn(w[0] * inv, w[1] * inv) | fbf_e4m3x2_rn(w[2] * inv, w[3] * inv) << 16;
#endif
    reinterpret_cast<unsigned *>(p.out)[vi] = q;
    if ((lane & 7) == 0) reinterpret_cast<unsigned char *>(p.out_scales)[vi >> 3] = (unsigned char)e;
  }
  flag(p, bad);
}

#else /* BF16 copy or NVFP4 amax */

#if FB_WFMT == 1
/* every lane of the warp calls this: one atomicMax per distinct expert (cur < 0: nothing held) */
static __device__ __forceinline__ void flush(const fb_kp_moe &p, long long cur, float a) {
  const unsigned grp = __match_any_sync(FB_FULL, (unsigned long long)cur);
  if (cur < 0) return;
  const unsigned mx = __reduce_max_sync(grp, __float_as_uint(a)); /* a >= 0, never NaN: bits order like values */
  if ((int)(threadIdx.x & 31) == __ffs(grp) - 1 && mx > 0u) atomicMax(reinterpret_cast<unsigned *>(p.amax) + cur, mx);
}
#endif

/* the new masters of elements i .. i+N-1; BF16 copy or their amax */
template <int N> static __device__ __forceinline__ float elems(const fb_kp_moe &p, long long i, unsigned &bad) {
  float w[N], m[N], v[N], g[N], a = 0.0f;
  ld<N>(reinterpret_cast<const float *>(p.master) + i, w);
  ld<N>(reinterpret_cast<const float *>(p.m) + i, m);
  ld<N>(reinterpret_cast<const float *>(p.v) + i, v);
  ld<N>(reinterpret_cast<const float *>(p.in) + i, g);
#pragma unroll
  for (int j = 0; j < N; ++j) {
    upd(p, w[j], m[j], v[j], g[j]);
    bad |= (unsigned)!(fabsf(w[j]) <= FBF_FLT_MAX);
    a = fmaxf(a, fabsf(w[j]));
  }
  st<N>(reinterpret_cast<float *>(p.master) + i, w);
  st<N>(reinterpret_cast<float *>(p.m) + i, m);
  st<N>(reinterpret_cast<float *>(p.v) + i, v);
#if FB_WFMT == 0
  unsigned short *o = reinterpret_cast<unsigned short *>(p.out) + i;
  if (N % 8 == 0) {
#pragma unroll
    for (int k = 0; k < N / 8; ++k) {
      unsigned h[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) h[j] = (unsigned)fbo_bf16_rne(w[8 * k + 2 * j]) | (unsigned)fbo_bf16_rne(w[8 * k + 2 * j + 1]) << 16;
      reinterpret_cast<uint4 *>(o)[k] = make_uint4(h[0], h[1], h[2], h[3]);
    }
  } else if (N % 2 == 0) {
#pragma unroll
    for (int k = 0; k < N / 2; ++k)
      reinterpret_cast<unsigned *>(o)[k] = (unsigned)fbo_bf16_rne(w[2 * k]) | (unsigned)fbo_bf16_rne(w[2 * k + 1]) << 16;
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) o[k] = fbo_bf16_rne(w[k]);
  }
#endif
  return a;
}

extern "C" __global__ void __launch_bounds__(FB_THREADS) FB_KERNEL(const fb_kp_moe p) {
  const long long n = p.rows * p.cols, nvec = n / FB_VEC;
  long long per = (nvec + gridDim.x - 1) / gridDim.x;
  per = (per + FB_THREADS - 1) / FB_THREADS * FB_THREADS;
  const long long lo = (long long)blockIdx.x * per, end = lo + per < nvec ? lo + per : nvec;
  unsigned bad = 0;
#if FB_WFMT == 1
  const long long span = FB_AMAX ? n / p.experts : n; /* elements per outer-scale group */
  long long cur = -1;
  float a = 0.0f;
#endif
  for (long long base = lo; base < end; base += FB_THREADS) { /* the same trip count for the whole CTA */
    const long long vi = base + threadIdx.x;
    const bool ok = vi < end;
    float la = 0.0f;
    if (ok) la = elems<FB_VEC>(p, vi * FB_VEC, bad);
#if FB_WFMT == 1
    const long long ex = ok ? vi * FB_VEC / span : cur; /* a vector never straddles experts: span % 16 == 0 */
    if (__any_sync(FB_FULL, ex != cur)) {
      flush(p, cur, a);
      a = 0.0f, cur = ex;
    }
    a = fmaxf(a, la);
#else
    (void)la;
#endif
  }
#if FB_WFMT == 1
  flush(p, cur, a);
#endif
  /* the last n % FB_VEC elements */
  if (blockIdx.x == gridDim.x - 1)
    for (long long i = nvec * FB_VEC + threadIdx.x; i < n; i += FB_THREADS) {
      float x = elems<1>(p, i, bad);
#if FB_WFMT == 1
      if (x > 0.0f) atomicMax(reinterpret_cast<unsigned *>(p.amax) + i / span, __float_as_uint(x));
#else
      (void)x;
#endif
    }
  flag(p, bad);
}
#endif
