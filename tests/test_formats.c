/* test_formats.c — the fast encoders of templates/fb_formats.h (what generated kernels use) against the
 * reference library (runtime/numerics.c), on the CPU: every float bit pattern at a stride, every value
 * near each format's grid, all 256 SR bytes on many values, and every code of every decoder. The GPU
 * tests then check whole kernels; on sm_89+ E4M3 RN is the cvt instruction, checked there. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fb_formats.h"
#include "fourbit.h"

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
    }
  }
  printf("  sr bytes  %ld values, %ld wrong\n", checked, wrong);
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

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_encoders), cmocka_unit_test(test_sr_all_bytes),
                                     cmocka_unit_test(test_decoders_and_scales)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
