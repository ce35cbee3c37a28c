/* test_templates.c — the template descriptors (gen/templates.c) and the tune parameters (recipes/loader.c) agree with
 * each other and with templates/: every .cuh template has exactly one row and every row an embedded template; every
 * parameter a row reads for the shipped recipes' specs is a known tune parameter that some recipe family can set; the
 * rows' hooks are wired (a fixed row has no grid, every other one does); the launch's shared memory is the GEMM host's.
 * What the rows generate is tests/test_gen_table.sh's (golden digests of the whole table). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "fb_embed.h"
#include "fb_error.h"
#include "fb_gemm_host.h"
#include "fb_tmpl.h"
#include "fourbit.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_rows_and_files(void **state) {
  (void)state;
  int nrows = 0;
  for (const fb_tmpl *t; (t = fb_tmpl_at(nrows)); ++nrows) {
    assert_non_null(t->match);
    assert_ptr_equal(fb_tmpl_by_file(t->file), t); /* one row per file */
    int embedded = 0;
    for (const fb_embedded_file *f = fb_embedded; f->name; ++f) embedded += !strcmp(f->name, t->file);
    if (embedded != 1) fail_msg("row %s: its template is not embedded", t->file);
    if (t->fixed ? t->grid != NULL : t->grid == NULL) fail_msg("row %s: fixed %d but grid %s", t->file, t->fixed, t->grid ? "set" : "missing");
  }
  assert_true(nrows >= 15);
  int ncuh = 0;
  for (const fb_embedded_file *f = fb_embedded; f->name; ++f) {
    size_t n = strlen(f->name);
    if (n < 4 || strcmp(f->name + n - 4, ".cuh")) continue;
    ++ncuh;
    if (!fb_tmpl_by_file(f->name)) fail_msg("templates/%s has no row in gen/templates.c", f->name);
  }
  assert_int_equal(ncuh, nrows);
  assert_null(fb_tmpl_by_file("nope.cuh"));
}

static void test_params_known(void **state) {
  (void)state;
  glob_t g;
  assert_int_equal(glob("recipes/*.lua", 0, NULL, &g), 0);
  int nvar = 0, ngemm = 0;
  for (size_t i = 0; i < g.gl_pathc; ++i) {
    fb_recipe *r = NULL;
    if (fb_recipe_load(g.gl_pathv[i], &r) != FB_OK) fail_msg("%s", fb_errmsg());
    for (int f = 0; f < r->nfamilies; ++f)
      for (int j = 0; j < r->families[f].nparams; ++j)
        if (!fb_tune_param_find(r->families[f].param[j])) fail_msg("family %s: parameter %s unknown", r->families[f].family, r->families[f].param[j]);
    fb_plan *p = NULL;
    assert_int_equal(fb_plan_resolve(r, "sm_90a", &p), FB_OK);
    for (int k = 0; k < p->nkernels; ++k) {
      const fb_kernel_spec *s = &p->kernels[k];
      const char *const *params, *why;
      const fb_tmpl *t = fb_tmpl_for_spec(s, &params, &why);
      if (!t) { assert_non_null(why); continue; }
      assert_string_equal(fb_gen_template(s, &why), t->file);
      for (int j = 0; params[j]; ++j)
        if (!fb_tune_param_find(params[j])) fail_msg("%s (%s): parameter %s unknown", s->name, t->file, params[j]);
      const fb_tune_family *fam = NULL;
      for (int f = 0; f < r->nfamilies; ++f)
        if (!strcmp(r->families[f].family, s->family)) fam = &r->families[f];
      fb_variant *vs = NULL;
      int nv = 0;
      if (!fam && !t->fixed) continue;
      if (fb_gen_variants(s, fam, &vs, &nv, NULL, NULL, 0) != FB_OK) fail_msg("%s", fb_errmsg());
      for (int v = 0; v < nv; ++v, ++nvar) {
        const fb_tmpl *tv = fb_tmpl_by_file(vs[v].tmpl); /* the first row's, or a later row's that also implements s */
        assert_non_null(tv);
        if (tv != t) {
          const char *const *pv, *wv;
          assert_true(fb_tmpl_index(tv) > fb_tmpl_index(t));
          assert_ptr_equal(fb_tmpl_next(s, fb_tmpl_index(tv) - 1, &pv, &wv), tv);
          assert_non_null(tv->family);
        }
        fb_gemm_cfg c;
        if (!tv->family) { assert_int_equal(fb_launch_smem(s, &vs[v]), 0); continue; }
        assert_int_equal(fb_gemm_config(s, &vs[v], &c), FB_OK);
        assert_int_equal(fb_launch_smem(s, &vs[v]), fb_gemm_smem_bytes(&c));
        unsigned gx, gy, th;
        assert_int_equal(fb_launch_dims(s, &vs[v], 4096, 2048, 8, &gx, &gy, &th), FB_OK);
        assert_int_equal(th, fb_gemm_threads(&c));
        ++ngemm;
      }
      free(vs);
    }
    fb_plan_free(p);
    fb_recipe_free(r);
  }
  globfree(&g);
  assert_true(nvar > 500);
  assert_true(ngemm > 50);
}

/* a spec no row claims: its op's reason; one a row refuses: that row's */
static void test_reasons(void **state) {
  (void)state;
  fb_kernel_spec k;
  memset(&k, 0, sizeof k);
  const char *why = NULL;
  k.op = FB_OP_ROUTER_BWD;
  assert_null(fb_gen_template(&k, &why));
  assert_non_null(strstr(why, "router backward"));
  k.op = FB_OP_QUANT, k.q.format = FB_FMT_NVFP4, k.col = 1;
  assert_null(fb_gen_template(&k, &why));
  assert_non_null(strstr(why, "columns"));
  k.col = 0;
  assert_string_equal(fb_gen_template(&k, &why), "quant_nvfp4.cuh");
  k.q.format = FB_FMT_MXFP8, k.col = 1;
  assert_string_equal(fb_gen_template(&k, &why), "mx_col.cuh");
  k.q.format = FB_FMT_BF16;
  assert_null(fb_gen_template(&k, &why));
  assert_non_null(strstr(why, "quantization to this format"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rows_and_files),
      cmocka_unit_test(test_params_known),
      cmocka_unit_test(test_reasons),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
