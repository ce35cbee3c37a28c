/* tc_tile_mma.cuh — one output tile through the tcgen05 pipeline, written as CUDA C against templates/fb_tc_ops.h:
 * TMA loads of A and B into shared memory (one mbarrier, expect-tx), the scale factors (block-scaled kinds) copied
 * into shared memory by every thread and into TMEM by tcgen05.cp, MMAs issued by one elected thread and committed
 * to a second mbarrier, and the epilogue: each warp reads its lane quarter of the accumulator with tcgen05.ld
 * 32x32b.x32 and stores FP32 rows. The host (tests/test_tc_model.cpp) plans the loads, the descriptors and the
 * MMAs in fbt_tile_params, so that one kernel serves every (kind, M, N, majorness, swizzle) of the test grid and
 * a deliberately wrong descriptor is the host's change, not the kernel's. flags turn off one step of the protocol
 * each (the model must report it). 128 threads, cta_group::1; fbt_tile_mma_cg2_kernel below is the same for a CTA
 * pair (cta_group::2, M = 256, every kind; each CTA copies its own scale factors, the leader's tcgen05.cp.cta_group::2
 * moves both CTAs' into their TMEM).
 *
 * tests/test_tc_model.cpp runs it under the functional model (tests/emu/tc_model.h) and compiles it with NVRTC for
 * sm_100a and sm_103a; it has never run on a Blackwell GPU. */
#include "fb_tc_ops.h"

struct fbt_tile_tma {
  unsigned map, off; /* 0: A's map, 1: B's; the byte offset in shared memory */
  int x, y;          /* element coordinates of the box */
};
struct fbt_tile_mma {
  unsigned long long adesc, bdesc; /* start addresses relative to the dynamic shared memory's */
  unsigned idesc, sfa_col, sfb_col, acc;
};
struct fbt_tile_cp {
  unsigned off, col; /* a 512-byte scale-factor atom at this shared offset into TMEM columns col .. col + 3 */
};
enum {
  FBT_TILE_NO_MMA_WAIT = 1,    /* the epilogue does not wait on the MMAs' mbarrier */
  FBT_TILE_NO_PROXY_FENCE = 2, /* no fence.proxy.async after the threads write the scale factors */
  FBT_TILE_WRONG_QUARTER = 4,  /* warp w reads lane quarter (w + 1) % 4 */
  FBT_TILE_NO_FENCE_AFTER = 8, /* no tcgen05.fence::after_thread_sync after the wait */
  FBT_TILE_NO_DEALLOC = 16,    /* TMEM left allocated at exit */
  FBT_TILE_NO_TMA_WAIT = 32,   /* the MMAs issued before the TMA loads' mbarrier completed */
  FBT_TILE_RELOAD_EARLY = 64,  /* after the commit, A's first box loaded again without waiting for the MMAs */
  FBT_TILE_ISSUE_ODD = 128     /* the pair kernel: the odd CTA issues the MMAs (the even one still the copies) */
};
struct fbt_tile_params {
  fbt_tmap ta, tb;
  unsigned long long out, sf; /* out: FP32, m x n row-major; sf: sf_bytes copied to shared offset sf_off (the pair
                                 kernel: CTA r copies the sf_bytes at sf + r * sf_bytes) */
  unsigned kind;              /* 0 kind::f16, 1 kind::mxf8f6f4.block32, 2 kind::mxf4nvf4.block16, 3 kind::mxf4nvf4.block32 */
  unsigned m, n, tmem_cols, tx_bytes, sf_off, sf_bytes, flags;
  unsigned ntma, nmma, ncp;
  unsigned cta_y[2];          /* the 2-CTA kernel: CTA r's boxes of A / B start r * cta_y[map] rows further */
  fbt_tile_tma tma[32];
  fbt_tile_mma mma[8];
  fbt_tile_cp cp[16];
};

static __device__ __forceinline__ uint64_t fbt_tile_at(uint64_t desc, uint32_t base) {
  return desc + ((base & 0x3FFFF) >> 4); /* the start address field, moved to the shared memory's base */
}

extern "C" __global__ void __launch_bounds__(128) fbt_tile_mma_kernel(const __grid_constant__ fbt_tile_params p) {
  unsigned char *sm = fbt_smem();
  const uint32_t base = fbt_smem_addr(sm), bar_tma = base, bar_mma = base + 8, slot = base + 16;
  const unsigned tid = threadIdx.x, w = tid / 32, lane = tid % 32;
  if (tid == 0) {
    fbt_mbar_init(bar_tma, 1);
    fbt_mbar_init(bar_mma, 1);
    fbt_fence_mbar_init();
  }
  if (w == 0) fbt_alloc(slot, p.tmem_cols);
  for (unsigned i = tid; i < p.sf_bytes; i += 128) sm[p.sf_off + i] = ((const unsigned char *)p.sf)[i];
  if (!(p.flags & FBT_TILE_NO_PROXY_FENCE)) fbt_fence_proxy_async();
  fbt_fence_before();
  __syncthreads();
  fbt_fence_after();
  const uint32_t tmem = *(volatile uint32_t *)(sm + 16);
  if (w == 0 && fbt_elect_one()) {
    fbt_mbar_arrive_expect_tx(bar_tma, p.tx_bytes);
    for (unsigned i = 0; i < p.ntma; ++i)
      fbt_tma_load_2d(base + p.tma[i].off, p.tma[i].map ? (const void *)&p.tb : (const void *)&p.ta, p.tma[i].x, p.tma[i].y,
                      bar_tma);
    if (!(p.flags & FBT_TILE_NO_TMA_WAIT)) fbt_mbar_wait(bar_tma, 0);
    for (unsigned i = 0; i < p.ncp; ++i)
      fbt_cp_sf(tmem + p.cp[i].col, fb_tc_sdesc(base + p.cp[i].off, 16, 128, FB_TC_SW_NONE, 0, 0));
    for (unsigned i = 0; i < p.nmma; ++i) {
      const fbt_tile_mma &q = p.mma[i];
      const uint64_t a = fbt_tile_at(q.adesc, base), b = fbt_tile_at(q.bdesc, base);
      if (p.kind == 0)
        fbt_mma_f16(tmem, a, b, q.idesc, q.acc);
      else if (p.kind == 1)
        fbt_mma_mxf8(tmem, a, b, q.idesc, tmem + q.sfa_col, tmem + q.sfb_col, q.acc);
      else if (p.kind == 2)
        fbt_mma_nvf4(tmem, a, b, q.idesc, tmem + q.sfa_col, tmem + q.sfb_col, q.acc);
      else
        fbt_mma_mxf4(tmem, a, b, q.idesc, tmem + q.sfa_col, tmem + q.sfb_col, q.acc);
    }
    fbt_commit(bar_mma);
    if (p.flags & FBT_TILE_RELOAD_EARLY) { /* the next stage's load, into the buffer the MMAs may still read */
      fbt_mbar_arrive_expect_tx(bar_tma, p.tx_bytes);
      for (unsigned i = 0; i < p.ntma; ++i)
        fbt_tma_load_2d(base + p.tma[i].off, p.tma[i].map ? (const void *)&p.tb : (const void *)&p.ta, p.tma[i].x,
                        p.tma[i].y, bar_tma);
      fbt_mbar_wait(bar_tma, 1);
    }
  }
  __syncwarp();
  if (!(p.flags & FBT_TILE_NO_MMA_WAIT)) fbt_mbar_wait(bar_mma, 0);
  if (!(p.flags & FBT_TILE_NO_FENCE_AFTER)) fbt_fence_after();
  const unsigned q = p.flags & FBT_TILE_WRONG_QUARTER ? (w + 1) % 4 : w % 4;
  /* the accumulator's rows: M = 128, lane = row (data path D); M = 64, lanes 0-15 of each quarter (data path F) */
  const unsigned row = p.m == 64 ? 16 * q + lane : 32 * q + lane, live = p.m == 64 ? lane < 16 : 1;
  float *out = (float *)p.out;
  for (unsigned c0 = 0; c0 < p.n; c0 += 32) {
    uint32_t r[32];
    fbt_ld_32x32b_x32(tmem + ((32 * q) << 16) + c0, r);
    fbt_wait_ld();
    if (live)
      for (unsigned j = 0; j < 32 && c0 + j < p.n; ++j) out[row * p.n + c0 + j] = __uint_as_float(r[j]);
  }
  fbt_fence_before();
  __syncthreads();
  if (w == 0 && !(p.flags & FBT_TILE_NO_DEALLOC)) {
    fbt_dealloc(tmem, p.tmem_cols);
    fbt_relinquish();
  }
}

/* The pair: each CTA loads its half of A (128 rows) and of B (N/2 rows) into its own shared memory and copies its
 * scale factors (its own A rows', and all N of B's) into it, the peer tells the leader (an arrive on the leader's
 * barrier through mapa), the leader's elected thread copies the scale factors into both CTAs' TMEM
 * (tcgen05.cp.cta_group::2), issues the cta_group::2 MMAs (M = 256: rows 128.. land in the peer's TMEM) and commits
 * to both CTAs' barriers (multicast); each CTA's epilogue reads its own 128 rows. Launched as clusters of 2. */
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128) fbt_tile_mma_cg2_kernel(const __grid_constant__ fbt_tile_params p) {
  unsigned char *sm = fbt_smem();
  const uint32_t base = fbt_smem_addr(sm), bar_tma = base, bar_mma = base + 8, slot = base + 16, bar_ready = base + 24;
  const unsigned tid = threadIdx.x, w = tid / 32, lane = tid % 32, rank = fbt_cluster_rank();
  if (tid == 0) {
    fbt_mbar_init(bar_tma, 1);
    fbt_mbar_init(bar_mma, 1);
    fbt_mbar_init(bar_ready, 2); /* the leader's: both CTAs' operands are in */
    fbt_fence_mbar_init();
  }
  if (w == 0) fbt_alloc_cg2(slot, p.tmem_cols);
  for (unsigned i = tid; i < p.sf_bytes; i += 128) sm[p.sf_off + i] = ((const unsigned char *)p.sf)[rank * p.sf_bytes + i];
  fbt_fence_proxy_async();
  fbt_fence_before();
  fbt_cluster_sync(); /* the peer's barriers and TMEM exist */
  fbt_fence_after();
  const uint32_t tmem = *(volatile uint32_t *)(sm + 16);
  const unsigned issuer = p.flags & FBT_TILE_ISSUE_ODD ? 1 : 0;
  if (w == 0 && fbt_elect_one()) {
    fbt_mbar_arrive_expect_tx(bar_tma, p.tx_bytes);
    for (unsigned i = 0; i < p.ntma; ++i)
      fbt_tma_load_2d(base + p.tma[i].off, p.tma[i].map ? (const void *)&p.tb : (const void *)&p.ta, p.tma[i].x,
                      p.tma[i].y + (int)(rank * p.cta_y[p.tma[i].map]), bar_tma);
    fbt_mbar_wait(bar_tma, 0);
    fbt_mbar_arrive_cluster(fbt_mapa(bar_ready, 0));
    if (rank == 0) {
      fbt_mbar_wait(bar_ready, 0);
      fbt_fence_after();
      for (unsigned i = 0; i < p.ncp; ++i)
        fbt_cp_sf_cg2(tmem + p.cp[i].col, fb_tc_sdesc(base + p.cp[i].off, 16, 128, FB_TC_SW_NONE, 0, 0));
    }
    if (rank == issuer) {
      for (unsigned i = 0; i < p.nmma; ++i) {
        const fbt_tile_mma &q = p.mma[i];
        const uint64_t a = fbt_tile_at(q.adesc, base), b = fbt_tile_at(q.bdesc, base);
        if (p.kind == 0)
          fbt_mma_f16_cg2(tmem, a, b, q.idesc, q.acc);
        else if (p.kind == 1)
          fbt_mma_mxf8_cg2(tmem, a, b, q.idesc, tmem + q.sfa_col, tmem + q.sfb_col, q.acc);
        else if (p.kind == 2)
          fbt_mma_nvf4_cg2(tmem, a, b, q.idesc, tmem + q.sfa_col, tmem + q.sfb_col, q.acc);
        else
          fbt_mma_mxf4_cg2(tmem, a, b, q.idesc, tmem + q.sfa_col, tmem + q.sfb_col, q.acc);
      }
      fbt_commit_mc_cg2(bar_mma, (uint16_t)3);
    }
  }
  __syncwarp();
  fbt_mbar_wait(bar_mma, 0);
  fbt_fence_after();
  const unsigned q = w % 4, row = 128 * rank + 32 * q + lane;
  float *out = (float *)p.out;
  for (unsigned c0 = 0; c0 < p.n; c0 += 32) {
    uint32_t r[32];
    fbt_ld_32x32b_x32(tmem + ((32 * q) << 16) + c0, r);
    fbt_wait_ld();
    for (unsigned j = 0; j < 32 && c0 + j < p.n; ++j) out[row * p.n + c0 + j] = __uint_as_float(r[j]);
  }
  fbt_fence_before();
  fbt_cluster_sync();
  if (w == 0) {
    fbt_dealloc_cg2(tmem, p.tmem_cols);
    fbt_relinquish_cg2();
  }
}
