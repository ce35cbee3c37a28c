/* test_gemm_sm100.cpp — templates/gemm_sm100.cuh, the generator's tcgen05 GEMM family (Blackwell), on the CPU under the
 * functional model of the tcgen05 / TMA / mbarrier instructions (tests/emu/tc_model.h). One build per variant class the
 * generator keeps (operands BF16 / MXFP8 / NVFP4 x epilogue: FP32, BF16, SwiGLU, SwiGLU backward, S2F6 with and without
 * RHT-32, the wgrad; 32-, 64- and 128-byte swizzled stage rows; NVFP4 outer scales per row / expert and per tensor), each
 * run on grouped problems with uneven experts (an empty one, partial 128-row blocks; in the wgrad an expert with no rows)
 * by fewer persistent CTAs than tiles, and checked; NVFP4's K = 96 form (FB_MMA_K 96, tile_k 768, the absolute-LBO split
 * of the 48-byte chunks that cross a 128-byte row) 1-CTA and pair, run as sm_103a (tc::set_arch), at K a multiple of 768
 * and at K that is not (a partial last K tile: S1's 5120 and 2048, and 1120, 544, 512, 256):
 *   - the FP32 result bit for bit against a reference in the model's documented order (each MMA's K products exact,
 *     summed in double, rounded once to FP32; FP32 adds across MMAs), and within NUMERICS.md's GEMM tolerance of the FP64
 *     product (1e-5 BF16, 1e-4 block-scaled);
 *   - every fused output bit for bit against the CPU epilogue (runtime/ops.c, numerics.c, fb_moe.h) of that FP32 result.
 * Broken builds (FB_TEST_BREAK: a missing wait or fence, a wrong scale-factor id, a wrong swizzle; K = 96: a wrong
 * absolute LBO, a wrong scale-factor id, the relative mode across a row, the form run as sm_100a; a partial last K tile
 * with its last MMA left out or its k-blocks past K scaled 1.0 instead of 0) must be reported by
 * the model or fail the check. The same sources compile with NVRTC for sm_100a and sm_103a. It has never run on a
 * Blackwell GPU: what is checked is the kernels against the model, and the model against the PTX ISA as written in
 * tests/emu/tc_model.h (docs/tc_model.md). Run from the repository root. */
#define FBEMU_KERNEL
#include "emu/fb_emu.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <vector>

extern "C" {
#include <cmocka.h>
}
#include "fb_error.h"
#include "fourbit.h"

#include "emu/emu_core.h"
#include "emu/tc_model.h"
#include "fb_gemm.h"
#include "fb_tc_ops.h" /* once, outside the kernels' namespaces */
#include "fb_formats.h"
#include "fb_moe.h"

/* one build per class: its FB_* as gen/templates.c's gemm_defines and the variant's parameters set them, then
   tests/emu/gemm_sm100_class.h (the template, and every class macro undefined for the next) */
#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 0
#define FB_MODE 0
#define FB_TILE_N 128
#define FB_TILE_K 64
#define FB_STAGES 3
#define FB_KERNEL k_bf16_f32
namespace bf16_f32 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 0
#define FB_MODE 0
#define FB_OUT_BF16 1
#define FB_TILE_N 64
#define FB_TILE_K 128
#define FB_STAGES 2
#define FB_KERNEL k_bf16_bf16
namespace bf16_bf16 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 0
#define FB_MODE 1
#define FB_TILE_N 128
#define FB_TILE_K 64
#define FB_STAGES 3
#define FB_KERNEL k_bf16_wgrad
namespace bf16_wgrad {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 0
#define FB_MODE 0
#define FB_OUT_BF16 1
#define FB_SWIGLU 2
#define FB_TILE_N 64
#define FB_TILE_K 64
#define FB_STAGES 4
#define FB_KERNEL k_bf16_swiglubwd
namespace bf16_swiglubwd {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 2
#define FB_MODE 0
#define FB_TILE_N 256
#define FB_TILE_K 128
#define FB_STAGES 2
#define FB_KERNEL k_mx_f32
namespace mx_f32 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 2
#define FB_MODE 0
#define FB_OUT_BF16 1
#define FB_TILE_N 192
#define FB_TILE_K 64
#define FB_STAGES 4
#define FB_KERNEL k_mx_bf16
namespace mx_bf16 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 2
#define FB_MODE 1
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_KERNEL k_mx_wgrad
namespace mx_wgrad {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 2
#define FB_MODE 0
#define FB_OUT_BF16 1
#define FB_SWIGLU 1
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_KERNEL k_mx_swiglu
namespace mx_swiglu {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 2
#define FB_MODE 0
#define FB_OUT_BF16 1
#define FB_SWIGLU 2
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_KERNEL k_mx_swiglubwd
namespace mx_swiglubwd {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 2
#define FB_MODE 0
#define FB_S2F6 1
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_KERNEL k_mx_s2f6
namespace mx_s2f6 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 1
#define FB_MODE 0
#define FB_A_OUTER 1
#define FB_B_OUTER 1
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_KERNEL k_nv_f32
namespace nv_f32 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 1
#define FB_MODE 0
#define FB_A_OUTER 1
#define FB_B_OUTER 1
#define FB_OUT_BF16 1
#define FB_SWIGLU 1
#define FB_TILE_N 256
#define FB_TILE_K 64
#define FB_STAGES 4
#define FB_KERNEL k_nv_swiglu
namespace nv_swiglu {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 1
#define FB_MODE 0
#define FB_A_OUTER 2
#define FB_B_OUTER 2
#define FB_S2F6 1
#define FB_RHT 1
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_KERNEL k_nv_s2f6
namespace nv_s2f6 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 0
#define FB_MODE 0
#define FB_TILE_N 128
#define FB_TILE_K 64
#define FB_STAGES 3
#define FB_TEST_BREAK 1
#define FB_KERNEL k_brk1
/* broken builds (FB_TEST_BREAK): the model must report 1-3; 4 (a wrong scale-factor id) and 5 (B's descriptor with the
   wrong swizzle) load or multiply the wrong values, which the check must catch */
namespace brk1 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 0
#define FB_MODE 0
#define FB_TILE_N 128
#define FB_TILE_K 64
#define FB_STAGES 3
#define FB_TEST_BREAK 2
#define FB_KERNEL k_brk2
namespace brk2 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 0
#define FB_MODE 0
#define FB_TILE_N 128
#define FB_TILE_K 64
#define FB_STAGES 3
#define FB_TEST_BREAK 3
#define FB_KERNEL k_brk3
namespace brk3 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 0
#define FB_MODE 0
#define FB_TILE_N 128
#define FB_TILE_K 64
#define FB_STAGES 3
#define FB_TEST_BREAK 5
#define FB_KERNEL k_brk5
namespace brk5 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 2
#define FB_MODE 0
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_TEST_BREAK 4
#define FB_KERNEL k_brk4
namespace brk4 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 256
#define FB_CLUSTER 2
#define FB_KIND 0
#define FB_MODE 0
#define FB_TILE_N 128
#define FB_TILE_K 64
#define FB_STAGES 3
#define FB_KERNEL k_p_bf16_f32
/* the 2-CTA classes: tile_m 256 on a CTA pair (cta_group::2, M = 256; launched as clusters of 2) */
namespace p_bf16_f32 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 256
#define FB_CLUSTER 2
#define FB_KIND 0
#define FB_MODE 0
#define FB_OUT_BF16 1
#define FB_TILE_N 32
#define FB_TILE_K 128
#define FB_STAGES 2
#define FB_KERNEL k_p_bf16_bf16
namespace p_bf16_bf16 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 256
#define FB_CLUSTER 2
#define FB_KIND 0
#define FB_MODE 0
#define FB_OUT_BF16 1
#define FB_SWIGLU 2
#define FB_TILE_N 64
#define FB_TILE_K 64
#define FB_STAGES 4
#define FB_KERNEL k_p_bf16_swiglubwd
namespace p_bf16_swiglubwd {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 256
#define FB_CLUSTER 2
#define FB_KIND 2
#define FB_MODE 1
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_KERNEL k_p_mx_wgrad
namespace p_mx_wgrad {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 256
#define FB_CLUSTER 2
#define FB_KIND 2
#define FB_MODE 0
#define FB_OUT_BF16 1
#define FB_SWIGLU 1
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_KERNEL k_p_mx_swiglu
namespace p_mx_swiglu {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 256
#define FB_CLUSTER 2
#define FB_KIND 2
#define FB_MODE 0
#define FB_OUT_BF16 1
#define FB_TILE_N 192
#define FB_TILE_K 64
#define FB_STAGES 4
#define FB_KERNEL k_p_mx_bf16
namespace p_mx_bf16 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 256
#define FB_CLUSTER 2
#define FB_KIND 1
#define FB_MODE 0
#define FB_A_OUTER 1
#define FB_B_OUTER 1
#define FB_TILE_N 256
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_KERNEL k_p_nv_f32
namespace p_nv_f32 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 256
#define FB_CLUSTER 2
#define FB_KIND 1
#define FB_MODE 0
#define FB_A_OUTER 2
#define FB_B_OUTER 2
#define FB_S2F6 1
#define FB_RHT 1
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_KERNEL k_p_nv_s2f6
namespace p_nv_s2f6 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 256
#define FB_CLUSTER 2
#define FB_KIND 2
#define FB_MODE 0
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_TEST_BREAK 6
#define FB_KERNEL k_pbrk6
/* broken pair builds: 6 B's scales in the even CTA only, 7 the MMA issuer not waiting for the odd CTA's stage (pfull) */
namespace pbrk6 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 256
#define FB_CLUSTER 2
#define FB_KIND 2
#define FB_MODE 0
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_TEST_BREAK 7
#define FB_KERNEL k_pbrk7
namespace pbrk7 {
#include "emu/gemm_sm100_class.h"
}

/* K = 96 (FB_MMA_K 96: NVFP4 on sm_103a, run as such: tc::set_arch(103)): tile_k 768, 8 MMAs a stage, two of them split
   across 128-byte swizzle rows by the absolute-LBO mode; 1-CTA and the pair (tile_n 192 there: B's scale words 8
   columns apart) */
#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 1
#define FB_MODE 0
#define FB_MMA_K 96
#define FB_A_OUTER 1
#define FB_B_OUTER 1
#define FB_TILE_N 128
#define FB_TILE_K 768
#define FB_STAGES 2
#define FB_KERNEL k_nv96_f32
namespace nv96_f32 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 1
#define FB_MODE 0
#define FB_MMA_K 96
#define FB_A_OUTER 2
#define FB_B_OUTER 2
#define FB_OUT_BF16 1
#define FB_TILE_N 64
#define FB_TILE_K 768
#define FB_STAGES 2
#define FB_KERNEL k_nv96_bf16
namespace nv96_bf16 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 256
#define FB_CLUSTER 2
#define FB_KIND 1
#define FB_MODE 0
#define FB_MMA_K 96
#define FB_A_OUTER 1
#define FB_B_OUTER 1
#define FB_TILE_N 192
#define FB_TILE_K 768
#define FB_STAGES 2
#define FB_KERNEL k_p_nv96_f32
namespace p_nv96_f32 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 256
#define FB_CLUSTER 2
#define FB_KIND 1
#define FB_MODE 0
#define FB_MMA_K 96
#define FB_A_OUTER 1
#define FB_B_OUTER 1
#define FB_OUT_BF16 1
#define FB_SWIGLU 1
#define FB_TILE_N 128
#define FB_TILE_K 768
#define FB_STAGES 2
#define FB_KERNEL k_p_nv96_swiglu
namespace p_nv96_swiglu {
#include "emu/gemm_sm100_class.h"
}

/* broken K = 96 builds: 9 a crossing MMA's absolute LBO at its own row, 10 the scale-factor id 0 where 2 (both load or
   scale the wrong values: the check must catch them), 11 the crossing MMAs in the relative mode (reported); a partial
   last K tile: 12 the MMA holding K's end left out, 13 (the pair) its k-blocks past K scaled 1.0, not 0 (the stage's
   bytes there are an older stage's or the poison, never loaded: the check must catch both) */
#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 1
#define FB_MODE 0
#define FB_MMA_K 96
#define FB_TILE_N 128
#define FB_TILE_K 768
#define FB_STAGES 2
#define FB_TEST_BREAK 9
#define FB_KERNEL k_brk9
namespace brk9 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 256
#define FB_CLUSTER 2
#define FB_KIND 1
#define FB_MODE 0
#define FB_MMA_K 96
#define FB_TILE_N 128
#define FB_TILE_K 768
#define FB_STAGES 2
#define FB_TEST_BREAK 10
#define FB_KERNEL k_pbrk10
namespace pbrk10 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 1
#define FB_MODE 0
#define FB_MMA_K 96
#define FB_TILE_N 128
#define FB_TILE_K 768
#define FB_STAGES 2
#define FB_TEST_BREAK 11
#define FB_KERNEL k_brk11
namespace brk11 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 1
#define FB_MODE 0
#define FB_MMA_K 96
#define FB_TILE_N 128
#define FB_TILE_K 768
#define FB_STAGES 2
#define FB_TEST_BREAK 12
#define FB_KERNEL k_brk12
namespace brk12 {
#include "emu/gemm_sm100_class.h"
}

/* B multicast (tile_m 128, cluster 2): two 1-CTA tiles of one expert and N block, rows 128 apart, each CTA loading half
   of B's rows and multicasting it into both CTAs' stages (launched as clusters of 2) */
#define FB_TILE_M 128
#define FB_CLUSTER 2
#define FB_KIND 0
#define FB_MODE 0
#define FB_TILE_N 128
#define FB_TILE_K 64
#define FB_STAGES 3
#define FB_KERNEL k_mc_bf16_f32
namespace mc_bf16_f32 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 2
#define FB_KIND 0
#define FB_MODE 0
#define FB_OUT_BF16 1
#define FB_TILE_N 32
#define FB_TILE_K 128
#define FB_STAGES 2
#define FB_KERNEL k_mc_bf16_bf16
namespace mc_bf16_bf16 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 2
#define FB_KIND 0
#define FB_MODE 0
#define FB_OUT_BF16 1
#define FB_SWIGLU 2
#define FB_TILE_N 64
#define FB_TILE_K 32
#define FB_STAGES 4
#define FB_KERNEL k_mc_bf16_swiglubwd
namespace mc_bf16_swiglubwd {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 2
#define FB_KIND 2
#define FB_MODE 1
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_KERNEL k_mc_mx_wgrad
namespace mc_mx_wgrad {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 2
#define FB_KIND 2
#define FB_MODE 0
#define FB_OUT_BF16 1
#define FB_SWIGLU 1
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_KERNEL k_mc_mx_swiglu
namespace mc_mx_swiglu {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 2
#define FB_KIND 1
#define FB_MODE 0
#define FB_A_OUTER 1
#define FB_B_OUTER 1
#define FB_TILE_N 256
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_KERNEL k_mc_nv_f32
namespace mc_nv_f32 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 2
#define FB_KIND 1
#define FB_MODE 0
#define FB_A_OUTER 2
#define FB_B_OUTER 2
#define FB_S2F6 1
#define FB_RHT 1
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_KERNEL k_mc_nv_s2f6
namespace mc_nv_s2f6 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 2
#define FB_KIND 1
#define FB_MODE 0
#define FB_MMA_K 96
#define FB_A_OUTER 1
#define FB_B_OUTER 1
#define FB_TILE_N 128
#define FB_TILE_K 768
#define FB_STAGES 2
#define FB_KERNEL k_mc_nv96_f32
namespace mc_nv96_f32 {
#include "emu/gemm_sm100_class.h"
}

/* the rest of the 1-CTA classes' kinds and epilogues with B multicast (the same tiles as theirs) */
#define FB_TILE_M 128
#define FB_CLUSTER 2
#define FB_KIND 0
#define FB_MODE 1
#define FB_TILE_N 128
#define FB_TILE_K 64
#define FB_STAGES 3
#define FB_KERNEL k_mc_bf16_wgrad
namespace mc_bf16_wgrad {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 2
#define FB_KIND 2
#define FB_MODE 0
#define FB_TILE_N 256
#define FB_TILE_K 128
#define FB_STAGES 2
#define FB_KERNEL k_mc_mx_f32
namespace mc_mx_f32 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 2
#define FB_KIND 2
#define FB_MODE 0
#define FB_OUT_BF16 1
#define FB_TILE_N 192
#define FB_TILE_K 64
#define FB_STAGES 4
#define FB_KERNEL k_mc_mx_bf16
namespace mc_mx_bf16 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 2
#define FB_KIND 2
#define FB_MODE 0
#define FB_OUT_BF16 1
#define FB_SWIGLU 2
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_KERNEL k_mc_mx_swiglubwd
namespace mc_mx_swiglubwd {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 2
#define FB_KIND 2
#define FB_MODE 0
#define FB_S2F6 1
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_KERNEL k_mc_mx_s2f6
namespace mc_mx_s2f6 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 2
#define FB_KIND 1
#define FB_MODE 0
#define FB_A_OUTER 1
#define FB_B_OUTER 1
#define FB_OUT_BF16 1
#define FB_SWIGLU 1
#define FB_TILE_N 256
#define FB_TILE_K 64
#define FB_STAGES 4
#define FB_KERNEL k_mc_nv_swiglu
namespace mc_nv_swiglu {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 2
#define FB_KIND 1
#define FB_MODE 0
#define FB_MMA_K 96
#define FB_A_OUTER 2
#define FB_B_OUTER 2
#define FB_OUT_BF16 1
#define FB_TILE_N 64
#define FB_TILE_K 768
#define FB_STAGES 2
#define FB_KERNEL k_mc_nv96_bf16
namespace mc_nv96_bf16 {
#include "emu/gemm_sm100_class.h"
}

/* broken B-multicast builds: 14 the CTA mask naming this CTA only, 15 the stage released by this CTA's commit only (no
   remote empty-barrier arrive), 16 the expect-tx of this CTA's own bytes only, 17 a CTA mask beyond the cluster, 18 no
   producer tail (the peer's last commits may reach an exited CTA); 8 (the pair) a CTA barrier before the dealloc */
#define FB_TILE_M 128
#define FB_CLUSTER 2
#define FB_KIND 2
#define FB_MODE 0
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_TEST_BREAK 14
#define FB_KERNEL k_mcbrk14
namespace mcbrk14 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 2
#define FB_KIND 2
#define FB_MODE 0
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_TEST_BREAK 15
#define FB_KERNEL k_mcbrk15
namespace mcbrk15 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 2
#define FB_KIND 2
#define FB_MODE 0
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_TEST_BREAK 16
#define FB_KERNEL k_mcbrk16
namespace mcbrk16 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 2
#define FB_KIND 2
#define FB_MODE 0
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_TEST_BREAK 17
#define FB_KERNEL k_mcbrk17
namespace mcbrk17 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 2
#define FB_KIND 2
#define FB_MODE 0
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_TEST_BREAK 18
#define FB_KERNEL k_mcbrk18
namespace mcbrk18 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 256
#define FB_CLUSTER 2
#define FB_KIND 1
#define FB_MODE 0
#define FB_MMA_K 96
#define FB_TILE_N 128
#define FB_TILE_K 768
#define FB_STAGES 2
#define FB_TEST_BREAK 13
#define FB_KERNEL k_pbrk13
namespace pbrk13 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 256
#define FB_CLUSTER 2
#define FB_KIND 0
#define FB_MODE 0
#define FB_TILE_N 128
#define FB_TILE_K 64
#define FB_STAGES 3
#define FB_TEST_BREAK 8
#define FB_KERNEL k_pbrk8
namespace pbrk8 {
#include "emu/gemm_sm100_class.h"
}

/* classes the shipped plans use that the lists above lacked (the eighteenth session's audit): BF16 SwiGLU, MXFP8
   RHT-32 + S2F6 (the MXFP8 w2 forward), NVFP4 BF16 rows at K = 64, the pair's NVFP4 SwiGLU (S1's w13 forward),
   MXFP8 SwiGLU backward / RHT-32 + S2F6 / FP32, BF16 wgrad, and K = 96 RHT-32 + S2F6 (sm_103a's w2 forward) and
   one-CTA SwiGLU */
#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 0
#define FB_MODE 0
#define FB_OUT_BF16 1
#define FB_SWIGLU 1
#define FB_TILE_N 128
#define FB_TILE_K 64
#define FB_STAGES 3
#define FB_KERNEL k_bf16_swiglu
namespace bf16_swiglu {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 2
#define FB_MODE 0
#define FB_S2F6 1
#define FB_RHT 1
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_KERNEL k_mx_s2f6_rht
namespace mx_s2f6_rht {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 1
#define FB_MODE 0
#define FB_A_OUTER 1
#define FB_B_OUTER 1
#define FB_OUT_BF16 1
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_KERNEL k_nv_bf16
namespace nv_bf16 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 256
#define FB_CLUSTER 2
#define FB_KIND 1
#define FB_MODE 0
#define FB_A_OUTER 1
#define FB_B_OUTER 1
#define FB_OUT_BF16 1
#define FB_SWIGLU 1
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_KERNEL k_p_nv_swiglu
namespace p_nv_swiglu {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 256
#define FB_CLUSTER 2
#define FB_KIND 2
#define FB_MODE 0
#define FB_OUT_BF16 1
#define FB_SWIGLU 2
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_KERNEL k_p_mx_swiglubwd
namespace p_mx_swiglubwd {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 256
#define FB_CLUSTER 2
#define FB_KIND 2
#define FB_MODE 0
#define FB_S2F6 1
#define FB_RHT 1
#define FB_TILE_N 128
#define FB_TILE_K 128
#define FB_STAGES 3
#define FB_KERNEL k_p_mx_s2f6_rht
namespace p_mx_s2f6_rht {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 256
#define FB_CLUSTER 2
#define FB_KIND 2
#define FB_MODE 0
#define FB_TILE_N 256
#define FB_TILE_K 128
#define FB_STAGES 2
#define FB_KERNEL k_p_mx_f32
namespace p_mx_f32 {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 256
#define FB_CLUSTER 2
#define FB_KIND 0
#define FB_MODE 1
#define FB_TILE_N 128
#define FB_TILE_K 64
#define FB_STAGES 3
#define FB_KERNEL k_p_bf16_wgrad
namespace p_bf16_wgrad {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 1
#define FB_MODE 0
#define FB_MMA_K 96
#define FB_A_OUTER 2
#define FB_B_OUTER 2
#define FB_S2F6 1
#define FB_RHT 1
#define FB_TILE_N 128
#define FB_TILE_K 768
#define FB_STAGES 2
#define FB_KERNEL k_nv96_s2f6_rht
namespace nv96_s2f6_rht {
#include "emu/gemm_sm100_class.h"
}

#define FB_TILE_M 128
#define FB_CLUSTER 1
#define FB_KIND 1
#define FB_MODE 0
#define FB_MMA_K 96
#define FB_A_OUTER 1
#define FB_B_OUTER 1
#define FB_OUT_BF16 1
#define FB_SWIGLU 1
#define FB_TILE_N 128
#define FB_TILE_K 768
#define FB_STAGES 2
#define FB_KERNEL k_nv96_swiglu
namespace nv96_swiglu {
#include "emu/gemm_sm100_class.h"
}

namespace tc = fbemu::tc;

namespace {
uint64_t rs = 0x1234567887654321ull;
unsigned rnd() {
  rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
  return (unsigned)(rs >> 11);
}
double unif() { return ((rnd() & 0xFFFFFF) + 0.5) / 16777216.0; }
float gauss() { return (float)(sqrt(-2 * log(unif())) * cos(6.283185307179586 * unif())); }

enum Epi { E_F32, E_BF16, E_SWIGLU, E_SWIGLU_BWD, E_S2F6, E_S2F6_RHT };
const char *epi_name[] = {"FP32", "BF16", "SwiGLU", "SwiGLU bwd", "S2F6", "RHT-32 + S2F6"};
const char *kind_name[] = {"BF16", "NVFP4", "MXFP8"};

struct Class {
  const char *name;
  int kind, mode, epi, tile_n, tile_k, stages, outer; /* outer (NVFP4): 1 per row / expert, 2 per tensor */
  void (*kernel)(fb_kp_gemm);
  int pair; /* cluster 2, the grid 2 x the shape's clusters: 1 tile_m 256 on a CTA pair; 2 two tile_m 128 CTAs, B multicast */
  int k96;  /* FB_MMA_K 96 (NVFP4, sm_103a): K = 96 MMAs, run as sm_103a (1: as sm_100a, where the model must report it) */
  int K[2] = {0, 0}; /* K = 96: the two shapes' K (0: 1536 and 768, multiples of tile_k) */
};
struct Shape {
  int N, K, M, grid;       /* mode 0: N, K; mode 1: M, N (K from the rows) */
  std::vector<int> rows;   /* per expert */
};

const unsigned RHT_SIGNS = 0x9D2C5680u;

/* one run of class c on shape s: *bad the outputs that differ; returns the model's report (NULL: it ran) */
const char *run_class(const Class &c, const Shape &s, long *bad, double *rel_out) {
  const int E = (int)s.rows.size(), mode = c.mode, kind = c.kind;
  std::vector<long long> off(E + 1, 0);
  for (int e = 0; e < E; ++e) off[e + 1] = off[e] + s.rows[e];
  const long long R = off[E];
  const int N = s.N, M = mode ? s.M : 0, K = mode ? 0 : s.K;
  /* logical operands, K-major: A ar x ak, B br x ak */
  const size_t ar = mode ? (size_t)M : (size_t)R, ak = mode ? (size_t)R : (size_t)K, br = mode ? (size_t)N : (size_t)E * N;
  const int blk = kind == 1 ? 16 : 32;
  const size_t rowb = kind == 1 ? ak / 2 : kind == 2 ? ak : ak * 2;
  std::vector<unsigned char> A(ar * rowb + 16), B(br * rowb + 16), sfa(ar * ak / blk + 16), sfb(br * ak / blk + 16);
  auto code = [&](unsigned char *p) {
    if (kind == 1) *p = (unsigned char)(rnd() & 0xFF); /* two E2M1 codes */
    else if (kind == 2) {
      unsigned v;
      do v = rnd() & 0xFF;
      while ((v & 0x7F) == 0x7F);
      *p = (unsigned char)v;
    } else {
      uint16_t h = fb_bf16_from_f32(gauss() * (float)(1 << (rnd() % 4)));
      memcpy(p, &h, 2);
    }
  };
  const size_t es = kind ? 1 : 2;
  for (size_t i = 0; i < ar * rowb; i += es) code(&A[i]);
  for (size_t i = 0; i < br * rowb; i += es) code(&B[i]);
  for (auto &x : sfa) x = (unsigned char)(kind == 1 ? 0x20 + rnd() % 0x30 : 122 + rnd() % 10);
  for (auto &x : sfb) x = (unsigned char)(kind == 1 ? 0x20 + rnd() % 0x30 : 122 + rnd() % 10);
  /* NVFP4's outer scales: per row / per expert, or one per tensor ([0]; NaN where a per-row index would read) */
  std::vector<float> ao(ar + 1), bo(E + 1);
  for (size_t i = 0; i < ar; ++i) ao[i] = c.outer == 2 && i ? NAN : 0.5f + (float)unif();
  for (int e = 0; e < E; ++e) bo[e] = c.outer == 2 && e ? NAN : 0.25f + (float)unif();
  auto val = [&](const std::vector<unsigned char> &X, const std::vector<unsigned char> &S, size_t r, size_t k) -> double {
    if (kind == 1) return (double)fb_e2m1_decode((uint8_t)(X[r * rowb + k / 2] >> (4 * (k % 2)))) * fb_e4m3_decode(S[r * ak / 16 + k / 16]);
    if (kind == 2) return (double)fb_e4m3_decode(X[r * ak + k]) * fb_e8m0_decode(S[r * ak / 32 + k / 32]);
    uint16_t h;
    memcpy(&h, &X[(r * ak + k) * 2], 2);
    return fb_bf16_to_f32(h);
  };
  /* the FP32 result in the model's order and the FP64 product, with the outer scales */
  const size_t nout = mode ? (size_t)E * M * N : (size_t)R * N;
  std::vector<float> Y(nout);
  std::vector<double> Y64(nout);
  const int kmma = c.k96 ? 96 : kind == 1 ? 64 : kind == 2 ? 32 : 16;
  std::vector<double> Ad(ar * ak), Bd(br * ak); /* the operands decoded once (K = 5120 runs) */
  for (size_t r = 0; r < ar; ++r)
    for (size_t k = 0; k < ak; ++k) Ad[r * ak + k] = val(A, sfa, r, k);
  for (size_t r = 0; r < br; ++r)
    for (size_t k = 0; k < ak; ++k) Bd[r * ak + k] = val(B, sfb, r, k);
  for (int e = 0; e < E; ++e) {
    const long long r0 = mode ? 0 : off[e], r1 = mode ? M : off[e + 1];
    for (long long r = r0; r < r1; ++r)
      for (int n = 0; n < N; ++n) {
        const size_t arow = (size_t)r, brow = mode ? (size_t)n : (size_t)e * N + n;
        const size_t k0 = mode ? (size_t)off[e] : 0, k1 = mode ? (size_t)off[e + 1] : (size_t)K;
        float acc = 0;
        double x64 = 0;
        for (size_t kb = k0; kb < k1; kb += kmma) { /* K = 96: the last chunk shorter where 96 does not divide K */
          double s0 = 0;
          for (size_t k = kb; k < kb + kmma && k < k1; ++k) s0 += Ad[arow * ak + k] * Bd[brow * ak + k];
          acc = kb > k0 ? acc + (float)s0 : (float)s0, x64 += s0;
        }
        float so = 1.0f;
        if (kind == 1) so = ao[c.outer == 2 ? 0 : r] * bo[c.outer == 2 ? 0 : e];
        const size_t o = mode ? ((size_t)e * M + r) * N + n : (size_t)r * N + n;
        Y[o] = acc * so, Y64[o] = x64 * so;
      }
  }
  /* H for the SwiGLU backward: rows x 2N BF16 */
  std::vector<uint16_t> H(c.epi == E_SWIGLU_BWD ? (size_t)R * 2 * N : 1);
  for (auto &h : H) h = fb_bf16_from_f32(gauss());
  /* the outputs, poisoned */
  const size_t ob = c.epi == E_SWIGLU ? (size_t)R * (N / 2) * 2 : c.epi == E_SWIGLU_BWD ? (size_t)R * 2 * N * 2
                  : c.epi == E_BF16 ? nout * 2 : c.epi >= E_S2F6 ? nout : nout * 4;
  std::vector<unsigned char> out(ob + 16, 0xFF), aux(c.epi == E_SWIGLU ? (size_t)R * N * 2 + 16 : 16, 0xFF), osf(nout / 32 + 16, 0xFF);
  fb_kp_gemm p;
  memset(&p, 0, sizeof p);
  /* the maps runtime/gemm_host.c encodes for this family: boxes of min(row bytes, 128) bytes, swizzled by as many */
  const int trb = fb_gemm_tc_row_bytes(kind, c.tile_k), sw = trb < 128 ? trb : 128;
  const uint64_t inner = rowb / es;
  uint64_t da[2] = {inner, (uint64_t)(ar ? ar : 1)}, db[2] = {inner, (uint64_t)br}, sa[1] = {rowb}, sb[1] = {rowb};
  /* a CTA's boxes: A's 128 rows; B's tile_n rows, tile_n / 2 with SwiGLU (gate, up) or on a pair (each CTA its half) */
  uint32_t ba[2] = {(uint32_t)(sw / es), 128},
           bb[2] = {(uint32_t)(sw / es), (uint32_t)(c.epi == E_SWIGLU || c.pair ? c.tile_n / 2 : c.tile_n)}; /* (multicast: each CTA its half) */
  if (const char *e = tc::encode_tmap(&p.ta, (unsigned)es, 2, A.data(), da, sa, ba, NULL, 0, (unsigned)sw, 0)) return e;
  if (const char *e = tc::encode_tmap(&p.tb, (unsigned)es, 2, B.data(), db, sb, bb, NULL, 0, (unsigned)sw, 0)) return e;
  p.out = (unsigned long long)(uintptr_t)out.data(), p.offsets = (unsigned long long)(uintptr_t)off.data();
  p.a_sf = (unsigned long long)(uintptr_t)sfa.data(), p.b_sf = (unsigned long long)(uintptr_t)sfb.data();
  p.a_outer = kind == 1 ? (unsigned long long)(uintptr_t)ao.data() : 0, p.b_outer = kind == 1 ? (unsigned long long)(uintptr_t)bo.data() : 0;
  p.rows = R, p.experts = E, p.M = M, p.N = N, p.K = K, p.signs = RHT_SIGNS;
  p.aux = c.epi == E_SWIGLU ? (unsigned long long)(uintptr_t)aux.data() : c.epi == E_SWIGLU_BWD ? (unsigned long long)(uintptr_t)H.data() : 0;
  p.out_sf = (unsigned long long)(uintptr_t)osf.data();
  fbemu_table = &fbemu::api;
  const unsigned smem = (unsigned)fb_gemm_tc_smem_total(kind, c.pair == 1 ? 256 : 128, c.tile_n, c.tile_k, c.stages);
  void (*kern)(fb_kp_gemm) = c.kernel;
  const unsigned cl = c.pair ? 2 : 1;
  if (c.k96) tc::set_arch(c.k96 == 1 ? 103 : 100);
  const char *lerr = tc::launch((unsigned)s.grid * cl, 1, 192, cl, smem, [&p, kern] { kern(p); });
  tc::set_arch(100);
  if (lerr && strstr(lerr, "deadlock") && *tc::deadlock_detail()) { /* the barrier the deadlock waits on */
    static std::string d;
    d = std::string(lerr) + ": " + tc::deadlock_detail();
    return d.c_str();
  }
  if (lerr) return lerr;
  /* the FP32 result against FP64 */
  double num = 0, den = 0;
  for (size_t i = 0; i < nout; ++i) num += ((double)Y[i] - Y64[i]) * ((double)Y[i] - Y64[i]), den += Y64[i] * Y64[i];
  *rel_out = den > 0 ? sqrt(num / den) : 0;
  /* the outputs against the CPU epilogue of Y, bit for bit */
  long nb = 0;
  if (c.epi == E_F32) {
    nb = 0;
    for (size_t i = 0; i < nout; ++i) nb += memcmp(&Y[i], &out[4 * i], 4) != 0;
  } else if (c.epi == E_BF16) {
    for (size_t i = 0; i < nout; ++i) {
      uint16_t g;
      memcpy(&g, &out[2 * i], 2);
      nb += g != fb_bf16_from_f32(Y[i]);
    }
  } else if (c.epi == E_SWIGLU) { /* H = bf16(Y) (gate | up) and A = SwiGLU(H) (fb_swiglu_fwd_ref) */
    const size_t f = (size_t)N / 2;
    std::vector<uint16_t> h((size_t)R * N + 1), a((size_t)R * f + 1);
    for (size_t i = 0; i < (size_t)R * N; ++i) h[i] = fb_bf16_from_f32(Y[i]);
    if (R && fb_swiglu_fwd_ref(h.data(), (size_t)R, f, a.data()) != FB_OK) fail_msg("fb_swiglu_fwd_ref: %s", fb_errmsg());
    for (size_t i = 0; i < (size_t)R * N; ++i) nb += memcmp(&h[i], &aux[2 * i], 2) != 0;
    for (size_t i = 0; i < (size_t)R * f; ++i) nb += memcmp(&a[i], &out[2 * i], 2) != 0;
  } else if (c.epi == E_SWIGLU_BWD) { /* dH = [dg | du] from bf16(dA) and H (fb_moe.h) */
    for (long long r = 0; r < R; ++r)
      for (int n = 0; n < N; ++n) {
        float dg, du;
        fbo_swiglu_bwd(fb_bf16_to_f32(H[(size_t)r * 2 * N + n]), fb_bf16_to_f32(H[(size_t)r * 2 * N + N + n]),
                       fb_bf16_to_f32(fb_bf16_from_f32(Y[(size_t)r * N + n])), &dg, &du);
        const uint16_t wg = fb_bf16_from_f32(dg), wu = fb_bf16_from_f32(du);
        nb += memcmp(&wg, &out[2 * ((size_t)r * 2 * N + n)], 2) != 0;
        nb += memcmp(&wu, &out[2 * ((size_t)r * 2 * N + N + n)], 2) != 0;
      }
  } else { /* the combine payload (fb_s2f6_quantize) */
    std::vector<int8_t> q(nout + 1);
    std::vector<uint8_t> e8(nout / 32 + 1);
    if (R && fb_s2f6_quantize(Y.data(), (size_t)R, (size_t)N, c.epi == E_S2F6_RHT, RHT_SIGNS, q.data(), e8.data()) != FB_OK)
      fail_msg("fb_s2f6_quantize: %s", fb_errmsg());
    for (size_t i = 0; i < nout; ++i) nb += (unsigned char)q[i] != out[i];
    for (size_t i = 0; i < nout / 32; ++i) nb += e8[i] != osf[i];
  }
  *bad = nb;
  return NULL;
}

/* run every shape of class c: all bit-exact and within tolerance */
void check_class(const Class &c) {
  static const Shape s0[] = {{256, 512, 0, 3, {100, 0, 300, 129}}, {384, 256, 0, 2, {37, 128, 0}}};
  static const Shape s1[] = {{256, 0, 256, 3, {256, 0, 384, 128}}, {128, 0, 128, 1, {0, 128}}};
  for (int i = 0; i < 2; ++i) {
    Shape s = c.mode ? s1[i] : s0[i];
    if (c.mode == 0 && s.N % c.tile_n) s.N = c.tile_n * 2;
    if (c.mode == 0 && c.kind == 1 && s.K % 256) s.K = 256;
    if (c.k96) s.K = c.K[i] ? c.K[i] : i ? 768 : 1536; /* K = 96: multiples of 768, or a partial last K tile */
    if (c.mode == 1 && c.pair && s.M % 256) s.M = 256; /* wgrad: M a multiple of the cluster's 256 rows */
    long bad = -1;
    double rel = 0;
    const char *err = run_class(c, s, &bad, &rel);
    const double tol = c.kind ? 1e-4 : 1e-5;
    printf("  %-16s %-5s %-13s m%d n%-3d k%-3d s%d%s: experts (", c.name, kind_name[c.kind], c.mode ? "wgrad" : epi_name[c.epi],
           c.pair == 1 ? 256 : 128, c.tile_n, c.tile_k, c.stages, c.k96 ? " K=96 sm_103a" : "");
    for (size_t j = 0; j < s.rows.size(); ++j) printf("%s%d", j ? " " : "", s.rows[j]);
    if (c.pair) printf(") %s %d, %d clusters of 2%s: ", c.mode ? "M" : "K", c.mode ? s.M : s.K, s.grid, c.pair == 2 ? " (B multicast)" : "");
    else printf(") %s %d, %d CTAs: ", c.mode ? "M" : "K", c.mode ? s.M : s.K, s.grid);
    if (err) {
      printf("model: %s\n", err);
      fail_msg("%s: %s", c.name, err);
    }
    printf("%ld outputs differ from the CPU epilogue of the FP32 result, FP32 vs FP64 rel %.2e (<= %.0e)  %s\n", bad, rel, tol,
           bad || !(rel <= tol) ? "FAIL" : "ok");
    if (bad || !(rel <= tol)) fail_msg("%s: %ld outputs differ, rel %.2e", c.name, bad, rel);
  }
}

const Class classes[] = {
    {"bf16_f32", 0, 0, E_F32, 128, 64, 3, 0, bf16_f32::k_bf16_f32, 0, 0},
    {"bf16_bf16", 0, 0, E_BF16, 64, 128, 2, 0, bf16_bf16::k_bf16_bf16, 0, 0},
    {"bf16_wgrad", 0, 1, E_F32, 128, 64, 3, 0, bf16_wgrad::k_bf16_wgrad, 0, 0},
    {"bf16_swiglubwd", 0, 0, E_SWIGLU_BWD, 64, 64, 4, 0, bf16_swiglubwd::k_bf16_swiglubwd, 0, 0},
    {"mx_f32", 2, 0, E_F32, 256, 128, 2, 0, mx_f32::k_mx_f32, 0, 0},
    {"mx_bf16", 2, 0, E_BF16, 192, 64, 4, 0, mx_bf16::k_mx_bf16, 0, 0},
    {"mx_wgrad", 2, 1, E_F32, 128, 128, 3, 0, mx_wgrad::k_mx_wgrad, 0, 0},
    {"mx_swiglu", 2, 0, E_SWIGLU, 128, 128, 3, 0, mx_swiglu::k_mx_swiglu, 0, 0},
    {"mx_swiglubwd", 2, 0, E_SWIGLU_BWD, 128, 128, 3, 0, mx_swiglubwd::k_mx_swiglubwd, 0, 0},
    {"mx_s2f6", 2, 0, E_S2F6, 128, 128, 3, 0, mx_s2f6::k_mx_s2f6, 0, 0},
    {"nv_f32", 1, 0, E_F32, 128, 128, 3, 1, nv_f32::k_nv_f32, 0, 0},
    {"nv_swiglu", 1, 0, E_SWIGLU, 256, 64, 4, 1, nv_swiglu::k_nv_swiglu, 0, 0},
    {"nv_s2f6_rht", 1, 0, E_S2F6_RHT, 128, 128, 3, 2, nv_s2f6::k_nv_s2f6, 0, 0},
    /* the CTA pair (tile_m 256, cluster 2) */
    {"p_bf16_f32", 0, 0, E_F32, 128, 64, 3, 0, p_bf16_f32::k_p_bf16_f32, 1, 0},
    {"p_bf16_bf16", 0, 0, E_BF16, 32, 128, 2, 0, p_bf16_bf16::k_p_bf16_bf16, 1, 0},
    {"p_bf16_swiglubwd", 0, 0, E_SWIGLU_BWD, 64, 64, 4, 0, p_bf16_swiglubwd::k_p_bf16_swiglubwd, 1, 0},
    {"p_mx_wgrad", 2, 1, E_F32, 128, 128, 3, 0, p_mx_wgrad::k_p_mx_wgrad, 1, 0},
    {"p_mx_swiglu", 2, 0, E_SWIGLU, 128, 128, 3, 0, p_mx_swiglu::k_p_mx_swiglu, 1, 0},
    {"p_mx_bf16", 2, 0, E_BF16, 192, 64, 4, 0, p_mx_bf16::k_p_mx_bf16, 1, 0},
    {"p_nv_f32", 1, 0, E_F32, 256, 128, 3, 1, p_nv_f32::k_p_nv_f32, 1, 0},
    {"p_nv_s2f6_rht", 1, 0, E_S2F6_RHT, 128, 128, 3, 2, p_nv_s2f6::k_p_nv_s2f6, 1, 0},
    /* K = 96 (sm_103a) */
    {"nv96_f32", 1, 0, E_F32, 128, 768, 2, 1, nv96_f32::k_nv96_f32, 0, 1},
    {"nv96_bf16", 1, 0, E_BF16, 64, 768, 2, 2, nv96_bf16::k_nv96_bf16, 0, 1},
    {"p_nv96_f32", 1, 0, E_F32, 192, 768, 2, 1, p_nv96_f32::k_p_nv96_f32, 1, 1},
    {"p_nv96_swiglu", 1, 0, E_SWIGLU, 128, 768, 2, 1, p_nv96_swiglu::k_p_nv96_swiglu, 1, 1},
    /* K = 96, K not a multiple of 768 (a partial last K tile): S1's w2 K 2048 (2 x 768 + 512: the stage's third box not
       loaded, the last MMA across into it) and w13 K 5120 (6 x 768 + 512); 1120 (768 + 352: the second box partly past
       K, the TMA's zeros), 544 and 512 (one partial tile), 256 (one box, its third MMA across into the unloaded second) */
    {"nv96_f32_kp", 1, 0, E_F32, 128, 768, 2, 1, nv96_f32::k_nv96_f32, 0, 1, {2048, 1120}},
    {"nv96_bf16_kp", 1, 0, E_BF16, 64, 768, 2, 2, nv96_bf16::k_nv96_bf16, 0, 1, {5120, 256}},
    {"p_nv96_f32_kp", 1, 0, E_F32, 192, 768, 2, 1, p_nv96_f32::k_p_nv96_f32, 1, 1, {2048, 544}},
    {"p_nv96_swiglu_kp", 1, 0, E_SWIGLU, 128, 768, 2, 1, p_nv96_swiglu::k_p_nv96_swiglu, 1, 1, {5120, 512}},
    /* B multicast (tile_m 128, cluster 2) */
    {"mc_bf16_f32", 0, 0, E_F32, 128, 64, 3, 0, mc_bf16_f32::k_mc_bf16_f32, 2, 0},
    {"mc_bf16_bf16", 0, 0, E_BF16, 32, 128, 2, 0, mc_bf16_bf16::k_mc_bf16_bf16, 2, 0},
    {"mc_bf16_swiglubwd", 0, 0, E_SWIGLU_BWD, 64, 32, 4, 0, mc_bf16_swiglubwd::k_mc_bf16_swiglubwd, 2, 0},
    {"mc_mx_wgrad", 2, 1, E_F32, 128, 128, 3, 0, mc_mx_wgrad::k_mc_mx_wgrad, 2, 0},
    {"mc_mx_swiglu", 2, 0, E_SWIGLU, 128, 128, 3, 0, mc_mx_swiglu::k_mc_mx_swiglu, 2, 0},
    {"mc_nv_f32", 1, 0, E_F32, 256, 128, 3, 1, mc_nv_f32::k_mc_nv_f32, 2, 0},
    {"mc_nv_s2f6_rht", 1, 0, E_S2F6_RHT, 128, 128, 3, 2, mc_nv_s2f6::k_mc_nv_s2f6, 2, 0},
    {"mc_nv96_f32", 1, 0, E_F32, 128, 768, 2, 1, mc_nv96_f32::k_mc_nv96_f32, 2, 1},
    {"mc_bf16_wgrad", 0, 1, E_F32, 128, 64, 3, 0, mc_bf16_wgrad::k_mc_bf16_wgrad, 2, 0},
    {"mc_mx_f32", 2, 0, E_F32, 256, 128, 2, 0, mc_mx_f32::k_mc_mx_f32, 2, 0},
    {"mc_mx_bf16", 2, 0, E_BF16, 192, 64, 4, 0, mc_mx_bf16::k_mc_mx_bf16, 2, 0},
    {"mc_mx_swiglubwd", 2, 0, E_SWIGLU_BWD, 128, 128, 3, 0, mc_mx_swiglubwd::k_mc_mx_swiglubwd, 2, 0},
    {"mc_mx_s2f6", 2, 0, E_S2F6, 128, 128, 3, 0, mc_mx_s2f6::k_mc_mx_s2f6, 2, 0},
    {"mc_nv_swiglu", 1, 0, E_SWIGLU, 256, 64, 4, 1, mc_nv_swiglu::k_mc_nv_swiglu, 2, 0},
    {"mc_nv96_bf16", 1, 0, E_BF16, 64, 768, 2, 2, mc_nv96_bf16::k_mc_nv96_bf16, 2, 1},
    /* the audit's classes (above) */
    {"bf16_swiglu", 0, 0, E_SWIGLU, 128, 64, 3, 0, bf16_swiglu::k_bf16_swiglu, 0, 0},
    {"mx_s2f6_rht", 2, 0, E_S2F6_RHT, 128, 128, 3, 0, mx_s2f6_rht::k_mx_s2f6_rht, 0, 0},
    {"nv_bf16", 1, 0, E_BF16, 128, 128, 3, 1, nv_bf16::k_nv_bf16, 0, 0},
    {"p_nv_swiglu", 1, 0, E_SWIGLU, 128, 128, 3, 1, p_nv_swiglu::k_p_nv_swiglu, 1, 0},
    {"p_mx_swiglubwd", 2, 0, E_SWIGLU_BWD, 128, 128, 3, 0, p_mx_swiglubwd::k_p_mx_swiglubwd, 1, 0},
    {"p_mx_s2f6_rht", 2, 0, E_S2F6_RHT, 128, 128, 3, 0, p_mx_s2f6_rht::k_p_mx_s2f6_rht, 1, 0},
    {"p_mx_f32", 2, 0, E_F32, 256, 128, 2, 0, p_mx_f32::k_p_mx_f32, 1, 0},
    {"p_bf16_wgrad", 0, 1, E_F32, 128, 64, 3, 0, p_bf16_wgrad::k_p_bf16_wgrad, 1, 0},
    {"nv96_s2f6_rht", 1, 0, E_S2F6_RHT, 128, 768, 2, 2, nv96_s2f6_rht::k_nv96_s2f6_rht, 0, 1, {2048, 768}},
    {"nv96_swiglu", 1, 0, E_SWIGLU, 128, 768, 2, 1, nv96_swiglu::k_nv96_swiglu, 0, 1, {2048, 768}},
};

/* FB_GEMM_ONLY=substring: only the classes and broken builds whose name contains it (while working on one) */
bool chosen(const char *name) {
  const char *o = getenv("FB_GEMM_ONLY");
  return !o || strstr(name, o);
}

void test_classes(void **state) {
  (void)state;
  for (const Class &c : classes)
    if (chosen(c.name)) check_class(c);
}

void test_broken(void **state) {
  (void)state;
  const Shape s0{256, 512, 0, 1, {300, 200}}; /* one CTA, 8 tiles: accumulator stages reused, stages wrap */
  struct {
    Class c;
    const char *expect; /* a report containing any of these |-separated symptoms; NULL: the check must fail */
  } cases[] = {
      {{"no tmem_empty wait", 0, 0, E_F32, 128, 64, 3, 0, brk1::k_brk1, 0, 0}, "read without an ordering"},
      {{"no empty-stage wait", 0, 0, E_F32, 128, 64, 3, 0, brk2::k_brk2, 0, 0}, "may not have read yet|arrivals on an mbarrier phase that expects"},
      {{"no fence after tmem_full", 0, 0, E_F32, 128, 64, 3, 0, brk3::k_brk3, 0, 0}, "fence::after_thread_sync"},
      {{"wrong sf id", 2, 0, E_F32, 128, 128, 3, 0, brk4::k_brk4, 0, 0}, NULL},
      {{"wrong B swizzle", 0, 0, E_F32, 128, 64, 3, 0, brk5::k_brk5, 0, 0}, NULL},
      {{"pair: B's scales in the even CTA only", 2, 0, E_F32, 128, 128, 3, 0, pbrk6::k_pbrk6, 1, 0}, "differs between the CTAs of the pair"},
      {{"pair: no wait for the odd CTA's stage", 2, 0, E_F32, 128, 128, 3, 0, pbrk7::k_pbrk7, 1, 0}, "TMA load is still writing"},
      {{"K = 96: a crossing MMA's LBO at its own row", 1, 0, E_F32, 128, 768, 2, 0, brk9::k_brk9, 0, 1}, NULL},
      {{"K = 96 pair: scale-factor id 0 where 2", 1, 0, E_F32, 128, 768, 2, 0, pbrk10::k_pbrk10, 1, 1}, NULL},
      {{"K = 96: crossing MMAs in the relative-LBO mode", 1, 0, E_F32, 128, 768, 2, 0, brk11::k_brk11, 0, 1}, "relative-LBO mode"},
      {{"K = 96 run as sm_100a", 1, 0, E_F32, 128, 768, 2, 1, nv96_f32::k_nv96_f32, 0, 2}, "sm_103a only"},
      {{"K = 96, K 2048: the partial tile's last MMA left out", 1, 0, E_F32, 128, 768, 2, 0, brk12::k_brk12, 0, 1, {2048, 0}}, NULL},
      {{"K = 96 pair, K 2048: k-blocks past K scaled 1.0", 1, 0, E_F32, 128, 768, 2, 0, pbrk13::k_pbrk13, 1, 1, {2048, 0}}, NULL},
      {{"pair: a CTA barrier, not the cluster's, before the dealloc", 0, 0, E_F32, 128, 64, 3, 0, pbrk8::k_pbrk8, 1, 0},
       "not ordered before CTA 0 exits|which has exited"},
      {{"B multicast: the CTA mask names this CTA only", 2, 0, E_F32, 128, 128, 3, 0, mcbrk14::k_mcbrk14, 2, 0}, "can never complete"},
      {{"B multicast: no remote empty-barrier arrive", 2, 0, E_F32, 128, 128, 3, 0, mcbrk15::k_mcbrk15, 2, 0},
       "may not have read yet"},
      {{"B multicast: expect-tx of this CTA's own bytes only", 2, 0, E_F32, 128, 128, 3, 0, mcbrk16::k_mcbrk16, 2, 0},
       "did not expect these bytes|bytes more completed than|TMA load is still writing"},
      {{"B multicast: a CTA mask beyond the cluster", 2, 0, E_F32, 128, 128, 3, 0, mcbrk17::k_mcbrk17, 2, 0}, "beyond the cluster"},
      {{"B multicast: no producer tail", 2, 0, E_F32, 128, 128, 3, 0, mcbrk18::k_mcbrk18, 2, 0}, "not ordered before|which has exited"},
  };
  for (auto &x : cases) {
    if (!chosen(x.c.name)) continue;
    long bad = -1;
    double rel = 0;
    Shape s = s0;
    if (x.c.k96) s.K = x.c.K[0] ? x.c.K[0] : 768;
    const char *err = run_class(x.c, s, &bad, &rel);
    printf("  broken build (%s): %s", x.c.name, err ? err : "ran");
    if (!err) printf(", %ld outputs wrong", bad);
    printf("\n");
    if (x.expect) {
      bool found = false;
      for (std::string rest = x.expect; err && !found;) {
        size_t bar = rest.find('|');
        found = strstr(err, rest.substr(0, bar).c_str()) != NULL;
        if (bar == std::string::npos) break;
        rest = rest.substr(bar + 1);
      }
      if (!found) fail_msg("%s: expected a report containing \"%s\"", x.c.name, x.expect);
    } else if (!err && bad == 0) {
      fail_msg("%s: neither reported nor wrong", x.c.name);
    }
  }
}

/* a cuobjdump for the SASS checks: $CUOBJDUMP, or the one make inspect fetches (mk/cuobjdump.sh); NULL: none */
const char *cuobjdump() {
  const char *e = getenv("CUOBJDUMP");
  if (e && access(e, X_OK) == 0) return e;
  return access("build/deps/cuobjdump/bin/cuobjdump", X_OK) == 0 ? "build/deps/cuobjdump/bin/cuobjdump" : NULL;
}
/* the SASS of a cubin (cuobjdump -sass), "" when it could not be read */
std::string sass_of(const char *co, const fb_cubin &c) {
  char f[] = "/tmp/fb_gemm_sm100_XXXXXX";
  int fd = mkstemp(f);
  if (fd < 0) return "";
  bool ok = write(fd, c.cubin, c.size) == (ssize_t)c.size;
  close(fd);
  std::string out;
  if (ok) {
    std::string cmd = std::string("'") + co + "' -sass '" + f + "'";
    if (FILE *p = popen(cmd.c_str(), "r")) {
      char buf[65536];
      size_t n;
      while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
      pclose(p);
    }
  }
  unlink(f);
  return out;
}

/* the template compiles with NVRTC for both Blackwell targets, no spills (the generator's sources: fourbit gen and
   test_gemm --compile-only --arch cover every kept variant; here one class of each kind and epilogue, 1-CTA and the pair);
   where a cuobjdump is found, the SASS has no local memory and the pair's MMAs are the .2CTA forms */
void test_nvrtc(void **state) {
  (void)state;
  const char *one = "#define FB_TILE_M 128\n#define FB_CLUSTER 1\n", *two = "#define FB_TILE_M 256\n#define FB_CLUSTER 2\n";
  const char *mcs = "#define FB_TILE_M 128\n#define FB_CLUSTER 2\n"; /* B multicast */
  struct {
    const char *tile, *pre, *mma; /* mma: the pair's MMA as cuobjdump 13.5 spells it (NVFP4: per arch, below) */
    int sm103_only;               /* the K = 96 form: the generator prunes it on sm_100a */
  } cases[] = {
      {one, "#define FB_KIND 0\n#define FB_MODE 0\n#define FB_TILE_N 128\n#define FB_TILE_K 64\n#define FB_STAGES 4\n", NULL, 0},
      {one, "#define FB_KIND 0\n#define FB_MODE 1\n#define FB_TILE_N 256\n#define FB_TILE_K 128\n#define FB_STAGES 3\n", NULL, 0},
      {one, "#define FB_KIND 2\n#define FB_MODE 0\n#define FB_SWIGLU 1\n#define FB_OUT_BF16 1\n#define FB_TILE_N 256\n#define FB_TILE_K 128\n#define FB_STAGES 4\n", NULL, 0},
      {one, "#define FB_KIND 2\n#define FB_MODE 0\n#define FB_SWIGLU 2\n#define FB_OUT_BF16 1\n#define FB_TILE_N 128\n#define FB_TILE_K 64\n#define FB_STAGES 6\n", NULL, 0},
      {one, "#define FB_KIND 1\n#define FB_MODE 0\n#define FB_S2F6 1\n#define FB_RHT 1\n#define FB_A_OUTER 1\n#define FB_B_OUTER 1\n#define FB_TILE_N 128\n#define FB_TILE_K 128\n#define FB_STAGES 4\n", NULL, 0},
      {two, "#define FB_KIND 0\n#define FB_MODE 0\n#define FB_TILE_N 128\n#define FB_TILE_K 64\n#define FB_STAGES 4\n", "UTCHMMA.2CTA", 0},
      {two, "#define FB_KIND 2\n#define FB_MODE 1\n#define FB_TILE_N 128\n#define FB_TILE_K 128\n#define FB_STAGES 3\n", "UTCQMMA.2CTA", 0},
      {two, "#define FB_KIND 2\n#define FB_MODE 0\n#define FB_SWIGLU 1\n#define FB_OUT_BF16 1\n#define FB_TILE_N 256\n#define FB_TILE_K 128\n#define FB_STAGES 4\n", "UTCQMMA.2CTA", 0},
      {two, "#define FB_KIND 1\n#define FB_MODE 0\n#define FB_S2F6 1\n#define FB_RHT 1\n#define FB_A_OUTER 2\n#define FB_B_OUTER 2\n#define FB_TILE_N 128\n#define FB_TILE_K 128\n#define FB_STAGES 4\n", "", 0},
      {two, "#define FB_KIND 1\n#define FB_MODE 0\n#define FB_A_OUTER 1\n#define FB_B_OUTER 1\n#define FB_TILE_N 256\n#define FB_TILE_K 256\n#define FB_STAGES 4\n", "", 0},
      {one, "#define FB_KIND 1\n#define FB_MMA_K 96\n#define FB_MODE 0\n#define FB_A_OUTER 1\n#define FB_B_OUTER 1\n#define FB_TILE_N 128\n#define FB_TILE_K 768\n#define FB_STAGES 2\n", NULL, 1},
      {two, "#define FB_KIND 1\n#define FB_MMA_K 96\n#define FB_MODE 0\n#define FB_OUT_BF16 1\n#define FB_SWIGLU 1\n#define FB_A_OUTER 1\n#define FB_B_OUTER 1\n#define FB_TILE_N 128\n#define FB_TILE_K 768\n#define FB_STAGES 2\n", "", 1},
      {mcs, "#define FB_KIND 0\n#define FB_MODE 0\n#define FB_TILE_N 128\n#define FB_TILE_K 64\n#define FB_STAGES 4\n", NULL, 0},
      {mcs, "#define FB_KIND 2\n#define FB_MODE 0\n#define FB_SWIGLU 1\n#define FB_OUT_BF16 1\n#define FB_TILE_N 256\n#define FB_TILE_K 128\n#define FB_STAGES 4\n", NULL, 0},
      {mcs, "#define FB_KIND 1\n#define FB_MODE 0\n#define FB_S2F6 1\n#define FB_RHT 1\n#define FB_A_OUTER 1\n#define FB_B_OUTER 1\n#define FB_TILE_N 128\n#define FB_TILE_K 128\n#define FB_STAGES 4\n", NULL, 0},
      {mcs, "#define FB_KIND 1\n#define FB_MMA_K 96\n#define FB_MODE 0\n#define FB_A_OUTER 1\n#define FB_B_OUTER 1\n#define FB_TILE_N 128\n#define FB_TILE_K 768\n#define FB_STAGES 2\n", NULL, 1},
  };
  const char *co = cuobjdump();
  if (!co) printf("  (no cuobjdump: the SASS checks do not run; make inspect fetches it, or set CUOBJDUMP)\n");
  for (auto &x : cases)
    for (const char *arch : {"sm_100a", "sm_103a"}) {
      if (x.sm103_only && strcmp(arch, "sm_103a")) continue;
      fb_cubin c;
      memset(&c, 0, sizeof c);
      std::string s = std::string(x.tile) + "#define FB_KERNEL fbs_gemm_sm100\n" + x.pre + "#include \"gemm_sm100.cuh\"\n";
      if (fb_nvrtc_compile("fbs_gemm_sm100", s.c_str(), arch, &c) != FB_OK) fail_msg("%s: %s", arch, fb_errmsg());
      assert_true(c.size > 1000);
      if (c.log && strstr(c.log, "bytes spill stores") && !strstr(c.log, " 0 bytes spill stores")) fail_msg("%s spills: %s", arch, c.log);
      std::string what = "";
      if (co) {
        const std::string sass = sass_of(co, c);
        if (sass.empty()) fail_msg("%s: cuobjdump -sass read nothing", arch);
        if (sass.find("LDL") != std::string::npos || sass.find("STL ") != std::string::npos) fail_msg("%s: local memory (LDL / STL) in the SASS", arch);
        /* the pair: cta_group::2 MMAs (mxf4nvf4 block16: UTCOMMA.2CTA.4X on sm_100a, .2CTA.BLOCK16 on sm_103a), commits to
           both CTAs (UTCBAR.2CTA.MULTICAST), copies UTCCP.T.S.2CTA, the 2-CTA allocator; the 1-CTA path none of them */
        const char *mma = x.mma && !*x.mma ? (strcmp(arch, "sm_103a") ? "UTCOMMA.2CTA.4X" : "UTCOMMA.2CTA.BLOCK16") : x.mma;
        if (mma) {
          for (const char *f : {mma, "UTCBAR.2CTA.MULTICAST", "UTCATOMSWS.2CTA.FIND_AND_SET", "UCGABAR_WAIT"})
            if (sass.find(f) == std::string::npos) fail_msg("%s: no %s in the pair's SASS", arch, f);
          if (strstr(x.pre, "FB_KIND 0") == NULL && sass.find("UTCCP.T.S.2CTA") == std::string::npos) fail_msg("%s: no UTCCP.T.S.2CTA", arch);
          what = std::string(", SASS: ") + mma + ", UTCBAR.2CTA.MULTICAST, no LDL / STL";
        } else {
          if (sass.find(".2CTA") != std::string::npos) fail_msg("%s: a .2CTA form in the 1-CTA SASS", arch);
          what = ", SASS: no .2CTA form, no LDL / STL";
        }
        /* B multicast: the multicast TMA load of B (UTMALDG.2D.MULTICAST) and the stage's release on both CTAs' barriers
           (UTCBAR.MULTICAST, cta_group::1), the cluster barrier; the 1-CTA path (cluster 1) has neither multicast form */
        const bool mc = x.tile == mcs;
        for (const char *f : {"UTMALDG.2D.MULTICAST", "UTCBAR.MULTICAST"})
          if ((sass.find(f) != std::string::npos) != mc) fail_msg("%s: %s %s the %s SASS", arch, f, mc ? "missing from" : "in", x.tile == one ? "1-CTA" : "pair's");
        if (mc) {
          if (sass.find("UCGABAR_WAIT") == std::string::npos) fail_msg("%s: no cluster barrier in the B-multicast SASS", arch);
          what += ", UTMALDG.2D.MULTICAST, UTCBAR.MULTICAST";
        }
      }
      printf("  NVRTC %s %s%s: %zu-byte cubin  (%.*s)%s\n", arch, x.tile == two ? "m256 c2" : x.tile == mcs ? "m128 c2 (B multicast)" : "m128 c1", x.sm103_only ? " K = 96" : "",
             c.size, (int)(strchr(x.pre + 17, '\n') - x.pre), x.pre, what.c_str());
      fb_cubin_free(&c);
    }
}
} // namespace

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_classes), cmocka_unit_test(test_broken), cmocka_unit_test(test_nvrtc)};
  int r = cmocka_run_group_tests(tests, NULL, NULL);
  fbemu::free_stacks();
  return r;
}
