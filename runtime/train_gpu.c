/* train_gpu.c — the GPU-resident train step (train_gpu.h): model.c's forward and backward and train.c's gradient norm
 * and AdamW, on device tensors, in model.c's order and with its roundings (docs/design.md "Runtime"):
 *
 *   forward   embedding gather; per layer: RMSNorm (FP32 out: the convolution's input), causal convolution +
 *             residual, RMSNorm (BF16 out: the router GEMM's and the experts' input), router logits (cuBLAS, BF16 x
 *             BF16 -> FP32), the plan's router kernel (softmax, top-k, weights), the aux statistics (expert counts
 *             and probability sums over the global batch, in token order), the expert layer on device tensors,
 *             residual; final RMSNorm (BF16), LM head (cuBLAS), cross-entropy (log-sum-exp in double per token),
 *             which also writes the logits' gradient (BF16).
 *   backward  LM head's weight and input gradients (cuBLAS); RMSNorm backward (input: a block per row; gain: chunks of
 *             64 tokens summed in token order, then the chunks in order); per layer the expert backward, the router
 *             backward (a thread per token), its two GEMMs, RMSNorm 2, the convolution (weights: chunked like the
 *             gains; input: a gather), RMSNorm 1; the embedding's gradient from a CSR of positions per token id built
 *             on the host (it has the batch): a thread per (id, column) sums its positions in order. No float atomics
 *             anywhere, so two runs are bit-identical.
 *   optimizer the squared norm of every gradient (a fixed tree per chunk, the chunks summed in order into a device
 *             double); one host synchronization reads it with the loss statistics; clipping and the skip of a
 *             non-finite step as train.c; AdamW (templates/adamw.cuh) on every tensor, the non-expert ones writing
 *             their BF16 copy in the same pass (the expert layer reads its FP32 masters and quantizes them itself).
 *
 * Expert parallelism (N ranks): the router outputs are copied to the host and allgathered over the host mesh (the aux
 * loss is over the global batch), the per-token cross-entropies too; the replicated parameters' gradients are summed
 * over the ranks with one fb_comm_dev_allreduce_f32 (NCCL on GPUs) over the contiguous block that holds them all.
 *
 * Under the fake driver (tests/gpu/mock_libcuda.c + mock_libcublas.c) every kernel and GEMM is carried out by the CPU
 * path's own functions (runtime/model_dense.c, fbr_gemm_*'s order), so this file's steps equal model.c's bit for bit
 * there: the test of the host side (tests/gpu/test_train_dev.c). */
#include "train_gpu.h"

#include "comm.h"
#include "fb_cublas.h"
#include "fb_cuda.h"
#include "fb_dense.h"
#include "fb_error.h"
#include "fb_kparams.h"
#include "model_dense.h"
#include "model_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DTHREADS FB_DENSE_THREADS
enum { K_EMBED, K_RMS_FWD, K_RMS_BWD_X, K_RMS_BWD_G, K_CONV_FWD, K_CONV_BWD_K, K_CONV_BWD_X, K_RESID, K_CE, K_ROUTER_BWD,
       K_AUX, K_SUMSQ_PART, K_SUMSQ_FIN, K_EMBED_BWD, K_COLSUM, K_NDENSE };
static const char *const PIECE[K_NDENSE] = {"_embed", "_rms_fwd", "_rms_bwd_x", "_rms_bwd_g", "_conv_fwd", "_conv_bwd_k",
                                            "_conv_bwd_x", "_resid", "_ce", "_router_bwd", "_aux", "_sumsq_part",
                                            "_sumsq_fin", "_embed_bwd", "_colsum"};
#define NPARTS_MAX 1024
#define CHUNK 64 /* dense.cuh's FB_CHUNK: tokens per partial column sum */

typedef CUdeviceptr dptr;
#define XMAX 4 /* distinct expert AdamW specs (NVFP4 forward weights) a recipe's layers may have */

typedef struct {
  dptr x_in, n1, r1, xm, n2b, r2, probs, tw, idx, cnt, pe;
} glayer;

typedef struct {
  dptr w, g, m, v, wb; /* wb: the BF16 copy (non-expert), or the AdamW pass's throwaway output (expert) */
} gparam;

struct fbr_gpu {
  fb_train_gpu_opts o;
  fb_gpu_experts *ex;
  fb_blas *blas;
  CUmodule dmod;
  fb_kernel dk[K_NDENSE];
  fb_kernel_spec rspec, aspec; /* the router, AdamW (BF16 copy) */
  fb_variant rvar, avar;
  fb_kernel rk, ak;
  fb_train_gpu_stats st;
  dptr *mem;                   /* every allocation, freed at the end */
  int nmem, capmem;
  gparam *p;
  dptr gblock;                 /* the replicated parameters' gradients, one block (their allreduce) */
  size_t gblock_n;
  dptr scratch_bf;             /* the expert tensors' AdamW BF16 output */
  glayer *L;
  dptr xf, rf, hfb, logits, dlb, ce, dx, dn, yb, dtw, dp, dlrb, inp, tgt, csr_off, csr_pos, gprobs, gidx, part, acc;
  dptr lg;                     /* router logits, T x E */
  dptr colpart;                /* the column sums' partials: ceil(T / CHUNK) x D x width FP32 */
  int nchunk;
  int32_t *h_off, *h_pos, *h_cnt; /* host: the CSR, the counts (L x E) */
  double *h_pe;                /* host: L x E */
  float *h_probs;              /* host: T x E (EP gathers) */
  int32_t *h_idx;
  int host_stale;              /* the device has newer w, g, m, v than the trainer's host arrays */
  /* the expert weights' AdamW where a layer's forward weights are NVFP4 (xadamw_specs): no BF16 copy, and the new
     masters' amax per outer-scale group, which the layer's next forward takes instead of its own amax pass */
  fb_kernel_spec xspec[XMAX];
  fb_variant xvar[XMAX];
  fb_kernel xk[XMAX];
  int nx;
  int *xl;                     /* per layer: its xspec, -1 (the BF16-copy AdamW; the layer finds any amax itself) */
  dptr *amax;                  /* per layer: w13's amax, then w2's (FP32, one per local expert, or one per tensor) */
  int *amax_ok;                /* per layer: they are the amax of the masters as they are now */
};

/* ---- kernels: generated, from the cache by content key, else NVRTC (and then into the cache) ----------------- */
static fb_status cubin_of(const fb_kernel_spec *k, const fb_variant *v, const char *origin, const char *sha,
                          const char *arch, fb_cache *cache, fb_train_gpu_stats *st, FILE *log, int verbose, void **cubin,
                          size_t *size) {
  char *src = NULL;
  FB_TRY(fb_gen_source(k, v, origin, sha, &src));
  uint8_t key[32];
  fb_cache_kernel_key(src, arch, key);
  if (cache && fb_cache_get_kernel(cache, key, cubin, size) == FB_OK) {
    free(src);
    st->from_cache++, st->kernels++;
    if (log && verbose) fprintf(log, "  kernel %-64s cache (content key)\n", v->name);
    return FB_OK;
  }
  fb_cubin cb;
  fb_status s = fb_nvrtc_compile(v->name, src, arch, &cb);
  if (s == FB_OK && cache) s = fb_cache_put_kernel(cache, key, src, cb.cubin, cb.size);
  free(src);
  if (s != FB_OK) { fb_cubin_free(&cb); return s; }
  st->compiled++, st->kernels++, st->compile_ms += cb.ms;
  if (log && verbose) fprintf(log, "  kernel %-64s compiled (NVRTC)\n", v->name);
  *cubin = cb.cubin, *size = cb.size;
  cb.cubin = NULL;
  fb_cubin_free(&cb);
  return FB_OK;
}

/* *v: the first legal variant of k in the recipe's family for it (what runs untuned) */
static fb_status first_variant(const fb_recipe *r, const fb_kernel_spec *k, fb_variant *v) {
  const fb_tune_family *fam = NULL;
  for (int f = 0; f < r->nfamilies; ++f)
    if (!strcmp(r->families[f].family, k->family)) fam = &r->families[f];
  if (!fam && !fb_gen_fixed(k)) return FB_ERR(FB_EINVAL, "train gpu: %s: the recipe has no tune family '%s'", k->name, k->family);
  fb_variant *vv = NULL;
  int nv = 0;
  FB_TRY(fb_gen_variants(k, fam, &vv, &nv, NULL, NULL, 0));
  if (!nv) { free(vv); return FB_ERR(FB_EINVAL, "train gpu: %s: no legal variant in family '%s'", k->name, k->family); }
  *v = vv[0];
  free(vv);
  return FB_OK;
}

/* The specs and variants of the step's own kernels for a plan of arch (gen/specs.c fb_gpu_step_kernels, which the plan
 * lists): dense.cuh (one program, its one variant), the router, AdamW with a BF16 copy (the recipe's first legal
 * variant of each family: what runs untuned; load_kernels asks the caller's lookup for the tuned winners). */
static fb_status specs(const fb_recipe *r, const fb_plan *pl, fb_kernel_spec ks[3], fb_variant vs[3]) {
  memset(ks, 0, 3 * sizeof *ks), memset(vs, 0, 3 * sizeof *vs);
  fb_kernel_spec sk[3];
  int n = 0;
  FB_TRY(fb_gpu_step_kernels(&r->model, sk, 3, &n));
  for (int j = 0; j < 3; ++j) {
    FB_TRY(fb_kernel_spec_name(&sk[j], pl->arch));
    int found = 0;
    for (int i = 0; i < pl->nkernels && !found; ++i)
      if (!strcmp(pl->kernels[i].name, sk[j].name)) ks[j] = pl->kernels[i], found = 1;
    if (!found) return FB_ERR(FB_EINVAL, "train gpu: the plan has no kernel %s", sk[j].name);
    FB_TRY(first_variant(r, &ks[j], &vs[j]));
  }
  return FB_OK;
}

/* The expert weights' AdamW of the layers whose forward weights are NVFP4 with a per-expert or per-tensor outer scale:
 * the plan's AdamW for those weights (templates/adamw.cuh FB_WFMT 1: no BF16 copy; the new masters' amax per outer-scale
 * group, which is what the layer's amax pass would find), each distinct spec once with the recipe's first legal variant.
 * lay[l]: layer l's index in ks, or -1 where the BF16-copy AdamW serves (BF16 or MXFP8 forward weights: the layer
 * quantizes the masters with no amax). */
static fb_status xadamw_specs(const fb_recipe *r, const fb_plan *pl, fb_kernel_spec ks[XMAX], fb_variant vs[XMAX], int *nx,
                              int *lay) {
  *nx = 0;
  for (int l = 0; l < pl->nlayers; ++l) {
    lay[l] = -1;
    const fb_qspec *w = &pl->layers[l].fwd_weight;
    if (w->format != FB_FMT_NVFP4 || (w->outer != FB_GRAN_EXPERT && w->outer != FB_GRAN_TENSOR)) continue;
    fb_kernel_spec k = fb_spec_adamw(w, NULL);
    FB_TRY(fb_kernel_spec_name(&k, pl->arch));
    int j = 0;
    while (j < *nx && strcmp(ks[j].name, k.name)) ++j;
    if (j == *nx) {
      if (j == XMAX) return FB_ERR(FB_EINVAL, "train gpu: more than %d AdamW forms of NVFP4 expert weights", XMAX);
      int found = 0;
      for (int i = 0; i < pl->nkernels && !found; ++i)
        if (!strcmp(pl->kernels[i].name, k.name)) ks[j] = pl->kernels[i], found = 1;
      if (!found) return FB_ERR(FB_EINVAL, "train gpu: the plan has no kernel %s", k.name);
      FB_TRY(first_variant(r, &ks[j], &vs[j]));
      ++*nx;
    }
    lay[l] = j;
  }
  return FB_OK;
}

fb_status fb_train_gpu_compile(const fb_recipe *r, const char *arch, fb_cache *cache, fb_train_gpu_stats *st) {
  memset(st, 0, sizeof *st);
  fb_plan *pl = NULL;
  FB_TRY(fb_plan_resolve(r, arch, &pl));
  fb_kernel_spec ks[3 + XMAX];
  fb_variant vs[3 + XMAX];
  int nx = 0, *lay = calloc((size_t)pl->nlayers + 1, sizeof *lay);
  fb_status s = lay ? specs(r, pl, ks, vs) : FB_ERR(FB_ENOMEM, "train gpu: compile");
  if (s == FB_OK) s = xadamw_specs(r, pl, ks + 3, vs + 3, &nx, lay);
  for (int j = 0; j < 3 + nx && s == FB_OK; ++j) {
    void *cb = NULL;
    size_t n = 0;
    s = cubin_of(&ks[j], &vs[j], j ? r->path : "-", j ? pl->sha256 : "-", arch, cache, st, NULL, 0, &cb, &n);
    free(cb);
  }
  free(lay);
  fb_plan_free(pl);
  return s;
}

/* Kernel k: the caller's lookup (a tuned winner, or the cached default) if it has one of k's variants, else *v (the
 * default) from the cache by content key or NVRTC; *v becomes the variant loaded. */
static fb_status tuned_cubin(fb_trainer *t, struct fbr_gpu *g, const fb_kernel_spec *k, fb_variant *v, void **cubin, size_t *size) {
  const fb_recipe *r = g->o.recipe;
  void *cb = NULL;
  size_t n = 0;
  if (g->o.lookup) {
    char vn[192] = "", note[1200] = "";
    if (g->o.lookup(g->o.lookup_user, k, t->T, vn, sizeof vn, &cb, &n, NULL, note, sizeof note) == FB_OK) {
      const fb_tune_family *fam = NULL;
      for (int f = 0; f < r->nfamilies; ++f)
        if (!strcmp(r->families[f].family, k->family)) fam = &r->families[f];
      fb_variant *vv = NULL;
      int nv = 0, hit = 0;
      if ((fam || fb_gen_fixed(k)) && fb_gen_variants(k, fam, &vv, &nv, NULL, NULL, 0) == FB_OK)
        for (int j = 0; j < nv && !hit; ++j)
          if (!strcmp(vv[j].name, vn)) *v = vv[j], hit = 1;
      free(vv);
      if (!hit) free(cb), cb = NULL;
      else {
        g->st.from_cache++, g->st.kernels++;
        if (g->o.log && g->o.verbose) fprintf(g->o.log, "  kernel %-64s cache: %s\n", vn, note);
      }
    }
  }
  if (!cb)
    FB_TRY(cubin_of(k, v, r->path, t->plan->sha256, t->plan->arch, g->o.cache, &g->st, g->o.log, g->o.verbose, &cb, &n));
  *cubin = cb, *size = n;
  return FB_OK;
}

static fb_status load_tuned(fb_trainer *t, struct fbr_gpu *g, const fb_kernel_spec *k, fb_variant *v, fb_kernel *out) {
  void *cb = NULL;
  size_t n = 0;
  FB_TRY(tuned_cubin(t, g, k, v, &cb, &n));
  fb_status s = fb_kernel_load(cb, v->name, out);
  free(cb);
  return s;
}

static fb_status load_kernels(fb_trainer *t, struct fbr_gpu *g) {
  fb_kernel_spec ks[3];
  fb_variant vs[3];
  const fb_recipe *r = g->o.recipe;
  FB_TRY(specs(r, t->plan, ks, vs));
  g->rspec = ks[1], g->rvar = vs[1], g->aspec = ks[2], g->avar = vs[2];
  void *cb = NULL;
  size_t n = 0;
  /* dense.cuh: one module, a function per piece (its one variant: the lookup's answer is the cached default) */
  FB_TRY(tuned_cubin(t, g, &ks[0], &vs[0], &cb, &n));
  CUresult cr = fb_cu.ModuleLoadData(&g->dmod, cb);
  free(cb), cb = NULL;
  if (cr) return FB_ERR(FB_ECUDA, "train gpu: cuModuleLoadData(%s): %s", vs[0].name, fb_cu_errstr((int)cr));
  for (int i = 0; i < K_NDENSE; ++i) {
    char fn[256];
    snprintf(fn, sizeof fn, "%s%s", vs[0].name, PIECE[i]);
    g->dk[i].mod = NULL;
    cr = fb_cu.ModuleGetFunction(&g->dk[i].fn, g->dmod, fn);
    if (cr) return FB_ERR(FB_ECUDA, "train gpu: cuModuleGetFunction(%s): %s", fn, fb_cu_errstr((int)cr));
  }
  /* the router and AdamW: a tuned winner (or the cached default) through the caller's lookup first */
  FB_TRY(load_tuned(t, g, &ks[1], &g->rvar, &g->rk));
  FB_TRY(load_tuned(t, g, &ks[2], &g->avar, &g->ak));
  /* the expert weights' AdamW forms of NVFP4 layers */
  g->xl = malloc(((size_t)t->plan->nlayers + 1) * sizeof *g->xl);
  if (!g->xl) return FB_ERR(FB_ENOMEM, "train gpu: AdamW forms");
  FB_TRY(xadamw_specs(r, t->plan, g->xspec, g->xvar, &g->nx, g->xl));
  for (int j = 0; j < g->nx; ++j) FB_TRY(load_tuned(t, g, &g->xspec[j], &g->xvar[j], &g->xk[j]));
  return FB_OK;
}

/* ---- device memory ----------------------------------------------------------------------------------------- */
static fb_status dalloc(struct fbr_gpu *g, dptr *out, size_t n) {
  *out = 0;
  if (g->nmem == g->capmem) {
    int nc = g->capmem ? 2 * g->capmem : 256;
    dptr *m = realloc(g->mem, (size_t)nc * sizeof *m);
    if (!m) return FB_ERR(FB_ENOMEM, "train gpu: allocation table");
    g->mem = m, g->capmem = nc;
  }
  CUresult r = fb_cu.MemAlloc(out, n ? n : 16);
  if (r) return FB_ERR(FB_ECUDA, "train gpu: cuMemAlloc(%zu): %s", n, fb_cu_errstr((int)r));
  g->mem[g->nmem++] = *out;
  return FB_OK;
}

static fb_status launch(const fb_kernel *k, long long work, const fb_kp_dense *p) {
  long long b = (work + DTHREADS - 1) / DTHREADS;
  unsigned grid = (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
  return fb_kernel_launch(k, grid, 1, DTHREADS, p, sizeof *p);
}
/* a block per row */
static fb_status launch_rows(const fb_kernel *k, long long rows, const fb_kp_dense *p) {
  unsigned grid = (unsigned)(rows < 1 ? 1 : rows > 65535 ? 65535 : rows);
  return fb_kernel_launch(k, grid, 1, DTHREADS, p, sizeof *p);
}

/* ---- host <-> device copies of the parameters ---------------------------------------------------------------- */
fb_status fbr_gpu_upload(fb_trainer *t) {
  struct fbr_gpu *g = t->gpu;
  uint16_t *hb = NULL;
  size_t cap = 0;
  for (int i = 0; i < t->np; ++i) {
    const fbr_param *p = &t->p[i];
    size_t n = p->rows * p->cols;
    CU_CHECK(fb_cu.MemcpyHtoD(g->p[i].w, p->w, n * 4));
    CU_CHECK(fb_cu.MemcpyHtoD(g->p[i].m, p->m, n * 4));
    CU_CHECK(fb_cu.MemcpyHtoD(g->p[i].v, p->v, n * 4));
    CU_CHECK(fb_cu.MemsetD8(g->p[i].g, 0, n * 4));
    if (p->expert) continue;
    if (n > cap) {
      uint16_t *nb = realloc(hb, n * sizeof *hb);
      if (!nb) { free(hb); return FB_ERR(FB_ENOMEM, "train gpu: upload"); }
      hb = nb, cap = n;
    }
    for (size_t k = 0; k < n; ++k) hb[k] = fb_bf16_from_f32(p->w[k]); /* what refresh_wb makes on the CPU path */
    fb_status s = fb_cu.MemcpyHtoD(g->p[i].wb, hb, n * 2) ? FB_ERR(FB_ECUDA, "train gpu: upload of %s", p->name) : FB_OK;
    if (s != FB_OK) { free(hb); return s; }
  }
  free(hb);
  g->host_stale = 0;
  for (int l = 0; l < t->M.layers; ++l) g->amax_ok[l] = 0; /* new masters: the layers find their amax themselves */
  return FB_OK;
}

fb_status fbr_gpu_sync_host(fb_trainer *t) {
  struct fbr_gpu *g = t->gpu;
  if (!g || !g->host_stale) return FB_OK;
  for (int i = 0; i < t->np; ++i) {
    fbr_param *p = &t->p[i];
    size_t n = p->rows * p->cols * 4;
    CU_CHECK(fb_cu.MemcpyDtoH(p->w, g->p[i].w, n));
    CU_CHECK(fb_cu.MemcpyDtoH(p->g, g->p[i].g, n));
    CU_CHECK(fb_cu.MemcpyDtoH(p->m, g->p[i].m, n));
    CU_CHECK(fb_cu.MemcpyDtoH(p->v, g->p[i].v, n));
  }
  g->host_stale = 0;
  return FB_OK;
}

void fbr_gpu_free(fb_trainer *t) {
  struct fbr_gpu *g = t->gpu;
  if (!g) return;
  for (int l = 0; l < t->M.layers; ++l)
    if (t->act && t->act[l].moe.saved) fb_gpu_experts_ops(g->ex)->release(fb_gpu_experts_ops(g->ex)->ctx, &t->act[l].moe);
  fb_blas_free(g->blas);
  if (g->dmod) fb_cu.ModuleUnload(g->dmod);
  fb_kernel_unload(&g->rk), fb_kernel_unload(&g->ak);
  for (int j = 0; j < g->nx; ++j) fb_kernel_unload(&g->xk[j]);
  for (int i = 0; i < g->nmem; ++i) fb_cu.MemFree(g->mem[i]);
  free(g->mem), free(g->p), free(g->L), free(g->h_off), free(g->h_pos), free(g->h_cnt), free(g->h_pe), free(g->h_probs);
  free(g->h_idx), free(g->xl), free(g->amax), free(g->amax_ok);
  free(g);
  t->gpu = NULL;
}

/* the layer of expert parameter i (P_W13 or P_W2 of a layer) */
static int xlayer(int i) { return (i - P_GLOBAL) / P_PER_LAYER; }
/* the outer-scale groups of layer l's NVFP4 forward weights: one per local expert, or one per tensor */
static size_t xgroups(const fb_trainer *t, int l) {
  const fbr_param *w13 = &t->p[P_GLOBAL + l * P_PER_LAYER + P_W13];
  return t->plan->layers[l].fwd_weight.outer == FB_GRAN_EXPERT ? w13->rows / (2 * (size_t)t->M.d_ff) : 1;
}

/* ---- attach ------------------------------------------------------------------------------------------------- */
fb_status fb_train_gpu_attach(fb_trainer *t, const fb_train_gpu_opts *o) {
  if (t->gpu) return FB_ERR(FB_EINVAL, "train gpu: already attached");
  if (t->o.exact) return FB_USERERR(FB_EINVAL, "--exact: the gradient-check model runs on the CPU path (--device cpu)");
  if (!o->experts || !o->recipe) return FB_ERR(FB_EINVAL, "train gpu: no expert layer or recipe");
  struct fbr_gpu *g = calloc(1, sizeof *g);
  if (!g) return FB_ERR(FB_ENOMEM, "train gpu");
  t->gpu = g;
  g->o = *o, g->ex = o->experts;
  const fb_model *M = &t->M;
  size_t L = (size_t)M->layers, D = (size_t)M->d_model, E = (size_t)M->experts, V = (size_t)M->vocab,
         T = (size_t)t->T, K = (size_t)M->top_k, Tg = (size_t)t->Tg, W = (size_t)M->conv_width;
  fb_status rc = FB_OK;
  FB_TRY_GOTO(load_kernels(t, g), fail);
  FB_TRY_GOTO(fb_blas_create(&g->blas), fail);
  g->p = calloc((size_t)t->np, sizeof *g->p), g->L = calloc(L, sizeof *g->L);
  g->h_off = malloc((V + 1) * sizeof *g->h_off), g->h_pos = malloc(T * sizeof *g->h_pos);
  g->h_cnt = malloc(L * E * sizeof *g->h_cnt), g->h_pe = malloc(L * E * sizeof *g->h_pe);
  g->h_probs = malloc(T * E * sizeof *g->h_probs), g->h_idx = malloc(T * K * sizeof *g->h_idx);
  if (!g->p || !g->L || !g->h_off || !g->h_pos || !g->h_cnt || !g->h_pe || !g->h_probs || !g->h_idx) {
    rc = FB_ERR(FB_ENOMEM, "train gpu: host state");
    goto fail;
  }
  /* parameters; the replicated ones' gradients in one block, each tensor at a 256-byte boundary (AdamW's vector loads) */
  size_t off = 0, maxex = 0;
  for (int i = 0; i < t->np; ++i) {
    const fbr_param *p = &t->p[i];
    size_t n = p->rows * p->cols;
    if (p->expert) { /* the BF16-copy AdamW's throwaway output: only where no NVFP4 form serves */
      if (g->xl[xlayer(i)] < 0) maxex = n > maxex ? n : maxex;
      continue;
    }
    off += (n + 63) / 64 * 64;
  }
  g->gblock_n = off;
  FB_TRY_GOTO(dalloc(g, &g->gblock, off * 4), fail);
  if (maxex) FB_TRY_GOTO(dalloc(g, &g->scratch_bf, maxex * 2), fail);
  off = 0;
  for (int i = 0; i < t->np; ++i) {
    const fbr_param *p = &t->p[i];
    size_t n = p->rows * p->cols;
    gparam *q = &g->p[i];
    FB_TRY_GOTO(dalloc(g, &q->w, n * 4), fail);
    FB_TRY_GOTO(dalloc(g, &q->m, n * 4), fail);
    FB_TRY_GOTO(dalloc(g, &q->v, n * 4), fail);
    if (p->expert) {
      FB_TRY_GOTO(dalloc(g, &q->g, n * 4), fail);
      q->wb = g->xl[xlayer(i)] < 0 ? g->scratch_bf : 0;
    } else {
      q->g = g->gblock + off * 4, off += (n + 63) / 64 * 64;
      FB_TRY_GOTO(dalloc(g, &q->wb, n * 2), fail);
    }
  }
  /* the NVFP4 layers' amax, w13's then w2's */
  g->amax = calloc(L, sizeof *g->amax), g->amax_ok = calloc(L, sizeof *g->amax_ok);
  if (!g->amax || !g->amax_ok) {
    rc = FB_ERR(FB_ENOMEM, "train gpu: host state");
    goto fail;
  }
  for (size_t l = 0; l < L; ++l)
    if (g->xl[l] >= 0) FB_TRY_GOTO(dalloc(g, &g->amax[l], 2 * xgroups(t, (int)l) * 4), fail);
  /* activations */
  for (size_t l = 0; l < L; ++l) {
    glayer *a = &g->L[l];
    FB_TRY_GOTO(dalloc(g, &a->x_in, T * D * 4), fail);
    FB_TRY_GOTO(dalloc(g, &a->n1, T * D * 4), fail);
    FB_TRY_GOTO(dalloc(g, &a->r1, T * 4), fail);
    FB_TRY_GOTO(dalloc(g, &a->xm, T * D * 4), fail);
    FB_TRY_GOTO(dalloc(g, &a->n2b, T * D * 2), fail);
    FB_TRY_GOTO(dalloc(g, &a->r2, T * 4), fail);
    FB_TRY_GOTO(dalloc(g, &a->probs, T * E * 4), fail);
    FB_TRY_GOTO(dalloc(g, &a->tw, T * K * 4), fail);
    FB_TRY_GOTO(dalloc(g, &a->idx, T * K * 4), fail);
    FB_TRY_GOTO(dalloc(g, &a->cnt, E * 4), fail);
    FB_TRY_GOTO(dalloc(g, &a->pe, E * 8), fail);
  }
  FB_TRY_GOTO(dalloc(g, &g->xf, T * D * 4), fail);
  FB_TRY_GOTO(dalloc(g, &g->rf, T * 4), fail);
  FB_TRY_GOTO(dalloc(g, &g->hfb, T * D * 2), fail);
  FB_TRY_GOTO(dalloc(g, &g->logits, T * V * 4), fail);
  FB_TRY_GOTO(dalloc(g, &g->dlb, T * V * 2), fail);
  FB_TRY_GOTO(dalloc(g, &g->ce, T * 8), fail);
  FB_TRY_GOTO(dalloc(g, &g->dx, T * D * 4), fail);
  FB_TRY_GOTO(dalloc(g, &g->dn, T * D * 4), fail);
  FB_TRY_GOTO(dalloc(g, &g->yb, T * D * 2), fail);
  FB_TRY_GOTO(dalloc(g, &g->dtw, T * K * 4), fail);
  FB_TRY_GOTO(dalloc(g, &g->dp, T * E * 4), fail);
  FB_TRY_GOTO(dalloc(g, &g->dlrb, T * E * 2), fail);
  FB_TRY_GOTO(dalloc(g, &g->lg, T * E * 4), fail);
  FB_TRY_GOTO(dalloc(g, &g->inp, T * 4), fail);
  FB_TRY_GOTO(dalloc(g, &g->tgt, T * 4), fail);
  FB_TRY_GOTO(dalloc(g, &g->csr_off, (V + 1) * 4), fail);
  FB_TRY_GOTO(dalloc(g, &g->csr_pos, T * 4), fail);
  if (t->nranks > 1) {
    FB_TRY_GOTO(dalloc(g, &g->gprobs, Tg * E * 4), fail);
    FB_TRY_GOTO(dalloc(g, &g->gidx, Tg * K * 4), fail);
  }
  FB_TRY_GOTO(dalloc(g, &g->part, NPARTS_MAX * 8), fail);
  g->nchunk = (int)((T + CHUNK - 1) / CHUNK);
  FB_TRY_GOTO(dalloc(g, &g->colpart, (size_t)g->nchunk * D * (W > 1 ? W : 1) * 4), fail);
  FB_TRY_GOTO(dalloc(g, &g->acc, 2 * 8), fail);
  FB_TRY_GOTO(fbr_gpu_upload(t), fail);
  return FB_OK;
fail:
  fbr_gpu_free(t);
  return rc;
}

fb_train_gpu_stats fb_train_gpu_stats_get(const fb_trainer *t) {
  fb_train_gpu_stats z;
  memset(&z, 0, sizeof z);
  return t->gpu ? t->gpu->st : z;
}

/* ---- the step --------------------------------------------------------------------------------------------- */
static fb_status rms_fwd(struct fbr_gpu *g, dptr x, dptr gain, size_t T, size_t D, dptr y, dptr yb, dptr r) {
  fb_kp_dense p = {0};
  p.x = x, p.w = gain, p.y = y, p.yb = yb, p.r = r, p.rows = (long long)T, p.cols = (long long)D;
  return launch_rows(&g->dk[K_RMS_FWD], (long long)T, &p);
}

/* dx (= or += with acc) the input gradient, dg = the gain's gradient, from dy */
static fb_status rms_bwd(struct fbr_gpu *g, dptr x, dptr gain, dptr r, dptr dy, size_t T, size_t D, dptr dx, dptr dg,
                         int acc) {
  fb_kp_dense p = {0};
  p.x = x, p.w = gain, p.r = r, p.dy = dy, p.dx = dx, p.dg = dg, p.rows = (long long)T, p.cols = (long long)D;
  p.accum = acc, p.part = g->colpart, p.nparts = g->nchunk;
  FB_TRY(launch_rows(&g->dk[K_RMS_BWD_X], (long long)T, &p));
  FB_TRY(launch(&g->dk[K_RMS_BWD_G], (long long)g->nchunk * (long long)D, &p));
  return launch(&g->dk[K_COLSUM], (long long)D, &p);
}

static void release_all(fb_trainer *t) {
  const fb_expert_ops *ops = fb_gpu_experts_ops(t->gpu->ex);
  for (int l = 0; l < t->M.layers; ++l)
    if (t->act[l].moe.saved) ops->release(ops->ctx, &t->act[l].moe);
}

static fb_status run(fb_trainer *t, uint32_t step, int grad, double *ce_out, double *aux_out) {
  struct fbr_gpu *g = t->gpu;
  const fb_model *M = &t->M;
  size_t L = (size_t)M->layers, D = (size_t)M->d_model, E = (size_t)M->experts, V = (size_t)M->vocab,
         W = (size_t)M->conv_width, T = (size_t)t->T, K = (size_t)M->top_k, S = (size_t)t->o.seq_len, Tg = (size_t)t->Tg;
  gparam *P = g->p;
  fbr_model_batch(t, step);
  CU_CHECK(fb_cu.MemcpyHtoD(g->inp, t->inp, T * 4));
  CU_CHECK(fb_cu.MemcpyHtoD(g->tgt, t->tgt, T * 4));
  if (grad) { /* the embedding gradient's CSR: the positions of each token id, in increasing order */
    memset(g->h_off, 0, (V + 1) * sizeof *g->h_off);
    for (size_t i = 0; i < T; ++i) g->h_off[t->inp[i] + 1]++;
    for (size_t v = 0; v < V; ++v) g->h_off[v + 1] += g->h_off[v];
    for (size_t i = 0; i < T; ++i) g->h_pos[g->h_off[t->inp[i]]++] = (int32_t)i;
    for (size_t v = V; v > 0; --v) g->h_off[v] = g->h_off[v - 1];
    g->h_off[0] = 0;
    CU_CHECK(fb_cu.MemcpyHtoD(g->csr_off, g->h_off, (V + 1) * 4));
    CU_CHECK(fb_cu.MemcpyHtoD(g->csr_pos, g->h_pos, T * 4));
  }

  /* ---- forward ---- */
  fb_kp_dense p = {0};
  p.idx = g->inp, p.w = P[P_EMB].wb, p.y = g->L[0].x_in, p.rows = (long long)T, p.cols = (long long)D;
  FB_TRY(launch(&g->dk[K_EMBED], (long long)(T * D), &p));
  for (size_t l = 0; l < L; ++l) {
    glayer *a = &g->L[l];
    gparam *lp = P + P_GLOBAL + l * P_PER_LAYER;
    FB_TRY(rms_fwd(g, a->x_in, lp[P_N1].wb, T, D, a->n1, 0, a->r1));
    memset(&p, 0, sizeof p);
    p.x = a->x_in, p.a = a->n1, p.w = lp[P_CONV].wb, p.y = a->xm, p.rows = (long long)T, p.cols = (long long)D;
    p.width = (int)W, p.seq = (int)S;
    FB_TRY(launch(&g->dk[K_CONV_FWD], (long long)(T * D), &p));
    FB_TRY(rms_fwd(g, a->xm, lp[P_N2].wb, T, D, 0, a->n2b, a->r2));
    FB_TRY(fb_blas_gemm(g->blas, 0, 1, (int)T, (int)E, (int)D, a->n2b, (int)D, lp[P_ROUTER].wb, (int)D, g->lg, (int)E, 0));
    {
      fb_kp_moe pm;
      memset(&pm, 0, sizeof pm);
      pm.in = g->lg, pm.probs = a->probs, pm.topk_idx = a->idx, pm.topk_w = a->tw;
      pm.rows = (long long)T, pm.experts = (int)E, pm.top_k = (int)K;
      unsigned gx, gy, th;
      FB_TRY(fb_launch_dims(&g->rspec, &g->rvar, (long long)T, (long long)E, 0, &gx, &gy, &th));
      FB_TRY(fb_kernel_launch(&g->rk, gx, gy, th, &pm, sizeof pm));
    }
    dptr gp = a->probs, gi = a->idx;
    if (t->nranks > 1) { /* the global batch's router outputs, in token order, over the host mesh */
      CU_CHECK(fb_cu.MemcpyDtoH(g->h_probs, a->probs, T * E * 4));
      CU_CHECK(fb_cu.MemcpyDtoH(g->h_idx, a->idx, T * K * 4));
      FB_TRY(fb_comm_allgather(t->comm, g->h_probs, T * E * 4, t->gprobs));
      FB_TRY(fb_comm_allgather(t->comm, g->h_idx, T * K * 4, t->gidx));
      CU_CHECK(fb_cu.MemcpyHtoD(g->gprobs, t->gprobs, Tg * E * 4));
      CU_CHECK(fb_cu.MemcpyHtoD(g->gidx, t->gidx, Tg * K * 4));
      gp = g->gprobs, gi = g->gidx;
    }
    memset(&p, 0, sizeof p);
    p.probs = gp, p.idx = gi, p.cnt = a->cnt, p.dbl = a->pe, p.tg = (long long)Tg, p.experts = (int)E, p.top_k = (int)K;
    FB_TRY(launch_rows(&g->dk[K_AUX], (long long)E, &p));
    fb_moe_layer *ml = &t->act[l].moe;
    ml->step = step;
    fb_gpu_layer_io io;
    memset(&io, 0, sizeof io);
    io.x = a->n2b, io.topk_idx = a->idx, io.topk_w = a->tw, io.w13 = lp[P_W13].w, io.w2 = lp[P_W2].w, io.y = g->yb;
    if (g->amax_ok[l]) io.w13_amax = g->amax[l], io.w2_amax = g->amax[l] + xgroups(t, (int)l) * 4; /* AdamW's */
    fb_status s = fb_gpu_experts_forward_dev(g->ex, ml, &io);
    if (s != FB_OK) { release_all(t); return s; }
    memset(&p, 0, sizeof p);
    p.x = a->xm, p.yb = g->yb, p.y = l + 1 < L ? g->L[l + 1].x_in : g->xf, p.rows = (long long)T, p.cols = (long long)D;
    FB_TRY(launch(&g->dk[K_RESID], (long long)(T * D), &p));
  }
  FB_TRY(rms_fwd(g, g->xf, P[P_NF].wb, T, D, 0, g->hfb, g->rf));
  FB_TRY(fb_blas_gemm(g->blas, 0, 1, (int)T, (int)V, (int)D, g->hfb, (int)D, P[P_HEAD].wb, (int)D, g->logits, (int)V, 0));
  memset(&p, 0, sizeof p);
  p.x = g->logits, p.idx = g->tgt, p.dbl = g->ce, p.yb = g->dlb, p.grad = grad, p.tg = (long long)Tg;
  p.rows = (long long)T, p.cols = (long long)V;
  FB_TRY(launch_rows(&g->dk[K_CE], (long long)T, &p));

  /* ---- backward ---- */
  fb_status rc = FB_OK;
  if (grad) {
    FB_TRY_GOTO(fb_blas_gemm(g->blas, 1, 0, (int)V, (int)D, (int)T, g->dlb, (int)V, g->hfb, (int)D, P[P_HEAD].g, (int)D, 0), fail);
    FB_TRY_GOTO(fb_blas_gemm(g->blas, 0, 0, (int)T, (int)D, (int)V, g->dlb, (int)V, P[P_HEAD].wb, (int)D, g->dn, (int)D, 0), fail);
    FB_TRY_GOTO(rms_bwd(g, g->xf, P[P_NF].wb, g->rf, g->dn, T, D, g->dx, P[P_NF].g, 0), fail);
    for (size_t l = L; l-- > 0;) {
      glayer *a = &g->L[l];
      gparam *lp = P + P_GLOBAL + l * P_PER_LAYER;
      fb_gpu_layer_io io;
      memset(&io, 0, sizeof io);
      io.dy = g->dx, io.dx = g->dn, io.dw13 = lp[P_W13].g, io.dw2 = lp[P_W2].g, io.dtopk_w = g->dtw;
      FB_TRY_GOTO(fb_gpu_experts_backward_dev(g->ex, &t->act[l].moe, &io), fail);
      memset(&p, 0, sizeof p);
      p.probs = a->probs, p.idx = a->idx, p.tw = a->tw, p.dy = g->dtw, p.cnt = a->cnt, p.y = g->dp, p.yb = g->dlrb;
      p.rows = (long long)T, p.experts = (int)E, p.top_k = (int)K, p.layers = (int)L, p.tg = (long long)Tg;
      p.aux_coef = t->o.aux_coef;
      FB_TRY_GOTO(launch(&g->dk[K_ROUTER_BWD], (long long)T, &p), fail);
      FB_TRY_GOTO(fb_blas_gemm(g->blas, 1, 0, (int)E, (int)D, (int)T, g->dlrb, (int)E, a->n2b, (int)D, lp[P_ROUTER].g, (int)D, 0), fail);
      FB_TRY_GOTO(fb_blas_gemm(g->blas, 0, 0, (int)T, (int)D, (int)E, g->dlrb, (int)E, lp[P_ROUTER].wb, (int)D, g->dn, (int)D, 1), fail);
      FB_TRY_GOTO(rms_bwd(g, a->xm, lp[P_N2].wb, a->r2, g->dn, T, D, g->dx, lp[P_N2].g, 1), fail);
      memset(&p, 0, sizeof p);
      p.dy = g->dx, p.a = a->n1, p.w = lp[P_CONV].wb, p.dg = lp[P_CONV].g, p.dx = g->dn, p.rows = (long long)T;
      p.cols = (long long)D, p.width = (int)W, p.seq = (int)S, p.part = g->colpart, p.nparts = g->nchunk;
      FB_TRY_GOTO(launch(&g->dk[K_CONV_BWD_K], (long long)g->nchunk * (long long)(D * W), &p), fail);
      fb_kp_dense pc = p; /* the chunks' sums: D x width columns */
      pc.cols = (long long)(D * W);
      FB_TRY_GOTO(launch(&g->dk[K_COLSUM], (long long)(D * W), &pc), fail);
      FB_TRY_GOTO(launch(&g->dk[K_CONV_BWD_X], (long long)(T * D), &p), fail);
      FB_TRY_GOTO(rms_bwd(g, a->x_in, lp[P_N1].wb, a->r1, g->dn, T, D, g->dx, lp[P_N1].g, 1), fail);
    }
    memset(&p, 0, sizeof p);
    p.dy = g->dx, p.idx = g->csr_off, p.idx2 = g->csr_pos, p.dg = P[P_EMB].g, p.rows = (long long)V, p.cols = (long long)D;
    FB_TRY_GOTO(launch(&g->dk[K_EMBED_BWD], (long long)(V * D), &p), fail);
    if (t->nranks > 1) /* the replicated parameters: every rank's tokens' gradients summed */
      FB_TRY_GOTO(fb_comm_dev_allreduce_f32(t->comm, (float *)(uintptr_t)g->gblock, g->gblock_n, NULL), fail);
    g->host_stale = 1;
  } else {
    release_all(t);
  }

  /* ---- the loss: per-token cross-entropies and the aux statistics to the host (a synchronization) ---- */
  CU_CHECK_GOTO(fb_cu.MemcpyDtoH(t->ce_tok + (size_t)t->rank * T, g->ce, T * 8), fail);
  for (size_t l = 0; l < L; ++l) {
    CU_CHECK_GOTO(fb_cu.MemcpyDtoH(g->h_cnt + l * E, g->L[l].cnt, E * 4), fail);
    CU_CHECK_GOTO(fb_cu.MemcpyDtoH(g->h_pe + l * E, g->L[l].pe, E * 8), fail);
  }
  if (t->nranks > 1) FB_TRY_GOTO(fb_comm_allgather(t->comm, t->ce_tok + (size_t)t->rank * T, T * 8, t->ce_tok), fail);
  double ce = 0, aux = 0;
  for (size_t l = 0; l < L; ++l) aux += fbr_aux_term(g->h_cnt + l * E, g->h_pe + l * E, Tg, E, K, L);
  for (size_t i = 0; i < Tg; ++i) ce += t->ce_tok[i];
  ce /= (double)Tg;
  *ce_out = ce, *aux_out = aux;
  t->last_ce = ce, t->last_aux = aux;
  return FB_OK;
fail:
  release_all(t);
  return rc;
}

fb_status fbr_gpu_run(fb_trainer *t, uint32_t step, int grad, double *ce, double *aux) {
  return run(t, step, grad, ce, aux);
}

/* The squared norms of the gradients into two device doubles ([0] every tensor with one rank, the replicated ones
 * with N; [1] this rank's experts with N), read with one synchronization. */
fb_status fbr_gpu_sumsq(fb_trainer *t, double *rep, double *ex) {
  struct fbr_gpu *g = t->gpu;
  CU_CHECK(fb_cu.MemsetD8(g->acc, 0, 16));
  for (int i = 0; i < t->np; ++i) {
    const fbr_param *q = &t->p[i];
    long long n = (long long)(q->rows * q->cols), parts = (n + DTHREADS * 16 - 1) / (DTHREADS * 16);
    if (parts > NPARTS_MAX) parts = NPARTS_MAX;
    if (parts < 1) parts = 1;
    fb_kp_dense p = {0};
    p.x = g->p[i].g, p.dbl = g->part, p.acc = g->acc + (q->expert && t->nranks > 1 ? 8 : 0), p.rows = n;
    p.nparts = (int)parts;
    FB_TRY(fb_kernel_launch(&g->dk[K_SUMSQ_PART], (unsigned)parts, 1, DTHREADS, &p, sizeof p));
    FB_TRY(fb_kernel_launch(&g->dk[K_SUMSQ_FIN], 1, 1, 32, &p, sizeof p));
  }
  double a[2];
  CU_CHECK(fb_cu.MemcpyDtoH(a, g->acc, 16));
  *rep = a[0], *ex = a[1];
  return FB_OK;
}

/* AdamW on every tensor (the step is not skipped); h->wd is set here per tensor. The expert weights of NVFP4 layers take
 * its NVFP4 form: no BF16 copy, and their amax per outer-scale group for the layer's next forward. */
fb_status fbr_gpu_adamw(fb_trainer *t, const fb_adamw_hparams *h0) {
  struct fbr_gpu *g = t->gpu;
  for (int i = 0; i < t->np; ++i) {
    const fbr_param *q = &t->p[i];
    const int xs = q->expert ? g->xl[xlayer(i)] : -1;
    fb_kp_moe pm;
    memset(&pm, 0, sizeof pm);
    pm.master = g->p[i].w, pm.m = g->p[i].m, pm.v = g->p[i].v, pm.in = g->p[i].g, pm.out = g->p[i].wb;
    pm.rows = (long long)q->rows, pm.cols = (long long)q->cols, pm.experts = 1;
    pm.lr = h0->lr, pm.b1 = h0->b1, pm.b2 = h0->b2, pm.eps = h0->eps, pm.wd = q->decay ? t->o.wd : 0.0f;
    pm.bc1 = h0->bc1, pm.bc2 = h0->bc2, pm.gscale = h0->gscale;
    if (xs >= 0) { /* zeros first: the kernel takes atomicMax on them */
      const int l = xlayer(i);
      const size_t ng = xgroups(t, l);
      pm.amax = g->amax[l] + ((i - P_GLOBAL) % P_PER_LAYER == P_W2 ? ng * 4 : 0), pm.experts = (int)ng, pm.out = 0;
      CUresult r = fb_cu.MemsetD8Async(pm.amax, 0, ng * 4, fb_cuda_stream());
      if (r) return FB_ERR(FB_ECUDA, "train gpu: AdamW amax: %s", fb_cu_errstr((int)r));
    }
    unsigned gx, gy, th;
    FB_TRY(fb_launch_dims(xs >= 0 ? &g->xspec[xs] : &g->aspec, xs >= 0 ? &g->xvar[xs] : &g->avar, pm.rows, pm.cols, 0, &gx, &gy, &th));
    FB_TRY(fb_kernel_launch(xs >= 0 ? &g->xk[xs] : &g->ak, gx, gy, th, &pm, sizeof pm));
  }
  for (int l = 0; l < t->M.layers; ++l) g->amax_ok[l] = g->xl[l] >= 0;
  g->host_stale = 1;
  return FB_OK;
}
