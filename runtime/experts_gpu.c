/* experts_gpu.c — the expert layer on one GPU: the fb_expert_ops of experts_gpu.h. Every step of docs/numerics.md's "expert
 * layer, op by op" runs as a generated kernel (templates/), in this order (T tokens, D d_model, F d_ff, E experts,
 * R permuted rows, each expert's padded to FB_GPU_EXPERT_PAD = 128, the wgrad GEMM's K tile):
 *
 * forward
 *   dispatch   quant_{nvfp4|mxfp8}_..._row on the T x D tokens (stream X), then permute (4 passes) gathers the
 *              payload planes (codes, scales, per-token S_dec) into expert order: the payload w13 reads and the
 *              backward reuses.
 *   weights    the FP32 masters are quantized by quant_*_f32_row (NVFP4 per-expert or per-tensor outer scales: the amax
 *              kernel first; streams W13 / W2); where the GEMM picked multiplies BF16 products, bcopy makes the exact BF16
 *              copy it takes as B, a chunk of experts at a time (gemm_with_b), each chunk's GEMM over its experts' rows
 *              (an FP8 variant of an MXFP8 GEMM, weights_bf16 0, takes the codes and scales). (The GPU
 *              AdamW kernel writes these directly once the optimizer runs on the GPU; runtime/train.c's AdamW is on the host.)
 *   w13        GEMM with the SwiGLU epilogue: H = X W13^T rounded to BF16 (R x 2F, kept for the backward) and A =
 *              bf16(silu(g) * u) of the BF16 g, u (R x F), as swiglu.cuh would make it from the stored H; then A quantized
 *              as fwd.act (stream A).
 *   w2         GEMM with the RHT-32 + S2F6 epilogue (the combine payload) -> unpermute (S2F6, inverse RHT, router
 *              weights, BF16 out) -> y.
 * backward (MXFP8 with SR, the recipe's)
 *   combine    combine_bwd: dY[row] = bf16(w * bf16(dy[t])) in expert order (padding rows zero) and dtopk_w[t,s] =
 *              <dy[t], Y^[row]> in double, Y^ the S2F6 payload dequantized.
 *   (dY and dH are quantized along and down their rows as soon as they exist, and their BF16 rows given back: grad_both;
 *   the requantized weights' BF16 copies are made a chunk of experts at a time, dgrad_b, under an SR index map.)
 *   w2 dgrad   quant_mxfp8_sr_row(dY, stream DY_ROW); requant W2 (NVFP4/MXFP8 -> FP32 -> transposed MXFP8 SR, stream
 *              W2_T) as one E*D x F matrix, as the CPU does (so the SR element indices agree), then its F x (E*D) result
 *              regrouped per expert into (E*F) x D by one launch of the permute kernel's gather pass (a fixed row map;
 *              a requant that wrote the grouped layout would need none: templates/mx_col.cuh's change), bcopy (BF16-product
 *              GEMMs only: gemm_b), GEMM ->
 *              dA (BF16), swiglu_bwd(H, dA) -> dH (BF16). Unfused: the fused SwiGLU-backward epilogue measured slower
 *              (BENCHMARKS.md).
 *   w2 wgrad   quant_mxfp8_sr_col(dY, DY_COL) (D x R); requant A (A_T) (F x R) + bcopy; wgrad GEMM -> dW2 (E x D x F).
 *   w13 dgrad  quant_mxfp8_sr_row(dH, DH_ROW); requant W13 (W13_T), regrouped, bcopy; GEMM -> dX rows (BF16);
 *              unpermute (BF16, weights 1, FP32 out) -> dx.
 *   w13 wgrad  quant_mxfp8_sr_col(dH, DH_COL); requant X (X_T) + bcopy; wgrad GEMM -> dW13.
 * Expert parallelism (N ranks, one GPU each), as model_experts.c's "EP" does it on the CPU: rank r owns experts
 * [r E/N, (r+1) E/N). One rank (direct) skips what the exchange would do for nothing: the dispatch permute pads each
 * expert's rows to 128 and gathers them straight into the owner's layout (the exchange path's send order is that order
 * without the padding, and its regroup and regathers are identity maps there), row_of names owner rows, so the combine,
 * its backward (dY written in place, the padding rows zeroed by memsets) and dX's unpermute read the owner's rows where
 * they are; the bytes out are the exchange path's (FOURBIT_GPU_EXCHANGE=1 runs that path on one rank: tests compare).
 *   source   quantize the tokens, permute them without padding (by expert, then token: the rows for rank p are one
 *            contiguous range of each payload plane); the per-expert counts to the host (a synchronization)
 *            and allgathered over the host mesh: every rank knows what it sends and receives, and the owner its
 *            padded layout.
 *   exchange one all-to-all-v per plane (NVFP4 codes, E4M3 scales, FP32 per-token outer scales; MXFP8 codes, E8M0)
 *            through fb_comm_dev_alltoallv (grouped ncclSend/ncclRecv on the layer's stream, fb_cuda_stream()).
 *   owner    the received rows (by source, expert, token) regrouped per expert, padded to 128, by the permute kernel
 *            with top_k 1 (index: the local expert of each row): source 0's rows of expert e, then source 1's, ... =
 *            the global token order, so the owner's rows are one rank's rows of its experts, padding included. w13,
 *            SwiGLU, A, w2 on them; the S2F6 combine rows regathered by source (the permute with top_k 1, index: the
 *            source of each row, -1 on padding; S2F6 rows move as MXFP8's bytes) and sent back; the source combines.
 *   backward dY rows (BF16) out and regrouped as the forward's, dX rows (BF16) back the forward's way back; the MXFP8
 *            backward sends dX on the layer's exchange stream while its w13 wgrad runs (dx_send / dx_finish, events
 *            both ways; FOURBIT_GPU_OVERLAP=0: in series; FOURBIT_GPU_COMM_SMS=k: that wgrad leaves k SMs to NCCL),
 *            and the dispatch there while the weights are quantized (fwd_dispatch / fwd_weights / fwd_arrive;
 *            FOURBIT_GPU_OVERLAP=1: the dX exchange alone; byte-identical either way on the H100 at one rank).
 *   random   every MXFP8 quantizer with SR draws by the one-rank index of its element (the SR maps, map_rows /
 *            map_cols / dgrad_b: the owner's rows are rows [g0, g0 + R) of one rank's Rg, its experts [e0, e0 + nE),
 *            a source's tokens [me T, (me + 1) T)), as the CPU path's srmap does: N ranks give one rank's layer outputs
 *            byte for byte, SR included (tests/test_bench_layer.sh, --global, at 2 and 4 ranks on the fake driver).
 * The device entry points (fb_gpu_experts_forward_dev / _backward_dev) take and give device tensors and synchronize
 * with the host in the forward only: the row counts (one rank: nothing else), and with the exchange the owner's row maps
 * (one synchronous copy up); the fb_expert_ops copy the host arrays up and down around them. A layer's saved tensors
 * live on the device from its forward to its backward; memory comes from a pool.
 *
 * Other recipes (bf16, mxfp8, nvidia_nvfp4; check_prec says exactly what runs):
 *   BF16 dispatch  BF16 token rows are permuted and exchanged; the owner quantizes them as fwd.act says on arrival (one
 *            rank: the CPU path's codes; per-tensor scales: the amax of the owner's rows, the tokens on one rank).
 *   BF16 layers    weights rounded to BF16 by tcopy.cuh, BF16 x BF16 GEMMs (FB_KIND 0), A and X saved as BF16.
 *   BF16 combine   the w2 GEMM writes BF16 rows, regathered by source and combined by unpermute_bf16_obf16; the
 *            combine's backward reads those rows.
 *   NVFP4 per-tensor scales (nvidia_nvfp4): amax kernel (BF16 rows or FP32 masters) then quant_nvfp4 *_ten; 16x16
 *            weight blocks quantized by quant_nvfp4 *_2d (their scales replicated along the rows: bcopy copies them as
 *            1x16 ones); the GEMMs' epilogue reads S_dec[0] (names nvfp4_ten).
 *   BF16 / NVFP4 backward (bwd_lowp): dY, dH row-wise as bwd.grad says (NVFP4: amax + SR quantizer); the saved X, A and
 *            weights dequantized exactly, transposed and RHT-16'd along the new rows (wgrad operands, wgrad_rht) by
 *            tcopy.cuh into FP32, quantized as bwd.saved / bwd.grad says (model_experts.c's colwise); dgrad as an NVFP4 x
 *            BF16-copy GEMM (FB_KIND 1, S_dec of both in the epilogue) or BF16 x BF16; wgrad as a BF16 GEMM of the two
 *            operands' exact BF16 copies, then tcopy scales it by S_dec(A) S_dec(B) / rht. NVFP4 SR operands draw the
 *            library quantizer's row-major bits of their GPU layout (rows padded to 128: other bits than the CPU's).
 * Not done here (refused with FB_EINVAL naming the field): NVFP4 activations with per-expert outer scales or 16x16
 * blocks, an MXFP8 backward after a BF16 forward or with 16x16 weights, a BF16 / NVFP4 backward after an MXFP8 forward
 * or with per-expert weights, wgrad_rht other than 0/16 (and any with MXFP8), E5M2, exact (gradient-check) mode;
 * dimensions the GEMM tiles do not divide (D and F multiples of 128). Under expert parallelism a per-tensor scale is the
 * amax of the owner's rows (the CPU path takes the source's tokens). The router and its backward stay in model.c.
 *
 * Agreement with the CPU path (model_experts.c): the dispatch payload, the quantized weights and their requantized
 * transposes, and the routing are defined identically (bit-exact); the GEMMs sum in another order (their outputs
 * agree to FP32 rounding, and what is quantized from them can flip at rounding ties); SR-quantized tensors laid out
 * by permuted row (dY, dH, A_T, X_T) draw other random bits because the rows are padded to 128 here and to 32 there. */
#include "experts_gpu.h"

#include "comm.h"
#include "fb_cuda.h"
#include "fb_error.h"
#include "fb_gemm_host.h"
#include "fb_tmpl.h"
#include "fb_kparams.h"
#include "model_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define PAD FB_GPU_EXPERT_PAD
#define MAXK 128

typedef struct {
  char key[256];
  fb_kernel_spec spec;
  fb_variant v;
  fb_kernel k;
  int shared; /* k belongs to an earlier entry (the same variant for another shape) */
  double ms;  /* the tuned winner's median time at its shape bucket (the lookup's; 0: not a timed winner) */
} kent;

/* Device memory is pooled, so that a step allocates nothing once the first steps have run (cuMemAlloc synchronizes
 * the device). Small blocks (size classes up to 2 MiB) go to a free list by class and the next request of that class
 * takes them. Large ones (multiples of 2 MiB) are ranges of slabs: a request takes the smallest free range that holds
 * it (best fit; the lowest address among equals), a freed range merges with its free neighbours, so a block the
 * forward freed serves the backward's requests of other sizes (exact size classes held 4.8 GiB for a 2.9 GiB peak at
 * S1). A request no range holds gets a slab of its own; once the pool is empty again (after a backward) and more than
 * one slab exists, they are given back and one slab replaces them, placed knowing the whole step: the large blocks'
 * allocations and releases since the pool was last empty are packed offline (slab_pack: each block's life is known,
 * so blocks that never live at the same time share bytes), and the k-th large request of the next steps takes its
 * planned address when its size is the plan's and that range is free (else best fit, else a new slab, and the next
 * consolidation plans again). At S1 the slab is then the live peak (online best fit's replay needed 1.07 to 1.09 times
 * it; FOURBIT_POOL_PLAN=0 keeps that). The slab is never smaller than the largest slab before (so that a step whose
 * sizes vary settles). */
#define POOL_FREE 512
#define POOL_EV 2048
#define SLABS 64
#define SLAB_RANGES 256
typedef struct {
  CUdeviceptr p;
  size_t n;
} blk;
typedef struct {
  CUdeviceptr p;
  size_t n;
  int nfr;
  blk fr[SLAB_RANGES]; /* free ranges, by address, merged */
} slab;

/* profiling: an event pair around each launch, read at fb_gpu_experts_profile_end */
#define PROF_MAX 256
typedef struct {
  CUevent a, b;
  char name[96], phase[24];
} prec;

#define GO_MAX 16
typedef struct {
  unsigned ng;
  size_t per;
  CUdeviceptr p;
} gofs;

/* regroup's row maps: one device block per (E, C), the row count (long long) then the map (int32 E C) */
#define RM_MAX 8
typedef struct {
  size_t E, C;
  CUdeviceptr p;
} rmap;

struct fb_gpu_experts {
  fb_gpu_experts_opts o;
  const char *arch; /* the device's (fb_gpu_device_arch); sm_90a when compiling only */
  fb_comm *comm;    /* o.comm, or a one-rank communicator of our own (own_comm) */
  int own_comm;
  fb_expert_ops ops;
  fb_plan *plan;
  int sms;
  kent kt[MAXK];
  int nk;
  fb_gpu_experts_stats st;
  blk fr[POOL_FREE];
  int nfree;
  slab sl[SLABS];
  int nsl;
  size_t slive, step_peak; /* live bytes in slabs; their most since the pool was last empty */
  struct { CUdeviceptr p; size_t n; int alloc; } ev[POOL_EV]; /* the large blocks' allocations and releases since then */
  int nev;                  /* POOL_EV + 1: too many to replay */
  blk place[POOL_EV];       /* the last consolidation's placement: the k-th large allocation since the pool was empty */
  int nplace, kal;          /* takes address place[k].p if its size is place[k].n and that range is free; kal: k now */
  size_t live, peak, held; /* bytes handed out now, the most at once, allocated from the driver */
  gofs go[GO_MAX]; /* group_offsets' cache */
  int ngo;
  rmap rm[RM_MAX]; /* regroup_map's cache */
  int nrm;
  int xchg1;       /* one rank through the exchange path all the same (FOURBIT_GPU_EXCHANGE=1; tests, benchmarks) */
  int prof, nprof, nevents, sync_check;
  const char *phase, *last;
  const char *peak_phase; /* the phase that set the pool's peak (NULL: outside any) */
  int trace;              /* FOURBIT_POOL_TRACE set: every pool allocation and release on stderr */
  int noplan;             /* FOURBIT_POOL_PLAN=0: the slab sized by the online best fit's replay, no planned placement */
  int bchunk;             /* FOURBIT_GPU_BCHUNK=n: the weights' dgrad B copies n experts at a time (tests); 0: by bytes */
  int overlap;            /* FOURBIT_GPU_OVERLAP: 0 every exchange in series; 1 the dX exchange beside the w13 wgrad;
                             2 (default) also the dispatch exchange beside the weights' quantization */
  CUstream xs;            /* the exchange stream (made at its first use; 0: none yet) */
  CUevent xev[2];         /* dX ready on the layer's stream; the exchange done on xs */
  int xbusy;              /* the dX exchange is in flight on xs (dx_send to dx_finish) */
  int comm_sms;           /* FOURBIT_GPU_COMM_SMS=k: the persistent GEMMs launched while it is leave k SMs to it */
  int grad_both;          /* dY / dH quantized both ways in one launch (1) or two (0); -1 (default): by the tuned winners'
                             times (grad_both_kernel), FOURBIT_GPU_GRAD_BOTH=1 / 0 forces one */
  const kent *gb_k;       /* the fused kernel grad_both_kernel last decided on (the decision is made once a kernel) */
  int gb_fused;           /* and its decision */
  int bpipe;              /* FOURBIT_GPU_BPIPE=k: a chunked GEMM's B copies made one chunk ahead on a stream of their own,
                             its GEMMs launched on k fewer SMs beside them (bpipe_loop); 0 (default): in turn */
  CUstream ps;            /* that stream (made at its first use) */
  CUevent pev[5];         /* the start on the layer's stream; chunk copy ready [1, 2]; buffer read by its GEMM [3, 4] */
  int pbusy;              /* a B copy is in flight beside the GEMM being launched */
  prec pr[PROF_MAX];
};

/* GEMM shape a variant must divide (gemm = 0: any variant) */
typedef struct { int gemm, mode, M, N, K; } gfit;

#define vparam fb_variant_param

static int fits(const fb_variant *v, const gfit *f) {
  if (!f || !f->gemm) return 1;
  int tm = vparam(v, "tile_m", 128), tn = vparam(v, "tile_n", 128), tk = vparam(v, "tile_k", 64);
  if (tm == 128 && vparam(v, "cluster", 1) == 2) tm = 256; /* tcgen05 B multicast: a cluster walks 256 rows of M */
  if (f->N % tn) return 0;
  if (f->mode == 0 && f->K % fb_gemm_k_unit(tk, vparam(v, "mma_k", 0))) return 0; /* mma_k: gemm_sm100.cuh only */
  if (f->mode == 1 && (f->M % tm || PAD % tk)) return 0;
  return 1;
}

/* The kernel of spec k (fitting f): from the table, else the cache (the caller's lookup), else NVRTC. */
static fb_status kget(fb_gpu_experts *g, const fb_kernel_spec *k, const gfit *f, const kent **out) {
  char key[256];
  snprintf(key, sizeof key, "%s|%d|%d|%d|%d|%d|%d|%d", k->name, f ? f->mode : 0, f ? f->M : 0, f ? f->N : 0, f ? f->K : 0,
           k->out_bf16, k->top_k, k->experts);
  for (int i = 0; i < g->nk; ++i)
    if (!strcmp(g->kt[i].key, key)) { *out = &g->kt[i]; return FB_OK; }
  if (g->nk == MAXK) return FB_ERR(FB_EINVAL, "experts gpu: more than %d kernels", MAXK);
  if (k->nvariants == -2) return FB_ERR(FB_EINVAL, "experts gpu: a kernel without a name: %s", fb_errmsg());
  if (k->nvariants == -1) { /* not a plan kernel: never tuned; run, and listed for the tests */
    if (g->st.unplanned < FB_GPU_UNPLANNED_MAX)
      snprintf(g->st.unplanned_names[g->st.unplanned], sizeof g->st.unplanned_names[0], "%s", k->name);
    g->st.unplanned++;
  }
  const char *why = NULL;
  if (!fb_gen_template(k, &why)) return FB_ERR(FB_EINVAL, "experts gpu: %s: %s", k->name, why ? why : "no template");
  const fb_recipe *r = g->o.recipe;
  const fb_tune_family *fam = NULL;
  for (int i = 0; i < r->nfamilies; ++i)
    if (!strcmp(r->families[i].family, k->family)) fam = &r->families[i];
  if (!fam) return FB_ERR(FB_EINVAL, "experts gpu: %s: the recipe has no tune family '%s'", k->name, k->family);
  fb_variant *vs = NULL;
  int nv = 0, pick = -1;
  FB_TRY(fb_gen_variants(k, fam, &vs, &nv, NULL, NULL, 0));
  const fb_tmpl *t0 = fb_tmpl_by_file(vs && nv ? vs[0].tmpl : "");
  if (g->o.pick_family && t0 && t0->family) { /* --pick FAMILY: a GEMM from that family's variants only */
    int m = 0;
    for (int j = 0; j < nv; ++j) {
      const fb_tmpl *t = fb_tmpl_by_file(vs[j].tmpl);
      if (t && t->family && !strcmp(t->family, g->o.pick_family)) vs[m++] = vs[j];
    }
    if (!m) {
      free(vs);
      return FB_ERR(FB_EINVAL, "experts gpu: %s: no variant of the GEMM family '%s' (%s has %s)", k->name, g->o.pick_family,
                    g->arch, fb_arch_families(g->arch));
    }
    nv = m;
  }
  void *cub = NULL;
  size_t sz = 0;
  double ms = 0;
  char note[1400] = "";
  if (g->o.lookup) {
    char vn[192] = "";
    char ln[1200] = "";
    if (g->o.lookup(g->o.lookup_user, k, g->o.tokens, vn, sizeof vn, &cub, &sz, &ms, ln, sizeof ln) == FB_OK) {
      for (int j = 0; j < nv && pick < 0; ++j)
        if (!strcmp(vs[j].name, vn) && fits(&vs[j], f)) pick = j;
      if (pick < 0) {
        free(cub), cub = NULL, ms = 0;
        snprintf(note, sizeof note, g->o.pick_family ? "cached %s is not of the picked family or does not fit this shape; "
                                                     : "cached %s does not fit this shape; ", vn);
      } else {
        snprintf(note, sizeof note, "cache: %s", ln);
      }
    } else {
      snprintf(note, sizeof note, "not in the cache (%.900s); ", fb_errmsg());
    }
  }
  for (int j = 0; j < nv && pick < 0; ++j)
    if (fits(&vs[j], f)) pick = j;
  if (pick < 0) {
    free(vs);
    return FB_ERR(FB_EINVAL, "experts gpu: %s: no variant of the recipe's '%s' tune family divides M %d N %d K %d", k->name,
                  k->family, f ? f->M : 0, f ? f->N : 0, f ? f->K : 0);
  }
  kent *e = &g->kt[g->nk];
  memset(e, 0, sizeof *e);
  snprintf(e->key, sizeof e->key, "%s", key);
  e->spec = *k, e->v = vs[pick], e->ms = ms > 0 ? ms : 0;
  free(vs);
  for (int i = 0; i < g->nk; ++i)
    if (!strcmp(g->kt[i].v.name, e->v.name) && !memcmp(&g->kt[i].spec, k, sizeof *k)) {
      free(cub);
      e->k = g->kt[i].k, e->shared = 1;
      g->nk++;
      *out = e;
      return FB_OK;
    }
  fb_status s;
  if (cub) {
    s = g->o.compile_only ? FB_OK : fb_kernel_load(cub, e->v.name, &e->k);
    free(cub);
    if (s != FB_OK) return s;
    g->st.from_cache++;
  } else {
    char *src = NULL;
    FB_TRY(fb_gen_source(k, &e->v, r->path, g->plan->sha256, &src));
    fb_cubin cb;
    memset(&cb, 0, sizeof cb);
    s = fb_nvrtc_compile(e->v.name, src, g->arch, &cb);
    free(src);
    if (s != FB_OK) return s;
    s = g->o.compile_only ? FB_OK : fb_kernel_load(cb.cubin, e->v.name, &e->k);
    g->st.compile_ms += cb.ms;
    fb_cubin_free(&cb);
    if (s != FB_OK) return s;
    g->st.compiled++;
    size_t n = strlen(note);
    snprintf(note + n, sizeof note - n, "compiled (NVRTC)");
  }
  g->st.kernels++;
  g->nk++;
  if (g->o.log && g->o.verbose) fprintf(g->o.log, "  kernel %-64s %s\n", e->v.name, note);
  *out = e;
  return FB_OK;
}

/* ---- specs: from gen/specs.c's constructors, named by fb_kernel_name, the plan's ------------------------------- */
/* The plan's spec of k's canonical name (its tuned winners are cached under that name) with k's top_k and experts,
 * which no template compiles in. The name carries every field the source depends on, so the plan's spec and k generate
 * the same kernel. A kernel the plan does not name is run all the same (compiled here), and counted and listed in the
 * stats (unplanned): tests/test_kname.c fails on any, since `fourbit tune` cannot have tuned it. */
static fb_kernel_spec from_plan(fb_gpu_experts *g, fb_kernel_spec k) {
  if (fb_kernel_spec_name(&k, g->arch) != FB_OK) {
    k.nvariants = -2; /* kget reports it */
    return k;
  }
  for (int i = 0; i < g->plan->nkernels; ++i)
    if (!strcmp(g->plan->kernels[i].name, k.name)) {
      fb_kernel_spec p = g->plan->kernels[i];
      p.top_k = k.top_k, p.experts = k.experts;
      return p;
    }
  k.nvariants = -1; /* not a plan kernel: kget counts it */
  return k;
}

static fb_kernel_spec sp_quant(fb_gpu_experts *g, const fb_qspec *q, int col, int in_f32) {
  fb_qspec qq = *q;
  qq.rht = 0; /* tcopy.cuh applies the RHT before */
  return from_plan(g, fb_spec_quant(&qq, col, in_f32, NULL));
}

static fb_kernel_spec sp_amax(fb_gpu_experts *g, fb_gran outer, int in_f32) { return from_plan(g, fb_spec_amax(outer, in_f32, NULL)); }

static fb_kernel_spec sp_requant(fb_gpu_experts *g, const fb_qspec *dst, const fb_qspec *src) {
  return from_plan(g, fb_spec_requant(dst, src, NULL));
}

static fb_kernel_spec sp_requant_kbf16(fb_gpu_experts *g, const fb_qspec *dst, const fb_qspec *src) {
  return from_plan(g, fb_spec_requant_kbf16(dst, src, NULL));
}
static fb_kernel_spec sp_bcopy(fb_gpu_experts *g, fb_format f) { return from_plan(g, fb_spec_bcopy(f, NULL)); }

static fb_kernel_spec sp_permute(fb_gpu_experts *g, const fb_qspec *q, int top_k, int experts) {
  fb_kernel_spec k = fb_spec_permute(q, NULL);
  k.top_k = top_k, k.experts = experts;
  return from_plan(g, k);
}

static fb_kernel_spec sp_unpermute(fb_gpu_experts *g, const fb_qspec *q, int out_bf16, int top_k, int experts) {
  fb_kernel_spec k = fb_spec_unpermute(q, out_bf16, NULL);
  k.top_k = top_k, k.experts = experts;
  return from_plan(g, k);
}

static fb_kernel_spec sp_swiglu(fb_gpu_experts *g, int bwd) { return from_plan(g, fb_spec_swiglu(bwd, NULL)); }

static fb_kernel_spec sp_combine_bwd(fb_gpu_experts *g, const fb_qspec *q) { return from_plan(g, fb_spec_combine_bwd(q, NULL)); }

/* which: 0 w13 fwd (H and A, SwiGLU epilogue), 1 w2 fwd (the combine payload), 2 dgrad (BF16), 3 wgrad (FP32) */
static fb_kernel_spec sp_gemm(fb_gpu_experts *g, const fb_layer_prec *p, int which) { return from_plan(g, fb_spec_gpu_gemm(p, which)); }

static fb_kernel_spec sp_tcopy(fb_gpu_experts *g, fb_format src, fb_gran outer, int in_f32, int trans, int rht, int scale, int out_bf16) {
  return from_plan(g, fb_spec_tcopy(src, outer, in_f32, trans, rht, scale, out_bf16, NULL));
}

/* ---- copies and sets on this thread's stream ------------------------------------------------------------------ */
/* Every launch, copy and memset of the layer goes to fb_cuda_stream(): the caller's stream through libfourbit.so
 * (lib/abi.c sets it for the length of a call), else the legacy default stream (fourbit's own trainer and benches). A
 * copy to the host also waits for that stream, since the host reads it next; a copy up from pageable host memory is
 * staged before the call returns, so the host buffer may be freed at once. */
static CUresult s_zero(CUdeviceptr d, size_t n) { return fb_cu.MemsetD8Async(d, 0, n, fb_cuda_stream()); }
static CUresult s_htod(CUdeviceptr d, const void *h, size_t n) { return fb_cu.MemcpyHtoDAsync(d, h, n, fb_cuda_stream()); }
static CUresult s_dtod(CUdeviceptr d, CUdeviceptr src, size_t n) { return fb_cu.MemcpyDtoDAsync(d, src, n, fb_cuda_stream()); }
static CUresult s_dtoh(void *h, CUdeviceptr d, size_t n) {
  CUresult r = fb_cu.MemcpyDtoHAsync(h, d, n, fb_cuda_stream());
  return r ? r : fb_cu.StreamSynchronize(fb_cuda_stream());
}

/* ---- device memory: an arena per call (scratch) and one per saved layer, both drawing on the pool ------------- */
typedef struct {
  fb_gpu_experts *g;
  CUdeviceptr p[160];
  size_t n[160];
  int k;
  CUdeviceptr into; /* set: the next aalloc returns this block of into_n bytes (lent, not the arena's: bpipe_loop) */
  size_t into_n;
} arena;

/* size classes: powers of two up to 2 MiB, then multiples of 2 MiB */
static size_t size_class(size_t n) {
  if (n <= 256) return 256;
  if (n <= (2u << 20)) {
    size_t c = 256;
    while (c < n) c <<= 1;
    return c;
  }
  return (n + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
}

/* Pool memory is not zeroed (a step would otherwise write gigabytes of zeros at S1): every buffer below is written
 * whole by its kernel before it is read, except those taken with aalloc_z (kernels that leave rows alone or
 * accumulate into them). tests/gpu/mock_libcuda.c fills fresh allocations with a NaN pattern to hold us to that. */
/* A list of free ranges, sorted by address and merged: the smallest range that holds c bytes (the lowest address among
 * equals; -1: none), c bytes cut from the front of range i, and a range given back, merged with its neighbours (cap:
 * the list's room; a range that finds none is lost). The slabs' lists, and slab_replay's. */
static int ranges_best(const blk *fr, int nfr, size_t c) {
  int bi = -1;
  for (int i = 0; i < nfr; ++i)
    if (fr[i].n >= c && (bi < 0 || fr[i].n < fr[bi].n)) bi = i;
  return bi;
}
static CUdeviceptr ranges_cut(blk *fr, int *nfr, int i, size_t c) {
  CUdeviceptr p = fr[i].p;
  if (fr[i].n == c) memmove(&fr[i], &fr[i + 1], (size_t)(--*nfr - i) * sizeof *fr);
  else fr[i].p += c, fr[i].n -= c;
  return p;
}
static void ranges_put(blk *fr, int *nfr, int cap, CUdeviceptr p, size_t c) {
  int i = 0;
  while (i < *nfr && fr[i].p < p) ++i;
  const int left = i > 0 && fr[i - 1].p + fr[i - 1].n == p, right = i < *nfr && p + c == fr[i].p;
  if (left && right) {
    fr[i - 1].n += c + fr[i].n;
    memmove(&fr[i], &fr[i + 1], (size_t)(--*nfr - i) * sizeof *fr);
  } else if (left) {
    fr[i - 1].n += c;
  } else if (right) {
    fr[i].p = p, fr[i].n += c;
  } else if (*nfr < cap) {
    memmove(&fr[i + 1], &fr[i], (size_t)(*nfr - i) * sizeof *fr);
    fr[i] = (blk){p, c};
    ++*nfr;
  } /* else: lost until the slab is replaced (never seen: a step leaves a few dozen ranges) */
}
/* c bytes at address p cut from the range of the list that holds them whole (0: none does, or no room to split) */
static int ranges_at(blk *fr, int *nfr, int cap, CUdeviceptr p, size_t c) {
  for (int i = 0; i < *nfr; ++i) {
    if (fr[i].p > p) return 0;
    if (p + c > fr[i].p + fr[i].n) continue;
    const blk r = fr[i];
    if (r.p == p) return ranges_cut(fr, nfr, i, c), 1;
    if (p + c == r.p + r.n) return fr[i].n -= c, 1;
    if (*nfr == cap) return 0;
    memmove(&fr[i + 2], &fr[i + 1], (size_t)(*nfr - i - 1) * sizeof *fr);
    fr[i].n = p - r.p, fr[i + 1] = (blk){p + c, r.p + r.n - p - c};
    ++*nfr;
    return 1;
  }
  return 0;
}
/* large blocks: the plan's address where it applies, else the best-fit range of the slabs, else a new slab (see
 * above) */
static int slab_take(fb_gpu_experts *g, size_t c, CUdeviceptr *out) {
  const int k = g->kal;
  if (k < g->nplace && g->place[k].n == c)
    for (int s = 0; s < g->nsl; ++s)
      if (g->place[k].p >= g->sl[s].p && g->place[k].p < g->sl[s].p + g->sl[s].n) {
        if (!ranges_at(g->sl[s].fr, &g->sl[s].nfr, SLAB_RANGES, g->place[k].p, c)) break;
        *out = g->place[k].p;
        return 1;
      }
  int bs = -1, bi = -1;
  for (int s = 0; s < g->nsl; ++s) {
    const int i = ranges_best(g->sl[s].fr, g->sl[s].nfr, c);
    if (i < 0) continue;
    const blk *r = &g->sl[s].fr[i], *b = bs < 0 ? NULL : &g->sl[bs].fr[bi];
    if (!b || r->n < b->n || (r->n == b->n && r->p < b->p)) bs = s, bi = i;
  }
  if (bs < 0) return 0;
  *out = ranges_cut(g->sl[bs].fr, &g->sl[bs].nfr, bi, c);
  return 1;
}
static fb_status slab_new(fb_gpu_experts *g, size_t n) {
  if (g->nsl == SLABS) return FB_ERR(FB_ENOMEM, "experts gpu: more than %d pool slabs", SLABS);
  CUdeviceptr p;
  CUresult r = fb_cu.MemAlloc(&p, n);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) { /* give the free lists and the wholly free slabs back and try once more */
    for (int i = 0; i < g->nfree; ++i) fb_cu.MemFree(g->fr[i].p), g->held -= g->fr[i].n;
    g->nfree = 0;
    for (int s = g->nsl - 1; s >= 0; --s)
      if (g->sl[s].nfr == 1 && g->sl[s].fr[0].n == g->sl[s].n) {
        fb_cu.MemFree(g->sl[s].p), g->held -= g->sl[s].n;
        g->sl[s] = g->sl[--g->nsl];
      }
    r = fb_cu.MemAlloc(&p, n);
  }
  if (r) return FB_ERR(FB_ECUDA, "experts gpu: cuMemAlloc(%zu): %s", n, fb_cu_errstr(r));
  slab *sl = &g->sl[g->nsl++];
  sl->p = p, sl->n = n, sl->nfr = 1, sl->fr[0] = (blk){p, n};
  g->held += n;
  if (g->trace) fprintf(stderr, "pool slab %zu (%s; %d slabs, held %zu)\n", n, g->phase ? g->phase : "-", g->nsl, g->held);
  return FB_OK;
}
static void slab_give(fb_gpu_experts *g, CUdeviceptr p, size_t c) {
  for (int s = 0; s < g->nsl; ++s)
    if (p >= g->sl[s].p && p < g->sl[s].p + g->sl[s].n) {
      ranges_put(g->sl[s].fr, &g->sl[s].nfr, SLAB_RANGES, p, c);
      return;
    }
}
/* whether the step's large-block events (g->ev) all find room in one slab of cap bytes, replayed with slab_take's best
 * fit and slab_give's merging (offsets from 0, each allocation's in at[event]) */
static int slab_replay(const fb_gpu_experts *g, size_t cap, CUdeviceptr *at) {
  static blk fr[POOL_EV + 1];
  int nfr = 1;
  fr[0] = (blk){0, cap};
  for (int e = 0; e < g->nev; ++e) {
    size_t c = g->ev[e].n;
    if (g->ev[e].alloc) {
      const int i = ranges_best(fr, nfr, c);
      if (i < 0) return 0;
      at[e] = ranges_cut(fr, &nfr, i, c);
    } else {
      int a = e - 1; /* the live allocation of this address */
      while (a >= 0 && !(g->ev[a].alloc && g->ev[a].p == g->ev[e].p)) --a;
      if (a < 0) return 0;
      ranges_put(fr, &nfr, POOL_EV + 1, at[a], c);
    }
  }
  return 1;
}
/* The step's large blocks placed knowing all of it: a block lives from its allocation event to its release (t0, t1);
 * two blocks may share bytes only if their lives do not overlap. pack_order places them in the order ord, each in the
 * smallest gap between the placed blocks that live at the same time (else above them all), and returns the slab size
 * that needs (offsets in at[], blocks by offset in byoff[]). */
typedef struct {
  size_t n;
  int t0, t1;
} lblk;
static size_t pack_order(const lblk *b, int nb, const int *ord, size_t *at, int *byoff) {
  size_t top = 0;
  for (int i = 0, np = 0; i < nb; ++i, ++np) {
    const lblk *x = &b[ord[i]];
    size_t lo = 0, best = SIZE_MAX, gap = SIZE_MAX;
    for (int k = 0; k <= np; ++k) {
      const lblk *y = k < np ? &b[byoff[k]] : NULL;
      if (y && !(y->t0 < x->t1 && x->t0 < y->t1)) continue;
      const size_t hi = y ? at[byoff[k]] : SIZE_MAX;
      if (hi > lo && hi - lo >= x->n && (best == SIZE_MAX || hi - lo < gap)) best = lo, gap = hi - lo;
      if (y && at[byoff[k]] + y->n > lo) lo = at[byoff[k]] + y->n;
    }
    at[ord[i]] = best;
    if (best + x->n > top) top = best + x->n;
    int k = np;
    for (; k > 0 && at[byoff[k - 1]] > best; --k) byoff[k] = byoff[k - 1];
    byoff[k] = ord[i];
  }
  return top;
}
/* The placement of the step's large blocks in one slab (each allocation event's offset in at[event]; returns the slab
 * size, 0: an event without its allocation). Three orders first (largest, longest-lived, largest size x life first),
 * then a local search from the best of them (one block moved to another place in the order, kept if the slab does not
 * grow; a fixed seed, so the same steps give the same placement) until the slab is the live peak (floor: no placement
 * needs less) or the work budget is spent. Online best fit needed 1.07 times the peak at S1; this reaches the peak
 * there (docs/design.md, "Runtime"). */
static size_t slab_pack(const fb_gpu_experts *g, size_t floor, CUdeviceptr *at) {
  static lblk b[POOL_EV];
  static int ev_of[POOL_EV], ord[POOL_EV], o2[POOL_EV], byoff[POOL_EV];
  static size_t off[POOL_EV], off2[POOL_EV];
  int nb = 0;
  for (int e = 0; e < g->nev; ++e) {
    if (g->ev[e].alloc) {
      ev_of[nb] = e, b[nb++] = (lblk){g->ev[e].n, e, g->nev};
      continue;
    }
    int a = nb - 1; /* the live block of this address */
    while (a >= 0 && !(g->ev[ev_of[a]].p == g->ev[e].p && b[a].t1 == g->nev)) --a;
    if (a < 0) return 0;
    b[a].t1 = e;
  }
  if (!nb) return 0;
  size_t top = SIZE_MAX;
  for (int h = 0; h < 3; ++h) {
    for (int i = 0; i < nb; ++i) o2[i] = i;
    for (int i = 1; i < nb; ++i) /* insertion sort, stable: the earlier allocation first among equals */
      for (int j = i; j > 0; --j) {
        const lblk *x = &b[o2[j]], *y = &b[o2[j - 1]];
        const double kx = h == 0 ? (double)x->n : h == 1 ? x->t1 - x->t0 : (double)x->n * (x->t1 - x->t0);
        const double ky = h == 0 ? (double)y->n : h == 1 ? y->t1 - y->t0 : (double)y->n * (y->t1 - y->t0);
        if (kx <= ky) break;
        const int t = o2[j];
        o2[j] = o2[j - 1], o2[j - 1] = t;
      }
    const size_t v = pack_order(b, nb, o2, off2, byoff);
    if (v < top) top = v, memcpy(ord, o2, (size_t)nb * sizeof *ord), memcpy(off, off2, (size_t)nb * sizeof *off);
  }
  const long iters = 40000000L / ((long)nb * nb) < 4000 ? 40000000L / ((long)nb * nb) : 4000;
  uint64_t r = 0x9E3779B97F4A7C15ull;
  for (long it = 0; it < iters && top > floor; ++it) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    const int i = (int)(r % (uint64_t)nb), j = (int)((r >> 32) % (uint64_t)nb);
    memcpy(o2, ord, (size_t)nb * sizeof *ord);
    const int x = o2[i];
    if (i < j) memmove(&o2[i], &o2[i + 1], (size_t)(j - i) * sizeof *o2);
    else memmove(&o2[j + 1], &o2[j], (size_t)(i - j) * sizeof *o2);
    o2[j] = x;
    const size_t v = pack_order(b, nb, o2, off2, byoff);
    if (v <= top) top = v, memcpy(ord, o2, (size_t)nb * sizeof *ord), memcpy(off, off2, (size_t)nb * sizeof *off);
  }
  for (int k = 0; k < nb; ++k) at[ev_of[k]] = off[k];
  return top;
}
/* the pool is empty: more than one slab becomes one (see above) */
static void slab_consolidate(fb_gpu_experts *g) {
  if (g->nsl < 2) return;
  static CUdeviceptr at[POOL_EV], atr[POOL_EV];
  const size_t G2 = 2u << 20;
  size_t tot = 0, big = 0;
  for (int s = 0; s < g->nsl; ++s) tot += g->sl[s].n, big = g->sl[s].n > big ? g->sl[s].n : big;
  size_t want = tot; /* the replay's smallest slab, in 2 MiB steps (tot always holds the step: it did) */
  int planned = 0;
  if (g->nev <= POOL_EV) {
    size_t lo = g->step_peak / G2, hi = tot / G2; /* lo fails or is the peak; hi holds */
    if (lo && slab_replay(g, lo * G2, atr)) hi = lo;
    while (hi - lo > 1) {
      size_t mid = (lo + hi) / 2;
      if (slab_replay(g, mid * G2, atr)) hi = mid;
      else lo = mid;
    }
    want = hi * G2;
    const size_t packed = g->noplan ? 0 : slab_pack(g, g->step_peak, at);
    if (packed && packed <= want) want = packed, planned = 1;
    else if (slab_replay(g, want, at)) planned = 1; /* the replay's own offsets */
  }
  if (want < big) want = big;
  for (int s = 0; s < g->nsl; ++s) fb_cu.MemFree(g->sl[s].p), g->held -= g->sl[s].n;
  g->nsl = 0, g->nplace = 0;
  if (slab_new(g, want) != FB_OK) return; /* its message stays set (nothing returns it); the next request makes a slab */
  if (!planned) return;
  for (int e = 0; e < g->nev; ++e)
    if (g->ev[e].alloc) g->place[g->nplace++] = (blk){g->sl[0].p + at[e], g->ev[e].n};
}
static fb_status aalloc(arena *a, CUdeviceptr *out, size_t n) {
  fb_gpu_experts *g = a->g;
  *out = 0;
  if (a->into) { /* a lent block: its owner frees it */
    if (n > a->into_n) return FB_ERR(FB_EINVAL, "experts gpu: %zu bytes asked of a lent block of %zu", n, a->into_n);
    *out = a->into, a->into = 0;
    return FB_OK;
  }
  if (a->k == (int)(sizeof a->p / sizeof a->p[0])) return FB_ERR(FB_ENOMEM, "experts gpu: arena full");
  size_t c = size_class(n);
  if (c > (2u << 20)) {
    if (!slab_take(g, c, out)) {
      FB_TRY(slab_new(g, c));
      slab_take(g, c, out);
    }
  } else {
    for (int i = g->nfree - 1; i >= 0; --i)
      if (g->fr[i].n == c) {
        *out = g->fr[i].p;
        g->fr[i] = g->fr[--g->nfree];
        break;
      }
    if (!*out) {
      CUresult r = fb_cu.MemAlloc(out, c);
      if (r == CUDA_ERROR_OUT_OF_MEMORY && g->nfree) { /* give the free list back and try once more */
        for (int i = 0; i < g->nfree; ++i) fb_cu.MemFree(g->fr[i].p), g->held -= g->fr[i].n;
        g->nfree = 0;
        r = fb_cu.MemAlloc(out, c);
      }
      if (r) return FB_ERR(FB_ECUDA, "experts gpu: cuMemAlloc(%zu): %s", c, fb_cu_errstr(r));
      g->held += c;
    }
  }
  a->p[a->k] = *out, a->n[a->k++] = c;
  g->live += c;
  if (g->trace) fprintf(stderr, "pool + %zu at %#llx (%s, after %s) arena %p live %zu\n", c, (unsigned long long)*out, g->phase ? g->phase : "-", g->last ? g->last : "-", (void *)a, g->live);
  if (g->live > g->peak) g->peak = g->live, g->peak_phase = g->phase;
  if (c > (2u << 20)) {
    if ((g->slive += c) > g->step_peak) g->step_peak = g->slive;
    if (g->nev < POOL_EV) g->ev[g->nev].p = *out, g->ev[g->nev].n = c, g->ev[g->nev++].alloc = 1;
    else g->nev = POOL_EV + 1;
    ++g->kal;
  }
  return FB_OK;
}
static fb_status aalloc_z(arena *a, CUdeviceptr *out, size_t n) {
  FB_TRY(aalloc(a, out, n));
  CU_CHECK(s_zero(*out, n)); /* asynchronous: ordered with the launches on the same stream */
  return FB_OK;
}
static void afree(arena *a) {
  fb_gpu_experts *g = a->g;
  for (int i = 0; i < a->k; ++i) {
    g->live -= a->n[i];
    if (g->trace) fprintf(stderr, "pool - %zu at %#llx (%s, after %s) arena %p live %zu\n", a->n[i], (unsigned long long)a->p[i], g->phase ? g->phase : "-", g->last ? g->last : "-", (void *)a, g->live);
    if (a->n[i] > (2u << 20)) {
      slab_give(g, a->p[i], a->n[i]), g->slive -= a->n[i];
      if (g->nev < POOL_EV) g->ev[g->nev].p = a->p[i], g->ev[g->nev].n = a->n[i], g->ev[g->nev++].alloc = 0;
      else g->nev = POOL_EV + 1;
    }
    else if (g->nfree < POOL_FREE) g->fr[g->nfree++] = (blk){a->p[i], a->n[i]};
    else fb_cu.MemFree(a->p[i]), g->held -= a->n[i];
  }
  a->k = 0;
  if (!g->live) {
    slab_consolidate(g);
    g->step_peak = 0, g->nev = 0, g->kal = 0;
  }
}
/* Give block p of arena a back to the pool now (before the arena ends); a pointer a does not hold (0, or another
 * arena's) is left alone. Reuse is in stream order, so the launches already queued that read p are unaffected. */
static void arelease(arena *a, CUdeviceptr p) {
  if (!p) return;
  for (int i = 0; i < a->k; ++i)
    if (a->p[i] == p) {
      arena one = {.g = a->g, .k = 1};
      one.p[0] = p, one.n[0] = a->n[i];
      a->p[i] = a->p[a->k - 1], a->n[i] = a->n[a->k - 1], --a->k;
      afree(&one);
      return;
    }
}
static fb_status up(arena *a, CUdeviceptr *out, const void *h, size_t n) {
  FB_TRY(aalloc(a, out, n));
  if (n) CU_CHECK(s_htod(*out, h, n));
  return FB_OK;
}

/* profiling marks around a launch (no-ops unless fb_gpu_experts_profile_begin) */
static fb_status prof_a(fb_gpu_experts *g, const char *name) {
  g->last = name;
  if (!g->prof) return FB_OK;
  if (g->nprof == PROF_MAX) return FB_ERR(FB_EINVAL, "experts gpu: more than %d launches profiled", PROF_MAX);
  prec *r = &g->pr[g->nprof];
  if (g->nprof == g->nevents) {
    CU_CHECK(fb_cu.EventCreate(&r->a, 0));
    CU_CHECK(fb_cu.EventCreate(&r->b, 0));
    g->nevents++;
  }
  snprintf(r->name, sizeof r->name, "%s", name);
  snprintf(r->phase, sizeof r->phase, "%s", g->phase ? g->phase : "");
  CU_CHECK(fb_cu.EventRecord(r->a, fb_cuda_stream()));
  return FB_OK;
}
static fb_status prof_b(fb_gpu_experts *g) {
  if (g->sync_check) { /* FOURBIT_GPU_SYNC=1: a fault is reported at the launch that made it */
    CUresult r = fb_cu.CtxSynchronize();
    if (r) return FB_ERR(FB_ECUDA, "experts gpu: %s %s: %s", g->phase ? g->phase : "", g->last, fb_cu_errstr((int)r));
  }
  if (!g->prof) return FB_OK;
  CU_CHECK(fb_cu.EventRecord(g->pr[g->nprof++].b, fb_cuda_stream()));
  return FB_OK;
}

/* a quantized matrix on the device: codes, block scales, NVFP4 outer scales */
typedef struct {
  CUdeviceptr c, s, o;
  size_t rows, cols, no;
  fb_format f;   /* BF16: c holds the values (no s, o) */
  int orow;      /* NVFP4: one outer scale per row (else per tensor or group: no of them) */
} dq;

/* A layer's state from its forward to its backward. Source side (this rank's tokens): its (token, expert) rows, by
 * expert then token (= by destination rank), and the combine payload they came back with. Owner side (this rank's
 * experts [e0, e0 + nE)): the rows it received, grouped per expert and padded as one rank lays them out. */
typedef struct {
  arena mem;
  int N, me, nE, e0;
  size_t g0, Rg; /* N > 1: the owner's rows are rows [g0, g0 + R) of one rank's layout of Rg rows (the SR maps) */
  int direct;            /* one rank without the exchange: the dispatch permute writes the owner's padded rows, d_rowof
                            holds owner rows, ycq / yce the w2 GEMM's R rows (padding rows included, never read) */
  int32_t *cnt;          /* N x E: rows of every rank for every expert (the allgathered counts) */
  size_t *srows, *rrows; /* N each: rows to / from every rank in the forward direction */
  size_t Rs, Rr, R;      /* rows sent, received, and the owner's padded rows */
  long long *off;        /* nE + 1: the owner's padded row offsets (host) */
  uint32_t signs;
  CUdeviceptr d_rowof;   /* int32 T*K: the source row of each (token, slot) (direct: the owner row), -1 for none */
  CUdeviceptr d_w;       /* FP32 T*K: the router weights */
  CUdeviceptr ycq, yce;  /* Rs rows: the S2F6 combine payload as received back (codes, E8M0); direct: the R owner rows */
  CUdeviceptr d_ridx;    /* int32 Rr: the local expert of each received row (the owner's regroup) */
  CUdeviceptr d_oidx;    /* int32 R: the source rank of each owner row, -1 on padding (the way back) */
  CUdeviceptr d_lrow;    /* int32 Rr: the owner row of each received row */
  CUdeviceptr d_off, H;  /* owner: long long nE + 1 padded offsets; H (R x 2F BF16) */
  dq X, W13, W2, A;
} gsaved;

/* a saved tensor's blocks back to the pool once its last reader is queued (the backward's phases call this) */
static void saved_drop(gsaved *s, dq *t) {
  arelease(&s->mem, t->c), arelease(&s->mem, t->s), arelease(&s->mem, t->o);
  t->c = t->s = t->o = 0;
}
static void saved_free(gsaved *s) {
  if (!s) return;
  afree(&s->mem);
  free(s->off), free(s->cnt), free(s->srows), free(s->rrows);
  free(s);
}

/* ---- launches ------------------------------------------------------------------------------------------------ */
static fb_status run_mem(fb_gpu_experts *g, const kent *e, fb_kp_mem *p, long long rows, long long cols, unsigned ng) {
  unsigned gx, gy, th;
  FB_TRY(fb_launch_dims(&e->spec, &e->v, rows, cols, ng, &gx, &gy, &th));
  FB_TRY(prof_a(g, e->v.name));
  FB_TRY(fb_kernel_launch(&e->k, gx, gy, th, p, sizeof *p));
  return prof_b(g);
}
static fb_status run_moe(fb_gpu_experts *g, const kent *e, fb_kp_moe *p, long long rows, long long cols) {
  unsigned gx, gy, th;
  FB_TRY(fb_launch_dims(&e->spec, &e->v, rows, cols, 0, &gx, &gy, &th));
  FB_TRY(prof_a(g, e->v.name));
  FB_TRY(fb_kernel_launch(&e->k, gx, gy, th, p, sizeof *p));
  return prof_b(g);
}

/* A device copy of n host bytes outside the pool, kept until fb_gpu_experts_free (the layouts' constant maps). */
static fb_status kept_upload(const void *h, size_t n, const char *what, CUdeviceptr *out) {
  CUdeviceptr d = 0;
  CUresult r = fb_cu.MemAlloc(&d, n);
  if (!r) r = s_htod(d, h, n);
  if (r) {
    if (d) fb_cu.MemFree(d);
    return FB_ERR(FB_ECUDA, "experts gpu: %s: %s", what, fb_cu_errstr((int)r));
  }
  *out = d;
  return FB_OK;
}

/* The offsets {0, per, 2 per, ..., ng per} (long long) of ng equal groups of rows (the experts' weights), on the
 * device: made once per (ng, per) and kept, so that a step does not upload them (a synchronous copy) every call. */
static fb_status group_offsets(fb_gpu_experts *g, unsigned ng, size_t per, CUdeviceptr *out) {
  for (int i = 0; i < g->ngo; ++i)
    if (g->go[i].ng == ng && g->go[i].per == per) { *out = g->go[i].p; return FB_OK; }
  if (g->ngo == GO_MAX) return FB_ERR(FB_EINVAL, "experts gpu: more than %d group layouts", GO_MAX);
  long long *h = malloc((ng + 1) * sizeof *h);
  if (!h) return FB_ERR(FB_ENOMEM, "experts gpu: groups");
  for (unsigned i = 0; i <= ng; ++i) h[i] = (long long)(i * per);
  CUdeviceptr d = 0;
  fb_status s = kept_upload(h, (ng + 1) * sizeof *h, "group offsets", &d);
  free(h);
  FB_TRY(s);
  g->go[g->ngo++] = (gofs){ng, per, d};
  *out = d;
  return FB_OK;
}

/* The SR index map of an MXFP8 quantizer with SR (fb_kparams.h sr_*, as fb_mxfp8_quantize_rows_at): element (i, j) of
 * its output draws the bits of (row0 + i) ld + col0 + j; ld 0: the identity. */
typedef struct { long long row0, ld, col0; } srmap;
/* map m (NULL or ld 0: the identity) into a quantizer's SR map fields (row0, ld, col0: fb_kp_mem's sr_* or sr2_*) */
static fb_status put_srmap(const srmap *m, long long *row0, long long *ld, long long *col0) {
  if (!m || !m->ld) return FB_OK;
  if (m->ld % 32 || m->col0 % 32 || m->row0 < 0 || m->col0 < 0)
    return FB_ERR(FB_EINVAL, "experts gpu: SR map (%lld, %lld, %lld): ld and col0 must be multiples of 32", m->row0, m->ld, m->col0);
  *row0 = m->row0, *ld = m->ld, *col0 = m->col0;
  return FB_OK;
}
static fb_status set_srmap(fb_kp_mem *p, const srmap *m) { return put_srmap(m, &p->sr_row0, &p->sr_ld, &p->sr_col0); }
/* The SR maps of the owner's operands under expert parallelism (N > 1; NULL on one rank: the identity), so that N ranks
 * draw the bits one rank draws for the same (token, expert) row (model_experts.c's srmap does the same on the CPU):
 * a row-wise operand's rows are rows [g0, g0 + R) of one rank's; a column-wise one (stored transposed) its columns */
static const srmap *map_rows(int N, size_t row0, size_t cols, srmap *m) {
  if (N < 2) return NULL;
  *m = (srmap){(long long)row0, (long long)cols, 0};
  return m;
}
static const srmap *map_cols(int N, size_t Rg, size_t g0, srmap *m) {
  if (N < 2) return NULL;
  *m = (srmap){0, (long long)Rg, (long long)g0};
  return m;
}
/* Quantize rows x cols (BF16, or FP32 with in_f32) along the rows as q says into *d. NVFP4 per-expert/tensor outer
 * scales (FP32 masters only): the amax of each group of `grows` rows by the amax kernel first, unless amax_in (device,
 * FP32, one a group) has them already. */
static fb_status quant_rows_a(fb_gpu_experts *g, arena *a, const fb_qspec *q, int in_f32, CUdeviceptr in, size_t rows,
                              size_t cols, size_t grows, uint32_t seed, uint32_t stream, uint32_t step, const srmap *map,
                              CUdeviceptr amax_in, dq *d) {
  const kent *e;
  fb_kernel_spec k = sp_quant(g, q, 0, in_f32);
  FB_TRY(kget(g, &k, NULL, &e));
  memset(d, 0, sizeof *d);
  d->rows = rows, d->cols = cols, d->f = q->format;
  fb_kp_mem p;
  memset(&p, 0, sizeof p);
  p.in = in, p.rows = (long long)rows, p.cols = (long long)cols, p.seed = seed, p.stream = stream, p.step = step;
  if (q->format == FB_FMT_NVFP4) {
    FB_TRY(aalloc(a, &d->c, rows * cols / 2));
    FB_TRY(aalloc(a, &d->s, rows * cols / 16));
    unsigned ng = 1;
    if (q->outer == FB_GRAN_TOKEN) {
      d->no = rows, d->orow = 1;
    } else {
      if (!in_f32 && q->outer == FB_GRAN_EXPERT)
        return FB_ERR(FB_EINVAL, "experts gpu: NVFP4 with a per-expert outer scale on activations (per token or tensor)");
      ng = q->outer == FB_GRAN_EXPERT ? (unsigned)(rows / grows) : 1u;
      d->no = ng;
      CUdeviceptr dam = amax_in, dgo = 0, dfl;
      if (q->outer == FB_GRAN_EXPERT) FB_TRY(group_offsets(g, ng, rows / ng, &dgo)); /* per tensor: none (rows vary) */
      if (!dam) {
        FB_TRY(aalloc_z(a, &dam, ng * sizeof(float))); /* zeros: the kernel takes atomicMax on them */
        FB_TRY(aalloc_z(a, &dfl, sizeof(unsigned)));
        const kent *ea;
        fb_kernel_spec ka = sp_amax(g, q->outer == FB_GRAN_EXPERT ? FB_GRAN_EXPERT : FB_GRAN_TENSOR, in_f32);
        FB_TRY(kget(g, &ka, NULL, &ea));
        fb_kp_mem pa;
        memset(&pa, 0, sizeof pa);
        pa.in = in, pa.rows = (long long)rows, pa.cols = (long long)cols, pa.amax = dam, pa.flags = dfl;
        pa.group_offsets = dgo, pa.ngroups = ng;
        FB_TRY(run_mem(g, ea, &pa, (long long)rows, (long long)cols, ng));
      } else
        ++g->st.amax_reused;
      p.amax = dam, p.group_offsets = dgo, p.ngroups = ng;
    }
    FB_TRY(aalloc(a, &d->o, d->no * sizeof(float)));
    p.out = d->c, p.scales = d->s, p.s_dec = d->o;
    return run_mem(g, e, &p, (long long)rows, (long long)cols, ng);
  }
  FB_TRY(aalloc(a, &d->c, rows * cols));
  FB_TRY(aalloc(a, &d->s, rows * cols / 32));
  p.out = d->c, p.scales = d->s;
  FB_TRY(set_srmap(&p, map));
  return run_mem(g, e, &p, (long long)rows, (long long)cols, 0);
}
static fb_status quant_rows_m(fb_gpu_experts *g, arena *a, const fb_qspec *q, int in_f32, CUdeviceptr in, size_t rows,
                              size_t cols, size_t grows, uint32_t seed, uint32_t stream, uint32_t step, const srmap *map, dq *d) {
  return quant_rows_a(g, a, q, in_f32, in, rows, cols, grows, seed, stream, step, map, 0, d);
}
static fb_status quant_rows(fb_gpu_experts *g, arena *a, const fb_qspec *q, int in_f32, CUdeviceptr in, size_t rows,
                            size_t cols, size_t grows, uint32_t seed, uint32_t stream, uint32_t step, dq *d) {
  return quant_rows_m(g, a, q, in_f32, in, rows, cols, grows, seed, stream, step, NULL, d);
}

/* MXFP8 down the columns of a BF16 rows x cols matrix, stored transposed (cols x rows) */
static fb_status quant_cols(fb_gpu_experts *g, arena *a, const fb_qspec *q, CUdeviceptr in, size_t rows, size_t cols,
                            uint32_t seed, uint32_t stream, uint32_t step, const srmap *map, dq *d) {
  const kent *e;
  fb_kernel_spec k = sp_quant(g, q, 1, 0);
  FB_TRY(kget(g, &k, NULL, &e));
  memset(d, 0, sizeof *d);
  d->rows = cols, d->cols = rows, d->f = FB_FMT_MXFP8;
  FB_TRY(aalloc(a, &d->c, rows * cols));
  FB_TRY(aalloc(a, &d->s, rows * cols / 32));
  fb_kp_mem p;
  memset(&p, 0, sizeof p);
  p.in = in, p.out = d->c, p.scales = d->s, p.rows = (long long)rows, p.cols = (long long)cols;
  p.seed = seed, p.stream = stream, p.step = step;
  FB_TRY(set_srmap(&p, map));
  return run_mem(g, e, &p, (long long)rows, (long long)cols, 0);
}

/* A saved src (rows x cols, quantized as sq says; group_rows: per-expert outer groups) dequantized, transposed and
 * requantized as q (MXFP8 SR) along the new rows: cols x rows. kbf16: written as the GEMMs' exact BF16 copy of that
 * (requant_kbf16, one pass: no MXFP8 codes kept, no bcopy); with regroup too, per expert as regroup() lays out transposed
 * weights, (rows / group_rows) cols x group_rows. */
static fb_status requant_(fb_gpu_experts *g, arena *a, const fb_qspec *q, const fb_qspec *sq, const dq *src, size_t group_rows,
                          uint32_t seed, uint32_t stream, uint32_t step, int kbf16, int regroup, const srmap *map, dq *d) {
  const kent *e;
  fb_kernel_spec k = kbf16 ? sp_requant_kbf16(g, q, sq) : sp_requant(g, q, sq);
  FB_TRY(kget(g, &k, NULL, &e));
  memset(d, 0, sizeof *d);
  size_t rows = src->rows, cols = src->cols;
  d->rows = cols, d->cols = rows, d->f = kbf16 ? FB_FMT_BF16 : FB_FMT_MXFP8;
  if (regroup && (!group_rows || rows % group_rows || group_rows % 32))
    return FB_ERR(FB_EINVAL, "experts gpu: a regrouped requantization of %zu rows in groups of %zu", rows, group_rows);
  if (regroup) d->rows = rows / group_rows * cols, d->cols = group_rows;
  FB_TRY(aalloc(a, &d->c, rows * cols * (kbf16 ? 2 : 1)));
  if (!kbf16) FB_TRY(aalloc(a, &d->s, rows * cols / 32));
  fb_kp_mem p;
  memset(&p, 0, sizeof p);
  p.in = src->c, p.src_scales = src->s, p.src_s_dec = src->o, p.out = d->c, p.scales = d->s;
  p.out_group = regroup ? (unsigned)group_rows : 0u;
  p.rows = (long long)rows, p.cols = (long long)cols, p.seed = seed, p.stream = stream, p.step = step;
  FB_TRY(set_srmap(&p, map));
  unsigned ng = 0;
  if (sq->format == FB_FMT_NVFP4 && sq->outer == FB_GRAN_EXPERT) {
    ng = (unsigned)(rows / group_rows);
    CUdeviceptr dgo;
    FB_TRY(group_offsets(g, ng, group_rows, &dgo));
    p.group_offsets = dgo, p.ngroups = ng;
  }
  return run_mem(g, e, &p, (long long)rows, (long long)cols, ng);
}

/* The row map of a regroup of E groups by C rows (made once per (E, C) and kept, like group_offsets): the row count E C
 * (long long), then token_of (int32 E C): out row e C + c takes in row c E + e. */
static fb_status regroup_map(fb_gpu_experts *g, size_t E, size_t C, CUdeviceptr *rows, CUdeviceptr *map) {
  for (int i = 0; i < g->nrm; ++i)
    if (g->rm[i].E == E && g->rm[i].C == C) { *rows = g->rm[i].p, *map = g->rm[i].p + 8; return FB_OK; }
  if (g->nrm == RM_MAX) return FB_ERR(FB_EINVAL, "experts gpu: more than %d regroup layouts", RM_MAX);
  size_t n = E * C, bytes = 8 + n * 4;
  if (n > INT32_MAX) return FB_ERR(FB_EINVAL, "experts gpu: regroup of %zu rows (int32 row indices)", n);
  unsigned char *h = malloc(bytes);
  if (!h) return FB_ERR(FB_ENOMEM, "experts gpu: regroup map");
  long long tot = (long long)n;
  memcpy(h, &tot, 8);
  int32_t *m = (int32_t *)(void *)(h + 8);
  for (size_t e = 0; e < E; ++e)
    for (size_t c = 0; c < C; ++c) m[e * C + c] = (int32_t)(c * E + e);
  CUdeviceptr d = 0;
  fb_status s = kept_upload(h, bytes, "regroup map", &d);
  free(h);
  FB_TRY(s);
  g->rm[g->nrm++] = (rmap){E, C, d};
  *rows = d, *map = d + 8;
  return FB_OK;
}

/* The permute kernel's gather pass alone (pass 3, templates/permute.cuh): out row r = in row map[r] for r below *rows
 * (device long long), each plane of permute format f with cols values a row (BF16: 2 cols bytes; MXFP8: cols code bytes
 * and cols / 32 E8M0). It reads no routing (topk_idx 0 says so to the fake driver). A warp a row. */
static fb_status gather_rows(fb_gpu_experts *g, const fb_moe_layer *L, fb_format f, size_t cols, CUdeviceptr in, CUdeviceptr in_s,
                             CUdeviceptr out, CUdeviceptr out_s, size_t n, CUdeviceptr rows, CUdeviceptr map) {
  fb_qspec q = {0};
  q.format = f, q.outer = FB_GRAN_TOKEN;
  const kent *e;
  fb_kernel_spec k = sp_permute(g, &q, L->top_k, L->experts);
  FB_TRY(kget(g, &k, NULL, &e));
  fb_kp_moe pm;
  memset(&pm, 0, sizeof pm);
  pm.pass = 3, pm.offsets = rows, pm.experts = 0, pm.token_of = map, pm.in = in, pm.in_scales = in_s, pm.out = out, pm.out_scales = out_s;
  pm.rows = (long long)n, pm.cols = (long long)cols, pm.top_k = 1, pm.tile = 1;
  /* fb_launch_dims gives the permute top_k warps a row (its rows are tokens): n / top_k "tokens" make a warp a row */
  long long K = L->top_k > 0 ? L->top_k : 1;
  unsigned gx, gy, th;
  FB_TRY(fb_launch_dims(&e->spec, &e->v, ((long long)n + K - 1) / K, (long long)cols, 0, &gx, &gy, &th));
  FB_TRY(prof_a(g, e->v.name));
  FB_TRY(fb_kernel_launch(&e->k, gx, gy, th, &pm, sizeof pm));
  return prof_b(g);
}

/* The transposed weights W^T: cols x (E * per) as requant wrote them, regrouped per expert into (E * cols) x per:
 * row (e, c) = elements [e * per, (e + 1) * per) of row c. One gather launch (two for NVFP4: codes, then E4M3 scales)
 * with the row map of regroup_map: the rows of per elements of W^T are its (c, e) pieces, c E + e. (A requantize-
 * transpose that wrote this layout itself would need none: templates/mx_col.cuh, an output offset per row group.) */
static fb_status regroup(fb_gpu_experts *g, arena *a, const fb_moe_layer *L, const dq *t, size_t E, dq *d) {
  size_t C = t->rows, per = t->cols / E, n = E * C;
  memset(d, 0, sizeof *d);
  d->rows = n, d->cols = per, d->f = t->f;
  if (t->f == FB_FMT_NVFP4 && t->orow) return FB_ERR(FB_EINVAL, "experts gpu: regroup of NVFP4 with per-row outer scales");
  if (!n || !per) return FB_ERR(FB_EINVAL, "experts gpu: regroup of an empty matrix");
  CUdeviceptr rows = 0, map = 0;
  FB_TRY(regroup_map(g, E, C, &rows, &map));
  if (t->f == FB_FMT_MXFP8) { /* codes (per bytes a piece) and E8M0 (per / 32): both planes of the MXFP8 payload */
    FB_TRY(aalloc(a, &d->c, n * per));
    FB_TRY(aalloc(a, &d->s, n * per / 32));
    return gather_rows(g, L, FB_FMT_MXFP8, per, t->c, t->s, d->c, d->s, n, rows, map);
  }
  /* BF16 values (2 per bytes a piece), or NVFP4 codes (per / 2) and E4M3 scales (per / 16) with their one outer scale,
     moved as BF16 rows of per / 4 and per / 32 values */
  int nv = t->f == FB_FMT_NVFP4;
  FB_TRY(aalloc(a, &d->c, n * (nv ? per / 2 : per * 2)));
  d->o = t->o, d->no = t->no;
  if (!nv) return gather_rows(g, L, FB_FMT_BF16, per, t->c, 0, d->c, 0, n, rows, map);
  FB_TRY(aalloc(a, &d->s, n * per / 16));
  FB_TRY(gather_rows(g, L, FB_FMT_BF16, per / 4, t->c, 0, d->c, 0, n, rows, map));
  return gather_rows(g, L, FB_FMT_BF16, per / 32, t->s, 0, d->s, 0, n, rows, map);
}

/* The exact BF16 copy (K permuted) of a quantized matrix, for the B operand of the Hopper GEMMs. */
static fb_status bf16copy(fb_gpu_experts *g, arena *a, const dq *m, CUdeviceptr *out) {
  if (m->f == FB_FMT_BF16) { *out = m->c; return FB_OK; } /* already the values */
  const kent *e;
  fb_kernel_spec k = sp_bcopy(g, m->f);
  FB_TRY(kget(g, &k, NULL, &e));
  FB_TRY(aalloc(a, out, m->rows * m->cols * 2));
  fb_kp_mem p;
  memset(&p, 0, sizeof p);
  p.in = m->c, p.scales = m->s, p.out = *out, p.rows = (long long)m->rows, p.cols = (long long)m->cols;
  return run_mem(g, e, &p, (long long)m->rows, (long long)m->cols, 0);
}

/* The B operand of a GEMM as its kernel e multiplies it: an MXFP8 or NVFP4 B as it is, codes and
 * scales, for an FP8 tensor-core variant or a tcgen05 one (weights_bf16 0: wgmma / mma.sync on E4M3, each k32 block promoted by its two
 * scales); else its exact BF16 copy (bcopy, in arena a), which the BF16-product kernels take. So a tuned or default FP8
 * kernel needs no copy of B at all. */
/* whether the GEMM kernel e multiplies a quantized B as it is, codes and scales: an FP8 tensor-core variant of an MXFP8
   GEMM (weights_bf16 0), or any tcgen05 variant (gemm_sm100.cuh: block-scaled MMAs of MXFP8 and NVFP4 operands, B's
   per-expert S_dec as the caller's b_outer) */
static int takes_q_b(const kent *e) {
  return !strcmp(e->v.tmpl, "gemm_sm100.cuh") || (fb_variant_has(&e->v, "weights_bf16") && !vparam(&e->v, "weights_bf16", 1));
}
static fb_status gemm_b(fb_gpu_experts *g, arena *a, const kent *e, const dq *B, fb_gemm_args *ga) {
  if (takes_q_b(e) && e->spec.src.format != FB_FMT_BF16) {
    if (B->f != e->spec.src.format)
      return FB_ERR(FB_EINVAL, "experts gpu: %s multiplies %s codes, given a %s B", e->v.name, fb_format_name(e->spec.src.format), fb_format_name(B->f));
    ga->b = B->c, ga->b_sf = B->s;
    return FB_OK;
  }
  return bf16copy(g, a, B, &ga->b);
}
/* The B operand of a backward GEMM (kernel e) from a saved src, requantized down its other axis (requant_: q, sq,
 * group_rows; regroup: per expert, the weights' dgrad layout) as e multiplies it: MXFP8 codes and scales for an FP8
 * variant (requant in arena wt, then the regroup's gather into a; wt is given back once the gather ran), else the exact
 * BF16 copy in one pass (requant_kbf16, into a): the requant, gather and bcopy passes of before in one. A BF16 source
 * takes the passes apart (MXFP8 codes; gemm_b makes the copy). */
static fb_status b_requant(fb_gpu_experts *g, arena *a, arena *wt, const kent *e, const fb_moe_layer *L, const fb_qspec *q,
                           const fb_qspec *sq, const dq *src, size_t group_rows, int regroup_, uint32_t stream, const srmap *map,
                           dq *d) {
  if (!takes_q_b(e) && (sq->format == FB_FMT_NVFP4 || sq->format == FB_FMT_MXFP8))
    return requant_(g, a, q, sq, src, group_rows, L->seed, stream, L->step, 1, regroup_, map, d);
  if (!regroup_) return requant_(g, a, q, sq, src, group_rows, L->seed, stream, L->step, 0, 0, map, d);
  dq t;
  FB_TRY(requant_(g, wt, q, sq, src, group_rows, L->seed, stream, L->step, 0, 0, map, &t));
  FB_TRY(regroup(g, a, L, &t, src->rows / group_rows, d));
  afree(wt);
  return FB_OK;
}

/* tcopy.cuh on rows x cols (as stored): in (BF16, FP32 or NVFP4 codes with sf, sdec), out; sa, sb: the scaling's
 * two outer scales (device FP32, 0: 1). */
static fb_status tcopy(fb_gpu_experts *g, const fb_kernel_spec *k, CUdeviceptr in, CUdeviceptr sf, CUdeviceptr sdec, size_t rows,
                       size_t cols, uint32_t signs, CUdeviceptr sa, CUdeviceptr sb, CUdeviceptr out) {
  const kent *e;
  FB_TRY(kget(g, k, NULL, &e));
  fb_kp_mem p;
  memset(&p, 0, sizeof p);
  p.in = in, p.src_scales = sf, p.src_s_dec = sdec, p.out = out, p.s_dec = sa, p.amax = sb, p.signs = signs;
  p.rows = (long long)rows, p.cols = (long long)cols;
  return run_mem(g, e, &p, (long long)rows, (long long)cols, 0);
}

/* The backward's row-wise operand of a BF16 or NVFP4 backward: Q(in) along the rows of a BF16 rows x cols matrix as q
 * says — BF16: the values themselves; NVFP4: quant_rows (a per-tensor scale: the amax kernel first). */
static fb_status op_rows(fb_gpu_experts *g, arena *a, const fb_qspec *q, CUdeviceptr in, size_t rows, size_t cols, uint32_t seed,
                         uint32_t stream, uint32_t step, dq *d) {
  if (q->format != FB_FMT_BF16) return quant_rows(g, a, q, 0, in, rows, cols, 0, seed, stream, step, d);
  memset(d, 0, sizeof *d);
  d->c = in, d->rows = rows, d->cols = cols, d->f = FB_FMT_BF16;
  return FB_OK;
}

/* The column-wise operand (model_experts.c's colwise): src (rows x cols: BF16 values, or NVFP4 with a tensor or row
 * outer scale, dequantized exactly) transposed, RHT-rht along the new rows, quantized as q along them: cols x rows.
 * BF16: one tcopy to BF16 (its rounding is qm_quantize's); NVFP4: tcopy to FP32, then quant_rows of the FP32 copy. */
static fb_status op_cols(fb_gpu_experts *g, arena *a, const fb_qspec *q, const dq *src, int rht, uint32_t signs, uint32_t seed,
                         uint32_t stream, uint32_t step, dq *d) {
  size_t rows = src->rows, cols = src->cols;
  int bf = q->format == FB_FMT_BF16;
  if (src->f != FB_FMT_BF16 && src->f != FB_FMT_NVFP4) return FB_ERR(FB_EINVAL, "experts gpu: a %s saved tensor in a BF16 / NVFP4 backward", fb_format_name(src->f));
  fb_kernel_spec k = sp_tcopy(g, src->f, src->orow ? FB_GRAN_TOKEN : FB_GRAN_TENSOR, 0, 1, rht, 0, bf);
  CUdeviceptr t;
  FB_TRY(aalloc(a, &t, (rows ? rows : 1) * cols * (bf ? 2 : 4)));
  if (rows) FB_TRY(tcopy(g, &k, src->c, src->s, src->o, rows, cols, signs, 0, 0, t));
  if (!bf) return quant_rows(g, a, q, 1, t, cols, rows, 0, seed, stream, step, d);
  memset(d, 0, sizeof *d);
  d->c = t, d->rows = cols, d->cols = rows, d->f = FB_FMT_BF16;
  return FB_OK;
}

/* a GEMM launch of the kernel e (kget's for the spec and fit) */
static fb_status gemm_run(fb_gpu_experts *g, const kent *e, fb_gemm_args *ga) {
  fb_gemm_cfg cfg;
  FB_TRY(fb_gemm_config(&e->spec, &e->v, &cfg));
  fb_kp_gemm kp;
  FB_TRY(fb_gemm_params(&cfg, ga, &kp));
  FB_TRY(prof_a(g, e->v.name));
  /* a persistent grid of one CTA an SM fills every SM (a wgmma CTA holds all registers): while an exchange is in flight,
     FOURBIT_GPU_COMM_SMS leaves SMs to NCCL's kernels; any grid computes the same tiles the same way */
  int leave = g->xbusy && g->comm_sms > 0 ? g->comm_sms : 0;
  if (g->pbusy && g->bpipe > leave) leave = g->bpipe; /* FOURBIT_GPU_BPIPE: beside the next chunk's B copy */
  const int sms = leave > 0 && leave < g->sms ? g->sms - leave : g->sms;
  FB_TRY(fb_gemm_launch(&e->k, &cfg, &kp, sms));
  return prof_b(g);
}
static fb_status gemm(fb_gpu_experts *g, const fb_kernel_spec *k, const gfit *f, fb_gemm_args *ga) {
  const kent *e;
  FB_TRY(kget(g, k, f, &e));
  return gemm_run(g, e, ga);
}
/* experts [e0, e0 + n) of a quantized weight w of `per` rows an expert (NVFP4 or MXFP8): codes, block scales and, with
 * one per expert, the outer scales */
static dq dq_experts(const dq *w, size_t per, size_t e0, size_t n) {
  const int nv = w->f == FB_FMT_NVFP4;
  dq sub = *w;
  sub.rows = n * per;
  sub.c = w->c + e0 * per * w->cols / (nv ? 2 : 1), sub.s = w->s + e0 * per * w->cols / (nv ? 16 : 32);
  if (nv && w->no > 1 && w->no * per == w->rows) sub.o = w->o + e0 * sizeof(float), sub.no = n;
  return sub;
}
/* experts a chunk of the weights' BF16 copies takes (dgrad_b, gemm_with_b): what fits BCHUNK_BYTES, or
 * FOURBIT_GPU_BCHUNK's */
#define BCHUNK_BYTES ((size_t)256 << 20)
static size_t bchunk_experts(const fb_gpu_experts *g, size_t bytes_per_expert) {
  size_t ce = g->bchunk ? (size_t)g->bchunk : BCHUNK_BYTES / (bytes_per_expert ? bytes_per_expert : 1);
  return ce < 1 ? 1 : ce;
}
/* a stream of the layer's own (non-blocking) and its n events, made at the first use: all of them or none (what names it
 * in an error) */
static fb_status side_stream(CUstream *st, CUevent *ev, int n, const char *what) {
  if (*st) return FB_OK;
  CUevent e[5] = {0};
  CUstream x = NULL;
  CUresult r = n > 5 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
  for (int i = 0; i < n && !r; ++i) r = fb_cu.EventCreate(&e[i], 0x2 /* CU_EVENT_DISABLE_TIMING */);
  if (!r) r = fb_cu.StreamCreate(&x, 0x1 /* CU_STREAM_NON_BLOCKING */);
  if (r) {
    for (int i = 0; i < 5; ++i)
      if (e[i]) fb_cu.EventDestroy(e[i]);
    return FB_ERR(FB_ECUDA, "experts gpu: %s: %s", what, fb_cu_errstr((int)r));
  }
  *st = x;
  memcpy(ev, e, (size_t)n * sizeof *e);
  return FB_OK;
}
/* a driver call of the B copies' pipeline, as a status */
static fb_status pcu(CUresult r) {
  return r ? FB_ERR(FB_ECUDA, "experts gpu: the B copies' stream: %s", fb_cu_errstr((int)r)) : FB_OK;
}
/* The chunks of a chunked GEMM: make(ctx, c, a, &b) queues chunk c's B copy into arena a (*b: where), run(ctx, c, b)
 * its GEMM. In turn (each copy given back once its GEMM is queued, so the next copy may take its block), or with
 * FOURBIT_GPU_BPIPE as bpipe_loop says; `bytes` is the largest chunk's copy. */
typedef fb_status (*chunk_make)(void *ctx, size_t c, arena *a, CUdeviceptr *b);
typedef fb_status (*chunk_run)(void *ctx, size_t c, CUdeviceptr b);
/* FOURBIT_GPU_BPIPE=k: the chunks of a chunked GEMM (gemm_with_b, dgrad_b) with each chunk's B copy made one chunk
 * ahead on the pipe stream g->ps, beside the previous chunk's GEMM on the layer's stream, which leaves k SMs to it
 * (gemm_run: a persistent wgmma grid holds every SM it runs on). Two buffers of `bytes` (the largest chunk's copy) are
 * taken from the pool first, on the layer's stream, and lent to make in turn (arena.into): make(ctx, c, a, &b) queues
 * chunk c's copy into the block a lends, run(ctx, c, buf) its GEMM. The pipe stream starts after everything the layer's stream
 * had queued (pev[0]); a copy waits for the GEMM that last read its buffer (pev[3 + b]); a GEMM waits for its copy
 * (pev[1 + b]). The last GEMM waits for the last copy, so when the loop returns the layer's stream is behind all of the
 * pipe stream's work and the buffers go back to the pool in stream order. The same kernels on the same inputs as in
 * turn: the same bytes. A failure synchronizes the pipe stream before the buffers go back. */
static fb_status bpipe_loop(fb_gpu_experts *g, size_t n, size_t bytes, chunk_make make, chunk_run run, void *ctx) {
  arena pb = {.g = g};
  CUdeviceptr buf[2] = {0, 0};
  fb_status rc = aalloc(&pb, &buf[0], bytes);
  if (rc == FB_OK) rc = aalloc(&pb, &buf[1], bytes);
  if (rc == FB_OK) rc = side_stream(&g->ps, g->pev, 5, "the B copies' stream");
  const CUstream ls = fb_cuda_stream();
  int started = 0;
  if (rc == FB_OK) {
    rc = pcu(fb_cu.EventRecord(g->pev[0], ls));
    if (rc == FB_OK) rc = pcu(fb_cu.StreamWaitEvent(g->ps, g->pev[0], 0));
    started = 1;
  }
  size_t issued = 0; /* chunk copies queued */
  for (size_t c = 0; c < n && rc == FB_OK; ++c) {
    for (; rc == FB_OK && issued < n && issued <= c + 1; ++issued) { /* this chunk's copy and the next one's */
      const int b = (int)(issued & 1);
      arena a = {.g = g, .into = buf[b], .into_n = bytes};
      CUdeviceptr out = 0;
      fb_cuda_set_stream(g->ps);
      if (issued >= 2) rc = pcu(fb_cu.StreamWaitEvent(g->ps, g->pev[3 + b], 0));
      if (rc == FB_OK) rc = make(ctx, issued, &a, &out);
      if (rc == FB_OK && out != buf[b]) rc = FB_ERR(FB_EINVAL, "experts gpu: a B copy that did not take its block");
      if (rc == FB_OK) rc = pcu(fb_cu.EventRecord(g->pev[1 + b], g->ps));
      fb_cuda_set_stream(ls);
    }
    const int b = (int)(c & 1);
    if (rc == FB_OK) rc = pcu(fb_cu.StreamWaitEvent(ls, g->pev[1 + b], 0));
    if (rc != FB_OK) break;
    g->pbusy = issued > c + 1; /* the next chunk's copy runs beside this GEMM */
    rc = run(ctx, c, buf[b]);
    g->pbusy = 0;
    if (rc == FB_OK) rc = pcu(fb_cu.EventRecord(g->pev[3 + b], ls));
  }
  if (rc != FB_OK && started) fb_cu.StreamSynchronize(g->ps);
  afree(&pb);
  return rc;
}
static fb_status chunks_run(fb_gpu_experts *g, size_t n, size_t bytes, chunk_make make, chunk_run run, void *ctx) {
  if (g->bpipe && fb_cu.StreamCreate) return bpipe_loop(g, n, bytes, make, run, ctx);
  for (size_t c = 0; c < n; ++c) {
    arena ca = {.g = g};
    CUdeviceptr b = 0;
    fb_status rc = make(ctx, c, &ca, &b);
    if (rc == FB_OK) rc = run(ctx, c, b);
    afree(&ca); /* in stream order: the next chunk's copy may take the block at once */
    FB_TRY(rc);
  }
  return FB_OK;
}
/* chunk c of E experts, ce a chunk: its first expert *e0 and its count */
static size_t chunk_of(size_t c, size_t ce, size_t E, size_t *e0) {
  *e0 = c * ce;
  return ce < E - *e0 ? ce : E - *e0;
}

/* a chunked GEMM's arguments for the chunk of experts [e0, e0 + n) with B at b (its rows: the offsets from e0 on) */
static fb_gemm_args chunk_args(const fb_gemm_args *ga, size_t e0, size_t n, CUdeviceptr b) {
  fb_gemm_args ch = *ga;
  ch.offsets = ga->offsets + e0 * sizeof(long long), ch.experts = (int)n, ch.b = b;
  return ch;
}
/* gemm_with_b's chunks for chunks_run: chunk c's BF16 copy of B, and its GEMM over the rows of its experts */
typedef struct {
  fb_gpu_experts *g;
  const kent *e;
  const dq *B;
  const fb_gemm_args *ga;
  size_t E, per, ce;
} wb_ctx;
static fb_status wb_make(void *p, size_t c, arena *a, CUdeviceptr *b) {
  const wb_ctx *x = p;
  size_t e0;
  const size_t n = chunk_of(c, x->ce, x->E, &e0);
  const dq sub = dq_experts(x->B, x->per, e0, n);
  return bf16copy(x->g, a, &sub, b);
}
static fb_status wb_run(void *p, size_t c, CUdeviceptr b) {
  const wb_ctx *x = p;
  size_t e0;
  const size_t n = chunk_of(c, x->ce, x->E, &e0);
  const dq sub = dq_experts(x->B, x->per, e0, n);
  fb_gemm_args ch = chunk_args(x->ga, e0, n, b);
  if (x->ga->b_outer) ch.b_outer = x->ga->b_outer + (sub.o - x->B->o); /* per-expert S_dec: the chunk's */
  return gemm_run(x->g, x->e, &ch);
}
/* with B (E experts of N x K, quantized or BF16) as the kernel picked multiplies it (gemm_b); a copy goes in arena a.
 * Where the kernel takes B's exact BF16 copy of a quantized B (the forward's BF16-product variants), the copy is made a
 * chunk of experts at a time (bchunk_experts), each chunk's GEMM over the rows of its experts, so that the copy of the
 * whole weight never exists (W13's is 1.9 GiB at S1). The copy is exact: the result does not depend on the chunking. */
static fb_status gemm_with_b(fb_gpu_experts *g, arena *a, const fb_kernel_spec *k, const gfit *f, const dq *B, fb_gemm_args *ga) {
  const kent *e;
  FB_TRY(kget(g, k, f, &e));
  const size_t E = (size_t)ga->experts, per = E ? B->rows / E : 0;
  const size_t ce = bchunk_experts(g, per * B->cols * 2);
  if ((takes_q_b(e) && e->spec.src.format != FB_FMT_BF16) || B->f == FB_FMT_BF16 || ce >= E || !per || B->rows % E) {
    FB_TRY(gemm_b(g, a, e, B, ga));
    return gemm_run(g, e, ga);
  }
  wb_ctx x = {g, e, B, ga, E, per, ce};
  return chunks_run(g, (E + ce - 1) / ce, ce * per * B->cols * 2, wb_make, wb_run, &x);
}

/* dgrad_b's chunks for chunks_run: chunk c's requantized BF16 copy (its SR map in the whole weight), and its GEMM */
typedef struct {
  fb_gpu_experts *g;
  const kent *ge;
  const fb_moe_layer *L;
  const fb_qspec *q, *sq;
  const dq *src;
  const fb_gemm_args *ga;
  const srmap *whole;
  size_t E, G, ce;
  uint32_t stream;
} db_ctx;
static fb_status db_make(void *p, size_t c, arena *a, CUdeviceptr *b) {
  const db_ctx *x = p;
  size_t e0;
  const size_t n = chunk_of(c, x->ce, x->E, &e0);
  const dq sub = dq_experts(x->src, x->G, e0, n);
  srmap m = *x->whole;
  m.col0 += (long long)(e0 * x->G);
  dq B;
  FB_TRY(requant_(x->g, a, x->q, x->sq, &sub, x->G, x->L->seed, x->stream, x->L->step, 1, 1, &m, &B));
  *b = B.c;
  return FB_OK;
}
static fb_status db_run(void *p, size_t c, CUdeviceptr b) {
  const db_ctx *x = p;
  size_t e0;
  const size_t n = chunk_of(c, x->ce, x->E, &e0);
  fb_gemm_args ch = chunk_args(x->ga, e0, n, b);
  return gemm_run(x->g, x->ge, &ch);
}
/* The dgrad GEMM (kernel ge, arguments ga but B) of a saved weight src (E experts of G rows: w2 G = d, w13 G = 2f), whose
 * B is src requantized down its other axis and regrouped per expert (b_requant). Where ge takes B's exact BF16 copy
 * (requant_kbf16) the copy is made a chunk of experts at a time: the chunk's copy, the GEMM over the rows of its experts
 * (the offsets from its first expert on), the copy given back to the pool before the next chunk takes it again. A chunk
 * is bchunk_experts'. At S1 W13's copy is 1.9 GiB whole, 0.23 GiB a chunk.
 * Every chunk draws the SR bits of its elements in the whole transposed weight of all the layer's experts (the map:
 * the rank's first expert too), so the result is the same however the experts are chunked or spread over ranks. */
static fb_status dgrad_b(fb_gpu_experts *g, arena *ph, arena *wt, const kent *ge, const fb_moe_layer *L, const gsaved *s,
                         const fb_qspec *q, const fb_qspec *sq, const dq *src, size_t G, uint32_t stream, fb_gemm_args *ga) {
  const size_t E = src->rows / G, cols = src->cols;
  const srmap whole = {0, (long long)((size_t)L->experts * G), (long long)((size_t)s->e0 * G)};
  const int kb = !takes_q_b(ge) && (sq->format == FB_FMT_NVFP4 || sq->format == FB_FMT_MXFP8);
  const size_t ce = bchunk_experts(g, G * cols * 2);
  if (!kb || ce >= E) { /* one piece; the map only where this rank's experts are not all the layer's (expert parallelism) */
    dq B;
    FB_TRY(b_requant(g, ph, wt, ge, L, q, sq, src, G, 1, stream, s->N > 1 ? &whole : NULL, &B));
    FB_TRY(gemm_b(g, ph, ge, &B, ga));
    return gemm_run(g, ge, ga);
  }
  db_ctx x = {g, ge, L, q, sq, src, ga, &whole, E, G, ce, stream};
  return chunks_run(g, (E + ce - 1) / ce, ce * G * cols * 2, db_make, db_run, &x);
}

/* ---- checks ------------------------------------------------------------------------------------------------- */
/* What the GPU path runs (model_experts.c defines all of it): a forward in NVFP4 (activations per token or per tensor,
 * 1x16 blocks; weights per expert or per tensor, 1x16 or 16x16 blocks), MXFP8 or BF16; an MXFP8 backward after an
 * NVFP4 / MXFP8 forward (requant kernels), or a BF16 / NVFP4 backward (per-tensor outer scales, 1x16 blocks, wgrad_rht 0
 * or 16) after an NVFP4 forward with per-tensor / per-token activations and per-tensor weights, or after a BF16 one;
 * dispatch in the forward's format (quantized before sending) or BF16 (quantized on arrival); combine S2F6 (RHT-32 or
 * none) or BF16. */
static fb_status check_prec(const fb_layer_prec *p, int layer) {
  const fb_qspec *a = &p->fwd_act, *w = &p->fwd_weight, *bg = &p->bwd_grad, *bs = &p->bwd_saved;
  fb_format F = a->format, B = bg->format;
  if (w->format != F) return FB_ERR(FB_EINVAL, "experts gpu: layer %d: fwd.act %s and fwd.weight %s differ", layer, fb_format_name(F), fb_format_name(w->format));
  if (F != FB_FMT_NVFP4 && F != FB_FMT_MXFP8 && F != FB_FMT_BF16)
    return FB_ERR(FB_EINVAL, "experts gpu: layer %d: a %s forward is not wired on the GPU (NVFP4, MXFP8 or BF16)", layer, fb_format_name(F));
  if (F == FB_FMT_NVFP4 && a->outer == FB_GRAN_EXPERT)
    return FB_ERR(FB_EINVAL, "experts gpu: layer %d: fwd.act NVFP4 with a %s outer scale (the GPU path takes per token or per tensor)", layer, fb_gran_name(a->outer));
  if (w->format == FB_FMT_NVFP4 && w->outer == FB_GRAN_TOKEN)
    return FB_ERR(FB_EINVAL, "experts gpu: layer %d: fwd.weight NVFP4 per token", layer);
  if (a->two_d) return FB_ERR(FB_EINVAL, "experts gpu: layer %d: 16x16 NVFP4 blocks on activations are not wired on the GPU", layer);
  if (a->e5m2 || w->e5m2 || bg->e5m2 || bs->e5m2) return FB_ERR(FB_EINVAL, "experts gpu: layer %d: E5M2", layer);
  if (bs->format != B)
    return FB_ERR(FB_EINVAL, "experts gpu: layer %d: bwd.grad %s and bwd.saved %s differ", layer, fb_format_name(B), fb_format_name(bs->format));
  if (B == FB_FMT_MXFP8) {
    if (F == FB_FMT_BF16) return FB_ERR(FB_EINVAL, "experts gpu: layer %d: an MXFP8 backward after a BF16 forward is not wired on the GPU", layer);
    if (w->two_d) return FB_ERR(FB_EINVAL, "experts gpu: layer %d: 16x16 NVFP4 weights with an MXFP8 backward (no requantize template)", layer);
    if (p->wgrad_rht) return FB_ERR(FB_EINVAL, "experts gpu: layer %d: bwd.wgrad_rht %d with an MXFP8 backward is not wired on the GPU", layer, p->wgrad_rht);
  } else if (B == FB_FMT_NVFP4 || B == FB_FMT_BF16) {
    if (F == FB_FMT_MXFP8) return FB_ERR(FB_EINVAL, "experts gpu: layer %d: a %s backward after an MXFP8 forward is not wired on the GPU", layer, fb_format_name(B));
    if (F == FB_FMT_NVFP4 && w->outer != FB_GRAN_TENSOR)
      return FB_ERR(FB_EINVAL, "experts gpu: layer %d: a %s backward takes NVFP4 weights with a per-tensor outer scale (not %s)", layer, fb_format_name(B), fb_gran_name(w->outer));
    if (B == FB_FMT_NVFP4 && (bg->outer != FB_GRAN_TENSOR || bs->outer != FB_GRAN_TENSOR || bg->two_d || bs->two_d))
      return FB_ERR(FB_EINVAL, "experts gpu: layer %d: the GPU NVFP4 backward takes per-tensor outer scales and 1x16 blocks", layer);
    if (p->wgrad_rht != 0 && p->wgrad_rht != 16)
      return FB_ERR(FB_EINVAL, "experts gpu: layer %d: bwd.wgrad_rht %d (the GPU BF16 / NVFP4 backward takes 0 or 16)", layer, p->wgrad_rht);
  } else {
    return FB_ERR(FB_EINVAL, "experts gpu: layer %d: a %s backward is not wired on the GPU (MXFP8, NVFP4 or BF16)", layer, fb_format_name(B));
  }
  if (!((p->combine.format == FB_FMT_S2F6 && (!p->combine.rht || p->combine.rht == 32)) || (p->combine.format == FB_FMT_BF16 && !p->combine.rht)))
    return FB_ERR(FB_EINVAL, "experts gpu: layer %d: the GPU combine is S2F6 (RHT-32 or none) or BF16, not %s", layer, fb_format_name(p->combine.format));
  if (p->dispatch != F && p->dispatch != FB_FMT_BF16)
    return FB_ERR(FB_EINVAL, "experts gpu: layer %d: dispatch %s is neither the forward's format nor BF16", layer, fb_format_name(p->dispatch));
  if (p->dispatch == FB_FMT_NVFP4 && a->outer != FB_GRAN_TOKEN)
    return FB_ERR(FB_EINVAL, "experts gpu: layer %d: an NVFP4 dispatch takes per-token outer scales (a per-tensor one: dispatch = \"bf16\")", layer);
  return FB_OK;
}

/* every kernel of one layer precision (gen/specs.c fb_gpu_layer_kernels, which the plan lists too), so that none
 * compiles inside a step */
static fb_status need_all(fb_gpu_experts *g, const fb_layer_prec *p) {
  const fb_model *M = &g->o.recipe->model;
  fb_layer_kernel lk[FB_GPU_LAYER_MAXK];
  int n = 0;
  FB_TRY(fb_gpu_layer_kernels(p, M, lk, FB_GPU_LAYER_MAXK, &n));
  for (int i = 0; i < n; ++i) {
    const kent *e;
    fb_kernel_spec k = lk[i].k;
    k.top_k = M->top_k, k.experts = M->experts;
    k = from_plan(g, k);
    gfit f = {lk[i].gemm, lk[i].mode, lk[i].M, lk[i].N, lk[i].K};
    FB_TRY(kget(g, &k, lk[i].gemm ? &f : NULL, &e));
  }
  return FB_OK;
}

/* ---- forward -------------------------------------------------------------------------------------------------- */
static void gpu_release(void *ctx, fb_moe_layer *L) {
  (void)ctx;
  saved_free(L->saved);
  L->saved = NULL;
}

/* The communicator of a layer: L->comm (N ranks) must be the one g was created with (its NCCL communicator); without
 * one, g's own (one rank). */
static fb_status layer_comm(fb_gpu_experts *g, const fb_moe_layer *L, fb_comm **c) {
  *c = NULL;
  if (g->o.compile_only) return FB_ERR(FB_EINVAL, "experts gpu: created with compile_only: the layer does not run");
  if (L->comm && L->comm != g->comm)
    return FB_ERR(FB_EINVAL, "experts gpu: layer %d: its communicator is not the one the GPU expert layer was created with", L->layer);
  if (!L->comm && fb_comm_size(g->comm) != 1)
    return FB_ERR(FB_EINVAL, "experts gpu: layer %d: no communicator, but the GPU expert layer runs on %d ranks", L->layer,
                  fb_comm_size(g->comm));
  if (L->experts % fb_comm_size(g->comm))
    return FB_ERR(FB_EINVAL, "experts gpu: %d experts do not split over %d ranks", L->experts, fb_comm_size(g->comm));
  *c = g->comm;
  return FB_OK;
}

/* Rows between the sources and the owners, one all-to-all-v per payload plane (bytes b[q] a row, 0: no plane), on the
 * layer's stream: back = 0 sends s->srows[p] rows to rank p and receives s->rrows[q] from rank q (consecutive in rank
 * order in both buffers), back = 1 the reverse. *bytes (may be NULL) and L->traffic->remote get the bytes sent. */
static fb_status xchg(fb_gpu_experts *g, fb_moe_layer *L, gsaved *s, int back, const CUdeviceptr *snd, const CUdeviceptr *rcv,
                      const size_t *b, int nplanes, double *bytes) {
  int N = s->N;
  const size_t *out = back ? s->rrows : s->srows, *in = back ? s->srows : s->rrows;
  size_t *a = malloc(4 * (size_t)N * sizeof *a);
  if (!a) return FB_ERR(FB_ENOMEM, "experts gpu: exchange");
  size_t *sc = a, *sd = a + N, *rc_ = a + 2 * N, *rd = a + 3 * N;
  double sent = 0, remote = 0;
  fb_status rc = FB_OK;
  for (int q = 0; q < nplanes && rc == FB_OK; ++q) {
    if (!b[q]) continue;
    size_t so = 0, ro = 0;
    for (int p = 0; p < N; ++p) {
      sc[p] = out[p] * b[q], sd[p] = so, so += sc[p];
      rc_[p] = in[p] * b[q], rd[p] = ro, ro += rc_[p];
      sent += (double)sc[p];
      if (p != s->me) remote += (double)sc[p];
    }
    rc = prof_a(g, "exchange (all-to-all-v)");
    if (rc == FB_OK)
      rc = fb_comm_dev_alltoallv(g->comm, (const void *)(uintptr_t)snd[q], sc, sd, (void *)(uintptr_t)rcv[q], rc_, rd,
                                 (void *)fb_cuda_stream());
    if (rc == FB_OK) rc = prof_b(g);
  }
  free(a);
  if (bytes) *bytes += sent;
  if (L->traffic) L->traffic->remote += remote;
  return rc;
}

/* Rows grouped by an index (the permute kernel with top_k 1): n rows of a payload (permute format f: BF16, NVFP4 with
 * its per-row outer scale, MXFP8 = also the S2F6 combine payload's layout), idx[i] (int32, device) the group of row i
 * in [0, ng) or -1 (dropped); out gets the rows by group (stable), groups padded to tile rows (zero rows). offsets
 * (long long ng + 1, device) and row_of (int32 n, device; the out row of each row) may be 0. */
static fb_status regather(fb_gpu_experts *g, arena *a, const fb_moe_layer *L, fb_format f, size_t cols, CUdeviceptr idx, size_t n,
                          int ng, int tile, const CUdeviceptr *in, const CUdeviceptr *out, CUdeviceptr offsets, CUdeviceptr row_of) {
  if (!offsets) FB_TRY(aalloc(a, &offsets, ((size_t)ng + 1) * 8));
  if (!n) { /* nothing to place (no launch of zero rows) */
    CU_CHECK(s_zero(offsets, ((size_t)ng + 1) * 8));
    return FB_OK;
  }
  fb_qspec q = {0};
  q.format = f, q.outer = FB_GRAN_TOKEN;
  const kent *e;
  fb_kernel_spec k = sp_permute(g, &q, L->top_k, L->experts);
  FB_TRY(kget(g, &k, NULL, &e));
  size_t maxr = fb_permute_max_rows(n, 1, ng, tile), nch = (n + FB_PERMUTE_CHUNK - 1) / FB_PERMUTE_CHUNK;
  CUdeviceptr dchunk, dcounts, dtok;
  FB_TRY(aalloc(a, &dchunk, nch * (size_t)ng * 4));
  FB_TRY(aalloc(a, &dcounts, (size_t)ng * 4));
  FB_TRY(aalloc(a, &dtok, maxr * 4));
  if (!row_of) FB_TRY(aalloc(a, &row_of, n * 4));
  fb_kp_moe pm;
  memset(&pm, 0, sizeof pm);
  pm.topk_idx = idx, pm.chunk_counts = dchunk, pm.counts = dcounts, pm.offsets = offsets, pm.row_of = row_of, pm.token_of = dtok;
  pm.in = in[0], pm.in_scales = f == FB_FMT_BF16 ? 0 : in[1], pm.in_outer = f == FB_FMT_NVFP4 ? in[2] : 0;
  pm.out = out[0], pm.out_scales = f == FB_FMT_BF16 ? 0 : out[1], pm.out_outer = f == FB_FMT_NVFP4 ? out[2] : 0;
  pm.rows = (long long)n, pm.cols = (long long)cols, pm.experts = ng, pm.top_k = 1, pm.tile = tile;
  for (pm.pass = 0; pm.pass < 4; ++pm.pass) FB_TRY(run_moe(g, e, &pm, (long long)n, (long long)cols));
  return FB_OK;
}

/* What xchg counts (bytes sent, to other ranks) for an exchange that one rank does not make (s->direct). */
static void xcount(fb_moe_layer *L, const gsaved *s, int back, const size_t *b, int nplanes, double *bytes) {
  const size_t *out = back ? s->rrows : s->srows;
  double sent = 0, remote = 0;
  for (int q = 0; q < nplanes; ++q) {
    if (!b[q]) continue;
    for (int p = 0; p < s->N; ++p) {
      sent += (double)(out[p] * b[q]);
      if (p != s->me) remote += (double)(out[p] * b[q]);
    }
  }
  if (bytes) *bytes += sent;
  if (L->traffic) L->traffic->remote += remote;
}

/* The padding rows of the owner's layout (rowbytes a row) set to zero: a memset per expert whose rows are not a whole
 * number of tiles (an expert's padding follows its rows; an empty expert has none), or one of the whole buffer where
 * that would take more than 64. */
static fb_status zero_padding(const gsaved *s, size_t E, CUdeviceptr buf, size_t rowbytes) {
  long long *a = malloc(2 * ((size_t)s->nE + 1) * sizeof *a), *b;
  if (!a) return FB_ERR(FB_ENOMEM, "experts gpu: padding rows");
  b = a + s->nE + 1;
  int nr = 0;
  for (int j = 0; j < s->nE; ++j) {
    long long g = 0;
    for (int q = 0; q < s->N; ++q) g += s->cnt[(size_t)q * E + (size_t)(s->e0 + j)];
    if (s->off[j] + g < s->off[j + 1]) a[nr] = s->off[j] + g, b[nr++] = s->off[j + 1];
  }
  CUresult r = 0;
  if (nr > 64) r = s_zero(buf, s->R * rowbytes);
  else
    for (int i = 0; i < nr && !r; ++i) r = s_zero(buf + (size_t)a[i] * rowbytes, (size_t)(b[i] - a[i]) * rowbytes);
  free(a);
  if (r) return FB_ERR(FB_ECUDA, "experts gpu: padding rows: %s", fb_cu_errstr((int)r));
  return FB_OK;
}

/* Routing of every rank from the allgathered counts: rows to and from each rank, the owner's padded layout, and (with
 * upload) the owner's two index arrays, uploaded in one copy. */
static fb_status plan_rows(arena *m, gsaved *s, size_t E, int upload) {
  int N = s->N, nE = s->nE, e0 = s->e0, me = s->me;
  const int32_t *cnt = s->cnt;
  s->Rs = s->Rr = 0;
  for (int p = 0; p < N; ++p) s->srows[p] = s->rrows[p] = 0;
  for (int q = 0; q < N; ++q)
    for (size_t e = 0; e < E; ++e) {
      int owner = (int)e / nE;
      size_t c = (size_t)cnt[(size_t)q * E + e];
      if (q == me) s->srows[owner] += c, s->Rs += c;
      if (owner == me) s->rrows[q] += c, s->Rr += c;
    }
  s->off[0] = 0;
  for (int j = 0; j < nE; ++j) {
    size_t g = 0;
    for (int q = 0; q < N; ++q) g += (size_t)cnt[(size_t)q * E + (size_t)(e0 + j)];
    s->off[j + 1] = s->off[j] + (long long)((g + PAD - 1) / PAD * PAD);
  }
  s->R = (size_t)s->off[nE];
  s->g0 = s->Rg = 0; /* one rank's layout: every expert's rows from all sources, padded the same way */
  for (size_t e = 0; e < E; ++e) {
    size_t t = 0;
    for (int q = 0; q < N; ++q) t += (size_t)cnt[(size_t)q * E + e];
    t = (t + PAD - 1) / PAD * PAD;
    if ((int)e < e0) s->g0 += t;
    s->Rg += t;
  }
  if (!upload) return FB_OK;
  int32_t *ridx = malloc((s->Rr + s->R + 1) * 4), *oidx = ridx ? ridx + s->Rr : NULL;
  fb_status rc = FB_OK;
  if (!ridx) return FB_ERR(FB_ENOMEM, "experts gpu: routing");
  /* received rows: by source rank, then expert, then token; the owner's rows of expert j: source 0's, then source
   * 1's, ... (the global token order: rank q holds global tokens [q T, (q+1) T)), then padding */
  size_t k = 0;
  for (int q = 0; q < N; ++q)
    for (int j = 0; j < nE; ++j)
      for (int32_t i = 0; i < cnt[(size_t)q * E + (size_t)(e0 + j)]; ++i) ridx[k++] = j;
  for (size_t r = 0; r < s->R; ++r) oidx[r] = -1;
  for (int j = 0; j < nE; ++j) {
    size_t r = (size_t)s->off[j];
    for (int q = 0; q < N; ++q)
      for (int32_t i = 0; i < cnt[(size_t)q * E + (size_t)(e0 + j)]; ++i) oidx[r++] = q;
  }
  FB_TRY_GOTO(up(m, &s->d_ridx, ridx, (s->Rr + s->R) * 4), out); /* one synchronous copy: ridx, then oidx */
  s->d_oidx = s->d_ridx + s->Rr * 4;
out:
  free(ridx);
  return rc;
}

/* The forward on device tensors (fb_gpu_experts_forward_dev). Host synchronizations: the row counts (one rank, s->direct:
 * the only one), then with the exchange the owner's index arrays (one synchronous copy up). */
/* ---- the forward on device tensors: one function per phase, fwd_dev the list of them ---------------------------- */
/* The layer's exchange stream g->xs: an exchange queued there (xs_begin .. xs_end) starts after everything the layer's
 * stream had queued before it (event xev[0]) and the layer's stream waits for its end (xev[1]) at xs_join. The buffers
 * it reads and writes must stay allocated until that wait, and no other NCCL call may be issued in between (one NCCL
 * kernel of the communicator at a time). The stream and its two events are made at the first use, all three or none. */
static fb_status xs_begin(fb_gpu_experts *g, CUstream *ls) {
  FB_TRY(side_stream(&g->xs, g->xev, 2, "the exchange stream"));
  *ls = fb_cuda_stream();
  CU_CHECK(fb_cu.EventRecord(g->xev[0], *ls));
  CU_CHECK(fb_cu.StreamWaitEvent(g->xs, g->xev[0], 0));
  fb_cuda_set_stream(g->xs); /* the exchange's launches, its NCCL calls and its profile marks go to xs */
  return FB_OK;
}
/* back to the layer's stream ls after the exchange (its status rc): its end recorded and *async set, or, if it failed,
 * nothing of it left running */
static fb_status xs_end(fb_gpu_experts *g, CUstream ls, fb_status rc, int *async) {
  fb_cuda_set_stream(ls);
  if (rc == FB_OK) {
    CUresult r = fb_cu.EventRecord(g->xev[1], g->xs);
    if (r) rc = FB_ERR(FB_ECUDA, "experts gpu: an exchange's event: %s", fb_cu_errstr((int)r));
  }
  if (rc != FB_OK) fb_cu.StreamSynchronize(g->xs);
  else *async = 1, g->xbusy = 1;
  return rc;
}
/* the layer's stream waits for the exchange in flight (if async) */
static fb_status xs_join(fb_gpu_experts *g, int async) {
  g->xbusy = 0;
  if (async) CU_CHECK(fb_cu.StreamWaitEvent(fb_cuda_stream(), g->xev[1], 0));
  return FB_OK;
}
/* after an error: the exchange in flight (if async) ends before its buffers go back to the pool */
static void xs_abandon(fb_gpu_experts *g, int async) {
  if (async) fb_cu.StreamSynchronize(g->xs), g->xbusy = 0;
}
static fb_status xchg(fb_gpu_experts *g, fb_moe_layer *L, gsaved *s, int back, const CUdeviceptr *snd, const CUdeviceptr *rcv,
                      const size_t *b, int nplanes, double *bytes);
/* xchg on the exchange stream when FOURBIT_GPU_OVERLAP is at least level (and the driver makes streams; *async = 1),
 * else on the layer's stream (*async = 0) */
static fb_status xchg_side(fb_gpu_experts *g, int level, fb_moe_layer *L, gsaved *s, int back, const CUdeviceptr *snd,
                           const CUdeviceptr *rcv, const size_t *b, int nplanes, double *bytes, int *async) {
  *async = 0;
  if (g->overlap < level || !fb_cu.StreamCreate) return xchg(g, L, s, back, snd, rcv, b, nplanes, bytes);
  CUstream ls = NULL;
  FB_TRY(xs_begin(g, &ls));
  return xs_end(g, ls, xchg(g, L, s, back, snd, rcv, b, nplanes, bytes), async);
}

typedef struct {
  fb_gpu_experts *g;
  fb_moe_layer *L;
  const fb_gpu_layer_io *io;
  const fb_layer_prec *p;
  fb_comm *c;
  gsaved *s;
  arena *m, *tmp;               /* the saved state's memory; this call's scratch */
  size_t T, D, F, E, K, N, nE;  /* tokens, d_model, d_ff, experts, top-k, ranks, experts per rank */
  uint32_t seed, step;
  int32_t *mine;                /* host: this rank's rows per expert */
  CUdeviceptr yq, ye;           /* the combine payload: S2F6 codes and E8M0 scales, or BF16 rows */
  int cbf;                      /* a BF16 combine */
  size_t yrb;                   /* its bytes a row */
  /* the dispatch between fwd_dispatch (the exchange queued) and fwd_arrive (the owner's rows from it) */
  size_t b[3];                  /* the payload planes' bytes a row */
  CUdeviceptr xr[3], xo[3];     /* received rows (by source); the owner's rows (X's planes) */
  fb_format tf;                 /* the payload's format */
  int per_tok, qarr, xasync;    /* NVFP4 per-token outer scales; BF16 rows quantized on arrival; on the exchange stream */
  arena *xa;                    /* where the owner's rows live */
} fwd_ctx;

/* dispatch: the tokens quantized (or BF16), gathered by expert into the owner's layout (X), exchanged when N > 1 */
static fb_status fwd_dispatch(fwd_ctx *x) {
  fb_gpu_experts *g = x->g;
  fb_moe_layer *L = x->L;
  const fb_gpu_layer_io *io = x->io;
  const fb_layer_prec *p = x->p;
  gsaved *s = x->s;
  arena *m = x->m;
  fb_comm *c = x->c;
  size_t T = x->T, D = x->D, E = x->E, K = x->K, nE = x->nE;
  uint32_t seed = x->seed, step = x->step;
  size_t maxs = fb_permute_max_rows(T, L->top_k, L->experts, s->direct ? PAD : 1);
  size_t nch = (T * K + FB_PERMUTE_CHUNK - 1) / FB_PERMUTE_CHUNK;
  int32_t *mine = x->mine;
  CUdeviceptr dchunk, dcounts, dtok, dsoff = 0;
  FB_TRY(aalloc(x->tmp, &dchunk, nch * E * 4));
  FB_TRY(aalloc(x->tmp, &dcounts, E * 4));
  FB_TRY(aalloc(x->tmp, &dtok, (maxs ? maxs : 1) * 4));
  if (!s->direct) FB_TRY(aalloc(x->tmp, &dsoff, (E + 1) * 8));
  /* source: quantize the tokens, then the permutation (no padding) gathers the payload rows by expert, then token:
   * the rows for rank p are one contiguous range of each plane. One rank (direct): the permutation pads each expert's
   * rows to the tile and gathers them straight into the owner's layout (rows by expert, then token: the same order) */
  g->phase = "fwd dispatch";
  dq tok;
  size_t b[3];
  CUdeviceptr xs[3] = {0, 0, 0}, xr[3] = {0, 0, 0};
  /* a BF16 dispatch sends BF16 rows, quantized as fwd.act says by their owner on arrival (one rank: the codes of the
     CPU path, which quantizes the tokens: the rows are the tokens and zero rows; per tensor, the amax of the owner's
     rows is that of the tokens) */
  int bfd = p->dispatch == FB_FMT_BF16, qarr = bfd && p->fwd_act.format != FB_FMT_BF16;
  fb_qspec dsp = p->fwd_act;
  if (bfd) {
    memset(&dsp, 0, sizeof dsp);
    memset(&tok, 0, sizeof tok);
    tok.c = io->x, tok.rows = T, tok.cols = D, tok.f = FB_FMT_BF16;
  } else {
    srmap mt; /* this rank's tokens are tokens [me T, (me + 1) T) of one rank's */
    FB_TRY(quant_rows_m(g, x->tmp, &p->fwd_act, 0, io->x, T, D, 0, seed, fb_moe_stream(L->layer, FB_MOE_OP_X), step,
                        map_rows(s->N, (size_t)s->me * T, D, &mt), &tok));
  }
  int per_tok = tok.f == FB_FMT_NVFP4;
  FB_TRY(fb_payload_planes(tok.f, per_tok, D, b));
  dq *X = &s->X;
  arena *xa = qarr ? x->tmp : m; /* BF16 rows quantized on arrival are scratch */
  CUdeviceptr xo[3] = {0, 0, 0}; /* the owner's rows: X's planes */
  memset(X, 0, sizeof *X);
  if (s->direct) {
    for (int q = 0; q < 3; ++q)
      if (b[q]) FB_TRY(aalloc(xa, &xo[q], (maxs ? maxs : 1) * b[q]));
    FB_TRY(aalloc(m, &s->d_off, (nE + 1) * 8));
  } else {
    for (int q = 0; q < 3; ++q)
      if (b[q]) FB_TRY(aalloc(x->tmp, &xs[q], (maxs ? maxs : 1) * b[q]));
  }
  {
    const kent *e;
    fb_kernel_spec k = sp_permute(g, &dsp, L->top_k, L->experts);
    FB_TRY(kget(g, &k, NULL, &e));
    const CUdeviceptr *po = s->direct ? xo : xs;
    fb_kp_moe pm;
    memset(&pm, 0, sizeof pm);
    pm.topk_idx = io->topk_idx, pm.chunk_counts = dchunk, pm.counts = dcounts, pm.offsets = s->direct ? s->d_off : dsoff;
    pm.row_of = s->d_rowof, pm.token_of = dtok, pm.in = tok.c, pm.in_scales = tok.s, pm.in_outer = per_tok ? tok.o : 0;
    pm.out = po[0], pm.out_scales = po[1], pm.out_outer = po[2];
    pm.rows = (long long)T, pm.cols = (long long)D, pm.experts = L->experts, pm.top_k = L->top_k, pm.tile = s->direct ? PAD : 1;
    for (pm.pass = 0; pm.pass < 4; ++pm.pass) FB_TRY(run_moe(g, e, &pm, (long long)T, (long long)D));
  }
  /* the counts: this rank's rows per expert to the host (a synchronization: R sizes the buffers and the GEMMs), every
   * rank's over the host mesh */
  CU_CHECK(s_dtoh(mine, dcounts, E * 4));
  FB_TRY(fb_comm_allgather(c, mine, E * 4, s->cnt));
  FB_TRY(plan_rows(m, s, E, !s->direct));
  size_t R = s->R, Rr = s->Rr, Rs = s->Rs;
  if (L->traffic) {
    fb_ep_traffic *x = L->traffic;
    x->rows += (double)Rs, x->bf16 += (double)Rs * 2.0 * (double)D, x->dispatch_outer += (double)Rs * (double)b[2];
    if (per_tok) x->nvfp4 += (double)Rs * (double)(b[0] + b[1] + b[2]), x->nvfp4_bf16 += (double)Rs * 2.0 * (double)D;
  }
  (void)R;
  memcpy(x->b, b, sizeof b), memcpy(x->xo, xo, sizeof xo);
  x->tf = tok.f, x->per_tok = per_tok, x->qarr = qarr, x->xa = xa, x->xasync = 0;
  if (s->direct) {
    xcount(L, s, 0, b, 3, L->traffic ? &L->traffic->dispatch : NULL);
    return FB_OK;
  }
  /* exchange: plane by plane (FOURBIT_GPU_OVERLAP=2: on the exchange stream, beside fwd_weights), then fwd_arrive */
  for (int q = 0; q < 3; ++q)
    if (b[q]) FB_TRY(aalloc(x->tmp, &xr[q], (Rr ? Rr : 1) * b[q]));
  memcpy(x->xr, xr, sizeof xr);
  return xchg_side(g, 2, L, s, 0, xs, xr, b, 3, L->traffic ? &L->traffic->dispatch : NULL, &x->xasync);
}

/* the owner's rows of the dispatch: after the exchange (waited for when it ran on the exchange stream), the received
 * rows grouped per expert, padded as one rank has them; X; BF16 rows quantized on arrival */
static fb_status fwd_arrive(fwd_ctx *x) {
  fb_gpu_experts *g = x->g;
  fb_moe_layer *L = x->L;
  const fb_layer_prec *p = x->p;
  gsaved *s = x->s;
  arena *m = x->m, *xa = x->xa;
  size_t D = x->D, nE = x->nE, R = s->R, Rr = s->Rr;
  uint32_t seed = x->seed, step = x->step;
  const size_t *b = x->b;
  CUdeviceptr *xo = x->xo, *xr = x->xr;
  const int per_tok = x->per_tok, qarr = x->qarr;
  g->phase = "fwd dispatch";
  FB_TRY(xs_join(g, x->xasync));
  x->xasync = 0;
  if (!s->direct) {
    FB_TRY(aalloc(xa, &xo[0], (R ? R : 1) * b[0]));
    if (b[1]) FB_TRY(aalloc(xa, &xo[1], (R ? R : 1) * b[1]));
    if (per_tok) FB_TRY(aalloc(xa, &xo[2], (R ? R : 1) * b[2]));
    FB_TRY(aalloc(m, &s->d_off, (nE + 1) * 8));
    FB_TRY(aalloc(m, &s->d_lrow, (Rr ? Rr : 1) * 4));
    FB_TRY(regather(g, x->tmp, L, x->tf, D, s->d_ridx, Rr, (int)nE, PAD, xr, xo, s->d_off, s->d_lrow));
  }
  dq *X = &s->X;
  X->c = xo[0], X->s = xo[1], X->o = xo[2];
  X->rows = R, X->cols = D, X->f = x->tf, X->no = per_tok ? R : 0, X->orow = per_tok;
  if (qarr) {
    CUdeviceptr xb = X->c;
    srmap mx;
    FB_TRY(quant_rows_m(g, m, &p->fwd_act, 0, xb, R ? R : 1, D, 0, seed, fb_moe_stream(L->layer, FB_MOE_OP_X), step,
                        map_rows(s->N, s->g0, D, &mx), X));
    X->rows = R;
    if (X->orow) X->no = R;
  }

  return FB_OK;
}

/* the weights: this rank's FP32 masters quantized (or rounded to BF16), and their BF16 copies for the GEMMs */
static fb_status fwd_weights(fwd_ctx *x) {
  fb_gpu_experts *g = x->g;
  fb_moe_layer *L = x->L;
  const fb_gpu_layer_io *io = x->io;
  const fb_layer_prec *p = x->p;
  gsaved *s = x->s;
  arena *m = x->m;
  size_t D = x->D, F = x->F, nE = x->nE;
  uint32_t seed = x->seed, step = x->step;
  /* weights: this rank's experts' FP32 masters quantized (per-expert groups of rows), BF16 copies for the GEMMs. In a
   * train step on the GPU optimizer these come from the AdamW kernel directly; here they are made from the masters. */
  g->phase = "fwd weights";
  if (p->fwd_weight.format == FB_FMT_BF16) { /* the masters rounded to BF16 (qm_quantize's BF16 operand) */
    fb_kernel_spec k = sp_tcopy(g, FB_FMT_BF16, FB_GRAN_TENSOR, 1, 0, 0, 0, 1);
    dq *w[2] = {&s->W13, &s->W2};
    size_t wr[2] = {nE * 2 * F, nE * D}, wc[2] = {D, F};
    CUdeviceptr win[2] = {io->w13, io->w2};
    for (int i = 0; i < 2; ++i) {
      memset(w[i], 0, sizeof *w[i]);
      w[i]->rows = wr[i], w[i]->cols = wc[i], w[i]->f = FB_FMT_BF16;
      FB_TRY(aalloc(m, &w[i]->c, wr[i] * wc[i] * 2));
      FB_TRY(tcopy(g, &k, win[i], 0, 0, wr[i], wc[i], 0, 0, 0, w[i]->c));
    }
  } else {
    srmap m13, m2; /* this rank's experts are experts [e0, e0 + nE) of all */
    /* NVFP4: the amax of each outer-scale group, from the caller when its AdamW pass left them (io->w13_amax, w2_amax) */
    FB_TRY(quant_rows_a(g, m, &p->fwd_weight, 1, io->w13, nE * 2 * F, D, 2 * F, seed, fb_moe_stream(L->layer, FB_MOE_OP_W13), step,
                        map_rows(s->N, (size_t)s->e0 * 2 * F, D, &m13), io->w13_amax, &s->W13));
    FB_TRY(quant_rows_a(g, m, &p->fwd_weight, 1, io->w2, nE * D, F, D, seed, fb_moe_stream(L->layer, FB_MOE_OP_W2), step,
                        map_rows(s->N, (size_t)s->e0 * D, F, &m2), io->w2_amax, &s->W2));
  }

  return FB_OK;
}

/* w13 with the SwiGLU epilogue: H kept, A = SwiGLU(H) quantized as fwd.act says */
static fb_status fwd_w13(fwd_ctx *x) {
  fb_gpu_experts *g = x->g;
  fb_moe_layer *L = x->L;
  const fb_layer_prec *p = x->p;
  gsaved *s = x->s;
  arena *m = x->m;
  size_t D = x->D, F = x->F, nE = x->nE;
  size_t R = s->R;
  uint32_t seed = x->seed, step = x->step;
  /* w13 with the SwiGLU epilogue: H (BF16, kept for the backward) and A = SwiGLU(H) (BF16), then A quantized as
   * fwd.act (a second pass: a per-token scale needs the whole row) */
  g->phase = "fwd w13";
  FB_TRY(aalloc(m, &s->H, (R ? R : 1) * 2 * F * 2));
  CUdeviceptr dA;
  int abf = p->fwd_act.format == FB_FMT_BF16; /* BF16: A as the epilogue wrote it is the saved operand */
  arena da = {.g = g};                        /* else the BF16 A: dead once quantized */
  FB_TRY(aalloc(abf ? m : &da, &dA, (R ? R : 1) * F * 2));
  fb_status rc = FB_OK;
  if (R) {
    fb_kernel_spec k = sp_gemm(g, p, 0);
    gfit f = {1, 0, 0, (int)(2 * F), (int)D};
    fb_gemm_args ga = {.a = s->X.c, .out = dA, .offsets = s->d_off, .a_sf = s->X.s, .a_outer = s->X.o, .b_outer = s->W13.o,
                         .rows = (long long)R, .experts = (int)nE, .N = (int)(2 * F), .K = (int)D, .aux = s->H};
    arena cp = {.g = g}; /* B's BF16 copy, if the GEMM takes one: dead once the GEMM ran */
    rc = gemm_with_b(g, &cp, &k, &f, &s->W13, &ga);
    afree(&cp);
  }
  if (rc == FB_OK && abf) {
    memset(&s->A, 0, sizeof s->A);
    s->A.c = dA, s->A.cols = F, s->A.f = FB_FMT_BF16;
  } else if (rc == FB_OK) {
    srmap ma;
    rc = quant_rows_m(g, m, &p->fwd_act, 0, dA, R ? R : 1, F, 0, seed, fb_moe_stream(L->layer, FB_MOE_OP_A), step,
                      map_rows(s->N, s->g0, F, &ma), &s->A);
    if (s->A.orow) s->A.no = R;
  }
  afree(&da);
  FB_TRY(rc);
  s->A.rows = R;

  return FB_OK;
}

/* w2 with the combine payload's epilogue */
static fb_status fwd_w2(fwd_ctx *x) {
  fb_gpu_experts *g = x->g;
  const fb_layer_prec *p = x->p;
  gsaved *s = x->s;
  arena *m = x->m;
  size_t D = x->D, F = x->F, nE = x->nE;
  size_t R = s->R;
  uint32_t seed = x->seed;
  /* w2 with the combine payload, back to the sources in the order they sent the rows, then the combine there */
  g->phase = "fwd w2";
  /* the combine payload: S2F6 codes (D bytes a row) and E8M0 (D / 32), or BF16 values (2 D bytes) */
  int cbf = x->cbf = p->combine.format == FB_FMT_BF16;
  size_t yrb = x->yrb = cbf ? 2 * D : D;
  CUdeviceptr yq, ye = 0;
  arena *ya = s->direct ? m : x->tmp; /* one rank: these rows are the ones the combine and its backward read */
  FB_TRY(aalloc(ya, &yq, (R ? R : 1) * yrb));
  if (!cbf) FB_TRY(aalloc(ya, &ye, (R ? R : 1) * D / 32));
  x->yq = yq, x->ye = ye;
  s->signs = fb_rht_signs(seed, 0);
  if (R) {
    fb_kernel_spec k = sp_gemm(g, p, 1);
    gfit f = {1, 0, 0, (int)D, (int)F};
    fb_gemm_args ga = {.a = s->A.c, .out = yq, .offsets = s->d_off, .a_sf = s->A.s, .a_outer = s->A.o, .b_outer = s->W2.o,
                         .rows = (long long)R, .experts = (int)nE, .N = (int)D, .K = (int)F, .out_sf = ye, .signs = s->signs};
    arena cp = {.g = g}; /* B's BF16 copy, if the GEMM takes one: dead once the GEMM ran */
    fb_status rc = gemm_with_b(g, &cp, &k, &f, &s->W2, &ga);
    afree(&cp);
    FB_TRY(rc);
  }
  return FB_OK;
}

/* the combine: the payload rows back to their sources (N > 1), dequantized and summed by router weight into y */
static fb_status fwd_combine(fwd_ctx *x) {
  fb_gpu_experts *g = x->g;
  fb_moe_layer *L = x->L;
  const fb_gpu_layer_io *io = x->io;
  const fb_layer_prec *p = x->p;
  gsaved *s = x->s;
  arena *m = x->m;
  size_t T = x->T, D = x->D, N = x->N;
  size_t R = s->R, Rr = s->Rr, Rs = s->Rs;
  int cbf = x->cbf;
  size_t yrb = x->yrb;
  CUdeviceptr yq = x->yq, ye = x->ye, ys[2] = {0, 0}, yb[2] = {0, 0};
  g->phase = "fwd combine";
  {
    size_t cb[2] = {yrb, cbf ? 0 : D / 32};
    CUdeviceptr yo[2] = {yq, ye};
    if (s->direct) { /* the rows stay where the GEMM wrote them; row_of names them */
      s->ycq = yq, s->yce = ye;
      xcount(L, s, 1, cb, 2, L->traffic ? &L->traffic->combine : NULL);
    } else {
      FB_TRY(aalloc(x->tmp, &ys[0], (Rr ? Rr : 1) * yrb));
      if (!cbf) FB_TRY(aalloc(x->tmp, &ys[1], (Rr ? Rr : 1) * D / 32));
      /* by source: S2F6 rows move as MXFP8's bytes, BF16 rows as BF16 */
      FB_TRY(regather(g, x->tmp, L, cbf ? FB_FMT_BF16 : FB_FMT_MXFP8, D, s->d_oidx, R, (int)N, 1, yo, ys, 0, 0));
      FB_TRY(aalloc(m, &s->ycq, (Rs ? Rs : 1) * yrb));
      if (!cbf) FB_TRY(aalloc(m, &s->yce, (Rs ? Rs : 1) * D / 32));
      yb[0] = s->ycq, yb[1] = s->yce;
      FB_TRY(xchg(g, L, s, 1, ys, yb, cb, 2, L->traffic ? &L->traffic->combine : NULL));
    }
    const kent *e;
    fb_kernel_spec k = sp_unpermute(g, &p->combine, 1, L->top_k, L->experts);
    FB_TRY(kget(g, &k, NULL, &e));
    fb_kp_moe pu;
    memset(&pu, 0, sizeof pu);
    pu.in = s->ycq, pu.in_scales = s->yce, pu.row_of = s->d_rowof, pu.topk_w = s->d_w, pu.out = io->y;
    pu.rows = (long long)T, pu.cols = (long long)D, pu.experts = L->experts, pu.top_k = L->top_k, pu.signs = s->signs;
    FB_TRY(run_moe(g, e, &pu, (long long)T, (long long)D));
  }
  return FB_OK;
}

static fb_status fwd_dev(fb_gpu_experts *g, fb_moe_layer *L, const fb_gpu_layer_io *io) {
  if (L->saved) gpu_release(g, L);
  if (L->exact) return FB_ERR(FB_EINVAL, "experts gpu: exact (gradient-check) mode runs on the CPU path");
  const fb_layer_prec *p = L->prec;
  FB_TRY(check_prec(p, L->layer));
  fb_comm *c;
  FB_TRY(layer_comm(g, L, &c));
  size_t T = (size_t)L->tokens, D = (size_t)L->d_model, F = (size_t)L->d_ff, E = (size_t)L->experts, K = (size_t)L->top_k;
  fb_status rc = FB_OK;
  arena tmp = {.g = g};
  gsaved *s = calloc(1, sizeof *s);
  if (!s) return FB_ERR(FB_ENOMEM, "experts gpu: saved state");
  L->saved = s;
  s->mem.g = g;
  s->N = fb_comm_size(c), s->me = fb_comm_rank(c), s->nE = (int)E / s->N, s->e0 = s->me * s->nE;
  /* one rank: the permute writes the owner's layout itself, and nothing is exchanged (the exchange path's maps are
     identities there: its send order is the owner's order without the padding rows) */
  s->direct = s->N == 1 && !g->xchg1;
  fwd_ctx x = {.g = g, .L = L, .io = io, .p = p, .c = c, .s = s, .m = &s->mem, .tmp = &tmp, .T = T, .D = D, .F = F, .E = E,
               .K = K, .N = (size_t)s->N, .nE = (size_t)s->nE, .seed = L->seed, .step = L->step};
  s->off = malloc((x.nE + 1) * sizeof *s->off), s->cnt = malloc(x.N * E * sizeof *s->cnt);
  s->srows = calloc(x.N, sizeof *s->srows), s->rrows = calloc(x.N, sizeof *s->rrows);
  x.mine = malloc(E * sizeof *x.mine);
  if (!s->off || !s->cnt || !s->srows || !s->rrows || !x.mine) { rc = FB_ERR(FB_ENOMEM, "experts gpu: host buffers"); goto fail; }
  FB_TRY_GOTO(aalloc(x.m, &s->d_w, T * K * 4), fail);
  CU_CHECK_GOTO(s_dtod(s->d_w, io->topk_w, T * K * 4), fail); /* the backward's router weights */
  FB_TRY_GOTO(aalloc(x.m, &s->d_rowof, T * K * 4), fail);
  FB_TRY_GOTO(fwd_dispatch(&x), fail);
  FB_TRY_GOTO(fwd_weights(&x), fail); /* beside the dispatch exchange with FOURBIT_GPU_OVERLAP=2 */
  FB_TRY_GOTO(fwd_arrive(&x), fail);
  FB_TRY_GOTO(fwd_w13(&x), fail);
  FB_TRY_GOTO(fwd_w2(&x), fail);
  FB_TRY_GOTO(fwd_combine(&x), fail);
  g->phase = NULL;
  afree(&tmp);
  free(x.mine);
  return FB_OK;
fail:
  g->phase = NULL;
  xs_abandon(g, x.xasync);
  afree(&tmp);
  free(x.mine);
  gpu_release(g, L);
  return rc;
}

/* The host entry (fb_expert_ops): tokens, routing and this rank's experts' masters up, y down. */
static fb_status gpu_forward(void *ctx, fb_moe_layer *L, const float *x, const int32_t *topk_idx, const float *topk_w,
                             const float *w13, const float *w2, float *y) {
  fb_gpu_experts *g = ctx;
  fb_comm *c;
  FB_TRY(layer_comm(g, L, &c));
  size_t T = (size_t)L->tokens, D = (size_t)L->d_model, F = (size_t)L->d_ff, E = (size_t)L->experts / (size_t)fb_comm_size(c),
         K = (size_t)L->top_k;
  fb_status rc = FB_OK;
  arena tmp = {.g = g};
  uint16_t *hb = malloc(T * D * sizeof *hb + 16);
  if (!hb) return FB_ERR(FB_ENOMEM, "experts gpu: host buffers");
  for (size_t i = 0; i < T * D; ++i) hb[i] = fb_bf16_from_f32(x[i]); /* BF16 values held in FP32: exact */
  fb_gpu_layer_io io;
  memset(&io, 0, sizeof io);
  FB_TRY_GOTO(up(&tmp, &io.x, hb, T * D * 2), done);
  FB_TRY_GOTO(up(&tmp, &io.topk_idx, topk_idx, T * K * 4), done);
  FB_TRY_GOTO(up(&tmp, &io.topk_w, topk_w, T * K * 4), done);
  FB_TRY_GOTO(up(&tmp, &io.w13, w13, E * 2 * F * D * 4), done);
  FB_TRY_GOTO(up(&tmp, &io.w2, w2, E * D * F * 4), done);
  FB_TRY_GOTO(aalloc(&tmp, &io.y, T * D * 2), done);
  FB_TRY_GOTO(fwd_dev(g, L, &io), done);
  CU_CHECK_GOTO(s_dtoh(hb, io.y, T * D * 2), done);
  for (size_t i = 0; i < T * D; ++i) y[i] = fb_bf16_to_f32(hb[i]);
done:
  afree(&tmp);
  free(hb);
  return rc;
}

/* ---- backward ------------------------------------------------------------------------------------------------- */
/* dgrad (mode 0): out (R x N BF16) = Q(A op, R x K) Q(B op regrouped, E N x K)^T per expert. NVFP4: the A codes decoded
 * in the GEMM (FB_KIND 1) times the exact BF16 copy of B, S_dec(A) S_dec(B) in the epilogue; BF16: both as they are. */
static fb_status dgrad_gemm(fb_gpu_experts *g, arena *a, const fb_layer_prec *p, const gsaved *s, const dq *A, const dq *Bg,
                            CUdeviceptr out, size_t N, size_t K) {
  CUdeviceptr cb;
  FB_TRY(bf16copy(g, a, Bg, &cb));
  fb_kernel_spec k = sp_gemm(g, p, 2);
  gfit f = {1, 0, 0, (int)N, (int)K};
  fb_gemm_args ga = {.a = A->c, .b = cb, .out = out, .offsets = s->d_off, .a_sf = A->s, .a_outer = A->o, .b_outer = Bg->o,
                       .rows = (long long)s->R, .experts = s->nE, .N = (int)N, .K = (int)K};
  return gemm(g, &k, &f, &ga);
}

/* wgrad (mode 1): out (E x M x N FP32) = At (M x R) Bt (N x R)^T over each expert's rows, as a BF16 GEMM of the two
 * operands' exact BF16 copies (NVFP4: bcopy's, K permuted alike in both, so the products pair up as they should), then,
 * for NVFP4 or an RHT, every value times S_dec(At) S_dec(Bt) and 1/rht (tcopy's scaling; model_experts.c divides by
 * rht after its product of the dequantized operands). */
static fb_status wgrad_gemm(fb_gpu_experts *g, arena *a, const fb_layer_prec *p, const gsaved *s, const dq *At, const dq *Bt,
                            CUdeviceptr out, int rht) {
  size_t M = At->rows, N = Bt->rows, E = (size_t)s->nE;
  CUdeviceptr ca, cb;
  FB_TRY(bf16copy(g, a, At, &ca));
  FB_TRY(bf16copy(g, a, Bt, &cb));
  fb_layer_prec pb = *p;
  memset(&pb.bwd_grad, 0, sizeof pb.bwd_grad), memset(&pb.bwd_saved, 0, sizeof pb.bwd_saved); /* BF16 x BF16 */
  fb_kernel_spec k = sp_gemm(g, &pb, 3);
  gfit f = {1, 1, (int)M, (int)N, 0};
  fb_gemm_args ga = {.a = ca, .b = cb, .out = out, .offsets = s->d_off,
                       .rows = (long long)s->R, .experts = (int)E, .M = (int)M, .N = (int)N};
  FB_TRY(gemm(g, &k, &f, &ga));
  int nv = At->f == FB_FMT_NVFP4;
  if (!nv && !rht) return FB_OK;
  fb_kernel_spec ks = sp_tcopy(g, FB_FMT_BF16, FB_GRAN_TENSOR, 1, 0, 0, rht ? rht : 1, 0);
  return tcopy(g, &ks, out, 0, 0, E * M, N, 0, nv ? At->o : 0, nv ? Bt->o : 0, out);
}

/* The owner's backward GEMMs of a BF16 or NVFP4 backward (model_experts.c's expert_backward): dY (R x D BF16, zero on
 * padding rows) -> dXr (R x D BF16), io->dw13, io->dw2. Row-wise operands quantized as bwd.grad says (NVFP4: per tensor,
 * SR as the recipe says), the saved X, A and weights dequantized exactly, transposed (wgrad: RHT-16 along the rows when
 * wgrad_rht) and quantized as bwd.saved says; the weights' transposes regrouped per expert as the MXFP8 path does. */
static fb_status bwd_lowp(fb_gpu_experts *g, arena *tmp, fb_moe_layer *L, gsaved *s, const fb_gpu_layer_io *io, CUdeviceptr dY,
                          CUdeviceptr dXr) {
  const fb_layer_prec *p = L->prec;
  size_t D = (size_t)L->d_model, F = (size_t)L->d_ff, E = (size_t)s->nE, R = s->R;
  uint32_t seed = L->seed, step = L->step, signs = fb_rht_signs(seed, 0);
  int lay = L->layer, rht = p->wgrad_rht;

  /* w2 dgrad: dA = Q(dY along d) Q(W2 requantized along d)^T, then the SwiGLU backward */
  g->phase = "bwd w2 dgrad";
  dq dYq, W2t, W2g;
  CUdeviceptr dA, dH;
  FB_TRY(op_rows(g, tmp, &p->bwd_grad, dY, R, D, seed, fb_moe_stream(lay, FB_MOE_OP_DY_ROW), step, &dYq));
  FB_TRY(op_cols(g, tmp, &p->bwd_saved, &s->W2, 0, 0, seed, fb_moe_stream(lay, FB_MOE_OP_W2_T), step, &W2t));
  FB_TRY(regroup(g, tmp, L, &W2t, E, &W2g));
  FB_TRY(aalloc(tmp, &dA, R * F * 2));
  FB_TRY(dgrad_gemm(g, tmp, p, s, &dYq, &W2g, dA, F, D));
  {
    const kent *e;
    fb_kernel_spec k = sp_swiglu(g, 1);
    FB_TRY(kget(g, &k, NULL, &e));
    FB_TRY(aalloc(tmp, &dH, R * 2 * F * 2));
    fb_kp_moe ps;
    memset(&ps, 0, sizeof ps);
    ps.in = s->H, ps.in2 = dA, ps.out = dH, ps.rows = (long long)R, ps.cols = (long long)F;
    FB_TRY(run_moe(g, e, &ps, (long long)R, (long long)F));
  }

  /* w2 wgrad: dW2_e = Q(dY down the rows)^T Q(A requantized down the rows) */
  g->phase = "bwd w2 wgrad";
  dq dYb = {dY, 0, 0, R, D, 0, FB_FMT_BF16, 0}, dYt, At;
  FB_TRY(op_cols(g, tmp, &p->bwd_grad, &dYb, rht, signs, seed, fb_moe_stream(lay, FB_MOE_OP_DY_COL), step, &dYt));
  FB_TRY(op_cols(g, tmp, &p->bwd_saved, &s->A, rht, signs, seed, fb_moe_stream(lay, FB_MOE_OP_A_T), step, &At));
  FB_TRY(wgrad_gemm(g, tmp, p, s, &dYt, &At, io->dw2, rht));

  /* w13 dgrad: dX rows = Q(dH along 2f) Q(W13 requantized along 2f)^T */
  g->phase = "bwd w13 dgrad";
  dq dHq, W13t, W13g;
  FB_TRY(op_rows(g, tmp, &p->bwd_grad, dH, R, 2 * F, seed, fb_moe_stream(lay, FB_MOE_OP_DH_ROW), step, &dHq));
  FB_TRY(op_cols(g, tmp, &p->bwd_saved, &s->W13, 0, 0, seed, fb_moe_stream(lay, FB_MOE_OP_W13_T), step, &W13t));
  FB_TRY(regroup(g, tmp, L, &W13t, E, &W13g));
  FB_TRY(dgrad_gemm(g, tmp, p, s, &dHq, &W13g, dXr, D, 2 * F));

  /* w13 wgrad: dW13_e = Q(dH down the rows)^T Q(X requantized from the dispatched payload) */
  g->phase = "bwd w13 wgrad";
  dq dHb = {dH, 0, 0, R, 2 * F, 0, FB_FMT_BF16, 0}, dHt, Xt;
  FB_TRY(op_cols(g, tmp, &p->bwd_grad, &dHb, rht, signs, seed, fb_moe_stream(lay, FB_MOE_OP_DH_COL), step, &dHt));
  FB_TRY(op_cols(g, tmp, &p->bwd_saved, &s->X, rht, signs, seed, fb_moe_stream(lay, FB_MOE_OP_X_T), step, &Xt));
  return wgrad_gemm(g, tmp, p, s, &dHt, &Xt, io->dw13, rht);
}

/* At the source, the combine's backward: dY = w * dy by source row, dtopk_w = <dy, Y^>; dY rows to their owners, grouped
 * there per expert and padded (zero rows) into *dY (R x D BF16). One rank (direct): row_of names the owner's rows, the
 * kernel writes them in place and the padding rows are zeroed apart. */
static fb_status bwd_combine_(fb_gpu_experts *g, arena *tmp, arena *xa, fb_moe_layer *L, gsaved *s, const fb_gpu_layer_io *io,
                              CUdeviceptr *dY) {
  const fb_layer_prec *p = L->prec;
  size_t T = (size_t)L->tokens, D = (size_t)L->d_model, E = (size_t)s->nE, K = (size_t)L->top_k, R = s->R, Rs = s->Rs,
         Rr = s->Rr;
  size_t b2[1] = {2 * D};
  CUdeviceptr dYs, dYr;
  g->phase = "bwd combine";
  if (s->direct) {
    FB_TRY(aalloc(tmp, dY, (R ? R : 1) * D * 2));
    FB_TRY(zero_padding(s, (size_t)L->experts, *dY, D * 2));
    dYs = *dY;
  } else {
    FB_TRY(aalloc(xa, &dYs, (Rs ? Rs : 1) * D * 2));
  }
  const kent *e;
  fb_kernel_spec k = sp_combine_bwd(g, &p->combine);
  FB_TRY(kget(g, &k, NULL, &e));
  fb_kp_moe pc;
  memset(&pc, 0, sizeof pc);
  pc.in = s->ycq, pc.in_scales = s->yce, pc.in2 = io->dy, pc.out = dYs, pc.grad_w = io->dtopk_w, pc.row_of = s->d_rowof;
  pc.topk_w = s->d_w, pc.rows = (long long)T, pc.cols = (long long)D, pc.top_k = (int)K, pc.signs = s->signs;
  FB_TRY(run_moe(g, e, &pc, (long long)T, (long long)D));
  arelease(&s->mem, s->ycq), arelease(&s->mem, s->yce); /* the combine payload's last reader */
  s->ycq = s->yce = 0;
  if (s->direct) {
    xcount(L, s, 0, b2, 1, L->traffic ? &L->traffic->dy : NULL);
    return FB_OK;
  }
  FB_TRY(aalloc(xa, &dYr, (Rr ? Rr : 1) * D * 2));
  FB_TRY(xchg(g, L, s, 0, &dYs, &dYr, b2, 1, L->traffic ? &L->traffic->dy : NULL));
  FB_TRY(aalloc(tmp, dY, (R ? R : 1) * D * 2));
  return regather(g, tmp, L, FB_FMT_BF16, D, s->d_ridx, Rr, (int)E, PAD, &dYr, dY, 0, 0);
}
/* the exchange's send and receive rows (xa) go back to the pool as soon as the regather that reads them is queued */
static fb_status bwd_combine(fb_gpu_experts *g, arena *tmp, fb_moe_layer *L, gsaved *s, const fb_gpu_layer_io *io,
                             CUdeviceptr *dY) {
  arena xa = {.g = g};
  fb_status rc = bwd_combine_(g, tmp, &xa, L, s, io, dY);
  afree(&xa);
  return rc;
}

/* The MXFP8 backward's phases (the owner's rows, R > 0): every operand quantized to MXFP8 (the saved ones requantized
 * down the other axis from what the forward stored); the GEMM multiplies both as E4M3 on the FP8 tensor cores (weights_bf16
 * 0), or A decoded in the GEMM times an exact BF16 copy of B (weights_bf16 1, or a recipe with gemm.accumulate "exact").
 * A gradient (dY, then dH) is quantized both ways as soon as it exists (along its rows for the dgrad, down them for the
 * wgrad: separate SR streams, so the order changes no bit) and its BF16 rows go back to the pool at once: at S1 that
 * holds 0.34 GiB of MXFP8 in place of 0.66 GiB of BF16 dY through the w2 dgrad, and likewise dH through the w13 dgrad.
 * Each phase keeps its scratch in arenas of its own, given back to the pool when the phase ends. Pool blocks are reused
 * in stream order, so a later phase may take them at once. */
/* *e: the kernel that quantizes in one pass, or NULL for two. FOURBIT_GPU_GRAD_BOTH=1 / 0 say which; else the tuner's
 * times say it: the fused kernel when its winner's median is at most the sum of the row and column quantizers' (the tuner
 * times all three at the same shape, tuner/shape.c), and also when any of the three has no timed winner (no cache, or an
 * untuned one: the fused pass reads G once, and measured faster on the H100, BENCHMARKS.md). Decided once a kernel, and
 * the first decision told in the log. */
static fb_status grad_both_kernel(fb_gpu_experts *g, const fb_qspec *q, const kent **e) {
  *e = NULL;
  if (!g->grad_both) return FB_OK;
  const kent *b, *r, *c;
  fb_kernel_spec kb = sp_quant(g, q, 2, 0);
  FB_TRY(kget(g, &kb, NULL, &b));
  *e = b;
  if (g->grad_both > 0 || !g->o.lookup || b->ms <= 0) return FB_OK; /* forced, or no times to compare */
  if (g->gb_k == b) {
    if (!g->gb_fused) *e = NULL;
    return FB_OK;
  }
  fb_kernel_spec kr = sp_quant(g, q, 0, 0), kc = sp_quant(g, q, 1, 0);
  FB_TRY(kget(g, &kr, NULL, &r));
  FB_TRY(kget(g, &kc, NULL, &c));
  int fused = r->ms <= 0 || c->ms <= 0 || b->ms <= r->ms + c->ms;
  if (!g->gb_k && g->o.log)
    fprintf(g->o.log, "grad_both: %s (tuned: %s %.4f ms against %s + %s %.4f + %.4f ms)\n", fused ? "one pass" : "two passes",
            b->v.name, b->ms, r->v.name, c->v.name, r->ms, c->ms);
  g->gb_k = b, g->gb_fused = fused;
  if (!fused) *e = NULL;
  return FB_OK;
}
/* G (R x M BF16) quantized along its rows (*r, arena ar: a dgrad's A) and down them (*t, arena at: the wgrad's A): in
 * one pass (quant_mxfp8_sr_both, mx_col.cuh FB_BOTH: G read once) where grad_both_kernel says so and M is a multiple of
 * 32, else as two (quant_rows_m, quant_cols); the same bits either way (each half its own SR stream and map) */
static fb_status grad_both(fb_gpu_experts *g, arena *ar, arena *at, fb_moe_layer *L, const gsaved *s, CUdeviceptr G, size_t R,
                           size_t M, int op_r, int op_t, dq *r, dq *t) {
  const fb_layer_prec *p = L->prec;
  srmap mr, mc;
  const srmap *smr = map_rows(s->N, s->g0, M, &mr), *smc = map_cols(s->N, s->Rg, s->g0, &mc);
  const kent *e = NULL;
  if (M % 32 == 0) FB_TRY(grad_both_kernel(g, &p->bwd_grad, &e));
  if (e) {
    memset(r, 0, sizeof *r), memset(t, 0, sizeof *t);
    r->rows = R, r->cols = M, r->f = FB_FMT_MXFP8;
    t->rows = M, t->cols = R, t->f = FB_FMT_MXFP8;
    FB_TRY(aalloc(ar, &r->c, R * M));
    FB_TRY(aalloc(ar, &r->s, R * M / 32));
    FB_TRY(aalloc(at, &t->c, R * M));
    FB_TRY(aalloc(at, &t->s, R * M / 32));
    fb_kp_mem pk;
    memset(&pk, 0, sizeof pk);
    pk.in = G, pk.out = t->c, pk.scales = t->s, pk.out2 = r->c, pk.scales2 = r->s;
    pk.rows = (long long)R, pk.cols = (long long)M, pk.seed = L->seed, pk.step = L->step;
    pk.stream = fb_moe_stream(L->layer, op_t), pk.stream2 = fb_moe_stream(L->layer, op_r);
    FB_TRY(set_srmap(&pk, smc));                                     /* the columns' map */
    FB_TRY(put_srmap(smr, &pk.sr2_row0, &pk.sr2_ld, &pk.sr2_col0)); /* the rows' */
    return run_mem(g, e, &pk, (long long)R, (long long)M, 0);
  }
  FB_TRY(quant_rows_m(g, ar, &p->bwd_grad, 0, G, R, M, 0, L->seed, fb_moe_stream(L->layer, op_r), L->step, smr, r));
  return quant_cols(g, at, &p->bwd_grad, G, R, M, L->seed, fb_moe_stream(L->layer, op_t), L->step, smc, t);
}
/* w2 dgrad: dA = dYq Q(W2 requantized along d)^T, then the SwiGLU backward into *dH (R x 2F BF16, arena tmp) */
static fb_status mx_w2_dgrad_(fb_gpu_experts *g, arena *ph, arena *wt, arena *tmp, fb_moe_layer *L, gsaved *s, const dq *dYq,
                              CUdeviceptr *dH) {
  const fb_layer_prec *p = L->prec;
  size_t D = (size_t)L->d_model, F = (size_t)L->d_ff, E = (size_t)s->nE, R = s->R;
  CUdeviceptr dA;
  fb_kernel_spec k = sp_gemm(g, p, 2);
  gfit f = {1, 0, 0, (int)F, (int)D};
  const kent *ge;
  FB_TRY(kget(g, &k, &f, &ge));
  FB_TRY(aalloc(ph, &dA, R * F * 2));
  fb_gemm_args ga = {.a = dYq->c, .out = dA, .offsets = s->d_off, .a_sf = dYq->s,
                     .rows = (long long)R, .experts = (int)E, .N = (int)F, .K = (int)D};
  FB_TRY(dgrad_b(g, ph, wt, ge, L, s, &p->bwd_saved, &p->fwd_weight, &s->W2, D, fb_moe_stream(L->layer, FB_MOE_OP_W2_T), &ga));
  saved_drop(s, &s->W2); /* its last reader */
  const kent *e;
  k = sp_swiglu(g, 1);
  FB_TRY(kget(g, &k, NULL, &e));
  FB_TRY(aalloc(tmp, dH, R * 2 * F * 2));
  fb_kp_moe ps;
  memset(&ps, 0, sizeof ps);
  ps.in = s->H, ps.in2 = dA, ps.out = *dH, ps.rows = (long long)R, ps.cols = (long long)F;
  FB_TRY(run_moe(g, e, &ps, (long long)R, (long long)F));
  arelease(&s->mem, s->H); /* H's last reader */
  s->H = 0;
  return FB_OK;
}
static fb_status mx_w2_dgrad(fb_gpu_experts *g, arena *tmp, fb_moe_layer *L, gsaved *s, const dq *dYq, CUdeviceptr *dH) {
  g->phase = "bwd w2 dgrad";
  arena ph = {.g = g}, wt = {.g = g};
  fb_status rc = mx_w2_dgrad_(g, &ph, &wt, tmp, L, s, dYq, dH);
  afree(&wt), afree(&ph);
  return rc;
}

/* wgrad: out (E x M x N FP32) = Gt^T Q(S requantized down the rows), Gt = dY or dH quantized down its rows (M x R), S the
 * saved A or X */
static fb_status mx_wgrad_(fb_gpu_experts *g, arena *ph, fb_moe_layer *L, gsaved *s, const dq *Gt, size_t M, dq *S, size_t N,
                           int op_s, CUdeviceptr out) {
  const fb_layer_prec *p = L->prec;
  size_t E = (size_t)s->nE, R = s->R;
  dq St;
  fb_kernel_spec k = sp_gemm(g, p, 3);
  gfit f = {1, 1, (int)M, (int)N, 0};
  const kent *ge;
  FB_TRY(kget(g, &k, &f, &ge));
  srmap mc;
  FB_TRY(b_requant(g, ph, NULL, ge, L, &p->bwd_saved, &p->fwd_act, S, 0, 0, fb_moe_stream(L->layer, op_s),
                   map_cols(s->N, s->Rg, s->g0, &mc), &St));
  saved_drop(s, S); /* the saved A or X: its last reader */
  fb_gemm_args ga = {.a = Gt->c, .out = out, .offsets = s->d_off, .a_sf = Gt->s,
                     .rows = (long long)R, .experts = (int)E, .M = (int)M, .N = (int)N};
  FB_TRY(gemm_b(g, ph, ge, &St, &ga));
  return gemm_run(g, ge, &ga);
}
static fb_status mx_wgrad(fb_gpu_experts *g, fb_moe_layer *L, gsaved *s, const dq *Gt, size_t M, dq *S, size_t N, int op_s,
                          CUdeviceptr out) {
  arena ph = {.g = g};
  fb_status rc = mx_wgrad_(g, &ph, L, s, Gt, M, S, N, op_s, out);
  afree(&ph);
  return rc;
}

/* w13 dgrad: dX rows (R x D BF16) = dHq Q(W13 requantized along 2f)^T */
static fb_status mx_w13_dgrad_(fb_gpu_experts *g, arena *ph, arena *wt, fb_moe_layer *L, gsaved *s, const dq *dHq,
                               CUdeviceptr dXr) {
  const fb_layer_prec *p = L->prec;
  size_t D = (size_t)L->d_model, F = (size_t)L->d_ff, E = (size_t)s->nE, R = s->R;
  fb_kernel_spec k = sp_gemm(g, p, 2);
  gfit f = {1, 0, 0, (int)D, (int)(2 * F)};
  const kent *ge;
  FB_TRY(kget(g, &k, &f, &ge));
  fb_gemm_args ga = {.a = dHq->c, .out = dXr, .offsets = s->d_off, .a_sf = dHq->s,
                     .rows = (long long)R, .experts = (int)E, .N = (int)D, .K = (int)(2 * F)};
  FB_TRY(dgrad_b(g, ph, wt, ge, L, s, &p->bwd_saved, &p->fwd_weight, &s->W13, 2 * F, fb_moe_stream(L->layer, FB_MOE_OP_W13_T), &ga));
  saved_drop(s, &s->W13); /* its last reader */
  return FB_OK;
}
static fb_status mx_w13_dgrad(fb_gpu_experts *g, fb_moe_layer *L, gsaved *s, const dq *dHq, CUdeviceptr dXr) {
  g->phase = "bwd w13 dgrad";
  arena ph = {.g = g}, wt = {.g = g};
  fb_status rc = mx_w13_dgrad_(g, &ph, &wt, L, s, dHq, dXr);
  afree(&wt), afree(&ph);
  return rc;
}

/* The owner's backward GEMMs of an MXFP8 backward: dY (R x D BF16, in arena gy: given back once quantized both ways)
 * -> *dXr (R x D BF16, allocated in tmp), io->dw13, io->dw2. */
static fb_status dx_send(fb_gpu_experts *g, arena *tmp, fb_moe_layer *L, gsaved *s, CUdeviceptr dXr, CUdeviceptr *dXb, int *async);
static fb_status bwd_mx_(fb_gpu_experts *g, arena *tmp, arena *gy, arena *gh, arena *qr, arena *qt, fb_moe_layer *L, gsaved *s,
                         const fb_gpu_layer_io *io, CUdeviceptr dY, CUdeviceptr *dXr, CUdeviceptr *dXb, int *async) {
  size_t D = (size_t)L->d_model, F = (size_t)L->d_ff, R = s->R;
  dq Yr, Yt, Hr, Ht;
  g->phase = "bwd w2 dgrad";
  FB_TRY(grad_both(g, qr, qt, L, s, dY, R, D, FB_MOE_OP_DY_ROW, FB_MOE_OP_DY_COL, &Yr, &Yt));
  afree(gy); /* dY's BF16 rows: quantized both ways */
  CUdeviceptr dH;
  FB_TRY(mx_w2_dgrad(g, gh, L, s, &Yr, &dH));
  afree(qr);
  g->phase = "bwd w2 wgrad"; /* dW2_e = Q(dY down the rows)^T Q(A requantized down the rows) */
  FB_TRY(mx_wgrad(g, L, s, &Yt, D, &s->A, F, FB_MOE_OP_A_T, io->dw2));
  afree(qt);
  g->phase = "bwd w13 dgrad";
  fb_status rc = grad_both(g, qr, qt, L, s, dH, R, 2 * F, FB_MOE_OP_DH_ROW, FB_MOE_OP_DH_COL, &Hr, &Ht);
  afree(gh); /* dH's BF16 rows: quantized both ways */
  FB_TRY(rc);
  FB_TRY(aalloc(tmp, dXr, R * D * 2));
  FB_TRY(mx_w13_dgrad(g, L, s, &Hr, *dXr));
  afree(qr);
  /* dX is complete: its rows leave for their sources on the exchange stream while the w13 wgrad runs (dx_send) */
  FB_TRY(dx_send(g, tmp, L, s, *dXr, dXb, async));
  g->phase = "bwd w13 wgrad"; /* dW13_e = Q(dH down the rows)^T Q(X requantized from the dispatched payload) */
  return mx_wgrad(g, L, s, &Ht, 2 * F, &s->X, D, FB_MOE_OP_X_T, io->dw13);
}
static fb_status bwd_mx(fb_gpu_experts *g, arena *tmp, arena *gy, fb_moe_layer *L, gsaved *s, const fb_gpu_layer_io *io,
                        CUdeviceptr dY, CUdeviceptr *dXr, CUdeviceptr *dXb, int *async) {
  arena gh = {.g = g}, qr = {.g = g}, qt = {.g = g}; /* dH; a gradient quantized along its rows, and down them */
  fb_status rc = bwd_mx_(g, tmp, gy, &gh, &qr, &qt, L, s, io, dY, dXr, dXb, async);
  afree(&gh), afree(&qr), afree(&qt);
  return rc;
}

/* dX rows (R x D BF16, the owner's) back to their sources in the order they were sent (dx_send), then summed there per
 * token into io->dx (dx_finish; every rank takes part). With the exchange (N > 1, or FOURBIT_GPU_EXCHANGE=1) the
 * all-to-all runs on the layer's exchange stream g->xs, after an event that follows the regather on the layer's stream,
 * and *async says so: the layer's stream goes on (the w13 wgrad) and dx_finish waits on the exchange's event before the
 * sum. The buffers the exchange reads and writes (dXs, dXb) stay in tmp until the layer's backward ends, after that
 * wait, so no pool block the exchange touches is handed out while it runs; it is the backward's last NCCL call, and the
 * next one (on the layer's stream) comes after the wait (xs_begin / xs_end / xs_join). FOURBIT_GPU_OVERLAP=0 and a driver without cuStreamCreate keep
 * it in series on the layer's stream. (The fake driver runs every call at once, in order: there it checks the plumbing,
 * the streams and events named, not the overlap.) */
static fb_status dx_send(fb_gpu_experts *g, arena *tmp, fb_moe_layer *L, gsaved *s, CUdeviceptr dXr, CUdeviceptr *dXb, int *async) {
  size_t D = (size_t)L->d_model, R = s->R, Rs = s->Rs, Rr = s->Rr, N = (size_t)s->N;
  size_t b2[1] = {2 * D};
  const char *ph = g->phase;
  *async = 0;
  g->phase = "bwd dx";
  if (s->direct) { /* one rank: row_of names the owner's rows */
    *dXb = dXr;
    xcount(L, s, 1, b2, 1, L->traffic ? &L->traffic->dx : NULL);
    g->phase = ph;
    return FB_OK;
  }
  CUdeviceptr dXs;
  FB_TRY(aalloc(tmp, &dXs, (Rr ? Rr : 1) * D * 2));
  FB_TRY(regather(g, tmp, L, FB_FMT_BF16, D, s->d_oidx, R, (int)N, 1, &dXr, &dXs, 0, 0));
  arelease(tmp, dXr); /* read by the regather just queued (stream order): the w13 wgrad may have its bytes */
  FB_TRY(aalloc(tmp, dXb, (Rs ? Rs : 1) * D * 2));
  fb_status rc = xchg_side(g, 1, L, s, 1, &dXs, dXb, b2, 1, L->traffic ? &L->traffic->dx : NULL, async);
  g->phase = ph;
  return rc;
}
static fb_status dx_finish(fb_gpu_experts *g, fb_moe_layer *L, gsaved *s, const fb_gpu_layer_io *io, CUdeviceptr dXb, int async) {
  size_t T = (size_t)L->tokens, D = (size_t)L->d_model, Rs = s->Rs;
  g->phase = "bwd dx";
  FB_TRY(xs_join(g, async));
  if (!Rs) {
    CU_CHECK(s_zero(io->dx, T * D * 4));
    return FB_OK;
  }
  const kent *e;
  fb_qspec bf = {0};
  fb_kernel_spec k = sp_unpermute(g, &bf, 0, L->top_k, L->experts);
  FB_TRY(kget(g, &k, NULL, &e));
  fb_kp_moe pu;
  memset(&pu, 0, sizeof pu);
  pu.in = dXb, pu.row_of = s->d_rowof, pu.topk_w = 0, pu.out = io->dx;
  pu.rows = (long long)T, pu.cols = (long long)D, pu.experts = L->experts, pu.top_k = L->top_k;
  return run_moe(g, e, &pu, (long long)T, (long long)D);
}

/* The layer's backward on the device, its phases in order: the combine's backward and dY to the owners, the owner's
 * GEMMs (none without rows: the weight gradients are zero), dX back to the sources. */
static fb_status bwd_dev(fb_gpu_experts *g, fb_moe_layer *L, const fb_gpu_layer_io *io) {
  gsaved *s = L->saved;
  if (!s) return FB_ERR(FB_EINVAL, "experts gpu: backward of layer %d without a forward", L->layer);
  size_t D = (size_t)L->d_model, F = (size_t)L->d_ff, E = (size_t)s->nE, R = s->R;
  fb_status rc = FB_OK;
  arena tmp = {.g = g}, gy = {.g = g}; /* gy: dY and what its making needed (the MXFP8 path gives it back early) */
  CUdeviceptr dY, dXr = 0;
  CUdeviceptr dXb = 0;
  int async = 0;
  FB_TRY_GOTO(bwd_combine(g, &gy, L, s, io, &dY), done);
  if (!R) { /* no rows for these experts: no GEMM (the wgrad GEMM would write every expert's tiles, empty ones as zeros) */
    FB_TRY_GOTO(aalloc(&tmp, &dXr, D * 2), done);
    CU_CHECK_GOTO(s_zero(io->dw13, E * 2 * F * D * 4), done);
    CU_CHECK_GOTO(s_zero(io->dw2, E * D * F * 4), done);
  } else if (L->prec->bwd_grad.format != FB_FMT_MXFP8) { /* a BF16 or NVFP4 backward */
    FB_TRY_GOTO(aalloc(&tmp, &dXr, R * D * 2), done);
    FB_TRY_GOTO(bwd_lowp(g, &tmp, L, s, io, dY, dXr), done);
  } else {
    rc = bwd_mx(g, &tmp, &gy, L, s, io, dY, &dXr, &dXb, &async);
    if (rc != FB_OK) xs_abandon(g, async);
    FB_TRY_GOTO(rc, done);
  }
  if (!dXb) FB_TRY_GOTO(dx_send(g, &tmp, L, s, dXr, &dXb, &async), done); /* the BF16 / NVFP4 backward, no rows: in turn */
  FB_TRY_GOTO(dx_finish(g, L, s, io, dXb, async), done);
done:
  g->phase = NULL;
  afree(&gy);
  afree(&tmp);
  gpu_release(g, L);
  return rc;
}

static fb_status gpu_backward(void *ctx, fb_moe_layer *L, const float *dy, float *dx, float *dw13, float *dw2,
                              float *dtopk_w) {
  fb_gpu_experts *g = ctx;
  if (!L->saved) return FB_ERR(FB_EINVAL, "experts gpu: backward of layer %d without a forward", L->layer);
  const gsaved *sv = L->saved;
  size_t T = (size_t)L->tokens, D = (size_t)L->d_model, F = (size_t)L->d_ff, E = (size_t)sv->nE, K = (size_t)L->top_k;
  fb_status rc = FB_OK;
  arena tmp = {.g = g};
  fb_gpu_layer_io io;
  memset(&io, 0, sizeof io);
  FB_TRY_GOTO(up(&tmp, &io.dy, dy, T * D * 4), fail);
  FB_TRY_GOTO(aalloc(&tmp, &io.dx, T * D * 4), fail);
  FB_TRY_GOTO(aalloc(&tmp, &io.dw13, E * 2 * F * D * 4), fail);
  FB_TRY_GOTO(aalloc(&tmp, &io.dw2, E * D * F * 4), fail);
  FB_TRY_GOTO(aalloc(&tmp, &io.dtopk_w, T * K * 4), fail);
  FB_TRY_GOTO(bwd_dev(g, L, &io), done);
  CU_CHECK_GOTO(s_dtoh(dx, io.dx, T * D * 4), done);
  CU_CHECK_GOTO(s_dtoh(dw2, io.dw2, E * D * F * 4), done);
  CU_CHECK_GOTO(s_dtoh(dw13, io.dw13, E * 2 * F * D * 4), done);
  CU_CHECK_GOTO(s_dtoh(dtopk_w, io.dtopk_w, T * K * 4), done);
done:
  afree(&tmp);
  return rc;
fail:
  afree(&tmp);
  gpu_release(g, L);
  return rc;
}

fb_status fb_gpu_experts_forward_dev(fb_gpu_experts *g, fb_moe_layer *L, const fb_gpu_layer_io *io) { return fwd_dev(g, L, io); }
fb_status fb_gpu_experts_backward_dev(fb_gpu_experts *g, fb_moe_layer *L, const fb_gpu_layer_io *io) { return bwd_dev(g, L, io); }

void fb_gpu_experts_profile_begin(fb_gpu_experts *g) { g->prof = 1, g->nprof = 0; }

fb_status fb_gpu_experts_profile_end(fb_gpu_experts *g, fb_gpu_prof *out, int max, int *n) {
  g->prof = 0;
  *n = 0;
  CU_CHECK(fb_cu.CtxSynchronize());
  for (int i = 0; i < g->nprof && *n < max; ++i) {
    float ms = 0;
    CU_CHECK(fb_cu.EventElapsedTime(&ms, g->pr[i].a, g->pr[i].b));
    snprintf(out[*n].name, sizeof out[*n].name, "%s", g->pr[i].name);
    snprintf(out[*n].phase, sizeof out[*n].phase, "%s", g->pr[i].phase);
    out[(*n)++].ms = ms;
  }
  return FB_OK;
}

void fb_gpu_experts_memory(const fb_gpu_experts *g, size_t *live, size_t *peak, size_t *held) {
  *live = g->live, *peak = g->peak, *held = g->held;
}
fb_status fb_gpu_experts_trim(fb_gpu_experts *g) {
  if (g->live) return FB_ERR(FB_EINVAL, "experts gpu: trim with %zu bytes of the pool live (a forward waits for its backward)", g->live);
  CU_CHECK(fb_cu.CtxSynchronize()); /* the blocks' last readers ran */
  for (int i = 0; i < g->nfree; ++i) fb_cu.MemFree(g->fr[i].p), g->held -= g->fr[i].n;
  for (int s = 0; s < g->nsl; ++s) fb_cu.MemFree(g->sl[s].p), g->held -= g->sl[s].n;
  g->nfree = 0, g->nsl = 0, g->nplace = 0, g->kal = 0, g->nev = 0, g->slive = 0, g->step_peak = 0;
  g->peak = 0, g->peak_phase = NULL;
  return FB_OK;
}
const char *fb_gpu_experts_peak_phase(const fb_gpu_experts *g) { return g->peak_phase ? g->peak_phase : "outside a phase"; }

/* ---- create, probe ------------------------------------------------------------------------------------------ */
fb_status fb_gpu_device_arch(int device, const char **arch) {
  fb_cuda_device_info info;
  *arch = NULL;
  FB_TRY(fb_cuda_device_info_get(device, &info));
  *arch = fb_arch_of_cc(info.cc_major, info.cc_minor);
  if (!*arch)
    return FB_USERERR(FB_EINVAL, "GPU %d, %s, is sm_%d%d: fourbit generates kernels for %s only", device, info.name, info.cc_major,
                      info.cc_minor, FB_ARCHS);
  return FB_OK;
}

const char *fb_gpu_experts_arch(const fb_gpu_experts *g) { return g->arch; }

fb_status fb_gpu_experts_create(const fb_gpu_experts_opts *o, fb_gpu_experts **out) {
  *out = NULL;
  const fb_model *M = &o->recipe->model;
  if (M->d_model % 128) return FB_USERERR(FB_EINVAL, "%s: model.d_model = %d: the GPU expert GEMMs take multiples of 128", o->recipe->path, M->d_model);
  if (M->d_ff % 128) return FB_USERERR(FB_EINVAL, "%s: model.d_ff = %d: the GPU expert GEMMs take multiples of 128 (try --d-ff 128)", o->recipe->path, M->d_ff);
  fb_cuda_device_info info;
  memset(&info, 0, sizeof info);
  int dev = o->comm ? fb_comm_local_rank(o->comm) : o->device;
  if (!o->compile_only) {
    FB_TRY(fb_cuda_use_device(dev));
    FB_TRY(fb_cuda_device_info_get(dev, &info));
  }
  const char *arch = "sm_90a";
  if (!o->compile_only) FB_TRY(fb_gpu_device_arch(dev, &arch));
  fb_gpu_experts *g = calloc(1, sizeof *g);
  if (g) {
    g->trace = getenv("FOURBIT_POOL_TRACE") != NULL;
    g->noplan = getenv("FOURBIT_POOL_PLAN") && !strcmp(getenv("FOURBIT_POOL_PLAN"), "0");
    const char *ov = getenv("FOURBIT_GPU_OVERLAP");
    g->overlap = ov && !strcmp(ov, "0") ? 0 : ov && !strcmp(ov, "1") ? 1 : 2;
    const char *cs = getenv("FOURBIT_GPU_COMM_SMS");
    g->comm_sms = cs && atoi(cs) > 0 ? atoi(cs) : 0;
    const char *bp = getenv("FOURBIT_GPU_BPIPE");
    g->bpipe = bp && atoi(bp) > 0 ? atoi(bp) : 0;
    const char *bc = getenv("FOURBIT_GPU_BCHUNK");
    g->bchunk = bc && atoi(bc) > 0 ? atoi(bc) : 0;
    const char *gb = getenv("FOURBIT_GPU_GRAD_BOTH");
    g->grad_both = gb && !strcmp(gb, "0") ? 0 : gb && !strcmp(gb, "1") ? 1 : -1;
  }
  if (!g) return FB_ERR(FB_ENOMEM, "experts gpu");
  g->o = *o, g->sms = info.sm_count, g->arch = arch;
  const char *sc = getenv("FOURBIT_GPU_SYNC");
  g->sync_check = sc && *sc && strcmp(sc, "0");
  const char *xe = getenv("FOURBIT_GPU_EXCHANGE");
  g->xchg1 = xe && *xe && strcmp(xe, "0");
  g->ops = (fb_expert_ops){"gpu", g, gpu_forward, gpu_backward, gpu_release};
  fb_status s = FB_OK;
  if (o->comm) g->comm = o->comm;
  else s = fb_comm_single(&g->comm), g->own_comm = s == FB_OK;
  if (s == FB_OK && !o->compile_only) s = fb_comm_nccl_init(g->comm); /* collective: every rank creates its layer */
  if (s != FB_OK) { fb_gpu_experts_free(g); return s; }
  s = fb_plan_resolve(o->recipe, g->arch, &g->plan);
  for (int l = 0; s == FB_OK && l < g->plan->nlayers; ++l) {
    int seen = 0;
    for (int j = 0; j < l; ++j) seen |= !memcmp(&g->plan->layers[j], &g->plan->layers[l], sizeof g->plan->layers[l]);
    if (seen) continue;
    s = check_prec(&g->plan->layers[l], l + 1);
    if (s == FB_OK) s = need_all(g, &g->plan->layers[l]);
  }
  if (s != FB_OK) { fb_gpu_experts_free(g); return s; }
  *out = g;
  return FB_OK;
}

const fb_expert_ops *fb_gpu_experts_ops(fb_gpu_experts *g) { return &g->ops; }
void fb_gpu_experts_set_exchange(fb_gpu_experts *g, int on) { g->xchg1 = on != 0; }
int fb_gpu_experts_exchange(const fb_gpu_experts *g) { return g->xchg1; }
fb_gpu_experts_stats fb_gpu_experts_stats_get(const fb_gpu_experts *g) { return g->st; }

void fb_gpu_experts_free(fb_gpu_experts *g) {
  if (!g) return;
  for (int i = 0; i < g->nk; ++i)
    if (!g->o.compile_only && !g->kt[i].shared) fb_kernel_unload(&g->kt[i].k);
  if (!g->o.compile_only) {
    for (int i = 0; i < g->nfree; ++i) fb_cu.MemFree(g->fr[i].p);
    for (int s = 0; s < g->nsl; ++s) fb_cu.MemFree(g->sl[s].p);
    for (int i = 0; i < g->ngo; ++i) fb_cu.MemFree(g->go[i].p);
    for (int i = 0; i < g->nrm; ++i) fb_cu.MemFree(g->rm[i].p);
    for (int i = 0; i < g->nevents; ++i) fb_cu.EventDestroy(g->pr[i].a), fb_cu.EventDestroy(g->pr[i].b);
    if (g->xs) fb_cu.StreamDestroy(g->xs), fb_cu.EventDestroy(g->xev[0]), fb_cu.EventDestroy(g->xev[1]);
    if (g->ps) {
      fb_cu.StreamDestroy(g->ps);
      for (int i = 0; i < 5; ++i) fb_cu.EventDestroy(g->pev[i]);
    }
  }
  fb_plan_free(g->plan);
  if (g->own_comm) fb_comm_free(g->comm);
  free(g);
}

/* The probes of a one-rank layer without the exchange (s->direct) that name send-order rows: its combine payload is
 * the owner's R rows and its row_of the owner rows; the send order is the owner's without the padding rows (expert j's
 * rows [off[j], off[j] + cnt[j]) are send rows [sum of the counts before j, ...)). d, n: the probe as the exchange path
 * has it (n bytes: Rs rows, or T k int32). */
static fb_status probe_direct(const fb_moe_layer *L, const char *name, CUdeviceptr d, size_t n, void **out, size_t *bytes) {
  const gsaved *s = L->saved;
  size_t E = (size_t)s->nE, rb = s->Rs ? n / s->Rs : 0, nd = strcmp(name, "source_row_of") ? s->R * rb : n;
  unsigned char *dev = malloc(nd ? nd : 1), *h = malloc(n ? n : 1);
  long long *first = malloc((E + 1) * sizeof *first);
  fb_status rc = FB_OK;
  if (!dev || !h || !first) { rc = FB_ERR(FB_ENOMEM, "experts gpu: probe"); goto out; }
  int r_ = nd ? (int)s_dtoh(dev, d, nd) : 0;
  if (r_) { rc = FB_ERR(FB_ECUDA, "experts gpu: probe %s: %s", name, fb_cu_errstr(r_)); goto out; }
  first[0] = 0;
  for (size_t j = 0; j < E; ++j) first[j + 1] = first[j] + s->cnt[j];
  if (!strcmp(name, "source_row_of")) {
    const int32_t *ro = (const int32_t *)(const void *)dev;
    int32_t *so = (int32_t *)(void *)h;
    for (size_t i = 0; i < n / 4; ++i) {
      size_t j = 0;
      while (ro[i] >= 0 && j + 1 < E && ro[i] >= s->off[j + 1]) ++j;
      so[i] = ro[i] < 0 ? -1 : (int32_t)(ro[i] - s->off[j] + first[j]);
    }
  } else {
    for (size_t j = 0; j < E; ++j)
      memcpy(h + (size_t)first[j] * rb, dev + (size_t)s->off[j] * rb, (size_t)s->cnt[j] * rb);
  }
  *out = h, *bytes = n, h = NULL;
out:
  free(dev), free(h), free(first);
  return rc;
}

fb_status fb_gpu_experts_probe(const fb_moe_layer *L, const char *name, void **out, size_t *bytes) {
  *out = NULL, *bytes = 0;
  const gsaved *s = L->saved;
  if (!s) return FB_ERR(FB_EINVAL, "experts gpu: probe of layer %d without a saved forward", L->layer);
  size_t R = s->R, T = (size_t)L->tokens, D = (size_t)L->d_model, F = (size_t)L->d_ff, E = (size_t)s->nE,
         K = (size_t)L->top_k;
  const void *host = NULL;
  CUdeviceptr d = 0;
  size_t n = 0;
  const dq *m = NULL;
  const char *part = NULL;
  if (!strncmp(name, "x_", 2)) m = &s->X, part = name + 2;
  else if (!strncmp(name, "w13_", 4)) m = &s->W13, part = name + 4;
  else if (!strncmp(name, "w2_", 3)) m = &s->W2, part = name + 3;
  else if (!strncmp(name, "a_", 2)) m = &s->A, part = name + 2;
  if (m) {
    size_t el = m->rows * m->cols;
    int nv = m->f == FB_FMT_NVFP4, bf = m->f == FB_FMT_BF16; /* BF16: codes are the values */
    if (!strcmp(part, "codes")) d = m->c, n = nv ? el / 2 : bf ? el * 2 : el;
    else if (!strcmp(part, "scales") && !bf) d = m->s, n = nv ? el / 16 : el / 32;
    else if (!strcmp(part, "sdec") && nv && m->o) d = m->o, n = (m->orow ? m->rows : m->no) * 4;
  } else if (!strcmp(name, "h")) d = s->H, n = R * 2 * F * 2;
  else if (!strcmp(name, "y_codes")) d = s->ycq, n = s->Rs * D * (L->prec->combine.format == FB_FMT_BF16 ? 2 : 1);
  else if (!strcmp(name, "y_scales") && s->yce) d = s->yce, n = s->Rs * D / 32;
  else if (!strcmp(name, "offsets")) host = s->off, n = (E + 1) * 8;
  else if (!strcmp(name, "row_of") || !strcmp(name, "source_row_of")) d = s->d_rowof, n = T * K * 4;
  if (!d && !host) return FB_ERR(FB_ENOTFOUND, "experts gpu: layer %d has no saved tensor '%s'", L->layer, name);
  if (s->direct && (!strcmp(name, "y_codes") || !strcmp(name, "y_scales") || !strcmp(name, "source_row_of")))
    return probe_direct(L, name, d, n, out, bytes);
  void *h = malloc(n ? n : 1);
  if (!h) return FB_ERR(FB_ENOMEM, "experts gpu: probe");
  if (host) memcpy(h, host, n);
  else if (n) {
    int r_ = (int)s_dtoh(h, d, n);
    if (r_) { free(h); return FB_ERR(FB_ECUDA, "experts gpu: probe %s: %s", name, fb_cu_errstr(r_)); }
    if (!strcmp(name, "row_of") && s->N == 1 && !s->direct && s->Rr) { /* one rank: the owner row of each (token, slot) */
      int32_t *lr = malloc(s->Rr * 4), *ro = h;
      if (!lr) { free(h); return FB_ERR(FB_ENOMEM, "experts gpu: probe"); }
      r_ = (int)s_dtoh(lr, s->d_lrow, s->Rr * 4);
      for (size_t i = 0; !r_ && i < T * K; ++i) ro[i] = ro[i] < 0 ? -1 : lr[ro[i]];
      free(lr);
      if (r_) { free(h); return FB_ERR(FB_ECUDA, "experts gpu: probe %s: %s", name, fb_cu_errstr(r_)); }
    }
  }
  *out = h, *bytes = n;
  return FB_OK;
}
