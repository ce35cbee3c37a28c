/* test_gemm.c — the grouped GEMMs of templates/gemm_sm90.cuh against an FP64 reference of the exactly dequantized
 * operands (runtime/numerics.c), on the GPU, over a covering set of the generator's own kept variants.
 *   test_gemm                   the covering set (below) and the hand-built cases, on balanced and skewed (odd and
 *                               empty experts) row distributions; output poisoned (NaN) first; a line per class at the end
 *   test_gemm --compile-only    compile every class's variant and the hand-built ones (sm_90a; the companions and twins
 *                               only with --only) and check ptxas's log: no spills, no stack frame,
 *                               no C75xx wgmma advisories (serialization, injected waits); runs on any machine. Where
 *                               a cuobjdump is found ($CUOBJDUMP, CUDA's, PATH) also the SASS: every GEMM has HGMMA
 *                               (QGMMA for FP8) and UTMALDG, and no instruction touches an accumulator register of a
 *                               wgmma group between its issue and the wait that retires it (issue 18: the MXFP8 SwiGLU
 *                               pipe 2 epilogues copied the accumulators before the last group's wait_group 0)
 *   test_gemm --compile-only --arch A   the same for another arch (sm_89, sm_100a, sm_103a, sm_120a): the portable
 *                               family's units and the BF16 copies, which are what that arch runs; never run here
 *   test_gemm --only SUBSTR,..  only kernels whose name contains one of them (and what their checks compare with: the FP32
 *                               companion of a SwiGLU / S2F6 variant, the pipe 0 twin of a pipelined FP32 one)
 *   test_gemm --list            the classes and the chosen variants, without compiling
 *   test_gemm --held            also the classes the generator holds out until they have run on a GPU (its reason says
 *                               "held out until run on a GPU"; none now): a variant each built by hand, run and counted
 *   test_gemm --bench PEERFILE  also time every covering-set variant that passed (and the FP8 wgmma ones) on the
 *                               benchmark's shapes (--write-shapes FILE writes them for tests/gpu/bench_gemm_peer.py,
 *                               which writes PEERFILE); first the mma.sync ceiling (BF16 m16n8k16, E4M3 m16n8k32 on
 *                               register operands: the portable family's bound on this GPU)
 * The covering set: every GEMM spec of every shipped recipe's plan (every .lua file in recipes/, sm_90a; specs of the same name and
 * outer scales once), its variants from fb_gen_variants under a family holding every value any shipped recipe's gemm
 * family uses for each tune parameter, and pipe 0, 1 and 2 (the values the recipe loader takes): the generator's kept
 * set over those values. Each variant falls in a class: operand kinds (BF16, NVFP4 per-row/expert or per-tensor outer
 * scales, MXFP8) x epilogue (none = BF16 rows, SwiGLU, SwiGLU backward, S2F6/RHT-32 combine, wgrad FP32) x pipe x
 * consumer warpgroups x m64 sub-tiles per consumer x tile_n x tile_k x BF16 weight copy. One variant per class is run,
 * the first that a shipped recipe's own family keeps (else the first the generator keeps). A class of those values that
 * has no variant is reported with the generator's reason (a probe variant of that class, pruned) or as having no spec
 * in any shipped plan: never skipped in silence.
 * Hand-built cases beside it: every GEMM the GPU expert layer runs for recipes/nvidia_nvfp4.lua and recipes/bf16.lua
 * under its own names (runtime/experts_gpu.c), and two hand-built FP8 wgmma forms (measured, not counted).
 * Pass: FP32 outputs within a relative Frobenius error of 1e-5 of the reference (only the FP32 summation order
 * differs; 1e-4 for the FP8 tensor-core products of MXFP8 x MXFP8, weights_bf16 0: docs/numerics.md); BF16 outputs within one BF16 ulp of the reference everywhere (the rounding of the FP32 result, plus
 * that order), every output element written. SwiGLU, SwiGLU backward and S2F6 outputs also bit-exact against the CPU
 * epilogue of the FP32 output of their companion: a plain FP32 rows GEMM built here with the same kind, outer scales
 * and tune values (the same main loop), run on the same problem just before. A pipelined main loop (pipe 1 / 2) of an
 * FP32 output: bit-identical to its pipe 0 twin (the same wgmmas in the same order). Exit 0 only if all pass; 77
 * (SKIPPED) without a GPU. Run from the repository root (it reads the recipes/ folder). */
#include "fb_cuda.h"
#include "fb_gemm_host.h"
#include "fourbit.h"
#include "fb_math.h"
#include "fb_moe.h"
#include "fb_kparams.h"
#include "gemm_harness.h"

#include <glob.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DIE(...) (fprintf(stderr, __VA_ARGS__), fputc('\n', stderr), exit(1))
#define CK(call) do { fb_status s_ = (call); if (s_ != FB_OK) DIE("%s:%d: %s: %s", __FILE__, __LINE__, #call, fb_errmsg()); } while (0)
#define CU(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { const char *m_ = "?"; fb_cu.GetErrorString(r_, &m_); DIE("%s:%d: %s: %s", __FILE__, __LINE__, #call, m_); } } while (0)

#define NPN 9 /* the wgmma family's tune parameters */
static const char *const PN[NPN] = {"tile_m", "tile_n", "tile_k", "stages", "cluster", "consumers", "weights_bf16", "pipe", "pingpong"};

/* ---- hand-built cases ---- */
typedef struct {
  const char *name;
  int kind, mode, out_bf16, tensor_outer, epi; /* epi: 0 plain, 1 SwiGLU, 2 SwiGLU backward, 3 RHT-32 + S2F6 */
  int nv;
  int v[8][NPN]; /* tile_m, tile_n, tile_k, stages, cluster, consumers, weights_bf16, pipe, pingpong */
} gcase;

static const gcase hand[] = {
    /* FP8 wgmma with per-32 promotion at 128 x 128 with two consumers, built by hand since before the generator kept
       such variants (docs/numerics.md: within 1e-4 now, unless a recipe says gemm.accumulate = "exact"); the covering
       set's weights_bf16 0 classes are the generator's own and counted; these two are measured, not counted */
    {"gemm_t_mxfp8fp8_rows_f32", 2, 0, 0, 0, 0, 1, {{128, 128, 128, 4, 1, 2, 0}}},
    {"gemm_t_mxfp8fp8_wgrad_f32", 2, 1, 0, 0, 0, 1, {{128, 128, 128, 4, 1, 2, 0}}},
    /* Every GEMM the GPU expert layer runs for recipes/nvidia_nvfp4.lua and recipes/bf16.lua (experts_gpu.c need_all:
       sp_gemm 0-3), under the layer's names and specs. One variant is the first of the recipes' gemm family (what the
       layer compiles without a tuned cache: 64 x 128, one consumer), the others wider with two consumers. nvfp4_ten:
       one FP32 S_dec per tensor for A and for B (FB_A_OUTER = FB_B_OUTER = 2), both != 1, on the per-tensor problem;
       B the exact BF16 copy (16x16 weight blocks copy as 1x16 ones: the GEMM sees the same BF16 values either way). */
    {"gemm_fwd_nvfp4_tenxnvfp4_ten_bf16_swiglu", 1, 0, 1, 1, 1, 1, {{128, 256, 128, 3, 1, 2, 1}}},
    {"gemm_fwd_nvfp4_tenxnvfp4_ten_bf16", 1, 0, 1, 1, 0, 2, {{64, 128, 128, 3, 1, 1, 1}, {128, 256, 128, 3, 1, 2, 1}}},
    {"gemm_dgrad_nvfp4_tenxnvfp4_ten_bf16", 1, 0, 1, 1, 0, 2, {{128, 192, 128, 3, 1, 2, 1}, {128, 192, 128, 3, 1, 2, 1, 2}}},
    {"gemm_fwd_bf16xbf16_bf16_swiglu", 0, 0, 1, 0, 1, 1, {{128, 256, 64, 3, 1, 2, 1}}},
    {"gemm_fwd_bf16xbf16_bf16", 0, 0, 1, 0, 0, 1, {{64, 128, 64, 3, 1, 1, 1}}},
    {"gemm_dgrad_bf16xbf16_bf16", 0, 0, 1, 0, 0, 1, {{128, 192, 64, 3, 1, 2, 1}}},
    {"gemm_wgrad_bf16xbf16_f32", 0, 1, 0, 0, 0, 1, {{64, 128, 64, 3, 1, 1, 1}}},
};
#define NHAND (int)(sizeof hand / sizeof hand[0])

/* a hand case's spec: the FP8 form as test specs were built; the layer's as experts_gpu.c's sp_gemm builds it for
   nvidia_nvfp4 (per-tensor NVFP4, 16x16 forward weights, an SR-quantized dY / dH in the dgrad) or bf16 */
static fb_kernel_spec hand_spec(const gcase *g) {
  fb_kernel_spec k;
  memset(&k, 0, sizeof k);
  snprintf(k.name, sizeof k.name, "%s_sm90a", g->name);
  snprintf(k.family, sizeof k.family, "gemm");
  k.out_bf16 = g->out_bf16;
  if (g->kind == 2) {
    k.op = g->mode ? FB_OP_GEMM_WGRAD : FB_OP_GEMM_FWD2;
    k.src.format = k.act.format = FB_FMT_MXFP8;
    return k;
  }
  int dgrad = !strncmp(g->name, "gemm_dgrad_", 11);
  k.op = g->mode ? FB_OP_GEMM_WGRAD : dgrad ? FB_OP_GEMM_DGRAD13 : g->epi == 1 ? FB_OP_GEMM_FWD13 : FB_OP_GEMM_FWD2;
  if (g->kind == 1) {
    k.src.format = k.act.format = FB_FMT_NVFP4;
    k.src.outer = k.act.outer = FB_GRAN_TENSOR;
    k.src.two_d = !dgrad;
    k.act.rounding = dgrad ? FB_ROUND_SR : FB_ROUND_RN;
    if (k.op == FB_OP_GEMM_FWD13) k.q = k.act;
  }
  return k;
}

/* ---- units: one variant to compile and check ---- */
enum { R_COVER, R_COMP, R_TWIN, R_LAYER, R_FP8, R_BCOPY, R_HELD, NROLES };
/* epilogue classes */
enum { E_NONE, E_SWIGLU, E_SWIGLUBWD, E_S2F6, E_WGRAD, E_F32ROWS, E_S2F6NORHT, NEPI };
static const char *const EPI_NAME[NEPI] = {"none (BF16 rows)", "SwiGLU", "SwiGLU bwd", "S2F6/RHT-32", "wgrad FP32", "FP32 rows", "S2F6"};
typedef struct {
  fb_kernel_spec k;
  fb_variant v;
  int role, kind, mode, outer, epi; /* kind as fb_gemm_cfg's (3: MXFP8 x BF16 copy); outer: NVFP4 per tensor */
  int dep;                          /* fused: its companion; pipelined FP32: its pipe 0 twin; -1 none */
  int cls;                          /* R_COVER: its class */
  int sel;                          /* compiled and run (--only and what the selected ones compare with) */
  char *src;
  fb_cubin cubin;
  fb_status st;
  int failed, ran, cprob; /* cprob: ptxas or the SASS check found a problem (spills, advisories, accumulators) */
  int sass, acc;          /* sass_check's verdict (-2 not read) and its count of accumulator touches, first the first */
  char first[200];
  float *out; /* FP32 output on the current problem (companions and twins), malloc'd */
  char res[2][8];
  char err[8192];
} unit;

static unit *units;
static int nunits, capunits, next_unit;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static unit *new_unit(void) {
  if (nunits == capunits) {
    capunits = capunits ? 2 * capunits : 256;
    units = realloc(units, sizeof *units * (size_t)capunits);
    if (!units) DIE("test_gemm: out of memory");
  }
  unit *u = &units[nunits++];
  memset(u, 0, sizeof *u);
  u->dep = -1, u->cls = -1;
  return u;
}

static int vparam(const fb_variant *v, const char *name) {
  for (int i = 0; i < v->nparams; ++i)
    if (!strcmp(v->param[i], name)) return v->value[i];
  return 0;
}

/* kind, outer and epilogue class of a GEMM spec (weights_bf16 from the variant: MXFP8 x BF16 copy is kind 3) */
static int spec_kind(const fb_kernel_spec *k, int wb) {
  return k->src.format == FB_FMT_NVFP4 ? 1 : k->src.format == FB_FMT_MXFP8 ? (wb ? 3 : 2) : 0;
}
/* NVFP4 outer scales: 0 per row / expert, 1 per tensor, -1 mixed (the harness makes no such problem) */
static int spec_outer(const fb_kernel_spec *k) {
  if (k->src.format != FB_FMT_NVFP4) return 0;
  int a = k->act.outer == FB_GRAN_TENSOR, b = k->src.outer == FB_GRAN_TENSOR;
  return a == b ? a : -1;
}
static int spec_epi(const fb_kernel_spec *k) {
  if (k->op == FB_OP_GEMM_FWD13) return E_SWIGLU;
  if (k->op == FB_OP_GEMM_DGRAD2) return E_SWIGLUBWD;
  if (k->op == FB_OP_GEMM_WGRAD) return E_WGRAD;
  if (k->op == FB_OP_GEMM_FWD2 && k->q.format == FB_FMT_S2F6) return k->q.rht ? E_S2F6 : E_S2F6NORHT;
  return k->out_bf16 ? E_NONE : E_F32ROWS;
}
static int fused(int epi) { return epi == E_SWIGLU || epi == E_SWIGLUBWD || epi == E_S2F6 || epi == E_S2F6NORHT; }

/* ---- the covering family and the classes ---- */
/* the values of each tune parameter that any shipped recipe's gemm family uses (pipe: 0, 1, 2 besides) */
static int fvals[NPN][16], nfv[NPN];
static void add_value(int p, int x) {
  for (int i = 0; i < nfv[p]; ++i)
    if (fvals[p][i] == x) return;
  if (nfv[p] == 16) DIE("test_gemm: more than 16 values of %s", PN[p]);
  int i = nfv[p]++;
  while (i > 0 && fvals[p][i - 1] > x) fvals[p][i] = fvals[p][i - 1], --i; /* sorted */
  fvals[p][i] = x;
}
/* the product of fvals as a family (rows in the product's order, the last parameter fastest) */
static fb_tune_family product_family(void) {
  fb_tune_family f;
  memset(&f, 0, sizeof f);
  snprintf(f.family, sizeof f.family, "gemm");
  f.nparams = NPN;
  for (int p = 0; p < NPN; ++p) snprintf(f.param[p], sizeof f.param[p], "%s", PN[p]);
  int n = 1;
  for (int p = 0; p < NPN; ++p) n *= nfv[p];
  f.nvariants = n;
  f.values = malloc(sizeof(int) * NPN * (size_t)n);
  if (!f.values) DIE("test_gemm: out of memory");
  for (int i = 0; i < n; ++i)
    for (int p = NPN - 1, r = i; p >= 0; --p) f.values[NPN * i + p] = fvals[p][r % nfv[p]], r /= nfv[p];
  return f;
}

typedef struct {
  int kind, outer, epi, pipe, co, mw, tn, tk, wb; /* kind: 0 BF16, 1 NVFP4, 2 MXFP8; wb -1: no such parameter (BF16) */
  int fam; /* 0 wgmma (gemm_sm90.cuh: mw = m64 sub-tiles a consumer), 1 mma.sync (gemm_mma.cuh: mw = m16 tiles a warp) */
  int pp;  /* wgmma's ping-pong consumers (each a whole tile) */
} ckey;
typedef struct {
  ckey key;
  int unit;      /* the chosen variant's unit, -1 none */
  int nkept;     /* the generator's kept variants in the class */
  int in_recipe; /* the chosen one is in a shipped recipe's own family */
  char why[256]; /* no variant: why */
} cls;
static cls *classes;
static int nclasses;

static const char *kind_name(int kind, int outer) {
  return kind == 0 ? "BF16" : kind == 1 ? (outer ? "NVFP4 (tensor outer)" : "NVFP4 (row outer)") : "MXFP8";
}
static void class_label(const ckey *c, char *b, size_t n) {
  char wb[16] = "";
  if (c->wb >= 0) snprintf(wb, sizeof wb, " b%d", c->wb);
  snprintf(b, n, "%-5s %-20s %-16s p%d w%d%s mw%d n%d%s", c->fam ? "mma" : "wgmma", kind_name(c->kind, c->outer), EPI_NAME[c->epi], c->pipe,
           c->co, c->pp ? " pp" : "", c->mw, c->tn, wb);
}
static ckey key_of(const fb_kernel_spec *k, const fb_variant *v) {
  int wb = vparam(v, "weights_bf16"), co = vparam(v, "consumers"), pp = vparam(v, "pingpong");
  int has_wb = 0;
  for (int i = 0; i < v->nparams; ++i) has_wb |= !strcmp(v->param[i], "weights_bf16");
  int kind = spec_kind(k, 1), fam = !strcmp(v->tmpl, "gemm_mma.cuh");
  ckey c = {kind == 3 ? 2 : kind, spec_outer(k), spec_epi(k), vparam(v, "pipe"), co,
            fam ? vparam(v, "tile_m") / (4 * co / FB_GEMM_MMA_WARPS_N(vparam(v, "tile_n"))) / 16 : vparam(v, "tile_m") / (pp ? 1 : co) / 64,
            vparam(v, "tile_n"), 0, has_wb ? wb : -1, fam, pp}; /* tile_k: not a class of its own (the BF16 GEMM's 64 / 128 differ by a loop's count) */
  return c;
}
static int find_class(const ckey *c) {
  for (int i = 0; i < nclasses; ++i)
    if (!memcmp(&classes[i].key, c, sizeof *c)) return i;
  return -1;
}
static int add_class(const ckey *c) {
  int i = find_class(c);
  if (i >= 0) return i;
  classes = realloc(classes, sizeof *classes * (size_t)(nclasses + 1));
  if (!classes) DIE("test_gemm: out of memory");
  memset(&classes[nclasses], 0, sizeof classes[0]);
  classes[nclasses].key = *c, classes[nclasses].unit = -1;
  return nclasses++;
}

/* the distinct GEMM specs of the shipped plans (same name and outer scales once) */
typedef struct {
  fb_kernel_spec k;
  const char *recipe; /* the first recipe whose plan has it */
  fb_variant *kept;   /* kept under the covering family */
  int nkept;
  char *in_recipe;    /* [nkept]: also kept by a shipped recipe's own family */
} gspec;
static gspec *gspecs;
static int ngspecs;

/* a spec's variant of family fam (0 wgmma, 1 mma) with the given values through the generator (a one-row family): 1 kept
   (*v), 0 pruned (why) */
static const char *const FAM_TMPL[2] = {"gemm_sm90.cuh", "gemm_mma.cuh"};
static int fam_of(const fb_variant *v) { return !strcmp(v->tmpl, FAM_TMPL[1]); }
static int probe(const fb_kernel_spec *k, const int val[NPN], int fam, fb_variant *v, char *why, size_t n) {
  fb_tune_family f;
  memset(&f, 0, sizeof f);
  snprintf(f.family, sizeof f.family, "gemm");
  f.nparams = NPN, f.nvariants = 1, f.values = (int *)val;
  for (int p = 0; p < NPN; ++p) snprintf(f.param[p], sizeof f.param[p], "%s", PN[p]);
  fb_variant *vs;
  int nv, pruned;
  why[0] = 0;
  CK(fb_gen_variants(k, &f, &vs, &nv, &pruned, why, n));
  int got = 0;
  for (int i = 0; i < nv && !got; ++i)
    if (!strcmp(vs[i].tmpl, FAM_TMPL[fam])) *v = vs[i], got = 1;
  /* one family kept, the other pruned: why is the pruned one's reason (fb_gen_variants gives the first pruned row's) */
  if (!got && nv && n && !why[0]) snprintf(why, n, "the %s variant is pruned (only the other family's is kept)", fam ? "mma" : "wgmma");
  free(vs);
  return got;
}

/* The companion of a fused unit (a plain FP32 rows GEMM of the same kind, outer scales and tune values) or the pipe 0
   twin of a pipelined FP32 one: its unit, added if new */
static int g_held;
#define HELD_WHY "held out until run on a GPU"
static void hand_variant(const fb_kernel_spec *k, const int *val, int np, fb_variant *v);
static int dep_unit(int ui, int role) {
  const unit *u = &units[ui];
  fb_kernel_spec k = u->k;
  if (role == R_COMP) { /* built as test specs are: only what the GEMM's #defines read */
    memset(&k, 0, sizeof k);
    const char *kn = u->kind == 0 ? "bf16" : u->kind == 1 ? (u->outer ? "nvfp4tensor" : "nvfp4") : u->kind == 3 ? "mxfp8" : "mxfp8fp8";
    snprintf(k.name, sizeof k.name, "gemm_t_%s_rows_f32_sm90a", kn);
    snprintf(k.family, sizeof k.family, "gemm");
    k.op = FB_OP_GEMM_FWD2;
    k.src.format = k.act.format = u->k.src.format;
    if (u->kind == 1) {
      k.src.outer = u->outer ? FB_GRAN_TENSOR : FB_GRAN_EXPERT;
      k.act.outer = u->outer ? FB_GRAN_TENSOR : FB_GRAN_TOKEN;
    }
  }
  int val[NPN];
  for (int p = 0; p < NPN; ++p) val[p] = vparam(&u->v, PN[p]);
  if (role == R_TWIN) val[7] = 0;
  fb_variant v;
  char why[256];
  if (!probe(&k, val, fam_of(&u->v), &v, why, sizeof why)) {
    if (!(g_held && strstr(why, HELD_WHY)))
      DIE("test_gemm: %s: its %s is pruned: %s", u->v.name, role == R_COMP ? "companion" : "pipe 0 twin", why);
    hand_variant(&k, val, NPN, &v); /* held as the unit itself is: built by hand the same way */
  }
  for (int i = 0; i < nunits; ++i) /* the same kernel: the same name and outer scales (what else the name does not say) */
    if (!strcmp(units[i].v.name, v.name) && units[i].k.act.outer == k.act.outer && units[i].k.src.outer == k.src.outer) return i;
  unit *d = new_unit(); /* may move units */
  d->k = k, d->v = v, d->role = role, d->kind = units[ui].kind, d->mode = units[ui].mode, d->outer = units[ui].outer;
  d->epi = spec_epi(&k);
  int di = (int)(d - units);
  if (role == R_COMP && vparam(&v, "pipe")) {
    int t = dep_unit(di, R_TWIN); /* may move units */
    units[di].dep = t;
  }
  return di;
}

/* --held: the classes the generator holds out only until they have run on a GPU (gen/templates.c gemm_illegal: a reason
   with HELD_WHY in it; FP8 wgmma beside the forward SwiGLU and S2F6 epilogues were, until the H200 ran them this way),
   a variant each built here by hand with the probe's values, run and counted as the classes are (a wrong one fails
   the run); the generator's reason stays in the class's line */
/* A wgmma variant built here, past the generator: the first np of PN's parameters (6: the tile, stages, cluster and
   consumers; 8: also weights_bf16 and pipe; NPN: also pingpong) of spec k, named as the generator names them (_b for
   weights_bf16, which the BF16 GEMM's family does not have; _p for a pipe, _pp for ping-pong) */
static void hand_variant(const fb_kernel_spec *k, const int *val, int np, fb_variant *v) {
  const int wb = k->src.format != FB_FMT_BF16; /* the family has weights_bf16 */
  snprintf(v->tmpl, sizeof v->tmpl, "gemm_sm90.cuh");
  v->nparams = 0;
  for (int q = 0; q < np; ++q)
    if (q != 6 || wb) snprintf(v->param[v->nparams], sizeof v->param[0], "%s", PN[q]), v->value[v->nparams++] = val[q];
  int n = snprintf(v->name, sizeof v->name, "%s_m%dn%dk%d_s%d_c%d_w%d", k->name, val[0], val[1], val[2], val[3], val[4], val[5]);
  if (np > 6 && wb) n += snprintf(v->name + n, sizeof v->name - (size_t)n, "_b%d", val[6]);
  if (np > 7 && val[7]) n += snprintf(v->name + n, sizeof v->name - (size_t)n, "_p%d", val[7]);
  if (np > 8 && val[8]) snprintf(v->name + n, sizeof v->name - (size_t)n, "_pp");
}
static void held_unit(const fb_kernel_spec *k, const int val[NPN], int ci) {
  unit *u = new_unit();
  u->k = *k, u->role = R_HELD, u->cls = ci, u->kind = spec_kind(k, val[6]), u->mode = k->op == FB_OP_GEMM_WGRAD;
  u->outer = spec_outer(k), u->epi = spec_epi(k);
  hand_variant(k, val, NPN, &u->v);
  classes[ci].unit = (int)(u - units);
}

/* Every shipped recipe's GEMM specs and the covering family; the classes; one unit per class with a variant */
static void build_cover(void) {
  glob_t g;
  if (glob("recipes/*.lua", 0, NULL, &g) || !g.gl_pathc) DIE("test_gemm: no recipes/*.lua here: run from the repository root");
  fb_recipe **rs = calloc(g.gl_pathc, sizeof *rs);
  for (size_t i = 0; i < g.gl_pathc; ++i) {
    CK(fb_recipe_load(g.gl_pathv[i], &rs[i]));
    for (int f = 0; f < rs[i]->nfamilies; ++f) {
      const fb_tune_family *fam = &rs[i]->families[f];
      if (strcmp(fam->family, "gemm")) continue;
      for (int j = 0; j < fam->nvariants; ++j)
        for (int p = 0; p < fam->nparams; ++p)
          for (int q = 0; q < NPN; ++q)
            if (!strcmp(fam->param[p], PN[q])) add_value(q, fam->values[(size_t)j * fam->nparams + p]);
    }
  }
  for (int p = 0; p <= 2; ++p) add_value(7, p);
  for (int q = 0; q < NPN; ++q)
    if (!nfv[q]) DIE("test_gemm: no shipped recipe's gemm family has %s", PN[q]);
  fb_tune_family F = product_family();
  for (size_t i = 0; i < g.gl_pathc; ++i) {
    fb_plan *p;
    CK(fb_plan_resolve(rs[i], "sm_90a", &p));
    const fb_tune_family *own = NULL;
    for (int f = 0; f < rs[i]->nfamilies; ++f)
      if (!strcmp(rs[i]->families[f].family, "gemm")) own = &rs[i]->families[f];
    for (int j = 0; j < p->nkernels; ++j) {
      const fb_kernel_spec *k = &p->kernels[j];
      if (strncmp(k->name, "gemm_", 5)) continue;
      const char *why;
      const char *t = fb_gen_template(k, &why);
      if (t && strcmp(t, "gemm_sm90.cuh")) continue;
      int s = 0;
      for (; s < ngspecs; ++s)
        if (!strcmp(gspecs[s].k.name, k->name) && spec_outer(&gspecs[s].k) == spec_outer(k) &&
            gspecs[s].k.act.outer == k->act.outer && gspecs[s].k.src.outer == k->src.outer)
          break;
      if (s == ngspecs) {
        gspecs = realloc(gspecs, sizeof *gspecs * (size_t)(ngspecs + 1));
        memset(&gspecs[s], 0, sizeof gspecs[s]);
        gspecs[s].k = *k, gspecs[s].recipe = g.gl_pathv[i];
        ++ngspecs;
        if (t) {
          int pruned;
          CK(fb_gen_variants(k, &F, &gspecs[s].kept, &gspecs[s].nkept, &pruned, NULL, 0));
          gspecs[s].in_recipe = calloc((size_t)gspecs[s].nkept + 1, 1);
        }
      }
      if (!t || !own) continue;
      fb_variant *vs; /* which of the kept ones this recipe's own family keeps */
      int nv, pruned;
      CK(fb_gen_variants(k, own, &vs, &nv, &pruned, NULL, 0));
      for (int a = 0; a < nv; ++a)
        for (int b = 0; b < gspecs[s].nkept; ++b)
          if (!strcmp(vs[a].name, gspecs[s].kept[b].name)) gspecs[s].in_recipe[b] = 1;
      free(vs);
    }
    fb_plan_free(p);
  }
  /* the classes of the kept variants, the chosen one each */
  for (int pass = 0; pass < 2; ++pass) /* pass 0: a variant some recipe keeps; pass 1: any the generator keeps */
    for (int s = 0; s < ngspecs; ++s)
      for (int j = 0; j < gspecs[s].nkept; ++j) {
        const fb_variant *v = &gspecs[s].kept[j];
        ckey c = key_of(&gspecs[s].k, v);
        if (c.outer < 0) DIE("test_gemm: %s: NVFP4 A and B outer scales of different granularity: no such problem in gemm_harness.c", v->name);
        int ci = add_class(&c);
        if (!pass) ++classes[ci].nkept;
        if (classes[ci].unit >= 0 || (!pass && !gspecs[s].in_recipe[j])) continue;
        unit *u = new_unit();
        u->k = gspecs[s].k, u->v = *v, u->role = R_COVER, u->cls = ci;
        u->kind = spec_kind(&u->k, vparam(v, "weights_bf16")), u->mode = u->k.op == FB_OP_GEMM_WGRAD, u->outer = c.outer;
        u->epi = c.epi;
        classes[ci].unit = (int)(u - units), classes[ci].in_recipe = !pass;
      }
  /* the classes of those values that have no variant, and why (kinds x outer x epilogues with a spec in a plan; the
     others are said once per kind and epilogue) */
  static const int kinds[][2] = {{0, 0}, {1, 0}, {1, 1}, {2, 0}};
  for (int a = 0; a < 4; ++a)
    for (int e = 0; e < NEPI; ++e) {
      if (e == E_F32ROWS || e == E_S2F6NORHT) continue; /* no recipe's plan has them: the companions cover FP32 rows */
      int s = 0;
      for (; s < ngspecs; ++s) {
        const fb_kernel_spec *k = &gspecs[s].k;
        int kd = spec_kind(k, 1);
        if ((kd == 3 ? 2 : kd) == kinds[a][0] && spec_outer(k) == kinds[a][1] && spec_epi(k) == e) break;
      }
      if (s == ngspecs) {
        ckey c = {kinds[a][0], kinds[a][1], e, -1, 0, 0, 0, 0, -1, 0, 0};
        int ci = add_class(&c);
        snprintf(classes[ci].why, sizeof classes[ci].why, "no shipped recipe's plan has such a GEMM");
        continue;
      }
      const char *why;
      if (!fb_gen_template(&gspecs[s].k, &why)) {
        ckey c = {kinds[a][0], kinds[a][1], e, -1, 0, 0, 0, 0, -1, 0, 0};
        int ci = add_class(&c);
        snprintf(classes[ci].why, sizeof classes[ci].why, "%s (%s): %s", gspecs[s].k.name, gspecs[s].recipe, why);
        continue;
      }
      int has_wb = kinds[a][0] != 0;
      for (int fam = 0; fam < 2; ++fam)
      for (int pi = 0; pi < nfv[7]; ++pi)
        for (int ci_ = 0; ci_ < nfv[5]; ++ci_)
          for (int mi = 0; mi < nfv[0]; ++mi)
            for (int ni = 0; ni < nfv[1]; ++ni)
              for (int wi = 0; wi < (has_wb ? nfv[6] : 1); ++wi)
              for (int oi = 0; oi < nfv[8]; ++oi) {
                int co = fvals[5][ci_], tm = fvals[0][mi], pp = fvals[8][oi];
                if (pp && (fam || co != 2)) continue; /* ping-pong: wgmma's, two consumers taking turns */
                const int wmm = 4 * co / FB_GEMM_MMA_WARPS_N(fvals[1][ni]), cs = pp ? 1 : co; /* mma: warps down M */
                if (fam ? !wmm || tm % (16 * wmm) : tm % (64 * cs)) continue; /* wgmma: m64 sub-tiles a consumer; mma: m16 tiles a warp */
                ckey c = {kinds[a][0], kinds[a][1], e, fvals[7][pi], co, fam ? tm / wmm / 16 : tm / cs / 64, fvals[1][ni], 0,
                          has_wb ? fvals[6][wi] : -1, fam, pp};
                if (find_class(&c) >= 0) continue;
                int ci = add_class(&c);
                if (!has_wb && c.pipe) { /* not a tune parameter of the BF16 GEMM: its variants all have pipe 0 */
                  snprintf(classes[ci].why, sizeof classes[ci].why, "the BF16 GEMM takes no pipe (gen.c: nothing decoded in registers to overlap)");
                  continue;
                }
                /* the generator's reason for the largest tile_k (NVFP4 and MXFP8 take 128 only), the fewest stages */
                int val[NPN] = {tm, c.tn, fvals[2][nfv[2] - 1], fvals[3][0], 1, co, has_wb ? c.wb : 1, c.pipe, pp};
                fb_variant v;
                char pw[256];
                /* a held-out ping-pong class (the generator held them until 2026-12-07; none now): its reason shows at the
                   tile_k and stages it would be kept with, so look for it over those values */
                for (int ki = 0; pp && ki < nfv[2]; ++ki)
                  for (int si = 0; si < nfv[3]; ++si) {
                    int vh[NPN];
                    memcpy(vh, val, sizeof vh);
                    vh[2] = fvals[2][ki], vh[3] = fvals[3][si];
                    char wh[256];
                    if (!probe(&gspecs[s].k, vh, fam, &v, wh, sizeof wh) && strstr(wh, HELD_WHY)) {
                      memcpy(val, vh, sizeof vh), ki = nfv[2];
                      break;
                    }
                  }
                if (probe(&gspecs[s].k, val, fam, &v, pw, sizeof pw))
                  snprintf(classes[ci].why, sizeof classes[ci].why, "internal: %s is kept but was not in the covering family", v.name);
                else {
                  snprintf(classes[ci].why, sizeof classes[ci].why, "%s", pw);
                  if (g_held && !fam && strstr(pw, HELD_WHY)) held_unit(&gspecs[s].k, val, ci);
                }
              }
    }
  /* what the fused ones compare with */
  int n0 = nunits;
  for (int i = 0; i < n0; ++i) {
    int d = fused(units[i].epi) ? dep_unit(i, R_COMP) : units[i].epi == E_WGRAD && vparam(&units[i].v, "pipe") ? dep_unit(i, R_TWIN) : -1;
    units[i].dep = d;
  }
  free(F.values);
  for (size_t i = 0; i < g.gl_pathc; ++i) fb_recipe_free(rs[i]);
  free(rs);
  globfree(&g);
}

static void add_hand(void) {
  for (int c = 0; c < NHAND; ++c) {
    const gcase *g = &hand[c];
    fb_kernel_spec k = hand_spec(g);
    for (int j = 0; j < g->nv; ++j) {
      unit *u = new_unit();
      u->k = k, u->role = g->kind == 2 ? R_FP8 : R_LAYER, u->kind = g->kind, u->mode = g->mode, u->outer = g->tensor_outer;
      u->epi = spec_epi(&k);
      if (g->kind == 2) hand_variant(&k, g->v[j], 6, &u->v); /* by hand: the generator prunes it */
      else {
        char why[256];
        if (!probe(&k, g->v[j], 0, &u->v, why, sizeof why)) DIE("test_gemm: %s: variant %d pruned: %s", k.name, j, why);
        for (int i = 0; i < nunits - 1; ++i) /* the same kernel as a class variant (bf16.lua's specs are the layer's) */
          if (!strcmp(units[i].v.name, u->v.name) && units[i].k.act.outer == k.act.outer && units[i].k.src.outer == k.src.outer) {
            --nunits;
            break;
          }
      }
    }
  }
  /* the layer's fused and pipelined FP32 ones compare with theirs as the covering set's do */
  int n0 = nunits;
  for (int i = 0; i < n0; ++i)
    if (units[i].role == R_LAYER && fused(units[i].epi)) {
      int d = dep_unit(i, R_COMP);
      units[i].dep = d;
    }
}

static const char *g_arch = "sm_90a"; /* --compile-only --arch: another arch's compile (its portable units only) */
static const char *g_cuobjdump;       /* NULL: the SASS is not read */
static int sass_check(const char *tool, const fb_cubin *cb, int fam, int *acc, char *first, size_t n);
/* Each thread compiles a unit, then reads its SASS (one cuobjdump process a GEMM, about a second each: in one thread
   that was most of test_gemm's start, 442 kernels) */
static void *compile_worker(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&mu);
    int i = next_unit++;
    while (i < nunits && !units[i].sel) i = next_unit++;
    pthread_mutex_unlock(&mu);
    if (i >= nunits) return NULL;
    unit *u = &units[i];
    u->st = fb_nvrtc_compile(u->v.name, u->src, g_arch, &u->cubin);
    if (u->st != FB_OK) snprintf(u->err, sizeof u->err, "%s", fb_errmsg());
    u->sass = u->st == FB_OK && g_cuobjdump && u->role != R_BCOPY /* the GEMMs only (bcopy has no MMA) */
                  ? sass_check(g_cuobjdump, &u->cubin, fam_of(&u->v), &u->acc, u->first, sizeof u->first)
                  : -2;
  }
}

/* ptxas's verdict from the log: 0 clean, else what is wrong in why */
static int log_problems(const char *log, char *why, size_t n) {
  why[0] = 0;
  if (!log) return 0;
  const char *s;
  if ((s = strstr(log, "C75"))) { snprintf(why, n, "wgmma advisory: %.160s", s); return 1; }
  for (s = log; (s = strstr(s, "bytes spill")); ++s) {
    const char *b = s;
    while (b > log && b[-1] == ' ') --b;
    while (b > log && b[-1] >= '0' && b[-1] <= '9') --b;
    if (atoi(b) != 0) { snprintf(why, n, "spills: %.80s", b); return 1; }
  }
  if ((s = strstr(log, "bytes stack frame"))) {
    const char *b = s;
    while (b > log && b[-1] == ' ') --b;
    while (b > log && b[-1] >= '0' && b[-1] <= '9') --b;
    if (atoi(b) != 0) { snprintf(why, n, "local memory: %.80s", b); return 1; }
  }
  return 0;
}

/* A cuobjdump to read the machine code with: $CUOBJDUMP, else CUDA's, else one on PATH; NULL if none */
static const char *find_cuobjdump(char *buf, size_t n) {
  const char *e = getenv("CUOBJDUMP");
  if (e && *e) return access(e, X_OK) ? NULL : e;
  if (!access("/usr/local/cuda/bin/cuobjdump", X_OK)) return "/usr/local/cuda/bin/cuobjdump";
  const char *path = getenv("PATH");
  for (const char *s = path; s && *s;) {
    const char *c = strchr(s, ':');
    size_t l = c ? (size_t)(c - s) : strlen(s);
    snprintf(buf, n, "%.*s/cuobjdump", (int)l, s);
    if (l && !access(buf, X_OK)) return buf;
    s = c ? c + 1 : s + l;
  }
  return NULL;
}

/* One SASS instruction's text (after its address, up to ';'): does it touch (read or write) a register of `live`? The
   HGMMA / QGMMA themselves and the WARPGROUP ops do not count; a .64 / .128 operand covers 2 / 4 registers. */
static int touches(const char *t, const int live[256]) {
  while (*t == ' ') ++t;
  if (*t == '@') { while (*t && *t != ' ') ++t; while (*t == ' ') ++t; } /* predicate */
  const char *op = t;
  while (*t && *t != ' ') ++t;
  int w = 1;
  for (const char *s = op; s < t; ++s) {
    if (!strncmp(s, ".64", 3)) w = 2;
    if (!strncmp(s, ".128", 4)) w = 4;
  }
  int in_addr = 0; /* inside [ ]: an address register, one wide (two where written R.64) whatever the access width */
  for (const char *s = t; *s && *s != ';'; ++s) {
    if (*s == '[' || *s == ']') in_addr = *s == '[';
    if (*s == 'R' && s[1] >= '0' && s[1] <= '9' && !(s[-1] >= 'A' && s[-1] <= 'Z') && !(s[-1] >= 'a' && s[-1] <= 'z') && s[-1] != '_') {
      int r = atoi(s + 1), rw = w;
      if (in_addr) {
        const char *d = s + 1;
        while (*d >= '0' && *d <= '9') ++d;
        rw = !strncmp(d, ".64", 3) ? 2 : 1;
      }
      for (int i = 0; i < rw && r + i < 256; ++i)
        if (live[r + i]) return 1;
    }
  }
  return 0;
}

/* The GEMM's machine code (cuobjdump -sass): 1 if its products run on the tensor cores (wgmma: HGMMA, or QGMMA for the
   FP8 one) and its operands arrive by TMA (UTMALDG), 0 if not, -1 if it could not be read. *acc: the instructions that
   touch an accumulator register of a wgmma between its issue and the WARPGROUP.DEPBAR.LE gsb0, N that retires it (all
   but the N most recent commit groups; a group's last GMMA carries gsb0), in code order (the kernels' loops leave with every group retired or, pipelined, with one in flight, so code order
   is the order that matters); the first such in first (n bytes). */
static int sass_check(const char *tool, const fb_cubin *cb, int fam, int *acc, char *first, size_t n) {
  *acc = 0, first[0] = 0;
  char path[] = "/tmp/test_gemm_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return -1;
  FILE *f = fdopen(fd, "wb");
  size_t w = f ? fwrite(cb->cubin, 1, cb->size, f) : 0;
  if (f) fclose(f);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "'%s' -sass '%s' 2>/dev/null", tool, path);
  FILE *p = w == cb->size ? popen(cmd, "r") : NULL;
  int hg = 0, tma = 0, lines = 0, nlive = 0, hm = 0, ldg = 0;
  /* live[r]: the commit group (1, 2, ...) whose wgmma writes accumulator register r, 0 none in flight. A group's last
     GMMA carries gsb0; WARPGROUP.DEPBAR.LE gsb0, N retires all but the N most recent groups (wait_group N) */
  int live[256], grp = 1;
  memset(live, 0, sizeof live);
  char line[512];
  while (p && fgets(line, sizeof line, p)) {
    ++lines, hg |= strstr(line, "HGMMA") || strstr(line, "QGMMA"), tma |= strstr(line, "UTMALDG") != NULL;
    hm |= strstr(line, "HMMA.") != NULL || strstr(line, "QMMA.") != NULL, ldg |= strstr(line, "LDGSTS") != NULL;
    const char *a = strstr(line, "/*"), *b = a ? strstr(a, "*/") : NULL;
    if (!a || !b || !(a[2] >= '0' && a[2] <= '9') || !strchr(b, ';')) continue; /* not an instruction line */
    const char *t = b + 2;
    const char *g = strstr(t, "GMMA.64x");
    if (g && (g[-1] == 'H' || g[-1] == 'Q')) {
      int nn = atoi(g + 8), r = -1;
      const char *rr = strchr(g, 'R');
      if (rr) r = atoi(rr + 1);
      for (int i = 0; r >= 0 && i < nn / 2 && r + i < 256; ++i) live[r + i] = grp;
      nlive = 1;
      if (strstr(g, "gsb0")) ++grp; /* the group is committed */
      continue;
    }
    const char *e = strchr(t, ';');
    while (e > t && e[-1] == ' ') --e; /* the text ends before " ;" */
    if (strstr(t, "WARPGROUP.DEPBAR")) {
      const char *x = strstr(t, "0x");
      int keep = x && x < e ? (int)strtol(x, NULL, 16) : 0;
      nlive = 0;
      for (int i = 0; i < 256; ++i) {
        if (live[i] && live[i] <= grp - 1 - keep) live[i] = 0;
        nlive |= live[i] != 0;
      }
      continue;
    }
    if (strstr(t, "WARPGROUP")) continue;
    if (nlive && touches(t, live)) {
      if (!*acc) snprintf(first, n, "%.*s", (int)(e - t - (int)strspn(t, " ")), t + strspn(t, " "));
      ++*acc;
    }
  }
  int rc = p ? pclose(p) : -1;
  unlink(path);
  return rc != 0 || !lines ? -1 : fam ? hm && ldg && !hg : hg && tma;
}

static int regs_of(const char *log) {
  const char *s = log ? strstr(log, "Used ") : NULL;
  return s ? atoi(s + 5) : -1;
}

/* ---- the BF16 copy kernels (gemm_bcopy.cuh): bit-exact against fb_gemm_weights_bf16_ref / fb_gemm_mxfp8_bf16_ref on
   random bytes (every code and scale, NaN and subnormal ones included), then (--bench) timed at S1's W13 ---- */
static int bcopy_units(unit *out, int max) {
  int n = 0;
  for (int src = 1; src <= 2; ++src) {
    fb_kernel_spec k;
    memset(&k, 0, sizeof k);
    k.op = FB_OP_BCOPY;
    k.q.format = src == 1 ? FB_FMT_NVFP4 : FB_FMT_MXFP8;
    snprintf(k.name, sizeof k.name, "bcopy_%s_sm90a", src == 1 ? "nvfp4" : "mxfp8");
    snprintf(k.family, sizeof k.family, "quant");
    static const int th[2] = {128, 256};
    fb_tune_family fam = {.nparams = 1, .nvariants = 2, .values = (int *)th};
    snprintf(fam.family, sizeof fam.family, "quant");
    snprintf(fam.param[0], sizeof fam.param[0], "threads");
    fb_variant *vs;
    int nv, pruned;
    CK(fb_gen_variants(&k, &fam, &vs, &nv, &pruned, NULL, 0));
    for (int j = 0; j < nv && n < max; ++j) {
      memset(&out[n], 0, sizeof out[n]);
      out[n].k = k, out[n].v = vs[j];
      CK(fb_gen_source(&k, &vs[j], "tests/gpu/test_gemm.c", "-", &out[n].src));
      ++n;
    }
    free(vs);
  }
  return n;
}


/* ---- the benchmark (--bench): the design's shapes, each variant timed right after it passed its checks ---- */
typedef struct {
  const char *name;
  int mode, E, M, N, K, dist; /* dist: 0 balanced (65536 rows over E), 1 Zipf s=1, 2 4096 per expert */
} bshape;
static const bshape bshapes[] = {
    {"S1_w13fwd_balanced", 0, 48, 0, 4096, 5120, 0}, {"S1_w13fwd_zipf", 0, 48, 0, 4096, 5120, 1},
    {"S1_w2fwd_balanced", 0, 48, 0, 5120, 2048, 0},  {"S1_w2dgrad_balanced", 0, 48, 0, 2048, 5120, 0},
    {"S2_w13fwd", 0, 8, 0, 4096, 5120, 2},
    {"S1_wgrad13_balanced", 1, 48, 4096, 5120, 0, 0}, {"S1_wgrad13_zipf", 1, 48, 4096, 5120, 0, 1},
    {"S2_wgrad13", 1, 8, 4096, 5120, 0, 2},
};
#define NBSHAPES (int)(sizeof bshapes / sizeof bshapes[0])

/* rows per expert, each a multiple of 128 (the permutation pads to the GEMM's row tile) */
static long long bcounts(const bshape *b, long long *cnt) {
  double h = 0;
  for (int e = 0; e < b->E; ++e) h += 1.0 / (e + 1);
  long long tot = 0;
  for (int e = 0; e < b->E; ++e) {
    double c = b->dist == 0 ? 65536.0 / b->E : b->dist == 1 ? 65536.0 / (e + 1) / h : 4096.0;
    cnt[e] = ((long long)ceil(c) + 127) / 128 * 128;
    tot += cnt[e];
  }
  return tot;
}



static const char *ROLE_NAME[] = {"class", "companion", "pipe-0 twin", "expert layer", "FP8 wgmma", "bcopy", "held out"};

/* the classes: those with a variant (the chosen one), then those without, grouped by why */
static void print_classes(void) {
  int with = 0, in_rec = 0;
  for (int i = 0; i < nclasses; ++i) with += classes[i].unit >= 0, in_rec += classes[i].unit >= 0 && classes[i].in_recipe;
  printf("test_gemm: %d GEMM specs in the shipped plans; covering family:", ngspecs);
  for (int p = 0; p < NPN; ++p) {
    printf(" %s {", PN[p]);
    for (int i = 0; i < nfv[p]; ++i) printf("%s%d", i ? "," : "", fvals[p][i]);
    printf("}");
  }
  printf("\ntest_gemm: %d classes with a variant (%d of them chosen from a shipped recipe's own family, the rest from the generator's kept set only):\n",
         with, in_rec);
  char lab[160];
  for (int i = 0; i < nclasses; ++i) {
    if (classes[i].unit < 0) continue;
    class_label(&classes[i].key, lab, sizeof lab);
    if (units[classes[i].unit].role == R_HELD) printf("  held  %-66s %-72s (built by hand; the generator: %.80s)\n", lab, units[classes[i].unit].v.name, classes[i].why);
    else printf("  class %-66s %-72s (%d kept%s)\n", lab, units[classes[i].unit].v.name, classes[i].nkept, classes[i].in_recipe ? "" : "; none in a recipe's family");
  }
  int without = nclasses - with;
  printf("test_gemm: %d classes of those values have no variant (not run), by reason:\n", without);
  char *done = calloc((size_t)nclasses + 1, 1);
  for (int i = 0; i < nclasses; ++i) {
    if (classes[i].unit >= 0 || done[i]) continue;
    int n = 0;
    for (int j = i; j < nclasses; ++j)
      if (classes[j].unit < 0 && !strcmp(classes[j].why, classes[i].why)) ++n;
    printf("  %4d: %s\n", n, classes[i].why);
    int shown = 0;
    for (int j = i; j < nclasses; ++j)
      if (classes[j].unit < 0 && !done[j] && !strcmp(classes[j].why, classes[i].why)) {
        done[j] = 1;
        if (shown++ < 3) {
          if (classes[j].key.pipe < 0) snprintf(lab, sizeof lab, "%s %s (every tile)", kind_name(classes[j].key.kind, classes[j].key.outer), EPI_NAME[classes[j].key.epi]);
          else class_label(&classes[j].key, lab, sizeof lab);
          printf("        e.g. %s\n", lab);
        }
      }
  }
  free(done);
}

/* run unit i on problem P (its dependency first: the companion's / twin's FP32 output is kept in its unit) */
static int run_unit(int i, const gemm_problem *P, int sms, int *runs) {
  unit *u = &units[i];
  if (u->ran) return u->failed;
  u->ran = 1;
  int f = 0;
  if (u->st != FB_OK) { /* counted as a compile failure */
    snprintf(u->res[P->dist], sizeof u->res[P->dist], "%s", "-");
    return u->failed = 1;
  }
  const unit *d = NULL;
  if (u->dep >= 0) {
    run_unit(u->dep, P, sms, runs);
    d = &units[u->dep];
  }
  free(gemm_companion);
  gemm_companion = NULL;
  if (fused(u->epi)) {
    if (!d || !d->out) { /* no FP32 output to compare with: the bit-exact check cannot be made, which fails */
      printf("  %-58s %-9s FAIL: its companion %s did not run\n", u->v.name, gemm_dist_name[P->dist], d ? d->v.name : "-");
      snprintf(u->res[P->dist], sizeof u->res[P->dist], "%s", "FAIL");
      u->failed = 1;
      return 1;
    }
    gemm_companion = malloc(P->out_elems * sizeof(float));
    if (!gemm_companion) DIE("test_gemm: out of memory");
    memcpy(gemm_companion, d->out, P->out_elems * sizeof(float));
  }
  fb_kernel kern;
  CK(fb_kernel_load(u->cubin.cubin, u->v.name, &kern));
  CK(gemm_run(&u->k, &u->v, &kern, P, sms, stdout, 0, &f));
  fb_kernel_unload(&kern);
  ++*runs;
  if (!fused(u->epi) && gemm_companion) { /* gemm_run kept this FP32 output */
    free(u->out);
    u->out = gemm_companion, gemm_companion = NULL;
    if (d && d->out) { /* the pipelined main loop: the same wgmmas in the same order as its pipe 0 twin, so the same bits */
      const uint32_t *x = (const uint32_t *)u->out, *y = (const uint32_t *)d->out;
      long differ = 0;
      for (size_t e = 0; e < P->out_elems; ++e) differ += x[e] != y[e];
      printf("  %-58s %-9s bit-identical to %s: %s (%ld of %zu words differ)\n", u->v.name, gemm_dist_name[P->dist], d->v.name,
             differ ? "FAIL" : "ok", differ, P->out_elems);
      f |= differ != 0;
    } else if (u->dep >= 0) {
      printf("  %-58s %-9s FAIL: its pipe 0 twin %s did not run\n", u->v.name, gemm_dist_name[P->dist], d->v.name);
      f = 1;
    }
  }
  free(gemm_companion);
  gemm_companion = NULL;
  snprintf(u->res[P->dist], sizeof u->res[P->dist], "%s", f ? "FAIL" : "ok");
  if (u->role == R_FP8 && f) printf("    (the hand-built FP8 wgmma case: measured, not counted; the covering set's b0 classes count)\n");
  u->failed |= f;
  return f;
}

/* ---- the mma.sync ceiling: what the portable family's instructions reach with nothing else in the loop ----
   Each warp runs ITERS rounds of 16 independent mma.sync (BF16 m16n8k16, or E4M3 m16n8k32) on register operands and
   writes its accumulators once, so the time is the tensor pipe's rate for that instruction on this GPU: the bound the
   portable GEMMs (gemm_mma.cuh) are measured against (--bench; compiled by --compile-only).
   E4M3: sm_90a has no FP8 mma.sync in hardware. ptxas lowers each m16n8k32 to F2FP.F16.E4M3.UNPACK_B conversions of
   both operands, two HMMA.16816.F32 from zero and four FADDs into the accumulator (its SASS, read with cuobjdump). With
   one B for all 16 the product is common and ptxas computed it once (dev 2026-12-02: "1568 TFLOP/s", not a rate), so
   the FP8 form (FB_VARY) gives each of the 16 its own B, stepped every round: A's conversions stay shared, as an A
   fragment is across a GEMM's n8 tiles. */
static const char *const CEIL_SRC =
    "extern \"C\" __global__ void __launch_bounds__(256) FB_CEIL(float *out, unsigned seed, int iters) {\n"
    "  unsigned a[4], b[16][2];\n"
    "  for (int i = 0; i < 4; ++i) a[i] = (seed * (threadIdx.x + 1) + i) & 0x3F803F80u;\n"
    "  for (int j = 0; j < 16; ++j) for (int i = 0; i < 2; ++i) b[j][i] = (seed ^ (threadIdx.x * 7 + i + 2 * j)) & 0x3F803F80u;\n"
    "  float d[16][4];\n"
    "  for (int j = 0; j < 16; ++j) for (int i = 0; i < 4; ++i) d[j][i] = 0.0f;\n"
    "  for (int it = 0; it < iters; ++it) {\n"
    "#pragma unroll\n"
    "    for (int j = 0; j < 16; ++j)\n"
    "      asm volatile(FB_MMA \" {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\"\n"
    "                   : \"+f\"(d[j][0]), \"+f\"(d[j][1]), \"+f\"(d[j][2]), \"+f\"(d[j][3])\n"
    "                   : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[FB_VARY ? j : 0][0]), \"r\"(b[FB_VARY ? j : 0][1]));\n"
    "#pragma unroll\n"
    "    for (int j = 0; j < 16 && FB_VARY; ++j) b[j][0] += 0x01000001u;\n"
    "  }\n"
    "  float s = 0.0f;\n"
    "  for (int j = 0; j < 16; ++j) for (int i = 0; i < 4; ++i) s += d[j][i];\n"
    "  out[blockIdx.x * blockDim.x + threadIdx.x] = s;\n"
    "}\n";
static const char *const CEIL_MMA[2] = {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                                        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"};
static const double CEIL_FLOP[2] = {2.0 * 16 * 8 * 16, 2.0 * 16 * 8 * 32}; /* one instruction's FLOPs */
/* The source of ceiling kernel f (0 BF16, 1 FP8), malloc'd */
static char *ceil_src(int f) {
  size_t n = strlen(CEIL_SRC) + 256;
  char *s = malloc(n);
  if (s) snprintf(s, n, "#define FB_CEIL fb_mma_ceiling_%s\n#define FB_MMA \"%s\"\n#define FB_VARY %d\n%s", f ? "e4m3" : "bf16", CEIL_MMA[f], f,
                    CEIL_SRC);
  return s;
}

/* --only LIST: a name containing any of the comma-separated substrings */
static int name_in(const char *name, const char *list) {
  for (const char *s = list; *s;) {
    size_t l = strcspn(s, ",");
    char one[128];
    snprintf(one, sizeof one, "%.*s", (int)(l < sizeof one - 1 ? l : sizeof one - 1), s);
    if (l && strstr(name, one)) return 1;
    s += l + (s[l] == ',');
  }
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* line-buffered: a crash keeps what was printed */
  int compile_only = 0, debug = 0, cheap = 0, list = 0;
  const char *shapes_out = NULL, *peer = NULL;
  const char *only = NULL;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--compile-only")) compile_only = 1;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--list")) list = 1;
    else if (!strcmp(argv[i], "--held")) g_held = 1;
    else if (!strcmp(argv[i], "--arch") && i + 1 < argc) {
      g_arch = argv[++i];
      if (!fb_arch_known(g_arch)) { fprintf(stderr, "test_gemm: --arch %s: not one of %s\n", g_arch, FB_ARCHS); return 2; }
    }
    else if (!strcmp(argv[i], "--debug")) debug = 1;
    else if (!strcmp(argv[i], "--cheap-epilogue")) cheap = 1; /* diagnostics: SwiGLU epilogues without their math */
    else if (!strcmp(argv[i], "--write-shapes") && i + 1 < argc) shapes_out = argv[++i];
    else if (!strcmp(argv[i], "--bench") && i + 1 < argc) peer = argv[++i];
    else if (!strcmp(argv[i], "--help")) {
      puts("usage: test_gemm [--compile-only [--arch A]] [--list] [--held] [--only SUBSTR,...] [--write-shapes FILE] [--bench PEERFILE]");
      return 0;
    }
    else { fprintf(stderr, "test_gemm: unknown argument %s\n", argv[i]); return 2; }
  }
  if (shapes_out) { /* the benchmark's shapes, for the PyTorch peer */
    FILE *f = fopen(shapes_out, "w");
    if (!f) DIE("test_gemm: cannot write %s", shapes_out);
    for (int i = 0; i < NBSHAPES; ++i) {
      long long cnt[64];
      bcounts(&bshapes[i], cnt);
      fprintf(f, "%s %d %d %d %d %d", bshapes[i].name, bshapes[i].mode, bshapes[i].E, bshapes[i].M, bshapes[i].N, bshapes[i].K);
      for (int e = 0; e < bshapes[i].E; ++e) fprintf(f, " %lld", cnt[e]);
      fprintf(f, "\n");
    }
    fclose(f);
    return 0;
  }
  build_cover();
  add_hand();
  print_classes();
  int first_bcopy = nunits;
  {
    unit bc[8];
    int nb = bcopy_units(bc, 8);
    for (int i = 0; i < nb; ++i) {
      unit *u = new_unit();
      *u = bc[i];
      u->role = R_BCOPY, u->dep = -1, u->cls = -1;
    }
  }
  /* --only: the selected ones and what they compare with */
  int nsel = 0;
  for (int i = 0; i < nunits; ++i)
    if (!only || name_in(units[i].v.name, only)) units[i].sel = 1;
  for (int changed = 1; changed;) {
    changed = 0;
    for (int i = 0; i < nunits; ++i)
      if (units[i].sel && units[i].dep >= 0 && !units[units[i].dep].sel) {
        units[units[i].dep].sel = changed = 1;
        if (only)
          printf("test_gemm: --only %s: with %s, the %s of %s\n", only, units[units[i].dep].v.name, fused(units[i].epi) ? "FP32 companion" : "pipe 0 twin",
                 units[i].v.name);
      }
  }
  /* --compile-only checks what the tuner may pick (the class variants, the layer's, FP8, bcopy); the companions and twins,
     plain FP32 forms of the same main loops, compile when they run */
  if (compile_only && !only)
    for (int i = 0; i < nunits; ++i)
      if (units[i].role == R_COMP || units[i].role == R_TWIN) units[i].sel = 0;
  if (strcmp(g_arch, "sm_90a")) { /* another arch: its GEMMs are the portable family's (and the BF16 copies) */
    if (!compile_only) { fprintf(stderr, "test_gemm: --arch %s: compile only (no such GPU here)\n", g_arch); return 2; }
    for (int i = 0; i < nunits; ++i)
      if (units[i].role != R_BCOPY && !fam_of(&units[i].v)) units[i].sel = 0;
    printf("test_gemm --compile-only --arch %s: the portable units and the BF16 copies, compiled, never run (no such GPU)\n", g_arch);
  }
  int nby[NROLES] = {0};
  for (int i = 0; i < nunits; ++i) nsel += units[i].sel, nby[units[i].role] += units[i].sel;
  if (compile_only && !only) printf("test_gemm --compile-only: the companions and pipe 0 twins (plain FP32 forms of the same main loops) are compiled only to run\n");
  if (!nsel) { fprintf(stderr, "test_gemm: --only %s: no kernel's name has it\n", only); return 2; }
  printf("test_gemm: %d kernels: %d class variants, %d companions, %d pipe 0 twins, %d expert-layer, %d FP8 wgmma, %d bcopy, %d held out\n", nsel,
         nby[R_COVER], nby[R_COMP], nby[R_TWIN], nby[R_LAYER], nby[R_FP8], nby[R_BCOPY], nby[R_HELD]);
  if (list) {
    for (int i = 0; i < nunits; ++i)
      if (units[i].sel) printf("  %-12s %s\n", ROLE_NAME[units[i].role], units[i].v.name);
    return 0;
  }
  for (int i = 0; i < nunits; ++i) {
    unit *u = &units[i];
    if (!u->sel || u->src) continue;
    CK(fb_gen_source(&u->k, &u->v, "tests/gpu/test_gemm.c", "-", &u->src));
    if ((debug || cheap) && u->role != R_BCOPY) { /* the template's printf lines (block 0); or the math-free epilogues */
      size_t n = strlen(u->src);
      char *d = malloc(n + 32);
      sprintf(d, "#define %s 1\n%s", debug ? "FB_DEBUG" : "FB_EPI_CHEAP", u->src);
      free(u->src);
      u->src = d;
    }
  }
  char cobuf[512];
  const char *co = g_cuobjdump = find_cuobjdump(cobuf, sizeof cobuf);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int nt = ncpu > 16 ? 16 : ncpu < 2 ? 2 : (int)ncpu;
  pthread_t th[16];
  for (int i = 0; i < nt; ++i) pthread_create(&th[i], NULL, compile_worker, NULL);
  for (int i = 0; i < nt; ++i) pthread_join(th[i], NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double wall = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  int bad = 0, sass_read = 0, ngemm = 0;
  for (int i = 0; i < nunits; ++i) {
    unit *u = &units[i];
    if (!u->sel) continue;
    char why[256];
    if (u->st != FB_OK) { printf("COMPILE FAILED %s\n%s\n", u->v.name, u->err); ++bad; continue; }
    int p = log_problems(u->cubin.log, why, sizeof why), acc = u->acc, h = u->sass;
    const char *first = u->first;
    ngemm += u->role != R_BCOPY;
    if (h == 0) snprintf(why, sizeof why, fam_of(&u->v) ? "no HMMA or no LDGSTS in the SASS (or a GMMA)" : "no HGMMA / QGMMA or no UTMALDG in the SASS"), p = 1;
    if (h >= 0 && acc) snprintf(why, sizeof why, "%d instructions touch accumulators of a wgmma group in flight (first: %.150s)", acc, first), p = 1;
    sass_read += h >= 0;
    printf("  compiled %-58s %6.0f ms  %3d regs  %s%s\n", u->v.name, u->cubin.ms, regs_of(u->cubin.log), p ? why : "no spills, no wgmma advisories",
           !p && h == 1 ? (fam_of(&u->v) ? ", HMMA + LDGSTS" : ", GMMA + UTMALDG, accumulators untouched in flight") : h == -1 ? " (SASS not read: cuobjdump failed)" : "");
    u->cprob = p;
    bad += p;
  }
  /* a cuobjdump that cannot read (13.x without its nvdisasm) leaves the SASS unchecked, as none does; it fails nothing */
  if (co) printf("test_gemm: SASS of %d of %d GEMMs read with %s (the rest: cuobjdump failed, not checked); HGMMA (QGMMA: FP8), UTMALDG and "
                 "the accumulators in flight checked in those\n", sass_read, ngemm, co);
  else printf("test_gemm: SASS not read (no cuobjdump: set CUOBJDUMP, e.g. the one of pip's nvidia-cuda-cuobjdump with nvidia-cuda-nvdisasm): "
              "HGMMA and the accumulators in flight not checked\n");
  printf("test_gemm: compiled %d kernels (and read their SASS) in %.1f s on %d threads\n", nsel, wall, nt);
  for (int f = 0; f < 2 && !only && !strcmp(g_arch, "sm_90a"); ++f) { /* the mma.sync ceiling kernels (--bench times them on
                                                                            the H200; the E4M3 one spills 32 bytes for sm_100a) */
    char *src = ceil_src(f), why[256];
    fb_cubin cb;
    memset(&cb, 0, sizeof cb);
    fb_status st = src ? fb_nvrtc_compile(f ? "fb_mma_ceiling_e4m3" : "fb_mma_ceiling_bf16", src, g_arch, &cb) : FB_ENOMEM;
    int pr = st != FB_OK || log_problems(cb.log, why, sizeof why);
    printf("  compiled %-58s %s\n", f ? "fb_mma_ceiling_e4m3" : "fb_mma_ceiling_bf16", st != FB_OK ? fb_errmsg() : pr ? why : "no spills");
    bad += pr;
    fb_cubin_free(&cb);
    free(src);
  }
  if (compile_only) {
    printf("test_gemm --compile-only: %d kernels, %d with problems\n", nsel, bad);
    return bad ? 1 : 0;
  }
  if (fb_cuda_load() != FB_OK) { printf("test_gemm: SKIPPED (not passed): %s\n", fb_errmsg()); return 77; }
  CK(fb_cuda_use_device(0));
  fb_cuda_device_info info;
  CK(fb_cuda_device_info_get(0, &info));
  printf("device: %s, %d SMs\n", info.name, info.sm_count);
  int fails = bad, runs = 0;
  for (int i = first_bcopy; i < nunits; ++i) {
    unit *u = &units[i];
    if (!u->sel) continue;
    if (u->st != FB_OK) { ++fails; continue; }
    fb_kernel kern;
    CK(fb_kernel_load(u->cubin.cubin, u->v.name, &kern));
    int f, f2;
    CK(gemm_bcopy_check(&u->k, &u->v, &kern, 77, 320, stdout, &f));
    CK(gemm_bcopy_check(&u->k, &u->v, &kern, 1024, 2048, stdout, &f2));
    f |= f2;
    u->failed |= f, fails += f, runs += 2;
    fb_kernel_unload(&kern);
  }
  for (int kind = 0; kind < 4; ++kind)
    for (int mode = 0; mode < 2; ++mode)
      for (int to = 0; to < 2; ++to) {
        int any = 0;
        for (int i = 0; i < first_bcopy; ++i) any |= units[i].sel && units[i].kind == kind && units[i].mode == mode && units[i].outer == to;
        if (!any) continue;
        for (int dist = 0; dist < 2; ++dist) {
          gemm_problem P;
          CK(gemm_make_problem(&P, kind, mode, to, dist));
          if (kind == 1 && to) printf("  (per-tensor problem, %s: S_dec(A) = %.6g, S_dec(B) = %.6g)\n", gemm_dist_name[dist], P.a_sdec, P.b_sdec);
          for (int i = 0; i < first_bcopy; ++i) {
            unit *u = &units[i];
            u->ran = 0;
            free(u->out);
            u->out = NULL;
          }
          for (int i = 0; i < first_bcopy; ++i) {
            unit *u = &units[i];
            if (!u->sel || u->kind != kind || u->mode != mode || u->outer != to) continue;
            run_unit(i, &P, info.sm_count, &runs);
          }
          for (int i = 0; i < first_bcopy; ++i) {
            unit *u = &units[i];
            if (u->sel && u->kind == kind && u->mode == mode && u->outer == to && u->role != R_FP8 && !strcmp(u->res[dist], "FAIL")) ++fails;
            free(u->out);
            u->out = NULL;
          }
          gemm_free_problem(&P);
        }
      }
  /* per class: what was run and how it went */
  printf("\ntest_gemm: per class (balanced, skewed with an empty expert):\n");
  char lab[160];
  int cls_run = 0, cls_failed = 0, cls_prob = 0;
  for (int c = 0; c < nclasses; ++c) {
    if (classes[c].unit < 0 || !units[classes[c].unit].sel) continue;
    const unit *u = &units[classes[c].unit];
    class_label(&classes[c].key, lab, sizeof lab);
    int f = u->failed || (u->dep >= 0 && units[u->dep].failed);
    ++cls_run, cls_failed += f, cls_prob += !f && u->cprob;
    /* FAIL: a wrong result (or none); prob: right results, but ptxas's log or the SASS check has a problem (see above) */
    printf("  %-4s %-66s %-72s %s %s\n", f ? "FAIL" : u->cprob ? "prob" : "ok", lab, u->v.name, u->res[0][0] ? u->res[0] : "-",
           u->res[1][0] ? u->res[1] : "-");
  }
  for (int i = 0; i < first_bcopy; ++i) {
    const unit *u = &units[i];
    if (!u->sel || u->role == R_COVER) continue;
    printf("  %-4s %-66s %-72s %s %s\n", u->failed ? (u->kind == 2 ? "meas" : "FAIL") : "ok", ROLE_NAME[u->role], u->v.name, u->res[0][0] ? u->res[0] : "-",
           u->res[1][0] ? u->res[1] : "-");
  }
  printf("test_gemm: %d classes run, %d failed, %d more with compile problems; %d runs, %d failed (compile problems counted)\n", cls_run,
         cls_failed, cls_prob, runs, fails);

  if (peer) { /* the mma.sync ceiling, on register operands (the portable GEMMs' bound) */
    for (int f = 0; f < 2; ++f) {
      char *src = ceil_src(f);
      fb_cubin cb;
      memset(&cb, 0, sizeof cb);
      const char *nm = f ? "fb_mma_ceiling_e4m3" : "fb_mma_ceiling_bf16";
      if (!src || fb_nvrtc_compile(nm, src, "sm_90a", &cb) != FB_OK) { printf("bench: %s: %s\n", nm, fb_errmsg()); free(src); continue; }
      free(src);
      fb_kernel kern;
      CK(fb_kernel_load(cb.cubin, nm, &kern));
      int per = 1;
      if (fb_cu.OccupancyMaxActiveBlocksPerMultiprocessor) CU(fb_cu.OccupancyMaxActiveBlocksPerMultiprocessor(&per, kern.fn, 256, 0));
      unsigned grid = (unsigned)(info.sm_count * (per > 0 ? per : 1));
      CUdeviceptr o;
      CK(gemm_balloc((size_t)grid * 256 * 4, &o));
      struct { CUdeviceptr out; unsigned seed; int iters; } prm = {o, 12345u, 4096};
      void *args[] = {&prm.out, &prm.seed, &prm.iters};
      CUevent a, b;
      CU(fb_cu.EventCreate(&a, 0));
      CU(fb_cu.EventCreate(&b, 0));
      float t[7];
      for (int r = 0; r < 7; ++r) {
        CU(fb_cu.EventRecord(a, NULL));
        CU(fb_cu.LaunchKernel(kern.fn, grid, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
        CU(fb_cu.EventRecord(b, NULL));
        CU(fb_cu.EventSynchronize(b));
        CU(fb_cu.EventElapsedTime(&t[r], a, b));
      }
      qsort(t, 7, sizeof t[0], gemm_cmpf);
      double flops = (double)grid * 8 * 16 * prm.iters * CEIL_FLOP[f]; /* 8 warps a CTA, 16 instructions a round */
      printf("bench: mma.sync ceiling (%s, register operands, %u CTAs of 8 warps): %.1f TFLOP/s\n", f ? "E4M3 m16n8k32, lowered to F16 HMMA on sm_90a" : "BF16 m16n8k16",
             grid, flops / (t[3] * 1e-3) / 1e12);
      fb_cu.EventDestroy(a), fb_cu.EventDestroy(b);
      fb_kernel_unload(&kern);
      fb_cubin_free(&cb);
      fb_cu.MemFree(o);
    }

    double dense[2] = {0, 0}, pt[NBSHAPES][2], bpeer[2] = {0, 0};
    memset(pt, 0, sizeof pt);
    FILE *f = fopen(peer, "r");
    char nm[64];
    double x, y;
    while (f && fscanf(f, "%63s %lf %lf", nm, &x, &y) == 3) {
      if (!strcmp(nm, "dense")) dense[0] = x, dense[1] = y;
      if (!strcmp(nm, "bcopy")) bpeer[0] = x, bpeer[1] = y;
      for (int i = 0; i < NBSHAPES; ++i)
        if (!strcmp(nm, bshapes[i].name)) pt[i][0] = x, pt[i][1] = y;
    }
    if (f) fclose(f);
    else printf("bench: no peer file %s: ratios missing\n", peer);
    /* the BF16 copy at S1's W13 (48 experts x 4096 x 5120), each variant checked just before (gemm_bcopy_check above) */
    printf("\n== bench (H200): the BF16 operand copy at S1's W13 (48 x 4096 x 5120); peer = torch FP8 -> BF16 cast %.0f GB/s,"
           " ceiling = torch BF16 copy %.0f GB/s, same run\n", bpeer[0], bpeer[1]);
    for (int i = first_bcopy; i < nunits; ++i) {
      unit *u = &units[i];
      if (!u->sel || u->st != FB_OK || u->failed) continue;
      const long long R = 48ll * 4096, K = 5120;
      int src = u->k.q.format == FB_FMT_NVFP4 ? 1 : 2;
      size_t n = (size_t)(R * K), cb = src == 1 ? n / 2 : n, sb = src == 1 ? n / 16 : n / 32;
      CUdeviceptr dc, ds, dout;
      CK(gemm_balloc(cb, &dc));
      CK(gemm_balloc(sb, &ds));
      CK(gemm_balloc(n * 2, &dout));
      CK(gemm_fill_random(dc, cb, 1, 1));
      CK(gemm_fill_random(ds, sb, src == 1 ? 2 : 3, 1));
      fb_kp_mem kpm;
      memset(&kpm, 0, sizeof kpm);
      kpm.in = dc, kpm.scales = ds, kpm.out = dout, kpm.rows = R, kpm.cols = K;
      unsigned gx, gy, th;
      CK(fb_launch_dims(&u->k, &u->v, R, K, 0, &gx, &gy, &th));
      fb_kernel kern;
      CK(fb_kernel_load(u->cubin.cubin, u->v.name, &kern));
      CUevent a, b;
      CU(fb_cu.EventCreate(&a, 0));
      CU(fb_cu.EventCreate(&b, 0));
      float t[10];
      for (int r = 0; r < 3; ++r) CK(fb_kernel_launch(&kern, gx, gy, th, &kpm, sizeof kpm));
      for (int r = 0; r < 10; ++r) {
        CU(fb_cu.EventRecord(a, NULL));
        CK(fb_kernel_launch(&kern, gx, gy, th, &kpm, sizeof kpm));
        CU(fb_cu.EventRecord(b, NULL));
        CU(fb_cu.EventSynchronize(b));
        CU(fb_cu.EventElapsedTime(&t[r], a, b));
      }
      qsort(t, 10, sizeof t[0], gemm_cmpf);
      double ms = (t[4] + t[5]) / 2, gbs = (double)(cb + sb + n * 2) / (ms * 1e-3) / 1e9;
      printf("  %-40s %7.3f ms %7.0f GB/s  %.2fx the cast  %5.1f%% of copy\n", u->v.name, ms, gbs, bpeer[0] > 0 ? gbs / bpeer[0] : 0,
             bpeer[1] > 0 ? 100 * gbs / bpeer[1] : 0);
      fb_cu.EventDestroy(a), fb_cu.EventDestroy(b);
      fb_kernel_unload(&kern);
      fb_cu.MemFree(dc), fb_cu.MemFree(ds), fb_cu.MemFree(dout);
    }
    printf("\n== bench (H200): TFLOP/s; peer = torch._grouped_mm BF16 (bf16, nvfp4 kernels) or torch._scaled_grouped_mm FP8 row-wise"
           " (mxfp8 kernels); %%ceil = of dense cuBLAS BF16 %.0f (FP8 %.0f for mxfp8fp8) TFLOP/s, same run\n", dense[0], dense[1]);
    printf("%-22s %-62s %8s %8s %8s %6s %7s\n", "shape", "kernel", "ms", "TFLOP/s", "peer", "ratio", "%ceil");
    for (int i = 0; i < NBSHAPES; ++i) {
      const bshape *b = &bshapes[i];
      long long cnt[64], off[65];
      long long rows = bcounts(b, cnt);
      off[0] = 0;
      for (int e = 0; e < b->E; ++e) off[e + 1] = off[e] + cnt[e];
      double flops = b->mode ? 2.0 * b->M * b->N * (double)rows : 2.0 * (double)rows * b->N * b->K;
      size_t ak = b->mode ? (size_t)rows : (size_t)b->K, ar = b->mode ? (size_t)b->M : (size_t)rows;
      size_t br = b->mode ? (size_t)b->N : (size_t)b->E * b->N;
      size_t outn = b->mode ? (size_t)b->E * b->M * b->N : (size_t)rows * b->N;
      for (int kind = 0; kind < 4; ++kind) {
        if (kind == 1 && b->mode) continue;
        int any = 0;
        for (int j = 0; j < first_bcopy; ++j) any |= units[j].st == FB_OK && (!units[j].failed || units[j].role == R_FP8 || cheap) && units[j].kind == kind && units[j].mode == b->mode && units[j].sel && (units[j].role == R_COVER || units[j].role == R_FP8);
        if (!any) continue;
        CUdeviceptr A, B, asf, bsf, ao, bo, out, offs, hbuf;
        CK(gemm_balloc(ar * ak * (kind == 0 ? 2 : 1), &A));
        CK(gemm_balloc(br * ak * (kind == 2 ? 1 : 2), &B));
        CK(gemm_balloc(ar * ak / 16, &asf));
        CK(gemm_balloc(br * ak / 32, &bsf));
        CK(gemm_balloc(ar * 4, &ao));
        CK(gemm_balloc((size_t)b->E * 4, &bo));
        CK(gemm_balloc(outn * 4, &out));
        CK(gemm_up(off, sizeof(long long) * (size_t)(b->E + 1), &offs));
        CK(gemm_balloc(b->mode ? 16 : (size_t)rows * 2 * b->N * 2, &hbuf)); /* H for the SwiGLU backward */
        /* A of order 1, B scaled by 1/sqrt(K): outputs of order 1 */
        const float bscale = (float)(1.0 / sqrt((double)ak));
        if (!b->mode) CK(gemm_fill_random(hbuf, (size_t)rows * 2 * b->N * 2, 0, 1));
        CK(gemm_fill_random(A, ar * ak * (kind == 0 ? 2 : 1), kind == 0 ? 0 : 1, 1));
        if (kind == 2) CK(gemm_fill_random(B, br * ak, 1, 1));
        else CK(gemm_fill_random(B, br * ak * 2, 0, bscale));
        CK(gemm_fill_random(asf, ar * ak / 16, kind == 1 ? 2 : 3, 1)); /* kind 3 reads the first ar * ak / 32 as E8M0 */
        CK(gemm_fill_random(bsf, br * ak / 32, 3, 1));
        CK(gemm_fill_random(ao, ar * 4, 4, 1));
        CK(gemm_fill_random(bo, (size_t)b->E * 4, 4, 1));
        for (int j = 0; j < first_bcopy; ++j) {
          unit *u = &units[j];
          if (u->st != FB_OK || (u->failed && u->role != R_FP8 && !cheap) || u->kind != kind || u->mode != b->mode) continue;
          if (!u->sel || (u->role != R_COVER && u->role != R_FP8)) continue; /* companions, twins, the expert layer's: checked above, not timed */
          fb_gemm_cfg cfg;
          CK(fb_gemm_config(&u->k, &u->v, &cfg));
          if (b->N % cfg.tile_n || (b->mode && b->M % cfg.tile_m)) continue;
          fb_gemm_args ga = {A, B, out, offs, kind ? asf : 0, kind == 2 ? bsf : 0, kind == 1 ? ao : 0, kind == 1 ? bo : 0, rows, b->E, b->M, b->N, b->K, hbuf, bsf, 0x5A5A0F0Fu};
          fb_kp_gemm kp;
          CK(fb_gemm_params(&cfg, &ga, &kp));
          fb_kernel kern;
          CK(fb_kernel_load(u->cubin.cubin, u->v.name, &kern));
          float ms;
          CK(gemm_time(&kern, &cfg, &kp, info.sm_count, &ms));
          fb_kernel_unload(&kern);
          /* peer: torch's FP8 row-wise grouped GEMM for MXFP8 kinds, BF16 otherwise; ceiling: the dense rate of the
             instruction the kernel runs (FP8 for kind 2, BF16 for the rest) */
          double tf = flops / (ms * 1e-3) / 1e12, pe = pt[i][kind >= 2 ? 1 : 0], ce = dense[kind == 2 ? 1 : 0];
          printf("%-22s %-62s %8.3f %8.1f %8.1f %6.2f %6.1f%%\n", b->name, u->v.name, ms, tf, pe, pe > 0 ? tf / pe : 0, ce > 0 ? 100 * tf / ce : 0);
        }
        CUdeviceptr fr[] = {A, B, asf, bsf, ao, bo, out, offs, hbuf};
        for (int q = 0; q < 9; ++q) fb_cu.MemFree(fr[q]);
      }
    }
  }
  return fails ? 1 : 0;
}
