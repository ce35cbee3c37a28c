/* fb_cvt_model.h — functional models of Blackwell's packed conversion instructions, written from the PTX ISA text
 * (cvt, "Data Movement and Conversion Instructions"), not from fourbit's reference: the emulated build of an sm_100a /
 * sm_103a kernel calls these where the GPU build issues the instruction (templates/fb_cvt.h's wrappers), and
 * tests/test_cvt_model.cpp runs them against runtime/numerics.c over every input class. C and C++; no state.
 * docs/tc_model.md ("Conversions") lists each reading and which are [unverified]. Run under the model only, never
 * on a Blackwell GPU.
 *
 * Entry points:
 *   fbm_cvt_rn_satfinite_e2m1x2_f32(a, b)   cvt.rn.satfinite.e2m1x2.f32 d8, a, b:   d[7:4] = cvt(a), d[3:0] = cvt(b)
 *   fbm_cvt_rp_satfinite_ue8m0x2_f32(a, b)  cvt.rp.satfinite.ue8m0x2.f32 d16, a, b: d[15:8] = cvt(a), d[7:0] = cvt(b)
 *   fbm_cvt_rn_satfinite_e4m3x2_f32(a, b)   cvt.rn.satfinite.e4m3x2.f32 d16, a, b:  d[15:8] = cvt(a), d[7:0] = cvt(b)
 *
 * The readings (PTX ISA, cvt):
 *  - packing: "the value converted from input a is stored in the upper 4 bits of d and the value converted from
 *    input b is stored in the lower 4 bits of d" (e2m1x2; ue8m0x2: upper / lower 8 bits). [text]
 *  - .rn: round to nearest, ties to even, onto the E2M1 grid 0, 0.5, 1, 1.5, 2, 3, 4, 6. [text]
 *  - .satfinite: |input| above MAX_NORM (6; ue8m0: 2^127), Inf included, gives MAX_NORM with the input's sign; a NaN
 *    input gives positive MAX_NORM for E2M1 (no NaN encoding) and the NaN code 0xFF for UE8M0. [text as quoted by
 *    secondary sources and by the CUDA headers' host emulation (cuda_fp4.hpp "NaN converts to positive
 *    FP4_MAXNORM"); the primary paragraph was not retrieved verbatim: unverified]
 *  - f32 subnormal inputs: cvt without .ftz keeps subnormals (the PTX cvt text: .ftz is what flushes); every f32
 *    subnormal is far below E2M1's smallest half-step (0.25), so the result is a zero of the input's sign either
 *    way. For UE8M0 .rp it matters: (2^-127, 2^-126) rounds up to 2^-126 (code 1) unflushed, 0x00 if flushed.
 *    [unverified: that the Blackwell conversion does not flush]
 *  - sign of a zero result (-0, or a negative value rounding to zero): the sign is kept, as IEEE rounding keeps it
 *    and as the CUDA headers' emulation does. [unverified: the PTX text says nothing of it]
 *  - ue8m0x2 of +0 with .rp: UE8M0 has no zero; rounding up gives its smallest value 2^-127, code 0x00. Negative
 *    inputs: the format has no sign; .rp of a negative value rounds toward +Inf, i.e. to the smallest code 0x00.
 *    [unverified: the PTX text says neither]
 *  - e4m3x2 (sm_89 on; fourbit's sm_90a kernels have issued it since they were written, and its results agreed with
 *    the host reference on the H200 in every quantizer test): .rn ties to even onto E4M3 (bias 7, three mantissa
 *    bits, subnormals m * 2^-9, no Inf); .satfinite: a result above MAX_NORM (448), Inf included, is +-448 with the
 *    input's sign (so a value in (448, 480) that RN would carry to 512 is 448 too). [text]
 *    A NaN input gives the NaN code; which of 0x7F / 0xFF the text does not say: the model gives 0x7F (positive),
 *    as fourbit's reference and the CUDA headers' host emulation do. [unverified]
 *    f32 subnormal inputs are not flushed (no .ftz): all are below half of E4M3's smallest step 2^-9, so they give a
 *    zero of their sign either way. The sign of a zero result (-0, a negative value below 2^-10) is kept, as for
 *    E2M1. [unverified] */
#ifndef FB_CVT_MODEL_H
#define FB_CVT_MODEL_H

#include <string.h>

static inline unsigned fbm_cvt_bits(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  return u;
}

/* One E2M1 conversion, RN-even, satfinite: the 4-bit code (sign in bit 3). Exact arithmetic on the input's
 * significand and exponent: the value in quarters, x / 0.25 = I + f (I integer, f in [0, 1), sticky flag for f > 0),
 * compared with the midpoints of the grid, which are whole quarters. */
static inline unsigned fbm_e2m1_rn_satfinite(float x) {
  const unsigned u = fbm_cvt_bits(x), s = (u >> 28) & 8u, ex = (u >> 23) & 255u, man = u & 0x7FFFFFu;
  if (ex == 255u) return man ? 7u : s | 7u; /* NaN: +MAX_NORM; +-Inf: +-MAX_NORM */
  if (ex >= 130u) return s | 7u;            /* |x| >= 8 > MAX_NORM */
  /* |x| = m * 2^(e - 150) (normal) or man * 2^-149 (subnormal); in quarters m * 2^(e - 148): a right shift by 148 - e */
  const unsigned m = ex ? (man | 0x800000u) : man;
  const unsigned sh = ex ? 148u - ex : 147u; /* >= 19 since ex <= 129 */
  const unsigned I = sh >= 32u ? 0u : m >> sh;
  const int sticky = sh >= 32u ? m != 0u : (m & ((1u << sh) - 1u)) != 0u;
  /* grid in quarters 0 2 4 6 8 12 16 24 (codes 0..7); midpoint k between codes k and k + 1 */
  static const unsigned mid[7] = {1u, 3u, 5u, 7u, 10u, 14u, 20u};
  unsigned c = 0u;
  for (int k = 0; k < 7; ++k) {
    if (I > mid[k] || (I == mid[k] && sticky)) c = (unsigned)k + 1u;           /* above the midpoint: up */
    else if (I == mid[k] && !sticky) c = (k + 1) % 2 == 0 ? (unsigned)k + 1u : (unsigned)k; /* a tie: the even code */
  }
  return s | c; /* c saturates at 7 (6.0) for 5 < |x| < 8 */
}

/* cvt.rn.satfinite.e2m1x2.f32 d, a, b (d .b8): a in the high nibble, b in the low one. */
static inline unsigned fbm_cvt_rn_satfinite_e2m1x2_f32(float a, float b) {
  return fbm_e2m1_rn_satfinite(a) << 4 | fbm_e2m1_rn_satfinite(b);
}

/* One UE8M0 conversion rounding toward +Inf, satfinite: the code e, value 2^(e - 127), 0xFF NaN. */
static inline unsigned fbm_ue8m0_rp_satfinite(float x) {
  const unsigned u = fbm_cvt_bits(x), ex = (u >> 23) & 255u, man = u & 0x7FFFFFu;
  if (ex == 255u) return man ? 0xFFu : ((u >> 31) ? 0u : 0xFEu); /* NaN; +Inf -> MAX_NORM 2^127; -Inf -> the smallest */
  if (u >> 31) return 0u;                                          /* negative (or -0): up toward +Inf, the smallest */
  if (ex == 0u) return man <= 0x400000u ? 0u : 1u;                /* 0 .. 2^-127 -> 2^-127; (2^-127, 2^-126) -> 2^-126 */
  const unsigned e = ex + (man != 0u);                             /* 2^(ex - 127) exact, else the next power up */
  return e > 254u ? 254u : e;                                      /* above 2^127: satfinite */
}

/* cvt.rp.satfinite.ue8m0x2.f32 d, a, b (d .b16): a in the high byte, b in the low one. */
static inline unsigned fbm_cvt_rp_satfinite_ue8m0x2_f32(float a, float b) {
  return fbm_ue8m0_rp_satfinite(a) << 8 | fbm_ue8m0_rp_satfinite(b);
}

/* One E4M3 conversion, RN-even, satfinite: the 8-bit code. Exact integer arithmetic on the input's significand: in
 * units of the step of the input's E4M3 binade (2^(e - 3) for e >= -6, 2^-9 below), |x| = I + f; the significand m
 * (24 bits, or the f32 subnormal's 23) shifted right by sh gives I, the bits shifted out f. For e >= -6 the shift is
 * always 20 (the 20 mantissa bits below E4M3's 3). I is 8..16 there (16: the carry into the next binade, which the
 * code arithmetic below absorbs) and 0..8 below (8: the carry into 2^-6, code 8). */
static inline unsigned fbm_e4m3_rn_satfinite(float x) {
  const unsigned u = fbm_cvt_bits(x), s = (u >> 24) & 0x80u, ex = (u >> 23) & 255u, man = u & 0x7FFFFFu;
  if (ex == 255u) return man ? 0x7Fu : s | 0x7Eu; /* NaN: the NaN code; +-Inf: +-MAX_NORM */
  if (ex >= 127u + 9u) return s | 0x7Eu;           /* |x| >= 512 > MAX_NORM */
  const unsigned m = ex ? (man | 0x800000u) : man;
  const unsigned sh = ex >= 121u ? 20u : (ex ? 141u - ex : 140u); /* ex 121 = 2^-6; below: steps of 2^-9 */
  unsigned I = sh >= 32u ? 0u : m >> sh;
  const unsigned long long rem = sh >= 32u ? m : (m & ((1u << sh) - 1u)), half = sh >= 33u ? 0ull : 1ull << (sh - 1u);
  if (sh < 33u && (rem > half || (rem == half && (I & 1u)))) ++I; /* above the midpoint, or a tie to an odd I */
  unsigned c = ex >= 121u ? ((ex - 120u) << 3) + I - 8u : I;        /* normal: exponent field ex - 127 + 7 */
  if (c > 0x7Eu) c = 0x7Eu;                                         /* satfinite: 0x7F is NaN, 480 and up over 448 */
  return s | c;
}

/* cvt.rn.satfinite.e4m3x2.f32 d, a, b (d .b16): a in the high byte, b in the low one. */
static inline unsigned fbm_cvt_rn_satfinite_e4m3x2_f32(float a, float b) {
  return fbm_e4m3_rn_satfinite(a) << 8 | fbm_e4m3_rn_satfinite(b);
}

#endif
