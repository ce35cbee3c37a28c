/* quant_nvfp4.cuh — NVFP4 quantization along rows (blocks of 16), exactly as fb_nvfp4_quantize.
 * Parameters (from the generator): FB_KERNEL, FB_THREADS, FB_ROWS (rows per CTA), FB_OUTER (0 tensor,
 * 1 token, 2 group), FB_FOUR_OVER_SIX, FB_TWO_D, FB_SR, FB_IN_F32.
 * Reads p.in (rows x cols), p.amax (tensor: [0]; group: [g]; unused for token), p.group_offsets (group).
 * Writes p.out (codes, rows*cols/2 bytes), p.scales (E4M3, rows*cols/16), p.s_dec (token: [row];
 * tensor/group: [g], by the CTA that holds the group's first row).
 * Layout: a warp per row (token outer: pass 1 the row amax, pass 2 the blocks, re-read from cache); a
 * lane per block of 16. 2D: a lane per 16x16 tile column-block, tiles aligned to each group's start.
 * FB_STAGE (tune value stage; 0 when the generator leaves it out): KiB of shared memory per warp that keep the first
 * FB_STAGE * 32 blocks of the row from pass 1 for pass 2 (the per-token 4/6 BF16 RN path), so that pass 2 reads them
 * from shared memory instead of again through L1/L2 (ncu at S1: 52% more L2 reads than the input, 13% of it read twice
 * from DRAM, pass 2's loads the largest stall).
 * sm_100a / sm_103a (fb_cvt.h FBF_E2M1_HW): the RN paths (nv_quant_block_rn, nv46_block) take their E2M1 codes from
 * cvt.rn.satfinite.e2m1x2.f32 of |x| * enc, the sign bits set in software; with 4/6 the two candidates' errors are
 * computed as before and only the winner is converted. SR, 2D and blocks with a NaN keep the software forms, and every
 * other arch keeps them all, as before. */
#include "fb_formats.h"
#include "fb_cvt.h"
#include "fb_kparams.h"
#include "fb_philox.h"

#ifndef FB_STAGE
#define FB_STAGE 0
#endif

#if FB_IN_F32
#define FB_VEC 4
#else
#define FB_VEC 8
#endif

/* 16 consecutive inputs starting at element i (16-aligned) as floats. */
static __device__ __forceinline__ void load16(const fb_kp_mem &p, long long i, float v[16]) {
#if FB_IN_F32
  const float4 *s = reinterpret_cast<const float4 *>(reinterpret_cast<const float *>(p.in) + i);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    float4 t = s[k];
    v[4 * k] = t.x, v[4 * k + 1] = t.y, v[4 * k + 2] = t.z, v[4 * k + 3] = t.w;
  }
#else
  const uint4 *s = reinterpret_cast<const uint4 *>(reinterpret_cast<const unsigned short *>(p.in) + i);
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    uint4 t = s[k];
    unsigned w[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[8 * k + 2 * j] = __uint_as_float(w[j] << 16);
      v[8 * k + 2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
    }
  }
#endif
}

/* The row loop's prefetch: a block's 16 inputs as loaded (BF16: two uint4, half the registers of the floats). */
struct nv_raw {
#if FB_IN_F32
  float4 q[4];
#else
  uint4 q[2];
#endif
};
static __device__ __forceinline__ void load16_raw(const fb_kp_mem &p, long long i, nv_raw &r) {
#if FB_IN_F32
  const float4 *s = reinterpret_cast<const float4 *>(reinterpret_cast<const float *>(p.in) + i);
#pragma unroll
  for (int k = 0; k < 4; ++k) r.q[k] = s[k];
#else
  const uint4 *s = reinterpret_cast<const uint4 *>(reinterpret_cast<const unsigned short *>(p.in) + i);
  r.q[0] = s[0], r.q[1] = s[1];
#endif
}
/* load16's floats from a raw block */
static __device__ __forceinline__ void unpack16(const nv_raw &r, float v[16]) {
#if FB_IN_F32
#pragma unroll
  for (int k = 0; k < 4; ++k) v[4 * k] = r.q[k].x, v[4 * k + 1] = r.q[k].y, v[4 * k + 2] = r.q[k].z, v[4 * k + 3] = r.q[k].w;
#else
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    unsigned w[4] = {r.q[k].x, r.q[k].y, r.q[k].z, r.q[k].w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[8 * k + 2 * j] = __uint_as_float(w[j] << 16);
      v[8 * k + 2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
    }
  }
#endif
}

/* Quantize the block at element i0 (values v, magnitudes' max ab): codes and scale. The candidate and code
 * functions are fb_formats.h's, which tests/test_formats.c runs on the host against the reference. */
static __device__ __forceinline__ void nv_quant_block(const fb_kp_mem &p, long long i0, const float v[16], float ab,
                                                      float k, float s_dec) {
  unsigned r[4] = {0u, 0u, 0u, 0u};
#if FB_SR
  {
    unsigned long long c = (unsigned long long)i0 >> 4;
    fb_u32 ctr[4] = {p.step, (fb_u32)c, (fb_u32)(c >> 32), 0u}, key[2] = {p.seed, p.stream};
    fb_philox4x32_10(ctr, key, r);
  }
#endif
  float av[16];
#pragma unroll
  for (int j = 0; j < 16; ++j) av[j] = fabsf(v[j]);
  float base = ab * k;
  unsigned sfc = fbf_e4m3_rn(fminf(base, 448.0f)), pk[2], sg[2];
#if FB_FOUR_OVER_SIX
  float e6 = fbf_nvfp4_cand(av, sfc, s_dec, FB_SR, r, pk);
  unsigned p4[2], sf4 = fbf_e4m3_rn(fminf(1.5f * base, 448.0f));
  float e4 = fbf_nvfp4_cand(av, sf4, s_dec, FB_SR, r, p4);
  if (e4 < e6) sfc = sf4, pk[0] = p4[0], pk[1] = p4[1];
#else
  fbf_nvfp4_codes(av, sfc, s_dec, FB_SR, r, pk);
#endif
  fbf_nvfp4_signs(v, sg);
  uint2 packed;
  packed.x = pk[0] | (sfc ? sg[0] : 0u);
  packed.y = pk[1] | (sfc ? sg[1] : 0u);
  reinterpret_cast<uint2 *>(p.out)[i0 >> 4] = packed;
  reinterpret_cast<unsigned char *>(p.scales)[i0 >> 4] = (unsigned char)sfc;
}


#if !FB_SR && !FB_TWO_D
/* The general path above, out of line: the RN fast path below hands it a block that holds a NaN (rare). It takes
 * the three pointers it uses by value and loads the block again, so that neither the caller's values nor its
 * parameter block go through local memory. */
static __device__ __noinline__ void nv_quant_block_nan(fb_dptr in, fb_dptr out, fb_dptr scales, long long i0, float k,
                                                       float s_dec) {
  fb_kp_mem p = {};
  p.in = in, p.out = out, p.scales = scales;
  float v[16], ab = 0.0f;
  load16(p, i0, v);
  for (int j = 0; j < 16; ++j) ab = fmaxf(ab, fabsf(v[j]));
  nv_quant_block(p, i0, v, ab, k, s_dec);
}

/* RN, blocks of the row layout: the same codes and scales as nv_quant_block, with fb_formats.h's select-free E2M1
 * rounding (fbf_e2m1_rn_grid); with 4/6 both candidates give only grid values and errors, and the codes are packed
 * once, for the winner. abn is the block's amax by max.NaN: NaN exactly when the block holds a NaN, which goes to
 * the general path (a NaN input's sign is dropped); otherwise abn is the reference's fmaxf amax. */
static __device__ __forceinline__ void nv_quant_block_rn(const fb_kp_mem &p, long long i0, const float v[16], float abn,
                                                         float k, float s_dec) {
  if (abn != abn) {
    nv_quant_block_nan(p.in, p.out, p.scales, i0, k, s_dec);
    return;
  }
  float base = abn * k;
  unsigned sfc = fbf_e4m3_rn(fminf(base, 448.0f));
  uint2 packed;
#if FBF_E2M1_HW
  /* Blackwell: the codes of |x| * enc by the E2M1 conversion (the same RN-even grid point as fbf_e2m1_rn_grid's, the
   * inputs non-negative and never NaN here), the signs in software; with 4/6 the errors alone, then the winner's codes */
  float av[16];
#pragma unroll
  for (int j = 0; j < 16; ++j) av[j] = fabsf(v[j]);
#if FB_FOUR_OVER_SIX
  const unsigned sf4 = fbf_e4m3_rn(fminf(1.5f * base, 448.0f));
  const float sf6v = fbf_e4m3_dec_cvt(sfc), sf4v = fbf_e4m3_dec_cvt(sf4);
  const bool four = fbf_nvfp4_err_rn(v, sf4v, s_dec) < fbf_nvfp4_err_rn(v, sf6v, s_dec);
  sfc = four ? sf4 : sfc;
  const float enc = fbf_nvfp4_enc(four ? sf4v : sf6v, s_dec);
#else
  const float enc = fbf_nvfp4_enc(fbf_e4m3_dec_cvt(sfc), s_dec);
#endif
  packed.x = sfc ? fbf_e2m1x8_hw(av, enc) + fbf_nvfp4_signs8(v) : 0u;
  packed.y = sfc ? fbf_e2m1x8_hw(av + 8, enc) + fbf_nvfp4_signs8(v + 8) : 0u;
#elif FB_FOUR_OVER_SIX
  /* each candidate's codes packed as they are made (two words kept, not sixteen grid values: fewer registers) */
  unsigned sf4 = fbf_e4m3_rn(fminf(1.5f * base, 448.0f)), p6[2], p4[2];
  float e6 = fbf_nvfp4_cand_rn_codes(v, fbf_e4m3_dec_cvt(sfc), s_dec, p6);
  float e4 = fbf_nvfp4_cand_rn_codes(v, fbf_e4m3_dec_cvt(sf4), s_dec, p4);
  bool four = e4 < e6;
  sfc = four ? sf4 : sfc;
  packed.x = sfc ? (four ? p4[0] : p6[0]) + fbf_nvfp4_signs8(v) : 0u;
  packed.y = sfc ? (four ? p4[1] : p6[1]) + fbf_nvfp4_signs8(v + 8) : 0u;
#else
  float g[16];
  fbf_nvfp4_grid_rn(v, fbf_e4m3_dec_cvt(sfc), s_dec, g);
  packed.x = sfc ? fbf_e2m1x8_pack(g, v) : 0u;
  packed.y = sfc ? fbf_e2m1x8_pack(g + 8, v + 8) : 0u;
#endif
  reinterpret_cast<uint2 *>(p.out)[i0 >> 4] = packed;
  reinterpret_cast<unsigned char *>(p.scales)[i0 >> 4] = (unsigned char)sfc;
}
#endif

#if FB_FOUR_OVER_SIX && !FB_SR && !FB_TWO_D && !FB_IN_F32
#define NV46_FAST 1
/* ---- Four Over Six, RN, BF16 input: the fast block path ----
 * The same codes, scales and candidate errors as nv_quant_block_rn, for blocks whose checks below pass (the others go
 * to it): both scale codes normal (sf6 >= 8, so sf4 >= 8 too), and fl(abn * enc6) < 7, so that every a = |x| * enc
 * of either candidate (enc4 <= enc6) is below 7, where fbf_e2m1_rn_grid's min(., 6) never acts. Each candidate then
 * works in the domain scaled by 2^-6 (exact: a normal enc * 2^-6 for the row's s_dec in [2^-100, 2^100], and a value
 * below 2^-126 there rounds to 0 on both sides): the magic-add grid g' = g * 2^-6 is what the E4M3 pair conversion
 * turns into code << 2 (0.5 * 2^-6 is E4M3's subnormal 4 * 2^-9, the normals follow), two elements an instruction;
 * the error is (g' * sf * 64) * s_dec - |x|, g' * sf * 64 = g * sf exactly as the reference's first product.
 * enc without a division: sf = (1 + m/8) 2^(e-7) (normal code e, m), so fl(sf * s_dec) = 2^(e-7) fl((1 + m/8) s_dec)
 * and enc * 2^-6 = R[m] * 2^(1-e) with R[m] = fl(1 / fl((1 + m/8) s_dec)), eight values a row (shared memory). */
/* prmt.b32 with sign replication (selector bit 3 set: the byte's msb over all 8 bits) */
static __device__ __forceinline__ unsigned nv_prmt_rep(unsigned a, unsigned b, unsigned sel) {
#if defined(__CUDA_ARCH__)
  unsigned r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
#else
  unsigned long long v = (unsigned long long)b << 32 | a;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) {
    unsigned n = (sel >> (4 * i)) & 15u, by = (unsigned)(v >> (8 * (n & 7u))) & 255u;
    if (n & 8u) by = (by & 0x80u) ? 255u : 0u;
    r |= by << (8 * i);
  }
  return r;
#endif
}
/* max.{NaN.}xorsign.abs.bf16x2: per half, the larger magnitude (its sign the xor of the two signs; the callers use
 * magnitudes only). Without .NaN a NaN half gives the other operand's half (both NaN: NaN), with .NaN any NaN gives
 * NaN. On the host the same rule on the 16-bit halves (a magnitude's order is its bits' order; NaN 0x7FFF). */
template <int NANP> static __device__ __forceinline__ unsigned nv_bmax2(unsigned a, unsigned b) {
#if defined(__CUDA_ARCH__)
  unsigned r;
  if (NANP) asm("max.NaN.xorsign.abs.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  else asm("max.xorsign.abs.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
#else
  unsigned r = 0;
  for (int h = 0; h < 2; ++h) {
    unsigned x = (a >> (16 * h)) & 0xFFFFu, y = (b >> (16 * h)) & 0xFFFFu, mx = x & 0x7FFFu, my = y & 0x7FFFu, m;
    bool nx = mx > 0x7F80u, ny = my > 0x7F80u;
    if (nx && ny) m = 0x7FFFu;
    else if (nx || ny) m = NANP ? 0x7FFFu : (nx ? my : mx);
    else m = mx > my ? mx : my;
    r |= (m | (m == 0x7FFFu && (nx || ny) ? 0u : ((x ^ y) & 0x8000u))) << (16 * h);
  }
  return r;
#endif
}
/* the larger magnitude of a bf16x2 word's two halves, as a float (max.NaN: NaN if either is) */
static __device__ __forceinline__ float nv_bmax_f(unsigned m) {
  return fbf_absmax_nan(fabsf(__uint_as_float(m << 16)), __uint_as_float(m & 0xFFFF0000u));
}
/* One candidate: its squared error, and its codes as E4M3 bytes (code << 2): q[0] elements 0 2 4 6, q[1] 1 3 5 7,
 * q[2] and q[3] the same for 8..15. encs = enc * 2^-6, sf64 = sf * 64. */
static __device__ __forceinline__ float nv46_cand(const float v[16], float encs, float sf64, float s_dec, unsigned q[4]) {
  float g[16], err = 0.0f;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const float av = fabsf(v[j]), a = av * encs;
    const float pw = __uint_as_float(__float_as_uint(fmaxf(a, 0.015625f)) & 0x7F800000u); /* 2^-6 .. 2^-4 */
    g[j] = fmaf(pw, -6291456.0f, fmaf(pw, 6291456.0f, a));
    const float d = (g[j] * sf64) * s_dec - av;
    err = fmaf(d, d, err);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float *x = g + 8 * h;
    q[2 * h] = fbf_e4m3x2_rn(x[0], x[2]) | fbf_e4m3x2_rn(x[4], x[6]) << 16;
    q[2 * h + 1] = fbf_e4m3x2_rn(x[1], x[3]) | fbf_e4m3x2_rn(x[5], x[7]) << 16;
  }
  return err;
}
#if FBF_E2M1_HW
/* nv46_cand's squared error alone (the same operations in the same order): the codes come from the E2M1 conversion */
static __device__ __forceinline__ float nv46_err(const float v[16], float encs, float sf64, float s_dec) {
  float err = 0.0f;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const float av = fabsf(v[j]), a = av * encs;
    const float pw = __uint_as_float(__float_as_uint(fmaxf(a, 0.015625f)) & 0x7F800000u);
    const float g = fmaf(pw, -6291456.0f, fmaf(pw, 6291456.0f, a));
    const float d = (g * sf64) * s_dec - av;
    err = fmaf(d, d, err);
  }
  return err;
}
#endif
/* Eight nibbles from the even (A) and odd (B) elements' code bytes and the signs of the four BF16 words w0..w3 (elements
 * 0..7): the sign bytes replicated (X = s0 s2 s1 s3, Y = s4 s6 s5 s7), gathered into even and odd, put on bit 5 of each
 * code byte, then A >> 2 leaves code | sign << 3 in the low nibble and B << 2 the same in the high one. */
static __device__ __forceinline__ unsigned nv46_pack(unsigned A, unsigned B, unsigned w0, unsigned w1, unsigned w2, unsigned w3) {
  const unsigned X = nv_prmt_rep(w0, w1, 0xFBD9u), Y = nv_prmt_rep(w2, w3, 0xFBD9u);
  A |= fbf_prmt(X, Y, 0x5410u) & 0x20202020u;
  B |= fbf_prmt(X, Y, 0x7632u) & 0x20202020u;
  return (A >> 2) + (B << 2);
}
static __device__ __forceinline__ void nv46_block(const fb_kp_mem &p, long long i0, const nv_raw &r, const float v[16],
                                                  float abn, float k, float s_dec, float R, bool live) {
  const float base = abn * k;
  const unsigned sf2 = fbf_e4m3x2_rn(fminf(base, 448.0f), fminf(1.5f * base, 448.0f)), sf6 = sf2 & 255u, sf4 = sf2 >> 8;
  /* R[m] from lanes 0..7 (every lane of the warp is here: the caller's loop is warp-uniform) */
  const float r6 = __shfl_sync(0xFFFFFFFFu, R, (int)(sf6 & 7u)), r4 = __shfl_sync(0xFFFFFFFFu, R, (int)(sf4 & 7u));
  if (!live) return;
  const float enc6s = r6 * __uint_as_float((128u - (sf6 >> 3)) << 23);
  if (!(sf6 >= 8u && abn * enc6s < 0.109375f)) { /* 7 * 2^-6; false for NaN */
    nv_quant_block_rn(p, i0, v, abn, k, s_dec);
    return;
  }
  const float enc4s = r4 * __uint_as_float((128u - (sf4 >> 3)) << 23);
#if FBF_E2M1_HW
  /* Blackwell: both errors, then the winner's codes by the E2M1 conversion of |x| * enc (enc = encs * 64 exactly) */
  const bool four = nv46_err(v, enc4s, __uint_as_float((sf4 << 20) + (126u << 23)), s_dec) <
                    nv46_err(v, enc6s, __uint_as_float((sf6 << 20) + (126u << 23)), s_dec);
  const float enc = (four ? enc4s : enc6s) * 64.0f;
  float av[16];
#pragma unroll
  for (int j = 0; j < 16; ++j) av[j] = fabsf(v[j]);
  uint2 packed;
  packed.x = fbf_e2m1x8_hw(av, enc) + fbf_nvfp4_signs8(v);
  packed.y = fbf_e2m1x8_hw(av + 8, enc) + fbf_nvfp4_signs8(v + 8);
  (void)r;
#else
  unsigned q6[4], q4[4];
  const float e6 = nv46_cand(v, enc6s, __uint_as_float((sf6 << 20) + (126u << 23)), s_dec, q6);
  const float e4 = nv46_cand(v, enc4s, __uint_as_float((sf4 << 20) + (126u << 23)), s_dec, q4);
  const bool four = e4 < e6;
  uint2 packed;
  packed.x = nv46_pack(four ? q4[0] : q6[0], four ? q4[1] : q6[1], r.q[0].x, r.q[0].y, r.q[0].z, r.q[0].w);
  packed.y = nv46_pack(four ? q4[2] : q6[2], four ? q4[3] : q6[3], r.q[1].x, r.q[1].y, r.q[1].z, r.q[1].w);
#endif
  reinterpret_cast<uint2 *>(p.out)[i0 >> 4] = packed;
  reinterpret_cast<unsigned char *>(p.scales)[i0 >> 4] = (unsigned char)(four ? sf4 : sf6);
}
#endif

static __device__ __forceinline__ long long group_of(const fb_kp_mem &p, long long row) {
#if FB_OUTER == 2
  const long long *off = reinterpret_cast<const long long *>(p.group_offsets);
  long long lo = 0, hi = (long long)p.ngroups - 1;
  while (lo < hi) { /* the last group whose offset <= row */
    long long mid = (lo + hi + 1) >> 1;
    if (off[mid] <= row) lo = mid;
    else hi = mid - 1;
  }
  return lo;
#else
  (void)p, (void)row;
  return 0;
#endif
}

extern "C" __global__ void __launch_bounds__(FB_THREADS) FB_KERNEL(const fb_kp_mem p) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long nb = p.cols / 16;
#if FB_OUTER != 1
  /* tensor / group outer scales: S_dec from the amax pass, written once per group */
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    const float *amax = reinterpret_cast<const float *>(p.amax);
    for (unsigned g = 0; g < (FB_OUTER == 2 ? p.ngroups : 1u); ++g)
      reinterpret_cast<float *>(p.s_dec)[g] = 1.0f / fbf_nvfp4_s_enc(amax[g], FB_FOUR_OVER_SIX);
  }
#endif
#if FB_TWO_D
  /* a thread per (16-row tile, column block); tiles start at each group's first row */
  const long long *off = reinterpret_cast<const long long *>(p.group_offsets);
  long long tiles_total = 0;
  unsigned ng = FB_OUTER == 2 ? p.ngroups : 1u;
  for (unsigned g = 0; g < ng; ++g) {
    long long lo = FB_OUTER == 2 ? off[g] : 0, hi = FB_OUTER == 2 ? off[g + 1] : p.rows;
    tiles_total += (hi - lo + 15) / 16;
  }
  for (long long w = (long long)blockIdx.x * FB_THREADS + threadIdx.x; w < tiles_total * nb;
       w += (long long)gridDim.x * FB_THREADS) {
    long long tile = w / nb, b = w % nb, t0 = 0, t1 = 0, g = 0;
    for (unsigned gg = 0; gg < ng; ++gg) { /* find the tile's group */
      long long lo = FB_OUTER == 2 ? off[gg] : 0, hi = FB_OUTER == 2 ? off[gg + 1] : p.rows, n = (hi - lo + 15) / 16;
      if (tile < n) { t0 = lo + tile * 16, t1 = t0 + 16 < hi ? t0 + 16 : hi, g = gg; break; }
      tile -= n;
    }
    float s_enc = fbf_nvfp4_s_enc(reinterpret_cast<const float *>(p.amax)[g], FB_FOUR_OVER_SIX);
    float s_dec = 1.0f / s_enc, k = s_enc * (1.0f / 6.0f), ab = 0.0f, v[16];
    for (long long row = t0; row < t1; ++row) {
      load16(p, row * p.cols + b * 16, v);
#pragma unroll
      for (int j = 0; j < 16; ++j) ab = fmaxf(ab, fabsf(v[j]));
    }
    for (long long row = t0; row < t1; ++row) {
      load16(p, row * p.cols + b * 16, v);
      nv_quant_block(p, row * p.cols + b * 16, v, ab, k, s_dec);
    }
  }
#else
#if NV46_FAST && FB_OUTER == 1 && FB_STAGE
  /* the warp's staged blocks: [0][b] their first 16 bytes, [1][b] their last (consecutive lanes, consecutive 16 bytes:
   * no bank conflicts); each lane writes and reads only its own blocks (b = lane mod 32), so no barrier is needed */
  __shared__ uint4 nv_st[FB_THREADS / 32][2][FB_STAGE * 32];
  uint4 *const st0 = &nv_st[warp][0][lane], *const st1 = &nv_st[warp][1][lane]; /* block b at [b - lane] */
#endif
  for (int rr = warp; rr < FB_ROWS; rr += FB_THREADS / 32) {
    long long row = (long long)blockIdx.x * FB_ROWS + rr;
    if (row >= p.rows) break;
    float v[16], s_enc;
#if FB_OUTER == 1
    float A = 0.0f;
#if NV46_FAST
    { /* the row's magnitudes, NaN ignored, by bf16x2 abs-max (half an instruction an element); the accumulator starts
       * at +0 and so never becomes NaN */
      unsigned m = 0u;
#pragma unroll 4
      for (long long b = lane; b < nb; b += 32) {
        nv_raw r;
        load16_raw(p, row * p.cols + b * 16, r);
#if FB_STAGE
        if (b < FB_STAGE * 32) st0[b - lane] = r.q[0], st1[b - lane] = r.q[1];
#endif
        m = nv_bmax2<0>(m, nv_bmax2<0>(nv_bmax2<0>(r.q[0].x, r.q[0].y), nv_bmax2<0>(r.q[0].z, r.q[0].w)));
        m = nv_bmax2<0>(m, nv_bmax2<0>(nv_bmax2<0>(r.q[1].x, r.q[1].y), nv_bmax2<0>(r.q[1].z, r.q[1].w)));
      }
      A = fmaxf(fabsf(__uint_as_float(m << 16)), fabsf(__uint_as_float(m & 0xFFFF0000u)));
    }
#else
#pragma unroll 4
    for (long long b = lane; b < nb; b += 32) {
      load16(p, row * p.cols + b * 16, v);
#pragma unroll
      for (int j = 0; j < 16; ++j) A = fmaxf(A, fabsf(v[j]));
    }
#endif
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) A = fmaxf(A, __shfl_xor_sync(0xFFFFFFFFu, A, o));
    s_enc = fbf_nvfp4_s_enc(A, FB_FOUR_OVER_SIX);
    if (lane == 0) reinterpret_cast<float *>(p.s_dec)[row] = 1.0f / s_enc;
#else
    s_enc = fbf_nvfp4_s_enc(reinterpret_cast<const float *>(p.amax)[group_of(p, row)], FB_FOUR_OVER_SIX);
#endif
    float s_dec = 1.0f / s_enc, k = s_enc * (1.0f / 6.0f);
#if NV46_FAST
    if (s_dec >= 7.8886090522101181e-31f && s_dec <= 1.2676506002282294e30f) { /* 2^-100 .. 2^100: nv46_block's range */
      /* lane m < 8 holds R[m] = fl(1 / fl((1 + m/8) s_dec)); a warp-uniform loop (the table is read by shuffles), no
       * prefetch: the occupancy hides the latency of these reads, which pass 1 has just brought into the cache */
      const float R = 1.0f / ((1.0f + 0.125f * (float)(lane & 7)) * s_dec);
      for (long long bw = 0; bw < nb; bw += 32) {
        const long long b = bw + lane;
        const bool live = b < nb;
        nv_raw cur;
#if FB_STAGE
        if (bw < FB_STAGE * 32) { /* warp-uniform: the staged count is a multiple of 32 */
          if (live) cur.q[0] = st0[bw], cur.q[1] = st1[bw];
          else cur.q[0] = cur.q[1] = make_uint4(0u, 0u, 0u, 0u);
        } else
#endif
        if (live) load16_raw(p, row * p.cols + b * 16, cur);
        else cur.q[0] = cur.q[1] = make_uint4(0u, 0u, 0u, 0u);
        unpack16(cur, v);
        const float abn = nv_bmax_f(nv_bmax2<1>(nv_bmax2<1>(nv_bmax2<1>(cur.q[0].x, cur.q[0].y), nv_bmax2<1>(cur.q[0].z, cur.q[0].w)),
                                                nv_bmax2<1>(nv_bmax2<1>(cur.q[1].x, cur.q[1].y), nv_bmax2<1>(cur.q[1].z, cur.q[1].w))));
        nv46_block(p, row * p.cols + b * 16, cur, v, abn, k, s_dec, R, live);
      }
      continue;
    }
#endif
    /* software pipeline: the next block's loads are in flight while this one is quantized */
    nv_raw nxt;
    if (lane < nb) load16_raw(p, row * p.cols + lane * 16, nxt);
    for (long long b = lane; b < nb; b += 32) {
      unpack16(nxt, v);
      if (b + 32 < nb) load16_raw(p, row * p.cols + (b + 32) * 16, nxt);
#if !FB_SR
      float abn = 0.0f;
#pragma unroll
      for (int j = 0; j < 16; ++j) abn = fbf_absmax_nan(abn, v[j]);
      nv_quant_block_rn(p, row * p.cols + b * 16, v, abn, k, s_dec);
#else
      float ab = 0.0f;
#pragma unroll
      for (int j = 0; j < 16; ++j) ab = fmaxf(ab, fabsf(v[j]));
      nv_quant_block(p, row * p.cols + b * 16, v, ab, k, s_dec);
#endif
    }
  }
#endif
}
