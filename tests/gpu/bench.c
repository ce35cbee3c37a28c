/* bench.c — `make bench`: the memory-bound kernels at the design's S1 sizes (65536 x 5120 activations;
 * 48 experts' W13 weights, 196608 x 5120), each variant of inkling2_small's tune values timed, the best
 * reported as GB/s against the device copy bandwidth measured in the same run, and beside the PyTorch peer
 * (x.to(torch.float8_e4m3fn), measured by tests/gpu/bench_peer.py in the same device call: --peer FILE).
 * Every kernel is checked against the CPU reference (2048 x 5120, fresh inputs) immediately before it is
 * timed; a kernel that fails its check is not timed. The BF16 inputs have magnitudes log-uniform over 2^-7 .. 2^7
 * (big); the per-token 4/6 quantizer, whose work depends on its data (exact 4/6 ties), is timed on N(0,1) rows
 * too (bigg), in a row of its own.
 * Timing: CUDA events around each launch, 3 warm-ups, the median of 25; inputs of 0.6 GB and more, far
 * past the 60 MB L2, so no rotation is needed.
 * The MoE and optimizer rows (router, permute, unpermute, SwiGLU, AdamW and the FB_IN_F32 quantizer after it)
 * run at S1 too: 8192 tokens x top-8 of 384 experts = 65536 expert rows of d_model 5120 (d_ff 2048), padded
 * to the 128-row GEMM tile per expert; AdamW on the W13 of 48 experts (48 x 4096 x 5120 FP32). Each has its
 * own buffers, allocated for its row and freed after it, filled with random data (moe_setup). The routing
 * (topk_idx, and the row_of / token_of / offsets of the permutation) is made on the host: 8 distinct
 * experts per token, drawn with a per-expert popularity of exp(0.3 N(0,1)) (s1_routing_make). Their check
 * runs run_case (harness.c: the op's own configurations at a smaller size, check_size) with two input
 * kinds, gauss and wide; permute is also checked at S1 (counts, offsets, row_of, token_of) before it is
 * timed. Timing as above (time_moe: the same events, warm-ups and median), with the permutation's four
 * launches (p.pass = 0..3) inside one pair of events, and the router's small inputs (12.6 MB of logits)
 * rotated over 8 sets so that each launch reads them from HBM, not from L2.
 * usage: bench [--peer FILE] [--csv FILE] [--only SUBSTR] [--all]  (--all: every timed variant's time too) */
#include "fb_exit.h"
#include "harness.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

static int cmpf(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* median ms of 25 timed launches after 3 warm-ups */
static float time_kernel(const fb_kernel *k, unsigned gx, unsigned gy, unsigned th, const fb_kp_mem *p) {
  CUevent a, b;
  CU(fb_cu.EventCreate(&a, 0));
  CU(fb_cu.EventCreate(&b, 0));
  float t[25];
  for (int i = 0; i < 3; ++i) CK(fb_kernel_launch(k, gx, gy, th, p, sizeof *p));
  for (int i = 0; i < 25; ++i) {
    CU(fb_cu.EventRecord(a, NULL));
    CK(fb_kernel_launch(k, gx, gy, th, p, sizeof *p));
    CU(fb_cu.EventRecord(b, NULL));
    CU(fb_cu.EventSynchronize(b));
    CU(fb_cu.EventElapsedTime(&t[i], a, b));
  }
  fb_cu.EventDestroy(a), fb_cu.EventDestroy(b);
  qsort(t, 25, sizeof t[0], cmpf);
  return t[12];
}

static CUdeviceptr big(size_t n, int random) {
  CUdeviceptr p;
  CU(fb_cu.MemAlloc(&p, n));
  if (!random) {
    CU(fb_cu.MemsetD8(p, 0, n));
    return p;
  }
  /* random BF16-ish / code bytes: a 64 MiB host block, copied over the buffer */
  size_t blk = 64u << 20;
  uint16_t *h = malloc(blk);
  for (size_t i = 0; i < blk / 2; ++i) {
    uint64_t r = rnd();
    /* BF16 with exponents near 1 (Gaussian-like magnitudes), random sign and mantissa; valid codes too */
    h[i] = (uint16_t)(((r >> 8) & 0x8000u) | ((0x3C00u + ((r >> 20) % 0x700u)) & 0x7F80u) | (r & 0x7Fu));
  }
  for (size_t o = 0; o < n; o += blk) CU(fb_cu.MemcpyHtoD(p + o, h, n - o < blk ? n - o : blk));
  free(h);
  return p;
}

typedef struct {
  const char *what;  /* row label */
  const char *match; /* spec name in harness.c */
  long long rows, cols;
  unsigned ngroups;
  double bytes;      /* bytes moved: each input read once, each output written once */
  int peer;          /* compare with the PyTorch cast */
  int gather_only;   /* permute: time pass 3 (the gather) alone, after passes 0-2 */
  int gauss;         /* BF16 input N(0,1) (bigg) instead of big()'s log-uniform magnitudes */
} bench_row;

/* ---- the MoE and optimizer rows ---------------------------------------------------------------------------- */
/* S1 of the design (recipes/inkling2_small.lua): tokens per rank, top-k, experts, d_ff, the GEMM row tile the
 * permutation pads each expert to, experts per rank and W13's rows per expert (2 x d_ff). d_model is C. */
enum { S1_T = 8192, S1_K = 8, S1_E = 384, S1_F = 2048, S1_TILE = 128, S1_EW = 48, S1_N13 = 4096 };
#define S1_D 5120ll

static int moe_op(const fb_kernel_spec *k) { /* the specs harness.c's run_case sends to its MoE cases */
  return k->op == FB_OP_ROUTER || k->op == FB_OP_PERMUTE || k->op == FB_OP_UNPERMUTE || k->op == FB_OP_SWIGLU_FWD ||
         k->op == FB_OP_SWIGLU_BWD || k->op == FB_OP_ADAMW || (k->op == FB_OP_QUANT && k->in_f32);
}

static double unif01(void) { return ((rnd() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static float gaussf(void) { return (float)(sqrt(-2 * log(unif01())) * cos(6.283185307179586 * unif01())); }

/* n BF16 values N(0,1) (fb_bf16_from_f32: RNE from float), a 64 MiB host block repeated over the buffer: the
 * magnitudes of activations after a norm, against big()'s log-uniform 2^-7 .. 2^7, whose wide blocks make exact 4/6
 * ties (and so the 4/6 quantizer's data-dependent work) far more common than real rows do */
static CUdeviceptr bigg(size_t n) {
  CUdeviceptr p;
  CU(fb_cu.MemAlloc(&p, n * 2));
  size_t blk = n < (32u << 20) ? n : (32u << 20);
  uint16_t *h = malloc(blk * 2);
  for (size_t i = 0; i < blk; ++i) h[i] = fb_bf16_from_f32(gaussf());
  for (size_t o = 0; o < n; o += blk) CU(fb_cu.MemcpyHtoD(p + o * 2, h, (n - o < blk ? n - o : blk) * 2));
  free(h);
  return p;
}

static CUdeviceptr put(const void *h, size_t n) {
  CUdeviceptr p;
  CU(fb_cu.MemAlloc(&p, n));
  CU(fb_cu.MemcpyHtoD(p, h, n));
  return p;
}

/* n FP32 values scale * N(0,1) (absval: their magnitudes), a host block of up to 4M values repeated over the
 * buffer; amax (may be NULL): the largest magnitude of each of ngroups equal spans of the buffer */
static CUdeviceptr bigf(size_t n, float scale, int absval, unsigned ngroups, float *amax) {
  CUdeviceptr p;
  CU(fb_cu.MemAlloc(&p, n * 4));
  size_t blk = n < (4u << 20) ? n : (4u << 20);
  float *h = malloc(blk * 4), a = 0.0f;
  for (size_t i = 0; i < blk; ++i) {
    float v = scale * gaussf();
    h[i] = absval ? fabsf(v) : v;
    a = fmaxf(a, fabsf(v));
  }
  for (size_t o = 0; o < n; o += blk) CU(fb_cu.MemcpyHtoD(p + o * 4, h, (n - o < blk ? n - o : blk) * 4));
  for (unsigned g = 0; amax && g < ngroups; ++g) { /* a span of a whole block or more holds all of it */
    size_t lo = n / ngroups * g, hi = n / ngroups * (g + 1);
    amax[g] = hi - lo >= blk ? a : 0.0f;
    for (size_t i = lo; hi - lo < blk && i < hi; ++i) amax[g] = fmaxf(amax[g], fabsf(h[i % blk]));
  }
  free(h);
  return p;
}

/* n bytes lo + (random % span): E8M0 exponents (no 0xFF NaN) */
static CUdeviceptr bigb(size_t n, unsigned lo, unsigned span) {
  CUdeviceptr p;
  CU(fb_cu.MemAlloc(&p, n));
  size_t blk = n < (64u << 20) ? n : (64u << 20);
  uint8_t *h = malloc(blk);
  for (size_t i = 0; i < blk; ++i) h[i] = (uint8_t)(lo + rnd() % span);
  for (size_t o = 0; o < n; o += blk) CU(fb_cu.MemcpyHtoD(p + o, h, n - o < blk ? n - o : blk));
  free(h);
  return p;
}

/* The S1 routing, on the host: topk_idx (8 distinct experts per token, in the order drawn, each with the
 * probability of a per-expert popularity exp(0.3 N(0,1)): a load spread like a balanced router's, about 30%
 * from expert to expert), its router weights (random, summing to 1 per token), and fb_permute_ref's result
 * with the 128-row tile: counts, offsets, row_of, token_of, P = offsets[E] rows in all. */
typedef struct {
  int32_t *idx, *counts, *row_of, *token_of;
  long long *off;
  float *w;
  size_t P, maxr;
} s1_routing;

static void s1_routing_make(s1_routing *rt) {
  const long long TK = (long long)S1_T * S1_K;
  double cum[S1_E], s = 0;
  for (int e = 0; e < S1_E; ++e) cum[e] = (s += exp(0.3 * gaussf()));
  rt->idx = malloc(TK * 4), rt->w = malloc(TK * 4), rt->counts = malloc(S1_E * 4), rt->row_of = malloc(TK * 4);
  rt->off = malloc((S1_E + 1) * 8);
  rt->maxr = fb_permute_max_rows(S1_T, S1_K, S1_E, S1_TILE);
  rt->token_of = malloc(rt->maxr * 4);
  for (long long t = 0; t < S1_T; ++t) {
    float sw = 0.0f;
    for (int j = 0; j < S1_K; ++j) {
      int e, dup;
      do { /* the first expert whose cumulative popularity passes x */
        double x = unif01() * s;
        int lo = 0, hi = S1_E - 1;
        while (lo < hi) {
          int mid = (lo + hi) / 2;
          if (cum[mid] > x) hi = mid;
          else lo = mid + 1;
        }
        e = lo, dup = 0;
        for (int i = 0; i < j; ++i) dup |= rt->idx[t * S1_K + i] == e;
      } while (dup);
      rt->idx[t * S1_K + j] = e;
      sw += rt->w[t * S1_K + j] = (float)unif01();
    }
    for (int j = 0; j < S1_K; ++j) rt->w[t * S1_K + j] /= sw;
  }
  CK(fb_permute_ref(rt->idx, S1_T, S1_K, S1_E, S1_TILE, rt->counts, rt->off, rt->row_of, rt->token_of, &rt->P));
}

/* The check's R x C for run_case: the existing rows 2048 x 5120 (W13: 48 experts x 64 rows); the MoE rows
 * smaller where the reference (single-threaded) or the inputs' generation is slow. run_case adds each MoE op's
 * own configurations (harness.c run_moe_case): router 2048 tokens of 8 / 33 experts + 77 tokens top-8 of 384
 * + 64 tokens top-64 of 4096; permute R tokens top-8 of 64 experts + 77 x 320 + 300 x 96 top-4 of 384;
 * unpermute R tokens top-8 of 64 experts + 77 x 320; SwiGLU R x C (f = C) + 77 x 320; AdamW 4 experts of R/4
 * rows (NVFP4: AdamW, then the FB_IN_F32 quantizer); the FB_IN_F32 quantizer 4 groups of R rows in all. */
static void check_size(const fb_kernel_spec *k, unsigned ngroups, long long *cr, long long *cc) {
  *cr = ngroups > 1 ? 48 * 64 : 2048, *cc = S1_D;
  switch (k->op) {
  case FB_OP_ROUTER: *cr = 2048; break;
  case FB_OP_PERMUTE: *cr = 1024; break;
  case FB_OP_UNPERMUTE: *cr = 256; break;
  case FB_OP_SWIGLU_FWD:
  case FB_OP_SWIGLU_BWD: *cr = 512, *cc = S1_F; break;
  case FB_OP_ADAMW: *cr = 512; break;
  case FB_OP_QUANT: if (k->in_f32) *cr = 512; break;
  default: break;
  }
}

/* The buffers and parameter blocks of one MoE row, shared by its variants. */
typedef struct {
  int ready, np;
  CUdeviceptr buf[40];
  int nbuf;
  fb_kp_moe p[8];                  /* launches rotate through p[0 .. np) */
  fb_kp_mem q;                     /* the FB_IN_F32 quantizer */
  long long lrows, lcols;          /* fb_launch_dims' rows, cols, ngroups */
  unsigned lgroups;
  double bytes;                    /* device bytes it holds */
} moe_ctx;

static CUdeviceptr own(moe_ctx *c, CUdeviceptr p, size_t bytes) {
  if (c->nbuf == (int)(sizeof c->buf / sizeof c->buf[0])) { fprintf(stderr, "bench: moe_ctx: too many buffers\n"); exit(1); }
  c->bytes += (double)bytes;
  return c->buf[c->nbuf++] = p;
}

static void moe_free(moe_ctx *c) {
  for (int i = 0; i < c->nbuf; ++i) fb_cu.MemFree(c->buf[i]);
  memset(c, 0, sizeof *c);
}

static double mem_peak, moe_peak; /* device memory in use (all of it, as cuMemGetInfo says); a MoE row's own buffers: the most seen */
static void note_mem(void) {
  size_t fr = 0, tot = 0;
  if (fb_cu.MemGetInfo && fb_cu.MemGetInfo(&fr, &tot) == CUDA_SUCCESS && (double)(tot - fr) > mem_peak) mem_peak = (double)(tot - fr);
}

/* Allocate and fill the S1 inputs and outputs of spec k's op (templates/<op>.cuh say which fields each reads). */
static void moe_setup(const fb_kernel_spec *k, const s1_routing *rt, moe_ctx *c) {
  memset(c, 0, sizeof *c);
  c->ready = 1, c->np = 1;
  const long long T = S1_T, K = S1_K, E = S1_E, C = S1_D, TK = T * K, W = (long long)S1_EW * S1_N13;
  fb_kp_moe *p = &c->p[0];
  switch (k->op) {
  case FB_OP_ROUTER: /* logits 2 N(0,1), FP32 T x E; 8 sets */
    c->np = 8;
    for (int s = 0; s < c->np; ++s) {
      fb_kp_moe *ps = &c->p[s];
      ps->in = own(c, bigf(T * E, 2.0f, 0, 0, NULL), T * E * 4);
      ps->probs = own(c, big(T * E * 4, 0), T * E * 4);
      ps->topk_idx = own(c, big(TK * 4, 0), TK * 4);
      ps->topk_w = own(c, big(TK * 4, 0), TK * 4);
      ps->rows = T, ps->experts = (int)E, ps->top_k = (int)K;
    }
    c->lrows = T, c->lcols = E;
    break;
  case FB_OP_PERMUTE: { /* the payload planes of T tokens (random bytes), gathered into maxr >= P rows */
    size_t b[3], nch = (TK + FB_PERMUTE_CHUNK - 1) / FB_PERMUTE_CHUNK;
    CK(fb_payload_planes(k->q.format, k->q.format == FB_FMT_NVFP4 && k->q.outer == FB_GRAN_TOKEN, (size_t)C, b));
    p->topk_idx = own(c, put(rt->idx, TK * 4), TK * 4);
    p->chunk_counts = own(c, big(nch * E * 4, 0), nch * E * 4);
    p->counts = own(c, big(E * 4, 0), E * 4);
    p->offsets = own(c, big((E + 1) * 8, 0), (E + 1) * 8);
    p->row_of = own(c, big(TK * 4, 0), TK * 4);
    p->token_of = own(c, big(rt->maxr * 4, 0), rt->maxr * 4);
    fb_dptr *in[3] = {&p->in, &p->in_scales, &p->in_outer}, *out[3] = {&p->out, &p->out_scales, &p->out_outer};
    for (int q = 0; q < 3; ++q)
      if (b[q]) *in[q] = own(c, big(T * b[q], 1), T * b[q]), *out[q] = own(c, big(rt->maxr * b[q], 0), rt->maxr * b[q]);
    p->rows = T, p->cols = C, p->experts = (int)E, p->top_k = (int)K, p->tile = S1_TILE;
    c->lrows = T, c->lcols = C;
    break;
  }
  case FB_OP_UNPERMUTE: { /* y: P rows (the expert outputs, in permuted order) of random BF16 or S2F6 codes + E8M0 */
    int s2f6 = k->q.format == FB_FMT_S2F6;
    size_t ny = rt->P * (size_t)C, no = (size_t)(T * C) * (k->out_bf16 ? 2 : 4);
    p->in = own(c, big(s2f6 ? ny : ny * 2, 1), s2f6 ? ny : ny * 2);
    if (s2f6) p->in_scales = own(c, bigb(ny / 32, 100, 40), ny / 32);
    p->row_of = own(c, put(rt->row_of, TK * 4), TK * 4);
    p->topk_w = own(c, put(rt->w, TK * 4), TK * 4);
    p->out = own(c, big(no, 0), no);
    p->rows = T, p->cols = C, p->experts = (int)E, p->top_k = (int)K, p->signs = fb_rht_signs(20260101u, 0);
    c->lrows = T, c->lcols = C;
    break;
  }
  case FB_OP_SWIGLU_FWD:
  case FB_OP_SWIGLU_BWD: { /* H: TK x 2F BF16; backward dA: TK x F */
    int bwd = k->op == FB_OP_SWIGLU_BWD;
    size_t nh = (size_t)TK * 2 * S1_F * 2, na = (size_t)TK * S1_F * 2;
    p->in = own(c, big(nh, 1), nh);
    if (bwd) p->in2 = own(c, big(na, 1), na);
    p->out = own(c, big(bwd ? nh : na, 0), bwd ? nh : na);
    p->rows = TK, p->cols = S1_F;
    c->lrows = TK, c->lcols = S1_F;
    break;
  }
  case FB_OP_ADAMW: { /* masters 0.02 N(0,1), m 1e-3 N(0,1), v 1e-6 |N(0,1)|, gradient 1e-2 N(0,1): W x C FP32 each */
    size_t n = (size_t)(W * C);
    p->master = own(c, bigf(n, 0.02f, 0, 0, NULL), n * 4);
    p->m = own(c, bigf(n, 1e-3f, 0, 0, NULL), n * 4);
    p->v = own(c, bigf(n, 1e-6f, 1, 0, NULL), n * 4);
    p->in = own(c, bigf(n, 1e-2f, 0, 0, NULL), n * 4);
    if (k->q.format == FB_FMT_MXFP8) p->out = own(c, big(n, 0), n), p->out_scales = own(c, big(n / 32, 0), n / 32);
    else if (k->q.format == FB_FMT_NVFP4) p->amax = own(c, big(S1_EW * 4, 0), S1_EW * 4); /* zeros */
    else p->out = own(c, big(n * 2, 0), n * 2);
    p->flags = own(c, big(4, 0), 4);
    p->rows = W, p->cols = C, p->experts = S1_EW;
    float t = 100.0f;
    p->lr = 3e-4f, p->b1 = 0.9f, p->b2 = 0.95f, p->eps = 1e-8f, p->wd = 0.1f, p->gscale = 1.0f;
    p->bc1 = 1.0f - powf(p->b1, t), p->bc2 = 1.0f - powf(p->b2, t);
    p->seed = 1, p->stream = 2, p->step = 3;
    c->lrows = W, c->lcols = C, c->lgroups = S1_EW;
    break;
  }
  case FB_OP_QUANT: { /* FB_IN_F32: new masters 0.02 N(0,1), W x C FP32, with their amax per expert (or tensor) */
    size_t n = (size_t)(W * C);
    float am[S1_EW] = {0};
    long long off[S1_EW + 1];
    fb_kp_mem *q = &c->q;
    q->ngroups = k->q.outer == FB_GRAN_EXPERT ? S1_EW : 1;
    q->in = own(c, bigf(n, 0.02f, 0, q->ngroups, am), n * 4);
    for (int e = 0; e <= S1_EW; ++e) off[e] = (long long)e * S1_N13;
    q->amax = own(c, put(am, sizeof am), sizeof am);
    q->group_offsets = own(c, put(off, sizeof off), sizeof off);
    q->out = own(c, big(n / 2, 0), n / 2);
    q->scales = own(c, big(n / 16, 0), n / 16);
    q->s_dec = own(c, big(S1_EW * 4, 0), S1_EW * 4);
    q->rows = W, q->cols = C;
    q->seed = 1, q->stream = 2, q->step = 3;
    c->lrows = W, c->lcols = C, c->lgroups = q->ngroups;
    break;
  }
  default:
    fprintf(stderr, "bench: %s: not an MoE op\n", k->name);
    exit(1);
  }
  CU(fb_cu.CtxSynchronize());
  if (c->bytes > moe_peak) moe_peak = c->bytes;
  note_mem();
}

/* median ms of 25 timed rounds after 3 warm-ups; round i launches p.pass = pass0 .. pass1 (one launch unless the
 * permutation's) of the parameter block ps[i % nps], inside one pair of events */
static float time_moe(const fb_kernel *k, unsigned gx, unsigned gy, unsigned th, const fb_kp_moe *ps, int nps, int pass0, int pass1) {
  CUevent a, b;
  CU(fb_cu.EventCreate(&a, 0));
  CU(fb_cu.EventCreate(&b, 0));
  float t[25];
  for (int i = 0; i < 28; ++i) {
    fb_kp_moe p = ps[i % nps];
    if (i >= 3) CU(fb_cu.EventRecord(a, NULL));
    for (p.pass = pass0; p.pass <= pass1; ++p.pass) CK(fb_kernel_launch(k, gx, gy, th, &p, sizeof p));
    if (i >= 3) {
      CU(fb_cu.EventRecord(b, NULL));
      CU(fb_cu.EventSynchronize(b));
      CU(fb_cu.EventElapsedTime(&t[i - 3], a, b));
    }
  }
  fb_cu.EventDestroy(a), fb_cu.EventDestroy(b);
  qsort(t, 25, sizeof t[0], cmpf);
  return t[12];
}

/* The permutation's index outputs at S1 against fb_permute_ref's (after one run of the four passes). */
static long permute_check_s1(const moe_ctx *c, const s1_routing *rt, const char *nm) {
  const fb_kp_moe *p = &c->p[0];
  const size_t TK = (size_t)S1_T * S1_K;
  int32_t *cnt = malloc(S1_E * 4), *row = malloc(TK * 4), *tok = malloc(rt->P * 4 + 4);
  long long *off = malloc((S1_E + 1) * 8);
  CU(fb_cu.MemcpyDtoH(cnt, p->counts, S1_E * 4));
  CU(fb_cu.MemcpyDtoH(off, p->offsets, (S1_E + 1) * 8));
  CU(fb_cu.MemcpyDtoH(row, p->row_of, TK * 4));
  CU(fb_cu.MemcpyDtoH(tok, p->token_of, rt->P * 4)); /* token_of holds maxr >= P entries */
  long w = 0;
  for (int e = 0; e < S1_E; ++e) w += cnt[e] != rt->counts[e];
  for (int e = 0; e <= S1_E; ++e) w += off[e] != rt->off[e];
  for (size_t i = 0; i < TK; ++i) w += row[i] != rt->row_of[i];
  for (size_t r = 0; r < rt->P; ++r) w += tok[r] != rt->token_of[r];
  if (w) fprintf(stderr, "bench: %s: %ld wrong counts / offsets / row_of / token_of at S1 (offsets[E] %lld, reference %lld)\n", nm, w,
                 off[S1_E], rt->off[S1_E]);
  free(cnt), free(row), free(tok), free(off);
  return w;
}

/* Time variant u of a MoE row (gather_only: the permutation's pass 3 alone); < 0 with *wrong set when the
 * permutation's S1 check fails. */
static float moe_time(const unit *u, const fb_kernel *kern, const moe_ctx *c, const s1_routing *rt, int gather_only, long *wrong) {
  fb_kernel_spec ks = u->t->k;
  if (ks.op == FB_OP_ROUTER || ks.op == FB_OP_PERMUTE || ks.op == FB_OP_UNPERMUTE) ks.experts = S1_E, ks.top_k = S1_K;
  unsigned gx, gy, nt;
  CK(fb_launch_dims(&ks, &u->v, c->lrows, c->lcols, c->lgroups, &gx, &gy, &nt));
  *wrong = 0;
  if (ks.op == FB_OP_QUANT) return time_kernel(kern, gx, gy, nt, &c->q);
  if (ks.op == FB_OP_PERMUTE) {
    fb_kp_moe p = c->p[0];
    for (p.pass = 0; p.pass < 4; ++p.pass) CK(fb_kernel_launch(kern, gx, gy, nt, &p, sizeof p));
    CU(fb_cu.CtxSynchronize());
    if ((*wrong = permute_check_s1(c, rt, u->v.name))) return -1.0f;
    return time_moe(kern, gx, gy, nt, c->p, 1, gather_only ? 3 : 0, 3);
  }
  return time_moe(kern, gx, gy, nt, c->p, c->np, 0, 0);
}


int main(int argc, char **argv) {
  const char *peer_file = NULL, *csv_file = NULL, *only = NULL;
  int all_variants = 0; /* --all: print each timed variant (the best alone otherwise) */
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--peer") && i + 1 < argc) peer_file = argv[++i];
    else if (!strcmp(argv[i], "--csv") && i + 1 < argc) csv_file = argv[++i];
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i]; /* rows whose spec name holds this */
    else if (!strcmp(argv[i], "--all")) all_variants = 1;
    else { fprintf(stderr, "usage: bench [--peer FILE] [--csv FILE] [--only SUBSTR] [--all]\n"); return 2; }
  }
  if (fb_cuda_use_device(0) != FB_OK) {
    printf("bench: SKIPPED (not passed): %s\n", fb_errmsg());
    return 77;
  }
  fb_cuda_device_info info;
  CK(fb_cuda_device_info_get(0, &info));
  double peer_gbs = 0, peer_copy = 0;
  if (peer_file) {
    FILE *f = fopen(peer_file, "r");
    if (!f || fscanf(f, "%lf %lf", &peer_gbs, &peer_copy) != 2) fprintf(stderr, "bench: cannot read the peer's figures from %s\n", peer_file);
    if (f) fclose(f);
  }
  /* ceiling: device-to-device copy, 2 GiB, bytes read + written */
  size_t cb = 2ull << 30;
  CUdeviceptr c0 = big(cb, 0), c1 = big(cb, 0);
  CUevent a, b;
  CU(fb_cu.EventCreate(&a, 0));
  CU(fb_cu.EventCreate(&b, 0));
  float ct[15];
  for (int i = 0; i < 18; ++i) {
    CU(fb_cu.EventRecord(a, NULL));
    CU(fb_cu.MemcpyDtoD(c1, c0, cb));
    CU(fb_cu.EventRecord(b, NULL));
    CU(fb_cu.EventSynchronize(b));
    if (i >= 3) CU(fb_cu.EventElapsedTime(&ct[i - 3], a, b));
  }
  qsort(ct, 15, sizeof ct[0], cmpf);
  double copy_gbs = 2.0 * cb / (ct[7] * 1e-3) / 1e9;
  fb_cu.MemFree(c0), fb_cu.MemFree(c1);

  const long long R = 65536, C = S1_D, W = (long long)S1_EW * S1_N13, T = S1_T, E = S1_E, TK = (long long)S1_T * S1_K, F = S1_F;
  const double n = (double)R * C, nw = (double)W * C;
  s1_routing rt;
  s1_routing_make(&rt);
  const double P = (double)rt.P, rbn = C / 2 + C / 16 + 4; /* padded rows; NVFP4 payload bytes a token */
  bench_row rows[] = {
      {"amax per tensor (BF16 X)", "amax_ten_bf16", R, C, 1, 2 * n, 0, 0, 0},
      {"NVFP4 quant, token 4/6 (dispatch X)", "quant_nvfp4_4o6_tok_row", R, C, 1, 2 * n + n / 2 + n / 16 + 4.0 * R, 1, 0, 0},
      {"  the same, Gaussian rows (N(0,1) BF16)", "quant_nvfp4_4o6_tok_row", R, C, 1, 2 * n + n / 2 + n / 16 + 4.0 * R, 1, 0, 1},
      {"NVFP4 quant, tensor (NVIDIA X)", "quant_nvfp4_ten_row", R, C, 1, 2 * n + n / 2 + n / 16, 1, 0, 0},
      {"MXFP8 quant rows, RN (last-1/6 forward X)", "quant_mxfp8_row", R, C, 1, 2 * n + n + n / 32, 1, 0, 0},
      {"MXFP8 quant rows, SR (dY)", "quant_mxfp8_sr_row", R, C, 1, 2 * n + n + n / 32, 1, 0, 0},
      {"MXFP8 quant columns, SR (dY for wgrad)", "quant_mxfp8_sr_col", R, C, 1, 2 * n + n + n / 32, 1, 0, 0},
      {"MXFP8 quant both ways, SR (dY: the two above, one read)", "quant_mxfp8_sr_both", R, C, 1, 2 * n + 2 * (n + n / 32), 1, 0, 0},
      {"requant NVFP4 tok -> MXFP8^T SR (saved X)", "requant_nvfp4_tok_mxfp8_sr_t", R, C, 1, n / 2 + n / 16 + 4.0 * R + n + n / 32, 0, 0, 0},
      {"requant NVFP4 exp -> MXFP8^T SR (W13, 48 experts)", "requant_nvfp4_exp_mxfp8_sr_t", W, C, 48, nw / 2 + nw / 16 + 4.0 * 48 + nw + nw / 32, 0, 0, 0},
      {"RHT-32 + S2F6 quant (combine Y)", "s2f6_quant_rht32", R, C, 1, 2 * n + n + n / 32, 1, 0, 0},
      {"S2F6 dequant + inverse RHT -> FP32", "s2f6_dequant_rht32", R, C, 1, n + n / 32 + 4 * n, 0, 0, 0},

      /* MoE and optimizer (moe_setup; P = the padded rows of the S1 routing; the small index and workspace arrays
       * (counts, offsets, chunk table) are left out of the bytes). router: logits read, probs + idx + weights written */
      {"router: softmax, top-8 of 384 (8192 tokens)", "router", T, E, 1, 4.0 * T * E + 4.0 * T * E + 8.0 * TK, 0, 0, 0},
      /* topk_idx read, payload of T tokens read once; row_of, token_of, P payload rows (padding rows zeroed) written */
      {"permute NVFP4 tok, 4 passes (dispatch X)", "permute_nvfp4_tok", T, C, 1, 8.0 * TK + 4 * P + (T + P) * rbn, 0, 0, 0},
      /* token_of read, payload of T tokens read once, P payload rows written */
      {"permute NVFP4 tok, gather pass alone", "permute_nvfp4_tok", T, C, 1, 4 * P + (T + P) * rbn, 0, 1, 0},
      {"permute BF16, 4 passes (dY)", "permute_bf16", T, C, 1, 8.0 * TK + 4 * P + (T + P) * 2 * C, 0, 0, 0},
      /* the TK rows row_of points at (codes + E8M0; not the padding rows), row_of, topk_w read; T x C FP32 written */
      {"unpermute S2F6 RHT-32 -> FP32 (combine Y)", "unpermute_s2f6_rht32_f32", T, C, 1, TK * (C + C / 32.0) + 8.0 * TK + 4.0 * T * C, 0, 0, 0},
      {"unpermute BF16 -> FP32 (dX)", "unpermute_bf16_f32", T, C, 1, 2.0 * TK * C + 8.0 * TK + 4.0 * T * C, 0, 0, 0},
      /* H (TK x 2F) read, A (TK x F) written; backward: H, dA read, dH (TK x 2F) written; BF16 */
      {"SwiGLU forward (H -> A, BF16)", "swiglu_fwd_bf16", TK, F, 1, 2.0 * TK * 2 * F + 2.0 * TK * F, 0, 0, 0},
      {"SwiGLU backward (H, dA -> dH, BF16)", "swiglu_bwd_bf16", TK, F, 1, 2.0 * TK * 2 * F + 2.0 * TK * F + 2.0 * TK * 2 * F, 0, 0, 0},
      /* masters, m, v, gradient read (FP32); masters, m, v written; the amax per expert written */
      {"AdamW W13, amax per expert (-> NVFP4)", "adamw_f32_nvfp4_exp", W, C, 48, 16 * nw + 12 * nw + 4.0 * 48, 0, 0, 0},
      /* the next pass: masters (FP32) + amax read; codes, E4M3 scales, S_dec per expert written */
      {"NVFP4 quant exp, FP32 masters (W13 after AdamW)", "quant_nvfp4_exp_f32_row", W, C, 48, 4 * nw + nw / 2 + nw / 16 + 8.0 * 48, 0, 0, 0},
      /* masters, m, v, gradient read; masters, m, v, E4M3 codes + E8M0 scales written */
      {"AdamW W13 + MXFP8 RN, fused (last-1/6 weights)", "adamw_f32_mxfp8", W, C, 48, 16 * nw + 12 * nw + nw + nw / 32, 0, 0, 0},
  };
  const int nrows = (int)(sizeof rows / sizeof rows[0]);
  if (nrows > 64) { fprintf(stderr, "bench: more than 64 rows\n"); return 1; }
  fb_recipe *rec = NULL;
  CK(fb_recipe_load("recipes/inkling2_small.lua", &rec));
  build_specs();
  units = calloc(2048, sizeof *units);
  int first[64], count[64];
  for (int i = 0; i < nrows; ++i) {
    first[i] = nunits, count[i] = 0;
    if (only && !strstr(rows[i].match, only)) continue;
    for (int s = 0; s < nspecs; ++s) {
      if (strncmp(specs[s].k.name, rows[i].match, strlen(rows[i].match)) || strcmp(specs[s].k.name + strlen(rows[i].match), "_sm90a")) continue;
      const fb_tune_family *fam = NULL;
      for (int f = 0; f < rec->nfamilies; ++f)
        if (!strcmp(rec->families[f].family, specs[s].family)) fam = &rec->families[f];
      fb_variant *vs;
      int nv;
      CK(fb_gen_variants(&specs[s].k, fam, &vs, &nv, NULL, NULL, 0));
      for (int v = 0; v < nv; ++v) {
        unit *u = &units[nunits++];
        u->t = &specs[s];
        u->v = vs[v];
        CK(fb_gen_source(&specs[s].k, &vs[v], "tests/gpu/bench.c", "-", &u->src));
        ++count[i];
      }
      free(vs);
    }
    if (!count[i] && !only) { fprintf(stderr, "bench: no spec named %s\n", rows[i].match); return 1; }
  }
  pthread_t th[16];
  for (int i = 0; i < 16; ++i) pthread_create(&th[i], NULL, compile_worker, NULL);
  for (int i = 0; i < 16; ++i) pthread_join(th[i], NULL);
  for (int i = 0; i < nunits; ++i)
    if (units[i].st != FB_OK) { fprintf(stderr, "%s\n", units[i].err); return 1; }
  /* the amax kernels the tensor quantizers' check needs */
  for (int s = 0; s < nspecs; ++s) {
    if (specs[s].k.op != FB_OP_AMAX) continue;
    fb_variant av = {.tmpl = "amax.cuh", .nparams = 1, .param = {"threads"}, .value = {256}};
    snprintf(av.name, sizeof av.name, "%.120s_t256", specs[s].k.name);
    char *src;
    fb_cubin cub;
    CK(fb_gen_source(&specs[s].k, &av, "tests/gpu/bench.c", "-", &src));
    CK(fb_nvrtc_compile(av.name, src, "sm_90a", &cub));
    int mode = specs[s].k.q.outer == FB_GRAN_TOKEN ? 1 : specs[s].k.q.outer == FB_GRAN_EXPERT ? 2 : 0;
    CK(fb_kernel_load(cub.cubin, av.name, &amax_kernel[mode]));
    free(src);
  }

  /* S1 buffers, shared by all rows (sized for the largest) */
  size_t maxn = (size_t)W * C;
  CUdeviceptr din = big(maxn * 2, 1), dout = big(maxn * 4, 0), dsc = big(maxn / 16, 1), dsd = big(W * 4, 0),
              damax = big(4096, 0), doff = big(49 * 8, 0), dflags = big(4, 0), dss = big(maxn / 16, 1), dssd = big(W * 4, 0);
  CUdeviceptr dgin = 0; /* the Gaussian rows' input, made only where a row asks for it */
  for (int i = 0; i < nrows; ++i)
    if (count[i] && rows[i].gauss && !dgin) dgin = bigg((size_t)R * C);
  { /* valid E4M3 source scales (no NaN codes); the requantizers' source S_dec: one a row, as a per-token source has
     * (A_row / 2688 with A_row spread over 2^-2 .. 2^2 around 1, log-uniform: rows of one 32-row block differ, as in
     * training, so a per-token requantizer is timed on the path real activations take, not on the shared-S_dec one) */
    uint8_t *h = malloc(maxn / 16);
    for (size_t i = 0; i < maxn / 16; ++i) h[i] = (uint8_t)(0x30 + rnd() % 0x30);
    CU(fb_cu.MemcpyHtoD(dss, h, maxn / 16));
    CU(fb_cu.MemcpyHtoD(dsc, h, maxn / 16));
    free(h);
    float *o = malloc(W * 4);
    for (long long i = 0; i < W; ++i) o[i] = (float)(exp2(4.0 * unif01() - 2.0) / 2688.0);
    CU(fb_cu.MemcpyHtoD(dssd, o, W * 4));
    for (long long i = 0; i < 256; ++i) o[i] = 1.0f / 2688.0f;
    CU(fb_cu.MemcpyHtoD(damax, o, 1024));
    free(o);
    long long off[49];
    for (int g = 0; g <= 48; ++g) off[g] = (long long)g * 4096;
    CU(fb_cu.MemcpyHtoD(doff, off, sizeof off));
  }
  FILE *csv = csv_file ? fopen(csv_file, "w") : NULL;
  if (csv) fprintf(csv, "kernel,variant,rows,cols,ms,gbs,copy_gbs,pct_copy,peer_gbs,ratio_to_peer,checked_wrong\n");
  printf("\n%s, %d SMs; device copy %.0f GB/s (read + write, 2 GiB, median of 15)", info.name, info.sm_count, copy_gbs);
  if (peer_gbs > 0) printf("; PyTorch x.to(float8_e4m3fn) %.0f GB/s, PyTorch copy %.0f GB/s", peer_gbs, peer_copy);
  {
    int lo = rt.counts[0], hi = rt.counts[0];
    for (int e = 1; e < S1_E; ++e) lo = rt.counts[e] < lo ? rt.counts[e] : lo, hi = rt.counts[e] > hi ? rt.counts[e] : hi;
    printf("\nS1 routing of the MoE rows: %d tokens x top-%d of %d experts (popularity exp(0.3 N(0,1))): %d to %d rows an expert, "
           "%zu rows padded to %d", S1_T, S1_K, S1_E, lo, hi, rt.P, S1_TILE);
  }
  note_mem();
  printf("\n%-52s %-44s %8s %8s %7s %8s %6s\n", "kernel (S1)", "best variant", "ms", "GB/s", "%copy", "x peer", "#wrong");
  int failed = 0;
  for (int i = 0; i < nrows; ++i) {
    if (!count[i]) continue;
    float best = 1e30f;
    int bu = -1;
    long wrong_total = 0;
    moe_ctx mc; /* a MoE row's own S1 buffers: made at its first variant that passes its check, freed after the row */
    memset(&mc, 0, sizeof mc);
    for (int j = first[i]; j < first[i] + count[i]; ++j) {
      unit *u = &units[j];
      fb_kernel kern;
      CK(fb_kernel_load(u->cubin.cubin, u->v.name, &kern));
      /* the check, just before the timing: fresh inputs against the CPU reference (MoE rows: two kinds of input) */
      const int moe = moe_op(&u->t->k);
      long long cr, cc;
      check_size(&u->t->k, rows[i].ngroups, &cr, &cc);
      long wrong, w2 = 0;
      CK(run_case(u, &kern, CASE_WIDE, (unsigned)(rnd() & 0xFFFF), cr, cc, &wrong));
      if (moe || rows[i].gauss) CK(run_case(u, &kern, CASE_GAUSS, (unsigned)(rnd() & 0xFFFF), cr, cc, &w2));
      wrong += w2;
      wrong_total += wrong;
      if (wrong) {
        fprintf(stderr, "bench: %s failed its check (%ld wrong): not timed\n", u->v.name, wrong);
        fb_kernel_unload(&kern);
        continue;
      }
      if (moe) {
        if (!mc.ready) moe_setup(&u->t->k, &rt, &mc);
        long w1 = 0;
        float ms = moe_time(u, &kern, &mc, &rt, rows[i].gather_only, &w1);
        CU(fb_cu.CtxSynchronize());
        wrong_total += w1;
        if (w1) fprintf(stderr, "bench: %s failed its S1 check (%ld wrong): not timed\n", u->v.name, w1);
        else if (ms < best) best = ms, bu = j;
        fb_kernel_unload(&kern);
        continue;
      }
      fb_kp_mem p;
      memset(&p, 0, sizeof p);
      p.in = rows[i].gauss ? dgin : din, p.out = dout, p.scales = dsc, p.s_dec = dsd, p.amax = damax, p.group_offsets = doff, p.flags = dflags;
      p.src_scales = dss, p.src_s_dec = dssd, p.rows = rows[i].rows, p.cols = rows[i].cols, p.ngroups = rows[i].ngroups;
      p.seed = 1, p.stream = 2, p.step = 3, p.signs = 0x9E3779B9u;
      if (u->t->k.op == FB_OP_S2F6_DQ) p.scales = dss; /* valid E8M0-ish exponents */
      if (u->t->k.op == FB_OP_QUANT && u->t->k.col == 2) /* both ways: the row-wise half past the column-wise one */
        p.out2 = dout + maxn * 2, p.scales2 = dsc + maxn / 32, p.stream2 = 5;
      if (u->t->k.op == FB_OP_REQUANT && u->t->k.src.outer == FB_GRAN_TOKEN) p.ngroups = 1;
      unsigned gx, gy, nt;
      CK(fb_launch_dims(&u->t->k, &u->v, p.rows, p.cols, p.ngroups, &gx, &gy, &nt));
      float ms = time_kernel(&kern, gx, gy, nt, &p);
      CU(fb_cu.CtxSynchronize());
      if (all_variants)
        printf("  %-50s %-44s %8.3f %8.0f\n", "(variant)", u->v.name + strlen(u->t->k.name), ms, rows[i].bytes / (ms * 1e-3) / 1e9);
      if (ms < best) best = ms, bu = j;
      fb_kernel_unload(&kern);
    }
    moe_free(&mc);
    if (bu < 0) {
      printf("%-52s %-44s %8s\n", rows[i].what, "(every variant failed its check)", "-");
      failed = 1;
      continue;
    }
    double gbs = rows[i].bytes / (best * 1e-3) / 1e9;
    char ratio[16] = "-";
    if (rows[i].peer && peer_gbs > 0) snprintf(ratio, sizeof ratio, "%.2f", gbs / peer_gbs);
    const char *vn = units[bu].v.name + strlen(units[bu].t->k.name);
    printf("%-52s %-44s %8.3f %8.0f %6.1f%% %8s %6ld\n", rows[i].what, vn, best, gbs, 100 * gbs / copy_gbs, ratio, wrong_total);
    if (csv)
      fprintf(csv, "%s%s,%s,%lld,%lld,%.4f,%.1f,%.1f,%.1f,%.1f,%s,%ld\n", units[bu].t->k.name, rows[i].gather_only ? "/gather" : "", vn + 1,
              rows[i].rows, rows[i].cols,
              best, gbs, copy_gbs, 100 * gbs / copy_gbs, rows[i].peer ? peer_gbs : 0.0, ratio, wrong_total);
  }
  if (csv) fclose(csv);
  printf("(GB/s = bytes read once + written once / median time; %%copy against the copy above; each variant passed its check at "
         "2048 x 5120 (W13: 48 x 64 rows) just before it was timed; the MoE rows at smaller sizes, gauss and wide inputs: router "
         "2048 tokens, permute 1024 x 5120 (and S1's indices), unpermute 256 x 5120, SwiGLU 512 x 2048, AdamW and its quantizer "
         "512 x 5120)\n");
  if (moe_peak > 0)
    printf("the largest MoE row's own buffers: %.2f GiB; device memory in use at the most (cuMemGetInfo after each row's "
           "allocations): %.2f GiB\n", moe_peak / (1ull << 30), mem_peak / (1ull << 30));
  fb_recipe_free(rec);
  return failed;
}
