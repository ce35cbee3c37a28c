/* fb_gemm.h — the parameter block of the generated grouped GEMMs (templates/gemm_sm90.cuh, gemm_mma.cuh), the same layout in
 * host C and device code. The two TMA descriptors travel inside it (128 bytes each, 64-byte aligned), so the
 * kernel takes one __grid_constant__ argument and the descriptors stay in parameter space.
 *
 * Shapes. FB_MODE 0 (fwd, dgrad): D[r][n] = sum_k A[r][k] * B[e(r)][n][k] for the rows r of expert e, i.e.
 * offsets[e] <= r < offsets[e+1]; A is rows x K, B is experts*N x K, D is rows x N. FB_MODE 1 (wgrad):
 * D[e][m][n] = sum_{offsets[e] <= r < offsets[e+1]} A[m][r] * B[n][r]; A is M x rows, B is N x rows, D is
 * experts x M x N (FP32), and every offset must be a multiple of the tile's K. All operands are K-major. */
#ifndef FB_GEMM_H
#define FB_GEMM_H

#ifdef __cplusplus
#define FB_ALIGN64 alignas(64)
#else
#define FB_ALIGN64 _Alignas(64)
#endif

/* The pipeline's shared memory, one definition for the generator's legality rule and launch (gen/templates.c), the
 * host's launch (runtime/gemm_host.c fb_gemm_smem_bytes) and the kernel's layout (gemm_sm90.cuh): per stage A, B and the block
 * scales, each 1024-byte aligned (128-byte swizzle atoms), after 1024 bytes of alignment slack, and a full and an
 * empty mbarrier (8 bytes each) per stage. kind: 0 BF16 x BF16, 1 NVFP4 codes x BF16 copy, 2 E4M3 x E4M3 (with their
 * E8M0 scales), 3 E4M3 x BF16 copy. */
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FB_GEMM_FN __host__ __device__ constexpr
#elif defined(__cplusplus)
#define FB_GEMM_FN constexpr
#else
#define FB_GEMM_FN static inline
#endif
FB_GEMM_FN int fb_gemm_a_bytes(int kind, int tm, int tk) { return kind == 0 ? tm * tk * 2 : kind == 1 ? tm * tk / 2 : tm * tk; }
FB_GEMM_FN int fb_gemm_b_bytes(int kind, int tn, int tk) { return kind == 2 ? tn * tk : tn * tk * 2; }
FB_GEMM_FN int fb_gemm_sf_bytes(int kind, int tm, int tn, int tk) { return kind == 2 ? (tm + tn) * (tk / 32) * 4 : 0; }
FB_GEMM_FN int fb_gemm_align1k(int x) { return (x + 1023) / 1024 * 1024; }
FB_GEMM_FN int fb_gemm_stage_bytes(int kind, int tm, int tn, int tk) {
  return fb_gemm_align1k(fb_gemm_a_bytes(kind, tm, tk)) + fb_gemm_align1k(fb_gemm_b_bytes(kind, tn, tk)) +
         fb_gemm_align1k(fb_gemm_sf_bytes(kind, tm, tn, tk));
}
FB_GEMM_FN long fb_gemm_smem_total(int kind, int tm, int tn, int tk, int stages) {
  return 1024 + (long)stages * fb_gemm_stage_bytes(kind, tm, tn, tk) + 16 * (long)stages;
}
/* The portable family's stage (gemm_mma.cuh): A, B and, for FB_KIND 2, the raw E8M0 bytes of the k-block (4 per row of
   A, then per row of B), each 128-byte aligned; no barriers (cp.async groups and __syncthreads order the stages). */
#define FB_GEMM_MMA_WARPS_N(tn) ((tn) == 256 ? 4 : 2) /* gemm_mma.cuh's warps across N (the rest down M) */
FB_GEMM_FN int fb_gemm_align128(int x) { return (x + 127) / 128 * 128; }
FB_GEMM_FN int fb_gemm_mma_sf_bytes(int kind, int tm, int tn, int tk) { return kind == 2 ? (tm + tn) * (tk / 32) : 0; }
FB_GEMM_FN int fb_gemm_mma_stage_bytes(int kind, int tm, int tn, int tk) {
  return fb_gemm_align128(fb_gemm_a_bytes(kind, tm, tk)) + fb_gemm_align128(fb_gemm_b_bytes(kind, tn, tk)) +
         fb_gemm_align128(fb_gemm_mma_sf_bytes(kind, tm, tn, tk));
}
FB_GEMM_FN long fb_gemm_mma_smem_total(int kind, int tm, int tn, int tk, int stages) {
  return 128 + (long)stages * fb_gemm_mma_stage_bytes(kind, tm, tn, tk);
}

/* The tcgen05 family's stage (gemm_sm100.cuh; kind 0 BF16, 1 NVFP4 x NVFP4, 2 MXFP8 x MXFP8), per CTA: A's 128 rows and
   B's tn rows (tile_m 128, one CTA) or tn / 2 rows (tile_m 256, a CTA pair: each CTA its half of B) of tk elements (a row
   of fb_gemm_tc_row_bytes), then the block scales as 512-byte 128 x 4 atoms (A's 128 rows', then B's per 128-row block,
   all tn rows in both CTAs of a pair), 1024-byte aligned; 2048 bytes of barriers and alignment slack first. The TMEM
   columns, per CTA (a pair: the same in each): fb_gemm_tc_acc_stages accumulators of tn columns, then each stage's
   scale columns (4 an atom). */
FB_GEMM_FN int fb_gemm_tc_row_bytes(int kind, int tk) { return kind == 0 ? 2 * tk : kind == 1 ? tk / 2 : tk; }
FB_GEMM_FN int fb_gemm_tc_sf_atoms(int kind, int tk) { return kind == 0 ? 0 : kind == 1 ? tk / 64 : (tk / 32 + 3) / 4; }
FB_GEMM_FN int fb_gemm_tc_sf_cols(int kind, int tn, int tk) { return 4 * fb_gemm_tc_sf_atoms(kind, tk) * (1 + (tn + 127) / 128); }
/* what a rows-grouped GEMM's K must be a multiple of: tile_k; with K = 96 MMAs (mma_k 96) 32 only, whole 16-byte TMA rows
   of NVFP4 codes (the last K tile may be partial, gemm_sm100.cuh) */
FB_GEMM_FN int fb_gemm_k_unit(int tk, int mma_k) { return mma_k == 96 ? 32 : tk; }
FB_GEMM_FN int fb_gemm_tc_b_rows(int tm, int tn) { return tm == 256 ? tn / 2 : tn; } /* B rows a CTA holds */
FB_GEMM_FN int fb_gemm_tc_stage_bytes(int kind, int tm, int tn, int tk) {
  return fb_gemm_align1k((128 + fb_gemm_tc_b_rows(tm, tn)) * fb_gemm_tc_row_bytes(kind, tk) + 128 * fb_gemm_tc_sf_cols(kind, tn, tk));
}
FB_GEMM_FN long fb_gemm_tc_smem_total(int kind, int tm, int tn, int tk, int stages) {
  return 2048 + (long)stages * fb_gemm_tc_stage_bytes(kind, tm, tn, tk);
}
FB_GEMM_FN int fb_gemm_tc_acc_stages(int kind, int tn, int tk, int stages) {
  return 2 * tn + stages * fb_gemm_tc_sf_cols(kind, tn, tk) <= 512 ? 2 : 1;
}
FB_GEMM_FN int fb_gemm_tc_tmem_need(int kind, int tn, int tk, int stages) {
  return fb_gemm_tc_acc_stages(kind, tn, tk, stages) * tn + stages * fb_gemm_tc_sf_cols(kind, tn, tk);
}
/* the allocation: a power of 2 from 32 columns (more than 512: the variant does not fit) */
FB_GEMM_FN int fb_gemm_tc_tmem_cols(int kind, int tn, int tk, int stages) {
  return fb_gemm_tc_tmem_need(kind, tn, tk, stages) <= 32 ? 32 : fb_gemm_tc_tmem_need(kind, tn, tk, stages) <= 64 ? 64
       : fb_gemm_tc_tmem_need(kind, tn, tk, stages) <= 128 ? 128 : fb_gemm_tc_tmem_need(kind, tn, tk, stages) <= 256 ? 256
       : fb_gemm_tc_tmem_need(kind, tn, tk, stages) <= 512 ? 512 : 1024;
}

typedef unsigned long long fb_gptr;

typedef struct {
  FB_ALIGN64 unsigned long long v[16]; /* a CUtensorMap, encoded on the host */
} fb_tmap;

typedef struct {
  fb_tmap ta, tb;      /* A and B: BF16 elements, NVFP4 codes (bytes) or E4M3 bytes, as the kernel's FB_KIND says */
  fb_gptr out;         /* D: BF16 (FB_OUT_BF16) or FP32 */
  fb_gptr offsets;     /* long long [experts + 1], on the device (written by the permutation; never read on the host) */
  fb_gptr a_sf, b_sf;  /* block scales. FB_KIND 1: A's E4M3 per 16, rows x K/16 (B is the BF16 copy: no scales).
                          FB_KIND 2: E8M0 per 32 along K: A rows x K/32 (wgrad: M x rows/32), B experts*N x K/32
                          (wgrad: N x rows/32) */
  fb_gptr a_outer;     /* FB_KIND 1: FP32 S_dec of each row of A (0: none) */
  fb_gptr b_outer;     /* FB_KIND 1: FP32 S_dec of each expert's B (0: none) */
  long long rows;      /* rows of A (mode 0) or columns of A and B (wgrad): the grouped dimension */
  int experts, M, N, K; /* mode 0: N and K; wgrad: M and N (K per expert from the offsets) */
  fb_gptr aux;         /* FB_SWIGLU 1 (w13 fwd): H out, rows x N BF16 (gate | up), 0: not written;
                          FB_SWIGLU 2 (w2 dgrad): H in, the saved w13 output, rows x 2N BF16 (gate | up) */
  fb_gptr out_sf;      /* FB_S2F6 (w2 fwd, the combine payload): E8M0 per 32 of each row of D, rows x N/32 */
  unsigned signs;      /* FB_S2F6 with FB_RHT: the RHT-32 sign mask */
  unsigned pad_;
  fb_gptr a, b;        /* A's and B's elements as ta and tb map them (the portable family, gemm_mma.cuh, reads them with
                          cp.async: it runs where TMA does not) */
} fb_kp_gemm;

#endif
