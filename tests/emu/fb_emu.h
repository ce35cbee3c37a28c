/* fb_emu.h — CUDA's built-ins for generated kernels compiled as host C++ (tests/test_emu.cpp).
 * Without FBEMU_KERNEL: only the table the emulator hands to the kernels (fbemu_api).
 * With FBEMU_KERNEL (force-included before a generated source): __global__ & co. as nothing, threadIdx /
 * blockIdx / gridDim / blockDim, the vector types, and the warp intrinsics and __syncthreads as calls into the
 * emulator, which runs each CTA's threads as coroutines that meet at every intrinsic. Only what the templates
 * under test use is here; a missing built-in is a compile error, never a silent stand-in. */
#ifndef FB_EMU_H
#define FB_EMU_H

typedef struct { unsigned x, y, z; } fbemu_dim3;

/* The functional model of the Blackwell-only instructions (tests/emu/tc_model.h; issue 19), reached from
 * templates/fb_tc_ops.h's fbt_* wrappers under FB_EMU: one entry per instruction family. Addresses are the
 * emulated shared::cta / shared::cluster window (rank << 24 | offset) and TMEM addresses (lane << 16 | column).
 * Run under the functional model, never on a Blackwell GPU. */
enum { FBEMU_FENCE_BEFORE = 1, FBEMU_FENCE_AFTER, FBEMU_FENCE_PROXY_ASYNC, FBEMU_FENCE_MBAR_INIT };
enum { FBEMU_MMA_F16 = 1, FBEMU_MMA_MXF8, FBEMU_MMA_NVF4, FBEMU_MMA_MXF4 }; /* kind::f16, mxf8f6f4.block32, mxf4nvf4.block16,
                                                                   mxf4nvf4.block32 */
enum { FBEMU_CP_32X128B_WARPX4 = 1 };
enum { FBEMU_LDST_32X32B = 1 };
typedef struct fbemu_tc_api {
  void *(*smem)(void);                          /* this CTA's dynamic shared memory (shared::cta offset 0) */
  unsigned (*smem_addr)(const void *p);         /* __cvta_generic_to_shared: a pointer into it, as its address */
  unsigned (*cluster_rank)(void), (*cluster_size)(void);
  unsigned (*mapa)(unsigned addr, unsigned rank);
  void (*cluster_arrive)(void), (*cluster_wait)(void);
  void (*mbar_init)(unsigned bar, unsigned count);
  void (*mbar_arrive)(unsigned bar, unsigned count);          /* shared::cluster: the peer's barrier too */
  void (*mbar_arrive_expect_tx)(unsigned bar, unsigned bytes);
  int (*mbar_try_wait)(unsigned bar, unsigned parity);
  void (*fence)(int which);
  /* cp.async.bulk.tensor.{rank}d ... mbarrier::complete_tx::bytes; mask != 0: .multicast::cluster to those CTAs */
  void (*tma_load)(unsigned dst, const void *tmap, int rank, const int *coords, unsigned bar, unsigned mask);
  unsigned (*elect)(unsigned mask);
  void (*alloc)(int cg, unsigned dst, unsigned ncols);
  void (*dealloc)(int cg, unsigned taddr, unsigned ncols);
  void (*relinquish)(int cg);
  void (*mma)(int kind, int cg, unsigned d, unsigned long long adesc, unsigned long long bdesc, unsigned idesc,
              unsigned sfa, unsigned sfb, int accumulate);
  void (*cp)(int shape, int cg, unsigned taddr, unsigned long long sdesc);
  void (*commit)(int cg, unsigned bar, unsigned mask); /* mask != 0: .multicast::cluster */
  void (*ld)(int shape, int n, unsigned taddr, unsigned *r);
  void (*st)(int shape, int n, unsigned taddr, const unsigned *r);
  void (*wait)(int st); /* tcgen05.wait::ld (0) / ::st (1) */
} fbemu_tc_api;

typedef struct {
  fbemu_dim3 (*thread_idx)(void);
  fbemu_dim3 (*block_idx)(void);
  fbemu_dim3 (*grid_dim)(void);
  fbemu_dim3 (*block_dim)(void);
  /* every lane of mask deposits v; returns when all have, with the 32 deposits (lanes outside mask: 0) */
  void (*exchange)(unsigned mask, unsigned long long v, unsigned long long out[32]);
  void (*syncthreads)(void);
  const fbemu_tc_api *tc; /* the model, when the program links it (tests/emu/tc_model.h); else 0 */
} fbemu_api;

#ifdef FBEMU_KERNEL
#include <math.h>
#include <stdint.h>
#include <string.h>

/* the conversion instructions' models (templates/fb_cvt.h calls them in a kernel built with FB_EMU_SM = 100 / 103) */
#include "fb_cvt_model.h"

extern "C" {
__attribute__((weak)) fbemu_api *fbemu_table = 0; /* set by the emulator after dlopen */
}

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static /* CTAs run one after another (a cluster's share static ones: use fbt_smem()) */
#define __grid_constant__
#define __cluster_dims__(...)
#define __align__(n) alignas(n)
#ifndef FB_EMU
#define FB_EMU 1 /* templates/fb_tc_ops.h: the wrappers call the model */
#endif

#define threadIdx (fbemu_table->thread_idx())
#define blockIdx (fbemu_table->block_idx())
#define gridDim (fbemu_table->grid_dim())
#define blockDim (fbemu_table->block_dim())

struct alignas(8) uint2 { unsigned x, y; }; /* CUDA's alignments: a misaligned vector access is UB (checked) */
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(16) float4 { float x, y, z, w; };
static inline uint2 make_uint2(unsigned a, unsigned b) { return uint2{a, b}; }
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
static inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }

static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }

static inline unsigned atomicMax(unsigned *a, unsigned v) { unsigned o = *a; if (v > o) *a = v; return o; }
static inline unsigned atomicOr(unsigned *a, unsigned v) { unsigned o = *a; *a = o | v; return o; }
static inline unsigned atomicAdd(unsigned *a, unsigned v) { unsigned o = *a; *a = o + v; return o; }
static inline int atomicAdd(int *a, int v) { int o = *a; *a = o + v; return o; }

static inline unsigned fbemu_lane(void) { return threadIdx.x & 31u; }
template <class T> static inline unsigned long long fbemu_bits(T v) {
  static_assert(sizeof(T) <= 8, "a warp exchange moves up to 64 bits");
  unsigned long long u = 0;
  memcpy(&u, &v, sizeof v);
  return u;
}
template <class T> static inline T fbemu_val(unsigned long long u) {
  T v;
  memcpy(&v, &u, sizeof v);
  return v;
}
template <class T> static inline T __shfl_xor_sync(unsigned m, T v, int o, int = 32) {
  unsigned long long a[32];
  fbemu_table->exchange(m, fbemu_bits(v), a);
  return fbemu_val<T>(a[(fbemu_lane() ^ (unsigned)o) & 31u]);
}
template <class T> static inline T __shfl_sync(unsigned m, T v, int src, int = 32) {
  unsigned long long a[32];
  fbemu_table->exchange(m, fbemu_bits(v), a);
  return fbemu_val<T>(a[(unsigned)src & 31u]);
}
template <class T> static inline T __shfl_up_sync(unsigned m, T v, unsigned d, int = 32) {
  unsigned long long a[32];
  fbemu_table->exchange(m, fbemu_bits(v), a);
  unsigned l = fbemu_lane();
  return l >= d ? fbemu_val<T>(a[l - d]) : v;
}
template <class T> static inline unsigned __match_any_sync(unsigned m, T v) {
  unsigned long long a[32], b = fbemu_bits(v);
  fbemu_table->exchange(m, b, a);
  unsigned r = 0;
  for (int i = 0; i < 32; ++i)
    if ((m >> i & 1u) && a[i] == b) r |= 1u << i;
  return r;
}
static inline unsigned __ballot_sync(unsigned m, int p) {
  unsigned long long a[32];
  fbemu_table->exchange(m, p != 0, a);
  unsigned r = 0;
  for (int i = 0; i < 32; ++i)
    if ((m >> i & 1u) && a[i]) r |= 1u << i;
  return r;
}
static inline int __any_sync(unsigned m, int p) { return __ballot_sync(m, p) != 0; }
static inline int __all_sync(unsigned m, int p) { return __ballot_sync(m, p) == m; }
static inline unsigned __reduce_max_sync(unsigned m, unsigned v) {
  unsigned long long a[32];
  fbemu_table->exchange(m, v, a);
  unsigned r = 0;
  for (int i = 0; i < 32; ++i)
    if ((m >> i & 1u) && (unsigned)a[i] > r) r = (unsigned)a[i];
  return r;
}
static inline unsigned __reduce_min_sync(unsigned m, unsigned v) {
  unsigned long long a[32];
  fbemu_table->exchange(m, v, a);
  unsigned r = 0xFFFFFFFFu;
  for (int i = 0; i < 32; ++i)
    if ((m >> i & 1u) && (unsigned)a[i] < r) r = (unsigned)a[i];
  return r;
}
static inline void __syncwarp(unsigned m = 0xFFFFFFFFu) {
  unsigned long long a[32];
  fbemu_table->exchange(m, 0, a);
}
static inline void __syncthreads(void) { fbemu_table->syncthreads(); }
static inline size_t __cvta_generic_to_shared(const void *p) { return fbemu_table->tc->smem_addr(p); }
#endif /* FBEMU_KERNEL */
#endif
