/* model_gemm.c — the CPU path's GEMMs (model_internal.h): FP32 accumulation in increasing k, written so that
 * the compiler vectorizes across the output columns (each output element keeps its own serial sum, so the
 * result is the same bit for bit as the scalar loop). Also transposes and BF16 rounding helpers. */
#pragma GCC optimize("O3")
#include "fb_error.h"
#include "model_internal.h"

#include <stdlib.h>

void fbr_gemm_nn(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc, int acc) {
  for (int i = 0; i < M; ++i) {
    float *restrict c = C + (size_t)i * (size_t)ldc;
    const float *a = A + (size_t)i * (size_t)lda;
    if (!acc)
      for (int j = 0; j < N; ++j) c[j] = 0.0f;
    for (int k = 0; k < K; ++k) {
      const float av = a[k];
      const float *restrict b = B + (size_t)k * (size_t)ldb;
      for (int j = 0; j < N; ++j) c[j] = c[j] + av * b[j];
    }
  }
}

void fbr_transpose(const float *src, size_t rows, size_t cols, size_t lds, float *dst) {
  for (size_t i0 = 0; i0 < rows; i0 += 32)
    for (size_t j0 = 0; j0 < cols; j0 += 32)
      for (size_t i = i0; i < rows && i < i0 + 32; ++i)
        for (size_t j = j0; j < cols && j < j0 + 32; ++j) dst[j * rows + i] = src[i * lds + j];
}

fb_status fbr_gemm_nt(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
                      int acc) {
  if (M <= 0 || N <= 0) return FB_OK;
  if (K <= 0) { /* no scratch to transpose into: fbr_gemm_nn zeroes C (or leaves it, acc) by itself */
    fbr_gemm_nn(M, N, 0, A, lda, B, ldb, C, ldc, acc);
    return FB_OK;
  }
  float *bt = malloc((size_t)K * (size_t)N * sizeof *bt);
  if (!bt) return FB_ERR(FB_ENOMEM, "gemm: %d x %d scratch", K, N);
  fbr_transpose(B, (size_t)N, (size_t)K, (size_t)ldb, bt);
  fbr_gemm_nn(M, N, K, A, lda, bt, N, C, ldc, acc);
  free(bt);
  return FB_OK;
}

fb_status fbr_gemm_tn(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
                      int acc) {
  if (M <= 0 || N <= 0) return FB_OK;
  if (K <= 0) { /* no scratch to transpose into: fbr_gemm_nn zeroes C (or leaves it, acc) by itself */
    fbr_gemm_nn(M, N, 0, A, lda, B, ldb, C, ldc, acc);
    return FB_OK;
  }
  float *at = malloc((size_t)K * (size_t)M * sizeof *at);
  if (!at) return FB_ERR(FB_ENOMEM, "gemm: %d x %d scratch", M, K);
  fbr_transpose(A, (size_t)K, (size_t)M, (size_t)lda, at);
  fbr_gemm_nn(M, N, K, at, K, B, ldb, C, ldc, acc);
  free(at);
  return FB_OK;
}

float fbr_rb(float x, int exact) { return exact ? x : fb_bf16_to_f32(fb_bf16_from_f32(x)); }
void fbr_rb_n(float *x, size_t n, int exact) {
  if (exact) return;
  for (size_t i = 0; i < n; ++i) x[i] = fb_bf16_to_f32(fb_bf16_from_f32(x[i]));
}
