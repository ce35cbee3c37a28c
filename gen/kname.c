/* kname.c — the one naming authority for kernels: a kernel spec's canonical name from its fields, and the parser
 * that reads a name (or a variant's name) back into those fields.
 *
 * Entry points: fb_kernel_name(), fb_kernel_spec_name(), fb_kernel_parse(), fb_arch_tag().
 *
 * A name is <body>_<archtag>, the body in the fixed order <op>_<formats>_<out>[_<epilogue>] (docs/style.md);
 * a variant appends its tile tag (gen.c). The body carries every field of the spec that the generated source
 * depends on, so that two specs of one name generate the same source (tests/test_kname.c checks this for every
 * kernel of every shipped recipe), and nothing else: top_k and experts (launch parameters) only where the op's
 * name has always carried them (the router). The parts:
 *   a quantized operand  nvfp4[_4o6][_2d]_{ten|tok|exp}[_sr][_rhtN] | mxfp8[_e5m2][_sr][_rhtN] | s2f6[_rhtN] | bf16
 *   a stored source      nvfp4[_2d]_{ten|tok|exp} | mxfp8 | bf16             (what a dequantizer must know)
 *   a GEMM operand       bf16 | mxfp8 | nvfp4 | nvfp4_ten                    (_ten: one outer scale per tensor)
 * and per op:
 *   router_top{K}_e{E}  router_bwd_top{K}_e{E}  amax_{ten|tok|exp}_{bf16|f32}  quant_<q>[_f32]_{row|col}
 *   requant_<src>[_f32]_<q>_t  permute_<src>  unpermute_{bf16|s2f6[_rht32]}[_obf16]  combine_bwd_{bf16|s2f6[_rht32]}
 *   swiglu_{fwd|bwd}_bf16  bcopy_{nvfp4|mxfp8}  tcopy_{f32|<src>}_{bf16|f32}[_t][_rht16][_sc{N}]
 *   gemm_{fwd|dgrad|wgrad}_<A>x<B>_{bf16|f32|<q>}[_swiglu|_swiglubwd]  adamw_f32_<q>  s2f6_{quant|dequant}[_rht32][_f32]
 *   dense */
#include "fb_error.h"
#include "fourbit.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *fmt4(fb_format f) {
  static const char *n[4] = {"bf16", "nvfp4", "mxfp8", "s2f6"};
  return (unsigned)f < 4 ? n[f] : "?";
}

static const char *gran3(fb_gran g) { return g == FB_GRAN_TOKEN ? "tok" : g == FB_GRAN_EXPERT ? "exp" : "ten"; }

typedef struct {
  char *b;
  size_t n, len;
  int over;
} sbuf;

static void put(sbuf *s, const char *fmt, ...) FB_PRINTF(2, 3);
static void put(sbuf *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(s->b + s->len, s->len < s->n ? s->n - s->len : 0, fmt, ap);
  va_end(ap);
  if (w < 0 || s->len + (size_t)w >= s->n) s->over = 1;
  else s->len += (size_t)w;
}

/* a quantized operand (q->rht included; a BF16 one has none) */
static void qpart(sbuf *s, const fb_qspec *q) {
  switch (q->format) {
  case FB_FMT_NVFP4:
    put(s, "nvfp4%s%s_%s%s", q->four_over_six ? "_4o6" : "", q->two_d ? "_2d" : "", gran3(q->outer),
        q->rounding == FB_ROUND_SR ? "_sr" : "");
    break;
  case FB_FMT_MXFP8: put(s, "mxfp8%s%s", q->e5m2 ? "_e5m2" : "", q->rounding == FB_ROUND_SR ? "_sr" : ""); break;
  case FB_FMT_S2F6: put(s, "s2f6"); break;
  default: put(s, "bf16"); return;
  }
  if (q->rht) put(s, "_rht%d", q->rht);
}

/* a stored source: its format and, for NVFP4, its block shape and outer granularity */
static void srcpart(sbuf *s, const fb_qspec *q) {
  if (q->format == FB_FMT_NVFP4) put(s, "nvfp4%s_%s", q->two_d ? "_2d" : "", gran3(q->outer));
  else put(s, "%s", fmt4(q->format));
}

/* a GEMM operand: the format; NVFP4 with one outer scale per tensor reads S_dec[0] (FB_A_OUTER / FB_B_OUTER 2) */
static void gpart(sbuf *s, fb_format f, fb_gran outer) {
  put(s, "%s%s", fmt4(f), f == FB_FMT_NVFP4 && outer == FB_GRAN_TENSOR ? "_ten" : "");
}

int fb_arch_known(const char *arch) {
  static const char *const known[] = {"sm_89", "sm_90a", "sm_100a", "sm_103a", "sm_120a"};
  for (size_t i = 0; arch && i < sizeof known / sizeof known[0]; ++i)
    if (!strcmp(arch, known[i])) return 1;
  return 0;
}

const char *fb_arch_of_cc(int major, int minor) {
  if (major == 8 && minor == 9) return "sm_89";
  if (major == 9 && minor == 0) return "sm_90a";
  if (major == 10 && minor == 0) return "sm_100a";
  if (major == 10 && minor == 3) return "sm_103a";
  if (major == 12 && minor == 0) return "sm_120a";
  return NULL;
}

const char *fb_arch_families(const char *arch) {
  if (!fb_arch_known(arch)) return "";
  return !strcmp(arch, "sm_90a") ? "wgmma, mma" : !strcmp(arch, "sm_100a") || !strcmp(arch, "sm_103a") ? "tcgen05, mma" : "mma";
}

fb_status fb_arch_tag(const char *arch, char *buf, size_t n) {
  /* sm_90a -> sm90a */
  if (!arch || strncmp(arch, "sm_", 3) || !arch[3]) return FB_ERR(FB_EINVAL, "arch '%s': not of the form sm_NN[a]", arch ? arch : "");
  int w = snprintf(buf, n, "sm%s", arch + 3);
  if (w < 0 || (size_t)w >= n) return FB_ERR(FB_EINVAL, "arch '%s': too long", arch);
  return FB_OK;
}

fb_status fb_kernel_name(const fb_kernel_spec *k, const char *arch, char *buf, size_t n) {
  sbuf s = {buf, n, 0, 0};
  if (n) buf[0] = 0;
  const fb_qspec *q = &k->q;
  switch (k->op) {
  case FB_OP_ROUTER: put(&s, "router_top%d_e%d", k->top_k, k->experts); break;
  case FB_OP_ROUTER_BWD: put(&s, "router_bwd_top%d_e%d", k->top_k, k->experts); break;
  case FB_OP_AMAX: put(&s, "amax_%s_%s", gran3(q->outer), k->in_f32 ? "f32" : "bf16"); break;
  case FB_OP_QUANT:
    put(&s, "quant_");
    qpart(&s, q);
    put(&s, "%s_%s", k->in_f32 ? "_f32" : "", k->col == 2 ? "both" : k->col ? "col" : "row");
    break;
  case FB_OP_REQUANT:
    if (!k->col) return FB_ERR(FB_EINVAL, "kernel name: a requantization is transposed (col 1)");
    put(&s, "requant_");
    srcpart(&s, &k->src);
    put(&s, "%s_", k->in_f32 ? "_f32" : "");
    qpart(&s, q);
    put(&s, "_t%s", k->out_bf16 ? "_kbf16" : "");
    break;
  case FB_OP_PERMUTE:
    put(&s, "permute_");
    srcpart(&s, q);
    break;
  case FB_OP_UNPERMUTE:
  case FB_OP_COMBINE_BWD:
    if (q->format != FB_FMT_BF16 && q->format != FB_FMT_S2F6)
      return FB_ERR(FB_EINVAL, "kernel name: the combine's payload is BF16 or S2F6, not %s", fmt4(q->format));
    put(&s, "%s_", k->op == FB_OP_UNPERMUTE ? "unpermute" : "combine_bwd");
    qpart(&s, q);
    if (k->op == FB_OP_UNPERMUTE && k->out_bf16) put(&s, "_obf16");
    break;
  case FB_OP_SWIGLU_FWD: put(&s, "swiglu_fwd_bf16"); break;
  case FB_OP_SWIGLU_BWD: put(&s, "swiglu_bwd_bf16"); break;
  case FB_OP_BCOPY: put(&s, "bcopy_%s", fmt4(q->format)); break;
  case FB_OP_TCOPY:
    put(&s, "tcopy_");
    if (k->in_f32) put(&s, "f32");
    else {
      fb_qspec t = k->src;
      if (t.format == FB_FMT_NVFP4 && t.outer != FB_GRAN_TOKEN) t.outer = FB_GRAN_TENSOR; /* what tcopy.cuh reads */
      srcpart(&s, &t);
    }
    put(&s, "_%s%s", k->out_bf16 ? "bf16" : "f32", k->col ? "_t" : "");
    if (q->rht) put(&s, "_rht%d", q->rht);
    if (k->act.rht) put(&s, "_sc%d", k->act.rht);
    break;
  case FB_OP_GEMM_FWD13: case FB_OP_GEMM_FWD2: case FB_OP_GEMM_DGRAD2: case FB_OP_GEMM_WGRAD: case FB_OP_GEMM_DGRAD13: {
    const char *o = k->op == FB_OP_GEMM_WGRAD ? "wgrad" : k->op == FB_OP_GEMM_FWD13 || k->op == FB_OP_GEMM_FWD2 ? "fwd" : "dgrad";
    put(&s, "gemm_%s_", o);
    gpart(&s, k->src.format, k->act.outer);
    put(&s, "x");
    gpart(&s, k->src.format, k->src.outer);
    put(&s, "_");
    if (k->op == FB_OP_GEMM_FWD2 && q->format == FB_FMT_S2F6) qpart(&s, q);
    else put(&s, "%s", k->out_bf16 ? "bf16" : "f32");
    if (k->op == FB_OP_GEMM_FWD13) put(&s, "_swiglu");
    if (k->op == FB_OP_GEMM_DGRAD2) put(&s, "_swiglubwd");
    break;
  }
  case FB_OP_ADAMW:
    put(&s, "adamw_f32_");
    qpart(&s, q);
    break;
  case FB_OP_S2F6_Q:
  case FB_OP_S2F6_DQ:
    put(&s, "s2f6_%s%s%s", k->op == FB_OP_S2F6_Q ? "quant" : "dequant", q->rht ? "_rht32" : "", k->in_f32 ? "_f32" : "");
    break;
  case FB_OP_DENSE: put(&s, "dense"); break;
  default: return FB_ERR(FB_EINVAL, "kernel name: unknown op %d", (int)k->op);
  }
  char at[16];
  FB_TRY(fb_arch_tag(arch, at, sizeof at));
  put(&s, "_%s", at);
  if (s.over) return FB_ERR(FB_EINVAL, "kernel name: longer than %zu characters", n ? n - 1 : 0);
  return FB_OK;
}

fb_status fb_kernel_spec_name(fb_kernel_spec *k, const char *arch) { return fb_kernel_name(k, arch, k->name, sizeof k->name); }

/* ---- the parser ------------------------------------------------------------------------------------------------ */
/* A cursor over the body. Every part is read greedily from the grammar above; the spec read is then named again and
 * must give the body back character for character, so the parser accepts exactly the names fb_kernel_name makes. */
typedef struct {
  const char *p;
} cur;

static int eat(cur *c, const char *t) {
  size_t n = strlen(t);
  if (strncmp(c->p, t, n)) return 0;
  c->p += n;
  return 1;
}

static int num(cur *c, int *out) {
  char *e;
  long v = strtol(c->p, &e, 10);
  if (e == c->p || v < 0 || v > 1 << 20) return 0;
  *out = (int)v, c->p = e;
  return 1;
}

static int gran(cur *c, fb_gran *g) {
  if (eat(c, "ten")) *g = FB_GRAN_TENSOR;
  else if (eat(c, "tok")) *g = FB_GRAN_TOKEN;
  else if (eat(c, "exp")) *g = FB_GRAN_EXPERT;
  else return 0;
  return 1;
}

static int rht(cur *c, int *r) {
  cur s = *c;
  if (eat(&s, "_rht") && num(&s, r)) { *c = s; return 1; }
  return 0;
}

static int qread(cur *c, fb_qspec *q) {
  memset(q, 0, sizeof *q);
  if (eat(c, "nvfp4")) {
    q->format = FB_FMT_NVFP4;
    q->four_over_six = eat(c, "_4o6");
    q->two_d = eat(c, "_2d");
    if (!eat(c, "_") || !gran(c, &q->outer)) return 0;
    q->rounding = eat(c, "_sr") ? FB_ROUND_SR : FB_ROUND_RN;
    rht(c, &q->rht);
  } else if (eat(c, "mxfp8")) {
    q->format = FB_FMT_MXFP8;
    q->e5m2 = eat(c, "_e5m2");
    q->rounding = eat(c, "_sr") ? FB_ROUND_SR : FB_ROUND_RN;
    rht(c, &q->rht);
  } else if (eat(c, "s2f6")) {
    q->format = FB_FMT_S2F6;
    rht(c, &q->rht);
  } else if (eat(c, "bf16")) {
    q->format = FB_FMT_BF16;
  } else return 0;
  return 1;
}

static int srcread(cur *c, fb_qspec *q) {
  memset(q, 0, sizeof *q);
  if (eat(c, "nvfp4")) {
    q->format = FB_FMT_NVFP4;
    q->two_d = eat(c, "_2d");
    return eat(c, "_") && gran(c, &q->outer);
  }
  if (eat(c, "mxfp8")) q->format = FB_FMT_MXFP8;
  else if (eat(c, "bf16")) q->format = FB_FMT_BF16;
  else if (eat(c, "s2f6")) q->format = FB_FMT_S2F6;
  else return 0;
  return 1;
}

static int gread(cur *c, fb_format *f, fb_gran *outer) {
  *outer = FB_GRAN_TOKEN;
  if (eat(c, "nvfp4")) {
    *f = FB_FMT_NVFP4;
    cur s = *c;
    if (eat(&s, "_ten") && (*s.p == 'x' || *s.p == '_')) *c = s, *outer = FB_GRAN_TENSOR;
  } else if (eat(c, "mxfp8")) *f = FB_FMT_MXFP8, *outer = FB_GRAN_TENSOR;
  else if (eat(c, "bf16")) *f = FB_FMT_BF16, *outer = FB_GRAN_TENSOR;
  else return 0;
  return 1;
}

static int body(cur *c, fb_kernel_spec *k) {
  fb_qspec *q = &k->q;
  if (eat(c, "router_bwd_top")) return (k->op = FB_OP_ROUTER_BWD, num(c, &k->top_k) && eat(c, "_e") && num(c, &k->experts));
  if (eat(c, "router_top")) return (k->op = FB_OP_ROUTER, num(c, &k->top_k) && eat(c, "_e") && num(c, &k->experts));
  if (eat(c, "amax_")) {
    k->op = FB_OP_AMAX;
    if (!gran(c, &q->outer)) return 0;
    if (eat(c, "_f32")) k->in_f32 = 1;
    else if (!eat(c, "_bf16")) return 0;
    return 1;
  }
  if (eat(c, "quant_")) {
    k->op = FB_OP_QUANT;
    if (!qread(c, q)) return 0;
    k->in_f32 = eat(c, "_f32");
    if (eat(c, "_col")) k->col = 1;
    else if (eat(c, "_both")) k->col = 2;
    else if (!eat(c, "_row")) return 0;
    return 1;
  }
  if (eat(c, "requant_")) {
    k->op = FB_OP_REQUANT, k->col = 1;
    if (!srcread(c, &k->src)) return 0;
    k->in_f32 = eat(c, "_f32");
    if (!(eat(c, "_") && qread(c, q) && eat(c, "_t"))) return 0;
    k->out_bf16 = eat(c, "_kbf16");
    return 1;
  }
  if (eat(c, "permute_")) return (k->op = FB_OP_PERMUTE, srcread(c, q));
  if (eat(c, "unpermute_")) {
    k->op = FB_OP_UNPERMUTE;
    if (!qread(c, q)) return 0;
    k->out_bf16 = eat(c, "_obf16");
    return 1;
  }
  if (eat(c, "combine_bwd_")) return (k->op = FB_OP_COMBINE_BWD, qread(c, q));
  if (eat(c, "swiglu_fwd_bf16")) return (k->op = FB_OP_SWIGLU_FWD, 1);
  if (eat(c, "swiglu_bwd_bf16")) return (k->op = FB_OP_SWIGLU_BWD, 1);
  if (eat(c, "bcopy_")) {
    k->op = FB_OP_BCOPY;
    if (eat(c, "nvfp4")) q->format = FB_FMT_NVFP4;
    else if (eat(c, "mxfp8")) q->format = FB_FMT_MXFP8;
    else if (eat(c, "bf16")) q->format = FB_FMT_BF16;
    else if (eat(c, "s2f6")) q->format = FB_FMT_S2F6;
    else return 0;
    return 1;
  }
  if (eat(c, "tcopy_")) {
    k->op = FB_OP_TCOPY;
    if (eat(c, "f32")) k->in_f32 = 1;
    else if (!srcread(c, &k->src)) return 0;
    if (eat(c, "_bf16")) k->out_bf16 = 1;
    else if (!eat(c, "_f32")) return 0;
    cur s = *c;
    if (eat(&s, "_t") && (*s.p == '_' || !*s.p)) *c = s, k->col = 1;
    rht(c, &q->rht);
    s = *c;
    if (eat(&s, "_sc") && num(&s, &k->act.rht)) *c = s;
    return 1;
  }
  if (eat(c, "gemm_")) {
    int fwd = 0, wgrad = 0;
    if (eat(c, "fwd_")) fwd = 1;
    else if (eat(c, "wgrad_")) wgrad = 1;
    else if (!eat(c, "dgrad_")) return 0;
    fb_format fa, fb;
    if (!gread(c, &fa, &k->act.outer) || !eat(c, "x") || !gread(c, &fb, &k->src.outer) || fa != fb || !eat(c, "_")) return 0;
    k->src.format = k->act.format = fb;
    if (eat(c, "bf16")) k->out_bf16 = 1, q->format = FB_FMT_BF16;
    else if (eat(c, "f32")) q->format = FB_FMT_BF16;
    else if (!(fwd && qread(c, q) && q->format == FB_FMT_S2F6)) return 0;
    else k->out_bf16 = 1; /* the S2F6 epilogue takes the BF16 output's place (the plan's fwd GEMMs write BF16) */
    if (eat(c, "_swiglubwd")) k->op = FB_OP_GEMM_DGRAD2;
    else if (eat(c, "_swiglu")) k->op = FB_OP_GEMM_FWD13;
    else k->op = fwd ? FB_OP_GEMM_FWD2 : wgrad ? FB_OP_GEMM_WGRAD : FB_OP_GEMM_DGRAD13;
    if ((k->op == FB_OP_GEMM_FWD13 && !fwd) || (k->op == FB_OP_GEMM_DGRAD2 && (fwd || wgrad))) return 0;
    return 1;
  }
  if (eat(c, "adamw_f32_")) return (k->op = FB_OP_ADAMW, qread(c, q));
  if (eat(c, "s2f6_")) {
    if (eat(c, "quant")) k->op = FB_OP_S2F6_Q;
    else if (eat(c, "dequant")) k->op = FB_OP_S2F6_DQ;
    else return 0;
    q->format = FB_FMT_S2F6;
    rht(c, &q->rht);
    k->in_f32 = eat(c, "_f32");
    return 1;
  }
  if (eat(c, "dense")) return (k->op = FB_OP_DENSE, 1);
  return 0;
}

fb_status fb_kernel_parse(const char *name, fb_kernel_spec *k, char *arch, size_t archlen, size_t *tail) {
  memset(k, 0, sizeof *k);
  /* the arch tag: the first _sm<digits>[letter] followed by '_' or the end */
  const char *a = NULL;
  for (const char *p = strstr(name, "_sm"); p; p = strstr(p + 1, "_sm")) {
    const char *e = p + 3;
    if (*e < '0' || *e > '9') continue;
    while (*e >= '0' && *e <= '9') ++e;
    if (*e >= 'a' && *e <= 'z') ++e;
    if (*e == '_' || !*e) { a = p; break; }
  }
  if (!a) return FB_ERR(FB_EINVAL, "kernel name '%s': no arch tag (_sm90a, ...)", name);
  size_t blen = (size_t)(a - name);
  char b[192];
  if (blen >= sizeof b) return FB_ERR(FB_EINVAL, "kernel name '%.64s...': too long", name);
  memcpy(b, name, blen), b[blen] = 0;
  const char *ae = a + 3;
  while (*ae && *ae != '_') ++ae;
  char at[16];
  size_t al = (size_t)(ae - (a + 1));
  if (al >= sizeof at) return FB_ERR(FB_EINVAL, "kernel name '%s': arch tag too long", name);
  memcpy(at, a + 1, al), at[al] = 0;
  int w = snprintf(arch, archlen, "sm_%s", at + 2);
  if (w < 0 || (size_t)w >= archlen) return FB_ERR(FB_EINVAL, "kernel name '%s': arch buffer too small", name);
  cur c = {b};
  if (!body(&c, k) || *c.p) return FB_ERR(FB_EINVAL, "kernel name '%s': not a kernel name (unread from '%s')", name, c.p);
  FB_TRY(fb_kernel_spec_name(k, arch));
  if (strlen(k->name) != blen + 1 + al || strncmp(k->name, name, blen + 1 + al))
    return FB_ERR(FB_EINVAL, "kernel name '%s': not canonical (its fields are named '%s')", name, k->name);
  if (tail) *tail = blen + 1 + al;
  return FB_OK;
}
