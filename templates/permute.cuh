/* permute.cuh — dispatch: the (token, slot) entries of topk_idx sorted by expert (stable), into rows padded to
 * the GEMM row tile, and the payload rows gathered there; exactly fb_permute_ref + fb_permute_gather_ref.
 * No host synchronization and no atomics: every output is a function of topk_idx alone.
 *
 * One program, launched four times in order on one stream with the same grid (fb_launch_dims), p.pass =
 *   0 count   a warp per chunk c of FB_PERMUTE_CHUNK entries: chunk_counts[c][e] = its entries of expert e
 *   1 scan    CTA 0 alone (the others return): counts[e]; offsets[e] padded to p.tile (offsets[E] = rows in
 *             all); chunk_counts[c][e] := the first row of chunk c's expert-e entries; token_of = -1 on
 *             padding rows
 *   2 place   a warp per chunk, 32 entries at a time in order: the rank among equal experts from
 *             __match_any_sync; row_of[i] = chunk_counts[c][e] + rank, token_of[row] = i / top_k
 *   3 gather  a warp per destination row below offsets[E]: the payload planes of token_of[row], zero bytes
 *             on padding rows
 * Parameters: FB_KERNEL, FB_THREADS, FB_VEC (32-bit words a lane moves per step in the gather, where the
 * plane's row length allows; otherwise words or bytes), FB_PAYLOAD (0 BF16, 1 NVFP4, 2 MXFP8), FB_OUTER_TOK
 * (NVFP4: the per-token FP32 outer scale travels with the row).
 * Reads p.topk_idx (int32 rows x top_k; an index outside [0, experts) drops the entry: row_of -1), p.rows
 * (tokens), p.cols (payload values per row), p.experts, p.top_k, p.tile, p.in / p.in_scales / p.in_outer.
 * Writes p.chunk_counts (ceil(rows*top_k / FB_PERMUTE_CHUNK) x experts int32, workspace), p.counts (int32
 * [E]), p.offsets (long long [E+1]), p.row_of (int32 [rows*top_k]), p.token_of (int32, rows below
 * offsets[E], at most rows*top_k + E*(tile-1)), p.out / p.out_scales / p.out_outer (rows below offsets[E]).
 * Limit: rows*top_k + E*(tile-1) < 2^31 (entries and rows are int32; fb_permute_ref rejects more). */
#include "fb_kparams.h"

#define FB_FULL 0xFFFFFFFFu

/* the expert of entry i, or -1 (past the end, or dropped) */
static __device__ __forceinline__ int expert_of(const fb_kp_moe &p, int i, int end) {
  int e = i < end ? reinterpret_cast<const int *>(p.topk_idx)[i] : -1;
  return e >= 0 && e < p.experts ? e : -1;
}

/* pass 0 and 2: a warp per chunk. Entries and rows fit in int32 (the host checks rows*top_k + E*(tile-1) <
 * 2^31): 32-bit indices keep 64-bit division (a subroutine call, and spills) out of the kernel. */
static __device__ __forceinline__ void chunks(const fb_kp_moe &p, int place) {
  const int lane = threadIdx.x & 31, E = p.experts, K = p.top_k;
  const int n = (int)(p.rows * p.top_k), nch = (n + FB_PERMUTE_CHUNK - 1) / FB_PERMUTE_CHUNK;
  const unsigned below = (1u << lane) - 1u;
  int *row_of = reinterpret_cast<int *>(p.row_of), *token_of = reinterpret_cast<int *>(p.token_of);
  for (int c = (int)((blockIdx.x * FB_THREADS + threadIdx.x) >> 5); c < nch; c += (int)(gridDim.x * (FB_THREADS / 32))) {
    int *tab = reinterpret_cast<int *>(p.chunk_counts) + (long long)c * E;
    if (!place) {
      for (int e = lane; e < E; e += 32) tab[e] = 0;
      __syncwarp();
    }
    const int end = n - c * FB_PERMUTE_CHUNK > FB_PERMUTE_CHUNK ? (c + 1) * FB_PERMUTE_CHUNK : n;
    for (int i0 = c * FB_PERMUTE_CHUNK; i0 < end; i0 += 32) { /* warp-uniform trip count */
      const int i = i0 + lane, e = expert_of(p, i, end);
      const unsigned grp = __match_any_sync(FB_FULL, e);
      const int leader = lane == __ffs(grp) - 1, cnt = __popc(grp);
      if (!place) {
        if (e >= 0 && leader) tab[e] += cnt;
      } else {
        const int base = e >= 0 ? tab[e] : 0;
        __syncwarp(); /* every lane of the group has read tab[e] before its leader moves it on */
        if (e >= 0) {
          const int row = base + __popc(grp & below);
          row_of[i] = row;
          token_of[row] = i / K;
          if (leader) tab[e] = base + cnt;
        } else if (i < end) {
          row_of[i] = -1;
        }
      }
      __syncwarp(); /* orders this round's table updates before the next round's reads */
    }
  }
}

/* pass 1: CTA 0; thread t owns the experts [t*ept, (t+1)*ept), so one block scan orders them all. Rows fit
 * in int32 (the host checks rows*top_k + E*(tile-1) < 2^31), so the scan is in int. */
static __device__ __forceinline__ void scan(const fb_kp_moe &p) {
  __shared__ int warp_sum[FB_THREADS / 32];
  if (blockIdx.x != 0) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, E = p.experts, tile = p.tile;
  const int nch = (int)((p.rows * p.top_k + FB_PERMUTE_CHUNK - 1) / FB_PERMUTE_CHUNK);
  const int ept = (E + FB_THREADS - 1) / FB_THREADS, e0 = threadIdx.x * ept, e1 = e0 + ept < E ? e0 + ept : E;
  int *tab = reinterpret_cast<int *>(p.chunk_counts), *counts = reinterpret_cast<int *>(p.counts);
  int mine = 0;
  for (int e = e0; e < e1; ++e) {
    int tot = 0;
    for (int c = 0; c < nch; ++c) tot += tab[c * E + e];
    counts[e] = tot;
    mine += (tot + tile - 1) / tile * tile;
  }
  int x = mine; /* inclusive scan over the warp, then over the warps */
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    int y = __shfl_up_sync(FB_FULL, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) warp_sum[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < FB_THREADS / 32 ? warp_sum[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      int y = __shfl_up_sync(FB_FULL, w, o);
      if (lane >= o) w += y;
    }
    if (lane < FB_THREADS / 32) warp_sum[lane] = w;
  }
  __syncthreads();
  int base = x - mine + (warp ? warp_sum[warp - 1] : 0);
  long long *off = reinterpret_cast<long long *>(p.offsets);
  int *token_of = reinterpret_cast<int *>(p.token_of);
  for (int e = e0; e < e1; ++e) {
    const int cnt = counts[e], pad = (cnt + tile - 1) / tile * tile;
    off[e] = base;
    int run = base;
    for (int c = 0; c < nch; ++c) {
      int k = tab[c * E + e];
      tab[c * E + e] = run;
      run += k;
    }
    for (int r = base + cnt; r < base + pad; ++r) token_of[r] = -1;
    base += pad;
  }
  if (threadIdx.x == FB_THREADS - 1) off[E] = warp_sum[FB_THREADS / 32 - 1];
}

/* one plane's row: nb bytes at row r of dst from row tok of src (tok >= 0), or zeros (src == 0). The lane
 * moves FB_VEC 32-bit words per step where nb allows, else words, else bytes. */
template <int W> struct fb_vec_t;
template <> struct fb_vec_t<1> { typedef unsigned T; };
template <> struct fb_vec_t<2> { typedef uint2 T; };
template <> struct fb_vec_t<4> { typedef uint4 T; };

template <int W, int N> /* N units of W words per lane per step */
static __device__ __forceinline__ void move(unsigned char *d, const unsigned char *s, long long nb, int lane) {
  typedef typename fb_vec_t<W>::T T;
  T *dv = reinterpret_cast<T *>(d);
  const T *sv = reinterpret_cast<const T *>(s);
  const long long nu = nb / (4 * W);
  for (long long u = (long long)lane * N; u < nu; u += 32 * N) {
    T x[N];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      if (s) x[k] = sv[u + k];
      else memset(&x[k], 0, sizeof(T));
    }
#pragma unroll
    for (int k = 0; k < N; ++k) dv[u + k] = x[k];
  }
}

static __device__ __forceinline__ void copy_row(unsigned long long dst, unsigned long long src, long long nb, long long r,
                                                long long tok, int lane) {
  unsigned char *d = reinterpret_cast<unsigned char *>(dst) + r * nb;
  const unsigned char *s = tok < 0 ? nullptr : reinterpret_cast<const unsigned char *>(src) + tok * nb;
  if (nb % (4 * FB_VEC) == 0) move<FB_VEC >= 4 ? 4 : FB_VEC, FB_VEC >= 4 ? FB_VEC / 4 : 1>(d, s, nb, lane);
  else if (nb % 4 == 0) move<1, 1>(d, s, nb, lane);
  else
    for (long long u = lane; u < nb; u += 32) d[u] = s ? s[u] : (unsigned char)0;
}

/* pass 3 */
static __device__ __forceinline__ void gather(const fb_kp_moe &p) {
  const int lane = threadIdx.x & 31;
  const long long rows = reinterpret_cast<const long long *>(p.offsets)[p.experts];
#if FB_PAYLOAD == 0
  const long long nb0 = p.cols * 2, nb1 = 0;
#elif FB_PAYLOAD == 1
  const long long nb0 = p.cols / 2, nb1 = p.cols / 16;
#else
  const long long nb0 = p.cols, nb1 = p.cols / 32;
#endif
  for (long long r = ((long long)blockIdx.x * FB_THREADS + threadIdx.x) >> 5; r < rows;
       r += (long long)gridDim.x * (FB_THREADS / 32)) {
    const long long tok = reinterpret_cast<const int *>(p.token_of)[r];
    copy_row(p.out, p.in, nb0, r, tok, lane);
    if (nb1) copy_row(p.out_scales, p.in_scales, nb1, r, tok, lane);
#if FB_PAYLOAD == 1 && FB_OUTER_TOK
    if (lane == 0) reinterpret_cast<float *>(p.out_outer)[r] = tok < 0 ? 0.0f : reinterpret_cast<const float *>(p.in_outer)[tok];
#endif
  }
}

/* (minBlocks 1: with the maximum only, ptxas squeezes the four passes into 32 registers and spills) */
extern "C" __global__ void __launch_bounds__(FB_THREADS, 1) FB_KERNEL(const fb_kp_moe p) {
  if (p.pass == 3) { gather(p); return; }
  if (p.pass == 1) { scan(p); return; }
  chunks(p, p.pass == 2);
}
