/* numerics.c — the host numerics library: every format of docs/numerics.md, operation for
 * operation. This is the oracle of every GPU kernel, so the order of fp32 operations below is part of
 * the contract (built with -ffp-contract=off; fmaf only where docs/numerics.md says).
 *
 * Entry points (see include/fourbit.h): fb_{e2m1,e4m3,e5m2}_{encode_rn,encode_sr,decode},
 * fb_e8m0_{encode_up,decode}, fb_s2f6_decode, fb_sr_bits, fb_nvfp4_{quantize,dequantize,s_enc,nouter},
 * fb_mxfp8_{quantize,dequantize}, fb_requant_{nvfp4,mxfp8}_to_mxfp8t, fb_rht_signs,
 * fb_rht32_{forward,inverse}, fb_s2f6_{block_exp,quantize,dequantize}.
 *
 * Edge rules that docs/numerics.md leaves to the implementation, fixed here (GPU kernels copy them):
 *  - MXFP8 block amax propagates NaN (so the scale is 0xFF, as the spec's E8M0 rule says);
 *    inv_b = 2^(127 - e_b) for every e_b, and dequantization multiplies by decode(e_b) (NaN for 0xFF).
 *  - S2F6: the block amax propagates NaN; a block with NaN or Inf (no e satisfies the rule) gets
 *    e_b = 254; a NaN element encodes as 0. The runtime's amax pass skips such steps anyway.
 *  - NVFP4 2D blocks are 16-row tiles aligned to the start of each outer group; they combine with
 *    tensor or group outer scales only, and not with Four Over Six (a per-row choice would break the
 *    transpose symmetry that is the point of 2D). */
#include "fb_error.h"
#include "fb_philox.h"
#include "fourbit.h"

#include <float.h>
#include <pthread.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- element formats ---------------------------------------------------------------------- */
typedef struct {
  int ebits, mbits, bias;
  float maxv;
  uint8_t nan_code;
} fmt_t;

static const fmt_t E2M1 = {2, 1, 1, 6.0f, 0x7};
static const fmt_t E4M3 = {4, 3, 7, 448.0f, 0x7F};
static const fmt_t E5M2 = {5, 2, 15, 57344.0f, 0x7F};

/* 2^k for the k a format's grid needs (|k| < 127): built from the bits, exact, no libm call */
static float pow2f(int k) {
  uint32_t u = (uint32_t)(k + 127) << 23;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* floor(log2(a)) of a finite a > 0 (frexpf's exponent - 1) */
static int ilog2f(float a) {
  uint32_t u;
  memcpy(&u, &a, 4);
  int be = (int)(u >> 23) & 0xFF;
  if (be) return be - 127;
  int e;
  frexpf(a, &e); /* FP32 subnormal */
  return e - 1;
}

static float fmt_decode_slow(const fmt_t *f, uint8_t code) {
  int nb = f->ebits + f->mbits;
  int sign = (code >> nb) & 1;
  int e = (code >> f->mbits) & ((1 << f->ebits) - 1);
  int m = code & ((1 << f->mbits) - 1);
  float v;
  if (f == &E4M3 && e == 15 && m == 7) return NAN;
  if (f == &E5M2 && e == 31) v = m ? NAN : INFINITY;
  else if (e == 0) v = ldexpf((float)m, 1 - f->bias - f->mbits);
  else v = ldexpf((float)((1 << f->mbits) + m), e - f->bias - f->mbits);
  return sign ? -v : v;
}

/* Decoding is a table lookup: the tables are fmt_decode_slow of every code, built once. */
static float DEC_E2M1[16], DEC_E4M3[256], DEC_E5M2[256];
static pthread_once_t dec_once = PTHREAD_ONCE_INIT;
static void dec_init(void) {
  for (int c = 0; c < 16; ++c) DEC_E2M1[c] = fmt_decode_slow(&E2M1, (uint8_t)c);
  for (int c = 0; c < 256; ++c) DEC_E4M3[c] = fmt_decode_slow(&E4M3, (uint8_t)c), DEC_E5M2[c] = fmt_decode_slow(&E5M2, (uint8_t)c);
}
static float fmt_decode(const fmt_t *f, uint8_t code) {
  pthread_once(&dec_once, dec_init);
  return f == &E2M1 ? DEC_E2M1[code & 0xF] : f == &E4M3 ? DEC_E4M3[code] : DEC_E5M2[code];
}

/* q is a non-negative value on the format's grid (<= max); returns its code without sign. */
static uint8_t fmt_bits(const fmt_t *f, float q) {
  if (q == 0.0f) return 0;
  int emin = 1 - f->bias, e = ilog2f(q); /* q in [2^e, 2^(e+1)) */
  if (e < emin) return (uint8_t)(q * pow2f(f->mbits - emin));          /* exact: by a power of two */
  int m = (int)(q * pow2f(f->mbits - e)) - (1 << f->mbits);
  return (uint8_t)(((e + f->bias) << f->mbits) | m);
}

/* RN (sr == 0) or SR with random byte r, satfinite; docs/numerics.md "Stochastic rounding". */
static uint8_t fmt_encode(const fmt_t *f, float x, int sr, uint8_t r) {
  if (isnan(x)) return f->nan_code;
  uint8_t sign = signbit(x) ? (uint8_t)(1u << (f->ebits + f->mbits)) : 0;
  float a = fabsf(x), q;
  if (isinf(a)) {
    q = f->maxv;
  } else if (a == 0.0f) {
    q = 0.0f;
  } else {
    int emin = 1 - f->bias, e = ilog2f(a);
    if (e < emin) e = emin;
    float step = pow2f(e - f->mbits); /* spacing of |x|'s binade (subnormal below min normal) */
    float m = a * pow2f(f->mbits - e); /* a / step, exact: step is a power of two */
    int im = (int)m; /* m in [0, 2^(mbits+1)): truncation is floor */
    float fl = (float)im, fr = m - fl; /* exact */
    if (!sr) {
      /* rintf(m), ties to even: the code's last mantissa bit is m's */
      q = (fr > 0.5f || (fr == 0.5f && (im & 1)) ? fl + 1.0f : fl) * step;
    } else {
      unsigned t = (unsigned)(fr * 256.0f); /* floor: non-negative */
      q = (fl + (float)(t + r >= 256u)) * step;
    }
    if (q > f->maxv) q = f->maxv;
  }
  return (uint8_t)(sign | fmt_bits(f, q));
}

float fb_e2m1_decode(uint8_t c) { return fmt_decode(&E2M1, c & 0xF); }
uint8_t fb_e2m1_encode_rn(float x) { return fmt_encode(&E2M1, x, 0, 0); }
uint8_t fb_e2m1_encode_sr(float x, uint8_t r) { return fmt_encode(&E2M1, x, 1, r); }
float fb_e4m3_decode(uint8_t c) { return fmt_decode(&E4M3, c); }
uint8_t fb_e4m3_encode_rn(float x) { return fmt_encode(&E4M3, x, 0, 0); }
uint8_t fb_e4m3_encode_sr(float x, uint8_t r) { return fmt_encode(&E4M3, x, 1, r); }
float fb_e5m2_decode(uint8_t c) { return fmt_decode(&E5M2, c); }
uint8_t fb_e5m2_encode_rn(float x) { return fmt_encode(&E5M2, x, 0, 0); }
uint8_t fb_e5m2_encode_sr(float x, uint8_t r) { return fmt_encode(&E5M2, x, 1, r); }

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float fb_e8m0_decode(uint8_t c) {
  if (c == 0xFF) return NAN;
  return c == 0 ? u2f(0x00400000u) : u2f((uint32_t)c << 23);
}

uint8_t fb_e8m0_encode_up(float x) {
  uint32_t b = f2u(fabsf(x));
  uint32_t ex = b >> 23, man = b & 0x7FFFFFu;
  if (ex == 255) return man ? 0xFF : 0xFE;
  if (ex == 0) return b <= 0x00400000u ? 0x00 : 0x01; /* denormals: 2^-127 is code 0 */
  uint32_t e = ex + (man != 0);
  return (uint8_t)(e > 254 ? 254 : e);
}

float fb_s2f6_decode(int8_t q) { return (float)q / 64.0f; }

uint8_t fb_sr_bits(uint32_t seed, uint32_t stream, uint32_t step, uint64_t i) {
  return fb_philox_sr_byte(seed, stream, step, i);
}

/* 16 SR bytes of the aligned group c = i / 16. */
static void sr16(uint32_t seed, uint32_t stream, uint32_t step, uint64_t i, uint8_t r[16]) {
  uint64_t c = i >> 4;
  fb_u32 ctr[4] = {step, (fb_u32)c, (fb_u32)(c >> 32), 0u}, key[2] = {seed, stream}, out[4];
  fb_philox4x32_10(ctr, key, out);
  for (int j = 0; j < 16; ++j) r[j] = (uint8_t)(out[j >> 2] >> (8 * (j & 3)));
}

/* ---- NVFP4 --------------------------------------------------------------------------------- */
float fb_nvfp4_s_enc(float amax, int four_over_six) {
  float num = four_over_six ? 6.0f * 256.0f : 6.0f * 448.0f;
  float s = fminf(num / amax, FLT_MAX);
  if (amax == 0.0f || s == 0.0f) s = 1.0f;
  return s;
}

size_t fb_nvfp4_nouter(const fb_nvfp4_opts *o, size_t rows) {
  return o->outer == FB_OUTER_TENSOR ? 1 : o->outer == FB_OUTER_ROW ? rows : o->ngroups;
}

static fb_status nvfp4_check(const void *a, const void *b, const void *c, const void *d, size_t rows,
                             size_t cols, const fb_nvfp4_opts *o) {
  if (!a || !b || !c || !d || !o) return FB_ERR(FB_EINVAL, "nvfp4: NULL argument");
  if (rows == 0 || cols == 0 || cols % 16)
    return FB_ERR(FB_EINVAL, "nvfp4: %zu x %zu: cols must be a positive multiple of 16", rows, cols);
  if (o->outer > FB_OUTER_GROUP) return FB_ERR(FB_EINVAL, "nvfp4: unknown outer granularity %d", o->outer);
  if (o->rounding > FB_ROUND_SR) return FB_ERR(FB_EINVAL, "nvfp4: unknown rounding %d", o->rounding);
  if (o->outer == FB_OUTER_GROUP) {
    if (!o->group_offsets || o->ngroups == 0) return FB_ERR(FB_EINVAL, "nvfp4: group outer needs group_offsets");
    if (o->group_offsets[0] != 0 || o->group_offsets[o->ngroups] != rows)
      return FB_ERR(FB_EINVAL, "nvfp4: group_offsets must run from 0 to rows (%zu)", rows);
    for (size_t g = 0; g < o->ngroups; ++g)
      if (o->group_offsets[g + 1] < o->group_offsets[g])
        return FB_ERR(FB_EINVAL, "nvfp4: group_offsets[%zu] decreases", g + 1);
  }
  if (o->two_d && o->outer == FB_OUTER_ROW)
    return FB_ERR(FB_EINVAL, "nvfp4: 16x16 2D blocks need tensor or group outer scales, not row");
  if (o->two_d && o->four_over_six)
    return FB_ERR(FB_EINVAL, "nvfp4: 16x16 2D blocks and Four Over Six do not combine");
  return FB_OK;
}

/* Outer group g holds rows [lo[g], lo[g+1]). */
static void outer_ranges(const fb_nvfp4_opts *o, size_t rows, size_t g, size_t *lo, size_t *hi) {
  switch (o->outer) {
  case FB_OUTER_TENSOR: *lo = 0; *hi = rows; break;
  case FB_OUTER_ROW: *lo = g; *hi = g + 1; break;
  default: *lo = o->group_offsets[g]; *hi = o->group_offsets[g + 1]; break;
  }
}

/* Quantize one block of 16 with scale code sfc; returns the fp32 squared error of docs/numerics.md. */
static float nv_block(const float *x, uint8_t sfc, float s_dec, const uint8_t *r, uint8_t q[16]) {
  float sf = fb_e4m3_decode(sfc);
  if (sfc == 0) {
    memset(q, 0, 16);
  } else {
    float enc = fminf(1.0f / (sf * s_dec), FLT_MAX);
    for (int j = 0; j < 16; ++j) q[j] = r ? fb_e2m1_encode_sr(x[j] * enc, r[j]) : fb_e2m1_encode_rn(x[j] * enc);
  }
  float err = 0.0f;
  for (int j = 0; j < 16; ++j) {
    float xh = (fb_e2m1_decode(q[j]) * sf) * s_dec;
    float d = xh - x[j];
    err = fmaf(d, d, err);
  }
  return err;
}

fb_status fb_nvfp4_quantize(const float *x, size_t rows, size_t cols, const fb_nvfp4_opts *o,
                            uint8_t *codes, uint8_t *sf, float *s_dec, uint8_t *chose4) {
  FB_TRY(nvfp4_check(x, codes, sf, s_dec, rows, cols, o));
  size_t nb = cols / 16, ng = fb_nvfp4_nouter(o, rows);
  for (size_t g = 0; g < ng; ++g) {
    size_t lo, hi;
    outer_ranges(o, rows, g, &lo, &hi);
    float A = 0.0f;
    for (size_t i = lo * cols; i < hi * cols; ++i) A = fmaxf(A, fabsf(x[i])); /* NaN ignored */
    float s_enc = fb_nvfp4_s_enc(A, o->four_over_six);
    float sd = 1.0f / s_enc, k = s_enc * (1.0f / 6.0f);
    s_dec[g] = sd;
    for (size_t row = lo; row < hi; ++row) {
      for (size_t b = 0; b < nb; ++b) {
        const float *xb = x + row * cols + b * 16;
        size_t i0 = row * cols + b * 16;
        float ab = 0.0f;
        if (o->two_d) { /* the 16x16 tile holding this block, aligned to the group start */
          size_t t0 = lo + (row - lo) / 16 * 16, t1 = t0 + 16 < hi ? t0 + 16 : hi;
          for (size_t rr = t0; rr < t1; ++rr)
            for (int j = 0; j < 16; ++j) ab = fmaxf(ab, fabsf(x[rr * cols + b * 16 + j]));
        } else {
          for (int j = 0; j < 16; ++j) ab = fmaxf(ab, fabsf(xb[j]));
        }
        uint8_t rb[16], q6[16], q4[16], *r = NULL;
        if (o->rounding == FB_ROUND_SR) { sr16(o->seed, o->stream, o->step, i0, rb); r = rb; }
        float base = ab * k;
        uint8_t sf6 = fb_e4m3_encode_rn(fminf(base, 448.0f));
        float e6 = nv_block(xb, sf6, sd, r, q6);
        uint8_t pick4 = 0, sfc = sf6;
        if (o->four_over_six) {
          uint8_t sf4 = fb_e4m3_encode_rn(fminf(1.5f * base, 448.0f));
          float e4 = nv_block(xb, sf4, sd, r, q4);
          if (e4 < e6) { pick4 = 1; sfc = sf4; }
        }
        const uint8_t *q = pick4 ? q4 : q6;
        for (int j = 0; j < 16; j += 2) codes[i0 / 2 + j / 2] = (uint8_t)(q[j] | (q[j + 1] << 4));
        sf[i0 / 16] = sfc;
        if (chose4) chose4[i0 / 16] = pick4;
      }
    }
  }
  return FB_OK;
}

fb_status fb_nvfp4_dequantize(const uint8_t *codes, const uint8_t *sf, const float *s_dec, size_t rows,
                              size_t cols, const fb_nvfp4_opts *o, float *y) {
  FB_TRY(nvfp4_check(codes, sf, s_dec, y, rows, cols, o));
  size_t ng = fb_nvfp4_nouter(o, rows);
  for (size_t g = 0; g < ng; ++g) {
    size_t lo, hi;
    outer_ranges(o, rows, g, &lo, &hi);
    for (size_t i = lo * cols; i < hi * cols; ++i) {
      uint8_t c = (codes[i / 2] >> (4 * (i & 1))) & 0xF;
      y[i] = (fb_e2m1_decode(c) * fb_e4m3_decode(sf[i / 16])) * s_dec[g];
    }
  }
  return FB_OK;
}

/* ---- MXFP8 --------------------------------------------------------------------------------- */
/* SR element index of (row, col): (row0 + row) * ld + col0 + col; {0, cols, 0} is the row-major index of docs/numerics.md */
static void mx_rows(const float *x, size_t rows, size_t cols, const fb_sr_opts *r, size_t row0, size_t ld, size_t col0,
                    uint8_t *codes, uint8_t *e8m0) {
  int sr = r && r->rounding == FB_ROUND_SR;
  for (size_t row = 0; row < rows; ++row) {
    for (size_t b = 0; b < cols / 32; ++b) {
      size_t i0 = row * cols + b * 32;
      uint64_t g = (uint64_t)(row0 + row) * ld + col0 + b * 32;
      const float *xb = x + i0;
      float a = 0.0f;
      for (int j = 0; j < 32; ++j) {
        float v = fabsf(xb[j]);
        if (v > a || isnan(v)) a = isnan(a) ? a : v; /* NaN propagates */
      }
      uint8_t e = fb_e8m0_encode_up(a * (1.0f / 448.0f));
      float inv = ldexpf(1.0f, 127 - (int)e);
      uint8_t rb[32];
      if (sr) { sr16(r->seed, r->stream, r->step, g, rb); sr16(r->seed, r->stream, r->step, g + 16, rb + 16); }
      for (int j = 0; j < 32; ++j)
        codes[i0 + j] = sr ? fb_e4m3_encode_sr(xb[j] * inv, rb[j]) : fb_e4m3_encode_rn(xb[j] * inv);
      e8m0[i0 / 32] = e;
    }
  }
}

fb_status fb_mxfp8_quantize_rows_at(const float *x, size_t rows, size_t cols, const fb_sr_opts *r, size_t row0, size_t ld,
                                    size_t col0, uint8_t *codes, uint8_t *e8m0) {
  if (!x || !codes || !e8m0) return FB_ERR(FB_EINVAL, "mxfp8: NULL argument");
  if (r && r->rounding > FB_ROUND_SR) return FB_ERR(FB_EINVAL, "mxfp8: unknown rounding %d", r->rounding);
  if (rows == 0 || cols == 0 || cols % 32 || (ld && ld % 32) || col0 % 32)
    return FB_ERR(FB_EINVAL, "mxfp8: %zu x %zu at (%zu, %zu) of rows of %zu: blocks of 32 along the rows", rows, cols, row0, col0, ld);
  mx_rows(x, rows, cols, r, row0, ld ? ld : cols, col0, codes, e8m0);
  return FB_OK;
}

fb_status fb_mxfp8_quantize(const float *x, size_t rows, size_t cols, fb_mx_layout layout,
                            const fb_sr_opts *r, uint8_t *codes, uint8_t *e8m0) {
  if (!x || !codes || !e8m0) return FB_ERR(FB_EINVAL, "mxfp8: NULL argument");
  if (r && r->rounding > FB_ROUND_SR) return FB_ERR(FB_EINVAL, "mxfp8: unknown rounding %d", r->rounding);
  size_t k = layout == FB_MX_ROWWISE ? cols : rows;
  if (rows == 0 || cols == 0 || k % 32)
    return FB_ERR(FB_EINVAL, "mxfp8: %zu x %zu: the blocked dimension (%s) must be a positive multiple of 32",
                  rows, cols, layout == FB_MX_ROWWISE ? "cols" : "rows");
  if (layout == FB_MX_ROWWISE) {
    mx_rows(x, rows, cols, r, 0, cols, 0, codes, e8m0);
    return FB_OK;
  }
  if (layout != FB_MX_COLWISE) return FB_ERR(FB_EINVAL, "mxfp8: unknown layout %d", layout);
  float *t = malloc(rows * cols * sizeof *t);
  if (!t) return FB_ERR(FB_ENOMEM, "mxfp8: %zu x %zu transpose buffer", rows, cols);
  for (size_t i = 0; i < rows; ++i)
    for (size_t j = 0; j < cols; ++j) t[j * rows + i] = x[i * cols + j];
  mx_rows(t, cols, rows, r, 0, rows, 0, codes, e8m0);
  free(t);
  return FB_OK;
}

fb_status fb_mxfp8_dequantize(const uint8_t *codes, const uint8_t *e8m0, size_t srows, size_t scols,
                              float *y) {
  if (!codes || !e8m0 || !y) return FB_ERR(FB_EINVAL, "mxfp8: NULL argument");
  if (srows == 0 || scols == 0 || scols % 32)
    return FB_ERR(FB_EINVAL, "mxfp8: %zu x %zu: cols must be a positive multiple of 32", srows, scols);
  for (size_t i = 0; i < srows * scols; ++i) y[i] = fb_e4m3_decode(codes[i]) * fb_e8m0_decode(e8m0[i / 32]);
  return FB_OK;
}

/* ---- requantize-transpose (the backward) ------------------------------------------------------ */
fb_status fb_requant_nvfp4_to_mxfp8t(const uint8_t *codes, const uint8_t *sf, const float *s_dec,
                                     size_t rows, size_t cols, const fb_nvfp4_opts *o,
                                     const fb_sr_opts *r, uint8_t *out_codes, uint8_t *out_e8m0) {
  if (rows % 32) return FB_ERR(FB_EINVAL, "requant: rows (%zu) must be a multiple of 32", rows);
  float *y = malloc(rows * cols * sizeof *y);
  if (!y) return FB_ERR(FB_ENOMEM, "requant: %zu x %zu buffer", rows, cols);
  fb_status s = fb_nvfp4_dequantize(codes, sf, s_dec, rows, cols, o, y);
  if (s == FB_OK) s = fb_mxfp8_quantize(y, rows, cols, FB_MX_COLWISE, r, out_codes, out_e8m0);
  free(y);
  return s;
}

fb_status fb_requant_mxfp8_to_mxfp8t(const uint8_t *codes, const uint8_t *e8m0, size_t rows,
                                     size_t cols, const fb_sr_opts *r, uint8_t *out_codes,
                                     uint8_t *out_e8m0) {
  if (rows % 32) return FB_ERR(FB_EINVAL, "requant: rows (%zu) must be a multiple of 32", rows);
  float *y = malloc(rows * cols * sizeof *y);
  if (!y) return FB_ERR(FB_ENOMEM, "requant: %zu x %zu buffer", rows, cols);
  fb_status s = fb_mxfp8_dequantize(codes, e8m0, rows, cols, y);
  if (s == FB_OK) s = fb_mxfp8_quantize(y, rows, cols, FB_MX_COLWISE, r, out_codes, out_e8m0);
  free(y);
  return s;
}

/* ---- RHT-32 and S2F6 ------------------------------------------------------------------------ */
uint32_t fb_rht_signs(uint32_t seed, uint32_t step) {
  fb_u32 ctr[4] = {step, 0, 0, 0}, key[2] = {seed, 1u}, out[4];
  fb_philox4x32_10(ctr, key, out);
  return out[0];
}

static void wht32(float t[32]) {
  for (int k = 0; k < 5; ++k) {
    int h = 1 << k;
    for (int i = 0; i < 32; ++i) {
      if (i & h) continue;
      float u = t[i], v = t[i + h];
      t[i] = u + v;
      t[i + h] = u - v;
    }
  }
}

void fb_rht32_forward(const float *x, uint32_t signs, float *y) {
  float t[32];
  for (int i = 0; i < 32; ++i) t[i] = (signs >> i) & 1 ? -x[i] : x[i];
  wht32(t);
  memcpy(y, t, sizeof t);
}

void fb_rht32_inverse(const float *y, uint32_t signs, float *x) {
  float t[32];
  memcpy(t, y, sizeof t);
  wht32(t);
  for (int i = 0; i < 32; ++i) {
    float v = t[i] / 32.0f;
    x[i] = (signs >> i) & 1 ? -v : v;
  }
}

uint8_t fb_s2f6_block_exp(float amax) {
  if (!(amax <= ldexpf(127.0f, 254 - 133))) return 254; /* NaN, Inf, or beyond the top scale */
  if (amax <= ldexpf(127.0f, -133)) return 0;
  int ex;
  frexpf(amax, &ex); /* amax in [2^(ex-1), 2^ex) */
  int e = ex + 126;  /* 127 * 2^(e-133) is then >= 2^(ex-1)*127/128 ... adjust both ways */
  if (e < 0) e = 0;
  if (e > 254) e = 254;
  while (e > 0 && amax <= ldexpf(127.0f, e - 1 - 133)) --e;
  while (e < 254 && amax > ldexpf(127.0f, e - 133)) ++e;
  return (uint8_t)e;
}

static fb_status s2f6_check(const void *a, const void *b, const void *c, size_t rows, size_t cols) {
  if (!a || !b || !c) return FB_ERR(FB_EINVAL, "s2f6: NULL argument");
  if (rows == 0 || cols == 0 || cols % 32)
    return FB_ERR(FB_EINVAL, "s2f6: %zu x %zu: cols must be a positive multiple of 32", rows, cols);
  return FB_OK;
}

fb_status fb_s2f6_quantize(const float *x, size_t rows, size_t cols, int rht, uint32_t signs, int8_t *q,
                           uint8_t *e8m0) {
  FB_TRY(s2f6_check(x, q, e8m0, rows, cols));
  for (size_t b = 0; b < rows * cols / 32; ++b) {
    float y[32];
    if (rht) fb_rht32_forward(x + 32 * b, signs, y);
    else memcpy(y, x + 32 * b, sizeof y);
    float a = 0.0f;
    for (int j = 0; j < 32; ++j) {
      float v = fabsf(y[j]);
      if (v > a || isnan(v)) a = isnan(a) ? a : v;
    }
    uint8_t e = fb_s2f6_block_exp(a);
    float inv = ldexpf(1.0f, 127 - (int)e);
    for (int j = 0; j < 32; ++j) {
      float v = rintf((y[j] * inv) * 64.0f);
      if (isnan(v)) v = 0.0f;
      v = v < -127.0f ? -127.0f : v > 127.0f ? 127.0f : v;
      q[32 * b + j] = (int8_t)v;
    }
    e8m0[b] = e;
  }
  return FB_OK;
}

fb_status fb_s2f6_dequantize(const int8_t *q, const uint8_t *e8m0, size_t rows, size_t cols, int rht,
                             uint32_t signs, float *y) {
  FB_TRY(s2f6_check(q, e8m0, y, rows, cols));
  for (size_t b = 0; b < rows * cols / 32; ++b) {
    float t[32], s = fb_e8m0_decode(e8m0[b]);
    for (int j = 0; j < 32; ++j) t[j] = fb_s2f6_decode(q[32 * b + j]) * s;
    if (rht) fb_rht32_inverse(t, signs, y + 32 * b);
    else memcpy(y + 32 * b, t, sizeof t);
  }
  return FB_OK;
}
