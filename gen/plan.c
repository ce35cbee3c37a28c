/* plan.c — a loaded recipe resolved into a plan: every layer's precision, the unique kernel specs the
 * layers need (canonical names, de-duplicated across layers), memory per expert-parallel rank, and the
 * bits a token moves in dispatch and combine.
 *
 * Entry points: fb_plan_resolve(), fb_plan_free(), fb_plan_json(), fb_plan_text(), fb_plan_wire_bits().
 *
 * Kernel names (docs/style.md "Kernel names": <op>_<formats>_<out>[_<epilogue>]_<arch>; the generator appends the tile):
 * a quantized operand is named by its tag — nvfp4[_4o6][_2d]_{ten|tok|exp}[_sr][_rhtN], mxfp8[_e5m2][_sr]
 * [_rhtN], s2f6[_rht32], bf16 — and quantizers say along which axis they block: _row (along the row, the
 * GEMM's K for dgrad/fwd) or _col (down the columns, stored transposed: the K of wgrad). */
#include "fb_error.h"
#include "fb_str.h"
#include "fourbit.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fb_qspec_tag(const fb_qspec *q, char *buf, size_t n) {
  /* a quant kernel's name is quant_<tag>_row (gen/kname.c): its middle is the tag */
  fb_kernel_spec k;
  memset(&k, 0, sizeof k);
  k.op = FB_OP_QUANT, k.q = *q;
  char nm[192];
  if (fb_kernel_name(&k, "sm_90a", nm, sizeof nm) != FB_OK) { snprintf(buf, n, "?"); return; }
  size_t l = strlen(nm) - strlen("_row_sm90a");
  snprintf(buf, n, "%.*s", (int)(l - 6), nm + 6);
}

typedef struct {
  fb_plan *p;
  int cap;
  int layer;
} builder;

/* Add kernel k (fields, family and role set), named by fb_kernel_name for the plan's arch, or count one more layer for
 * it: a kernel is its name (the name carries every field its source depends on). */
static fb_status add(builder *b, fb_kernel_spec k) {
  fb_plan *p = b->p;
  if (!strcmp(k.family, "gemm")) k.acc_exact = p->recipe->base.gemm_exact; /* gemm.accumulate: the recipe's, every layer */
  k.top_k = p->recipe->model.top_k;
  k.experts = p->recipe->model.experts;
  FB_TRY(fb_kernel_spec_name(&k, p->arch));
  for (int i = 0; i < p->nkernels; ++i) {
    fb_kernel_spec *e = &p->kernels[i];
    if (strcmp(e->name, k.name)) continue;
    if (e->last_layer != b->layer) e->nlayers++;
    e->last_layer = b->layer;
    return FB_OK;
  }
  if (p->nkernels == b->cap) {
    int nc = b->cap ? 2 * b->cap : 32;
    fb_kernel_spec *nk = realloc(p->kernels, (size_t)nc * sizeof *nk);
    if (!nk) return FB_ERR(FB_ENOMEM, "plan kernels");
    p->kernels = nk, b->cap = nc;
  }
  fb_kernel_spec *e = &p->kernels[p->nkernels++];
  *e = k;
  e->first_layer = e->last_layer = b->layer;
  e->nlayers = 1;
  e->nvariants = 0;
  for (int i = 0; i < p->recipe->nfamilies; ++i)
    if (!strcmp(p->recipe->families[i].family, e->family)) e->nvariants = p->recipe->families[i].nvariants;
  if (fb_gen_fixed(e)) e->nvariants = 1;
  return FB_OK;
}

/* The kernels one layer needs, in the order a train step runs them; on sm_90a then every kernel the GPU expert layer
 * runs (gen/specs.c fb_gpu_layer_kernels: most are the same kernels by name). */
static fb_status layer_kernels(builder *b, const fb_layer_prec *L) {
  const fb_model *m = &b->p->recipe->model;
  fb_format F = L->fwd_act.format, B = L->bwd_grad.format, D = L->dispatch;

  fb_qspec bf = {0}, gcol = L->bwd_grad, grow = L->bwd_grad, sw = L->bwd_saved, sa = L->bwd_saved, disp = L->fwd_act;
  grow.rht = 0, gcol.rht = L->wgrad_rht, sw.rht = 0, sa.rht = L->wgrad_rht;
  if (D != F) disp = bf, disp.format = D;

  /* forward */
  FB_TRY(add(b, fb_spec_router(0, m->top_k, m->experts, "router: softmax over experts, top-k, weights")));
  if ((F == FB_FMT_NVFP4 && L->fwd_act.outer == FB_GRAN_TENSOR) || (B == FB_FMT_NVFP4 && L->bwd_grad.outer == FB_GRAN_TENSOR))
    FB_TRY(add(b, fb_spec_amax(FB_GRAN_TENSOR, 0, "amax of a whole tensor (per-tensor outer scales)")));
  if (D != FB_FMT_BF16) FB_TRY(add(b, fb_spec_quant(&L->fwd_act, 0, 0, "dispatch: quantize tokens before sending")));
  FB_TRY(add(b, fb_spec_permute(&disp, "dispatch: rows sorted by expert, padded to the GEMM tile")));
  if (D == FB_FMT_BF16 && F != FB_FMT_BF16) FB_TRY(add(b, fb_spec_quant(&L->fwd_act, 0, 0, "quantize dispatched tokens on arrival")));
  /* Hopper has no FP4 tensor cores: the GEMMs of both families it runs (wgmma, and the portable mma.sync one that every
     arch has) multiply a decoded A by an exact BF16 copy of the B operand (gemm_bcopy.cuh); Blackwell's tcgen05 GEMMs,
     once written (issue 19), multiply the formats themselves, and the copy stays for the portable family */
  if (F != FB_FMT_BF16)
    FB_TRY(add(b, fb_spec_bcopy(F, "weights: exact BF16 copy for the GEMM (once per step)")));
  /* the SwiGLU epilogue writes A in BF16; its per-token (or MXFP8) quantization is the dispatch's quant_*_row kernel,
     a second pass, because a per-token scale needs the whole row of f values and a tile holds a slice of it */
  FB_TRY(add(b, fb_spec_gemm(FB_OP_GEMM_FWD13, &L->fwd_act, &L->fwd_weight, &L->fwd_act,
                             F == FB_FMT_BF16 ? "w13 fwd H = X W13^T; epilogue SwiGLU -> A" : "w13 fwd H = X W13^T; epilogue SwiGLU -> A (BF16; quant_*_row quantizes it)")));
  FB_TRY(add(b, fb_spec_gemm(FB_OP_GEMM_FWD2, &L->combine, &L->fwd_weight, &L->fwd_act, "w2 fwd Y = A W2^T; epilogue: the combine payload")));
  /* the combined expert output is a BF16 value (fourbit_train.h): the kernel writes BF16 */
  FB_TRY(add(b, fb_spec_unpermute(&L->combine, 1, "combine: dequantize, inverse RHT, router-weighted sum (BF16 out)")));

  /* backward */
  FB_TRY(add(b, fb_spec_permute(&bf, "gradients dY gathered by expert")));
  if (B != FB_FMT_BF16) {
    FB_TRY(add(b, fb_spec_quant(&grow, 0, 0, "quantize dY and dH along K of dgrad")));
    FB_TRY(add(b, fb_spec_quant(&gcol, 1, 0, "quantize dY and dH down the rows for wgrad (transposed)")));
    fb_qspec srcw = L->fwd_weight, srca = L->fwd_act;
    if (F == FB_FMT_BF16) memset(&srcw, 0, sizeof srcw), memset(&srca, 0, sizeof srca);
    FB_TRY(add(b, fb_spec_requant(&sw, &srcw, "weights: dequantize, transpose, requantize for dgrad")));
    FB_TRY(add(b, fb_spec_requant(&sa, &srca, "saved X and A: dequantize, transpose, requantize for wgrad")));
    if (B == FB_FMT_MXFP8 && F != FB_FMT_BF16) { /* the BF16-product GEMMs' copy of them, made in the same pass */
      FB_TRY(add(b, fb_spec_requant_kbf16(&sw, &srcw, "weights: requantized for dgrad as the GEMM's exact BF16 copy")));
      FB_TRY(add(b, fb_spec_requant_kbf16(&sa, &srca, "saved X and A: requantized for wgrad as the GEMM's exact BF16 copy")));
    }
  } else if (F != FB_FMT_BF16) {
    FB_TRY(add(b, fb_spec_requant(&bf, &L->fwd_weight, "weights: dequantize and transpose to BF16")));
    FB_TRY(add(b, fb_spec_requant(&bf, &L->fwd_act, "saved X and A: dequantize and transpose to BF16")));
  }
  if (B == FB_FMT_MXFP8 && F == FB_FMT_BF16)
    FB_TRY(add(b, fb_spec_bcopy(B, "requantized W, X, A: exact BF16 copy for the GEMM")));
  FB_TRY(add(b, fb_spec_gemm(FB_OP_GEMM_DGRAD2, NULL, &L->bwd_grad, &L->bwd_grad, "w2 dgrad dA = dY W2; epilogue SwiGLU backward -> dH")));
  FB_TRY(add(b, fb_spec_gemm(FB_OP_GEMM_WGRAD, NULL, &L->bwd_grad, &L->bwd_grad, "wgrad dW2 = dY^T A, dW13 = dH^T X (K = rows per expert)")));
  FB_TRY(add(b, fb_spec_gemm(FB_OP_GEMM_DGRAD13, NULL, &L->bwd_grad, &L->bwd_grad, "w13 dgrad dX = dH W13")));
  FB_TRY(add(b, fb_spec_unpermute(&bf, 0, "dX summed back to tokens")));
  FB_TRY(add(b, fb_spec_router(1, m->top_k, m->experts, "router backward")));

  /* optimizer: FP32 masters, then next step's quantized weights */
  FB_TRY(add(b, fb_spec_adamw(&L->fwd_weight, "AdamW on FP32 masters; writes next step's weights")));

  { /* what the GPU expert layer (runtime/experts_gpu.c) runs besides, on every arch it runs on */
    fb_layer_kernel lk[FB_GPU_LAYER_MAXK];
    int n = 0;
    FB_TRY(fb_gpu_layer_kernels(L, m, lk, FB_GPU_LAYER_MAXK, &n));
    for (int i = 0; i < n; ++i) FB_TRY(add(b, lk[i].k));
  }
  fb_kernel_spec sk[4]; /* and the GPU-resident step's own (runtime/train_gpu.c), which every layer's step runs */
  int n = 0;
  FB_TRY(fb_gpu_step_kernels(m, sk, 4, &n));
  for (int i = 0; i < n; ++i) FB_TRY(add(b, sk[i]));
  return FB_OK;
}

/* Bytes of n values in format f with `outer` FP32 outer scales. */
static double qbytes(fb_format f, double n, double outer) {
  switch (f) {
  case FB_FMT_NVFP4: return n * 0.5 + n / 16 + 4 * outer;
  case FB_FMT_MXFP8:
  case FB_FMT_S2F6: return n + n / 32;
  default: return 2 * n;
  }
}

double fb_plan_wire_bits(fb_format f, int d, int per_token_outer) {
  return qbytes(f, d, f == FB_FMT_NVFP4 && per_token_outer ? 1 : 0) * 8;
}

static void memory(fb_plan *p) {
  const fb_recipe *r = p->recipe;
  const fb_model *m = &r->model;
  double epr = (double)m->experts / r->ep, P = 3.0 * m->d_model * m->d_ff * epr, rows = (double)r->tokens * m->top_k;
  fb_plan_memory *M = &p->mem;
  memset(M, 0, sizeof *M);
  for (int l = 0; l < p->nlayers; ++l) {
    const fb_layer_prec *L = &p->layers[l];
    fb_format F = L->fwd_act.format, B = L->bwd_grad.format;
    double wo = L->fwd_weight.outer == FB_GRAN_EXPERT ? 2 * epr : 2;
    double wf = qbytes(F, P, wo);
    M->weights_fwd += wf;
    M->by_format[F] += wf;
    double copy = (F == FB_FMT_BF16 && B == FB_FMT_BF16) ? 0 : qbytes(B, P, 2);
    if (copy > M->weights_bwd_copy) M->weights_bwd_copy = copy;
    double ao = L->fwd_act.outer == FB_GRAN_TOKEN ? rows : 1;
    double x = qbytes(F, rows * m->d_model, ao), a = qbytes(F, rows * m->d_ff, ao);
    double h = 2 * rows * 2 * m->d_ff, router = 8.0 * r->tokens * m->top_k;
    M->saved_act += x + a + h + router;
    M->by_format[F] += x + a;
    M->by_format[FB_FMT_BF16] += h;
  }
  M->masters = 4 * P * p->nlayers;
  M->grads = 4 * P * p->nlayers;
  M->optimizer = 8 * P * p->nlayers;
}

/* ---- output ---------------------------------------------------------------------------------- */
/* The first layer (0-based) of each distinct wire configuration (dispatch format and whether it carries a
 * per-token outer scale, combine format), in layer order; returns how many (at most 16). */
static int wire_configs(const fb_plan *p, int first[16]) {
  int n = 0;
  for (int l = 0; l < p->nlayers && n < 16; ++l) {
    const fb_layer_prec *L = &p->layers[l];
    int dup = 0;
    for (int j = 0; j < n && !dup; ++j) {
      const fb_layer_prec *M = &p->layers[first[j]];
      dup = M->dispatch == L->dispatch && M->combine.format == L->combine.format &&
            (M->fwd_act.outer == FB_GRAN_TOKEN) == (L->fwd_act.outer == FB_GRAN_TOKEN);
    }
    if (!dup) first[n++] = l;
  }
  return n;
}

static void json_qspec(fb_str *s, const char *key, const fb_qspec *q) {
  fb_str_printf(s, "\"%s\": {\"format\": \"%s\"", key, fb_format_name(q->format));
  if (q->format == FB_FMT_NVFP4)
    fb_str_printf(s, ", \"outer\": \"%s\", \"four_over_six\": %s, \"two_d\": %s", fb_gran_name(q->outer),
                  q->four_over_six ? "true" : "false", q->two_d ? "true" : "false");
  if (q->format == FB_FMT_MXFP8) fb_str_printf(s, ", \"element\": \"%s\"", q->e5m2 ? "e5m2" : "e4m3");
  if (q->format != FB_FMT_BF16 && q->format != FB_FMT_S2F6)
    fb_str_printf(s, ", \"rounding\": \"%s\"", q->rounding == FB_ROUND_SR ? "sr" : "rn");
  if (q->format != FB_FMT_BF16) fb_str_printf(s, ", \"rht\": %d", q->rht);
  fb_str_printf(s, "}");
}

static void json_string(fb_str *s, const char *x) {
  fb_str_printf(s, "\"");
  for (; *x; ++x) {
    if (*x == '"' || *x == '\\') fb_str_printf(s, "\\%c", *x);
    else if ((unsigned char)*x < 0x20) fb_str_printf(s, "\\u%04x", *x);
    else fb_str_printf(s, "%c", *x);
  }
  fb_str_printf(s, "\"");
}

/* The JSON body after the sha256 field (hashed to make it). */
static void json_body(const fb_plan *p, fb_str *s) {
  const fb_recipe *r = p->recipe;
  const fb_model *m = &r->model;
  fb_str_printf(s, "  \"arch\": \"%s\",\n  \"description\": ", p->arch);
  json_string(s, r->description);
  fb_str_printf(s, ",\n  \"seed\": %u,\n", r->seed);
  fb_str_printf(s, "  \"model\": {\"layers\": %d, \"d_model\": %d, \"d_ff\": %d, \"experts\": %d, \"top_k\": %d, "
                   "\"vocab\": %d, \"conv_width\": %d},\n", m->layers, m->d_model, m->d_ff, m->experts, m->top_k, m->vocab, m->conv_width);
  fb_str_printf(s, "  \"parallel\": {\"ep\": %d, \"experts_per_rank\": %d, \"tokens_per_rank\": %d},\n", r->ep, m->experts / r->ep, r->tokens);
  fb_str_printf(s, "  \"layers\": [\n");
  for (int l = 0; l < p->nlayers; ++l) {
    const fb_layer_prec *L = &p->layers[l];
    fb_str_printf(s, "    {\"layer\": %d, \"fwd\": \"%s\", \"bwd\": \"%s\", \"dispatch\": \"%s\", \"combine\": \"%s\", "
                     "\"rounding\": {\"fwd\": \"%s\", \"bwd\": \"%s\"}, ", l + 1, fb_format_name(L->fwd_act.format),
                  fb_format_name(L->bwd_grad.format), fb_format_name(L->dispatch), fb_format_name(L->combine.format),
                  L->fwd_act.rounding == FB_ROUND_SR ? "sr" : "rn", L->bwd_grad.rounding == FB_ROUND_SR ? "sr" : "rn");
    json_qspec(s, "fwd_act", &L->fwd_act);
    fb_str_printf(s, ", ");
    json_qspec(s, "fwd_weight", &L->fwd_weight);
    fb_str_printf(s, ", ");
    json_qspec(s, "bwd_grad", &L->bwd_grad);
    fb_str_printf(s, ", ");
    json_qspec(s, "bwd_saved", &L->bwd_saved);
    fb_str_printf(s, ", \"wgrad_rht\": %d, ", L->wgrad_rht);
    json_qspec(s, "combine_payload", &L->combine);
    fb_str_printf(s, "}%s\n", l + 1 < p->nlayers ? "," : "");
  }
  fb_str_printf(s, "  ],\n  \"kernels\": [\n");
  for (int i = 0; i < p->nkernels; ++i) {
    const fb_kernel_spec *k = &p->kernels[i];
    fb_str_printf(s, "    {\"name\": \"%s\", \"family\": \"%s\", \"layers\": %d, \"first_layer\": %d, \"last_layer\": %d, "
                     "\"variants\": %d, \"role\": ", k->name, k->family, k->nlayers, k->first_layer, k->last_layer, k->nvariants);
    json_string(s, k->role);
    fb_str_printf(s, "}%s\n", i + 1 < p->nkernels ? "," : "");
  }
  const fb_plan_memory *M = &p->mem;
  fb_str_printf(s, "  ],\n  \"memory_per_rank_bytes\": {\"weights_fwd\": %.0f, \"weights_bwd_copy\": %.0f, \"masters_fp32\": %.0f, "
                   "\"grads_fp32\": %.0f, \"optimizer_fp32\": %.0f, \"saved_activations\": %.0f, \"by_format\": {",
                M->weights_fwd, M->weights_bwd_copy, M->masters, M->grads, M->optimizer, M->saved_act);
  int first = 1;
  for (int f = 0; f < 4; ++f)
    if (M->by_format[f] > 0) fb_str_printf(s, "%s\"%s\": %.0f", first ? "" : ", ", fb_format_name((fb_format)f), M->by_format[f]), first = 0;
  fb_str_printf(s, "}},\n  \"wire_bits_per_token_expert\": [");
  int wfirst[16], nw = wire_configs(p, wfirst);
  for (int i = 0; i < nw; ++i) {
    const fb_layer_prec *L = &p->layers[wfirst[i]];
    double bf = 16.0 * m->d_model, db = fb_plan_wire_bits(L->dispatch, m->d_model, L->fwd_act.outer == FB_GRAN_TOKEN);
    double cb = fb_plan_wire_bits(L->combine.format, m->d_model, 0);
    fb_str_printf(s, "%s\n    {\"dispatch\": \"%s\", \"dispatch_bits\": %.0f, \"dispatch_vs_bf16\": %.6f, \"combine\": \"%s\", "
                     "\"combine_bits\": %.0f, \"combine_vs_bf16\": %.6f, \"bf16_bits\": %.0f}", i ? "," : "",
                  fb_format_name(L->dispatch), db, db / bf, fb_format_name(L->combine.format), cb, cb / bf, bf);
  }
  fb_str_printf(s, "\n  ]\n");
}

fb_status fb_plan_json(const fb_plan *p, char **out) {
  fb_str s = {0};
  fb_str_printf(&s, "{\n  \"recipe\": ");
  json_string(&s, p->recipe->name);
  fb_str_printf(&s, ",\n  \"plan_sha256\": \"%s\",\n", p->sha256);
  json_body(p, &s);
  fb_str_printf(&s, "}\n");
  if (s.oom) { free(s.buf); return FB_ERR(FB_ENOMEM, "plan json"); }
  *out = s.buf;
  return FB_OK;
}

static void text_qspec(fb_str *s, const char *what, const fb_qspec *q) {
  if (q->format == FB_FMT_BF16) return;
  fb_str_printf(s, " %s(", what);
  int n = 0;
  if (q->format == FB_FMT_NVFP4) n += fb_str_printf(s, "%s", fb_gran_name(q->outer)) > 0;
  if (q->four_over_six) fb_str_printf(s, "%s4/6", n++ ? "," : "");
  if (q->two_d) fb_str_printf(s, "%s16x16", n++ ? "," : "");
  if (q->e5m2) fb_str_printf(s, "%se5m2", n++ ? "," : "");
  if (q->format != FB_FMT_S2F6) fb_str_printf(s, "%s%s", n++ ? "," : "", q->rounding == FB_ROUND_SR ? "sr" : "rn");
  if (q->rht) fb_str_printf(s, "%srht%d", n++ ? "," : "", q->rht);
  fb_str_printf(s, ")");
}

static int same_layer(const fb_layer_prec *a, const fb_layer_prec *b) { return !memcmp(a, b, sizeof *a); }

static const char *gib(double b, char *buf) {
  sprintf(buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  return buf;
}

fb_status fb_plan_text(const fb_plan *p, char **out) {
  const fb_recipe *r = p->recipe;
  const fb_model *m = &r->model;
  fb_str s = {0};
  char b1[32], b2[32];
  fb_str_printf(&s, "recipe %s (%s)\nplan sha256 %s, arch %s\n", r->name, r->path, p->sha256, p->arch);
  if (r->description[0]) fb_str_printf(&s, "%s\n", r->description);
  fb_str_printf(&s, "model: %d layers, d_model %d, d_ff %d, %d experts, top-%d, vocab %d; expert parallel %d (%d experts per rank), "
                    "%d tokens per rank\n\n", m->layers, m->d_model, m->d_ff, m->experts, m->top_k, m->vocab, r->ep,
                m->experts / r->ep, r->tokens);
  /* one row per run of identical layers; columns as wide as their widest cell */
  char *(*cells)[4] = calloc((size_t)p->nlayers, sizeof *cells);
  if (!cells) return FB_ERR(FB_ENOMEM, "plan text");
  int nrows = 0, width[4] = {7, 8, 8, 8};
  for (int l = 0; l < p->nlayers;) {
    int e = l;
    while (e + 1 < p->nlayers && same_layer(&p->layers[e + 1], &p->layers[l])) ++e;
    const fb_layer_prec *L = &p->layers[l];
    fb_str c[4] = {{0}};
    fb_str_printf(&c[0], l == e ? "%d" : "%d-%d", l + 1, e + 1);
    fb_str_printf(&c[1], "%s", fb_format_name(L->fwd_act.format));
    text_qspec(&c[1], "act", &L->fwd_act);
    text_qspec(&c[1], "w", &L->fwd_weight);
    fb_str_printf(&c[2], "%s", fb_format_name(L->bwd_grad.format));
    text_qspec(&c[2], "grad", &L->bwd_grad);
    text_qspec(&c[2], "saved", &L->bwd_saved);
    if (L->wgrad_rht) fb_str_printf(&c[2], " wgrad-rht%d", L->wgrad_rht);
    fb_str_printf(&c[3], "%s", fb_format_name(L->dispatch));
    for (int j = 0; j < 4; ++j) {
      cells[nrows][j] = c[j].buf;
      if (c[j].buf && (int)c[j].len > width[j]) width[j] = (int)c[j].len;
    }
    nrows++;
    l = e + 1;
  }
  fb_str_printf(&s, "%-*s  %-*s  %-*s  %-*s  %s\n", width[0], "layers", width[1], "forward", width[2], "backward",
                width[3], "dispatch", "combine");
  for (int i = 0, l = 0; i < nrows; ++i) {
    const fb_layer_prec *L = &p->layers[l];
    fb_str_printf(&s, "%-*s  %-*s  %-*s  %-*s  %s", width[0], cells[i][0] ? cells[i][0] : "", width[1],
                  cells[i][1] ? cells[i][1] : "", width[2], cells[i][2] ? cells[i][2] : "", width[3],
                  cells[i][3] ? cells[i][3] : "", fb_format_name(L->combine.format));
    if (L->combine.rht) fb_str_printf(&s, " rht%d", L->combine.rht);
    fb_str_printf(&s, "\n");
    while (l < p->nlayers && same_layer(&p->layers[l], L)) ++l;
    for (int j = 0; j < 4; ++j) free(cells[i][j]);
  }
  free(cells);
  fb_str_printf(&s, "\n%d unique kernels (tile variants from the recipe's tune values):\n", p->nkernels);
  fb_str_printf(&s, "%-52s %-8s %-7s %-8s %s\n", "name", "family", "layers", "variants", "role");
  for (int i = 0; i < p->nkernels; ++i) {
    const fb_kernel_spec *k = &p->kernels[i];
    char range[24];
    snprintf(range, sizeof range, k->nlayers == p->nlayers ? "all" : "%d", k->nlayers);
    fb_str_printf(&s, "%-52s %-8s %-7s %-8d %s\n", k->name, k->family, range, k->nvariants, k->role);
  }
  const fb_plan_memory *M = &p->mem;
  fb_str_printf(&s, "\nmemory per rank, expert layers only (%d experts x %d layers, %d tokens x top-%d rows saved per layer):\n",
                m->experts / r->ep, p->nlayers, r->tokens, m->top_k);
  fb_str_printf(&s, "  forward weights      %s\n  backward weight copy %s (one layer at a time)\n", gib(M->weights_fwd, b1), gib(M->weights_bwd_copy, b2));
  fb_str_printf(&s, "  FP32 master weights  %s\n  FP32 gradients       %s\n", gib(M->masters, b1), gib(M->grads, b2));
  fb_str_printf(&s, "  AdamW state (FP32)   %s\n  saved activations    %s\n", gib(M->optimizer, b1), gib(M->saved_act, b2));
  fb_str_printf(&s, "  quantized weights + saved activations by format:");
  for (int f = 0; f < 4; ++f)
    if (M->by_format[f] > 0) fb_str_printf(&s, " %s %s", fb_format_name((fb_format)f), gib(M->by_format[f], b1));
  fb_str_printf(&s, "\n\nbits one token moves per expert copy (x%d copies), against BF16 (%d bits):\n", m->top_k, 16 * m->d_model);
  int first[16], nw = wire_configs(p, first);
  for (int i = 0; i < nw; ++i) {
    const fb_layer_prec *L = &p->layers[first[i]];
    int l = first[i];
    double bf = 16.0 * m->d_model, db = fb_plan_wire_bits(L->dispatch, m->d_model, L->fwd_act.outer == FB_GRAN_TOKEN);
    double cbits = fb_plan_wire_bits(L->combine.format, m->d_model, 0);
    fb_str_printf(&s, "  layer %d on: dispatch %s %.0f bits (%.4f = %.2f/16), combine %s %.0f bits (%.4f = %.2f/16)\n", l + 1,
                  fb_format_name(L->dispatch), db, db / bf, 16 * db / bf, fb_format_name(L->combine.format), cbits,
                  cbits / bf, 16 * cbits / bf);
  }
  if (s.oom) { free(s.buf); return FB_ERR(FB_ENOMEM, "plan text"); }
  *out = s.buf;
  return FB_OK;
}

fb_status fb_plan_resolve(const fb_recipe *r, const char *arch, fb_plan **out) {
  *out = NULL;
  if (!arch) arch = "sm_90a";
  if (!fb_arch_known(arch)) return FB_USERERR(FB_EINVAL, "unknown arch '%s' (%s)", arch, FB_ARCHS);
  fb_plan *p = calloc(1, sizeof *p);
  if (!p) return FB_ERR(FB_ENOMEM, "plan");
  p->recipe = r;
  snprintf(p->arch, sizeof p->arch, "%s", arch);
  p->nlayers = r->model.layers;
  p->layers = calloc((size_t)p->nlayers, sizeof *p->layers);
  fb_status rc = p->layers ? FB_OK : FB_ERR(FB_ENOMEM, "plan layers");
  builder b = {.p = p};
  for (int l = 0; l < p->nlayers && rc == FB_OK; ++l) {
    fb_recipe_layer(r, l + 1, &p->layers[l]);
    b.layer = l + 1;
    rc = layer_kernels(&b, &p->layers[l]);
  }
  if (rc == FB_OK) {
    memory(p);
    fb_str s = {0};
    json_body(p, &s);
    if (s.oom) rc = FB_ERR(FB_ENOMEM, "plan json");
    else fb_sha256_hex(s.buf, s.len, p->sha256);
    free(s.buf);
  }
  if (rc != FB_OK) {
    fb_plan_free(p);
    return rc;
  }
  *out = p;
  return FB_OK;
}

void fb_plan_free(fb_plan *p) {
  if (!p) return;
  free(p->layers);
  free(p->kernels);
  free(p);
}
