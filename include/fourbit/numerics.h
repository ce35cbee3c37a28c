/* fourbit/numerics.h — the numerics library (runtime/numerics.c): every format of docs/numerics.md, bit by
 * bit: element encode/decode (E2M1, E4M3, E5M2, E8M0, S2F6), the SR bits, NVFP4 and MXFP8 block quantizers, the
 * backward's requantize-transpose, RHT-32, S2F6 blocks. The CPU reference every GPU kernel is checked against. */
#ifndef FOURBIT_NUMERICS_H
#define FOURBIT_NUMERICS_H

#include "fourbit/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- element formats (docs/numerics.md, "Element formats") ------------------------------------ */
/* All encoders are satfinite: finite overflow and +-Inf go to +-max. A negative value that
 * rounds to zero keeps its sign. NaN: E2M1 -> 0x7 (+6), E4M3 -> 0x7F, E5M2 -> 0x7F.
 * _sr variants take the 8 random bits r of docs/numerics.md "Stochastic rounding". */
float   fb_e2m1_decode(uint8_t code);          /* low 4 bits */
uint8_t fb_e2m1_encode_rn(float x);
uint8_t fb_e2m1_encode_sr(float x, uint8_t r);
float   fb_e4m3_decode(uint8_t code);          /* 0x7F/0xFF -> NaN */
uint8_t fb_e4m3_encode_rn(float x);
uint8_t fb_e4m3_encode_sr(float x, uint8_t r);
float   fb_e5m2_decode(uint8_t code);          /* IEEE-like: Inf, NaN */
uint8_t fb_e5m2_encode_rn(float x);
uint8_t fb_e5m2_encode_sr(float x, uint8_t r);
float   fb_e8m0_decode(uint8_t code);          /* 2^(code-127); 0xFF -> NaN */
uint8_t fb_e8m0_encode_up(float x);            /* the rounded-up rule of docs/numerics.md (MXFP8) */
float   fb_s2f6_decode(int8_t q);              /* q / 64 */

/* ---- stochastic rounding bits -------------------------------------------------------------- */
/* Philox4x32-10, key = (seed, stream), counter = (step, c mod 2^32, c div 2^32, 0) with
 * c = i / 16: returns r for output element i (byte i % 16 of the 128-bit block). */
uint8_t fb_sr_bits(uint32_t seed, uint32_t stream, uint32_t step, uint64_t i);

typedef enum { FB_ROUND_RN = 0, FB_ROUND_SR = 1 } fb_rounding;
typedef enum { FB_OUTER_TENSOR = 0, FB_OUTER_ROW = 1, FB_OUTER_GROUP = 2 } fb_outer;

typedef struct {
  fb_rounding rounding;
  uint32_t seed, stream, step;   /* SR only */
} fb_sr_opts;

/* ---- NVFP4 ---------------------------------------------------------------------------------- */
typedef struct {
  fb_outer outer;            /* outer-scale granularity */
  const size_t *group_offsets; /* FB_OUTER_GROUP: ngroups+1 row offsets, [0]=0, [ngroups]=rows */
  size_t ngroups;
  int four_over_six;         /* 4/6: E4M3 max taken as 256 in S_enc, per-block choice of sf6/sf4 */
  int two_d;                 /* 16x16 tiles share one block amax (tensor or group outer only) */
  fb_rounding rounding;
  uint32_t seed, stream, step;
} fb_nvfp4_opts;

/* Number of S_dec outer scales for these options and rows: 1, rows, or ngroups. */
size_t fb_nvfp4_nouter(const fb_nvfp4_opts *o, size_t rows);

/* x: rows x cols (cols % 16 == 0). codes: rows*cols/2 bytes; sf: rows*cols/16 E4M3 bytes;
 * s_dec: fb_nvfp4_nouter() floats. chose4 (may be NULL): rows*cols/16 flags, 1 where 4/6 kept sf4. */
fb_status fb_nvfp4_quantize(const float *x, size_t rows, size_t cols, const fb_nvfp4_opts *o,
                            uint8_t *codes, uint8_t *sf, float *s_dec, uint8_t *chose4);
/* y = e2m1(q) * float(sf) * S_dec, in that order (fp32). */
fb_status fb_nvfp4_dequantize(const uint8_t *codes, const uint8_t *sf, const float *s_dec,
                              size_t rows, size_t cols, const fb_nvfp4_opts *o, float *y);
/* The per-group amax and S_enc of docs/numerics.md (A with NaN ignored). four_over_six picks 256. */
float fb_nvfp4_s_enc(float amax, int four_over_six);

/* ---- MXFP8 (E4M3 elements, E8M0 scale per 32) ------------------------------------------------ */
typedef enum { FB_MX_ROWWISE = 0, FB_MX_COLWISE = 1 } fb_mx_layout;
/* ROWWISE: codes rows x cols, e8m0 rows x cols/32 (cols % 32 == 0).
 * COLWISE: blocks down a column, stored transposed: codes cols x rows, e8m0 cols x rows/32
 * (rows % 32 == 0). SR element index = row-major index in the stored (output) layout. */
fb_status fb_mxfp8_quantize(const float *x, size_t rows, size_t cols, fb_mx_layout layout,
                            const fb_sr_opts *r, uint8_t *codes, uint8_t *e8m0);
/* ROWWISE for a slice of a larger operand: SR element index of (row, col) = (row0 + row) * ld + col0 + col (ld 0:
 * cols; ld and col0 multiples of 32), so that a rank's rows draw the bits one rank draws for them. */
fb_status fb_mxfp8_quantize_rows_at(const float *x, size_t rows, size_t cols, const fb_sr_opts *r, size_t row0, size_t ld,
                                    size_t col0, uint8_t *codes, uint8_t *e8m0);
/* Dequantize a stored MXFP8 matrix (srows x scols as stored, blocks along its rows). */
fb_status fb_mxfp8_dequantize(const uint8_t *codes, const uint8_t *e8m0, size_t srows,
                              size_t scols, float *y);

/* ---- the backward's requantize-transpose ---------------------------------------------------- */
/* NVFP4 (rows x cols as quantized with o) -> FP32 -> transposed MXFP8 (cols x rows, blocks
 * along rows) with the rounding of r. rows % 32 == 0. */
fb_status fb_requant_nvfp4_to_mxfp8t(const uint8_t *codes, const uint8_t *sf, const float *s_dec,
                                     size_t rows, size_t cols, const fb_nvfp4_opts *o,
                                     const fb_sr_opts *r, uint8_t *out_codes, uint8_t *out_e8m0);
/* MXFP8 row-wise (rows x cols) -> FP32 -> transposed MXFP8 (cols x rows). */
fb_status fb_requant_mxfp8_to_mxfp8t(const uint8_t *codes, const uint8_t *e8m0, size_t rows,
                                     size_t cols, const fb_sr_opts *r, uint8_t *out_codes,
                                     uint8_t *out_e8m0);

/* ---- RHT-32 and S2F6 ------------------------------------------------------------------------ */
/* The sign mask: word 0 of Philox4x32-10, key (seed, 1), counter (step, 0, 0, 0); step 0 is
 * the default "fixed per run" mask. */
uint32_t fb_rht_signs(uint32_t seed, uint32_t step);
void fb_rht32_forward(const float *x, uint32_t signs, float *y);  /* y = H32 (s . x) */
void fb_rht32_inverse(const float *y, uint32_t signs, float *x);  /* x = s . (H32 y) / 32 */
/* E8M0 of a 32-block: smallest e in [0,254] with amax <= 127/64 * 2^(e-127) (254 if none). */
uint8_t fb_s2f6_block_exp(float amax);
/* x: rows x cols, cols % 32 == 0. rht: apply RHT-32 with `signs` to each block first.
 * q: rows*cols int8; e8m0: rows*cols/32. */
fb_status fb_s2f6_quantize(const float *x, size_t rows, size_t cols, int rht, uint32_t signs,
                           int8_t *q, uint8_t *e8m0);
fb_status fb_s2f6_dequantize(const int8_t *q, const uint8_t *e8m0, size_t rows, size_t cols,
                             int rht, uint32_t signs, float *y);

#ifdef __cplusplus
}
#endif
#endif
