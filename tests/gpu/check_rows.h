/* check_rows.h — the PASS/FAIL table of the GPU train tests (test_train_gpu.c, test_train_dev.c): one row a check,
 * counted; CK exits 1 with the failing call and fb_errmsg(); relerr is the relative Frobenius error of a against b. Define CHECK_ROW_W1 / CHECK_ROW_W2 (the widths of the
 * check and measure columns) before including it. Header-only: each test is one translation unit. */
#ifndef FB_CHECK_ROWS_H
#define FB_CHECK_ROWS_H
#include "fourbit.h"
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

static int nrows, nfail;
static void row(const char *what, const char *measure, double got, double tol, int pass) {
  ++nrows;
  nfail += !pass;
  if (tol >= 0) printf("  %-*s %-*s %12.4g  <= %-8.3g %s\n", CHECK_ROW_W1, what, CHECK_ROW_W2, measure, got, tol, pass ? "PASS" : "FAIL");
  else printf("  %-*s %-*s %12.4g  %-11s %s\n", CHECK_ROW_W1, what, CHECK_ROW_W2, measure, got, "", pass ? "PASS" : "FAIL");
  fflush(stdout);
}

static double relerr(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    double d = (double)a[i] - (double)b[i];
    num += d * d, den += (double)b[i] * b[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

#define CK(call)                                                                                                       \
  do {                                                                                                                 \
    fb_status s_ = (call);                                                                                             \
    if (s_ != FB_OK) {                                                                                                 \
      printf("%s:%d: %s: %s\n", __FILE__, __LINE__, #call, fb_errmsg());                                               \
      exit(1);                                                                                                         \
    }                                                                                                                  \
  } while (0)
#endif
