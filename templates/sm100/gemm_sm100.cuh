/* gemm_sm100.cuh — grouped GEMM over experts for Blackwell (sm_100a / sm_103a), 1-CTA tcgen05, BF16 (kind::f16),
 * MXFP8 (kind::mxf8f6f4.block32: E4M3 codes, UE8M0 per 32 along K) or NVFP4 (kind::mxf4nvf4.block16: E2M1 codes,
 * UE4M3 per 16; the tensor-wide FP32 scale is the caller's): out[r][n] = sum_k A[r][k] B[e][n][k] for
 * the rows r of expert e (offsets[e] <= r < offsets[e + 1]), FP32 out. The first cut of issue 19's template:
 * standalone (not in gen/templates.c's table, hence under templates/sm100/, out of the embedded set), with its own
 * test (tests/test_gemm_sm100.cpp) that runs it under the functional model (tests/emu/tc_model.h) and compiles it
 * with NVRTC for sm_100a and sm_103a. It has never run on a Blackwell GPU; nothing about its speed is known.
 *
 * Persistent: CTA b takes tiles b, b + gridDim.x, ... of the (expert, 128-row block, FBS_TILE_N-column block)
 * list. 192 threads, warp-specialized:
 *   warp 0  TMA producer (one elected lane): per 64 (BF16) / 128 (MXFP8) / 256 (NVFP4) elements of K, A's 128 x K box
 *           and B's FBS_TILE_N x K box (both K-major, SWIZZLE_128B: 128-byte rows) into stage s of FBS_STAGES,
 *           complete_tx on full[s]; MXFP8 / NVFP4: the lanes then write the step's scale factors into the stage in the
 *           128 x 4 atom layout tcgen05.cp takes (generic writes, fence.proxy.async) and arrive on full[s] too;
 *   warp 1  TMEM allocator and MMA issuer (one elected lane): waits full[s], (scaled kinds: tcgen05.cp of the atoms into
 *           the stage's scale columns) 4 MMAs advancing the descriptors 32 bytes each, commit to empty[s]; after
 *           the tile's last step, commit to tmem_full[a] (FBS_ACC_STAGES accumulator stages of FBS_TILE_N columns);
 *   warps 2-5  epilogue: wait tmem_full[a], tcgen05.ld 32x32b.x32 of the warp's lane quarter (warp % 4), store the
 *           rows of the tile's expert, arrive on tmem_empty[a] (128 arrivals).
 * Rows of an expert's last block past its end are loaded (the next expert's rows, or zeros past the tensor) and
 * never stored. Needs N % FBS_TILE_N == 0 and K % the K step == 0.
 *
 * Parameters (the generator's #defines once it is wired): FBS_KIND (0 BF16, 1 MXFP8, 2 NVFP4), FBS_TILE_N (32..256, a
 * multiple of 32), FBS_STAGES, FBS_NAME (the kernel's name). Dynamic shared memory: fbs_gemm_smem_bytes(). */
#include "fb_tc_ops.h"

#ifndef FBS_KIND
#define FBS_KIND 0
#endif
#ifndef FBS_TILE_N
#define FBS_TILE_N 128
#endif
#ifndef FBS_STAGES
#define FBS_STAGES 4
#endif
#ifndef FBS_ACC_STAGES /* TMEM accumulator stages: 2 (the epilogue of a tile overlaps the next's MMAs), 1 at N = 256 */
#define FBS_ACC_STAGES (FBS_TILE_N > 128 ? 1 : 2)
#endif
#ifndef FBS_TEST_BREAK /* tests only: 1 no tmem_empty wait, 2 no empty-stage wait, 3 no fence after tmem_full */
#define FBS_TEST_BREAK 0
#endif
#define FBS_TILE_M 128
#define FBS_KSTEP (FBS_KIND == 2 ? 256 : FBS_KIND ? 128 : 64) /* elements of K a stage: one 128-byte swizzle row */
#define FBS_SFBLK (FBS_KIND == 2 ? 16 : 32)                      /* elements a scale covers */
#define FBS_KB_STEP (FBS_KSTEP / FBS_SFBLK)                      /* k-blocks a stage: 4 (MXFP8), 16 (NVFP4) */
#define FBS_KATOMS (FBS_KIND ? FBS_KB_STEP / 4 : 0)              /* 128 x 4 scale atoms along K a stage */
#define FBS_NR ((FBS_TILE_N + 127) / 128)                        /* and along B's rows */
#define FBS_A_BYTES (FBS_TILE_M * 128)
#define FBS_B_BYTES (FBS_TILE_N * 128)
#define FBS_SFA_BYTES (512 * FBS_KATOMS)
#define FBS_SFB_BYTES (512 * FBS_KATOMS * FBS_NR)
#define FBS_STAGE_BYTES (((FBS_A_BYTES + FBS_B_BYTES + FBS_SFA_BYTES + FBS_SFB_BYTES) + 1023) / 1024 * 1024)
#define FBS_ACC_COLS FBS_TILE_N
#define FBS_SF_COL (FBS_ACC_STAGES * FBS_ACC_COLS) /* the scale columns: per stage 4 per atom, A's then B's */
#define FBS_SF_STAGE_COLS (4 * FBS_KATOMS * (1 + FBS_NR))
#define FBS_TMEM_NEED (FBS_SF_COL + FBS_SF_STAGE_COLS * FBS_STAGES)
#define FBS_TMEM_COLS (FBS_TMEM_NEED <= 32 ? 32 : FBS_TMEM_NEED <= 64 ? 64 : FBS_TMEM_NEED <= 128 ? 128 : FBS_TMEM_NEED <= 256 ? 256 : 512)
#if FBS_TILE_N % 32 || FBS_TILE_N < 32 || FBS_TILE_N > 256 || FBS_TMEM_NEED > 512 || FBS_ACC_STAGES < 1 || FBS_ACC_STAGES > 2
#error "gemm_sm100: FBS_TILE_N must be a multiple of 32 in [32, 256], its accumulators and scales within 512 columns"
#endif

struct fbs_gemm_params {
  fbt_tmap ta, tb;              /* A: rows x K, B: experts * N x K, both K-major: BF16 elements, E4M3 bytes or
                                   E2M1 pairs (the even k in the low nibble), maps of BF16 / bytes */
  unsigned long long out;       /* FP32, rows x N */
  unsigned long long offsets;   /* int[experts + 1]: expert e's rows are offsets[e] .. offsets[e + 1] - 1 */
  unsigned long long sfa, sfb;  /* MXFP8: UE8M0 bytes, row-major, rows x K / 32 and experts * N x K / 32; NVFP4:
                                   UE4M3 bytes, rows x K / 16 and experts * N x K / 16 */
  int experts, N, K;
};

static __host__ __device__ __forceinline__ unsigned fbs_gemm_smem_bytes(void) { return 1024 + FBS_STAGES * FBS_STAGE_BYTES; }

struct fbs_tile {
  int e, row0, rows_end, n0;
};
/* tile t of the list: per expert its 128-row blocks, per block its column blocks; false past the end */
static __device__ __forceinline__ bool fbs_tile_at(const fbs_gemm_params &p, int t, fbs_tile *o) {
  const int *off = (const int *)p.offsets;
  const int ntn = p.N / FBS_TILE_N;
  for (int e = 0; e < p.experts; ++e) {
    const int rows = off[e + 1] - off[e], blocks = (rows + FBS_TILE_M - 1) / FBS_TILE_M;
    if (t < blocks * ntn) {
      o->e = e, o->row0 = off[e] + (t / ntn) * FBS_TILE_M, o->rows_end = off[e + 1], o->n0 = (t % ntn) * FBS_TILE_N;
      return true;
    }
    t -= blocks * ntn;
  }
  return false;
}

#ifndef FBS_NAME
#define FBS_NAME fbs_gemm_sm100
#endif
extern "C" __global__ void __launch_bounds__(192, 1) FBS_NAME(const __grid_constant__ fbs_gemm_params p) {
  unsigned char *sm = fbt_smem();
  const uint32_t base = fbt_smem_addr(sm);
  const unsigned tid = threadIdx.x, w = tid / 32, lane = tid % 32;
  /* barriers: full[S], empty[S], tmem_full[2], tmem_empty[2] (FBS_ACC_STAGES of them used), the TMEM address slot */
#define FBS_FULL(s) (base + 8 * (s))
#define FBS_EMPTY(s) (base + 8 * (FBS_STAGES + (s)))
#define FBS_TFULL(a) (base + 8 * (2 * FBS_STAGES + (a)))
#define FBS_TEMPTY(a) (base + 8 * (2 * FBS_STAGES + 2 + (a)))
#define FBS_STAGE(s) (1024u + (unsigned)(s) * FBS_STAGE_BYTES) /* offsets: A, then B, then the scale atoms */
  const unsigned slot_off = 8 * (2 * FBS_STAGES + 4);
  if (tid == 0) {
    for (int s = 0; s < FBS_STAGES; ++s) fbt_mbar_init(FBS_FULL(s), FBS_KIND ? 33 : 1), fbt_mbar_init(FBS_EMPTY(s), 1);
    for (int a = 0; a < FBS_ACC_STAGES; ++a) fbt_mbar_init(FBS_TFULL(a), 1), fbt_mbar_init(FBS_TEMPTY(a), 128);
    fbt_fence_mbar_init();
  }
  if (w == 1) fbt_alloc(base + slot_off, FBS_TMEM_COLS);
  fbt_fence_before();
  __syncthreads();
  fbt_fence_after();
  const uint32_t tmem = *(volatile uint32_t *)(sm + slot_off);
  const int nk = p.K / FBS_KSTEP;

  if (w == 0) { /* ---- the TMA producer ---- */
    const uint32_t leader = fbt_elect_one();
    unsigned it = 0;
    fbs_tile T;
    for (int t = (int)blockIdx.x; fbs_tile_at(p, t, &T); t += (int)gridDim.x)
      for (int kb = 0; kb < nk; ++kb, ++it) {
        const unsigned s = it % FBS_STAGES, ph = (it / FBS_STAGES) & 1;
        if (FBS_TEST_BREAK != 2) fbt_mbar_wait(FBS_EMPTY(s), ph ^ 1);
        if (leader) {
          fbt_mbar_arrive_expect_tx(FBS_FULL(s), FBS_A_BYTES + FBS_B_BYTES);
          const int kx = kb * (FBS_KIND ? 128 : 64); /* the box's inner coordinate: BF16 elements or bytes */
          fbt_tma_load_2d(base + FBS_STAGE(s), &p.ta, kx, T.row0, FBS_FULL(s));
          fbt_tma_load_2d(base + FBS_STAGE(s) + FBS_A_BYTES, &p.tb, kx, T.e * p.N + T.n0, FBS_FULL(s));
        }
#if FBS_KIND
        /* the step's k-blocks of scales, A's 128 rows and B's FBS_TILE_N, into 128 x 4 atoms (byte (r % 32) * 16 +
           (r / 32 % 4) * 4 + kb % 4 of an atom, fb_tcgen05.h's fb_tc_sf_offset): A's atom a (k-blocks 4a..4a+3) at
           512 a, B's (a, row block rr) at 512 (a * FBS_NR + rr) */
        unsigned char *sfa = sm + FBS_STAGE(s) + FBS_A_BYTES + FBS_B_BYTES, *sfb = sfa + FBS_SFA_BYTES;
        const int kbs = p.K / FBS_SFBLK, total = ((const int *)p.offsets)[p.experts];
        const unsigned char one = FBS_KIND == 2 ? 0x38 : 127; /* 1.0: the scale of rows past the tensor, never stored */
        for (unsigned r = lane; r < FBS_TILE_M; r += 32) {
          const int row = T.row0 + (int)r;
          for (int j = 0; j < FBS_KB_STEP; ++j)
            sfa[512 * (j / 4) + (r % 32) * 16 + (r / 32 % 4) * 4 + j % 4] =
                row < total ? ((const unsigned char *)p.sfa)[(size_t)row * kbs + kb * FBS_KB_STEP + j] : one;
        }
        for (unsigned r = lane; r < FBS_TILE_N; r += 32)
          for (int j = 0; j < FBS_KB_STEP; ++j)
            sfb[512 * ((j / 4) * FBS_NR + r / 128) + (r % 32) * 16 + (r / 32 % 4) * 4 + j % 4] =
                ((const unsigned char *)p.sfb)[(size_t)(T.e * p.N + T.n0 + (int)r) * kbs + kb * FBS_KB_STEP + j];
        fbt_fence_proxy_async();
        fbt_mbar_arrive(FBS_FULL(s));
        __syncwarp();
#endif
      }
  } else if (w == 1) { /* ---- the MMA issuer ---- */
    if (fbt_elect_one()) {
      unsigned it = 0, lt = 0;
      fbs_tile T;
#if FBS_KIND == 2
      const uint32_t idesc = fb_tc_idesc_bs(FB_TC_MXF4_E2M1, FB_TC_MXF4_E2M1, 0, FBS_TILE_M, FBS_TILE_N, 0, 0, 0, 0, 0);
#elif FBS_KIND
      const uint32_t idesc = fb_tc_idesc_bs(FB_TC_E4M3, FB_TC_E4M3, 1, FBS_TILE_M, FBS_TILE_N, 0, 0, 0, 0, 0);
#else
      const uint32_t idesc = fb_tc_idesc(FB_TC_BF16, FB_TC_BF16, FB_TC_D_F32, FBS_TILE_M, FBS_TILE_N, 0, 0);
#endif
      for (int t = (int)blockIdx.x; fbs_tile_at(p, t, &T); t += (int)gridDim.x, ++lt) {
        const unsigned a = lt % FBS_ACC_STAGES, aph = (lt / FBS_ACC_STAGES) & 1;
        if (FBS_TEST_BREAK != 1) fbt_mbar_wait(FBS_TEMPTY(a), aph ^ 1);
        fbt_fence_after();
        const uint32_t d = tmem + a * FBS_ACC_COLS;
        for (int kb = 0; kb < nk; ++kb, ++it) {
          const unsigned s = it % FBS_STAGES, ph = (it / FBS_STAGES) & 1;
          fbt_mbar_wait(FBS_FULL(s), ph);
          fbt_fence_after();
          const uint32_t sa = base + FBS_STAGE(s), sb = sa + FBS_A_BYTES;
#if FBS_KIND
          /* the atoms into TMEM: A's atom a at columns sfa_col + 4 a, B's (a, rr) at sfb_col + 4 (a * FBS_NR + rr) */
          const uint32_t sfa_col = tmem + FBS_SF_COL + FBS_SF_STAGE_COLS * s, sfb_col = sfa_col + 4 * FBS_KATOMS;
          const uint32_t sf_smem = sb + FBS_B_BYTES;
          for (int a = 0; a < FBS_KATOMS; ++a) fbt_cp_sf(sfa_col + 4 * a, fb_tc_sdesc(sf_smem + 512 * a, 16, 128, FB_TC_SW_NONE, 0, 0));
          for (int a = 0; a < FBS_KATOMS * FBS_NR; ++a)
            fbt_cp_sf(sfb_col + 4 * a, fb_tc_sdesc(sf_smem + FBS_SFA_BYTES + 512 * a, 16, 128, FB_TC_SW_NONE, 0, 0));
#endif
          for (int j = 0; j < 4; ++j) { /* 4 MMAs of K = 16 (BF16) / 32 (E4M3) / 64 (E2M1): 32 bytes of the row each */
            const uint64_t ad = fb_tc_sdesc(sa + 32 * j, 16, 1024, FB_TC_SW128, 0, 0), bd = fb_tc_sdesc(sb + 32 * j, 16, 1024, FB_TC_SW128, 0, 0);
#if FBS_KIND == 2 /* one atom (the whole scale word: 4 k-blocks of 16) per MMA, sf id 0 */
            fbt_mma_nvf4(d, ad, bd, idesc, sfa_col + 4 * j, sfb_col + 4 * FBS_NR * j, kb > 0 || j > 0);
#elif FBS_KIND
            const uint32_t id = idesc | (uint32_t)j << 29 | (uint32_t)j << 4; /* the scale-factor ids: byte j of the word */
            fbt_mma_mxf8(d, ad, bd, id, sfa_col, sfb_col, kb > 0 || j > 0);
#else
            fbt_mma_f16(d, ad, bd, idesc, kb > 0 || j > 0);
#endif
          }
          fbt_commit(FBS_EMPTY(s)); /* the stage is free once these MMAs have read it */
        }
        fbt_commit(FBS_TFULL(a));
      }
    }
    __syncwarp();
  } else { /* ---- the epilogue: warps 2..5, lane quarters 2, 3, 0, 1 ---- */
    const unsigned q = w % 4;
    unsigned lt = 0;
    fbs_tile T;
    float *out = (float *)p.out;
    for (int t = (int)blockIdx.x; fbs_tile_at(p, t, &T); t += (int)gridDim.x, ++lt) {
      const unsigned a = lt % FBS_ACC_STAGES, aph = (lt / FBS_ACC_STAGES) & 1;
      fbt_mbar_wait(FBS_TFULL(a), aph);
      if (FBS_TEST_BREAK != 3) fbt_fence_after();
      const int row = T.row0 + (int)(32 * q + lane);
      for (int c0 = 0; c0 < FBS_TILE_N; c0 += 32) {
        uint32_t r[32];
        fbt_ld_32x32b_x32(tmem + ((32 * q) << 16) + a * FBS_ACC_COLS + c0, r);
        fbt_wait_ld();
        if (row < T.rows_end)
          for (int j = 0; j < 32; ++j) out[(size_t)row * p.N + T.n0 + c0 + j] = __uint_as_float(r[j]);
      }
      fbt_fence_before();
      fbt_mbar_arrive(FBS_TEMPTY(a));
    }
  }
  fbt_fence_before();
  __syncthreads();
  if (w == 1) {
    fbt_fence_after();
    fbt_dealloc(tmem, FBS_TMEM_COLS);
    fbt_relinquish();
  }
#undef FBS_FULL
#undef FBS_EMPTY
#undef FBS_TFULL
#undef FBS_TEMPTY
#undef FBS_STAGE
}
#undef FBS_ACC_STAGES
#undef FBS_TEST_BREAK
#undef FBS_TILE_M
#undef FBS_KSTEP
#undef FBS_A_BYTES
#undef FBS_B_BYTES
#undef FBS_SFA_BYTES
#undef FBS_SFB_BYTES
#undef FBS_STAGE_BYTES
#undef FBS_ACC_COLS
#undef FBS_SF_COL
#undef FBS_TMEM_NEED
#undef FBS_TMEM_COLS
#undef FBS_SF_STAGE_COLS
#undef FBS_NR
#undef FBS_KATOMS
#undef FBS_KB_STEP
#undef FBS_SFBLK
