/* router.cuh — softmax over experts, top-k, normalized weights; exactly fb_router_ref (runtime/ops.c).
 * Parameters: FB_KERNEL, FB_THREADS. A warp per token, grid-stride over tokens; lane L owns the experts
 * j = L, L+32, ... (so the sum is the reference's warp sum: per-lane partials in increasing j, then the xor
 * butterfly 16, 8, 4, 2, 1).
 * Reads p.in (logits FP32, rows x experts), p.rows, p.experts, p.top_k (<= 64, <= experts).
 * Writes p.probs (FP32 rows x experts; it holds e_j between passes), p.topk_idx (int32 rows x top_k),
 * p.topk_w (FP32 rows x top_k).
 * Top-k: each lane keeps its best candidate under fbo_prob_ord; k rounds of a warp max pick the winner, and
 * only the winning lane rescans its experts for the best one ranked below the winner. Each lane reads back
 * only probabilities it wrote itself. */
#include "fb_kparams.h"
#include "fb_math.h"
#include "fb_moe.h"

#define FB_FULL 0xFFFFFFFFu

/* sm_100a/sm_103a: ptxas spilled to local memory under the one-argument bound (seen in make inspect); sm_90a
 * keeps the code that was measured on the H200. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
#define FB_LAUNCH_BOUNDS __launch_bounds__(FB_THREADS, 1)
#else
#define FB_LAUNCH_BOUNDS __launch_bounds__(FB_THREADS)
#endif

extern "C" __global__ void FB_LAUNCH_BOUNDS FB_KERNEL(const fb_kp_moe p) {
  const int lane = threadIdx.x & 31;
  const int E = p.experts, K = p.top_k < FB_MOE_MAX_TOPK ? p.top_k : FB_MOE_MAX_TOPK;
  for (long long t = ((long long)blockIdx.x * FB_THREADS + threadIdx.x) >> 5; t < p.rows;
       t += (long long)gridDim.x * (FB_THREADS / 32)) {
    const float *l = reinterpret_cast<const float *>(p.in) + t * E;
    float *pr = reinterpret_cast<float *>(p.probs) + t * E;
    float m = fbm_u2f(0xFF800000u); /* -Inf; fmaxf ignores NaN */
    for (int j = lane; j < E; j += 32) m = fmaxf(m, l[j]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(FB_FULL, m, o));
    float s = 0.0f;
    for (int j = lane; j < E; j += 32) {
      float e = fbm_expf(l[j] - m);
      pr[j] = e;
      s = s + e;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s = s + __shfl_xor_sync(FB_FULL, s, o);
    unsigned long long best = 0ull;
    float bp = 0.0f;
    for (int j = lane; j < E; j += 32) {
      float q = pr[j] / s;
      pr[j] = q;
      unsigned long long o = fbo_prob_ord(q, j);
      if (o > best) best = o, bp = q;
    }
    int sel0 = 0, sel1 = 0;
    float ps0 = 0.0f, ps1 = 0.0f, S = 0.0f;
    for (int i = 0; i < K; ++i) {
      unsigned long long w = best;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        unsigned long long x = __shfl_xor_sync(FB_FULL, w, o);
        w = x > w ? x : w;
      }
      const int idx = (int)~(unsigned)w, wl = idx & 31;
      const float pw = __shfl_sync(FB_FULL, bp, wl);
      S = S + pw;
      if (lane == (i & 31)) {
        if (i < 32) sel0 = idx, ps0 = pw;
        else sel1 = idx, ps1 = pw;
      }
      if (lane == wl) { /* the next best of this lane: the largest key below the winner's */
        best = 0ull;
        for (int j = lane; j < E; j += 32) {
          float q = pr[j];
          unsigned long long o = fbo_prob_ord(q, j);
          if (o < w && o > best) best = o, bp = q;
        }
      }
    }
    int *ti = reinterpret_cast<int *>(p.topk_idx) + t * K;
    float *tw = reinterpret_cast<float *>(p.topk_w) + t * K;
    if (lane < K) ti[lane] = sel0, tw[lane] = ps0 / S;
    if (lane + 32 < K) ti[lane + 32] = sel1, tw[lane + 32] = ps1 / S;
  }
}
