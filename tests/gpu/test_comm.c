/* test_comm.c — the NCCL backend of runtime/comm.h on the GPU: fb_comm_nccl_init (libnccl.so.2 by dlopen),
 * fb_comm_dev_alltoallv (grouped ncclSend/ncclRecv with uneven, odd byte counts per peer, self included) and
 * fb_comm_dev_allreduce_f32, on device buffers, checked element by element (#wrong), plus one timing of a
 * 256 MiB all-to-all-v. Build: make build/gpu/test_comm. Run:
 *   build/gpu/test_comm                                   one rank, one GPU (NCCL to itself)
 *   for r in 0 .. N-1: RANK=r WORLD_SIZE=N LOCAL_RANK=r MASTER_PORT=29500 NCCL_NVLS_ENABLE=0 build/gpu/test_comm &
 *                                                         N ranks, one GPU each (host mesh by TCP rendezvous, the
 *                                                         NCCL id broadcast over it)
 * Exit status 0 when nothing is wrong on this rank. */
#include "comm.h"
#include "fb_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(call) do { fb_status s_ = (call); if (s_ != FB_OK) { \
  fprintf(stderr, "test_comm: %s: %s\n", #call, fb_errmsg()); return 1; } } while (0)
#define CU(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { const char *m_ = "?"; fb_cu.GetErrorString(r_, &m_); \
  fprintf(stderr, "test_comm: %s: %s\n", #call, m_); return 1; } } while (0)

static unsigned char pat(int from, int to, size_t k) { return (unsigned char)(from * 31 + to * 7 + k * 13 + (k >> 8)); }

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(void) {
  fb_comm *c = NULL;
  CK(fb_comm_init_env(&c));
  int n = fb_comm_size(c), me = fb_comm_rank(c);
  CK(fb_cuda_load());
  CUdevice dev;
  CUcontext ctx;
  CU(fb_cu.Init(0));
  CU(fb_cu.DeviceGet(&dev, fb_comm_local_rank(c)));
  CU(fb_cu.DevicePrimaryCtxRetain(&ctx, dev));
  CU(fb_cu.CtxSetCurrent(ctx));
  CK(fb_comm_nccl_init(c));

  /* all-to-all-v: rank p sends (p + 1) * (q + 1) * 1000 + 3 bytes to rank q */
  size_t *a = malloc(4 * (size_t)n * sizeof *a), so = 0, ro = 0;
  size_t *sc = a, *sd = a + n, *rc = a + 2 * n, *rd = a + 3 * n;
  for (int q = 0; q < n; ++q) {
    sc[q] = (size_t)(me + 1) * (size_t)(q + 1) * 1000 + 3, sd[q] = so, so += sc[q];
    rc[q] = (size_t)(q + 1) * (size_t)(me + 1) * 1000 + 3, rd[q] = ro, ro += rc[q];
  }
  unsigned char *hs = malloc(so), *hr = malloc(ro);
  for (int q = 0; q < n; ++q)
    for (size_t k = 0; k < sc[q]; ++k) hs[sd[q] + k] = pat(me, q, k);
  CUdeviceptr ds, dr;
  CU(fb_cu.MemAlloc(&ds, so));
  CU(fb_cu.MemAlloc(&dr, ro));
  CU(fb_cu.MemcpyHtoD(ds, hs, so));
  CU(fb_cu.MemsetD8(dr, 0xEE, ro));
  CK(fb_comm_dev_alltoallv(c, (void *)(uintptr_t)ds, sc, sd, (void *)(uintptr_t)dr, rc, rd, NULL));
  CU(fb_cu.CtxSynchronize());
  CU(fb_cu.MemcpyDtoH(hr, dr, ro));
  long wrong_a = 0;
  for (int q = 0; q < n; ++q)
    for (size_t k = 0; k < rc[q]; ++k) wrong_a += hr[rd[q] + k] != pat(q, me, k);

  /* all-reduce: x_r[i] = (r + 1) * (i % 97): sums of small integers, exact in FP32 */
  size_t nf = (size_t)1 << 20;
  float *hx = malloc(nf * sizeof *hx);
  for (size_t i = 0; i < nf; ++i) hx[i] = (float)(me + 1) * (float)(i % 97);
  CUdeviceptr dx;
  CU(fb_cu.MemAlloc(&dx, nf * sizeof *hx));
  CU(fb_cu.MemcpyHtoD(dx, hx, nf * sizeof *hx));
  CK(fb_comm_dev_allreduce_f32(c, (float *)(uintptr_t)dx, nf, NULL));
  CU(fb_cu.CtxSynchronize());
  CU(fb_cu.MemcpyDtoH(hx, dx, nf * sizeof *hx));
  long wrong_r = 0;
  for (size_t i = 0; i < nf; ++i) wrong_r += hx[i] != (float)(n * (n + 1) / 2) * (float)(i % 97);

  /* timing: 256 MiB in all, split evenly over the peers */
  size_t tot = (size_t)256 << 20, per = tot / (size_t)n;
  CUdeviceptr ts, tr;
  CU(fb_cu.MemAlloc(&ts, tot));
  CU(fb_cu.MemAlloc(&tr, tot));
  for (int q = 0; q < n; ++q) sc[q] = rc[q] = per, sd[q] = rd[q] = (size_t)q * per;
  CK(fb_comm_dev_alltoallv(c, (void *)(uintptr_t)ts, sc, sd, (void *)(uintptr_t)tr, rc, rd, NULL)); /* warm-up */
  CU(fb_cu.CtxSynchronize());
  CK(fb_comm_barrier(c));
  double t0 = now();
  for (int it = 0; it < 10; ++it)
    CK(fb_comm_dev_alltoallv(c, (void *)(uintptr_t)ts, sc, sd, (void *)(uintptr_t)tr, rc, rd, NULL));
  CU(fb_cu.CtxSynchronize());
  double dt = (now() - t0) / 10;
  printf("test_comm: rank %d of %d: alltoallv %zu bytes sent, %zu received: %ld wrong; allreduce %zu floats: %ld wrong; "
         "256 MiB all-to-all-v %.3f ms (%.1f GB/s out of this rank)\n",
         me, n, so, ro, wrong_a, nf, wrong_r, dt * 1e3, (double)tot / dt / 1e9);
  fb_cu.MemFree(ds), fb_cu.MemFree(dr), fb_cu.MemFree(dx), fb_cu.MemFree(ts), fb_cu.MemFree(tr);
  free(a), free(hs), free(hr), free(hx);
  fb_comm_free(c);
  return wrong_a || wrong_r;
}
