/* fb_cublas.h — the dense GEMMs of the GPU-resident train step through cuBLAS, loaded with dlopen at first use
 * (libcublas.so.13, else libcublas.so.12: no link-time dependency, as base/cuda_driver.c does libcuda).
 * Row-major operands in BF16, FP32 output and accumulation (cublasGemmEx: CUDA_R_16BF in, CUDA_R_32F out,
 * CUBLAS_COMPUTE_32F), on the default stream (the generated kernels' stream). cuBLAS is run-to-run deterministic on
 * one GPU with a fixed configuration (no atomics unless asked for; we never ask).
 * Entry points: fb_blas_create(), fb_blas_free(), fb_blas_gemm(), fb_blas_name(). */
#ifndef FB_CUBLAS_H
#define FB_CUBLAS_H
#include "fourbit/base.h"

typedef struct fb_blas fb_blas;
/* Loads the library (once) and makes a handle on the current CUDA context. */
fb_status fb_blas_create(fb_blas **out);
void fb_blas_free(fb_blas *b);
/* The library that was loaded ("libcublas.so.13"), "" before. */
const char *fb_blas_name(void);
/* Row-major C (M x N, ldc; FP32) = op(A) op(B) (acc 0) or C + op(A) op(B) (acc 1), op(A) M x K, op(B) K x N, BF16
 * device matrices; ta / tb: A / B stored transposed (A as K x M, B as N x K). */
fb_status fb_blas_gemm(fb_blas *b, int ta, int tb, int M, int N, int K, unsigned long long A, int lda,
                       unsigned long long B, int ldb, unsigned long long C, int ldc, int acc);
#endif
