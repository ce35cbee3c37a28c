/* test_formats.c — the fast encoders of templates/fb_formats.h (what generated kernels use) against the
 * reference library (runtime/numerics.c), on the CPU: every float bit pattern at a stride, every value
 * near each format's grid, all 256 SR bytes on many values, and every code of every decoder. The GPU
 * tests then check whole kernels; on sm_89+ E4M3 RN is the cvt instruction, checked there.
 *   test_formats               what make test runs: the E2M1 RN grid sweep over every 61st non-negative float
 *                              pattern and every one near its decision points, binade edges and NaN/Inf (~2 s)
 *   test_formats --exhaustive  the same tests with that sweep over all 2^31 patterns (~75 s; make test-exhaustive) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fb_formats.h"
#include "fb_philox.h"
#include "fourbit.h"

#include <stdlib.h>

static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 16); }

static long checked, wrong;
static void check(const char *what, uint32_t in, unsigned got, unsigned want) {
  ++checked;
  if (got != want && wrong++ < 10) fprintf(stderr, "  %s: input 0x%08x (%g): fast 0x%02x, reference 0x%02x\n", what, in, u2f(in), got, want);
}

/* values worth a look: every bit pattern at a stride, and dense runs near each grid value */
static void sweep(void (*f)(uint32_t)) {
  for (uint64_t u = 0; u < (1ull << 32); u += 257) f((uint32_t)u);
  static const float grid[] = {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 5.0f, 6.0f, 8.0f,
                               448.0f, 464.0f, 480.0f, 0.015625f, 0.001953125f, 57344.0f, 1.1663e-38f, 3.3762e38f};
  for (size_t g = 0; g < sizeof grid / sizeof grid[0]; ++g)
    for (int d = -2000; d <= 2000; ++d) {
      uint32_t b = f2u(grid[g]) + (uint32_t)d;
      f(b), f(b | 0x80000000u);
    }
  for (int e = 0; e < 255; ++e) /* around every power of two */
    for (int d = -64; d <= 64; ++d) f(((uint32_t)e << 23) + (uint32_t)d);
  for (int i = 0; i < 2000000; ++i) f(rnd());
}

static void e2m1_rn(uint32_t u) { check("e2m1 rn", u, fbf_e2m1_rn(u2f(u)), fb_e2m1_encode_rn(u2f(u))); }
static void e4m3_rn(uint32_t u) { check("e4m3 rn", u, fbf_e4m3_rn(u2f(u)), fb_e4m3_encode_rn(u2f(u))); }
static void e8m0_up(uint32_t u) { check("e8m0 up", u, fbf_e8m0_up(u2f(u)), fb_e8m0_encode_up(u2f(u))); }
static void s2f6_exp(uint32_t u) {
  float a = fabsf(u2f(u));
  check("s2f6 exp", f2u(a), fbf_s2f6_exp(a), fb_s2f6_block_exp(a));
}
static void e2m1_sr(uint32_t u) {
  unsigned r = rnd() & 255;
  check("e2m1 sr", u, fbf_e2m1_sr(u2f(u), r), fb_e2m1_encode_sr(u2f(u), (uint8_t)r));
}
static void e4m3_sr(uint32_t u) {
  unsigned r = rnd() & 255;
  check("e4m3 sr", u, fbf_e4m3_sr(u2f(u), r), fb_e4m3_encode_sr(u2f(u), (uint8_t)r));
  check("e4m3 sr fast", u, fbf_e4m3_sr_fast(u2f(u), r), fb_e4m3_encode_sr(u2f(u), (uint8_t)r));
  unsigned pair = fbf_e4m3x2_sr(u2f(u), u2f(u ^ 0x80000000u), r, 255 - r);
  check("e4m3x2 sr lo", u, pair & 255, fb_e4m3_encode_sr(u2f(u), (uint8_t)r));
  check("e4m3x2 sr hi", u, pair >> 8, fb_e4m3_encode_sr(u2f(u ^ 0x80000000u), (uint8_t)(255 - r)));
}

static void run(const char *name, void (*f)(uint32_t)) {
  checked = wrong = 0;
  sweep(f);
  printf("  %-9s %ld values, %ld wrong\n", name, checked, wrong);
  assert_int_equal(wrong, 0);
}

static void test_encoders(void **state) {
  (void)state;
  run("e2m1 rn", e2m1_rn);
  run("e4m3 rn", e4m3_rn);
  run("e8m0 up", e8m0_up);
  run("s2f6 exp", s2f6_exp);
  run("e2m1 sr", e2m1_sr);
  run("e4m3 sr", e4m3_sr);
}

/* every SR byte on values between grid points */
static void test_sr_all_bytes(void **state) {
  (void)state;
  checked = wrong = 0;
  for (int i = 0; i < 20000; ++i) {
    float x = u2f((rnd() & 0x807FFFFFu) | ((uint32_t)(110 + rnd() % 30) << 23)); /* 2^-17 .. 2^12 */
    for (unsigned r = 0; r < 256; ++r) {
      check("e2m1 sr", f2u(x), fbf_e2m1_sr(x, r), fb_e2m1_encode_sr(x, (uint8_t)r));
      check("e4m3 sr", f2u(x), fbf_e4m3_sr(x, r), fb_e4m3_encode_sr(x, (uint8_t)r));
      check("e4m3 sr fast", f2u(x), fbf_e4m3_sr_fast(x, r), fb_e4m3_encode_sr(x, (uint8_t)r));
    }
  }
  printf("  sr bytes  %ld values, %ld wrong\n", checked, wrong);
  assert_int_equal(wrong, 0);
}

/* The whole-block SR path (fbf_e4m3x4_srz) against the reference on the scaled values, as the MXFP8 quantizers use
 * it: blocks of every scale the path takes (e <= FBF_SRZ_EMAX), with zeros, signed zeros, values far below the
 * block amax (E4M3 subnormals and products below fp32's normal range), and the amax itself; every SR byte on some. */
static void test_sr_block_path(void **state) {
  (void)state;
  checked = wrong = 0;
  for (int blk = 0; blk < 400000; ++blk) {
    float x[32], a = 0.0f;
    int top = (int)(rnd() % 300) - 150; /* the block's magnitude: 2^-150 .. 2^150 */
    for (int j = 0; j < 32; ++j) {
      uint32_t u = rnd();
      int sp = (int)(rnd() % (blk & 1 ? 40 : 8)); /* spread below the top */
      float v = ldexpf(1.0f + (float)(u & 0xFFFFF) / 1048576.0f, top - sp);
      if (u % 23 == 0) v = 0.0f;
      if (u % 29 == 0) v = ldexpf((float)(u >> 8), top - 40); /* many bits far below */
      x[j] = (u >> 31) ? -v : v;
      a = fbf_absmax_nan(a, x[j]);
    }
    unsigned e = fbf_e8m0_up(a * (1.0f / 448.0f));
    if (e > FBF_SRZ_EMAX) continue;
    float inv = fbf_pow2(127 - (int)e), s = fbf_srz_scale(e);
    if (e >= 30) /* values whose scaled bits 0..11 are all ones with more below: rounding to nearest would carry */
      for (int j = 3; j < 32; j += 7) x[j] = ldexpf((float)((rnd() & 0x1FF000u) | 0xFFFu) + 0.75f, (int)e - 156);
    int all = blk % 1000 == 0;
    for (int k = 0; k < 8; ++k) {
      for (unsigned rep = 0; rep < (all ? 64u : 1u); ++rep) {
        uint32_t rw = all ? rep * 0x04040404u + (uint32_t)k * 0x01010101u : rnd();
        uint32_t got = fbf_e4m3x4_srz(x[4 * k], x[4 * k + 1], x[4 * k + 2], x[4 * k + 3], s, rw);
        for (int j = 0; j < 4; ++j)
          check("e4m3 sr block", f2u(x[4 * k + j]), (got >> (8 * j)) & 255u,
                fb_e4m3_encode_sr(x[4 * k + j] * inv, (uint8_t)(rw >> (8 * j))));
      }
    }
  }
  for (uint32_t i = 0; i < 4000000; ++i) { /* amax with NaN: any NaN stays, order-independent up to which NaN */
    float a = u2f(rnd()), v = u2f(rnd()), r = fbf_absmax_nan(a, v);
    int want_nan = isnan(a) || isnan(v);
    assert_true(want_nan ? isnan(r) : f2u(r) == f2u(fmaxf(a, fabsf(v))));
  }
  printf("  sr block  %ld values, %ld wrong\n", checked, wrong);
  assert_int_equal(wrong, 0);
}

/* NVFP4 dequantization through f16 pairs (fbf_nvfp4_deq8, what the requantizer uses) against the reference's
 * (e2m1 * sf) * S_dec: every code with every scale byte, S_dec over the float range (denormal, huge, negative). */
static void test_nvfp4_deq(void **state) {
  (void)state;
  checked = wrong = 0;
  for (int it = 0; it < 200000; ++it) {
    unsigned sfc = it < 256 * 64 ? (unsigned)it % 256 : rnd() & 255;
    uint32_t w = rnd();
    float sd = it % 7 == 0 ? u2f(rnd()) : ldexpf(1.0f + (float)(rnd() & 0xFFFF) / 65536.0f, (int)(rnd() % 40) - 30);
    float x[8];
    fbf_nvfp4_deq8(w, fbf_nvfp4_sfh2(sfc), sd, x);
    for (int j = 0; j < 8; ++j) {
      float want = (fb_e2m1_decode((uint8_t)((w >> (4 * j)) & 15u)) * fb_e4m3_decode((uint8_t)sfc)) * sd;
      ++checked;
      if (f2u(x[j]) != f2u(want) && !(isnan(x[j]) && isnan(want)) && wrong++ < 10)
        fprintf(stderr, "  nvfp4 deq: code %u sf 0x%02x sd %g: 0x%08x, reference 0x%08x\n", (w >> (4 * j)) & 15u, sfc, sd,
                f2u(x[j]), f2u(want));
    }
  }
  for (uint32_t h = 0; h < 65536; ++h) { /* the software f16 conversions both ways */
    float f = fbf_h2f_sw(h);
    if (!isnan(f)) assert_int_equal(fbf_f2h_rn_sw(f), h);
  }
  printf("  nvfp4 deq %ld values, %ld wrong\n", checked, wrong);
  assert_int_equal(wrong, 0);
}

static void test_decoders_and_scales(void **state) {
  (void)state;
  for (unsigned c = 0; c < 256; ++c) {
    float a = fbf_e4m3_dec(c), b = fb_e4m3_decode((uint8_t)c);
    assert_true(f2u(a) == f2u(b) || (isnan(a) && isnan(b)));
    a = fbf_e8m0_dec(c), b = fb_e8m0_decode((uint8_t)c);
    assert_true(f2u(a) == f2u(b) || (isnan(a) && isnan(b)));
    if (c < 16) assert_int_equal(f2u(fbf_e2m1_dec(c)), f2u(fb_e2m1_decode((uint8_t)c)));
  }
  for (int e = -149; e <= 127; ++e) assert_true(fbf_pow2(e) == ldexpf(1.0f, e));
  for (int i = 0; i < 1000000; ++i) {
    float a = fabsf(u2f(rnd()));
    for (int fos = 0; fos < 2; ++fos) {
      float x = fbf_nvfp4_s_enc(a, fos), y = fb_nvfp4_s_enc(a, fos);
      assert_true(f2u(x) == f2u(y) || (isnan(x) && isnan(y)));
    }
  }
}

/* The NVFP4 block path of templates/quant_nvfp4.cuh, run on the host with the same fb_formats.h functions,
 * against fb_nvfp4_quantize: per-tensor and per-row outer scales, 4/6 on and off, RN and SR. */
static void emulate_nvfp4(const float *x, size_t R, size_t C, int row_outer, int fos, int sr, uint8_t *codes,
                          uint8_t *sf, float *sdec) {
  size_t ng = row_outer ? R : 1;
  for (size_t g = 0; g < ng; ++g) {
    size_t lo = row_outer ? g : 0, hi = row_outer ? g + 1 : R;
    float A = 0.0f;
    for (size_t i = lo * C; i < hi * C; ++i) A = fmaxf(A, fabsf(x[i]));
    float s_enc = fbf_nvfp4_s_enc(A, fos), s_dec = 1.0f / s_enc, k = s_enc * (1.0f / 6.0f);
    sdec[g] = s_dec;
    for (size_t i0 = lo * C; i0 < hi * C; i0 += 16) {
      float av[16], ab = 0.0f;
      unsigned p6[2], p4[2], sg[2];
      for (int j = 0; j < 16; ++j) av[j] = fabsf(x[i0 + j]), ab = fmaxf(ab, av[j]);
      unsigned r[4] = {0, 0, 0, 0};
      if (sr) {
        fb_u32 ctr[4] = {5u, (fb_u32)(i0 >> 4), 0u, 0u}, key[2] = {11u, 3u};
        fb_philox4x32_10(ctr, key, r);
      }
      float base = ab * k;
      unsigned sfc = fbf_e4m3_rn(fminf(base, 448.0f));
      float e6 = 0.0f;
      if (fos) e6 = fbf_nvfp4_cand(av, sfc, s_dec, sr, r, p6);
      else fbf_nvfp4_codes(av, sfc, s_dec, sr, r, p6);
      const unsigned *pk = p6;
      if (fos) {
        unsigned sf4 = fbf_e4m3_rn(fminf(1.5f * base, 448.0f));
        float e4 = fbf_nvfp4_cand(av, sf4, s_dec, sr, r, p4);
        if (e4 < e6) sfc = sf4, pk = p4;
      }
      fbf_nvfp4_signs(x + i0, sg);
      uint32_t w0 = pk[0] | (sfc ? sg[0] : 0u), w1 = pk[1] | (sfc ? sg[1] : 0u);
      memcpy(codes + i0 / 2, &w0, 4);
      memcpy(codes + i0 / 2 + 4, &w1, 4);
      sf[i0 / 16] = (uint8_t)sfc;
    }
  }
}

static void test_nvfp4_block_path(void **state) {
  (void)state;
  const size_t R = 64, C = 512, n = R * C;
  float *x = malloc(n * 4), *d1 = malloc(R * 4), *d2 = malloc(R * 4);
  uint8_t *c1 = malloc(n / 2), *c2 = malloc(n / 2), *s1 = malloc(n / 16), *s2 = malloc(n / 16);
  long blocks = 0;
  for (int trial = 0; trial < 24; ++trial) {
    for (size_t i = 0; i < n; ++i) {
      uint32_t u = rnd();
      float v = ((float)(u % 20001) - 10000.0f) / 3000.0f;
      if (trial % 3 == 1) v *= ldexpf(1.0f, (int)(rnd() % 60) - 30);
      if (trial % 3 == 2 && u % 11 == 0) v = (float[]){0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1e-40f, 448.0f, 3e38f}[rnd() % 8];
      x[i] = v;
    }
    int row = trial & 1, fos = (trial >> 1) & 1, sr = (trial >> 2) & 1;
    fb_nvfp4_opts o = {.outer = row ? FB_OUTER_ROW : FB_OUTER_TENSOR, .four_over_six = fos,
                       .rounding = sr ? FB_ROUND_SR : FB_ROUND_RN, .seed = 11, .stream = 3, .step = 5};
    assert_int_equal(fb_nvfp4_quantize(x, R, C, &o, c1, s1, d1, NULL), FB_OK);
    emulate_nvfp4(x, R, C, row, fos, sr, c2, s2, d2);
    checked = wrong = 0;
    for (size_t i = 0; i < n / 2; ++i) check("nvfp4 codes", (uint32_t)i, c2[i], c1[i]);
    for (size_t i = 0; i < n / 16; ++i) check("nvfp4 scales", (uint32_t)i, s2[i], s1[i]);
    for (size_t i = 0; i < (row ? R : 1); ++i) check("nvfp4 s_dec", (uint32_t)i, f2u(d2[i]) != f2u(d1[i]), 0);
    assert_int_equal(wrong, 0);
    blocks += (long)(n / 16);
  }
  printf("  nvfp4 block path: %ld blocks (tensor/row x 4/6 x RN/SR, plain, wide, edge values) bit-exact\n", blocks);
  free(x), free(d1), free(d2), free(c1), free(c2), free(s1), free(s2);
}


/* The select-free NVFP4 RN pieces of fb_formats.h. fbf_e2m1_rn_grid and fbf_e2m1_grid_code against
 * fbf_nvfp4_cand's per-element binade rule (and the reference E2M1 encoder), exhaustively over every
 * non-negative float and NaN pattern; fbf_e4m3_dec_cvt over every code; fbf_nvfp4_cand_rn / fbf_nvfp4_grid_rn
 * / fbf_nvfp4_cand_rn_codes / fbf_e2m1x8_pack / fbf_nvfp4_signs8 (inputs without NaN, as the kernel calls
 * them) against fbf_nvfp4_cand / fbf_nvfp4_codes / fbf_nvfp4_signs on random and edge blocks. */
static int exhaustive; /* --exhaustive */
static long grid_bad, grid_checked;
static void e2m1_grid_one(uint32_t u) {
  u &= 0x7FFFFFFFu;
  float a = u2f(u);
  int lo = a < 2.0f, mid = a < 4.0f;
  float step = lo ? 0.5f : (mid ? 1.0f : 2.0f), inv = lo ? 2.0f : (mid ? 1.0f : 0.5f), off = lo ? 0.0f : (mid ? 2.0f : 4.0f);
  float n = rintf(a * inv), want = fminf(n * step, 6.0f);
  unsigned wc = (unsigned)fminf(n + off, 7.0f);
  float g = fbf_e2m1_rn_grid(a);
  unsigned c = fbf_e2m1_grid_code(g);
  ++grid_checked;
  if ((f2u(g) != f2u(want) || c != wc || c != fb_e2m1_encode_rn(a)) && grid_bad++ < 10)
    fprintf(stderr, "  e2m1 grid: 0x%08x: %g code %u, want %g code %u\n", u, g, c, want, wc);
}

static void test_nvfp4_rn_fast(void **state) {
  (void)state;
  grid_bad = grid_checked = 0;
  if (exhaustive) {
    for (uint64_t u = 0; u <= 0x7FFFFFFFull; ++u) e2m1_grid_one((uint32_t)u);
    printf("  e2m1 rn grid/code: all 2^31 non-negative floats and NaNs, %ld wrong\n", grid_bad);
  } else {
    /* every 61st pattern (odd, so every low mantissa bit is hit), then every pattern within 2^14 ulps of each E2M1 grid
       value and rounding midpoint (the ties and the binade switches at 2 and 4 are here) and of 6, 7 and 8 (the clamp);
       the largest floats, Inf and every NaN; the first and last 2^10 of every binade (zero and subnormals among them) */
    for (uint64_t u = 0; u <= 0x7FFFFFFFull; u += 61) e2m1_grid_one((uint32_t)u);
    static const float pts[] = {0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f};
    for (size_t i = 0; i < sizeof pts / sizeof pts[0]; ++i)
      for (int d = -16384; d <= 16384; ++d) e2m1_grid_one(f2u(pts[i]) + (uint32_t)d);
    for (uint32_t u = 0x7F7FC000u; u <= 0x7FFFFFFFu; ++u) e2m1_grid_one(u); /* the largest 2^14 floats, Inf, every NaN */
    for (uint32_t e = 0; e < 256; ++e)
      for (uint32_t d = 0; d < 1024; ++d) e2m1_grid_one((e << 23) + d), e2m1_grid_one((e << 23) + 0x7FFC00u + d);
    printf("  e2m1 rn grid/code: %ld of the 2^31 non-negative floats and NaNs (a stride and every one near the decision "
           "points; --exhaustive: all), %ld wrong\n", grid_checked, grid_bad);
  }
  assert_int_equal(grid_bad, 0);
  for (unsigned c = 0; c < 256; ++c)
    if ((c & 0x7Fu) != 0x7Fu) assert_int_equal(f2u(fbf_e4m3_dec_cvt(c)), f2u(fbf_e4m3_dec(c)));
  static const float edge[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1e-40f, -1e-40f, 448.0f, 3e38f, -3e38f, 0.25f, 0.75f, 5.0f};
  long blocks = 0;
  checked = wrong = 0;
  for (int t = 0; t < 400000; ++t) {
    float x[16], av[16], ab = 0.0f;
    int kind = t % 4;
    for (int j = 0; j < 16; ++j) {
      uint32_t u = rnd();
      float v = ((float)(u % 20001) - 10000.0f) / 3000.0f;
      if (kind >= 1) v *= ldexpf(1.0f, (int)(rnd() % 80) - 40);
      if (kind == 2 && u % 5 == 0) v = edge[rnd() % 12];
      if (kind == 3) v = u2f(rnd()); /* any bit pattern but NaN */
      if (v != v) v = 1.0f;
      x[j] = v, av[j] = fabsf(v), ab = fmaxf(ab, av[j]);
    }
    float A = (t & 1) ? ab : fmaxf(ab, u2f(rnd() & 0x7F7FFFFFu)); /* the block's own row, or a larger tensor amax */
    int fos = (t >> 1) & 1;
    float s_enc = fbf_nvfp4_s_enc(A, fos), s_dec = 1.0f / s_enc, base = ab * (s_enc * (1.0f / 6.0f));
    unsigned cands[2] = {fbf_e4m3_rn(fminf(base, 448.0f)), fbf_e4m3_rn(fminf(1.5f * base, 448.0f))};
    unsigned r[4] = {0, 0, 0, 0}, sg[2];
    fbf_nvfp4_signs(x, sg);
    for (int ci = 0; ci < 2; ++ci) {
      unsigned sfc = cands[ci], pk[2], pk2[2];
      float g[16], g2[16];
      float e_ref = fbf_nvfp4_cand(av, sfc, s_dec, 0, r, pk);
      float e = fbf_nvfp4_cand_rn(x, fbf_e4m3_dec_cvt(sfc), s_dec, g);
      fbf_nvfp4_grid_rn(x, fbf_e4m3_dec_cvt(sfc), s_dec, g2);
      fbf_nvfp4_codes(av, sfc, s_dec, 0, r, pk2);
      unsigned w0 = sfc ? fbf_e2m1x8_pack(g, x) : 0u, w1 = sfc ? fbf_e2m1x8_pack(g + 8, x + 8) : 0u;
      unsigned v0 = sfc ? fbf_e2m1x8_pack(g2, x) : 0u, v1 = sfc ? fbf_e2m1x8_pack(g2 + 8, x + 8) : 0u;
      unsigned pc[2];
      float ec = fbf_nvfp4_cand_rn_codes(x, fbf_e4m3_dec_cvt(sfc), s_dec, pc);
      check("nvfp4 rn err", (uint32_t)t, f2u(e) != f2u(e_ref) && !(e != e && e_ref != e_ref), 0);
      check("nvfp4 rn codes err", (uint32_t)t, f2u(ec) != f2u(e_ref) && !(ec != ec && e_ref != e_ref), 0);
      check("nvfp4 rn codes+signs lo", (uint32_t)t, sfc ? pc[0] + fbf_nvfp4_signs8(x) : 0u, pk[0] | (sfc ? sg[0] : 0u));
      check("nvfp4 rn codes+signs hi", (uint32_t)t, sfc ? pc[1] + fbf_nvfp4_signs8(x + 8) : 0u, pk[1] | (sfc ? sg[1] : 0u));
      check("nvfp4 signs8 lo", (uint32_t)t, fbf_nvfp4_signs8(x), sg[0]);
      check("nvfp4 signs8 hi", (uint32_t)t, fbf_nvfp4_signs8(x + 8), sg[1]);
      check("nvfp4 rn codes lo", (uint32_t)t, w0, pk[0] | (sfc ? sg[0] : 0u));
      check("nvfp4 rn codes hi", (uint32_t)t, w1, pk[1] | (sfc ? sg[1] : 0u));
      check("nvfp4 rn grid lo", (uint32_t)t, v0, pk2[0] | (sfc ? sg[0] : 0u));
      check("nvfp4 rn grid hi", (uint32_t)t, v1, pk2[1] | (sfc ? sg[1] : 0u));
      ++blocks;
    }
  }
  printf("  nvfp4 rn fast block path: %ld candidate blocks, %ld wrong\n", blocks, wrong);
  assert_int_equal(wrong, 0);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--exhaustive")) exhaustive = 1;
    else { fprintf(stderr, "usage: test_formats [--exhaustive]\n"); return 2; }
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_encoders), cmocka_unit_test(test_sr_all_bytes),
                                     cmocka_unit_test(test_sr_block_path),
                                     cmocka_unit_test(test_nvfp4_deq),
                                     cmocka_unit_test(test_decoders_and_scales), cmocka_unit_test(test_nvfp4_block_path),
                                     cmocka_unit_test(test_nvfp4_rn_fast)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
