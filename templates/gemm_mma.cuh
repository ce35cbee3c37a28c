/* gemm_mma.cuh — the portable grouped GEMM over experts: warp-level mma.sync, which every NVIDIA GPU from sm_89 on runs
 * (Ada, Hopper, Blackwell datacenter and consumer), so that a GPU on which the fast family (gemm_sm90.cuh; tcgen05 later)
 * fails the tuner's check, or that has neither wgmma nor tcgen05, still has every expert GEMM. The shapes, the parameter
 * block and the operands' layouts are fb_gemm.h's, the same as gemm_sm90.cuh's (the same BF16 copies, the same scales),
 * and so are the scheduler, the A decoders and the fused epilogues (fb_gemm_dev.h), so both families compute the same
 * sums of the same products; only the tensor-core instructions and the memory pipeline differ.
 *
 * FB_KIND (operands), as gemm_sm90.cuh:
 *   0  BF16 x BF16: mma.m16n8k16 BF16, both operands by ldmatrix from shared memory.
 *   1  NVFP4 x BF16 copy: A's packed E2M1 codes decoded in registers to exact BF16 (e2m1 * sf, fbg_decode_a16), B the
 *      K-permuted exact BF16 copy; the outer scales in the epilogue.
 *   2  MXFP8 x MXFP8: mma.m16n8k32 E4M3 = one MX block per instruction into a temporary, promoted on the CUDA cores,
 *      acc = fma(tmp, sa * sb, acc) with the two E8M0 scales (NUMERICS.md's 1e-4 tolerance: the tensor core sums a k32
 *      product narrower than FP32).
 *   3  MXFP8 x BF16 copy (FB_KIND 2 with FB_WEIGHTS_BF16 1): A decoded to exact BF16 in registers, BF16 products.
 * FB_MODE 0 / 1, FB_OUT_BF16, FB_SWIGLU 1 / 2, FB_S2F6 (+ FB_RHT), FB_A_OUTER / FB_B_OUTER: as gemm_sm90.cuh.
 *
 * Structure: FB_CONSUMERS x 4 warps compute a FB_TILE_M x FB_TILE_N tile, 2 warps across N and the rest down M (a warp:
 * WM x WN, MI m16 tiles by NI n8 tiles of FP32 accumulators, the m16n8 fragment layout fb_gemm_dev.h's epilogue
 * reads). Every thread copies part of each k-block into an FB_STAGES-deep ring of shared memory with cp.async (16-byte
 * chunks, zero-filled past the tensor; FB_KIND 2's scales 4 bytes a row), in the same swizzled layout gemm_sm90.cuh's TMA
 * boxes make (128-byte rows, 16-byte chunk c of row R at c ^ (R & 7); NVFP4 codes 64-byte rows, chunk g at
 * g ^ ((R >> 1) & 3)), so ldmatrix reads conflict-free and the decoders are shared. The ring is one stream of k-blocks
 * across the CTA's tiles (the next tile's first k-blocks load during this tile's last ones and its epilogue): k-block i
 * sits in stage i % FB_STAGES; cp.async.wait_group FB_STAGES - 2 and __syncthreads before computing it, then the load of
 * k-block i + FB_STAGES - 1 into the stage k-block i - 1 left. Persistent: the host launches as many CTAs as fit on the
 * GPU (occupancy x SMs), each walks the tiles t = blockIdx.x, + gridDim.x, ... (fbg_next). Rows of a tile past its
 * expert's end are computed and never stored. */
#ifndef FB_EPI_CHEAP
#define FB_EPI_CHEAP 0
#endif
#if FB_KIND == 2 && defined(FB_WEIGHTS_BF16)
#if FB_WEIGHTS_BF16
#undef FB_KIND
#define FB_KIND 3
#endif
#endif
#ifndef FB_SWIGLU
#define FB_SWIGLU 0
#endif
#ifndef FB_S2F6
#define FB_S2F6 0
#endif
#define BM FB_TILE_M
#define BN FB_TILE_N
#define BK FB_TILE_K
#define NST FB_STAGES
#define NTHR (128 * FB_CONSUMERS)
#ifndef FB_PIPE
#define FB_PIPE 0
#endif
#define WARPS_N FB_GEMM_MMA_WARPS_N(BN) /* 2 warps across N (4 at tile_n 256): a warp at most 64 columns wide */
#define WARPS_M (4 * FB_CONSUMERS / WARPS_N)
#define WM (BM / WARPS_M) /* a warp's rows */
#define WN (BN / WARPS_N) /* a warp's columns */
#define MI (WM / 16)
#define NI (WN / 8)
#include "fb_gemm_dev.h"

static_assert(WM % 16 == 0 && WN % 32 == 0, "gemm_mma: a warp takes 16-row tiles and 32-column groups");
static_assert(BK == 128 || (FB_KIND == 0 && BK % 64 == 0), "gemm_mma: tile_k is 128 (a multiple of 64 for BF16)");

/* the stage layout: fb_gemm.h, shared with the generator and the launch */
#define A_BYTES fb_gemm_align128(fb_gemm_a_bytes(FB_KIND, BM, BK))
#define B_BYTES fb_gemm_align128(fb_gemm_b_bytes(FB_KIND, BN, BK))
#define STAGE_BYTES fb_gemm_mma_stage_bytes(FB_KIND, BM, BN, BK)
/* bytes of a row of A and of B per k-block, and of a whole row of each in global memory (mode 0: K; mode 1: rows) */
#define A_ROWB (FB_KIND == 0 ? BK * 2 : FB_KIND == 1 ? BK / 2 : BK)
#define B_ROWB (FB_KIND == 2 ? BK : BK * 2)

static __device__ __forceinline__ void fbm_cp16(u32 dst, const void *src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
#if FB_KIND == 2
static __device__ __forceinline__ void fbm_cp4(u32 dst, const void *src, bool ok) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(ok ? 4 : 0) : "memory");
}
#endif
static __device__ __forceinline__ void fbm_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> static __device__ __forceinline__ void fbm_wait(void) { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

/* Shared address of 16-byte chunk c (along K) of row R in a region of `rows` rows: 128-byte rows in 64-column (BF16) or
   128-byte (E4M3) atoms, the chunk at c ^ (R & 7); NVFP4 codes: 64-byte rows, chunk c at c ^ ((R >> 1) & 3). */
static __device__ __forceinline__ u32 fbm_sw128(u32 base, int rows, int R, int c) {
  return base + (u32)((c >> 3) * rows * 128 + R * 128 + (((c & 7) ^ (R & 7)) << 4));
}
static __device__ __forceinline__ u32 fbm_sw64(u32 base, int R, int c) { return base + (u32)(R * 64 + ((c ^ ((R >> 1) & 3)) << 4)); }

/* d[i .. i + 3] += A (m16 x k16) * B (k16 x n8) */
template <int N>
static __device__ __forceinline__ void fbm_mma_bf16(float (&d)[N], int i, const u32 (&a)[4], u32 b0, u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};"
               : "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#if FB_KIND == 2
static __device__ __forceinline__ void fbm_mma_e4m3(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%10, %10, %10, %10};"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}
/* E8M0 -> 2^(e-127) in FP32 (0: the subnormal 2^-127; 255: NaN), as gemm_sm90.cuh's scale stager writes it */
static __device__ __forceinline__ float fbm_e8m0(u32 e) {
  return __uint_as_float(e == 255u ? 0x7FC00000u : e == 0u ? 0x00400000u : e << 23);
}
#endif

/* The tile row R of B (0 <= R < BN) as a row of the B operand: mode 0 expert e's rows (SwiGLU 1: BN / 2 gate rows of
   tile nt, then the same up rows, N / 2 further on); mode 1 the rows of tile nt. */
static __device__ __forceinline__ long long fbm_brow(const fb_kp_gemm &p, int e, int nt, int R) {
#if FB_MODE == 0
#if FB_SWIGLU == 1
  return (long long)e * p.N + (long long)nt * (BN / 2) + (R < BN / 2 ? R : p.N / 2 + R - BN / 2);
#else
  return (long long)e * p.N + (long long)nt * BN + R;
#endif
#else
  (void)e;
  return (long long)nt * BN + R;
#endif
}
/* The first smem row of B of n8 tile ni of warp column wn: SwiGLU 1 puts a warp's gate columns first, its up columns
   after, so its accumulators hold g and u of the same output column WN / 4 floats apart (fbg_epilogue). */
static __device__ __forceinline__ int fbm_bsrow(int wn, int ni) {
#if FB_SWIGLU == 1
  return ni < NI / 2 ? wn * (WN / 2) + ni * 8 : BN / 2 + wn * (WN / 2) + (ni - NI / 2) * 8;
#else
  return wn * WN + ni * 8;
#endif
}

/* The A fragments of k step ks (16-byte chunks 2 ks, 2 ks + 1: a k16 step of BF16, a k32 step of E4M3) of this warp's MI
   m16 tiles, and the B fragments of its NI n8 tiles, by ldmatrix.x4: A lanes read rows (lane & 7) + 8 ((lane >> 3) & 1),
   chunk + (lane >> 4); B lanes rows (lane & 7) of n8 tile 2 j + (lane >> 4), chunk + ((lane >> 3) & 1). */
static __device__ __forceinline__ void fbm_frag_a(u32 sa, int wm, int lane, int ks, u32 (&af)[MI][4]) {
  const int ar = (lane & 7) + 8 * ((lane >> 3) & 1), ac = lane >> 4;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
    u32 x[2][2];
    fbg_ldsm_x4(fbm_sw128(sa, BM, wm * WM + mi * 16 + ar, 2 * ks + ac), x);
    af[mi][0] = x[0][0], af[mi][1] = x[0][1], af[mi][2] = x[1][0], af[mi][3] = x[1][1];
  }
}
static __device__ __forceinline__ void fbm_frag_b(u32 sb, int wn, int lane, int ks, u32 (&bf)[NI][2]) {
  const int br = lane & 7, bc = (lane >> 3) & 1, bt = lane >> 4;
#pragma unroll
  for (int j = 0; j < NI / 2; ++j) {
    u32 x[2][2];
    fbg_ldsm_x4(fbm_sw128(sb, BN, fbm_bsrow(wn, 2 * j + bt) + br, 2 * ks + bc), x);
    bf[2 * j][0] = x[0][0], bf[2 * j][1] = x[0][1], bf[2 * j + 1][0] = x[1][0], bf[2 * j + 1][1] = x[1][1];
  }
}

/* The m and n tile of tile t of s: 32-bit division (a 64-bit one is a call, whose saved registers spill the
   accumulators it is made beside) */
static __device__ __forceinline__ void fbm_mn(const fbg_sched &s, long long t, int &mt, int &nt) {
  const unsigned lt = (unsigned)(t - s.base), m = (unsigned)s.mt;
  nt = (int)(lt / m), mt = (int)(lt - (unsigned)nt * m);
}

/* One k-block of tile (mt, nt) of expert s.e into the stage at st: every thread its share of A's and B's 16-byte chunks. */
static __device__ __forceinline__ void fbm_load(const fb_kp_gemm &p, const fbg_sched &s, int mt, int nt, int kb, u32 st, int tid) {
#if FB_MODE == 0
  const long long arow0 = fbg_off(p, s.e) + (long long)mt * BM, alim = p.rows, kin = (long long)kb * BK, ld = p.K;
#else
  const long long arow0 = (long long)mt * BM, alim = p.M, kin = fbg_off(p, s.e) + (long long)kb * BK, ld = p.rows;
#endif
  const unsigned char *ga = (const unsigned char *)p.a, *gb = (const unsigned char *)p.b;
  /* opaque to the compiler on every call: it would otherwise hoist every chunk's address out of the k-block loop (they
     do not change with the k-block but for its offset) and hold them all, 2 registers each, beside the accumulators */
  asm volatile("" : "+l"(ga), "+l"(gb));
  const long long alda = FB_KIND == 0 ? ld * 2 : FB_KIND == 1 ? ld / 2 : ld, aoff = FB_KIND == 0 ? kin * 2 : FB_KIND == 1 ? kin / 2 : kin;
  const long long bldb = FB_KIND == 2 ? ld : ld * 2, boff = FB_KIND == 2 ? kin : kin * 2;
#define A_CHUNKS (BM * (A_ROWB / 16))
#define B_CHUNKS (BN * (B_ROWB / 16))
  /* unrolled, every chunk's address is held at once beside the accumulators: where that is more than 16 chunks a thread
     or beside a second fragment set (pipe), ptxas 13.0 spilled, so there one chunk's address at a time (slower: the
     H200 measured 237 against 311 TFLOP/s on the 128 x 128 BF16 tile with 4 warps) */
#if (A_CHUNKS + B_CHUNKS) / NTHR <= 16 && !FB_PIPE
#define FBM_LOAD_UNROLL _Pragma("unroll")
#else
#define FBM_LOAD_UNROLL _Pragma("unroll 1")
#endif
  FBM_LOAD_UNROLL
  for (int it = 0; it < (A_CHUNKS + NTHR - 1) / NTHR; ++it) {
    const int i = tid + it * NTHR;
    if (A_CHUNKS % NTHR && i >= A_CHUNKS) break;
    const int R = i / (A_ROWB / 16), c = i % (A_ROWB / 16);
    const long long r = arow0 + R;
    const bool ok = r < alim;
    const u32 dst = FB_KIND == 1 ? fbm_sw64(st, R, c) : fbm_sw128(st, BM, R, c);
    fbm_cp16(dst, ga + (ok ? r : 0) * alda + aoff + 16 * c, ok);
  }
  FBM_LOAD_UNROLL
  for (int it = 0; it < (B_CHUNKS + NTHR - 1) / NTHR; ++it) {
    const int i = tid + it * NTHR;
    if (B_CHUNKS % NTHR && i >= B_CHUNKS) break;
    const int R = i / (B_ROWB / 16), c = i % (B_ROWB / 16);
    fbm_cp16(fbm_sw128(st + A_BYTES, BN, R, c), gb + fbm_brow(p, s.e, nt, R) * bldb + boff + 16 * c, true);
  }
#if FB_KIND == 2
  /* the k-block's 4 E8M0 bytes of every row of A, then of B */
  const long long kw = ld / 32, k32 = kin / 32;
  for (int i = tid; i < BM + BN; i += NTHR) {
    const u32 dst = st + A_BYTES + B_BYTES + 4 * i;
    if (i < BM) {
      const long long r = arow0 + i;
      fbm_cp4(dst, (const unsigned char *)p.a_sf + (r < alim ? r : 0) * kw + k32, r < alim);
    } else {
      fbm_cp4(dst, (const unsigned char *)p.b_sf + fbm_brow(p, s.e, nt, i - BM) * kw + k32, true);
    }
  }
#endif
}

/* k-blocks of the current tile of s */
static __device__ __forceinline__ int fbm_nk(const fb_kp_gemm &p, const fbg_sched &s) {
#if FB_MODE == 0
  (void)s;
  return p.K / BK;
#else
  return (int)((fbg_off(p, s.e + 1) - fbg_off(p, s.e)) / BK);
#endif
}

extern "C" __global__ void __launch_bounds__(NTHR, 1) FB_KERNEL(const __grid_constant__ fb_kp_gemm p) {
  extern __shared__ unsigned char fbm_raw[];
  const u32 sbase = (fbg_smem(fbm_raw) + 127u) & ~127u;
#define SA(s) (sbase + (u32)(s) * STAGE_BYTES)
#define SB(s) (SA(s) + A_BYTES)
#define SSF(s) (SB(s) + B_BYTES)
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, q = lane % 4;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;
  unsigned char *gsm = fbm_raw + (sbase - fbg_smem(fbm_raw));
  (void)gsm;

  /* the load stream: (tile lt of ls, k-block lkb), tiles without k-blocks (wgrad: an empty expert) skipped */
  fbg_sched ls = {0, 0, -1, 0};
  long long lt = blockIdx.x;
  int lmore = fbg_next(p, ls, lt), lkb = 0, lnk = lmore ? fbm_nk(p, ls) : 0, lmt = 0, lnt = 0;
  while (lmore && lnk == 0) lt += gridDim.x, lmore = fbg_next(p, ls, lt), lnk = lmore ? fbm_nk(p, ls) : 0;
  if (lmore) fbm_mn(ls, lt, lmt, lnt);
  int wst = 0; /* the stage the next load goes to */
#define FBM_LOAD_NEXT()                                                                                                \
  do {                                                                                                                 \
    if (lmore) {                                                                                                       \
      fbm_load(p, ls, lmt, lnt, lkb, SA(wst), tid);                                                                    \
      if (++lkb == lnk) {                                                                                              \
        lkb = 0;                                                                                                       \
        do lt += gridDim.x, lmore = fbg_next(p, ls, lt), lnk = lmore ? fbm_nk(p, ls) : 0;                              \
        while (lmore && lnk == 0);                                                                                     \
        if (lmore) fbm_mn(ls, lt, lmt, lnt);                                                                           \
      }                                                                                                                \
    }                                                                                                                  \
    fbm_commit();                                                                                                      \
    if (++wst == NST) wst = 0;                                                                                         \
  } while (0)
#pragma unroll 1
  for (int i = 0; i < NST - 1; ++i) FBM_LOAD_NEXT();

  fbg_sched sc = {0, 0, -1, 0};
  int cst = 0; /* the stage of the next k-block computed */
  float acc[MI][WN / 2];
#pragma unroll 1
  for (long long t = blockIdx.x; fbg_next(p, sc, t); t += gridDim.x) {
    int mt, nt;
    fbm_mn(sc, t, mt, nt);
    const int nk = fbm_nk(p, sc);
#if FB_MODE == 0
    const long long row0 = fbg_off(p, sc.e) + (long long)mt * BM, rend = fbg_off(p, sc.e + 1);
#else
    const long long row0 = (long long)mt * BM, rend = p.M;
#endif
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int i = 0; i < WN / 2; ++i) acc[mi][i] = 0.0f;

#if FB_KIND == 1 || FB_KIND == 3
    /* this thread's rows of A (r0, r0 + 8 of each m16 tile): their block scales are loaded one k-block ahead */
    long long arow[MI][2];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) arow[mi][h] = row0 + wm * WM + mi * 16 + lane / 4 + 8 * h;
#if FB_KIND == 1
    const long long kw16 = p.K / 16, alim = p.rows, kb0 = 0; /* 8 E4M3 bytes per row per k-block */
#define FBM_SFLOAD(r, kb) (*(const uint2 *)((const unsigned char *)p.a_sf + (r) * kw16 + (kb) * (BK / 16)))
#define FBM_SFNONE make_uint2(0, 0)
#else
#if FB_MODE == 0
    const long long kw32 = p.K / 32, kb0 = 0, alim = p.rows;
#else
    const long long kw32 = p.rows / 32, kb0 = fbg_off(p, sc.e) / 32, alim = p.M;
#endif
#define FBM_SFLOAD(r, kb) (*(const u32 *)((const unsigned char *)p.a_sf + (r) * kw32 + kb0 + (kb) * (BK / 32)))
#define FBM_SFNONE 0x7F7F7F7Fu
#endif
    fbg_sfw sfc[MI][2], sfn[MI][2];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) sfn[mi][h] = nk > 0 && arow[mi][h] < alim ? FBM_SFLOAD(arow[mi][h], 0) : FBM_SFNONE;
    (void)kb0;
#endif

#pragma unroll 1
    for (int kb = 0; kb < nk; ++kb) {
#if FB_KIND == 1 || FB_KIND == 3
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          sfc[mi][h] = sfn[mi][h];
          if (kb + 1 < nk && arow[mi][h] < alim) sfn[mi][h] = FBM_SFLOAD(arow[mi][h], kb + 1);
        }
#endif
      fbm_wait<NST - 2>();
      __syncthreads(); /* k-block kb is in stage cst for every thread; every thread is done with the stage before it */
      FBM_LOAD_NEXT();
      const u32 sa = SA(cst), sb = SB(cst);
#if FB_KIND == 0
#if FB_PIPE
      /* the fragments of k16 step ks + 1 are read while the mmas of ks run (two fragment sets) */
      u32 af[2][MI][4], bf[2][NI][2];
      fbm_frag_a(sa, wm, lane, 0, af[0]);
      fbm_frag_b(sb, wn, lane, 0, bf[0]);
#pragma unroll
      for (int ks = 0; ks < BK / 16; ++ks) {
        if (ks + 1 < BK / 16) fbm_frag_a(sa, wm, lane, ks + 1, af[(ks + 1) & 1]), fbm_frag_b(sb, wn, lane, ks + 1, bf[(ks + 1) & 1]);
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
          for (int ni = 0; ni < NI; ++ni) fbm_mma_bf16(acc[mi], 4 * ni, af[ks & 1][mi], bf[ks & 1][ni][0], bf[ks & 1][ni][1]);
      }
#else
#if MI * NI >= 32 /* a 64 x 64 warp tile or wider: one k16 step at a time (the fragments of the next ones spill) */
#pragma unroll 1
#else
#pragma unroll
#endif
      for (int ks = 0; ks < BK / 16; ++ks) {
        u32 af[MI][4], bf[NI][2];
        fbm_frag_a(sa, wm, lane, ks, af);
        fbm_frag_b(sb, wn, lane, ks, bf);
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
          for (int ni = 0; ni < NI; ++ni) fbm_mma_bf16(acc[mi], 4 * ni, af[mi], bf[ni][0], bf[ni][1]);
      }
#endif
#elif FB_KIND == 1 || FB_KIND == 3
      /* two halves of the k-block, 4 k16 steps each: A decoded for all MI tiles, then B by ldmatrix per k16 step */
#if FB_PIPE
      /* the second half's A is decoded while the first half's mmas run (two sets of decoded fragments) */
      u32 af[2][MI][4][4];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) fbg_decode_a16<4>(sa, wm * WM + mi * 16, sfc[mi], af[0][mi], 0, lane, q);
#pragma unroll
      for (int kc = 0; kc < 2; ++kc) {
        if (kc == 0)
#pragma unroll
          for (int mi = 0; mi < MI; ++mi) fbg_decode_a16<4>(sa, wm * WM + mi * 16, sfc[mi], af[1][mi], 4, lane, q);
#pragma unroll
        for (int j4 = 0; j4 < 4; ++j4) {
          u32 bf[NI][2];
          fbm_frag_b(sb, wn, lane, 4 * kc + j4, bf);
#pragma unroll
          for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) fbm_mma_bf16(acc[mi], 4 * ni, af[kc][mi][j4], bf[ni][0], bf[ni][1]);
        }
      }
#else
#pragma unroll 1 /* one half at a time: both decoded at once spill */
      for (int kc = 0; kc < 2; ++kc) {
        u32 af[MI][4][4];
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) fbg_decode_a16<4>(sa, wm * WM + mi * 16, sfc[mi], af[mi], 4 * kc, lane, q);
#pragma unroll
        for (int j4 = 0; j4 < 4; ++j4) {
          u32 bf[NI][2];
          fbm_frag_b(sb, wn, lane, 4 * kc + j4, bf);
#pragma unroll
          for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) fbm_mma_bf16(acc[mi], 4 * ni, af[mi][j4], bf[ni][0], bf[ni][1]);
        }
      }
#endif
#else
      /* MXFP8 on FP8 mma: a k32 step is one MX block of both operands; its product is promoted with their scales */
      const u32 *sfa = (const u32 *)(gsm + (SSF(cst) - sbase)), *sfb = sfa + BM;
      u32 ea[MI][2], eb[NI][2];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) ea[mi][h] = sfa[wm * WM + mi * 16 + lane / 4 + 8 * h];
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e) eb[ni][e] = sfb[fbm_bsrow(wn, ni) + 2 * q + e];
#pragma unroll 1 /* one k32 step at a time: the temporaries, scales and fragments of more spill */
      for (int ks = 0; ks < BK / 32; ++ks) {
        u32 af[MI][4], bf[NI][2];
        fbm_frag_a(sa, wm, lane, ks, af);
        fbm_frag_b(sb, wn, lane, ks, bf);
        float sbv[NI][2];
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
          for (int e = 0; e < 2; ++e) sbv[ni][e] = fbm_e8m0((eb[ni][e] >> (8 * ks)) & 0xFFu);
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
          float tmp[NI][4];
#pragma unroll
          for (int ni = 0; ni < NI; ++ni) fbm_mma_e4m3(tmp[ni], af[mi], bf[ni][0], bf[ni][1]);
          const float sa0 = fbm_e8m0((ea[mi][0] >> (8 * ks)) & 0xFFu), sa1 = fbm_e8m0((ea[mi][1] >> (8 * ks)) & 0xFFu);
#pragma unroll
          for (int ni = 0; ni < NI; ++ni) {
            acc[mi][4 * ni + 0] = fmaf(tmp[ni][0], sa0 * sbv[ni][0], acc[mi][4 * ni + 0]);
            acc[mi][4 * ni + 1] = fmaf(tmp[ni][1], sa0 * sbv[ni][1], acc[mi][4 * ni + 1]);
            acc[mi][4 * ni + 2] = fmaf(tmp[ni][2], sa1 * sbv[ni][0], acc[mi][4 * ni + 2]);
            acc[mi][4 * ni + 3] = fmaf(tmp[ni][3], sa1 * sbv[ni][1], acc[mi][4 * ni + 3]);
          }
        }
      }
#endif
      if (++cst == NST) cst = 0;
    }

    /* ---------------- epilogue: straight from the accumulators (fb_gemm_dev.h) ---------------- */
#if FB_KIND == 1
    const float sb_outer = p.b_outer ? ((const float *)p.b_outer)[FB_B_OUTER == 1 ? sc.e : 0] : 1.0f;
#endif
    const int cb = FB_SWIGLU == 1 ? nt * (BN / 2) + wn * (WN / 2) : nt * BN + wn * WN;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const long long r = row0 + wm * WM + mi * 16 + lane / 4 + 8 * h;
        const bool live = r < rend;
        float so = 1.0f;
#if FB_KIND == 1
        if (live) so = (p.a_outer ? ((const float *)p.a_outer)[FB_A_OUTER == 1 ? r : 0] : 1.0f) * sb_outer;
#endif
        fbg_epilogue<WN>(p, acc[mi], h, r, live, so, cb, sc.e, q);
      }
  }
  fbm_wait<0>();
}
