/* f32tool.c — test helper for tests/test_cli.sh (not shipped):
 *   f32tool gen DIST R C SEED OUT   write R x C float32: DIST = gauss | t3 | edge
 *   f32tool cmp A B                 print "rmse maxabs bias" of B - A over A's finite values
 *   f32tool eq A B                  exit 0 iff the files hold the same float32 values (NaN == NaN)
 * Its generator is a seeded xorshift with Box-Muller, independent of the library under test. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t st;
static double unif(void) {
  st ^= st << 13; st ^= st >> 7; st ^= st << 17;
  return ((st >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static double gauss(void) { return sqrt(-2 * log(unif())) * cos(6.283185307179586 * unif()); }

static float *load(const char *p, size_t *n) {
  FILE *f = fopen(p, "rb");
  if (!f) { perror(p); exit(2); }
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  float *v = malloc(sz ? sz : 1);
  if (fread(v, 1, sz, f) != (size_t)sz) { perror(p); exit(2); }
  fclose(f);
  *n = sz / 4;
  return v;
}

int main(int argc, char **argv) {
  if (argc == 7 && !strcmp(argv[1], "gen")) {
    size_t r = strtoull(argv[3], 0, 10), c = strtoull(argv[4], 0, 10), n = r * c;
    st = strtoull(argv[5], 0, 10) * 0x9E3779B97F4A7C15ull + 1;
    float *v = malloc(n * 4);
    for (size_t i = 0; i < n; ++i) {
      if (!strcmp(argv[2], "gauss")) v[i] = (float)gauss();
      else if (!strcmp(argv[2], "t3")) { double z = gauss(), c2 = 0; for (int k = 0; k < 3; ++k) { double g = gauss(); c2 += g * g; } v[i] = (float)(z / sqrt(c2 / 3)); }
      else { static const float e[] = {0.f, -0.f, 1e-40f, -3e-39f, 448.f, -6.f, 1e30f, -1e-30f, 0.25f, 5.f}; v[i] = (i % 7 == 0) ? e[(i / 7) % 10] : (float)gauss(); }
    }
    FILE *f = fopen(argv[6], "wb");
    if (!f || fwrite(v, 4, n, f) != n) { perror(argv[6]); return 2; }
    fclose(f);
    return 0;
  }
  if (argc == 4 && (!strcmp(argv[1], "cmp") || !strcmp(argv[1], "eq"))) {
    size_t na, nb;
    float *a = load(argv[2], &na), *b = load(argv[3], &nb);
    if (na != nb) { fprintf(stderr, "sizes differ: %zu vs %zu values\n", na, nb); return 1; }
    if (!strcmp(argv[1], "eq")) {
      for (size_t i = 0; i < na; ++i)
        if (!(a[i] == b[i] || (isnan(a[i]) && isnan(b[i])))) { fprintf(stderr, "value %zu: %g vs %g\n", i, a[i], b[i]); return 1; }
      return 0;
    }
    double se = 0, bias = 0, mx = 0; size_t m = 0;
    for (size_t i = 0; i < na; ++i) {
      if (!isfinite(a[i])) continue;
      double d = (double)b[i] - a[i];
      se += d * d; bias += d; if (fabs(d) > mx) mx = fabs(d); ++m;
    }
    printf("%.6g %.6g %.6g\n", sqrt(se / m), mx, bias / m);
    return 0;
  }
  fprintf(stderr, "usage: f32tool gen gauss|t3|edge R C SEED OUT | cmp A B | eq A B\n");
  return 2;
}
