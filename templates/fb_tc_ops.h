/* fb_tc_ops.h — every Blackwell-only instruction the tcgen05 GEMM templates are to use, one device function per
 * instruction form (prefix fbt_), sm_100a and sm_103a (never sm_100f: the family targets reject .block16-free
 * spellings and some forms, docs/hardware.md): tensor memory, the MMAs, commit, the fences, tcgen05.cp / ld / st,
 * elect.sync, mbarriers, TMA tensor loads, cluster barriers and mapa. Through these wrappers and nothing else, so
 * that the functional model of the instructions can stand in for each one: built for the emulator (FB_EMU, which
 * tests/emu/fb_emu.h defines) each wrapper is a call into tests/emu/tc_model.h through fbemu_table->tc, a model
 * written from the PTX ISA (docs/tc_model.md says what it models and what not).
 *
 * The forms and their operands follow the PTX ISA (tcgen05.*, elect.sync, cp.async.bulk.tensor, mbarrier) as
 * docs/hardware.md's Blackwell fact sheet lists them: descriptors from fb_tcgen05.h, TMEM addresses (lane << 16 |
 * column), shared-memory addresses in the shared::cta window (32-bit; fbt_smem_addr), tensor maps as the 128-byte
 * CUtensorMap the host encoded (its generic address). tests/test_tc_ops.c compiles every wrapper with NVRTC for
 * sm_100a and sm_103a (ptxas accepts each form) and, where cuobjdump is found, reads the tcgen05 instructions back
 * from the SASS; tests/test_tc_model.cpp runs them under the model. None of it has run on a Blackwell GPU. */
#ifndef FB_TC_OPS_H
#define FB_TC_OPS_H

#include "fb_tcgen05.h"

/* A tensor map as a kernel parameter (__grid_constant__): the 128-byte CUtensorMap the host encoded (under the
 * model: tests/emu/tc_model.h's encode_tmap). The TMA wrappers take its address. */
struct __align__(64) fbt_tmap {
  unsigned long long v[16];
};

#if defined(FB_EMU)
/* Under the emulator: the same wrappers, each one call into the model (tests/emu/tc_model.h). The .sync.aligned
 * forms are called by every lane of the warp, as on the GPU; the model checks that. */
#define FBT_FN static inline
#define FBT_M (fbemu_table->tc)
FBT_FN unsigned char *fbt_smem(void) { return (unsigned char *)FBT_M->smem(); }
FBT_FN uint32_t fbt_smem_addr(const void *p) { return FBT_M->smem_addr(p); }
FBT_FN uint32_t fbt_cluster_rank(void) { return FBT_M->cluster_rank(); }
FBT_FN uint32_t fbt_mapa(uint32_t addr, uint32_t rank) { return FBT_M->mapa(addr, rank); }
FBT_FN void fbt_cluster_sync(void) { FBT_M->cluster_arrive(), FBT_M->cluster_wait(); }
FBT_FN void fbt_mbar_init(uint32_t bar, uint32_t count) { FBT_M->mbar_init(bar, count); }
FBT_FN void fbt_fence_mbar_init(void) { FBT_M->fence(FBEMU_FENCE_MBAR_INIT); }
FBT_FN void fbt_mbar_arrive(uint32_t bar) { FBT_M->mbar_arrive(bar, 1); }
FBT_FN void fbt_mbar_arrive_cluster(uint32_t bar) { FBT_M->mbar_arrive(bar, 1); }
FBT_FN void fbt_mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) { FBT_M->mbar_arrive_expect_tx(bar, bytes); }
FBT_FN uint32_t fbt_mbar_try_wait(uint32_t bar, uint32_t parity) { return (uint32_t)FBT_M->mbar_try_wait(bar, parity); }
FBT_FN void fbt_mbar_wait(uint32_t bar, uint32_t parity) {
  while (!fbt_mbar_try_wait(bar, parity)) {
  }
}
FBT_FN void fbt_fence_proxy_async(void) { FBT_M->fence(FBEMU_FENCE_PROXY_ASYNC); }
FBT_FN void fbt_tma_load_2d(uint32_t dst, const void *tmap, int x, int y, uint32_t bar) {
  int c[2] = {x, y};
  FBT_M->tma_load(dst, tmap, 2, c, bar, 0);
}
FBT_FN void fbt_tma_load_3d(uint32_t dst, const void *tmap, int x, int y, int z, uint32_t bar) {
  int c[3] = {x, y, z};
  FBT_M->tma_load(dst, tmap, 3, c, bar, 0);
}
FBT_FN void fbt_tma_load_2d_mc(uint32_t dst, const void *tmap, int x, int y, uint32_t bar, uint16_t cta_mask) {
  int c[2] = {x, y};
  FBT_M->tma_load(dst, tmap, 2, c, bar, cta_mask ? cta_mask : 0x10000u); /* an empty mask: reported */
}
FBT_FN void fbt_alloc(uint32_t smem_dst, uint32_t ncols) { FBT_M->alloc(1, smem_dst, ncols); }
FBT_FN void fbt_dealloc(uint32_t taddr, uint32_t ncols) { FBT_M->dealloc(1, taddr, ncols); }
FBT_FN void fbt_relinquish(void) { FBT_M->relinquish(1); }
FBT_FN void fbt_alloc_cg2(uint32_t smem_dst, uint32_t ncols) { FBT_M->alloc(2, smem_dst, ncols); }
FBT_FN void fbt_dealloc_cg2(uint32_t taddr, uint32_t ncols) { FBT_M->dealloc(2, taddr, ncols); }
FBT_FN void fbt_relinquish_cg2(void) { FBT_M->relinquish(2); }
#define FBT_MMA(name, kind, cg)                                                                                     \
  FBT_FN void name(uint32_t d, uint64_t adesc, uint64_t bdesc, uint32_t idesc, uint32_t accumulate) {                \
    FBT_M->mma(kind, cg, d, adesc, bdesc, idesc, 0, 0, accumulate != 0);                                            \
  }
#define FBT_MMA_BS(name, kind, cg)                                                                                  \
  FBT_FN void name(uint32_t d, uint64_t adesc, uint64_t bdesc, uint32_t idesc, uint32_t sfa, uint32_t sfb,            \
                   uint32_t accumulate) {                                                                              \
    FBT_M->mma(kind, cg, d, adesc, bdesc, idesc, sfa, sfb, accumulate != 0);                                        \
  }
FBT_MMA(fbt_mma_f16, FBEMU_MMA_F16, 1)
FBT_MMA(fbt_mma_f16_cg2, FBEMU_MMA_F16, 2)
FBT_MMA_BS(fbt_mma_mxf8, FBEMU_MMA_MXF8, 1)
FBT_MMA_BS(fbt_mma_mxf8_cg2, FBEMU_MMA_MXF8, 2)
FBT_MMA_BS(fbt_mma_nvf4, FBEMU_MMA_NVF4, 1)
FBT_MMA_BS(fbt_mma_nvf4_cg2, FBEMU_MMA_NVF4, 2)
FBT_MMA_BS(fbt_mma_mxf4, FBEMU_MMA_MXF4, 1)
FBT_MMA_BS(fbt_mma_mxf4_cg2, FBEMU_MMA_MXF4, 2)
#undef FBT_MMA
#undef FBT_MMA_BS
FBT_FN void fbt_commit(uint32_t mbar) { FBT_M->commit(1, mbar, 0); }
FBT_FN void fbt_commit_mc(uint32_t mbar, uint16_t cta_mask) { FBT_M->commit(1, mbar, cta_mask ? cta_mask : 0x10000u); }
FBT_FN void fbt_commit_mc_cg2(uint32_t mbar, uint16_t cta_mask) { FBT_M->commit(2, mbar, cta_mask ? cta_mask : 0x10000u); }
FBT_FN void fbt_fence_before(void) { FBT_M->fence(FBEMU_FENCE_BEFORE); }
FBT_FN void fbt_fence_after(void) { FBT_M->fence(FBEMU_FENCE_AFTER); }
FBT_FN void fbt_wait_ld(void) { FBT_M->wait(0); }
FBT_FN void fbt_wait_st(void) { FBT_M->wait(1); }
FBT_FN uint32_t fbt_elect_one(void) { return FBT_M->elect(0xffffffffu); }
FBT_FN void fbt_cp_sf(uint32_t taddr, uint64_t sdesc) { FBT_M->cp(FBEMU_CP_32X128B_WARPX4, 1, taddr, sdesc); }
FBT_FN void fbt_cp_sf_cg2(uint32_t taddr, uint64_t sdesc) { FBT_M->cp(FBEMU_CP_32X128B_WARPX4, 2, taddr, sdesc); }
FBT_FN void fbt_ld_32x32b_x32(uint32_t taddr, uint32_t (&r)[32]) { FBT_M->ld(FBEMU_LDST_32X32B, 32, taddr, r); }
FBT_FN void fbt_st_32x32b_x8(uint32_t taddr, const uint32_t (&r)[8]) { FBT_M->st(FBEMU_LDST_32X32B, 8, taddr, r); }
#undef FBT_M
#undef FBT_FN
#else

#define FBT_FN static __device__ __forceinline__

/* ---- shared memory, clusters, mbarriers, TMA ----------------------------------------------------------------------- */
/* The kernel's dynamic shared memory (the launch's shared-memory bytes), 1024-byte aligned for the swizzled layouts. */
extern __shared__ __align__(1024) unsigned char fbt_dyn_smem[];
FBT_FN unsigned char *fbt_smem(void) { return fbt_dyn_smem; }
FBT_FN uint32_t fbt_smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
FBT_FN uint32_t fbt_cluster_rank(void) {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
/* the shared::cluster address of the same offset in CTA `rank` of the cluster */
FBT_FN uint32_t fbt_mapa(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
FBT_FN void fbt_cluster_sync(void) {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
FBT_FN void fbt_mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
FBT_FN void fbt_fence_mbar_init(void) { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
FBT_FN void fbt_mbar_arrive(uint32_t bar) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory"); }
/* an arrive on a barrier of another CTA of the cluster (a shared::cluster address, fbt_mapa) */
FBT_FN void fbt_mbar_arrive_cluster(uint32_t bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(bar) : "memory");
}
FBT_FN void fbt_mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
FBT_FN uint32_t fbt_mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t ok;
  asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
               : "=r"(ok)
               : "r"(bar), "r"(parity)
               : "memory");
  return ok;
}
FBT_FN void fbt_mbar_wait(uint32_t bar, uint32_t parity) {
  while (!fbt_mbar_try_wait(bar, parity)) {
  }
}
/* generic-proxy writes to shared memory made visible to the async proxy (the MMA, tcgen05.cp, TMA stores) */
FBT_FN void fbt_fence_proxy_async(void) { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
/* TMA tiled loads: the box at element coordinates (x innermost) into dst; complete_tx of the box's bytes on bar */
FBT_FN void fbt_tma_load_2d(uint32_t dst, const void *tmap, int x, int y, uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
               "l"((unsigned long long)tmap), "r"(x), "r"(y), "r"(bar)
               : "memory");
}
FBT_FN void fbt_tma_load_3d(uint32_t dst, const void *tmap, int x, int y, int z, uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(dst),
               "l"((unsigned long long)tmap), "r"(x), "r"(y), "r"(z), "r"(bar)
               : "memory");
}
/* .multicast::cluster: the box lands at dst's offset in every CTA of cta_mask, each one's barrier at bar's offset */
FBT_FN void fbt_tma_load_2d_mc(uint32_t dst, const void *tmap, int x, int y, uint32_t bar, uint16_t cta_mask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
               "l"((unsigned long long)tmap), "r"(x), "r"(y), "r"(bar), "h"(cta_mask)
               : "memory");
}

/* ---- tensor memory ---------------------------------------------------------------------------------------------- */
/* One warp, the same ncols (a power of two in [32, 512]) in every lane; the TMEM address is written to smem_dst. */
FBT_FN void fbt_alloc(uint32_t smem_dst, uint32_t ncols) {
  asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;" ::"r"(smem_dst), "r"(ncols) : "memory");
}
FBT_FN void fbt_dealloc(uint32_t taddr, uint32_t ncols) {
  asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" ::"r"(taddr), "r"(ncols) : "memory");
}
FBT_FN void fbt_relinquish(void) { asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory"); }
FBT_FN void fbt_alloc_cg2(uint32_t smem_dst, uint32_t ncols) {
  asm volatile("tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 [%0], %1;" ::"r"(smem_dst), "r"(ncols) : "memory");
}
FBT_FN void fbt_dealloc_cg2(uint32_t taddr, uint32_t ncols) {
  asm volatile("tcgen05.dealloc.cta_group::2.sync.aligned.b32 %0, %1;" ::"r"(taddr), "r"(ncols) : "memory");
}
FBT_FN void fbt_relinquish_cg2(void) { asm volatile("tcgen05.relinquish_alloc_permit.cta_group::2.sync.aligned;" ::: "memory"); }

/* ---- the MMAs: D (TMEM) = A (smem descriptor) x B (smem descriptor) [+ D when accumulate], one thread issues ------ */
#define FBT_MMA(name, form)                                                                                         \
  FBT_FN void name(uint32_t d, uint64_t adesc, uint64_t bdesc, uint32_t idesc, uint32_t accumulate) {                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n" form " [%0], %1, %2, %3, p;\n}" ::"r"(d), "l"(adesc),      \
                 "l"(bdesc), "r"(idesc), "r"(accumulate)                                                               \
                 : "memory");                                                                                          \
  }
/* the block-scaled kinds read A's and B's scale factors from TMEM (tcgen05.cp put them there) */
#define FBT_MMA_BS(name, form)                                                                                      \
  FBT_FN void name(uint32_t d, uint64_t adesc, uint64_t bdesc, uint32_t idesc, uint32_t sfa, uint32_t sfb,            \
                   uint32_t accumulate) {                                                                              \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n" form " [%0], %1, %2, %3, [%4], [%5], p;\n}" ::"r"(d),     \
                 "l"(adesc), "l"(bdesc), "r"(idesc), "r"(sfa), "r"(sfb), "r"(accumulate)                               \
                 : "memory");                                                                                          \
  }
FBT_MMA(fbt_mma_f16, "tcgen05.mma.cta_group::1.kind::f16")                      /* BF16 x BF16 (the exact products) */
FBT_MMA(fbt_mma_f16_cg2, "tcgen05.mma.cta_group::2.kind::f16")
FBT_MMA_BS(fbt_mma_mxf8, "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.block32")   /* MXFP8, K = 32 */
FBT_MMA_BS(fbt_mma_mxf8_cg2, "tcgen05.mma.cta_group::2.kind::mxf8f6f4.block_scale.block32")
FBT_MMA_BS(fbt_mma_nvf4, "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block16")   /* NVFP4, K = 64 (96: idesc) */
FBT_MMA_BS(fbt_mma_nvf4_cg2, "tcgen05.mma.cta_group::2.kind::mxf4nvf4.block_scale.block16")
/* MXFP4 (E2M1, UE8M0 scales of 32 elements), K = 64 (96: idesc bit 31, sm_103a, cta_group::2) */
FBT_MMA_BS(fbt_mma_mxf4, "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block32")
FBT_MMA_BS(fbt_mma_mxf4_cg2, "tcgen05.mma.cta_group::2.kind::mxf4nvf4.block_scale.block32")
#undef FBT_MMA
#undef FBT_MMA_BS

/* ---- completion and ordering -------------------------------------------------------------------------------------- */
/* Arrive once on the mbarrier (shared::cluster address) when every earlier async tcgen05 op of this thread is done. */
FBT_FN void fbt_commit(uint32_t mbar) {
  asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];" ::"r"(mbar) : "memory");
}
/* .multicast::cluster: the commit arrives on the barrier at mbar's offset in every CTA of cta_mask (a 16-bit mask) */
FBT_FN void fbt_commit_mc(uint32_t mbar, uint16_t cta_mask) {
  asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%0], %1;" ::"r"(mbar),
               "h"(cta_mask)
               : "memory");
}
/* 2-CTA: the leader's commit arrives on the barrier at the same offset in every CTA of cta_mask */
FBT_FN void fbt_commit_mc_cg2(uint32_t mbar, uint16_t cta_mask) {
  asm volatile("tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%0], %1;" ::"r"(mbar),
               "h"(cta_mask)
               : "memory");
}
FBT_FN void fbt_fence_before(void) { asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory"); }
FBT_FN void fbt_fence_after(void) { asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory"); }
FBT_FN void fbt_wait_ld(void) { asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory"); }
FBT_FN void fbt_wait_st(void) { asm volatile("tcgen05.wait::st.sync.aligned;" ::: "memory"); }
/* one lane of the full warp: 1 in the elected lane, 0 in the others */
FBT_FN uint32_t fbt_elect_one(void) {
  uint32_t e = 0;
  asm volatile("{\n.reg .pred p;\n.reg .b32 r;\nelect.sync r|p, 0xffffffff;\nselp.u32 %0, 1, 0, p;\n}" : "=r"(e));
  return e;
}

/* ---- copies into and out of tensor memory -------------------------------------------------------------------------- */
/* A 32-row x 16-byte scale-factor atom (smem descriptor) into TMEM, copied to all four 32-lane quadrants. */
FBT_FN void fbt_cp_sf(uint32_t taddr, uint64_t sdesc) {
  asm volatile("tcgen05.cp.cta_group::1.32x128b.warpx4 [%0], %1;" ::"r"(taddr), "l"(sdesc) : "memory");
}
FBT_FN void fbt_cp_sf_cg2(uint32_t taddr, uint64_t sdesc) {
  asm volatile("tcgen05.cp.cta_group::2.32x128b.warpx4 [%0], %1;" ::"r"(taddr), "l"(sdesc) : "memory");
}
/* 32 lanes x 32 bits, 32 consecutive columns: lane l of the warp gets row (its quadrant's 32 lanes + l), columns
 * taddr .. taddr + 31, in r[0..31] (then fbt_wait_ld before reading r). */
FBT_FN void fbt_ld_32x32b_x32(uint32_t taddr, uint32_t (&r)[32]) {
  asm volatile(
      "tcgen05.ld.sync.aligned.32x32b.x32.b32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, "
      "%17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, [%32];"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7]), "=r"(r[8]),
        "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]), "=r"(r[14]), "=r"(r[15]), "=r"(r[16]),
        "=r"(r[17]), "=r"(r[18]), "=r"(r[19]), "=r"(r[20]), "=r"(r[21]), "=r"(r[22]), "=r"(r[23]), "=r"(r[24]),
        "=r"(r[25]), "=r"(r[26]), "=r"(r[27]), "=r"(r[28]), "=r"(r[29]), "=r"(r[30]), "=r"(r[31])
      : "r"(taddr)
      : "memory");
}
/* the same columns written back: 32 lanes x 32 bits x 8 columns from r[0..7] (then fbt_wait_st) */
FBT_FN void fbt_st_32x32b_x8(uint32_t taddr, const uint32_t (&r)[8]) {
  asm volatile("tcgen05.st.sync.aligned.32x32b.x8.b32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8};" ::"r"(taddr), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3]), "r"(r[4]), "r"(r[5]), "r"(r[6]), "r"(r[7])
               : "memory");
}

#undef FBT_FN
#endif /* FB_EMU */
#endif
