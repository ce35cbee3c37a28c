/* test_gemm.c — the grouped GEMMs of templates/gemm_sm90.cuh against an FP64 reference of the exactly dequantized
 * operands (runtime/numerics.c), on the GPU.
 *   test_gemm                   every kind x mode x variant below, on balanced, skewed (odd and empty experts)
 *                               row distributions; output poisoned (NaN) first
 *   test_gemm --compile-only    compile every variant (sm_90a) and check ptxas's log: no spills, no stack frame,
 *                               no C75xx wgmma advisories (serialization, injected waits); runs on any machine
 *   test_gemm --only SUBSTR     only kernels whose name contains SUBSTR
 * Pass: FP32 outputs within a relative Frobenius error of 1e-5 of the reference (only the FP32 summation order
 * differs); BF16 outputs within one BF16 ulp of the reference everywhere (the rounding of the FP32 result, plus
 * that order), every output element written. Exit 0 only if all pass; 77 (SKIPPED) without a GPU. */
#include "fb_cuda.h"
#include "fb_gemm_host.h"
#include "fourbit.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIE(...) (fprintf(stderr, __VA_ARGS__), fputc('\n', stderr), exit(1))
#define CK(call) do { fb_status s_ = (call); if (s_ != FB_OK) DIE("%s:%d: %s: %s", __FILE__, __LINE__, #call, fb_errmsg()); } while (0)
#define CU(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { const char *m_ = "?"; fb_cu.GetErrorString(r_, &m_); DIE("%s:%d: %s: %s", __FILE__, __LINE__, #call, m_); } } while (0)

/* ---- what is tested ---- */
typedef struct {
  const char *name;
  int kind, mode, out_bf16, tensor_outer;
  int nv;
  int v[6][7]; /* tile_m, tile_n, tile_k, stages, cluster, consumers, weights_bf16 */
} gcase;

static const gcase cases[] = {
    {"gemm_t_bf16_rows_f32", 0, 0, 0, 0, 5, {{128, 128, 64, 4, 1, 1, 1}, {128, 256, 64, 4, 1, 2, 1}, {256, 128, 64, 3, 1, 2, 1}, {64, 256, 64, 4, 1, 1, 1}, {128, 192, 64, 4, 1, 2, 1}}},
    {"gemm_t_bf16_rows_bf16", 0, 0, 1, 0, 1, {{128, 256, 64, 4, 1, 2, 1}}},
    {"gemm_t_bf16_wgrad_f32", 0, 1, 0, 0, 2, {{128, 128, 64, 4, 1, 1, 1}, {128, 256, 64, 4, 1, 2, 1}}},
    {"gemm_t_nvfp4_rows_f32", 1, 0, 0, 0, 4, {{64, 128, 128, 4, 1, 1, 1}, {128, 256, 128, 3, 1, 2, 1}, {128, 128, 128, 5, 1, 2, 1}, {64, 256, 128, 3, 1, 1, 1}}},
    {"gemm_t_nvfp4_rows_bf16", 1, 0, 1, 0, 1, {{128, 256, 128, 3, 1, 2, 1}}},
    {"gemm_t_nvfp4tensor_rows_f32", 1, 0, 0, 1, 1, {{128, 256, 128, 3, 1, 2, 1}}},
    {"gemm_t_mxfp8_rows_f32", 2, 0, 0, 0, 3, {{128, 128, 128, 4, 1, 2, 1}, {64, 128, 128, 4, 1, 1, 1}, {128, 64, 128, 6, 1, 2, 1}}},
    {"gemm_t_mxfp8_rows_bf16", 2, 0, 1, 0, 1, {{128, 128, 128, 4, 1, 2, 1}}},
    {"gemm_t_mxfp8_wgrad_f32", 2, 1, 0, 0, 2, {{128, 128, 128, 4, 1, 2, 1}, {64, 128, 128, 4, 1, 1, 1}}},
};
#define NCASES (int)(sizeof cases / sizeof cases[0])

static fb_kernel_spec spec_of(const gcase *g) {
  fb_kernel_spec k;
  memset(&k, 0, sizeof k);
  snprintf(k.name, sizeof k.name, "%s_sm90a", g->name);
  k.op = g->mode ? FB_OP_GEMM_WGRAD : FB_OP_GEMM_FWD2;
  k.src.format = g->kind == 1 ? FB_FMT_NVFP4 : g->kind == 2 ? FB_FMT_MXFP8 : FB_FMT_BF16;
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
  char err[8192];
} unit;

static unit units[64];
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

static int regs_of(const char *log) {
  const char *s = log ? strstr(log, "Used ") : NULL;
  return s ? atoi(s + 5) : -1;
}

/* ---- data ---- */
static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }
static double unif(void) { return ((rnd() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static float gauss(void) { return (float)(sqrt(-2 * log(unif())) * cos(6.283185307179586 * unif())); }

typedef struct {
  int kind, mode, tensor_outer, dist;
  int E, M, N, K;
  long long rows, off[9];
  /* device */
  CUdeviceptr a, b, a_sf, b_sf, a_outer, b_outer, offsets, out;
  size_t out_elems;
  double *ref; /* out_elems */
} problem;

static const char *dist_name[] = {"balanced", "skewed"};

static CUdeviceptr up(const void *h, size_t n) {
  CUdeviceptr p;
  CU(fb_cu.MemAlloc(&p, n ? n : 16));
  if (n) CU(fb_cu.MemcpyHtoD(p, h, n));
  return p;
}

static void make_problem(problem *P, int kind, int mode, int tensor_outer, int dist) {
  memset(P, 0, sizeof *P);
  P->kind = kind, P->mode = mode, P->tensor_outer = tensor_outer, P->dist = dist;
  P->E = 4, P->N = 768;
  static const int rows0[2][4] = {{192, 192, 192, 192}, {701, 37, 0, 129}};
  static const int rows1[2][4] = {{256, 256, 256, 256}, {256, 0, 384, 128}};
  P->K = mode ? 0 : 512, P->M = mode ? 512 : 0;
  for (int e = 0; e < P->E; ++e) P->off[e + 1] = P->off[e] + (mode ? rows1 : rows0)[dist][e];
  P->rows = P->off[P->E];
  /* logical operands: A is ar x ak, B is br x ak (both K-major) */
  size_t ar = mode ? (size_t)P->M : (size_t)P->rows, ak = mode ? (size_t)P->rows : (size_t)P->K;
  size_t br = mode ? (size_t)P->N : (size_t)P->E * P->N;
  float *A = malloc(ar * ak * 4), *B = malloc(br * ak * 4), *Ad = malloc(ar * ak * 4), *Bd = malloc(br * ak * 4);
  for (size_t i = 0; i < ar * ak; ++i) A[i] = gauss() * ldexpf(1.0f, (int)((i / ak) % 7) - 3);
  for (size_t i = 0; i < br * ak; ++i) B[i] = gauss() * 0.05f;
  if (kind == 0) {
    uint16_t *ha = malloc(ar * ak * 2), *hb = malloc(br * ak * 2);
    for (size_t i = 0; i < ar * ak; ++i) ha[i] = fb_bf16_from_f32(A[i]), Ad[i] = fb_bf16_to_f32(ha[i]);
    for (size_t i = 0; i < br * ak; ++i) hb[i] = fb_bf16_from_f32(B[i]), Bd[i] = fb_bf16_to_f32(hb[i]);
    P->a = up(ha, ar * ak * 2), P->b = up(hb, br * ak * 2);
    free(ha), free(hb);
  } else if (kind == 1) {
    fb_nvfp4_opts oa = {.outer = tensor_outer ? FB_OUTER_TENSOR : FB_OUTER_ROW, .four_over_six = 1};
    size_t goff[9];
    for (int e = 0; e <= P->E; ++e) goff[e] = (size_t)e * P->N;
    fb_nvfp4_opts ob = {.outer = tensor_outer ? FB_OUTER_TENSOR : FB_OUTER_GROUP, .group_offsets = goff, .ngroups = (size_t)P->E};
    uint8_t *ca = malloc(ar * ak / 2), *sa = malloc(ar * ak / 16), *cb = malloc(br * ak / 2), *sb = malloc(br * ak / 16);
    float *da = malloc(fb_nvfp4_nouter(&oa, ar) * 4), *db = malloc(fb_nvfp4_nouter(&ob, br) * 4);
    CK(fb_nvfp4_quantize(A, ar, ak, &oa, ca, sa, da, NULL));
    CK(fb_nvfp4_quantize(B, br, ak, &ob, cb, sb, db, NULL));
    CK(fb_nvfp4_dequantize(ca, sa, da, ar, ak, &oa, Ad));
    CK(fb_nvfp4_dequantize(cb, sb, db, br, ak, &ob, Bd));
    uint16_t *wcopy = malloc(br * ak * 2);
    CK(fb_gemm_weights_bf16_ref(cb, sb, br, ak, wcopy));
    P->a = up(ca, ar * ak / 2), P->a_sf = up(sa, ar * ak / 16), P->b = up(wcopy, br * ak * 2);
    P->a_outer = up(da, fb_nvfp4_nouter(&oa, ar) * 4), P->b_outer = up(db, fb_nvfp4_nouter(&ob, br) * 4);
    free(ca), free(sa), free(cb), free(sb), free(da), free(db), free(wcopy);
  } else {
    fb_sr_opts rn = {FB_ROUND_RN, 0, 0, 0};
    uint8_t *ca = malloc(ar * ak), *sa = malloc(ar * ak / 32), *cb = malloc(br * ak), *sb = malloc(br * ak / 32);
    CK(fb_mxfp8_quantize(A, ar, ak, FB_MX_ROWWISE, &rn, ca, sa));
    CK(fb_mxfp8_quantize(B, br, ak, FB_MX_ROWWISE, &rn, cb, sb));
    CK(fb_mxfp8_dequantize(ca, sa, ar, ak, Ad));
    CK(fb_mxfp8_dequantize(cb, sb, br, ak, Bd));
    P->a = up(ca, ar * ak), P->a_sf = up(sa, ar * ak / 32), P->b = up(cb, br * ak), P->b_sf = up(sb, br * ak / 32);
    free(ca), free(sa), free(cb), free(sb);
  }
  P->offsets = up(P->off, sizeof(long long) * (size_t)(P->E + 1));
  /* the FP64 reference */
  P->out_elems = mode ? (size_t)P->E * P->M * P->N : (size_t)P->rows * P->N;
  P->ref = calloc(P->out_elems, sizeof(double));
  for (int e = 0; e < P->E; ++e) {
    if (!mode) {
      for (long long r = P->off[e]; r < P->off[e + 1]; ++r)
        for (int n = 0; n < P->N; ++n) {
          const float *x = Ad + (size_t)r * ak, *w = Bd + ((size_t)e * P->N + n) * ak;
          double s = 0;
          for (size_t k = 0; k < ak; ++k) s += (double)x[k] * w[k];
          P->ref[(size_t)r * P->N + n] = s;
        }
    } else {
      for (int m = 0; m < P->M; ++m)
        for (int n = 0; n < P->N; ++n) {
          const float *x = Ad + (size_t)m * ak, *w = Bd + (size_t)n * ak;
          double s = 0;
          for (long long r = P->off[e]; r < P->off[e + 1]; ++r) s += (double)x[r] * w[r];
          P->ref[((size_t)e * P->M + m) * P->N + n] = s;
        }
    }
  }
  CU(fb_cu.MemAlloc(&P->out, P->out_elems * 4));
  free(A), free(B), free(Ad), free(Bd);
}

static void free_problem(problem *P) {
  CUdeviceptr *ps[] = {&P->a, &P->b, &P->a_sf, &P->b_sf, &P->a_outer, &P->b_outer, &P->offsets, &P->out};
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; ++i)
    if (*ps[i]) fb_cu.MemFree(*ps[i]);
  free(P->ref);
  memset(P, 0, sizeof *P);
}

static double bf16_ulp(double x) {
  int e;
  frexp(fabs(x) > 1e-38 ? fabs(x) : 1e-38, &e);
  return ldexp(1.0, e - 8);
}

/* run unit u on problem P: 0 pass */
static int run(const unit *u, const fb_kernel *kern, const problem *P, int sms) {
  fb_gemm_cfg cfg;
  CK(fb_gemm_config(&u->k, &u->v, &cfg));
  fb_gemm_args ga = {P->a, P->b, P->out, P->offsets, P->a_sf, P->b_sf, P->a_outer, P->b_outer, P->rows, P->E, P->M, P->N, P->K};
  fb_kp_gemm kp;
  CK(fb_gemm_params(&cfg, &ga, &kp));
  size_t ob = P->out_elems * (cfg.out_bf16 ? 2 : 4);
  CU(fb_cu.MemsetD8(P->out, 0xFF, ob)); /* NaN in both BF16 and FP32 */
  CK(fb_gemm_launch(kern, &cfg, &kp, sms));
  CU(fb_cu.CtxSynchronize());
  void *h = malloc(ob);
  CU(fb_cu.MemcpyDtoH(h, P->out, ob));
  double num = 0, den = 0, worst = 0;
  long nonfinite = 0, off_ulp = 0, not_rne = 0;
  for (size_t i = 0; i < P->out_elems; ++i) {
    double r = P->ref[i], g;
    if (cfg.out_bf16) {
      uint16_t v = ((uint16_t *)h)[i];
      g = fb_bf16_to_f32(v);
      if (fabs(g - r) > bf16_ulp(r)) ++off_ulp;
      if (v != fb_bf16_from_f32((float)r)) ++not_rne;
    } else {
      g = ((float *)h)[i];
    }
    if (!isfinite(g)) { ++nonfinite; continue; }
    num += (g - r) * (g - r), den += r * r;
    if (fabs(g - r) > worst) worst = fabs(g - r);
  }
  free(h);
  double rel = den > 0 ? sqrt(num / den) : sqrt(num);
  int fail = nonfinite || (cfg.out_bf16 ? off_ulp != 0 : !(rel <= 1e-5));
  printf("  %-58s %-9s rel %.2e  max|d| %.2e  unwritten/NaN %ld", u->v.name, dist_name[P->dist], rel, worst, nonfinite);
  if (cfg.out_bf16) printf("  >1ulp %ld  !=RNE(ref) %ld", off_ulp, not_rne);
  printf("  %s\n", fail ? "FAIL" : "ok");
  return fail;
}

int main(int argc, char **argv) {
  int compile_only = 0;
  const char *only = NULL;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--compile-only")) compile_only = 1;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--help")) { puts("usage: test_gemm [--compile-only] [--only SUBSTR]"); return 0; }
    else { fprintf(stderr, "test_gemm: unknown argument %s\n", argv[i]); return 2; }
  }
  for (int c = 0; c < NCASES; ++c) {
    const gcase *g = &cases[c];
    fb_kernel_spec k = spec_of(g);
    fb_tune_family fam = {.nparams = 7, .nvariants = g->nv};
    snprintf(fam.family, sizeof fam.family, "gemm");
    const char *pn[7] = {"tile_m", "tile_n", "tile_k", "stages", "cluster", "consumers", "weights_bf16"};
    for (int j = 0; j < 7; ++j) snprintf(fam.param[j], sizeof fam.param[j], "%s", pn[j]);
    fam.values = (int *)g->v;
    fb_variant *vs;
    int nv, pruned;
    char why[256];
    CK(fb_gen_variants(&k, &fam, &vs, &nv, &pruned, why, sizeof why));
    if (pruned) DIE("%s: %d variants pruned: %s", k.name, pruned, why);
    for (int j = 0; j < nv; ++j) {
      if (only && !strstr(vs[j].name, only)) continue;
      unit *u = &units[nunits++];
      u->g = g, u->k = k, u->v = vs[j];
      CK(fb_gen_source(&k, &vs[j], "tests/gpu/test_gemm.c", "-", &u->src));
    }
    free(vs);
  }
  int nt = 16;
  pthread_t th[16];
  for (int i = 0; i < nt; ++i) pthread_create(&th[i], NULL, compile_worker, NULL);
  for (int i = 0; i < nt; ++i) pthread_join(th[i], NULL);
  int bad = 0;
  for (int i = 0; i < nunits; ++i) {
    unit *u = &units[i];
    char why[256];
    if (u->st != FB_OK) { printf("COMPILE FAILED %s\n%s\n", u->v.name, u->err); ++bad; continue; }
    int p = log_problems(u->cubin.log, why, sizeof why);
    printf("  compiled %-58s %6.0f ms  %3d regs  %s\n", u->v.name, u->cubin.ms, regs_of(u->cubin.log), p ? why : "no spills, no wgmma advisories");
    bad += p;
  }
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
  for (int kind = 0; kind < 3; ++kind)
    for (int mode = 0; mode < 2; ++mode)
      for (int to = 0; to < 2; ++to) {
        int any = 0;
        for (int i = 0; i < nunits; ++i)
          any |= units[i].st == FB_OK && units[i].g->kind == kind && units[i].g->mode == mode && units[i].g->tensor_outer == to;
        if (!any) continue;
        for (int dist = 0; dist < 2; ++dist) {
          problem P;
          make_problem(&P, kind, mode, to, dist);
          for (int i = 0; i < nunits; ++i) {
            unit *u = &units[i];
            if (u->st != FB_OK || u->g->kind != kind || u->g->mode != mode || u->g->tensor_outer != to) continue;
            fb_kernel kern;
            CK(fb_kernel_load(u->cubin.cubin, u->v.name, &kern));
            fails += run(u, &kern, &P, info.sm_count);
            ++runs;
            fb_kernel_unload(&kern);
          }
          free_problem(&P);
        }
      }
  printf("test_gemm: %d runs, %d failed\n", runs, fails);
  return fails ? 1 : 0;
}
