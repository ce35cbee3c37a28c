/* harness.c (from test_kernels.c) — every generated memory-bound kernel and every tile variant against the CPU reference
 * (runtime/numerics.c), on the GPU: fresh random inputs (Gaussian, wide dynamic range) and the edge
 * cases of NUMERICS.md (zeros, -0, NaN, Inf, subnormals, saturating values, underflowing blocks), output
 * buffers poisoned first, bit-exact comparison, the count of wrong elements printed per kernel.
 *   test_kernels [--quick]      all specs and variants (quick: one variant of each template, one case:
 *                               what compute-sanitizer runs)
 *   test_kernels --only SUBSTR  only specs whose name contains SUBSTR
 * Exit status 0 only if every element of every run matched. Needs a GPU (libcuda.so.1); without one it
 * says SKIPPED and exits 77. Variants come from recipes/tiny.lua's tune families. */
#include "fb_cuda.h"
#include "fb_kparams.h"
#include "fourbit.h"
#include "harness.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
  }
  for (int s = 0; s < 4; ++s)
    for (int sr = 0; sr < 2; ++sr) {
      fb_qspec src = {.format = s < 3 ? FB_FMT_NVFP4 : FB_FMT_MXFP8, .outer = s < 3 ? outers[s] : 0, .four_over_six = s == 1};
      snprintf(n, sizeof n, "requant_%s%s_mxfp8%s_t_sm90a", s < 3 ? "nvfp4_" : "mxfp8", s < 3 ? on[s] : "", sr ? "_sr" : "");
      add(FB_OP_REQUANT, FB_FMT_MXFP8, 0, 0, 0, sr, 1, &src, 0, 0, "requant", n);
    }
  for (int rht = 0; rht < 2; ++rht) {
    snprintf(n, sizeof n, "s2f6_quant%s_sm90a", rht ? "_rht32" : "");
    add(FB_OP_S2F6_Q, FB_FMT_S2F6, 0, 0, 0, 0, 0, NULL, rht ? 32 : 0, 1, "combine", n);
    snprintf(n, sizeof n, "s2f6_dequant%s_sm90a", rht ? "_rht32" : "");
    add(FB_OP_S2F6_DQ, FB_FMT_S2F6, 0, 0, 0, 0, 0, NULL, rht ? 32 : 0, 1, "combine", n);
  }
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

/* ---- device buffers ---- */
static CUdeviceptr dalloc(size_t n) {
  CUdeviceptr p;
  CU(fb_cu.MemAlloc(&p, n ? n : 1));
  CU(fb_cu.MemsetD8(p, 0xA5, n ? n : 1)); /* poison */
  return p;
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

fb_kernel amax_kernel[3]; /* by mode, compiled from the first variant of each amax spec */

/* Run one unit on one input case; returns wrong elements. */
long run_case(const unit *u, const fb_kernel *kern, int kind, unsigned seed, long long R, long long C) {
  const fb_kernel_spec *k = &u->t->k;
  long long n = R * C;
  long long offs[5] = {0, R * 5 / 32, R * 5 / 32, R / 2 + 2, R}; /* an empty group; boundaries off the 16-row grid */
  unsigned ng = 4;
  size_t goff[5] = {0};
  for (int i = 0; i < 5; ++i) goff[i] = (size_t)offs[i];
  float *x = malloc(n * 4);
  uint16_t *xb = malloc(n * 2);
  make_input(kind, R, C, x);
  for (long long i = 0; i < n; ++i) xb[i] = to_bf16(x[i]);
  fb_kp_mem p;
  memset(&p, 0, sizeof p);
  p.rows = R, p.cols = C, p.ngroups = ng, p.seed = seed, p.stream = 3 + seed % 5, p.step = seed * 7 + 1;
  p.signs = fb_rht_signs(seed, 0);
  CUdeviceptr din = dalloc(n * 4), dout = dalloc(n * 4), dsc = dalloc(n), dsd = dalloc(R * 4 + 64), damax = dalloc(R * 4 + 64),
              doff = dalloc(sizeof offs), dflags = dalloc(4), dss = dalloc(n), dssd = dalloc(R * 4 + 64);
  CU(fb_cu.MemcpyHtoD(doff, offs, sizeof offs));
  CU(fb_cu.MemsetD8(dflags, 0, 4));
  p.in = din, p.out = dout, p.scales = dsc, p.s_dec = dsd, p.amax = damax, p.group_offsets = doff, p.flags = dflags;
  p.src_scales = dss, p.src_s_dec = dssd;
  fb_nvfp4_opts no = {.outer = k->q.outer == FB_GRAN_TOKEN ? FB_OUTER_ROW : k->q.outer == FB_GRAN_EXPERT ? FB_OUTER_GROUP : FB_OUTER_TENSOR,
                      .group_offsets = goff, .ngroups = ng, .four_over_six = k->q.four_over_six, .two_d = k->q.two_d,
                      .rounding = k->q.rounding, .seed = p.seed, .stream = p.stream, .step = p.step};
  fb_sr_opts so = {.rounding = k->q.rounding, .seed = p.seed, .stream = p.stream, .step = p.step};
  long wrong = 0;
  int shown = 0;
  unsigned gx, gy, th;
  CK(fb_launch_dims(k, &u->v, R, C, ng, &gx, &gy, &th));
  const char *nm = u->v.name;
  if (k->op == FB_OP_AMAX) {
    CU(fb_cu.MemcpyHtoD(din, xb, n * 2));
    CU(fb_cu.MemsetD8(damax, 0, R * 4 + 64));
    CK(fb_kernel_launch(kern, gx, gy, th, &p, sizeof p));
    CU(fb_cu.CtxSynchronize());
    int mode = k->q.outer == FB_GRAN_TOKEN ? 1 : k->q.outer == FB_GRAN_EXPERT ? 2 : 0;
    int m = mode == 1 ? (int)R : mode == 2 ? (int)ng : 1;
    float *ref = calloc((size_t)m, 4), *got = malloc((size_t)m * 4);
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
    CU(fb_cu.MemcpyDtoH(got, damax, (size_t)m * 4));
    CU(fb_cu.MemcpyDtoH(&flags, dflags, 4));
    wrong += count_diff32(got, ref, (size_t)m, "amax", nm, &shown);
    if ((int)(flags & 1) != bad) {
      fprintf(stderr, "    %s: non-finite flag %u, expected %d\n", nm, flags & 1, bad);
      ++wrong;
    }
    free(ref), free(got);
  } else if (k->op == FB_OP_QUANT && k->q.format == FB_FMT_NVFP4) {
    CU(fb_cu.MemcpyHtoD(din, xb, n * 2));
    if (k->q.outer != FB_GRAN_TOKEN) { /* the amax pass first, as the runtime runs it */
      int mode = k->q.outer == FB_GRAN_EXPERT ? 2 : 0;
      fb_kernel_spec ak = {.op = FB_OP_AMAX};
      ak.q.outer = k->q.outer;
      fb_variant av = {.tmpl = "amax.cuh", .nparams = 1, .param = {"threads"}, .value = {256}};
      unsigned ax, ay, at;
      CK(fb_launch_dims(&ak, &av, R, C, ng, &ax, &ay, &at));
      CU(fb_cu.MemsetD8(damax, 0, R * 4 + 64));
      CK(fb_kernel_launch(&amax_kernel[mode], ax, ay, at, &p, sizeof p));
    }
    CK(fb_kernel_launch(kern, gx, gy, th, &p, sizeof p));
    CU(fb_cu.CtxSynchronize());
    size_t no_ = fb_nvfp4_nouter(&no, (size_t)R);
    uint8_t *rc = malloc(n / 2), *rsf = malloc(n / 16), *gc = malloc(n / 2), *gsf = malloc(n / 16);
    float *rsd = malloc(no_ * 4), *gsd = malloc(no_ * 4);
    CK(fb_nvfp4_quantize(x, (size_t)R, (size_t)C, &no, rc, rsf, rsd, NULL));
    CU(fb_cu.MemcpyDtoH(gc, dout, n / 2));
    CU(fb_cu.MemcpyDtoH(gsf, dsc, n / 16));
    CU(fb_cu.MemcpyDtoH(gsd, dsd, no_ * 4));
    wrong += count_diff8(gc, rc, n / 2, "codes", nm, &shown) + count_diff8(gsf, rsf, n / 16, "scales", nm, &shown) +
             count_diff32(gsd, rsd, no_, "s_dec", nm, &shown);
    free(rc), free(rsf), free(gc), free(gsf), free(rsd), free(gsd);
  } else if (k->op == FB_OP_QUANT || k->op == FB_OP_REQUANT) { /* MXFP8 rows, columns, requantize */
    uint8_t *srcq = NULL, *srcs = NULL;
    float *srcd = NULL;
    if (k->op == FB_OP_QUANT) {
      CU(fb_cu.MemcpyHtoD(din, xb, n * 2));
    } else if (k->src.format == FB_FMT_NVFP4) { /* the saved tensor, quantized by the reference */
      fb_nvfp4_opts sno = no;
      sno.outer = k->src.outer == FB_GRAN_TOKEN ? FB_OUTER_ROW : k->src.outer == FB_GRAN_EXPERT ? FB_OUTER_GROUP : FB_OUTER_TENSOR;
      sno.four_over_six = k->src.four_over_six, sno.two_d = 0, sno.rounding = FB_ROUND_RN;
      size_t nso = fb_nvfp4_nouter(&sno, (size_t)R);
      srcq = malloc(n / 2), srcs = malloc(n / 16), srcd = malloc(nso * 4);
      CK(fb_nvfp4_quantize(x, (size_t)R, (size_t)C, &sno, srcq, srcs, srcd, NULL));
      CU(fb_cu.MemcpyHtoD(din, srcq, n / 2));
      CU(fb_cu.MemcpyHtoD(dss, srcs, n / 16));
      CU(fb_cu.MemcpyHtoD(dssd, srcd, nso * 4));
      no = sno;
    } else {
      srcq = malloc(n), srcs = malloc(n / 32);
      CK(fb_mxfp8_quantize(x, (size_t)R, (size_t)C, FB_MX_ROWWISE, NULL, srcq, srcs));
      CU(fb_cu.MemcpyHtoD(din, srcq, n));
      CU(fb_cu.MemcpyHtoD(dss, srcs, n / 32));
    }
    CK(fb_kernel_launch(kern, gx, gy, th, &p, sizeof p));
    CU(fb_cu.CtxSynchronize());
    uint8_t *rc = malloc(n), *rsc = malloc(n / 32), *gc = malloc(n), *gsc = malloc(n / 32);
    if (k->op == FB_OP_QUANT) CK(fb_mxfp8_quantize(x, (size_t)R, (size_t)C, k->col ? FB_MX_COLWISE : FB_MX_ROWWISE, &so, rc, rsc));
    else if (k->src.format == FB_FMT_NVFP4) CK(fb_requant_nvfp4_to_mxfp8t(srcq, srcs, srcd, (size_t)R, (size_t)C, &no, &so, rc, rsc));
    else CK(fb_requant_mxfp8_to_mxfp8t(srcq, srcs, (size_t)R, (size_t)C, &so, rc, rsc));
    CU(fb_cu.MemcpyDtoH(gc, dout, n));
    CU(fb_cu.MemcpyDtoH(gsc, dsc, n / 32));
    wrong += count_diff8(gc, rc, n, "codes", nm, &shown) + count_diff8(gsc, rsc, n / 32, "scales", nm, &shown);
    free(rc), free(rsc), free(gc), free(gsc), free(srcq), free(srcs), free(srcd);
  } else if (k->op == FB_OP_S2F6_Q) {
    CU(fb_cu.MemcpyHtoD(din, xb, n * 2));
    CK(fb_kernel_launch(kern, gx, gy, th, &p, sizeof p));
    CU(fb_cu.CtxSynchronize());
    int8_t *rq = malloc(n), *gq = malloc(n);
    uint8_t *re = malloc(n / 32), *ge = malloc(n / 32);
    CK(fb_s2f6_quantize(x, (size_t)R, (size_t)C, k->q.rht != 0, p.signs, rq, re));
    CU(fb_cu.MemcpyDtoH(gq, dout, n));
    CU(fb_cu.MemcpyDtoH(ge, dsc, n / 32));
    wrong += count_diff8((uint8_t *)gq, (uint8_t *)rq, n, "codes", nm, &shown) + count_diff8(ge, re, n / 32, "scales", nm, &shown);
    free(rq), free(gq), free(re), free(ge);
  } else if (k->op == FB_OP_S2F6_DQ) {
    int8_t *q = malloc(n);
    uint8_t *e = malloc(n / 32);
    CK(fb_s2f6_quantize(x, (size_t)R, (size_t)C, k->q.rht != 0, p.signs, q, e));
    for (long long i = 0; i < n; i += 97) q[i] = (int8_t)(rnd() & 255); /* every code, -128 too */
    for (long long i = 0; i < n / 32; i += 13) e[i] = (uint8_t)(rnd() & 255);
    CU(fb_cu.MemcpyHtoD(din, q, n));
    CU(fb_cu.MemcpyHtoD(dsc, e, n / 32));
    CK(fb_kernel_launch(kern, gx, gy, th, &p, sizeof p));
    CU(fb_cu.CtxSynchronize());
    float *ry = malloc(n * 4), *gy_ = malloc(n * 4);
    CK(fb_s2f6_dequantize(q, e, (size_t)R, (size_t)C, k->q.rht != 0, p.signs, ry));
    CU(fb_cu.MemcpyDtoH(gy_, dout, n * 4));
    wrong += count_diff32(gy_, ry, n, "values", nm, &shown);
    free(q), free(e), free(ry), free(gy_);
  }
  CUdeviceptr all[] = {din, dout, dsc, dsd, damax, doff, dflags, dss, dssd};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) fb_cu.MemFree(all[i]);
  free(x), free(xb);
  return wrong;
}

