/* fb_gemm_dev.h — what the two grouped GEMM families share on the device: gemm_sm90.cuh (wgmma, sm_90a) and
 * gemm_mma.cuh (mma.sync, every arch from sm_89 on). Both hold their accumulators in the same register layout — a warp's
 * 16 rows x NCOL columns as NCOL / 8 blocks of m16n8 fragments, acc[4 jb + 2 h + e] the element of row lane / 4 + 8 h and
 * column 8 jb + 2 (lane % 4) + e (wgmma's m64 accumulator is four such warps' slices) — and the same register layout of a
 * decoded A operand (mma.sync m16n8k16's A fragment, which is wgmma's register A of a warp), so they share:
 *   the persistent tile scheduler (fbg_sched, fbg_next: the expert offsets read on the device),
 *   the NVFP4 / MXFP8 decoders of A (fbg_decode_a16: ldmatrix + exact decode to BF16 of one m16 tile),
 *   the epilogue of one accumulator row half (fbg_epilogue: BF16 / FP32 stores, SwiGLU, SwiGLU backward, RHT-32 + S2F6).
 * The includer defines BM, BN (the CTA tile), FB_KIND, FB_MODE, FB_SWIGLU, FB_S2F6, FB_OUT_BF16 (and FB_RHT with
 * FB_S2F6, FB_EPI_CHEAP) before including this; fb_gemm.h's parameter block is p everywhere. Only instructions of sm_89
 * and later (ldmatrix, prmt, fma.rn.bf16x2, cvt.rn.f16x2.e4m3x2, cvt.rn.bf16x2.f32). */
#ifndef FB_GEMM_DEV_H
#define FB_GEMM_DEV_H
#include "fb_gemm.h"
#if FB_S2F6
#include "fb_formats.h"
#endif
#if FB_SWIGLU
#include "fb_moe.h"
#endif

typedef unsigned int u32;
typedef unsigned long long u64;

static __device__ __forceinline__ u32 fbg_smem(const void *p) { return (u32)__cvta_generic_to_shared(p); }
static __device__ __forceinline__ u32 fbg_prmt(u32 a, u32 b, u32 c) {
  u32 d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
/* ldmatrix.x4 of four 8x8 b16 matrices: x[0][0], x[0][1], x[1][0], x[1][1] = matrices 0, 1, 2, 3 */
static __device__ __forceinline__ void fbg_ldsm_x4(u32 addr, u32 (&x)[2][2]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(x[0][0]), "=r"(x[0][1]), "=r"(x[1][0]), "=r"(x[1][1])
               : "r"(addr)
               : "memory");
}
static __device__ __forceinline__ u32 fbg_pack_bf16(float lo, float hi) {
  u32 d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
#if FB_SWIGLU
/* x rounded to BF16 (RNE, NaN kept quiet), as a float: H and dA as the unfused path stores them */
static __device__ __forceinline__ float fbg_bf16r(float x) { return __uint_as_float((u32)fbo_bf16_rne(x) << 16); }
#endif

/* BF16 stores of two 8-column blocks: lanes q and q^1 swap one pair, so each lane stores 8 bytes and a warp's store
   covers 32 contiguous bytes (a sector) of each of its 8 rows. p0, p1: this lane's pair of blocks jb and jb + 1. */
static __device__ __forceinline__ void fbg_st_pairs(unsigned short *row, int jb, int q, u32 p0, u32 p1, bool live) {
  const u32 recv = __shfl_xor_sync(0xffffffffu, (q & 1) ? p0 : p1, 1);
  const uint2 v = (q & 1) ? make_uint2(recv, p1) : make_uint2(p0, recv);
  const int col = (q & 1) ? 8 * (jb + 1) + 2 * (q - 1) : 8 * jb + 2 * q;
  if (live) *(uint2 *)(row + col) = v;
}

/* ---- the persistent tile scheduler: the same walk in every role and CTA, so they need not talk ---- */
#define NT_N ((long long)p.N / BN)
typedef struct {
  int e;           /* expert of the current tile */
  long long base;  /* linear index of the expert's first tile */
  long long count; /* tiles of expert e */
  long long mt;    /* m tiles of expert e */
} fbg_sched;

static __device__ __forceinline__ long long fbg_off(const fb_kp_gemm &p, int e) {
  return ((const long long *)p.offsets)[e];
}

/* Find the tile `t` (t only grows): returns 0 past the last tile. */
static __device__ __forceinline__ int fbg_next(const fb_kp_gemm &p, fbg_sched &s, long long t) {
  while (s.e < p.experts) {
    if (s.count < 0) {
#if FB_MODE == 0
      long long rows = fbg_off(p, s.e + 1) - fbg_off(p, s.e);
      s.mt = rows > 0 ? (rows + BM - 1) / BM : 0;
#else
      s.mt = p.M / BM;
#endif
      s.count = s.mt * NT_N;
    }
    if (t < s.base + s.count) return 1;
    s.base += s.count;
    s.count = -1;
    ++s.e;
  }
  return 0;
}

#if FB_KIND == 1 || FB_KIND == 3
/* a * b in both BF16 halves, RN (a fused multiply-add of -0: the product's rounding only, zeros keep their sign) */
static __device__ __forceinline__ u32 fbg_bf16x2_mul(u32 a, u32 b) {
  u32 d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  return d;
}
#endif
#if FB_KIND == 3
/* ---- MXFP8 (FB_KIND 3): 4 E4M3 codes -> 2 BF16 pairs (codes 0,1 and 2,3) times 2^(e-127), exactly. The code's
   7 magnitude bits placed at BF16 bits 10..4 read as value * 2^-120, subnormals included; two products restore it. */
static __device__ __forceinline__ void fbg_decode4_e4m3(u32 w, u32 scale2, u32 &lo, u32 &hi) {
  const u32 two120 = 0x7B807B80u; /* 2^120 in both halves */
  u32 x0 = fbg_prmt(w, 0u, 0x4140), x1 = fbg_prmt(w, 0u, 0x4342);
  x0 = ((x0 & 0x007F007Fu) << 4) | ((x0 & 0x00800080u) << 8);
  x1 = ((x1 & 0x007F007Fu) << 4) | ((x1 & 0x00800080u) << 8);
  lo = fbg_bf16x2_mul(fbg_bf16x2_mul(x0, two120), scale2);
  hi = fbg_bf16x2_mul(fbg_bf16x2_mul(x1, two120), scale2);
}
/* E8M0 byte -> 2^(e-127) as BF16 in both halves (e = 0: the subnormal 2^-127; 255: NaN) */
static __device__ __forceinline__ u32 fbg_e8m0_bf16x2(u32 e) {
  u32 b = e == 255u ? 0x7FC0u : e == 0u ? 0x0040u : e << 7;
  return b | (b << 16);
}
typedef u32 fbg_sfw; /* a row's 4 E8M0 scales of a k-block */
#endif
#if FB_KIND == 1
/* ---- NVFP4 (FB_KIND 1): 8 E2M1 codes -> 4 BF16 pairs, times the block scale (BF16, both halves) ---- */
/* out[k] = (codes 2k, 2k+1 of w) as BF16 e2m1 values * sf; the sign is or-ed in after the product (sf > 0). */
static __device__ __forceinline__ void fbg_decode8(u32 w, u32 sf2, u32 (&out)[4]) {
  u32 m = w & 0x77777777u;
  u32 hi0 = fbg_prmt(0x3F3F3F00u, 0x40404040u, m), lo0 = fbg_prmt(0xC0800000u, 0xC0804000u, m);
  u32 hi1 = fbg_prmt(0x3F3F3F00u, 0x40404040u, m >> 16), lo1 = fbg_prmt(0xC0800000u, 0xC0804000u, m >> 16);
  u32 ws = w << 4;
  u32 v[4] = {fbg_prmt(lo0, hi0, 0x5140), fbg_prmt(lo0, hi0, 0x7362), fbg_prmt(lo1, hi1, 0x5140), fbg_prmt(lo1, hi1, 0x7362)};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    /* byte 1 <- sign of code 2k (bit 7 of byte k of w << 4), byte 3 <- sign of code 2k+1 (bit 7 of byte k of w) */
    u32 s = fbg_prmt(ws, w, ((8u | (4u + k)) << 12) | ((8u | k) << 4));
    out[k] = fbg_bf16x2_mul(v[k], sf2) | (s & 0x80008000u);
  }
}
/* E4M3 scale bytes (lo: row r0, hi: row r0 + 8) -> two BF16x2 multipliers (each value in both halves); exact */
static __device__ __forceinline__ void fbg_sf_pair(u32 two, u32 &m0, u32 &m1) {
  u32 h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"((unsigned short)two));
  float f0, f1;
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.f32.f16 %0, l;\ncvt.f32.f16 %1, h;\n}\n" : "=f"(f0), "=f"(f1) : "r"(h2));
  asm("cvt.rn.bf16x2.f32 %0, %1, %1;" : "=r"(m0) : "f"(f0));
  asm("cvt.rn.bf16x2.f32 %0, %1, %1;" : "=r"(m1) : "f"(f1));
}
typedef uint2 fbg_sfw; /* a row's 8 E4M3 block scales of a k-block */
#endif

#if FB_KIND == 1 || FB_KIND == 3
/* A's fragments of the k16 steps k0 .. k0 + NF - 1 of a 128-wide k-block, decoded to BF16 in registers, for the 16 rows
   from R0 of the stage at sa: af[j] is step k0 + j. The stage holds A as the TMA boxes of gemm_sm90.cuh lay it out:
   NVFP4 codes 64 bytes a row, 16-byte chunk g at g ^ ((R >> 1) & 3) (64-byte swizzle); E4M3 codes 128 bytes a row,
   chunk ch at ch ^ (R & 7) (128-byte swizzle). sfc: the scales of the k-block of this thread's rows R0 + lane / 4 and
   R0 + lane / 4 + 8. k0: a multiple of 4 (NVFP4) or 2 (MXFP8), and NF of 4 or 2; it may vary at run time (the registers af
   selects do not depend on it). */
template <int NF>
static __device__ __forceinline__ void fbg_decode_a16(u32 sa, int R0, const fbg_sfw (&sfc)[2], u32 (&af)[NF][4], int k0, int lane, int q) {
  const int R = R0 + ((lane >> 3) & 1) * 8 + (lane & 7);
#if FB_KIND == 1
  /* NVFP4: each ldmatrix.x4 = 2 groups of 32 codes (4 k16 steps) x 2 row halves */
#pragma unroll
  for (int i = 0; i < NF / 4; ++i) {
    const int gp = k0 / 4 + i, g = gp * 2 + (lane >> 4);
    u32 xs[2][2]; /* [group within the pair][row half] */
    fbg_ldsm_x4(sa + R * 64 + ((g ^ ((R >> 1) & 3)) << 4), xs);
#pragma unroll
    for (int gg = 0; gg < 2; ++gg) {
      int grp = gp * 2 + gg; /* group in the k-block: scale byte 2 * grp + q / 2 of the row's 8 */
      u32 w0 = grp < 2 ? sfc[0].x : sfc[0].y, w1 = grp < 2 ? sfc[1].x : sfc[1].y;
      u32 sh = 8 * (2 * (grp & 1) + (q >> 1));
      u32 m0, m1;
      fbg_sf_pair(((w0 >> sh) & 0xFF) | (((w1 >> sh) & 0xFF) << 8), m0, m1);
      u32 d0[4], d1[4];
      fbg_decode8(xs[gg][0], m0, d0);
      fbg_decode8(xs[gg][1], m1, d1);
#pragma unroll
      for (int st = 0; st < 2; ++st) { /* step 2 grp + st - k0 of the NF */
        af[4 * i + 2 * gg + st][0] = d0[2 * st];
        af[4 * i + 2 * gg + st][1] = d1[2 * st];
        af[4 * i + 2 * gg + st][2] = d0[2 * st + 1];
        af[4 * i + 2 * gg + st][3] = d1[2 * st + 1];
      }
    }
  }
#else
  /* MXFP8: each ldmatrix.x4 = 2 chunks of 16 codes (2 k16 steps) x 2 row halves */
#pragma unroll
  for (int i = 0; i < NF / 2; ++i) {
    const int cp = k0 / 2 + i, ch = cp * 2 + (lane >> 4);
    u32 xs[2][2]; /* [chunk within the pair][row half] */
    fbg_ldsm_x4(sa + R * 128 + ((ch ^ (R & 7)) << 4), xs);
#pragma unroll
    for (int cc = 0; cc < 2; ++cc) {
      const int k = cp * 2 + cc, sh = 8 * (k >> 1); /* chunk k of 16 codes lies in MX block k / 2 */
      u32 m0 = fbg_e8m0_bf16x2((sfc[0] >> sh) & 0xFF), m1 = fbg_e8m0_bf16x2((sfc[1] >> sh) & 0xFF);
      u32 l0, h0, l1, h1;
      fbg_decode4_e4m3(xs[cc][0], m0, l0, h0);
      fbg_decode4_e4m3(xs[cc][1], m1, l1, h1);
      af[2 * i + cc][0] = l0, af[2 * i + cc][1] = l1, af[2 * i + cc][2] = h0, af[2 * i + cc][3] = h1; /* step k - k0 */
    }
  }
#endif
}
#endif

/* ---- the epilogue of one accumulator row half, straight from the registers ----
 * acc: a warp's NCOL columns (NCOL / 8 blocks) of row r (this lane's row lane / 4 + 8 h of its m16 tile), h which half;
 * live: r is one of the expert's rows (a quad shares its row, so the shuffles below stay within live lanes' quads);
 * so: the outer scales' product; cb: the first output column of acc (FB_SWIGLU 1: of A's f columns, the gate half's
 * first; H's gate and up columns are cb and f + cb); e: the tile's expert (FB_MODE 1). The accumulators are written
 * over (S2F6 codes, SwiGLU values): call it once per (tile, h). */
template <int NCOL>
static __device__ __forceinline__ void fbg_epilogue(const fb_kp_gemm &p, float (&acc)[NCOL / 2], int h, long long r, bool live,
                                                    float so, int cb, int e, int q) {
  (void)e;
#if FB_S2F6
  unsigned exs[NCOL / 32];
  /* the combine payload, per 32 columns (4 accumulator blocks; the quad holds the 32): signs, the 5 WHT stages in
     order (stage 0 and 3, 4 in registers, 1 and 2 across lanes q ^ 1, q ^ 2), the NaN-keeping amax, E8M0, int8 */
#pragma unroll
  for (int B = 0; B < NCOL / 32; ++B) {
    float t[8]; /* t[2 jj + e]: column 8 jj + 2 q + e of the block */
#pragma unroll
    for (int jj = 0; jj < 4; ++jj)
#pragma unroll
      for (int x = 0; x < 2; ++x) t[2 * jj + x] = acc[4 * (4 * B + jj) + 2 * h + x] * so;
#if FB_RHT
#pragma unroll
    for (int jj = 0; jj < 4; ++jj)
#pragma unroll
      for (int x = 0; x < 2; ++x)
        if ((p.signs >> (8 * jj + 2 * q + x)) & 1u) t[2 * jj + x] = -t[2 * jj + x];
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) { const float u = t[2 * jj], v = t[2 * jj + 1]; t[2 * jj] = u + v, t[2 * jj + 1] = u - v; }
#pragma unroll
    for (int st = 1; st <= 2; ++st)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float o = __shfl_xor_sync(0xffffffffu, t[i], st);
        t[i] = (q & st) ? o - t[i] : t[i] + o;
      }
#pragma unroll
    for (int st = 1; st <= 2; st *= 2)
#pragma unroll
      for (int jj = 0; jj < 4; ++jj)
        if (!(jj & st))
#pragma unroll
          for (int x = 0; x < 2; ++x) {
            const float u = t[2 * jj + x], v = t[2 * (jj + st) + x];
            t[2 * jj + x] = u + v, t[2 * (jj + st) + x] = u - v;
          }
#endif
    float a = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float x = fabsf(t[i]);
      if (x > a || x != x) a = a != a ? a : x;
    }
#pragma unroll
    for (int st = 1; st <= 2; st *= 2) {
      const float o = __shfl_xor_sync(0xffffffffu, a, st);
      a = (a != a || o != o) ? __int_as_float(0x7FC00000) : (o > a ? o : a);
    }
    const unsigned ex = fbf_s2f6_exp(a);
    const float inv = fbf_pow2(127 - (int)ex);
    /* the codes go back into this block's accumulator slots (as bits), the exponent into exs: every block's
       math first, the stores after, so the blocks' chains can overlap */
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const unsigned w = fbf_s2f6_code(t[2 * jj], inv) | fbf_s2f6_code(t[2 * jj + 1], inv) << 8;
      acc[4 * (4 * B + jj) + 2 * h] = __uint_as_float(w);
    }
    exs[B] = ex;
  }
  if (!live) return;
  signed char *orow8 = (signed char *)p.out + r * p.N + cb;
#pragma unroll
  for (int B = 0; B < NCOL / 32; ++B) {
#pragma unroll
    for (int jj = 0; jj < 4; ++jj)
      *(unsigned short *)(orow8 + 32 * B + 8 * jj + 2 * q) = (unsigned short)__float_as_uint(acc[4 * (4 * B + jj) + 2 * h]);
    if (q == 0) ((unsigned char *)p.out_sf)[r * (p.N / 32) + (cb + 32 * B) / 32] = (unsigned char)exs[B];
  }
#elif FB_SWIGLU == 2
  /* dH = [dg | du] from dA (these accumulators) and H = [g | u] (p.aux): lanes q and q^1 first swap dA pairs so
     that each lane holds 4 consecutive columns, then it loads 8 bytes of g and of u and stores 8 bytes of each */
  const unsigned short *hrow = (const unsigned short *)p.aux + (live ? r : 0) * 2 * p.N;
  unsigned short *orow2 = (unsigned short *)p.out + r * 2 * p.N;
  /* the swaps first, in place: afterwards slots 4 jb + 2 h + {0, 1} and 4 (jb + 1) + 2 h + {0, 1} hold dA of this
     lane's 4 consecutive columns; then batches of 4 pairs: 8 loads of H, 16 independent SwiGLU backwards, stores */
#pragma unroll
  for (int jb = 0; jb < NCOL / 8; jb += 2) {
    float *a0 = &acc[4 * jb + 2 * h], *a1 = &acc[4 * jb + 4 + 2 * h];
    /* dA rounded to BF16 first, as the unfused path stores it */
    const float v0 = fbg_bf16r(a0[0] * so), v1 = fbg_bf16r(a0[1] * so), v2 = fbg_bf16r(a1[0] * so), v3 = fbg_bf16r(a1[1] * so);
    const float r0 = __shfl_xor_sync(0xffffffffu, (q & 1) ? v0 : v2, 1);
    const float r1 = __shfl_xor_sync(0xffffffffu, (q & 1) ? v1 : v3, 1);
    a0[0] = (q & 1) ? r0 : v0, a0[1] = (q & 1) ? r1 : v1, a1[0] = (q & 1) ? v2 : r0, a1[1] = (q & 1) ? v3 : r1;
  }
  if (!live) return;
#pragma unroll
  for (int jb0 = 0; jb0 < NCOL / 8; jb0 += 8) {
    uint2 gb[4], ub[4];
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int jb = jb0 + 2 * b, col = cb + ((q & 1) ? 8 * (jb + 1) + 2 * (q - 1) : 8 * jb + 2 * q);
      if (jb < NCOL / 8) gb[b] = *(const uint2 *)(hrow + col), ub[b] = *(const uint2 *)(hrow + p.N + col);
    }
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int jb = jb0 + 2 * b;
      if (jb >= NCOL / 8) continue;
      const float d[4] = {acc[4 * jb + 2 * h], acc[4 * jb + 2 * h + 1], acc[4 * jb + 4 + 2 * h], acc[4 * jb + 4 + 2 * h + 1]};
      const int col = cb + ((q & 1) ? 8 * (jb + 1) + 2 * (q - 1) : 8 * jb + 2 * q);
      const u32 gw[2] = {gb[b].x, gb[b].y}, uw[2] = {ub[b].x, ub[b].y};
      u32 dgw[2], duw[2];
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        float dg0, du0, dg1, du1;
#if FB_EPI_CHEAP /* diagnostics only (test_gemm --cheap-epilogue): the same data movement without the math */
        dg0 = d[2 * t] * __uint_as_float(uw[t] << 16), du0 = d[2 * t] * __uint_as_float(gw[t] << 16);
        dg1 = d[2 * t + 1] * __uint_as_float(uw[t] & 0xFFFF0000u), du1 = d[2 * t + 1] * __uint_as_float(gw[t] & 0xFFFF0000u);
#else
        fbo_swiglu_bwd(__uint_as_float(gw[t] << 16), __uint_as_float(uw[t] << 16), d[2 * t], &dg0, &du0);
        fbo_swiglu_bwd(__uint_as_float(gw[t] & 0xFFFF0000u), __uint_as_float(uw[t] & 0xFFFF0000u), d[2 * t + 1], &dg1, &du1);
#endif
        dgw[t] = (u32)fbo_bf16_rne(dg0) | ((u32)fbo_bf16_rne(dg1) << 16);
        duw[t] = (u32)fbo_bf16_rne(du0) | ((u32)fbo_bf16_rne(du1) << 16);
      }
      *(uint2 *)(orow2 + col) = make_uint2(dgw[0], dgw[1]);
      *(uint2 *)(orow2 + p.N + col) = make_uint2(duw[0], duw[1]);
    }
  }
#elif FB_SWIGLU == 1
  /* H = [g | u] is rounded to BF16 (what the backward reads; written to p.aux when given), then
     A = bf16(silu(g) * u): g in acc's first NCOL/2 columns, u in the same column of the second half (i + NCOL/4).
     Each step runs over the whole row half first (independent chains), the swaps and stores after. */
#pragma unroll
  for (int jb = 0; jb < NCOL / 16; ++jb)
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      const int i = 4 * jb + 2 * h + x;
      acc[i] = fbg_bf16r(acc[i] * so), acc[i + NCOL / 4] = fbg_bf16r(acc[i + NCOL / 4] * so);
    }
  if (p.aux) {
    unsigned short *hg = (unsigned short *)p.aux + r * p.N + cb, *hu = hg + p.N / 2;
#pragma unroll
    for (int jb = 0; jb < NCOL / 16; jb += 2) {
      const int i0 = 4 * jb + 2 * h, i1 = i0 + 4;
      fbg_st_pairs(hg, jb, q, fbg_pack_bf16(acc[i0], acc[i0 + 1]), fbg_pack_bf16(acc[i1], acc[i1 + 1]), live);
      fbg_st_pairs(hu, jb, q, fbg_pack_bf16(acc[i0 + NCOL / 4], acc[i0 + 1 + NCOL / 4]),
                   fbg_pack_bf16(acc[i1 + NCOL / 4], acc[i1 + 1 + NCOL / 4]), live);
    }
  }
#pragma unroll
  for (int jb = 0; jb < NCOL / 16; ++jb)
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      const int i = 4 * jb + 2 * h + x;
#if FB_EPI_CHEAP
      acc[i] = acc[i] * acc[i + NCOL / 4];
#else
      acc[i] = fbm_siluf(acc[i]) * acc[i + NCOL / 4];
#endif
    }
  unsigned short *arow16 = (unsigned short *)p.out + r * (p.N / 2) + cb;
#pragma unroll
  for (int jb = 0; jb < NCOL / 16; jb += 2) {
    const int i0 = 4 * jb + 2 * h, i1 = i0 + 4;
    fbg_st_pairs(arow16, jb, q, fbg_pack_bf16(acc[i0], acc[i0 + 1]), fbg_pack_bf16(acc[i1], acc[i1 + 1]), live);
  }
#else
#if FB_MODE == 0
  const long long orow = r * p.N;
#else
  const long long orow = ((long long)e * p.M + r) * p.N;
#endif
#if FB_OUT_BF16
#pragma unroll
  for (int jb = 0; jb < NCOL / 8; jb += 2)
    fbg_st_pairs((unsigned short *)p.out + orow + cb, jb, q, fbg_pack_bf16(acc[4 * jb + 2 * h] * so, acc[4 * jb + 2 * h + 1] * so),
                 fbg_pack_bf16(acc[4 * jb + 4 + 2 * h] * so, acc[4 * jb + 4 + 2 * h + 1] * so), live);
#else
  if (!live) return;
#pragma unroll
  for (int jb = 0; jb < NCOL / 8; ++jb) {
    const long long o = orow + cb + 8 * jb + 2 * q;
    *(float2 *)((float *)p.out + o) = make_float2(acc[4 * jb + 2 * h] * so, acc[4 * jb + 2 * h + 1] * so);
  }
#endif
#endif
}
#endif
