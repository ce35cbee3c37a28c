/* test_cvt_model.cpp — the functional models of Blackwell's conversions (tests/emu/fb_cvt_model.h) against fourbit's
 * reference (runtime/numerics.c) and against the CUDA toolkit's host emulation of the same instructions
 * (<cuda_fp4.h> __nv_cvt_float2_to_fp4x2, <cuda_fp8.h> __nv_cvt_float_to_e8m0: code neither side wrote), over every
 * input class; then the sm_100a NVFP4 quantizers, which take their E2M1 codes from the instruction, run under the warp
 * emulator with the model standing in for it, byte for byte against fb_nvfp4_quantize.
 *
 *   e2m1_classes      cvt.rn.satfinite.e2m1x2.f32's model vs fb_e2m1_encode_rn and the CUDA emulation, per class:
 *                     grid values, ties, their float neighbours, every float in [0.25, 8) (both signs), every exponent
 *                     with a mantissa sample, the saturation range, +-0, f32 subnormals, +-Inf, NaNs, and a strided
 *                     sweep over all 2^32 patterns; the table says which classes the quantizers give the instruction
 *   e2m1_wrapper      templates/fb_cvt.h under the model (FB_EMU, FB_EMU_SM 100): the operand order (a -> bits 7:4)
 *                     and fbf_e2m1x8_hw's nibble order (element j in nibble j, fourbit's packing)
 *   e4m3_classes      cvt.rn.satfinite.e4m3x2.f32's model (what fb_formats.h fbf_e4m3_rn / fbf_e4m3x2_rn issue from sm_89 on,
 *                     every class) vs fb_e4m3_encode_rn and the CUDA emulation; the wrappers' operand order under the model
 *   ue8m0_classes     cvt.rp.satfinite.ue8m0x2.f32's model (what fb_formats.h fbf_e8m0_up issues on sm_100a, on |x|)
 *                     vs fb_e8m0_encode_up and the CUDA emulation
 *   quant_sm100a      quant_nvfp4.cuh generated for sm_100a (per-token 4/6 BF16 with and without staging, per-tensor
 *                     BF16, per-expert FP32), built with FB_EMU_SM=100, run under tests/emu on rows of every kind
 *                     (Gaussian, wide range, exact ties, NaN / Inf / -0 / subnormals, zeros, tiny and huge rows,
 *                     underflowing blocks): codes, scales and S_dec equal to fb_nvfp4_quantize's
 * Run from the repository root (the kernels are compiled with the host C++ compiler, CXX, at run time). Nothing here
 * has run on a Blackwell GPU: the models are readings of the PTX text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <float.h>
#include <dlfcn.h>
#include <unistd.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include <cmocka.h>
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_fp4.h>
#pragma GCC diagnostic pop

#include "fourbit.h"
#include "fb_kparams.h"
#include "emu/one_variant.h"

#include "emu/emu_core.h"
#include "emu/fb_cvt_model.h"
/* templates/fb_cvt.h as the emulated build of an sm_100a kernel sees it: its wrapper calls the model */
#define FB_EMU 1
#define FB_EMU_SM 100
#include "fb_cvt.h"
#if !FBF_E2M1_HW || !defined(FBF_E2M1_MODEL)
#error "fb_cvt.h does not route the emulated sm_100a build to the model"
#endif

namespace {
uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* every normal exponent x 1024 mantissas (sign sg): 0, 1, all ones, the format's half step `half` (the tie's mantissa
   bits) and its two neighbours, the rest random */
void push_normals(std::vector<float> &v, float sg, uint32_t half, std::mt19937 &rng) {
  for (uint32_t e = 1; e < 255; ++e)
    for (int k = 0; k < 1024; ++k) {
      uint32_t m = k == 0 ? 0u : k == 1 ? 1u : k == 2 ? 0x7FFFFFu : k == 3 ? half : k == 4 ? half - 1 : k == 5 ? half + 1
                                                                                                  : (rng() & 0x7FFFFFu);
      v.push_back(sg * u2f(e << 23 | m));
    }
}

/* ---- the class table ---------------------------------------------------------------------------------------- */
struct Row {
  const char *cls, *use; /* the class, and what the quantizers do with it on sm_100a */
  long n, host_bad, cuda_bad;
};
void print_table(const char *title, const std::vector<Row> &rows) {
  printf("    %s\n    %-44s %10s %12s %12s  %s\n", title, "class", "inputs", "model=host", "model=CUDA", "sm_100a quantizers");
  for (const Row &r : rows)
    printf("    %-44s %10ld %12s %12s  %s\n", r.cls, r.n, r.host_bad ? "DIFFERS" : "all", r.cuda_bad ? "DIFFERS" : "all", r.use);
}

unsigned cuda_e2m1(float x) { /* the toolkit's host emulation, one value in the low nibble */
  return (unsigned)__nv_cvt_float2_to_fp4x2(make_float2(x, 0.0f), __NV_E2M1, cudaRoundNearest) & 15u;
}

/* one class's row: each input through the model, fourbit's reference and the CUDA headers' emulation (the three
 * conversions of one format, code in the low bits), mismatches counted and the first three printed */
typedef std::function<unsigned(float)> Conv;
void class_row(std::vector<Row> &t, const char *cls, const char *use, const std::function<void(std::vector<float> &)> &gen,
               const Conv &model, const Conv &host, const Conv &cuda) {
  std::vector<float> in;
  gen(in);
  Row r = {cls, use, (long)in.size(), 0, 0};
  for (float x : in) {
    unsigned m = model(x), h = host(x), c = cuda(x);
    if (m != h && r.host_bad++ < 3) printf("    %s: x = 0x%08x: model 0x%02x, host 0x%02x\n", cls, f2u(x), m, h);
    if (m != c && r.cuda_bad++ < 3) printf("    %s: x = 0x%08x: model 0x%02x, CUDA emulation 0x%02x\n", cls, f2u(x), m, c);
  }
  t.push_back(r);
}

void e2m1_row(std::vector<Row> &t, const char *cls, const char *use, const std::function<void(std::vector<float> &)> &gen) {
  class_row(t, cls, use, gen, fbm_e2m1_rn_satfinite, [](float x) { return (unsigned)fb_e2m1_encode_rn(x); }, cuda_e2m1);
}

const float kGrid[] = {0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
const float kTies[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};

void e2m1_classes(void **state) {
  (void)state;
  std::vector<Row> t;
  std::mt19937 rng(19);
  const char *HW = "cvt", *HWA = "cvt on |x|, sign bit in software", *SW = "software (never reaches cvt)";
  for (int neg = 0; neg < 2; ++neg) {
    const float sg = neg ? -1.0f : 1.0f;
    const char *use = neg ? HWA : HW;
    e2m1_row(t, neg ? "-grid values" : "+grid values", use, [&](std::vector<float> &v) {
      for (float g : kGrid) v.push_back(sg * g);
    });
    e2m1_row(t, neg ? "-ties (0.25 0.75 1.25 1.75 2.5 3.5 5)" : "+ties (0.25 0.75 1.25 1.75 2.5 3.5 5)", use,
             [&](std::vector<float> &v) { for (float g : kTies) v.push_back(sg * g); });
    e2m1_row(t, neg ? "-ties' float neighbours (1-4 ulps)" : "+ties' float neighbours (1-4 ulps)", use, [&](std::vector<float> &v) {
      for (float g : kTies)
        for (int k = 1; k <= 4; ++k) v.push_back(sg * u2f(f2u(g) + k)), v.push_back(sg * u2f(f2u(g) - k));
    });
    e2m1_row(t, neg ? "-every float in [0.25, 8)" : "+every float in [0.25, 8)", use, [&](std::vector<float> &v) {
      for (uint32_t u = f2u(0.25f); u < f2u(8.0f); ++u) v.push_back(sg * u2f(u));
    });
    e2m1_row(t, neg ? "-normals: every exponent x 1024 mantissas" : "+normals: every exponent x 1024 mantissas", use,
             [&](std::vector<float> &v) { push_normals(v, sg, 0x400000u, rng); });
    e2m1_row(t, neg ? "-saturation range (6, FLT_MAX]" : "+saturation range (6, FLT_MAX]", use, [&](std::vector<float> &v) {
      for (uint32_t k = 1; k < 64; ++k) v.push_back(sg * u2f(f2u(6.0f) + k));
      for (float x : {6.5f, 7.0f, 7.9999995f, 8.0f, 1e10f, 3e38f, FLT_MAX}) v.push_back(sg * x);
      for (uint32_t e = 130; e < 255; ++e) v.push_back(sg * u2f(e << 23 | (rng() & 0x7FFFFFu)));
    });
    e2m1_row(t, neg ? "-0" : "+0", neg ? "cvt sees +0, sign bit in software" : HW, [&](std::vector<float> &v) { v.push_back(sg * 0.0f); });
    e2m1_row(t, neg ? "-f32 subnormals" : "+f32 subnormals", use, [&](std::vector<float> &v) {
      for (uint32_t m : {1u, 2u, 3u, 0x400000u, 0x3FFFFFu, 0x400001u, 0x7FFFFFu}) v.push_back(sg * u2f(m));
      for (int k = 0; k < 4096; ++k) v.push_back(sg * u2f(1u + (rng() % 0x7FFFFFu)));
    });
    e2m1_row(t, neg ? "-Inf" : "+Inf", use, [&](std::vector<float> &v) { v.push_back(sg * INFINITY); });
    e2m1_row(t, neg ? "NaN, sign bit set" : "NaN, sign bit clear", SW, [&](std::vector<float> &v) {
      for (uint32_t p : {0x400000u, 0x000001u, 0x3FFFFFu, 0x7FFFFFu, 0x400001u}) v.push_back(u2f((neg ? 0xFF800000u : 0x7F800000u) | p));
      for (int k = 0; k < 1024; ++k) v.push_back(u2f((neg ? 0xFF800000u : 0x7F800000u) | (1u + (rng() % 0x7FFFFFu))));
    });
  }
  e2m1_row(t, "all 2^32 patterns, every 4099th", "(the classes above)", [&](std::vector<float> &v) {
    for (uint64_t u = 0; u < (1ull << 32); u += 4099) v.push_back(u2f((uint32_t)u));
  });
  print_table("cvt.rn.satfinite.e2m1x2.f32: the model against fb_e2m1_encode_rn and the CUDA headers' emulation", t);
  long bad = 0;
  for (const Row &r : t) bad += r.host_bad + r.cuda_bad;
  assert_int_equal(bad, 0);
}

/* the wrapper's operand order and the eight-element packing */
void e2m1_wrapper(void **state) {
  (void)state;
  std::mt19937 rng(5);
  long bad = 0;
  for (int i = 0; i < 200000; ++i) {
    float a = u2f(rng()), b = u2f(rng());
    if (i & 1) a = (float)(rng() % 1000) / 128.0f - 4.0f, b = (float)(rng() % 1000) / 128.0f - 4.0f;
    unsigned d = fbf_cvt_e2m1x2(a, b);
    if (d != ((unsigned)fb_e2m1_encode_rn(a) << 4 | (unsigned)fb_e2m1_encode_rn(b)) && bad++ < 3)
      printf("    fbf_cvt_e2m1x2(0x%08x, 0x%08x) = 0x%02x\n", f2u(a), f2u(b), d);
  }
  for (int i = 0; i < 20000; ++i) {
    float av[8], enc = ldexpf(1.0f + (float)(rng() % 256) / 256.0f, (int)(rng() % 40) - 20);
    for (int j = 0; j < 8; ++j) av[j] = fabsf((float)(int)(rng() % 2001 - 1000)) * ldexpf(1.0f, (int)(rng() % 40) - 27);
    unsigned w = fbf_e2m1x8_hw(av, enc);
    for (int j = 0; j < 8; ++j)
      if (((w >> (4 * j)) & 15u) != fb_e2m1_encode_rn(av[j] * enc) && bad++ < 3) printf("    fbf_e2m1x8_hw: element %d of 0x%08x\n", j, w);
  }
  assert_int_equal(bad, 0);
}

/* ---- UE8M0 ---------------------------------------------------------------------------------------------------- */
void ue8m0_row(std::vector<Row> &t, const char *cls, const char *use, const std::function<void(std::vector<float> &)> &gen) {
  class_row(t, cls, use, gen, [](float x) { return fbm_cvt_rp_satfinite_ue8m0x2_f32(0.0f, fabsf(x)) & 0xFFu; }, /* as fbf_e8m0_up issues it */
            [](float x) { return (unsigned)fb_e8m0_encode_up(x); },
            [](float x) { return (unsigned)__nv_cvt_float_to_e8m0(fabsf(x), __NV_SATFINITE, cudaRoundPosInf); });
}

void ue8m0_classes(void **state) {
  (void)state;
  std::vector<Row> t;
  std::mt19937 rng(8);
  const char *HW = "cvt (fbf_e8m0_up, on |x|)";
  ue8m0_row(t, "+0 and -0", HW, [&](std::vector<float> &v) { v.push_back(0.0f), v.push_back(-0.0f); });
  ue8m0_row(t, "subnormals <= 2^-127", HW, [&](std::vector<float> &v) {
    for (uint32_t m = 1; m <= 0x400000u; m += 997) v.push_back(u2f(m));
    v.push_back(u2f(0x400000u));
  });
  ue8m0_row(t, "subnormals in (2^-127, 2^-126)", HW, [&](std::vector<float> &v) {
    for (uint32_t m = 0x400001u; m <= 0x7FFFFFu; m += 997) v.push_back(u2f(m));
    v.push_back(u2f(0x7FFFFFu));
  });
  ue8m0_row(t, "powers of two 2^-126 .. 2^127", HW, [&](std::vector<float> &v) {
    for (uint32_t e = 1; e < 255; ++e) v.push_back(u2f(e << 23));
  });
  ue8m0_row(t, "other normals, every exponent x 1024", HW, [&](std::vector<float> &v) {
    for (uint32_t e = 1; e < 255; ++e)
      for (int k = 0; k < 1024; ++k) v.push_back(u2f(e << 23 | (k < 2 ? (k ? 0x7FFFFFu : 1u) : 1u + (rng() % 0x7FFFFFu))));
  });
  ue8m0_row(t, "above 2^127 (satfinite)", HW, [&](std::vector<float> &v) {
    for (int k = 0; k < 1024; ++k) v.push_back(u2f(254u << 23 | (1u + (rng() % 0x7FFFFFu))));
  });
  ue8m0_row(t, "+-Inf", HW, [&](std::vector<float> &v) { v.push_back(INFINITY), v.push_back(-INFINITY); });
  ue8m0_row(t, "NaN (either sign)", HW, [&](std::vector<float> &v) {
    for (int k = 0; k < 1024; ++k) v.push_back(u2f((k & 1 ? 0xFF800000u : 0x7F800000u) | (1u + (rng() % 0x7FFFFFu))));
  });
  print_table("cvt.rp.satfinite.ue8m0x2.f32 (fbf_e8m0_up on sm_100a): the model against fb_e8m0_encode_up and the CUDA emulation", t);
  long bad = 0;
  for (const Row &r : t) bad += r.host_bad + r.cuda_bad;
  assert_int_equal(bad, 0);
}

/* ---- E4M3 ----------------------------------------------------------------------------------------------------- */
void e4m3_row(std::vector<Row> &t, const char *cls, const char *use, const std::function<void(std::vector<float> &)> &gen) {
  class_row(t, cls, use, gen, fbm_e4m3_rn_satfinite, [](float x) { return (unsigned)fb_e4m3_encode_rn(x); },
            [](float x) { return (unsigned)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); });
}

/* cvt.rn.satfinite.e4m3x2.f32's model against fb_e4m3_encode_rn and the CUDA emulation, per class; the sm_100a /
 * sm_103a kernels give the instruction every class, as the sm_90a ones do (fb_formats.h fbf_e4m3_rn / _x2_rn) */
void e4m3_classes(void **state) {
  (void)state;
  std::vector<Row> t;
  std::mt19937 rng(43);
  const char *HW = "cvt";
  for (int neg = 0; neg < 2; ++neg) {
    const float sg = neg ? -1.0f : 1.0f;
    e4m3_row(t, neg ? "-grid values (all 126 finite nonzero codes)" : "+grid values (all 126 finite nonzero codes)", HW,
             [&](std::vector<float> &v) { for (unsigned c = 1; c < 0x7F; ++c) v.push_back(sg * fb_e4m3_decode((uint8_t)c)); });
    e4m3_row(t, neg ? "-midpoints between codes (ties)" : "+midpoints between codes (ties)", HW, [&](std::vector<float> &v) {
      for (unsigned c = 0; c < 0x7E; ++c) v.push_back(sg * 0.5f * (fb_e4m3_decode((uint8_t)c) + fb_e4m3_decode((uint8_t)(c + 1))));
    });
    e4m3_row(t, neg ? "-ties' float neighbours (1-4 ulps)" : "+ties' float neighbours (1-4 ulps)", HW, [&](std::vector<float> &v) {
      for (unsigned c = 0; c < 0x7E; ++c) {
        float tie = 0.5f * (fb_e4m3_decode((uint8_t)c) + fb_e4m3_decode((uint8_t)(c + 1)));
        for (int k = 1; k <= 4; ++k) v.push_back(sg * u2f(f2u(tie) + k)), v.push_back(sg * u2f(f2u(tie) - k));
      }
    });
    e4m3_row(t, neg ? "-every float in [2^-10, 2^-5) (subnormal range)" : "+every float in [2^-10, 2^-5) (subnormal range)", HW,
             [&](std::vector<float> &v) { for (uint32_t u = f2u(0x1p-10f); u < f2u(0x1p-5f); u += 1) v.push_back(sg * u2f(u)); });
    e4m3_row(t, neg ? "-every 7th float in [2^-5, 512)" : "+every 7th float in [2^-5, 512)", HW,
             [&](std::vector<float> &v) { for (uint32_t u = f2u(0x1p-5f); u < f2u(512.0f); u += 7) v.push_back(sg * u2f(u)); });
    e4m3_row(t, neg ? "-normals: every exponent x 1024 mantissas" : "+normals: every exponent x 1024 mantissas", HW,
             [&](std::vector<float> &v) { push_normals(v, sg, 0x80000u, rng); });
    e4m3_row(t, neg ? "-saturation range (448, FLT_MAX]" : "+saturation range (448, FLT_MAX]", HW, [&](std::vector<float> &v) {
      for (uint32_t k = 1; k < 4096; k += 3) v.push_back(sg * u2f(f2u(448.0f) + k));
      for (float x : {460.0f, 464.0f, 464.00003f, 479.99997f, 480.0f, 500.0f, 512.0f, 1e10f, 3e38f, FLT_MAX}) v.push_back(sg * x);
    });
    e4m3_row(t, neg ? "-0" : "+0", HW, [&](std::vector<float> &v) { v.push_back(sg * 0.0f); });
    e4m3_row(t, neg ? "-below 2^-10 (to zero), f32 subnormals" : "+below 2^-10 (to zero), f32 subnormals", HW, [&](std::vector<float> &v) {
      for (uint32_t m : {1u, 2u, 0x400000u, 0x7FFFFFu}) v.push_back(sg * u2f(m));
      for (int k = 0; k < 4096; ++k) v.push_back(sg * u2f(1u + (rng() % (f2u(0x1p-10f) - 1u))));
    });
    e4m3_row(t, neg ? "-Inf" : "+Inf", HW, [&](std::vector<float> &v) { v.push_back(sg * INFINITY); });
    e4m3_row(t, neg ? "NaN, sign bit set" : "NaN, sign bit clear", HW, [&](std::vector<float> &v) {
      for (uint32_t p : {0x400000u, 0x000001u, 0x3FFFFFu, 0x7FFFFFu}) v.push_back(u2f((neg ? 0xFF800000u : 0x7F800000u) | p));
      for (int k = 0; k < 1024; ++k) v.push_back(u2f((neg ? 0xFF800000u : 0x7F800000u) | (1u + (rng() % 0x7FFFFFu))));
    });
  }
  e4m3_row(t, "all 2^32 patterns, every 4099th", "(the classes above)", [&](std::vector<float> &v) {
    for (uint64_t u = 0; u < (1ull << 32); u += 4099) v.push_back(u2f((uint32_t)u));
  });
  print_table("cvt.rn.satfinite.e4m3x2.f32: the model against fb_e4m3_encode_rn and the CUDA headers' emulation", t);
  long bad = 0;
  for (const Row &r : t) bad += r.host_bad + r.cuda_bad;
  /* the wrappers an emulated sm_100a kernel calls (FB_EMU_SM 100): fbf_e4m3x2_rn's operand order (lo -> bits 7:0, the
     instruction's b) and fbf_e4m3_rn, both through the model */
#if !defined(FBF_E4M3_MODEL)
#error "fb_formats.h does not route the emulated sm_100a build's E4M3 conversions to the model"
#endif
  for (int i = 0; i < 200000; ++i) {
    float a = u2f(rng()), b = u2f(rng());
    if (i & 1) a = (float)((int)(rng() % 20001) - 10000) / 16.0f, b = (float)((int)(rng() % 20001) - 10000) / 1024.0f;
    unsigned d = fbf_e4m3x2_rn(a, b), e = fbf_e4m3_rn(a);
    if ((d != ((unsigned)fb_e4m3_encode_rn(b) << 8 | (unsigned)fb_e4m3_encode_rn(a)) || e != fb_e4m3_encode_rn(a)) && bad++ < 3)
      printf("    fbf_e4m3x2_rn(0x%08x, 0x%08x) = 0x%04x, fbf_e4m3_rn = 0x%02x\n", f2u(a), f2u(b), d, e);
  }
  /* the model must not agree with a deliberately wrong reading (ties away from zero): the comparison can fail */
  long wrong = 0;
  for (unsigned c = 0; c < 0x7E; ++c) {
    float tie = 0.5f * (fb_e4m3_decode((uint8_t)c) + fb_e4m3_decode((uint8_t)(c + 1)));
    wrong += fbm_e4m3_rn_satfinite(tie) != c + 1;
  }
  printf("    ties away from zero would differ from the model on %ld of 126 ties\n", wrong);
  assert_true(wrong > 0);
  assert_int_equal(bad, 0);
}

/* ---- the sm_100a quantizers under the emulator ---------------------------------------------------------------- */
struct Kern {
  fb_kernel_spec k;
  fb_variant v;
  void *fn;
};
std::vector<Kern> kerns;
std::vector<void *> libs;
char tmpdir[64];

fb_kernel_spec qspec_kernel(const char *name, fb_gran outer, int four_over_six, int in_f32) {
  fb_kernel_spec k;
  memset(&k, 0, sizeof k);
  k.op = FB_OP_QUANT, k.q.format = FB_FMT_NVFP4, k.q.outer = outer, k.q.four_over_six = four_over_six, k.q.rounding = FB_ROUND_RN;
  k.in_f32 = in_f32;
  snprintf(k.family, sizeof k.family, "quant");
  snprintf(k.name, sizeof k.name, "%s", name);
  return k;
}

/* generate the variant with these tune values, compile it as the emulator's sm_100a build (FB_EMU_SM=100), load it */
int add_kernel(const fb_kernel_spec &k, std::vector<std::pair<const char *, int>> params) {
  Kern e;
  e.k = k, e.fn = NULL;
  if (!fbemu_one_variant(k, params, &e.v)) return 0;
  char *src = NULL;
  if (fb_gen_source(&e.k, &e.v, "tests/test_cvt_model.cpp", "-", &src) != FB_OK) { printf("    %s\n", fb_errmsg()); return 0; }
  std::string f = std::string(tmpdir) + "/" + e.v.name + ".cpp", so = std::string(tmpdir) + "/" + e.v.name + ".so";
  FILE *o = fopen(f.c_str(), "w");
  if (!o) return 0;
  fputs(src, o);
  fclose(o);
  free(src);
  const char *cxx = getenv("CXX") && *getenv("CXX") ? getenv("CXX") : "g++";
  std::string cmd = std::string(cxx) + " -std=c++17 -O1 -fPIC -shared -ffp-contract=off -w -fsanitize=undefined -fno-sanitize-recover=all "
                    "-DFBEMU_KERNEL -DFB_EMU_SM=100 -include tests/emu/fb_emu.h -Itemplates -o " + so + " " + f;
  if (system(cmd.c_str()) != 0) { printf("    compiling %s failed: %s\n", e.v.name, cmd.c_str()); return 0; }
  void *h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) { printf("    dlopen: %s\n", dlerror()); return 0; }
  fbemu_api **tab = (fbemu_api **)dlsym(h, "fbemu_table");
  e.fn = dlsym(h, e.v.name);
  if (!tab || !e.fn) { printf("    %s: symbols missing\n", e.v.name); return 0; }
  *tab = &fbemu::api;
  libs.push_back(h);
  kerns.push_back(e);
  return 1;
}

uint16_t bf16_bits(float x) { /* RNE, NaN kept quiet */
  uint32_t u = f2u(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* rows of every kind (row r: kind r % 8), rounded to BF16 unless f32 */
std::vector<float> make_rows(long long R, long long C, int f32, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x((size_t)(R * C));
  static const float sp[] = {NAN, INFINITY, -INFINITY, -0.0f, 1e-40f, -3e-39f, 0.0f};
  for (long long r = 0; r < R; ++r)
    for (long long c = 0; c < C; ++c) {
      float v = g(rng);
      switch (r % 8) {
      case 1: v *= ldexpf(1.0f, (int)((c / 16) % 41) - 20); break;                      /* wide range, block by block */
      case 2: v = c == 0 ? 1536.0f : (c % 16 == 1 ? 6.0f : (rng() & 1 ? -1.0f : 1.0f) * (rng() & 1 ? kTies[rng() % 7] : kGrid[rng() % 7])); break;
      case 3: if (c % 13 == 0) v = sp[(c / 13) % 7]; break;                                 /* specials */
      case 4: v = c & 1 ? -0.0f : 0.0f; break;                                               /* zeros */
      case 5: v *= 1e-38f; break;                                                            /* tiny row: S_dec far out */
      case 6: v *= 1e37f; break;                                                             /* huge row */
      case 7: if ((c / 16) % 3 == 0) v *= 1e-12f; break;                                    /* underflowing blocks */
      default: break;
      }
      x[(size_t)(r * C + c)] = v;
    }
  if (!f32)
    for (float &v : x) v = u2f((uint32_t)bf16_bits(v) << 16);
  return x;
}

long run_quant(const Kern &k, long long R, long long C, unsigned seed) {
  const int f32 = k.k.in_f32, outer = k.k.q.outer;
  std::vector<float> x = make_rows(R, C, f32, seed);
  const unsigned ng = outer == FB_GRAN_EXPERT ? 4u : 1u;
  std::vector<size_t> offs(ng + 1);
  std::vector<long long> offl(ng + 1);
  for (unsigned g = 0; g <= ng; ++g) offs[g] = (size_t)(g == ng ? R : (R * g) / ng - (g == 1 ? 3 : 0)), offl[g] = (long long)offs[g];
  fb_nvfp4_opts o;
  memset(&o, 0, sizeof o);
  o.outer = outer == FB_GRAN_TOKEN ? FB_OUTER_ROW : outer == FB_GRAN_EXPERT ? FB_OUTER_GROUP : FB_OUTER_TENSOR;
  o.group_offsets = offs.data(), o.ngroups = ng, o.four_over_six = k.k.q.four_over_six, o.rounding = FB_ROUND_RN;
  const size_t n = (size_t)(R * C), ns = fb_nvfp4_nouter(&o, (size_t)R);
  std::vector<uint8_t> rc(n / 2), rs(n / 16);
  std::vector<float> rd(ns);
  assert_int_equal(fb_nvfp4_quantize(x.data(), (size_t)R, (size_t)C, &o, rc.data(), rs.data(), rd.data(), NULL), FB_OK);
  /* the amax pass's result for tensor / group outer scales (NaN ignored, as the reference) */
  std::vector<float> am(ng, 0.0f);
  for (unsigned g = 0; g < ng; ++g)
    for (size_t i = (ng > 1 ? offs[g] : 0) * (size_t)C; i < (ng > 1 ? offs[g + 1] : (size_t)R) * (size_t)C; ++i) am[g] = fmaxf(am[g], fabsf(x[i]));
  std::vector<uint16_t> xb(f32 ? 0 : n);
  for (size_t i = 0; i < xb.size(); ++i) xb[i] = bf16_bits(x[i]);
  std::vector<uint8_t> gc(n / 2, 0xA5), gs(n / 16, 0xA5);
  std::vector<float> gd(ns, -1.0f);
  fb_kp_mem p;
  memset(&p, 0, sizeof p);
  p.in = f32 ? (fb_dptr)(uintptr_t)x.data() : (fb_dptr)(uintptr_t)xb.data();
  p.out = (fb_dptr)(uintptr_t)gc.data(), p.scales = (fb_dptr)(uintptr_t)gs.data(), p.s_dec = (fb_dptr)(uintptr_t)gd.data();
  p.amax = (fb_dptr)(uintptr_t)am.data(), p.group_offsets = (fb_dptr)(uintptr_t)offl.data();
  p.rows = R, p.cols = C, p.ngroups = ng;
  unsigned gx, gy, nt;
  assert_int_equal(fb_launch_dims(&k.k, &k.v, R, C, ng, &gx, &gy, &nt), FB_OK);
  void (*fn)(fb_kp_mem) = (void (*)(fb_kp_mem))k.fn;
  const char *err = fbemu::run_grid(gx, gy, nt, [fn, p] { fn(p); });
  if (err) { printf("    %s: %s\n", k.v.name, err); return 1; }
  long bad = 0;
  for (size_t i = 0; i < n / 2; ++i)
    if (gc[i] != rc[i] && bad++ < 5) printf("    %s: codes byte %zu (row %zu): 0x%02x, reference 0x%02x\n", k.v.name, i, 2 * i / (size_t)C, gc[i], rc[i]);
  for (size_t i = 0; i < n / 16; ++i)
    if (gs[i] != rs[i] && bad++ < 5) printf("    %s: scale %zu: 0x%02x, reference 0x%02x\n", k.v.name, i, gs[i], rs[i]);
  for (size_t i = 0; i < ns; ++i)
    if (f2u(gd[i]) != f2u(rd[i]) && bad++ < 5) printf("    %s: s_dec %zu: %a, reference %a\n", k.v.name, i, gd[i], rd[i]);
  printf("    %-44s %lld x %lld: %zu code bytes, %zu scales, %zu S_dec: %ld wrong\n", k.v.name, R, C, n / 2, n / 16, ns, bad);
  return bad;
}

void quant_sm100a(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/fb_cvt_XXXXXX");
  assert_non_null(mkdtemp(tmpdir));
  int ok = add_kernel(qspec_kernel("quant_nvfp4_4o6_tok_row_sm100a", FB_GRAN_TOKEN, 1, 0), {{"rows", 4}, {"threads", 128}}) &&
           add_kernel(qspec_kernel("quant_nvfp4_4o6_tok_row_sm100a", FB_GRAN_TOKEN, 1, 0), {{"rows", 4}, {"stage", 1}, {"threads", 128}}) &&
           add_kernel(qspec_kernel("quant_nvfp4_ten_row_sm100a", FB_GRAN_TENSOR, 0, 0), {{"rows", 4}, {"threads", 128}}) &&
           add_kernel(qspec_kernel("quant_nvfp4_exp_f32_row_sm100a", FB_GRAN_EXPERT, 0, 1), {{"rows", 4}, {"threads", 128}});
  assert_true(ok);
  long bad = 0;
  for (const Kern &k : kerns) {
    bad += run_quant(k, 24, 1536, 3);
    bad += run_quant(k, 40, 64, 11);
  }
  for (void *h : libs) dlclose(h);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd)) {}
  fbemu::free_stacks();
  assert_int_equal(bad, 0);
}
} // namespace

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(e2m1_classes),
      cmocka_unit_test(e2m1_wrapper),
      cmocka_unit_test(ue8m0_classes),
      cmocka_unit_test(e4m3_classes),
      cmocka_unit_test(quant_sm100a),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
