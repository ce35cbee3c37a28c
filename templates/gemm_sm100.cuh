/* gemm_sm100.cuh — the grouped GEMMs over experts for Blackwell (sm_100a / sm_103a) on tcgen05: the generator's
 * "tcgen05" family (gen/templates.c), the same parameter block, shapes and epilogues as gemm_sm90.cuh (fb_gemm.h).
 * Written from the PTX ISA and docs/hardware.md's Blackwell fact sheet, through templates/fb_tc_ops.h's wrappers only,
 * so that it runs on the CPU under the functional model of the instructions (tests/emu/tc_model.h, docs/tc_model.md).
 * It has been compiled (NVRTC, sm_100a and sm_103a; make inspect reads its SASS) and run under that model; it has
 * NEVER run on a Blackwell GPU, and nothing about its speed is measured.
 *
 * FB_KIND (operands; both K-major, loaded by TMA with the swizzle of their row bytes, multiplied from shared memory):
 *   0  BF16 x BF16 on kind::f16 (K = 16 an MMA).
 *   1  NVFP4 x NVFP4 on kind::mxf4nvf4.block_scale.block16 (K = 64 an MMA): E2M1 pairs (the even k in the low nibble),
 *      a UE4M3 scale per 16 along K for both operands (a_sf, b_sf); the FP32 outer scales S_dec(A) per row / tensor
 *      (FB_A_OUTER) and S_dec(B) per expert / tensor (FB_B_OUTER) in the epilogue. (gemm_sm90.cuh's kind 1 multiplies
 *      a BF16 copy of B; here B is the NVFP4 weights themselves: the host's fb_gemm_cfg says kind 4.)
 *   2  MXFP8 x MXFP8 on kind::mxf8f6f4.block_scale.block32 (K = 32 an MMA): E4M3 codes, UE8M0 per 32 along K.
 *   Each MMA reads 32 bytes of every row, but with FB_MMA_K 96.
 * FB_MMA_K 96 (NVFP4 on sm_103a only; the generator prunes it elsewhere): K = 96 MMAs (idesc bit 31), 48 bytes of every
 *   row, 6 UE4M3 scales a row an MMA. As CUTLASS's sm103 kernels: FB_TILE_K a multiple of 768, so that a stage row of
 *   384 bytes (three 128-byte swizzle rows) holds 8 MMAs' K; MMA j reads from byte 48 j, and the two whose 48 bytes
 *   cross a 128-byte row (from byte 96 and from byte 112 of a row) take the rest from the next row's start through the
 *   descriptor's absolute-LBO mode (bit 52; every K = 96 MMA is issued in that mode, the LBO the next row's start where
 *   it crosses, else its own row's). Scales: MMA j reads k-blocks 6 j .. 6 j + 5, from the atom of k-block 6 j on, the
 *   scale-factor id its byte (0 or 2): the run continues in the next atom's columns (docs/tc_model.md's reading).
 *   1-CTA and pair alike; the 1-CTA K = 96 MMA is CUTLASS's reading of the ISA [unverified, docs/tc_model.md].
 *   K need not be a multiple of FB_TILE_K, nor of 96 (S1's 5120 = 6 x 768 + 512, 2048 = 2 x 768 + 512; K a multiple of
 *   32: 16-byte TMA rows): the last K tile is partial. Its stage holds only the boxes with bytes before K (the TMA
 *   fills a box's bytes past K with zeros; boxes wholly past K are not loaded and keep an older stage's bytes), its
 *   MMAs are the full tile's first ceil(K left / 96), the last of them padded past K, and every k-block past K gets
 *   the scale 0 (UE4M3 0x00) in the atoms. E2M1 has no Inf or NaN, so each product past K is an exact zero whatever
 *   the stage holds there, and the sum is the one of K's products alone: the chunks of 96 from k = 0 with a shorter
 *   last one, the order the reference takes. The MMAs and their scale layout are the full tile's (same descriptors,
 *   same atoms and scale-factor ids), so nothing the ISA allows changes; K = 64 MMAs for the tail would mix two idesc
 *   K sizes in one accumulation and cost more MMAs (8 for S1's 512 against 6). Only the rows-grouped modes (FB_MODE 0).
 * The hardware sums inside the instruction as it does (NUMERICS.md: block-scaled tcgen05 within 1e-4 of the FP64
 * reference); the model sums each MMA's products exactly, rounds once to FP32 and adds in FP32 (docs/tc_model.md).
 * FB_MODE 0 (fwd, dgrad: rows grouped) and 1 (wgrad: K grouped, K of expert e = its rows, offsets multiples of
 *   FB_TILE_K; an expert with no rows gets zeros). FB_OUT_BF16, FB_SWIGLU 1 / 2, FB_S2F6 (+ FB_RHT): as gemm_sm90.cuh,
 *   bit-exact with the CPU epilogue applied to the FP32 result. Each epilogue thread owns one row of the tile (TMEM lane),
 *   32 columns per tcgen05.ld, so SwiGLU's gate and up and a 32-column RHT / S2F6 block are all in one thread.
 *
 * A stage: A's 128 rows and B's FB_TILE_N rows of FB_TILE_K elements (RB bytes a row), as RB / 128 boxes of 128-byte
 * swizzled rows (RB >= 128) or one box of RB-byte swizzled rows (32, 64); for kinds 1 and 2 the stage's scale factors in
 * the 128 x 4 atom layout tcgen05.cp takes (fb_tcgen05.h fb_tc_sf_offset), written by the producer warp's lanes (generic
 * stores, fence.proxy.async), one atom per 4 k-blocks of A and per 4 k-blocks x 128 rows of B.
 *
 * Persistent: CTA b takes tiles b, b + gridDim.x, ... of fb_gemm_dev.h's walk (per expert, m-tiles fastest). 192 threads:
 *   warp 0     TMA producer (one elected lane issues; the warp writes the scale atoms),
 *   warp 1     TMEM allocator and MMA issuer (one elected lane): full[s] -> tcgen05.cp of the atoms, RB / 32 MMAs
 *              (K = 96: RB / 48), commit to empty[s]; after a tile's last stage, commit to tmem_full[a],
 *   warps 2-5  the epilogue, warp w reading TMEM lanes 32 (w % 4) .. + 31: tmem_full[a] -> tcgen05.ld -> outputs ->
 *              tmem_empty[a] (128 arrivals). FB_ACC accumulator stages of FB_TILE_N columns (2 when they fit).
 * Rows of an expert's last m-tile past its end are loaded (the next expert's rows, zeros past the tensor) and never
 * stored. Tune parameters: FB_TILE_M (128: cta_group::1; 256: the pair below), FB_TILE_N (32..256, a multiple of 32;
 * 64..256 a multiple of 64 with SwiGLU), FB_TILE_K, FB_STAGES, FB_CLUSTER (1; 2: with FB_TILE_M 256 the pair, with 128
 * B multicast, below). Dynamic shared memory: fb_gemm_tc_smem_total() (fb_gemm.h).
 *
 * B multicast (FB_TILE_M 128, FB_CLUSTER 2; clusters of 2 along x): two 1-CTA tiles (cta_group::1, M = 128 each) that
 * share B. Scheduling: the cluster walks 256-row tiles as the pair does (tile blockIdx.x / 2, + gridDim.x / 2, ...: one
 * expert, one N block), CTA rank r taking rows 128 r .. 128 r + 127 of it, so that both CTAs of a cluster always need
 * the same B (the expert's weights, the N block's rows). An expert's last 256-row tile may reach past its rows: CTA 1's
 * half even wholly (an expert of 100 rows, or an empty one's neighbour) - it loads those rows like any partial tile
 * (the next expert's rows, zeros past the tensor), runs the same stages and stores none, since its peer needs its half
 * of B in every stage. This costs up to 128 rows of MMAs per expert (the pair pays the same); an expert with no rows
 * has no tile. Each CTA's producer loads its own 128 rows of A, and half of B's TN rows (SwiGLU: the gate half in CTA
 * 0, the up half in CTA 1) with cp.async.bulk.tensor .multicast::cluster (ctaMask 0b11) into the same offset of both
 * CTAs' stage s, so each CTA's full[s] expects A's bytes and all of B's (its own half and the peer's multicast) and
 * B's traffic from L2 is halved. A stage may be refilled only when both CTAs' MMAs have read it: empty[s] counts 2, the
 * MMA issuer of each CTA commits with .multicast::cluster to empty[s] of both (tcgen05.commit.cta_group::1). The scale
 * atoms are each CTA's own generic stores (B's for all TN rows in each). At the end the producer waits for each
 * stage's last release (the producer's tail, as CUTLASS's), so the peer's last commits have landed before the CTA may
 * exit; a cluster barrier follows the barrier init (the peer's barriers exist before any multicast or remote commit).
 *
 * The CTA pair (FB_TILE_M 256, FB_CLUSTER 2; launched as clusters of 2 along x, cuLaunchKernelEx): the two CTAs of a
 * cluster compute a 256 x FB_TILE_N tile with cta_group::2 MMAs (M = 256), every tcgen05 instruction .cta_group::2. The
 * pair walks the tiles together: cluster blockIdx.x / 2 takes tiles blockIdx.x / 2, + gridDim.x / 2, ... CTA rank r
 * (%cluster_ctarank) holds rows 128 r .. 128 r + 127 of the tile (its TMA box of A, its TMEM lanes of the accumulator)
 * and B's rows r TN / 2 .. (r + 1) TN / 2 - 1 (SwiGLU: the gate half in CTA 0, the up half in CTA 1), as the MMA reads
 * them (docs/tc_model.md): A's rows 128.. and B's rows N / 2.. from the peer's shared memory at the same descriptors.
 * Scale factors: each CTA writes its own A rows' atoms and B's atoms for all TN rows (the same in both CTAs), the even
 * CTA's tcgen05.cp.cta_group::2 copies each CTA's own atoms into its own TMEM. Per CTA: warp 0 loads its half into its
 * stage (full[s], its own bytes), warp 1 allocates (both CTAs, the same columns); in the even CTA its elected lane
 * issues for both: full[s] and pfull[s] (the odd CTA's half: warp 1 of the odd CTA waits on its own full[s] and arrives
 * on the even CTA's pfull[s] through mapa) -> tcgen05.cp / MMAs -> commit multicast to empty[s] of both CTAs; a
 * tile's last stage -> commit multicast to tmem_full[a] of both. Each CTA's epilogue stores its own 128 rows (the same
 * epilogues, bit for bit) and arrives on the even CTA's tmem_empty[a] (256 arrivals: the odd CTA's through mapa). A
 * cluster barrier after the barrier init and TMEM alloc (the peer's barriers exist before any remote arrive) and
 * before the dealloc (no MMA or remote arrive into a CTA that has freed its columns or exited). No operand is
 * multicast: each CTA loads a different half of A and of B (TMA multicast would serve clusters of two pairs sharing B,
 * not written). Run under the functional model and compiled with NVRTC only, never on a Blackwell GPU. */
#include "fb_gemm.h"
#include "fb_tc_ops.h"
#ifndef FB_SWIGLU
#define FB_SWIGLU 0
#endif
#ifndef FB_S2F6
#define FB_S2F6 0
#endif
#ifndef FB_RHT
#define FB_RHT 0
#endif
#ifndef FB_OUT_BF16
#define FB_OUT_BF16 0
#endif
#ifndef FB_A_OUTER
#define FB_A_OUTER 0
#endif
#ifndef FB_B_OUTER
#define FB_B_OUTER 0
#endif
#ifndef FB_MMA_K
#define FB_MMA_K 0 /* 0: the kind's K (16 BF16, 32 MXFP8, 64 NVFP4); 96: NVFP4's K = 96 form (sm_103a) */
#endif
#ifndef FB_TEST_BREAK /* test builds only (test_gemm_sm100): 1 no tmem_empty wait, 2 no empty-stage wait, 3 no fence after
                         tmem_full, 4 a wrong scale-factor id, 5 a wrong swizzle in B's descriptor; the pair: 6 B's scales
                         in the even CTA only, 7 the MMA issuer not waiting for the odd CTA's stage (pfull), 8 a CTA
                         barrier, not the cluster's, before the TMEM is freed; K = 96: 9 a crossing MMA's absolute LBO at
                         its own row's start (not the next row's), 10 the scale-factor id 0 where it is 2, 11 the
                         crossing MMAs in the relative-LBO mode; a partial last K tile: 12 its MMA count rounded down (the
                         MMA holding K's end left out), 13 its k-blocks past K scaled 1.0, not 0; B multicast: 14 the
                         ctaMask naming this CTA only, 15 the stage released by this CTA's own commit only (no remote
                         arrive on the peer's empty[s]), 16 the expect-tx of this CTA's own bytes only, 17 a ctaMask
                         beyond the cluster, 18 no producer tail */
#define FB_TEST_BREAK 0
#endif
#if FB_S2F6
#include "fb_formats.h"
#endif
#if FB_SWIGLU || FB_OUT_BF16
#include "fb_moe.h" /* fbo_bf16_rne, fbo_swiglu_bwd */
#endif

#if defined(__CUDA_ARCH__) /* the epilogue's 32-column loops unrolled: its arrays stay in registers (no local memory) */
#define TCK_UNROLL _Pragma("unroll")
#else
#define TCK_UNROLL
#endif
#define TCK_PAIR (FB_CLUSTER == 2 && FB_TILE_M == 256) /* a CTA pair computes a 256-row tile with cta_group::2 MMAs */
#define TCK_MC (FB_CLUSTER == 2 && FB_TILE_M == 128)   /* two 1-CTA tiles sharing B, each CTA multicasting its half */
#define TCK_TM FB_TILE_M          /* the tile's rows: 128 (one CTA) or 256 (the pair) */
#define TCK_CM 128                /* the rows of A (and of the accumulator, its TMEM lanes) a CTA holds */
#define TCK_WM (TCK_CM * FB_CLUSTER) /* the rows a cluster walks at a time: 128, or 256 (the pair; two multicast tiles) */
#define TCK_TN FB_TILE_N
#define TCK_BCTA fb_gemm_tc_b_rows(TCK_TM, TCK_TN) /* B's rows a CTA holds: all TN, or its half with the pair */
#define TCK_RB fb_gemm_tc_row_bytes(FB_KIND, FB_TILE_K)            /* bytes of a stage row */
#define TCK_SW (TCK_RB >= 128 ? 128 : TCK_RB)                       /* the swizzle span */
#define TCK_NATOM (TCK_RB / TCK_SW)                                 /* boxes along K a stage */
#define TCK_K96 (FB_MMA_K == 96)                                    /* K = 96 MMAs (sm_103a) */
#define TCK_MB (TCK_K96 ? 48 : 32)                                  /* bytes of a row an MMA reads */
#define TCK_NMMA (TCK_RB / TCK_MB)                                  /* MMAs a stage */
#define TCK_LAYOUT (TCK_SW == 128 ? FB_TC_SW128 : TCK_SW == 64 ? FB_TC_SW64 : FB_TC_SW32)
#define TCK_A_BYTES (TCK_CM * TCK_RB)
#define TCK_B_BYTES (TCK_BCTA * TCK_RB)
#define TCK_SFBLK (FB_KIND == 1 ? 16 : 32)                          /* elements a scale covers */
#define TCK_KB (FB_TILE_K / TCK_SFBLK)                              /* k-blocks a stage */
#define TCK_JC (TCK_KB < 8 ? TCK_KB : 8)                          /* k-blocks of scales a lane loads as one word */
#define TCK_KATOMS fb_gemm_tc_sf_atoms(FB_KIND, FB_TILE_K)          /* 128 x 4 scale atoms along K a stage (0: BF16) */
#define TCK_NR ((TCK_TN + 127) / 128)                               /* B's 128-row blocks */
#define TCK_SFA_BYTES (512 * TCK_KATOMS)
#define TCK_STAGE_BYTES fb_gemm_tc_stage_bytes(FB_KIND, TCK_TM, TCK_TN, FB_TILE_K)
#define TCK_ACC fb_gemm_tc_acc_stages(FB_KIND, TCK_TN, FB_TILE_K, FB_STAGES)
#define TCK_SF_COL (TCK_ACC * TCK_TN)                               /* the scale columns after the accumulators */
#define TCK_SF_STAGE_COLS (4 * TCK_KATOMS * (1 + TCK_NR))
#define TCK_TMEM_COLS fb_gemm_tc_tmem_cols(FB_KIND, TCK_TN, FB_TILE_K, FB_STAGES)
#if FB_SWIGLU == 1
#define TCK_BROWS (TCK_TN / 2) /* B rows per box: the gate half's, then the up half's */
#else
#define TCK_BROWS TCK_TN
#endif
static_assert(TCK_TN % 32 == 0 && TCK_TN >= 32 && TCK_TN <= 256 && (FB_SWIGLU != 1 || TCK_TN % 64 == 0),
              "gemm_sm100: FB_TILE_N must be a multiple of 32 in [32, 256] (of 64 with SwiGLU)");
static_assert(fb_gemm_tc_tmem_need(FB_KIND, TCK_TN, FB_TILE_K, FB_STAGES) <= 512, "gemm_sm100: accumulators and scales within 512 TMEM columns");
static_assert(((FB_TILE_M == 128 && (FB_CLUSTER == 1 || FB_CLUSTER == 2)) || (FB_TILE_M == 256 && FB_CLUSTER == 2)) &&
                  (TCK_RB == 32 || TCK_RB == 64 || TCK_RB % 128 == 0),
              "gemm_sm100: FB_TILE_M 128 with FB_CLUSTER 1 or 2 (cta_group::1; 2: B multicast) or 256 with 2 (cta_group::2), and "
              "a stage row of 32, 64 or a multiple of 128 bytes");
static_assert(FB_MMA_K == 0 || (FB_MMA_K == 96 && FB_KIND == 1 && FB_MODE == 0 && TCK_RB % 384 == 0),
              "gemm_sm100: FB_MMA_K 96 takes NVFP4 (FB_KIND 1), FB_MODE 0 and FB_TILE_K a multiple of 768 (384-byte stage rows)");
/* the instruction forms of the path: every tcgen05 instruction of a kernel takes the same .cta_group (PTX ISA) */
#if TCK_PAIR
#define TCK_ALLOC fbt_alloc_cg2
#define TCK_DEALLOC fbt_dealloc_cg2
#define TCK_RELINQUISH fbt_relinquish_cg2
#define TCK_CP fbt_cp_sf_cg2
#define TCK_MMA_F16 fbt_mma_f16_cg2
#define TCK_MMA_MXF8 fbt_mma_mxf8_cg2
#define TCK_MMA_NVF4 fbt_mma_nvf4_cg2
#define TCK_COMMIT(bar) fbt_commit_mc_cg2(bar, (uint16_t)3) /* both CTAs' barriers at bar's offset */
#define TCK_COMMIT_STAGE TCK_COMMIT
#define TCK_SYNC fbt_cluster_sync                          /* the pair's threads */
#define TCK_SYNC_END fbt_cluster_sync
#else
#define TCK_ALLOC fbt_alloc
#define TCK_DEALLOC fbt_dealloc
#define TCK_RELINQUISH fbt_relinquish
#define TCK_CP fbt_cp_sf
#define TCK_MMA_F16 fbt_mma_f16
#define TCK_MMA_MXF8 fbt_mma_mxf8
#define TCK_MMA_NVF4 fbt_mma_nvf4
#define TCK_COMMIT(bar) fbt_commit(bar)
#if TCK_MC
/* a stage is free once both CTAs' MMAs have read it (the peer's half of B landed in this CTA's stage, this CTA's half in
   the peer's): each MMA issuer's commit arrives on empty[s] of both (15: on its own CTA's only, a count of 1) */
#define TCK_COMMIT_STAGE(bar) (FB_TEST_BREAK == 15 ? fbt_commit(bar) : fbt_commit_mc(bar, (uint16_t)3))
#define TCK_SYNC fbt_cluster_sync /* the peer's barriers exist before the first multicast or remote commit */
#define TCK_SYNC_END __syncthreads /* (the producer's tail, not a cluster barrier, keeps the CTA until the peer's last commits) */
/* the CTAs a half of B goes to (14: this CTA only; 17: three CTAs, beyond the cluster of 2) */
#define TCK_MC_MASK (FB_TEST_BREAK == 14 ? (uint16_t)(1u << rank) : FB_TEST_BREAK == 17 ? (uint16_t)7 : (uint16_t)3)
#else
#define TCK_COMMIT_STAGE TCK_COMMIT
#define TCK_SYNC __syncthreads
#define TCK_SYNC_END __syncthreads
#endif
#endif
#ifndef FB_KERNEL
#define FB_KERNEL fbs_gemm_sm100
#endif

typedef unsigned int tck_u32;
/* the tile walk of every role (the same in each, so they need not talk) */
struct tck_tile {
  int e;
  long long row0, rend; /* mode 0: the tile's first row and its expert's end; mode 1: K range [row0, rend) */
  int m0, n0, nk;       /* mode 1: the tile's first row of A (M); n0: its first output column; nk: its stages */
};
static __device__ __forceinline__ long long tck_off(const fb_kp_gemm &p, int e) { return ((const long long *)p.offsets)[e]; }
struct tck_sched {
  int e;
  long long base, count, mt;
};
#if FB_KIND
/* JC (1, 2, 4 or 8) consecutive scale bytes at q, byte j in bits 8j: one aligned load when all are before K (valid >= JC)
 * and q is aligned to it, else byte by byte, none read at or past valid (a partial K = 96 tile's end of the tensor) */
template <int JC> static __device__ __forceinline__ unsigned long long tck_ld_sf(const unsigned char *q, int valid) {
  if (valid >= JC && ((unsigned long long)q & (JC - 1)) == 0) {
    if (JC == 8) return *reinterpret_cast<const unsigned long long *>(q);
    if (JC == 4) return *reinterpret_cast<const unsigned *>(q);
    if (JC == 2) return *reinterpret_cast<const unsigned short *>(q);
    return *q;
  }
  unsigned long long v = 0;
#pragma unroll
  for (int j = 0; j < JC; ++j)
    if (j < valid) v |= (unsigned long long)q[j] << (8 * j);
  return v;
}
/* a row's JC k-blocks j0.. of v into the scale atoms at base: k-block j at atom (j / 4) * astride, byte off + j % 4 (four
 * consecutive k-blocks are one aligned 32-bit word of an atom); k-blocks at or past valid get past (0: exact zero products) */
template <int JC> static __device__ __forceinline__ void tck_st_sf(unsigned char *base, int astride, int off, int j0, unsigned long long v,
                                                                   int valid, unsigned char past) {
#pragma unroll
  for (int j = 0; j < JC; ++j)
    if (j >= valid) v = (v & ~(0xFFull << (8 * j))) | (unsigned long long)past << (8 * j);
  if (JC >= 4) {
#pragma unroll
    for (int g = 0; g < JC / 4; ++g)
      *reinterpret_cast<unsigned *>(base + ((j0 + 4 * g) / 4) * astride + off) = (unsigned)(v >> (32 * g));
  } else {
#pragma unroll
    for (int j = 0; j < JC; ++j) base[((j0 + j) / 4) * astride + off + (j0 + j) % 4] = (unsigned char)(v >> (8 * j));
  }
}
#endif
/* tile t (t only grows along a walk): 0 past the last */
static __device__ __forceinline__ int tck_next(const fb_kp_gemm &p, tck_sched &s, long long t, tck_tile &T) {
  const long long ntn = (long long)(FB_SWIGLU == 1 ? p.N / 2 : p.N) / TCK_BROWS;
  while (s.e < p.experts) {
    if (s.count < 0) {
#if FB_MODE == 0
      const long long rows = tck_off(p, s.e + 1) - tck_off(p, s.e);
      s.mt = rows > 0 ? (rows + TCK_WM - 1) / TCK_WM : 0;
#else
      s.mt = p.M / TCK_WM;
#endif
      s.count = s.mt * ntn;
    }
    if (t < s.base + s.count) {
      const long long lt = t - s.base, mt = lt % s.mt, nt = lt / s.mt;
      T.e = s.e, T.n0 = (int)(nt * TCK_BROWS);
#if FB_MODE == 0
      T.row0 = tck_off(p, s.e) + mt * TCK_WM, T.rend = tck_off(p, s.e + 1), T.m0 = 0;
      T.nk = TCK_K96 ? (p.K + FB_TILE_K - 1) / FB_TILE_K : p.K / FB_TILE_K; /* K = 96: a partial last K tile */
#else
      T.row0 = tck_off(p, s.e), T.rend = tck_off(p, s.e + 1), T.m0 = (int)(mt * TCK_WM);
      T.nk = (int)((T.rend - T.row0) / FB_TILE_K);
#endif
      return 1;
    }
    s.base += s.count, s.count = -1, ++s.e;
  }
  return 0;
}

#if FB_S2F6
/* the combine payload of 32 columns (one row's): RHT-32 (signs, fbf_wht32) and S2F6 codes into c, the E8M0 returned */
static __device__ __forceinline__ unsigned tck_s2f6(float (&t)[32], unsigned signs, unsigned (&c)[8]) {
#if FB_RHT
  TCK_UNROLL
  for (int i = 0; i < 32; ++i)
    if ((signs >> i) & 1u) t[i] = -t[i];
  fbf_wht32(t);
#else
  (void)signs;
#endif
  float a = 0.0f;
  TCK_UNROLL
  for (int i = 0; i < 32; ++i) {
    const float x = fabsf(t[i]);
    if (x > a || x != x) a = a != a ? a : x;
  }
  const unsigned ex = fbf_s2f6_exp(a);
  const float inv = fbf_pow2(127 - (int)ex);
  TCK_UNROLL
  for (int i = 0; i < 8; ++i)
    c[i] = fbf_s2f6_code(t[4 * i], inv) | fbf_s2f6_code(t[4 * i + 1], inv) << 8 | fbf_s2f6_code(t[4 * i + 2], inv) << 16 |
           fbf_s2f6_code(t[4 * i + 3], inv) << 24;
  return ex;
}
#endif
extern "C" __global__ void __launch_bounds__(192, 1) FB_KERNEL(const __grid_constant__ fb_kp_gemm p) {
  unsigned char *sm = fbt_smem();
  const uint32_t base = fbt_smem_addr(sm);
  const unsigned tid = threadIdx.x, w = tid / 32, lane = tid % 32;
  /* the pair: CTA rank r of the cluster holds rows 128 r .. of the tile (A's and the accumulator's) and B's rows
     r TN / 2 ..; the even CTA (rank 0) issues the MMAs. The tiles are walked per cluster: tile index blockIdx.x / 2. */
#if FB_CLUSTER > 1
  const uint32_t rank = fbt_cluster_rank();
#else
  const uint32_t rank = 0;
#endif
  const long long t0 = blockIdx.x / FB_CLUSTER, tstep = gridDim.x / FB_CLUSTER;
  /* barriers at the start: full[S], empty[S], tmem_full[2], tmem_empty[2], then the TMEM address, then (the pair, the
     even CTA's) pfull[S]; the stages from the first 1024-byte boundary after 128 bytes (128-byte swizzle atoms repeat
     every 1024; the barriers may use up to that boundary, fb_gemm.h's 2048 bytes of slack) */
#define TCK_FULL(s) (base + 8 * (s))
#define TCK_EMPTY(s) (base + 8 * (FB_STAGES + (s)))
#define TCK_TFULL(a) (base + 8 * (2 * FB_STAGES + (a)))
#define TCK_TEMPTY(a) (base + 8 * (2 * FB_STAGES + 2 + (a)))
#define TCK_PFULL(s) (base + 8 * (2 * FB_STAGES + 5 + (s))) /* the pair: the odd CTA's stage s is in (1 arrival) */
  const uint32_t slot = base + 8 * (2 * FB_STAGES + 4);
  const uint32_t stage0 = (base + 128 + 1023) & ~1023u;
#define TCK_STAGE(s) (stage0 + (unsigned)(s) * TCK_STAGE_BYTES) /* A's boxes, B's boxes, A's atoms, B's atoms */
  if (tid == 0) {
    /* empty: the commits of the MMA issuers reading the stage (B multicast: both CTAs') */
    for (int s = 0; s < FB_STAGES; ++s)
      fbt_mbar_init(TCK_FULL(s), FB_KIND ? 33 : 1), fbt_mbar_init(TCK_EMPTY(s), TCK_MC && FB_TEST_BREAK != 15 ? 2 : 1);
    /* tmem_empty: the epilogue threads of the tile's CTAs (the pair: the odd CTA's arrive on the even CTA's) */
    for (int a = 0; a < TCK_ACC; ++a) fbt_mbar_init(TCK_TFULL(a), 1), fbt_mbar_init(TCK_TEMPTY(a), TCK_PAIR ? 256 : 128);
#if TCK_PAIR
    for (int s = 0; s < FB_STAGES; ++s) fbt_mbar_init(TCK_PFULL(s), 1);
#endif
    fbt_fence_mbar_init();
  }
  if (w == 1) TCK_ALLOC(slot, TCK_TMEM_COLS); /* the pair: warp 1 of each CTA, the same columns */
  fbt_fence_before();
  TCK_SYNC(); /* clusters: the peer's barriers are initialised (the pair: its TMEM allocated) before either CTA uses them */
  fbt_fence_after();
  const uint32_t tmem = *(volatile uint32_t *)(sm + (slot - base));

  if (w == 0) { /* ---- the TMA producer ---- */
    const uint32_t leader = fbt_elect_one();
    unsigned it = 0;
    tck_sched sc = {0, 0, -1, 0};
    tck_tile T;
    for (long long t = t0; tck_next(p, sc, t, T); t += tstep)
      for (int kb = 0; kb < T.nk; ++kb, ++it) {
        const unsigned s = it % FB_STAGES, ph = (it / FB_STAGES) & 1;
        if (FB_TEST_BREAK != 2) fbt_mbar_wait(TCK_EMPTY(s), ph ^ 1);
        /* the box coordinates: K (BF16 elements or bytes) and this CTA's rows of A and B */
#if FB_MODE == 0
        const long long kc = (long long)kb * TCK_RB / (FB_KIND ? 1 : 2);
        const int ay = (int)T.row0 + TCK_CM * (int)rank, by = T.e * p.N + T.n0;
#else
        const long long kc = T.row0 + (long long)kb * FB_TILE_K; /* A and B are M / N x rows: BF16 elements or bytes */
        const int ay = T.m0 + TCK_CM * (int)rank, by = T.n0;
#endif
#if TCK_K96 /* a partial last K tile: the boxes with bytes before K only (the rest of the stage is scaled 0) */
        const long long kleft = (long long)p.K / 2 - kc;
        const int nbox = kleft < TCK_RB ? (int)((kleft + TCK_SW - 1) / TCK_SW) : TCK_NATOM;
#else
        const int nbox = TCK_NATOM;
#endif
        if (leader) {
          /* B multicast: all of B lands here, half from each CTA's load (16: only this CTA's own half expected); a
             partial K = 96 tile: its first nbox boxes of each */
          fbt_mbar_arrive_expect_tx(TCK_FULL(s),
                                    nbox * (TCK_A_BYTES + (TCK_MC && FB_TEST_BREAK == 16 ? TCK_B_BYTES / 2 : TCK_B_BYTES)) / TCK_NATOM);
          const uint32_t sa = TCK_STAGE(s), sb = sa + TCK_A_BYTES;
          const int step = TCK_SW / (FB_KIND ? 1 : 2); /* a box's K extent, in the map's elements */
          for (int x = 0; x < nbox; ++x) {
            fbt_tma_load_2d(sa + x * TCK_CM * TCK_SW, &p.ta, (int)kc + x * step, ay, TCK_FULL(s));
#if TCK_PAIR /* this CTA's half of B: rows r TN / 2 .. of the tile's (SwiGLU: the gate half in the even CTA, up in the odd) */
#if FB_SWIGLU == 1
            fbt_tma_load_2d(sb + x * TCK_BCTA * TCK_SW, &p.tb, (int)kc + x * step, T.e * p.N + (int)rank * (p.N / 2) + T.n0, TCK_FULL(s));
#else
            fbt_tma_load_2d(sb + x * TCK_BCTA * TCK_SW, &p.tb, (int)kc + x * step, by + (int)rank * TCK_BCTA, TCK_FULL(s));
#endif
#elif TCK_MC /* this CTA's half of B's rows (SwiGLU: the gate half in CTA 0, up in CTA 1) into the stage of both CTAs */
#if FB_SWIGLU == 1
            fbt_tma_load_2d_mc(sb + x * TCK_TN * TCK_SW + rank * (TCK_TN / 2) * TCK_SW, &p.tb, (int)kc + x * step,
                               T.e * p.N + (int)rank * (p.N / 2) + T.n0, TCK_FULL(s), TCK_MC_MASK);
#else
            fbt_tma_load_2d_mc(sb + x * TCK_TN * TCK_SW + rank * (TCK_TN / 2) * TCK_SW, &p.tb, (int)kc + x * step,
                               by + (int)rank * (TCK_TN / 2), TCK_FULL(s), TCK_MC_MASK);
#endif
#elif FB_SWIGLU == 1
            fbt_tma_load_2d(sb + x * TCK_TN * TCK_SW, &p.tb, (int)kc + x * step, T.e * p.N + T.n0, TCK_FULL(s));
            fbt_tma_load_2d(sb + x * TCK_TN * TCK_SW + TCK_BROWS * TCK_SW, &p.tb, (int)kc + x * step, T.e * p.N + p.N / 2 + T.n0,
                            TCK_FULL(s));
#else
            fbt_tma_load_2d(sb + x * TCK_TN * TCK_SW, &p.tb, (int)kc + x * step, by, TCK_FULL(s));
#endif
          }
        }
        (void)by;
#if FB_KIND
        /* the stage's k-blocks of scales into 128 x 4 atoms (byte (r % 32) * 16 + (r / 32 % 4) * 4 + kb % 4 of an atom):
           A's atom x (k-blocks 4x .. 4x + 3; this CTA's 128 rows) at 512 x, B's (x, row block rr) at 512 (x * TCK_NR + rr),
           after A's: all TN rows of B in each CTA (the pair's MMA reads B's scales from both CTAs' TMEM, docs/tc_model.md) */
        unsigned char *sfa = sm + (TCK_STAGE(s) - base) + TCK_A_BYTES + TCK_B_BYTES, *sfb = sfa + TCK_SFA_BYTES;
        const unsigned char *asf = (const unsigned char *)p.a_sf, *bsf = (const unsigned char *)p.b_sf;
        const unsigned char one = FB_KIND == 1 ? 0x38 : 127; /* 1.0: rows past the tensor (zeros, never stored) */
#if FB_MODE == 0
        const long long kbs = p.K / TCK_SFBLK, kb0 = (long long)kb * TCK_KB, total = tck_off(p, p.experts);
#else
        const long long kbs = p.rows / TCK_SFBLK, kb0 = (T.row0 + (long long)kb * FB_TILE_K) / TCK_SFBLK;
#endif
#if TCK_K96 /* k-blocks jn.. of a partial last K tile are past K: scale 0 (13: 1.0), their products exact zeros */
        const int jn = kbs - kb0 < TCK_KB ? (int)(kbs - kb0) : TCK_KB;
        const unsigned char past = FB_TEST_BREAK == 13 ? 0x38 : 0;
#else
        const int jn = TCK_KB;
        const unsigned char past = 0;
#endif
        /* A lane's rows (4 of A, TN / 32 of B) k-blocks chunk by chunk, TCK_JC at a time: every row's chunk loaded first (one
           aligned word a row where it can be: the chunk's scales are contiguous in memory), then stored, so that a stage
           costs one global round trip a chunk, not one a row (the SASS had 8 LDG.U8 then the stores, row after row:
           docs/blackwell_expected.md) */
        const bool bsc = FB_TEST_BREAK != 6 || rank == 0; /* 6: B's scales in the even CTA only */
#pragma unroll 1
        for (int j0 = 0; j0 < TCK_KB; j0 += TCK_JC) {
          const int valid = jn - j0; /* the chunk's k-blocks before K (a partial K = 96 tile); <= 0: none */
          unsigned long long va[TCK_CM / 32], vb[TCK_TN / 32];
#pragma unroll
          for (int i = 0; i < TCK_CM / 32; ++i) {
            const unsigned r = lane + 32 * i;
#if FB_MODE == 0
            const long long row = T.row0 + TCK_CM * rank + r;
            const bool in = row < total;
#else
            const long long row = T.m0 + TCK_CM * rank + r;
            const bool in = true;
#endif
            va[i] = in ? tck_ld_sf<TCK_JC>(asf + row * kbs + kb0 + j0, valid) : 0x0101010101010101ull * one;
          }
#pragma unroll
          for (int i = 0; i < TCK_TN / 32; ++i) {
            const unsigned r = lane + 32 * i;
#if FB_MODE == 0
#if FB_SWIGLU == 1
            const long long row = (long long)T.e * p.N + (r < TCK_BROWS ? T.n0 + r : p.N / 2 + T.n0 + (r - TCK_BROWS));
#else
            const long long row = (long long)T.e * p.N + T.n0 + r;
#endif
#else
            const long long row = T.n0 + r;
#endif
            vb[i] = bsc ? tck_ld_sf<TCK_JC>(bsf + row * kbs + kb0 + j0, valid) : 0ull;
          }
#pragma unroll
          for (int i = 0; i < TCK_CM / 32; ++i) {
            const unsigned r = lane + 32 * i;
            tck_st_sf<TCK_JC>(sfa, 512, (r % 32) * 16 + (r / 32 % 4) * 4, j0, va[i], valid, past);
          }
          if (bsc)
#pragma unroll
            for (int i = 0; i < TCK_TN / 32; ++i) {
              const unsigned r = lane + 32 * i;
              tck_st_sf<TCK_JC>(sfb, 512 * TCK_NR, 512 * (r / 128) + (r % 32) * 16 + (r / 32 % 4) * 4, j0, vb[i], valid, past);
            }
        }
        fbt_fence_proxy_async();
        fbt_mbar_arrive(TCK_FULL(s));
        __syncwarp();
#endif
      }
#if TCK_MC
    /* the producer's tail: the last release of every stage (the commits of both CTAs' MMA issuers, the peer's a remote
       arrive on this CTA's barrier) is in before this CTA may exit (18: not waited for) */
    if (FB_TEST_BREAK != 18)
      for (int i = 0; i < FB_STAGES; ++i, ++it) fbt_mbar_wait(TCK_EMPTY(it % FB_STAGES), ((it / FB_STAGES) & 1) ^ 1);
#endif
  } else if (w == 1) {
#if TCK_PAIR
    if (rank) { /* ---- the odd CTA's relay: its stage s is in (TMA bytes, scale atoms) -> pfull[s] of the even CTA ---- */
      if (fbt_elect_one()) {
        unsigned it = 0;
        tck_sched sc = {0, 0, -1, 0};
        tck_tile T;
        for (long long t = t0; tck_next(p, sc, t, T); t += tstep)
          for (int kb = 0; kb < T.nk; ++kb, ++it) {
            const unsigned s = it % FB_STAGES, ph = (it / FB_STAGES) & 1;
            fbt_mbar_wait(TCK_FULL(s), ph);
            fbt_mbar_arrive_cluster(fbt_mapa(TCK_PFULL(s), 0));
          }
      }
      __syncwarp();
    } else
#endif
    { /* ---- the MMA issuer (the pair: the even CTA's, for both) ---- */
      if (fbt_elect_one()) {
        unsigned it = 0, lt = 0;
        tck_sched sc = {0, 0, -1, 0};
        tck_tile T;
#if FB_KIND == 1
        const uint32_t idesc = fb_tc_idesc_bs(FB_TC_MXF4_E2M1, FB_TC_MXF4_E2M1, 0, TCK_TM, TCK_TN, 0, 0, 0, 0, TCK_K96);
#elif FB_KIND == 2
        const uint32_t idesc = fb_tc_idesc_bs(FB_TC_E4M3, FB_TC_E4M3, 1, TCK_TM, TCK_TN, 0, 0, 0, 0, 0);
#else
        const uint32_t idesc = fb_tc_idesc(FB_TC_BF16, FB_TC_BF16, FB_TC_D_F32, TCK_TM, TCK_TN, 0, 0);
#endif
        for (long long t = t0; tck_next(p, sc, t, T); t += tstep, ++lt) {
          const unsigned a = lt % TCK_ACC, aph = (lt / TCK_ACC) & 1;
          if (FB_TEST_BREAK != 1) fbt_mbar_wait(TCK_TEMPTY(a), aph ^ 1);
          fbt_fence_after();
          const uint32_t d = tmem + a * TCK_TN;
          for (int kb = 0; kb < T.nk; ++kb, ++it) {
            const unsigned s = it % FB_STAGES, ph = (it / FB_STAGES) & 1;
            fbt_mbar_wait(TCK_FULL(s), ph);
#if TCK_PAIR
            if (FB_TEST_BREAK != 7) fbt_mbar_wait(TCK_PFULL(s), ph); /* and the odd CTA's half (7: not waited for) */
#endif
            fbt_fence_after();
            const uint32_t sa = TCK_STAGE(s), sb = sa + TCK_A_BYTES;
#if FB_KIND
            /* the atoms into TMEM: A's atom x at columns sfa_col + 4 x, B's (x, rr) at sfb_col + 4 (x * TCK_NR + rr) (the
               pair: each CTA's own atoms into its own TMEM, tcgen05.cp.cta_group::2) */
            const uint32_t sfa_col = tmem + TCK_SF_COL + TCK_SF_STAGE_COLS * s, sfb_col = sfa_col + 4 * TCK_KATOMS;
            const uint32_t sf_smem = sb + TCK_B_BYTES;
            for (int x = 0; x < TCK_KATOMS; ++x) TCK_CP(sfa_col + 4 * x, fb_tc_sdesc(sf_smem + 512 * x, 16, 128, FB_TC_SW_NONE, 0, 0));
            for (int x = 0; x < TCK_KATOMS * TCK_NR; ++x)
              TCK_CP(sfb_col + 4 * x, fb_tc_sdesc(sf_smem + TCK_SFA_BYTES + 512 * x, 16, 128, FB_TC_SW_NONE, 0, 0));
#endif
#if TCK_K96 /* a partial last K tile: the MMAs up to the one holding K's end (12: that one left out) */
            const long long kleft = (long long)p.K / 2 - (long long)kb * TCK_RB;
            const int nmma = kleft >= TCK_RB ? TCK_NMMA : FB_TEST_BREAK == 12 ? (int)(kleft / TCK_MB) : (int)((kleft + TCK_MB - 1) / TCK_MB);
#else
            const int nmma = TCK_NMMA;
#endif
            for (int j = 0; j < nmma; ++j) {
#if TCK_K96
              /* MMA j: 48 bytes of every row from byte 48 j of the stage row: box x at byte o; where they cross the box's
                 128-byte row, the rest from the next box's start (the absolute LBO; 9: its own box's, 11: relative) */
              const int x = 48 * j / 128, o = 48 * j % 128, cross = o + 48 > 128;
              const int nx = cross && FB_TEST_BREAK != 9 ? x + 1 : x, abs_mode = !(cross && FB_TEST_BREAK == 11);
              const uint64_t ad = fb_tc_sdesc(sa + x * TCK_CM * 128 + o, abs_mode ? sa + nx * TCK_CM * 128 : 16, 1024, FB_TC_SW128, 0, abs_mode);
              const uint64_t bd = fb_tc_sdesc(sb + x * TCK_BCTA * 128 + o, abs_mode ? sb + nx * TCK_BCTA * 128 : 16, 1024, FB_TC_SW128, 0, abs_mode);
#else
              /* MMA j: 32 bytes of every row, box j / (SW / 32) at byte 32 (j % (SW / 32)) */
              const int x = j / (TCK_SW / 32), o = 32 * (j % (TCK_SW / 32));
              const uint64_t ad = fb_tc_sdesc(sa + x * TCK_CM * TCK_SW + o, 16, 8 * TCK_SW, TCK_LAYOUT, 0, 0);
              const uint64_t bd = fb_tc_sdesc(sb + x * TCK_BCTA * TCK_SW + o, 16, 8 * TCK_SW,
                                              FB_TEST_BREAK == 5 ? (TCK_LAYOUT == FB_TC_SW128 ? FB_TC_SW64 : FB_TC_SW128) : TCK_LAYOUT, 0, 0);
#endif
              const uint32_t acc = kb > 0 || j > 0;
#if FB_KIND == 1 && TCK_K96
              /* k-blocks 6 j .. 6 j + 5: from atom 6 j / 4 on, the scale-factor id the byte 6 j % 4 (0 or 2; 10: 0) */
              const int a0 = 6 * j / 4;
              const uint32_t sid = FB_TEST_BREAK == 10 ? 0u : (uint32_t)(6 * j % 4);
              TCK_MMA_NVF4(d, ad, bd, idesc | sid << 29 | sid << 4, sfa_col + 4 * a0, sfb_col + 4 * TCK_NR * a0, acc);
#elif FB_KIND == 1 /* one atom (4 k-blocks of 16) per MMA, sf id 0 */
              TCK_MMA_NVF4(d, ad, bd, idesc, sfa_col + 4 * j, sfb_col + 4 * TCK_NR * j, acc);
#elif FB_KIND == 2 /* k-block j of the stage: atom j / 4, byte j % 4 (the scale-factor ids) */
              const uint32_t sid = FB_TEST_BREAK == 4 ? (uint32_t)(j + 1) % 4 : (uint32_t)j % 4;
              TCK_MMA_MXF8(d, ad, bd, idesc | sid << 29 | sid << 4, sfa_col + 4 * (j / 4), sfb_col + 4 * TCK_NR * (j / 4), acc);
#else
              TCK_MMA_F16(d, ad, bd, idesc, acc);
#endif
            }
            TCK_COMMIT_STAGE(TCK_EMPTY(s)); /* the stage is free (the pair, B multicast: in both CTAs) once these MMAs have read it */
          }
          TCK_COMMIT(TCK_TFULL(a)); /* (a wgrad tile of an empty expert issued none: the epilogue writes zeros) */
        }
      }
      __syncwarp();
    }
  } else { /* ---- the epilogue: warps 2..5, lane quarters 2, 3, 0, 1 (the pair: each CTA its own 128 rows) ---- */
    const unsigned q = w % 4;
    unsigned lt = 0;
    tck_sched sc = {0, 0, -1, 0};
    tck_tile T;
    for (long long t = t0; tck_next(p, sc, t, T); t += tstep, ++lt) {
      const unsigned a = lt % TCK_ACC, aph = (lt / TCK_ACC) & 1;
      fbt_mbar_wait(TCK_TFULL(a), aph);
      if (FB_TEST_BREAK != 3) fbt_fence_after();
      const uint32_t taddr = tmem + ((32 * q) << 16) + a * TCK_TN;
#if FB_MODE == 0
      const long long r = T.row0 + TCK_CM * rank + 32 * q + lane;
      const bool live = r < T.rend;
#if FB_KIND == 1
      const float so = live ? (p.a_outer ? ((const float *)p.a_outer)[FB_A_OUTER == 1 ? r : 0] : 1.0f) *
                                  (p.b_outer ? ((const float *)p.b_outer)[FB_B_OUTER == 1 ? T.e : 0] : 1.0f)
                            : 1.0f;
#else
      const float so = 1.0f;
#endif
#if FB_SWIGLU == 1
      /* gate columns [0, BN / 2) and up [BN / 2, BN) of the accumulator: H = [g | u] in BF16 (to p.aux when set),
         A = bf16(silu(g) * u), rows x N / 2 */
      const long long f = p.N / 2;
      for (int c0 = 0; c0 < TCK_BROWS; c0 += 32) {
        uint32_t g[32], u[32];
        fbt_ld_32x32b_x32(taddr + c0, g);
        fbt_ld_32x32b_x32(taddr + TCK_BROWS + c0, u);
        fbt_wait_ld();
        if (!live) continue;
        unsigned short *hg = (unsigned short *)p.aux + r * p.N + T.n0 + c0, *hu = hg + f;
        unsigned short *ao = (unsigned short *)p.out + r * f + T.n0 + c0;
        TCK_UNROLL
        for (int j = 0; j < 32; ++j) {
          const unsigned short gb = fbo_bf16_rne(__uint_as_float(g[j]) * so), ub = fbo_bf16_rne(__uint_as_float(u[j]) * so);
          if (p.aux) hg[j] = gb, hu[j] = ub;
          ao[j] = fbo_bf16_rne(fbm_siluf(fbo_bf16_f32(gb)) * fbo_bf16_f32(ub));
        }
      }
#else
      for (int c0 = 0; c0 < TCK_TN; c0 += 32) {
        uint32_t v[32];
        fbt_ld_32x32b_x32(taddr + c0, v);
        fbt_wait_ld();
        if (!live) continue;
        const long long col = T.n0 + c0;
#if FB_SWIGLU == 2
        /* dA (rounded to BF16, as the unfused path stores it) and H = [g | u] (p.aux, rows x 2N) -> dH = [dg | du] */
        const unsigned short *hg = (const unsigned short *)p.aux + r * 2 * p.N + col, *hu = hg + p.N;
        unsigned short *dg = (unsigned short *)p.out + r * 2 * p.N + col, *du = dg + p.N;
        TCK_UNROLL
        for (int j = 0; j < 32; ++j) {
          float x, y;
          fbo_swiglu_bwd(fbo_bf16_f32(hg[j]), fbo_bf16_f32(hu[j]), fbo_bf16_f32(fbo_bf16_rne(__uint_as_float(v[j]) * so)), &x, &y);
          dg[j] = fbo_bf16_rne(x), du[j] = fbo_bf16_rne(y);
        }
#elif FB_S2F6
        float tv[32];
        unsigned c[8];
        TCK_UNROLL
        for (int j = 0; j < 32; ++j) tv[j] = __uint_as_float(v[j]) * so;
        const unsigned ex = tck_s2f6(tv, p.signs, c);
        unsigned *o8 = (unsigned *)((signed char *)p.out + r * p.N + col);
        TCK_UNROLL
        for (int i = 0; i < 8; ++i) o8[i] = c[i];
        ((unsigned char *)p.out_sf)[r * (p.N / 32) + col / 32] = (unsigned char)ex;
#elif FB_OUT_BF16
        unsigned short *o = (unsigned short *)p.out + r * p.N + col;
        TCK_UNROLL
        for (int j = 0; j < 32; ++j) o[j] = fbo_bf16_rne(__uint_as_float(v[j]) * so);
#else
        float *o = (float *)p.out + r * p.N + col;
        TCK_UNROLL
        for (int j = 0; j < 32; ++j) o[j] = __uint_as_float(v[j]) * so;
#endif
      }
#endif
#else /* FB_MODE 1: D[e][m][n], FP32, every row live; an expert with no rows: zeros */
      const long long m = T.m0 + TCK_CM * rank + 32 * q + lane;
      float *o = (float *)p.out + ((long long)T.e * p.M + m) * p.N + T.n0;
      for (int c0 = 0; c0 < TCK_TN; c0 += 32) {
        uint32_t v[32];
        if (T.nk) {
          fbt_ld_32x32b_x32(taddr + c0, v);
          fbt_wait_ld();
        }
        TCK_UNROLL
        for (int j = 0; j < 32; ++j) o[c0 + j] = T.nk ? __uint_as_float(v[j]) : 0.0f;
      }
#endif
      fbt_fence_before();
#if TCK_PAIR
      if (rank) fbt_mbar_arrive_cluster(fbt_mapa(TCK_TEMPTY(a), 0)); /* the even CTA's MMAs write both CTAs' accumulators */
      else
#endif
        fbt_mbar_arrive(TCK_TEMPTY(a));
    }
  }
  fbt_fence_before();
  /* the pair: every MMA writing either CTA's TMEM and every arrive on the even CTA's barriers is done before either
     CTA frees its columns or exits (8: a CTA barrier only; the model reports the odd CTA's last arrives on the even
     CTA's tmem_empty as not ordered before the even CTA's exit). B multicast: the producer's tail did it. */
#if FB_TEST_BREAK == 8
  __syncthreads();
#else
  TCK_SYNC_END();
#endif
  if (w == 1) {
    fbt_fence_after();
    TCK_DEALLOC(tmem, TCK_TMEM_COLS);
    TCK_RELINQUISH();
  }
#undef TCK_FULL
#undef TCK_EMPTY
#undef TCK_TFULL
#undef TCK_TEMPTY
#undef TCK_PFULL
#undef TCK_STAGE
}

/* the template's own macros go (a test includes it once per class: tests/emu/gemm_sm100_class.h, which undefines
   the class's FB_* too) */
#undef TCK_ACC
#undef TCK_ALLOC
#undef TCK_A_BYTES
#undef TCK_BCTA
#undef TCK_CM
#undef TCK_COMMIT
#undef TCK_CP
#undef TCK_DEALLOC
#undef TCK_MMA_F16
#undef TCK_MMA_MXF8
#undef TCK_MMA_NVF4
#undef TCK_PAIR
#undef TCK_MC
#undef TCK_MC_MASK
#undef TCK_WM
#undef TCK_COMMIT_STAGE
#undef TCK_SYNC_END
#undef TCK_RELINQUISH
#undef TCK_SYNC
#undef TCK_BROWS
#undef TCK_B_BYTES
#undef TCK_KATOMS
#undef TCK_KB
#undef TCK_LAYOUT
#undef TCK_NATOM
#undef TCK_NMMA
#undef TCK_K96
#undef TCK_MB
#undef TCK_NR
#undef TCK_RB
#undef TCK_SFA_BYTES
#undef TCK_SFBLK
#undef TCK_SF_COL
#undef TCK_SF_STAGE_COLS
#undef TCK_STAGE_BYTES
#undef TCK_SW
#undef TCK_TM
#undef TCK_TMEM_COLS
#undef TCK_TN
#undef TCK_UNROLL
