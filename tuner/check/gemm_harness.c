/* gemm_harness.c — the tuner's check of the GEMMs (tuner/check/), shared by the worker (tuner/worker/worker.c) and
 * tests/gpu/test_gemm.c: a small grouped problem with operands quantized by the CPU reference and an FP64 reference
 * GEMM, one checked run of a GEMM variant on it, the check of the BF16 operand copy (gemm_bcopy.cuh), benchmark data
 * at training magnitudes, and the timing of test_gemm's benchmark. Declared in gemm_harness.h; every entry point
 * returns fb_status (the message in fb_errmsg()) and frees what it allocated when it fails. */
#include "gemm_harness.h"
#include "fb_error.h"
#include "fb_math.h"
#include "fb_moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TRY(call) FB_TRY_GOTO((call), out)
#define TRY_CU(call) CU_CHECK_GOTO((call), out)

/* ---- data (one generator: test_gemm's sequence of problems and benchmark data is what it was) ---- */
static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }
static double unif(void) { return ((rnd() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static float gauss(void) { return (float)(sqrt(-2 * log(unif())) * cos(6.283185307179586 * unif())); }


const char *gemm_dist_name[] = {"balanced", "skewed"};

fb_status gemm_up(const void *h, size_t n, CUdeviceptr *p) {
  *p = 0;
  CU_CHECK(fb_cu.MemAlloc(p, n ? n : 16));
  int r = n ? (int)fb_cu.MemcpyHtoD(*p, h, n) : 0;
  if (r) {
    fb_cu.MemFree(*p);
    *p = 0;
    return FB_ERR(FB_ECUDA, "fb_cu.MemcpyHtoD(%zu bytes): %s", n, fb_cu_errstr(r));
  }
  return FB_OK;
}

fb_status gemm_make_problem(gemm_problem *P, int kind, int mode, int tensor_outer, int dist) {
  fb_status rc = FB_OK;
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
  /* the host copies of whichever kind this is: freed on every path */
  uint8_t *ca = NULL, *sa = NULL, *cb = NULL, *sb = NULL;
  uint16_t *ha = NULL, *hb = NULL, *wcopy = NULL;
  float *da = NULL, *db = NULL, *pa = NULL, *pb = NULL;
  float *A = malloc(ar * ak * 4), *B = malloc(br * ak * 4), *Ad = malloc(ar * ak * 4), *Bd = malloc(br * ak * 4);
  if (!A || !B || !Ad || !Bd) { rc = FB_ERR(FB_ENOMEM, "gemm_make_problem: operands"); goto out; }
  for (size_t i = 0; i < ar * ak; ++i) A[i] = gauss() * ldexpf(1.0f, (int)((i / ak) % 7) - 3);
  for (size_t i = 0; i < br * ak; ++i) B[i] = gauss() * 0.05f;
  if (kind == 0) {
    ha = malloc(ar * ak * 2), hb = malloc(br * ak * 2);
    if (!ha || !hb) { rc = FB_ERR(FB_ENOMEM, "gemm_make_problem: BF16 operands"); goto out; }
    for (size_t i = 0; i < ar * ak; ++i) ha[i] = fb_bf16_from_f32(A[i]), Ad[i] = fb_bf16_to_f32(ha[i]);
    for (size_t i = 0; i < br * ak; ++i) hb[i] = fb_bf16_from_f32(B[i]), Bd[i] = fb_bf16_to_f32(hb[i]);
    TRY(gemm_up(ha, ar * ak * 2, &P->a));
    TRY(gemm_up(hb, br * ak * 2, &P->b));
  } else if (kind == 1 || kind == 4) { /* 4: B as NVFP4 codes and scales (tcgen05), not the BF16 copy */
    fb_nvfp4_opts oa = {.outer = tensor_outer ? FB_OUTER_TENSOR : FB_OUTER_ROW, .four_over_six = 1};
    size_t goff[9];
    for (int e = 0; e <= P->E; ++e) goff[e] = (size_t)e * P->N;
    fb_nvfp4_opts ob = {.outer = tensor_outer ? FB_OUTER_TENSOR : FB_OUTER_GROUP, .group_offsets = goff, .ngroups = (size_t)P->E};
    ca = malloc(ar * ak / 2), sa = malloc(ar * ak / 16), cb = malloc(br * ak / 2), sb = malloc(br * ak / 16);
    da = malloc(fb_nvfp4_nouter(&oa, ar) * 4), db = malloc(fb_nvfp4_nouter(&ob, br) * 4);
    wcopy = malloc(br * ak * 2);
    if (!ca || !sa || !cb || !sb || !da || !db || !wcopy) { rc = FB_ERR(FB_ENOMEM, "gemm_make_problem: NVFP4 operands"); goto out; }
    TRY(fb_nvfp4_quantize(A, ar, ak, &oa, ca, sa, da, NULL));
    TRY(fb_nvfp4_quantize(B, br, ak, &ob, cb, sb, db, NULL));
    TRY(fb_nvfp4_dequantize(ca, sa, da, ar, ak, &oa, Ad));
    TRY(fb_nvfp4_dequantize(cb, sb, db, br, ak, &ob, Bd));
    TRY(gemm_up(ca, ar * ak / 2, &P->a));
    TRY(gemm_up(sa, ar * ak / 16, &P->a_sf));
    if (kind == 4) {
      TRY(gemm_up(cb, br * ak / 2, &P->b));
      TRY(gemm_up(sb, br * ak / 16, &P->b_sf));
    } else {
      TRY(fb_gemm_weights_bf16_ref(cb, sb, br, ak, wcopy));
      TRY(gemm_up(wcopy, br * ak * 2, &P->b));
    }
    if (tensor_outer) { /* S_dec[0] then NaN where a per-row / per-expert index would read */
      pa = malloc(ar * 4), pb = malloc((size_t)P->E * 4);
      if (!pa || !pb) { rc = FB_ERR(FB_ENOMEM, "gemm_make_problem: outer scales"); goto out; }
      for (size_t i = 0; i < ar; ++i) pa[i] = i ? NAN : da[0];
      for (int e = 0; e < P->E; ++e) pb[e] = e ? NAN : db[0];
      P->a_sdec = da[0], P->b_sdec = db[0];
      if (da[0] == 1.0f || db[0] == 1.0f) { rc = FB_ERR(FB_EINVAL, "gemm_make_problem: a per-tensor S_dec of 1 would not test its use"); goto out; }
      TRY(gemm_up(pa, ar * 4, &P->a_outer));
      TRY(gemm_up(pb, (size_t)P->E * 4, &P->b_outer));
    } else {
      TRY(gemm_up(da, fb_nvfp4_nouter(&oa, ar) * 4, &P->a_outer));
      TRY(gemm_up(db, fb_nvfp4_nouter(&ob, br) * 4, &P->b_outer));
    }
  } else {
    fb_sr_opts rn = {FB_ROUND_RN, 0, 0, 0};
    ca = malloc(ar * ak), sa = malloc(ar * ak / 32), cb = malloc(br * ak), sb = malloc(br * ak / 32);
    if (kind == 3) wcopy = malloc(br * ak * 2);
    if (!ca || !sa || !cb || !sb || (kind == 3 && !wcopy)) { rc = FB_ERR(FB_ENOMEM, "gemm_make_problem: MXFP8 operands"); goto out; }
    TRY(fb_mxfp8_quantize(A, ar, ak, FB_MX_ROWWISE, &rn, ca, sa));
    TRY(fb_mxfp8_quantize(B, br, ak, FB_MX_ROWWISE, &rn, cb, sb));
    TRY(fb_mxfp8_dequantize(ca, sa, ar, ak, Ad));
    TRY(fb_mxfp8_dequantize(cb, sb, br, ak, Bd));
    TRY(gemm_up(ca, ar * ak, &P->a));
    TRY(gemm_up(sa, ar * ak / 32, &P->a_sf));
    if (kind == 3) { /* MXFP8 x the BF16 copy of B */
      TRY(fb_gemm_mxfp8_bf16_ref(cb, sb, br, ak, wcopy));
      TRY(gemm_up(wcopy, br * ak * 2, &P->b));
    } else {
      TRY(gemm_up(cb, br * ak, &P->b));
      TRY(gemm_up(sb, br * ak / 32, &P->b_sf));
    }
  }
  TRY(gemm_up(P->off, sizeof(long long) * (size_t)(P->E + 1), &P->offsets));
  /* the FP64 reference */
  P->out_elems = mode ? (size_t)P->E * P->M * P->N : (size_t)P->rows * P->N;
  P->ref = calloc(P->out_elems, sizeof(double));
  if (!P->ref) { rc = FB_ERR(FB_ENOMEM, "gemm_make_problem: the FP64 reference"); goto out; }
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
  TRY_CU(fb_cu.MemAlloc(&P->out, P->out_elems * 4 * 2));
  TRY_CU(fb_cu.MemAlloc(&P->osf, P->out_elems / 32 + 16));
  if (!mode) {
    P->hh = malloc((size_t)P->rows * 2 * P->N * 2);
    if (!P->hh) { rc = FB_ERR(FB_ENOMEM, "gemm_make_problem: H"); goto out; }
    for (size_t i = 0; i < (size_t)P->rows * 2 * P->N; ++i) P->hh[i] = fb_bf16_from_f32(gauss());
    TRY(gemm_up(P->hh, (size_t)P->rows * 2 * P->N * 2, &P->h));
    TRY_CU(fb_cu.MemAlloc(&P->hout, (size_t)P->rows * P->N * 2));
  }
out:
  free(A), free(B), free(Ad), free(Bd), free(ha), free(hb), free(wcopy);
  free(ca), free(sa), free(cb), free(sb), free(da), free(db), free(pa), free(pb);
  if (rc != FB_OK) gemm_free_problem(P);
  return rc;
}

void gemm_free_problem(gemm_problem *P) {
  CUdeviceptr *ps[] = {&P->a, &P->b, &P->a_sf, &P->b_sf, &P->a_outer, &P->b_outer, &P->offsets, &P->out, &P->h, &P->osf, &P->hout};
  free(P->hh);
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

#define RHT_SIGNS 0x9D2C5680u /* any fixed mask */
float *gemm_companion; /* the FP32 result of the last plain FP32 variant run */

/* Run variant v (spec k, loaded as kern) on P once and check it (a line on log): *fail 0 pass. FP32 out: relative
 * Frobenius error <= 1e-5; BF16 out: the error beyond BF16 rounding <= 1e-5; SwiGLU / SwiGLU backward also bit-exact
 * against the CPU epilogue of gemm_companion when set; S2F6: codes and scales bit-exact against the CPU S2F6 of
 * gemm_companion, or with loose (no companion: the tuner) the dequantized payload within 2e-2 of the FP64 reference. */
fb_status gemm_run(const fb_kernel_spec *k, const fb_variant *v, const fb_kernel *kern, const gemm_problem *P, int sms, FILE *log,
                   int loose, int *fail_out) {
  fb_status rc = FB_OK;
  int8_t *q = NULL, *qr = NULL;
  uint8_t *e = NULL, *er = NULL;
  float *y = NULL;
  void *h = NULL;
  uint16_t *hw = NULL;
  *fail_out = 1;
  fb_gemm_cfg cfg;
  TRY(fb_gemm_config(k, v, &cfg));
  fb_gemm_args ga = {.a = P->a, .b = P->b, .out = P->out, .offsets = P->offsets, .a_sf = P->a_sf, .b_sf = P->b_sf,
                     .a_outer = P->a_outer, .b_outer = P->b_outer, .rows = P->rows, .experts = P->E, .M = P->M, .N = P->N,
                     .K = P->K, .aux = cfg.swiglu == 1 ? P->hout : P->h, .out_sf = P->osf, .signs = RHT_SIGNS};
  fb_kp_gemm kp;
  TRY(fb_gemm_params(&cfg, &ga, &kp));
  if (cfg.s2f6) {
    /* bit-exact against fb_s2f6_quantize (RHT-32, the same signs) of the FP32 result of the plain variant with these
       tiles (the companion); and how far the dequantized payload is from the FP64 reference (S2F6's own error) */
    size_t n = P->out_elems, ns = n / 32;
    TRY_CU(fb_cu.MemsetD8(P->out, 0xAA, n));
    TRY_CU(fb_cu.MemsetD8(P->osf, 0xAA, ns));
    TRY(fb_gemm_launch(kern, &cfg, &kp, sms));
    TRY_CU(fb_cu.CtxSynchronize());
    q = malloc(n), qr = malloc(n), e = malloc(ns), er = malloc(ns), y = malloc(n * 4);
    if (!q || !qr || !e || !er || !y) { rc = FB_ERR(FB_ENOMEM, "gemm_run: the S2F6 payload"); goto out; }
    TRY_CU(fb_cu.MemcpyDtoH(q, P->out, n));
    TRY_CU(fb_cu.MemcpyDtoH(e, P->osf, ns));
    long badq = -1, bade = -1;
    if (gemm_companion) {
      TRY(fb_s2f6_quantize(gemm_companion, (size_t)P->rows, (size_t)P->N, cfg.s2f6 == 2, RHT_SIGNS, qr, er));
      badq = bade = 0;
      for (size_t i = 0; i < n; ++i) badq += q[i] != qr[i];
      for (size_t i = 0; i < ns; ++i) bade += e[i] != er[i];
    }
    TRY(fb_s2f6_dequantize(q, e, (size_t)P->rows, (size_t)P->N, cfg.s2f6 == 2, RHT_SIGNS, y));
    double num = 0, den = 0;
    for (size_t i = 0; i < n; ++i) num += (y[i] - P->ref[i]) * (y[i] - P->ref[i]), den += P->ref[i] * P->ref[i];
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    /* loose (the tuner's worker, no companion run): the dequantized payload within S2F6's own error of the FP64
       reference (rel < 2e-2), and no code or scale differing from the companion's if there is one */
    int fail = loose ? !(rel < 2e-2) || badq > 0 || bade > 0 : badq != 0 || bade != 0;
    fprintf(log, "  %-58s %-9s payload vs CPU S2F6 of the FP32 GEMM: codes %ld, scales %ld differ; dequantized vs FP64: rel %.2e  %s\n",
           v->name, gemm_dist_name[P->dist], badq, bade, sqrt(num / den), fail ? (gemm_companion ? "FAIL" : "FAIL (no companion run)") : "ok");
    *fail_out = fail;
    goto out;
  }
  size_t nout = cfg.swiglu == 1 ? P->out_elems / 2 : cfg.swiglu == 2 ? P->out_elems * 2 : P->out_elems;
  size_t ob = nout * (cfg.out_bf16 ? 2 : 4);
  TRY_CU(fb_cu.MemsetD8(P->out, 0xFF, ob)); /* NaN in both BF16 and FP32 */
  if (cfg.swiglu == 1) TRY_CU(fb_cu.MemsetD8(P->hout, 0xFF, P->out_elems * 2));
  if (getenv("FB_GEMM_DEBUG")) fprintf(log, "host: experts %d N %d K %d rows %lld smem %zu threads %u\n", kp.experts, kp.N, kp.K, kp.rows, fb_gemm_smem_bytes(&cfg), fb_gemm_threads(&cfg));
  TRY(fb_gemm_launch(kern, &cfg, &kp, sms));
  TRY_CU(fb_cu.CtxSynchronize());
  h = malloc(ob);
  if (!h) { rc = FB_ERR(FB_ENOMEM, "gemm_run: the output"); goto out; }
  TRY_CU(fb_cu.MemcpyDtoH(h, P->out, ob));
  if (!cfg.out_bf16 && !cfg.swiglu && !cfg.s2f6) {
    free(gemm_companion);
    gemm_companion = malloc(ob);
    if (!gemm_companion) { rc = FB_ERR(FB_ENOMEM, "gemm_run: the companion output"); goto out; }
    memcpy(gemm_companion, h, ob);
  }
  double num = 0, den = 0, worst = 0, exc = 0;
  long nonfinite = 0, off_ulp = 0, not_rne = 0;
  const int f = P->N / 2;
  for (size_t i = 0; i < nout; ++i) {
    double r = cfg.swiglu ? 0.0 : P->ref[i], g;
    if (cfg.swiglu == 1) { /* A = silu(g) * u on the FP64 reference's g and u, rounded to BF16 as H is stored */
      size_t row = i / (size_t)f, n = i % (size_t)f;
      double gg = fb_bf16_to_f32(fb_bf16_from_f32((float)P->ref[row * P->N + n]));
      double uu = fb_bf16_to_f32(fb_bf16_from_f32((float)P->ref[row * P->N + f + n]));
      r = gg / (1.0 + exp(-gg)) * uu;
    } else if (cfg.swiglu == 2) { /* dH = [dg | du] from the FP64 reference's dA (rounded to BF16 as stored) and H */
      size_t row = i / (2 * (size_t)P->N), c = i % (2 * (size_t)P->N), n = c % (size_t)P->N;
      double da = fb_bf16_to_f32(fb_bf16_from_f32((float)P->ref[row * P->N + n])), gg = fb_bf16_to_f32(P->hh[row * 2 * P->N + n]), uu = fb_bf16_to_f32(P->hh[row * 2 * P->N + P->N + n]);
      double sg = 1.0 / (1.0 + exp(-gg));
      r = c < (size_t)P->N ? da * uu * sg * (1.0 + gg * (1.0 - sg)) : da * gg * sg;
    }
    if (cfg.out_bf16) {
      uint16_t v = ((uint16_t *)h)[i];
      g = fb_bf16_to_f32(v);
      if (fabs(g - r) > bf16_ulp(r)) ++off_ulp;
      double ex = fabs(g - r) - 0.5 * bf16_ulp(r); /* beyond the output's own rounding */
      if (ex > 0) exc += ex * ex;
      if (v != fb_bf16_from_f32((float)r)) ++not_rne;
    } else {
      g = ((float *)h)[i];
    }
    if (!isfinite(g)) { ++nonfinite; continue; }
    num += (g - r) * (g - r), den += r * r;
    if (fabs(g - r) > worst) worst = fabs(g - r);
  }
  long mism = -1;
  if (cfg.swiglu == 2 && gemm_companion) { /* bit-exact against the CPU SwiGLU backward (fb_moe.h) of the FP32 GEMM result */
    mism = 0;
    for (size_t i = 0; i < nout; ++i) {
      size_t row = i / (2 * (size_t)P->N), c = i % (2 * (size_t)P->N), n = c % (size_t)P->N;
      float dg, du;
      fbo_swiglu_bwd(fb_bf16_to_f32(P->hh[row * 2 * P->N + n]), fb_bf16_to_f32(P->hh[row * 2 * P->N + P->N + n]),
                     fb_bf16_to_f32(fb_bf16_from_f32(gemm_companion[row * P->N + n])), &dg, &du);
      if (((uint16_t *)h)[i] != fb_bf16_from_f32(c < (size_t)P->N ? dg : du)) ++mism;
    }
  }
  if (cfg.swiglu == 1 && gemm_companion) { /* bit-exact against the CPU SwiGLU (fb_math.h) of the FP32 GEMM result: H
                                              (BF16, written beside A) and A = bf16(silu(g) * u) of the BF16 g, u */
    mism = 0;
    hw = malloc(P->out_elems * 2);
    if (!hw) { rc = FB_ERR(FB_ENOMEM, "gemm_run: H"); goto out; }
    TRY_CU(fb_cu.MemcpyDtoH(hw, P->hout, P->out_elems * 2));
    for (size_t i = 0; i < P->out_elems; ++i) mism += hw[i] != fb_bf16_from_f32(gemm_companion[i]);
    for (size_t i = 0; i < nout; ++i) {
      size_t row = i / (size_t)f, n = i % (size_t)f;
      float gg = fb_bf16_to_f32(fb_bf16_from_f32(gemm_companion[row * P->N + n]));
      float uu = fb_bf16_to_f32(fb_bf16_from_f32(gemm_companion[row * P->N + f + n]));
      if (((uint16_t *)h)[i] != fb_bf16_from_f32(fbm_siluf(gg) * uu)) ++mism;
    }
  }
  double rel = den > 0 ? sqrt(num / den) : sqrt(num), relx = den > 0 ? sqrt(exc / den) : sqrt(exc);
  /* FP32 output: the error itself; BF16 output: what exceeds half a BF16 ulp of the reference (the rounding) */
  /* SwiGLU epilogues round H (or dA) to BF16 before their math, as the unfused path stores them: where the FP32 and
     the FP64 value round to neighbouring BF16 values (rare) the outputs differ by about a BF16 ulp, so against FP64
     they get 1e-3; the strict check is the bit-exact one against the CPU epilogue of the FP32 result (mism) */
  /* FP8 products (MXFP8 on FP8 wgmma / mma.sync, FB_KIND 2): the tensor core sums a k32 product narrower than FP32,
     so NUMERICS.md allows 1e-4 */
  /* block-scaled tcgen05 (MXFP8 or NVFP4 x NVFP4, kinds 2 and 4): the hardware's own sum inside the instruction, 1e-4 too */
  int fail = nonfinite || !((cfg.out_bf16 ? relx : rel) <= (cfg.swiglu ? 1e-3 : cfg.kind == 2 || cfg.kind == 4 ? 1e-4 : 1e-5));
  fprintf(log, "  %-58s %-9s rel %.2e  max|d| %.2e  unwritten/NaN %ld", v->name, gemm_dist_name[P->dist], rel, worst, nonfinite);
  if (cfg.out_bf16) fprintf(log, "  beyond rounding %.2e  >1ulp %ld  !=RNE(ref) %ld", relx, off_ulp, not_rne);
  if (mism >= 0) fprintf(log, "  vs CPU %s of the FP32 GEMM: %ld differ", cfg.swiglu == 2 ? "SwiGLU bwd" : "SwiGLU", mism);
  if (mism > 0) fail = 1;
  fprintf(log, "  %s\n", fail ? "FAIL" : "ok");
  *fail_out = fail;
out:
  free(q), free(qr), free(e), free(er), free(y), free(h), free(hw);
  return rc;
}

fb_status gemm_bcopy_check(const fb_kernel_spec *k, const fb_variant *v, const fb_kernel *kern, long long rows, long long K, FILE *log,
                           int *fail) {
  fb_status rc = FB_OK;
  int src = k->q.format == FB_FMT_NVFP4 ? 1 : 2;
  size_t n = (size_t)(rows * K), cb = src == 1 ? n / 2 : n, sb = src == 1 ? n / 16 : n / 32;
  CUdeviceptr dc = 0, ds = 0, dout = 0;
  uint8_t *c = malloc(cb), *sc = malloc(sb);
  uint16_t *ref = malloc(n * 2), *got = malloc(n * 2);
  *fail = 1;
  if (!c || !sc || !ref || !got) { rc = FB_ERR(FB_ENOMEM, "gemm_bcopy_check: %lld x %lld", rows, K); goto out; }
  for (size_t i = 0; i < cb; ++i) c[i] = (uint8_t)rnd();
  for (size_t i = 0; i < sb; ++i) sc[i] = (uint8_t)(i % 5 ? 0x30 + rnd() % 40 : rnd()); /* mostly normal, some anything */
  if (src == 1) TRY(fb_gemm_weights_bf16_ref(c, sc, (size_t)rows, (size_t)K, ref));
  else TRY(fb_gemm_mxfp8_bf16_ref(c, sc, (size_t)rows, (size_t)K, ref));
  TRY(gemm_up(c, cb, &dc));
  TRY(gemm_up(sc, sb, &ds));
  TRY_CU(fb_cu.MemAlloc(&dout, n * 2));
  TRY_CU(fb_cu.MemsetD8(dout, 0xA5, n * 2));
  fb_kp_mem p;
  memset(&p, 0, sizeof p);
  p.in = dc, p.scales = ds, p.out = dout, p.rows = rows, p.cols = K;
  unsigned gx, gy, th;
  TRY(fb_launch_dims(k, v, rows, K, 0, &gx, &gy, &th));
  TRY(fb_kernel_launch(kern, gx, gy, th, &p, sizeof p));
  TRY_CU(fb_cu.CtxSynchronize());
  TRY_CU(fb_cu.MemcpyDtoH(got, dout, n * 2));
  long bad = 0;
  /* a NaN is any NaN: the hardware's product with a NaN scale or code carries its own payload */
  for (size_t i = 0; i < n; ++i) bad += got[i] != ref[i] && !((got[i] & 0x7FFF) > 0x7F80 && (ref[i] & 0x7FFF) > 0x7F80);
  fprintf(log, "  %-58s %lld x %lld  %ld of %zu differ  %s\n", v->name, rows, K, bad, n, bad ? "FAIL" : "ok");
  *fail = bad != 0;
out:
  if (dc) fb_cu.MemFree(dc);
  if (ds) fb_cu.MemFree(ds);
  if (dout) fb_cu.MemFree(dout);
  free(c), free(sc), free(ref), free(got);
  return rc;
}

/* Benchmark data at training-like magnitudes (outputs of order 1), so that epilogues with special-case paths (SwiGLU's
 * division when exp overflows, S2F6's scales) take the paths real activations take:
 * what 0: BF16 N(0, scale^2); 1: E4M3 codes of magnitude 2^-2..2^1 (E2M1 nibbles: any); 2: E4M3 block scales 0.5..0.94;
 * 3: E8M0 scales 2^-1..2^1; 4: FP32 1.0 */
fb_status gemm_fill_random(CUdeviceptr p, size_t n, int what, float scale) {
  fb_status rc = FB_OK;
  size_t blk = 32u << 20;
  uint8_t *h = malloc(blk);
  if (!h) return FB_ERR(FB_ENOMEM, "gemm_fill_random: %zu bytes", blk);
  for (size_t i = 0; i < blk; i += 2) {
    uint64_t r = rnd();
    if (what == 0) { uint16_t v = fb_bf16_from_f32(gauss() * scale); memcpy(h + i, &v, 2); }
    else if (what == 1) h[i] = (uint8_t)((r & 0x80) | (0x28 + (r >> 8) % 0x20)), h[i + 1] = (uint8_t)(((r >> 16) & 0x80) | (0x28 + (r >> 24) % 0x20));
    else if (what == 2) h[i] = h[i + 1] = (uint8_t)(0x30 + (r & 7));
    else if (what == 3) h[i] = h[i + 1] = (uint8_t)(126 + (r % 3));
    else { float one = 1.0f; memcpy(h + (i & ~(size_t)3), &one, 4); }
  }
  for (size_t o = 0; o < n; o += blk) TRY_CU(fb_cu.MemcpyHtoD(p + o, h, n - o < blk ? n - o : blk));
out:
  free(h);
  return rc;
}

fb_status gemm_balloc(size_t n, CUdeviceptr *p) {
  *p = 0;
  CU_CHECK(fb_cu.MemAlloc(p, n ? n : 16));
  return FB_OK;
}

int gemm_cmpf(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* median ms of 10 launches after 3 warm-ups */
fb_status gemm_time(const fb_kernel *k, const fb_gemm_cfg *c, const fb_kp_gemm *p, int sms, float *ms) {
  fb_status rc = FB_OK;
  CUevent a = NULL, b = NULL;
  TRY_CU(fb_cu.EventCreate(&a, 0));
  TRY_CU(fb_cu.EventCreate(&b, 0));
  float t[10];
  for (int i = 0; i < 3; ++i) TRY(fb_gemm_launch(k, c, p, sms));
  for (int i = 0; i < 10; ++i) {
    TRY_CU(fb_cu.EventRecord(a, NULL));
    TRY(fb_gemm_launch(k, c, p, sms));
    TRY_CU(fb_cu.EventRecord(b, NULL));
    TRY_CU(fb_cu.EventSynchronize(b));
    TRY_CU(fb_cu.EventElapsedTime(&t[i], a, b));
  }
  qsort(t, 10, sizeof t[0], gemm_cmpf);
  *ms = (t[4] + t[5]) / 2;
out:
  if (a) fb_cu.EventDestroy(a);
  if (b) fb_cu.EventDestroy(b);
  return rc;
}
