/* fb_formats.h — element encoders and decoders for generated kernels: the fast forms of the rules of
 * docs/numerics.md (runtime/numerics.c is the reference: straightforward and slow). Shared by NVRTC device code
 * and host C, so that tests/test_formats.c checks every function here against the reference on the CPU,
 * and the GPU tests check the kernels built from them.
 *
 * Entry points (all take and return plain floats / unsigned codes):
 *   fbf_e2m1_rn(x), fbf_e2m1_sr(x, r)      4-bit code, sign in bit 3
 *   fbf_e4m3_rn(x), fbf_e4m3_sr(x, r)      8-bit code (satfinite; NaN -> 0x7F)
 *   fbf_e8m0_up(x)                         the rounded-up E8M0 rule of MXFP8
 *   fbf_e2m1_dec(c), fbf_e4m3_dec(c), fbf_e8m0_dec(c), fbf_pow2(e), fbf_s2f6_dec16(w, sc, y)
 *   fbf_nvfp4_s_enc(amax, four_over_six), fbf_s2f6_exp(amax), fbf_s2f6_code(t, inv)
 * On sm_89 and later, E4M3 RN uses the cvt.rn.satfinite.e4m3x2.f32 instruction (the CUDA headers'
 * host conversion, cross-checked against the reference in tests/test_xcheck_cuda.cpp, emulates it);
 * elsewhere the software path below. */
#ifndef FB_FORMATS_H
#define FB_FORMATS_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FBF_FN __host__ __device__ static __forceinline__
#define FBF_DEVICE 1
#else
#define FBF_FN static inline
#include <math.h>
#include <string.h>
#endif

#define FBF_FLT_MAX 3.40282346638528859812e+38f

FBF_FN unsigned fbf_f2u(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  unsigned u;
  memcpy(&u, &f, 4);
  return u;
#endif
}
FBF_FN float fbf_u2f(unsigned u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, 4);
  return f;
#endif
}

/* 2^e for e in [-149, 127], exact. */
FBF_FN float fbf_pow2(int e) {
  return e >= -126 ? fbf_u2f((unsigned)(e + 127) << 23) : fbf_u2f(1u << (e + 149));
}

/* ---- E2M1 ---- */
FBF_FN unsigned fbf_e2m1_rn(float x) {
  if (x != x) return 7u;
  unsigned s = (fbf_f2u(x) >> 28) & 8u;
  float a = fabsf(x);
  /* the RN thresholds of docs/numerics.md: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4 */
  unsigned c = (unsigned)(a > 0.25f) + (unsigned)(a >= 0.75f) + (unsigned)(a > 1.25f) + (unsigned)(a >= 1.75f) +
               (unsigned)(a > 2.5f) + (unsigned)(a >= 3.5f) + (unsigned)(a > 5.0f);
  return s | c;
}

/* SR with 8 random bits r: step = the binade's spacing (0.5 below 2, then 1, then 2). */
FBF_FN unsigned fbf_e2m1_sr(float x, unsigned r) {
  if (x != x) return 7u;
  unsigned s = (fbf_f2u(x) >> 28) & 8u;
  float a = fabsf(x);
  if (a >= 6.0f) return s | 7u;
  float inv = a < 2.0f ? 2.0f : (a < 4.0f ? 1.0f : 0.5f), step = a < 2.0f ? 0.5f : (a < 4.0f ? 1.0f : 2.0f);
  float m = a * inv, fl = floorf(m);
  unsigned t = (unsigned)((m - fl) * 256.0f);
  float q = fminf((fl + (float)(t + r >= 256u)) * step, 6.0f);
  return s | fbf_e2m1_rn(q);
}

/* Branch-free: twice the E2M1 magnitudes are the integers 0 1 2 3 4 6 8 12, packed a nibble each (a select
 * chain compiled to a divergent branch per element in the requantizer's load loop). */
FBF_FN float fbf_e2m1_dec(unsigned c) {
  float v = (float)((0xC8643210u >> (4u * (c & 7u))) & 15u) * 0.5f;
  return fbf_u2f(fbf_f2u(v) | ((c & 8u) << 28));
}

/* ---- E4M3 ---- */
/* Software RN, satfinite. a = |x| finite and <= 448 in the core path. */
FBF_FN unsigned fbf_e4m3_rn_sw(float x) {
  if (x != x) return 0x7Fu;
  unsigned s = (fbf_f2u(x) >> 24) & 0x80u;
  float a = fabsf(x);
  if (a > 448.0f) return s | 0x7Eu;
  if (a < 0.015625f) return s | (unsigned)rintf(a * 512.0f); /* subnormals: spacing 2^-9; 2^-6 -> code 8 */
  int e = (int)(fbf_f2u(a) >> 23) - 127;                     /* -6 .. 8 */
  unsigned m = (unsigned)rintf(a * fbf_pow2(3 - e));         /* 8 .. 16, exact scaling */
  return s | (((unsigned)(e + 7) << 3) + m - 8u);
}

/* The E4M3 instruction, cvt.rn.satfinite.e4m3x2.f32, on every input class from sm_89 on (the H200 has agreed with the
 * host reference on every class the quantizer tests give it). A kernel built for the emulator as sm_100a / sm_103a
 * (tests/emu/fb_emu.h: FB_EMU, FB_EMU_SM 100 / 103) calls the instruction's functional model instead, written from the
 * PTX text (tests/emu/fb_cvt_model.h; tests/test_cvt_model.cpp holds it against fb_e4m3_encode_rn on every class), as
 * fb_cvt.h does for E2M1: so an emulated Blackwell kernel computes with the modelled instruction. */
#if defined(FB_EMU) && defined(FB_EMU_SM) && !defined(__CUDA_ARCH__) && (FB_EMU_SM == 100 || FB_EMU_SM == 103)
#define FBF_E4M3_MODEL 1
#endif
FBF_FN unsigned fbf_e4m3_rn(float x) {
#if defined(FBF_E4M3_MODEL)
  return fbm_e4m3_rn_satfinite(x);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  unsigned short h;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(0.0f), "f"(x));
  return (unsigned)h & 0xFFu;
#else
  return fbf_e4m3_rn_sw(x);
#endif
}

FBF_FN unsigned fbf_e4m3_sr(float x, unsigned r) {
  if (x != x) return 0x7Fu;
  unsigned s = (fbf_f2u(x) >> 24) & 0x80u;
  float a = fabsf(x);
  if (a > 448.0f) return s | 0x7Eu;
  int e = (int)(fbf_f2u(a) >> 23) - 127;
  if (e < -6) e = -6;
  float m = a * fbf_pow2(3 - e), fl = floorf(m); /* m = |x| / step, exact */
  unsigned t = (unsigned)((m - fl) * 256.0f);
  float q = fminf((fl + (float)(t + r >= 256u)) * fbf_pow2(e - 3), 448.0f);
  return s | fbf_e4m3_rn_sw(q);
}

/* The same SR with integer arithmetic: in E4M3's normal range the 20 mantissa bits below its 3 are the
 * discarded fraction; their top 8 plus r carry into the kept bits exactly when docs/numerics.md's rule rounds
 * up, so add r at bit 12 and truncate. The carry may step into the next binade, as rounding up should; the
 * result is on the E4M3 grid (or above 448, which the satfinite conversion clamps as the rule does). */
FBF_FN unsigned fbf_e4m3_sr_fast(float x, unsigned r) {
  unsigned b = fbf_f2u(x), a = b & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7Fu;
  if (a < 0x3C800000u) return fbf_e4m3_sr(x, r); /* below 2^-6: the subnormal spacing */
  unsigned q = ((a & 0xFFFFF000u) + (r << 12)) & 0xFFF00000u;
  return ((b >> 24) & 0x80u) | (fbf_e4m3_rn(fbf_u2f(q)) & 0x7Fu);
}

/* Two E4M3 RN conversions in one instruction where there is one: low byte from lo, high byte from hi. */
FBF_FN unsigned fbf_e4m3x2_rn(float lo, float hi) {
#if defined(FBF_E4M3_MODEL)
  return fbm_cvt_rn_satfinite_e4m3x2_f32(hi, lo);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  unsigned short h;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(hi), "f"(lo));
  return (unsigned)h;
#else
  return fbf_e4m3_rn_sw(lo) | fbf_e4m3_rn_sw(hi) << 8;
#endif
}

/* The rare pair with a value below E4M3's normal range, out of line: the fast path stays small. */
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
__host__ __device__ static __noinline__
#else
static
#endif
unsigned fbf_e4m3x2_sr_slow(float x0, float x1, unsigned r0, unsigned r1) {
  return fbf_e4m3_sr(x0, r0) | fbf_e4m3_sr(x1, r1) << 8;
}

/* SR of a pair (fbf_e4m3_sr_fast's rule on the signed bits: NaN kept as it is, +-Inf stays Inf and the
 * satfinite conversion makes it +-448), converted by one x2 instruction; a value below 2^-6 takes the
 * general path. */
FBF_FN unsigned fbf_e4m3x2_sr(float x0, float x1, unsigned r0, unsigned r1) {
  unsigned b0 = fbf_f2u(x0), b1 = fbf_f2u(x1);
  unsigned a0 = b0 & 0x7FFFFFFFu, a1 = b1 & 0x7FFFFFFFu;
  if (a0 < 0x3C800000u || a1 < 0x3C800000u) return fbf_e4m3x2_sr_slow(x0, x1, r0, r1);
  unsigned q0 = a0 > 0x7F800000u ? b0 : ((b0 & 0xFFFFF000u) + (r0 << 12)) & 0xFFF00000u;
  unsigned q1 = a1 > 0x7F800000u ? b1 : ((b1 & 0xFFFFF000u) + (r1 << 12)) & 0xFFF00000u;
  return fbf_e4m3x2_rn(fbf_u2f(q0), fbf_u2f(q1));
}

/* ---- building blocks of the whole-block fast paths below ---- */
/* a * b rounded toward zero (mul.rz.f32); on the host the double product is exact, then rounded to float and
 * stepped back toward zero if that rounding went away from it. */
FBF_FN float fbf_mul_rz(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rz(a, b);
#else
  double d = (double)a * (double)b;
  float f = (float)d;
  if (fabs((double)f) > fabs(d)) f = nextafterf(f, 0.0f);
  return f;
#endif
}

/* The byte permute (prmt.b32): byte i of the result is byte ((s >> 4i) & 7) of the eight bytes b:a. Only
 * selectors below 8 (no sign replication). */
FBF_FN unsigned fbf_prmt(unsigned a, unsigned b, unsigned s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, s);
#else
  unsigned long long v = (unsigned long long)b << 32 | a;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8u * ((s >> (4 * i)) & 7u))) & 255u) << (8 * i);
  return r;
#endif
}

/* max(a, |x|) for a block amax that propagates NaN (a NaN a stays NaN, a NaN x makes it NaN; which NaN is left
 * open: every NaN amax gives the same E8M0 0xFF): one max.NaN instruction where there is one. */
FBF_FN float fbf_absmax_nan(float a, float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(fabsf(x)));
  return r;
#else
  float b = fabsf(x);
  return a != a ? a : (b != b || b > a ? b : a);
#endif
}

/* ---- E4M3 SR of a whole MXFP8 block without branches ----
 * fbf_e4m3_sr(x * inv, r) for every x of a block whose scale e (inv = 2^(127-e)) is at most FBF_SRZ_EMAX: finite
 * amax at most 448 * 2^29, so that the block never takes the NaN/Inf paths. z = x * 2^(7-e) = (x * inv) * 2^-120,
 * rounded toward zero, maps E4M3's grid onto fp32's lowest binades: its normals onto exponent fields 1..15 (the
 * same mantissa bits) and its subnormals (spacing 2^-9) onto fp32 denormals, where the spacing 2^-129 is bit 20 of
 * the integer as well. In both ranges bits 12..19 of z are then the 8 discarded bits of docs/numerics.md's rule
 * (truncated, so nothing carries up from below), and fbf_e4m3_sr_fast's add-and-mask works unchanged, zeros and
 * subnormal results included; the masked value times 2^120 is the SR result on E4M3's grid, which the satfinite
 * RN conversion encodes exactly (480 -> 448 as the rule's min). x * inv that is not exact (below 2^-126) encodes
 * as a signed zero on both paths. */
#define FBF_SRZ_EMAX 156u
FBF_FN float fbf_srz_scale(unsigned e) { return fbf_pow2(7 - (int)e); }
/* byte j of rw added at bits 12..19 of z (the 8 discarded bits where E4M3's grid is bit 20), then the mask: the SR'd
 * bits (mx_col.cuh's f16 tile uses it on E4M3 normals x * inv directly) */
FBF_FN unsigned fbf_sr_addmask(unsigned z, unsigned rw, unsigned j) {
  return (z + (fbf_prmt(rw, 0u, 0x4404u | (j << 4)) << 4)) & 0xFFF00000u;
}
FBF_FN float fbf_srz_one(float x, float s, unsigned rw, unsigned j) {
  return fbf_u2f(fbf_sr_addmask(fbf_f2u(fbf_mul_rz(x, s)), rw, j)) * 1.329227995784916e+36f; /* 2^120 */
}
/* The codes of four consecutive elements y = x * inv that are zero or E4M3 normals (|y| >= 2^-6, finite): the
 * add-and-mask on y itself (bits 12..19 are the 8 discarded bits there), random byte j of rw for element j */
FBF_FN unsigned fbf_e4m3x4_sr_norm(float y0, float y1, float y2, float y3, unsigned rw) {
  return fbf_e4m3x2_rn(fbf_u2f(fbf_sr_addmask(fbf_f2u(y0), rw, 0u)), fbf_u2f(fbf_sr_addmask(fbf_f2u(y1), rw, 1u))) |
         fbf_e4m3x2_rn(fbf_u2f(fbf_sr_addmask(fbf_f2u(y2), rw, 2u)), fbf_u2f(fbf_sr_addmask(fbf_f2u(y3), rw, 3u))) << 16;
}
/* fbf_srz_one's codes of four consecutive elements (element j in byte j) with random bytes rw (byte j for element
 * j), two conversions */
FBF_FN unsigned fbf_e4m3x4_srz(float x0, float x1, float x2, float x3, float s, unsigned rw) {
  return fbf_e4m3x2_rn(fbf_srz_one(x0, s, rw, 0u), fbf_srz_one(x1, s, rw, 1u)) |
         fbf_e4m3x2_rn(fbf_srz_one(x2, s, rw, 2u), fbf_srz_one(x3, s, rw, 3u)) << 16;
}

FBF_FN float fbf_e4m3_dec(unsigned c) {
  unsigned e = (c >> 3) & 15u, m = c & 7u;
  if ((c & 0x7Fu) == 0x7Fu) return fbf_u2f(0x7FC00000u);
  float v = e == 0u ? (float)m * 0.001953125f : fbf_u2f((e + 120u) << 23 | m << 20);
  return (c & 0x80u) ? -v : v;
}

/* ---- f16 pairs: exact intermediate products of the dequantizers ----
 * Hardware instructions on the GPU (sm_89+ for the E4M3 unpack); on the host the same results in software: the
 * f16 product of two f16 is exact in fp32 and then rounded to f16 (RN), so the host agrees with mul.rn.f16x2
 * on every input, and the tests see a product that was not exact. */
FBF_FN float fbf_h2f_sw(unsigned h) {
  unsigned e = (h >> 10) & 31u, m = h & 0x3FFu;
  float v = e == 31u ? fbf_u2f(m ? 0x7FC00000u : 0x7F800000u)
                     : (e == 0u ? (float)m * 5.9604644775390625e-8f : fbf_u2f((e + 112u) << 23 | m << 13));
  return (h & 0x8000u) ? -v : v;
}
FBF_FN unsigned fbf_f2h_rn_sw(float f) {
  unsigned b = fbf_f2u(f), s = (b >> 16) & 0x8000u, a = b & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return s | 0x7E00u;
  if (a >= 0x477FF000u) return s | 0x7C00u;  /* 65520 and up: Inf */
  if (a >= 0x38800000u) {                     /* normal: rebias, round 13 bits to nearest even */
    unsigned m = a - 0x38000000u;
    return s | ((m + 0xFFFu + ((m >> 13) & 1u)) >> 13);
  }
  return s | (unsigned)rintf(fabsf(f) * 16777216.0f); /* subnormal: units of 2^-24 */
}
/* f16 pair (lo, hi) -> floats */
FBF_FN float fbf_h2_lo(unsigned h2) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)(h2 & 0xFFFFu)));
  return f;
#else
  return fbf_h2f_sw(h2 & 0xFFFFu);
#endif
}
FBF_FN float fbf_h2_hi(unsigned h2) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)(h2 >> 16)));
  return f;
#else
  return fbf_h2f_sw(h2 >> 16);
#endif
}
/* mul.rn.f16x2 */
FBF_FN unsigned fbf_hmul2(unsigned a, unsigned b) {
#if defined(__CUDA_ARCH__)
  unsigned d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  return fbf_f2h_rn_sw(fbf_h2f_sw(a & 0xFFFFu) * fbf_h2f_sw(b & 0xFFFFu)) |
         fbf_f2h_rn_sw(fbf_h2f_sw(a >> 16) * fbf_h2f_sw(b >> 16)) << 16;
#endif
}
/* two E4M3 codes (low byte -> low half) -> the f16 pair of their values, exactly (E4M3 is a subset of f16) */
FBF_FN unsigned fbf_e4m3x2_to_h2(unsigned c2) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  unsigned d;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(d) : "h"((unsigned short)(c2 & 0xFFFFu)));
  return d;
#else
  return fbf_f2h_rn_sw(fbf_e4m3_dec(c2 & 255u)) | fbf_f2h_rn_sw(fbf_e4m3_dec((c2 >> 8) & 255u)) << 16;
#endif
}

/* ---- NVFP4 dequantization, (e2m1 * sf) * S_dec, eight elements at a time ----
 * Each nibble n becomes the E4M3 byte ((n & 7) << 2) | ((n & 8) << 4): E2M1's exponent in E4M3's two low exponent
 * bits and its mantissa bit on top of E4M3's, so that the byte's value is e2m1(n) * 2^-6 for every code, E2M1's
 * subnormal 0.5 included (it lands on E4M3's subnormals), sign and -0 kept. Unpacked to f16 pairs, one f16
 * multiply by sf * 64 (exact: sf * 64 <= 28672 is an f16, and the product of a 2-bit and a 4-bit significand,
 * 2^-10 .. 2688, is one too) gives e2m1 * sf exactly, as the reference's first product is; the fp32 product with
 * S_dec is then the reference's second, rounded once. A NaN scale code gives NaN, as the reference does. */
FBF_FN unsigned fbf_nvfp4_sfh2(unsigned sfc) { /* (sf * 64, sf * 64) as an f16 pair */
  return fbf_hmul2(fbf_e4m3x2_to_h2(sfc * 0x101u), 0x54005400u);
}
FBF_FN void fbf_nvfp4_deq8(unsigned w, unsigned sfh2, float sd, float x[8]) {
  unsigned ev = ((w << 2) & 0x1C1C1C1Cu) | ((w << 4) & 0x80808080u); /* nibbles 0 2 4 6 as E4M3 bytes */
  unsigned od = ((w >> 2) & 0x1C1C1C1Cu) | (w & 0x80808080u);        /* nibbles 1 3 5 7 */
  unsigned p0 = fbf_hmul2(fbf_e4m3x2_to_h2(ev), sfh2), p1 = fbf_hmul2(fbf_e4m3x2_to_h2(ev >> 16), sfh2);
  unsigned p2 = fbf_hmul2(fbf_e4m3x2_to_h2(od), sfh2), p3 = fbf_hmul2(fbf_e4m3x2_to_h2(od >> 16), sfh2);
  x[0] = fbf_h2_lo(p0) * sd, x[2] = fbf_h2_hi(p0) * sd, x[4] = fbf_h2_lo(p1) * sd, x[6] = fbf_h2_hi(p1) * sd;
  x[1] = fbf_h2_lo(p2) * sd, x[3] = fbf_h2_hi(p2) * sd, x[5] = fbf_h2_lo(p3) * sd, x[7] = fbf_h2_hi(p3) * sd;
}

/* ---- E8M0 ---- */
FBF_FN unsigned fbf_e8m0_up(float x) {
  unsigned b = fbf_f2u(x) & 0x7FFFFFFFu, ex = b >> 23, man = b & 0x7FFFFFu;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
  /* sm_100a/sm_103a: the rounded-up conversion in one instruction, for normal |x| only. Its model
   * (tests/emu/fb_cvt_model.h) and the CUDA headers' host emulation equal the rule below on every class
   * (tests/test_cvt_model.cpp, tests/test_xcheck_cuda.cpp), but for zero and subnormal inputs the result rests on
   * readings the PTX text does not settle (whether .rp of +0 gives 2^-127, whether the conversion keeps subnormals:
   * (2^-127, 2^-126) -> 0x01 only if it does), and for Inf / NaN on the satfinite paragraph's wording: those take the
   * software rule. The instruction itself has not run here (no Blackwell GPU). */
  if (ex - 1u < 254u) {
    unsigned short h;
    asm("cvt.rp.satfinite.ue8m0x2.f32 %0, %1, %2;" : "=h"(h) : "f"(0.0f), "f"(fabsf(x)));
    return (unsigned)h & 0xFFu;
  }
#endif
  if (ex == 255u) return man ? 0xFFu : 0xFEu;
  if (ex == 0u) return b <= 0x00400000u ? 0u : 1u;
  unsigned e = ex + (man != 0u);
  return e > 254u ? 254u : e;
}

FBF_FN float fbf_e8m0_dec(unsigned c) {
  return c == 255u ? fbf_u2f(0x7FC00000u) : (c == 0u ? fbf_u2f(0x00400000u) : fbf_u2f(c << 23));
}

/* BF16 of x by round-to-nearest-even, a NaN kept quiet (its payload's top bits, the quiet bit set) */
FBF_FN unsigned fbf_bf16_rne(float x) {
  unsigned u = fbf_f2u(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (u >> 16) | 0x40u;
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}
/* The exact BF16 copy of one MXFP8 block as the Hopper GEMMs multiply it (gemm_bcopy.cuh, FB_SRC 2): w, its 32 E4M3
 * codes (code j in byte j % 4 of w[j / 4]), e its E8M0 scale; o[m], BF16 positions 2m and 2m + 1, K permuted inside
 * each 16 (position P holds element (P & 16) + 4 ((P & 7) >> 1) + 2 ((P & 15) >> 3) + (P & 1): fb_gemm_kperm16), each
 * value bf16(e4m3(code) * 2^(e - 127)). Positions 2m, 2m + 1 hold two consecutive elements, so a word is one E4M3 pair.
 * For 10 <= e <= 254 every product is an FP32 normal (or Inf) of at most 4 significant bits (the smallest non-zero
 * E4M3, 2^-9, times 2^-117), so BF16 holds it exactly: its top 16 bits, from one f16-pair unpack, two widenings and
 * two products a pair. Other scales (subnormal products, the NaN scale) take the rounding of fbf_bf16_rne. A NaN code
 * may give another NaN payload than the slow form (the copies' checks equate NaNs). */
FBF_FN void fbf_mx_block_kbf16(const unsigned w[8], unsigned e, unsigned o[16]) {
  const float sc = fbf_e8m0_dec(e);
  const int fast = e - 10u <= 244u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int m = 0; m < 16; ++m) {
    const int P = 2 * m, p16 = P & 15, el = (P & 16) + 4 * ((p16 & 7) >> 1) + 2 * (p16 >> 3); /* even: a pair */
    const unsigned c2 = (w[el >> 2] >> (8 * (el & 3))) & 0xFFFFu;
    if (fast) {
      const unsigned h = fbf_e4m3x2_to_h2(c2);
      o[m] = fbf_prmt(fbf_f2u(fbf_h2_lo(h) * sc), fbf_f2u(fbf_h2_hi(h) * sc), 0x7632u);
    } else {
      o[m] = fbf_bf16_rne(fbf_e4m3_dec(c2 & 255u) * sc) | fbf_bf16_rne(fbf_e4m3_dec(c2 >> 8) * sc) << 16;
    }
  }
}

/* 16 S2F6 codes (four words, code j in byte j) times their block's decoded E8M0 scale sc: y = (q / 64) * sc */
FBF_FN void fbf_s2f6_dec16(const unsigned w[4], float sc, float y[16]) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int j = 0; j < 16; ++j) y[j] = ((float)(signed char)(w[j >> 2] >> (8 * (j & 3))) / 64.0f) * sc;
}

/* ---- NVFP4 blocks ---- */
/* One candidate scale sfc for a block of 16 with magnitudes av[] (= |x|): the E2M1 magnitude codes, packed
 * eight to a word (even element in the low nibble, sign bits clear), and the block's fp32 squared error
 * exactly as docs/numerics.md's 4/6 rule computes it. x^ = (e2m1 * sf) * S_dec carries x's sign in the
 * reference; the square of (|x^| - |x|) is the same number. RN, or SR with the block's Philox bytes r.
 * In each binade the grid value is rint(m) * step with m = a / step, and its code rint(m) + 0, 2 or 4;
 * NaN and Inf give code 7 (6), as the RN/SR rules do. */
FBF_FN float fbf_nvfp4_cand(const float av[16], unsigned sfc, float s_dec, int sr, const unsigned r[4], unsigned packed[2]) {
  float sf = fbf_e4m3_dec(sfc);
  float err = 0.0f;
  packed[0] = packed[1] = 0u;
  if (sfc == 0u) { /* the underflowing block: +0 codes, x^ = 0, d = -|x| */
    for (int j = 0; j < 16; ++j) err = fmaf(av[j], av[j], err);
    return err;
  }
  float enc = fminf(1.0f / (sf * s_dec), FBF_FLT_MAX);
  for (int j = 0; j < 16; ++j) {
    float a = av[j] * enc;
    int lo = a < 2.0f, mid = a < 4.0f;
    float step = lo ? 0.5f : (mid ? 1.0f : 2.0f), inv = lo ? 2.0f : (mid ? 1.0f : 0.5f), off = lo ? 0.0f : (mid ? 2.0f : 4.0f);
    float m = a * inv, n;
    if (sr) {
      float fl = floorf(m);
      float fr = (m - fl) * 256.0f;
      unsigned t = fr == fr ? (unsigned)fr : 0u; /* NaN/Inf inputs: any t, the result saturates to 6 */
      n = fl + (float)(t + ((r[j >> 2] >> (8 * (j & 3))) & 255u) >= 256u);
    } else {
      n = rintf(m);
    }
    float v = fminf(n * step, 6.0f);
    packed[j >> 3] |= (unsigned)fminf(n + off, 7.0f) << (4 * (j & 7));
    float d = (v * sf) * s_dec - av[j];
    err = fmaf(d, d, err);
  }
  return err;
}

/* The codes alone, for scales chosen without 4/6 (no error to compute). */
FBF_FN void fbf_nvfp4_codes(const float av[16], unsigned sfc, float s_dec, int sr, const unsigned r[4], unsigned packed[2]) {
  packed[0] = packed[1] = 0u;
  if (sfc == 0u) return;
  float enc = fminf(1.0f / (fbf_e4m3_dec(sfc) * s_dec), FBF_FLT_MAX);
  for (int j = 0; j < 16; ++j) {
    float a = av[j] * enc;
    int lo = a < 2.0f, mid = a < 4.0f;
    float inv = lo ? 2.0f : (mid ? 1.0f : 0.5f), off = lo ? 0.0f : (mid ? 2.0f : 4.0f);
    float m = a * inv, n;
    if (sr) {
      float fl = floorf(m);
      float fr = (m - fl) * 256.0f;
      unsigned t = fr == fr ? (unsigned)fr : 0u;
      n = fl + (float)(t + ((r[j >> 2] >> (8 * (j & 3))) & 255u) >= 256u);
    } else {
      n = rintf(m);
    }
    packed[j >> 3] |= (unsigned)fminf(n + off, 7.0f) << (4 * (j & 7));
  }
}

/* The sign nibble-bits of a block's 16 inputs (bit 3 of each nibble): set for negative values, clear for
 * NaN (E2M1's NaN rule gives +6). Applied unless the block's scale is zero (+0 codes). */
FBF_FN void fbf_nvfp4_signs(const float x[16], unsigned s[2]) {
  s[0] = s[1] = 0u;
  for (int j = 0; j < 16; ++j) {
    unsigned neg = (fbf_f2u(x[j]) >> 31) & (unsigned)(x[j] == x[j]);
    s[j >> 3] |= neg << (4 * (j & 7) + 3);
  }
}

/* ---- NVFP4 RN without per-element binade selects ----
 * fbf_e2m1_rn_grid(a), for a = |x| * enc >= 0 or NaN: the E2M1 grid value that fbf_nvfp4_cand's RN path picks
 * (fminf(rintf(a * inv) * step, 6)), by the exponent-bit trick: m = 1.5 * 2^22 * 2^floor(log2(max(a, 1))), whose
 * ulp is the binade's step (0.5 below 2, 1 in [2, 4), 2 in [4, 8)) and whose low bits are zero, so that the fp32
 * sum a + m is a rounded once, to nearest even, onto the step, and (a + m) - m is exact. From 8 up the sum is 8 or
 * more (or Inf - Inf = NaN where m overflows), and the min gives 6; NaN a gives 6 (max(NaN, 1) = 1, then the min).
 * Needs fp32 adds that are not contracted or reassociated (the generator compiles with --fmad=false). */
FBF_FN float fbf_e2m1_rn_grid(float a) {
  /* p = 2^E (one and); the two fmas add and subtract m = p * (1.5 * 2^22), a product that is exact, each rounded
   * once as the plain adds are (for a >= 2^105 m overflows and the sum is Inf; Inf's p is Inf: Inf - Inf; 6) */
  float p = fbf_u2f(fbf_f2u(fmaxf(a, 1.0f)) & 0x7F800000u);
  return fminf(fmaf(p, -6291456.0f, fmaf(p, 6291456.0f, a)), 6.0f);
}
/* The E2M1 magnitude code of a grid value g (0, 0.5, 1, 1.5, 2, 3, 4, 6): g * 2^-126 is exact and puts E2M1's
 * subnormal 0.5 on fp32's denormal 2^-127 and its normals on fp32's exponent fields 1..2, so the code is bits
 * 22..24 of the product (needs denormal results, i.e. no flush to zero). */
FBF_FN unsigned fbf_e2m1_grid_code(float g) { return fbf_f2u(g * 1.1754943508222875e-38f) >> 22; }
/* E4M3 decode through the f16 pair conversion (one cvt on sm_89+): fbf_e4m3_dec's value for every code but NaN. */
FBF_FN float fbf_e4m3_dec_cvt(unsigned c) { return fbf_h2_lo(fbf_e4m3x2_to_h2(c & 255u)); }
/* The block's encode scale of docs/numerics.md, enc = min(1 / (sf * S_dec), FLT_MAX) (FLT_MAX for sf = 0). */
FBF_FN float fbf_nvfp4_enc(float sf, float s_dec) { return fminf(1.0f / (sf * s_dec), FBF_FLT_MAX); }
/* One RN candidate of 4/6 on the inputs x (signed): grid values g[] and the squared error of fbf_nvfp4_cand, bit for
 * bit. For sfc = 0 no branch is needed: enc = FLT_MAX, and x^ = (g * 0) * S_dec = 0 gives d = -|x|, whose fmaf
 * square is the underflowing block's fmaf(|x|, |x|, err) (S_dec is finite and positive for every amax). */
FBF_FN float fbf_nvfp4_cand_rn(const float x[16], float sf, float s_dec, float g[16]) {
  float enc = fbf_nvfp4_enc(sf, s_dec), err = 0.0f;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int j = 0; j < 16; ++j) {
    float av = fabsf(x[j]);
    g[j] = fbf_e2m1_rn_grid(av * enc);
    float d = (g[j] * sf) * s_dec - av;
    err = fmaf(d, d, err);
  }
  return err;
}
/* Grid values alone (no 4/6). */
FBF_FN void fbf_nvfp4_grid_rn(const float x[16], float sf, float s_dec, float g[16]) {
  float enc = fbf_nvfp4_enc(sf, s_dec);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int j = 0; j < 16; ++j) g[j] = fbf_e2m1_rn_grid(fabsf(x[j]) * enc);
}
/* The sign bits of eight inputs in the nibble layout (bit 3 of nibble j set for x[j] negative; the caller has
 * excluded NaN, whose sign docs/numerics.md drops): the top bytes gathered by byte permutes, the even elements' into
 * e (byte k from x[2k]) and shifted onto bit 3 of each byte, the odd elements' into o, sign already on bit 7. */
FBF_FN unsigned fbf_nvfp4_signs8(const float x[8]) {
  unsigned e = fbf_prmt(fbf_prmt(fbf_f2u(x[0]), fbf_f2u(x[2]), 0x7373u), fbf_prmt(fbf_f2u(x[4]), fbf_f2u(x[6]), 0x7373u), 0x5410u);
  unsigned o = fbf_prmt(fbf_prmt(fbf_f2u(x[1]), fbf_f2u(x[3]), 0x7373u), fbf_prmt(fbf_f2u(x[5]), fbf_f2u(x[7]), 0x7373u), 0x5410u);
  return ((e >> 4) & 0x08080808u) | (o & 0x80808080u);
}
/* Nibble j of the result plus w: the code of grid value g[j] (sign bit clear). Each product g * 2^-126 has the code
 * at bits 22..24 and nothing else, so one shift-add per element (lea.hi) places it. */
FBF_FN unsigned fbf_e2m1x8_codes(const float g[8], unsigned w) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int j = 0; j < 8; ++j) {
    unsigned z = fbf_f2u(g[j] * 1.1754943508222875e-38f);
    w += j < 6 ? z >> (22 - 4 * j) : z << (4 * j - 22);
  }
  return w;
}
/* Eight nibbles (element j in nibble j): the code of grid value g[j] with x[j]'s sign bit on top (fbf_nvfp4_signs8:
 * no NaN x). The caller zeroes the word of an underflowing block. */
FBF_FN unsigned fbf_e2m1x8_pack(const float g[8], const float x[8]) { return fbf_e2m1x8_codes(g, fbf_nvfp4_signs8(x)); }
/* fbf_nvfp4_cand_rn with the codes (sign bits clear) packed as each half of the block is done, instead of the grid
 * values: what 4/6 keeps of a candidate is then two words, not sixteen floats. */
FBF_FN float fbf_nvfp4_cand_rn_codes(const float x[16], float sf, float s_dec, unsigned pk[2]) {
  float enc = fbf_nvfp4_enc(sf, s_dec), err = 0.0f;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int h = 0; h < 2; ++h) {
    float g[8];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int j = 0; j < 8; ++j) {
      float av = fabsf(x[8 * h + j]);
      g[j] = fbf_e2m1_rn_grid(av * enc);
      float d = (g[j] * sf) * s_dec - av;
      err = fmaf(d, d, err);
    }
    pk[h] = fbf_e2m1x8_codes(g, 0u);
  }
  return err;
}

/* ---- RHT-32 ---- */
/* The unnormalized 32-point fast Walsh-Hadamard transform of docs/numerics.md: stages k = 0..4 in that order,
 * each pair (i, i + 2^k) with bit k of i clear becomes (u + v, u - v), in fp32. */
FBF_FN void fbf_wht32(float t[32]) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int k = 0; k < 5; ++k) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int i = 0; i < 32; ++i) {
      if (i & (1 << k)) continue;
      float u = t[i], v = t[i + (1 << k)];
      t[i] = u + v;
      t[i + (1 << k)] = u - v;
    }
  }
}

/* ---- scales ---- */
FBF_FN float fbf_nvfp4_s_enc(float amax, int four_over_six) {
  float s = fminf((four_over_six ? 6.0f * 256.0f : 6.0f * 448.0f) / amax, FBF_FLT_MAX);
  return (amax == 0.0f || s == 0.0f) ? 1.0f : s;
}

/* S2F6 block exponent: smallest e in [0, 254] with amax <= 127/64 * 2^(e-127); 254 if none (NaN, Inf,
 * too large). For a normal amax = f * 2^E (f in [1, 2)), e = E + 127 unless f > 127/64. */
FBF_FN unsigned fbf_s2f6_exp(float amax) {
  if (!(amax <= 127.0f * fbf_pow2(121))) return 254u;
  unsigned ex = fbf_f2u(amax) >> 23;
  if (ex == 0u) return amax <= 127.0f * fbf_pow2(-133) ? 0u : 1u; /* denormals */
  unsigned e = ex + (unsigned)(amax > 1.984375f * fbf_pow2((int)ex - 127));
  return e > 254u ? 254u : e;
}

/* S2F6 code of one value: clamp(rint_even(t * inv * 64), -127, 127) as a byte, NaN -> 0; inv = 2^(127 - e) */
FBF_FN unsigned fbf_s2f6_code(float t, float inv) {
  float v = rintf((t * inv) * 64.0f);
  if (v != v) v = 0.0f;
  v = v < -127.0f ? -127.0f : (v > 127.0f ? 127.0f : v);
  return (unsigned)(int)v & 255u;
}

#endif
