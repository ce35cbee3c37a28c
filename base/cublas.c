/* cublas.c — cuBLAS loaded with dlopen (fb_cublas.h). Only the four entry points the train step needs. */
#include "fb_cublas.h"

#include "fb_error.h"

#include <cublas_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
  cublasStatus_t (*Create)(cublasHandle_t *);
  cublasStatus_t (*Destroy)(cublasHandle_t);
  cublasStatus_t (*SetStream)(cublasHandle_t, cudaStream_t);
  cublasStatus_t (*GemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                           const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                           cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
} bl;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static fb_status load_status = FB_ECUDA;
static char load_err[512], lib_name[32];

static void load(void) {
  static const char *const names[] = {"libcublas.so.13", "libcublas.so.12"};
  void *h = NULL;
  for (int i = 0; i < 2 && !h; ++i)
    if ((h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL))) snprintf(lib_name, sizeof lib_name, "%s", names[i]);
  if (!h) {
    snprintf(load_err, sizeof load_err, "dlopen(libcublas.so.13 / .so.12): %s: no cuBLAS here (the GPU train step's "
             "dense GEMMs need it)", dlerror());
    return;
  }
  struct { void **slot; const char *name; } syms[] = {
      {(void **)&bl.Create, "cublasCreate_v2"},
      {(void **)&bl.Destroy, "cublasDestroy_v2"},
      {(void **)&bl.SetStream, "cublasSetStream_v2"},
      {(void **)&bl.GemmEx, "cublasGemmEx"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; ++i)
    if (!(*syms[i].slot = dlsym(h, syms[i].name))) {
      snprintf(load_err, sizeof load_err, "%s has no symbol %s", lib_name, syms[i].name);
      lib_name[0] = 0;
      return;
    }
  load_status = FB_OK;
}

const char *fb_blas_name(void) { return lib_name; }

struct fb_blas {
  cublasHandle_t h;
};

#define BL_CHECK(call)                                                                                                 \
  do {                                                                                                                 \
    cublasStatus_t st_ = (call);                                                                                       \
    if (st_ != CUBLAS_STATUS_SUCCESS) return FB_ERR(FB_ECUDA, "%s: cuBLAS status %d", #call, (int)st_);               \
  } while (0)

fb_status fb_blas_create(fb_blas **out) {
  *out = NULL;
  pthread_once(&once, load);
  if (load_status != FB_OK) return FB_ERR(FB_ECUDA, "%s", load_err);
  fb_blas *b = calloc(1, sizeof *b);
  if (!b) return FB_ERR(FB_ENOMEM, "cublas handle");
  cublasStatus_t s = bl.Create(&b->h);
  if (s == CUBLAS_STATUS_SUCCESS) s = bl.SetStream(b->h, NULL); /* the default stream: the kernels' */
  if (s != CUBLAS_STATUS_SUCCESS) {
    if (b->h) bl.Destroy(b->h);
    free(b);
    return FB_ERR(FB_ECUDA, "cublasCreate: status %d", (int)s);
  }
  *out = b;
  return FB_OK;
}

void fb_blas_free(fb_blas *b) {
  if (!b) return;
  if (b->h) bl.Destroy(b->h);
  free(b);
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the operands swap, the flags stay. */
fb_status fb_blas_gemm(fb_blas *b, int ta, int tb, int M, int N, int K, unsigned long long A, int lda,
                       unsigned long long B, int ldb, unsigned long long C, int ldc, int acc) {
  if (M <= 0 || N <= 0) return FB_OK;
  const float one = 1.0f, beta = acc ? 1.0f : 0.0f;
  BL_CHECK(bl.GemmEx(b->h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &one,
                     (const void *)(uintptr_t)B, CUDA_R_16BF, ldb, (const void *)(uintptr_t)A, CUDA_R_16BF, lda, &beta,
                     (void *)(uintptr_t)C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return FB_OK;
}
