/* gen.c — kernel spec + tile parameters -> CUDA source from templates/.
 *
 * Entry points: fb_gen_template() (which template implements a spec, or why none does yet),
 * fb_gen_variants() (the legal, distinct tile variants of a spec under its tune family),
 * fb_gen_source() (the generated text: header, #defines in sorted order, template body).
 *
 * The template body is copied into the source from the embedded templates/ (build/gen/embedded.c);
 * the helper headers it includes (fb_formats.h, fb_philox.h, fb_kparams.h) reach NVRTC from memory. */
#include "fb_embed.h"
#include "fb_error.h"
#include "fb_str.h"
#include "fb_gemm.h"
#include "fourbit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fb_variant_has(const fb_variant *v, const char *name) {
  for (int i = 0; i < v->nparams; ++i)
    if (!strcmp(v->param[i], name)) return 1;
  return 0;
}

int fb_variant_param(const fb_variant *v, const char *name, int dflt) {
  for (int i = 0; i < v->nparams; ++i)
    if (!strcmp(v->param[i], name)) return v->value[i];
  return dflt;
}

static const fb_embedded_file *embedded(const char *name) {
  for (const fb_embedded_file *f = fb_embedded; f->name; ++f)
    if (!strcmp(f->name, name)) return f;
  return NULL;
}

/* A template and the tune parameters it reads. */
typedef struct {
  const char *tmpl;
  const char *params[FB_TUNE_MAXPARAMS + 1]; /* NULL-terminated */
} choice;

static int choose(const fb_kernel_spec *k, choice *c, const char **why) {
  memset(c, 0, sizeof *c);
  *why = NULL;
  const fb_qspec *q = &k->q;
  switch (k->op) {
  case FB_OP_AMAX:
    *c = (choice){"amax.cuh", {"threads", NULL}};
    return 1;
  case FB_OP_QUANT:
    if (q->rht) { *why = "a Hadamard transform before quantizing (wgrad RHT): no template yet"; return 0; }
    if (q->format == FB_FMT_NVFP4 && !k->col) { *c = (choice){"quant_nvfp4.cuh", {"rows", "threads", "stage", NULL}}; return 1; }
    if (q->format == FB_FMT_NVFP4) { *why = "NVFP4 down the columns (transposed): no template yet"; return 0; }
    if (q->format == FB_FMT_MXFP8 && q->e5m2) { *why = "MXFP8 with E5M2 elements: no template yet"; return 0; }
    if (q->format == FB_FMT_MXFP8 && !k->col) { *c = (choice){"quant_mxfp8.cuh", {"threads", NULL}}; return 1; }
    if (q->format == FB_FMT_MXFP8) { *c = (choice){"mx_col.cuh", {"rows", "cols", "threads", NULL}}; return 1; }
    *why = "quantization to this format: no template";
    return 0;
  case FB_OP_REQUANT:
    if (q->format != FB_FMT_MXFP8 || q->e5m2 || q->rht) { *why = "requantization to anything but plain E4M3 MXFP8: no template yet"; return 0; }
    if (k->src.format == FB_FMT_NVFP4 && k->src.two_d) { *why = "requantization of 16x16 NVFP4: no template yet"; return 0; }
    *c = (choice){"mx_col.cuh", {"rows", "cols", "threads", "slots", "half", NULL}};
    return 1;
  case FB_OP_S2F6_Q:
  case FB_OP_S2F6_DQ:
    *c = (choice){"s2f6.cuh", {"threads", NULL}};
    return 1;
  case FB_OP_GEMM_FWD13: case FB_OP_GEMM_FWD2: case FB_OP_GEMM_DGRAD2: case FB_OP_GEMM_WGRAD: case FB_OP_GEMM_DGRAD13:
    if (!strstr(k->name, "_sm90a")) { *why = "Blackwell (tcgen05) GEMM templates arrive in a later issue: the GEMMs are sm_90a only"; return 0; }
    if (k->op == FB_OP_GEMM_FWD2 && q->format != FB_FMT_BF16 && q->format != FB_FMT_S2F6) { *why = "w2 fwd: a combine payload other than BF16 or S2F6"; return 0; }
    if (k->op == FB_OP_GEMM_FWD2 && q->format == FB_FMT_S2F6 && q->rht && q->rht != 32) { *why = "w2 fwd: the S2F6 epilogue applies RHT-32 only"; return 0; }
    if (k->src.format == FB_FMT_S2F6) { *why = "S2F6 GEMM operands: not a recipe format"; return 0; }
    /* NVFP4 x BF16 copy (FB_KIND 1) in mode 0: the forward GEMMs and the w13 dgrad of an NVFP4 backward (the GPU expert
       layer's); an NVFP4 wgrad runs as a BF16 GEMM of the operands' exact BF16 copies (experts_gpu.c) */
    if (k->src.format == FB_FMT_NVFP4 && k->op != FB_OP_GEMM_FWD2 && k->op != FB_OP_GEMM_FWD13 && k->op != FB_OP_GEMM_DGRAD13) { *why = "NVFP4 operands in this backward GEMM: no template (an NVFP4 A operand is decoded along K, mode 0 only)"; return 0; }
    /* B is the exact BF16 copy: 16x16 weight blocks (scales replicated along the rows) copy as 1x16 ones */
    if (k->src.format == FB_FMT_NVFP4 && k->act.two_d) { *why = "16x16 NVFP4 A operands: no template yet"; return 0; }
    if (k->src.format == FB_FMT_MXFP8 && (k->src.e5m2 || k->act.e5m2)) { *why = "E5M2 MXFP8 operands: no template yet"; return 0; }
    if (k->src.format != FB_FMT_BF16)
      *c = (choice){"gemm_sm90.cuh", {"tile_m", "tile_n", "tile_k", "stages", "cluster", "consumers", "weights_bf16", "pipe", NULL}};
    else
      *c = (choice){"gemm_sm90.cuh", {"tile_m", "tile_n", "tile_k", "stages", "cluster", "consumers", NULL}};
    return 1;
  case FB_OP_BCOPY:
    if (q->format != FB_FMT_NVFP4 && q->format != FB_FMT_MXFP8) { *why = "bcopy: NVFP4 or MXFP8 sources only"; return 0; }
    *c = (choice){"gemm_bcopy.cuh", {"threads", NULL}};
    return 1;
  case FB_OP_TCOPY:
    if (q->rht && q->rht != 16) { *why = "tcopy: RHT-16 only"; return 0; }
    if (k->src.format == FB_FMT_NVFP4 && (k->in_f32 || k->src.outer == FB_GRAN_EXPERT)) { *why = "tcopy: NVFP4 sources with a tensor or row outer scale"; return 0; }
    if (k->src.format != FB_FMT_NVFP4 && k->src.format != FB_FMT_BF16) { *why = "tcopy: BF16, FP32 or NVFP4 sources"; return 0; }
    if (k->act.rht && !k->in_f32) { *why = "tcopy: scaling takes FP32 sources"; return 0; }
    *c = (choice){"tcopy.cuh", {"threads", NULL}};
    return 1;
  case FB_OP_ROUTER:
    *c = (choice){"router.cuh", {"threads", NULL}};
    return 1;
  case FB_OP_PERMUTE: /* the payload is moved as bytes: only its planes matter */
    if (q->format == FB_FMT_S2F6) { *why = "permute of an S2F6 payload: no template (S2F6 is the combine's format)"; return 0; }
    if (q->format == FB_FMT_NVFP4 && q->outer == FB_GRAN_EXPERT) { *why = "permute of NVFP4 rows with per-expert outer scales: not a dispatch payload"; return 0; }
    *c = (choice){"permute.cuh", {"threads", "vec", NULL}};
    return 1;
  case FB_OP_UNPERMUTE:
    if (q->format != FB_FMT_BF16 && q->format != FB_FMT_S2F6) { *why = "unpermute of a payload other than BF16 or S2F6: no template"; return 0; }
    if (q->format == FB_FMT_S2F6 && q->rht && q->rht != 32) { *why = "unpermute: the S2F6 combine inverts RHT-32 only"; return 0; }
    *c = (choice){"unpermute.cuh", {"rows", "threads", NULL}};
    return 1;
  case FB_OP_COMBINE_BWD:
    if (q->format != FB_FMT_BF16 && q->format != FB_FMT_S2F6) { *why = "combine backward of a payload other than BF16 or S2F6: no template"; return 0; }
    if (q->format == FB_FMT_S2F6 && q->rht && q->rht != 32) { *why = "combine backward: the S2F6 combine inverts RHT-32 only"; return 0; }
    *c = (choice){"combine_bwd.cuh", {"threads", NULL}};
    return 1;
  case FB_OP_SWIGLU_FWD:
  case FB_OP_SWIGLU_BWD:
    *c = (choice){"swiglu.cuh", {"rows", "cols", "threads", NULL}};
    return 1;
  case FB_OP_ADAMW:
    if (q->rht || q->format == FB_FMT_S2F6) { *why = "AdamW: next-step weights in this format: no template"; return 0; }
    if (q->format == FB_FMT_MXFP8 && q->e5m2) { *why = "AdamW: MXFP8 weights with E5M2 elements: no template yet"; return 0; }
    if (q->format == FB_FMT_NVFP4 && q->outer == FB_GRAN_TOKEN) { *why = "AdamW: NVFP4 weights take tensor or expert outer scales"; return 0; }
    if (q->format == FB_FMT_MXFP8) { *c = (choice){"adamw.cuh", {"threads", NULL}}; return 1; } /* a thread per block of 32 */
    *c = (choice){"adamw.cuh", {"threads", "vec", NULL}};
    return 1;
  case FB_OP_DENSE:
    *c = (choice){"dense.cuh", {"threads", NULL}};
    return 1;
  default:
    *why = "no template yet (router backward)";
    return 0;
  }
}

int fb_gen_fixed(const fb_kernel_spec *k) { return k->op == FB_OP_DENSE; }

const char *fb_gen_template(const fb_kernel_spec *k, const char **why) {
  choice c;
  return choose(k, &c, why) ? c.tmpl : NULL;
}

/* The GEMM template's operand kind: 0 BF16, 1 NVFP4 (BF16 weight copy), 2 MXFP8. */
static int gemm_kind(const fb_kernel_spec *k) {
  return k->src.format == FB_FMT_NVFP4 ? 1 : k->src.format == FB_FMT_MXFP8 ? 2 : 0;
}

/* Limits of gemm_sm90.cuh (shared memory, registers, TMA boxes, what is written); NULL when legal. */
static const char *gemm_illegal(const fb_kernel_spec *k, const fb_variant *v) {
  int tm = fb_variant_param(v, "tile_m", 0), tn = fb_variant_param(v, "tile_n", 0), tk = fb_variant_param(v, "tile_k", 0);
  int st = fb_variant_param(v, "stages", 0), cl = fb_variant_param(v, "cluster", 1), co = fb_variant_param(v, "consumers", 1);
  int wb = fb_variant_param(v, "weights_bf16", 1), pipe = fb_variant_param(v, "pipe", 0);
  int kind = gemm_kind(k);
  if (cl != 1) return "gemm: clusters (TMA multicast) are not written yet: cluster = 1 only";
  if (co != 1 && co != 2) return "gemm: 1 or 2 consumer warpgroups";
  if (tm % (64 * co) || tm > 256) return "gemm: tile_m must be 64 rows per consumer warpgroup, 1 or 2 times, and <= 256 (TMA box)";
  if (tn != 64 && tn != 128 && tn != 192 && tn != 256) return "gemm: tile_n must be 64, 128, 192 or 256 (the wgmma N written out)";
  if (kind == 0 && (tk % 64 || tk < 64)) return "gemm: BF16 tile_k must be a multiple of 64 (128-byte swizzle atoms)";
  if (kind != 0 && tk != 128) return "gemm: NVFP4 and MXFP8 tiles take tile_k = 128";
  if (kind == 1 && !wb) return "gemm: NVFP4 weights dequantized inside the GEMM are not written yet: weights_bf16 = true only";
  if (kind == 2 && !wb)
    return "gemm: MXFP8 on FP8 wgmma misses the 1e-5 tolerance (Hopper sums a k32 product with about 14 bits: 4.6e-5 "
           "measured on the H200): weights_bf16 = true (A decoded to exact BF16, B an exact BF16 copy) only";
  if (kind == 2) kind = 3;
  if (pipe != 0 && pipe != 1 && pipe != 2) return "gemm: pipe takes 0 (off), 1 (whole k-blocks) or 2 (half k-blocks)";
  if (pipe && kind == 0) return "gemm: pipe is for NVFP4 / MXFP8 (A decoded in registers); the BF16 GEMM has no decode to overlap";
  if (st < 2) return "gemm: at least 2 stages";
  int mw = tm / co / 64;
  /* consumer registers: accumulators (and MXFP8's temporaries), NVFP4's decoded A fragments and scales, the rest */
  int regs = kind == 2 ? mw * tn + 48 : mw * tn / 2 + (kind == 1 || kind == 3 ? mw * 48 + 8 : 0) + 40;
  /* pipe 1: a second slot of 8 decoded A fragments (32) and the decode's temporaries beside both (ptxas 13.0: 128 x 128
     with two consumers fits, 128 x 192 spills) */
  if (pipe == 1) regs += mw * 48;
  /* ptxas 13.0 beside the SwiGLU epilogues (MXFP8 only): pipe 2 spills at tile_n >= 192, pipe 1 serializes the wgmmas */
  if (pipe && kind == 3 && (tn >= 192 || pipe == 1) && (k->op == FB_OP_GEMM_FWD13 || k->op == FB_OP_GEMM_DGRAD2))
    return "gemm: a pipelined MXFP8 main loop beside a SwiGLU epilogue: pipe 2 at tile_n 128 only (ptxas 13.0 spills or serializes)";
  if (regs > (co == 2 ? 232 : 240)) return "gemm: the accumulators need more registers than a consumer warpgroup has";
  /* below the estimate, ptxas 13.0 still spills (test_gemm --compile-only over the generator's kept set, 2026-12-01):
     BF16 with two m64 sub-tiles a consumer at tile_n 192 (20-108 bytes), pipe 1 at tile_n 192 (8-52 bytes) */
  if (kind == 0 && mw == 2 && tn >= 192) return "gemm: BF16, two m64 sub-tiles a consumer at tile_n 192: ptxas 13.0 spills registers";
  if (pipe == 1 && tn >= 192) return "gemm: pipe 1 at tile_n 192: ptxas 13.0 spills registers";
  if (fb_gemm_smem_total(kind, tm, tn, tk, st) > 232448) return "gemm: the pipeline stages exceed 227 KiB of shared memory";
  return NULL;
}

/* Hardware and template limits of one variant; NULL when legal. */
static const char *variant_illegal(const fb_kernel_spec *k, const choice *c, const fb_variant *v) {
  if (!strcmp(c->tmpl, "gemm_sm90.cuh")) return gemm_illegal(k, v);
  int rows = fb_variant_param(v, "rows", 0), cols = fb_variant_param(v, "cols", 0), threads = fb_variant_param(v, "threads", 0);
  int stage = fb_variant_param(v, "stage", 0), slots = fb_variant_param(v, "slots", 0), half = fb_variant_param(v, "half", 0);
  if (!strcmp(c->tmpl, "mx_col.cuh") && slots) { /* the raw ring (mx_col.cuh FB_SLOTS): NVFP4 sources only */
    if (k->op != FB_OP_REQUANT || k->src.format != FB_FMT_NVFP4) return "mx_col: slots (the raw ring) apply to NVFP4 sources only";
    if (slots < 2) return "mx_col: the raw ring takes at least 2 slots";
    if (cols < 64) return "mx_col: the raw ring takes cols >= 64 (scale rows of at least 4 bytes for cp.async)";
    size_t slot = (size_t)rows * cols / 2 + (size_t)rows * (cols / 16) + (k->src.outer == FB_GRAN_TOKEN ? (size_t)rows * 4 : 0);
    size_t sh = (size_t)rows * (cols + 4) * 4 + (size_t)cols * 32 + (size_t)slots * slot + (k->src.outer == FB_GRAN_EXPERT ? 4096 : 0);
    if (sh > 48 * 1024) return "mx_col: the tile and the raw ring exceed 48 KiB of static shared memory";
    /* ptxas 13.0 (sm_90a, 5 CTAs of 128 threads: 96 registers) spilled 24 bytes at 64 x 128 */
    if (rows * cols >= 64 * 128 && threads == 128) return "mx_col: the raw ring of a 64 x 128 tile on 128 threads spills registers";
  }
  if (!strcmp(c->tmpl, "mx_col.cuh") && half) { /* the f16 tile (mx_col.cuh FB_HALF): NVFP4 sources only */
    if (k->op != FB_OP_REQUANT || k->src.format != FB_FMT_NVFP4) return "mx_col: half (the f16 tile) applies to NVFP4 sources only";
    if (half != 1) return "mx_col: half is 0 (the FP32 tile) or 1 (the f16 tile)";
    if (slots) return "mx_col: half (the f16 tile) does not take the raw ring (slots)";
    if (cols % 64) return "mx_col: half (the f16 tile) takes cols that are a multiple of 64 (a warp's 32 column pairs in a row)";
    if (rows / 32 * (cols / 2) % threads) return "mx_col: half (the f16 tile): the threads must divide the tile's column pairs";
    if (rows / 32 * (cols / 2) < threads) return "mx_col: half (the f16 tile): fewer column pairs than threads leaves threads idle";
    /* ptxas 13.0 (sm_90a, 5 CTAs of 128 threads: 96 registers) spilled 164 bytes at 128 x 128 on 128 threads */
    if (rows * cols > 64 * threads) return "mx_col: half (the f16 tile): more than 64 elements a thread spills registers";
  }
  if (!strcmp(c->tmpl, "mx_col.cuh")) {
    if (rows % 32) return "mx_col: rows must be a multiple of 32 (one MX block down a column)";
    if (cols % 32) return "mx_col: cols must be a multiple of 32 (a 32-column span per load)";
    if ((half ? (size_t)rows * (cols / 2 + 4) * 4 : (size_t)rows * (cols + 1) * 4) + (size_t)cols * 32 > 48 * 1024)
      return "mx_col: the tile exceeds 48 KiB of static shared memory";
    if (rows * cols / 32 < threads || rows / 32 * cols < threads) return "mx_col: fewer tile items than threads leaves threads idle";
  }
  if (!strcmp(c->tmpl, "quant_nvfp4.cuh") && rows * 32 < threads) return "quant_nvfp4: fewer rows than warps leaves warps idle";
  if (!strcmp(c->tmpl, "quant_nvfp4.cuh") && stage) { /* rows kept in shared memory: the per-token 4/6 BF16 RN path only */
    const fb_qspec *q = &k->q;
    if (!q->four_over_six || q->outer != FB_GRAN_TOKEN || k->in_f32 || q->rounding == FB_ROUND_SR || q->two_d)
      return "quant_nvfp4: stage applies to the per-token Four Over Six path (BF16 in, RN) only";
    if (stage * 1024 * (threads / 32) > 48 * 1024) return "quant_nvfp4: the staged rows exceed 48 KiB of static shared memory";
  }
  if (!strcmp(c->tmpl, "swiglu.cuh") && rows * (cols / 8) < threads) return "swiglu: fewer 8-column vectors in the tile than threads";
  return NULL;
}

/* Tune parameters whose 0 means "off" (quant stage, requant slots and half, gemm pipe): a family may leave them out (then 0), and
 * at 0 they add no name tag, no #define and no header entry, so the kernels of families made before them keep their
 * names and source text. */
static int zero_is_off(const char *param) {
  return !strcmp(param, "stage") || !strcmp(param, "slots") || !strcmp(param, "pipe") || !strcmp(param, "half");
}

fb_status fb_gen_variants(const fb_kernel_spec *k, const fb_tune_family *fam, fb_variant **out, int *n, int *pruned,
                          char *why, size_t whylen) {
  *out = NULL, *n = 0;
  if (pruned) *pruned = 0;
  if (why && whylen) why[0] = 0;
  choice c;
  const char *none;
  if (!choose(k, &c, &none)) return FB_ERR(FB_EVARIANT, "%s: %s", k->name, none);
  fb_tune_family fixed;
  if (!fam && fb_gen_fixed(k)) { /* one variant, no tune family: dense.cuh's pieces take FB_DENSE_THREADS */
    memset(&fixed, 0, sizeof fixed);
    snprintf(fixed.family, sizeof fixed.family, "%s", k->family);
    static const int one[1] = {FB_DENSE_THREADS};
    fixed.nparams = 1, fixed.nvariants = 1, fixed.values = (int *)one;
    snprintf(fixed.param[0], sizeof fixed.param[0], "threads");
    fam = &fixed;
  }
  if (!fam) return FB_ERR(FB_EINVAL, "%s: no tune family", k->name);
  int np = 0, idx[FB_TUNE_MAXPARAMS];
  for (; np < FB_TUNE_MAXPARAMS && c.params[np]; ++np) {
    idx[np] = -1;
    for (int j = 0; j < fam->nparams; ++j)
      if (!strcmp(fam->param[j], c.params[np])) idx[np] = j;
    if (idx[np] < 0 && !zero_is_off(c.params[np]))
      return FB_ERR(FB_EINVAL, "%s: tune family %s has no parameter %s", k->name, fam->family, c.params[np]);
  }
  fb_variant *vs = calloc((size_t)fam->nvariants, sizeof *vs);
  if (!vs) return FB_ERR(FB_ENOMEM, "variants");
  int m = 0;
  for (int i = 0; i < fam->nvariants; ++i) {
    fb_variant v;
    memset(&v, 0, sizeof v);
    v.nparams = np;
    snprintf(v.tmpl, sizeof v.tmpl, "%s", c.tmpl);
    for (int j = 0; j < np; ++j) {
      snprintf(v.param[j], sizeof v.param[j], "%s", c.params[j]);
      v.value[j] = idx[j] < 0 ? 0 : fam->values[(size_t)i * fam->nparams + idx[j]];
    }
    int dup = 0;
    for (int j = 0; j < m && !dup; ++j) dup = !memcmp(vs[j].value, v.value, sizeof v.value);
    if (dup) continue;
    const char *bad = variant_illegal(k, &c, &v);
    if (bad) {
      if (pruned) ++*pruned;
      if (why && whylen && !why[0]) snprintf(why, whylen, "%s", bad);
      continue;
    }
    /* variant tag: parameter initials and values in template order, e.g. _r32_c64_t256; the GEMM's as
       _m128n256k128_s4_c1_w2 (tile, stages, cluster, consumer warpgroups) and _b1 for a BF16 weight copy */
    int len = snprintf(v.name, sizeof v.name, "%s", k->name);
    if (!strcmp(c.tmpl, "gemm_sm90.cuh")) {
      len += snprintf(v.name + len, sizeof v.name - (size_t)len, "_m%dn%dk%d_s%d_c%d_w%d", fb_variant_param(&v, "tile_m", 0),
                      fb_variant_param(&v, "tile_n", 0), fb_variant_param(&v, "tile_k", 0), fb_variant_param(&v, "stages", 0),
                      fb_variant_param(&v, "cluster", 0), fb_variant_param(&v, "consumers", 0));
      if (fb_variant_has(&v, "weights_bf16"))
        len += snprintf(v.name + len, sizeof v.name - (size_t)len, "_b%d", fb_variant_param(&v, "weights_bf16", 0));
      if (fb_variant_param(&v, "pipe", 0)) snprintf(v.name + len, sizeof v.name - (size_t)len, "_p%d", fb_variant_param(&v, "pipe", 0));
    } else
      for (int j = 0; j < np && len < (int)sizeof v.name; ++j)
        if (v.value[j] || !zero_is_off(v.param[j]))
          len += snprintf(v.name + len, sizeof v.name - (size_t)len, "_%c%d", v.param[j][0], v.value[j]);
    vs[m++] = v;
  }
  *out = vs, *n = m;
  return FB_OK;
}

/* The spec's own #defines (name, value), appended to d. */
static void spec_defines(const fb_kernel_spec *k, const char *tmpl, fb_str *d) {
  const fb_qspec *q = &k->q;
  int sr = q->rounding == FB_ROUND_SR;
  if (!strcmp(tmpl, "amax.cuh")) {
    fb_str_printf(d, "FB_IN_F32 %d\nFB_MODE %d\n", k->in_f32, q->outer == FB_GRAN_TOKEN ? 1 : q->outer == FB_GRAN_EXPERT ? 2 : 0);
  } else if (!strcmp(tmpl, "quant_nvfp4.cuh")) {
    fb_str_printf(d, "FB_FOUR_OVER_SIX %d\nFB_IN_F32 %d\nFB_OUTER %d\nFB_SR %d\nFB_TWO_D %d\n", q->four_over_six, k->in_f32,
                  q->outer == FB_GRAN_TOKEN ? 1 : q->outer == FB_GRAN_EXPERT ? 2 : 0, sr, q->two_d);
  } else if (!strcmp(tmpl, "quant_mxfp8.cuh")) {
    fb_str_printf(d, "FB_IN_F32 %d\nFB_SR %d\n", k->in_f32, sr);
  } else if (!strcmp(tmpl, "mx_col.cuh")) {
    int src = k->op == FB_OP_QUANT || k->src.format == FB_FMT_BF16 ? 0 : k->src.format == FB_FMT_NVFP4 ? 1 : 2;
    int so = k->src.outer == FB_GRAN_TOKEN ? 1 : k->src.outer == FB_GRAN_EXPERT ? 2 : 0;
    fb_str_printf(d, "FB_IN_F32 %d\nFB_SR %d\nFB_SRC %d\nFB_SRC_OUTER %d\n", k->in_f32, sr, src, src == 1 ? so : 0);
  } else if (!strcmp(tmpl, "s2f6.cuh")) {
    fb_str_printf(d, "FB_DIR %d\nFB_IN_F32 %d\nFB_RHT %d\n", k->op == FB_OP_S2F6_DQ, k->in_f32, q->rht ? 1 : 0);
  } else if (!strcmp(tmpl, "permute.cuh")) {
    fb_str_printf(d, "FB_OUTER_TOK %d\nFB_PAYLOAD %d\n", q->format == FB_FMT_NVFP4 && q->outer == FB_GRAN_TOKEN,
                  q->format == FB_FMT_NVFP4 ? 1 : q->format == FB_FMT_MXFP8 ? 2 : 0);
  } else if (!strcmp(tmpl, "unpermute.cuh")) {
    int s2f6 = q->format == FB_FMT_S2F6;
    fb_str_printf(d, "FB_OUT_BF16 %d\nFB_RHT %d\nFB_S2F6 %d\n", k->out_bf16 ? 1 : 0, s2f6 && q->rht ? 1 : 0, s2f6);
  } else if (!strcmp(tmpl, "combine_bwd.cuh")) {
    int s2f6 = q->format == FB_FMT_S2F6;
    fb_str_printf(d, "FB_RHT %d\nFB_S2F6 %d\n", s2f6 && q->rht ? 1 : 0, s2f6);
  } else if (!strcmp(tmpl, "swiglu.cuh")) {
    fb_str_printf(d, "FB_BWD %d\n", k->op == FB_OP_SWIGLU_BWD);
  } else if (!strcmp(tmpl, "tcopy.cuh")) { /* scale: act.rht (the divisor; 0 none) */
    int src = k->in_f32 ? 1 : k->src.format == FB_FMT_NVFP4 ? 2 : 0;
    fb_str_printf(d, "FB_OUT_BF16 %d\nFB_RHT %d\nFB_SCALE %d\nFB_SRC %d\nFB_SRC_OUTER %d\nFB_TRANS %d\n", k->out_bf16 ? 1 : 0, q->rht,
                  k->act.rht, src, src == 2 && k->src.outer == FB_GRAN_TOKEN, k->col ? 1 : 0);
  } else if (!strcmp(tmpl, "gemm_bcopy.cuh")) {
    fb_str_printf(d, "FB_SRC %d\n", q->format == FB_FMT_NVFP4 ? 1 : 2);
  } else if (!strcmp(tmpl, "gemm_sm90.cuh")) {
    int kind = gemm_kind(k), wgrad = k->op == FB_OP_GEMM_WGRAD;
    int ao = kind == 1 ? (k->act.outer == FB_GRAN_TENSOR ? 2 : 1) : 0, bo = kind == 1 ? (k->src.outer == FB_GRAN_TENSOR ? 2 : 1) : 0;
    fb_str_printf(d, "FB_A_OUTER %d\nFB_B_OUTER %d\nFB_KIND %d\nFB_MODE %d\nFB_OUT_BF16 %d\nFB_SWIGLU %d\n", ao, bo, kind, wgrad,
                  k->out_bf16 ? 1 : 0, k->op == FB_OP_GEMM_FWD13 ? 1 : k->op == FB_OP_GEMM_DGRAD2 ? 2 : 0);
    int s2f6 = k->op == FB_OP_GEMM_FWD2 && q->format == FB_FMT_S2F6;
    fb_str_printf(d, "FB_RHT %d\nFB_S2F6 %d\n", s2f6 && q->rht ? 1 : 0, s2f6);
  } else if (!strcmp(tmpl, "adamw.cuh")) {
    fb_str_printf(d, "FB_AMAX %d\nFB_SR %d\nFB_WFMT %d\n", q->outer == FB_GRAN_EXPERT, q->format == FB_FMT_MXFP8 && sr,
                  q->format == FB_FMT_NVFP4 ? 1 : q->format == FB_FMT_MXFP8 ? 2 : 0);
  }
}

static int cmp_lines(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

fb_status fb_gen_source(const fb_kernel_spec *k, const fb_variant *v, const char *origin, const char *plan_sha,
                        char **src) {
  *src = NULL;
  const fb_embedded_file *t = embedded(v->tmpl);
  if (!t) return FB_ERR(FB_ENOTFOUND, "%s: template %s is not embedded", v->name, v->tmpl);
  /* all #defines, sorted, so the text depends on nothing but their values */
  fb_str d = {0};
  spec_defines(k, v->tmpl, &d);
  for (int i = 0; i < v->nparams; ++i) {
    char up[16];
    size_t j = 0;
    for (; v->param[i][j] && j + 1 < sizeof up; ++j) up[j] = (char)(v->param[i][j] >= 'a' && v->param[i][j] <= 'z' ? v->param[i][j] - 32 : v->param[i][j]);
    up[j] = 0;
    if (!strcmp(up, "ROWS") && !strcmp(v->tmpl, "mx_col.cuh")) fb_str_printf(&d, "FB_RB %d\n", v->value[i] / 32);
    else if (!v->value[i] && zero_is_off(v->param[i])) continue; /* the template's default */
    else fb_str_printf(&d, "FB_%s %d\n", up, v->value[i]);
  }
  if (d.oom) { free(d.buf); return FB_ERR(FB_ENOMEM, "gen"); }
  char *lines[64];
  int nl = 0;
  for (char *s = d.buf, *e; s && *s && nl < 64; s = e + 1) {
    e = strchr(s, '\n');
    *e = 0;
    lines[nl++] = s;
  }
  qsort(lines, (size_t)nl, sizeof lines[0], cmp_lines);
  fb_str o = {0};
  if (fb_gen_fixed(k)) origin = plan_sha = NULL; /* one source whatever the recipe: one cache entry (train_gpu.c, tune) */
  fb_str_printf(&o, "/* generated by fourbit gen from %s (plan sha256 %s) — do not edit\n", origin ? origin : "-", plan_sha ? plan_sha : "-");
  fb_str_printf(&o, "** template: templates/%s  kernel: %s\n** params:", v->tmpl, v->name);
  for (int i = 0; i < v->nparams; ++i)
    if (v->value[i] || !zero_is_off(v->param[i])) fb_str_printf(&o, " %s=%d", v->param[i], v->value[i]);
  fb_str_printf(&o, " */\n#define FB_KERNEL %s\n", v->name);
  for (int i = 0; i < nl; ++i) fb_str_printf(&o, "#define %s\n", lines[i]);
  fb_str_printf(&o, "\n");
  fb_str_printf(&o, "%.*s", (int)t->len, t->text);
  free(d.buf);
  if (o.oom) { free(o.buf); return FB_ERR(FB_ENOMEM, "gen"); }
  *src = o.buf;
  return FB_OK;
}
