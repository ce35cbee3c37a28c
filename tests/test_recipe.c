/* test_recipe.c — the recipe loader, its sandbox and the plan, through the C API.
 * (Every class of bad recipe through the CLI: tests/test_recipes_bad.sh; the golden plans of the shipped
 * recipes: tests/test_golden.sh; the fuzzer: tests/fuzz/.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fourbit.h"

static fb_recipe *load_ok(const char *path) {
  fb_recipe *r = NULL;
  fb_status s = fb_recipe_load(path, &r);
  if (s != FB_OK) fprintf(stderr, "%s: %s\n", path, fb_errmsg());
  assert_int_equal(s, FB_OK);
  assert_non_null(r);
  return r;
}

/* Load text as a recipe named t.lua (includes resolve in recipes/); returns the status. */
static fb_status load_text(const char *text, fb_recipe **r) {
  *r = NULL;
  return fb_recipe_load_buffer(text, strlen(text), "t.lua", "recipes", r);
}

static void expect_error(const char *text, const char *substr) {
  fb_recipe *r;
  fb_status s = load_text(text, &r);
  if (s == FB_OK || !strstr(fb_errmsg(), substr))
    fprintf(stderr, "recipe:\n%s\nstatus %s, message: %s\nexpected a message with: %s\n", text, fb_status_name(s),
            fb_errmsg(), substr);
  assert_int_not_equal(s, FB_OK);
  assert_null(r);
  assert_non_null(strstr(fb_errmsg(), substr));
}

#define MINI_MODEL "model = { layers = 6, d_model = 128, d_ff = 64, experts = 8, top_k = 2, vocab = 256 }, "
#define MINI_EXPERTS "experts = { fwd = nvfp4 {}, bwd = mxfp8 {}, combine = s2f6 { rht = 32 } }, "

static void test_inkling_layers(void **state) {
  (void)state;
  fb_recipe *r = load_ok("recipes/inkling2_small.lua");
  assert_string_equal(r->name, "inkling2_small");
  assert_int_equal(r->model.layers, 48);
  assert_int_equal(r->model.d_model, 5120);
  assert_int_equal(r->model.experts, 384);
  assert_int_equal(r->model.top_k, 8);
  assert_int_equal(r->ep, 8);
  for (int l = 1; l <= 48; ++l) {
    fb_layer_prec p;
    fb_recipe_layer(r, l, &p);
    fb_format want = l <= 40 ? FB_FMT_NVFP4 : FB_FMT_MXFP8; /* last_fraction(1/6) of 48 = 41..48 */
    assert_int_equal(p.fwd_act.format, want);
    assert_int_equal(p.fwd_weight.format, want);
    assert_int_equal(p.dispatch, want); /* dispatch = "fwd" */
    assert_int_equal(p.bwd_grad.format, FB_FMT_MXFP8);
    assert_int_equal(p.bwd_grad.rounding, FB_ROUND_SR);
    assert_int_equal(p.bwd_saved.rounding, FB_ROUND_SR);
    assert_int_equal(p.combine.format, FB_FMT_S2F6);
    assert_int_equal(p.combine.rht, 32);
    if (want == FB_FMT_NVFP4) {
      assert_int_equal(p.fwd_act.outer, FB_GRAN_TOKEN);
      assert_true(p.fwd_act.four_over_six);
      assert_int_equal(p.fwd_weight.outer, FB_GRAN_EXPERT);
      assert_false(p.fwd_weight.four_over_six);
    }
  }
  fb_recipe_free(r);
}

static void test_derived_recipes(void **state) {
  (void)state;
  fb_recipe *ink = load_ok("recipes/inkling2_small.lua");
  fb_recipe *tiny = load_ok("recipes/tiny.lua");
  fb_layer_prec p, q;
  assert_int_equal(tiny->model.layers, 6);
  assert_int_equal(tiny->model.vocab, 256);
  for (int l = 1; l <= 6; ++l) { /* the same precision: layer 6 is the last sixth */
    fb_recipe_layer(tiny, l, &p);
    fb_recipe_layer(ink, l == 6 ? 48 : 1, &q);
    assert_memory_equal(&p, &q, sizeof p);
  }
  assert_int_equal(tiny->families[0].nvariants, ink->families[0].nvariants); /* tune inherited */
  fb_recipe *nv = load_ok("recipes/nvidia_nvfp4.lua");
  for (int l = 1; l <= 48; ++l) {
    fb_recipe_layer(nv, l, &p);
    if (l >= 42) { /* round(0.15 * 48) = 7 layers */
      assert_int_equal(p.fwd_act.format, FB_FMT_BF16);
      assert_int_equal(p.bwd_grad.format, FB_FMT_BF16);
    } else {
      assert_int_equal(p.fwd_act.format, FB_FMT_NVFP4);
      assert_int_equal(p.fwd_act.outer, FB_GRAN_TENSOR);
      assert_true(p.fwd_weight.two_d);
      assert_int_equal(p.bwd_grad.format, FB_FMT_NVFP4);
      assert_int_equal(p.bwd_grad.rounding, FB_ROUND_SR);
      assert_int_equal(p.wgrad_rht, 16);
    }
    assert_int_equal(p.dispatch, FB_FMT_BF16);
    assert_int_equal(p.combine.format, FB_FMT_BF16);
  }
  fb_recipe *bf = load_ok("recipes/bf16.lua"), *mx = load_ok("recipes/mxfp8.lua");
  fb_recipe_layer(bf, 48, &p);
  assert_int_equal(p.fwd_act.format, FB_FMT_BF16);
  assert_int_equal(p.bwd_grad.format, FB_FMT_BF16);
  fb_recipe_layer(mx, 1, &p);
  assert_int_equal(p.fwd_act.format, FB_FMT_MXFP8);
  assert_int_equal(p.bwd_grad.format, FB_FMT_MXFP8);
  assert_int_equal(bf->nrules, 0);
  fb_recipe_free(ink), fb_recipe_free(tiny), fb_recipe_free(nv), fb_recipe_free(bf), fb_recipe_free(mx);
}

/* The keep() predicate of inkling2_small evaluated here in C must leave the same variants. */
static void test_tune_keep(void **state) {
  (void)state;
  fb_recipe *r = load_ok("recipes/inkling2_small.lua");
  const fb_tune_family *g = &r->families[0];
  assert_string_equal(g->family, "gemm");
  assert_int_equal(g->nparams, 10); /* the loader's order: tile_m tile_n tile_k stages cluster consumers weights_bf16 pipe mma_k
                                      pingpong */
  int tm[] = {64, 128, 256}, tn[] = {128, 192, 256}, tk[] = {64, 128, 768}, st[] = {2, 3, 4, 5, 6};
  int n = 0, n96 = 0;
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 3; ++c)
        for (int d = 0; d < 5; ++d)
          for (int cl = 1; cl <= 2; ++cl)
            for (int co = 1; co <= 2; ++co)
              for (int wi = 0; wi <= 1; ++wi)       /* weights_bf16 { true, false }: BF16 products the default */
                for (int pp = 0; pp <= 2; pp += 2)  /* pipe {0, 2} */
                  for (int mk = 0; mk <= 96; mk += 96)   /* mma_k {0, 96} */
                  for (int po = 0; po <= 1; ++po) {      /* pingpong {0, 1} */
                    const int wb = 1 - wi;
                    /* keep(): tile_k 768 and mma_k 96 only together, with 2 stages, on one CTA (tile_m 128) or the
                       pair (256, cluster 2), consumers 1, weights_bf16, pipe 0; else 2 stages for tiles of at least
                       128 x 256 only; the rest within the shared memory rule */
                    if (mk == 96 || tk[c] == 768) {
                      if (!(mk == 96 && tk[c] == 768 && st[d] == 2 && tm[a] == 128 * cl && co == 1 && wb && pp == 0 && po == 0)) continue;
                      ++n96;
                    } else if (st[d] == 2) {
                      if (tm[a] * tn[b] < 128 * 256) continue;
                    } else if (tm[a] * tn[b] * st[d] > 256 * 256 * 5)
                      continue;
                    const int *v = &g->values[(size_t)n * g->nparams];
                    assert_int_equal(v[0], tm[a]);
                    assert_int_equal(v[1], tn[b]);
                    assert_int_equal(v[2], tk[c]);
                    assert_int_equal(v[3], st[d]);
                    assert_int_equal(v[4], cl);
                    assert_int_equal(v[5], co);
                    assert_int_equal(v[6], wb);
                    assert_int_equal(v[7], pp);
                    assert_int_equal(v[8], mk);
                    assert_int_equal(v[9], po);
                    ++n;
                  }
  assert_int_equal(g->nvariants, n);
  assert_int_equal(n96, 6); /* tile_n 128, 192, 256 on one CTA and on the pair (the generator prunes what does not fit) */
  printf("  inkling2_small gemm: %d of 8640 variants kept by keep() (%d with mma_k 96)\n", n, n96);
  /* families the recipe leaves out take the defaults */
  for (int i = 0; i < r->nfamilies; ++i) assert_true(r->families[i].nvariants > 0);
  fb_recipe_free(r);
}

static void test_sandbox(void **state) {
  (void)state;
  expect_error("return io.open('x')", "undefined global 'io'");
  expect_error("os.exit(1)", "undefined global 'os'");
  expect_error("local m = require('x')", "undefined global 'require'");
  expect_error("dofile('x')", "undefined global 'dofile'");
  expect_error("debug.traceback()", "undefined global 'debug'");
  expect_error("x = 1", "assignment to global 'x'");
  expect_error("return string.dump(print)", "field 'dump'");
  expect_error("local f, e = load('\\27Lua\\x54\\0'); assert(f, e)", "attempt to load a binary chunk");
  { /* unbounded recursion: Lua's stack overflow or the memory limit, whichever comes first */
    fb_recipe *r;
    assert_int_not_equal(load_text("local function f() return f() + 1 end return f()", &r), FB_OK);
    assert_true(strstr(fb_errmsg(), "stack overflow") || strstr(fb_errmsg(), "t.lua: not enough memory"));
  }
  expect_error("error('custom failure')", "t.lua:1: custom failure");
  expect_error("return nil", "must return recipe");
  expect_error("return 42", "must return recipe");
  clock_t t0 = clock();
  expect_error("while true do end", "instruction limit");
  double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
  printf("  an infinite loop stopped after %.2f s of CPU\n", secs);
  assert_true(secs < 10);
  t0 = clock();
  expect_error("local s = 'x' while true do s = s .. s end", "not enough memory");
  printf("  a memory bomb stopped after %.2f s of CPU\n", (double)(clock() - t0) / CLOCKS_PER_SEC);
  expect_error("return include '../recipes/tiny.lua'", "only a .lua file beside the recipe");
  expect_error("return include 'missing.lua'", "cannot read recipes/missing.lua");
  /* load is text-only but works */
  fb_recipe *r;
  assert_int_equal(load_text("local f = load('return 6') return recipe { name = 'ok', " MINI_MODEL MINI_EXPERTS
                             " seed = f() }", &r), FB_OK);
  assert_int_equal(r->seed, 6);
  fb_recipe_free(r);
}

/* The library functions the sandbox replaces (string.find, string.rep, table.insert/remove/move: see recipes/loader.c
 * "Time limits") keep Lua's results; a limit fired once cannot be swallowed by pcall. */
static void test_sandbox_library(void **state) {
  (void)state;
  fb_recipe *r;
  fb_status s = load_text(
      "local t = { 1, 2, 3 }\n"
      "table.insert(t, 4) table.insert(t, 1, 0)\n"
      "assert(table.remove(t, 2) == 1 and table.remove(t) == 4 and table.concat(t, ',') == '0,2,3')\n"
      "table.move(t, 1, 3, 2) assert(table.concat(t, ',') == '0,0,2,3')\n"
      "table.move(t, 2, 4, 1) assert(table.concat(t, ',') == '0,2,3,3')\n"
      "local u = table.move(t, 1, 2, 3, {}) assert(u[3] == 0 and u[4] == 2 and u[1] == nil)\n"
      "assert(table.remove({}) == nil and select('#', table.remove({})) == 1)\n"
      "assert(not pcall(table.insert, {}, 5, 1) and not pcall(table.insert, {}, 1, 2, 3))\n"
      "local a, b = string.find('hello world', 'o w') assert(a == 5 and b == 7)\n"
      "a, b = string.find('abc', '', 4) assert(a == 4 and b == 3)\n"
      "assert(string.find('abc', 'c', -1) == 3 and string.find('abc', 'a', -10) == 1)\n"
      "assert(string.find('abc', 'x') == nil and string.find('abc', 'a', 5) == nil and ('a.b'):find('.', 1) == 2)\n"
      "assert(string.rep('ab', 3, '-') == 'ab-ab-ab' and string.rep('', 1 << 62) == '' and ('x'):rep(0) == '')\n"
      "assert(string.rep('', 3, ',') == ',,')\n"
      "assert(not pcall(setmetatable, {}, { __gc = true }) and getmetatable(setmetatable({}, { __index = {} })))\n"
      "return recipe { name = 'lib', " MINI_MODEL MINI_EXPERTS " seed = #t }", &r);
  if (s != FB_OK) fprintf(stderr, "%s\n", fb_errmsg());
  assert_int_equal(s, FB_OK);
  assert_int_equal(r->seed, 4);
  fb_recipe_free(r);
  expect_error("for i = 1, 1e5 do pcall(function() while true do end end) end", "t.lua:1: instruction limit");
  expect_error("error('other.lua:7: forged', 0)", "t.lua:1: other.lua:7: forged");
}

static void test_messages_name_line_and_path(void **state) {
  (void)state;
  expect_error("return recipe {\n name = 'x',\n " MINI_MODEL "\n experts = {\n  fwd = nvfp4 { act = { four_over_sx = true } },\n"
               "  bwd = 'mxfp8', combine = 'bf16' } }",
               "t.lua:5: experts.fwd.act: unknown key 'four_over_sx' (did you mean 'four_over_six'?)");
  expect_error("return recipe { name = 'x', " MINI_MODEL MINI_EXPERTS
               " layers = { { range = last(2), fwd = 'bf16' },\n { range = range(5, 5), bwd = 'bf16' } } }",
               "t.lua:2: layers[2].range: layers 5..5 overlap layers[1] (5..6");
  expect_error("return recipe { name = 'x', model = { layers = 6, d_model = 128, d_ff = 64, experts = 8, top_k = 9, vocab = 2 }, "
               MINI_EXPERTS "}", "model.top_k: 9 is more than experts (8)");
  expect_error("return recipe { name = 'x', model = { layers = 6, d_model = 1/0, d_ff = 64, experts = 8, top_k = 2, vocab = 2 }, "
               MINI_EXPERTS "}", "model.d_model: inf is not finite");
  expect_error("return recipe { name = 'x', " MINI_MODEL
               "experts = { fwd = nvfp4 {}, bwd = mxfp8 {}, dispatch = nvfp4 {}, combine = 'bf16' },"
               " layers = { { range = last(1), fwd = mxfp8 {} } } }",
               "layers[1].dispatch: layer 6 sends nvfp4 tokens to a mxfp8 forward");
}

static void test_extend(void **state) {
  (void)state;
  fb_recipe *r;
  /* model merges key by key; an op given with a format replaces the whole op */
  fb_status s = load_text("local b = include 'inkling2_small.lua'\n"
                          "return recipe(extend(b, { name = 'e', model = { layers = 12 },\n"
                          "  experts = { fwd = nvfp4 { act = { outer = 'tensor' } } } }))", &r);
  if (s) fprintf(stderr, "%s\n", fb_errmsg());
  assert_int_equal(s, FB_OK);
  assert_int_equal(r->model.layers, 12);
  assert_int_equal(r->model.d_model, 5120);
  fb_layer_prec p;
  fb_recipe_layer(r, 1, &p);
  assert_int_equal(p.fwd_act.outer, FB_GRAN_TENSOR);
  assert_false(p.fwd_act.four_over_six); /* replaced whole, not merged */
  assert_int_equal(p.fwd_weight.outer, FB_GRAN_EXPERT); /* the default for weights */
  fb_recipe_layer(r, 11, &p); /* last_fraction(1/6) of 12 = 11..12 */
  assert_int_equal(p.fwd_act.format, FB_FMT_MXFP8);
  fb_recipe_layer(r, 10, &p);
  assert_int_equal(p.fwd_act.format, FB_FMT_NVFP4);
  fb_recipe_free(r);
}

static void test_plan(void **state) {
  (void)state;
  fb_recipe *r = load_ok("recipes/inkling2_small.lua");
  fb_plan *p = NULL;
  assert_int_equal(fb_plan_resolve(r, "sm_90a", &p), FB_OK);
  assert_int_equal(p->nlayers, 48);
  int gemms = 0;
  for (int i = 0; i < p->nkernels; ++i) {
    const char *n = p->kernels[i].name;
    assert_non_null(strstr(n, "_sm90a"));
    for (int j = 0; j < i; ++j) assert_string_not_equal(n, p->kernels[j].name);
    if (!strncmp(n, "gemm_", 5)) ++gemms;
    assert_true(p->kernels[i].nlayers >= 1 && p->kernels[i].nlayers <= 48);
  }
  /* 2 forward GEMMs x 2 forward formats + 3 backward GEMMs in one format */
  assert_int_equal(gemms, 7);
  int found = 0;
  for (int i = 0; i < p->nkernels; ++i)
    if (!strcmp(p->kernels[i].name, "gemm_fwd_nvfp4xnvfp4_bf16_swiglu_sm90a")) {
      found = 1;
      assert_int_equal(p->kernels[i].nlayers, 40);
      assert_int_equal(p->kernels[i].first_layer, 1);
      assert_int_equal(p->kernels[i].last_layer, 40);
    }
  assert_true(found);
  char sha[65];
  snprintf(sha, sizeof sha, "%s", p->sha256);
  fb_plan_free(p);
  assert_int_equal(fb_plan_resolve(r, "sm_100a", &p), FB_OK);
  assert_non_null(strstr(p->kernels[0].name, "_sm100a"));
  assert_string_not_equal(sha, p->sha256);
  fb_plan_free(p);
  assert_int_equal(fb_plan_resolve(r, "sm_80", &p), FB_EINVAL);
  /* wire: 4.5 bits per value + a 32-bit outer scale per token; S2F6 8.25 bits */
  assert_true(fb_plan_wire_bits(FB_FMT_NVFP4, 5120, 1) == 5120 * 4.5 + 32);
  assert_true(fb_plan_wire_bits(FB_FMT_S2F6, 5120, 0) == 5120 * 8.25);
  assert_true(fb_plan_wire_bits(FB_FMT_BF16, 5120, 0) == 5120 * 16);
  fb_recipe_free(r);
}

int main(void) {
  alarm(300); /* a sandbox limit that does not hold hangs a test: then SIGALRM fails the run instead of blocking it */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_inkling_layers), cmocka_unit_test(test_derived_recipes),
      cmocka_unit_test(test_tune_keep),      cmocka_unit_test(test_sandbox), cmocka_unit_test(test_sandbox_library),
      cmocka_unit_test(test_messages_name_line_and_path), cmocka_unit_test(test_extend),
      cmocka_unit_test(test_plan),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
