/* gemm_sm90.cuh — grouped GEMM over experts for Hopper (sm_90a): TMA loads through an FB_STAGES-deep mbarrier
 * pipeline, one producer warpgroup and FB_CONSUMERS consumer warpgroups (setmaxnreg 40 / 232 with two; 56 / 224 for FP8), a
 * persistent tile scheduler that reads the expert offsets on the device, wgmma.mma_async with FP32 accumulators.
 * The parameter block and the shapes: fb_gemm.h. Written from the PTX ISA; facts in docs/hardware.md "Hopper (sm_90a) fact sheet".
 *
 * FB_KIND (operands):
 *   0  BF16 x BF16: both from shared memory (SS), 128-byte swizzled K-major tiles, wgmma k16.
 *   1  NVFP4 x BF16-copy: A is NVFP4 (packed E2M1 codes, E4M3 scale per 16 along K; the per-row FP32 S_dec
 *      applied in the epilogue). The codes come in by TMA (64-byte swizzle), are read with ldmatrix and decoded
 *      in registers to e2m1 * sf in BF16 — exact: at most 6 significant bits — and fed to wgmma from registers
 *      (RS). B is the exact BF16 copy e2m1 * sf of the NVFP4 weights (made once per step; its S_dec per expert is
 *      applied in the epilogue), stored with K permuted inside every 32-group so that it meets A's register
 *      fragment: position 16s + p of a group holds element 8*((p & 7) >> 1) + 4s + 2*(p >> 3) + (p & 1).
 *      The permutation is the same for both operands' products, so the sum is the same sum (docs/numerics.md "GEMM accumulation").
 *   2  MXFP8 x MXFP8: E4M3 from shared memory (SS), wgmma k32 = one MX block: each k32 product goes to a
 *      temporary accumulator and is promoted, acc += tmp * (sa * sb), sa and sb the two E8M0 scales (powers of
 *      two). Three warps of the producer warpgroup stage the scales of each pipeline stage into shared memory.
 *   3  MXFP8 x BF16-copy (FB_KIND 2 with FB_WEIGHTS_BF16 1): A is MXFP8, read with ldmatrix and decoded in
 *      registers to e4m3 * 2^(e-127) in BF16 (exact), wgmma from registers; B is the exact BF16 copy of the other
 *      MXFP8 operand, K permuted inside every 16-group: position p holds element 4*((p & 7) >> 1) + 2*(p >> 3) + (p & 1).
 *      Hopper's FP8 wgmma sums a k32 product with about 14 bits (kind 2 measured a relative error of 4.6e-5 against
 *      the FP64 reference); BF16 products are exact in FP32, so kind 3 keeps the recipe's numerics to FP32 order.
 * FB_SWIGLU 1 (mode 0, BF16 output; w13 fwd): B's N = 2f rows per expert are gate [0, f) then up [f, 2f); a tile
 *   loads FB_TILE_N / 2 gate rows and the same up rows, so each thread holds g and u of the same output column. H = [g | u]
 *   is rounded to BF16 (the activation the backward reads) and written to p.aux (rows x 2f) when p.aux is set; then
 *   A = bf16(fbm_siluf(g) * u) of the BF16 g, u (as swiglu.cuh on the stored H), rows x f.
 * FB_SWIGLU 2 (mode 0, w2 dgrad): the accumulators are dA (rows x N = f), rounded to BF16 (as the unfused path stores it);
 *   with H = [g | u] (p.aux, rows x 2f BF16) the epilogue writes dH = [bf16(dg) | bf16(du)] (fbo_swiglu_bwd), rows x 2f.
 * FB_S2F6 1 (mode 0, w2 fwd): the combine payload of docs/numerics.md from the FP32 result: per 32 columns RHT-32 (FB_RHT,
 *   sign mask p.signs) then S2F6: int8 codes to p.out (rows x N), E8M0 to p.out_sf (rows x N/32), as fb_s2f6_quantize.
 * FB_MODE: 0 rows grouped (fwd, dgrad); 1 K grouped (wgrad). FB_OUT_BF16: BF16 output (RNE), else FP32.
 * FB_A_OUTER / FB_B_OUTER (FB_KIND 1): 1 per row of A / per expert of B, 2 one per tensor (index 0). The epilogue
 * writes acc * (S_dec(A) * S_dec(B)).
 * Tune parameters: FB_TILE_M, FB_TILE_N, FB_TILE_K, FB_STAGES, FB_CONSUMERS (fb_gemm_config() on the host
 * checks them; gen/templates.c prunes what does not fit), and FB_PIPE (0 when not defined). For FB_KIND 2, pipe 2 keeps
 * two k32 products: the next one's wgmma is issued before this one is promoted, so the promotion's CUDA-core work runs
 * beside the tensor cores (pipe 0 waits for each; the same wgmmas and promotions in the same order: bit-identical).
 * For FB_KIND 1 and 3:
 *   0  per k-block: ldmatrix + decode of all 8 k16 A fragments, 8 wgmma, commit, wait 0, release the stage, so a
 *      warpgroup's decode never overlaps its own wgmmas (only the other consumer warpgroup's);
 *   N  (1 or 2) the 8 k16 steps of a k-block in N commit groups, software-pipelined over two fragment slots: the
 *      fragments of group g + 1 are decoded while group g runs (wait_group 1 keeps one group in flight), and a stage
 *      is released once the first group of the next k-block has retired its last group. N = 1: two whole k-block
 *      slots (32 more registers per m64 sub-tile); N = 2: half k-blocks, as many fragment registers as 0.
 *   The wgmmas and their order on every accumulator are those of 0, so the result is bit-identical.
 * FB_PINGPONG 1 (two consumer warpgroups): each warpgroup computes whole tiles, the CTA's even tiles warpgroup 0 and the
 *   odd ones warpgroup 1, so that one's epilogue runs while the other's main loop has the tensor cores (the wgrads' FP32
 *   tiles: a short K, the rows of an expert, and a 64 KiB store a tile). Both walk the same stage ring, each stepping over
 *   the other's stages without waiting on them; a main loop starts only after the other warpgroup's previous one has
 *   passed all its waits (an mbarrier each, count 1), so no wait ever sees a stage's barrier more than one phase behind
 *   (try_wait.parity tells two phases apart, not three). Each stage is released once: EMPTY counts 1. The wgmmas and
 *   their order on every accumulator are those of FB_PINGPONG 0 with one consumer: bit-identical.
 * Launch: 128 * (1 + FB_CONSUMERS) threads, one CTA per SM (persistent), dynamic shared memory as
 * fb_gemm_smem_bytes() says. Rows of a tile past its expert's end are computed from whatever the TMA loads
 * there (the next expert's rows or zeros past the tensor) and never stored. */
#include "fb_gemm.h"
#ifndef FB_DEBUG
#define FB_DEBUG 0
#endif
#ifndef FB_EPI_CHEAP
#define FB_EPI_CHEAP 0
#endif
#ifndef FB_PIPE
#define FB_PIPE 0
#endif

#if FB_KIND == 2 && defined(FB_WEIGHTS_BF16)
#if FB_WEIGHTS_BF16
#undef FB_KIND
#define FB_KIND 3
#endif
#endif
#define BM FB_TILE_M
#define BN FB_TILE_N
#define BK FB_TILE_K
#define NST FB_STAGES
#define NC FB_CONSUMERS
#ifndef FB_PINGPONG
#define FB_PINGPONG 0
#endif
#if FB_PINGPONG
#define WM BM /* ping-pong: each consumer warpgroup computes whole tiles, every other one of the CTA's */
#else
#define WM (BM / NC) /* rows of a consumer warpgroup */
#endif
#define MW (WM / 64) /* its m64 sub-tiles */
#define FB_WGMMA_N BN
#include "fb_wgmma.h"
#ifndef FB_SWIGLU
#define FB_SWIGLU 0
#endif
#ifndef FB_S2F6
#define FB_S2F6 0
#endif
#if FB_SWIGLU == 1
#define BROWS (BN / 2) /* B rows per TMA box: gate half, then up half */
#else
#define BROWS BN
#endif
#include "fb_gemm_dev.h"

#define FB_CAT2(a, b) a##b
#define FB_CAT(a, b) FB_CAT2(a, b)
#define WGMMA_SS_BF16 FB_CAT(fbw_ss_bf16_n, FB_WGMMA_N)
#define WGMMA_RS_BF16 FB_CAT(fbw_rs_bf16_n, FB_WGMMA_N)
#define WGMMA_SS_E4M3 FB_CAT(fbw_ss_e4m3_n, FB_WGMMA_N)

/* the stage layout: fb_gemm.h, shared with the generator and the launch */
#define A_BYTES fb_gemm_a_bytes(FB_KIND, BM, BK)
#define B_BYTES fb_gemm_b_bytes(FB_KIND, BN, BK)
#define SF_BYTES fb_gemm_sf_bytes(FB_KIND, BM, BN, BK)
#define ALIGN1K(x) fb_gemm_align1k(x)
#define STAGE_BYTES fb_gemm_stage_bytes(FB_KIND, BM, BN, BK)
#define SL 96                          /* FP8: the scale stagers' lanes (producer warps 1-3) */
#define SNR ((BM + BN + SL - 1) / SL)  /* rows of scales a stager lane loads per k-block */
#define FULL_COUNT (FB_KIND == 2 ? 1 + SL : 1)
/* with two consumer warpgroups: the producer warpgroup's registers and the consumers' (launched at 168 each, 384
   threads; 128 * P + 256 * C = 384 * 168). FP8's scale stagers need more than 40 (ptxas 13.0 spilled them). */
#if FB_KIND == 2
#define FBG_PRODUCER_REGS 56
#define FBG_CONSUMER_REGS 224
#else
#define FBG_PRODUCER_REGS 40
#define FBG_CONSUMER_REGS 232
#endif

static __device__ __forceinline__ void fbg_bar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
static __device__ __forceinline__ void fbg_bar_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void fbg_bar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
static __device__ __forceinline__ void fbg_bar_wait(u32 bar, u32 parity) {
  u32 done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  } while (!done);
}
static __device__ __forceinline__ void fbg_tma_2d(u32 dst, const fb_tmap *map, int c0, int c1, u32 bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               ::"r"(dst), "l"((u64)map), "r"(c0), "r"(c1), "r"(bar)
               : "memory");
}
static __device__ __forceinline__ void fbg_wg_fence(void) { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
static __device__ __forceinline__ void fbg_wg_commit(void) { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> static __device__ __forceinline__ void fbg_wg_wait(void) {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
template <int R> static __device__ __forceinline__ void fbg_fence_acc(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
/* K-major, 128-byte swizzle: SBO = 1024 bytes (8 rows of 128 B), LBO unused (1), layout type 1 */
static __device__ __forceinline__ u64 fbg_desc_sw128(u32 saddr) {
  return (u64)((saddr & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}
#if FB_KIND == 1 || FB_KIND == 3
/* A's fragments of the k16 steps k0 .. k0 + NF - 1 of the stage at sa, decoded to BF16 in registers: af[mw][j] is step
   k0 + j of m64 sub-tile mw of consumer c, this warp's 16 rows of it (fbg_decode_a16, fb_gemm_dev.h). sfc: the scales of
   the k-block of this thread's rows r0, r0 + 8. */
template <int NF>
static __device__ __forceinline__ void fbg_decode_a(u32 sa, const fbg_sfw (&sfc)[MW][2], u32 (&af)[MW][NF][4], int k0, int c,
                                                    int warp, int lane, int q) {
#pragma unroll
  for (int mw = 0; mw < MW; ++mw) fbg_decode_a16<NF>(sa, c * WM + mw * 64 + 16 * warp, sfc[mw], af[mw], k0, lane, q);
}
/* The wgmmas of k16 steps k0 .. k0 + NF - 1 from the fragments af, B of the stage at sb, as one commit group */
template <int NF>
static __device__ __forceinline__ void fbg_mma_rs(float (&acc)[MW][BN / 2], const u32 (&af)[MW][NF][4], u32 sb, int k0) {
#pragma unroll
  for (int mw = 0; mw < MW; ++mw) fbg_fence_acc(acc[mw]);
  fbg_wg_fence();
#pragma unroll
  for (int j = 0; j < NF; ++j) {
    const int k = k0 + j;
    u64 db = fbg_desc_sw128(sb + (k / 4) * BN * 128) + 2 * (k % 4);
#pragma unroll
    for (int mw = 0; mw < MW; ++mw) WGMMA_RS_BF16(acc[mw], af[mw][j][0], af[mw][j][1], af[mw][j][2], af[mw][j][3], db, 1);
  }
  fbg_wg_commit();
#pragma unroll
  for (int mw = 0; mw < MW; ++mw) fbg_fence_acc(acc[mw]);
}
#endif

#if FB_KIND == 2
/* k32 product k (of the k-block at sa, sb) of every m64 sub-tile of consumer c into t, as one commit group */
static __device__ __forceinline__ void fbg_e4m3_issue(float (&t)[MW][BN / 2], u32 sa, u32 sb, int k, int c) {
#pragma unroll
  for (int mw = 0; mw < MW; ++mw) fbg_fence_acc(t[mw]);
  fbg_wg_fence();
  u64 db = fbg_desc_sw128(sb) + 2 * k;
#pragma unroll
  for (int mw = 0; mw < MW; ++mw) WGMMA_SS_E4M3(t[mw], fbg_desc_sw128(sa + (c * WM + mw * 64) * 128) + 2 * k, db, 0);
  fbg_wg_commit();
#pragma unroll
  for (int mw = 0; mw < MW; ++mw) fbg_fence_acc(t[mw]);
}
/* acc += t * (sa * sb): k32 product j's promotion by the E8M0 scales of this thread's rows and columns */
static __device__ __forceinline__ void fbg_e4m3_promote(float (&acc)[MW][BN / 2], const float (&t)[MW][BN / 2], const float *sfa,
                                                        const float *sfb, int j, int c, int warp, int lane, int q) {
#pragma unroll
  for (int mw = 0; mw < MW; ++mw) {
    int r = c * WM + mw * 64 + 16 * warp + lane / 4;
    float sa0 = sfa[j * BM + r], sa1 = sfa[j * BM + r + 8];
#pragma unroll
    for (int jb = 0; jb < BN / 8; ++jb) {
      float2 sb = *(const float2 *)&sfb[j * BN + 8 * jb + 2 * q];
      acc[mw][4 * jb + 0] = fmaf(t[mw][4 * jb + 0], sa0 * sb.x, acc[mw][4 * jb + 0]);
      acc[mw][4 * jb + 1] = fmaf(t[mw][4 * jb + 1], sa0 * sb.y, acc[mw][4 * jb + 1]);
      acc[mw][4 * jb + 2] = fmaf(t[mw][4 * jb + 2], sa1 * sb.x, acc[mw][4 * jb + 2]);
      acc[mw][4 * jb + 3] = fmaf(t[mw][4 * jb + 3], sa1 * sb.y, acc[mw][4 * jb + 3]);
    }
  }
}
#endif

extern "C" __global__ void __launch_bounds__(128 * (NC + 1), 1) FB_KERNEL(const __grid_constant__ fb_kp_gemm p) {
  extern __shared__ unsigned char fbg_raw[];
#if FB_PINGPONG
  __shared__ alignas(8) unsigned long long fbg_ord[2]; /* ORD(c): the other warpgroup's main loop has passed its waits */
#define ORD(c_) (fbg_smem(fbg_ord) + 8u * (c_))
  static_assert(NC == 2, "FB_PINGPONG: two consumer warpgroups");
#endif
  const u32 raw = fbg_smem(fbg_raw);
  const u32 sbase = (raw + 1023u) & ~1023u;
  unsigned char *gbase = fbg_raw + (sbase - raw);
  const u32 bars = sbase + NST * STAGE_BYTES; /* full[NST], then empty[NST] */
#define FULL(s) (bars + 8u * (s))
#define EMPTY(s) (bars + 8u * (NST + (s)))
#define SA(s) (sbase + (s) * STAGE_BYTES)
#define SB(s) (SA(s) + ALIGN1K(A_BYTES))
#define SSF(s) (SB(s) + ALIGN1K(B_BYTES))
  const int tid = threadIdx.x, wg = tid / 128;
  /* warp and lane are read again after each branch's setmaxnreg (a volatile read of %tid.x, so not carried across it:
     ptxas 13.0 spilled the carried ones around the FP8 consumers' register increase) */
#define FBG_WARP_LANE                                                                                                  \
  u32 tid_;                                                                                                            \
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid_));                                                                 \
  const int warp = (int)(tid_ / 32) % 4, lane = (int)(tid_ % 32)
  if (FB_DEBUG && blockIdx.x == 0 && tid == 0)
    printf("kernel: experts %d M %d N %d K %d rows %lld offsets %llx out %llx raw %u\n", p.experts, p.M, p.N, p.K, p.rows, p.offsets, p.out, raw);
  if (tid == 0) {
    for (int s = 0; s < NST; ++s) fbg_bar_init(FULL(s), FULL_COUNT), fbg_bar_init(EMPTY(s), FB_PINGPONG ? 1 : NC);
#if FB_PINGPONG
    fbg_bar_init(ORD(0), 1), fbg_bar_init(ORD(1), 1);
#endif
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"((u64)&p.ta) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"((u64)&p.tb) : "memory");
  }
  __syncthreads();

  if (wg == 0) { /* ---------------- producer ---------------- */
#if NC == 2
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(FBG_PRODUCER_REGS));
#endif
    FBG_WARP_LANE;
    if (warp == 0 && lane == 0) {
      fbg_sched sc = {0, 0, -1, 0};
      int s = 0;
      u32 ph = 0;
      for (long long t = blockIdx.x; fbg_next(p, sc, t); t += gridDim.x) {
        long long lt = t - sc.base, mt = lt % sc.mt, nt = lt / sc.mt;
#if FB_MODE == 0
#if FB_SWIGLU == 1
        int arow = (int)(fbg_off(p, sc.e) + mt * BM), brow = (int)((long long)sc.e * p.N + nt * BROWS), k0 = 0;
        const int bup = p.N / 2; /* the up half's first row, after the gate half */
#define FBG_LOAD_B(dst, kc) (fbg_tma_2d((dst), &p.tb, (kc), brow, FULL(s)), fbg_tma_2d((dst) + BROWS * 128, &p.tb, (kc), brow + bup, FULL(s)))
#else
        int arow = (int)(fbg_off(p, sc.e) + mt * BM), brow = (int)((long long)sc.e * p.N + nt * BN), k0 = 0;
#define FBG_LOAD_B(dst, kc) fbg_tma_2d((dst), &p.tb, (kc), brow, FULL(s))
#endif
        int nk = p.K / BK;
#else
#define FBG_LOAD_B(dst, kc) fbg_tma_2d((dst), &p.tb, (kc), brow, FULL(s))
        int arow = (int)(mt * BM), brow = (int)(nt * BN), k0 = (int)fbg_off(p, sc.e);
        int nk = (int)((fbg_off(p, sc.e + 1) - k0) / BK);
#endif
        if (FB_DEBUG && blockIdx.x == 0) printf("producer t %lld e %d arow %d brow %d k0 %d nk %d\n", t, sc.e, arow, brow, k0, nk);
        for (int kb = 0; kb < nk; ++kb) {
          fbg_bar_wait(EMPTY(s), ph ^ 1);
          fbg_bar_expect_tx(FULL(s), A_BYTES + B_BYTES);
          int kk = k0 + kb * BK;
#if FB_KIND == 0
#pragma unroll
          for (int a = 0; a < BK / 64; ++a) {
            fbg_tma_2d(SA(s) + a * BM * 128, &p.ta, kk + a * 64, arow, FULL(s));
            FBG_LOAD_B(SB(s) + a * BN * 128, kk + a * 64);
          }
#elif FB_KIND == 3
          fbg_tma_2d(SA(s), &p.ta, kk, arow, FULL(s)); /* BK = 128: 128 bytes of codes per row */
#pragma unroll
          for (int a = 0; a < BK / 64; ++a) FBG_LOAD_B(SB(s) + a * BN * 128, kk + a * 64);
#elif FB_KIND == 1
          fbg_tma_2d(SA(s), &p.ta, kk / 2, arow, FULL(s)); /* BK = 128: 64 bytes of codes per row */
#pragma unroll
          for (int a = 0; a < BK / 64; ++a) FBG_LOAD_B(SB(s) + a * BN * 128, kk + a * 64);
#else
#pragma unroll
          for (int a = 0; a < BK / 128; ++a) { /* E4M3 rows of 128 bytes; B as FBG_LOAD_B: SwiGLU's gate and up halves */
            fbg_tma_2d(SA(s) + a * BM * 128, &p.ta, kk + a * 128, arow, FULL(s));
            FBG_LOAD_B(SB(s) + a * BN * 128, kk + a * 128);
          }
#endif
          if (++s == NST) s = 0, ph ^= 1;
        }
      }
    }
#if FB_KIND == 2
    if (warp >= 1) { /* the scale stagers (warps 1-3, SL lanes): E8M0 bytes -> FP32 2^(e-127), laid out [k32 block][row
                        or column]. A row's 4 scale bytes of a k-block are one aligned u32 (K and the experts' K offsets are
                        multiples of 128); each lane loads those of its rows before it waits for the stage, so
                        the loads' latency overlaps the wait (one warp loading byte by byte bounded the FP8 GEMMs:
                        ncu, 2026-12-02) */
      const int sl = (warp - 1) * 32 + lane;
      fbg_sched sc = {0, 0, -1, 0};
      int s = 0;
      u32 ph = 0;
      const long long kw = (FB_MODE == 0 ? (long long)p.K : p.rows) / 32; /* scale bytes per row */
      for (long long t = blockIdx.x; fbg_next(p, sc, t); t += gridDim.x) {
        long long lt = t - sc.base, mt = lt % sc.mt, nt = lt / sc.mt;
#if FB_MODE == 0
        /* B's rows as the producer loads them: with SwiGLU, BROWS gate rows from e N + nt BROWS, then as many up rows
           N / 2 further on */
        long long arow = fbg_off(p, sc.e) + mt * BM, brow = (long long)sc.e * p.N + nt * BROWS, k0 = 0, alim = p.rows;
        const long long bup = FB_SWIGLU == 1 ? p.N / 2 - BROWS : 0;
        int nk = p.K / BK;
#else
        const long long bup = 0;
        long long arow = mt * BM, brow = nt * BN, k0 = fbg_off(p, sc.e), alim = p.M;
        int nk = (int)((fbg_off(p, sc.e + 1) - k0) / BK);
#endif
        /* this lane's rows' scale words (u32 index into A's or B's scales; ~0u: a row past A's end) at k-block 0 */
        const u32 *wa = (const u32 *)p.a_sf, *wb = (const u32 *)p.b_sf;
        u32 wi[SNR];
#pragma unroll
        for (int n = 0; n < SNR; ++n) {
          const int i = sl + SL * n;
          wi[n] = ~0u;
          if (i < BM) wi[n] = arow + i < alim ? (u32)(((arow + i) * kw + k0 / 32) / 4) : ~0u;
          else if (i < BM + BN) wi[n] = (u32)(((brow + i - BM + (i - BM >= BROWS ? bup : 0)) * kw + k0 / 32) / 4);
        }
        for (int kb = 0; kb < nk; ++kb) {
          u32 cur[SNR]; /* loaded before the wait for the stage, so their latency overlaps it */
#pragma unroll
          for (int n = 0; n < SNR; ++n) cur[n] = wi[n] != ~0u ? (sl + SL * n < BM ? wa : wb)[wi[n] + kb] : 0x7F7F7F7Fu;
          fbg_bar_wait(EMPTY(s), ph ^ 1);
          float *sfa = (float *)(gbase + (SSF(s) - sbase)), *sfb = sfa + (BK / 32) * BM;
#pragma unroll
          for (int n = 0; n < SNR; ++n) {
            const int i = sl + SL * n;
            if (i >= BM + BN) continue;
#pragma unroll
            for (int j = 0; j < BK / 32; ++j) {
              u32 e = (cur[n] >> (8 * j)) & 0xFFu;
              u32 bits = e == 255u ? 0x7FC00000u : e == 0u ? 0x00400000u : e << 23;
              if (i < BM) sfa[j * BM + i] = __uint_as_float(bits);
              else sfb[j * BN + i - BM] = __uint_as_float(bits);
            }
          }
          fbg_bar_arrive(FULL(s)); /* each lane: its own writes, released */
          if (++s == NST) s = 0, ph ^= 1;
        }
      }
    }
#endif
    return;
  }

  /* ---------------- consumers ---------------- */
#if NC == 2
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(FBG_CONSUMER_REGS));
#endif
  FBG_WARP_LANE;
  const int c = wg - 1, q = lane % 4;
  const int cw = FB_PINGPONG ? 0 : c; /* the warpgroup's block of WM rows in the tile */
  fbg_sched sc = {0, 0, -1, 0};
  int s = 0;
  u32 ph = 0;
#if FB_PINGPONG
  u32 oph = 0; /* the parity of ORD(c)'s next phase */
  long long jt = 0; /* the tile's place in the CTA's walk */
#endif
  float acc[MW][BN / 2];
  for (long long t = blockIdx.x; fbg_next(p, sc, t); t += gridDim.x) {
    long long lt = t - sc.base, mt = lt % sc.mt, nt = lt / sc.mt;
#if FB_MODE == 0
    const long long row0 = fbg_off(p, sc.e) + mt * BM, rend = fbg_off(p, sc.e + 1);
    const int nk = p.K / BK;
#else
    const long long row0 = mt * BM, rend = p.M, k0 = fbg_off(p, sc.e);
    const int nk = (int)((fbg_off(p, sc.e + 1) - k0) / BK);
#endif
    const int n0 = (int)(nt * BN);
#if FB_PINGPONG
    if ((int)(jt++ & 1) != c) { /* the other warpgroup's tile: its nk stages go by */
      const int sn = s + nk;
      s = sn % NST, ph ^= (u32)((sn / NST) & 1);
      continue;
    }
    if (jt > 1) fbg_bar_wait(ORD(c), oph), oph ^= 1; /* the other's previous main loop has passed its waits */
#endif
    if (FB_DEBUG && blockIdx.x == 0 && (tid % 128) == 0) printf("consumer %d t %lld e %d row0 %lld rend %lld nk %d n0 %d\n", c, t, sc.e, row0, rend, nk, n0);
#pragma unroll
    for (int mw = 0; mw < MW; ++mw)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[mw][i] = 0.0f;

#if FB_KIND == 1 || FB_KIND == 3
    /* this thread's rows of A (r0, r0 + 8 of each m64 sub-tile): their block scales are loaded one k-block ahead */
    long long arow[MW][2];
#pragma unroll
    for (int mw = 0; mw < MW; ++mw)
#pragma unroll
      for (int h = 0; h < 2; ++h) arow[mw][h] = row0 + cw * WM + mw * 64 + 16 * warp + lane / 4 + 8 * h;
#endif
#if FB_KIND == 1
    /* NVFP4: 8 E4M3 bytes per row per k-block */
    const long long kw16 = p.K / 16;
    uint2 sfc[MW][2], sfn[MW][2];
#pragma unroll
    for (int mw = 0; mw < MW; ++mw)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        sfn[mw][h] = arow[mw][h] < p.rows ? *(const uint2 *)((const unsigned char *)p.a_sf + arow[mw][h] * kw16) : make_uint2(0, 0);
#endif
#if FB_KIND == 3
    /* MXFP8: 4 E8M0 bytes per row per k-block */
#if FB_MODE == 0
    const long long kw32 = p.K / 32, kb0 = 0, alim = p.rows;
#else
    const long long kw32 = p.rows / 32, kb0 = k0 / 32, alim = p.M;
#endif
    u32 sfc[MW][2], sfn[MW][2];
#pragma unroll
    for (int mw = 0; mw < MW; ++mw)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        sfn[mw][h] = nk > 0 && arow[mw][h] < alim ? *(const u32 *)((const unsigned char *)p.a_sf + arow[mw][h] * kw32 + kb0) : 0x7F7F7F7Fu;
#endif
#if FB_KIND == 3
    /* the scales of k-block kb_ become current, those of kb_ + 1 are loaded */
#define FBG_SF_ROTATE(kb_)                                                                                              \
  do {                                                                                                                 \
    _Pragma("unroll") for (int mw = 0; mw < MW; ++mw) _Pragma("unroll") for (int h = 0; h < 2; ++h) {                  \
      sfc[mw][h] = sfn[mw][h];                                                                                         \
      if ((kb_) + 1 < nk && arow[mw][h] < alim)                                                                        \
        sfn[mw][h] = *(const u32 *)((const unsigned char *)p.a_sf + arow[mw][h] * kw32 + kb0 + ((kb_) + 1) * (BK / 32)); \
    }                                                                                                                  \
  } while (0)
#elif FB_KIND == 1
#define FBG_SF_ROTATE(kb_)                                                                                              \
  do {                                                                                                                 \
    _Pragma("unroll") for (int mw = 0; mw < MW; ++mw) _Pragma("unroll") for (int h = 0; h < 2; ++h) {                  \
      sfc[mw][h] = sfn[mw][h];                                                                                         \
      if ((kb_) + 1 < nk && arow[mw][h] < p.rows)                                                                      \
        sfn[mw][h] = *(const uint2 *)((const unsigned char *)p.a_sf + arow[mw][h] * kw16 + ((kb_) + 1) * (BK / 16));   \
    }                                                                                                                  \
  } while (0)
#endif
#if (FB_KIND == 1 || FB_KIND == 3) && FB_PIPE
    /* FB_PIPE groups per k-block, PF k16 steps each; group g's fragments in slot g & 1. Each group is issued, then
       wait_group 1 retires the one before it (so its slot may be written again) while this one runs, then the next
       group's fragments are decoded. The first group of k-block kb retiring the last of kb - 1 releases kb - 1's stage. */
#define PF (8 / FB_PIPE)
    static_assert(FB_PIPE == 1 || FB_PIPE == 2, "FB_PIPE: 0, 1 or 2");
    u32 afb[2][MW][PF][4];
    int sp = 0; /* the stage of the previous k-block */
#define FBG_KBLOCK(kb_, u_)                                                                                             \
  do {                                                                                                                 \
    FBG_SF_ROTATE(kb_);                                                                                                \
    fbg_bar_wait(FULL(s), ph);                                                                                         \
    _Pragma("unroll") for (int h = 0; h < FB_PIPE; ++h) {                                                              \
      u32(&af)[MW][PF][4] = afb[((u_) * FB_PIPE + h) & 1];                                                             \
      fbg_decode_a<PF>(SA(s), sfc, af, h * PF, cw, warp, lane, q);                                                      \
      fbg_mma_rs<PF>(acc, af, SB(s), h * PF);                                                                          \
      fbg_wg_wait<1>();                                                                                                \
      if (h == 0 && (kb_) > 0 && lane == 0 && warp == 0) fbg_bar_arrive(EMPTY(sp));                                    \
    }                                                                                                                  \
    sp = s;                                                                                                            \
    if (++s == NST) s = 0, ph ^= 1;                                                                                    \
  } while (0)
#if FB_PIPE == 1
    /* two k-blocks a trip, no branch out between them (where the loop may leave between them, ptxas serializes the
       wgmmas: C7513); an odd nk's last k-block after the loop, slot 0 */
    int kb = 0;
    for (; kb + 2 <= nk; kb += 2) {
      FBG_KBLOCK(kb, 0);
      FBG_KBLOCK(kb + 1, 1);
    }
    if (kb < nk) FBG_KBLOCK(kb, 0);
#else
    for (int kb = 0; kb < nk; ++kb) FBG_KBLOCK(kb, 0);
#endif
#undef FBG_KBLOCK
    fbg_wg_wait<0>();
    /* The loop leaves with the last group in flight, so the epilogue may read the accumulators only after this wait,
       and nothing in C++ ties a register to an asm statement: the fence does (CUTLASS's warpgroup_fence_operand after
       warpgroup_wait). Without it NVVM put the MXFP8 SwiGLU epilogues' bit casts of acc (fbo_bf16_rne; S_dec is 1 there,
       so the product folds away) on the loop's exit edge, before wait_group 0, and ptxas kept them there (no C75xx):
       their outputs lacked the last 4 k16 steps (issue 18: rel 2-3e-1 against FP64 on the H200). */
#pragma unroll
    for (int mw = 0; mw < MW; ++mw) fbg_fence_acc(acc[mw]);
    if (nk > 0 && lane == 0 && warp == 0) fbg_bar_arrive(EMPTY(sp));
#undef PF
#else
    for (int kb = 0; kb < nk; ++kb) {
#if FB_KIND == 1 || FB_KIND == 3
      FBG_SF_ROTATE(kb);
#endif
      fbg_bar_wait(FULL(s), ph);
#if FB_KIND == 0
#pragma unroll
      for (int mw = 0; mw < MW; ++mw) fbg_fence_acc(acc[mw]);
      fbg_wg_fence();
#pragma unroll
      for (int a = 0; a < BK / 64; ++a)
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          u64 db = fbg_desc_sw128(SB(s) + a * BN * 128) + 2 * k;
#pragma unroll
          for (int mw = 0; mw < MW; ++mw)
            WGMMA_SS_BF16(acc[mw], fbg_desc_sw128(SA(s) + a * BM * 128 + (cw * WM + mw * 64) * 128) + 2 * k, db, 1);
        }
      fbg_wg_commit();
#pragma unroll
      for (int mw = 0; mw < MW; ++mw) fbg_fence_acc(acc[mw]);
      fbg_wg_wait<0>();
      if (lane == 0 && warp == 0) fbg_bar_arrive(EMPTY(s));
#elif FB_KIND == 1 || FB_KIND == 3
      /* A fragments of the 8 k16 steps, decoded to BF16 in registers; the 8 k16 steps from registers; then the stage
         goes back to the producer */
      u32 af[MW][8][4];
      fbg_decode_a<8>(SA(s), sfc, af, 0, cw, warp, lane, q);
      fbg_mma_rs<8>(acc, af, SB(s), 0);
      fbg_wg_wait<0>();
      if (lane == 0 && warp == 0) fbg_bar_arrive(EMPTY(s));
#else
      const float *sfa = (const float *)(gbase + (SSF(s) - sbase)), *sfb = sfa + (BK / 32) * BM;
#if FB_PIPE
      /* FP8 pipe 2: the k-block's 4 k32 products in two temporary accumulators; product j + 1's wgmma is issued before
         product j is promoted (wait_group 1 retires j only), so the promotion runs beside the tensor cores. The same
         wgmmas and the same promotions in the same order as pipe 0: bit-identical. */
      static_assert(BK == 128 && FB_PIPE == 2, "FP8 wgmma: tile_k 128, pipe 0 or 2");
      float tmp[2][MW][BN / 2];
      fbg_e4m3_issue(tmp[0], SA(s), SB(s), 0, cw);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (j < 3) {
          fbg_e4m3_issue(tmp[(j + 1) & 1], SA(s), SB(s), j + 1, cw);
          fbg_wg_wait<1>();
        } else fbg_wg_wait<0>();
#pragma unroll
        for (int mw = 0; mw < MW; ++mw) fbg_fence_acc(tmp[j & 1][mw]);
        fbg_e4m3_promote(acc, tmp[j & 1], sfa, sfb, j, cw, warp, lane, q);
      }
#else
      /* FP8 pipe 0: each k32 product issued, waited for, then promoted */
#pragma unroll
      for (int j = 0; j < BK / 32; ++j) {
        float tmp[MW][BN / 2];
        fbg_e4m3_issue(tmp, SA(s) + (j / 4) * BM * 128, SB(s) + (j / 4) * BN * 128, j % 4, cw);
        fbg_wg_wait<0>();
#pragma unroll
        for (int mw = 0; mw < MW; ++mw) fbg_fence_acc(tmp[mw]);
        fbg_e4m3_promote(acc, tmp, sfa, sfb, j, cw, warp, lane, q);
      }
#endif
      /* every thread of the warpgroup has read its scales: then one releases the stage */
      asm volatile("bar.sync %0, 128;" ::"r"(1 + c) : "memory");
      if (lane == 0 && warp == 0) fbg_bar_arrive(EMPTY(s));
#endif
      if (++s == NST) s = 0, ph ^= 1;
    }
#endif

#if FB_PINGPONG
    if (lane == 0 && warp == 0) fbg_bar_arrive(ORD(c ^ 1)); /* this main loop has passed its last wait */
#endif
    if (FB_DEBUG && blockIdx.x == 0 && (tid % 128) == 0) printf("consumer %d acc %g %g %g\n", c, acc[0][0], acc[0][1], acc[0][2]);
    /* ---------------- epilogue: straight from the accumulators ---------------- */
#if FB_KIND == 1
    const float sb_outer = p.b_outer ? ((const float *)p.b_outer)[FB_B_OUTER == 1 ? sc.e : 0] : 1.0f;
#endif
#pragma unroll
    for (int mw = 0; mw < MW; ++mw)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const long long r = row0 + cw * WM + mw * 64 + 16 * warp + lane / 4 + 8 * h;
        const bool live = r < rend; /* a quad shares its row, so the epilogue's shuffles stay within live lanes' quads */
        float so = 1.0f;
#if FB_KIND == 1
        if (live) so = (p.a_outer ? ((const float *)p.a_outer)[FB_A_OUTER == 1 ? r : 0] : 1.0f) * sb_outer;
#endif
        fbg_epilogue<BN>(p, acc[mw], h, r, live, so, FB_SWIGLU == 1 ? (int)(nt * BROWS) : n0, sc.e, q);
      }
  }
}
