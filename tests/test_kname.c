/* test_kname.c — the naming authority (gen/kname.c): for every kernel of every shipped recipe's plan, on every arch,
 * the name parses back to fields that name it again, and those fields generate the same source as the plan's spec for
 * every variant (a name determines its kernel: the cache and the runtime rely on it), and likewise the tcopy kernels,
 * which no plan holds; variant names parse to their spec; names that are not canonical are refused. The GPU paths' requests against the plan are
 * tests/gpu/test_names.c's (on the fake driver). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "fb_error.h"
#include "fourbit.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *ARCHS[] = {"sm_90a", "sm_100a", "sm_103a"};

static const fb_tune_family *family(const fb_recipe *r, const char *name) {
  for (int i = 0; i < r->nfamilies; ++i)
    if (!strcmp(r->families[i].family, name)) return &r->families[i];
  return NULL;
}

static void one_plan(const fb_recipe *r, const char *arch, int *nk, int *nv) {
  fb_plan *p = NULL;
  assert_int_equal(fb_plan_resolve(r, arch, &p), FB_OK);
  for (int i = 0; i < p->nkernels; ++i) {
    const fb_kernel_spec *k = &p->kernels[i];
    char nm[192], a[16];
    assert_int_equal(fb_kernel_name(k, arch, nm, sizeof nm), FB_OK);
    if (strcmp(nm, k->name)) fail_msg("%s: the plan's name is not the authority's (%s)", k->name, nm);
    fb_kernel_spec q;
    size_t tail = 0;
    if (fb_kernel_parse(k->name, &q, a, sizeof a, &tail) != FB_OK) fail_msg("%s", fb_errmsg());
    assert_string_equal(a, arch);
    assert_string_equal(q.name, k->name);
    assert_int_equal(tail, strlen(k->name));
    assert_int_equal(q.op, k->op);
    ++*nk;
    const char *why;
    if (!fb_gen_template(k, &why)) continue;
    const fb_tune_family *fam = family(r, k->family);
    if (!fam && !fb_gen_fixed(k)) continue;
    /* the parsed fields carry what the source depends on: every variant's source is the plan spec's */
    snprintf(q.family, sizeof q.family, "%s", k->family);
    q.top_k = k->top_k, q.experts = k->experts;
    fb_variant *va = NULL, *vb = NULL;
    int na = 0, nb = 0;
    assert_int_equal(fb_gen_variants(k, fam, &va, &na, NULL, NULL, 0), FB_OK);
    assert_int_equal(fb_gen_variants(&q, fam, &vb, &nb, NULL, NULL, 0), FB_OK);
    if (na != nb) fail_msg("%s: %d variants from the plan's spec, %d from its parsed name", k->name, na, nb);
    for (int v = 0; v < na; ++v) {
      assert_string_equal(va[v].name, vb[v].name);
      char *sa = NULL, *sb = NULL;
      assert_int_equal(fb_gen_source(k, &va[v], "r.lua", "-", &sa), FB_OK);
      assert_int_equal(fb_gen_source(&q, &vb[v], "r.lua", "-", &sb), FB_OK);
      if (strcmp(sa, sb)) fail_msg("%s: the source of the spec parsed from its name differs from the plan's", va[v].name);
      free(sa), free(sb);
      fb_kernel_spec w;
      if (fb_kernel_parse(va[v].name, &w, a, sizeof a, &tail) != FB_OK) fail_msg("%s", fb_errmsg());
      assert_string_equal(w.name, k->name);
      assert_true(va[v].name[tail] == '_' || va[v].name[tail] == 0);
      ++*nv;
    }
    free(va), free(vb);
  }
  fb_plan_free(p);
}

static void test_plans_round_trip(void **st) {
  (void)st;
  glob_t g;
  assert_int_equal(glob("recipes/*.lua", 0, NULL, &g), 0);
  assert_true(g.gl_pathc >= 5);
  int nk = 0, nv = 0;
  for (size_t i = 0; i < g.gl_pathc; ++i) {
    fb_recipe *r = NULL;
    if (fb_recipe_load(g.gl_pathv[i], &r) != FB_OK) fail_msg("%s", fb_errmsg());
    for (int a = 0; a < 3; ++a) one_plan(r, ARCHS[a], &nk, &nv);
    fb_recipe_free(r);
  }
  printf("  %zu recipes x 3 arches: %d plan kernels and %d variants named, parsed back, their sources equal\n", g.gl_pathc, nk, nv);
  globfree(&g);
}

/* every op the authority names, the fields set as the runtime sets them */
static void test_every_op(void **st) {
  (void)st;
  fb_qspec nv = {.format = FB_FMT_NVFP4, .outer = FB_GRAN_TOKEN, .four_over_six = 1, .rounding = FB_ROUND_SR};
  fb_qspec mx = {.format = FB_FMT_MXFP8, .rounding = FB_ROUND_SR}, s2 = {.format = FB_FMT_S2F6, .rht = 32}, bf = {0};
  fb_qspec nvt = {.format = FB_FMT_NVFP4, .outer = FB_GRAN_TENSOR}, nve = {.format = FB_FMT_NVFP4, .outer = FB_GRAN_EXPERT, .two_d = 1};
  struct {
    fb_kernel_spec k;
    const char *name;
  } c[] = {
      {fb_spec_amax(FB_GRAN_EXPERT, 1, NULL), "amax_exp_f32_sm90a"},
      {fb_spec_amax(FB_GRAN_TENSOR, 0, NULL), "amax_ten_bf16_sm90a"},
      {fb_spec_quant(&nv, 0, 0, NULL), "quant_nvfp4_4o6_tok_sr_row_sm90a"},
      {fb_spec_quant(&nve, 0, 1, NULL), "quant_nvfp4_2d_exp_f32_row_sm90a"},
      {fb_spec_quant(&mx, 1, 0, NULL), "quant_mxfp8_sr_col_sm90a"},
      {fb_spec_requant(&mx, &nv, NULL), "requant_nvfp4_tok_mxfp8_sr_t_sm90a"},
      {fb_spec_requant(&bf, &nvt, NULL), "requant_nvfp4_ten_bf16_t_sm90a"},
      {fb_spec_permute(&nv, NULL), "permute_nvfp4_tok_sm90a"},
      {fb_spec_permute(&mx, NULL), "permute_mxfp8_sm90a"},
      {fb_spec_unpermute(&s2, 1, NULL), "unpermute_s2f6_rht32_obf16_sm90a"},
      {fb_spec_unpermute(&bf, 0, NULL), "unpermute_bf16_sm90a"},
      {fb_spec_combine_bwd(&s2, NULL), "combine_bwd_s2f6_rht32_sm90a"},
      {fb_spec_swiglu(1, NULL), "swiglu_bwd_bf16_sm90a"},
      {fb_spec_bcopy(FB_FMT_MXFP8, NULL), "bcopy_mxfp8_sm90a"},
      {fb_spec_tcopy(FB_FMT_NVFP4, FB_GRAN_TOKEN, 0, 1, 16, 0, 0, NULL), "tcopy_nvfp4_tok_f32_t_rht16_sm90a"},
      {fb_spec_tcopy(FB_FMT_BF16, FB_GRAN_TENSOR, 1, 0, 0, 16, 0, NULL), "tcopy_f32_f32_sc16_sm90a"},
      {fb_spec_tcopy(FB_FMT_MXFP8, FB_GRAN_TENSOR, 0, 0, 0, 0, 0, NULL), "tcopy_mxfp8_f32_sm90a"},
      {fb_spec_tcopy(FB_FMT_MXFP8, FB_GRAN_TOKEN, 0, 1, 0, 0, 1, NULL), "tcopy_mxfp8_bf16_t_sm90a"},
      {fb_spec_tcopy(FB_FMT_NVFP4, FB_GRAN_TENSOR, 0, 0, 0, 0, 0, NULL), "tcopy_nvfp4_ten_f32_sm90a"},
      {fb_spec_tcopy(FB_FMT_NVFP4, FB_GRAN_TOKEN, 0, 0, 0, 0, 0, NULL), "tcopy_nvfp4_tok_f32_sm90a"},
      {fb_spec_gemm(FB_OP_GEMM_FWD13, &nvt, &nvt, &nvt, NULL), "gemm_fwd_nvfp4_tenxnvfp4_ten_bf16_swiglu_sm90a"},
      {fb_spec_gemm(FB_OP_GEMM_FWD2, &s2, &nve, &nv, NULL), "gemm_fwd_nvfp4xnvfp4_s2f6_rht32_sm90a"},
      {fb_spec_gemm(FB_OP_GEMM_DGRAD2, NULL, &mx, &mx, NULL), "gemm_dgrad_mxfp8xmxfp8_bf16_swiglubwd_sm90a"},
      {fb_spec_gemm(FB_OP_GEMM_WGRAD, NULL, &bf, &bf, NULL), "gemm_wgrad_bf16xbf16_f32_sm90a"},
      {fb_spec_router(0, 2, 16, NULL), "router_top2_e16_sm90a"},
      {fb_spec_router(1, 8, 384, NULL), "router_bwd_top8_e384_sm90a"},
      {fb_spec_adamw(&nve, NULL), "adamw_f32_nvfp4_2d_exp_sm90a"},
      {fb_spec_adamw(NULL, NULL), "adamw_f32_bf16_sm90a"},
      {fb_spec_dense(NULL), "dense_sm90a"},
  };
  for (size_t i = 0; i < sizeof c / sizeof c[0]; ++i) {
    char nm[192], a[16];
    assert_int_equal(fb_kernel_name(&c[i].k, "sm_90a", nm, sizeof nm), FB_OK);
    assert_string_equal(nm, c[i].name);
    fb_kernel_spec q;
    if (fb_kernel_parse(c[i].name, &q, a, sizeof a, NULL) != FB_OK) fail_msg("%s", fb_errmsg());
    assert_int_equal(q.op, c[i].k.op);
    assert_string_equal(q.name, c[i].name);
  }
  /* a variant name: the tail after the arch tag is the variant's */
  fb_kernel_spec q;
  char a[16];
  size_t tail = 0;
  const char *v = "gemm_fwd_mxfp8xmxfp8_bf16_swiglu_sm90a_m128n128k128_s3_c1_w2_b1_p2";
  assert_int_equal(fb_kernel_parse(v, &q, a, sizeof a, &tail), FB_OK);
  assert_string_equal(v + tail, "_m128n128k128_s3_c1_w2_b1_p2");
  assert_int_equal(q.op, FB_OP_GEMM_FWD13);
  assert_int_equal(q.src.format, FB_FMT_MXFP8);
  assert_int_equal(fb_kernel_parse("quant_nvfp4_4o6_tok_row_sm100a_r16_t256", &q, a, sizeof a, &tail), FB_OK);
  assert_string_equal(a, "sm_100a");
  assert_true(q.q.four_over_six && q.q.outer == FB_GRAN_TOKEN && !q.col);
}

/* tcopy is no plan kernel (the GPU layer and the dequantize API build it): its names parse back to fields that generate
 * the same source as the spec for every variant of tiny.lua's quant family, with the source the name says (FB_SRC) */
static void test_tcopy_sources(void **st) {
  (void)st;
  struct {
    fb_kernel_spec k;
    const char *src;
  } c[] = {
      {fb_spec_tcopy(FB_FMT_MXFP8, FB_GRAN_TENSOR, 0, 0, 0, 0, 0, NULL), "#define FB_SRC 3\n"},
      {fb_spec_tcopy(FB_FMT_MXFP8, FB_GRAN_TOKEN, 0, 1, 16, 0, 1, NULL), "#define FB_SRC 3\n"},
      {fb_spec_tcopy(FB_FMT_NVFP4, FB_GRAN_TOKEN, 0, 0, 0, 0, 0, NULL), "#define FB_SRC 2\n#define FB_SRC_OUTER 1\n"},
      {fb_spec_tcopy(FB_FMT_NVFP4, FB_GRAN_TENSOR, 0, 1, 16, 0, 1, NULL), "#define FB_SRC 2\n#define FB_SRC_OUTER 0\n"},
      {fb_spec_tcopy(FB_FMT_BF16, FB_GRAN_TENSOR, 1, 0, 0, 16, 0, NULL), "#define FB_SRC 1\n"},
  };
  fb_recipe *r = NULL;
  if (fb_recipe_load("recipes/tiny.lua", &r) != FB_OK) fail_msg("%s", fb_errmsg());
  const fb_tune_family *fam = family(r, "quant");
  assert_non_null(fam);
  for (size_t i = 0; i < sizeof c / sizeof c[0]; ++i) {
    fb_kernel_spec *k = &c[i].k, q;
    char a[16];
    assert_int_equal(fb_kernel_spec_name(k, "sm_90a"), FB_OK);
    if (fb_kernel_parse(k->name, &q, a, sizeof a, NULL) != FB_OK) fail_msg("%s", fb_errmsg());
    snprintf(q.family, sizeof q.family, "%s", k->family);
    const char *why;
    if (!fb_gen_template(k, &why)) fail_msg("%s: no template: %s", k->name, why);
    fb_variant *va = NULL, *vb = NULL;
    int na = 0, nb = 0;
    assert_int_equal(fb_gen_variants(k, fam, &va, &na, NULL, NULL, 0), FB_OK);
    assert_int_equal(fb_gen_variants(&q, fam, &vb, &nb, NULL, NULL, 0), FB_OK);
    assert_true(na > 0);
    assert_int_equal(na, nb);
    for (int v = 0; v < na; ++v) {
      char *sa = NULL, *sb = NULL;
      assert_string_equal(va[v].name, vb[v].name);
      assert_int_equal(fb_gen_source(k, &va[v], "r.lua", "-", &sa), FB_OK);
      assert_int_equal(fb_gen_source(&q, &vb[v], "r.lua", "-", &sb), FB_OK);
      if (strcmp(sa, sb)) fail_msg("%s: the source of the spec parsed from its name differs", va[v].name);
      if (!strstr(sa, c[i].src)) fail_msg("%s: its source has no '%s'", va[v].name, c[i].src);
      free(sa), free(sb);
    }
    free(va), free(vb);
  }
  /* an MXFP8 source with E5M2 elements would read as E4M3 under the same name: refused */
  fb_kernel_spec e = fb_spec_tcopy(FB_FMT_MXFP8, FB_GRAN_TENSOR, 0, 0, 0, 0, 0, NULL);
  e.src.e5m2 = 1;
  const char *why = NULL;
  assert_null(fb_gen_template(&e, &why));
  fb_recipe_free(r);
}

static void test_refused(void **st) {
  (void)st;
  static const char *bad[] = {
      "amax_tensor_bf16_sm90a",                 /* the old plan's name: not canonical */
      "quant_nvfp4_tok_row",                    /* no arch */
      "quant_nvfp4_row_sm90a",                  /* no outer granularity */
      "gemm_fwd_nvfp4xmxfp8_bf16_sm90a",        /* two operand formats */
      "gemm_dgrad_bf16xbf16_bf16_swiglu_sm90a", /* SwiGLU is the w13 forward's epilogue */
      "unpermute_mxfp8_sm90a",                  /* not a combine payload */
      "router_sm90a",                           /* top-k and experts missing */
      "tcopy_bf16_sm90a",                       /* no output type */
      "quant_mxfp8_sr_row_extra_sm90a",         /* trailing fields */
      "bogus_sm90a",
      "",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    fb_kernel_spec q;
    char a[16];
    if (fb_kernel_parse(bad[i], &q, a, sizeof a, NULL) == FB_OK) fail_msg("'%s' parsed as %s", bad[i], q.name);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_op),
      cmocka_unit_test(test_tcopy_sources),
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_plans_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
