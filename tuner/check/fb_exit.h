/* fb_exit.h — the exits of the programs that use the check harness (the tuner's worker, test_kernels.c, bench.c):
 * CK(call) on an fb_status, CU(call) on a CUresult print the failing call, where and why, and exit 1. Programs only:
 * the library code they call (tuner/check/) returns fb_status instead. */
#ifndef FB_EXIT_H
#define FB_EXIT_H
#include "fb_cuda.h"
#include "fb_error.h"
#include "fourbit.h"
#include <stdio.h>
#include <stdlib.h>

#define CK(call)                                                                                                       \
  do {                                                                                                                 \
    fb_status s_ = (call);                                                                                             \
    if (s_ != FB_OK) {                                                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, fb_errmsg());                                      \
      exit(1);                                                                                                         \
    }                                                                                                                  \
  } while (0)
#define CU(call)                                                                                                       \
  do {                                                                                                                 \
    int r_ = (int)(call);                                                                                              \
    if (r_ != 0) {                                                                                                     \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, fb_cu_errstr(r_));                                \
      exit(1);                                                                                                         \
    }                                                                                                                  \
  } while (0)
#endif
