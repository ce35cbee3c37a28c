/* test_train.c — the runtime on the CPU (include/fourbit_train.h): data, gradients, training, checkpoints.
 *
 *   markov       the entropy rate is the plug-in estimate from a long sample (stationary weighting and
 *                sampling agree); a one-successor chain has rate 0; batches are a pure function of the step.
 *   gradcheck    every parameter tensor of every layer of the BF16 recipe (exact mode: FP32, no rounding):
 *                central differences along the gradient direction and on the largest elements.
 *   ste          the tiny recipe's quantized backward (NVFP4 forward, MXFP8 SR backward, S2F6 combine) points the
 *                same way as the exact gradient at the same weights (cosine per tensor).
 *   loss_falls   the tiny recipe at its own size: the loss falls by more than 1 nat in 24 steps.
 *   determinism  two runs with one seed: identical losses, gradient norms and masters, bit for bit.
 *   resume       4 steps + checkpoint + load into a fresh trainer + 4 steps == 8 steps, bit for bit (stats,
 *                masters, and the checkpoint files themselves).
 *   ckpt_errors  a flipped byte, a truncated file, another seed, another recipe: refused with the reason.
 *   ckpt_whole   a checkpoint refused late in its parse (trailing bytes under a valid checksum) leaves the trainer
 *                as it was (step, masters); the same bytes from memory (fb_train_load_buffer) load like the file.
 *   skip         a non-finite loss skips the update (the masters stay as they were). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fourbit_train.h"

static const fb_model MICRO = {4, 64, 32, 4, 2, 64, 0};

static fb_trainer *make(const char *recipe, const fb_model *over, int steps, int tokens, int seq, int exact) {
  fb_recipe *r = NULL;
  fb_status s = fb_train_recipe_load(recipe, over, &r);
  if (s != FB_OK) print_message("%s\n", fb_errmsg());
  assert_int_equal(s, FB_OK);
  fb_train_opts o;
  fb_train_opts_default(&o, steps, tokens, 1234);
  o.seq_len = seq, o.exact = exact;
  fb_trainer *t = NULL;
  s = fb_train_create(r, &o, NULL, &t);
  if (s != FB_OK) print_message("%s\n", fb_errmsg());
  assert_int_equal(s, FB_OK);
  fb_recipe_free(r);
  return t;
}

/* ---- data ------------------------------------------------------------------------------------------ */
static void test_markov(void **st) {
  (void)st;
  fb_markov *m = NULL;
  assert_int_equal(fb_markov_create(16, 4, 99, &m), FB_OK);
  double H = fb_markov_entropy_rate(m);
  assert_true(H > 0.3 && H < log(4.0));
  /* plug-in estimate of the conditional entropy from 256 x 1024 tokens */
  int nseq = 256, len = 1024;
  int32_t *tok = malloc((size_t)nseq * (len + 1) * sizeof *tok);
  static double cnt[16][16];
  memset(cnt, 0, sizeof cnt);
  for (uint32_t step = 0; step < 2; ++step) {
    fb_markov_batch(m, step, nseq, len, tok);
    for (int b = 0; b < nseq; ++b)
      for (int j = 0; j < len; ++j) cnt[tok[b * (len + 1) + j]][tok[b * (len + 1) + j + 1]] += 1;
  }
  double N = 2.0 * nseq * len, est = 0;
  for (int i = 0; i < 16; ++i) {
    double ni = 0;
    for (int k = 0; k < 16; ++k) ni += cnt[i][k];
    for (int k = 0; k < 16; ++k)
      if (cnt[i][k] > 0) est -= cnt[i][k] / N * log(cnt[i][k] / ni);
  }
  print_message("    entropy rate %.5f, plug-in estimate from %.0f tokens %.5f\n", H, N, est);
  assert_true(fabs(est - H) < 0.01);
  /* batches: a function of the step */
  int32_t *a = malloc(8 * 33 * sizeof *a), *b = malloc(8 * 33 * sizeof *b);
  fb_markov_batch(m, 5, 8, 32, a);
  fb_markov_batch(m, 5, 8, 32, b);
  assert_memory_equal(a, b, 8 * 33 * sizeof *a);
  fb_markov_batch(m, 6, 8, 32, b);
  assert_true(memcmp(a, b, 8 * 33 * sizeof *a) != 0);
  fb_markov_free(m);
  assert_int_equal(fb_markov_create(16, 1, 99, &m), FB_OK); /* a cycle: nothing to predict */
  assert_true(fb_markov_entropy_rate(m) == 0.0);
  fb_markov_free(m);
  assert_int_equal(fb_markov_create(16, 17, 99, &m), FB_EINVAL);
  free(tok), free(a), free(b);
}

/* ---- gradients ------------------------------------------------------------------------------------- */
static double loss_at(fb_trainer *t, uint32_t step) {
  double l;
  assert_int_equal(fb_train_loss_grad(t, step, 0, &l), FB_OK);
  return l;
}

static void test_gradcheck(void **st) {
  (void)st;
  fb_model over = {2, 32, 32, 4, 2, 32, 0};
  fb_trainer *t = make("recipes/bf16.lua", &over, 10, 32, 8, 1);
  double l0;
  assert_int_equal(fb_train_loss_grad(t, 3, 1, &l0), FB_OK);
  int np = fb_train_nparams(t), bad = 0;
  const double steps[] = {1e-2, 3e-3, 1e-3, 3e-4, 1e-4};
  for (int i = 0; i < np; ++i) {
    fb_param_view p = fb_train_param(t, i);
    float *g = malloc(p.n * sizeof *g), *w0 = malloc(p.n * sizeof *w0);
    memcpy(g, p.g, p.n * sizeof *g);
    memcpy(w0, p.w, p.n * sizeof *w0);
    double gg = 0;
    for (size_t k = 0; k < p.n; ++k) gg += (double)g[k] * g[k];
    assert_true(gg > 0);
    /* along the gradient: (L(w + e g) - L(w - e g)) / 2e == |g|^2. The router's top-k selection is piecewise
     * constant, so a step may cross a boundary: the best of a few step sizes counts. */
    double best = INFINITY;
    for (size_t si = 0; si < sizeof steps / sizeof *steps && best > 2e-3; ++si) {
      double e = steps[si] / sqrt(gg);
      for (size_t k = 0; k < p.n; ++k) p.w[k] = w0[k] + (float)(e * g[k]);
      double lp = loss_at(t, 3);
      for (size_t k = 0; k < p.n; ++k) p.w[k] = w0[k] - (float)(e * g[k]);
      double lm = loss_at(t, 3);
      memcpy(p.w, w0, p.n * sizeof *w0);
      double rel = fabs((lp - lm) / (2 * e) - gg) / gg;
      if (rel < best) best = rel;
    }
    /* the two largest elements, one by one */
    double ebest = 0;
    for (int pick = 0; pick < 2; ++pick) {
      size_t kmax = 0;
      for (size_t k = 0; k < p.n; ++k)
        if (fabsf(g[k]) > fabsf(g[kmax])) kmax = k;
      double eb = INFINITY;
      for (size_t si = 0; si < sizeof steps / sizeof *steps && eb > 1e-2; ++si) {
        double e = steps[si] * (fabs((double)w0[kmax]) > 0.1 ? fabs((double)w0[kmax]) : 0.1);
        p.w[kmax] = (float)(w0[kmax] + e);
        double de = (double)p.w[kmax] - w0[kmax];
        double lp = loss_at(t, 3);
        p.w[kmax] = (float)(w0[kmax] - e);
        double dm = w0[kmax] - (double)p.w[kmax];
        double lm = loss_at(t, 3);
        p.w[kmax] = w0[kmax];
        double fd = (lp - lm) / (de + dm);
        double rel = fabs(fd - g[kmax]) / (fabs(g[kmax]) + 1e-4);
        if (rel < eb) eb = rel;
      }
      if (eb > ebest) ebest = eb;
      g[kmax] = 0; /* the next largest */
    }
    print_message("    %-16s %6zu values  |g| %.3e  direction rel err %.1e  elements rel err %.1e\n", p.name, p.n,
                  sqrt(gg), best, ebest);
    bad += best > 2e-3 || ebest > 1e-2;
    free(g), free(w0);
  }
  assert_int_equal(bad, 0);
  fb_train_free(t);
}

static void test_ste(void **st) {
  (void)st;
  fb_trainer *q = make("recipes/tiny.lua", &MICRO, 10, 64, 32, 0), *x = make("recipes/tiny.lua", &MICRO, 10, 64, 32, 1);
  double lq, lx;
  assert_int_equal(fb_train_loss_grad(q, 0, 1, &lq), FB_OK);
  assert_int_equal(fb_train_loss_grad(x, 0, 1, &lx), FB_OK);
  print_message("    loss: recipe %.5f, exact %.5f\n", lq, lx);
  assert_true(fabs(lq - lx) < 0.05);
  int low = 0;
  for (int i = 0; i < fb_train_nparams(q); ++i) {
    fb_param_view a = fb_train_param(q, i), b = fb_train_param(x, i);
    double ab = 0, aa = 0, bb = 0;
    for (size_t k = 0; k < a.n; ++k) ab += (double)a.g[k] * b.g[k], aa += (double)a.g[k] * a.g[k], bb += (double)b.g[k] * b.g[k];
    double cosv = ab / sqrt(aa * bb);
    if (strstr(a.name, "w13") || strstr(a.name, "w2") || strstr(a.name, "router"))
      print_message("    %-16s cosine(quantized, exact gradient) %.4f\n", a.name, cosv);
    low += !(cosv > 0.9);
  }
  assert_int_equal(low, 0);
  fb_train_free(q), fb_train_free(x);
}

/* ---- training -------------------------------------------------------------------------------------- */
static void test_loss_falls(void **st) {
  (void)st;
  fb_trainer *t = make("recipes/tiny.lua", NULL, 24, 128, 32, 0);
  double first = 0, last = 0;
  for (int s = 0; s < 24; ++s) {
    fb_step_stats ss;
    assert_int_equal(fb_train_step(t, &ss), FB_OK);
    assert_int_equal(ss.skipped, 0);
    if (s < 4) first += ss.loss / 4;
    if (s >= 20) last += ss.loss / 4;
  }
  print_message("    tiny (6 layers, 8 experts, d_model 128): loss %.3f (steps 1-4) -> %.3f (steps 21-24), floor %.3f\n",
                first, last, fb_train_floor(t));
  assert_true(last < first - 1.0);
  fb_train_free(t);
}

static void run_steps(fb_trainer *t, int n, fb_step_stats *out) {
  for (int s = 0; s < n; ++s) assert_int_equal(fb_train_step(t, &out[s]), FB_OK);
}

static void same_masters(fb_trainer *a, fb_trainer *b) {
  for (int i = 0; i < fb_train_nparams(a); ++i) {
    fb_param_view p = fb_train_param(a, i), q = fb_train_param(b, i);
    assert_int_equal(p.n, q.n);
    assert_memory_equal(p.w, q.w, p.n * sizeof *p.w);
  }
}

static void same_stats(const fb_step_stats *a, const fb_step_stats *b) {
  assert_int_equal(a->step, b->step);
  assert_memory_equal(&a->loss, &b->loss, sizeof a->loss);
  assert_memory_equal(&a->aux, &b->aux, sizeof a->aux);
  assert_memory_equal(&a->grad_norm, &b->grad_norm, sizeof a->grad_norm);
}

static void test_determinism(void **st) {
  (void)st;
  fb_trainer *a = make("recipes/tiny.lua", &MICRO, 6, 64, 32, 0), *b = make("recipes/tiny.lua", &MICRO, 6, 64, 32, 0);
  fb_step_stats sa[6], sb[6];
  run_steps(a, 6, sa);
  run_steps(b, 6, sb);
  for (int i = 0; i < 6; ++i) same_stats(&sa[i], &sb[i]);
  same_masters(a, b);
  fb_train_free(a), fb_train_free(b);
}

static int files_equal(const char *x, const char *y) {
  FILE *f = fopen(x, "rb"), *g = fopen(y, "rb");
  int eq = f && g;
  while (eq) {
    int c = fgetc(f), d = fgetc(g);
    if (c != d) eq = 0;
    if (c == EOF || d == EOF) break;
  }
  if (f) fclose(f);
  if (g) fclose(g);
  return eq;
}

static char g_dir[64];
static void path_in(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_dir, name); }

static void test_resume(void **st) {
  (void)st;
  char full[128], half[128];
  path_in(full, sizeof full, "full.ckpt");
  path_in(half, sizeof half, "half.ckpt");
  fb_trainer *a = make("recipes/tiny.lua", &MICRO, 8, 64, 32, 0);
  fb_step_stats sa[8], sb[8];
  run_steps(a, 8, sa);
  assert_int_equal(fb_train_save(a, full), FB_OK);
  fb_trainer *b = make("recipes/tiny.lua", &MICRO, 8, 64, 32, 0);
  run_steps(b, 4, sb);
  assert_int_equal(fb_train_save(b, half), FB_OK);
  fb_train_free(b);
  fb_trainer *c = make("recipes/tiny.lua", &MICRO, 8, 64, 32, 0);
  assert_int_equal(fb_train_load(c, half), FB_OK);
  assert_int_equal(fb_train_step_index(c), 4);
  run_steps(c, 4, sb + 4);
  for (int i = 4; i < 8; ++i) same_stats(&sa[i], &sb[i]);
  same_masters(a, c);
  assert_int_equal(fb_train_save(c, half), FB_OK);
  assert_true(files_equal(full, half));
  fb_train_free(a), fb_train_free(c);
}

static void test_ckpt_errors(void **st) {
  (void)st;
  char p[128], bad[128];
  path_in(p, sizeof p, "e.ckpt");
  path_in(bad, sizeof bad, "bad.ckpt");
  fb_trainer *a = make("recipes/tiny.lua", &MICRO, 8, 64, 32, 0);
  fb_step_stats s1;
  assert_int_equal(fb_train_step(a, &s1), FB_OK);
  assert_int_equal(fb_train_save(a, p), FB_OK);
  FILE *f = fopen(p, "rb");
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = malloc((size_t)n);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  buf[n / 2] ^= 1; /* a flipped bit */
  f = fopen(bad, "wb");
  fwrite(buf, 1, (size_t)n, f);
  fclose(f);
  fb_trainer *b = make("recipes/tiny.lua", &MICRO, 8, 64, 32, 0);
  assert_int_equal(fb_train_load(b, bad), FB_EINVAL);
  assert_non_null(strstr(fb_errmsg(), "checksum"));
  buf[n / 2] ^= 1;
  f = fopen(bad, "wb");
  fwrite(buf, 1, (size_t)n - 100, f); /* truncated */
  fclose(f);
  assert_int_equal(fb_train_load(b, bad), FB_EINVAL);
  fb_train_free(b);
  /* another seed */
  fb_recipe *r;
  assert_int_equal(fb_train_recipe_load("recipes/tiny.lua", &MICRO, &r), FB_OK);
  fb_train_opts o;
  fb_train_opts_default(&o, 8, 64, 1235);
  assert_int_equal(fb_train_create(r, &o, NULL, &b), FB_OK);
  assert_int_equal(fb_train_load(b, p), FB_EINVAL);
  assert_non_null(strstr(fb_errmsg(), "seed"));
  fb_train_free(b);
  fb_recipe_free(r);
  /* another recipe */
  b = make("recipes/bf16.lua", &MICRO, 8, 64, 32, 0);
  assert_int_equal(fb_train_load(b, p), FB_EINVAL);
  assert_non_null(strstr(fb_errmsg(), "recipe"));
  fb_train_free(b);
  fb_train_free(a);
  free(buf);
}

static void test_ckpt_whole(void **st) {
  (void)st;
  char p[128], bad[128];
  path_in(p, sizeof p, "w.ckpt");
  path_in(bad, sizeof bad, "w_bad.ckpt");
  fb_trainer *a = make("recipes/tiny.lua", &MICRO, 8, 64, 32, 0);
  fb_step_stats s1;
  assert_int_equal(fb_train_step(a, &s1), FB_OK);
  assert_int_equal(fb_train_save(a, p), FB_OK);
  FILE *f = fopen(p, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  size_t n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = malloc(n + 4);
  assert_int_equal(fread(buf, 1, n, f), n);
  fclose(f);
  /* 4 bytes more before the checksum, and the checksum of the longer body: every tensor parses, then the end is wrong */
  unsigned char *lng = malloc(n + 4);
  memcpy(lng, buf, n - 32);
  memset(lng + n - 32, 0, 4);
  fb_sha256(lng, n - 28, lng + n - 28);
  f = fopen(bad, "wb");
  assert_int_equal(fwrite(lng, 1, n + 4, f), n + 4);
  fclose(f);
  fb_trainer *b = make("recipes/tiny.lua", &MICRO, 8, 64, 32, 0);
  int np = fb_train_nparams(b);
  float **w0 = calloc((size_t)np, sizeof *w0);
  for (int i = 0; i < np; ++i) {
    fb_param_view v = fb_train_param(b, i);
    w0[i] = malloc(v.n * sizeof *w0[i]);
    memcpy(w0[i], v.w, v.n * sizeof *w0[i]);
  }
  assert_int_equal(fb_train_load(b, bad), FB_EINVAL);
  assert_non_null(strstr(fb_errmsg(), "trailing"));
  assert_int_equal(fb_train_step_index(b), 0);
  for (int i = 0; i < np; ++i) {
    fb_param_view v = fb_train_param(b, i);
    assert_memory_equal(w0[i], v.w, v.n * sizeof *w0[i]);
  }
  assert_int_equal(fb_train_load_buffer(b, buf, n, "mem"), FB_OK);
  assert_int_equal(fb_train_step_index(b), 1);
  same_masters(a, b);
  for (int i = 0; i < np; ++i) free(w0[i]);
  free(w0), free(buf), free(lng);
  fb_train_free(a), fb_train_free(b);
}

static void test_skip(void **st) {
  (void)st;
  fb_trainer *a = make("recipes/tiny.lua", &MICRO, 8, 64, 32, 0);
  fb_param_view head = fb_train_param(a, 2);
  head.w[5] = NAN;
  fb_param_view emb = fb_train_param(a, 0);
  float *before = malloc(emb.n * sizeof *before);
  memcpy(before, emb.w, emb.n * sizeof *before);
  fb_step_stats s;
  assert_int_equal(fb_train_step(a, &s), FB_OK);
  assert_int_equal(s.skipped, 1);
  assert_int_equal(fb_train_step_index(a), 1);
  assert_memory_equal(before, emb.w, emb.n * sizeof *before);
  free(before);
  fb_train_free(a);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/fourbit_test_train.XXXXXX");
  if (!mkdtemp(g_dir)) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_markov),      cmocka_unit_test(test_gradcheck), cmocka_unit_test(test_ste),
      cmocka_unit_test(test_loss_falls),  cmocka_unit_test(test_determinism), cmocka_unit_test(test_resume),
      cmocka_unit_test(test_ckpt_errors), cmocka_unit_test(test_ckpt_whole), cmocka_unit_test(test_skip),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) rc = rc ? rc : 1;
  return rc;
}
