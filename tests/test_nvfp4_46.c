/* test_nvfp4_46.c — the Four Over Six choice of quant_nvfp4.cuh's FB_NV46_APPROX path (fb_formats.h:
 * fbf_nvfp4_46_resid, fbf_nvfp4_46_decide) against NUMERICS.md's rule as the reference computes it (fbf_nvfp4_cand's
 * exact squared errors, checked against runtime/numerics.c by test_formats), on the CPU: every block where the decision
 * says "certain" must pick what the reference picks. Blocks: Gaussian BF16 values at many scales, values on the E2M1
 * lattice (exact ties between the candidates), near-constant blocks, and rows whose amax is the block's (the largest
 * scales). Also checks that the margin matters (without it the residuals pick wrongly on these inputs) and that
 * undecided blocks, which the kernel sends to the general path, stay rare on Gaussian data. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>

#include "fb_formats.h"

static uint64_t rng = 0x243F6A8885A308D3ull;
static uint64_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }
static double unif(void) { return ((rnd() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static float gauss(void) { return (float)(sqrt(-2 * log(unif())) * cos(6.283185307179586 * unif())); }
static float bf16(float x) { /* RN to BF16, finite inputs */
  unsigned u = fbf_f2u(x);
  return fbf_u2f((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u);
}

/* the margin-free choice, to show that the margin is what makes the decision exact */
static int decide_nomargin(float A4, float A6, float s4, float s6) { return A4 * s4 * s4 < A6 * s6 * s6; }

typedef struct { long blocks, decided, undecided, wrong, wrong_nomargin, ties; } tally;

static void one_block(const float x[16], float row_amax, tally *t) {
  const float s_enc = fbf_nvfp4_s_enc(row_amax, 1), s_dec = 1.0f / s_enc, k = s_enc * (1.0f / 6.0f);
  float ab = 0.0f, av[16];
  for (int j = 0; j < 16; ++j) ab = fmaxf(ab, av[j] = fabsf(x[j]));
  const float base = ab * k;
  const unsigned sf6 = fbf_e4m3_rn(fminf(base, 448.0f)), sf4 = fbf_e4m3_rn(fminf(1.5f * base, 448.0f));
  const float sf6v = fbf_e4m3_dec(sf6), sf4v = fbf_e4m3_dec(sf4);
  const float enc6 = fbf_nvfp4_enc(sf6v, s_dec), enc4 = fbf_nvfp4_enc(sf4v, s_dec);
  /* the kernel's conditions for this path: normal scales, every scaled magnitude below 7, s_dec in 2^-40 .. 2^40 */
  if (sf6 < 8u || !(ab * enc6 < 7.0f) || s_dec < ldexpf(1.0f, -40) || s_dec > ldexpf(1.0f, 40)) return;
  unsigned pk[2], r[4] = {0u, 0u, 0u, 0u};
  const float e6 = fbf_nvfp4_cand(av, sf6, s_dec, 0, r, pk), e4 = fbf_nvfp4_cand(av, sf4, s_dec, 0, r, pk);
  const int want = e4 < e6;
  float g[16];
  const float A6 = fbf_nvfp4_46_resid(x, enc6 * 0.015625f, g), A4 = fbf_nvfp4_46_resid(x, enc4 * 0.015625f, g);
  const int d = fbf_nvfp4_46_decide(A4, A6, sf4v * 64.0f, sf6v * 64.0f);
  ++t->blocks;
  t->ties += e4 == e6;
  t->wrong_nomargin += decide_nomargin(A4, A6, sf4v * 64.0f, sf6v * 64.0f) != want;
  if (d < 0) {
    ++t->undecided;
    return;
  }
  ++t->decided;
  if (d != want && t->wrong++ < 5)
    fprintf(stderr, "  wrong: E4 %.9g E6 %.9g (reference keeps sf%d), A4 %.9g A6 %.9g\n", e4, e6, want ? 4 : 6, A4, A6);
}

static void run(int kind, long n, tally *t) {
  for (long it = 0; it < n; ++it) {
    float x[16];
    const float scale = ldexpf(1.0f, (int)(rnd() % 61) - 30);
    for (int j = 0; j < 16; ++j) {
      float v = gauss();
      if (kind == 1) v = (float)((int)(rnd() % 13) - 6) * 0.5f;        /* the E2M1 lattice: exact candidates */
      if (kind == 2) v = 1.0f + (float)(rnd() % 5) / 64.0f;           /* nearly constant */
      x[j] = bf16(v * scale);
    }
    float ab = 0.0f;
    for (int j = 0; j < 16; ++j) ab = fmaxf(ab, fabsf(x[j]));
    /* the row amax: the block's own (largest scales) or up to 8 times more */
    const float row = kind == 3 ? ab : ab * (float)(1 + rnd() % 8);
    one_block(x, row, t);
  }
}

static void test_decide(void **state) {
  (void)state;
  static const char *names[] = {"gaussian", "lattice", "near-constant", "row amax = block amax"};
  static const long counts[] = {2000000, 400000, 200000, 400000};
  long wrong = 0, nomargin = 0;
  for (int kind = 0; kind < 4; ++kind) {
    tally t = {0, 0, 0, 0, 0, 0};
    run(kind, counts[kind], &t);
    printf("  %-22s blocks %8ld  decided %8ld  undecided %7ld (ties %ld)  wrong %ld  (without the margin: %ld wrong)\n",
           names[kind], t.blocks, t.decided, t.undecided, t.ties, t.wrong, t.wrong_nomargin);
    assert_true(t.blocks > counts[kind] / 2);
    wrong += t.wrong, nomargin += t.wrong_nomargin;
    if (kind == 0) assert_true(t.undecided * 1000 < t.blocks); /* the general path stays rare on Gaussian data */
  }
  assert_int_equal(wrong, 0);
  assert_true(nomargin > 0); /* the inputs reach the cases where the residuals alone would choose wrongly */
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_decide)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
