/* fb_tc_ops.h — every Blackwell-only instruction the tcgen05 GEMM templates are to use, one device function per
 * instruction form (prefix fbt_), sm_100a and sm_103a (never sm_100f: the family targets reject .block16-free
 * spellings and some forms, docs/hardware.md). Through these wrappers and nothing else, so that the functional model
 * of the instructions (tests/emu, issue 19) can stand in for each one; the model is not written yet, and a build for
 * the emulator stops here rather than run the PTX's absence silently.
 *
 * The forms and their operands follow the PTX ISA (tcgen05.*, elect.sync) as docs/hardware.md's Blackwell fact
 * sheet lists them: descriptors from fb_tcgen05.h, TMEM addresses (lane << 16 | column), shared-memory addresses in
 * the shared::cta window (32-bit). tests/test_tc_ops.c compiles every wrapper with NVRTC for sm_100a and sm_103a
 * (ptxas accepts each form) and, where cuobjdump is found, reads the tcgen05 instructions back from the SASS. None of
 * it has run on a Blackwell GPU. */
#ifndef FB_TC_OPS_H
#define FB_TC_OPS_H

#if defined(FB_EMU)
#error "fb_tc_ops.h: the tcgen05 functional model (tests/emu) is not written yet (issue 19)"
#endif

#include "fb_tcgen05.h"

#define FBT_FN static __device__ __forceinline__

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
#undef FBT_MMA
#undef FBT_MMA_BS

/* ---- completion and ordering -------------------------------------------------------------------------------------- */
/* Arrive once on the mbarrier (shared::cluster address) when every earlier async tcgen05 op of this thread is done. */
FBT_FN void fbt_commit(uint32_t mbar) {
  asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];" ::"r"(mbar) : "memory");
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
#endif
