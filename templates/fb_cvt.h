/* fb_cvt.h — Blackwell's E2M1 conversion, cvt.rn.satfinite.e2m1x2.f32, behind one wrapper, and the NVFP4 pieces built
 * on it (templates/quant_nvfp4.cuh). Used on sm_100a / sm_103a only; every other arch keeps fb_formats.h's software
 * forms, and so does this header's caller (FBF_E2M1_HW 0).
 *
 * Built for the emulator (tests/emu/fb_emu.h: FB_EMU, with FB_EMU_SM >= 100 for a kernel named _sm100a / _sm103a)
 * the wrapper calls the functional model of the instruction (tests/emu/fb_cvt_model.h, written from the PTX text),
 * so an emulated sm_100a quantizer computes with the instruction's modelled results, not with the software form.
 *
 * Which inputs reach the instruction (docs/numerics.md "Hardware conversions"): the model agrees with the reference
 * (runtime/numerics.c fb_e2m1_encode_rn) on every class, tests/test_cvt_model.cpp, but only the classes whose result
 * the PTX text fixes are given to it: non-negative finite values and +Inf (RN-even on the grid, satfinite), +0 and
 * positive f32 subnormals (+0 whether or not the hardware flushes them). The sign of a zero result (-0, a negative
 * value that rounds to 0), on which the text is silent, is not asked of it: the callers convert |x| * enc and set
 * the sign bits in software (fbf_nvfp4_signs8); NaN inputs, whose E2M1 result the text gives only through secondary
 * quotes, never reach it (the quantizers send a block with a NaN to the software path).
 *
 * Entry points:
 *   FBF_E2M1_HW                      1 where the wrappers below use the instruction (or its model)
 *   fbf_cvt_e2m1x2(a, b)             the instruction: code of a in bits 7:4, of b in bits 3:0 (PTX operand order)
 *   fbf_e2m1x8_hw(av, enc)           eight codes, element j in nibble j, of av[j] * enc (av[j] >= 0, not NaN)
 *   fbf_nvfp4_err_rn(x, sf, s_dec)   fbf_nvfp4_cand_rn's squared error alone (no grid values kept) */
#ifndef FB_CVT_H
#define FB_CVT_H

#include "fb_formats.h"

#if defined(__CUDA_ARCH__) && (defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM103_ALL))
#define FBF_E2M1_HW 1
#elif defined(FB_EMU) && defined(FB_EMU_SM) && !defined(__CUDA_ARCH__)
#if FB_EMU_SM == 100 || FB_EMU_SM == 103
#define FBF_E2M1_HW 1
#define FBF_E2M1_MODEL 1 /* tests/emu/fb_cvt_model.h, included by tests/emu/fb_emu.h */
#else
#define FBF_E2M1_HW 0
#endif
#else
#define FBF_E2M1_HW 0
#endif

#if FBF_E2M1_HW
/* cvt.rn.satfinite.e2m1x2.f32 d, a, b: d[7:4] = e2m1(a), d[3:0] = e2m1(b); the destination is a .b8 register, widened
 * to the 16-bit operand inline assembly has */
FBF_FN unsigned fbf_cvt_e2m1x2(float a, float b) {
#if defined(FBF_E2M1_MODEL)
  return fbm_cvt_rn_satfinite_e2m1x2_f32(a, b);
#else
  unsigned short h;
  asm("{ .reg .b8 t;\n\tcvt.rn.satfinite.e2m1x2.f32 t, %1, %2;\n\tcvt.u16.u8 %0, t; }" : "=h"(h) : "f"(a), "f"(b));
  return (unsigned)h & 0xFFu;
#endif
}

/* Eight codes (sign bits clear) of av[j] * enc, element j in nibble j: the odd element is the instruction's a (high
 * nibble), the even one its b, so each byte is two consecutive elements in fourbit's order (even element low). */
FBF_FN unsigned fbf_e2m1x8_hw(const float av[8], float enc) {
  unsigned w = 0u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int k = 0; k < 4; ++k) w |= fbf_cvt_e2m1x2(av[2 * k + 1] * enc, av[2 * k] * enc) << (8 * k);
  return w;
}
#endif

/* The squared error of one RN candidate: fbf_nvfp4_cand_rn's itself. 4/6 needs only the two errors (the winner's codes
 * come from the instruction), so the grid values are dead stores once it is inlined, and the compiler drops them. */
FBF_FN float fbf_nvfp4_err_rn(const float x[16], float sf, float s_dec) {
  float g[16];
  return fbf_nvfp4_cand_rn(x, sf, s_dec, g);
}

#endif
