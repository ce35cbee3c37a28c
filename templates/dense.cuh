/* dense.cuh — the small kernels of the GPU-resident train step (runtime/train_gpu.c): the model's non-expert pieces
 * between the cuBLAS GEMMs, each the formula of runtime/model_dense.c (the CPU path's arithmetic) with the same
 * roundings; sums over a row (RMSNorm, the log-sum-exp) are a fixed tree over the block instead of a serial loop,
 * so they are deterministic but not bit-equal to the CPU's; so are the sums over tokens (the norms' and the
 * convolution's weight gradients: chunks of 64 tokens, then the chunks in order; the aux statistics: a tree; the
 * embedding's gradient: each id's positions serially). No atomics anywhere. One program holds every kernel: FB_KERNEL_<piece>. Parameters: FB_KERNEL, FB_THREADS (a power of two,
 * 64..1024). Every kernel takes fb_kp_dense (fb_dense.h) and says which fields it reads. NVRTC compiles with
 * --fmad=false, so products and sums round separately, as the CPU's -ffp-contract=off code does. */
#include "fb_dense.h"
#include "fb_moe.h"

#define FB_CAT2(a, b) a##b
#define FB_CAT(a, b) FB_CAT2(a, b)
#define FB_K(piece) extern "C" __global__ void __launch_bounds__(FB_THREADS) FB_CAT(FB_KERNEL, piece)(const fb_kp_dense p)
#define FB_EPS 1e-6f

static __device__ __forceinline__ float bfv(const unsigned short *w, long long i) { return fbo_bf16_f32(w[i]); }
static __device__ __forceinline__ float rbf(float x) { return fbo_bf16_f32(fbo_bf16_rne(x)); }

/* The block's sum of v in a fixed tree (every thread gets it). */
static __device__ double block_sum(double v, double *sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = FB_THREADS / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  double r = sh[0];
  __syncthreads();
  return r;
}
static __device__ double block_max(double v, double *sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = FB_THREADS / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sh[threadIdx.x] = fmax(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  double r = sh[0];
  __syncthreads();
  return r;
}

#define FB_GRID_STRIDE(i, n) for (long long i = (long long)blockIdx.x * FB_THREADS + threadIdx.x; i < (n); i += (long long)gridDim.x * FB_THREADS)

/* _embed: y[t][d] = w[idx[t]][d] (rows T, cols D). */
FB_K(_embed) {
  const unsigned short *w = reinterpret_cast<const unsigned short *>(p.w);
  const int *id = reinterpret_cast<const int *>(p.idx);
  float *y = reinterpret_cast<float *>(p.y);
  FB_GRID_STRIDE(i, p.rows * p.cols) y[i] = bfv(w, (long long)id[i / p.cols] * p.cols + i % p.cols);
}

/* _rms_fwd: a block per row of x (FP32): r = 1 / sqrtf((float)(sum x^2 / D) + eps); out = rb(x r g) to y (FP32,
 * if set) and yb (BF16, if set); w: the gain (BF16). */
FB_K(_rms_fwd) {
  __shared__ double sh[FB_THREADS];
  const long long D = p.cols;
  const unsigned short *g = reinterpret_cast<const unsigned short *>(p.w);
  for (long long t = blockIdx.x; t < p.rows; t += gridDim.x) {
    const float *x = reinterpret_cast<const float *>(p.x) + t * D;
    double ss = 0;
    for (long long i = threadIdx.x; i < D; i += FB_THREADS) ss += (double)x[i] * (double)x[i];
    ss = block_sum(ss, sh);
    const float rr = 1.0f / sqrtf((float)(ss / (double)D) + FB_EPS);
    if (threadIdx.x == 0) reinterpret_cast<float *>(p.r)[t] = rr;
    for (long long i = threadIdx.x; i < D; i += FB_THREADS) {
      const float v = x[i] * rr * bfv(g, i);
      const unsigned short h = fbo_bf16_rne(v);
      if (p.y) reinterpret_cast<float *>(p.y)[t * D + i] = fbo_bf16_f32(h);
      if (p.yb) reinterpret_cast<unsigned short *>(p.yb)[t * D + i] = h;
    }
  }
}

/* _rms_bwd_x: a block per row: c = (float)(sum g dy x / D r^3) (double), dx (=, or += with accum) r g dy - x c.
 * Reads x, w (gain), r, dy. */
FB_K(_rms_bwd_x) {
  __shared__ double sh[FB_THREADS];
  const long long D = p.cols;
  const unsigned short *g = reinterpret_cast<const unsigned short *>(p.w);
  for (long long t = blockIdx.x; t < p.rows; t += gridDim.x) {
    const float *x = reinterpret_cast<const float *>(p.x) + t * D, *d = reinterpret_cast<const float *>(p.dy) + t * D;
    float *dx = reinterpret_cast<float *>(p.dx) + t * D;
    const float rr = reinterpret_cast<const float *>(p.r)[t];
    double s = 0;
    for (long long i = threadIdx.x; i < D; i += FB_THREADS) s += (double)bfv(g, i) * (double)d[i] * (double)x[i];
    s = block_sum(s, sh);
    const float c = (float)(s * (double)rr * (double)rr * (double)rr / (double)D);
    for (long long i = threadIdx.x; i < D; i += FB_THREADS) {
      const float v = rr * bfv(g, i) * d[i] - x[i] * c;
      dx[i] = p.accum ? dx[i] + v : v;
    }
  }
}

/* Column sums over the tokens run in two passes: nparts chunks of FB_CHUNK tokens, each summed serially in token order
 * by a thread per (chunk, column) into part, then _colsum adds the chunks in order: deterministic, and parallel enough
 * (a serial loop over thousands of tokens per column was latency-bound). */
#define FB_CHUNK 64

/* _rms_bwd_g: part[c][i] = the sum over chunk c's tokens of dy x r (the gain's gradient); reads x, r, dy. */
FB_K(_rms_bwd_g) {
  const long long D = p.cols;
  const float *x = reinterpret_cast<const float *>(p.x), *d = reinterpret_cast<const float *>(p.dy);
  const float *r = reinterpret_cast<const float *>(p.r);
  FB_GRID_STRIDE(q, (long long)p.nparts * D) {
    const long long c = q / D, i = q % D, hi = (c + 1) * FB_CHUNK < p.rows ? (c + 1) * FB_CHUNK : p.rows;
    float s = 0.0f;
    for (long long t = c * FB_CHUNK; t < hi; ++t) s += d[t * D + i] * x[t * D + i] * r[t];
    reinterpret_cast<float *>(p.part)[q] = s;
  }
}

/* _colsum: dg[i] = part[0][i] + part[1][i] + ... (nparts rows of cols), in order. */
FB_K(_colsum) {
  const float *part = reinterpret_cast<const float *>(p.part);
  FB_GRID_STRIDE(i, p.cols) {
    float s = 0.0f;
    for (int c = 0; c < p.nparts; ++c) s += part[(long long)c * p.cols + i];
    reinterpret_cast<float *>(p.dg)[i] = s;
  }
}

/* _conv_fwd: y[t][d] = x[t][d] + rb(sum_{j <= t mod seq, j < width} w[d][j] a[t-j][d]) (a: n1, w: D x width). */
FB_K(_conv_fwd) {
  const long long D = p.cols, W = p.width;
  const unsigned short *k = reinterpret_cast<const unsigned short *>(p.w);
  const float *x = reinterpret_cast<const float *>(p.x), *n1 = reinterpret_cast<const float *>(p.a);
  FB_GRID_STRIDE(i, p.rows * D) {
    const long long t = i / D, d = i % D, pos = t % p.seq;
    float c = 0.0f;
    for (long long j = 0; j < W && j <= pos; ++j) c = c + bfv(k, d * W + j) * n1[(t - j) * D + d];
    reinterpret_cast<float *>(p.y)[i] = x[i] + rbf(c);
  }
}

/* _conv_bwd_k: part[c][d][j] = the sum over chunk c's tokens t (j <= t mod seq) of dy[t][d] a[t-j][d]; _colsum over
 * D x width columns gives the kernel's gradient. */
FB_K(_conv_bwd_k) {
  const long long D = p.cols, W = p.width, DW = D * W;
  const float *g = reinterpret_cast<const float *>(p.dy), *n1 = reinterpret_cast<const float *>(p.a);
  FB_GRID_STRIDE(q, (long long)p.nparts * DW) {
    const long long c = q / DW, d = (q % DW) / W, j = q % W, hi = (c + 1) * FB_CHUNK < p.rows ? (c + 1) * FB_CHUNK : p.rows;
    float s = 0.0f;
    for (long long t = c * FB_CHUNK; t < hi; ++t)
      if (j <= t % p.seq) s += g[t * D + d] * n1[(t - j) * D + d];
    reinterpret_cast<float *>(p.part)[q] = s;
  }
}

/* _conv_bwd_x: dx[o][d] = sum over j in order (o and o + j in one sequence) of w[d][j] dy[o+j][d]. */
FB_K(_conv_bwd_x) {
  const long long D = p.cols, W = p.width;
  const unsigned short *k = reinterpret_cast<const unsigned short *>(p.w);
  const float *g = reinterpret_cast<const float *>(p.dy);
  FB_GRID_STRIDE(i, p.rows * D) {
    const long long o = i / D, d = i % D, pos = o % p.seq;
    float s = 0.0f;
    for (long long j = 0; j < W && pos + j < p.seq; ++j) s += bfv(k, d * W + j) * g[(o + j) * D + d];
    reinterpret_cast<float *>(p.dx)[i] = s;
  }
}

/* _resid: y = x + yb (the expert layer's BF16 output). */
FB_K(_resid) {
  const float *x = reinterpret_cast<const float *>(p.x);
  const unsigned short *e = reinterpret_cast<const unsigned short *>(p.yb);
  FB_GRID_STRIDE(i, p.rows * p.cols) reinterpret_cast<float *>(p.y)[i] = x[i] + fbo_bf16_f32(e[i]);
}

/* _ce: a block per token of the logits x (rows x V): lse = m + log(sum exp(l - m)) in double (m the max), dbl[t] =
 * lse - l[idx[t]]; with grad, yb = rb(((float)exp(l - lse) - onehot) / tg), the logits' gradient (BF16). */
FB_K(_ce) {
  __shared__ double sh[FB_THREADS];
  const long long V = p.cols;
  for (long long t = blockIdx.x; t < p.rows; t += gridDim.x) {
    const float *l = reinterpret_cast<const float *>(p.x) + t * V;
    double m = -__longlong_as_double(0x7FF0000000000000ll), s = 0;
    for (long long v = threadIdx.x; v < V; v += FB_THREADS) m = fmax(m, (double)l[v]);
    m = block_max(m, sh);
    for (long long v = threadIdx.x; v < V; v += FB_THREADS) s += exp((double)l[v] - m);
    s = block_sum(s, sh);
    const double lse = m + log(s);
    const int tg = reinterpret_cast<const int *>(p.idx)[t];
    if (threadIdx.x == 0) reinterpret_cast<double *>(p.dbl)[t] = lse - (double)l[tg];
    if (!p.grad) continue;
    unsigned short *dl = reinterpret_cast<unsigned short *>(p.yb) + t * V;
    for (long long v = threadIdx.x; v < V; v += FB_THREADS) {
      const float pr = (float)exp((double)l[v] - lse);
      const float g = pr - (v == tg ? 1.0f : 0.0f);
      dl[v] = fbo_bf16_rne(g / (float)p.tg);
    }
  }
}

/* _router_bwd: a thread per token (rows, E = experts, K = top_k): the gradient of the router's logits through the
 * renormalized top-k weights (probs, idx, tw; dy = dL/dtopk_w) and the load-balancing loss (cnt: the layer's global
 * counts; aux_coef, layers, tg); y: T x E FP32 scratch; yb = rb(the logit gradient), BF16. */
FB_K(_router_bwd) {
  const long long E = p.experts, K = p.top_k;
  FB_GRID_STRIDE(t, p.rows) {
    const float *pr = reinterpret_cast<const float *>(p.probs) + t * E;
    const int *ix = reinterpret_cast<const int *>(p.idx) + t * K;
    const float *tw = reinterpret_cast<const float *>(p.tw) + t * K, *dtw = reinterpret_cast<const float *>(p.dy) + t * K;
    float *d = reinterpret_cast<float *>(p.y) + t * E;
    double S = 0, dw = 0;
    for (long long k = 0; k < K; ++k) S += pr[ix[k]];
    for (long long k = 0; k < K; ++k) dw += (double)dtw[k] * (double)tw[k];
    for (long long e = 0; e < E; ++e) d[e] = 0.0f;
    for (long long k = 0; k < K; ++k) d[ix[k]] = (float)(((double)dtw[k] - dw) / S);
    for (long long e = 0; e < E; ++e) {
      const double cnt = (double)reinterpret_cast<const int *>(p.cnt)[e];
      const float ga = (float)((double)p.aux_coef * (double)E / (double)p.layers * (cnt / (double)(p.tg * K)) / (double)p.tg);
      d[e] += ga;
    }
    double s = 0;
    for (long long e = 0; e < E; ++e) s += (double)pr[e] * (double)d[e];
    unsigned short *o = reinterpret_cast<unsigned short *>(p.yb) + t * E;
    for (long long e = 0; e < E; ++e) o[e] = fbo_bf16_rne((float)((double)pr[e] * ((double)d[e] - s)));
  }
}

/* _aux: a block per expert e over the global batch (tg tokens): cnt[e] = slots of idx (tg x top_k) equal to e (an
 * integer: any order), dbl[e] = the sum of probs[t][e] over the tokens (double, a fixed tree). */
FB_K(_aux) {
  __shared__ double sh[FB_THREADS];
  const long long E = p.experts, K = p.top_k;
  const int *ix = reinterpret_cast<const int *>(p.idx);
  const float *pr = reinterpret_cast<const float *>(p.probs);
  for (long long e = blockIdx.x; e < E; e += gridDim.x) {
    double c = 0, s = 0;
    for (long long i = threadIdx.x; i < p.tg * K; i += FB_THREADS) c += ix[i] == (int)e ? 1.0 : 0.0;
    for (long long t = threadIdx.x; t < p.tg; t += FB_THREADS) s += pr[t * E + e];
    c = block_sum(c, sh); /* whole numbers below 2^53: exact */
    s = block_sum(s, sh);
    if (threadIdx.x == 0) reinterpret_cast<int *>(p.cnt)[e] = (int)c, reinterpret_cast<double *>(p.dbl)[e] = s;
  }
}

/* _sumsq_part: nparts blocks, block b the b-th contiguous chunk of x (rows elements): dbl[b] = its sum of x^2 (double,
 * a fixed tree). _sumsq_fin (one thread): acc[0] += dbl[0] + dbl[1] + ... in order. */
FB_K(_sumsq_part) {
  __shared__ double sh[FB_THREADS];
  const long long n = p.rows, chunk = (n + p.nparts - 1) / p.nparts, lo = (long long)blockIdx.x * chunk;
  const long long hi = lo + chunk < n ? lo + chunk : n;
  const float *x = reinterpret_cast<const float *>(p.x);
  double s = 0;
  for (long long i = lo + threadIdx.x; i < hi; i += FB_THREADS) s += (double)x[i] * (double)x[i];
  s = block_sum(s, sh);
  if (threadIdx.x == 0) reinterpret_cast<double *>(p.dbl)[blockIdx.x] = s;
}
FB_K(_sumsq_fin) {
  if (blockIdx.x || threadIdx.x) return;
  const double *part = reinterpret_cast<const double *>(p.dbl);
  double s = 0;
  for (int b = 0; b < p.nparts; ++b) s += part[b];
  reinterpret_cast<double *>(p.acc)[0] += s;
}

/* _embed_bwd: a thread per (v, d) of the embedding's gradient dg (rows V x cols D): the sum, in position order, of
 * dy[pos][d] over the positions of token v (CSR: idx = V + 1 offsets into idx2, the positions in increasing order). */
FB_K(_embed_bwd) {
  const long long D = p.cols;
  const int *off = reinterpret_cast<const int *>(p.idx), *pos = reinterpret_cast<const int *>(p.idx2);
  const float *g = reinterpret_cast<const float *>(p.dy);
  FB_GRID_STRIDE(i, p.rows * D) {
    const long long v = i / D, d = i % D;
    float s = 0.0f;
    for (int q = off[v]; q < off[v + 1]; ++q) s += g[(long long)pos[q] * D + d];
    reinterpret_cast<float *>(p.dg)[i] = s;
  }
}
