/* amax.cuh — max |x| per tensor (FB_MODE 0), per row (1) or per group of rows (2: experts, by
 * p.group_offsets), NaN ignored (the NVFP4 rule); any non-finite value sets bit 0 of *p.flags.
 * Parameters: FB_KERNEL, FB_THREADS, FB_MODE, FB_IN_F32. cols % 8 == 0. p.amax must hold zeros before a tensor or group
 * launch (atomicMax on the bits: non-negative floats order like their bit patterns).
 * Mode 0: grid-stride over all elements. Mode 1: a warp per row, writes p.amax[row].
 * Mode 2: blockIdx.y = group, grid-stride over its rows. */
#include "fb_formats.h"
#include "fb_kparams.h"

static __device__ __forceinline__ float in_at(const fb_kp_mem &p, long long i) {
#if FB_IN_F32
  return reinterpret_cast<const float *>(p.in)[i];
#else
  return __uint_as_float((unsigned)reinterpret_cast<const unsigned short *>(p.in)[i] << 16);
#endif
}

static __device__ __forceinline__ float warp_max(float a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, o));
  return a;
}

extern "C" __global__ void __launch_bounds__(FB_THREADS) FB_KERNEL(const fb_kp_mem p) {
  float a = 0.0f;
  unsigned bad = 0;
#if FB_MODE == 1
  const int lane = threadIdx.x & 31;
  for (long long row = ((long long)blockIdx.x * FB_THREADS + threadIdx.x) / 32; row < p.rows;
       row += (long long)gridDim.x * FB_THREADS / 32) {
    float r = 0.0f;
    for (long long c = lane; c < p.cols; c += 32) {
      float x = in_at(p, row * p.cols + c);
      bad |= (unsigned)!(fabsf(x) <= FBF_FLT_MAX);
      r = fmaxf(r, fabsf(x));
    }
    r = warp_max(r);
    if (lane == 0) reinterpret_cast<float *>(p.amax)[row] = r;
  }
#else
  long long lo = 0, hi = p.rows;
  unsigned g = 0;
#if FB_MODE == 2
  g = blockIdx.y;
  lo = reinterpret_cast<const long long *>(p.group_offsets)[g];
  hi = reinterpret_cast<const long long *>(p.group_offsets)[g + 1];
#endif
  /* 8 elements (16 bytes of BF16, 32 of FP32) per load; cols % 8 == 0 */
  for (long long i = lo * p.cols + ((long long)blockIdx.x * FB_THREADS + threadIdx.x) * 8; i < hi * p.cols;
       i += (long long)gridDim.x * FB_THREADS * 8) {
    float v[8];
#if FB_IN_F32
    float4 x0 = reinterpret_cast<const float4 *>(reinterpret_cast<const float *>(p.in) + i)[0];
    float4 x1 = reinterpret_cast<const float4 *>(reinterpret_cast<const float *>(p.in) + i)[1];
    v[0] = x0.x, v[1] = x0.y, v[2] = x0.z, v[3] = x0.w, v[4] = x1.x, v[5] = x1.y, v[6] = x1.z, v[7] = x1.w;
#else
    uint4 u = *reinterpret_cast<const uint4 *>(reinterpret_cast<const unsigned short *>(p.in) + i);
    unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) v[2 * j] = __uint_as_float(w[j] << 16), v[2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
#endif
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      bad |= (unsigned)!(fabsf(v[j]) <= FBF_FLT_MAX);
      a = fmaxf(a, fabsf(v[j]));
    }
  }
  a = warp_max(a);
  if ((threadIdx.x & 31) == 0 && a > 0.0f) atomicMax(reinterpret_cast<unsigned *>(p.amax) + g, __float_as_uint(a));
#endif
  if (__any_sync(0xFFFFFFFFu, bad) && (threadIdx.x & 31) == 0) atomicOr(reinterpret_cast<unsigned *>(p.flags), 1u);
}
