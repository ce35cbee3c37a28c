/* amax.cuh — max |x| per tensor (FB_MODE 0), per row (1) or per group of rows (2: experts, by
 * p.group_offsets), NaN ignored (the NVFP4 rule); any non-finite value sets bit 0 of *p.flags.
 * Parameters: FB_KERNEL, FB_THREADS, FB_MODE, FB_IN_F32. p.amax must hold zeros before a tensor or group
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
  for (long long i = lo * p.cols + (long long)blockIdx.x * FB_THREADS + threadIdx.x; i < hi * p.cols;
       i += (long long)gridDim.x * FB_THREADS) {
    float x = in_at(p, i);
    bad |= (unsigned)!(fabsf(x) <= FBF_FLT_MAX);
    a = fmaxf(a, fabsf(x));
  }
  a = warp_max(a);
  if ((threadIdx.x & 31) == 0 && a > 0.0f) atomicMax(reinterpret_cast<unsigned *>(p.amax) + g, __float_as_uint(a));
#endif
  if (__any_sync(0xFFFFFFFFu, bad) && (threadIdx.x & 31) == 0) atomicOr(reinterpret_cast<unsigned *>(p.flags), 1u);
}
