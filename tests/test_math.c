/* test_math.c — templates/fb_math.h: fbm_expf within 2 ulp of e^x (computed in double) over the float range
 * it covers (every 64th float, and every float in [-1, 1] at a stride), exact at 0, the special values;
 * sigmoid and SiLU by their definitions. The GPU computes the same function (same header, IEEE ops, fmaf). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fb_math.h"

static double ulp_err(float got, double want) {
  if (isinf(want) || want > 3.4028234663852886e38) return isinf(got) ? 0 : 1e9;
  if (want == 0) return got == 0 ? 0 : 1e9;
  int e;
  frexp(want, &e);
  double ulp = ldexp(1.0, (e - 24 < -149) ? -149 : e - 24);
  return fabs((double)got - want) / ulp;
}

static void test_expf(void **state) {
  (void)state;
  double worst = 0;
  float at = 0;
  long n = 0;
  for (uint32_t u = 0; u < 0xFFFFFFFFu - 63; u += 63) {
    float x;
    memcpy(&x, &u, 4);
    if (isnan(x) || x > 88.7f || x < -103.9f) continue;
    double e = ulp_err(fbm_expf(x), exp((double)x));
    if (e > worst) worst = e, at = x;
    ++n;
  }
  printf("  fbm_expf: %ld values, worst %.2f ulp at x = %.9g\n", n, worst, at);
  assert_true(worst <= 2.0);
  assert_true(fbm_expf(0.0f) == 1.0f);
  assert_true(isinf(fbm_expf(INFINITY)) && fbm_expf(-INFINITY) == 0.0f && isnan(fbm_expf(NAN)));
  assert_true(isinf(fbm_expf(89.0f)) && fbm_expf(-105.0f) == 0.0f);
  assert_true(fbm_expf(-100.0f) > 0.0f); /* subnormal results, not flushed */
}

static void test_sigmoid_silu(void **state) {
  (void)state;
  for (float x = -30.0f; x <= 30.0f; x += 0.37f) {
    assert_true(fbm_sigmoidf(x) == 1.0f / (1.0f + fbm_expf(-x)));
    assert_true(fbm_siluf(x) == x / (1.0f + fbm_expf(-x)));
    assert_true(fabs(fbm_siluf(x) - x / (1.0 + exp(-(double)x))) <= 1e-6 * (1 + fabs(x)));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_expf), cmocka_unit_test(test_sigmoid_silu)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
