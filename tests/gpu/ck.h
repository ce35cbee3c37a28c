/* ck.h — the GPU test programs' exits (test_kernels.c, bench.c): CK(call) on an fb_status, CU(call) on a CUresult
 * print the failing call, where and why, and exit 1. Programs only: the library code they call (tuner/check/)
 * returns fb_status instead. */
#ifndef FB_GPU_CK_H
#define FB_GPU_CK_H
#include "fb_cuda.h"
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
    CUresult r_ = (call);                                                                                              \
    if (r_ != CUDA_SUCCESS) {                                                                                          \
      const char *m_ = "?";                                                                                            \
      fb_cu.GetErrorString(r_, &m_);                                                                                   \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, m_);                                               \
      exit(1);                                                                                                         \
    }                                                                                                                  \
  } while (0)
#endif
