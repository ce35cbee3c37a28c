/* mock_libcublas.c — a fake libcublas.so.13 for the CPU machines (build/mockcuda/libcublas.so.13, beside the fake
 * libcuda.so.1 of mock_libcuda.c, whose device memory is host memory). base/cublas.c loads it through
 * LD_LIBRARY_PATH. cublasGemmEx computes what the CPU path's fbr_gemm_* (runtime/model_gemm.c) compute for the same
 * product: BF16 operands taken exactly, FP32 accumulation for each output element in increasing k from +0 (beta 0)
 * or from C (beta 1), products and sums rounded separately (-ffp-contract=off). So a GPU-resident train step under
 * the fake driver reproduces the CPU path's GEMMs bit for bit; a real cuBLAS sums in another order. Every operand
 * range is checked against the fake driver's allocations (fbmock_check: MOCK OOB aborts). */
#include <cublas_api.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float bf(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void check(const void *p, size_t n, const char *what) {
  static void (*fn)(unsigned long long, size_t, const char *);
  if (!fn) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    fn = h ? (void (*)(unsigned long long, size_t, const char *))dlsym(h, "fbmock_check") : NULL;
    if (!fn) {
      fprintf(stderr, "MOCK cublas: the fake libcuda.so.1 (fbmock_check) is not loaded\n");
      abort();
    }
  }
  fn((unsigned long long)(uintptr_t)p, n, what);
}

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
  *h = (cublasHandle_t)malloc(8);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  free(h);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
  (void)h;
  return s ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_SUCCESS; /* the default stream only */
}

/* column-major: C (m x n, ldc) = op(A) (m x k) op(B) (k x n) */
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt,
                            int ldb, const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t comp,
                            cublasGemmAlgo_t algo) {
  (void)h, (void)algo;
  float al = *(const float *)alpha, be = *(const float *)beta;
  if (at != CUDA_R_16BF || bt != CUDA_R_16BF || ct != CUDA_R_32F || comp != CUBLAS_COMPUTE_32F || al != 1.0f ||
      (be != 0.0f && be != 1.0f) || m < 0 || n < 0 || k < 0) {
    fprintf(stderr, "MOCK cublasGemmEx: only BF16 x BF16 -> FP32, compute 32F, alpha 1, beta 0 or 1\n");
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (!m || !n) return CUBLAS_STATUS_SUCCESS;
  /* stored extents: op N -> rows x cols = (m x k) with ld >= m; op T -> stored k x m */
  size_t ar = ta == CUBLAS_OP_N ? (size_t)m : (size_t)k, ac = ta == CUBLAS_OP_N ? (size_t)k : (size_t)m;
  size_t br = tb == CUBLAS_OP_N ? (size_t)k : (size_t)n, bc = tb == CUBLAS_OP_N ? (size_t)n : (size_t)k;
  if ((size_t)lda < ar || (size_t)ldb < br || ldc < m) return CUBLAS_STATUS_INVALID_VALUE;
  if (k) check(A, ((ac - 1) * (size_t)lda + ar) * 2, "cublas A"), check(B, ((bc - 1) * (size_t)ldb + br) * 2, "cublas B");
  check(C, ((size_t)(n - 1) * (size_t)ldc + (size_t)m) * 4, "cublas C");
  const uint16_t *a = A, *b = B;
  float *c = C;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      float acc = be == 1.0f ? c[(size_t)j * ldc + i] : 0.0f;
      for (int q = 0; q < k; ++q) {
        float x = bf(a[ta == CUBLAS_OP_N ? (size_t)q * lda + i : (size_t)i * lda + q]);
        float y = bf(b[tb == CUBLAS_OP_N ? (size_t)j * ldb + q : (size_t)q * ldb + j]);
        acc = acc + y * x;
      }
      c[(size_t)j * ldc + i] = acc;
    }
  return CUBLAS_STATUS_SUCCESS;
}
