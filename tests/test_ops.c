/* test_ops.c — runtime/ops.c (the CPU references of the router, permute, unpermute, SwiGLU and AdamW kernels)
 * and templates/fb_moe.h (the per-element rules the GPU templates compile), on the CPU.
 *
 *   bf16        RNE ties, overflow, NaN stays NaN (quiet), every code round-trips; random floats against a
 *               nearest-neighbour search; fbo_bf16_rne == fb_bf16_from_f32.
 *   router      probabilities sum to ~1 and match a double softmax; the warp-order sum bit for bit (emulated
 *               here lane by lane); top-k descending, ties to the lower index, nothing unselected above the
 *               last pick; weights = p / S in rank order; ties, equal rows, NaN / Inf / -Inf rows; k = 64 of
 *               4096; fbo_prob_ord is the documented total order.
 *   permute     counts, offsets padded to the tile, stable ranks (rows increase with (token, slot) order),
 *               token_of inverse of row_of, padding -1; one expert takes everything, empty experts, tile 1
 *               and 7, dropped entries; payload planes and the gather (padding rows zero).
 *   unpermute   inverts permute (top-1, weights 1) for BF16 and S2F6 (== fb_s2f6_dequantize); the fmaf slot
 *               order bit for bit; S2F6 + RHT combine near the sum of the dequantized rows; dropped entries.
 *   swiglu      forward and backward against double-precision formulas (BF16 tolerance) and bit for bit
 *               against the stated fp32 order (fbo_swiglu_*).
 *   adamw       a hand-computed step; random steps against double precision and bit for bit against
 *               fbo_adamw; the next step's BF16 / MXFP8 (RN, SR) / NVFP4 (tensor, expert, 16x16) weights equal
 *               fb_*_quantize of the updated masters; the per-expert amax.
 *   tcopy       fb_tcopy_ref's dequantizing copies: MXFP8 (every code and scale, NaNs included) and NVFP4 (tensor and
 *               row outer) to FP32 not transposed equal fb_mxfp8_dequantize / fb_nvfp4_dequantize bit for bit;
 *               MXFP8 to BF16 transposed is fb_bf16_from_f32 of the transposed dequantization.
 *   errors      invalid arguments -> FB_EINVAL with a message.
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
#include "fb_error.h"
#include "fb_moe.h"

#include "test_util.h" /* EXPECT, BEGIN, END, f2u, u2f, same_f, xmalloc, xcalloc, rng_t, rng_next, rng_u01, rng_int */
static float rng_normal(rng_t *g) {
  double u1 = rng_u01(g), u2 = rng_u01(g);
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* ---- BF16 ----------------------------------------------------------------------------------- */
static void test_bf16(void **state) {
  (void)state;
  BEGIN();
  EXPECT(fb_bf16_from_f32(1.0f) == 0x3F80, "1");
  EXPECT(fb_bf16_from_f32(u2f(0x3F808000u)) == 0x3F80, "tie 1 + 2^-8 -> even (down)");
  EXPECT(fb_bf16_from_f32(u2f(0x3F818000u)) == 0x3F82, "tie 1 + 3*2^-8 -> even (up)");
  EXPECT(fb_bf16_from_f32(u2f(0x3F808001u)) == 0x3F81, "just above a tie -> up");
  EXPECT(fb_bf16_from_f32(u2f(0x3F807FFFu)) == 0x3F80, "just below a tie -> down");
  EXPECT(fb_bf16_from_f32(FLT_MAX) == 0x7F80, "FLT_MAX rounds to Inf");
  EXPECT(fb_bf16_from_f32(-FLT_MAX) == 0xFF80, "-FLT_MAX rounds to -Inf");
  EXPECT(fb_bf16_from_f32(INFINITY) == 0x7F80 && fb_bf16_from_f32(-INFINITY) == 0xFF80, "Inf");
  EXPECT(fb_bf16_from_f32(-0.0f) == 0x8000 && fb_bf16_from_f32(0.0f) == 0x0000, "signed zero");
  EXPECT(fb_bf16_from_f32(u2f(0x00000001u)) == 0x0000, "the smallest denormal rounds to 0");
  EXPECT(fb_bf16_from_f32(u2f(0x7FC00000u)) == 0x7FC0, "quiet NaN");
  EXPECT(fb_bf16_from_f32(u2f(0x7F800001u)) == 0x7FC0, "a signaling NaN whose payload is below 16 bits stays NaN");
  EXPECT(fb_bf16_from_f32(u2f(0xFF800001u)) == 0xFFC0, "negative NaN keeps its sign");
  for (uint32_t h = 0; h < 0x10000; ++h) { /* every code round-trips; NaN codes become quiet */
    float f = fb_bf16_to_f32((uint16_t)h);
    EXPECT(f2u(f) == h << 16, "to_f32 0x%04x", h);
    uint16_t back = fb_bf16_from_f32(f);
    if (isnan(f)) EXPECT(back == (h | 0x40), "NaN 0x%04x -> 0x%04x", h, back);
    else EXPECT(back == h, "0x%04x -> 0x%04x", h, back);
  }
  rng_t g = {1};
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = (uint32_t)rng_next(&g);
    float x = u2f(u);
    uint16_t got = fb_bf16_from_f32(x);
    EXPECT(got == fbo_bf16_rne(x), "fbo_bf16_rne(0x%08x) = 0x%04x, reference 0x%04x", u, fbo_bf16_rne(x), got);
    if (isnan(x)) { EXPECT(isnan(fb_bf16_to_f32(got)), "NaN 0x%08x lost", u); continue; }
    /* nearest of the two neighbours (in double), ties to the even code; past the top binade -> Inf */
    uint32_t lo = u & 0xFFFF0000u, hi = lo + 0x10000u;
    double dlo = fabs((double)u2f(lo) - x), dhi = (hi & 0x7F800000u) == 0x7F800000u && (lo & 0x7FFFFFFFu) == 0x7F7F0000u
                                                  ? fabs(ldexp(1.0, 128) - fabs((double)x))
                                                  : fabs((double)u2f(hi) - x);
    if (isinf(x)) continue;
    uint16_t want = (uint16_t)((dlo < dhi || (dlo == dhi && !((lo >> 16) & 1))) ? lo >> 16 : hi >> 16);
    EXPECT(got == want, "0x%08x: 0x%04x, nearest 0x%04x", u, got, want);
  }
  END();
}

/* ---- router --------------------------------------------------------------------------------- */
/* The warp's sum, lane by lane as the GPU runs it: 32 registers, five shuffle-xor stages. */
static float warp_sum(const float *e, int E) {
  float lane[32];
  for (int L = 0; L < 32; ++L) {
    lane[L] = 0.0f;
    for (int j = L; j < E; j += 32) lane[L] = lane[L] + e[j];
  }
  for (int o = 16; o >= 1; o /= 2) {
    float got[32];
    for (int L = 0; L < 32; ++L) got[L] = lane[L ^ o]; /* __shfl_xor_sync */
    for (int L = 0; L < 32; ++L) lane[L] = lane[L] + got[L];
  }
  for (int L = 1; L < 32; ++L) assert_true(same_f(lane[L], lane[0])); /* every lane agrees */
  return lane[0];
}

/* p ranked before q? (descending, NaN last, -0 below +0, ties to the lower index) */
static int ranks_before(float p, int i, float q, int j) {
  if (isnan(p) != isnan(q)) return !isnan(p);
  if (!isnan(p) && p != q) return p > q;
  if (!isnan(p) && p == 0.0f && signbit(p) != signbit(q)) return !signbit(p);
  return i < j;
}

static void check_router_row(const float *l, int E, int k, const float *p, const int32_t *idx, const float *w, int exact) {
  float *e = xmalloc((size_t)E * 4);
  float m = -INFINITY;
  for (int j = 0; j < E; ++j) m = fmaxf(m, l[j]);
  for (int j = 0; j < E; ++j) e[j] = fbm_expf(l[j] - m);
  float s = warp_sum(e, E);
  for (int j = 0; j < E; ++j) EXPECT(same_f(p[j], e[j] / s), "p[%d] = %.9g, warp-order %.9g", j, p[j], e[j] / s);
  if (exact) { /* finite logits: against double precision */
    double ds = 0, sum = 0; /* exp of the fp32 difference l - m: the kernel's input to exp */
    for (int j = 0; j < E; ++j) ds += exp((double)(l[j] - m));
    for (int j = 0; j < E; ++j) {
      double want = exp((double)(l[j] - m)) / ds;
      EXPECT(fabs(p[j] - want) <= 1e-6 * want + 1e-37, "p[%d] = %.9g, double softmax %.9g", j, p[j], want);
      sum += p[j];
    }
    EXPECT(fabs(sum - 1.0) < 1e-5, "probabilities sum to %.9g", sum);
  }
  char *taken = xcalloc((size_t)E);
  float S = 0.0f;
  for (int i = 0; i < k; ++i) {
    EXPECT(idx[i] >= 0 && idx[i] < E && !taken[idx[i]], "rank %d: index %d repeated or out of range", i, idx[i]);
    if (idx[i] < 0 || idx[i] >= E) break;
    taken[idx[i]] = 1;
    if (i) EXPECT(ranks_before(p[idx[i - 1]], idx[i - 1], p[idx[i]], idx[i]), "rank %d (%d, %.9g) before rank %d (%d, %.9g)",
                  i, idx[i], p[idx[i]], i - 1, idx[i - 1], p[idx[i - 1]]);
    S = S + p[idx[i]];
  }
  for (int j = 0; j < E && !g_fail; ++j)
    if (!taken[j]) EXPECT(ranks_before(p[idx[k - 1]], idx[k - 1], p[j], j), "expert %d (%.9g) left out, ranks before the last pick", j, p[j]);
  double wsum = 0;
  for (int i = 0; i < k; ++i) {
    EXPECT(same_f(w[i], p[idx[i]] / S), "w[%d] = %.9g, p / S = %.9g", i, w[i], p[idx[i]] / S);
    wsum += w[i];
  }
  if (exact) EXPECT(fabs(wsum - 1.0) < 1e-6, "weights sum to %.9g", wsum);
  free(e), free(taken);
}

static void run_router(const float *l, size_t T, int E, int k, int exact) {
  float *p = xmalloc(T * (size_t)E * 4), *w = xmalloc(T * (size_t)k * 4);
  int32_t *idx = xmalloc(T * (size_t)k * 4);
  assert_int_equal(fb_router_ref(l, T, E, k, p, idx, w), FB_OK);
  for (size_t t = 0; t < T && g_fail < 12; ++t)
    check_router_row(l + t * E, E, k, p + t * E, idx + t * k, w + t * k, exact);
  float *w2 = xmalloc(T * (size_t)k * 4);
  int32_t *idx2 = xmalloc(T * (size_t)k * 4);
  assert_int_equal(fb_router_ref(l, T, E, k, NULL, idx2, w2), FB_OK); /* probs are optional */
  EXPECT(!memcmp(idx, idx2, T * (size_t)k * 4) && !memcmp(w, w2, T * (size_t)k * 4), "results depend on probs != NULL");
  free(p), free(w), free(idx), free(w2), free(idx2);
}

static void test_router(void **state) {
  (void)state;
  BEGIN();
  rng_t g = {2};
  static const int shapes[][3] = {{64, 384, 8}, {40, 8, 2}, {33, 33, 1}, {8, 4096, 64}, {16, 100, 7}, {5, 64, 64}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
    int T = shapes[s][0], E = shapes[s][1], k = shapes[s][2];
    float *l = xmalloc((size_t)T * E * 4);
    for (int i = 0; i < T * E; ++i) l[i] = 2.0f * rng_normal(&g);
    run_router(l, (size_t)T, E, k, 1);
    for (int i = 0; i < T * E; ++i) l[i] = 30.0f * rng_normal(&g); /* underflowing probabilities */
    run_router(l, (size_t)T, E, k, 1);
    for (int i = 0; i < T * E; ++i) l[i] = (float)rng_int(&g, 0, 3); /* ties everywhere */
    run_router(l, (size_t)T, E, k, 1);
    free(l);
  }
  { /* hand cases: ties go to the lower index; an all-equal row picks 0..k-1 with equal weights */
    float l[2][5] = {{1, 3, 3, 2, 3}, {0.5f, 0.5f, 0.5f, 0.5f, 0.5f}}, p[10], w[6];
    int32_t idx[6];
    assert_int_equal(fb_router_ref(&l[0][0], 2, 5, 3, p, idx, w), FB_OK);
    EXPECT(idx[0] == 1 && idx[1] == 2 && idx[2] == 4, "ties: %d %d %d", idx[0], idx[1], idx[2]);
    EXPECT(idx[3] == 0 && idx[4] == 1 && idx[5] == 2, "equal row: %d %d %d", idx[3], idx[4], idx[5]);
    EXPECT(w[3] == w[4] && w[4] == w[5] && p[5] == 0.2f, "equal row: weights %g %g %g, p %g", w[3], w[4], w[5], p[5]);
    EXPECT(w[0] == w[1] && w[1] == w[2], "equal picks get equal weights");
  }
  { /* non-finite logits: defined, never out of range */
    float l[4][8];
    for (int j = 0; j < 8; ++j) l[0][j] = (float)j, l[1][j] = -INFINITY, l[2][j] = (float)j, l[3][j] = NAN;
    l[0][3] = NAN, l[2][5] = INFINITY;
    float p[32], w[12];
    int32_t idx[12];
    assert_int_equal(fb_router_ref(&l[0][0], 4, 8, 3, p, idx, w), FB_OK);
    EXPECT(isnan(p[0]) && isnan(p[7]) && idx[0] == 0 && idx[1] == 1 && idx[2] == 2, /* e_3 NaN poisons the sum */
           "one NaN logit: NaN probabilities, experts 0, 1, 2; got %d %d %d", idx[0], idx[1], idx[2]);
    EXPECT(isnan(p[8]) && idx[3] == 0 && idx[4] == 1 && idx[5] == 2, "an all -Inf row: NaN probabilities, experts 0, 1, 2");
    for (int i = 0; i < 12; ++i) EXPECT(idx[i] >= 0 && idx[i] < 8, "index %d = %d", i, idx[i]);
    check_router_row(&l[0][0], 8, 3, p, idx, w, 0);
    check_router_row(&l[1][0], 8, 3, p + 8, idx + 3, w + 3, 0);
    check_router_row(&l[2][0], 8, 3, p + 16, idx + 6, w + 6, 0);
    check_router_row(&l[3][0], 8, 3, p + 24, idx + 9, w + 9, 0);
  }
  /* fbo_prob_ord: the documented total order on random and special values */
  static const float sp[] = {0.0f, -0.0f, 1.0f, 0.5f, INFINITY, NAN, 1e-45f, 3e38f, 0.25f, -1.0f};
  for (int i = 0; i < 200000; ++i) {
    float a = i < 100 ? sp[i % 10] : (float)rng_u01(&g) * (rng_int(&g, 0, 9) ? 1.0f : 0.0f);
    float b = i < 100 ? sp[i / 10] : (rng_int(&g, 0, 3) ? (float)rng_u01(&g) : a);
    int ia = rng_int(&g, 0, 4095), ib = rng_int(&g, 0, 4095);
    if (ia == ib) continue;
    EXPECT((fbo_prob_ord(a, ia) > fbo_prob_ord(b, ib)) == ranks_before(a, ia, b, ib), "ord(%g, %d) vs ord(%g, %d)", a, ia, b, ib);
    EXPECT(fbo_prob_ord(a, ia) > 0, "ord(%g, %d) is 0", a, ia);
  }
  END();
}

/* ---- permute ---------------------------------------------------------------------------------- */
static void check_permute(const int32_t *idx, size_t T, int k, int E, int tile) {
  size_t maxr = fb_permute_max_rows(T, k, E, tile), total = 0, n = T * (size_t)k;
  int32_t *counts = xmalloc((size_t)E * 4), *row_of = xmalloc(n * 4 + 4), *token_of = xmalloc(maxr * 4 + 4);
  long long *off = xmalloc((size_t)(E + 1) * 8);
  assert_int_equal(fb_permute_ref(idx, T, k, E, tile, counts, off, row_of, token_of, &total), FB_OK);
  EXPECT(off[0] == 0 && (size_t)off[E] == total && total <= maxr, "offsets 0 .. %lld, total %zu, max %zu", off[E], total, maxr);
  long long *next = xcalloc((size_t)E * 8);
  for (int e = 0; e < E; ++e) {
    int c = 0;
    for (size_t i = 0; i < n; ++i) c += idx[i] == e;
    EXPECT(counts[e] == c, "counts[%d] = %d, %d entries", e, counts[e], c);
    EXPECT(off[e + 1] - off[e] == ((long long)c + tile - 1) / tile * tile && off[e] % tile == 0, "expert %d: offsets %lld .. %lld",
           e, off[e], off[e + 1]);
    next[e] = off[e];
  }
  for (size_t i = 0; i < n; ++i) { /* stable: each expert's entries fill its rows in (token, slot) order */
    int e = idx[i];
    if (e < 0) { EXPECT(row_of[i] == -1, "dropped entry %zu has row %d", i, row_of[i]); continue; }
    EXPECT(row_of[i] == next[e], "entry %zu (expert %d): row %d, expected %lld", i, e, row_of[i], next[e]);
    ++next[e];
    EXPECT(row_of[i] >= 0 && (size_t)row_of[i] < total && token_of[row_of[i]] == (int32_t)(i / (size_t)k), "token_of[row_of[%zu]]", i);
  }
  for (int e = 0; e < E; ++e)
    for (long long r = off[e] + counts[e]; r < off[e + 1]; ++r) EXPECT(token_of[r] == -1, "padding row %lld: token %d", r, token_of[r]);
  free(counts), free(row_of), free(token_of), free(off), free(next);
}

static void test_permute(void **state) {
  (void)state;
  BEGIN();
  rng_t g = {3};
  static const int cases[][4] = {{300, 4, 16, 128}, {77, 2, 8, 1}, {129, 8, 384, 128}, {50, 3, 5, 7}, {1, 1, 1, 1}, {1000, 8, 64, 64}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    int T = cases[c][0], k = cases[c][1], E = cases[c][2], tile = cases[c][3];
    int32_t *idx = xmalloc((size_t)T * k * 4);
    for (int i = 0; i < T * k; ++i) idx[i] = rng_int(&g, 0, E - 1); /* uniform */
    check_permute(idx, (size_t)T, k, E, tile);
    for (int i = 0; i < T * k; ++i) idx[i] = (int32_t)(E * pow(rng_u01(&g), 4)); /* skewed, most experts empty */
    check_permute(idx, (size_t)T, k, E, tile);
    for (int i = 0; i < T * k; ++i) idx[i] = E - 1; /* everything to one expert */
    check_permute(idx, (size_t)T, k, E, tile);
    for (int i = 0; i < T * k; ++i) idx[i] = rng_int(&g, 0, 5) ? rng_int(&g, 0, E - 1) : -1; /* dropped entries */
    check_permute(idx, (size_t)T, k, E, tile);
    free(idx);
  }
  { /* a hand case: 3 tokens, top-2, 3 experts, tile 4 */
    int32_t idx[6] = {2, 0, 0, 2, 2, 0}, counts[3], row_of[6], token_of[16];
    long long off[4];
    size_t total;
    assert_int_equal(fb_permute_ref(idx, 3, 2, 3, 4, counts, off, row_of, token_of, &total), FB_OK);
    static const int32_t want_row[6] = {4, 0, 1, 5, 6, 2}, want_tok[8] = {0, 1, 2, -1, 0, 1, 2, -1};
    EXPECT(off[0] == 0 && off[1] == 4 && off[2] == 4 && off[3] == 8 && total == 8, "offsets %lld %lld %lld %lld", off[0], off[1], off[2], off[3]);
    EXPECT(counts[0] == 3 && counts[1] == 0 && counts[2] == 3, "counts");
    EXPECT(!memcmp(row_of, want_row, sizeof want_row), "row_of %d %d %d %d %d %d", row_of[0], row_of[1], row_of[2], row_of[3], row_of[4], row_of[5]);
    EXPECT(!memcmp(token_of, want_tok, sizeof want_tok), "token_of");
  }
  { /* gather: NVFP4 per token (codes, scales, outer), padding rows zero */
    size_t b[3];
    assert_int_equal(fb_payload_planes(FB_FMT_NVFP4, 1, 64, b), FB_OK);
    EXPECT(b[0] == 32 && b[1] == 4 && b[2] == 4, "nvfp4 planes %zu %zu %zu", b[0], b[1], b[2]);
    assert_int_equal(fb_payload_planes(FB_FMT_MXFP8, 0, 64, b), FB_OK);
    EXPECT(b[0] == 64 && b[1] == 2 && b[2] == 0, "mxfp8 planes");
    assert_int_equal(fb_payload_planes(FB_FMT_BF16, 1, 10, b), FB_OK);
    EXPECT(b[0] == 20 && b[1] == 0 && b[2] == 0, "bf16 planes");
    assert_int_equal(fb_payload_planes(FB_FMT_NVFP4, 1, 64, b), FB_OK);
    enum { T = 20, K = 3, E = 6, TILE = 16 };
    int32_t idx[T * K], counts[E], row_of[T * K], token_of[T * K + E * (TILE - 1)];
    long long off[E + 1];
    size_t total;
    for (int i = 0; i < T * K; ++i) idx[i] = rng_int(&g, 0, E - 1);
    assert_int_equal(fb_permute_ref(idx, T, K, E, TILE, counts, off, row_of, token_of, &total), FB_OK);
    void *in[3], *out[3];
    for (int p = 0; p < 3; ++p) {
      in[p] = xmalloc(T * b[p]), out[p] = xmalloc(total * b[p]);
      for (size_t i = 0; i < T * b[p]; ++i) ((uint8_t *)in[p])[i] = (uint8_t)rng_next(&g);
      memset(out[p], 0xA5, total * b[p]);
    }
    assert_int_equal(fb_permute_gather_ref((const void *const *)in, b, T, token_of, total, out), FB_OK);
    for (int p = 0; p < 3; ++p)
      for (size_t r = 0; r < total; ++r) {
        const uint8_t *o = (const uint8_t *)out[p] + r * b[p];
        if (token_of[r] < 0) {
          for (size_t j = 0; j < b[p]; ++j) EXPECT(o[j] == 0, "plane %d padding row %zu byte %zu", p, r, j);
        } else {
          EXPECT(!memcmp(o, (const uint8_t *)in[p] + (size_t)token_of[r] * b[p], b[p]), "plane %d row %zu", p, r);
        }
      }
    for (int p = 0; p < 3; ++p) free(in[p]), free(out[p]);
  }
  END();
}

/* ---- unpermute ------------------------------------------------------------------------------- */
static void test_unpermute(void **state) {
  (void)state;
  BEGIN();
  rng_t g = {4};
  enum { T = 37, E = 5, C = 96, TILE = 8, K = 3 };
  int32_t idx[T * K], counts[E], row_of[T * K], token_of[T * K + E * TILE];
  long long off[E + 1];
  size_t total;
  float x[T * C], out[T * C];
  uint16_t xb[T * C], ob[T * C];
  for (int i = 0; i < T * C; ++i) xb[i] = fb_bf16_from_f32(rng_normal(&g)), x[i] = fb_bf16_to_f32(xb[i]);
  size_t b[3];
  assert_int_equal(fb_payload_planes(FB_FMT_BF16, 0, C, b), FB_OK);
  { /* top-1, weights 1: unpermute inverts permute (BF16 and FP32 out) */
    for (int t = 0; t < T; ++t) idx[t] = rng_int(&g, 0, E - 1);
    assert_int_equal(fb_permute_ref(idx, T, 1, E, TILE, counts, off, row_of, token_of, &total), FB_OK);
    uint16_t *y = xmalloc(total * b[0]);
    const void *in[3] = {xb, NULL, NULL};
    void *o3[3] = {y, NULL, NULL};
    assert_int_equal(fb_permute_gather_ref(in, b, T, token_of, total, o3), FB_OK);
    assert_int_equal(fb_unpermute_ref(y, NULL, total, FB_FMT_BF16, 0, 0, row_of, NULL, T, 1, C, out, ob), FB_OK);
    EXPECT(!memcmp(out, x, sizeof x) && !memcmp(ob, xb, sizeof xb), "top-1 BF16 round trip");
    free(y);
  }
  /* top-3 with and without weights: the fmaf slot order, written out here */
  for (int i = 0; i < T * K; ++i) idx[i] = rng_int(&g, 0, 6) ? rng_int(&g, 0, E - 1) : -1;
  assert_int_equal(fb_permute_ref(idx, T, K, E, TILE, counts, off, row_of, token_of, &total), FB_OK);
  uint16_t *y = xmalloc(total * b[0]);
  {
    const void *in[3] = {xb, NULL, NULL};
    void *o3[3] = {y, NULL, NULL};
    assert_int_equal(fb_permute_gather_ref(in, b, T, token_of, total, o3), FB_OK);
  }
  float w[T * K];
  for (int i = 0; i < T * K; ++i) w[i] = (float)rng_u01(&g);
  for (int weighted = 0; weighted < 2; ++weighted) {
    assert_int_equal(fb_unpermute_ref(y, NULL, total, FB_FMT_BF16, 0, 0, row_of, weighted ? w : NULL, T, K, C, out, ob), FB_OK);
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < C; ++j) {
        float acc = 0.0f;
        for (int s = 0; s < K; ++s)
          if (idx[t * K + s] >= 0) acc = fmaf(weighted ? w[t * K + s] : 1.0f, x[t * C + j], acc);
        EXPECT(same_f(out[t * C + j], acc) && ob[t * C + j] == fb_bf16_from_f32(acc), "token %d col %d: %.9g, expected %.9g", t, j,
               out[t * C + j], acc);
      }
  }
  free(y);
  /* S2F6 + RHT-32: top-1 == fb_s2f6_dequantize; top-3 == the rotated-domain sum, inverted once */
  uint32_t signs = fb_rht_signs(7, 0);
  float *xr = xmalloc(total * C * 4), *deq = xmalloc(total * C * 4);
  int8_t *q = xmalloc(total * C);
  uint8_t *e8 = xmalloc(total * C / 32);
  for (size_t i = 0; i < total * C; ++i) xr[i] = rng_normal(&g) * (float)(1 + i % 7);
  for (int rht = 0; rht < 2; ++rht) {
    assert_int_equal(fb_s2f6_quantize(xr, total, C, rht, signs, q, e8), FB_OK);
    assert_int_equal(fb_s2f6_dequantize(q, e8, total, C, rht, signs, deq), FB_OK);
    int32_t ro[T];
    for (int t = 0; t < T; ++t) ro[t] = (int32_t)((size_t)t * 3 % total);
    assert_int_equal(fb_unpermute_ref(q, e8, total, FB_FMT_S2F6, rht, signs, ro, NULL, T, 1, C, out, NULL), FB_OK);
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < C; ++j) EXPECT(same_f(out[t * C + j], deq[(size_t)ro[t] * C + j]), "S2F6 top-1 token %d col %d", t, j);
    assert_int_equal(fb_unpermute_ref(q, e8, total, FB_FMT_S2F6, rht, signs, row_of, w, T, K, C, out, NULL), FB_OK);
    for (int t = 0; t < T; ++t)
      for (int b0 = 0; b0 < C; b0 += 32) {
        float acc[32] = {0}, inv[32];
        double lin[32] = {0};
        for (int s = 0; s < K; ++s) {
          int r = row_of[t * K + s];
          if (r < 0) continue;
          for (int j = 0; j < 32; ++j) {
            size_t i = (size_t)r * C + b0 + j;
            acc[j] = fmaf(w[t * K + s], ((float)q[i] / 64.0f) * fb_e8m0_decode(e8[i / 32]), acc[j]);
            lin[j] += (double)w[t * K + s] * deq[i];
          }
        }
        if (rht) fb_rht32_inverse(acc, signs, inv);
        else memcpy(inv, acc, sizeof acc);
        for (int j = 0; j < 32; ++j) {
          EXPECT(same_f(out[t * C + b0 + j], inv[j]), "S2F6 top-3 token %d col %d: %.9g, expected %.9g", t, b0 + j, out[t * C + b0 + j], inv[j]);
          EXPECT(fabs(out[t * C + b0 + j] - lin[j]) <= 1e-5 * (1 + fabs(lin[j])) * 8, "linearity: %.9g vs %.9g", out[t * C + b0 + j], lin[j]);
        }
      }
  }
  free(xr), free(deq), free(q), free(e8);
  END();
}

/* ---- SwiGLU ---------------------------------------------------------------------------------- */
static void test_swiglu(void **state) {
  (void)state;
  BEGIN();
  rng_t g = {5};
  enum { R = 17, F = 96 };
  uint16_t h[R * 2 * F], da[R * F], a[R * F], dh[R * 2 * F];
  for (int i = 0; i < R * 2 * F; ++i) h[i] = fb_bf16_from_f32(3.0f * rng_normal(&g));
  for (int i = 0; i < R * F; ++i) da[i] = fb_bf16_from_f32(rng_normal(&g));
  h[5] = fb_bf16_from_f32(NAN), h[2 * F + 7] = fb_bf16_from_f32(0.0f), h[2 * F + 8] = fb_bf16_from_f32(-0.0f);
  h[4 * F + 1] = fb_bf16_from_f32(-20.0f), h[4 * F + 2] = fb_bf16_from_f32(20.0f);
  assert_int_equal(fb_swiglu_fwd_ref(h, R, F, a), FB_OK);
  assert_int_equal(fb_swiglu_bwd_ref(h, da, R, F, dh), FB_OK);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < F; ++c) {
      float gf = fb_bf16_to_f32(h[r * 2 * F + c]), uf = fb_bf16_to_f32(h[r * 2 * F + F + c]), df = fb_bf16_to_f32(da[r * F + c]);
      /* the stated fp32 order, through the header the GPU compiles */
      float dg, du;
      fbo_swiglu_bwd(gf, uf, df, &dg, &du);
      EXPECT(a[r * F + c] == fbo_bf16_rne(fbo_swiglu_fwd(gf, uf)), "fwd (%d, %d)", r, c);
      EXPECT(a[r * F + c] == fb_bf16_from_f32((gf / (1.0f + fbm_expf(-gf))) * uf), "fwd order (%d, %d)", r, c);
      EXPECT(dh[r * 2 * F + c] == fbo_bf16_rne(dg) && dh[r * 2 * F + F + c] == fbo_bf16_rne(du), "bwd (%d, %d)", r, c);
      if (isnan(gf)) {
        EXPECT(isnan(fb_bf16_to_f32(a[r * F + c])) && isnan(fb_bf16_to_f32(dh[r * 2 * F + c])), "NaN stays NaN");
        continue;
      }
      /* double precision: within BF16 rounding plus a few fp32 ulps */
      double G = gf, U = uf, D = df, S = 1.0 / (1.0 + exp(-G));
      double A = G * S * U, DG = D * U * S * (1.0 + G * (1.0 - S)), DU = D * G * S;
      double tol = 1.0 / 128;
      EXPECT(fabs(fb_bf16_to_f32(a[r * F + c]) - A) <= tol * fabs(A) + 1e-30, "A(%g, %g) = %g, double %g", gf, uf, fb_bf16_to_f32(a[r * F + c]), A);
      EXPECT(fabs(fb_bf16_to_f32(dh[r * 2 * F + c]) - DG) <= tol * fabs(DG) + 1e-6 * fabs(D * U), "dg(%g, %g, %g) = %g, double %g", gf, uf, df,
             fb_bf16_to_f32(dh[r * 2 * F + c]), DG);
      EXPECT(fabs(fb_bf16_to_f32(dh[r * 2 * F + F + c]) - DU) <= tol * fabs(DU) + 1e-30, "du = %g, double %g", fb_bf16_to_f32(dh[r * 2 * F + F + c]), DU);
    }
  /* the backward is the derivative of the forward (central differences in double at a few points) */
  for (double G = -6; G <= 6; G += 0.75) {
    double e = 1e-6, f1 = (G + e) / (1 + exp(-(G + e))), f0 = (G - e) / (1 + exp(-(G - e)));
    float dg, du;
    fbo_swiglu_bwd((float)G, 1.0f, 1.0f, &dg, &du);
    EXPECT(fabs(dg - (f1 - f0) / (2 * e)) < 1e-5, "d silu(%g) = %g, numeric %g", G, dg, (f1 - f0) / (2 * e));
  }
  END();
}

/* ---- AdamW ----------------------------------------------------------------------------------- */
static void test_adamw(void **state) {
  (void)state;
  BEGIN();
  { /* one hand-computed step: g = 1, m = 0.1, v = 0.001, mhat = vhat = 1, w = 1 - 0.1 * (1/(1 + 1e-8) + 0.01) */
    float w = 1.0f, m = 0.0f, v = 0.0f, gr = 0.5f;
    fb_adamw_hparams hp = {.lr = 0.1f, .b1 = 0.9f, .b2 = 0.999f, .eps = 1e-8f, .wd = 0.01f, .bc1 = 0.1f, .bc2 = 0.001f, .gscale = 2.0f};
    assert_int_equal(fb_adamw_ref(&w, &m, &v, &gr, 1, 1, &hp, NULL), FB_OK);
    EXPECT(fabsf(m - 0.1f) < 1e-7f && fabsf(v - 0.001f) < 1e-7f, "m %.9g v %.9g", m, v); /* 1 - 0.999f is not 0.001 */
    EXPECT(fabs(w - 0.899) < 1e-6, "w %.9g, expected 0.899", w);
    float g = 0.5f * 2.0f, mm = 0.9f * 0.0f + (1.0f - 0.9f) * g, vv = 0.999f * 0.0f + (1.0f - 0.999f) * (g * g);
    float want = 1.0f - 0.1f * ((mm / 0.1f) / (sqrtf(vv / 0.001f) + 1e-8f) + 0.01f * 1.0f);
    EXPECT(same_f(w, want) && same_f(m, mm) && same_f(v, vv), "fp32 order: w %.9g, expected %.9g", w, want);
  }
  rng_t g = {6};
  enum { E = 4, N = 24, K = 64, R = E * N, NE = R * K };
  float *w = xmalloc(NE * 4), *m = xmalloc(NE * 4), *v = xmalloc(NE * 4), *gr = xmalloc(NE * 4);
  float *w0 = xmalloc(NE * 4), *m0 = xmalloc(NE * 4), *v0 = xmalloc(NE * 4), *w1 = xmalloc(NE * 4), *m1 = xmalloc(NE * 4), *v1 = xmalloc(NE * 4);
  for (int i = 0; i < NE; ++i) {
    w0[i] = 0.02f * rng_normal(&g) * (float)(1 + (i / (N * K)) * 3); /* experts of different scales */
    m0[i] = 1e-3f * rng_normal(&g), v0[i] = 1e-6f * fabsf(rng_normal(&g)), gr[i] = 1e-2f * rng_normal(&g);
  }
  w0[3] = 0.0f, gr[4] = 0.0f, v0[4] = 0.0f, m0[4] = 0.0f; /* zero update */
  fb_adamw_hparams hp = {.lr = 3e-4f, .b1 = 0.9f, .b2 = 0.95f, .eps = 1e-8f, .wd = 0.1f, .gscale = 0.5f};
  hp.bc1 = 1.0f - powf(0.9f, 7.0f), hp.bc2 = 1.0f - powf(0.95f, 7.0f);
  memcpy(w, w0, NE * 4), memcpy(m, m0, NE * 4), memcpy(v, v0, NE * 4);
  assert_int_equal(fb_adamw_ref(w, m, v, gr, R, K, &hp, NULL), FB_OK);
  for (int i = 0; i < NE; ++i) {
    float ww = w0[i], mm = m0[i], vv = v0[i];
    fbo_adamw(&ww, &mm, &vv, gr[i], hp.lr, hp.b1, hp.b2, hp.eps, hp.wd, hp.bc1, hp.bc2, hp.gscale);
    EXPECT(same_f(w[i], ww) && same_f(m[i], mm) && same_f(v[i], vv), "fbo_adamw element %d: w %.9g vs %.9g", i, ww, w[i]);
    double G = (double)gr[i] * hp.gscale, M = hp.b1 * (double)m0[i] + (1 - (double)hp.b1) * G;
    double V = hp.b2 * (double)v0[i] + (1 - (double)hp.b2) * G * G;
    double W = w0[i] - hp.lr * ((M / hp.bc1) / (sqrt(V / hp.bc2) + hp.eps) + hp.wd * (double)w0[i]);
    EXPECT(fabs(w[i] - W) <= 1e-6 * fabs(W) + 1e-9, "element %d: w %.9g, double %.9g", i, w[i], W);
  }
  /* the next step's weights == fb_*_quantize of the updated masters */
  static const struct { fb_format f; fb_gran outer; int two_d; fb_rounding r; const char *what; } nx[] = {
      {FB_FMT_BF16, 0, 0, FB_ROUND_RN, "bf16"},          {FB_FMT_MXFP8, 0, 0, FB_ROUND_RN, "mxfp8"},
      {FB_FMT_MXFP8, 0, 0, FB_ROUND_SR, "mxfp8 sr"},     {FB_FMT_NVFP4, FB_GRAN_EXPERT, 0, FB_ROUND_RN, "nvfp4 expert"},
      {FB_FMT_NVFP4, FB_GRAN_EXPERT, 1, FB_ROUND_RN, "nvfp4 expert 16x16"}, {FB_FMT_NVFP4, FB_GRAN_TENSOR, 0, FB_ROUND_RN, "nvfp4 tensor"},
      {FB_FMT_NVFP4, FB_GRAN_TENSOR, 1, FB_ROUND_SR, "nvfp4 tensor 16x16 sr"}};
  uint8_t *c1 = xmalloc(NE * 2), *c2 = xmalloc(NE * 2), *s1 = xmalloc(NE / 16), *s2 = xmalloc(NE / 16);
  float sd1[E], sd2[E], am[E];
  for (size_t c = 0; c < sizeof nx / sizeof nx[0]; ++c) {
    fb_adamw_next n = {.q = {.format = nx[c].f, .outer = nx[c].outer, .two_d = nx[c].two_d, .rounding = nx[c].r}, .experts = E,
                       .seed = 11, .stream = 2, .step = 7, .codes = c1, .scales = s1, .s_dec = sd1, .amax = am};
    memcpy(w1, w0, NE * 4), memcpy(m1, m0, NE * 4), memcpy(v1, v0, NE * 4);
    assert_int_equal(fb_adamw_ref(w1, m1, v1, gr, R, K, &hp, &n), FB_OK);
    EXPECT(!memcmp(w1, w, NE * 4) && !memcmp(m1, m, NE * 4) && !memcmp(v1, v, NE * 4), "%s: masters differ", nx[c].what);
    if (nx[c].f == FB_FMT_BF16) {
      for (int i = 0; i < NE; ++i) EXPECT(((uint16_t *)c1)[i] == fb_bf16_from_f32(w[i]), "%s element %d", nx[c].what, i);
    } else if (nx[c].f == FB_FMT_MXFP8) {
      fb_sr_opts so = {nx[c].r, 11, 2, 7};
      assert_int_equal(fb_mxfp8_quantize(w, R, K, FB_MX_ROWWISE, &so, c2, s2), FB_OK);
      EXPECT(!memcmp(c1, c2, NE) && !memcmp(s1, s2, NE / 32), "%s: codes or scales differ from fb_mxfp8_quantize", nx[c].what);
    } else {
      size_t goff[E + 1];
      for (int e = 0; e <= E; ++e) goff[e] = (size_t)e * N;
      int grp = nx[c].outer == FB_GRAN_EXPERT;
      fb_nvfp4_opts o = {.outer = grp ? FB_OUTER_GROUP : FB_OUTER_TENSOR, .group_offsets = goff, .ngroups = E, .two_d = nx[c].two_d,
                         .rounding = nx[c].r, .seed = 11, .stream = 2, .step = 7};
      assert_int_equal(fb_nvfp4_quantize(w, R, K, &o, c2, s2, sd2, NULL), FB_OK);
      EXPECT(!memcmp(c1, c2, NE / 2) && !memcmp(s1, s2, NE / 16) && !memcmp(sd1, sd2, (grp ? E : 1) * 4),
             "%s: codes, scales or S_dec differ from fb_nvfp4_quantize", nx[c].what);
      for (int e = 0; e < (grp ? E : 1); ++e) {
        float a = 0.0f;
        for (int i = grp ? e * N * K : 0; i < (grp ? (e + 1) * N * K : NE); ++i) a = fmaxf(a, fabsf(w[i]));
        EXPECT(same_f(am[e], a), "%s: amax[%d] %.9g, expected %.9g", nx[c].what, e, am[e], a);
      }
    }
  }
  free(w), free(m), free(v), free(gr), free(w0), free(m0), free(v0), free(w1), free(m1), free(v1);
  free(c1), free(c2), free(s1), free(s2);
  END();
}

/* ---- tcopy: the dequantizing copies ---------------------------------------------------------------- */
static void test_tcopy(void **state) {
  (void)state;
  BEGIN();
  enum { R = 16, C = 512, N = R * C };
  rng_t g = {77};
  uint8_t *q = xmalloc(N), *sf = xmalloc(N / 16);
  float *x = xmalloc(N * 4), *want = xmalloc(N * 4), *got = xmalloc(N * 4), sd[R];
  uint16_t *gb = xmalloc(N * 2);
  /* MXFP8: every code and every E8M0 scale (255 the NaN, 0 and 254 the extremes) in order, then random ones */
  for (int i = 0; i < N; ++i) q[i] = i < 256 ? (uint8_t)i : (uint8_t)rng_next(&g);
  for (int i = 0; i < N / 32; ++i) sf[i] = i < 256 ? (uint8_t)(255 - i) : (uint8_t)rng_next(&g);
  assert_int_equal(fb_mxfp8_dequantize(q, sf, R, C, want), FB_OK);
  assert_int_equal(fb_tcopy_ref(q, sf, NULL, FB_FMT_MXFP8, 0, 0, R, C, 0, 0, 0, 0, NULL, NULL, 0, got), FB_OK);
  for (int i = 0; i < N; ++i) EXPECT(same_f(got[i], want[i]), "mxfp8 [%d]: %a, dequantize %a", i, got[i], want[i]);
  assert_int_equal(fb_tcopy_ref(q, sf, NULL, FB_FMT_MXFP8, 0, 0, R, C, 1, 0, 0, 0, NULL, NULL, 1, gb), FB_OK);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      EXPECT(gb[c * R + r] == fb_bf16_from_f32(want[r * C + c]), "mxfp8 bf16 t [%d][%d]: %04x", c, r, gb[c * R + r]);
  /* NVFP4 with random codes over quantized values, per tensor and per row */
  for (int i = 0; i < N; ++i) x[i] = rng_normal(&g) * ldexpf(1.0f, rng_int(&g, -20, 20));
  for (int row = 0; row < 2; ++row) {
    fb_nvfp4_opts o = {.outer = row ? FB_OUTER_ROW : FB_OUTER_TENSOR};
    assert_int_equal(fb_nvfp4_quantize(x, R, C, &o, q, sf, sd, NULL), FB_OK);
    for (int i = 0; i < N / 2; i += 13) q[i] = (uint8_t)rng_next(&g);
    assert_int_equal(fb_nvfp4_dequantize(q, sf, sd, R, C, &o, want), FB_OK);
    assert_int_equal(fb_tcopy_ref(q, sf, sd, FB_FMT_NVFP4, 0, row, R, C, 0, 0, 0, 0, NULL, NULL, 0, got), FB_OK);
    for (int i = 0; i < N; ++i) EXPECT(same_f(got[i], want[i]), "nvfp4 outer %d [%d]: %a, dequantize %a", row, i, got[i], want[i]);
  }
  free(q), free(sf), free(x), free(want), free(got), free(gb);
  END();
}

/* ---- invalid arguments -------------------------------------------------------------------------- */
static int nok;
#define EXPECT_EINVAL(call)                                                                    \
  do {                                                                                         \
    fb_clearerr();                                                                             \
    fb_status s_ = (call);                                                                     \
    EXPECT(s_ == FB_EINVAL && fb_errmsg()[0], "%s: status %d, message '%s'", #call, s_, fb_errmsg()); \
    nok += s_ == FB_EINVAL;                                                                    \
  } while (0)

static void test_invalid_args(void **state) {
  (void)state;
  BEGIN();
  nok = 0;
  float l[64] = {0}, p[64], w[64];
  int32_t idx[64] = {0}, counts[8], row_of[64], token_of[256];
  long long off[9];
  size_t total, b[3];
  EXPECT_EINVAL(fb_router_ref(l, 2, 8, 9, p, idx, w));  /* k > E */
  EXPECT_EINVAL(fb_router_ref(l, 0, 100, 65, p, idx, w)); /* k > 64 */
  EXPECT_EINVAL(fb_router_ref(l, 2, 8, 0, p, idx, w));
  EXPECT_EINVAL(fb_router_ref(NULL, 2, 8, 2, p, idx, w));
  EXPECT_EINVAL(fb_router_ref(l, 2, 8, 2, p, NULL, w));
  idx[5] = 8;
  EXPECT_EINVAL(fb_permute_ref(idx, 4, 2, 8, 16, counts, off, row_of, token_of, &total)); /* expert out of range */
  idx[5] = -2;
  EXPECT_EINVAL(fb_permute_ref(idx, 4, 2, 8, 16, counts, off, row_of, token_of, &total));
  idx[5] = 0;
  EXPECT_EINVAL(fb_permute_ref(idx, 4, 2, 8, 0, counts, off, row_of, token_of, &total)); /* tile 0 */
  EXPECT_EINVAL(fb_permute_ref(idx, 4, 2, 8, 16, NULL, off, row_of, token_of, &total));
  EXPECT_EINVAL(fb_payload_planes(FB_FMT_NVFP4, 1, 24, b));
  EXPECT_EINVAL(fb_payload_planes(FB_FMT_MXFP8, 0, 48, b));
  EXPECT_EINVAL(fb_payload_planes(FB_FMT_S2F6, 0, 64, b));
  int32_t bad_tok[2] = {0, 5};
  const void *in[3] = {l, NULL, NULL};
  void *out[3] = {w, NULL, NULL};
  size_t b1[3] = {4, 0, 0}, b2[3] = {4, 4, 0};
  EXPECT_EINVAL(fb_permute_gather_ref(in, b1, 4, bad_tok, 2, out)); /* token 5 of 4 */
  EXPECT_EINVAL(fb_permute_gather_ref(in, b2, 4, idx, 2, out));     /* plane 1 without buffers */
  uint16_t yb[64] = {0};
  int32_t ro[2] = {0, 3};
  EXPECT_EINVAL(fb_unpermute_ref(yb, NULL, 2, FB_FMT_BF16, 0, 0, ro, NULL, 2, 1, 8, p, NULL)); /* row 3 of 2 */
  EXPECT_EINVAL(fb_unpermute_ref(yb, NULL, 4, FB_FMT_BF16, 1, 0, ro, NULL, 2, 1, 8, p, NULL)); /* RHT on BF16 */
  EXPECT_EINVAL(fb_unpermute_ref(yb, (uint8_t *)yb, 4, FB_FMT_S2F6, 1, 0, ro, NULL, 2, 1, 48, p, NULL));
  EXPECT_EINVAL(fb_unpermute_ref(yb, NULL, 4, FB_FMT_S2F6, 1, 0, ro, NULL, 2, 1, 32, p, NULL));
  EXPECT_EINVAL(fb_unpermute_ref(yb, NULL, 4, FB_FMT_MXFP8, 0, 0, ro, NULL, 2, 1, 32, p, NULL));
  EXPECT_EINVAL(fb_unpermute_ref(yb, NULL, 4, FB_FMT_BF16, 0, 0, ro, NULL, 2, 1, 8, NULL, NULL));
  EXPECT_EINVAL(fb_swiglu_fwd_ref(yb, 2, 0, yb));
  EXPECT_EINVAL(fb_swiglu_bwd_ref(yb, NULL, 2, 4, yb));
  fb_adamw_hparams hp = {0};
  float wm[64] = {0}, mm[64] = {0}, vm[64] = {0};
  uint8_t codes[64], sc[8];
  float sd[4];
  fb_adamw_next n = {.q = {.format = FB_FMT_NVFP4, .outer = FB_GRAN_TOKEN}, .experts = 2, .codes = codes, .scales = sc, .s_dec = sd};
  EXPECT_EINVAL(fb_adamw_ref(wm, mm, vm, wm, 2, 32, &hp, &n)); /* per-token weights */
  n.q.outer = FB_GRAN_EXPERT, n.experts = 3;
  EXPECT_EINVAL(fb_adamw_ref(wm, mm, vm, wm, 2, 32, &hp, &n)); /* 3 experts in 2 rows */
  n.q.format = FB_FMT_MXFP8, n.experts = 1;
  EXPECT_EINVAL(fb_adamw_ref(wm, mm, vm, wm, 4, 16, &hp, &n)); /* cols % 32 */
  EXPECT_EINVAL(fb_adamw_ref(wm, mm, vm, NULL, 2, 32, &hp, NULL));
  EXPECT_EINVAL(fb_adamw_ref(wm, mm, vm, wm, 2, 32, NULL, NULL));
  EXPECT_EINVAL(fb_tcopy_ref(codes, sc, NULL, FB_FMT_MXFP8, 0, 0, 1, 48, 0, 0, 0, 0, NULL, NULL, 0, wm)); /* cols % 32 */
  EXPECT_EINVAL(fb_tcopy_ref(codes, NULL, NULL, FB_FMT_MXFP8, 0, 0, 2, 32, 0, 0, 0, 0, NULL, NULL, 0, wm)); /* no scales */
  EXPECT_EINVAL(fb_tcopy_ref(codes, sc, NULL, FB_FMT_S2F6, 0, 0, 2, 32, 0, 0, 0, 0, NULL, NULL, 0, wm));
  printf("    %d invalid calls rejected with FB_EINVAL and a message\n", nok);
  END();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bf16),      cmocka_unit_test(test_router),  cmocka_unit_test(test_permute),
      cmocka_unit_test(test_unpermute), cmocka_unit_test(test_swiglu),  cmocka_unit_test(test_adamw),
      cmocka_unit_test(test_tcopy),     cmocka_unit_test(test_invalid_args),
  };
  return cmocka_run_group_tests_name("ops", tests, NULL, NULL);
}
