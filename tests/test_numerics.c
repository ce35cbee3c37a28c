/* test_numerics.c — runtime/numerics.c (the CPU reference of every format) checked against
 * docs/numerics.md, with every expected value computed here independently of the library:
 * decoders from the bit layout, RN by nearest-grid search (ties to the even code), SR from the
 * step/m/frac definition, NVFP4 / MXFP8 / S2F6 block quantizers written out formula by formula.
 *
 *   decode       exhaustive tables: E2M1, E4M3, E5M2, E8M0, S2F6.
 *   encode       round trips on every code (RN and SR for all 256 r; E8M0 rounded-up rule), RN tie
 *                points and midpoints, satfinite, NaN, signed zero, random floats vs reference.
 *   sr           the docs/numerics.md definition on hand cases and on random x for all r; unbiasedness:
 *                mean over all 256 r == value with frac(m) truncated to 8 bits (exact), and the mean
 *                over Philox-drawn r within a Bernstein bound of x.
 *   nvfp4        bit-exact vs an independent reference for outer tensor / row / group, RN and SR;
 *                dequantize; 2D tiles vs transpose; Four Over Six (MSE reduction on Gaussian,
 *                Laplace and Student-t(3) data, and the per-block sf4/sf6 choice); SR mean; specials.
 *   mxfp8        row-wise vs reference, column-wise == row-wise of the transpose (RN and SR), scale
 *                rule and no saturation, SR mean, specials (zero, NaN, Inf, denormal, huge).
 *   requant      NVFP4 / MXFP8 -> transposed MXFP8 == dequantize + column-wise quantize (bit for
 *                bit), and E[requantized] == the dequantized forward value.
 *   rht / s2f6   H32 structure, inverse, bit-exact FWHT stage order, block exponent rule, S2F6
 *                quantize / dequantize vs reference, half-step bound, RHT error reduction.
 *   errors       invalid arguments -> FB_EINVAL with a message.
 *
 * Mismatches are counted and the first few printed (input, expected, actual) before the test's
 * assertion fails, so a failure names its input.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fourbit.h"
#include "fb_error.h"  /* fb_clearerr: so that "a message was left" means this call left it */
#include "fb_philox.h"

#include "test_util.h" /* EXPECT, BEGIN, END, f2u, u2f, same_f, xmalloc, xcalloc, rng_t, rng_next, rng_u01, rng_int */

/* ---- Box-Muller normals and heavier tails, from the seeded generator ------------------------- */
static double rng_normal(rng_t *g) {
  double u1 = rng_u01(g), u2 = rng_u01(g);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
static double rng_laplace(rng_t *g) {
  double e = -log(rng_u01(g));
  return (rng_next(g) & 1) ? e : -e;
}
static double rng_student3(rng_t *g) {
  double z = rng_normal(g), a = rng_normal(g), b = rng_normal(g), c = rng_normal(g);
  return z / sqrt((a * a + b * b + c * c) / 3.0);
}

/* ---- element formats, from the bit layout --------------------------------------------------- */
enum { F_E2M1 = 0, F_E4M3 = 1, F_E5M2 = 2 };
typedef struct {
  const char *name;
  int ebits, mbits, bias;
  unsigned ncodes, maxcode, signbit, nan_code;
  double maxv, min_normal, sub_step;
} fmt_t;
static const fmt_t FMT[3] = {
    {"e2m1", 2, 1, 1, 16, 0x7, 0x8, 0x7, 6.0, 1.0, 0.5},
    {"e4m3", 4, 3, 7, 256, 0x7E, 0x80, 0x7F, 448.0, 0x1p-6, 0x1p-9},
    {"e5m2", 5, 2, 15, 256, 0x7B, 0x80, 0x7F, 57344.0, 0x1p-14, 0x1p-16},
};

/* value = (-1)^s * 2^(e-bias) * (1 + m/2^mbits), subnormal (e = 0): 2^(1-bias) * m/2^mbits. */
static double ref_decode(int f, unsigned c) {
  const fmt_t *F = &FMT[f];
  unsigned nb = 1u + (unsigned)F->ebits + (unsigned)F->mbits;
  unsigned s = (c >> (nb - 1)) & 1u, e = (c >> F->mbits) & ((1u << F->ebits) - 1u);
  unsigned m = c & ((1u << F->mbits) - 1u);
  if (f == F_E4M3 && e == 15 && m == 7) return NAN;
  if (f == F_E5M2 && e == 31) return m ? NAN : (s ? -INFINITY : INFINITY);
  double v = e == 0 ? ldexp((double)m, 1 - F->bias - F->mbits)
                    : ldexp(1.0 + ldexp((double)m, -F->mbits), (int)e - F->bias);
  return s ? -v : v;
}
static float ref_decode_f(int f, unsigned c) { return (float)ref_decode(f, c); }

static float lib_decode(int f, uint8_t c) {
  return f == F_E2M1 ? fb_e2m1_decode(c) : f == F_E4M3 ? fb_e4m3_decode(c) : fb_e5m2_decode(c);
}
static uint8_t lib_rn(int f, float x) {
  return f == F_E2M1 ? fb_e2m1_encode_rn(x) : f == F_E4M3 ? fb_e4m3_encode_rn(x) : fb_e5m2_encode_rn(x);
}
static uint8_t lib_sr(int f, float x, uint8_t r) {
  return f == F_E2M1 ? fb_e2m1_encode_sr(x, r)
       : f == F_E4M3 ? fb_e4m3_encode_sr(x, r) : fb_e5m2_encode_sr(x, r);
}

/* RN, ties to the even code, satfinite; a negative value keeps its sign bit. */
static uint8_t ref_rn(int f, float xf) {
  const fmt_t *F = &FMT[f];
  if (isnan(xf)) return (uint8_t)F->nan_code;
  unsigned sb = signbit(xf) ? F->signbit : 0u;
  double a = fabs((double)xf);
  if (a >= F->maxv) return (uint8_t)(sb | F->maxcode);
  unsigned lo = 0, hi = F->maxcode; /* decode(lo) <= a < decode(hi) */
  while (hi - lo > 1) {
    unsigned mid = (lo + hi) / 2;
    if (ref_decode(f, mid) <= a) lo = mid; else hi = mid;
  }
  double dl = a - ref_decode(f, lo), dh = ref_decode(f, hi) - a;
  unsigned c = dl < dh ? lo : dh < dl ? hi : ((lo & 1u) ? hi : lo);
  return (uint8_t)(sb | c);
}

/* The SR definition of docs/numerics.md with k = 8: step = spacing of |x|'s binade (subnormal spacing
 * below min normal), m = |x|/step, up = floor(frac(m)*256) + r >= 256, q = min((floor(m)+up)*step,
 * max), copysign. Inf saturates (satfinite), NaN follows RN. Exact in double. */
static double sr_step(int f, double a) {
  const fmt_t *F = &FMT[f];
  if (a < F->min_normal) return F->sub_step;
  int E;
  frexp(a, &E); /* a = fr * 2^E, fr in [0.5, 1): binade 2^(E-1) */
  return ldexp(1.0, E - 1 - F->mbits);
}
static uint8_t ref_sr(int f, float xf, unsigned r) {
  const fmt_t *F = &FMT[f];
  if (isnan(xf)) return (uint8_t)F->nan_code;
  unsigned sb = signbit(xf) ? F->signbit : 0u;
  double a = fabs((double)xf);
  if (isinf(a)) return (uint8_t)(sb | F->maxcode);
  double step = sr_step(f, a), m = a / step, fl = floor(m), t = floor((m - fl) * 256.0);
  double q = (fl + (t + r >= 256.0 ? 1.0 : 0.0)) * step;
  if (q > F->maxv) q = F->maxv;
  return (uint8_t)(sb | ref_rn(f, (float)q)); /* q is on the grid: RN returns its code */
}
/* Mean of decode(SR(x, r)) over r = 0..255: frac(m) truncated to 8 bits (|x| <= max). */
static double sr_trunc_mean(int f, float xf) {
  double a = fabs((double)xf), step = sr_step(f, a), m = a / step, fl = floor(m);
  double v = (fl + floor((m - fl) * 256.0) / 256.0) * step;
  return signbit(xf) ? -v : v;
}

/* E8M0: smallest e in [0, 254] with 2^(e-127) >= v (254 if none); NaN -> 0xFF, Inf -> 0xFE. */
static uint8_t ref_e8m0_up(float v) {
  if (isnan(v)) return 0xFF;
  if (isinf(v)) return 0xFE;
  if (v <= 0.0f) return 0x00;
  int E;
  double fr = frexp((double)v, &E); /* v = fr * 2^E */
  int e = (fr == 0.5 ? E - 1 : E) + 127;
  return (uint8_t)(e < 0 ? 0 : e > 254 ? 254 : e);
}

/* Draws in an interval of width `range` with variance var: |mean of N - E| <= this bound except
 * with probability about 2e-11 (Bernstein, exponent 25). */
static double mean_bound(double var, double range, double n) {
  return sqrt(50.0 * var / n) + 17.0 * range / n;
}

/* ---- NVFP4 reference -------------------------------------------------------------------------- */
static unsigned nib(const uint8_t *codes, size_t i) { return (codes[i / 2] >> ((i & 1) * 4)) & 0xFu; }

static size_t ref_nouter(const fb_nvfp4_opts *o, size_t rows) {
  return o->outer == FB_OUTER_TENSOR ? 1 : o->outer == FB_OUTER_ROW ? rows : o->ngroups;
}
static size_t ref_group(const fb_nvfp4_opts *o, size_t r) {
  if (o->outer == FB_OUTER_TENSOR) return 0;
  if (o->outer == FB_OUTER_ROW) return r;
  for (size_t g = 0; g < o->ngroups; ++g)
    if (r < o->group_offsets[g + 1]) return g;
  return o->ngroups - 1;
}
/* S_enc = min(6*M / A, FLT_MAX), M = 448 (256 with Four Over Six); A == 0 or S_enc == 0 -> 1. */
static float ref_s_enc(float A, int fos) {
  float s = (fos ? 6.0f * 256.0f : 6.0f * 448.0f) / A;
  if (A == 0.0f || s == 0.0f) return 1.0f;
  return s > FLT_MAX ? FLT_MAX : s;
}
/* One block with scale code sfc: enc = min(1/(float(sf)*S_dec), FLT_MAX), q = e2m1(x*enc);
 * sf == 0 -> +0 codes. i0 = row-major index of the block's first element (SR). */
static void ref_nvfp4_block(const float *xs, uint8_t sfc, float sd, const fb_nvfp4_opts *o,
                            size_t i0, uint8_t q[16]) {
  float enc = 1.0f / (ref_decode_f(F_E4M3, sfc) * sd);
  if (enc > FLT_MAX) enc = FLT_MAX;
  for (int i = 0; i < 16; ++i) {
    if (sfc == 0) { q[i] = 0; continue; }
    float v = xs[i] * enc;
    q[i] = o->rounding == FB_ROUND_SR ? ref_sr(F_E2M1, v, fb_sr_bits(o->seed, o->stream, o->step, i0 + (size_t)i))
                                      : ref_rn(F_E2M1, v);
  }
}
/* Four Over Six error: x^ = (e2m1(q)*sf)*S_dec, d = x^ - x, err = fmaf(d, d, err), index order. */
static float ref_blk_err(const float *xs, const uint8_t q[16], uint8_t sfc, float sd) {
  float sff = ref_decode_f(F_E4M3, sfc), err = 0.0f;
  for (int i = 0; i < 16; ++i) {
    float xh = (ref_decode_f(F_E2M1, q[i]) * sff) * sd;
    float d = xh - xs[i];
    err = fmaf(d, d, err);
  }
  return err;
}
static void ref_nvfp4_quantize(const float *x, size_t rows, size_t cols, const fb_nvfp4_opts *o,
                               uint8_t *codes, uint8_t *sf, float *sdec, uint8_t *chose4) {
  size_t ng = ref_nouter(o, rows), nb = cols / 16;
  float *A = xcalloc(ng * sizeof *A);
  for (size_t r = 0; r < rows; ++r) {
    size_t g = ref_group(o, r);
    for (size_t c = 0; c < cols; ++c) {
      float a = fabsf(x[r * cols + c]);
      if (a > A[g]) A[g] = a; /* NaN ignored */
    }
  }
  for (size_t g = 0; g < ng; ++g) sdec[g] = 1.0f / ref_s_enc(A[g], o->four_over_six);
  memset(codes, 0, rows * cols / 2);
  for (size_t r = 0; r < rows; ++r) {
    size_t g = ref_group(o, r);
    float se = ref_s_enc(A[g], o->four_over_six), sd = sdec[g], k = se * (1.0f / 6.0f);
    for (size_t b = 0; b < nb; ++b) {
      float ab = 0.0f;
      size_t r0 = o->two_d ? r / 16 * 16 : r, r1 = o->two_d ? r0 + 16 : r + 1;
      for (size_t rr = r0; rr < r1 && rr < rows; ++rr)
        for (size_t i = 0; i < 16; ++i) {
          float a = fabsf(x[rr * cols + b * 16 + i]);
          if (a > ab) ab = a;
        }
      float base = ab * k;
      size_t i0 = r * cols + b * 16;
      const float *xs = x + i0;
      uint8_t q6[16], q4[16], s6, s4 = 0;
      int pick4 = 0;
      if (!o->four_over_six) {
        s6 = ref_rn(F_E4M3, base);
        ref_nvfp4_block(xs, s6, sd, o, i0, q6);
      } else {
        s6 = ref_rn(F_E4M3, fminf(base, 448.0f));
        s4 = ref_rn(F_E4M3, fminf(1.5f * base, 448.0f));
        ref_nvfp4_block(xs, s6, sd, o, i0, q6);
        ref_nvfp4_block(xs, s4, sd, o, i0, q4);
        pick4 = ref_blk_err(xs, q4, s4, sd) < ref_blk_err(xs, q6, s6, sd);
      }
      const uint8_t *q = pick4 ? q4 : q6;
      sf[r * nb + b] = pick4 ? s4 : s6;
      if (chose4) chose4[r * nb + b] = (uint8_t)pick4;
      for (size_t i = 0; i < 16; ++i) codes[(i0 + i) / 2] |= (uint8_t)((q[i] & 0xFu) << (((i0 + i) & 1) * 4));
    }
  }
  free(A);
}
static void ref_nvfp4_dequantize(const uint8_t *codes, const uint8_t *sf, const float *sdec, size_t rows,
                                 size_t cols, const fb_nvfp4_opts *o, float *y) {
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) {
      size_t i = r * cols + c;
      y[i] = (ref_decode_f(F_E2M1, nib(codes, i)) * ref_decode_f(F_E4M3, sf[i / 16])) * sdec[ref_group(o, r)];
    }
}

typedef struct {
  uint8_t *codes, *sf, *c4;
  float *sdec, *y;
} nv_buf;
static nv_buf nv_alloc(size_t rows, size_t cols, size_t nouter) {
  nv_buf b = {xcalloc(rows * cols / 2), xcalloc(rows * cols / 16), xcalloc(rows * cols / 16),
              xcalloc((nouter ? nouter : 1) * sizeof(float)), xcalloc(rows * cols * sizeof(float))};
  return b;
}
static void nv_free(nv_buf *b) { free(b->codes); free(b->sf); free(b->c4); free(b->sdec); free(b->y); }

/* Compare library output (L) with reference (R); rows [r0, r1) only. Returns mismatches. */
static long nv_compare(const char *tag, const float *x, size_t rows, size_t cols, const fb_nvfp4_opts *o,
                       const nv_buf *L, const nv_buf *R, size_t r0, size_t r1, int check_c4) {
  long before = g_fail;
  for (size_t g = 0; g < ref_nouter(o, rows); ++g)
    EXPECT(same_f(L->sdec[g], R->sdec[g]), "%s: s_dec[%zu] lib %a ref %a", tag, g, (double)L->sdec[g],
           (double)R->sdec[g]);
  for (size_t r = r0; r < r1; ++r)
    for (size_t b = 0; b < cols / 16; ++b) {
      size_t s = r * (cols / 16) + b;
      EXPECT(L->sf[s] == R->sf[s], "%s: sf row %zu block %zu lib 0x%02x ref 0x%02x", tag, r, b, L->sf[s], R->sf[s]);
      if (check_c4)
        EXPECT(L->c4[s] == R->c4[s], "%s: chose4 row %zu block %zu lib %u ref %u", tag, r, b, L->c4[s], R->c4[s]);
      for (size_t i = 0; i < 16; ++i) {
        size_t e = r * cols + b * 16 + i;
        EXPECT(nib(L->codes, e) == nib(R->codes, e), "%s: code (%zu,%zu) x=%a lib 0x%x ref 0x%x (sf 0x%02x)", tag,
               r, b * 16 + i, (double)x[e], nib(L->codes, e), nib(R->codes, e), R->sf[s]);
      }
    }
  return g_fail - before;
}

/* ---- MXFP8 reference ---------------------------------------------------------------------------- */
/* Row-wise: a_b = max |x| over 32 (NaN -> NaN), e_b = ceil_e8m0(a_b * (1/448.f)), inv = 2^(127-e_b),
 * q = e4m3(x * inv), RN or SR with r from the row-major output index. */
static void ref_mx_rowwise(const float *x, size_t rows, size_t cols, const fb_sr_opts *ro, uint8_t *codes,
                           uint8_t *e8) {
  for (size_t r = 0; r < rows; ++r)
    for (size_t b = 0; b < cols / 32; ++b) {
      const float *xs = x + r * cols + b * 32;
      float ab = 0.0f;
      int nan = 0;
      for (int i = 0; i < 32; ++i) {
        if (isnan(xs[i])) nan = 1;
        else if (fabsf(xs[i]) > ab) ab = fabsf(xs[i]);
      }
      if (nan) ab = NAN;
      uint8_t e = ref_e8m0_up(ab * (1.0f / 448.0f));
      float inv = ldexpf(1.0f, 127 - (int)e);
      e8[r * (cols / 32) + b] = e;
      for (size_t i = 0; i < 32; ++i) {
        size_t idx = r * cols + b * 32 + i;
        float v = xs[i] * inv;
        codes[idx] = ro->rounding == FB_ROUND_SR ? ref_sr(F_E4M3, v, fb_sr_bits(ro->seed, ro->stream, ro->step, idx))
                                                 : ref_rn(F_E4M3, v);
      }
    }
}
static float ref_mx_deq(uint8_t q, uint8_t e) { return ref_decode_f(F_E4M3, q) * ldexpf(1.0f, (int)e - 127); }
static void transpose(const float *x, size_t rows, size_t cols, float *t) {
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
}

/* ---- RHT / S2F6 reference ------------------------------------------------------------------------ */
static void ref_fwht(float v[32]) {
  for (int k = 0; k < 5; ++k) {
    int h = 1 << k;
    for (int i = 0; i < 32; ++i)
      if (!(i & h)) {
        float u = v[i], w = v[i + h];
        v[i] = u + w;
        v[i + h] = u - w;
      }
  }
}
static void ref_rht_fwd(const float *x, uint32_t s, float *y) {
  for (int i = 0; i < 32; ++i) y[i] = ((s >> i) & 1u) ? -x[i] : x[i];
  ref_fwht(y);
}
static void ref_rht_inv(const float *y, uint32_t s, float *x) {
  float t[32];
  memcpy(t, y, sizeof t);
  ref_fwht(t);
  for (int i = 0; i < 32; ++i) {
    float v = t[i] / 32.0f;
    x[i] = ((s >> i) & 1u) ? -v : v;
  }
}
static uint8_t ref_s2f6_exp(float amax) {
  for (int e = 0; e <= 254; ++e)
    if ((double)amax <= 127.0 / 64.0 * ldexp(1.0, e - 127)) return (uint8_t)e;
  return 254;
}
static void ref_s2f6_quantize(const float *x, size_t rows, size_t cols, int rht, uint32_t s, int8_t *q, uint8_t *e8) {
  for (size_t b = 0; b < rows * cols / 32; ++b) {
    float y[32];
    if (rht) ref_rht_fwd(x + b * 32, s, y); else memcpy(y, x + b * 32, sizeof y);
    float a = 0.0f;
    for (int i = 0; i < 32; ++i)
      if (fabsf(y[i]) > a) a = fabsf(y[i]);
    uint8_t e = ref_s2f6_exp(a);
    float sc = ldexpf(1.0f, (int)e - 127);
    e8[b] = e;
    for (int i = 0; i < 32; ++i) {
      float t = rintf(y[i] / sc * 64.0f);
      q[b * 32 + i] = (int8_t)(t > 127.0f ? 127 : t < -127.0f ? -127 : (int)t);
    }
  }
}
static void ref_s2f6_dequantize(const int8_t *q, const uint8_t *e8, size_t rows, size_t cols, int rht, uint32_t s,
                                float *x) {
  for (size_t b = 0; b < rows * cols / 32; ++b) {
    float y[32], sc = ldexpf(1.0f, (int)e8[b] - 127);
    for (int i = 0; i < 32; ++i) y[i] = (float)q[b * 32 + i] / 64.0f * sc;
    if (rht) ref_rht_inv(y, s, x + b * 32); else memcpy(x + b * 32, y, sizeof y);
  }
}

/* =================================================================================================
 * decode tables
 * ================================================================================================= */
static void test_decode_tables(void **state) {
  (void)state;
  BEGIN();
  static const float e2m1_vals[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (unsigned c = 0; c < 16; ++c) {
    float want = (c & 8) ? -e2m1_vals[c & 7] : e2m1_vals[c & 7];
    EXPECT(same_f(fb_e2m1_decode((uint8_t)c), want), "e2m1 decode 0x%x lib %a want %a", c,
           (double)fb_e2m1_decode((uint8_t)c), (double)want);
    EXPECT(same_f(ref_decode_f(F_E2M1, c), want), "e2m1 bit-layout formula 0x%x", c);
    /* only the low 4 bits count */
    EXPECT(same_f(fb_e2m1_decode((uint8_t)(c | 0xF0)), want), "e2m1 decode ignores high nibble 0x%x", c);
  }
  unsigned nnan[3] = {0, 0, 0}, ninf[3] = {0, 0, 0};
  for (int f = F_E4M3; f <= F_E5M2; ++f)
    for (unsigned c = 0; c < 256; ++c) {
      float want = ref_decode_f(f, c), got = lib_decode(f, (uint8_t)c);
      EXPECT(same_f(got, want), "%s decode 0x%02x lib %a want %a", FMT[f].name, c, (double)got, (double)want);
      if (isnan(got)) ++nnan[f];
      if (isinf(got)) ++ninf[f];
    }
  /* anchors of the table in docs/numerics.md */
  EXPECT(fb_e4m3_decode(0x7E) == 448.0f && fb_e4m3_decode(0xFE) == -448.0f, "e4m3 max");
  EXPECT(fb_e4m3_decode(0x08) == 0x1p-6f && fb_e4m3_decode(0x01) == 0x1p-9f, "e4m3 min normal/subnormal");
  EXPECT(isnan(fb_e4m3_decode(0x7F)) && isnan(fb_e4m3_decode(0xFF)), "e4m3 NaN");
  EXPECT(nnan[F_E4M3] == 2 && ninf[F_E4M3] == 0, "e4m3: %u NaN codes, %u Inf codes", nnan[F_E4M3], ninf[F_E4M3]);
  EXPECT(fb_e5m2_decode(0x7B) == 57344.0f, "e5m2 max");
  EXPECT(fb_e5m2_decode(0x7C) == INFINITY && fb_e5m2_decode(0xFC) == -INFINITY, "e5m2 Inf");
  EXPECT(nnan[F_E5M2] == 6 && ninf[F_E5M2] == 2, "e5m2: %u NaN codes, %u Inf codes", nnan[F_E5M2], ninf[F_E5M2]);
  EXPECT(fb_e5m2_decode(0x01) == 0x1p-16f && fb_e5m2_decode(0x04) == 0x1p-14f, "e5m2 min subnormal/normal");
  for (unsigned e = 0; e < 256; ++e) {
    float got = fb_e8m0_decode((uint8_t)e);
    if (e == 255) EXPECT(isnan(got), "e8m0 0xFF must be NaN, got %a", (double)got);
    else EXPECT(same_f(got, (float)ldexp(1.0, (int)e - 127)), "e8m0 decode %u lib %a", e, (double)got);
  }
  EXPECT(fb_e8m0_decode(127) == 1.0f && fb_e8m0_decode(0) == 0x1p-127f && fb_e8m0_decode(254) == 0x1p127f, "e8m0 anchors");
  for (int q = -128; q < 128; ++q)
    EXPECT(same_f(fb_s2f6_decode((int8_t)q), (float)q / 64.0f), "s2f6 decode %d lib %a", q,
           (double)fb_s2f6_decode((int8_t)q));
  EXPECT(fb_s2f6_decode(-128) == -2.0f && fb_s2f6_decode(127) == 1.984375f, "s2f6 range");
  printf("    decoded 16 e2m1, 256 e4m3 (%u NaN), 256 e5m2 (%u NaN, %u Inf), 256 e8m0, 256 s2f6 codes\n",
         nnan[F_E4M3], nnan[F_E5M2], ninf[F_E5M2]);
  END();
}

/* =================================================================================================
 * encode: round trips, ties, satfinite, random vs reference
 * ================================================================================================= */
static void test_encode_roundtrip(void **state) {
  (void)state;
  BEGIN();
  long n_rn = 0, n_sr = 0;
  for (int f = F_E2M1; f <= F_E5M2; ++f)
    for (unsigned c = 0; c < FMT[f].ncodes; ++c) {
      float v = lib_decode(f, (uint8_t)c);
      if (isnan(v)) continue;
      uint8_t want = (uint8_t)c;
      if (isinf(v)) want = (uint8_t)((c & FMT[f].signbit) | FMT[f].maxcode); /* satfinite: Inf -> max */
      uint8_t got = lib_rn(f, v);
      EXPECT(got == want, "%s rn(decode(0x%02x) = %a) = 0x%02x, want 0x%02x", FMT[f].name, c, (double)v, got, want);
      ++n_rn;
      for (unsigned r = 0; r < 256; ++r) {
        uint8_t s = lib_sr(f, v, (uint8_t)r);
        EXPECT(s == want, "%s sr(decode(0x%02x) = %a, r=%u) = 0x%02x, want 0x%02x", FMT[f].name, c, (double)v, r, s,
               want);
        ++n_sr;
      }
    }
  /* negative zero codes specifically */
  EXPECT(fb_e2m1_encode_rn(-0.0f) == 0x8 && fb_e4m3_encode_rn(-0.0f) == 0x80 && fb_e5m2_encode_rn(-0.0f) == 0x80,
         "-0 keeps its sign: e2m1 0x%x e4m3 0x%02x e5m2 0x%02x", fb_e2m1_encode_rn(-0.0f), fb_e4m3_encode_rn(-0.0f),
         fb_e5m2_encode_rn(-0.0f));
  EXPECT(fb_e2m1_encode_rn(0.0f) == 0 && fb_e4m3_encode_rn(0.0f) == 0 && fb_e5m2_encode_rn(0.0f) == 0, "+0");
  long n_e8 = 0;
  for (unsigned e = 0; e < 255; ++e) {
    uint8_t got = fb_e8m0_encode_up(fb_e8m0_decode((uint8_t)e));
    EXPECT(got == e, "e8m0 encode_up(2^(%d)) = %u", (int)e - 127, got);
    ++n_e8;
  }
  printf("    round trips: %ld RN, %ld SR (all r), %ld E8M0\n", n_rn, n_sr, n_e8);
  END();
}

static void test_encode_rn_ties_satfinite(void **state) {
  (void)state;
  BEGIN();
  /* E2M1 tie points of docs/numerics.md */
  static const struct { float x; uint8_t code; } e2m1_ties[] = {
      {0.25f, 0x0}, {0.75f, 0x2}, {1.25f, 0x2}, {1.75f, 0x4}, {2.5f, 0x4}, {3.5f, 0x6}, {5.0f, 0x6},
      {5.0000005f, 0x7}, {5.5f, 0x7}, {6.0f, 0x7}, {7.0f, 0x7}, {1e30f, 0x7}, {FLT_MAX, 0x7}, {INFINITY, 0x7},
      {-0.25f, 0x8}, {-0.75f, 0xA}, {-1.25f, 0xA}, {-1.75f, 0xC}, {-2.5f, 0xC}, {-3.5f, 0xE}, {-5.0f, 0xE},
      {-5.5f, 0xF}, {-INFINITY, 0xF}, {-0.1f, 0x8}, {-1e-30f, 0x8}, {0.2499999f, 0x0}, {0.2500001f, 0x1},
      {NAN, 0x7}};
  for (size_t i = 0; i < sizeof e2m1_ties / sizeof e2m1_ties[0]; ++i) {
    uint8_t got = fb_e2m1_encode_rn(e2m1_ties[i].x);
    EXPECT(got == e2m1_ties[i].code, "e2m1 rn(%a) = 0x%x, want 0x%x", (double)e2m1_ties[i].x, got, e2m1_ties[i].code);
  }
  /* every midpoint of every format: ties to the even code; one ulp either side goes to the nearer */
  long n_mid = 0;
  for (int f = F_E2M1; f <= F_E5M2; ++f)
    for (unsigned c = 0; c < FMT[f].maxcode; ++c) {
      float lo = (float)ref_decode(f, c), hi = (float)ref_decode(f, c + 1);
      float mid = (float)(((double)lo + hi) / 2);
      uint8_t even = (uint8_t)((c & 1u) ? c + 1 : c);
      for (int s = 0; s < 2; ++s) {
        float sg = s ? -1.0f : 1.0f;
        uint8_t sb = (uint8_t)(s ? FMT[f].signbit : 0);
        uint8_t g0 = lib_rn(f, sg * mid), g1 = lib_rn(f, sg * nextafterf(mid, 0.0f)), g2 = lib_rn(f, sg * nextafterf(mid, INFINITY));
        EXPECT(g0 == (sb | even), "%s rn(midpoint %a) = 0x%02x, want 0x%02x", FMT[f].name, (double)(sg * mid), g0, sb | even);
        EXPECT(g1 == (sb | c), "%s rn(below midpoint %a) = 0x%02x, want 0x%02x", FMT[f].name, (double)(sg * mid), g1, sb | c);
        EXPECT(g2 == (sb | (c + 1)), "%s rn(above midpoint %a) = 0x%02x, want 0x%02x", FMT[f].name, (double)(sg * mid), g2,
               sb | (c + 1));
        n_mid += 3;
      }
    }
  /* satfinite and NaN */
  static const float big[] = {449.0f, 464.0f, 479.0f, 480.0f, 1e6f, FLT_MAX, INFINITY};
  for (size_t i = 0; i < sizeof big / sizeof big[0]; ++i) {
    EXPECT(fb_e4m3_encode_rn(big[i]) == 0x7E && fb_e4m3_encode_rn(-big[i]) == 0xFE, "e4m3 satfinite %a -> 0x%02x/0x%02x",
           (double)big[i], fb_e4m3_encode_rn(big[i]), fb_e4m3_encode_rn(-big[i]));
    EXPECT(fb_e4m3_encode_sr(big[i], 255) == 0x7E && fb_e4m3_encode_sr(-big[i], 0) == 0xFE, "e4m3 SR satfinite %a",
           (double)big[i]);
  }
  static const float big5[] = {57345.0f, 61440.0f, 65535.0f, 65536.0f, 1e9f, FLT_MAX, INFINITY};
  for (size_t i = 0; i < sizeof big5 / sizeof big5[0]; ++i)
    EXPECT(fb_e5m2_encode_rn(big5[i]) == 0x7B && fb_e5m2_encode_rn(-big5[i]) == 0xFB &&
               fb_e5m2_encode_sr(big5[i], 255) == 0x7B,
           "e5m2 satfinite %a -> 0x%02x", (double)big5[i], fb_e5m2_encode_rn(big5[i]));
  EXPECT(fb_e4m3_encode_rn(NAN) == 0x7F, "e4m3 rn(NaN) = 0x%02x", fb_e4m3_encode_rn(NAN));
  EXPECT((fb_e4m3_encode_rn(-NAN) & 0x7F) == 0x7F, "e4m3 rn(-NaN) not NaN: 0x%02x", fb_e4m3_encode_rn(-NAN));
  EXPECT(fb_e5m2_encode_rn(NAN) == 0x7F, "e5m2 rn(NaN) = 0x%02x", fb_e5m2_encode_rn(NAN));
  EXPECT(fb_e2m1_encode_sr(NAN, 200) == 0x7 && fb_e4m3_encode_sr(NAN, 17) == 0x7F && fb_e5m2_encode_sr(NAN, 0) == 0x7F,
         "SR NaN rule");
  /* negative values rounding to zero keep the sign */
  EXPECT(fb_e4m3_encode_rn(-0x1p-11f) == 0x80 && fb_e4m3_encode_rn(-0x1p-10f) == 0x80, "e4m3 -tiny -> 0x80");
  EXPECT(fb_e4m3_encode_rn(0x1p-10f) == 0x00 && fb_e4m3_encode_rn(nextafterf(0x1p-10f, 1.0f)) == 0x01, "e4m3 half min subnormal");
  EXPECT(fb_e5m2_encode_rn(-0x1p-18f) == 0x80, "e5m2 -tiny -> 0x80");
  /* random floats against the reference: every exponent near each format's range, and raw bits */
  rng_t g = {42};
  long n_rand = 0;
  for (int f = F_E2M1; f <= F_E5M2; ++f) {
    int emin = f == F_E2M1 ? -6 : f == F_E4M3 ? -14 : -21, emax = f == F_E2M1 ? 4 : f == F_E4M3 ? 10 : 17;
    for (int i = 0; i < 200000; ++i) {
      float x;
      if (i % 4 == 3) x = u2f((uint32_t)rng_next(&g));
      else x = u2f((uint32_t)(((uint32_t)(rng_int(&g, emin, emax) + 127) << 23) | ((uint32_t)rng_next(&g) & 0x807FFFFFu)));
      uint8_t got = lib_rn(f, x), want = ref_rn(f, x);
      EXPECT(got == want, "%s rn(%a) lib 0x%02x ref 0x%02x", FMT[f].name, (double)x, got, want);
      ++n_rand;
    }
  }
  printf("    %ld midpoint probes, %ld random floats vs reference RN\n", n_mid, n_rand);
  END();
}

static void test_e8m0_encode_up(void **state) {
  (void)state;
  BEGIN();
  EXPECT(fb_e8m0_encode_up(NAN) == 0xFF, "NaN -> 0x%02x", fb_e8m0_encode_up(NAN));
  EXPECT(fb_e8m0_encode_up(INFINITY) == 0xFE, "Inf -> 0x%02x", fb_e8m0_encode_up(INFINITY));
  EXPECT(fb_e8m0_encode_up(0.0f) == 0x00, "0 -> 0x%02x", fb_e8m0_encode_up(0.0f));
  EXPECT(fb_e8m0_encode_up(0x1p-127f) == 0x00 && fb_e8m0_encode_up(nextafterf(0x1p-127f, 1.0f)) == 0x01 &&
             fb_e8m0_encode_up(0x1p-149f) == 0x00 && fb_e8m0_encode_up(0x1p-126f) == 0x01,
         "denormals: <= 2^-127 -> 0, above -> 1");
  EXPECT(fb_e8m0_encode_up(1.0f) == 127 && fb_e8m0_encode_up(1.0000001f) == 128 && fb_e8m0_encode_up(0.75f) == 127,
         "around 1");
  EXPECT(fb_e8m0_encode_up(FLT_MAX) == 254 && fb_e8m0_encode_up(0x1.8p127f) == 254, "clamp 254");
  long n = 0;
  rng_t g = {7};
  for (uint32_t E = 0; E < 255; ++E)
    for (int k = 0; k < 64; ++k) {
      uint32_t m = k == 0 ? 0 : k == 1 ? 1 : k == 2 ? 0x7FFFFF : k == 3 ? 0x400000 : (uint32_t)rng_next(&g) & 0x7FFFFF;
      float v = u2f((E << 23) | m);
      uint8_t got = fb_e8m0_encode_up(v), want = ref_e8m0_up(v);
      EXPECT(got == want, "e8m0 up(%a) lib %u ref %u", (double)v, got, want);
      ++n;
    }
  printf("    %ld values over every exponent field vs reference\n", n);
  END();
}

/* =================================================================================================
 * stochastic rounding
 * ================================================================================================= */
static void test_sr_definition(void **state) {
  (void)state;
  BEGIN();
  /* hand cases: E2M1 x = 2.5: step 1, m = 2.5, up iff 128 + r >= 256 */
  for (unsigned r = 0; r < 256; ++r) {
    uint8_t want = r >= 128 ? 0x5 : 0x4;
    EXPECT(fb_e2m1_encode_sr(2.5f, (uint8_t)r) == want, "e2m1 sr(2.5, %u) = 0x%x", r, fb_e2m1_encode_sr(2.5f, (uint8_t)r));
    EXPECT(fb_e2m1_encode_sr(-2.5f, (uint8_t)r) == (want | 8), "e2m1 sr(-2.5, %u)", r);
    /* 0.3: subnormal step 0.5, m = 0.6, floor(0.6*256) = 153: up iff r >= 103 */
    EXPECT(fb_e2m1_encode_sr(0.3f, (uint8_t)r) == (r >= 103 ? 0x1 : 0x0), "e2m1 sr(0.3, %u) = 0x%x", r,
           fb_e2m1_encode_sr(0.3f, (uint8_t)r));
    /* 5.5: step 2, m = 2.75: up iff r >= 64 */
    EXPECT(fb_e2m1_encode_sr(5.5f, (uint8_t)r) == (r >= 64 ? 0x7 : 0x6), "e2m1 sr(5.5, %u)", r);
    /* above max: both candidates clamp to 6 */
    EXPECT(fb_e2m1_encode_sr(7.0f, (uint8_t)r) == 0x7 && fb_e2m1_encode_sr(-100.0f, (uint8_t)r) == 0xF, "e2m1 sr sat r=%u", r);
    /* -0.01: m = 0.02, floor(5.12) = 5: up iff r >= 251, else -0 (0x8) */
    EXPECT(fb_e2m1_encode_sr(-0.01f, (uint8_t)r) == (r >= 251 ? 0x9 : 0x8), "e2m1 sr(-0.01, %u) = 0x%x", r,
           fb_e2m1_encode_sr(-0.01f, (uint8_t)r));
    /* E4M3 x = 1 + 1/16 + 1/64: step 1/8, m = 8.625, floor(0.625*256) = 160: up iff r >= 96 */
    EXPECT(fb_e4m3_encode_sr(1.078125f, (uint8_t)r) == (r >= 96 ? 0x39 : 0x38), "e4m3 sr(1.078125, %u) = 0x%02x", r,
           fb_e4m3_encode_sr(1.078125f, (uint8_t)r));
    /* bits beyond the 8 kept ones are discarded: frac = 1/256 + 1/512 -> floor = 1: up iff r >= 255 */
    float x = 1.0f + 0.125f * (1.0f / 256 + 1.0f / 512);
    EXPECT(fb_e4m3_encode_sr(x, (uint8_t)r) == (r >= 255 ? 0x39 : 0x38), "e4m3 sr(%a, %u) truncation", (double)x, r);
    /* frac below 1/256: never up */
    EXPECT(fb_e4m3_encode_sr(1.0f + 0.125f / 512, (uint8_t)r) == 0x38, "e4m3 sr frac < 1/256, r=%u", r);
    /* E4M3 subnormal: 2^-9 * 1.5: step 2^-9, up iff r >= 128 */
    EXPECT(fb_e4m3_encode_sr(0x1.8p-9f, (uint8_t)r) == (r >= 128 ? 0x02 : 0x01), "e4m3 sr subnormal r=%u", r);
    /* E4M3 just below max: 440 = 13.75 * 32, up (448) iff r >= 64 */
    EXPECT(fb_e4m3_encode_sr(440.0f, (uint8_t)r) == (r >= 64 ? 0x7E : 0x7D), "e4m3 sr(440, %u)", r);
    /* E5M2: 1.1 * 2^-15 region etc. covered below; 0.7: binade [0.5,1), step 1/8, m = 5.6 */
  }
  /* random x, all r, against the reference */
  rng_t g = {1234};
  long n = 0;
  for (int f = F_E2M1; f <= F_E5M2; ++f) {
    int emin = f == F_E2M1 ? -5 : f == F_E4M3 ? -12 : -19, emax = f == F_E2M1 ? 3 : f == F_E4M3 ? 9 : 16;
    for (int i = 0; i < 3000; ++i) {
      float x = (float)ldexp(1.0 + rng_u01(&g), rng_int(&g, emin, emax));
      if (rng_next(&g) & 1) x = -x;
      for (unsigned r = 0; r < 256; ++r) {
        uint8_t got = lib_sr(f, x, (uint8_t)r), want = ref_sr(f, x, r);
        EXPECT(got == want, "%s sr(%a, r=%u) lib 0x%02x ref 0x%02x", FMT[f].name, (double)x, r, got, want);
        ++n;
      }
    }
    EXPECT(lib_sr(f, INFINITY, 255) == FMT[f].maxcode && lib_sr(f, -INFINITY, 0) == (FMT[f].signbit | FMT[f].maxcode),
           "%s SR of Inf saturates", FMT[f].name);
  }
  printf("    hand cases x 256 r, %ld random (x, r) pairs vs reference SR\n", n);
  END();
}

static void test_sr_unbiased(void **state) {
  (void)state;
  BEGIN();
  static const float xs[3][7] = {
      {0.3f, 0.1f, 1.3f, 2.7f, 5.5f, -3.3f, -0.6f},                       /* sub, sub, normal, ..., below max, neg */
      {0x1.5ep-8f, 0.1f, 3.14159f, 440.0f, 447.0f, -77.7f, -0.003f},      /* subnormal, ..., saturation-adjacent */
      {3e-6f, 0.7f, 1000.5f, 55000.0f, 57000.0f, -123.4f, -1e-5f}};
  const unsigned N = 1u << 16;
  for (int f = F_E2M1; f <= F_E5M2; ++f)
    for (int k = 0; k < 7; ++k) {
      float x = xs[f][k];
      double tmean = sr_trunc_mean(f, x), sum = 0.0, sum2 = 0.0;
      for (unsigned r = 0; r < 256; ++r) {
        double v = lib_decode(f, lib_sr(f, x, (uint8_t)r));
        sum += v;
        sum2 += v * v;
      }
      double m256 = sum / 256.0, var = sum2 / 256.0 - m256 * m256;
      EXPECT(m256 == tmean, "%s: mean over all r of sr(%a) = %.17g, want truncated %.17g", FMT[f].name, (double)x, m256,
             tmean);
      double step = sr_step(f, fabs((double)x));
      EXPECT(fabs(m256 - x) < step / 256.0, "%s: truncation bias of %a too big", FMT[f].name, (double)x);
      double ps = 0.0;
      for (unsigned i = 0; i < N; ++i) ps += lib_decode(f, lib_sr(f, x, fb_sr_bits(99, 3, (uint32_t)(f * 16 + k), i)));
      double pm = ps / N, bound = step / 256.0 + mean_bound(var > 0 ? var : 0, step, N);
      EXPECT(fabs(pm - x) <= bound, "%s: Philox mean of sr(%a) = %.9g, |err| %.3g > bound %.3g", FMT[f].name, (double)x,
             pm, fabs(pm - x), bound);
      if (k == 3)
        printf("    %s x=%-10g step %-9g exhaustive mean %.9g  Philox(2^16) mean %.9g  |err| %.2e <= %.2e\n", FMT[f].name,
               (double)x, step, m256, pm, fabs(pm - x), bound);
    }
  END();
}

static void test_sr_bits_and_signs(void **state) {
  (void)state;
  BEGIN();
  rng_t g = {5};
  for (int i = 0; i < 20000; ++i) {
    uint32_t seed = (uint32_t)rng_next(&g), stream = (uint32_t)rng_next(&g), step = (uint32_t)rng_next(&g);
    uint64_t idx = rng_next(&g) >> (i % 64);
    EXPECT(fb_sr_bits(seed, stream, step, idx) == fb_philox_sr_byte(seed, stream, step, idx), "fb_sr_bits(%u,%u,%u,%llu)",
           seed, stream, step, (unsigned long long)idx);
  }
  for (uint32_t s = 0; s < 64; ++s)
    for (uint32_t st = 0; st < 4; ++st) {
      fb_u32 ctr[4] = {st, 0, 0, 0}, key[2] = {s * 2654435761u, 1}, out[4];
      fb_philox4x32_10(ctr, key, out);
      EXPECT(fb_rht_signs(s * 2654435761u, st) == out[0], "fb_rht_signs(%u, %u)", s * 2654435761u, st);
    }
  END();
}

/* =================================================================================================
 * NVFP4
 * ================================================================================================= */
/* Wide dynamic range: per-row scale 2^[-40,40], per-element 2^[-8,8], some zeros and denormals. */
static void fill_wide(rng_t *g, float *x, size_t rows, size_t cols) {
  for (size_t r = 0; r < rows; ++r) {
    int rs = rng_int(g, -40, 40);
    for (size_t c = 0; c < cols; ++c) {
      double u = rng_u01(g);
      float v;
      if (u < 0.02) v = (rng_next(g) & 1) ? 0.0f : -0.0f;
      else if (u < 0.03) v = (float)ldexp(rng_normal(g), -135);
      else v = (float)ldexp(rng_normal(g), rs + rng_int(g, -8, 8));
      x[r * cols + c] = v;
    }
  }
}

static void run_nvfp4_case(const char *tag, const float *x, size_t rows, size_t cols, const fb_nvfp4_opts *o,
                           long *n_elems) {
  size_t no = ref_nouter(o, rows);
  EXPECT(fb_nvfp4_nouter(o, rows) == no, "%s: nouter lib %zu want %zu", tag, fb_nvfp4_nouter(o, rows), no);
  nv_buf L = nv_alloc(rows, cols, no), R = nv_alloc(rows, cols, no);
  memset(L.codes, 0xA5, rows * cols / 2); /* poisoned */
  memset(L.sf, 0xA5, rows * cols / 16);
  fb_status st = fb_nvfp4_quantize(x, rows, cols, o, L.codes, L.sf, L.sdec, L.c4);
  EXPECT(st == FB_OK, "%s: quantize -> %s: %s", tag, fb_status_name(st), fb_errmsg());
  if (st == FB_OK) {
    ref_nvfp4_quantize(x, rows, cols, o, R.codes, R.sf, R.sdec, R.c4);
    nv_compare(tag, x, rows, cols, o, &L, &R, 0, rows, o->four_over_six);
    /* dequantize the library's own codes; compare with the formula */
    st = fb_nvfp4_dequantize(L.codes, L.sf, L.sdec, rows, cols, o, L.y);
    EXPECT(st == FB_OK, "%s: dequantize -> %s", tag, fb_status_name(st));
    ref_nvfp4_dequantize(L.codes, L.sf, L.sdec, rows, cols, o, R.y);
    for (size_t i = 0; i < rows * cols; ++i)
      EXPECT(same_f(L.y[i], R.y[i]), "%s: dequant [%zu] lib %a ref %a", tag, i, (double)L.y[i], (double)R.y[i]);
    *n_elems += (long)(rows * cols);
  }
  nv_free(&L);
  nv_free(&R);
}

static void test_nvfp4_reference(void **state) {
  (void)state;
  BEGIN();
  /* S_enc */
  static const float As[] = {0.0f, INFINITY, 1.0f, 2688.0f, 1536.0f, 3.0f, 1e-30f, 0x1p-149f, 1e-42f, FLT_MAX, 7.25e20f};
  for (size_t i = 0; i < sizeof As / sizeof As[0]; ++i)
    for (int fos = 0; fos < 2; ++fos)
      EXPECT(same_f(fb_nvfp4_s_enc(As[i], fos), ref_s_enc(As[i], fos)), "s_enc(%a, fos=%d) lib %a ref %a", (double)As[i],
             fos, (double)fb_nvfp4_s_enc(As[i], fos), (double)ref_s_enc(As[i], fos));
  rng_t g = {2024};
  long n = 0;
  const size_t rows = 48, cols = 256;
  float *x = xmalloc(rows * cols * sizeof *x);
  size_t go[5] = {0, 5, 5, 20, 48}; /* an empty group (expert with no tokens) included */
  for (int rep = 0; rep < 3; ++rep) {
    fill_wide(&g, x, rows, cols);
    for (int outer = 0; outer < 3; ++outer)
      for (int fos = 0; fos < 2; ++fos) {
        fb_nvfp4_opts o = {0};
        o.outer = (fb_outer)outer;
        o.four_over_six = fos;
        if (outer == FB_OUTER_GROUP) { o.group_offsets = go; o.ngroups = 4; }
        char tag[64];
        snprintf(tag, sizeof tag, "nvfp4 outer=%d fos=%d rep=%d", outer, fos, rep);
        run_nvfp4_case(tag, x, rows, cols, &o, &n);
      }
  }
  /* operation order: sf_b = e4m3(a_b * (S_enc * (1/6.f))), not (a_b * S_enc) / 6. Blocks whose a_b puts
   * the two on different sides of an E4M3 rounding midpoint (row amax 1 or 3, both 4/6 settings). */
  {
    const size_t pc = 512;
    float *px = xmalloc(4 * pc * sizeof *px);
    int nprobe = 0;
    for (int fos = 0; fos < 2; ++fos) {
      for (int rr = 0; rr < 2; ++rr) {
        float A = rr ? 3.0f : 1.0f, se = ref_s_enc(A, fos), k = se * (1.0f / 6.0f);
        float *row = px + (size_t)(fos * 2 + rr) * pc;
        for (size_t c = 0; c < pc; ++c) row[c] = (float)(rng_u01(&g) * 0.01);
        row[0] = A;
        size_t blk = 1;
        for (unsigned c = 1; c < 0x7D && blk < pc / 16; ++c) {
          float mid = (float)((ref_decode(F_E4M3, c) + ref_decode(F_E4M3, c + 1)) / 2);
          float ab0 = mid / k;
          for (int d = -3; d <= 3 && blk < pc / 16; ++d) {
            float ab = ab0;
            for (int j = 0; j < (d < 0 ? -d : d); ++j) ab = nextafterf(ab, d < 0 ? 0.0f : INFINITY);
            if (ab > A || ref_rn(F_E4M3, ab * k) == ref_rn(F_E4M3, ab * se / 6.0f)) continue;
            row[blk * 16 + 7] = (blk & 1) ? -ab : ab;
            ++blk;
            ++nprobe;
          }
        }
      }
      fb_nvfp4_opts po = {0};
      po.outer = FB_OUTER_ROW;
      po.four_over_six = fos;
      run_nvfp4_case(fos ? "nvfp4 op-order probes 4/6" : "nvfp4 op-order probes", px + (size_t)fos * 2 * pc, 2, pc, &po, &n);
    }
    EXPECT(nprobe > 8, "only %d op-order probes found", nprobe);
    printf("    %d blocks whose a_b separates a_b*(S_enc*(1/6)) from a_b*S_enc/6 at an E4M3 midpoint\n", nprobe);
    free(px);
  }
  /* a narrow-range Gaussian tensor too (most blocks normal scales) */
  for (size_t i = 0; i < rows * cols; ++i) x[i] = (float)rng_normal(&g);
  fb_nvfp4_opts o = {0};
  o.outer = FB_OUTER_ROW;
  run_nvfp4_case("nvfp4 gaussian row", x, rows, cols, &o, &n);
  free(x);
  printf("    %ld elements bit-exact (codes, sf, s_dec, chose4, dequant) over tensor/row/group x 4/6 on/off\n", n);
  END();
}

static void test_nvfp4_sr(void **state) {
  (void)state;
  BEGIN();
  const size_t rows = 4, cols = 64, n = rows * cols;
  float x[4 * 64];
  rng_t g = {31337};
  for (size_t i = 0; i < n; ++i) x[i] = (float)(rng_normal(&g) * ldexp(1.0, (int)(i / cols) * 3 - 4));
  fb_nvfp4_opts o = {0};
  o.outer = FB_OUTER_ROW;
  o.rounding = FB_ROUND_SR;
  o.seed = 0xC0FFEE;
  o.stream = 12;
  nv_buf L = nv_alloc(rows, cols, rows), R = nv_alloc(rows, cols, rows);
  /* bit-exact SR on a few steps (r of element i = fb_sr_bits(seed, stream, step, i), i row-major) */
  for (uint32_t step = 0; step < 8; ++step) {
    o.step = step * 1000003u;
    fb_status st = fb_nvfp4_quantize(x, rows, cols, &o, L.codes, L.sf, L.sdec, NULL);
    EXPECT(st == FB_OK, "SR quantize: %s", fb_errmsg());
    ref_nvfp4_quantize(x, rows, cols, &o, R.codes, R.sf, R.sdec, NULL);
    nv_compare("nvfp4 SR", x, rows, cols, &o, &L, &R, 0, rows, 0);
  }
  /* expectation: per element, the exhaustive distribution over r gives E and the variance */
  double E[4 * 64], var[4 * 64], rng_w[4 * 64], stp[4 * 64], sum[4 * 64];
  int sat[4 * 64];
  int nsat = 0;
  for (size_t i = 0; i < n; ++i) {
    size_t r = i / cols;
    float sd = R.sdec[r], sff = ref_decode_f(F_E4M3, R.sf[i / 16]);
    float enc = 1.0f / (sff * sd);
    if (enc > FLT_MAX) enc = FLT_MAX;
    float v = x[i] * enc;
    double s1 = 0, s2 = 0, mn = INFINITY, mx = -INFINITY;
    for (unsigned rb = 0; rb < 256; ++rb) {
      double d = (ref_decode_f(F_E2M1, ref_sr(F_E2M1, v, rb)) * sff) * sd;
      s1 += d; s2 += d * d;
      if (d < mn) mn = d;
      if (d > mx) mx = d;
    }
    E[i] = s1 / 256;
    var[i] = fmax(0.0, s2 / 256 - E[i] * E[i]);
    rng_w[i] = mx - mn;
    stp[i] = sr_step(F_E2M1, fabs((double)v)) * sff * sd; /* grid step, in the dequantized domain */
    sat[i] = fabsf(v) > 6.0f;
    nsat += sat[i];
    sum[i] = 0;
  }
  const unsigned N = 4096;
  for (unsigned s = 0; s < N; ++s) {
    o.step = s;
    fb_status st = fb_nvfp4_quantize(x, rows, cols, &o, L.codes, L.sf, L.sdec, NULL);
    if (st == FB_OK) st = fb_nvfp4_dequantize(L.codes, L.sf, L.sdec, rows, cols, &o, L.y);
    if (st != FB_OK) { EXPECT(0, "SR step %u: %s", s, fb_errmsg()); break; }
    for (size_t i = 0; i < n; ++i) sum[i] += L.y[i];
  }
  double worst = 0, worst_x = 0;
  for (size_t i = 0; i < n; ++i) {
    double m = sum[i] / N, b = mean_bound(var[i], rng_w[i], N) + 1e-12 * fabs(E[i]);
    EXPECT(fabs(m - E[i]) <= b, "nvfp4 SR mean [%zu] x=%a: mean %.9g expected %.9g bound %.3g", i, (double)x[i], m, E[i], b);
    if (rng_w[i] > 0 && fabs(m - E[i]) / b > worst) worst = fabs(m - E[i]) / b;
    /* and the expectation itself is x up to the 8-bit truncation (unless the scaled value saturates) */
    if (!sat[i]) {
      double tb = stp[i] / 256.0 + fabs(x[i]) * 0x1p-20;
      EXPECT(fabs(E[i] - x[i]) <= tb, "nvfp4 SR E[%zu] %.9g vs x %a", i, E[i], (double)x[i]);
      if (fabs(E[i] - x[i]) / tb > worst_x) worst_x = fabs(E[i] - x[i]) / tb;
    }
  }
  printf("    %zu elements x %u steps: worst |mean-E|/bound %.2f, worst |E-x|/trunc-bound %.2f, %d saturated skipped\n",
         n, N, worst, worst_x, nsat);
  nv_free(&L);
  nv_free(&R);
  END();
}

typedef double (*dist_fn)(rng_t *);
static double mse_of(const float *a, const float *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) {
    double d = (double)a[i] - b[i];
    s += d * d;
  }
  return s / (double)n;
}

static void test_nvfp4_four_over_six(void **state) {
  (void)state;
  BEGIN();
  const size_t rows = 256, cols = 4096, n = rows * cols, nb = n / 16;
  float *x = xmalloc(n * sizeof *x);
  nv_buf L = nv_alloc(rows, cols, rows), R = nv_alloc(rows, cols, rows);
  static const struct { const char *name; dist_fn fn; } dists[] = {
      {"gaussian", rng_normal}, {"laplace", rng_laplace}, {"student-t3", rng_student3}};
  for (size_t d = 0; d < 3; ++d) {
    rng_t g = {1000 + d};
    for (size_t i = 0; i < n; ++i) x[i] = (float)dists[d].fn(&g);
    fb_nvfp4_opts o = {0};
    o.outer = FB_OUTER_ROW;
    double mse[2];
    long nchose4 = 0, nchecked = 0;
    float rowA = 0;
    for (int fos = 0; fos < 2; ++fos) {
      o.four_over_six = fos;
      fb_status st = fb_nvfp4_quantize(x, rows, cols, &o, L.codes, L.sf, L.sdec, L.c4);
      if (st == FB_OK) st = fb_nvfp4_dequantize(L.codes, L.sf, L.sdec, rows, cols, &o, L.y);
      EXPECT(st == FB_OK, "%s fos=%d: %s", dists[d].name, fos, fb_errmsg());
      if (st != FB_OK) goto out;
      mse[fos] = mse_of(L.y, x, n);
      if (!fos) continue;
      /* the per-block rule, on the library's own output, recomputed here */
      for (size_t b = 0; b < nb; ++b) {
        size_t r = b / (cols / 16), i0 = b * 16;
        const float *xs = x + i0;
        if (b % (cols / 16) == 0) {
          rowA = 0;
          for (size_t c = 0; c < cols; ++c) rowA = fmaxf(rowA, fabsf(x[r * cols + c]));
        }
        float se = ref_s_enc(rowA, 1), sd = 1.0f / se, ab = 0;
        for (int i = 0; i < 16; ++i) ab = fmaxf(ab, fabsf(xs[i]));
        float base = ab * (se * (1.0f / 6.0f));
        uint8_t s6 = ref_rn(F_E4M3, fminf(base, 448.0f)), s4 = ref_rn(F_E4M3, fminf(1.5f * base, 448.0f));
        uint8_t ql[16], q6[16], q4[16];
        for (int i = 0; i < 16; ++i) ql[i] = (uint8_t)nib(L.codes, i0 + (size_t)i);
        ref_nvfp4_block(xs, s6, sd, &o, i0, q6);
        ref_nvfp4_block(xs, s4, sd, &o, i0, q4);
        float el = ref_blk_err(xs, ql, L.sf[b], L.sdec[r]), e6 = ref_blk_err(xs, q6, s6, sd), e4 = ref_blk_err(xs, q4, s4, sd);
        if (L.c4[b]) {
          ++nchose4;
          EXPECT(L.sf[b] == s4 && el < e6, "%s block %zu chose4: sf 0x%02x (sf4 0x%02x) err %a not < sf6 err %a",
                 dists[d].name, b, L.sf[b], s4, (double)el, (double)e6);
        } else {
          EXPECT(L.sf[b] == s6 && el <= e4, "%s block %zu kept sf6: sf 0x%02x (sf6 0x%02x) err %a vs sf4 err %a",
                 dists[d].name, b, L.sf[b], s6, (double)el, (double)e4);
        }
        ++nchecked;
      }
      ref_nvfp4_quantize(x, rows, cols, &o, R.codes, R.sf, R.sdec, R.c4);
      nv_compare(dists[d].name, x, rows, cols, &o, &L, &R, 0, rows, 1);
    }
    double red = 100.0 * (1.0 - mse[1] / mse[0]);
    printf("    %-10s 256x4096 row outer: MSE plain %.6e  4/6 %.6e  reduction %.2f%%  (%ld/%ld blocks chose sf4)\n",
           dists[d].name, mse[0], mse[1], red, nchose4, nchecked);
    EXPECT(mse[1] < mse[0], "%s: Four Over Six MSE %.6e not below plain %.6e", dists[d].name, mse[1], mse[0]);
  }
  /* Two blocks (found by a random search) where computing the error without fmaf, err += d*d, flips
   * the choice: the first is an exact tie under fmaf (keep sf6), the second picks sf4 by one ulp. */
  {
    static const float probe[2][16] = {
        {0x1.b60534p-1f, -0x1.9cff8ap+0f, -0x1.3f8078p+0f, 0x1.1bc6cp-2f, -0x1.677a76p+0f, -0x1.48d2ep-2f,
         -0x1.1d84e6p-4f, -0x1.42dfa2p+0f, -0x1.04f9c4p-1f, -0x1.dcf7b4p-1f, -0x1.82638cp-1f, 0x1.d14514p-1f,
         0x1.5cdaa8p-1f, 0x1.b284e2p+1f, 0x1.c275ep-4f, 0x1.487f0cp-1f},
        {0x1.240758p-1f, -0x1.56a99cp+0f, -0x1.cd7ec4p-5f, 0x1.cdda5ep-3f, -0x1.8bc37ap+0f, -0x1.d7d4fep-1f,
         -0x1.d9419ap-3f, 0x1.4bc108p-4f, -0x1.30acbep-1f, 0x1.2aa89ep+0f, 0x1.41cf9ep-2f, 0x1.26805cp+0f,
         0x1.46cda2p-2f, -0x1.f325acp+0f, 0x1.95b5e8p-3f, 0x1.13b2dcp+0f}};
    fb_nvfp4_opts o = {0};
    o.outer = FB_OUTER_ROW;
    o.four_over_six = 1;
    long dummy = 0;
    run_nvfp4_case("4/6 fmaf probes", &probe[0][0], 2, 16, &o, &dummy);
    uint8_t c[16], sf[2], c4[2] = {9, 9};
    float sd[2];
    if (fb_nvfp4_quantize(&probe[0][0], 2, 16, &o, c, sf, sd, c4) == FB_OK)
      EXPECT(c4[0] == 0 && c4[1] == 1, "fmaf probes: chose4 %u %u, want 0 1 (tie keeps sf6; sf4 lower by one ulp)", c4[0],
             c4[1]);
  }
out:
  free(x);
  nv_free(&L);
  nv_free(&R);
  END();
}

static void test_nvfp4_2d(void **state) {
  (void)state;
  BEGIN();
  const size_t rows = 64, cols = 96;
  float *w = xmalloc(rows * cols * sizeof *w), *wt = xmalloc(rows * cols * sizeof *wt);
  rng_t g = {77};
  for (size_t i = 0; i < rows * cols; ++i) w[i] = (float)(rng_normal(&g) * ldexp(1.0, rng_int(&g, -6, 6)));
  transpose(w, rows, cols, wt);
  fb_nvfp4_opts o = {0};
  o.outer = FB_OUTER_TENSOR;
  o.two_d = 1;
  nv_buf A = nv_alloc(rows, cols, 1), B = nv_alloc(cols, rows, 1), R = nv_alloc(rows, cols, 1);
  fb_status s1 = fb_nvfp4_quantize(w, rows, cols, &o, A.codes, A.sf, A.sdec, NULL);
  fb_status s2 = fb_nvfp4_quantize(wt, cols, rows, &o, B.codes, B.sf, B.sdec, NULL);
  EXPECT(s1 == FB_OK && s2 == FB_OK, "2D quantize: %s", fb_errmsg());
  if (s1 == FB_OK && s2 == FB_OK) {
    EXPECT(same_f(A.sdec[0], B.sdec[0]), "2D s_dec differs under transpose");
    for (size_t i = 0; i < rows; ++i)
      for (size_t j = 0; j < cols; ++j) {
        EXPECT(nib(A.codes, i * cols + j) == nib(B.codes, j * rows + i), "2D code (%zu,%zu) W 0x%x W^T 0x%x", i, j,
               nib(A.codes, i * cols + j), nib(B.codes, j * rows + i));
        EXPECT(A.sf[i * (cols / 16) + j / 16] == B.sf[j * (rows / 16) + i / 16], "2D tile scale (%zu,%zu)", i / 16, j / 16);
      }
    ref_nvfp4_quantize(w, rows, cols, &o, R.codes, R.sf, R.sdec, NULL);
    nv_compare("nvfp4 2D", w, rows, cols, &o, &A, &R, 0, rows, 0);
    /* the 16 scales of a tile are one value */
    for (size_t i = 0; i < rows; ++i)
      for (size_t b = 0; b < cols / 16; ++b)
        EXPECT(A.sf[i * (cols / 16) + b] == A.sf[(i / 16 * 16) * (cols / 16) + b], "2D scale not replicated in tile");
  }
  printf("    %zux%zu W and W^T: codes and tile scales identical up to the transpose\n", rows, cols);
  free(w);
  free(wt);
  nv_free(&A);
  nv_free(&B);
  nv_free(&R);
  END();
}

static void test_nvfp4_specials(void **state) {
  (void)state;
  BEGIN();
  const size_t rows = 5, cols = 64;
  float x[5 * 64];
  rng_t g = {9};
  for (size_t i = 0; i < rows * cols; ++i) x[i] = (float)rng_normal(&g);
  /* row 0: zeros of both signs -> A = 0, S_enc = 1, sf 0, +0 codes */
  for (size_t c = 0; c < cols; ++c) x[c] = (c & 1) ? -0.0f : 0.0f;
  /* row 1: +-Inf -> A = Inf, S_enc = 1; Inf block scale saturates to 448 and Inf -> +-6 */
  x[1 * cols + 3] = INFINITY;
  x[1 * cols + 20] = -INFINITY;
  x[1 * cols + 40] = 1e6f; /* a_b/6 > 448: sf saturates, x*enc > 6: code saturates */
  /* row 2: one large value; block 1 underflows (sf == 0 -> +0 codes, also for negatives);
   * block 2 has a negative value that rounds to zero inside a normal block (-> 0x8) */
  x[2 * cols + 0] = 1e4f;
  for (size_t c = 16; c < 32; ++c) x[2 * cols + c] = (c & 1) ? -1e-6f : 1e-6f;
  for (size_t c = 32; c < 48; ++c) x[2 * cols + c] = 100.0f;
  x[2 * cols + 33] = -0.5f;
  /* row 3: NaNs (ignored by A), one of them the row's last element */
  x[3 * cols + 5] = NAN;
  x[3 * cols + 63] = NAN;
  /* row 4: denormals only */
  for (size_t c = 0; c < cols; ++c) x[4 * cols + c] = (float)(rng_normal(&g) * 1e-40);
  fb_nvfp4_opts o = {0};
  o.outer = FB_OUTER_ROW;
  nv_buf L = nv_alloc(rows, cols, rows), R = nv_alloc(rows, cols, rows);
  fb_status st = fb_nvfp4_quantize(x, rows, cols, &o, L.codes, L.sf, L.sdec, NULL);
  EXPECT(st == FB_OK, "specials quantize: %s", fb_errmsg());
  if (st == FB_OK) {
    ref_nvfp4_quantize(x, rows, cols, &o, R.codes, R.sf, R.sdec, NULL);
    nv_compare("nvfp4 specials rows 0-2,4", x, rows, cols, &o, &L, &R, 0, 3, 0);
    nv_compare("nvfp4 specials row 4", x, rows, cols, &o, &L, &R, 4, 5, 0);
    EXPECT(L.sdec[0] == 1.0f && L.sdec[1] == 1.0f, "A = 0 / A = Inf -> S_enc 1: s_dec %a %a", (double)L.sdec[0],
           (double)L.sdec[1]);
    for (size_t c = 0; c < cols; ++c) EXPECT(nib(L.codes, c) == 0, "zero row code %zu = 0x%x", c, nib(L.codes, c));
    EXPECT(L.sf[1 * 4 + 0] == 0x7E && nib(L.codes, cols + 3) == 0x7 && nib(L.codes, cols + 20) == 0xF,
           "Inf: sf 0x%02x codes 0x%x 0x%x", L.sf[4], nib(L.codes, cols + 3), nib(L.codes, cols + 20));
    EXPECT(L.sf[1 * 4 + 2] == 0x7E && nib(L.codes, cols + 40) == 0x7, "saturating block: sf 0x%02x code 0x%x", L.sf[6],
           nib(L.codes, cols + 40));
    EXPECT(L.sf[2 * 4 + 1] == 0, "underflowing block: sf 0x%02x", L.sf[9]);
    for (size_t c = 16; c < 32; ++c)
      EXPECT(nib(L.codes, 2 * cols + c) == 0, "underflowing block code %zu = 0x%x (want +0)", c, nib(L.codes, 2 * cols + c));
    EXPECT(nib(L.codes, 2 * cols + 33) == 0x8, "negative rounding to zero: 0x%x", nib(L.codes, 2 * cols + 33));
    EXPECT(nib(L.codes, 3 * cols + 5) == 0x7, "NaN element -> 0x%x (want +6 = 0x7)", nib(L.codes, 3 * cols + 5));
    /* blocks 1..2 of the NaN row are fully defined (A ignores NaN) */
    EXPECT(nib(L.codes, 3 * cols + 63) == 0x7, "NaN element -> 0x%x (want +6 = 0x7)", nib(L.codes, 3 * cols + 63));
    for (size_t c = 16; c < 48; ++c)
      EXPECT(nib(L.codes, 3 * cols + c) == nib(R.codes, 3 * cols + c), "NaN row code %zu lib 0x%x ref 0x%x", c,
             nib(L.codes, 3 * cols + c), nib(R.codes, 3 * cols + c));
    for (size_t b = 1; b < 3; ++b)
      EXPECT(L.sf[3 * 4 + b] == R.sf[3 * 4 + b], "NaN row sf block %zu lib 0x%02x ref 0x%02x", b, L.sf[12 + b], R.sf[12 + b]);
    st = fb_nvfp4_dequantize(L.codes, L.sf, L.sdec, rows, cols, &o, L.y);
    for (size_t c = 16; c < 32; ++c)
      EXPECT(f2u(L.y[2 * cols + c]) == 0, "underflowing block dequant not +0: %a", (double)L.y[2 * cols + c]);
    printf("    NaN block: sf 0x%02x codes", L.sf[3 * 4]);
    for (size_t c = 0; c < 16; ++c) printf(" %x", nib(L.codes, 3 * cols + c));
    printf("; denormal row: s_dec %a sf[0] 0x%02x\n", (double)L.sdec[4], L.sf[4 * 4]);
  }
  nv_free(&L);
  nv_free(&R);
  END();
}

/* =================================================================================================
 * MXFP8
 * ================================================================================================= */
static void mx_fill(rng_t *g, float *x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    int blk = (int)(i / 32 % 7);
    x[i] = (float)(rng_normal(g) * ldexp(1.0, blk * 9 - 30 + rng_int(g, -3, 3)));
  }
}

static void test_mxfp8_reference(void **state) {
  (void)state;
  BEGIN();
  const size_t rows = 64, cols = 96, n = rows * cols;
  float *x = xmalloc(n * sizeof *x), *xt = xmalloc(n * sizeof *xt), *y = xmalloc(n * sizeof *y);
  uint8_t *c1 = xmalloc(n), *c2 = xmalloc(n), *cr = xmalloc(n), *e1 = xmalloc(n / 32), *e2 = xmalloc(n / 32), *er = xmalloc(n / 32);
  rng_t g = {4242};
  long nsat = 0, nel = 0;
  for (int rep = 0; rep < 4; ++rep) {
    mx_fill(&g, x, n);
    transpose(x, rows, cols, xt);
    for (int sr = 0; sr < 2; ++sr) {
      fb_sr_opts ro = {sr ? FB_ROUND_SR : FB_ROUND_RN, 1234u + (uint32_t)rep, 7u, 99u + (uint32_t)rep};
      /* row-wise vs reference */
      fb_status st = fb_mxfp8_quantize(x, rows, cols, FB_MX_ROWWISE, &ro, c1, e1);
      EXPECT(st == FB_OK, "mx rowwise: %s", fb_errmsg());
      ref_mx_rowwise(x, rows, cols, &ro, cr, er);
      for (size_t i = 0; i < n; ++i)
        EXPECT(c1[i] == cr[i], "mx rowwise sr=%d [%zu] x=%a lib 0x%02x ref 0x%02x (e 0x%02x)", sr, i, (double)x[i], c1[i],
               cr[i], er[i / 32]);
      for (size_t b = 0; b < n / 32; ++b) EXPECT(e1[b] == er[b], "mx rowwise e8m0[%zu] lib %u ref %u", b, e1[b], er[b]);
      /* column-wise of X == row-wise of X^T (SR index = row-major index in the stored layout) */
      st = fb_mxfp8_quantize(x, rows, cols, FB_MX_COLWISE, &ro, c2, e2);
      EXPECT(st == FB_OK, "mx colwise: %s", fb_errmsg());
      fb_mxfp8_quantize(xt, cols, rows, FB_MX_ROWWISE, &ro, c1, e1);
      for (size_t i = 0; i < n; ++i)
        EXPECT(c2[i] == c1[i], "mx colwise(X) != rowwise(X^T) sr=%d at stored %zu: 0x%02x vs 0x%02x", sr, i, c2[i], c1[i]);
      for (size_t b = 0; b < n / 32; ++b) EXPECT(e2[b] == e1[b], "mx colwise e8m0[%zu] %u vs %u", b, e2[b], e1[b]);
      ref_mx_rowwise(xt, cols, rows, &ro, cr, er);
      for (size_t i = 0; i < n; ++i) EXPECT(c2[i] == cr[i], "mx colwise vs reference [%zu]", i);
      /* scale rule and no saturation before rounding */
      for (size_t b = 0; b < n / 32; ++b) {
        float ab = 0;
        for (int i = 0; i < 32; ++i) ab = fmaxf(ab, fabsf(xt[b * 32 + i]));
        EXPECT(e2[b] == fb_e8m0_encode_up(ab * (1.0f / 448.0f)), "mx scale rule block %zu", b);
        double lim = 448.0 * ldexp(1.0, (int)e2[b] - 127);
        for (int i = 0; i < 32; ++i) {
          if (fabs((double)xt[b * 32 + i]) > lim) ++nsat;
          ++nel;
        }
      }
      /* dequantize vs formula */
      st = fb_mxfp8_dequantize(c2, e2, cols, rows, y);
      EXPECT(st == FB_OK, "mx dequant: %s", fb_errmsg());
      for (size_t i = 0; i < n; ++i)
        EXPECT(same_f(y[i], ref_mx_deq(c2[i], e2[i / 32])), "mx dequant [%zu] lib %a ref %a", i, (double)y[i],
               (double)ref_mx_deq(c2[i], e2[i / 32]));
    }
  }
  EXPECT(nsat == 0, "%ld of %ld elements above 448 * 2^(e-127)", nsat, nel);
  /* the no-saturation property of the rounded-up scale, swept around 448 * 2^k for every normal k */
  long nsweep = 0, nbad = 0;
  for (int k = -126 + 9; k <= 118; ++k) {
    float a0 = ldexpf(448.0f, k), a = a0;
    for (int j = 0; j < 64; ++j, a = nextafterf(a, INFINITY), ++nsweep) {
      uint8_t e = fb_e8m0_encode_up(a * (1.0f / 448.0f));
      if ((double)a > 448.0 * ldexp(1.0, (int)e - 127)) ++nbad;
    }
    a = a0;
    for (int j = 0; j < 64; ++j, a = nextafterf(a, 0.0f), ++nsweep) {
      uint8_t e = fb_e8m0_encode_up(a * (1.0f / 448.0f));
      if ((double)a > 448.0 * ldexp(1.0, (int)e - 127)) ++nbad;
    }
  }
  EXPECT(nbad == 0, "%ld of %ld amax values around 448*2^k saturate", nbad, nsweep);
  printf("    %d x %zux%zu row/col-wise RN+SR bit-exact; %ld elements, 0 above 448*2^(e-127); %ld-value sweep ok\n", 4, rows,
         cols, nel, nsweep);
  free(x); free(xt); free(y); free(c1); free(c2); free(cr); free(e1); free(e2); free(er);
  END();
}

/* The exact distribution of MXFP8 SR over the 256 values of r for each x[i] (block scales e, 32 a block): its mean E,
 * variance, width (largest - smallest outcome) and the grid step at |x| (in x's units) */
static void sr_moments(const float *x, const uint8_t *e, size_t n, double *E, double *var, double *w, double *stp) {
  for (size_t i = 0; i < n; ++i) {
    float v = x[i] * ldexpf(1.0f, 127 - (int)e[i / 32]);
    double s1 = 0, s2 = 0, mn = INFINITY, mx = -INFINITY;
    for (unsigned r = 0; r < 256; ++r) {
      double d = ref_mx_deq(ref_sr(F_E4M3, v, r), e[i / 32]);
      s1 += d; s2 += d * d;
      mn = fmin(mn, d);
      mx = fmax(mx, d);
    }
    E[i] = s1 / 256;
    var[i] = fmax(0, s2 / 256 - E[i] * E[i]);
    w[i] = mx - mn;
    stp[i] = ldexp(sr_step(F_E4M3, fabs((double)v)), (int)e[i / 32] - 127);
  }
}

static void test_mxfp8_sr_unbiased(void **state) {
  (void)state;
  BEGIN();
  const size_t rows = 16, cols = 64, n = rows * cols;
  float x[16 * 64], y[16 * 64];
  uint8_t c[16 * 64], e[16 * 64 / 32], cr[16 * 64], er[16 * 64 / 32];
  double sum[16 * 64] = {0}, E[16 * 64], var[16 * 64], w[16 * 64], stp[16 * 64];
  rng_t g = {555};
  for (size_t i = 0; i < n; ++i) x[i] = (float)(rng_normal(&g) * ldexp(1.0, (int)(i / 32) * 4 - 60));
  fb_sr_opts ro = {FB_ROUND_SR, 77, 5, 0};
  ref_mx_rowwise(x, rows, cols, &ro, cr, er);
  sr_moments(x, er, n, E, var, w, stp);
  const unsigned N = 4096;
  for (unsigned s = 0; s < N; ++s) {
    ro.step = s;
    fb_status st = fb_mxfp8_quantize(x, rows, cols, FB_MX_ROWWISE, &ro, c, e);
    if (st == FB_OK) st = fb_mxfp8_dequantize(c, e, rows, cols, y);
    if (st != FB_OK) { EXPECT(0, "mx SR step %u: %s", s, fb_errmsg()); break; }
    for (size_t i = 0; i < n; ++i) sum[i] += y[i];
  }
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    double m = sum[i] / N, b = mean_bound(var[i], w[i], N) + 1e-12 * fabs(E[i]);
    EXPECT(fabs(m - E[i]) <= b, "mx SR mean [%zu] x=%a mean %.9g E %.9g bound %.3g", i, (double)x[i], m, E[i], b);
    /* no saturation (scale rounded up) and exact scaling: E is x with frac(m) truncated to 8 bits */
    EXPECT(fabs(E[i] - x[i]) < stp[i] / 256, "mx SR E[%zu] %.9g vs x %a", i, E[i], (double)x[i]);
    worst = fmax(worst, fabs(m - x[i]) / (stp[i] / 256 + mean_bound(var[i], w[i], N)));
  }
  printf("    %zu elements x %u steps: worst |mean-x| / bound %.2f\n", n, N, worst);
  END();
}

static void test_mxfp8_specials(void **state) {
  (void)state;
  BEGIN();
  const size_t cols = 32 * 6;
  float x[32 * 6];
  uint8_t c[32 * 6], e[6], cr[32 * 6], er[6];
  rng_t g = {3};
  for (size_t i = 0; i < cols; ++i) x[i] = (float)rng_normal(&g);
  for (size_t i = 0; i < 32; ++i) x[i] = (i & 1) ? -0.0f : 0.0f; /* block 0: zeros */
  x[32 + 7] = NAN;                                                /* block 1: NaN */
  x[64 + 2] = INFINITY;                                           /* block 2: +-Inf */
  x[64 + 9] = -INFINITY;
  for (size_t i = 96; i < 128; ++i) x[i] = (float)(rng_normal(&g) * 1e-40); /* block 3: denormals */
  x[128 + 4] = FLT_MAX;                                                      /* block 4: huge */
  x[128 + 5] = -3e38f;
  for (size_t i = 160; i < 192; ++i) x[i] = 448.0f * (float)(i - 159) / 32.0f; /* block 5: a_b exactly 448 */
  fb_sr_opts rn = {FB_ROUND_RN, 0, 0, 0};
  fb_status st = fb_mxfp8_quantize(x, 1, cols, FB_MX_ROWWISE, &rn, c, e);
  EXPECT(st == FB_OK, "mx specials: %s", fb_errmsg());
  ref_mx_rowwise(x, 1, cols, &rn, cr, er);
  EXPECT(e[0] == 0x00, "zero block scale 0x%02x", e[0]);
  for (size_t i = 0; i < 32; ++i) EXPECT(c[i] == ((i & 1) ? 0x80 : 0x00), "zero block code %zu = 0x%02x", i, c[i]);
  EXPECT(e[1] == 0xFF, "NaN block scale 0x%02x (want 0xFF)", e[1]);
  EXPECT((c[32 + 7] & 0x7F) == 0x7F, "NaN element code 0x%02x", c[32 + 7]);
  EXPECT(e[2] == 0xFE, "Inf block scale 0x%02x (want 0xFE)", e[2]);
  EXPECT(c[64 + 2] == 0x7E && c[64 + 9] == 0xFE, "Inf codes 0x%02x 0x%02x (want +-448)", c[66], c[73]);
  for (size_t b = 0; b < 6; ++b) {
    if (b == 1) continue; /* NaN block: only its scale and the NaN element are pinned down */
    EXPECT(e[b] == er[b], "mx specials block %zu scale lib 0x%02x ref 0x%02x", b, e[b], er[b]);
    for (size_t i = b * 32; i < b * 32 + 32; ++i)
      EXPECT(c[i] == cr[i], "mx specials block %zu elem %zu x=%a lib 0x%02x ref 0x%02x", b, i, (double)x[i], c[i], cr[i]);
  }
  EXPECT(e[5] == 127 && c[191] == 0x7E, "a_b = 448: scale %u (want 127), code 0x%02x", e[5], c[191]);
  printf("    zero/NaN/Inf/denormal/huge/448 blocks: scales %02x %02x %02x %02x %02x %02x\n", e[0], e[1], e[2], e[3], e[4], e[5]);
  END();
}

/* =================================================================================================
 * requantize-transpose
 * ================================================================================================= */
static void test_requant(void **state) {
  (void)state;
  BEGIN();
  const size_t rows = 64, cols = 96, n = rows * cols;
  float *x = xmalloc(n * sizeof *x), *y = xmalloc(n * sizeof *y), *yt = xmalloc(n * sizeof *yt), *z = xmalloc(n * sizeof *z);
  uint8_t *oc = xmalloc(n), *oe = xmalloc(n / 32), *cc = xmalloc(n), *ce = xmalloc(n / 32), *rc = xmalloc(n), *re = xmalloc(n / 32);
  uint8_t *mc = xmalloc(n), *me = xmalloc(n / 32);
  rng_t g = {8080};
  for (size_t i = 0; i < n; ++i) x[i] = (float)(rng_normal(&g) * ldexp(1.0, rng_int(&g, -10, 10)));
  long ncmp = 0;
  for (int cfg = 0; cfg < 3; ++cfg) {
    fb_nvfp4_opts o = {0};
    o.outer = cfg == 0 ? FB_OUTER_TENSOR : FB_OUTER_ROW;
    o.four_over_six = cfg == 2;
    nv_buf q = nv_alloc(rows, cols, rows);
    fb_status st = fb_nvfp4_quantize(x, rows, cols, &o, q.codes, q.sf, q.sdec, NULL);
    EXPECT(st == FB_OK, "requant setup: %s", fb_errmsg());
    st = fb_nvfp4_dequantize(q.codes, q.sf, q.sdec, rows, cols, &o, y);
    for (int sr = 0; sr < 2; ++sr)
      for (uint32_t step = 0; step < 3; ++step) {
        fb_sr_opts ro = {sr ? FB_ROUND_SR : FB_ROUND_RN, 11, 42, step};
        st = fb_requant_nvfp4_to_mxfp8t(q.codes, q.sf, q.sdec, rows, cols, &o, &ro, oc, oe);
        EXPECT(st == FB_OK, "requant nvfp4: %s", fb_errmsg());
        fb_mxfp8_quantize(y, rows, cols, FB_MX_COLWISE, &ro, cc, ce);
        transpose(y, rows, cols, yt);
        ref_mx_rowwise(yt, cols, rows, &ro, rc, re);
        for (size_t i = 0; i < n; ++i) {
          EXPECT(oc[i] == cc[i], "requant nvfp4 cfg %d sr %d: code %zu 0x%02x, dequant+colwise 0x%02x", cfg, sr, i, oc[i], cc[i]);
          EXPECT(oc[i] == rc[i], "requant nvfp4 cfg %d sr %d: code %zu 0x%02x, reference 0x%02x", cfg, sr, i, oc[i], rc[i]);
        }
        for (size_t b = 0; b < n / 32; ++b)
          EXPECT(oe[b] == ce[b] && oe[b] == re[b], "requant nvfp4 scale %zu: %u %u %u", b, oe[b], ce[b], re[b]);
        ncmp += (long)n;
      }
    nv_free(&q);
  }
  /* MXFP8 row-wise -> transposed MXFP8 */
  fb_sr_opts rn = {FB_ROUND_RN, 0, 0, 0};
  fb_mxfp8_quantize(x, rows, cols, FB_MX_ROWWISE, &rn, mc, me);
  fb_mxfp8_dequantize(mc, me, rows, cols, z);
  for (int sr = 0; sr < 2; ++sr) {
    fb_sr_opts ro = {sr ? FB_ROUND_SR : FB_ROUND_RN, 3, 4, 5};
    fb_status st = fb_requant_mxfp8_to_mxfp8t(mc, me, rows, cols, &ro, oc, oe);
    EXPECT(st == FB_OK, "requant mxfp8: %s", fb_errmsg());
    fb_mxfp8_quantize(z, rows, cols, FB_MX_COLWISE, &ro, cc, ce);
    transpose(z, rows, cols, yt);
    ref_mx_rowwise(yt, cols, rows, &ro, rc, re);
    for (size_t i = 0; i < n; ++i)
      EXPECT(oc[i] == cc[i] && oc[i] == rc[i], "requant mxfp8 sr %d code %zu: 0x%02x / 0x%02x / ref 0x%02x", sr, i, oc[i],
             cc[i], rc[i]);
    for (size_t b = 0; b < n / 32; ++b) EXPECT(oe[b] == ce[b] && oe[b] == re[b], "requant mxfp8 scale %zu", b);
    ncmp += (long)n;
  }
  /* E[requantized] == dequantized forward value */
  {
    fb_nvfp4_opts o = {0};
    o.outer = FB_OUTER_ROW;
    o.four_over_six = 1;
    nv_buf q = nv_alloc(rows, cols, rows);
    fb_nvfp4_quantize(x, rows, cols, &o, q.codes, q.sf, q.sdec, NULL);
    fb_nvfp4_dequantize(q.codes, q.sf, q.sdec, rows, cols, &o, y);
    transpose(y, rows, cols, yt); /* cols x rows: the requantized layout */
    double *sum = xcalloc(n * sizeof *sum), *E = xmalloc(n * sizeof *E), *var = xmalloc(n * sizeof *var), *w = xmalloc(n * sizeof *w);
    double *stp = xmalloc(n * sizeof *stp);
    fb_sr_opts ro = {FB_ROUND_SR, 2, 9, 0};
    ref_mx_rowwise(yt, cols, rows, &ro, rc, re);
    sr_moments(yt, re, n, E, var, w, stp);
    const unsigned N = 1024;
    for (unsigned s = 0; s < N; ++s) {
      ro.step = s;
      fb_status st = fb_requant_nvfp4_to_mxfp8t(q.codes, q.sf, q.sdec, rows, cols, &o, &ro, oc, oe);
      if (st == FB_OK) st = fb_mxfp8_dequantize(oc, oe, cols, rows, z);
      if (st != FB_OK) { EXPECT(0, "requant SR step %u: %s", s, fb_errmsg()); break; }
      for (size_t i = 0; i < n; ++i) sum[i] += z[i];
    }
    double worst = 0, maxrel = 0;
    for (size_t i = 0; i < n; ++i) {
      double m = sum[i] / N, b = stp[i] / 256 + mean_bound(var[i], w[i], N) + 1e-12 * fabs(yt[i]);
      EXPECT(fabs(E[i] - yt[i]) < stp[i] / 256, "E[requant] [%zu] exact %.9g vs %a", i,
             E[i], (double)yt[i]);
      EXPECT(fabs(m - yt[i]) <= b, "E[requant] [%zu]: mean %.9g vs forward value %a, bound %.3g", i, m, (double)yt[i], b);
      worst = fmax(worst, fabs(m - yt[i]) / b);
      if (yt[i] != 0) maxrel = fmax(maxrel, fabs(m - yt[i]) / fabs(yt[i]));
    }
    printf("    %ld elements bit-exact vs dequant+colwise and reference; E[requant] over %u steps: worst |mean-y|/bound %.2f, max rel err %.2e\n",
           ncmp, N, worst, maxrel);
    free(sum); free(E); free(var); free(w); free(stp);
    nv_free(&q);
  }
  free(x); free(y); free(yt); free(z); free(oc); free(oe); free(cc); free(ce); free(rc); free(re); free(mc); free(me);
  END();
}

/* =================================================================================================
 * RHT-32 and S2F6
 * ================================================================================================= */
static void test_rht32(void **state) {
  (void)state;
  BEGIN();
  float e[32], y[32], z[32], w[32];
  /* e_0 with signs 0 -> all ones; each unit vector -> a Hadamard row (-1)^popcount(k & j) */
  for (int k = 0; k < 32; ++k) {
    memset(e, 0, sizeof e);
    e[k] = 1.0f;
    fb_rht32_forward(e, 0, y);
    for (int j = 0; j < 32; ++j) {
      float want = (__builtin_popcount((unsigned)(k & j)) & 1) ? -1.0f : 1.0f;
      EXPECT(y[j] == want, "H32 e_%d [%d] = %g want %g", k, j, (double)y[j], (double)want);
    }
    fb_rht32_forward(y, 0, z); /* H32 H32 = 32 I */
    for (int j = 0; j < 32; ++j) EXPECT(z[j] == (j == k ? 32.0f : 0.0f), "H32^2 e_%d [%d] = %g", k, j, (double)z[j]);
  }
  rng_t g = {321};
  double maxerr = 0;
  for (int t = 0; t < 2000; ++t) {
    uint32_t s = (uint32_t)rng_next(&g);
    int ints = t % 2;
    for (int i = 0; i < 32; ++i)
      e[i] = ints ? (float)rng_int(&g, -1000, 1000) : (float)(rng_normal(&g) * ldexp(1.0, rng_int(&g, -20, 20)));
    fb_rht32_forward(e, s, y);
    ref_rht_fwd(e, s, w);
    for (int i = 0; i < 32; ++i) EXPECT(same_f(y[i], w[i]), "rht fwd bit-exact t=%d [%d] lib %a ref %a", t, i, (double)y[i], (double)w[i]);
    /* sign convention: y = H (s . x) with a direct O(32^2) sum on integers (exact) */
    if (ints)
      for (int j = 0; j < 32; ++j) {
        double acc = 0;
        for (int i = 0; i < 32; ++i)
          acc += ((__builtin_popcount((unsigned)(i & j)) & 1) ? -1.0 : 1.0) * (((s >> i) & 1u) ? -e[i] : e[i]);
        EXPECT(y[j] == (float)acc, "rht fwd sign convention [%d] %g want %g", j, (double)y[j], acc);
      }
    fb_rht32_inverse(y, s, z);
    ref_rht_inv(y, s, w);
    double amax = 0;
    for (int i = 0; i < 32; ++i) amax = fmax(amax, fabs(e[i]));
    for (int i = 0; i < 32; ++i) {
      EXPECT(same_f(z[i], w[i]), "rht inv bit-exact [%d] lib %a ref %a", i, (double)z[i], (double)w[i]);
      if (ints) EXPECT(z[i] == e[i], "rht inverse not exact on integers [%d]: %g vs %g", i, (double)z[i], (double)e[i]);
      double err = fabs((double)z[i] - e[i]) / amax;
      maxerr = fmax(maxerr, err);
      EXPECT(err <= 1e-5, "rht inverse error %g (rel. to amax) at [%d]", err, i);
    }
  }
  printf("    H32 rows, H32^2 = 32 I, FWHT stage order bit-exact, inv(fwd(x)): max |err|/amax %.2e (integers exact)\n", maxerr);
  END();
}

static void test_s2f6(void **state) {
  (void)state;
  BEGIN();
  /* block exponent rule */
  rng_t g = {606};
  long nexp = 0;
  for (int e = 0; e <= 254; ++e) {
    float t = (float)(127.0 / 64.0 * ldexp(1.0, e - 127)); /* exact */
    float probes[4] = {t, nextafterf(t, INFINITY), nextafterf(t, 0.0f), (float)(t * (0.6 + 0.4 * rng_u01(&g)))};
    for (int k = 0; k < 4; ++k) {
      uint8_t got = fb_s2f6_block_exp(probes[k]), want = ref_s2f6_exp(probes[k]);
      EXPECT(got == want, "s2f6 block exp(%a) lib %u ref %u", (double)probes[k], got, want);
      ++nexp;
    }
  }
  EXPECT(fb_s2f6_block_exp(0.0f) == 0 && fb_s2f6_block_exp(FLT_MAX) == 254 && fb_s2f6_block_exp(INFINITY) == 254 &&
             fb_s2f6_block_exp(1.0f) == 127 && fb_s2f6_block_exp(2.0f) == 128 && fb_s2f6_block_exp(1.984375f) == 127,
         "s2f6 block exp anchors: 0->%u FLT_MAX->%u Inf->%u 1->%u 2->%u", fb_s2f6_block_exp(0.0f), fb_s2f6_block_exp(FLT_MAX),
         fb_s2f6_block_exp(INFINITY), fb_s2f6_block_exp(1.0f), fb_s2f6_block_exp(2.0f));
  /* quantize / dequantize vs reference; half-step bound; RHT reduction on data with outliers */
  const size_t rows = 256, cols = 512, n = rows * cols, nb = n / 32;
  float *x = xmalloc(n * sizeof *x), *y = xmalloc(n * sizeof *y), *yr = xmalloc(n * sizeof *yr), *rot = xmalloc(n * sizeof *rot);
  int8_t *q = xmalloc(n), *qr = xmalloc(n);
  uint8_t *e8 = xmalloc(nb), *er = xmalloc(nb);
  uint32_t signs = fb_rht_signs(2024, 0);
  double mse[2][2];
  static const char *dn[2] = {"gaussian", "outliers"};
  for (int d = 0; d < 2; ++d) {
    for (size_t i = 0; i < n; ++i) {
      x[i] = (float)rng_normal(&g);
      if (d == 1 && (rng_next(&g) % 64) == 0) x[i] *= 40.0f; /* ~1 outlier in 64 */
    }
    for (int rht = 0; rht < 2; ++rht) {
      fb_status st = fb_s2f6_quantize(x, rows, cols, rht, signs, q, e8);
      EXPECT(st == FB_OK, "s2f6 quantize: %s", fb_errmsg());
      ref_s2f6_quantize(x, rows, cols, rht, signs, qr, er);
      for (size_t i = 0; i < n; ++i) EXPECT(q[i] == qr[i], "s2f6 rht=%d q[%zu] lib %d ref %d", rht, i, q[i], qr[i]);
      for (size_t b = 0; b < nb; ++b) EXPECT(e8[b] == er[b], "s2f6 rht=%d e8m0[%zu] lib %u ref %u", rht, b, e8[b], er[b]);
      st = fb_s2f6_dequantize(q, e8, rows, cols, rht, signs, y);
      EXPECT(st == FB_OK, "s2f6 dequantize: %s", fb_errmsg());
      ref_s2f6_dequantize(q, e8, rows, cols, rht, signs, yr);
      for (size_t i = 0; i < n; ++i) EXPECT(same_f(y[i], yr[i]), "s2f6 dequant rht=%d [%zu] lib %a ref %a", rht, i, (double)y[i], (double)yr[i]);
      /* half a step per element in the rotated domain: |y_i - y^_i| <= 2^(e-127) / 128 */
      fb_s2f6_dequantize(q, e8, rows, cols, 0, 0, yr); /* y^ without the inverse */
      for (size_t b = 0; b < nb; ++b) {
        if (rht) fb_rht32_forward(x + b * 32, signs, rot + b * 32); else memcpy(rot + b * 32, x + b * 32, 32 * sizeof(float));
        double half = ldexp(1.0, (int)e8[b] - 127) / 128.0;
        for (int i = 0; i < 32; ++i)
          EXPECT(fabs((double)rot[b * 32 + i] - yr[b * 32 + i]) <= half, "s2f6 rht=%d block %zu [%d]: |%a - %a| > half step %g",
                 rht, b, i, (double)rot[b * 32 + i], (double)yr[b * 32 + i], half);
      }
      mse[d][rht] = mse_of(y, x, n);
    }
    printf("    s2f6 %-8s MSE no RHT %.4e  RHT %.4e  reduction %.1f%%\n", dn[d], mse[d][0], mse[d][1],
           100.0 * (1.0 - mse[d][1] / mse[d][0]));
  }
  EXPECT(mse[1][1] < mse[1][0], "RHT does not reduce S2F6 error with outliers: %.4e vs %.4e", mse[1][1], mse[1][0]);
  /* specials: zero, denormal, saturating (FLT_MAX, Inf) blocks without RHT, against the formulas */
  float s[32 * 5];
  int8_t sq[32 * 5], sqr[32 * 5];
  uint8_t se[5], ser[5];
  for (int i = 0; i < 32; ++i) {
    s[i] = (i & 1) ? -0.0f : 0.0f;
    s[32 + i] = (float)(rng_normal(&g) * 1e-40);
    s[64 + i] = (float)rng_normal(&g);
    s[96 + i] = (float)rng_normal(&g);
    /* block 4: amax 1 -> e = 127, q = rint_even(64 y): exact ties k + 1/2 */
    s[128 + i] = i == 0 ? 1.0f : (float)((i % 2 ? 1 : -1) * (i + 0.5) / 64.0);
  }
  s[64 + 3] = FLT_MAX;
  s[64 + 4] = -FLT_MAX;
  s[96 + 1] = INFINITY;
  fb_status st = fb_s2f6_quantize(s, 1, 160, 0, 0, sq, se);
  EXPECT(st == FB_OK, "s2f6 specials: %s", fb_errmsg());
  ref_s2f6_quantize(s, 1, 160, 0, 0, sqr, ser);
  for (int b = 0; b < 5; ++b) EXPECT(se[b] == ser[b], "s2f6 specials block %d e lib %u ref %u", b, se[b], ser[b]);
  for (int i = 0; i < 160; ++i) EXPECT(sq[i] == sqr[i], "s2f6 specials [%d] x=%a lib %d ref %d", i, (double)s[i], sq[i], sqr[i]);
  EXPECT(se[4] == 127 && sq[128 + 1] == 2 && sq[128 + 2] == -2 && sq[128 + 3] == 4 && sq[128 + 4] == -4, "s2f6 ties to even: %d %d %d",
         sq[129], sq[130], sq[131]);
  EXPECT(se[0] == 0 && se[2] == 254 && sq[64 + 3] == 127 && sq[64 + 4] == -127 && sq[96 + 1] == 127,
         "s2f6 zero / saturation: e %u %u q %d %d %d", se[0], se[2], sq[67], sq[68], sq[97]);
  printf("    block exponent: %ld probes; %zux%zu quantize/dequantize bit-exact with and without RHT\n", nexp, rows, cols);
  free(x); free(y); free(yr); free(rot); free(q); free(qr); free(e8); free(er);
  END();
}

/* =================================================================================================
 * invalid arguments
 * ================================================================================================= */
#define EXPECT_EINVAL(call)                                                                          \
  do {                                                                                               \
    fb_clearerr();                                                                                   \
    fb_status s_ = (call);                                                                           \
    EXPECT(s_ == FB_EINVAL && fb_errmsg()[0] != 0, "%s -> %s, message \"%s\"", #call, fb_status_name(s_), fb_errmsg()); \
    if (s_ == FB_EINVAL) ++nok;                                                                      \
  } while (0)

static void test_invalid_args(void **state) {
  (void)state;
  BEGIN();
  int nok = 0;
  static float x[64 * 64], y[64 * 64];
  static uint8_t c[64 * 64], sf[64 * 64], e[64 * 64];
  static int8_t q[64 * 64];
  float sd[64];
  fb_nvfp4_opts o = {0}, o2 = {0}, og = {0}, og2 = {0};
  o.outer = FB_OUTER_ROW;
  o2.outer = FB_OUTER_ROW;
  o2.two_d = 1;
  og.outer = FB_OUTER_GROUP;
  og.ngroups = 2;
  og.group_offsets = NULL;
  size_t bad_off[3] = {0, 10, 30}; /* last != rows (32) */
  og2.outer = FB_OUTER_GROUP;
  og2.ngroups = 2;
  og2.group_offsets = bad_off;
  fb_sr_opts rn = {FB_ROUND_RN, 0, 0, 0};
  EXPECT_EINVAL(fb_nvfp4_quantize(x, 4, 24, &o, c, sf, sd, NULL));
  EXPECT_EINVAL(fb_nvfp4_quantize(NULL, 4, 32, &o, c, sf, sd, NULL));
  EXPECT_EINVAL(fb_nvfp4_quantize(x, 4, 32, NULL, c, sf, sd, NULL));
  EXPECT_EINVAL(fb_nvfp4_quantize(x, 4, 32, &o, NULL, sf, sd, NULL));
  EXPECT_EINVAL(fb_nvfp4_quantize(x, 4, 32, &o, c, NULL, sd, NULL));
  EXPECT_EINVAL(fb_nvfp4_quantize(x, 4, 32, &o, c, sf, NULL, NULL));
  EXPECT_EINVAL(fb_nvfp4_quantize(x, 32, 32, &o2, c, sf, sd, NULL));
  EXPECT_EINVAL(fb_nvfp4_quantize(x, 32, 32, &og, c, sf, sd, NULL));
  EXPECT_EINVAL(fb_nvfp4_quantize(x, 32, 32, &og2, c, sf, sd, NULL));
  EXPECT_EINVAL(fb_nvfp4_dequantize(c, sf, sd, 4, 24, &o, y));
  EXPECT_EINVAL(fb_nvfp4_dequantize(NULL, sf, sd, 4, 32, &o, y));
  EXPECT_EINVAL(fb_mxfp8_quantize(x, 4, 48, FB_MX_ROWWISE, &rn, c, e));
  EXPECT_EINVAL(fb_mxfp8_quantize(x, 48, 32, FB_MX_COLWISE, &rn, c, e));
  EXPECT_EINVAL(fb_mxfp8_quantize(NULL, 4, 32, FB_MX_ROWWISE, &rn, c, e));
  EXPECT_EINVAL(fb_mxfp8_quantize(x, 4, 32, FB_MX_ROWWISE, &rn, NULL, e));
  EXPECT_EINVAL(fb_mxfp8_dequantize(c, e, 4, 48, y));
  EXPECT_EINVAL(fb_mxfp8_dequantize(c, e, 4, 32, NULL));
  EXPECT_EINVAL(fb_requant_nvfp4_to_mxfp8t(c, sf, sd, 48, 32, &o, &rn, c, e));
  EXPECT_EINVAL(fb_requant_nvfp4_to_mxfp8t(c, sf, sd, 32, 24, &o, &rn, c, e));
  EXPECT_EINVAL(fb_requant_nvfp4_to_mxfp8t(NULL, sf, sd, 32, 32, &o, &rn, c, e));
  EXPECT_EINVAL(fb_requant_mxfp8_to_mxfp8t(c, e, 48, 32, &rn, c, e));
  EXPECT_EINVAL(fb_requant_mxfp8_to_mxfp8t(c, e, 32, 48, &rn, c, e));
  EXPECT_EINVAL(fb_s2f6_quantize(x, 4, 48, 1, 0, q, e));
  EXPECT_EINVAL(fb_s2f6_quantize(NULL, 4, 32, 1, 0, q, e));
  EXPECT_EINVAL(fb_s2f6_dequantize(q, e, 4, 48, 1, 0, y));
  EXPECT_EINVAL(fb_s2f6_dequantize(q, NULL, 4, 32, 1, 0, y));
  printf("    %d invalid calls rejected with FB_EINVAL and a message\n", nok);
  END();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_decode_tables),     cmocka_unit_test(test_encode_roundtrip),
      cmocka_unit_test(test_encode_rn_ties_satfinite), cmocka_unit_test(test_e8m0_encode_up),
      cmocka_unit_test(test_sr_definition),     cmocka_unit_test(test_sr_unbiased),
      cmocka_unit_test(test_sr_bits_and_signs), cmocka_unit_test(test_nvfp4_reference),
      cmocka_unit_test(test_nvfp4_sr),          cmocka_unit_test(test_nvfp4_four_over_six),
      cmocka_unit_test(test_nvfp4_2d),          cmocka_unit_test(test_nvfp4_specials),
      cmocka_unit_test(test_mxfp8_reference),   cmocka_unit_test(test_mxfp8_sr_unbiased),
      cmocka_unit_test(test_mxfp8_specials),    cmocka_unit_test(test_requant),
      cmocka_unit_test(test_rht32),             cmocka_unit_test(test_s2f6),
      cmocka_unit_test(test_invalid_args),
  };
  return cmocka_run_group_tests_name("numerics", tests, NULL, NULL);
}
