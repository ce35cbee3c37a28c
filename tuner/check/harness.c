/* harness.c — the tuner's check of the memory-bound kernels (tuner/check/, declared in harness.h): every generated
 * kernel and tile variant against the CPU reference (runtime/numerics.c; runtime/ops.c for the router, permute,
 * unpermute, SwiGLU and AdamW kernels), on the GPU: fresh random inputs (Gaussian, wide dynamic range) and the edge
 * cases of docs/numerics.md (zeros, -0, NaN, Inf, subnormals, saturating values, underflowing blocks), output buffers
 * poisoned first, bit-exact comparison, the wrong elements counted and the first few printed.
 * Entry points: build_specs() (the specs under test), compile_worker() (parallel NVRTC compiles of units[]),
 * make_input(), run_case() (one checked run). A CUDA or fourbit failure is returned as fb_status with its message
 * (every buffer of the case freed), never exited on: the worker (tuner/worker/worker.c) reports it, as do the GPU
 * tests (tests/gpu/test_kernels.c, bench.c), which build their specs' variants from recipes/tiny.lua's families. */
#include "fb_cuda.h"
#include "fb_error.h"
#include "fb_kparams.h"
#include "fourbit.h"
#include "harness.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void build_moe_specs(void); /* the MoE and optimizer kernels: at the end of this file */
static int is_moe(const fb_kernel_spec *k);
static fb_status run_moe_case(const unit *u, const fb_kernel *kern, int kind, unsigned seed, long long R, long long C, long *w);

static uint64_t rs = 88172645463325252ull;
uint64_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }
static double unif(void) { return ((rnd() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static float gauss(void) { return (float)(sqrt(-2 * log(unif())) * cos(6.283185307179586 * unif())); }

static uint16_t to_bf16(float f) { /* RNE, NaN kept */
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1)) >> 16);
}
static float from_bf16(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }

/* ---- inputs ---- */
const char *case_name[] = {"gauss", "wide", "edge"};

void make_input(int kind, long long rows, long long cols, float *x) {
  for (long long i = 0; i < rows * cols; ++i) {
    float v = gauss();
    if (kind == CASE_WIDE) v *= ldexpf(1.0f, (int)((i / 16) % 41) - 20 + (int)(rnd() % 3));
    x[i] = v;
  }
  if (kind == CASE_EDGE) {
    static const float e[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1e-40f, -3e-39f, 448.0f, -464.0f, 6.0f,
                              5.0f, 0.25f, 0.75f, 2.5f, 3.5f, 1e30f, -1e-30f, 57344.0f, 3e38f, -2.5e-45f};
    for (long long i = 0; i < rows * cols; i += 7) x[i] = e[(i / 7) % 20] * (i % 3 ? 1.0f : 0.001f);
    for (long long c = 0; c < cols && rows > 2; ++c) x[1 * cols + c] = 0.0f; /* a zero row */
    for (long long c = 0; c < 32 && rows > 3; ++c) x[3 * cols + c] = 1e-30f; /* tiny blocks ... */
    if (rows > 3) x[3 * cols + cols - 1] = 1e20f;                            /* ... beside a huge one */
  }
  for (long long i = 0; i < rows * cols; ++i) x[i] = from_bf16(to_bf16(x[i])); /* what the kernel reads */
}

static void add(fb_op op, fb_format f, fb_gran outer, int fos, int two_d, int sr, int col, const fb_qspec *src,
                int rht, int shape, const char *family, const char *fmtname, ...) {
  tspec *t = &specs[nspecs++];
  memset(t, 0, sizeof *t);
  t->k.op = op;
  t->k.q.format = f;
  t->k.q.outer = outer;
  t->k.q.four_over_six = fos;
  t->k.q.two_d = two_d;
  t->k.q.rounding = sr ? FB_ROUND_SR : FB_ROUND_RN;
  t->k.q.rht = rht;
  t->k.col = col;
  if (src) t->k.src = *src;
  t->family = family;
  t->shape = shape;
  snprintf(t->k.family, sizeof t->k.family, "%s", family);
  snprintf(t->k.name, sizeof t->k.name, "%s", fmtname);
}

void build_specs(void) {
  char n[128], tag[64];
  static const fb_gran outers[] = {FB_GRAN_TENSOR, FB_GRAN_TOKEN, FB_GRAN_EXPERT};
  static const char *on[] = {"ten", "tok", "exp"};
  for (int o = 0; o < 3; ++o) {
    snprintf(n, sizeof n, "amax_%s_bf16_sm90a", on[o]);
    add(FB_OP_AMAX, FB_FMT_BF16, outers[o], 0, 0, 0, 0, NULL, 0, 1, "amax", n);
  }
  for (int o = 0; o < 3; ++o)
    for (int fos = 0; fos < 2; ++fos)
      for (int sr = 0; sr < 2; ++sr)
        for (int td = 0; td < 2; ++td) {
          if (td && (outers[o] == FB_GRAN_TOKEN || fos)) continue;
          fb_qspec q = {.format = FB_FMT_NVFP4, .outer = outers[o], .four_over_six = fos, .two_d = td, .rounding = sr ? FB_ROUND_SR : FB_ROUND_RN};
          fb_qspec_tag(&q, tag, sizeof tag);
          snprintf(n, sizeof n, "quant_%s_row_sm90a", tag);
          add(FB_OP_QUANT, FB_FMT_NVFP4, outers[o], fos, td, sr, 0, NULL, 0, o == 1 ? 1 : 0, "quant", n);
        }
  for (int sr = 0; sr < 2; ++sr) {
    snprintf(n, sizeof n, "quant_mxfp8%s_row_sm90a", sr ? "_sr" : "");
    add(FB_OP_QUANT, FB_FMT_MXFP8, 0, 0, 0, sr, 0, NULL, 0, 1, "quant", n);
    snprintf(n, sizeof n, "quant_mxfp8%s_col_sm90a", sr ? "_sr" : "");
    add(FB_OP_QUANT, FB_FMT_MXFP8, 0, 0, 0, sr, 1, NULL, 0, 0, "quant", n);
    snprintf(n, sizeof n, "quant_mxfp8%s_both_sm90a", sr ? "_sr" : ""); /* both ways in one pass (mx_col.cuh FB_BOTH) */
    add(FB_OP_QUANT, FB_FMT_MXFP8, 0, 0, 0, sr, 2, NULL, 0, 0, "quant", n);
  }
  for (int s = 0; s < 4; ++s)
    for (int sr = 0; sr < 2; ++sr) {
      fb_qspec src = {.format = s < 3 ? FB_FMT_NVFP4 : FB_FMT_MXFP8, .outer = s < 3 ? outers[s] : 0, .four_over_six = s == 1};
      snprintf(n, sizeof n, "requant_%s%s_mxfp8%s_t_sm90a", s < 3 ? "nvfp4_" : "mxfp8", s < 3 ? on[s] : "", sr ? "_sr" : "");
      add(FB_OP_REQUANT, FB_FMT_MXFP8, 0, 0, 0, sr, 1, &src, 0, 0, "requant", n);
      if (!sr) continue; /* the same, written as the GEMMs' BF16 copy (mx_col.cuh FB_KBF16): the recipe's SR forms */
      snprintf(n, sizeof n, "requant_%s%s_mxfp8_sr_t_kbf16_sm90a", s < 3 ? "nvfp4_" : "mxfp8", s < 3 ? on[s] : "");
      add(FB_OP_REQUANT, FB_FMT_MXFP8, 0, 0, 0, sr, 1, &src, 0, 0, "requant", n);
      specs[nspecs - 1].k.out_bf16 = 1;
    }
  for (int rht = 0; rht < 2; ++rht) {
    snprintf(n, sizeof n, "s2f6_quant%s_sm90a", rht ? "_rht32" : "");
    add(FB_OP_S2F6_Q, FB_FMT_S2F6, 0, 0, 0, 0, 0, NULL, rht ? 32 : 0, 1, "combine", n);
    snprintf(n, sizeof n, "s2f6_dequant%s_sm90a", rht ? "_rht32" : "");
    add(FB_OP_S2F6_DQ, FB_FMT_S2F6, 0, 0, 0, 0, 0, NULL, rht ? 32 : 0, 1, "combine", n);
  }
  /* tcopy (the GPU expert layer's BF16 / NVFP4 backward): the copies it makes, as fb_tcopy_ref; src 0 BF16, 1 FP32,
     2 NVFP4, 3 MXFP8. NVFP4 and MXFP8 into FP32 not transposed are GPU dequantizers (fb_*_dequantize's values). */
  static const struct { int src, outer, trans, rht, scale, obf; const char *tag; } tc[] = {
      {1, 0, 0, 0, 0, 1, "f32_bf16"},          {0, 0, 1, 0, 0, 1, "bf16_bf16_t"},     {0, 0, 1, 16, 0, 1, "bf16_bf16_t_rht16"},
      {0, 0, 1, 16, 0, 0, "bf16_f32_t_rht16"}, {2, 0, 1, 0, 0, 0, "nvfp4_ten_f32_t"}, {2, 0, 1, 16, 0, 0, "nvfp4_ten_f32_t_rht16"},
      {2, 1, 1, 16, 0, 0, "nvfp4_tok_f32_t_rht16"}, {2, 0, 1, 16, 0, 1, "nvfp4_ten_bf16_t_rht16"}, {1, 0, 0, 0, 16, 0, "f32_f32_sc16"},
      {1, 0, 0, 0, 1, 0, "f32_f32_sc1"},       {3, 0, 0, 0, 0, 0, "mxfp8_f32"},       {3, 0, 1, 0, 0, 1, "mxfp8_bf16_t"},
      {2, 0, 0, 0, 0, 0, "nvfp4_ten_f32"},     {2, 1, 0, 0, 0, 0, "nvfp4_tok_f32"}};
  for (size_t i = 0; i < sizeof tc / sizeof tc[0]; ++i) {
    fb_qspec src = {.format = tc[i].src == 2 ? FB_FMT_NVFP4 : tc[i].src == 3 ? FB_FMT_MXFP8 : FB_FMT_BF16,
                    .outer = tc[i].outer ? FB_GRAN_TOKEN : FB_GRAN_TENSOR};
    snprintf(n, sizeof n, "tcopy_%s_sm90a", tc[i].tag);
    add(FB_OP_TCOPY, FB_FMT_BF16, 0, 0, 0, 0, tc[i].trans, &src, tc[i].rht, 0, "quant", n);
    specs[nspecs - 1].k.in_f32 = tc[i].src == 1, specs[nspecs - 1].k.out_bf16 = tc[i].obf, specs[nspecs - 1].k.act.rht = tc[i].scale;
  }
  build_moe_specs();
}

/* ---- compile in parallel ---- */
unit *units;
int nunits;
int nspecs;
tspec specs[128];
static int next_unit;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

void *compile_worker(void *arg) {
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

/* ---- one case's buffers ---- */
/* The host and device buffers of one case, freed together on every path (scratch_free). The first failure is kept in
 * rc with its message, and later allocations and copies are skipped: a batch of them is checked once, TRY(S.rc). */
typedef struct {
  void *host[48];
  CUdeviceptr dev[16];
  int nhost, ndev;
  fb_status rc;
} scratch;

#define TRY(call) FB_TRY_GOTO((call), out)
#define TRY_CU(call) CU_CHECK_GOTO((call), out)
/* a driver call inside a scratch helper: its failure becomes s->rc (the first only); nonzero when it failed */
#define S_CU(s, call) s_failed((s), (int)(call), #call, __LINE__)
static int s_failed(scratch *s, int r, const char *call, int line) {
  if (r && s->rc == FB_OK) s->rc = fb_seterr(FB_ECUDA, __FILE__, line, "%s: %s", call, fb_cu_errstr(r));
  return r != 0;
}

static void *hnew(scratch *s, size_t n) {
  if (s->rc != FB_OK) return NULL;
  if (s->nhost == (int)(sizeof s->host / sizeof s->host[0])) {
    s->rc = FB_ERR(FB_ENOMEM, "more than %d host buffers in one case", s->nhost);
    return NULL;
  }
  void *p = malloc(n ? n : 1);
  if (!p) s->rc = FB_ERR(FB_ENOMEM, "%zu bytes", n);
  else s->host[s->nhost++] = p;
  return p;
}

static CUdeviceptr dalloc(scratch *s, size_t n) { /* poisoned */
  CUdeviceptr p = 0;
  if (s->rc != FB_OK) return 0;
  if (s->ndev == (int)(sizeof s->dev / sizeof s->dev[0])) {
    s->rc = FB_ERR(FB_ENOMEM, "more than %d device buffers in one case", s->ndev);
    return 0;
  }
  if (S_CU(s, fb_cu.MemAlloc(&p, n ? n : 1))) return 0;
  s->dev[s->ndev++] = p;
  S_CU(s, fb_cu.MemsetD8(p, 0xA5, n ? n : 1));
  return p;
}

static void scratch_free(scratch *s) {
  for (int i = 0; i < s->nhost; ++i) free(s->host[i]);
  for (int i = 0; i < s->ndev; ++i) fb_cu.MemFree(s->dev[i]);
  s->nhost = s->ndev = 0;
}

static long count_diff8(const uint8_t *a, const uint8_t *b, size_t n, const char *what, const char *name, int *shown) {
  long w = 0;
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) {
      if ((*shown)++ < 3) fprintf(stderr, "    %s: %s[%zu]: gpu 0x%02x, reference 0x%02x\n", name, what, i, a[i], b[i]);
      ++w;
    }
  return w;
}
static long count_diff32(const void *a, const void *b, size_t n, const char *what, const char *name, int *shown) {
  long w = 0;
  const uint32_t *x = a, *y = b;
  for (size_t i = 0; i < n; ++i) {
    float fx, fy;
    memcpy(&fx, &x[i], 4), memcpy(&fy, &y[i], 4);
    if (x[i] != y[i] && !(isnan(fx) && isnan(fy))) {
      if ((*shown)++ < 3) fprintf(stderr, "    %s: %s[%zu]: gpu %.9g (0x%08x), reference %.9g (0x%08x)\n", name, what, i, fx, x[i], fy, y[i]);
      ++w;
    }
  }
  return w;
}

static long count_diff16(const uint16_t *a, const uint16_t *b, size_t n, const char *what, const char *name, int *shown);

fb_kernel amax_kernel[3]; /* by mode, compiled from the first variant of each amax spec */

/* Run one unit on one input case; *wrong = the elements that differ. */
fb_status run_case(const unit *u, const fb_kernel *kern, int kind, unsigned seed, long long R, long long C, long *wrong_out) {
  const fb_kernel_spec *k = &u->t->k;
  *wrong_out = 0;
  if (is_moe(k)) return run_moe_case(u, kern, kind, seed, R, C, wrong_out);
  scratch S = {0};
  fb_status rc = FB_OK;
  long long n = R * C;
  long long offs[5] = {0, R * 5 / 32, R * 5 / 32, R / 2 + 2, R}; /* an empty group; boundaries off the 16-row grid */
  unsigned ng = 4;
  size_t goff[5] = {0};
  for (int i = 0; i < 5; ++i) goff[i] = (size_t)offs[i];
  float *x = hnew(&S, n * 4);
  uint16_t *xb = hnew(&S, n * 2);
  TRY(S.rc);
  make_input(kind, R, C, x);
  for (long long i = 0; i < n; ++i) xb[i] = to_bf16(x[i]);
  fb_kp_mem p;
  memset(&p, 0, sizeof p);
  p.rows = R, p.cols = C, p.ngroups = ng, p.seed = seed, p.stream = 3 + seed % 5, p.step = seed * 7 + 1;
  p.signs = fb_rht_signs(seed, 0);
  CUdeviceptr din = dalloc(&S, n * 4), dout = dalloc(&S, n * 4), dsc = dalloc(&S, n), dsd = dalloc(&S, R * 4 + 64),
              damax = dalloc(&S, R * 4 + 64), doff = dalloc(&S, sizeof offs), dflags = dalloc(&S, 4), dss = dalloc(&S, n),
              dssd = dalloc(&S, R * 4 + 64);
  TRY(S.rc);
  TRY_CU(fb_cu.MemcpyHtoD(doff, offs, sizeof offs));
  TRY_CU(fb_cu.MemsetD8(dflags, 0, 4));
  p.in = din, p.out = dout, p.scales = dsc, p.s_dec = dsd, p.amax = damax, p.group_offsets = doff, p.flags = dflags;
  p.src_scales = dss, p.src_s_dec = dssd;
  fb_nvfp4_opts no = {.outer = k->q.outer == FB_GRAN_TOKEN ? FB_OUTER_ROW : k->q.outer == FB_GRAN_EXPERT ? FB_OUTER_GROUP : FB_OUTER_TENSOR,
                      .group_offsets = goff, .ngroups = ng, .four_over_six = k->q.four_over_six, .two_d = k->q.two_d,
                      .rounding = k->q.rounding, .seed = p.seed, .stream = p.stream, .step = p.step};
  fb_sr_opts so = {.rounding = k->q.rounding, .seed = p.seed, .stream = p.stream, .step = p.step};
  long wrong = 0;
  int shown = 0;
  unsigned gx, gy, th;
  TRY(fb_launch_dims(k, &u->v, R, C, ng, &gx, &gy, &th));
  const char *nm = u->v.name;
  if (k->op == FB_OP_AMAX) {
    TRY_CU(fb_cu.MemcpyHtoD(din, xb, n * 2));
    TRY_CU(fb_cu.MemsetD8(damax, 0, R * 4 + 64));
    TRY(fb_kernel_launch(kern, gx, gy, th, &p, sizeof p));
    TRY_CU(fb_cu.CtxSynchronize());
    int mode = k->q.outer == FB_GRAN_TOKEN ? 1 : k->q.outer == FB_GRAN_EXPERT ? 2 : 0;
    int m = mode == 1 ? (int)R : mode == 2 ? (int)ng : 1;
    float *ref = hnew(&S, (size_t)m * 4), *got = hnew(&S, (size_t)m * 4);
    TRY(S.rc);
    memset(ref, 0, (size_t)m * 4);
    int bad = 0;
    for (long long r = 0; r < R; ++r) {
      int g = mode == 1 ? (int)r : 0;
      if (mode == 2) while (g + 1 < (int)ng && offs[g + 1] <= r) ++g;
      for (long long c = 0; c < C; ++c) {
        float v = fabsf(x[r * C + c]);
        bad |= !(v <= 3.4028235e38f);
        ref[g] = fmaxf(ref[g], v);
      }
    }
    unsigned flags;
    TRY_CU(fb_cu.MemcpyDtoH(got, damax, (size_t)m * 4));
    TRY_CU(fb_cu.MemcpyDtoH(&flags, dflags, 4));
    wrong += count_diff32(got, ref, (size_t)m, "amax", nm, &shown);
    if ((int)(flags & 1) != bad) {
      fprintf(stderr, "    %s: non-finite flag %u, expected %d\n", nm, flags & 1, bad);
      ++wrong;
    }
  } else if (k->op == FB_OP_QUANT && k->q.format == FB_FMT_NVFP4) {
    TRY_CU(fb_cu.MemcpyHtoD(din, xb, n * 2));
    if (k->q.outer != FB_GRAN_TOKEN) { /* the amax pass first, as the runtime runs it */
      int mode = k->q.outer == FB_GRAN_EXPERT ? 2 : 0;
      fb_kernel_spec ak = {.op = FB_OP_AMAX};
      ak.q.outer = k->q.outer;
      fb_variant av = {.tmpl = "amax.cuh", .nparams = 1, .param = {"threads"}, .value = {256}};
      unsigned ax, ay, at;
      TRY(fb_launch_dims(&ak, &av, R, C, ng, &ax, &ay, &at));
      TRY_CU(fb_cu.MemsetD8(damax, 0, R * 4 + 64));
      TRY(fb_kernel_launch(&amax_kernel[mode], ax, ay, at, &p, sizeof p));
    }
    TRY(fb_kernel_launch(kern, gx, gy, th, &p, sizeof p));
    TRY_CU(fb_cu.CtxSynchronize());
    size_t no_ = fb_nvfp4_nouter(&no, (size_t)R);
    uint8_t *rc_ = hnew(&S, n / 2), *rsf = hnew(&S, n / 16), *gc = hnew(&S, n / 2), *gsf = hnew(&S, n / 16);
    float *rsd = hnew(&S, no_ * 4), *gsd = hnew(&S, no_ * 4);
    TRY(S.rc);
    TRY(fb_nvfp4_quantize(x, (size_t)R, (size_t)C, &no, rc_, rsf, rsd, NULL));
    TRY_CU(fb_cu.MemcpyDtoH(gc, dout, n / 2));
    TRY_CU(fb_cu.MemcpyDtoH(gsf, dsc, n / 16));
    TRY_CU(fb_cu.MemcpyDtoH(gsd, dsd, no_ * 4));
    wrong += count_diff8(gc, rc_, n / 2, "codes", nm, &shown) + count_diff8(gsf, rsf, n / 16, "scales", nm, &shown) +
             count_diff32(gsd, rsd, no_, "s_dec", nm, &shown);
  } else if (k->op == FB_OP_QUANT || k->op == FB_OP_REQUANT) { /* MXFP8 rows, columns, requantize */
    uint8_t *srcq = NULL, *srcs = NULL;
    float *srcd = NULL;
    if (k->op == FB_OP_QUANT) {
      TRY_CU(fb_cu.MemcpyHtoD(din, xb, n * 2));
    } else if (k->src.format == FB_FMT_NVFP4) { /* the saved tensor, quantized by the reference */
      fb_nvfp4_opts sno = no;
      sno.outer = k->src.outer == FB_GRAN_TOKEN ? FB_OUTER_ROW : k->src.outer == FB_GRAN_EXPERT ? FB_OUTER_GROUP : FB_OUTER_TENSOR;
      sno.four_over_six = k->src.four_over_six, sno.two_d = 0, sno.rounding = FB_ROUND_RN;
      size_t nso = fb_nvfp4_nouter(&sno, (size_t)R);
      srcq = hnew(&S, n / 2), srcs = hnew(&S, n / 16), srcd = hnew(&S, nso * 4);
      TRY(S.rc);
      TRY(fb_nvfp4_quantize(x, (size_t)R, (size_t)C, &sno, srcq, srcs, srcd, NULL));
      TRY_CU(fb_cu.MemcpyHtoD(din, srcq, n / 2));
      TRY_CU(fb_cu.MemcpyHtoD(dss, srcs, n / 16));
      TRY_CU(fb_cu.MemcpyHtoD(dssd, srcd, nso * 4));
      no = sno;
    } else {
      srcq = hnew(&S, n), srcs = hnew(&S, n / 32);
      TRY(S.rc);
      TRY(fb_mxfp8_quantize(x, (size_t)R, (size_t)C, FB_MX_ROWWISE, NULL, srcq, srcs));
      TRY_CU(fb_cu.MemcpyHtoD(din, srcq, n));
      TRY_CU(fb_cu.MemcpyHtoD(dss, srcs, n / 32));
    }
    /* kbf16: regrouped in two halves on odd seeds where whole 32-row blocks allow it (out_group, as the layer's weights) */
    const int kb = k->op == FB_OP_REQUANT && k->out_bf16;
    const long long G = kb && (seed & 1) && R % 64 == 0 ? R / 2 : R;
    p.out_group = G < R ? (unsigned)G : 0u;
    /* SR under an index map (fb_kparams.h sr_*: a slice of a larger matrix, as a chunk of experts or a rank's rows
       draws) on a third of the seeds: the output's element (i, j) draws at (row0 + i) ld + col0 + j */
    const int tr = k->op == FB_OP_REQUANT || k->col; /* the output is the transpose: rows of R */
    const long long nat = tr ? R : C;
    const int mapped = k->q.rounding == FB_ROUND_SR && seed % 3 == 1;
    if (mapped) p.sr_row0 = 1 + seed % 7, p.sr_ld = nat + 32 * (1 + seed % 4), p.sr_col0 = 32 * (1 + seed % 5);
    /* both ways (mx_col.cuh FB_BOTH): the row-wise codes and scales too, with a stream and (mapped) a map of their own */
    const int both = k->op == FB_OP_QUANT && k->col == 2;
    CUdeviceptr dout2 = 0, dsc2 = 0;
    fb_sr_opts so2 = so;
    if (both) {
      dout2 = dalloc(&S, n), dsc2 = dalloc(&S, n / 32);
      TRY(S.rc);
      TRY_CU(fb_cu.MemsetD8(dout2, 0xA5, n));
      TRY_CU(fb_cu.MemsetD8(dsc2, 0xA5, n / 32));
      p.out2 = dout2, p.scales2 = dsc2, p.stream2 = p.stream + 11;
      so2.stream = p.stream2;
      if (mapped) p.sr2_row0 = 2 + seed % 5, p.sr2_ld = C + 32 * (1 + seed % 3), p.sr2_col0 = 32 * (seed % 4);
    }
    TRY(fb_kernel_launch(kern, gx, gy, th, &p, sizeof p));
    TRY_CU(fb_cu.CtxSynchronize());
    if (both) { /* the row-wise half: fb_mxfp8_quantize (ROWWISE), or fb_mxfp8_quantize_rows_at under the map */
      uint8_t *r2 = hnew(&S, n), *rs2 = hnew(&S, n / 32), *g2 = hnew(&S, n), *gs2 = hnew(&S, n / 32);
      TRY(S.rc);
      if (mapped)
        TRY(fb_mxfp8_quantize_rows_at(x, (size_t)R, (size_t)C, &so2, (size_t)p.sr2_row0, (size_t)p.sr2_ld, (size_t)p.sr2_col0, r2, rs2));
      else TRY(fb_mxfp8_quantize(x, (size_t)R, (size_t)C, FB_MX_ROWWISE, &so2, r2, rs2));
      TRY_CU(fb_cu.MemcpyDtoH(g2, dout2, n));
      TRY_CU(fb_cu.MemcpyDtoH(gs2, dsc2, n / 32));
      wrong += count_diff8(g2, r2, n, "row codes", nm, &shown) + count_diff8(gs2, rs2, n / 32, "row scales", nm, &shown);
    }
    uint8_t *rc_ = hnew(&S, n), *rsc = hnew(&S, n / 32), *gc = hnew(&S, n), *gsc = hnew(&S, n / 32);
    TRY(S.rc);
    if (mapped) { /* the values the kernel quantizes, in its output's layout, then fb_mxfp8_quantize_rows_at */
      float *v = hnew(&S, n * 4), *t = hnew(&S, n * 4);
      TRY(S.rc);
      if (k->op == FB_OP_QUANT) memcpy(v, x, (size_t)n * 4);
      else if (k->src.format == FB_FMT_NVFP4) TRY(fb_nvfp4_dequantize(srcq, srcs, srcd, (size_t)R, (size_t)C, &no, v));
      else TRY(fb_mxfp8_dequantize(srcq, srcs, (size_t)R, (size_t)C, v));
      if (tr)
        for (long long i = 0; i < R; ++i)
          for (long long j = 0; j < C; ++j) t[j * R + i] = v[i * C + j];
      TRY(fb_mxfp8_quantize_rows_at(tr ? t : v, (size_t)(tr ? C : R), (size_t)nat, &so, (size_t)p.sr_row0, (size_t)p.sr_ld,
                                    (size_t)p.sr_col0, rc_, rsc));
    } else if (k->op == FB_OP_QUANT) TRY(fb_mxfp8_quantize(x, (size_t)R, (size_t)C, k->col ? FB_MX_COLWISE : FB_MX_ROWWISE, &so, rc_, rsc));
    else if (k->src.format == FB_FMT_NVFP4) TRY(fb_requant_nvfp4_to_mxfp8t(srcq, srcs, srcd, (size_t)R, (size_t)C, &no, &so, rc_, rsc));
    else TRY(fb_requant_mxfp8_to_mxfp8t(srcq, srcs, (size_t)R, (size_t)C, &so, rc_, rsc));
    if (kb) { /* the reference's codes as their BF16 copy (C x R, K permuted), regrouped: row g C + c holds rows [g G, g G + G) */
      uint16_t *t = hnew(&S, n * 2), *ref = hnew(&S, n * 2), *got = hnew(&S, n * 2);
      TRY(S.rc);
      /* gemm_host.c fb_gemm_mxfp8_bf16_ref's copy (not linked here: the emulator's build has its own driver) */
      for (long long i = 0; i < n; ++i) {
        long long P = i % 16, src = i - P + 4 * ((P & 7) >> 1) + 2 * (P >> 3) + (P & 1);
        t[i] = fb_bf16_from_f32(fb_e4m3_decode(rc_[src]) * fb_e8m0_decode(rsc[src / 32]));
      }
      for (long long c = 0; c < C; ++c)
        for (long long g = 0; g < R / G; ++g) memcpy(ref + (g * C + c) * G, t + c * R + g * G, (size_t)G * 2);
      TRY_CU(fb_cu.MemcpyDtoH(got, dout, n * 2));
      wrong += count_diff16(got, ref, n, "bf16 copy", nm, &shown);
    } else {
      TRY_CU(fb_cu.MemcpyDtoH(gc, dout, n));
      TRY_CU(fb_cu.MemcpyDtoH(gsc, dsc, n / 32));
      wrong += count_diff8(gc, rc_, n, "codes", nm, &shown) + count_diff8(gsc, rsc, n / 32, "scales", nm, &shown);
    }
  } else if (k->op == FB_OP_S2F6_Q) {
    TRY_CU(fb_cu.MemcpyHtoD(din, xb, n * 2));
    TRY(fb_kernel_launch(kern, gx, gy, th, &p, sizeof p));
    TRY_CU(fb_cu.CtxSynchronize());
    int8_t *rq = hnew(&S, n), *gq = hnew(&S, n);
    uint8_t *re = hnew(&S, n / 32), *ge = hnew(&S, n / 32);
    TRY(S.rc);
    TRY(fb_s2f6_quantize(x, (size_t)R, (size_t)C, k->q.rht != 0, p.signs, rq, re));
    TRY_CU(fb_cu.MemcpyDtoH(gq, dout, n));
    TRY_CU(fb_cu.MemcpyDtoH(ge, dsc, n / 32));
    wrong += count_diff8((uint8_t *)gq, (uint8_t *)rq, n, "codes", nm, &shown) + count_diff8(ge, re, n / 32, "scales", nm, &shown);
  } else if (k->op == FB_OP_S2F6_DQ) {
    int8_t *q = hnew(&S, n);
    uint8_t *e = hnew(&S, n / 32);
    TRY(S.rc);
    TRY(fb_s2f6_quantize(x, (size_t)R, (size_t)C, k->q.rht != 0, p.signs, q, e));
    for (long long i = 0; i < n; i += 97) q[i] = (int8_t)(rnd() & 255); /* every code, -128 too */
    for (long long i = 0; i < n / 32; i += 13) e[i] = (uint8_t)(rnd() & 255);
    TRY_CU(fb_cu.MemcpyHtoD(din, q, n));
    TRY_CU(fb_cu.MemcpyHtoD(dsc, e, n / 32));
    TRY(fb_kernel_launch(kern, gx, gy, th, &p, sizeof p));
    TRY_CU(fb_cu.CtxSynchronize());
    float *ry = hnew(&S, n * 4), *gy_ = hnew(&S, n * 4);
    TRY(S.rc);
    TRY(fb_s2f6_dequantize(q, e, (size_t)R, (size_t)C, k->q.rht != 0, p.signs, ry));
    TRY_CU(fb_cu.MemcpyDtoH(gy_, dout, n * 4));
    wrong += count_diff32(gy_, ry, n, "values", nm, &shown);
  } else if (k->op == FB_OP_TCOPY) { /* source BF16 / FP32 / NVFP4 / MXFP8 (x quantized as the spec's source says), out
                                        in place when scaling (as the expert layer runs it) */
    int nv = k->src.format == FB_FMT_NVFP4 && !k->in_f32, tok = nv && k->src.outer == FB_GRAN_TOKEN, scale = k->act.rht;
    int mx = k->src.format == FB_FMT_MXFP8 && !k->in_f32;
    uint8_t *qc = hnew(&S, n + 1), *qs = hnew(&S, n / 16 + 1);
    float *qd = hnew(&S, R * 4 + 4), sab[2] = {(float)unif() * 3.0f + 0.25f, (float)unif() * 0.01f + 1e-3f};
    TRY(S.rc);
    if (nv) {
      fb_nvfp4_opts o = {.outer = tok ? FB_OUTER_ROW : FB_OUTER_TENSOR};
      TRY(fb_nvfp4_quantize(x, (size_t)R, (size_t)C, &o, qc, qs, qd, NULL));
      for (long long i = 0; i < n / 2; i += 61) qc[i] = (uint8_t)(rnd() & 255); /* every code */
      TRY_CU(fb_cu.MemcpyHtoD(din, qc, n / 2));
      TRY_CU(fb_cu.MemcpyHtoD(dss, qs, n / 16));
      TRY_CU(fb_cu.MemcpyHtoD(dssd, qd, (tok ? R : 1) * 4));
    } else if (mx) {
      TRY(fb_mxfp8_quantize(x, (size_t)R, (size_t)C, FB_MX_ROWWISE, NULL, qc, qs));
      /* random codes and scales among the quantizer's, then every code (the NaNs 0x7F and 0xFF too) and every scale
         (255, the NaN; 0 and 254, the extremes: subnormal and overflowing products) at least once */
      for (long long i = 0; i < n; i += 29) qc[i] = (uint8_t)(rnd() & 255);
      for (long long i = 0; i < n / 32; i += 7) qs[i] = (uint8_t)(rnd() & 255);
      for (int v = 0; v < 256; ++v) {
        if (101LL * v + 3 < n) qc[101LL * v + 3] = (uint8_t)v;
        if (5LL * v + 2 < n / 32) qs[5LL * v + 2] = (uint8_t)v;
      }
      TRY_CU(fb_cu.MemcpyHtoD(din, qc, n));
      TRY_CU(fb_cu.MemcpyHtoD(dss, qs, n / 32));
    } else {
      TRY_CU(fb_cu.MemcpyHtoD(din, k->in_f32 ? (void *)x : (void *)xb, n * (k->in_f32 ? 4 : 2)));
    }
    if (scale) {
      TRY_CU(fb_cu.MemcpyHtoD(dsd, &sab[0], 4));
      TRY_CU(fb_cu.MemcpyHtoD(damax, &sab[1], 4));
      p.out = din;
    }
    TRY(fb_kernel_launch(kern, gx, gy, th, &p, sizeof p));
    TRY_CU(fb_cu.CtxSynchronize());
    size_t ob = k->out_bf16 ? 2 : 4;
    void *ref = hnew(&S, n * ob), *got = hnew(&S, n * ob);
    TRY(S.rc);
    TRY(fb_tcopy_ref(nv || mx ? (const void *)qc : k->in_f32 ? (const void *)x : (const void *)xb, qs, qd,
                     nv ? FB_FMT_NVFP4 : mx ? FB_FMT_MXFP8 : FB_FMT_BF16, k->in_f32, tok, (size_t)R, (size_t)C, k->col, k->q.rht,
                     p.signs, scale, scale ? &sab[0] : NULL, scale ? &sab[1] : NULL, k->out_bf16, ref));
    TRY_CU(fb_cu.MemcpyDtoH(got, scale ? din : dout, n * ob));
    if (k->out_bf16) { /* as FP32 bit patterns, so that any NaN equals any NaN */
      uint32_t *a = hnew(&S, n * 4), *b = hnew(&S, n * 4);
      TRY(S.rc);
      for (long long i = 0; i < n; ++i) a[i] = (uint32_t)((uint16_t *)got)[i] << 16, b[i] = (uint32_t)((uint16_t *)ref)[i] << 16;
      wrong += count_diff32(a, b, n, "values", nm, &shown);
    } else {
      wrong += count_diff32(got, ref, n, "values", nm, &shown);
    }
  }
  *wrong_out = wrong;
out:
  scratch_free(&S);
  return rc;
}

/* ---- the MoE and optimizer kernels: router, permute, unpermute, SwiGLU, AdamW (runtime/ops.c) ---------------- */
/* One spec per distinct program (experts and top-k are run-time parameters, not #defines): each case runs the
 * spec over several configurations, listed in run_moe_case's helpers (so the table's element column counts the
 * first only). AdamW: R = 4 experts x N rows of C; its NVFP4 case runs the pipeline of the train step: AdamW (amax
 * per expert / tensor), then quant_nvfp4 with FB_IN_F32 on the new masters. */
static void moe_add(fb_op op, fb_qspec q, int top_k, int experts, int in_f32, int out_bf16, const char *family, const char *name) {
  tspec *t = &specs[nspecs++];
  memset(t, 0, sizeof *t);
  t->k.op = op, t->k.q = q, t->k.top_k = top_k, t->k.experts = experts, t->k.in_f32 = in_f32, t->k.out_bf16 = out_bf16;
  t->family = family, t->shape = 0;
  snprintf(t->k.family, sizeof t->k.family, "%s", family);
  snprintf(t->k.name, sizeof t->k.name, "%s", name);
}

static void build_moe_specs(void) {
  char n[128];
  moe_add(FB_OP_ROUTER, (fb_qspec){0}, 8, 384, 0, 0, "router", "router_sm90a");
  static const struct { fb_format f; fb_gran o; const char *tag; } pm[] = {
      {FB_FMT_BF16, 0, "bf16"}, {FB_FMT_NVFP4, FB_GRAN_TOKEN, "nvfp4_tok"}, {FB_FMT_NVFP4, FB_GRAN_TENSOR, "nvfp4_ten"}, {FB_FMT_MXFP8, 0, "mxfp8"}};
  for (size_t i = 0; i < sizeof pm / sizeof pm[0]; ++i) {
    snprintf(n, sizeof n, "permute_%s_sm90a", pm[i].tag);
    moe_add(FB_OP_PERMUTE, (fb_qspec){.format = pm[i].f, .outer = pm[i].o}, 8, 64, 0, 0, "permute", n);
  }
  static const struct { fb_format f; int rht, obf; } um[] = {
      {FB_FMT_BF16, 0, 0}, {FB_FMT_BF16, 0, 1}, {FB_FMT_S2F6, 0, 0}, {FB_FMT_S2F6, 32, 0}, {FB_FMT_S2F6, 32, 1}};
  for (size_t i = 0; i < sizeof um / sizeof um[0]; ++i) {
    snprintf(n, sizeof n, "unpermute_%s%s_%s_sm90a", um[i].f == FB_FMT_BF16 ? "bf16" : "s2f6", um[i].rht ? "_rht32" : "", um[i].obf ? "bf16" : "f32");
    moe_add(FB_OP_UNPERMUTE, (fb_qspec){.format = um[i].f, .rht = um[i].rht}, 8, 64, 0, um[i].obf, "combine", n);
  }
  moe_add(FB_OP_SWIGLU_FWD, (fb_qspec){0}, 0, 0, 0, 0, "swiglu", "swiglu_fwd_bf16_sm90a");
  moe_add(FB_OP_SWIGLU_BWD, (fb_qspec){0}, 0, 0, 0, 0, "swiglu", "swiglu_bwd_bf16_sm90a");
  static const struct { fb_format f; fb_gran o; int two_d; fb_rounding r; const char *tag; } aw[] = {
      {FB_FMT_BF16, 0, 0, FB_ROUND_RN, "bf16"},           {FB_FMT_MXFP8, 0, 0, FB_ROUND_RN, "mxfp8"},
      {FB_FMT_MXFP8, 0, 0, FB_ROUND_SR, "mxfp8_sr"},      {FB_FMT_NVFP4, FB_GRAN_EXPERT, 0, FB_ROUND_RN, "nvfp4_exp"},
      {FB_FMT_NVFP4, FB_GRAN_EXPERT, 1, FB_ROUND_RN, "nvfp4_2d_exp"}, {FB_FMT_NVFP4, FB_GRAN_TENSOR, 0, FB_ROUND_RN, "nvfp4_ten"}};
  for (size_t i = 0; i < sizeof aw / sizeof aw[0]; ++i) {
    snprintf(n, sizeof n, "adamw_f32_%s_sm90a", aw[i].tag);
    moe_add(FB_OP_ADAMW, (fb_qspec){.format = aw[i].f, .outer = aw[i].o, .two_d = aw[i].two_d, .rounding = aw[i].r}, 0, 4, 1, 0, "adamw", n);
  }
  /* the second launch of the NVFP4 weight pipeline, also on its own: quant_nvfp4 reading FP32 masters */
  for (size_t i = 3; i < sizeof aw / sizeof aw[0]; ++i) {
    snprintf(n, sizeof n, "quant_%s_f32_row_sm90a", aw[i].tag);
    moe_add(FB_OP_QUANT, (fb_qspec){.format = FB_FMT_NVFP4, .outer = aw[i].o, .two_d = aw[i].two_d, .rounding = aw[i].r}, 0, 4, 1, 0,
            "quant", n);
  }
}

static int is_moe(const fb_kernel_spec *k) {
  return k->op == FB_OP_ROUTER || k->op == FB_OP_PERMUTE || k->op == FB_OP_UNPERMUTE || k->op == FB_OP_SWIGLU_FWD ||
         k->op == FB_OP_SWIGLU_BWD || k->op == FB_OP_ADAMW || (k->op == FB_OP_QUANT && k->in_f32);
}

static CUdeviceptr dput(scratch *s, const void *h, size_t n) { /* poisoned, then the host data */
  CUdeviceptr p = dalloc(s, n);
  if (p && h && n) S_CU(s, fb_cu.MemcpyHtoD(p, h, n));
  return p;
}
static void *dget(scratch *s, CUdeviceptr p, size_t n) {
  void *h = hnew(s, n);
  if (h && n) S_CU(s, fb_cu.MemcpyDtoH(h, p, n));
  return h;
}
static long count_diff16(const uint16_t *a, const uint16_t *b, size_t n, const char *what, const char *name, int *shown) {
  long w = 0;
  for (size_t i = 0; i < n; ++i) {
    int na = (a[i] & 0x7FFF) > 0x7F80, nb = (b[i] & 0x7FFF) > 0x7F80; /* NaN == NaN */
    if (a[i] != b[i] && !(na && nb)) {
      if ((*shown)++ < 3) fprintf(stderr, "    %s: %s[%zu]: gpu 0x%04x, reference 0x%04x\n", name, what, i, a[i], b[i]);
      ++w;
    }
  }
  return w;
}
static long count_diff_i32(const int32_t *a, const int32_t *b, size_t n, const char *what, const char *name, int *shown) {
  long w = 0;
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) {
      if ((*shown)++ < 3) fprintf(stderr, "    %s: %s[%zu]: gpu %d, reference %d\n", name, what, i, a[i], b[i]);
      ++w;
    }
  return w;
}

/* top-k expert indices: gauss uniform (repeats allowed), wide skewed (most experts empty), edge all to one expert
 * with dropped entries: -1, and indices out of range, which the kernel drops alike (ref: idx_ref, -1) */
static void make_topk(int kind, long long T, int K, int E, int32_t *idx, int32_t *idx_ref) {
  for (long long i = 0; i < T * K; ++i) {
    int32_t e = kind == CASE_GAUSS ? (int32_t)(rnd() % (unsigned)E)
                : kind == CASE_WIDE ? (int32_t)(E * pow(unif(), 4))
                                    : (rnd() % 9 == 0 ? (rnd() & 1 ? -1 : (rnd() & 1 ? E + (int)(rnd() % 7) : -5)) : E / 2);
    idx[i] = e;
    idx_ref[i] = e >= 0 && e < E ? e : -1;
  }
}

/* Each MoE case below adds the elements that differ to *wrong (0 on entry to run_moe_case) and returns the status. */
static fb_status moe_router(const unit *u, const fb_kernel *kern, int kind, long long T, int E, int K, long *wrong) {
  scratch S = {0};
  fb_status rc = FB_OK;
  fb_kernel_spec ks = u->t->k, *k = &ks;
  ks.experts = E, ks.top_k = K;
  const char *nm = u->v.name;
  int shown = 0;
  size_t nl = (size_t)T * E, nk = (size_t)T * K;
  float *l = hnew(&S, nl * 4), *rp = hnew(&S, nl * 4), *rw = hnew(&S, nk * 4);
  int32_t *ri = hnew(&S, nk * 4);
  TRY(S.rc);
  for (size_t i = 0; i < nl; ++i)
    l[i] = kind == CASE_GAUSS ? 2.0f * gauss() : kind == CASE_WIDE ? 30.0f * gauss() : (float)(rnd() % 4); /* edge: ties */
  if (kind == CASE_EDGE && T > 8) {
    static const float sp[] = {NAN, INFINITY, -INFINITY, 3e38f, -3e38f, 1e-45f};
    for (int j = 0; j < E; ++j) l[0 * E + j] = 0.5f, l[3 * E + j] = -INFINITY, l[6 * E + j] = -1e30f; /* equal rows, all -Inf */
    l[1 * E + E / 2] = NAN, l[2 * E + E - 1] = INFINITY, l[4 * E] = 3e38f, l[4 * E + E - 1] = -3e38f;
    for (long long t = 8; t < T; t += 5) l[t * E + rnd() % (unsigned)E] = sp[rnd() % 6];
  }
  fb_kp_moe p;
  memset(&p, 0, sizeof p);
  CUdeviceptr d[4] = {dput(&S, l, nl * 4), dalloc(&S, nl * 4), dalloc(&S, nk * 4), dalloc(&S, nk * 4)};
  TRY(S.rc);
  p.in = d[0], p.probs = d[1], p.topk_idx = d[2], p.topk_w = d[3], p.rows = T, p.experts = E, p.top_k = K;
  unsigned gx, gy, th;
  TRY(fb_launch_dims(k, &u->v, T, E, 0, &gx, &gy, &th));
  TRY(fb_kernel_launch(kern, gx, gy, th, &p, sizeof p));
  TRY_CU(fb_cu.CtxSynchronize());
  TRY(fb_router_ref(l, (size_t)T, E, K, rp, ri, rw));
  float *gp = dget(&S, d[1], nl * 4), *gw = dget(&S, d[3], nk * 4);
  int32_t *gi = dget(&S, d[2], nk * 4);
  TRY(S.rc);
  *wrong += count_diff32(gp, rp, nl, "probs", nm, &shown) + count_diff_i32(gi, ri, nk, "topk_idx", nm, &shown) +
            count_diff32(gw, rw, nk, "topk_w", nm, &shown);
out:
  scratch_free(&S);
  return rc;
}

static fb_status moe_permute(const unit *u, const fb_kernel *kern, int kind, long long T, long long C, int E, int K, long *wrong) {
  scratch S = {0};
  fb_status rc = FB_OK;
  fb_kernel_spec ks = u->t->k, *k = &ks;
  ks.experts = E, ks.top_k = K;
  const char *nm = u->v.name;
  int shown = 0, tile = kind == CASE_WIDE ? (rnd() & 1 ? 1 : 48) : 128;
  size_t n = (size_t)T * K, maxr = fb_permute_max_rows((size_t)T, K, E, tile), nch = (n + FB_PERMUTE_CHUNK - 1) / FB_PERMUTE_CHUNK, b[3],
         total = 0;
  TRY(fb_payload_planes(k->q.format, k->q.format == FB_FMT_NVFP4 && k->q.outer == FB_GRAN_TOKEN, (size_t)C, b));
  int32_t *idx = hnew(&S, n * 4), *idx_ref = hnew(&S, n * 4), *rcnt = hnew(&S, (size_t)E * 4), *rrow = hnew(&S, n * 4),
          *rtok = hnew(&S, maxr * 4);
  long long *roff = hnew(&S, (size_t)(E + 1) * 8);
  TRY(S.rc);
  make_topk(kind, T, K, E, idx, idx_ref);
  TRY(fb_permute_ref(idx_ref, (size_t)T, K, E, tile, rcnt, roff, rrow, rtok, &total));
  void *in[3] = {0}, *rout[3] = {0};
  for (int q = 0; q < 3; ++q) {
    in[q] = hnew(&S, (size_t)T * b[q] + 1), rout[q] = hnew(&S, total * b[q] + 1);
    TRY(S.rc);
    for (size_t i = 0; i < (size_t)T * b[q]; ++i) ((uint8_t *)in[q])[i] = (uint8_t)rnd();
  }
  TRY(fb_permute_gather_ref((const void *const *)in, b, (size_t)T, rtok, total, rout));
  CUdeviceptr d[12] = {dput(&S, idx, n * 4), dalloc(&S, nch * E * 4), dalloc(&S, (size_t)E * 4), dalloc(&S, (size_t)(E + 1) * 8),
                       dalloc(&S, n * 4), dalloc(&S, maxr * 4)};
  for (int q = 0; q < 3; ++q) d[6 + q] = dput(&S, in[q], (size_t)T * b[q]), d[9 + q] = dalloc(&S, maxr * b[q]);
  TRY(S.rc);
  fb_kp_moe p;
  memset(&p, 0, sizeof p);
  p.topk_idx = d[0], p.chunk_counts = d[1], p.counts = d[2], p.offsets = d[3], p.row_of = d[4], p.token_of = d[5];
  p.in = d[6], p.in_scales = d[7], p.in_outer = d[8], p.out = d[9], p.out_scales = d[10], p.out_outer = d[11];
  p.rows = T, p.cols = C, p.experts = E, p.top_k = K, p.tile = tile;
  unsigned gx, gy, th;
  TRY(fb_launch_dims(k, &u->v, T, C, 0, &gx, &gy, &th));
  for (p.pass = 0; p.pass < 4; ++p.pass) TRY(fb_kernel_launch(kern, gx, gy, th, &p, sizeof p)); /* one stream, in order */
  TRY_CU(fb_cu.CtxSynchronize());
  int32_t *gc = dget(&S, d[2], (size_t)E * 4), *grow = dget(&S, d[4], n * 4);
  long long *goff = dget(&S, d[3], (size_t)(E + 1) * 8);
  TRY(S.rc);
  *wrong += count_diff_i32(gc, rcnt, (size_t)E, "counts", nm, &shown) +
            count_diff_i32((int32_t *)goff, (int32_t *)roff, 2 * (size_t)(E + 1), "offsets (32-bit halves)", nm, &shown) +
            count_diff_i32(grow, rrow, n, "row_of", nm, &shown);
  if (goff[E] == roff[E]) { /* the rows exist on both sides */
    int32_t *gtok = dget(&S, d[5], total * 4);
    TRY(S.rc);
    *wrong += count_diff_i32(gtok, rtok, total, "token_of", nm, &shown);
    static const char *pn[3] = {"rows", "scales", "outer"};
    for (int q = 0; q < 3; ++q) {
      uint8_t *go = dget(&S, d[9 + q], total * b[q]);
      TRY(S.rc);
      *wrong += count_diff8(go, rout[q], total * b[q], pn[q], nm, &shown);
    }
  }
out:
  scratch_free(&S);
  return rc;
}

static fb_status moe_unpermute(const unit *u, const fb_kernel *kern, int kind, unsigned seed, long long T, long long C, int E, int K,
                               long *wrong) {
  scratch S = {0};
  fb_status rc = FB_OK;
  fb_kernel_spec ks = u->t->k, *k = &ks;
  ks.experts = E, ks.top_k = K;
  const char *nm = u->v.name;
  int shown = 0, s2f6 = k->q.format == FB_FMT_S2F6, weighted = kind != CASE_WIDE;
  size_t n = (size_t)T * K, maxr = fb_permute_max_rows((size_t)T, K, E, 16), total = 0, nout = (size_t)T * C;
  int32_t *idx = hnew(&S, n * 4), *idx_ref = hnew(&S, n * 4), *rcnt = hnew(&S, (size_t)E * 4), *row_of = hnew(&S, n * 4),
          *tok = hnew(&S, maxr * 4);
  long long *off = hnew(&S, (size_t)(E + 1) * 8);
  TRY(S.rc);
  make_topk(kind, T, K, E, idx, idx_ref);
  TRY(fb_permute_ref(idx_ref, (size_t)T, K, E, 16, rcnt, off, row_of, tok, &total));
  size_t ny = total * C;
  void *y = hnew(&S, ny * 2 + 1);
  uint8_t *e8 = hnew(&S, ny / 32 + 1);
  TRY(S.rc);
  if (s2f6) {
    for (size_t i = 0; i < ny; ++i) ((uint8_t *)y)[i] = (uint8_t)rnd();
    for (size_t i = 0; i < ny / 32; ++i) e8[i] = (uint8_t)(kind == CASE_EDGE && i % 11 == 0 ? (i % 3 ? 254 + i % 2 : 0) : 100 + rnd() % 40);
  } else {
    float *yf = hnew(&S, ny * 4 + 4);
    TRY(S.rc);
    make_input(kind, (long long)total, C, yf);
    for (size_t i = 0; i < ny; ++i) ((uint16_t *)y)[i] = to_bf16(yf[i]);
  }
  float *w = hnew(&S, n * 4);
  TRY(S.rc);
  for (size_t i = 0; i < n; ++i) w[i] = (float)unif();
  if (kind == CASE_EDGE)
    for (size_t i = 0; i < n; i += 13) w[i] = i % 2 ? 0.0f : -w[i];
  uint32_t signs = fb_rht_signs(seed, 0);
  float *rf = hnew(&S, nout * 4);
  uint16_t *rb = hnew(&S, nout * 2);
  TRY(S.rc);
  TRY(fb_unpermute_ref(y, s2f6 ? e8 : NULL, total, k->q.format, s2f6 && k->q.rht, signs, row_of, weighted ? w : NULL, (size_t)T, K,
                       (size_t)C, rf, rb));
  CUdeviceptr d[5] = {dput(&S, y, s2f6 ? ny : ny * 2), s2f6 ? dput(&S, e8, ny / 32) : 0, dput(&S, row_of, n * 4), dput(&S, w, n * 4),
                      dalloc(&S, nout * 4)};
  TRY(S.rc);
  fb_kp_moe p;
  memset(&p, 0, sizeof p);
  p.in = d[0], p.in_scales = d[1], p.row_of = d[2], p.topk_w = weighted ? d[3] : 0, p.out = d[4];
  p.rows = T, p.cols = C, p.experts = E, p.top_k = K, p.signs = signs;
  unsigned gx, gy, th;
  TRY(fb_launch_dims(k, &u->v, T, C, 0, &gx, &gy, &th));
  TRY(fb_kernel_launch(kern, gx, gy, th, &p, sizeof p));
  TRY_CU(fb_cu.CtxSynchronize());
  void *g = dget(&S, d[4], nout * (k->out_bf16 ? 2 : 4));
  TRY(S.rc);
  *wrong += k->out_bf16 ? count_diff16(g, rb, nout, "out (bf16)", nm, &shown) : count_diff32(g, rf, nout, "out", nm, &shown);
out:
  scratch_free(&S);
  return rc;
}

static fb_status moe_swiglu(const unit *u, const fb_kernel *kern, int kind, long long R, long long F, long *wrong) {
  scratch S = {0};
  fb_status rc = FB_OK;
  const fb_kernel_spec *k = &u->t->k;
  const char *nm = u->v.name;
  int bwd = k->op == FB_OP_SWIGLU_BWD, shown = 0;
  size_t nh = (size_t)R * 2 * F, na = (size_t)R * F, no = bwd ? nh : na;
  float *x = hnew(&S, nh * 4);
  uint16_t *h = hnew(&S, nh * 2), *da = hnew(&S, na * 2), *ref = hnew(&S, no * 2);
  TRY(S.rc);
  make_input(kind, R, 2 * F, x);
  for (size_t i = 0; i < nh; ++i) h[i] = to_bf16(kind == CASE_GAUSS ? 3.0f * x[i] : x[i]);
  make_input(kind == CASE_EDGE ? CASE_EDGE : CASE_GAUSS, R, F, x);
  for (size_t i = 0; i < na; ++i) da[i] = to_bf16(x[i]);
  if (bwd) TRY(fb_swiglu_bwd_ref(h, da, (size_t)R, (size_t)F, ref));
  else TRY(fb_swiglu_fwd_ref(h, (size_t)R, (size_t)F, ref));
  CUdeviceptr d[3] = {dput(&S, h, nh * 2), dput(&S, da, na * 2), dalloc(&S, no * 2)};
  TRY(S.rc);
  fb_kp_moe p;
  memset(&p, 0, sizeof p);
  p.in = d[0], p.in2 = d[1], p.out = d[2], p.rows = R, p.cols = F;
  unsigned gx, gy, th;
  TRY(fb_launch_dims(k, &u->v, R, F, 0, &gx, &gy, &th));
  TRY(fb_kernel_launch(kern, gx, gy, th, &p, sizeof p));
  TRY_CU(fb_cu.CtxSynchronize());
  uint16_t *g = dget(&S, d[2], no * 2);
  TRY(S.rc);
  *wrong += count_diff16(g, ref, no, bwd ? "dH" : "A", nm, &shown);
out:
  scratch_free(&S);
  return rc;
}

/* quant_nvfp4 with FB_IN_F32 for spec k (NVFP4, tensor or expert outer), from units[] or compiled here once; loaded
 * into *out. FB_ENOTFOUND when there is none and no room to compile one. */
static fb_status quant_f32_for(const fb_kernel_spec *k, fb_kernel *out, const unit **qu) {
  for (int i = 0; i < nunits; ++i) {
    const fb_kernel_spec *q = &units[i].t->k;
    if (q->op == FB_OP_QUANT && q->in_f32 && q->q.format == FB_FMT_NVFP4 && q->q.outer == k->q.outer && q->q.two_d == k->q.two_d &&
        q->q.four_over_six == k->q.four_over_six && q->q.rounding == k->q.rounding && units[i].st == FB_OK) {
      FB_TRY(fb_kernel_load(units[i].cubin.cubin, units[i].v.name, out));
      *qu = &units[i];
      return FB_OK;
    }
  }
  static unit own[8];
  static tspec own_t[8];
  static int nown;
  fb_status rc = FB_OK;
  pthread_mutex_lock(&mu);
  int hit = -1;
  for (int i = 0; i < nown && hit < 0; ++i)
    if (own_t[i].k.q.outer == k->q.outer && own_t[i].k.q.two_d == k->q.two_d && own_t[i].k.q.four_over_six == k->q.four_over_six &&
        own_t[i].k.q.rounding == k->q.rounding)
      hit = i;
  if (hit < 0 && nown < 8) {
    tspec *t = &own_t[nown];
    memset(t, 0, sizeof *t);
    t->k.op = FB_OP_QUANT, t->k.q = k->q, t->k.in_f32 = 1, t->family = "quant";
    snprintf(t->k.name, sizeof t->k.name, "quant_nvfp4_f32_for_%s", k->name);
    unit *q = &own[nown];
    memset(q, 0, sizeof *q);
    q->t = t;
    q->v = (fb_variant){.tmpl = "quant_nvfp4.cuh", .nparams = 2, .param = {"rows", "threads"}, .value = {16, 256}};
    snprintf(q->v.name, sizeof q->v.name, "%.160s_r16_t256", t->k.name);
    rc = fb_gen_source(&t->k, &q->v, "tuner/check/harness.c", "-", &q->src);
    if (rc == FB_OK) rc = fb_nvrtc_compile(q->v.name, q->src, "sm_90a", &q->cubin);
    if (rc == FB_OK) hit = nown++; /* kept only when it compiled: a failure is tried again next time */
    else free(q->src), q->src = NULL;
  }
  pthread_mutex_unlock(&mu);
  FB_TRY(rc);
  if (hit < 0) return FB_ERR(FB_ENOTFOUND, "%s: no FB_IN_F32 quantizer (the harness's own 8 are taken)", k->name);
  FB_TRY(fb_kernel_load(own[hit].cubin.cubin, own[hit].v.name, out));
  *qu = &own[hit];
  return FB_OK;
}

/* launch quant_nvfp4 (FB_IN_F32) over the FP32 rows x cols at din, with the amax already in damax */
static fb_status run_quant_f32(const fb_kernel *qk, const unit *qu, CUdeviceptr din, CUdeviceptr damax, CUdeviceptr doff, unsigned ng,
                               long long R, long long C, unsigned seed, CUdeviceptr dcodes, CUdeviceptr dsc, CUdeviceptr dsd) {
  fb_kp_mem q;
  memset(&q, 0, sizeof q);
  q.in = din, q.out = dcodes, q.scales = dsc, q.s_dec = dsd, q.amax = damax, q.group_offsets = doff, q.rows = R, q.cols = C;
  q.ngroups = ng, q.seed = seed, q.stream = 2, q.step = seed * 7 + 1;
  unsigned gx, gy, th;
  FB_TRY(fb_launch_dims(&qu->t->k, &qu->v, R, C, ng, &gx, &gy, &th));
  return fb_kernel_launch(qk, gx, gy, th, &q, sizeof q);
}

/* The standalone FB_IN_F32 quantizer: full-precision FP32 input (not BF16 values), the amax from the host. */
static fb_status moe_quant_f32(const unit *u, const fb_kernel *kern, int kind, unsigned seed, long long R, long long C, long *wrong) {
  scratch S = {0};
  fb_status rc = FB_OK;
  const fb_kernel_spec *k = &u->t->k;
  const char *nm = u->v.name;
  int grp = k->q.outer == FB_GRAN_EXPERT, shown = 0;
  unsigned ng = grp ? 4 : 1;
  long long offs[5] = {0, R * 5 / 32, R * 5 / 32, R / 2 + 2, R}; /* an empty group; boundaries off the 16-row grid */
  size_t goff[5], n = (size_t)R * C;
  for (int i = 0; i < 5; ++i) goff[i] = (size_t)offs[i];
  float *x = hnew(&S, n * 4), amax[4] = {0};
  TRY(S.rc);
  make_input(kind, R, C, x);
  for (size_t i = 0; i < n; ++i) { /* below-BF16 mantissa bits, as FP32 masters have */
    uint32_t b;
    memcpy(&b, &x[i], 4);
    if ((b & 0x7F800000u) != 0x7F800000u) b |= (uint32_t)(rnd() & 0xFFFF);
    memcpy(&x[i], &b, 4);
  }
  for (long long r = 0; r < R; ++r) {
    int g = 0;
    if (grp) while (g + 1 < (int)ng && offs[g + 1] <= r) ++g;
    for (long long c = 0; c < C; ++c) amax[g] = fmaxf(amax[g], fabsf(x[r * C + c]));
  }
  fb_nvfp4_opts o = {.outer = grp ? FB_OUTER_GROUP : FB_OUTER_TENSOR, .group_offsets = goff, .ngroups = ng, .two_d = k->q.two_d,
                     .four_over_six = k->q.four_over_six, .rounding = k->q.rounding, .seed = seed, .stream = 2, .step = seed * 7 + 1};
  uint8_t *rcode = hnew(&S, n / 2), *rs_ = hnew(&S, n / 16);
  float rsd[4];
  TRY(S.rc);
  TRY(fb_nvfp4_quantize(x, (size_t)R, (size_t)C, &o, rcode, rs_, rsd, NULL));
  CUdeviceptr d[6] = {dput(&S, x, n * 4), dput(&S, amax, sizeof amax), dput(&S, offs, sizeof offs), dalloc(&S, n / 2), dalloc(&S, n / 16),
                      dalloc(&S, 16)};
  TRY(S.rc);
  TRY(run_quant_f32(kern, u, d[0], d[1], d[2], ng, R, C, seed, d[3], d[4], d[5]));
  TRY_CU(fb_cu.CtxSynchronize());
  uint8_t *gc = dget(&S, d[3], n / 2), *gs = dget(&S, d[4], n / 16);
  float *gsd = dget(&S, d[5], ng * 4);
  TRY(S.rc);
  *wrong += count_diff8(gc, rcode, n / 2, "codes", nm, &shown) + count_diff8(gs, rs_, n / 16, "scales", nm, &shown) +
            count_diff32(gsd, rsd, ng, "s_dec", nm, &shown);
out:
  scratch_free(&S);
  return rc;
}

static fb_status moe_adamw(const unit *u, const fb_kernel *kern, int kind, unsigned seed, long long R, long long C, long *wrong) {
  scratch S = {0};
  fb_status rc = FB_OK;
  fb_kernel qk = {0};
  const fb_kernel_spec *k = &u->t->k;
  const char *nm = u->v.name;
  int E = k->experts, shown = 0, fmt = k->q.format, grp = k->q.outer == FB_GRAN_EXPERT;
  if (E < 1 || R % E) { fprintf(stderr, "    %s: %lld rows are not %d experts\n", nm, R, E); ++*wrong; return FB_OK; }
  size_t n = (size_t)R * C;
  float *w = hnew(&S, n * 4), *m = hnew(&S, n * 4), *v = hnew(&S, n * 4), *g = hnew(&S, n * 4), *x = hnew(&S, n * 4);
  TRY(S.rc);
  make_input(kind, R, C, x); /* the gradient: gauss, wide, or the edge values (NaN, Inf, ...) */
  for (size_t i = 0; i < n; ++i) {
    float s = kind == CASE_WIDE ? ldexpf(1.0f, (int)((i / 64) % 41) - 20) : 1.0f;
    w[i] = 0.02f * gauss() * s * (float)(1 + (i / (n / E)) * 2), m[i] = 1e-3f * gauss(), v[i] = 1e-6f * fabsf(gauss());
    g[i] = 1e-2f * x[i];
  }
  if (kind == CASE_EDGE)
    for (size_t i = 0; i < n; i += 17) w[i] = 0.0f, m[i] = 0.0f, v[i] = i % 2 ? 0.0f : v[i];
  fb_adamw_hparams hp = {.lr = 3e-4f, .b1 = 0.9f, .b2 = 0.95f, .eps = 1e-8f, .wd = 0.1f, .gscale = 0.5f};
  float t = (float)(1 + seed % 100);
  hp.bc1 = 1.0f - powf(hp.b1, t), hp.bc2 = 1.0f - powf(hp.b2, t);
  long long offs[65];
  for (int e = 0; e <= E && e < 65; ++e) offs[e] = (long long)e * (R / E);
  CUdeviceptr d[12] = {dput(&S, w, n * 4), dput(&S, m, n * 4), dput(&S, v, n * 4), dput(&S, g, n * 4), dalloc(&S, n * 2), dalloc(&S, n / 16),
                       dalloc(&S, (size_t)E * 4), dalloc(&S, 4), dput(&S, offs, (size_t)(E + 1) * 8), dalloc(&S, (size_t)E * 4)};
  TRY(S.rc);
  TRY_CU(fb_cu.MemsetD8(d[6], 0, (size_t)E * 4)); /* amax starts at zero */
  TRY_CU(fb_cu.MemsetD8(d[7], 0, 4));
  fb_kp_moe p;
  memset(&p, 0, sizeof p);
  p.master = d[0], p.m = d[1], p.v = d[2], p.in = d[3], p.out = d[4], p.out_scales = d[5], p.amax = d[6], p.flags = d[7];
  p.rows = R, p.cols = C, p.experts = E, p.seed = seed, p.stream = 2, p.step = seed * 7 + 1;
  p.lr = hp.lr, p.b1 = hp.b1, p.b2 = hp.b2, p.eps = hp.eps, p.wd = hp.wd, p.bc1 = hp.bc1, p.bc2 = hp.bc2, p.gscale = hp.gscale;
  unsigned gx, gy, th;
  TRY(fb_launch_dims(k, &u->v, R, C, (unsigned)E, &gx, &gy, &th));
  TRY(fb_kernel_launch(kern, gx, gy, th, &p, sizeof p));
  const unit *qu = NULL;
  if (fmt == FB_FMT_NVFP4) { /* the second launch of the pipeline, on the new masters */
    d[10] = dalloc(&S, n / 2);
    TRY(S.rc);
    rc = quant_f32_for(k, &qk, &qu);
    if (rc == FB_ENOTFOUND) { fprintf(stderr, "    %s: %s\n", nm, fb_errmsg()); ++*wrong; rc = FB_OK; goto out; }
    TRY(rc);
    TRY(run_quant_f32(&qk, qu, d[0], d[6], d[8], grp ? (unsigned)E : 1u, R, C, seed, d[10], d[5], d[9]));
  }
  TRY_CU(fb_cu.CtxSynchronize());
  /* the reference: fb_adamw_ref with the next step's weights */
  uint8_t *rcode = hnew(&S, n * 2), *rsc = hnew(&S, n / 16 + 1);
  float rsd[64], ram[64];
  TRY(S.rc);
  fb_adamw_next nx = {.q = k->q, .experts = E, .seed = seed, .stream = 2, .step = seed * 7 + 1, .codes = rcode, .scales = rsc, .s_dec = rsd,
                      .amax = ram};
  TRY(fb_adamw_ref(w, m, v, g, (size_t)R, (size_t)C, &hp, &nx));
  float *gw = dget(&S, d[0], n * 4), *gm = dget(&S, d[1], n * 4), *gv = dget(&S, d[2], n * 4);
  TRY(S.rc);
  *wrong += count_diff32(gw, w, n, "master", nm, &shown) + count_diff32(gm, m, n, "m", nm, &shown) + count_diff32(gv, v, n, "v", nm, &shown);
  if (fmt == FB_FMT_BF16) {
    uint16_t *gb = dget(&S, d[4], n * 2);
    TRY(S.rc);
    *wrong += count_diff16(gb, (uint16_t *)rcode, n, "bf16 copy", nm, &shown);
  } else if (fmt == FB_FMT_MXFP8) {
    uint8_t *gc = dget(&S, d[4], n), *gs = dget(&S, d[5], n / 32);
    TRY(S.rc);
    *wrong += count_diff8(gc, rcode, n, "codes", nm, &shown) + count_diff8(gs, rsc, n / 32, "scales", nm, &shown);
  } else {
    unsigned ng = grp ? (unsigned)E : 1u;
    float *ga = dget(&S, d[6], ng * 4), *gsd = dget(&S, d[9], ng * 4);
    uint8_t *gc = dget(&S, d[10], n / 2), *gs = dget(&S, d[5], n / 16);
    TRY(S.rc);
    *wrong += count_diff32(ga, ram, ng, "amax", nm, &shown) + count_diff8(gc, rcode, n / 2, "codes", nm, &shown) +
              count_diff8(gs, rsc, n / 16, "scales", nm, &shown) + count_diff32(gsd, rsd, ng, "s_dec", nm, &shown);
  }
  unsigned flags, bad = 0;
  TRY_CU(fb_cu.MemcpyDtoH(&flags, d[7], 4));
  for (size_t i = 0; i < n; ++i) bad |= !(fabsf(w[i]) <= 3.4028235e38f);
  if ((flags & 1) != bad) {
    fprintf(stderr, "    %s: non-finite flag %u, expected %u\n", nm, flags & 1, bad);
    ++*wrong;
  }
out:
  fb_kernel_unload(&qk);
  scratch_free(&S);
  return rc;
}

/* R x C is the spec's shape (256 x 1024); each op adds configurations of its own: odd token counts (a partial
 * last CTA), few and many experts, top-1 to top-64 */
static fb_status run_moe_case(const unit *u, const fb_kernel *kern, int kind, unsigned seed, long long R, long long C, long *w) {
  switch (u->t->k.op) {
  case FB_OP_ROUTER:
    FB_TRY(moe_router(u, kern, kind, R, 8, 2, w));
    FB_TRY(moe_router(u, kern, kind, 77, 384, 8, w));
    FB_TRY(moe_router(u, kern, kind, R, 33, 1, w));
    return moe_router(u, kern, kind, 64, 4096, 64, w);
  case FB_OP_PERMUTE:
    FB_TRY(moe_permute(u, kern, kind, 77, 320, 8, 2, w));
    FB_TRY(moe_permute(u, kern, kind, R, C, 64, 8, w));
    return moe_permute(u, kern, kind, 300, 96, 384, 4, w); /* more experts than entries: most are empty */
  case FB_OP_UNPERMUTE:
    FB_TRY(moe_unpermute(u, kern, kind, seed, 77, 320, 8, 2, w));
    return moe_unpermute(u, kern, kind, seed, R, C, 64, 8, w);
  case FB_OP_SWIGLU_FWD:
  case FB_OP_SWIGLU_BWD:
    FB_TRY(moe_swiglu(u, kern, kind, R, C, w));
    return moe_swiglu(u, kern, kind, 77, 320, w);
  case FB_OP_ADAMW: return moe_adamw(u, kern, kind, seed, R, C, w);
  default: return moe_quant_f32(u, kern, kind, seed, R, C, w);
  }
}
