/* harness.h — the tuner's check of the memory-bound kernels (tuner/check/harness.c): the kernel specs under test,
 * parallel NVRTC compiles, and one checked run of a kernel against the CPU reference. Shared by the tuner's worker
 * (tuner/worker/worker.c), the GPU test (tests/gpu/test_kernels.c), the benchmark (tests/gpu/bench.c) and the warp
 * emulator's driver (tests/emu/driver.cpp). Failures come back as fb_status, the message in fb_errmsg(). */
#ifndef FB_CHECK_HARNESS_H
#define FB_CHECK_HARNESS_H
#include "fb_cuda.h"
#include "fourbit.h"
#include "fb_kparams.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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
/* One run of unit u (loaded as kern) on fresh inputs of the kind, R x C: *wrong = the elements that differ from the
 * reference (0: it passed; the first few are printed on stderr). A CUDA or fourbit failure is returned with its
 * message and the case's buffers freed; after a CUDA fault the context is lost, and the caller ends the process. */
fb_status run_case(const unit *u, const fb_kernel *kern, int kind, unsigned seed, long long R, long long C, long *wrong);
#endif
