/* gemm_harness.h — the tuner's check of the GEMMs (tuner/check/gemm_harness.c), shared by the worker
 * (tuner/worker/worker.c) and tests/gpu/test_gemm.c. A CUDA or fourbit failure comes back as fb_status with its
 * message in fb_errmsg(); a check that runs and finds the output wrong sets *fail. */
#ifndef FB_CHECK_GEMM_HARNESS_H
#define FB_CHECK_GEMM_HARNESS_H
#include "fb_cuda.h"
#include "fb_gemm_host.h"
#include "fourbit.h"
#include "fb_kparams.h"
#include <stdint.h>
#include <stdio.h>

typedef struct {
  int kind, mode, tensor_outer, dist;
  int E, M, N, K;
  long long rows, off[9];
  /* device */
  CUdeviceptr a, b, a_sf, b_sf, a_outer, b_outer, offsets, out, h, osf, hout; /* hout: H written by w13's SwiGLU epilogue */
  uint16_t *hh; /* H for the SwiGLU backward: rows x 2N BF16 */
  size_t out_elems;
  double *ref; /* out_elems */
  float a_sdec, b_sdec; /* kind 1 with tensor_outer: the one S_dec of A and of B (neither 1) */
} gemm_problem;
extern const char *gemm_dist_name[]; /* by dist: "balanced", "skewed" */
/* The FP32 output of the last plain FP32 variant run (rows or wgrad; malloc'd, replacing the one before; NULL until
 * then): test_gemm compares pipelined main loops with it, and sets it to the companion's before a SwiGLU / S2F6 run,
 * whose epilogue outputs gemm_run compares with the CPU epilogue of it bit for bit. Free and clear it when the next
 * problem is not the same data. */
extern float *gemm_companion;

/* kind: 0 BF16, 1 NVFP4 (x BF16 copy), 2 MXFP8 x MXFP8, 3 MXFP8 (x BF16 copy), 4 NVFP4 x NVFP4 (B's codes, E4M3 scales
 * and per-expert S_dec: tcgen05); mode 0 rows grouped, 1 wgrad;
 * dist 0 balanced, 1 skewed (an empty expert). 4 experts, N 768, K (or M) 512. NVFP4 with tensor_outer: one S_dec for
 * A and one for B, uploaded as a row's / an expert's worth of floats whose entries past [0] are NaN (a kernel that
 * indexes them per row or per expert writes NaN). */
fb_status gemm_make_problem(gemm_problem *P, int kind, int mode, int tensor_outer, int dist); /* P zeroed on failure */
void gemm_free_problem(gemm_problem *P);
/* One checked run of variant v on P (a line on log): *fail 0 pass (gemm_harness.c says what passes). */
fb_status gemm_run(const fb_kernel_spec *k, const fb_variant *v, const fb_kernel *kern, const gemm_problem *P, int sms, FILE *log,
                   int loose, int *fail);
/* The BF16 copy kernel (FB_OP_BCOPY) on rows x K random codes and scales, bit-exact (any NaN equals any NaN) against
 * fb_gemm_weights_bf16_ref / fb_gemm_mxfp8_bf16_ref (a line on log): *fail 0 pass. */
fb_status gemm_bcopy_check(const fb_kernel_spec *k, const fb_variant *v, const fb_kernel *kern, long long rows, long long K, FILE *log,
                           int *fail);
/* n bytes at training magnitudes. what 0: BF16 N(0, scale^2); 1: E4M3 codes 2^-2..2^1 (E2M1 nibbles: any);
 * 2: E4M3 block scales 0.5..0.94; 3: E8M0 2^-1..2^1; 4: FP32 1.0 */
fb_status gemm_fill_random(CUdeviceptr p, size_t n, int what, float scale);
/* n bytes of device memory (16 for n = 0) in *p: uninitialized (balloc), or h's bytes (up) */
fb_status gemm_balloc(size_t n, CUdeviceptr *p);
fb_status gemm_up(const void *h, size_t n, CUdeviceptr *p);
int gemm_cmpf(const void *a, const void *b);
/* *ms: the median of 10 launches after 3 warm-ups */
fb_status gemm_time(const fb_kernel *k, const fb_gemm_cfg *c, const fb_kp_gemm *p, int sms, float *ms);
#endif
