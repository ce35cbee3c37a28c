/* bench_layer.c — one MoE expert layer's forward + backward at the S1 shape on the GPU (issue: the runtime's speed),
 * through the runtime's device entry points (runtime/experts_gpu.h: fb_gpu_experts_forward_dev / _backward_dev), with
 * its PyTorch peer (tests/gpu/bench_layer_peer.py: an eager BF16 layer on the same routing) measured in the same call.
 *
 *   bench_layer [--recipe R] [--layer L] [--tokens T] [--experts E] [--top-k K] [--d-model D] [--d-ff F]
 *               [--routing balanced|zipf] [--iters N] [--cache DIR] [--routing-out FILE [--routing-only]] [--peer FILE]
 *               [--dump DIR]
 *
 * What is timed: from the BF16 tokens, the routing and the FP32 masters to y, then from dy to dx, dW13, dW2 and
 * dL/dtopk_w: dispatch (quantize, permute), the weights' quantization and BF16 copies, the GEMMs with their epilogues,
 * SwiGLU, the combine, and the whole MXFP8 backward (SR quantizers, requantize-transposes, copies). In a train step the
 * weights' forward quantization is done by the AdamW kernel (fused) and not by the layer; its share is printed apart.
 * Not timed: the router (the peer gets the same routing, also without a router).
 *
 * Checks before timing (exit 1 on failure): every output finite; two runs byte-identical (y, dx, dW13, dW2, dtopk_w);
 * y of 8 sampled tokens within 0.5 (relative Frobenius) of an FP64 evaluation of the layer on the unquantized
 * masters and tokens (the recipe's quantization error is ~0.1 for NVFP4: this catches wrong rows, experts or layouts,
 * not rounding; the rounding is checked bit for bit by test_kernels, test_gemm and test_train_gpu in the same call);
 * one rank: a third run through the other path (direct, or through the exchange machinery of N ranks) byte-identical
 * to the first. The timed path is the direct one; FOURBIT_GPU_EXCHANGE=1 in the environment times the exchange path.
 * Expert parallelism (torchrun-style: WORLD_SIZE > 1 with RANK, LOCAL_RANK, MASTER_ADDR/MASTER_PORT, one process
 * per GPU): --experts is the experts of each rank (S1 at N = 8: 48 a rank, 384 in all), each rank routes its own
 * --tokens over all of them, the layer exchanges its payloads with NCCL; the FP64 check of y (which needs the
 * other ranks' weights) is skipped, and the ranks' layer times are gathered (the slowest is the step). Every run
 * also times a plain NCCL all-to-all of the BF16 rows its dispatch sends: the peer of the payload exchange.
 * Device memory: the pool's peak (everything the layer allocates: saved tensors, scratch) plus the tensors the caller
 * holds (tokens, routing, masters, dy, dx, gradients), against the peer's torch.cuda.max_memory_allocated.
 * --dump DIR (one rank): dy is rounded to BF16 values (what a BF16 autograd gradient carries exactly), and the layer's
 * inputs and the first checked run's outputs are written raw into DIR (x.bf16 idx.i32 topk_w.f32 w13.f32 w2.f32 dy.f32;
 * y.bf16 dx.f32 dw13.f32 dw2.f32 dtopk_w.f32; meta.txt: "recipe layer tokens experts top_k d_model d_ff seed step"):
 * tests/gpu/torch_layer.py and tests/python/test_layer_mock.py feed them to fourbit.torch / fourbit.Layer and compare. */
#include "comm.h"
#include "experts_gpu.h"
#include "fb_cuda.h"
#include "fb_error.h"
#include "fourbit_train.h"
#include "../../tuner/tune.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void usage(FILE *f) {
  fprintf(f, "usage: bench_layer [--recipe R] [--layer L] [--tokens T] [--experts E] [--top-k K] [--d-model D] [--d-ff F]\n"
             "                   [--routing balanced|zipf] [--iters N] [--cache DIR] [--pick V1,V2,...] [--routing-out FILE [--routing-only]]\n"
             "                   [--pick mma|wgmma|tcgen05] [--peer FILE] [--dump DIR] [--global] [--pool-only] [--train-amax]\n"
             "--routing-only: write the routing file (for the peer) and stop. --peer: the lines of bench_layer_peer.py.\n"
             "--pick V1,V2,...: these variants (full names) for their kernels; with --cache DIR their cubins from DIR where tune\n"
             "put them (else NVRTC) and DIR's winners for every other kernel, so one run differs from the tuned layer in them alone.\n"
             "--pick mma|wgmma|tcgen05[,V1,...]: every GEMM from that family's variants (V1,... where named; else the cache's winner\n"
             "of the family with --cache, else its first). --dump DIR: the inputs and the first checked run's outputs, raw.\n"
             "--global: every rank makes the inputs of all ranks (tokens of all, masters of every expert) and takes its slice, so\n"
             "that N ranks and one rank with N times the tokens and experts solve one problem (with --dump: DIR/rankR per rank).\n"
             "--pool-only: three forwards + backwards on zero inputs, no checks, not timed; prints the pool's peak (with the fake\n"
             "driver's MOCK_POOL_ONLY=1, the host's accounting at shapes too large to compute on the CPU).\n"
             "--train-amax: the NVFP4 weights' amax handed to the layer, as AdamW's NVFP4 form leaves them in a train step\n"
             "(computed here on the host), so the timed step has no amax pass over the masters: the layer as a train step runs it.\n");
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}
static float nrand(void) { /* uniform with unit variance (fast enough for 1.5e9 values) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)((double)(rng >> 11) * (1.0 / 9007199254740992.0) * 3.4641016151377544 - 1.7320508075688772);
}

static uint64_t fnv1a(const void *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
  return h;
}

/* the cache lookup (as fourbit train --cache) */
typedef struct {
  fb_cache *cache;
  fb_fingerprint fp;
  const fb_recipe *r;
  fb_plan *plan;
  int winners, defaults, missing;
} lk;
static fb_status lookup(void *user, const fb_kernel_spec *k, long long tokens, char *vn, size_t vl, void **cubin, size_t *size,
                        double *ms, char *note, size_t nl) {
  lk *u = user;
  fb_tune_choice ch;
  fb_status s = fb_tune_lookup(u->cache, &u->fp, u->r, u->plan, k, tokens, &ch, cubin, size, note, nl);
  if (ms) *ms = s == FB_OK && ch.from_winner ? ch.winner.median_ms : 0;
  if (s == FB_OK) snprintf(vn, vl, "%s", ch.var.name), ch.from_winner ? ++u->winners : ++u->defaults;
  else ++u->missing;
  return s;
}

/* --pick V1,V2,...: these variants (full names) instead of the defaults, compiled here; with --cache (c): their cubins
   from the cache by content key where tune compiled them, and the cache's lookup for the kernels not picked */
typedef struct {
  const fb_recipe *r;
  char picks[4096];
  int used;
  lk *c;
} pk;
static fb_status pick_lookup(void *user, const fb_kernel_spec *k, long long tokens, char *vn, size_t vl, void **cubin, size_t *size,
                             double *ms, char *note, size_t nl) {
  pk *u = user;
  if (ms) *ms = 0; /* a picked kernel has no time: grad_both's choice takes the cache's winners or its default */
  const fb_tune_family *fam = NULL;
  for (int f = 0; f < u->r->nfamilies; ++f)
    if (!strcmp(u->r->families[f].family, k->family)) fam = &u->r->families[f];
  fb_variant *vs = NULL;
  int nv = 0;
  if (!fam || fb_gen_variants(k, fam, &vs, &nv, NULL, NULL, 0) != FB_OK) return FB_ERR(FB_ENOTFOUND, "no variants");
  for (int j = 0; j < nv; ++j) {
    char key[200];
    snprintf(key, sizeof key, ",%s,", vs[j].name);
    if (!strstr(u->picks, key)) continue;
    char *src = NULL;
    fb_cubin cb;
    memset(&cb, 0, sizeof cb);
    fb_status s = fb_gen_source(k, &vs[j], u->r->path, u->c ? u->c->plan->sha256 : "-", &src);
    uint8_t ck[32];
    int cached = 0;
    if (s == FB_OK && u->c) {
      fb_cache_kernel_key(src, "sm_90a", ck);
      cached = fb_cache_get_kernel(u->c->cache, ck, &cb.cubin, &cb.size) == FB_OK;
    }
    if (s == FB_OK && !cached) s = fb_nvrtc_compile(vs[j].name, src, "sm_90a", &cb);
    free(src);
    if (s != FB_OK) { free(vs); return s; }
    *cubin = cb.cubin, *size = cb.size, cb.cubin = NULL;
    fb_cubin_free(&cb);
    snprintf(vn, vl, "%s", vs[j].name);
    snprintf(note, nl, "--pick%s", cached ? " (the cache's cubin)" : " (NVRTC)");
    u->used++;
    free(vs);
    return FB_OK;
  }
  free(vs);
  if (u->c) return lookup(u->c, k, tokens, vn, vl, cubin, size, ms, note, nl);
  (void)tokens;
  return FB_ERR(FB_ENOTFOUND, "not picked");
}

#define CK(x)                                                                                                            \
  do {                                                                                                                   \
    if ((x) != FB_OK) { fprintf(stderr, "bench_layer: %s\n", fb_errmsg()); return 1; }                                   \
  } while (0)
#define CU(x)                                                                                                            \
  do {                                                                                                                   \
    int r_ = (int)(x);                                                                                                   \
    if (r_) { fprintf(stderr, "bench_layer: %s: %s\n", #x, fb_cu_errstr(r_)); return 1; }                               \
  } while (0)

static int dalloc(unsigned long long *d, size_t n, const void *h, size_t *total) { /* a field of fb_gpu_layer_io */
  CU(fb_cu.MemAlloc(d, n));
  if (h) CU(fb_cu.MemcpyHtoD(*d, h, n));
  else CU(fb_cu.MemsetD8(*d, 0, n));
  *total += n;
  return 0;
}

static double silu(double g) { return g / (1 + exp(-g)); }

int main(int argc, char **argv) {
  const char *picks = NULL, *recipe = "recipes/inkling2_small.lua", *routing = "balanced", *cache = NULL, *rout = NULL, *peer = NULL,
             *dump = NULL;
  int routing_only = 0, pool_only = 0, global = 0, train_amax = 0, layer = 1, T = 8192, E = 48, K = 8, D = 5120, F = 2048, iters = 10;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(s) (!strcmp(a, s) && v && (++i, 1))
    if (OPT("--recipe")) recipe = v;
    else if (OPT("--layer")) layer = atoi(v);
    else if (OPT("--tokens")) T = atoi(v);
    else if (OPT("--experts")) E = atoi(v);
    else if (OPT("--top-k")) K = atoi(v);
    else if (OPT("--d-model")) D = atoi(v);
    else if (OPT("--d-ff")) F = atoi(v);
    else if (OPT("--routing")) routing = v;
    else if (OPT("--iters")) iters = atoi(v);
    else if (OPT("--cache")) cache = v;
    else if (OPT("--routing-out")) rout = v;
    else if (OPT("--peer")) peer = v;
    else if (OPT("--pick")) picks = v;
    else if (OPT("--dump")) dump = v;
    else if (!strcmp(a, "--routing-only")) routing_only = 1;
    else if (!strcmp(a, "--pool-only")) pool_only = 1;
    else if (!strcmp(a, "--global")) global = 1;
    else if (!strcmp(a, "--train-amax")) train_amax = 1;
    else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
    else { usage(stderr); return 2; }
  }
  if (T < 1 || E < 1 || K < 1 || K > E || D % 128 || F % 128 || iters < 1 || (strcmp(routing, "balanced") && strcmp(routing, "zipf"))) {
    usage(stderr);
    return 2;
  }
  fb_comm *comm = NULL;
  if (fb_comm_init_env(&comm) != FB_OK) { fprintf(stderr, "bench_layer: %s\n", fb_errmsg()); return 2; }
  const int nr = fb_comm_size(comm), rk = fb_comm_rank(comm);
  if (nr > 1 && rk) {
    if (!freopen("/dev/null", "w", stdout)) return 1; /* rank 0 speaks */
  }
  if (nr > 1 && dump && !global) { fprintf(stderr, "bench_layer: --dump with WORLD_SIZE > 1 needs --global\n"); return 2; }
  if (nr > 1 && (routing_only || rout || peer)) { fprintf(stderr, "bench_layer: the PyTorch peer is one-rank: no --routing-out / --peer with WORLD_SIZE > 1\n"); return 2; }
  const int Eloc = E;
  E = Eloc * nr; /* experts in all */
  if (!global) rng ^= 0xD1B54A32D192ED03ull * (uint64_t)(rk + 1);
  const size_t NG = global ? (size_t)nr : 1; /* --global: every rank makes the whole problem, then takes its slice */
  fb_model over = {0};
  over.experts = E, over.top_k = K, over.d_model = D, over.d_ff = F;
  fb_recipe *r = NULL;
  if (fb_train_recipe_load(recipe, &over, &r) != FB_OK) { fprintf(stderr, "bench_layer: %s\n", fb_errmsg()); return 2; }
  fb_plan *plan = NULL;
  CK(fb_plan_resolve(r, "sm_90a", &plan));
  if (layer < 1 || layer > plan->nlayers) { fprintf(stderr, "bench_layer: --layer %d: the recipe has %d\n", layer, plan->nlayers); return 2; }
  const fb_layer_prec *prec = &plan->layers[layer - 1];

  /* ---- host data: routing, tokens, masters, dy ---- */
  size_t nT = (size_t)T, nD = (size_t)D, nF = (size_t)F, nE = (size_t)E, nK = (size_t)K;
  int32_t *idx = malloc(NG * nT * nK * 4);
  const size_t nEl = (size_t)Eloc, nEm = global ? nE : nEl; /* this rank's experts (their masters and gradients); made */
  float *tw = malloc(NG * nT * nK * 4), *w13 = malloc(nEm * 2 * nF * nD * 4), *w2 = malloc(nEm * nD * nF * 4),
        *dy = malloc(NG * nT * nD * 4);
  uint16_t *xb = malloc(NG * nT * nD * 2);
  if (!idx || !tw || !w13 || !w2 || !dy || !xb) { fprintf(stderr, "bench_layer: host memory\n"); return 1; }
  double *zw = malloc(nE * sizeof *zw);
  for (size_t e = 0; e < nE; ++e) zw[e] = 1.0 / (double)(e + 1); /* Zipf, s = 1 */
  long long *cnt = calloc(nE, sizeof *cnt);
  for (size_t t = 0; t < NG * nT; ++t) {
    double ws = 0, wv[64];
    for (size_t s = 0; s < nK; ++s) {
      int e;
      if (!strcmp(routing, "balanced")) {
        e = (int)((t * nK + s) % nE);
      } else { /* K distinct experts, drawn in proportion to zw */
        for (;;) {
          double u = urand(), tot = 0;
          for (size_t j = 0; j < nE; ++j) tot += zw[j];
          u *= tot, e = 0;
          while (e < E - 1 && u >= zw[e]) u -= zw[e++];
          int dup = 0;
          for (size_t q = 0; q < s; ++q) dup |= idx[t * nK + q] == e;
          if (!dup) break;
        }
      }
      idx[t * nK + s] = e, cnt[e]++;
      wv[s] = urand() + 0.05, ws += wv[s];
    }
    for (size_t s = 0; s < nK; ++s) tw[t * nK + s] = (float)(wv[s] / ws);
  }
  long long cmin = cnt[0], cmax = cnt[0];
  for (size_t e = 0; e < nE; ++e) cmin = cnt[e] < cmin ? cnt[e] : cmin, cmax = cnt[e] > cmax ? cnt[e] : cmax;
  if (rout) { /* for the peer: idx (int32 T x K), weights (FP32 T x K) */
    FILE *f = fopen(rout, "wb");
    if (!f || fwrite(idx, 4, nT * nK, f) != nT * nK || fwrite(tw, 4, nT * nK, f) != nT * nK || fclose(f)) {
      fprintf(stderr, "bench_layer: --routing-out %s: cannot write\n", rout);
      return 1;
    }
  }
  if (routing_only) return 0;
  if (!pool_only) { /* --pool-only: the inputs stay zero (and their host pages untouched) */
    for (size_t i = 0; i < NG * nT * nD; ++i) xb[i] = fb_bf16_from_f32(nrand());
    float s13 = 1.0f / sqrtf((float)D), s2 = 1.0f / sqrtf((float)F);
    for (size_t i = 0; i < nEm * 2 * nF * nD; ++i) w13[i] = nrand() * s13;
    for (size_t i = 0; i < nEm * nD * nF; ++i) w2[i] = nrand() * s2;
    for (size_t i = 0; i < NG * nT * nD; ++i) dy[i] = nrand() * 1e-2f;
    if (dump) /* BF16 values: a BF16 autograd gradient carries them exactly */
      for (size_t i = 0; i < NG * nT * nD; ++i) dy[i] = fb_bf16_to_f32(fb_bf16_from_f32(dy[i]));
  }
  if (global) { /* this rank's slice: tokens [rk T, (rk + 1) T), experts [rk E / N, (rk + 1) E / N) */
    idx += (size_t)rk * nT * nK, tw += (size_t)rk * nT * nK, xb += (size_t)rk * nT * nD, dy += (size_t)rk * nT * nD;
    w13 += (size_t)rk * nEl * 2 * nF * nD, w2 += (size_t)rk * nEl * nD * nF;
  }
  printf("bench_layer: %s layer %d (fwd %s, bwd %s), %d tokens x top-%d of %d experts = %lld rows (%s: %lld..%lld per expert), "
         "d_model %d, d_ff %d\n", r->name, layer, fb_format_name(prec->fwd_act.format), fb_format_name(prec->bwd_grad.format), T, K, E,
         (long long)nT * K, routing, cmin, cmax, D, F);

  /* ---- device ---- */
  if (fb_cuda_use_device(0) != FB_OK) { printf("bench_layer: SKIPPED (not passed): no GPU: %s\n", fb_errmsg()); return 0; }
  lk u;
  memset(&u, 0, sizeof u);
  u.r = r;
  if (cache) {
    CK(fb_cache_open(cache, &u.cache));
    CK(fb_tune_fingerprint(&u.fp));
    CK(fb_plan_resolve(r, "sm_90a", &u.plan));
  }
  pk pu;
  memset(&pu, 0, sizeof pu);
  pu.r = r, pu.c = cache ? &u : NULL;
  /* --pick mma / wgmma / tcgen05[,V1,...]: a GEMM family for every GEMM (the runtime's pick_family), then variant names */
  const char *family = NULL;
  if (picks && (!strncmp(picks, "mma", 3) || !strncmp(picks, "wgmma", 5) || !strncmp(picks, "tcgen05", 7))) {
    size_t l = strcspn(picks, ",");
    family = l == 3 ? "mma" : l == 5 && picks[0] == 'w' ? "wgmma" : l == 7 && picks[0] == 't' ? "tcgen05" : NULL;
    if (family) picks = picks[l] ? picks + l + 1 : NULL;
  }
  if (picks) snprintf(pu.picks, sizeof pu.picks, ",%s,", picks);
  fb_gpu_experts_opts go = {.recipe = r, .tokens = T, .lookup = picks ? pick_lookup : cache ? lookup : NULL, .pick_family = family,
                            .lookup_user = picks ? (void *)&pu : (void *)&u, .log = stdout, .verbose = 1, .comm = comm};
  fb_gpu_experts *g = NULL;
  CK(fb_gpu_experts_create(&go, &g));
  fb_gpu_experts_stats st = fb_gpu_experts_stats_get(g);
  printf("kernels: %d (%d from the cache: %d tuned winners, %d defaults; %d compiled with NVRTC)\n", st.kernels, st.from_cache,
         u.winners, u.defaults, st.compiled);
  size_t held_io = 0;
  fb_gpu_layer_io io;
  memset(&io, 0, sizeof io);
  if (dalloc(&io.x, nT * nD * 2, pool_only ? NULL : xb, &held_io)) return 1;
  if (dalloc(&io.topk_idx, nT * nK * 4, idx, &held_io)) return 1;
  if (dalloc(&io.topk_w, nT * nK * 4, tw, &held_io)) return 1;
  if (dalloc(&io.w13, nEl * 2 * nF * nD * 4, pool_only ? NULL : w13, &held_io)) return 1;
  if (dalloc(&io.w2, nEl * nD * nF * 4, pool_only ? NULL : w2, &held_io)) return 1;
  const fb_qspec *fw = &prec->fwd_weight;
  if (train_amax && !pool_only && fw->format == FB_FMT_NVFP4 && (fw->outer == FB_GRAN_EXPERT || fw->outer == FB_GRAN_TENSOR)) {
    /* max |w| (NaN ignored) of each outer-scale group of this rank's masters: what AdamW's NVFP4 form leaves */
    const size_t ng = fw->outer == FB_GRAN_EXPERT ? nEl : 1, n13 = nEl * 2 * nF * nD, n2 = nEl * nD * nF;
    float *am = calloc(2 * ng, sizeof *am);
    if (!am) return 1;
    for (size_t i = 0; i < n13; ++i)
      if (fabsf(w13[i]) > am[i / (n13 / ng)]) am[i / (n13 / ng)] = fabsf(w13[i]);
    for (size_t i = 0; i < n2; ++i)
      if (fabsf(w2[i]) > am[ng + i / (n2 / ng)]) am[ng + i / (n2 / ng)] = fabsf(w2[i]);
    if (dalloc(&io.w13_amax, ng * 4, am, &held_io) || dalloc(&io.w2_amax, ng * 4, am + ng, &held_io)) return 1;
    free(am);
    printf("weights' amax: given, %zu a weight (as AdamW's NVFP4 form leaves them in a train step): no amax pass is timed\n", ng);
  } else if (train_amax)
    printf("weights' amax: --train-amax has nothing to give (the forward weights are %s, not NVFP4 with expert or tensor outer scales)\n",
           fb_format_name(fw->format));
  if (dalloc(&io.y, nT * nD * 2, NULL, &held_io)) return 1;
  if (dalloc(&io.dy, nT * nD * 4, pool_only ? NULL : dy, &held_io)) return 1;
  if (dalloc(&io.dx, nT * nD * 4, NULL, &held_io)) return 1;
  if (dalloc(&io.dw13, nEl * 2 * nF * nD * 4, NULL, &held_io)) return 1;
  if (dalloc(&io.dw2, nEl * nD * nF * 4, NULL, &held_io)) return 1;
  if (dalloc(&io.dtopk_w, nT * nK * 4, NULL, &held_io)) return 1;

  fb_moe_layer L;
  memset(&L, 0, sizeof L);
  L.layer = layer, L.prec = prec, L.tokens = T, L.d_model = D, L.d_ff = F, L.experts = E, L.top_k = K, L.seed = 1234, L.step = 1;
  L.comm = comm;

  if (pool_only) { /* three forwards + backwards on zero inputs, no checks, no timing: the pool's accounting alone (the
                      pool settles its slabs after the first step: docs/design.md) */
    size_t live, peak, held;
    for (int st = 0; st < 3; ++st) {
      CK(fb_gpu_experts_forward_dev(g, &L, &io));
      CK(fb_gpu_experts_backward_dev(g, &L, &io));
      CU(fb_cu.CtxSynchronize());
      fb_gpu_experts_memory(g, &live, &peak, &held);
      printf("pool only: step %d: peak %.3f GiB, held %.3f GiB\n", st + 1, peak / 1073741824.0, held / 1073741824.0);
    }
    printf("pool only (no checks, not timed): the layer's pool peak %.3f GiB (held %.3f GiB, live after the step %.3f GiB) + "
           "inputs, masters and gradients %.3f GiB\n", peak / 1073741824.0, held / 1073741824.0, live / 1073741824.0,
           held_io / 1073741824.0);
    printf("the pool's peak was reached in: %s\n", fb_gpu_experts_peak_phase(g));
    printf("RESULT_POOL layer=%d routing=%s peak_gib=%.3f held_gib=%.3f\n", layer, routing, peak / 1073741824.0, held / 1073741824.0);
    return 0;
  }
  /* ---- checks: two runs byte-identical, finite, y near the FP64 layer ---- */
  struct { CUdeviceptr p; size_t n; const char *name; void *h[2]; } outs[] = {
      {io.y, nT * nD * 2, "y", {0}}, {io.dx, nT * nD * 4, "dx", {0}}, {io.dw13, nEl * 2 * nF * nD * 4, "dW13", {0}},
      {io.dw2, nEl * nD * nF * 4, "dW2", {0}}, {io.dtopk_w, nT * nK * 4, "dtopk_w", {0}}};
  for (int run = 0; run < 2; ++run) {
    CK(fb_gpu_experts_forward_dev(g, &L, &io));
    CU(fb_cu.CtxSynchronize());
    for (int o = 0; o < 1; ++o) {
      outs[o].h[run] = malloc(outs[o].n);
      CU(fb_cu.MemcpyDtoH(outs[o].h[run], outs[o].p, outs[o].n));
    }
    CK(fb_gpu_experts_backward_dev(g, &L, &io));
    CU(fb_cu.CtxSynchronize());
    for (int o = 1; o < 5; ++o) {
      outs[o].h[run] = malloc(outs[o].n);
      CU(fb_cu.MemcpyDtoH(outs[o].h[run], outs[o].p, outs[o].n));
    }
  }
  int bad = 0;
  for (int o = 0; o < 5; ++o) {
    size_t nonfinite = 0;
    if (o == 0) {
      for (size_t i = 0; i < nT * nD; ++i) nonfinite += !isfinite(fb_bf16_to_f32(((uint16_t *)outs[o].h[0])[i]));
    } else {
      for (size_t i = 0; i < outs[o].n / 4; ++i) nonfinite += !isfinite(((float *)outs[o].h[0])[i]);
    }
    int same = !memcmp(outs[o].h[0], outs[o].h[1], outs[o].n);
    printf("check %-8s non-finite %zu, two runs %s\n", outs[o].name, nonfinite, same ? "byte-identical" : "DIFFER");
    bad |= nonfinite != 0 || !same;
  }
  if (nr == 1) { /* one rank: the other path (direct <-> through the exchange) gives the same bytes; the timing below runs
                    the configured one (FOURBIT_GPU_EXCHANGE=1: the exchange path) */
    int xo = fb_gpu_experts_exchange(g);
    fb_gpu_experts_set_exchange(g, !xo);
    CK(fb_gpu_experts_forward_dev(g, &L, &io));
    CK(fb_gpu_experts_backward_dev(g, &L, &io));
    CU(fb_cu.CtxSynchronize());
    fb_gpu_experts_set_exchange(g, xo);
    /* the pool reported below is the timed path's alone (the exchange path's is larger); one step, not timed, settles
       it again (its first step adds slabs, then they become one: docs/design.md) */
    CK(fb_gpu_experts_trim(g));
    CK(fb_gpu_experts_forward_dev(g, &L, &io));
    CK(fb_gpu_experts_backward_dev(g, &L, &io));
    int diff = 0;
    char dn[64] = "";
    for (int o = 0; o < 5; ++o) {
      CU(fb_cu.MemcpyDtoH(outs[o].h[1], outs[o].p, outs[o].n));
      if (memcmp(outs[o].h[0], outs[o].h[1], outs[o].n)) diff = 1, snprintf(dn + strlen(dn), sizeof dn - strlen(dn), " %s", outs[o].name);
    }
    printf("check one rank: direct path = exchange path: y dx dW13 dW2 dtopk_w %s%s (timed: the %s path; FNV-1a y %016llx / %016llx, "
           "dx %016llx / %016llx)\n", diff ? "DIFFER:" : "byte-identical", dn, xo ? "exchange" : "direct",
           (unsigned long long)fnv1a(outs[0].h[0], outs[0].n), (unsigned long long)fnv1a(outs[0].h[1], outs[0].n),
           (unsigned long long)fnv1a(outs[1].h[0], outs[1].n), (unsigned long long)fnv1a(outs[1].h[1], outs[1].n));
    bad |= diff;
  }
  if (nr > 1) {
    printf("check y vs the FP64 layer: skipped with %d ranks (the other ranks' experts are theirs)\n", nr);
  } else { /* y of 8 tokens against the FP64 layer on the unquantized operands */
    double num = 0, den = 0;
    double *h = malloc(2 * nF * sizeof *h), *a = malloc(nF * sizeof *a), *yr = malloc(nD * sizeof *yr);
    const uint16_t *yg = outs[0].h[0];
    for (int q = 0; q < 8; ++q) {
      size_t t = (size_t)q * (nT / 8) + (size_t)q;
      if (t >= nT) t = nT - 1;
      for (size_t j = 0; j < nD; ++j) yr[j] = 0;
      for (size_t s = 0; s < nK; ++s) {
        size_t e = (size_t)idx[t * nK + s];
        for (size_t n = 0; n < 2 * nF; ++n) {
          double acc = 0;
          const float *wr = w13 + (e * 2 * nF + n) * nD;
          for (size_t k = 0; k < nD; ++k) acc += (double)wr[k] * fb_bf16_to_f32(xb[t * nD + k]);
          h[n] = acc;
        }
        for (size_t n = 0; n < nF; ++n) a[n] = silu(h[n]) * h[nF + n];
        for (size_t j = 0; j < nD; ++j) {
          double acc = 0;
          const float *wr = w2 + (e * nD + j) * nF;
          for (size_t n = 0; n < nF; ++n) acc += (double)wr[n] * a[n];
          yr[j] += tw[t * nK + s] * acc;
        }
      }
      for (size_t j = 0; j < nD; ++j) {
        double dv = fb_bf16_to_f32(yg[t * nD + j]) - yr[j];
        num += dv * dv, den += yr[j] * yr[j];
      }
    }
    double rel = sqrt(num / (den > 0 ? den : 1));
    printf("check y (8 tokens) vs the FP64 layer on unquantized operands: rel. Frobenius %.4f (<= 0.5: %s)\n", rel,
           rel <= 0.5 ? "ok" : "FAIL");
    bad |= !(rel <= 0.5);
    free(h), free(a), free(yr);
  }
  if (bad) { printf("bench_layer: FAILED a check: not timed\n"); return 1; }
  if (dump && nr > 1) { /* --global: each rank's slice in DIR/rankR */
    static char dr[4096];
    if (strlen(dump) > 4000) { fprintf(stderr, "bench_layer: --dump: path too long\n"); return 2; }
    snprintf(dr, sizeof dr, "%.4000s/rank%d", dump, rk);
    if (mkdir(dr, 0777) && errno != EEXIST) { fprintf(stderr, "bench_layer: --dump %s: %s\n", dr, strerror(errno)); return 2; }
    dump = dr;
  }
  if (dump) {
    struct { const char *name; const void *p; size_t n; } files[] = {
        {"x.bf16", xb, nT * nD * 2}, {"idx.i32", idx, nT * nK * 4}, {"topk_w.f32", tw, nT * nK * 4},
        {"w13.f32", w13, nEl * 2 * nF * nD * 4}, {"w2.f32", w2, nEl * nD * nF * 4}, {"dy.f32", dy, nT * nD * 4},
        {"y.bf16", outs[0].h[0], outs[0].n}, {"dx.f32", outs[1].h[0], outs[1].n}, {"dw13.f32", outs[2].h[0], outs[2].n},
        {"dw2.f32", outs[3].h[0], outs[3].n}, {"dtopk_w.f32", outs[4].h[0], outs[4].n}};
    for (size_t i = 0; i < sizeof files / sizeof *files; ++i) {
      char path[4200];
      snprintf(path, sizeof path, "%s/%s", dump, files[i].name);
      FILE *f = fopen(path, "wb");
      if (!f || fwrite(files[i].p, 1, files[i].n, f) != files[i].n || fclose(f)) {
        fprintf(stderr, "bench_layer: --dump %s: cannot write\n", path);
        return 2;
      }
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/meta.txt", dump);
    FILE *f = fopen(path, "w");
    if (!f || fprintf(f, "%s %d %d %d %d %d %d %u %u\n", recipe, layer, T, E, K, D, F, 1234u, 1u) < 0 || fclose(f)) {
      fprintf(stderr, "bench_layer: --dump %s: cannot write\n", path);
      return 2;
    }
    printf("dump: inputs and outputs of the first checked run in %s\n", dump);
  }

  /* ---- timing: iters x (forward + backward), events around each half ---- */
  CUevent ev[3];
  for (int i = 0; i < 3; ++i) CU(fb_cu.EventCreate(&ev[i], 0));
  double *tf = malloc(iters * sizeof *tf), *tb = malloc(iters * sizeof *tb), *tt = malloc(iters * sizeof *tt);
  for (int it = 0; it < iters; ++it) {
    L.step = 2 + (uint32_t)it;
    CU(fb_cu.EventRecord(ev[0], 0));
    CK(fb_gpu_experts_forward_dev(g, &L, &io));
    CU(fb_cu.EventRecord(ev[1], 0));
    CK(fb_gpu_experts_backward_dev(g, &L, &io));
    CU(fb_cu.EventRecord(ev[2], 0));
    CU(fb_cu.EventSynchronize(ev[2]));
    float a, b;
    CU(fb_cu.EventElapsedTime(&a, ev[0], ev[1]));
    CU(fb_cu.EventElapsedTime(&b, ev[1], ev[2]));
    tf[it] = a, tb[it] = b, tt[it] = a + b;
  }
  int cmpd(const void *x, const void *y);
  qsort(tf, iters, sizeof *tf, cmpd), qsort(tb, iters, sizeof *tb, cmpd), qsort(tt, iters, sizeof *tt, cmpd);
  double mf = tf[iters / 2], mb = tb[iters / 2], mt = tt[iters / 2];

  /* ---- one profiled step: per-launch times, summed by phase ---- */
  static fb_gpu_prof pr[256];
  int np = 0;
  fb_gpu_experts_profile_begin(g);
  CK(fb_gpu_experts_forward_dev(g, &L, &io));
  CK(fb_gpu_experts_backward_dev(g, &L, &io));
  CK(fb_gpu_experts_profile_end(g, pr, 256, &np));
  const char *phases[] = {"fwd dispatch", "fwd weights", "fwd w13", "fwd w2", "fwd combine", "bwd combine", "bwd w2 dgrad",
                          "bwd w2 wgrad", "bwd w13 dgrad", "bwd w13 wgrad", "bwd dx"};
  double ksum = 0, wq = 0, wa = 0, gemm_ms = 0;
  printf("\nper-kernel times of one profiled step (ms; a GEMM's FLOPs / its time):\n");
  for (int i = 0; i < np; ++i) {
    ksum += pr[i].ms;
    if (!strcmp(pr[i].phase, "fwd weights") && strncmp(pr[i].name, "bcopy", 5)) wq += pr[i].ms;
    if (!strcmp(pr[i].phase, "fwd weights") && !strncmp(pr[i].name, "amax", 4)) wa += pr[i].ms;
    if (!strncmp(pr[i].name, "gemm_", 5)) gemm_ms += pr[i].ms;
    printf("  %-14s %-64s %8.3f\n", pr[i].phase, pr[i].name, pr[i].ms);
  }
  printf("\nby phase:\n");
  for (size_t p = 0; p < sizeof phases / sizeof *phases; ++p) {
    double s = 0;
    int n = 0;
    for (int i = 0; i < np; ++i)
      if (!strcmp(pr[i].phase, phases[p])) s += pr[i].ms, ++n;
    printf("  %-14s %3d launches %8.3f ms %5.1f%%\n", phases[p], n, s, 100 * s / ksum);
  }
  double rows = (double)nT * nK, flop = 2.0 * rows * (2.0 * nF * nD + nD * nF) * 3.0; /* fwd, dgrad, wgrad of w13 and w2 */
  size_t live, peak, held;
  fb_gpu_experts_memory(g, &live, &peak, &held);
  printf("\nlayer fwd+bwd: median of %d: forward %.3f ms, backward %.3f ms, total %.3f ms (min %.3f, max %.3f)\n", iters, mf, mb, mt,
         tt[0], tt[iters - 1]);
  printf("kernels of the profiled step: %.3f ms (%d launches; GEMMs %.3f ms = %.0f TFLOP/s on their %.2f TFLOP); the rest of "
         "the median step (memsets, copies, gaps) %.3f ms\n", ksum, np, gemm_ms, flop / (gemm_ms * 1e-3) / 1e12, flop / 1e12, mt - ksum);
  printf("forward weight quantization (FP32 masters -> %s): %.3f ms, of which amax passes %.3f ms (in a train step AdamW's NVFP4 "
         "form leaves the amax: --train-amax times the layer so); total without it %.3f ms\n",
         fb_format_name(prec->fwd_weight.format), wq, wa, mt - wq);
  if (train_amax) printf("weights' amax given: %lld weight quantizations took them\n", fb_gpu_experts_stats_get(g).amax_reused);
  printf("layer TFLOP/s (GEMM FLOPs / total): %.0f\n", flop / (mt * 1e-3) / 1e12);
  printf("device memory: the layer's pool peak %.3f GiB (held %.3f GiB) + inputs, masters and gradients %.3f GiB = %.3f GiB\n",
         peak / 1073741824.0, held / 1073741824.0, held_io / 1073741824.0, (peak + held_io) / 1073741824.0);
  printf("the pool's peak was reached in: %s\n", fb_gpu_experts_peak_phase(g));
  printf("RESULT layer=%d routing=%s ms=%.3f fwd=%.3f bwd=%.3f wq=%.3f peak_gib=%.3f pool_gib=%.3f\n", layer, routing, mt, mf, mb, wq,
         (peak + held_io) / 1073741824.0, held / 1073741824.0);
  if (nr > 1) { /* the step is as slow as its slowest rank */
    double *all = malloc((size_t)nr * sizeof *all);
    CK(fb_comm_allgather(comm, &mt, sizeof mt, all));
    double mx = 0;
    for (int q = 0; q < nr; ++q) mx = all[q] > mx ? all[q] : mx;
    printf("ranks: %d; layer fwd+bwd of each (median ms):", nr);
    for (int q = 0; q < nr; ++q) printf(" %.3f", all[q]);
    printf("; the step: %.3f ms\nRESULT_EP ranks=%d ms=%.3f\n", mx, nr, mx);
    free(all);
  }
  { /* the dispatch's exchange against a plain NCCL all-to-all of the same rows in BF16 (every rank sends) */
    size_t *rows = calloc((size_t)nr, sizeof *rows), *allrows = calloc((size_t)nr * nr, sizeof *allrows);
    for (size_t i = 0; i < nT * nK; ++i) rows[idx[i] / Eloc]++;
    CK(fb_comm_allgather(comm, rows, (size_t)nr * sizeof *rows, allrows));
    size_t *sc = calloc((size_t)nr, sizeof *sc), *sd = calloc((size_t)nr, sizeof *sd), *rc = calloc((size_t)nr, sizeof *rc),
           *rd = calloc((size_t)nr, sizeof *rd), st_ = 0, rt_ = 0;
    for (int q = 0; q < nr; ++q) {
      sc[q] = rows[q] * nD * 2, sd[q] = st_, st_ += sc[q];
      rc[q] = allrows[(size_t)q * nr + rk] * nD * 2, rd[q] = rt_, rt_ += rc[q];
    }
    CUdeviceptr sb, rb;
    CU(fb_cu.MemAlloc(&sb, st_ ? st_ : 16));
    CU(fb_cu.MemAlloc(&rb, rt_ ? rt_ : 16));
    CU(fb_cu.MemsetD8(sb, 0, st_ ? st_ : 16));
    double *ta = malloc(iters * sizeof *ta);
    for (int it = -2; it < iters; ++it) {
      CK(fb_comm_barrier(comm));
      CU(fb_cu.EventRecord(ev[0], 0));
      CK(fb_comm_dev_alltoallv(comm, (void *)(uintptr_t)sb, sc, sd, (void *)(uintptr_t)rb, rc, rd, NULL));
      CU(fb_cu.EventRecord(ev[1], 0));
      CU(fb_cu.EventSynchronize(ev[1]));
      float a;
      CU(fb_cu.EventElapsedTime(&a, ev[0], ev[1]));
      if (it >= 0) ta[it] = a;
    }
    qsort(ta, iters, sizeof *ta, cmpd);
    double ours = 0;
    for (int i = 0; i < np; ++i)
      if (!strcmp(pr[i].phase, "fwd dispatch") && !strncmp(pr[i].name, "exchange", 8)) ours += pr[i].ms;
    size_t b3[3] = {0, 0, 0};
    int nvt = prec->fwd_act.format == FB_FMT_NVFP4;
    CK(fb_payload_planes(prec->fwd_act.format, nvt, nD, b3));
    printf("EXCHANGE dispatch: ours %.3f ms for %zu rows x %zu B (%s payload: %.4f of BF16); a plain NCCL all-to-all of the "
           "same rows in BF16 (%zu B a row): %.3f ms (median of %d); ratio %.2f%s\n", ours, nT * nK, b3[0] + b3[1] + b3[2],
           fb_format_name(prec->fwd_act.format), (double)(b3[0] + b3[1] + b3[2]) / (2.0 * nD), 2 * nD, ta[iters / 2], iters,
           ta[iters / 2] > 0 ? ours / ta[iters / 2] : 0.0,
           nr == 1 && !fb_gpu_experts_exchange(g) ? " (one rank, direct path: nothing exchanged; FOURBIT_GPU_EXCHANGE=1 times the exchange path)" : "");
    fb_cu.MemFree(sb), fb_cu.MemFree(rb);
    free(rows), free(allrows), free(sc), free(sd), free(rc), free(rd), free(ta);
  }
  if (peer) { /* "PEER routing=NAME ms=MS peak_gib=G peer=P" lines from bench_layer_peer.py: every peer of this routing */
    FILE *f = fopen(peer, "r");
    char ln[256];
    int found = 0;
    while (f && fgets(ln, sizeof ln, f)) {
      double pm = 0, pg = 0;
      char rt[64] = "", who[64] = "bf16";
      if (sscanf(ln, "PEER routing=%63s ms=%lf peak_gib=%lf", rt, &pm, &pg) != 3 || strcmp(rt, routing) || pm <= 0) continue;
      const char *w = strstr(ln, " peer=");
      if (w) sscanf(w + 6, "%63s", who);
      /* issue 21's targets: at most 0.7x the eager BF16 layer, 0.6x torchao's FP8-rowwise layer */
      const double target = !strncmp(who, "torchao", 7) ? 0.6 : 0.7;
      printf("PEER %s PyTorch layer (%s): %.3f ms, peak %.2f GiB; ours / peer = %.3f (target <= %.1f), without the weights' "
             "quantization %.3f\n", who, routing, pm, pg, mt / pm, target, (mt - wq) / pm);
      ++found;
    }
    if (f) fclose(f);
    if (!found) printf("PEER: no figure for %s in %s\n", routing, peer);
  }
  fb_gpu_experts_free(g);
  fb_comm_free(comm);
  return 0;
}

int cmpd(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}
