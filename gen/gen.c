/* gen.c — kernel spec + tile parameters -> CUDA source from templates/.
 *
 * What each template implements, reads and needs is its row in gen/templates.c (fb_tmpl.h); this file walks the rows.
 * Entry points: fb_gen_template() (which template implements a spec, or why none does yet),
 * fb_gen_variants() (the legal, distinct tile variants of a spec under its tune family, of every template that
 * implements it: a GEMM's fast family and its portable one),
 * fb_gen_source() (the generated text: header, #defines in sorted order, template body).
 *
 * The template body is copied into the source from the embedded templates/ (build/gen/embedded.c);
 * the helper headers it includes (fb_formats.h, fb_philox.h, fb_kparams.h) reach NVRTC from memory. */
#include "fb_embed.h"
#include "fb_error.h"
#include "fb_str.h"
#include "fb_tmpl.h"
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

int fb_gen_fixed(const fb_kernel_spec *k) {
  const char *const *params;
  const char *why;
  const fb_tmpl *t = fb_tmpl_for_spec(k, &params, &why);
  return t && t->fixed;
}

const char *fb_gen_template(const fb_kernel_spec *k, const char **why) {
  const char *const *params;
  const fb_tmpl *t = fb_tmpl_for_spec(k, &params, why);
  return t ? t->file : NULL;
}

static int zero_is_off(const char *param) {
  const fb_tune_param *p = fb_tune_param_find(param);
  return p && p->zero_is_off;
}

fb_status fb_gen_variants(const fb_kernel_spec *k, const fb_tune_family *fam, fb_variant **out, int *n, int *pruned,
                          char *why, size_t whylen) {
  *out = NULL, *n = 0;
  if (pruned) *pruned = 0;
  if (why && whylen) why[0] = 0;
  const char *const *params, *none;
  const fb_tmpl *t = fb_tmpl_for_spec(k, &params, &none);
  if (!t) return FB_ERR(FB_EVARIANT, "%s: %s", k->name, none);
  fb_tune_family fixed;
  if (!fam && t->fixed) { /* one variant, no tune family: dense.cuh's pieces take FB_DENSE_THREADS */
    memset(&fixed, 0, sizeof fixed);
    snprintf(fixed.family, sizeof fixed.family, "%s", k->family);
    static const int one[1] = {FB_DENSE_THREADS};
    fixed.nparams = 1, fixed.nvariants = 1, fixed.values = (int *)one;
    snprintf(fixed.param[0], sizeof fixed.param[0], "threads");
    fam = &fixed;
  }
  if (!fam) return FB_ERR(FB_EINVAL, "%s: no tune family", k->name);
  int rows = 0; /* every row that implements k offers its variants, in table order (fb_tmpl.h) */
  for (const fb_tmpl *r = t; r; r = fb_tmpl_next(k, fb_tmpl_index(r), &params, &none)) ++rows;
  fb_variant *vs = calloc((size_t)fam->nvariants * (size_t)rows + 1, sizeof *vs);
  if (!vs) return FB_ERR(FB_ENOMEM, "variants");
  int m = 0;
  fb_tmpl_for_spec(k, &params, &none);
  for (; t; t = fb_tmpl_next(k, fb_tmpl_index(t), &params, &none)) {
    int np = 0, idx[FB_TUNE_MAXPARAMS], m0 = m;
    for (; np < FB_TUNE_MAXPARAMS && params[np]; ++np) {
      idx[np] = -1;
      for (int j = 0; j < fam->nparams; ++j)
        if (!strcmp(fam->param[j], params[np])) idx[np] = j;
      if (idx[np] < 0 && !zero_is_off(params[np])) {
        free(vs);
        return FB_ERR(FB_EINVAL, "%s: tune family %s has no parameter %s", k->name, fam->family, params[np]);
      }
    }
    for (int i = 0; i < fam->nvariants; ++i) {
      fb_variant v;
      memset(&v, 0, sizeof v);
      v.nparams = np;
      snprintf(v.tmpl, sizeof v.tmpl, "%s", t->file);
      for (int j = 0; j < np; ++j) {
        snprintf(v.param[j], sizeof v.param[j], "%s", params[j]);
        v.value[j] = idx[j] < 0 ? 0 : fam->values[(size_t)i * fam->nparams + idx[j]];
      }
      int dup = 0; /* within the row: a parameter it does not read makes equal variants */
      for (int j = m0; j < m && !dup; ++j) dup = !memcmp(vs[j].value, v.value, sizeof v.value);
      if (dup) continue;
      const char *bad = t->illegal ? t->illegal(k, &v) : NULL;
      if (bad) {
        if (pruned) ++*pruned;
        if (why && whylen && !why[0]) snprintf(why, whylen, "%s", bad);
        continue;
      }
      /* the variant tag: the template's, or parameter initials and values in template order, e.g. _r32_c64_t256 */
      int len = snprintf(v.name, sizeof v.name, "%s", k->name);
      if (t->tag) t->tag(&v, v.name, sizeof v.name, len);
      else
        for (int j = 0; j < np && len < (int)sizeof v.name; ++j)
          if (v.value[j] || !zero_is_off(v.param[j]))
            len += snprintf(v.name + len, sizeof v.name - (size_t)len, "_%c%d", v.param[j][0], v.value[j]);
      vs[m++] = v;
    }
  }
  *out = vs, *n = m;
  return FB_OK;
}

static int cmp_lines(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

fb_status fb_gen_source(const fb_kernel_spec *k, const fb_variant *v, const char *origin, const char *plan_sha,
                        char **src) {
  *src = NULL;
  const fb_embedded_file *t = embedded(v->tmpl);
  const fb_tmpl *row = fb_tmpl_by_file(v->tmpl);
  if (!t || !row) return FB_ERR(FB_ENOTFOUND, "%s: template %s is not %s", v->name, v->tmpl, t ? "in gen/templates.c" : "embedded");
  /* all #defines, sorted, so the text depends on nothing but their values */
  fb_str d = {0};
  if (row->defines) row->defines(k, &d);
  for (int i = 0; i < v->nparams; ++i) {
    char up[16];
    size_t j = 0;
    for (; v->param[i][j] && j + 1 < sizeof up; ++j) up[j] = (char)(v->param[i][j] >= 'a' && v->param[i][j] <= 'z' ? v->param[i][j] - 32 : v->param[i][j]);
    up[j] = 0;
    if (row->param_define && row->param_define(v->param[i], v->value[i], &d)) continue;
    if (!v->value[i] && zero_is_off(v->param[i])) continue; /* the template's default */
    fb_str_printf(&d, "FB_%s %d\n", up, v->value[i]);
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
  if (row->fixed) origin = plan_sha = NULL; /* one source whatever the recipe: one cache entry (train_gpu.c, tune) */
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
