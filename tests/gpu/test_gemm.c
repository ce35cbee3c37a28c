/* test_gemm.c — the grouped GEMMs of templates/gemm_sm90.cuh against an FP64 reference of the exactly dequantized
 * operands (runtime/numerics.c), on the GPU.
 *   test_gemm                   every kind x mode x variant below, on balanced, skewed (odd and empty experts)
 *                               row distributions; output poisoned (NaN) first
 *   test_gemm --compile-only    compile every variant (sm_90a) and check ptxas's log: no spills, no stack frame,
 *                               no C75xx wgmma advisories (serialization, injected waits); runs on any machine. Where
 *                               a cuobjdump is found ($CUOBJDUMP, CUDA's, PATH) also the SASS: every GEMM has HGMMA
 *                               (QGMMA for FP8) and UTMALDG (else it says so: HGMMA not checked)
 *   test_gemm --only SUBSTR     only kernels whose name contains SUBSTR (and the FP32 companion of a selected SwiGLU /
 *                               S2F6 case: its bit-exact check compares with that run)
 *   test_gemm --bench PEERFILE  also time every gemm_t_* variant that passed on the benchmark's shapes (--write-shapes FILE
 *                               writes them for tests/gpu/bench_gemm_peer.py, which writes PEERFILE)
 * Cases: the test's own specs (gemm_t_*), then every GEMM the GPU expert layer runs for recipes/nvidia_nvfp4.lua and
 * recipes/bf16.lua under its own names (gemm_{fwd,dgrad}_nvfp4_tenxnvfp4_ten_*, gemm_*_bf16xbf16_*; checked, not timed).
 * Pass: FP32 outputs within a relative Frobenius error of 1e-5 of the reference (only the FP32 summation order
 * differs); BF16 outputs within one BF16 ulp of the reference everywhere (the rounding of the FP32 result, plus
 * that order), every output element written; a pipelined main loop (variant tag _p1 / _p2, FB_PIPE) with the companion's
 * tiles: its FP32 output bit-identical to the plain (pipe 0) one's on the same problem. Exit 0 only if all pass; 77
 * (SKIPPED) without a GPU. */
#include "fb_cuda.h"
#include "fb_gemm_host.h"
#include "fourbit.h"
#include "fb_math.h"
#include "fb_moe.h"
#include "fb_kparams.h"
#include "gemm_harness.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DIE(...) (fprintf(stderr, __VA_ARGS__), fputc('\n', stderr), exit(1))
#define CK(call) do { fb_status s_ = (call); if (s_ != FB_OK) DIE("%s:%d: %s: %s", __FILE__, __LINE__, #call, fb_errmsg()); } while (0)
#define CU(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { const char *m_ = "?"; fb_cu.GetErrorString(r_, &m_); DIE("%s:%d: %s: %s", __FILE__, __LINE__, #call, m_); } } while (0)

/* ---- what is tested ---- */
typedef struct {
  const char *name;
  int kind, mode, out_bf16, tensor_outer, epi; /* epi: 0 plain, 1 SwiGLU, 2 SwiGLU backward, 3 RHT-32 + S2F6 */
  int nv;
  int v[8][8]; /* tile_m, tile_n, tile_k, stages, cluster, consumers, weights_bf16, pipe (NVFP4 and MXFP8 x BF16 copy) */
} gcase;

static const gcase cases[] = {
    {"gemm_t_bf16_rows_f32", 0, 0, 0, 0, 0, 5, {{128, 128, 64, 4, 1, 1, 1}, {128, 256, 64, 4, 1, 2, 1}, {256, 128, 64, 3, 1, 2, 1}, {64, 256, 64, 4, 1, 1, 1}, {128, 192, 64, 4, 1, 2, 1}}},
    {"gemm_t_bf16_rows_bf16", 0, 0, 1, 0, 0, 1, {{128, 256, 64, 4, 1, 2, 1}}},
    {"gemm_t_bf16_wgrad_f32", 0, 1, 0, 0, 0, 2, {{128, 128, 64, 4, 1, 1, 1}, {128, 256, 64, 4, 1, 2, 1}}},
    /* the software-pipelined main loops (pipe 1, 2: gemm_sm90.cuh FB_PIPE) come after the plain one (pipe 0) of the same
       tiles: the 128 x 256 FP32 ones must equal it bit for bit (the same wgmmas in the same order) */
    {"gemm_t_nvfp4_rows_f32", 1, 0, 0, 0, 0, 8, {{64, 128, 128, 4, 1, 1, 1}, {128, 256, 128, 3, 1, 2, 1}, {128, 128, 128, 5, 1, 2, 1}, {64, 256, 128, 3, 1, 1, 1},
                                                 {128, 256, 128, 3, 1, 2, 1, 2}, {128, 128, 128, 5, 1, 2, 1, 1}, {128, 128, 128, 5, 1, 2, 1, 2}, {64, 256, 128, 3, 1, 1, 1, 2}}},
    {"gemm_t_nvfp4_rows_bf16", 1, 0, 1, 0, 0, 2, {{128, 256, 128, 3, 1, 2, 1}, {128, 256, 128, 3, 1, 2, 1, 2}}},
    {"gemm_t_nvfp4tensor_rows_f32", 1, 0, 0, 1, 0, 2, {{128, 256, 128, 3, 1, 2, 1}, {128, 256, 128, 3, 1, 2, 1, 2}}},
    {"gemm_t_mxfp8_rows_f32", 3, 0, 0, 0, 0, 7, {{128, 256, 128, 2, 1, 2, 1}, {128, 128, 128, 4, 1, 2, 1}, {64, 256, 128, 3, 1, 1, 1}, {128, 192, 128, 2, 1, 2, 1},
                                                 {128, 256, 128, 2, 1, 2, 1, 2}, {128, 128, 128, 4, 1, 2, 1, 1}, {128, 192, 128, 2, 1, 2, 1, 2}}},
    {"gemm_t_mxfp8_rows_bf16", 3, 0, 1, 0, 0, 2, {{128, 256, 128, 2, 1, 2, 1}, {128, 256, 128, 2, 1, 2, 1, 2}}},
    {"gemm_t_mxfp8_wgrad_f32", 3, 1, 0, 0, 0, 4, {{128, 256, 128, 2, 1, 2, 1}, {128, 128, 128, 4, 1, 2, 1}, {128, 256, 128, 2, 1, 2, 1, 2}, {128, 128, 128, 4, 1, 2, 1, 1}}},
    /* w13 fwd with the SwiGLU epilogue (BF16 A); the FP32 variant of the same tiles above is its companion */
    {"gemm_t_bf16_swiglu", 0, 0, 1, 0, 1, 1, {{128, 256, 64, 4, 1, 2, 1}}},
    {"gemm_t_nvfp4_swiglu", 1, 0, 1, 0, 1, 2, {{128, 256, 128, 3, 1, 2, 1}, {128, 256, 128, 3, 1, 2, 1, 2}}},
    {"gemm_t_mxfp8_swiglu", 3, 0, 1, 0, 1, 1, {{128, 256, 128, 2, 1, 2, 1}}}, /* pipe: pruned at 256 (spills) */
    /* w2 dgrad with the SwiGLU-backward epilogue (dH from dA and H) */
    {"gemm_t_bf16_swiglubwd", 0, 0, 1, 0, 2, 1, {{128, 256, 64, 4, 1, 2, 1}}},
    {"gemm_t_mxfp8_swiglubwd", 3, 0, 1, 0, 2, 1, {{128, 256, 128, 2, 1, 2, 1}}}, /* pipe: pruned at 256 (spills) */
    /* w2 fwd with the combine payload (RHT-32 + S2F6) */
    {"gemm_t_nvfp4_s2f6", 1, 0, 0, 0, 3, 2, {{128, 256, 128, 3, 1, 2, 1}, {128, 256, 128, 3, 1, 2, 1, 2}}},
    {"gemm_t_mxfp8_s2f6", 3, 0, 0, 0, 3, 2, {{128, 256, 128, 2, 1, 2, 1}, {128, 256, 128, 2, 1, 2, 1, 2}}},
    {"gemm_t_bf16_s2f6", 0, 0, 0, 0, 3, 1, {{128, 256, 64, 4, 1, 2, 1}}},
    /* FP8 wgmma with per-32 promotion: not a legal variant (the generator prunes it: Hopper's FP8 accumulation misses
       the tolerance); built by hand here to keep measuring how far off it is and how fast */
    {"gemm_t_mxfp8fp8_rows_f32", 2, 0, 0, 0, 0, 1, {{128, 128, 128, 4, 1, 2, 0}}},
    {"gemm_t_mxfp8fp8_wgrad_f32", 2, 1, 0, 0, 0, 1, {{128, 128, 128, 4, 1, 2, 0}}},
    /* Every GEMM the GPU expert layer runs for recipes/nvidia_nvfp4.lua and recipes/bf16.lua (experts_gpu.c need_all:
       sp_gemm 0-3), under the layer's names and specs. One variant is the first of the recipes' gemm family (what the
       layer compiles without a tuned cache: 64 x 128, one consumer), the others wider with two consumers (128 x 256 for
       SwiGLU: the tiles of its FP32 companion, for the bit-exact epilogue check). nvfp4_ten: one FP32 S_dec per
       tensor for A and for B (FB_A_OUTER = FB_B_OUTER = 2), both != 1, on the per-tensor problem; B the exact BF16
       copy (16x16 weight blocks copy as 1x16 ones: the GEMM sees the same BF16 values either way). */
    {"gemm_fwd_nvfp4_tenxnvfp4_ten_bf16_swiglu", 1, 0, 1, 1, 1, 1, {{128, 256, 128, 3, 1, 2, 1}}},
    {"gemm_fwd_nvfp4_tenxnvfp4_ten_bf16", 1, 0, 1, 1, 0, 2, {{64, 128, 128, 3, 1, 1, 1}, {128, 256, 128, 3, 1, 2, 1}}},
    {"gemm_dgrad_nvfp4_tenxnvfp4_ten_bf16", 1, 0, 1, 1, 0, 2, {{128, 192, 128, 3, 1, 2, 1}, {128, 192, 128, 3, 1, 2, 1, 2}}},
    {"gemm_fwd_bf16xbf16_bf16_swiglu", 0, 0, 1, 0, 1, 1, {{128, 256, 64, 3, 1, 2, 1}}},
    {"gemm_fwd_bf16xbf16_bf16", 0, 0, 1, 0, 0, 1, {{64, 128, 64, 3, 1, 1, 1}}},
    {"gemm_dgrad_bf16xbf16_bf16", 0, 0, 1, 0, 0, 1, {{128, 192, 64, 3, 1, 2, 1}}},
    {"gemm_wgrad_bf16xbf16_f32", 0, 1, 0, 0, 0, 1, {{64, 128, 64, 3, 1, 1, 1}}},
};
#define NCASES (int)(sizeof cases / sizeof cases[0])

/* 0: a spec built here (gemm_t_*); 1 the GPU expert layer's spec under its own name (runtime/experts_gpu.c sp_gemm, for
   recipes/nvidia_nvfp4.lua and bf16.lua); 2 the same, its dgrad (FB_OP_GEMM_DGRAD13) */
static int role_of(const gcase *g) {
  return !strncmp(g->name, "gemm_t_", 7) ? 0 : !strncmp(g->name, "gemm_dgrad_", 11) ? 2 : 1;
}

static fb_kernel_spec spec_of(const gcase *g) {
  fb_kernel_spec k;
  memset(&k, 0, sizeof k);
  snprintf(k.name, sizeof k.name, "%s_sm90a", g->name);
  int role = role_of(g);
  if (role) { /* as experts_gpu.c's sp_gemm builds it for nvidia_nvfp4 (per-tensor NVFP4, 16x16 forward weights, an
                 SR-quantized dY / dH in the dgrad) or bf16 (every operand BF16, zero specs) */
    k.op = g->mode ? FB_OP_GEMM_WGRAD : role == 2 ? FB_OP_GEMM_DGRAD13 : g->epi == 1 ? FB_OP_GEMM_FWD13 : FB_OP_GEMM_FWD2;
    if (g->kind == 1) {
      k.src.format = k.act.format = FB_FMT_NVFP4;
      k.src.outer = k.act.outer = FB_GRAN_TENSOR;
      k.src.two_d = role == 1;
      k.act.rounding = role == 2 ? FB_ROUND_SR : FB_ROUND_RN;
      if (k.op == FB_OP_GEMM_FWD13) k.q = k.act;
    }
    k.out_bf16 = g->out_bf16;
    snprintf(k.family, sizeof k.family, "gemm");
    return k;
  }
  k.op = g->mode ? FB_OP_GEMM_WGRAD : g->epi == 1 ? FB_OP_GEMM_FWD13 : g->epi == 2 ? FB_OP_GEMM_DGRAD2 : FB_OP_GEMM_FWD2;
  if (g->epi == 3) k.q.format = FB_FMT_S2F6, k.q.rht = 32;
  k.src.format = g->kind == 1 ? FB_FMT_NVFP4 : g->kind >= 2 ? FB_FMT_MXFP8 : FB_FMT_BF16;
  k.act.format = k.src.format;
  if (g->kind == 1) {
    k.src.outer = g->tensor_outer ? FB_GRAN_TENSOR : FB_GRAN_EXPERT;
    k.act.outer = g->tensor_outer ? FB_GRAN_TENSOR : FB_GRAN_TOKEN;
    k.act.four_over_six = 1;
  }
  k.out_bf16 = g->out_bf16;
  snprintf(k.family, sizeof k.family, "gemm");
  return k;
}

typedef struct {
  const gcase *g;
  fb_kernel_spec k;
  fb_variant v;
  char *src;
  fb_cubin cubin;
  fb_status st;
  int failed;
  char err[8192];
} unit;

static unit units[128];
static int nunits, next_unit;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void *compile_worker(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&mu);
    int i = next_unit++;
    pthread_mutex_unlock(&mu);
    if (i >= nunits) return NULL;
    unit *u = &units[i];
    u->st = fb_nvrtc_compile(u->v.name, u->src, "sm_90a", &u->cubin);
    if (u->st != FB_OK) snprintf(u->err, sizeof u->err, "%s", fb_errmsg());
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

/* The GEMM's machine code (cuobjdump -sass): 1 if its products run on the tensor cores (wgmma: HGMMA, or QGMMA for the
   FP8 one) and its operands arrive by TMA (UTMALDG), 0 if not, -1 if it could not be read */
static int sass_hgmma(const char *tool, const fb_cubin *cb) {
  char path[] = "/tmp/test_gemm_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return -1;
  FILE *f = fdopen(fd, "wb");
  size_t w = f ? fwrite(cb->cubin, 1, cb->size, f) : 0;
  if (f) fclose(f);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "'%s' -sass '%s' 2>/dev/null", tool, path);
  FILE *p = w == cb->size ? popen(cmd, "r") : NULL;
  int hg = 0, tma = 0, lines = 0;
  char line[512];
  while (p && fgets(line, sizeof line, p)) ++lines, hg |= strstr(line, "HGMMA") || strstr(line, "QGMMA"), tma |= strstr(line, "UTMALDG") != NULL;
  int rc = p ? pclose(p) : -1;
  unlink(path);
  return rc != 0 || !lines ? -1 : hg && tma;
}

static int regs_of(const char *log) {
  const char *s = log ? strstr(log, "Used ") : NULL;
  return s ? atoi(s + 5) : -1;
}

/* case g's spec (*k) and variants (*vs, malloc'd; returns how many) */
static int case_variants(const gcase *g, fb_kernel_spec *k, fb_variant **vs) {
  *k = spec_of(g);
  fb_tune_family fam = {.nparams = 8, .nvariants = g->nv};
  snprintf(fam.family, sizeof fam.family, "gemm");
  static const char *pn[8] = {"tile_m", "tile_n", "tile_k", "stages", "cluster", "consumers", "weights_bf16", "pipe"};
  for (int j = 0; j < 8; ++j) snprintf(fam.param[j], sizeof fam.param[j], "%s", pn[j]);
  fam.values = (int *)g->v;
  int nv, pruned;
  char why[256];
  if (g->kind == 2) { /* by hand: the generator prunes it */
    *vs = calloc((size_t)g->nv, sizeof **vs), nv = g->nv;
    for (int j = 0; j < nv; ++j) {
      fb_variant *v = &(*vs)[j];
      snprintf(v->tmpl, sizeof v->tmpl, "gemm_sm90.cuh");
      v->nparams = 6;
      for (int q = 0; q < 6; ++q) snprintf(v->param[q], sizeof v->param[q], "%s", pn[q]), v->value[q] = g->v[j][q];
      snprintf(v->name, sizeof v->name, "%s_m%dn%dk%d_s%d_c%d_w%d", k->name, g->v[j][0], g->v[j][1], g->v[j][2], g->v[j][3], g->v[j][4], g->v[j][5]);
    }
  } else {
    CK(fb_gen_variants(k, &fam, vs, &nv, &pruned, why, sizeof why));
    if (pruned) DIE("%s: %d variants pruned: %s", k->name, pruned, why);
  }
  return nv;
}

/* the variant whose FP32 output gemm_run keeps as gemm_companion (plain, rows, 128 x 256 tiles, 2 consumers) */
static int is_companion(const gcase *g, const fb_variant *v) {
  int tm = 0, tn = 0, co = 0;
  for (int i = 0; i < v->nparams; ++i) {
    if (!strcmp(v->param[i], "tile_m")) tm = v->value[i];
    if (!strcmp(v->param[i], "tile_n")) tn = v->value[i];
    if (!strcmp(v->param[i], "consumers")) co = v->value[i];
  }
  return g->kind != 2 && !g->epi && !g->mode && !g->out_bf16 && tm == 128 && tn == 256 && co == 2;
}

/* the variant's pipe (gemm_sm90.cuh FB_PIPE; 0 when it has none) */
static int pipe_of(const fb_variant *v) {
  for (int i = 0; i < v->nparams; ++i)
    if (!strcmp(v->param[i], "pipe")) return v->value[i];
  return 0;
}

/* ---- data ---- */

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


int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* line-buffered: a crash keeps what was printed */
  int compile_only = 0, debug = 0, cheap = 0;
  const char *shapes_out = NULL, *peer = NULL;
  const char *only = NULL;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--compile-only")) compile_only = 1;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--debug")) debug = 1;
    else if (!strcmp(argv[i], "--cheap-epilogue")) cheap = 1; /* diagnostics: SwiGLU epilogues without their math */
    else if (!strcmp(argv[i], "--write-shapes") && i + 1 < argc) shapes_out = argv[++i];
    else if (!strcmp(argv[i], "--bench") && i + 1 < argc) peer = argv[++i];
    else if (!strcmp(argv[i], "--help")) { puts("usage: test_gemm [--compile-only] [--only SUBSTR] [--write-shapes FILE] [--bench PEERFILE]"); return 0; }
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
  /* --only: a SwiGLU / S2F6 case's bit-exact check compares with the plain FP32 run of its tiles on the same problem
     (gemm_companion), so a selected one brings that FP32 variant along (it runs first: it comes first in cases[]) */
  int need_comp[4][2];
  memset(need_comp, 0, sizeof need_comp);
  for (int c = 0; only && c < NCASES; ++c) {
    const gcase *g = &cases[c];
    fb_kernel_spec k;
    fb_variant *vs;
    int nv = case_variants(g, &k, &vs);
    for (int j = 0; j < nv; ++j)
      if (strstr(vs[j].name, only) && g->epi && !g->mode) need_comp[g->kind][g->tensor_outer] = 1;
    free(vs);
  }
  for (int c = 0; c < NCASES; ++c) {
    const gcase *g = &cases[c];
    fb_kernel_spec k;
    fb_variant *vs;
    int nv = case_variants(g, &k, &vs);
    for (int j = 0; j < nv; ++j) {
      int comp = need_comp[g->kind][g->tensor_outer] && is_companion(g, &vs[j]);
      if (only && !strstr(vs[j].name, only) && !comp) continue;
      if (only && comp && !strstr(vs[j].name, only)) printf("test_gemm: --only %s: with %s, the FP32 companion of its SwiGLU / S2F6 checks\n", only, vs[j].name);
      if (nunits == (int)(sizeof units / sizeof units[0])) DIE("test_gemm: more than %d kernels: raise units[]", nunits);
      unit *u = &units[nunits++];
      u->g = g, u->k = k, u->v = vs[j];
      CK(fb_gen_source(&k, &vs[j], "tests/gpu/test_gemm.c", "-", &u->src));
      if (debug || cheap) { /* the template's printf lines (block 0); or the math-free epilogues */
        size_t n = strlen(u->src);
        char *d = malloc(n + 32);
        sprintf(d, "#define %s 1\n%s", debug ? "FB_DEBUG" : "FB_EPI_CHEAP", u->src);
        free(u->src);
        u->src = d;
      }
    }
    free(vs);
  }
  int first_bcopy = nunits;
  if (!only || strstr("bcopy", only) || strstr(only, "bcopy")) nunits += bcopy_units(units + nunits, 128 - nunits);
  int nt = 16;
  pthread_t th[16];
  for (int i = 0; i < nt; ++i) pthread_create(&th[i], NULL, compile_worker, NULL);
  for (int i = 0; i < nt; ++i) pthread_join(th[i], NULL);
  int bad = 0, sass_read = 0;
  char cobuf[512];
  const char *co = find_cuobjdump(cobuf, sizeof cobuf);
  for (int i = 0; i < nunits; ++i) {
    unit *u = &units[i];
    char why[256];
    if (u->st != FB_OK) { printf("COMPILE FAILED %s\n%s\n", u->v.name, u->err); ++bad; continue; }
    int p = log_problems(u->cubin.log, why, sizeof why);
    int h = co && i < first_bcopy ? sass_hgmma(co, &u->cubin) : -2; /* the GEMMs only (bcopy has no MMA) */
    if (h == 0) snprintf(why, sizeof why, "no HGMMA / QGMMA or no UTMALDG in the SASS"), p = 1;
    sass_read += h >= 0;
    printf("  compiled %-58s %6.0f ms  %3d regs  %s%s\n", u->v.name, u->cubin.ms, regs_of(u->cubin.log), p ? why : "no spills, no wgmma advisories",
           !p && h == 1 ? ", GMMA + UTMALDG" : h == -1 ? " (SASS not read: cuobjdump failed)" : "");
    bad += p;
  }
  /* a cuobjdump that cannot read (13.x without its nvdisasm) leaves the SASS unchecked, as none does; it fails nothing */
  if (co) printf("test_gemm: SASS of %d of %d GEMMs read with %s (the rest: cuobjdump failed, not checked); HGMMA (QGMMA: FP8) and UTMALDG checked in those\n",
                 sass_read, first_bcopy, co);
  else printf("test_gemm: SASS not read (no cuobjdump: set CUOBJDUMP, e.g. the one of pip's nvidia-cuda-cuobjdump): HGMMA not checked\n");
  if (compile_only) {
    printf("test_gemm --compile-only: %d kernels, %d with problems\n", nunits, bad);
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
    if (u->st != FB_OK) continue;
    fb_kernel kern;
    CK(fb_kernel_load(u->cubin.cubin, u->v.name, &kern));
    int f, f2;
    CK(gemm_bcopy_check(&u->k, &u->v, &kern, 77, 320, stdout, &f));
    CK(gemm_bcopy_check(&u->k, &u->v, &kern, 1024, 2048, stdout, &f2));
    f |= f2;
    u->failed = f, fails += f, runs += 2;
    fb_kernel_unload(&kern);
  }
  for (int kind = 0; kind < 4; ++kind)
    for (int mode = 0; mode < 2; ++mode)
      for (int to = 0; to < 2; ++to) {
        int any = 0;
        for (int i = 0; i < first_bcopy; ++i)
          any |= units[i].st == FB_OK && units[i].g->kind == kind && units[i].g->mode == mode && units[i].g->tensor_outer == to;
        if (!any) continue;
        for (int dist = 0; dist < 2; ++dist) {
          gemm_problem P;
          CK(gemm_make_problem(&P, kind, mode, to, dist));
          free(gemm_companion); /* another problem's data: no companion until this one's FP32 run */
          gemm_companion = NULL;
          if (kind == 1 && to) printf("  (per-tensor problem, %s: S_dec(A) = %.6g, S_dec(B) = %.6g)\n", gemm_dist_name[dist], P.a_sdec, P.b_sdec);
          float *plain = NULL; /* the FP32 output of the pipe 0 variant with the companion's tiles, on this problem */
          const char *plain_name = NULL;
          for (int i = 0; i < first_bcopy; ++i) {
            unit *u = &units[i];
            if (u->st != FB_OK || u->g->kind != kind || u->g->mode != mode || u->g->tensor_outer != to) continue;
            fb_kernel kern;
            CK(fb_kernel_load(u->cubin.cubin, u->v.name, &kern));
            int f;
            CK(gemm_run(&u->k, &u->v, &kern, &P, info.sm_count, stdout, 0, &f));
            if (is_companion(u->g, &u->v) && gemm_companion) { /* gemm_run kept this variant's FP32 output */
              const size_t nb = P.out_elems * sizeof(float);
              if (!pipe_of(&u->v)) {
                free(plain);
                plain = malloc(nb), plain_name = u->v.name;
                if (!plain) DIE("test_gemm: out of memory");
                memcpy(plain, gemm_companion, nb);
              } else if (plain) { /* the pipelined main loop: the same wgmmas in the same order, so the same bits */
                const uint32_t *x = (const uint32_t *)gemm_companion, *y = (const uint32_t *)plain;
                long differ = 0;
                for (size_t e = 0; e < P.out_elems; ++e) differ += x[e] != y[e];
                printf("  %-58s %-9s bit-identical to %s: %s (%ld of %zu words differ)\n", u->v.name, gemm_dist_name[dist], plain_name,
                       differ ? "FAIL" : "ok", differ, P.out_elems);
                f |= differ != 0;
              }
            }
            u->failed |= f;
            if (u->g->kind == 2) { if (f) printf("    (FP8 wgmma with promotion: not a legal variant; measured, not counted)\n"); }
            else fails += f;
            ++runs;
            fb_kernel_unload(&kern);
          }
          free(plain);
          gemm_free_problem(&P);
        }
      }
  printf("test_gemm: %d runs, %d failed\n", runs, fails);
  if (peer) {
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
      if (u->st != FB_OK || u->failed) continue;
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
        for (int j = 0; j < first_bcopy; ++j) any |= units[j].st == FB_OK && (!units[j].failed || kind == 2 || cheap) && units[j].g->kind == kind && units[j].g->mode == b->mode && !role_of(units[j].g);
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
          if (u->st != FB_OK || (u->failed && kind != 2 && !cheap) || u->g->kind != kind || u->g->mode != b->mode) continue;
          if (role_of(u->g)) continue; /* the expert layer's cases: checked above, not part of this table */
          fb_gemm_cfg cfg;
          CK(fb_gemm_config(&u->k, &u->v, &cfg));
          if (b->N % cfg.tile_n || (b->mode && b->M % cfg.tile_m)) continue;
          fb_gemm_args ga = {.a = A, .b = B, .out = out, .offsets = offs, .a_sf = kind ? asf : 0, .b_sf = kind == 2 ? bsf : 0,
                             .a_outer = kind == 1 ? ao : 0, .b_outer = kind == 1 ? bo : 0, .rows = rows, .experts = b->E, .M = b->M,
                             .N = b->N, .K = b->K, .aux = hbuf, .out_sf = bsf, .signs = 0x5A5A0F0Fu};
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
