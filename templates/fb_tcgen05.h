/* fb_tcgen05.h — the descriptors of Blackwell's tcgen05 MMA (sm_100a, sm_103a), one definition for host C, C++ and
 * device code: the 32-bit instruction descriptor (the `idesc` operand of tcgen05.mma) of the plain and the
 * block-scaled kinds, the 64-bit shared-memory matrix descriptor (sm100's "version 1": not Hopper's wgmma
 * descriptor), and the byte layout of block scale factors in memory (128 rows x 4 k-blocks an atom of 512 bytes).
 * Encoders and decoders, so that the kernels (templates/), the generator and the functional model of the
 * instructions (tests/emu) read the same bits.
 *
 * Written from the PTX ISA's tables (tcgen05 "Instruction descriptor", "Shared memory descriptor", "Scale factor
 * layout"); checked against CUTLASS 4.2's bitfield unions and CuTe's layout functions by tests/cutlass/tcgen05_desc.cpp
 * (a test-only dependency, the nvidia-cutlass wheel, installed by the build) and against the values the fact sheet
 * printed (tests/test_tcgen05.c). No Blackwell GPU has run any of it: docs/hardware.md, "Blackwell". */
#ifndef FB_TCGEN05_H
#define FB_TCGEN05_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FB_TC_FN __host__ __device__ constexpr
#elif defined(__cplusplus)
#define FB_TC_FN constexpr
#else
#define FB_TC_FN static inline
#endif

#if defined(__CUDACC_RTC__) /* NVRTC has no <stdint.h>; the same types (a repeated typedef of one type is allowed) */
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#else
#include <stdint.h>
#endif

/* Operand format codes of the instruction descriptor (bits 7-9 A, 10-12 B), per kind. */
enum {
  FB_TC_F16 = 0, FB_TC_BF16 = 1, FB_TC_TF32 = 2,                  /* kind::f16 (F16, BF16), kind::tf32 */
  FB_TC_E4M3 = 0, FB_TC_E5M2 = 1, FB_TC_E2M3 = 3, FB_TC_E3M2 = 4, /* kind::f8f6f4, kind::mxf8f6f4 */
  FB_TC_E2M1 = 5,                                                 /* E2M1 in the f8f6f4 kinds */
  FB_TC_MXF4_E2M1 = 1                                             /* E2M1 in kind::mxf4 and kind::mxf4nvf4 */
};
/* Accumulator format (plain kinds, bits 4-5). */
enum { FB_TC_D_F16 = 0, FB_TC_D_F32 = 1, FB_TC_D_S32 = 2 };
/* Operand majorness (bits 15, 16): K-major (the only one for FP4 / FP6) or MN-major. */
enum { FB_TC_K_MAJOR = 0, FB_TC_MN_MAJOR = 1 };
/* Shared-memory layouts (descriptor bits 61-63). */
enum { FB_TC_SW_NONE = 0, FB_TC_SW128_BASE32B = 1, FB_TC_SW128 = 2, FB_TC_SW64 = 4, FB_TC_SW32 = 6 };

/* ---- the instruction descriptor ------------------------------------------------------------------------------- */
/* Plain kinds (f16, tf32, f8f6f4, i8): dense, no negation, no saturation, no .ws shift. M in {64, 128, 256} (the
 * field holds M >> 4), N a multiple of 8 (N >> 3). */
FB_TC_FN uint32_t fb_tc_idesc(int a_fmt, int b_fmt, int d_fmt, int m, int n, int a_major, int b_major) {
  return ((uint32_t)(d_fmt & 3) << 4) | ((uint32_t)(a_fmt & 7) << 7) | ((uint32_t)(b_fmt & 7) << 10) |
         ((uint32_t)(a_major & 1) << 15) | ((uint32_t)(b_major & 1) << 16) | ((uint32_t)((n >> 3) & 63) << 17) |
         ((uint32_t)((m >> 4) & 31) << 24);
}
/* Block-scaled kinds (mxf8f6f4, mxf4, mxf4nvf4): the scale type (bit 23: 0 UE4M3, 1 UE8M0), the scale-factor ids
 * (B bits 4-5, A bits 29-30: which byte / half-word of the TMEM scale word a K step reads) and the K size (bit 31:
 * 0 K = 64, 1 K = 96 on sm_103a's mxf4nvf4). */
FB_TC_FN uint32_t fb_tc_idesc_bs(int a_fmt, int b_fmt, int sf_ue8m0, int m, int n, int a_major, int b_major, int a_sf_id,
                                 int b_sf_id, int k96) {
  return ((uint32_t)(b_sf_id & 3) << 4) | ((uint32_t)(a_fmt & 7) << 7) | ((uint32_t)(b_fmt & 7) << 10) |
         ((uint32_t)(a_major & 1) << 15) | ((uint32_t)(b_major & 1) << 16) | ((uint32_t)((n >> 3) & 63) << 17) |
         ((uint32_t)(sf_ue8m0 & 1) << 23) | ((uint32_t)((m >> 4) & 31) << 24) | ((uint32_t)(a_sf_id & 3) << 29) |
         ((uint32_t)(k96 & 1) << 31);
}
/* Field readers (both forms; a field a form does not have reads what the other form keeps there). */
FB_TC_FN int fb_tc_idesc_a_fmt(uint32_t d) { return (int)((d >> 7) & 7); }
FB_TC_FN int fb_tc_idesc_b_fmt(uint32_t d) { return (int)((d >> 10) & 7); }
FB_TC_FN int fb_tc_idesc_d_fmt(uint32_t d) { return (int)((d >> 4) & 3); }
FB_TC_FN int fb_tc_idesc_b_sf_id(uint32_t d) { return (int)((d >> 4) & 3); }
FB_TC_FN int fb_tc_idesc_a_sf_id(uint32_t d) { return (int)((d >> 29) & 3); }
FB_TC_FN int fb_tc_idesc_a_major(uint32_t d) { return (int)((d >> 15) & 1); }
FB_TC_FN int fb_tc_idesc_b_major(uint32_t d) { return (int)((d >> 16) & 1); }
FB_TC_FN int fb_tc_idesc_n(uint32_t d) { return (int)((d >> 17) & 63) << 3; }
FB_TC_FN int fb_tc_idesc_m(uint32_t d) { return (int)((d >> 24) & 31) << 4; }
FB_TC_FN int fb_tc_idesc_sf_ue8m0(uint32_t d) { return (int)((d >> 23) & 1); }
FB_TC_FN int fb_tc_idesc_k96(uint32_t d) { return (int)((d >> 31) & 1); }
FB_TC_FN int fb_tc_idesc_sparse(uint32_t d) { return (int)((d >> 2) & 1); }
FB_TC_FN int fb_tc_idesc_negate(uint32_t d) { return (int)((d >> 13) & 3); } /* bit 0: A, bit 1: B */

/* ---- the shared-memory matrix descriptor ------------------------------------------------------------------------ */
/* Start address, leading and stride byte offsets in 16-byte units (14 bits each: addresses below 256 KiB), the
 * fixed "version" 1 in bits 46-47, the base offset (bits 49-51: 0 when the swizzle pattern starts on its repeat
 * boundary), the LBO mode (bit 52: 1 = LBO is an absolute address, sm_103a) and the layout (bits 61-63). */
FB_TC_FN uint64_t fb_tc_sdesc(uint32_t addr, uint32_t lbo, uint32_t sbo, int layout, int base_offset, int lbo_abs) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo & 0x3FFFF) >> 4) << 16) |
         ((uint64_t)((sbo & 0x3FFFF) >> 4) << 32) | ((uint64_t)1 << 46) | ((uint64_t)(base_offset & 7) << 49) |
         ((uint64_t)(lbo_abs & 1) << 52) | ((uint64_t)(layout & 7) << 61);
}
/* The descriptor's base offset belongs to the swizzle pattern, not to a start address: it cannot be told from an
   address alone, and every kernel passes 0, as CUTLASS does for aligned tiles (fb_tc_base_offset, which took
   (addr >> 7) & 7 and disagreed with CuTe inside aligned patterns, is gone, with its fb_tc_swizzle_repeat). */
FB_TC_FN uint32_t fb_tc_sdesc_addr(uint64_t d) { return (uint32_t)(d & 0x3FFF) << 4; }
FB_TC_FN uint32_t fb_tc_sdesc_lbo(uint64_t d) { return (uint32_t)((d >> 16) & 0x3FFF) << 4; }
FB_TC_FN uint32_t fb_tc_sdesc_sbo(uint64_t d) { return (uint32_t)((d >> 32) & 0x3FFF) << 4; }
FB_TC_FN int fb_tc_sdesc_version(uint64_t d) { return (int)((d >> 46) & 3); }
FB_TC_FN int fb_tc_sdesc_base_offset(uint64_t d) { return (int)((d >> 49) & 7); }
FB_TC_FN int fb_tc_sdesc_lbo_abs(uint64_t d) { return (int)((d >> 52) & 1); }
FB_TC_FN int fb_tc_sdesc_layout(uint64_t d) { return (int)((d >> 61) & 7); }
/* Whether a descriptor is one the hardware takes: version 1, a defined layout code, the reserved bits 0. */
FB_TC_FN int fb_tc_sdesc_valid(uint64_t d) {
  int l = fb_tc_sdesc_layout(d);
  return fb_tc_sdesc_version(d) == 1 && (d & 0x1FE10000C000C000ull) == 0 && l != 3 && l != 5 && l != 7;
}

/* ---- block scale factors in memory ------------------------------------------------------------------------------ */
/* The byte of the scale of row m, k-block kb (16 elements for NVFP4, 32 for MXFP8) in a matrix of `kblocks` k-blocks
 * a row, stored as 128-row x 4-k-block atoms of 512 bytes, the atoms K-fastest (the layout tcgen05.cp's 32x128b.warpx4
 * copies straight into TMEM, and cuBLAS's "128x4 swizzled" one): inside an atom, byte (m % 32) * 16 + (m / 32 % 4) * 4
 * + kb % 4. kblocks is rounded up to whole atoms. */
FB_TC_FN uint64_t fb_tc_sf_offset(uint64_t m, uint64_t kb, uint64_t kblocks) {
  return ((m / 128) * ((kblocks + 3) / 4) + kb / 4) * 512 + (m % 32) * 16 + (m / 32 % 4) * 4 + kb % 4;
}

#endif
