/* gen_table.c — the generator's whole decision table as text, for the golden test (tests/test_gen_table.sh) and for
 * diffing a change to gen/templates.c: for every kernel spec of each recipe's plan (sm_90a, sm_100a, sm_103a), its
 * template or why none; for each tile variant, its name, parameters, generated #defines (the source up to the
 * template body), grid and block at five shapes, and dynamic shared memory; for each pruned one, the reason.
 *
 *   gen_table RECIPE...           the variants of the recipes' own tune families
 *   gen_table --grid RECIPE...    every combination of a grid of values of each template's parameters, legal or not
 *                                 (of the parameters that are off at 0, mma_k only: with it, tile_k 768 too)
 *   gen_table --random N          N pseudo-random specs (every op, format and flag; a fixed seed), 24 grid points each
 *
 * The text depends on nothing but the generator: two builds print the same bytes when they generate the same kernels. */
#include "fourbit.h"
#include "fb_error.h"
#include "fb_tmpl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int *grid_values(const char *p, int k96, int *n) {
  static const int tm[] = {64, 128, 192, 256}, tn[] = {64, 96, 128, 192, 256}, tk[] = {64, 128, 192}, st[] = {1, 2, 3, 4, 6},
                   cl[] = {1, 2}, co[] = {1, 2, 3}, wb[] = {0, 1}, pipe[] = {0, 1, 2, 3}, rows[] = {8, 16, 32, 48, 64, 128, 256},
                   cols[] = {16, 32, 64, 96, 128, 256}, thr[] = {32, 64, 128, 256, 512}, stage[] = {0, 4, 8, 10, 24},
                   slots[] = {0, 1, 2, 3}, half[] = {0, 1, 2}, vec[] = {1, 2, 4, 8}, pair[] = {0, 1, 2};
#define R(name, a) if (!strcmp(p, name)) { *n = (int)(sizeof a / sizeof a[0]); return a; }
  /* the tcgen05 family's K = 96 form (mma_k 96, sm_103a) takes 768-wide K tiles: its specs' grid adds tile_k 768 */
  static const int mk[] = {0, 96}, tk96[] = {64, 128, 192, 768};
  if (k96) { R("mma_k", mk) R("tile_k", tk96) }
  R("tile_m", tm) R("tile_n", tn) R("tile_k", tk) R("stages", st) R("cluster", cl) R("consumers", co) R("weights_bf16", wb)
  R("pipe", pipe) R("rows", rows) R("cols", cols) R("threads", thr) R("stage", stage) R("slots", slots) R("half", half) R("vec", vec) R("pair", pair)
#undef R
  static const int one[] = {1};
  *n = 1;
  return one;
}

static void print_variant(const fb_kernel_spec *k, const fb_variant *v) {
  printf("  %s tmpl=%s", v->name, v->tmpl);
  for (int i = 0; i < v->nparams; ++i) printf(" %s=%d", v->param[i], v->value[i]);
  char *src = NULL;
  if (fb_gen_source(k, v, "o", "s", &src) == FB_OK) {
    char *e = strstr(src, "\n\n");
    if (e) *e = 0;
    char *d = strstr(src, "#define");
    for (char *s = d; s && *s; ++s)
      if (*s == '\n') *s = ' ';
    printf(" {%s}", d ? d : "");
    free(src);
  } else
    printf(" source-error{%s}", fb_errmsg());
  static const long long shp[][3] = {{1, 32, 0}, {256, 128, 1}, {8192, 5120, 48}, {1000, 96, 8}, {4096, 2048, 16}};
  for (int s = 0; s < 5; ++s) {
    unsigned gx, gy, th;
    if (fb_launch_dims(k, v, shp[s][0], shp[s][1], (unsigned)shp[s][2], &gx, &gy, &th) == FB_OK) printf(" %ux%ux%u", gx, gy, th);
    else printf(" -");
  }
  printf(" smem=%u\n", fb_launch_smem(k, v));
}

/* The template's parameters: those fb_gen_variants asks an empty family for, one by one; then mma_k where the template
   reads it (a parameter off at 0, which fb_gen_variants never asks for: the others of its kind stay at 0 in the grid). */
static int template_params(const fb_kernel_spec *k, fb_tune_family *fam) {
  static int zeros[FB_TUNE_MAXPARAMS];
  memset(fam, 0, sizeof *fam);
  snprintf(fam->family, sizeof fam->family, "grid");
  fam->nvariants = 1, fam->values = zeros;
  for (int it = 0; it <= FB_TUNE_MAXPARAMS; ++it) {
    fb_variant *vs;
    int nv;
    if (fb_gen_variants(k, fam, &vs, &nv, NULL, NULL, 0) == FB_OK) {
      free(vs);
      const char *const *params, *why;
      const fb_tmpl *t = fb_tmpl_for_spec(k, &params, &why);
      for (int i = 0; t && params[i] && fam->nparams < FB_TUNE_MAXPARAMS; ++i)
        if (!strcmp(params[i], "mma_k")) snprintf(fam->param[fam->nparams++], sizeof fam->param[0], "mma_k");
      return 0;
    }
    const char *q = strstr(fb_errmsg(), "has no parameter ");
    if (!q || fam->nparams == FB_TUNE_MAXPARAMS) { printf("  error{%s}\n", fb_errmsg()); return -1; }
    snprintf(fam->param[fam->nparams++], sizeof fam->param[0], "%s", q + 17);
  }
  return -1;
}

/* every combination (sample 0) or `sample` spread over them */
static void dump_grid(const fb_kernel_spec *k, int sample) {
  fb_tune_family fam;
  if (template_params(k, &fam)) return;
  int nv[FB_TUNE_MAXPARAMS];
  const int *vals[FB_TUNE_MAXPARAMS];
  long total = 1;
  int k96 = 0;
  for (int i = 0; i < fam.nparams; ++i) k96 |= !strcmp(fam.param[i], "mma_k");
  for (int i = 0; i < fam.nparams; ++i) vals[i] = grid_values(fam.param[i], k96, &nv[i]), total *= nv[i];
  for (long c0 = 0; c0 < (sample ? sample : total); ++c0) {
    long c = sample ? (long)((unsigned long)c0 * 2654435761u % (unsigned long)total) : c0, x = c;
    int row[FB_TUNE_MAXPARAMS];
    for (int i = fam.nparams - 1; i >= 0; --i) row[i] = vals[i][x % nv[i]], x /= nv[i];
    fb_tune_family f1 = fam;
    f1.values = row;
    fb_variant *vs;
    int n, pruned = 0;
    char why[256];
    if (fb_gen_variants(k, &f1, &vs, &n, &pruned, why, sizeof why) != FB_OK) { printf("  error{%s}\n", fb_errmsg()); continue; }
    if (n) print_variant(k, &vs[0]);
    else {
      printf("  pruned");
      for (int i = 0; i < fam.nparams; ++i) printf(" %s=%d", fam.param[i], row[i]);
      printf(": %s\n", why);
    }
    free(vs);
  }
}

static void dump_spec(const fb_kernel_spec *k, const fb_recipe *r, int mode, int sample) {
  const char *why = NULL, *t = fb_gen_template(k, &why);
  printf("%s: %s%s\n", k->name, t ? t : "no template: ", t ? (fb_gen_fixed(k) ? " (fixed)" : "") : why);
  if (!t) return;
  if (mode) { dump_grid(k, sample); return; }
  const fb_tune_family *fam = NULL;
  for (int f = 0; r && f < r->nfamilies; ++f)
    if (!strcmp(r->families[f].family, k->family)) fam = &r->families[f];
  fb_variant *vs;
  int n, pruned = 0;
  char w[256];
  if (!fam && !fb_gen_fixed(k)) { printf("  no tune family %s\n", k->family); return; }
  if (fb_gen_variants(k, fam, &vs, &n, &pruned, w, sizeof w) != FB_OK) { printf("  error{%s}\n", fb_errmsg()); return; }
  for (int i = 0; i < n; ++i) print_variant(k, &vs[i]);
  if (pruned) printf("  %d pruned, the first: %s\n", pruned, w);
  free(vs);
}

static unsigned long long seed = 0x1234567;
static unsigned rnd(unsigned n) {
  seed = seed * 6364136223846793005ull + 1442695040888963407ull;
  return (unsigned)((seed >> 33) % n);
}
static void random_q(fb_qspec *q) {
  q->format = (fb_format)rnd(4), q->outer = (fb_gran)rnd(3), q->four_over_six = (int)rnd(2), q->two_d = (int)rnd(2);
  q->rounding = (fb_rounding)rnd(2), q->e5m2 = rnd(4) == 0;
  unsigned h = rnd(4);
  q->rht = h == 1 ? 16 : h == 2 ? 32 : h == 3 ? 8 : 0;
}

int main(int argc, char **argv) {
  int mode = 0, a = 1;
  if (a < argc && !strcmp(argv[a], "--grid")) mode = 1, ++a;
  if (a + 1 < argc && !strcmp(argv[a], "--random")) {
    static const fb_op ops[] = {FB_OP_TCOPY, FB_OP_ROUTER, FB_OP_ROUTER_BWD, FB_OP_AMAX, FB_OP_QUANT, FB_OP_PERMUTE,
                                FB_OP_UNPERMUTE, FB_OP_GEMM_FWD13, FB_OP_GEMM_FWD2, FB_OP_GEMM_DGRAD2, FB_OP_GEMM_WGRAD,
                                FB_OP_GEMM_DGRAD13, FB_OP_REQUANT, FB_OP_ADAMW, FB_OP_S2F6_Q, FB_OP_S2F6_DQ,
                                FB_OP_SWIGLU_FWD, FB_OP_SWIGLU_BWD, FB_OP_BCOPY, FB_OP_COMBINE_BWD, FB_OP_DENSE};
    int n = atoi(argv[a + 1]);
    for (int i = 0; i < n; ++i) {
      fb_kernel_spec k;
      memset(&k, 0, sizeof k);
      k.op = ops[rnd((unsigned)(sizeof ops / sizeof ops[0]))];
      random_q(&k.q), random_q(&k.src), random_q(&k.act);
      k.col = (int)rnd(2), k.in_f32 = (int)rnd(2), k.top_k = 1 + (int)rnd(4), k.experts = 8, k.out_bf16 = (int)rnd(2);
      snprintf(k.name, sizeof k.name, "spec%d_%s", i, rnd(3) ? "sm90a" : "sm100a");
      snprintf(k.family, sizeof k.family, "grid");
      dump_spec(&k, NULL, 1, 24);
    }
    return 0;
  }
  if (a >= argc) { fprintf(stderr, "usage: gen_table [--grid] RECIPE... | gen_table --random N\n"); return 2; }
  for (; a < argc; ++a) {
    fb_recipe *r;
    if (fb_recipe_load(argv[a], &r) != FB_OK) { fprintf(stderr, "gen_table: %s\n", fb_errmsg()); return 2; }
    static const char *const arch[] = {"sm_90a", "sm_100a", "sm_103a"};
    for (int x = 0; x < 3; ++x) {
      fb_plan *p;
      if (fb_plan_resolve(r, arch[x], &p) != FB_OK) { fprintf(stderr, "gen_table: %s\n", fb_errmsg()); return 2; }
      printf("== %s %s: %d kernel specs\n", argv[a], arch[x], p->nkernels);
      for (int i = 0; i < p->nkernels; ++i) dump_spec(&p->kernels[i], r, mode, 0);
      fb_plan_free(p);
    }
    fb_recipe_free(r);
  }
  return 0;
}
