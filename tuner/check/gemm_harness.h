/* gemm_harness.h — the GEMM checks shared by tests/gpu/test_gemm.c and the tuner's worker (tuner/worker/worker.c):
 * see gemm_harness.c. Exits (status 1, a message on stderr) on a CUDA or fourbit error, as the GPU tests do. */
#ifndef FB_GPU_GEMM_HARNESS_H
#define FB_GPU_GEMM_HARNESS_H
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
/* The FP32 output of the last plain FP32 rows-mode variant run with 128 x 256 tiles and 2 consumers (malloc'd; NULL
 * until then): the companion the SwiGLU and S2F6 epilogues are compared with bit for bit. Free and clear it when
 * the next problem is not the same data. */
extern float *gemm_companion;

/* kind: 0 BF16, 1 NVFP4 (x BF16 copy), 2 MXFP8 x MXFP8, 3 MXFP8 (x BF16 copy); mode 0 rows grouped, 1 wgrad;
 * dist 0 balanced, 1 skewed (an empty expert). 4 experts, N 768, K (or M) 512. NVFP4 with tensor_outer: one S_dec for
 * A and one for B, uploaded as a row's / an expert's worth of floats whose entries past [0] are NaN (a kernel that
 * indexes them per row or per expert writes NaN). */
void gemm_make_problem(gemm_problem *P, int kind, int mode, int tensor_outer, int dist);
void gemm_free_problem(gemm_problem *P);
int gemm_run(const fb_kernel_spec *k, const fb_variant *v, const fb_kernel *kern, const gemm_problem *P, int sms, FILE *log, int loose);
/* The BF16 copy kernel (FB_OP_BCOPY) on rows x K random codes and scales, bit-exact (any NaN equals any NaN) against
 * fb_gemm_weights_bf16_ref / fb_gemm_mxfp8_bf16_ref (a line on log): 0 pass. */
int gemm_bcopy_check(const fb_kernel_spec *k, const fb_variant *v, const fb_kernel *kern, long long rows, long long K, FILE *log);
/* n bytes at training magnitudes. what 0: BF16 N(0, scale^2); 1: E4M3 codes 2^-2..2^1 (E2M1 nibbles: any);
 * 2: E4M3 block scales 0.5..0.94; 3: E8M0 2^-1..2^1; 4: FP32 1.0 */
void gemm_fill_random(CUdeviceptr p, size_t n, int what, float scale);
CUdeviceptr gemm_balloc(size_t n);
CUdeviceptr gemm_up(const void *h, size_t n);
int gemm_cmpf(const void *a, const void *b);
/* median ms of 10 launches after 3 warm-ups */
float gemm_time(const fb_kernel *k, const fb_gemm_cfg *c, const fb_kp_gemm *p, int sms);
#endif
