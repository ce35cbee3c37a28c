/* mock_libcuda.c — a fake libcuda.so.1 for the CPU machines: build/mockcuda/libcuda.so.1, loaded by
 * base/cuda_driver.c's dlopen when LD_LIBRARY_PATH points at it. Device memory is host memory; every copy, memset,
 * tensor map and kernel argument is checked against the allocations (an access outside one aborts with MOCK OOB); each
 * kernel launch is carried out by the CPU reference of what its template's header says it computes (runtime/numerics.c,
 * runtime/ops.c): the quantizers, requantize-transposes, BF16 operand copies, permute (pass 3 does the whole
 * permutation), unpermute, SwiGLU, and the grouped GEMMs (mode 0 with BF16 / FP32 / S2F6 outputs, wgrad). It checks the
 * HOST side of a GPU path — which buffers go where, their sizes, the launch parameters and the data flow between kernels
 * (make test runs build/gpu/test_train_gpu under it) — and says nothing about the kernels themselves, which
 * tests/gpu/test_kernels.c and test_gemm.c check on the GPU. */
#include "fb_dense.h"
#include "fb_gemm.h"
#include "fb_kparams.h"
#include "fourbit.h"
#include "model_dense.h"
#include <cuda.h>
#include "../emu/fb_tmap_rec.h" /* the tensor maps' layout, shared with the functional model */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef struct {
  char *p;
  size_t n;
} al;
static al A[100000];
static int nA;
static long nlaunch;
/* MOCK_CALLS=1: at exit, the count of each kind of call on stderr (launches, synchronous copies, memsets) */
static long nhtod, ndtoh, ndtod, n2d, nmemset, nsync;
__attribute__((destructor)) static void mock_calls(void) {
  if (getenv("MOCK_CALLS"))
    fprintf(stderr, "MOCK calls: %ld launches, %ld HtoD, %ld DtoH, %ld DtoD, %ld 2D copies, %ld memsets, %ld synchronizes\n", nlaunch,
            nhtod, ndtoh, ndtod, n2d, nmemset, nsync);
}
/* Streams: every call that names one (launches, the asynchronous copies and sets, event records and waits, stream
 * synchronizes) counted per stream, and the synchronous copies and sets (the legacy default stream implicitly) apart,
 * for the tests of libfourbit.so's stream plumbing (tests/python/test_layer_mock.py reads them through ctypes). */
static struct { CUstream s; long n; } SS[64];
static int nSS;
static long nlegacy, nwaits;
static void on_stream(CUstream s) {
  for (int i = 0; i < nSS; ++i)
    if (SS[i].s == s) { SS[i].n++; return; }
  if (nSS < 64) SS[nSS].s = s, SS[nSS++].n = 1;
}
void fbmock_streams_reset(void) { nSS = 0, nlegacy = 0, nwaits = 0; }
long fbmock_stream_waits(void) { return nwaits; } /* cuStreamWaitEvent calls */
long fbmock_stream_calls(CUstream s) {
  for (int i = 0; i < nSS; ++i)
    if (SS[i].s == s) return SS[i].n;
  return 0;
}
int fbmock_streams_seen(void) { return nSS; }
long fbmock_stream_total(void) {
  long n = 0;
  for (int i = 0; i < nSS; ++i) n += SS[i].n;
  return n;
}
long fbmock_legacy_calls(void) { return nlegacy; }
static int find(unsigned long long d, size_t n, const char *what) {
  for (int i = 0; i < nA; ++i)
    if (A[i].p && d >= (unsigned long long)A[i].p && d + n <= (unsigned long long)A[i].p + A[i].n)
      return i;
  fprintf(stderr, "MOCK OOB: %s at %#llx + %zu\n", what, d, n);
  abort();
}
/* for the fake cuBLAS (mock_libcublas.c): the same bounds check on its operands */
void fbmock_check(unsigned long long d, size_t n, const char *what) { find(d, n, what); }
CUresult cuInit(unsigned f) {
  (void)f;
  return 0;
}
CUresult cuDriverGetVersion(int *v) {
  *v = 13000;
  return 0;
}
CUresult cuDeviceGetCount(int *n) {
  *n = 1;
  return 0;
}
CUresult cuDeviceGet(CUdevice *d, int o) {
  *d = o;
  return 0;
}
CUresult cuDeviceGetName(char *s, int n, CUdevice d) {
  (void)d;
  snprintf(s, n, "MOCK H200");
  return 0;
}
/* FB_MOCK_CC=M.m: a GPU of that compute capability (tests of what runs on other archs); default 9.0, an H200 */
static int mock_cc(int minor) {
  const char *e = getenv("FB_MOCK_CC");
  int M = 9, m = 0;
  if (e && *e) sscanf(e, "%d.%d", &M, &m);
  return minor ? m : M;
}
CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
  (void)d;
  *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR   ? mock_cc(0)
       : a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ? mock_cc(1)
       : a == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT     ? 132
                                                           : 0;
  return 0;
}
CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) {
  (void)d;
  *b = 1ull << 37;
  return 0;
}
CUresult cuGetErrorString(CUresult r, const char **s) {
  (void)r;
  *s = "mock error";
  return 0;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  (void)d;
  *c = (CUcontext)1;
  return 0;
}
CUresult cuCtxSetCurrent(CUcontext c) {
  (void)c;
  return 0;
}
CUresult cuCtxSynchronize(void) {
  ++nsync;
  return 0;
}
CUresult cuModuleLoadData(CUmodule *m, const void *p) {
  (void)p;
  *m = (CUmodule)malloc(8);
  return 0;
}
CUresult cuModuleUnload(CUmodule m) {
  free(m);
  return 0;
}
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *n) {
  (void)m;
  *f = (CUfunction)strdup(n);
  return 0;
}
CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f) {
  (void)a;
  (void)f;
  *v = 0;
  return 0;
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction f, int b, size_t s) {
  (void)f;
  (void)b;
  (void)s;
  *n = 1;
  return 0;
}

static int kp32(int P) {
  int s = P >> 4, p = P & 15;
  return 8 * ((p & 7) >> 1) + 4 * s + 2 * (p >> 3) + (p & 1);
}
static int kp16(int p) { return 4 * ((p & 7) >> 1) + 2 * (p >> 3) + (p & 1); }
static float bf(uint16_t h) { return fb_bf16_to_f32(h); }
#define CHK(x)                                                                                                                   \
  do {                                                                                                                           \
    if ((x) != FB_OK) {                                                                                                          \
      fprintf(stderr, "MOCK %s: %s: %s\n", nm, #x, fb_errmsg());                                                                 \
      abort();                                                                                                                   \
    }                                                                                                                            \
  } while (0)
/* dequantize an A operand (rows x K) */
static float *deqA(const char *nm, int kind, const void *a, const void *sf, const float *outer, size_t rows, size_t K) {
  float *x = malloc(rows * K * 4 + 4);
  if (kind == 0) { /* BF16 as stored */
    for (size_t i = 0; i < rows * K; ++i)
      x[i] = bf(((const uint16_t *)a)[i]);
  } else if (kind == 1) {
    fb_nvfp4_opts o = {.outer = FB_OUTER_ROW};
    float *one = malloc(rows * 4 + 4);
    for (size_t i = 0; i < rows; ++i)
      one[i] = 1.0f;
    CHK(fb_nvfp4_dequantize(a, sf, one, rows, K, &o, x));
    free(one);
    (void)outer;
  } else {
    CHK(fb_mxfp8_dequantize(a, sf, rows, K, x));
  }
  return x;
}
static float *deqB(int kind, const uint16_t *b, size_t rows, size_t K) {
  float *x = malloc(rows * K * 4 + 4);
  for (size_t r = 0; r < rows; ++r)
    for (size_t k = 0; k < K; ++k) {
      size_t P = k;
      size_t nat = kind == 0 ? k : kind == 1 ? (k / 32) * 32 + kp32((int)(k % 32)) : (k / 16) * 16 + kp16((int)(k % 16));
      x[r * K + nat] = bf(b[r * K + P]);
    }
  return x;
}
/* B as an FP8 variant (weights_bf16 0, the tag's _b0) takes it: MXFP8 codes with their E8M0 scales, rows x K */
static float *deqB_raw(const void *b, const void *sf, size_t rows, size_t K) {
  const char *nm = "gemm B (FP8)";
  float *x = malloc(rows * K * 4 + 4);
  CHK(fb_mxfp8_dequantize(b, sf, rows, K, x));
  return x;
}
/* fp8: 1 B as MXFP8 codes and E8M0 (an FP8 variant, or tcgen05's); 2 B as NVFP4 codes, E4M3 and per-expert S_dec
   (tcgen05's: no BF16 copy) */
static void emu_gemm(const fb_kernel_spec *k, const fb_kp_gemm *p, int fp8) {
  const char *nm = k->name;
  /* the operands by the pointers both families get (p->a, p->b; the wgmma family's maps hold the same addresses) */
  const unsigned long long ta[1] = {p->a}, tb[1] = {p->b};
  /* kinds: BF16 (0: as stored, natural K), NVFP4 (1), MXFP8 (3); an NVFP4 operand with a tensor outer scale: one S_dec
     for A / B (else per row / per expert) */
  int kind = k->src.format == FB_FMT_BF16 ? 0 : k->src.format == FB_FMT_NVFP4 ? 1 : 3, mode = k->op == FB_OP_GEMM_WGRAD,
      s2f6 = k->op == FB_OP_GEMM_FWD2 && k->q.format == FB_FMT_S2F6, obf = k->out_bf16;
  int aten = kind == 1 && k->act.outer == FB_GRAN_TENSOR, bten = kind == 1 && k->src.outer == FB_GRAN_TENSOR;
  int E = p->experts;
  const long long *off = (const long long *)p->offsets;
  find(p->offsets, (E + 1) * 8, "gemm offsets");
  if (!mode) {
    size_t R = p->rows, K = p->K, N = p->N;
    find(ta[0], kind == 1 ? R * K / 2 : kind == 0 ? R * K * 2 : R * K, "gemm A");
    if (kind)
      find(p->a_sf, kind == 1 ? R * K / 16 : R * K / 32, "gemm a_sf");
    find(tb[0], fp8 == 2 ? (size_t)E * N * K / 2 : (size_t)E * N * K * (fp8 ? 1 : 2), "gemm B");
    if (fp8) find(p->b_sf, (size_t)E * N * K / (fp8 == 2 ? 16 : 32), "gemm b_sf");
    float *A = deqA(nm, kind, (void *)ta[0], (void *)p->a_sf, NULL, R, K);
    float *B = fp8 == 2 ? deqA(nm, 1, (void *)tb[0], (void *)p->b_sf, NULL, (size_t)E * N, K)
             : fp8 ? deqB_raw((void *)tb[0], (void *)p->b_sf, (size_t)E * N, K) : deqB(kind, (uint16_t *)tb[0], (size_t)E * N, K);
    const float *ao = (const float *)p->a_outer, *bo = (const float *)p->b_outer;
    if (kind == 1) {
      find(p->a_outer, aten ? 4 : R * 4, "a_outer");
      find(p->b_outer, bten ? 4 : E * 4, "b_outer");
    }
    float *Y = calloc(R * N + 1, 4);
    for (int e = 0; e < E; ++e)
      for (long long r = off[e]; r < off[e + 1]; ++r) {
        /* rows past count are padding: the kernel computes them but the template stores only rows < off[e]+count? store all rows
         * in range */
        for (size_t n = 0; n < N; ++n) {
          float acc = 0;
          for (size_t k = 0; k < K; ++k)
            acc += A[r * K + k] * B[((size_t)e * N + n) * K + k];
          if (kind == 1)
            acc *= ao[aten ? 0 : r] * bo[bten ? 0 : e];
          Y[r * N + n] = acc;
        }
      }
    /* the kernel writes the rows of its experts only, [off[0], off[E]) (a launch over a chunk of the experts leaves
       the others' rows alone): so here */
    size_t r0 = E ? (size_t)off[0] : 0, nr = E ? (size_t)(off[E] - off[0]) : 0;
    const float *Yr = Y + r0 * N;
    if (k->op == FB_OP_GEMM_FWD13) { /* w13 fwd, SwiGLU epilogue: H = bf16(Y) to aux (if set), A = SwiGLU(H) to out */
      uint16_t *h = malloc(nr * N * 2 + 2);
      for (size_t i = 0; i < nr * N; ++i)
        h[i] = fb_bf16_from_f32(Yr[i]);
      if (p->aux) {
        find(p->aux, R * N * 2, "swiglu H");
        memcpy((uint16_t *)p->aux + r0 * N, h, nr * N * 2);
      }
      find(p->out, R * N, "swiglu A");
      if (nr) CHK(fb_swiglu_fwd_ref(h, nr, N / 2, (uint16_t *)p->out + r0 * N / 2));
      free(h);
    } else if (s2f6) {
      find(p->out, R * N, "s2f6 out");
      find(p->out_sf, R * N / 32, "s2f6 sf");
      if (nr) CHK(fb_s2f6_quantize(Yr, nr, N, k->q.rht == 32, p->signs, (int8_t *)p->out + r0 * N, (uint8_t *)p->out_sf + r0 * N / 32));
    } else if (obf) {
      find(p->out, R * N * 2, "gemm out bf16");
      for (size_t i = 0; i < nr * N; ++i)
        ((uint16_t *)p->out)[r0 * N + i] = fb_bf16_from_f32(Yr[i]);
    } else {
      find(p->out, R * N * 4, "gemm out");
      memcpy((float *)p->out + r0 * N, Yr, nr * N * 4);
    }
    free(A), free(B), free(Y);
  } else {
    size_t R = p->rows, M = p->M, N = p->N;
    int wk = kind == 0 ? 0 : 3; /* BF16 x BF16, or MXFP8 x its BF16 copy */
    find(ta[0], M * R * (wk ? 1 : 2), "wgrad A");
    if (wk)
      find(p->a_sf, M * R / 32, "wgrad a_sf");
    find(tb[0], N * R * (fp8 ? 1 : 2), "wgrad B");
    if (fp8) find(p->b_sf, N * R / 32, "wgrad b_sf");
    find(p->out, (size_t)E * M * N * 4, "wgrad out");
    float *A = deqA(nm, wk, (void *)ta[0], (void *)p->a_sf, NULL, M, R), *B = fp8 ? deqB_raw((void *)tb[0], (void *)p->b_sf, N, R) : deqB(wk, (uint16_t *)tb[0], N, R);
    float *o = (float *)p->out;
    for (int e = 0; e < E; ++e)
      for (size_t m = 0; m < M; ++m)
        for (size_t n = 0; n < N; ++n) {
          float acc = 0;
          for (long long r = off[e]; r < off[e + 1]; ++r)
            acc += A[m * R + r] * B[n * R + r];
          o[((size_t)e * M + m) * N + n] = acc;
        }
    free(A), free(B);
  }
}
/* The NVFP4 options a quantizer or requantizer's source reads: outer per row, per group (the launch's group offsets,
 * copied into *go: free it) or per tensor. */
static fb_nvfp4_opts nv_opts(fb_gran outer, const fb_kp_mem *p, size_t **go) {
  int tok = outer == FB_GRAN_TOKEN, exp_ = outer == FB_GRAN_EXPERT;
  size_t ng = p->ngroups ? p->ngroups : 1;
  *go = malloc((ng + 1) * sizeof **go);
  if (exp_) {
    find(p->group_offsets, (ng + 1) * 8, "groups");
    for (size_t i = 0; i <= ng; ++i)
      (*go)[i] = (size_t)((long long *)p->group_offsets)[i];
  }
  fb_nvfp4_opts o = {.outer = tok ? FB_OUTER_ROW : exp_ ? FB_OUTER_GROUP : FB_OUTER_TENSOR, .group_offsets = *go, .ngroups = ng};
  return o;
}
/* bcopy (gemm_bcopy.cuh): the exact BF16 copy, K permuted, of R x C NVFP4 (no outer scale) or MXFP8 codes */
static void bcopy_ref(const char *nm, int nv, const uint8_t *codes, const uint8_t *scales, size_t R, size_t C, uint16_t *o) {
  size_t n = R * C;
  float *v = malloc(n * 4 + 4);
  if (nv) {
    fb_nvfp4_opts no = {.outer = FB_OUTER_ROW};
    float *one = malloc(R * 4 + 4);
    for (size_t i = 0; i < R; ++i)
      one[i] = 1;
    CHK(fb_nvfp4_dequantize(codes, scales, one, R, C, &no, v));
    free(one);
  } else
    CHK(fb_mxfp8_dequantize(codes, scales, R, C, v));
  for (size_t r = 0; r < R; ++r)
    for (size_t k = 0; k < C; ++k) {
      size_t nat = nv ? (k / 32) * 32 + kp32((int)(k % 32)) : (k / 16) * 16 + kp16((int)(k % 16));
      o[r * C + k] = fb_bf16_from_f32(v[r * C + nat]);
    }
  free(v);
}
/* an MXFP8 quantizer's SR index map (fb_kparams.h sr_*): y (R x C, already in the output's layout: rows of 32-blocks)
   quantized as fb_mxfp8_quantize_rows_at does under the map */
static void mx_rows_mapped(const char *nm, const float *y, size_t R, size_t C, const fb_sr_opts *so, const fb_kp_mem *p, uint8_t *codes,
                           uint8_t *sf) {
  CHK(fb_mxfp8_quantize_rows_at(y, R, C, so, (size_t)p->sr_row0, (size_t)p->sr_ld, (size_t)p->sr_col0, codes, sf));
}
static float *transposed(const float *y, size_t R, size_t C) {
  float *t = malloc(R * C * 4 + 4);
  for (size_t i = 0; i < R; ++i)
    for (size_t j = 0; j < C; ++j) t[j * R + i] = y[i * C + j];
  return t;
}
static void emu_mem(const fb_kernel_spec *k, const fb_kp_mem *p) {
  const char *nm = k->name;
  size_t R = p->rows, C = p->cols, n = R * C;
  int sr = k->q.rounding == FB_ROUND_SR;
  int f32 = k->in_f32;
  float *x = NULL;
  if (k->op == FB_OP_QUANT) {
    find(p->in, n * (f32 ? 4 : 2), "quant in");
    x = malloc(n * 4 + 4);
    for (size_t i = 0; i < n; ++i)
      x[i] = f32 ? ((float *)p->in)[i] : bf(((uint16_t *)p->in)[i]);
  }
  if (k->op == FB_OP_QUANT && k->q.format == FB_FMT_NVFP4) {
    size_t *go;
    fb_nvfp4_opts o = nv_opts(k->q.outer, p, &go);
    o.four_over_six = k->q.four_over_six, o.two_d = k->q.two_d, o.rounding = sr ? FB_ROUND_SR : FB_ROUND_RN;
    o.seed = p->seed, o.stream = p->stream, o.step = p->step;
    size_t no = fb_nvfp4_nouter(&o, R);
    find(p->out, n / 2, "q out");
    find(p->scales, n / 16, "q sf");
    find(p->s_dec, no * 4, "q sdec");
    CHK(fb_nvfp4_quantize(x, R, C, &o, (uint8_t *)p->out, (uint8_t *)p->scales, (float *)p->s_dec, NULL));
    if (p->amax && o.outer != FB_OUTER_ROW) { /* the kernel takes S_enc from p.amax: it must be the data's amax (NaN
                                                 ignored), whoever computed it (the amax kernel, AdamW's NVFP4 form) */
      const size_t ng = o.outer == FB_OUTER_GROUP ? o.ngroups : 1;
      find(p->amax, ng * 4, "q amax");
      for (size_t g = 0; g < ng; ++g) {
        const size_t r0 = ng > 1 ? o.group_offsets[g] : 0, r1 = ng > 1 ? o.group_offsets[g + 1] : R;
        float a = 0.0f;
        for (size_t i = r0 * C; i < r1 * C; ++i)
          if (fabsf(x[i]) > a) a = fabsf(x[i]);
        if (memcmp(&a, (const float *)p->amax + g, 4)) {
          fprintf(stderr, "MOCK: %s: p.amax[%zu] = %a, but the input's amax is %a\n", nm, g, (double)((const float *)p->amax)[g], (double)a);
          abort();
        }
      }
    }
    free(go);
  } else if (k->op == FB_OP_QUANT && k->q.format == FB_FMT_MXFP8) {
    int col = k->col;
    fb_sr_opts so = {sr ? FB_ROUND_SR : FB_ROUND_RN, p->seed, p->stream, p->step};
    find(p->out, n, "mx out");
    find(p->scales, n / 32, "mx sf");
    if (p->sr_ld) { /* the map: the output's element (i, j) draws at (sr_row0 + i) sr_ld + sr_col0 + j */
      float *t = col ? transposed(x, R, C) : x;
      mx_rows_mapped(nm, t, col ? C : R, col ? R : C, &so, p, (uint8_t *)p->out, (uint8_t *)p->scales);
      if (col) free(t);
    } else
      CHK(fb_mxfp8_quantize(x, R, C, col ? FB_MX_COLWISE : FB_MX_ROWWISE, &so, (uint8_t *)p->out, (uint8_t *)p->scales));
    if (col == 2) { /* both ways (mx_col.cuh FB_BOTH): the row-wise codes too, their own stream and map */
      fb_sr_opts s2 = so;
      s2.stream = p->stream2;
      if (C % 32) { fprintf(stderr, "MOCK: %s: cols %zu not a multiple of 32\n", nm, C); abort(); }
      find(p->out2, n, "mx out2");
      find(p->scales2, n / 32, "mx sf2");
      if (p->sr2_ld)
        CHK(fb_mxfp8_quantize_rows_at(x, R, C, &s2, (size_t)p->sr2_row0, (size_t)p->sr2_ld, (size_t)p->sr2_col0, (uint8_t *)p->out2,
                                      (uint8_t *)p->scales2));
      else CHK(fb_mxfp8_quantize(x, R, C, FB_MX_ROWWISE, &s2, (uint8_t *)p->out2, (uint8_t *)p->scales2));
    }
  } else if (k->op == FB_OP_REQUANT) {
    fb_sr_opts so = {sr ? FB_ROUND_SR : FB_ROUND_RN, p->seed, p->stream, p->step};
    /* kbf16 (mx_col.cuh FB_KBF16): the codes and scales made apart, then their BF16 copy, regrouped by out_group */
    int kb = k->out_bf16;
    uint8_t *rq_c = kb ? malloc(n + 1) : (uint8_t *)p->out, *rq_s = kb ? malloc(n / 32 + 1) : (uint8_t *)p->scales;
    find(p->out, kb ? 2 * n : n, "rq out");
    if (!kb) find(p->scales, n / 32, "rq sf");
    if (k->src.format == FB_FMT_NVFP4) {
      size_t *go;
      fb_nvfp4_opts o = nv_opts(k->src.outer, p, &go);
      find(p->in, n / 2, "rq in");
      find(p->src_scales, n / 16, "rq src sf");
      find(p->src_s_dec, fb_nvfp4_nouter(&o, R) * 4, "rq src sdec");
      if (p->sr_ld) { /* the map: dequantized, transposed, quantized along the new rows under it */
        float *y = malloc(n * 4 + 4), *t;
        CHK(fb_nvfp4_dequantize((uint8_t *)p->in, (uint8_t *)p->src_scales, (float *)p->src_s_dec, R, C, &o, y));
        t = transposed(y, R, C);
        mx_rows_mapped(nm, t, C, R, &so, p, rq_c, rq_s);
        free(y), free(t);
      } else
        CHK(fb_requant_nvfp4_to_mxfp8t((uint8_t *)p->in, (uint8_t *)p->src_scales, (float *)p->src_s_dec, R, C, &o, &so, rq_c, rq_s));
      free(go);
    } else {
      find(p->in, n, "rq in");
      find(p->src_scales, n / 32, "rq src sf");
      if (p->sr_ld) {
        float *y = malloc(n * 4 + 4), *t;
        CHK(fb_mxfp8_dequantize((uint8_t *)p->in, (uint8_t *)p->src_scales, R, C, y));
        t = transposed(y, R, C);
        mx_rows_mapped(nm, t, C, R, &so, p, rq_c, rq_s);
        free(y), free(t);
      } else
        CHK(fb_requant_mxfp8_to_mxfp8t((uint8_t *)p->in, (uint8_t *)p->src_scales, R, C, &so, rq_c, rq_s));
    }
    if (kb) { /* the copy of the C x R codes; output row g C + c: source rows [g G, (g + 1) G) of column c */
      size_t G = p->out_group ? p->out_group : R;
      if (R % G || G % 32) {
        fprintf(stderr, "MOCK: %s: out_group %zu of %zu rows\n", nm, G, R);
        abort();
      }
      uint16_t *t = malloc(2 * n + 2), *o = (uint16_t *)p->out;
      bcopy_ref(nm, 0, rq_c, rq_s, C, R, t);
      for (size_t c = 0; c < C; ++c)
        for (size_t g = 0; g < R / G; ++g)
          memcpy(o + (g * C + c) * G, t + c * R + g * G, G * 2);
      free(t), free(rq_c), free(rq_s);
    }
  } else if (k->op == FB_OP_BCOPY) {
    int nv = k->q.format == FB_FMT_NVFP4;
    find(p->in, nv ? n / 2 : n, "bc in");
    find(p->scales, nv ? n / 16 : n / 32, "bc sf");
    find(p->out, n * 2, "bc out");
    bcopy_ref(nm, nv, (uint8_t *)p->in, (uint8_t *)p->scales, R, C, (uint16_t *)p->out);
  } else if (k->op == FB_OP_TCOPY) { /* fb_tcopy_ref */
    int nv = !f32 && k->src.format == FB_FMT_NVFP4, mx = !f32 && k->src.format == FB_FMT_MXFP8, tok = nv && k->src.outer == FB_GRAN_TOKEN;
    int obf = k->out_bf16, tr = k->col, rht = k->q.rht, scale = k->act.rht;
    find(p->in, nv ? n / 2 : mx ? n : n * (f32 ? 4 : 2), "tcopy in");
    if (nv) {
      find(p->src_scales, n / 16, "tcopy sf");
      find(p->src_s_dec, (tok ? R : 1) * 4, "tcopy sdec");
    }
    if (mx)
      find(p->src_scales, n / 32, "tcopy sf");
    if (scale && p->s_dec)
      find(p->s_dec, 4, "tcopy sa");
    if (scale && p->amax)
      find(p->amax, 4, "tcopy sb");
    find(p->out, n * (obf ? 2 : 4), "tcopy out");
    void *tmp = malloc(n * 4 + 4); /* the reference does not write in place */
    CHK(fb_tcopy_ref((void *)p->in, (uint8_t *)p->src_scales, (float *)p->src_s_dec, nv ? FB_FMT_NVFP4 : mx ? FB_FMT_MXFP8 : FB_FMT_BF16, f32,
                     tok, R, C, tr, rht, p->signs, scale, scale && p->s_dec ? (float *)p->s_dec : NULL,
                     scale && p->amax ? (float *)p->amax : NULL, obf, tmp));
    memcpy((void *)p->out, tmp, n * (obf ? 2 : 4));
    free(tmp);
  } else {
    fprintf(stderr, "MOCK: no emulation of %s\n", nm);
    abort();
  }
  free(x);
}
/* s2f6.cuh on its own (libfourbit.so's device quantizers): the combine payload's quantizer and dequantizer */
static void emu_s2f6(const fb_kernel_spec *k, const fb_kp_mem *p) {
  const char *nm = k->name;
  size_t R = p->rows, C = p->cols, n = R * C;
  int rht = k->q.rht == 32;
  find(p->scales, n / 32, "s2f6 sf");
  if (k->op == FB_OP_S2F6_Q) {
    int f32 = k->in_f32;
    find(p->in, n * (f32 ? 4 : 2), "s2f6 in");
    find(p->out, n, "s2f6 codes");
    float *x = malloc(n * 4 + 4);
    for (size_t i = 0; i < n; ++i) x[i] = f32 ? ((float *)p->in)[i] : bf(((uint16_t *)p->in)[i]);
    CHK(fb_s2f6_quantize(x, R, C, rht, p->signs, (int8_t *)p->out, (uint8_t *)p->scales));
    free(x);
  } else {
    find(p->in, n, "s2f6 codes");
    find(p->out, n * 4, "s2f6 out");
    CHK(fb_s2f6_dequantize((int8_t *)p->in, (uint8_t *)p->scales, R, C, rht, p->signs, (float *)p->out));
  }
}
static void emu_amax(const fb_kernel_spec *k, const fb_kp_mem *p) {
  int grp = k->q.outer == FB_GRAN_EXPERT;
  size_t R = p->rows, C = p->cols, ng = grp ? p->ngroups : 1;
  int f32 = k->in_f32;
  find(p->in, R * C * (f32 ? 4 : 2), "amax in");
  find(p->amax, ng * 4, "amax out");
  if (grp) find(p->group_offsets, (ng + 1) * 8, "amax groups");
  for (size_t g = 0; g < ng; ++g) {
    size_t lo = ng > 1 || grp ? (size_t)((long long *)p->group_offsets)[g] : 0;
    size_t hi = ng > 1 || grp ? (size_t)((long long *)p->group_offsets)[g + 1] : R;
    float a = ((float *)p->amax)[g];
    for (size_t i = lo * C; i < hi * C; ++i) {
      float v = f32 ? ((float *)p->in)[i] : bf(((uint16_t *)p->in)[i]);
      if (!(fabsf(v) <= 3.4028235e38f) && p->flags) *(unsigned *)p->flags |= 1u;
      a = fmaxf(a, fabsf(v));
    }
    ((float *)p->amax)[g] = a;
  }
}
static void emu_moe(const fb_kernel_spec *k, const fb_kp_moe *p) {
  const char *nm = k->name;
  size_t T = p->rows, C = p->cols, K = p->top_k;
  if (k->op == FB_OP_COMBINE_BWD) {
    int s2 = k->q.format == FB_FMT_S2F6;
    find(p->row_of, T * K * 4, "cb row_of");
    size_t yr = 0;
    for (size_t i = 0; i < T * K; ++i) {
      int32_t r = ((int32_t *)p->row_of)[i];
      if (r >= 0 && (size_t)r + 1 > yr)
        yr = (size_t)r + 1;
    }
    find(p->in, yr * C * (s2 ? 1 : 2), "cb in");
    if (s2)
      find(p->in_scales, yr * C / 32, "cb sf");
    find(p->topk_w, T * K * 4, "cb w");
    find(p->in2, T * C * 4, "cb dy");
    find(p->out, yr * C * 2, "cb dY");
    find(p->grad_w, T * K * 4, "cb dw");
    CHK(fb_combine_bwd_ref((void *)p->in, s2 ? (uint8_t *)p->in_scales : NULL, yr, s2 ? FB_FMT_S2F6 : FB_FMT_BF16,
                           s2 && k->q.rht == 32, p->signs, (int32_t *)p->row_of, (float *)p->topk_w, T, (int)K, C,
                           (float *)p->in2, (uint16_t *)p->out, (float *)p->grad_w));
    return;
  }
  if (k->op == FB_OP_SWIGLU_FWD) {
    find(p->in, T * 2 * C * 2, "sw in");
    find(p->out, T * C * 2, "sw out");
    CHK(fb_swiglu_fwd_ref((uint16_t *)p->in, T, C, (uint16_t *)p->out));
  } else if (k->op == FB_OP_SWIGLU_BWD) {
    find(p->in, T * 2 * C * 2, "swb in");
    find(p->in2, T * C * 2, "swb in2");
    find(p->out, T * 2 * C * 2, "swb out");
    CHK(fb_swiglu_bwd_ref((uint16_t *)p->in, (uint16_t *)p->in2, T, C, (uint16_t *)p->out));
  } else if (k->op == FB_OP_UNPERMUTE) {
    int s2 = k->q.format == FB_FMT_S2F6;
    find(p->row_of, T * K * 4, "up row_of");
    size_t yr = 0;
    for (size_t i = 0; i < T * K; ++i) {
      int32_t r = ((int32_t *)p->row_of)[i];
      if (r >= 0 && (size_t)r + 1 > yr)
        yr = (size_t)r + 1;
    }
    find(p->in, yr * C * (s2 ? 1 : 2), "up in");
    if (s2)
      find(p->in_scales, yr * C / 32, "up sf");
    if (p->topk_w)
      find(p->topk_w, T * K * 4, "up w");
    int ob = k->out_bf16; /* BF16 out (the combine), else FP32 (dX) */
    find(p->out, T * C * (ob ? 2 : 4), "up out");
    CHK(fb_unpermute_ref((void *)p->in, s2 ? (uint8_t *)p->in_scales : NULL, yr, s2 ? FB_FMT_S2F6 : FB_FMT_BF16,
                         s2 && k->q.rht == 32, p->signs, (int32_t *)p->row_of, p->topk_w ? (float *)p->topk_w : NULL, T, K,
                         C, ob ? NULL : (float *)p->out, ob ? (uint16_t *)p->out : NULL));
  } else {
    fprintf(stderr, "MOCK: no emulation of %s\n", nm);
    abort();
  }
}
/* ---- the GPU-resident train step's kernels: templates/dense.cuh by the CPU path's functions (runtime/model_dense.c),
 * the router by fb_router_ref, AdamW (BF16 copy; NVFP4's amax form) by fb_adamw_ref ---- */
static int ends(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}
static float *bfv(const char *what, unsigned long long d, size_t n) { /* a BF16 device array as floats (malloc'd) */
  find(d, n * 2, what);
  float *x = malloc(n * 4 + 4);
  for (size_t i = 0; i < n; ++i)
    x[i] = bf(((uint16_t *)d)[i]);
  return x;
}
static void to_bf(float *x, unsigned long long d, size_t n, const char *what) {
  find(d, n * 2, what);
  for (size_t i = 0; i < n; ++i)
    ((uint16_t *)d)[i] = fb_bf16_from_f32(x[i]);
}
static void emu_dense(const char *nm, const fb_kp_dense *p) {
  size_t T = (size_t)p->rows, D = (size_t)p->cols, W = (size_t)p->width, S = (size_t)p->seq;
  if (ends(nm, "_embed")) {
    find(p->idx, T * 4, "embed idx");
    find(p->y, T * D * 4, "embed y");
    for (size_t i = 0; i < T; ++i) {
      int32_t v = ((int32_t *)p->idx)[i];
      find(p->w + ((size_t)v * D) * 2, D * 2, "embed w");
      for (size_t d = 0; d < D; ++d)
        ((float *)p->y)[i * D + d] = bf(((uint16_t *)p->w)[(size_t)v * D + d]);
    }
  } else if (ends(nm, "_rms_fwd")) {
    find(p->x, T * D * 4, "rms x");
    find(p->r, T * 4, "rms r");
    float *g = bfv("rms gain", p->w, D), *y = malloc(T * D * 4 + 4);
    fbr_rmsnorm_fwd((float *)p->x, g, T, D, 0, y, (float *)p->r);
    if (p->y) find(p->y, T * D * 4, "rms y"), memcpy((void *)p->y, y, T * D * 4);
    if (p->yb) to_bf(y, p->yb, T * D, "rms yb");
    free(g), free(y);
  } else if (ends(nm, "_colsum")) {
    /* the second pass of _rms_bwd_g / _conv_bwd_k (the chunks' sums), which this driver carries out whole at the first */
    find(p->part, (size_t)p->nparts * D * 4, "colsum part"), find(p->dg, D * 4, "colsum dg");
  } else if (ends(nm, "_rms_bwd_x") || ends(nm, "_rms_bwd_g")) {
    int gx = ends(nm, "_rms_bwd_x");
    find(p->x, T * D * 4, "rmsb x");
    find(p->dy, T * D * 4, "rmsb dy");
    find(p->r, T * 4, "rmsb r");
    float *g = bfv("rmsb gain", p->w, D), *dx = gx ? (float *)p->dx : malloc(T * D * 4 + 4), *dg = gx ? calloc(D, 4) : (float *)p->dg;
    if (gx) find(p->dx, T * D * 4, "rmsb dx");
    else find(p->dg, D * 4, "rmsb dg"), memset(dg, 0, D * 4), find(p->part, (size_t)p->nparts * D * 4, "rmsb part");
    fbr_rmsnorm_bwd((float *)p->x, g, (float *)p->r, (float *)p->dy, T, D, dx, dg, gx ? p->accum : 0);
    free(g);
    if (gx) free(dg);
    else free(dx);
  } else if (ends(nm, "_conv_fwd")) {
    find(p->x, T * D * 4, "conv x"), find(p->a, T * D * 4, "conv n1"), find(p->y, T * D * 4, "conv y");
    float *k = bfv("conv k", p->w, D * W);
    fbr_conv_fwd((float *)p->x, (float *)p->a, k, T, D, W, S, 0, (float *)p->y);
    free(k);
  } else if (ends(nm, "_conv_bwd_k") || ends(nm, "_conv_bwd_x")) {
    int kx = ends(nm, "_conv_bwd_k");
    find(p->dy, T * D * 4, "convb dy"), find(p->a, T * D * 4, "convb n1");
    float *k = bfv("convb k", p->w, D * W), *dk = kx ? (float *)p->dg : malloc(D * W * 4), *dn = kx ? malloc(T * D * 4) : (float *)p->dx;
    if (kx) find(p->dg, D * W * 4, "convb dk"), find(p->part, (size_t)p->nparts * D * W * 4, "convb part");
    else find(p->dx, T * D * 4, "convb dn");
    fbr_conv_bwd((float *)p->dy, (float *)p->a, k, T, D, W, S, dk, dn);
    free(k), free(kx ? (void *)dn : (void *)dk);
  } else if (ends(nm, "_resid")) {
    find(p->x, T * D * 4, "resid x"), find(p->yb, T * D * 2, "resid yb"), find(p->y, T * D * 4, "resid y");
    for (size_t i = 0; i < T * D; ++i)
      ((float *)p->y)[i] = ((float *)p->x)[i] + bf(((uint16_t *)p->yb)[i]);
  } else if (ends(nm, "_ce")) {
    size_t V = D;
    find(p->x, T * V * 4, "ce logits"), find(p->idx, T * 4, "ce tgt"), find(p->dbl, T * 8, "ce out");
    float *pr = malloc(T * V * 4 + 4);
    memcpy(pr, (void *)p->x, T * V * 4); /* the kernel leaves the logits alone */
    fbr_ce_fwd(pr, (int32_t *)p->idx, T, V, (double *)p->dbl);
    if (p->grad) {
      float *dl = malloc(T * V * 4 + 4);
      fbr_ce_bwd(pr, (int32_t *)p->idx, T, V, (size_t)p->tg, 0, dl);
      to_bf(dl, p->yb, T * V, "ce dl");
      free(dl);
    }
    free(pr);
  } else if (ends(nm, "_router_bwd")) {
    size_t E = (size_t)p->experts, K = (size_t)p->top_k;
    find(p->probs, T * E * 4, "rb probs"), find(p->idx, T * K * 4, "rb idx"), find(p->tw, T * K * 4, "rb tw");
    find(p->dy, T * K * 4, "rb dtw"), find(p->cnt, E * 4, "rb cnt"), find(p->y, T * E * 4, "rb dp");
    float *dlr = malloc(T * E * 4 + 4);
    fbr_router_bwd((float *)p->probs, (int32_t *)p->idx, (float *)p->tw, (float *)p->dy, (int32_t *)p->cnt, T, E, K,
                   (size_t)p->layers, (size_t)p->tg, p->aux_coef, 0, (float *)p->y, dlr);
    to_bf(dlr, p->yb, T * E, "rb dlr");
    free(dlr);
  } else if (ends(nm, "_aux")) {
    size_t E = (size_t)p->experts, K = (size_t)p->top_k, Tg = (size_t)p->tg;
    find(p->probs, Tg * E * 4, "aux probs"), find(p->idx, Tg * K * 4, "aux idx"), find(p->cnt, E * 4, "aux cnt");
    find(p->dbl, E * 8, "aux pe");
    fbr_aux_counts((float *)p->probs, (int32_t *)p->idx, Tg, E, K, (int32_t *)p->cnt, (double *)p->dbl);
  } else if (ends(nm, "_sumsq_part")) {
    /* the pair _sumsq_part + _sumsq_fin adds the sum of squares to acc[0]; here in the CPU path's order (train.c) */
    find(p->x, T * 4, "sumsq x"), find(p->acc, 8, "sumsq acc"), find(p->dbl, (size_t)p->nparts * 8, "sumsq parts");
    double *acc = (double *)p->acc;
    for (size_t i = 0; i < T; ++i)
      *acc += (double)((float *)p->x)[i] * (double)((float *)p->x)[i];
  } else if (ends(nm, "_sumsq_fin")) {
    find(p->acc, 8, "sumsq acc");
  } else if (ends(nm, "_embed_bwd")) {
    size_t V = T;
    find(p->idx, (V + 1) * 4, "eb off"), find(p->dg, V * D * 4, "eb dg");
    const int32_t *off = (int32_t *)p->idx, *pos = (int32_t *)p->idx2;
    if (off[V]) find(p->idx2, (size_t)off[V] * 4, "eb pos");
    for (size_t v = 0; v < V; ++v)
      for (size_t d = 0; d < D; ++d) {
        float s = 0.0f;
        for (int32_t q = off[v]; q < off[v + 1]; ++q)
          find(p->dy + ((size_t)pos[q] * D + d) * 4, 4, "eb dy"), s += ((float *)p->dy)[(size_t)pos[q] * D + d];
        ((float *)p->dg)[v * D + d] = s;
      }
  } else {
    fprintf(stderr, "MOCK: no emulation of %s\n", nm);
    abort();
  }
}
static void emu_router(const char *nm, const fb_kp_moe *p) {
  size_t T = (size_t)p->rows, E = (size_t)p->experts, K = (size_t)p->top_k;
  find(p->in, T * E * 4, "router in"), find(p->probs, T * E * 4, "router probs");
  find(p->topk_idx, T * K * 4, "router idx"), find(p->topk_w, T * K * 4, "router w");
  CHK(fb_router_ref((float *)p->in, T, (int)E, (int)K, (float *)p->probs, (int32_t *)p->topk_idx, (float *)p->topk_w));
}
static void emu_adamw(const fb_kernel_spec *k, const fb_kp_moe *p) {
  const char *nm = k->name;
  size_t R = (size_t)p->rows, C = (size_t)p->cols, n = R * C;
  if (k->q.format == FB_FMT_NVFP4) { /* adamw.cuh FB_WFMT 1: the new masters, and max |w| (NaN ignored) maxed into
                                        p->amax per expert (FB_AMAX 1: outer per expert) or per tensor */
    find(p->master, n * 4, "adamw w"), find(p->m, n * 4, "adamw m"), find(p->v, n * 4, "adamw v"), find(p->in, n * 4, "adamw g");
    const size_t ng = k->q.outer == FB_GRAN_EXPERT ? (size_t)p->experts : 1;
    find(p->amax, ng * 4, "adamw amax");
    fb_adamw_hparams h = {p->lr, p->b1, p->b2, p->eps, p->wd, p->bc1, p->bc2, p->gscale};
    CHK(fb_adamw_ref((float *)p->master, (float *)p->m, (float *)p->v, (float *)p->in, R, C, &h, NULL));
    const float *w = (const float *)p->master;
    float *am = (float *)p->amax;
    for (size_t i = 0; i < n; ++i) {
      float *a = &am[ng > 1 ? i / (n / ng) : 0], x = fabsf(w[i]);
      if (x > *a) *a = x; /* NaN compares false: ignored */
    }
    return;
  }
  if (k->q.format != FB_FMT_BF16) {
    fprintf(stderr, "MOCK: no emulation of %s (AdamW with a BF16 copy, or NVFP4's amax form, only)\n", nm);
    abort();
  }
  find(p->master, n * 4, "adamw w"), find(p->m, n * 4, "adamw m"), find(p->v, n * 4, "adamw v");
  find(p->in, n * 4, "adamw g"), find(p->out, n * 2, "adamw out");
  fb_adamw_hparams h = {p->lr, p->b1, p->b2, p->eps, p->wd, p->bc1, p->bc2, p->gscale};
  fb_adamw_next nx;
  memset(&nx, 0, sizeof nx);
  nx.q.format = FB_FMT_BF16, nx.experts = 1, nx.codes = (void *)p->out;
  CHK(fb_adamw_ref((float *)p->master, (float *)p->m, (float *)p->v, (float *)p->in, R, C, &h, &nx));
}
/* MOCK_POOL_ONLY=1: the host side's allocations alone, at shapes too large to compute here (bench_layer --pool-only at
   S1): fresh allocations are left untouched (no garbage fill, so the pages of an allocation nothing writes are never
   committed), memsets and device-to-device copies do nothing, and of the launches only the permutation's (whose row
   counts the host reads back to size what follows) and the router's run; every other kernel is skipped, so every
   output but the pool's accounting is meaningless. */
static int pool_only(void) {
  static int v = -1;
  if (v < 0) v = getenv("MOCK_POOL_ONLY") && *getenv("MOCK_POOL_ONLY") == '1';
  return v;
}
static int in_cluster_launch; /* cuLaunchKernelEx with a cluster of 2 is launching */
/* a tcgen05 variant launched as clusters of 2 (gen/templates.c's names): the CTA pair (_tc_m256..._c2) or B multicast
   (_tc_m128..._c2, two 1-CTA tiles sharing B); every other kernel, _tc_..._c1 included, is launched without a cluster */
static int cluster2_name(const char *nm) {
  const char *t = strstr(nm, "_tc_m");
  if (!t) return 0;
  for (const char *c = strstr(t, "_c2"); c; c = strstr(c + 1, "_c2"))
    if (!c[3] || c[3] == '_') return 1;
  return 0;
}
/* A fake clock for the timers (cuEventRecord / cuEventElapsedTime): MOCK_KERNEL_US="SUBSTR=US,SUBSTR=US,..." makes each
   launch of a kernel whose name contains SUBSTR (the first rule that matches) take US microseconds of it; other launches
   take none. Without it every elapsed time is 0. (tests/test_bench_layer.sh: fourbit tune's winners with chosen times.) */
static double mock_clock_us;
static double kernel_us(const char *nm) {
  const char *r = getenv("MOCK_KERNEL_US");
  while (r && *r) {
    const char *eq = strchr(r, '='), *end = strchr(r, ',');
    if (!end) end = r + strlen(r);
    if (!eq || eq > end) break;
    char sub[128];
    size_t n = (size_t)(eq - r) < sizeof sub - 1 ? (size_t)(eq - r) : sizeof sub - 1;
    memcpy(sub, r, n), sub[n] = 0;
    if (n && strstr(nm, sub)) return atof(eq + 1);
    r = *end ? end + 1 : end;
  }
  return 0;
}
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned sm,
                        CUstream s, void **a, void **e) {
  (void)gz;
  (void)by;
  (void)bz;
  (void)a;
  (void)e;
  ++nlaunch;
  on_stream(s);
  mock_clock_us += kernel_us((const char *)f);
  if (getenv("MOCK_V"))
    fprintf(stderr, "  launch %s grid %u x %u block %u smem %u\n", (char *)f, gx, gy, bx, sm);
  if (!gx || !gy || !bx || bx > 1024) {
    fprintf(stderr, "MOCK bad launch %s\n", (char *)f);
    abort();
  }
  const char *nm = (const char *)f;
  if (cluster2_name(nm) && !in_cluster_launch) { /* the tcgen05 pair and B multicast: clusters of 2 only (cuLaunchKernelEx) */
    fprintf(stderr, "MOCK: %s (a tcgen05 cluster-of-2 variant: CTA pair or B multicast) launched without its cluster of 2\n", nm);
    abort();
  }
  /* what the kernel is: its name's fields (gen/kname.c's parser, the generator's own naming authority) */
  fb_kernel_spec ks;
  char arch[16];
  size_t tail = 0;
  if (fb_kernel_parse(nm, &ks, arch, sizeof arch, &tail) != FB_OK) {
    fprintf(stderr, "MOCK: launch of %s: %s\n", nm, fb_errmsg());
    abort();
  }
  snprintf(ks.name, sizeof ks.name, "%s", nm);
  const fb_kernel_spec *k = &ks;
  if (k->op == FB_OP_PERMUTE && e) {
    fb_kp_moe *p = (fb_kp_moe *)e[1];
    if (p->pass != 3)
      return 0;
    if (!p->topk_idx) { /* the gather pass alone (runtime/experts_gpu.c's regroup): out row r = in row token_of[r], r below
                           offsets[experts]; p->rows: the input's rows */
      size_t b[3];
      fb_payload_planes(k->q.format, k->q.format == FB_FMT_NVFP4 && k->q.outer == FB_GRAN_TOKEN, p->cols, b);
      find(p->offsets, ((size_t)p->experts + 1) * 8, "gather rows");
      size_t n = (size_t)((long long *)p->offsets)[p->experts];
      find(p->token_of, n * 4, "gather map");
      const void *in[3] = {(void *)p->in, (void *)p->in_scales, (void *)p->in_outer};
      void *out[3] = {(void *)p->out, (void *)p->out_scales, (void *)p->out_outer};
      for (size_t r = 0; r < n; ++r)
        if (((int32_t *)p->token_of)[r] >= p->rows) {
          fprintf(stderr, "MOCK gather: row %zu takes input row %d of %lld\n", r, ((int32_t *)p->token_of)[r], p->rows);
          abort();
        }
      for (int q = 0; q < 3; ++q)
        if (b[q]) {
          find((unsigned long long)in[q], (size_t)p->rows * b[q], "gather in");
          find((unsigned long long)out[q], n * b[q], "gather out");
        }
      fb_permute_gather_ref(in, b, (size_t)p->rows, (int32_t *)p->token_of, n, out);
      return 0;
    }
    size_t T = p->rows, K = p->top_k, E = p->experts, total = 0, maxr = fb_permute_max_rows(T, K, E, p->tile);
    find(p->topk_idx, T * K * 4, "permute idx");
    find(p->counts, E * 4, "counts");
    find(p->offsets, (E + 1) * 8, "offsets");
    find(p->row_of, T * K * 4, "row_of");
    find(p->token_of, maxr * 4, "token_of");
    if (fb_permute_ref((int32_t *)p->topk_idx, T, K, E, p->tile, (int32_t *)p->counts, (long long *)p->offsets,
                       (int32_t *)p->row_of, (int32_t *)p->token_of, &total)) {
      fprintf(stderr, "MOCK permute: %s\n", fb_errmsg());
      abort();
    }
    size_t b[3];
    fb_payload_planes(k->q.format, k->q.format == FB_FMT_NVFP4 && k->q.outer == FB_GRAN_TOKEN, p->cols, b);
    const void *in[3] = {(void *)p->in, (void *)p->in_scales, (void *)p->in_outer};
    void *out[3] = {(void *)p->out, (void *)p->out_scales, (void *)p->out_outer};
    for (int q = 0; q < 3; ++q)
      if (b[q]) {
        find((unsigned long long)in[q], T * b[q], "permute in");
        find((unsigned long long)out[q], total * b[q], "permute out");
      }
    fb_permute_gather_ref(in, b, T, (int32_t *)p->token_of, total, out);
    return 0;
  }
  if (pool_only() && k->op != FB_OP_ROUTER) return 0;
  switch (k->op) {
  case FB_OP_GEMM_FWD13: case FB_OP_GEMM_FWD2: case FB_OP_GEMM_DGRAD2: case FB_OP_GEMM_WGRAD: case FB_OP_GEMM_DGRAD13:
  { /* an FP8 variant of an MXFP8 GEMM (the tag's _b0): B as MXFP8 codes and scales, not the BF16 copy */
    int fp8 = 0;
    for (const char *t = strstr(nm + tail, "_b0"); t && !fp8; t = strstr(t + 1, "_b0")) fp8 = t[3] == '_' || !t[3];
    if (fp8 && k->src.format != FB_FMT_MXFP8) {
      fprintf(stderr, "MOCK: %s: an FP8 (weights_bf16 0) GEMM of a non-MXFP8 spec\n", nm);
      abort();
    }
    /* a tcgen05 variant (gemm_sm100.cuh, the tag's _tc_): B as the quantized operand itself, MXFP8 or NVFP4 */
    if (strstr(nm + tail, "_tc_m")) fp8 = k->src.format == FB_FMT_MXFP8 ? 1 : k->src.format == FB_FMT_NVFP4 ? 2 : 0;
    emu_gemm(k, (const fb_kp_gemm *)a[0], fp8);
  }
    return 0;
  case FB_OP_AMAX: emu_amax(k, (const fb_kp_mem *)e[1]); return 0;
  case FB_OP_S2F6_Q: case FB_OP_S2F6_DQ: emu_s2f6(k, (const fb_kp_mem *)e[1]); return 0;
  case FB_OP_QUANT: case FB_OP_REQUANT: case FB_OP_BCOPY: case FB_OP_TCOPY: emu_mem(k, (const fb_kp_mem *)e[1]); return 0;
  case FB_OP_DENSE: emu_dense(nm, (const fb_kp_dense *)e[1]); return 0;
  case FB_OP_ROUTER: emu_router(nm, (const fb_kp_moe *)e[1]); return 0;
  case FB_OP_ADAMW: emu_adamw(k, (const fb_kp_moe *)e[1]); return 0;
  default: emu_moe(k, (const fb_kp_moe *)e[1]); return 0;
  }
}
/* a launch with attributes: the cluster dimension (runtime/gemm_host.c's clusters of 2) checked against the grid and the
   kernel's name (a tcgen05 _c2 variant: the CTA pair or B multicast), then computed as cuLaunchKernel computes it (by name) */
CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **a, void **e) {
  unsigned cx = 1, cy = 1, cz = 1;
  for (unsigned i = 0; i < c->numAttrs; ++i)
    if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
      cx = c->attrs[i].value.clusterDim.x, cy = c->attrs[i].value.clusterDim.y, cz = c->attrs[i].value.clusterDim.z;
    else {
      fprintf(stderr, "MOCK: cuLaunchKernelEx of %s: launch attribute %d not emulated\n", (char *)f, (int)c->attrs[i].id);
      abort();
    }
  if (!cx || !cy || !cz || c->gridDimX % cx || c->gridDimY % cy || c->gridDimZ % cz) {
    fprintf(stderr, "MOCK: cuLaunchKernelEx of %s: grid %u x %u x %u not a multiple of the cluster %u x %u x %u\n", (char *)f,
            c->gridDimX, c->gridDimY, c->gridDimZ, cx, cy, cz);
    abort();
  }
  if ((cx == 2 && cy == 1 && cz == 1) != cluster2_name((const char *)f)) {
    fprintf(stderr, "MOCK: cuLaunchKernelEx of %s with a cluster of %u x %u x %u (the tcgen05 _c2 variants, the CTA pair and B "
            "multicast, take 2 x 1 x 1; nothing else is cluster-launched)\n", (char *)f, cx, cy, cz);
    abort();
  }
  if (getenv("MOCK_V")) fprintf(stderr, "  launch (cluster %u) ", cx);
  in_cluster_launch = 1;
  CUresult r = cuLaunchKernel(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ, c->sharedMemBytes,
                              c->hStream, a, e);
  in_cluster_launch = 0;
  return r;
}
CUresult cuMemAlloc_v2(CUdeviceptr *d, size_t n) {
  char *p = malloc(n + 64);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!pool_only()) memset(p, 0xFF, n + 64); /* fresh device memory holds garbage: here NaN (BF16 / FP32) and -1 (int8 / int32) */
  A[nA].p = p;
  A[nA].n = n;
  nA++;
  *d = (CUdeviceptr)p;
  return 0;
}
CUresult cuMemFree_v2(CUdeviceptr d) {
  for (int i = 0; i < nA; ++i)
    if ((CUdeviceptr)A[i].p == d) {
      free(A[i].p);
      A[i].p = 0;
      return 0;
    }
  fprintf(stderr, "MOCK bad free\n");
  abort();
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t n) {
  ++nhtod;
  ++nlegacy;
  find(d, n, "HtoD");
  memcpy((void *)d, h, n);
  return 0;
}
CUresult cuMemcpyDtoH_v2(void *h, CUdeviceptr d, size_t n) {
  ++ndtoh;
  ++nlegacy;
  find(d, n, "DtoH");
  memcpy(h, (void *)d, n);
  return 0;
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr a, CUdeviceptr b, size_t n) {
  ++ndtod;
  ++nlegacy;
  find(a, n, "DtoD dst");
  find(b, n, "DtoD src");
  if (!pool_only()) memmove((void *)a, (void *)b, n);
  return 0;
}
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char c, size_t n) {
  ++nmemset;
  ++nlegacy;
  find(d, n, "memset");
  if (!pool_only()) memset((void *)d, c, n);
  return 0;
}
/* the stream forms: in order like everything here, counted on their stream */
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, CUstream s) {
  ++nhtod;
  on_stream(s);
  find(d, n, "HtoDAsync");
  memcpy((void *)d, h, n);
  return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, CUstream s) {
  ++ndtoh;
  on_stream(s);
  find(d, n, "DtoHAsync");
  memcpy(h, (void *)d, n);
  return 0;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr a, CUdeviceptr b, size_t n, CUstream s) {
  ++ndtod;
  on_stream(s);
  find(a, n, "DtoDAsync dst");
  find(b, n, "DtoDAsync src");
  if (!pool_only()) memmove((void *)a, (void *)b, n);
  return 0;
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char c, size_t n, CUstream s) {
  ++nmemset;
  on_stream(s);
  find(d, n, "memsetAsync");
  if (!pool_only()) memset((void *)d, c, n);
  return 0;
}
CUresult cuStreamSynchronize(CUstream s) {
  ++nsync;
  on_stream(s);
  return 0;
}
CUresult cuMemGetInfo_v2(size_t *f, size_t *t) {
  *f = *t = 1ull << 37;
  return 0;
}
CUresult cuEventCreate(CUevent *e, unsigned f) {
  (void)f;
  *e = (CUevent)calloc(1, sizeof(double));
  return *e ? 0 : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult cuEventRecord(CUevent e, CUstream s) {
  on_stream(s);
  if (e) *(double *)e = mock_clock_us; /* the fake clock (MOCK_KERNEL_US) */
  return e ? 0 : CUDA_ERROR_INVALID_HANDLE;
}
CUresult cuEventSynchronize(CUevent e) {
  (void)e;
  ++nsync;
  return 0;
}
CUresult mock_eet(float *m, CUevent a, CUevent b) __asm__("cuEventElapsedTime");
CUresult mock_eet(float *m, CUevent a, CUevent b) {
  if (!a || !b) return CUDA_ERROR_INVALID_HANDLE;
  *m = (float)((*(double *)b - *(double *)a) / 1000); /* the fake clock: 0 without MOCK_KERNEL_US */
  return 0;
}
CUresult cuEventDestroy_v2(CUevent e) {
  free(e);
  return 0;
}
/* The GPU expert layer's side streams (runtime/experts_gpu.c side_stream: the exchanges, the B copies): made and
   destroyed, counted; with MOCK_STREAMS set, a line at exit (tests/test_bench_layer.sh: which work went to a stream of
   its own) */
static long nscreate, nsdestroy;
CUresult cuStreamCreate(CUstream *s, unsigned f) {
  (void)f;
  *s = (CUstream)malloc(8);
  ++nscreate;
  return *s ? 0 : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult cuStreamDestroy_v2(CUstream s) {
  ++nsdestroy;
  free(s);
  return 0;
}
__attribute__((destructor)) static void mock_streams(void) {
  if (getenv("MOCK_STREAMS"))
    fprintf(stderr, "MOCK streams: %ld created, %ld destroyed, %d seen, %ld waits\n", nscreate, nsdestroy, nSS, nwaits);
}
/* libfourbit.so's stream fences and context release (lib/abi.c; everything here runs in order anyway) */
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned f) {
  (void)f;
  on_stream(s);
  ++nwaits;
  return e ? 0 : CUDA_ERROR_INVALID_HANDLE;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  (void)d;
  return 0;
}
CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
  (void)f;
  (void)a;
  (void)v;
  return 0;
}
CUresult cuTensorMapEncodeTiled(CUtensorMap *m, CUtensorMapDataType t, cuuint32_t r, void *g, const cuuint64_t *dims,
                                const cuuint64_t *str, const cuuint32_t *box, const cuuint32_t *es, CUtensorMapInterleave i,
                                CUtensorMapSwizzle sw, CUtensorMapL2promotion l, CUtensorMapFloatOOBfill o) {
  (void)l;
  size_t e = t == CU_TENSOR_MAP_DATA_TYPE_UINT8 ? 1 : 2;
  size_t need = (dims[1] - 1) * str[0] + dims[0] * e;
  find((unsigned long long)g, need, "tensor map");
  if (getenv("MOCK_V"))
    fprintf(stderr, "  tmap %llu x %llu (%zu-byte) box %u x %u\n", (unsigned long long)dims[0], (unsigned long long)dims[1], e,
            box[0], box[1]);
  /* the map as tests/emu/fb_tmap_rec.h lays it out (word 0 the global address, which emu_gemm reads), so that
     the functional model's TMA can load through a map runtime/gemm_host.c encoded; a map it refuses keeps only
     word 0 (the fake driver never refused one) */
  static const unsigned swb[] = {0, 32, 64, 128};
  uint64_t d5[5] = {0}, s4[4] = {0};
  for (cuuint32_t d = 0; d < r && d < 5; ++d) d5[d] = dims[d];
  for (cuuint32_t d = 0; d + 1 < r && d < 4; ++d) s4[d] = str[d];
  if (fbemu_tmap_encode(m, (unsigned)e, r, g, d5, s4, box, es, (unsigned)i, (unsigned)sw < 4 ? swb[sw] : 0,
                        o == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA)) {
    memset(m, 0, sizeof *m);
    *(unsigned long long *)m = (unsigned long long)g;
  }
  return 0;
}
CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *c) {
  ++n2d;
  for (size_t r = 0; r < c->Height; ++r) {
    find(c->dstDevice + r * c->dstPitch, c->WidthInBytes, "2D dst");
    find(c->srcDevice + r * c->srcPitch, c->WidthInBytes, "2D src");
    memmove((void *)(c->dstDevice + r * c->dstPitch), (void *)(c->srcDevice + r * c->srcPitch), c->WidthInBytes);
  }
  return 0;
}
CUresult cuGetExportTable(const void **t, const CUuuid *id) {
  (void)id;
  *t = 0;
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuGetProcAddress_v2(const char *s, void **p, int v, cuuint64_t f, CUdriverProcAddressQueryResult *r) {
  (void)s;
  (void)v;
  (void)f;
  *p = 0;
  if (r)
    *r = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}
/* Says that device memory is host memory here: runtime/comm.c then runs the device collectives (NCCL's on a GPU) over
 * its host mesh on the same pointers, so that N ranks of the GPU expert layer exchange payloads under this driver. */
int fbmock_device_memory_is_host(void) { return 1; }
