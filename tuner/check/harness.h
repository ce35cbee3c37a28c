/* harness.h — shared by the GPU test (test_kernels.c) and the benchmark (bench.c): the kernel specs under
 * test, parallel NVRTC compiles, and one checked run of a kernel against the CPU reference. */
#ifndef FB_GPU_HARNESS_H
#define FB_GPU_HARNESS_H
#include "fb_cuda.h"
#include "fourbit.h"
#include "fb_kparams.h"
#include <stdint.h>
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

enum { CASE_GAUSS, CASE_WIDE, CASE_EDGE, NCASES };
extern const char *case_name[];

/* ---- specs under test ---- */
typedef struct {
  fb_kernel_spec k;
  const char *family;
  int shape; /* 0: 256 x 1024; 1: 77 x 320 (row kernels: odd rows, a partial last CTA) */
} tspec;

typedef struct {
  const tspec *t;
  fb_variant v;
  char *src;
  fb_cubin cubin;
  fb_status st;
  char err[4096];
} unit;

extern int nspecs, nunits;
extern tspec specs[128];
extern unit *units;
extern fb_kernel amax_kernel[3]; /* by mode (tensor, row, group): the NVFP4 quantizers' amax pass */

uint64_t rnd(void);
void build_specs(void);
void *compile_worker(void *arg); /* compiles units[] until none is left */
void make_input(int kind, long long rows, long long cols, float *x);
/* One run of unit u (loaded as kern) on fresh inputs of the kind, R x C: returns wrong elements. */
long run_case(const unit *u, const fb_kernel *kern, int kind, unsigned seed, long long R, long long C);
#endif
