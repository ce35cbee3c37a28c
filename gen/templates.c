/* templates.c — one descriptor per template (fb_tmpl.h): FB_TEMPLATES, a row each, and the tune parameters they read,
 * FB_TUNE_PARAMS. Everything the generator and the launch know about a template is in its row and the static
 * functions above it; gen/gen.c and gen/launch.c only walk the rows.
 *
 * A spec is matched against the rows in table order. Every row that implements it offers its variants (a GEMM: the fast
 * family of its arch, gemm_sm90.cuh's wgmma on sm_90a and gemm_sm100.cuh's tcgen05 on sm_100a / sm_103a, and the portable one, gemm_mma.cuh's mma.sync, on every arch:
 * the tuner picks among all of them); the first that does is the spec's template for what names one. A row that refuses
 * a spec of its op (FB_TMPL_UNSUPPORTED) ends the search with its reason, unless it is a family row (a GEMM's: another
 * family may implement what this one does not); a spec no row claims gets its op's reason from no_template. */
#include "fb_tmpl.h"

#include "fb_gemm.h"

#include <stdio.h>
#include <string.h>

#define param fb_variant_param

static unsigned cap(long long n, long long hi) { return (unsigned)(n < 1 ? 1 : n > hi ? hi : n); }
static int gran(fb_gran g) { return g == FB_GRAN_TOKEN ? 1 : g == FB_GRAN_EXPERT ? 2 : 0; }

#define YES(list) (*params = (list), FB_TMPL_YES)
#define NO(reason) (*why = (reason), FB_TMPL_UNSUPPORTED)
#define PARAMS(name, ...) static const char *const name[] = {__VA_ARGS__, NULL}
PARAMS(P_THREADS, "threads");
PARAMS(P_THREADS_VEC, "threads", "vec");

/* ---- amax.cuh: the amax of a tensor, of each row (per token) or of each expert's rows -------------------------- */
static int amax_match(const fb_kernel_spec *k, const char *const **params, const char **why) {
  (void)why;
  return k->op != FB_OP_AMAX ? FB_TMPL_NOT_MINE : YES(P_THREADS);
}
static void amax_defines(const fb_kernel_spec *k, fb_str *d) {
  fb_str_printf(d, "FB_IN_F32 %d\nFB_MODE %d\n", k->in_f32, gran(k->q.outer));
}
static void amax_grid(const fb_kernel_spec *k, const fb_variant *v, long long rows, long long cols, unsigned ng,
                      unsigned *gx, unsigned *gy, unsigned *threads) {
  (void)v;
  unsigned t = *threads;
  if (k->q.outer == FB_GRAN_TOKEN) *gx = cap((rows * 32 + t - 1) / t, 1ll << 20);
  else if (k->q.outer == FB_GRAN_EXPERT) *gx = 64, *gy = ng ? ng : 1;
  else *gx = cap((rows * cols / 8 + t - 1) / t, 2048);
}

/* ---- quant_nvfp4.cuh: NVFP4 along the rows (1x16 or 16x16 blocks, Four Over Six, RN or SR) ---------------------- */
PARAMS(P_QUANT_NVFP4, "rows", "threads", "stage");
static int quant_nvfp4_match(const fb_kernel_spec *k, const char *const **params, const char **why) {
  if (k->op != FB_OP_QUANT) return FB_TMPL_NOT_MINE;
  if (k->q.rht) return NO("a Hadamard transform before quantizing (wgrad RHT): no template yet");
  if (k->q.format != FB_FMT_NVFP4) return FB_TMPL_NOT_MINE;
  if (k->col) return NO("NVFP4 down the columns (transposed): no template yet");
  return YES(P_QUANT_NVFP4);
}
static const char *quant_nvfp4_illegal(const fb_kernel_spec *k, const fb_variant *v) {
  int rows = param(v, "rows", 0), threads = param(v, "threads", 0), stage = param(v, "stage", 0);
  if (rows * 32 < threads) return "quant_nvfp4: fewer rows than warps leaves warps idle";
  /* make inspect, 2026-12-02: ptxas 13.0 holds these at 64 registers and spills 8 bytes on sm_100a / sm_103a */
  if (k->in_f32 && k->q.outer == FB_GRAN_EXPERT && threads == 256 && rows >= 16 && (strstr(k->name, "_sm100a") || strstr(k->name, "_sm103a")))
    return "quant_nvfp4: FP32 rows with per-expert scales, 256 threads and 16+ rows on sm_100a / sm_103a: ptxas 13.0 spills 8 bytes";
  if (stage) { /* rows kept in shared memory: the per-token 4/6 BF16 RN path only */
    const fb_qspec *q = &k->q;
    if (!q->four_over_six || q->outer != FB_GRAN_TOKEN || k->in_f32 || q->rounding == FB_ROUND_SR || q->two_d)
      return "quant_nvfp4: stage applies to the per-token Four Over Six path (BF16 in, RN) only";
    if (stage * 1024 * (threads / 32) > 48 * 1024) return "quant_nvfp4: the staged rows exceed 48 KiB of static shared memory";
  }
  return NULL;
}
static void quant_nvfp4_defines(const fb_kernel_spec *k, fb_str *d) {
  const fb_qspec *q = &k->q;
  fb_str_printf(d, "FB_FOUR_OVER_SIX %d\nFB_IN_F32 %d\nFB_OUTER %d\nFB_SR %d\nFB_TWO_D %d\n", q->four_over_six, k->in_f32,
                gran(q->outer), q->rounding == FB_ROUND_SR, q->two_d);
}
static void quant_nvfp4_grid(const fb_kernel_spec *k, const fb_variant *v, long long rows, long long cols, unsigned ng,
                             unsigned *gx, unsigned *gy, unsigned *threads) {
  (void)gy;
  unsigned t = *threads;
  if (k->q.two_d) *gx = cap((rows / 16 + (long long)ng + 1) * (cols / 16) / t + 1, 4096);
  else *gx = cap((rows + param(v, "rows", 16) - 1) / param(v, "rows", 16), 1ll << 31);
}

/* A thread per 32 values, grid-stride (quant_mxfp8, s2f6, gemm_bcopy). */
static void per32_grid(const fb_kernel_spec *k, const fb_variant *v, long long rows, long long cols, unsigned ng,
                       unsigned *gx, unsigned *gy, unsigned *threads) {
  (void)k, (void)v, (void)ng, (void)gy;
  *gx = cap((rows * cols / 32 + *threads - 1) / *threads, 16384);
}

/* ---- quant_mxfp8.cuh: MXFP8 (E4M3) along the rows --------------------------------------------------------------- */
static int quant_mxfp8_match(const fb_kernel_spec *k, const char *const **params, const char **why) {
  if (k->op != FB_OP_QUANT || k->q.format != FB_FMT_MXFP8) return FB_TMPL_NOT_MINE;
  if (k->q.e5m2) return NO("MXFP8 with E5M2 elements: no template yet");
  return k->col ? FB_TMPL_NOT_MINE : YES(P_THREADS);
}
static void quant_mxfp8_defines(const fb_kernel_spec *k, fb_str *d) {
  fb_str_printf(d, "FB_IN_F32 %d\nFB_SR %d\n", k->in_f32, k->q.rounding == FB_ROUND_SR);
}

/* ---- mx_col.cuh: MXFP8 down the columns (quantize, or requantize a saved NVFP4 / MXFP8 / BF16 tensor) ------------ */
PARAMS(P_MXCOL_QUANT, "rows", "cols", "threads");
PARAMS(P_MXCOL_REQUANT, "rows", "cols", "threads", "slots", "half", "pair");
static int mx_col_match(const fb_kernel_spec *k, const char *const **params, const char **why) {
  const fb_qspec *q = &k->q;
  if (k->op == FB_OP_QUANT) {
    if (k->col == 2 && k->in_f32) return NO("MXFP8 both ways of an FP32 matrix: no template (BF16 gradients only)");
    return q->format == FB_FMT_MXFP8 && k->col && !q->e5m2 && !q->rht ? YES(P_MXCOL_QUANT) : FB_TMPL_NOT_MINE;
  }
  if (k->op != FB_OP_REQUANT) return FB_TMPL_NOT_MINE;
  if (q->format != FB_FMT_MXFP8 || q->e5m2 || q->rht) return NO("requantization to anything but plain E4M3 MXFP8: no template yet");
  if (k->src.format == FB_FMT_NVFP4 && k->src.two_d) return NO("requantization of 16x16 NVFP4: no template yet");
  if (k->out_bf16 && k->src.format != FB_FMT_NVFP4 && k->src.format != FB_FMT_MXFP8)
    return NO("the requantization's BF16 copy (kbf16) of a BF16 source: no template (the source is its own copy)");
  return YES(P_MXCOL_REQUANT);
}
static const char *mx_col_illegal(const fb_kernel_spec *k, const fb_variant *v) {
  int rows = param(v, "rows", 0), cols = param(v, "cols", 0), threads = param(v, "threads", 0);
  int slots = param(v, "slots", 0), half = param(v, "half", 0), pair = param(v, "pair", 0);
  /* pair (mx_col.cuh FB_PAIR): lane pairs store the BF16 copy's 64-byte blocks as whole sectors */
  if (pair && !(k->op == FB_OP_REQUANT && k->out_bf16)) return "mx_col: pair (whole-sector stores) applies to the BF16 copy (kbf16) only";
  if (pair != 0 && pair != 1) return "mx_col: pair is 0 or 1";
  if (slots) { /* the raw ring (mx_col.cuh FB_SLOTS): NVFP4 sources only */
    if (k->op != FB_OP_REQUANT || k->src.format != FB_FMT_NVFP4) return "mx_col: slots (the raw ring) apply to NVFP4 sources only";
    if (slots < 2) return "mx_col: the raw ring takes at least 2 slots";
    if (cols < 64) return "mx_col: the raw ring takes cols >= 64 (scale rows of at least 4 bytes for cp.async)";
    size_t slot = (size_t)rows * cols / 2 + (size_t)rows * (cols / 16) + (k->src.outer == FB_GRAN_TOKEN ? (size_t)rows * 4 : 0);
    size_t sh = (size_t)rows * (cols + 4) * 4 + (size_t)cols * 32 + (size_t)slots * slot + (k->src.outer == FB_GRAN_EXPERT ? 4096 : 0);
    if (sh > 48 * 1024) return "mx_col: the tile and the raw ring exceed 48 KiB of static shared memory";
    /* ptxas 13.0 (sm_90a, 5 CTAs of 128 threads: 96 registers) spilled 24 bytes at 64 x 128 */
    if (rows * cols >= 64 * 128 && threads == 128) return "mx_col: the raw ring of a 64 x 128 tile on 128 threads spills registers";
  }
  if (half) { /* the f16 tile (mx_col.cuh FB_HALF): NVFP4 sources only */
    if (k->op != FB_OP_REQUANT || k->src.format != FB_FMT_NVFP4) return "mx_col: half (the f16 tile) applies to NVFP4 sources only";
    if (half != 1) return "mx_col: half is 0 (the FP32 tile) or 1 (the f16 tile)";
    if (slots) return "mx_col: half (the f16 tile) does not take the raw ring (slots)";
    if (cols % 64) return "mx_col: half (the f16 tile) takes cols that are a multiple of 64 (a warp's 32 column pairs in a row)";
    if (rows / 32 * (cols / 2) % threads) return "mx_col: half (the f16 tile): the threads must divide the tile's column pairs";
    if (rows / 32 * (cols / 2) < threads) return "mx_col: half (the f16 tile): fewer column pairs than threads leaves threads idle";
    /* ptxas 13.0 (sm_90a, 5 CTAs of 128 threads: 96 registers) spilled 164 bytes at 128 x 128 on 128 threads */
    if (rows * cols > 64 * threads) return "mx_col: half (the f16 tile): more than 64 elements a thread spills registers";
  }
  if (rows % 32) return "mx_col: rows must be a multiple of 32 (one MX block down a column)";
  if (cols % 32) return "mx_col: cols must be a multiple of 32 (a 32-column span per load)";
  if ((half ? (size_t)rows * (cols / 2 + 4) * 4 : (size_t)rows * (cols + 1) * 4) + (size_t)cols * 32 > 48 * 1024)
    return "mx_col: the tile exceeds 48 KiB of static shared memory";
  if (rows * cols / 32 < threads || rows / 32 * cols < threads) return "mx_col: fewer tile items than threads leaves threads idle";
  if (k->op == FB_OP_QUANT && k->col == 2 && (threads <= 0 || rows * (cols / 32) % threads))
    return "mx_col both ways: the threads must divide the tile's row blocks (rows x cols / 32)";
  return NULL;
}
static void mx_col_defines(const fb_kernel_spec *k, fb_str *d) {
  int src = k->op == FB_OP_QUANT || k->src.format == FB_FMT_BF16 ? 0 : k->src.format == FB_FMT_NVFP4 ? 1 : 2;
  fb_str_printf(d, "FB_IN_F32 %d\nFB_SR %d\nFB_SRC %d\nFB_SRC_OUTER %d\n", k->in_f32, k->q.rounding == FB_ROUND_SR, src,
                src == 1 ? gran(k->src.outer) : 0);
  if (k->op == FB_OP_REQUANT && k->out_bf16) fb_str_printf(d, "FB_KBF16 1\n"); /* only then: the other kernels' text is unchanged */
  if (k->op == FB_OP_QUANT && k->col == 2) fb_str_printf(d, "FB_BOTH 1\n");
}
static int mx_col_param_define(const char *p, int value, fb_str *d) { /* the tile's rows as 32-row MX blocks */
  if (strcmp(p, "rows")) return 0;
  fb_str_printf(d, "FB_RB %d\n", value / 32);
  return 1;
}
static void mx_col_grid(const fb_kernel_spec *k, const fb_variant *v, long long rows, long long cols, unsigned ng,
                        unsigned *gx, unsigned *gy, unsigned *threads) {
  (void)k, (void)ng, (void)gy, (void)threads;
  long long tc = param(v, "cols", 64); /* a CTA per 1024-row band of tc columns */
  *gx = cap(((rows + 1023) / 1024) * ((cols + tc - 1) / tc), 1ll << 20);
}

/* ---- s2f6.cuh: the combine payload's quantize / dequantize on their own (RHT-32 or not) ------------------------- */
static int s2f6_match(const fb_kernel_spec *k, const char *const **params, const char **why) {
  (void)why;
  return k->op == FB_OP_S2F6_Q || k->op == FB_OP_S2F6_DQ ? YES(P_THREADS) : FB_TMPL_NOT_MINE;
}
static void s2f6_defines(const fb_kernel_spec *k, fb_str *d) {
  fb_str_printf(d, "FB_DIR %d\nFB_IN_F32 %d\nFB_RHT %d\n", k->op == FB_OP_S2F6_DQ, k->in_f32, k->q.rht ? 1 : 0);
}

/* ---- gemm_sm90.cuh: the grouped GEMMs on wgmma (persistent, TMA producer warpgroup, 1-2 consumer warpgroups) ---- */
PARAMS(P_GEMM_BF16, "tile_m", "tile_n", "tile_k", "stages", "cluster", "consumers", "pingpong");
PARAMS(P_GEMM_Q, "tile_m", "tile_n", "tile_k", "stages", "cluster", "consumers", "weights_bf16", "pipe", "pingpong");
static int is_gemm(fb_op op) {
  return op == FB_OP_GEMM_FWD13 || op == FB_OP_GEMM_FWD2 || op == FB_OP_GEMM_DGRAD2 || op == FB_OP_GEMM_WGRAD ||
         op == FB_OP_GEMM_DGRAD13;
}
/* The operands both GEMM families implement (the reason in *why when not). */
static int gemm_operands_ok(const fb_kernel_spec *k, const char **why) {
  const fb_qspec *q = &k->q;
  if (k->op == FB_OP_GEMM_FWD2 && q->format != FB_FMT_BF16 && q->format != FB_FMT_S2F6) return NO("w2 fwd: a combine payload other than BF16 or S2F6");
  if (k->op == FB_OP_GEMM_FWD2 && q->format == FB_FMT_S2F6 && q->rht && q->rht != 32) return NO("w2 fwd: the S2F6 epilogue applies RHT-32 only");
  if (k->src.format == FB_FMT_S2F6) return NO("S2F6 GEMM operands: not a recipe format");
  /* NVFP4 x BF16 copy (FB_KIND 1) in mode 0: the forward GEMMs and the w13 dgrad of an NVFP4 backward (the GPU expert
     layer's); an NVFP4 wgrad runs as a BF16 GEMM of the operands' exact BF16 copies (experts_gpu.c) */
  if (k->src.format == FB_FMT_NVFP4 && k->op != FB_OP_GEMM_FWD2 && k->op != FB_OP_GEMM_FWD13 && k->op != FB_OP_GEMM_DGRAD13)
    return NO("NVFP4 operands in this backward GEMM: no template (an NVFP4 A operand is decoded along K, mode 0 only)");
  /* B is the exact BF16 copy: 16x16 weight blocks (scales replicated along the rows) copy as 1x16 ones */
  if (k->src.format == FB_FMT_NVFP4 && k->act.two_d) return NO("16x16 NVFP4 A operands: no template yet");
  if (k->src.format == FB_FMT_MXFP8 && (k->src.e5m2 || k->act.e5m2)) return NO("E5M2 MXFP8 operands: no template yet");
  return FB_TMPL_YES;
}
static int gemm_match(const fb_kernel_spec *k, const char *const **params, const char **why) {
  if (!is_gemm(k->op)) return FB_TMPL_NOT_MINE;
  if (!strstr(k->name, "_sm90a")) return NO("wgmma is Hopper's (sm_90a): on this arch the portable family (gemm_mma.cuh) runs");
  if (gemm_operands_ok(k, why) != FB_TMPL_YES) return FB_TMPL_UNSUPPORTED;
  return YES(k->src.format != FB_FMT_BF16 ? P_GEMM_Q : P_GEMM_BF16);
}
/* The operands' kind (FB_KIND): 0 BF16, 1 NVFP4 (x a BF16 copy), 2 MXFP8. */
static int gemm_operands(const fb_kernel_spec *k) {
  return k->src.format == FB_FMT_NVFP4 ? 1 : k->src.format == FB_FMT_MXFP8 ? 2 : 0;
}
/* Limits of gemm_sm90.cuh (shared memory, registers, TMA boxes, what is written). */
static const char *gemm_illegal(const fb_kernel_spec *k, const fb_variant *v) {
  int tm = param(v, "tile_m", 0), tn = param(v, "tile_n", 0), tk = param(v, "tile_k", 0);
  int st = param(v, "stages", 0), cl = param(v, "cluster", 1), co = param(v, "consumers", 1);
  int wb = param(v, "weights_bf16", 1), pipe = param(v, "pipe", 0), pp = param(v, "pingpong", 0);
  int kind = gemm_operands(k);
  if (cl != 1) return "gemm: clusters (TMA multicast) are not written yet: cluster = 1 only";
  if (co != 1 && co != 2) return "gemm: 1 or 2 consumer warpgroups";
  if (pp != 0 && pp != 1) return "gemm: pingpong takes 0 (the consumer warpgroups share each tile) or 1 (they take turns, a tile each)";
  if (pp && co != 2) return "gemm: pingpong needs two consumer warpgroups (they take turns)";
  const int cs = pp ? 1 : co; /* consumer warpgroups sharing a tile */
  if (tm % (64 * cs) || tm > 256) return "gemm: tile_m must be 64 rows per consumer warpgroup, 1 or 2 times, and <= 256 (TMA box)";
  if (tn != 64 && tn != 128 && tn != 192 && tn != 256) return "gemm: tile_n must be 64, 128, 192 or 256 (the wgmma N written out)";
  if (kind == 0 && (tk % 64 || tk < 64)) return "gemm: BF16 tile_k must be a multiple of 64 (128-byte swizzle atoms)";
  if (kind != 0 && tk != 128) return "gemm: NVFP4 and MXFP8 tiles take tile_k = 128";
  if (kind == 1 && !wb) return "gemm: NVFP4 weights dequantized inside the GEMM are not written yet: weights_bf16 = true only";
  if (kind == 2 && !wb && k->acc_exact)
    return "gemm: the recipe's gemm.accumulate = \"exact\" keeps BF16 products only (FP8 wgmma sums a k32 product with "
           "about 14 bits inside the instruction): weights_bf16 = true";
  if (kind == 2 && wb) kind = 3;
  if (pipe != 0 && pipe != 1 && pipe != 2) return "gemm: pipe takes 0 (off), 1 (whole k-blocks) or 2 (half k-blocks)";
  if (pipe && kind == 0) return "gemm: pipe is for NVFP4 / MXFP8 (A decoded in registers); the BF16 GEMM has no decode to overlap";
  if (pipe == 1 && kind == 2)
    return "gemm: FP8 wgmma (weights_bf16 = false) takes pipe 0 or 2 (two k32 products in flight and in promotion); 1 is for A decoded in registers";
  if (st < 2) return "gemm: at least 2 stages";
  int mw = tm / cs / 64;
  /* consumer registers: accumulators (and FP8's temporary accumulators, one k32 product each, two with pipe 2), NVFP4's decoded A
     fragments and scales, the rest */
  int regs = mw * tn / 2 * (kind == 2 ? (pipe ? 3 : 2) : 1) + (kind == 1 || kind == 3 ? mw * 48 + 8 : 0) + 40;
  /* pipe 1: a second slot of 8 decoded A fragments (32) and the decode's temporaries beside both (ptxas 13.0: 128 x 128
     with two consumers fits, 128 x 192 spills) */
  if (pipe == 1) regs += mw * 48;
  /* ptxas 13.0 beside the SwiGLU epilogues (MXFP8 only): pipe 2 spills at tile_n >= 192, pipe 1 serializes the wgmmas */
  if (pipe && kind == 3 && (tn >= 192 || pipe == 1) && (k->op == FB_OP_GEMM_FWD13 || k->op == FB_OP_GEMM_DGRAD2))
    return "gemm: a pipelined MXFP8 main loop beside a SwiGLU epilogue: pipe 2 at tile_n 128 only (ptxas 13.0 spills or serializes)";
  /* a consumer warpgroup's registers: 240 alone; with two, 232 (setmaxnreg), 224 for FP8 (its producer warpgroup's
     scale stagers take 56) */
  if (regs > (co == 2 ? (kind == 2 ? 224 : 232) : 240)) return "gemm: the accumulators need more registers than a consumer warpgroup has";
  /* below the estimate, ptxas 13.0 still spills (test_gemm --compile-only over the generator's kept set, 2026-12-01):
     BF16 with two m64 sub-tiles a consumer at tile_n 192 (20-108 bytes), pipe 1 at tile_n 192 (8-52 bytes) */
  if (kind == 0 && mw == 2 && tn >= 192) return "gemm: BF16, two m64 sub-tiles a consumer at tile_n 192: ptxas 13.0 spills registers";
  if (pipe == 1 && tn >= 192) return "gemm: pipe 1 at tile_n 192: ptxas 13.0 spills registers";
  /* FP8 wgmma beside the forward SwiGLU (w13) and S2F6 (w2) epilogues: held out until checked on a GPU (the SwiGLU form
     hung on the H200 once: its producer loaded only B's gate half against an expect-tx of all of B). test_gemm --held
     ran them on the H200 on 2026-12-02, pipe 0 and 2, balanced and skewed rows: 0 failed. A variant that needs the same
     again returns a reason with "held out until run on a GPU" in it (test_gemm --held builds and runs it by hand). */
  /* test_gemm --compile-only, 2026-12-02: FP8 wgmma with one consumer at tile_n 192 spills (76 bytes) beside the plain
     BF16-rows epilogue (255 registers); its SwiGLU-backward and wgrad forms there do not */
  if (kind == 2 && co == 1 && tn >= 192 && k->out_bf16 && k->op != FB_OP_GEMM_WGRAD && k->op != FB_OP_GEMM_FWD13 &&
      k->op != FB_OP_GEMM_DGRAD2 && !(k->op == FB_OP_GEMM_FWD2 && k->q.format == FB_FMT_S2F6))
    return "gemm: FP8 wgmma, one consumer warpgroup at tile_n 192 with BF16 rows out: ptxas 13.0 spills registers";
  /* test_gemm --compile-only, 2026-12-07: ping-pong MXFP8 x BF16 copy at tile_n 256, pipe 0, beside the plain BF16-rows
     epilogue spills 8 bytes (its pipe 2 form and its wgrad, SwiGLU and S2F6 forms do not) */
  if (pp && kind == 3 && tn >= 256 && !pipe && k->out_bf16 && k->op != FB_OP_GEMM_WGRAD && k->op != FB_OP_GEMM_FWD13 &&
      k->op != FB_OP_GEMM_DGRAD2 && !(k->op == FB_OP_GEMM_FWD2 && k->q.format == FB_FMT_S2F6))
    return "gemm: ping-pong MXFP8 at tile_n 256, pipe 0, with BF16 rows out: ptxas 13.0 spills registers";
  /* pingpong's two ordering mbarriers are 16 bytes of static shared memory beside the dynamic */
  if (fb_gemm_smem_total(kind, tm, tn, tk, st) + (pp ? 16 : 0) > 232448) return "gemm: the pipeline stages exceed 227 KiB of shared memory";
  return NULL;
}
static void gemm_defines(const fb_kernel_spec *k, fb_str *d) {
  int kind = gemm_operands(k), wgrad = k->op == FB_OP_GEMM_WGRAD;
  int ao = kind == 1 ? (k->act.outer == FB_GRAN_TENSOR ? 2 : 1) : 0, bo = kind == 1 ? (k->src.outer == FB_GRAN_TENSOR ? 2 : 1) : 0;
  fb_str_printf(d, "FB_A_OUTER %d\nFB_B_OUTER %d\nFB_KIND %d\nFB_MODE %d\nFB_OUT_BF16 %d\nFB_SWIGLU %d\n", ao, bo, kind, wgrad,
                k->out_bf16 ? 1 : 0, k->op == FB_OP_GEMM_FWD13 ? 1 : k->op == FB_OP_GEMM_DGRAD2 ? 2 : 0);
  int s2f6 = k->op == FB_OP_GEMM_FWD2 && k->q.format == FB_FMT_S2F6;
  fb_str_printf(d, "FB_RHT %d\nFB_S2F6 %d\n", s2f6 && k->q.rht ? 1 : 0, s2f6);
}
/* _m128n256k128_s4_c1_w2: tile, stages, cluster, consumer warpgroups; _b1 for a BF16 weight copy, _p2 for pipe 2, _pp for
   ping-pong consumers */
static void gemm_tag(const fb_variant *v, char *name, size_t size, int len) {
  len += snprintf(name + len, size - (size_t)len, "_m%dn%dk%d_s%d_c%d_w%d", param(v, "tile_m", 0), param(v, "tile_n", 0),
                  param(v, "tile_k", 0), param(v, "stages", 0), param(v, "cluster", 0), param(v, "consumers", 0));
  if (fb_variant_has(v, "weights_bf16")) len += snprintf(name + len, size - (size_t)len, "_b%d", param(v, "weights_bf16", 0));
  if (param(v, "pipe", 0)) len += snprintf(name + len, size - (size_t)len, "_p%d", param(v, "pipe", 0));
  if (param(v, "pingpong", 0)) snprintf(name + len, size - (size_t)len, "_pp");
}
static void gemm_grid(const fb_kernel_spec *k, const fb_variant *v, long long rows, long long cols, unsigned ng,
                      unsigned *gx, unsigned *gy, unsigned *threads) { /* persistent: gx = 0, one CTA per SM, the caller's count */
  (void)k, (void)rows, (void)cols, (void)ng, (void)gy;
  *threads = 128u * (unsigned)(1 + param(v, "consumers", 1)), *gx = 0;
}
static unsigned gemm_smem(const fb_kernel_spec *k, const fb_variant *v) { /* fb_gemm.h's kinds: MXFP8 x BF16 copy is 3 */
  int kind = gemm_operands(k) == 2 && param(v, "weights_bf16", 0) ? 3 : gemm_operands(k);
  return (unsigned)fb_gemm_smem_total(kind, param(v, "tile_m", 128), param(v, "tile_n", 128),
                                      param(v, "tile_k", 64), param(v, "stages", 4));
}

/* ---- gemm_mma.cuh: the portable grouped GEMMs on mma.sync (every arch from sm_89 on; cp.async ring, 4 or 8 warps) ---- */
PARAMS(P_MMA_BF16, "tile_m", "tile_n", "tile_k", "stages", "consumers", "pipe");
PARAMS(P_MMA_Q, "tile_m", "tile_n", "tile_k", "stages", "consumers", "weights_bf16", "pipe");
static int gemm_mma_match(const fb_kernel_spec *k, const char *const **params, const char **why) {
  if (!is_gemm(k->op)) return FB_TMPL_NOT_MINE;
  if (gemm_operands_ok(k, why) != FB_TMPL_YES) return FB_TMPL_UNSUPPORTED;
  return YES(k->src.format != FB_FMT_BF16 ? P_MMA_Q : P_MMA_BF16);
}
/* fb_gemm.h's kind of v: MXFP8 with a BF16 copy is 3 (A decoded, BF16 products), without one 2 (FP8 mma) */
static int gemm_kind(const fb_kernel_spec *k, const fb_variant *v) {
  int kind = gemm_operands(k);
  return kind == 2 && param(v, "weights_bf16", 0) ? 3 : kind;
}
/* Limits of gemm_mma.cuh: the warp tile (2 warps across N, 16-row and 32-column multiples), registers, shared memory. */
static const char *gemm_mma_illegal(const fb_kernel_spec *k, const fb_variant *v) {
  int tm = param(v, "tile_m", 0), tn = param(v, "tile_n", 0), tk = param(v, "tile_k", 0);
  int st = param(v, "stages", 0), co = param(v, "consumers", 1), wb = param(v, "weights_bf16", 1), pipe = param(v, "pipe", 0);
  int kind = gemm_kind(k, v);
  if (co != 1 && co != 2) return "gemm_mma: 1 or 2 groups of 4 warps (consumers)";
  if (tn != 64 && tn != 128 && tn != 192 && tn != 256) return "gemm_mma: tile_n must be 64, 128, 192 or 256 (warps of 32-column groups)";
  int wnn = FB_GEMM_MMA_WARPS_N(tn), wmm = 4 * co / wnn; /* warps across N and down M */
  if (wmm < 1) return "gemm_mma: tile_n 256 takes 4 warps across N";
  int wm = tm / wmm, wn = tn / wnn, mi = wm / 16, ni = wn / 8;
  if (tm % (16 * wmm) || tm > 256) return "gemm_mma: tile_m must be a multiple of 16 rows per warp down M, <= 256";
  if (pipe != 0 && pipe != 2) return "gemm_mma: pipe takes 0 (off) or 2 (the next k step's fragments read during this one's mmas)";
  if (pipe && kind == 2) return "gemm_mma: pipe is not written for FP8 products (one k32 step at a time)";
  if (kind == 0 && (tk % 64 || tk < 64 || tk > 128)) return "gemm_mma: BF16 tile_k must be 64 or 128 (128-byte rows)";
  if (kind != 0 && tk != 128) return "gemm_mma: NVFP4 and MXFP8 tiles take tile_k = 128";
  if (kind == 1 && !wb) return "gemm_mma: NVFP4 weights dequantized inside the GEMM are not written: weights_bf16 = true only";
  if (kind == 2 && k->acc_exact)
    return "gemm_mma: the recipe's gemm.accumulate = \"exact\" keeps BF16 products only (FP8 mma.sync sums a k32 product "
           "inside the instruction): weights_bf16 = true";
  if (st < 2) return "gemm_mma: at least 2 stages";
  /* per thread: accumulators, the fragments of one k step (kind 1 / 3: A decoded for 4 k16 steps), kind 2's temporaries
     and scales, the addresses and the rest */
  int regs = mi * wn / 2 + ni * 2 + 40;
  regs += kind == 1 || kind == 3 ? mi * 16 + mi * 4 : kind == 2 ? mi * 4 + ni * 4 + ni * 4 + mi * 2 : mi * 4;
  if (pipe) regs += kind == 0 ? mi * 4 + ni * 2 : mi * 16; /* the second fragment set */
  if (regs > 255) return "gemm_mma: the warp tile needs more registers than a thread has";
  /* below the estimate, ptxas 13.0 still spills (test_gemm --compile-only, 2026-12-02): a warp wider than 64 columns
     (tile_n 192 / 256) with BF16 products, 4-300 bytes beside the epilogues; the FP8 products (one k32 step at a time) fit */
  if (kind != 2 && ni > 8) return "gemm_mma: BF16 products on a warp wider than 64 columns (tile_n > 128): ptxas 13.0 spills registers";
  if (fb_gemm_mma_smem_total(kind, tm, tn, tk, st) > 232448) return "gemm_mma: the pipeline stages exceed 227 KiB of shared memory";
  return NULL;
}
/* _mma_m128n128k64_s4_w1: tile, stages, groups of 4 warps; _b1 for a BF16 weight copy, _p2 for pipe 2 */
static void gemm_mma_tag(const fb_variant *v, char *name, size_t size, int len) {
  len += snprintf(name + len, size - (size_t)len, "_mma_m%dn%dk%d_s%d_w%d", param(v, "tile_m", 0), param(v, "tile_n", 0),
                  param(v, "tile_k", 0), param(v, "stages", 0), param(v, "consumers", 0));
  if (fb_variant_has(v, "weights_bf16")) len += snprintf(name + len, size - (size_t)len, "_b%d", param(v, "weights_bf16", 0));
  if (param(v, "pipe", 0)) snprintf(name + len, size - (size_t)len, "_p%d", param(v, "pipe", 0));
}
static void gemm_mma_grid(const fb_kernel_spec *k, const fb_variant *v, long long rows, long long cols, unsigned ng,
                          unsigned *gx, unsigned *gy, unsigned *threads) { /* persistent: gx = 0, as many CTAs as fit */
  (void)k, (void)rows, (void)cols, (void)ng, (void)gy;
  *threads = 128u * (unsigned)param(v, "consumers", 1), *gx = 0;
}
static unsigned gemm_mma_smem(const fb_kernel_spec *k, const fb_variant *v) {
  return (unsigned)fb_gemm_mma_smem_total(gemm_kind(k, v), param(v, "tile_m", 128), param(v, "tile_n", 128),
                                          param(v, "tile_k", 64), param(v, "stages", 4));
}

/* ---- gemm_sm100.cuh: the grouped GEMMs on tcgen05 (Blackwell: sm_100a, sm_103a; TMA producer warp, one MMA-issuing
 * thread, four epilogue warps reading TMEM). Compiled and run under the functional model only: never on a Blackwell GPU. */
PARAMS(P_TC, "tile_m", "tile_n", "tile_k", "stages", "cluster", "mma_k");
static int gemm_tc_match(const fb_kernel_spec *k, const char *const **params, const char **why) {
  if (!is_gemm(k->op)) return FB_TMPL_NOT_MINE;
  if (!strstr(k->name, "_sm100a") && !strstr(k->name, "_sm103a")) return NO("tcgen05 is Blackwell's (sm_100a, sm_103a)");
  if (gemm_operands_ok(k, why) != FB_TMPL_YES) return FB_TMPL_UNSUPPORTED;
  if (k->acc_exact && k->src.format != FB_FMT_BF16)
    return NO("tcgen05: the recipe's gemm.accumulate = \"exact\": block-scaled tcgen05 MMAs sum inside the instruction "
              "(NUMERICS.md's 1e-4 rule); the portable family keeps BF16 products");
  return YES(P_TC);
}
/* Limits of gemm_sm100.cuh: tile_m 128 on one CTA (cta_group::1, M = 128; cluster 1, or 2 with B multicast: two tiles of
   one expert and N block, each CTA loading half of B into both) or 256 on a CTA pair (cluster 2, cta_group::2, M = 256),
   the MMA's N, the stage row's swizzle, TMEM columns (per CTA: the pair's are the same in each), shared memory. */
static const char *gemm_tc_illegal(const fb_kernel_spec *k, const fb_variant *v) {
  int tm = param(v, "tile_m", 0), tn = param(v, "tile_n", 0), tk = param(v, "tile_k", 0);
  int st = param(v, "stages", 0), cl = param(v, "cluster", 1), kind = gemm_operands(k);
  if (tm != 128 && tm != 256) return "gemm_sm100: tile_m 128 (one CTA, M = 128) or 256 (a CTA pair, M = 256)";
  if (tm == 256 && cl != 2) return "gemm_sm100: tile_m 256 needs cluster 2 (the CTA pair of cta_group::2, M = 256)";
  if (cl != 1 && cl != 2)
    return "gemm_sm100: cluster 1 or 2 (clusters of 4, two CTA pairs or four 1-CTA tiles sharing B by multicast, are not written)";
  if (tn % 32 || tn < 32 || tn > 256) return "gemm_sm100: tile_n must be a multiple of 32 in [32, 256] (the MMA's N, 32-column TMEM loads)";
  if (k->op == FB_OP_GEMM_FWD13 && tn % 64) return "gemm_sm100: SwiGLU takes tile_n a multiple of 64 (gate and up halves of 32-column blocks)";
  int mk = kind == 1 ? 64 : kind == 2 ? 32 : 16, rb = fb_gemm_tc_row_bytes(kind, tk), k96 = param(v, "mma_k", 0);
  if (k96 != 0 && k96 != 96) return "gemm_sm100: mma_k takes 0 (the kind's K: 16 BF16, 32 MXFP8, 64 NVFP4) or 96 (NVFP4 on sm_103a)";
  if (k96 && kind != 1) return "gemm_sm100: K = 96 MMAs (mma_k 96) are NVFP4's only here (kind::mxf4nvf4 .block16; MXFP4 has no GEMM)";
  if (k96 && !strstr(k->name, "_sm103a"))
    return "gemm_sm100: K = 96 MMAs (idesc bit 31) are sm_103a's (GB300); sm_100a has K = 64 only (ptxas accepts the form there "
           "too: only this rule keeps it out)";
  if (k96 && tk % 768) /* K itself need not be a multiple of tile_k or of 96: the last K tile is partial (S1's 5120, 2048) */
    return "gemm_sm100: K = 96 takes tile_k a multiple of 768 (a stage row of 384 bytes: three 128-byte swizzle rows hold eight "
           "48-byte MMA chunks, the two across a row split by the absolute-LBO mode, which allows the 128-byte swizzle only; "
           "K need not divide: a partial last K tile)";
  if (tk < mk || tk % mk) return "gemm_sm100: tile_k must be a multiple of the MMA's K (16 BF16, 32 MXFP8, 64 NVFP4)";
  if (rb != 32 && rb != 64 && rb % 128) return "gemm_sm100: a stage row of 32, 64 or a multiple of 128 bytes (the TMA swizzle spans)";
  if (st < 2) return "gemm_sm100: at least 2 stages";
  if (st > 12) return "gemm_sm100: at most 12 stages (the barriers' 128 bytes)";
  if (fb_gemm_tc_tmem_need(kind, tn, tk, st) > 512) return "gemm_sm100: the accumulator and the stages' scale factors exceed 512 TMEM columns";
  if (fb_gemm_tc_smem_total(kind, tm, tn, tk, st) > 232448) return "gemm_sm100: the pipeline stages exceed 227 KiB of shared memory";
  return NULL;
}
/* _tc_m128n256k128_s4_c1: tile, stages, cluster; _k96 for K = 96 MMAs */
static void gemm_tc_tag(const fb_variant *v, char *name, size_t size, int len) {
  len += snprintf(name + len, size - (size_t)len, "_tc_m%dn%dk%d_s%d_c%d", param(v, "tile_m", 0), param(v, "tile_n", 0),
                  param(v, "tile_k", 0), param(v, "stages", 0), param(v, "cluster", 0));
  if (param(v, "mma_k", 0)) snprintf(name + len, size - (size_t)len, "_k%d", param(v, "mma_k", 0));
}
static void gemm_tc_grid(const fb_kernel_spec *k, const fb_variant *v, long long rows, long long cols, unsigned ng,
                         unsigned *gx, unsigned *gy, unsigned *threads) { /* persistent: gx = 0, one CTA per SM */
  (void)k, (void)v, (void)rows, (void)cols, (void)ng, (void)gy;
  *threads = 192u, *gx = 0;
}
static unsigned gemm_tc_smem(const fb_kernel_spec *k, const fb_variant *v) {
  return (unsigned)fb_gemm_tc_smem_total(gemm_operands(k), param(v, "tile_m", 128), param(v, "tile_n", 128), param(v, "tile_k", 64),
                                         param(v, "stages", 4));
}

/* ---- gemm_bcopy.cuh: the exact BF16 copy (K-permuted) of an NVFP4 / MXFP8 GEMM operand -------------------------- */
PARAMS(P_BCOPY, "threads", "pair"); /* pair (gemm_bcopy.cuh FB_PAIR): lane pairs store whole sectors */
static int bcopy_match(const fb_kernel_spec *k, const char *const **params, const char **why) {
  if (k->op != FB_OP_BCOPY) return FB_TMPL_NOT_MINE;
  if (k->q.format != FB_FMT_NVFP4 && k->q.format != FB_FMT_MXFP8) return NO("bcopy: NVFP4 or MXFP8 sources only");
  return YES(P_BCOPY);
}
static const char *bcopy_illegal(const fb_kernel_spec *k, const fb_variant *v) {
  (void)k;
  int pair = param(v, "pair", 0);
  return pair == 0 || pair == 1 ? NULL : "bcopy: pair is 0 or 1";
}
static void bcopy_defines(const fb_kernel_spec *k, fb_str *d) { fb_str_printf(d, "FB_SRC %d\n", k->q.format == FB_FMT_NVFP4 ? 1 : 2); }

/* ---- tcopy.cuh: a matrix copied to BF16 / FP32 (dequantized, transposed, RHT-16, scaled) ------------------------- */
static int tcopy_match(const fb_kernel_spec *k, const char *const **params, const char **why) {
  if (k->op != FB_OP_TCOPY) return FB_TMPL_NOT_MINE;
  if (k->q.rht && k->q.rht != 16) return NO("tcopy: RHT-16 only");
  if (k->src.format == FB_FMT_NVFP4 && (k->in_f32 || k->src.outer == FB_GRAN_EXPERT)) return NO("tcopy: NVFP4 sources with a tensor or row outer scale");
  if (k->src.format != FB_FMT_NVFP4 && k->src.format != FB_FMT_MXFP8 && k->src.format != FB_FMT_BF16)
    return NO("tcopy: BF16, FP32, NVFP4 or MXFP8 sources");
  /* a stored MXFP8 source's name carries no element type (gen/kname.c): E4M3 only */
  if (k->src.format == FB_FMT_MXFP8 && (k->in_f32 || k->src.e5m2)) return NO("tcopy: MXFP8 sources of E4M3 codes only (not FP32, not E5M2)");
  if (k->act.rht && !k->in_f32) return NO("tcopy: scaling takes FP32 sources");
  return YES(P_THREADS);
}
static void tcopy_defines(const fb_kernel_spec *k, fb_str *d) { /* scale: act.rht (the divisor; 0 none) */
  int src = k->in_f32 ? 1 : k->src.format == FB_FMT_NVFP4 ? 2 : k->src.format == FB_FMT_MXFP8 ? 3 : 0;
  fb_str_printf(d, "FB_OUT_BF16 %d\nFB_RHT %d\nFB_SCALE %d\nFB_SRC %d\nFB_SRC_OUTER %d\nFB_TRANS %d\n", k->out_bf16 ? 1 : 0, k->q.rht,
                k->act.rht, src, src == 2 && k->src.outer == FB_GRAN_TOKEN, k->col ? 1 : 0);
}
static void tcopy_grid(const fb_kernel_spec *k, const fb_variant *v, long long rows, long long cols, unsigned ng,
                       unsigned *gx, unsigned *gy, unsigned *threads) { /* a thread per 16 outputs, grid-stride */
  (void)k, (void)v, (void)ng, (void)gy;
  *gx = cap((rows * cols / 16 + *threads - 1) / *threads, 1ll << 16);
}

/* ---- router.cuh: softmax top-k routing, a warp per token ------------------------------------------------------- */
static int router_match(const fb_kernel_spec *k, const char *const **params, const char **why) {
  (void)why;
  return k->op == FB_OP_ROUTER ? YES(P_THREADS) : FB_TMPL_NOT_MINE;
}
static void warp_per_row_grid(const fb_kernel_spec *k, const fb_variant *v, long long rows, long long cols, unsigned ng,
                              unsigned *gx, unsigned *gy, unsigned *threads) {
  (void)k, (void)v, (void)cols, (void)ng, (void)gy;
  *gx = cap((rows * 32 + *threads - 1) / *threads, 1ll << 20);
}

/* ---- permute.cuh: the dispatch's gather into expert order (the payload moved as bytes: only its planes matter) --- */
static int permute_match(const fb_kernel_spec *k, const char *const **params, const char **why) {
  if (k->op != FB_OP_PERMUTE) return FB_TMPL_NOT_MINE;
  if (k->q.format == FB_FMT_S2F6) return NO("permute of an S2F6 payload: no template (S2F6 is the combine's format)");
  if (k->q.format == FB_FMT_NVFP4 && k->q.outer == FB_GRAN_EXPERT) return NO("permute of NVFP4 rows with per-expert outer scales: not a dispatch payload");
  return YES(P_THREADS_VEC);
}
static void permute_defines(const fb_kernel_spec *k, fb_str *d) {
  const fb_qspec *q = &k->q;
  fb_str_printf(d, "FB_OUTER_TOK %d\nFB_PAYLOAD %d\n", q->format == FB_FMT_NVFP4 && q->outer == FB_GRAN_TOKEN,
                q->format == FB_FMT_NVFP4 ? 1 : q->format == FB_FMT_MXFP8 ? 2 : 0);
}
static void permute_grid(const fb_kernel_spec *k, const fb_variant *v, long long rows, long long cols, unsigned ng,
                         unsigned *gx, unsigned *gy, unsigned *threads) { /* every pass: warps grid-stride over chunks or rows (rows = tokens) */
  (void)v, (void)cols, (void)ng, (void)gy;
  long long w = *threads / 32, entries = rows * (k->top_k > 0 ? k->top_k : 1);
  *gx = cap((entries + w - 1) / w, 1ll << 16);
}

/* ---- unpermute.cuh: the combine (BF16 or S2F6 payload, RHT-32 inverted) ----------------------------------------- */
PARAMS(P_UNPERMUTE, "rows", "threads");
static int unpermute_match(const fb_kernel_spec *k, const char *const **params, const char **why) {
  if (k->op != FB_OP_UNPERMUTE) return FB_TMPL_NOT_MINE;
  if (k->q.format != FB_FMT_BF16 && k->q.format != FB_FMT_S2F6) return NO("unpermute of a payload other than BF16 or S2F6: no template");
  if (k->q.format == FB_FMT_S2F6 && k->q.rht && k->q.rht != 32) return NO("unpermute: the S2F6 combine inverts RHT-32 only");
  return YES(P_UNPERMUTE);
}
static void unpermute_defines(const fb_kernel_spec *k, fb_str *d) {
  int s2f6 = k->q.format == FB_FMT_S2F6;
  fb_str_printf(d, "FB_OUT_BF16 %d\nFB_RHT %d\nFB_S2F6 %d\n", k->out_bf16 ? 1 : 0, s2f6 && k->q.rht ? 1 : 0, s2f6);
}
static void unpermute_grid(const fb_kernel_spec *k, const fb_variant *v, long long rows, long long cols, unsigned ng,
                           unsigned *gx, unsigned *gy, unsigned *threads) { /* param rows tokens per CTA */
  (void)k, (void)cols, (void)ng, (void)gy, (void)threads;
  long long r = param(v, "rows", 1);
  *gx = cap((rows + r - 1) / r, (1ll << 31) - 1);
}

/* ---- combine_bwd.cuh: the combine's backward (dY rows in expert order, dL/dtopk_w), a CTA per token ------------- */
static int combine_bwd_match(const fb_kernel_spec *k, const char *const **params, const char **why) {
  if (k->op != FB_OP_COMBINE_BWD) return FB_TMPL_NOT_MINE;
  if (k->q.format != FB_FMT_BF16 && k->q.format != FB_FMT_S2F6) return NO("combine backward of a payload other than BF16 or S2F6: no template");
  if (k->q.format == FB_FMT_S2F6 && k->q.rht && k->q.rht != 32) return NO("combine backward: the S2F6 combine inverts RHT-32 only");
  return YES(P_THREADS);
}
static void combine_bwd_defines(const fb_kernel_spec *k, fb_str *d) {
  int s2f6 = k->q.format == FB_FMT_S2F6;
  fb_str_printf(d, "FB_RHT %d\nFB_S2F6 %d\n", s2f6 && k->q.rht ? 1 : 0, s2f6);
}
static void combine_bwd_grid(const fb_kernel_spec *k, const fb_variant *v, long long rows, long long cols, unsigned ng,
                             unsigned *gx, unsigned *gy, unsigned *threads) {
  (void)k, (void)v, (void)cols, (void)ng, (void)gy, (void)threads;
  *gx = cap(rows, (1ll << 31) - 1);
}

/* ---- swiglu.cuh: SwiGLU forward / backward on their own (the GEMMs fuse it) ------------------------------------- */
PARAMS(P_SWIGLU, "rows", "cols", "threads");
static int swiglu_match(const fb_kernel_spec *k, const char *const **params, const char **why) {
  (void)why;
  return k->op == FB_OP_SWIGLU_FWD || k->op == FB_OP_SWIGLU_BWD ? YES(P_SWIGLU) : FB_TMPL_NOT_MINE;
}
static const char *swiglu_illegal(const fb_kernel_spec *k, const fb_variant *v) {
  (void)k;
  if (param(v, "rows", 0) * (param(v, "cols", 0) / 8) < param(v, "threads", 0)) return "swiglu: fewer 8-column vectors in the tile than threads";
  return NULL;
}
static void swiglu_defines(const fb_kernel_spec *k, fb_str *d) { fb_str_printf(d, "FB_BWD %d\n", k->op == FB_OP_SWIGLU_BWD); }
static void swiglu_grid(const fb_kernel_spec *k, const fb_variant *v, long long rows, long long cols, unsigned ng,
                        unsigned *gx, unsigned *gy, unsigned *threads) { /* rows x f (cols) in tiles, grid-stride */
  (void)k, (void)ng, (void)gy, (void)threads;
  long long tr = param(v, "rows", 4), tc = param(v, "cols", 256);
  *gx = cap(((rows + tr - 1) / tr) * ((cols + tc - 1) / tc), 1ll << 20);
}

/* ---- adamw.cuh: AdamW on FP32 masters, writing the next step's weights (BF16, NVFP4 or MXFP8) ------------------- */
static int adamw_match(const fb_kernel_spec *k, const char *const **params, const char **why) {
  const fb_qspec *q = &k->q;
  if (k->op != FB_OP_ADAMW) return FB_TMPL_NOT_MINE;
  if (q->rht || q->format == FB_FMT_S2F6) return NO("AdamW: next-step weights in this format: no template");
  if (q->format == FB_FMT_MXFP8 && q->e5m2) return NO("AdamW: MXFP8 weights with E5M2 elements: no template yet");
  if (q->format == FB_FMT_NVFP4 && q->outer == FB_GRAN_TOKEN) return NO("AdamW: NVFP4 weights take tensor or expert outer scales");
  return YES(q->format == FB_FMT_MXFP8 ? P_THREADS : P_THREADS_VEC); /* MXFP8: a thread per block of 32 */
}
static void adamw_defines(const fb_kernel_spec *k, fb_str *d) {
  const fb_qspec *q = &k->q;
  fb_str_printf(d, "FB_AMAX %d\nFB_SR %d\nFB_WFMT %d\n", q->outer == FB_GRAN_EXPERT, q->format == FB_FMT_MXFP8 && q->rounding == FB_ROUND_SR,
                q->format == FB_FMT_NVFP4 ? 1 : q->format == FB_FMT_MXFP8 ? 2 : 0);
}
static void adamw_grid(const fb_kernel_spec *k, const fb_variant *v, long long rows, long long cols, unsigned ng,
                       unsigned *gx, unsigned *gy, unsigned *threads) {
  (void)ng, (void)gy;
  unsigned t = *threads;
  if (k->q.format == FB_FMT_MXFP8) *gx = cap((rows * cols / 32 + t - 1) / t, 16384);
  else *gx = cap((rows * cols / param(v, "vec", 4) + t - 1) / t, 4096);
}

/* ---- dense.cuh: the GPU-resident train step's non-expert pieces (one variant, several entry points) ------------- */
static int dense_match(const fb_kernel_spec *k, const char *const **params, const char **why) {
  (void)why;
  return k->op == FB_OP_DENSE ? YES(P_THREADS) : FB_TMPL_NOT_MINE;
}

/* The rows. A hook left out is the default (fb_tmpl.h); grid NULL: no launch rule (dense.cuh's pieces launch
 * themselves, runtime/train_gpu.c). */
static const fb_tmpl FB_TEMPLATES[] = {
    {.file = "amax.cuh", .match = amax_match, .defines = amax_defines, .grid = amax_grid},
    {.file = "quant_nvfp4.cuh", .match = quant_nvfp4_match, .illegal = quant_nvfp4_illegal, .defines = quant_nvfp4_defines,
     .grid = quant_nvfp4_grid},
    {.file = "quant_mxfp8.cuh", .match = quant_mxfp8_match, .defines = quant_mxfp8_defines, .grid = per32_grid},
    {.file = "mx_col.cuh", .match = mx_col_match, .illegal = mx_col_illegal, .defines = mx_col_defines,
     .param_define = mx_col_param_define, .grid = mx_col_grid},
    {.file = "s2f6.cuh", .match = s2f6_match, .defines = s2f6_defines, .grid = per32_grid},
    {.file = "gemm_sm90.cuh", .match = gemm_match, .illegal = gemm_illegal, .defines = gemm_defines, .tag = gemm_tag,
     .grid = gemm_grid, .smem = gemm_smem, .family = "wgmma"},
    {.file = "gemm_sm100.cuh", .match = gemm_tc_match, .illegal = gemm_tc_illegal, .defines = gemm_defines, .tag = gemm_tc_tag,
     .grid = gemm_tc_grid, .smem = gemm_tc_smem, .family = "tcgen05"},
    {.file = "gemm_mma.cuh", .match = gemm_mma_match, .illegal = gemm_mma_illegal, .defines = gemm_defines, .tag = gemm_mma_tag,
     .grid = gemm_mma_grid, .smem = gemm_mma_smem, .family = "mma"},
    {.file = "gemm_bcopy.cuh", .match = bcopy_match, .illegal = bcopy_illegal, .defines = bcopy_defines, .grid = per32_grid},
    {.file = "tcopy.cuh", .match = tcopy_match, .defines = tcopy_defines, .grid = tcopy_grid},
    {.file = "router.cuh", .match = router_match, .grid = warp_per_row_grid},
    {.file = "permute.cuh", .match = permute_match, .defines = permute_defines, .grid = permute_grid},
    {.file = "unpermute.cuh", .match = unpermute_match, .defines = unpermute_defines, .grid = unpermute_grid},
    {.file = "combine_bwd.cuh", .match = combine_bwd_match, .defines = combine_bwd_defines, .grid = combine_bwd_grid},
    {.file = "swiglu.cuh", .match = swiglu_match, .illegal = swiglu_illegal, .defines = swiglu_defines, .grid = swiglu_grid},
    {.file = "adamw.cuh", .match = adamw_match, .defines = adamw_defines, .grid = adamw_grid},
    {.file = "dense.cuh", .match = dense_match, .fixed = 1},
};
#define NTEMPLATES (int)(sizeof FB_TEMPLATES / sizeof FB_TEMPLATES[0])

/* Why an op has no template when no row claims the spec. */
static const char *no_template(fb_op op) {
  return op == FB_OP_QUANT ? "quantization to this format: no template" : "no template yet (router backward)";
}

const fb_tmpl *fb_tmpl_for_spec(const fb_kernel_spec *k, const char *const **params, const char **why) {
  const fb_tmpl *t = fb_tmpl_next(k, -1, params, why);
  if (t) *why = NULL;
  return t;
}

const fb_tmpl *fb_tmpl_next(const fb_kernel_spec *k, int after, const char *const **params, const char **why) {
  const char *first = NULL, *w = NULL;
  *params = NULL;
  for (int i = after + 1; i < NTEMPLATES; ++i) {
    const char *const *pp = NULL;
    int m = FB_TEMPLATES[i].match(k, &pp, &w);
    if (m == FB_TMPL_YES) return *params = pp, *why = first, &FB_TEMPLATES[i];
    if (m != FB_TMPL_UNSUPPORTED) continue;
    if (!first) first = w;
    if (!FB_TEMPLATES[i].family) break; /* a refusal ends the search, but for a family row's: another family may take it */
  }
  *why = first ? first : no_template(k->op);
  return NULL;
}

int fb_tmpl_index(const fb_tmpl *t) { return t ? (int)(t - FB_TEMPLATES) : -1; }

const fb_tmpl *fb_tmpl_at(int i) { return i >= 0 && i < NTEMPLATES ? &FB_TEMPLATES[i] : NULL; }

const fb_tmpl *fb_tmpl_by_file(const char *file) {
  for (int i = 0; i < NTEMPLATES; ++i)
    if (!strcmp(FB_TEMPLATES[i].file, file)) return &FB_TEMPLATES[i];
  return NULL;
}
