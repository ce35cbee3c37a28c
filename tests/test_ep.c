/* test_ep.c — expert parallelism on the CPU (runtime/comm.c, model_experts.c "EP", model.c, train.c): N ranks as
 * N forked processes over the launcher's socket mesh, against one rank in this process, on the tiny recipe
 * (8 experts, 256 tokens = 8 sequences) with one global batch and seed.
 *
 *   comm         alltoallv with uneven counts, allgather, allreduce (rank order, identical bits everywhere),
 *                bcast, a collective whose counts disagree (an error, not corrupt data), a peer that exits.
 *   sr           the recipe as written (MXFP8 SR backward): N = 2, 4.
 *   rn           the same recipe with an RN backward (grad and saved rounding "rn"): N = 2, 4.
 *   exact        FP32, no quantization: N = 2, 4.
 *   nccl         libnccl.so.2 loads by dlopen and makes the launcher's unique id (FOURBIT_NCCL_ID, 256 hex digits);
 *                a device collective before fb_comm_nccl_init is refused. (Nothing more runs without a GPU:
 *                tests/gpu/test_comm.c does on the device.)
 *   grads        one forward and backward at N = 2, 4: each rank's expert gradients equal one rank's bit for bit;
 *                the replicated tensors' gradients within 1e-5 (relative, norm-wise).
 *   sr, rn, exact compare the per-step loss, aux and gradient norm (doubles) and print the largest differences. Step 1's
 *   loss and aux must equal one rank's bit for bit (the forward is per token, the router outputs and per-token
 *   losses are gathered, and SR indices are the one-rank ones). Later steps: the masters differ from one rank's
 *   in low bits because every replicated weight's gradient is a sum over tokens done per rank then over ranks
 *   (FP32, another order: grads, below, measure |d|/|g| ~2.5e-7 at step 1), and AdamW's early updates are
 *   ~lr * sign(g) where g is tiny, so the masters move apart by more than that. Two things are discrete in this
 *   model: the router's top-k (a token whose k-th and (k+1)-th router probabilities are within the difference
 *   picks another expert) and every RN/SR quantizer threshold (a code flips). One flipped routing decision moves
 *   that token's loss by ~0.1 nats, the mean over 256 tokens by ~4e-4 — what the RN backward shows at step 4
 *   with 2 ranks (measured 4.4e-4; the SR run 1.4e-10, no flip by luck). Tolerance on the loss, aux and relative
 *   gradient norm of steps 2-4: quantized modes 2e-3 (about five such flips: a wrong expert layer is off by
 *   0.1-1 nat at step 2), exact mode 1e-6 (measured 1.6e-8: FP32 reassociation, no quantizer; the top-k is
 *   still discrete, so this could flip too, and then the figure says so). Step 1's gradient norm within 1e-6
 *   relative (measured ~1e-9). The (token, expert) rows of the traffic figures equal one rank's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../runtime/comm.h"
#include "fourbit_train.h"

#define STEPS 4

typedef struct {
  double loss[STEPS], aux[STEPS], gn[STEPS];
  double traffic_rows;
} run_out;

static const char *RN_RECIPE =
    "return recipe(extend(include \"tiny.lua\", { name = \"tiny_rn\", experts = { bwd = mxfp8 {\n"
    "  grad = { rounding = \"rn\" }, saved = { rounding = \"rn\" } } } }))\n";

static fb_recipe *load(int rn) {
  fb_recipe *r = NULL;
  fb_status s = rn ? fb_recipe_load_buffer(RN_RECIPE, strlen(RN_RECIPE), "tiny_rn (test)", "recipes", &r)
                   : fb_recipe_load("recipes/tiny.lua", &r);
  if (s != FB_OK) print_message("%s\n", fb_errmsg());
  assert_int_equal(s, FB_OK);
  return r;
}

/* One rank's run (comm NULL) or rank `rank` of comm; 0 ok. */
static int run(int rn, int exact, fb_comm *comm, run_out *out) {
  fb_recipe *r = load(rn);
  fb_train_opts o;
  fb_train_opts_default(&o, 20, r->tokens, 1234);
  o.exact = exact, o.comm = comm;
  fb_trainer *t = NULL;
  if (fb_train_create(r, &o, NULL, &t) != FB_OK) { fprintf(stderr, "%s\n", fb_errmsg()); fb_recipe_free(r); return 1; }
  memset(out, 0, sizeof *out);
  for (int i = 0; i < STEPS; ++i) {
    fb_step_stats st;
    if (fb_train_step(t, &st) != FB_OK) { fprintf(stderr, "%s\n", fb_errmsg()); fb_train_free(t); fb_recipe_free(r); return 1; }
    out->loss[i] = st.loss, out->aux[i] = st.aux, out->gn[i] = st.grad_norm;
    out->traffic_rows += st.traffic.rows;
  }
  fb_train_free(t);
  fb_recipe_free(r);
  return 0;
}

/* n forked ranks over a socket mesh; each runs fn(rank's comm, arg); rank 0's result comes back through a pipe. */
typedef int (*rank_fn)(fb_comm *c, void *arg, void *result, size_t n);
static int ranks(int n, rank_fn fn, void *arg, void *result, size_t rn) {
  int fds[64], pp[2];
  assert_true(n * n <= 64);
  assert_int_equal(fb_comm_mesh_create(n, fds), FB_OK);
  assert_int_equal(pipe(pp), 0);
  pid_t pid[8];
  fflush(stdout), fflush(stderr);
  for (int i = 0; i < n; ++i) {
    pid[i] = fork();
    assert_true(pid[i] >= 0);
    if (pid[i] == 0) {
      char v[16];
      close(pp[0]);
      snprintf(v, sizeof v, "%d", i);
      char w[16];
      snprintf(w, sizeof w, "%d", n);
      fb_comm *c = NULL;
      if (fb_comm_mesh_child(n, i, fds) != FB_OK || setenv("RANK", v, 1) || setenv("WORLD_SIZE", w, 1) ||
          fb_comm_init_env(&c) != FB_OK) {
        fprintf(stderr, "rank %d: %s\n", i, fb_errmsg());
        _exit(3);
      }
      void *res = calloc(1, rn ? rn : 1);
      int rc = fn(c, arg, res, rn);
      if (i == 0 && rc == 0 && write(pp[1], res, rn) != (ssize_t)rn) rc = 4;
      fb_comm_free(c);
      _exit(rc);
    }
  }
  for (int k = 0; k < n * n; ++k)
    if (fds[k] >= 0) close(fds[k]);
  close(pp[1]);
  ssize_t got = read(pp[0], result, rn);
  close(pp[0]);
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    int ws;
    waitpid(pid[i], &ws, 0);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws)) bad = bad ? bad : (WIFEXITED(ws) ? WEXITSTATUS(ws) : 100 + WTERMSIG(ws));
  }
  if (!bad && got != (ssize_t)rn) bad = 5;
  return bad;
}

/* ---- the communicator ---- */
static int comm_body(fb_comm *c, void *arg, void *result, size_t rn) {
  (void)arg, (void)rn;
  int n = fb_comm_size(c), me = fb_comm_rank(c), bad = 0;
  /* alltoallv: rank p sends (p + 1) * (q + 1) bytes of value 16 p + q to rank q */
  size_t sc[8], sd[8], rc_[8], rd[8], so = 0, ro = 0;
  for (int q = 0; q < n; ++q) {
    sc[q] = (size_t)(me + 1) * (size_t)(q + 1), sd[q] = so, so += sc[q];
    rc_[q] = (size_t)(q + 1) * (size_t)(me + 1), rd[q] = ro, ro += rc_[q];
  }
  unsigned char *sb = malloc(so), *rb = malloc(ro);
  for (int q = 0; q < n; ++q) memset(sb + sd[q], 16 * me + q, sc[q]);
  if (fb_comm_alltoallv(c, sb, sc, sd, rb, rc_, rd) != FB_OK) return 10;
  for (int q = 0; q < n; ++q)
    for (size_t k = 0; k < rc_[q]; ++k) bad |= rb[rd[q] + k] != 16 * q + me;
  /* allreduce: values whose sum depends on the order; every rank must hold rank order's bits */
  float x[3] = {1e8f * (me % 2 ? -1.0f : 1.0f), 1.0f + (float)me * 1e-7f, (float)me}, want[3] = {0, 0, 0};
  for (int q = 0; q < n; ++q) {
    float v[3] = {1e8f * (q % 2 ? -1.0f : 1.0f), 1.0f + (float)q * 1e-7f, (float)q};
    for (int j = 0; j < 3; ++j) want[j] = q ? want[j] + v[j] : v[j];
  }
  if (fb_comm_allreduce_f32(c, x, 3) != FB_OK) return 11;
  bad |= memcmp(x, want, sizeof x) != 0;
  int all[8], mine = 100 + me;
  if (fb_comm_allgather(c, &mine, sizeof mine, all) != FB_OK) return 12;
  for (int q = 0; q < n; ++q) bad |= all[q] != 100 + q;
  char blob[32] = "";
  if (me == n - 1) snprintf(blob, sizeof blob, "from the last rank");
  if (fb_comm_bcast(c, blob, sizeof blob, n - 1) != FB_OK || fb_comm_barrier(c) != FB_OK) return 13;
  bad |= strcmp(blob, "from the last rank") != 0;
  /* counts that disagree: rank 0 expects 5 bytes from rank 1, which sends 4 */
  for (int q = 0; q < n; ++q) sc[q] = rc_[q] = 4, sd[q] = rd[q] = 4 * (size_t)q;
  if (me == 0) rc_[1] = 5;
  fb_status s = fb_comm_alltoallv(c, sb, sc, sd, rb, rc_, rd);
  if (me == 0) {
    bad |= s != FB_EIO || !strstr(fb_errmsg(), "disagree");
    ((char *)result)[0] = (char)bad;
    snprintf((char *)result + 1, 255, "%s", fb_errmsg());
    free(sb), free(rb);
    return 0; /* rank 0 leaves: the others' next collective must fail naming it */
  }
  /* rank 0 has left (maybe before sending to this rank): this collective or the next fails naming a rank that left
   * (rank 0, or another one that noticed first and left too) */
  if (s == FB_OK) s = fb_comm_barrier(c);
  bad |= s != FB_EIO || !strstr(fb_errmsg(), "lost rank");
  free(sb), free(rb);
  return bad ? 20 : 0;
}

static void test_comm(void **st) {
  (void)st;
  for (int n = 2; n <= 4; n += 2) {
    char res[256] = {0};
    int rc = ranks(n, comm_body, NULL, res, sizeof res);
    print_message("    %d ranks: exit %d; the mismatch reads: %s\n", n, rc, res + 1);
    assert_int_equal(rc, 0);
    assert_int_equal(res[0], 0);
  }
}

static void test_nccl(void **st) {
  (void)st;
  unsetenv("FOURBIT_NCCL_ID");
  fb_status s = fb_comm_nccl_unique_id_env();
  if (s != FB_OK) print_message("%s\n", fb_errmsg());
  assert_int_equal(s, FB_OK);
  const char *id = getenv("FOURBIT_NCCL_ID");
  assert_non_null(id);
  assert_int_equal(strlen(id), 256);
  assert_int_equal(strspn(id, "0123456789abcdef"), 256);
  print_message("    FOURBIT_NCCL_ID=%.24s...\n", id);
  unsetenv("FOURBIT_NCCL_ID");
  fb_comm *c = NULL;
  assert_int_equal(fb_comm_single(&c), FB_OK);
  size_t z[1] = {0};
  float x = 0;
  assert_int_equal(fb_comm_dev_alltoallv(c, &x, z, z, &x, z, z, NULL), FB_EINVAL);
  assert_int_equal(fb_comm_dev_allreduce_f32(c, &x, 1, NULL), FB_EINVAL);
  fb_comm_free(c);
}

/* ---- training against one rank ---- */
typedef struct { int rn, exact; } mode;
static int train_body(fb_comm *c, void *arg, void *result, size_t rn) {
  (void)rn;
  const mode *m = arg;
  return run(m->rn, m->exact, c, result);
}

static void compare(const char *what, int rn, int exact, double tol) {
  run_out one;
  assert_int_equal(run(rn, exact, NULL, &one), 0);
  for (int n = 2; n <= 4; n *= 2) {
    run_out many;
    mode m = {rn, exact};
    assert_int_equal(ranks(n, train_body, &m, &many, sizeof many), 0);
    double dl = 0, da = 0, dg = 0;
    for (int i = 1; i < STEPS; ++i) {
      dl = fmax(dl, fabs(many.loss[i] - one.loss[i]));
      da = fmax(da, fabs(many.aux[i] - one.aux[i]));
      dg = fmax(dg, fabs(many.gn[i] - one.gn[i]) / one.gn[i]);
    }
    print_message("    %-6s %d ranks: step 1 loss %.17g (one rank %.17g), steps 2-%d: max |dloss| %.3g, |daux| %.3g, "
                  "|dgn|/gn %.3g (tolerance %.0e)\n", what, n, many.loss[0], one.loss[0], STEPS, dl, da, dg, tol);
    assert_true(many.loss[0] == one.loss[0]);
    assert_true(many.aux[0] == one.aux[0]);
    assert_true(fabs(many.gn[0] - one.gn[0]) <= 1e-6 * one.gn[0]);
    assert_true(dl <= tol && da <= tol && dg <= tol);
    assert_true(many.traffic_rows == one.traffic_rows); /* every (token, expert) row counted once */
  }
}

/* ---- one forward and backward (no update) against one rank's gradients ---- */
typedef struct { int rn, exact, np; float **g; size_t *n; } grad_arg;
typedef struct { double rep_rel, exp_maxabs; int exp_equal; } grad_res;

static fb_trainer *trainer(int rn, int exact, fb_comm *c) {
  fb_recipe *r = load(rn);
  fb_train_opts o;
  fb_train_opts_default(&o, 20, r->tokens, 1234);
  o.exact = exact, o.comm = c;
  fb_trainer *t = NULL;
  if (fb_train_create(r, &o, NULL, &t) != FB_OK) fprintf(stderr, "%s\n", fb_errmsg());
  fb_recipe_free(r);
  return t;
}

static int grad_body(fb_comm *c, void *arg, void *result, size_t rn) {
  (void)rn;
  grad_arg *a = arg;
  grad_res *res = result;
  fb_trainer *t = trainer(a->rn, a->exact, c);
  double loss;
  if (!t || fb_train_loss_grad(t, 0, 1, &loss) != FB_OK) return 1;
  double d2 = 0, n2 = 0;
  res->exp_equal = 1;
  for (int i = 0; i < fb_train_nparams(t); ++i) {
    fb_param_view v = fb_train_param(t, i);
    int expert = v.n != a->n[i];
    size_t off = expert ? (size_t)fb_comm_rank(c) * v.n : 0; /* this rank's experts in the one-rank tensor */
    for (size_t k = 0; k < v.n; ++k) {
      double one = a->g[i][off + k], d = (double)v.g[k] - one;
      if (expert) {
        res->exp_equal &= memcmp(&v.g[k], &a->g[i][off + k], 4) == 0;
        res->exp_maxabs = fmax(res->exp_maxabs, fabs(d));
      } else {
        d2 += d * d, n2 += one * one;
      }
    }
  }
  res->rep_rel = sqrt(d2 / n2);
  fb_train_free(t);
  return res->exp_equal ? 0 : 30; /* every rank checks its own experts */
}

/* The expert gradients of rank r are one rank's experts [r E/N, (r+1) E/N), bit for bit: the same rows in the same
 * order, the same SR bits. The replicated ones differ by the FP32 order of the sum over ranks only. */
static void grads(const char *what, int rn, int exact) {
  fb_trainer *t = trainer(rn, exact, NULL);
  assert_non_null(t);
  double loss;
  assert_int_equal(fb_train_loss_grad(t, 0, 1, &loss), FB_OK);
  grad_arg a = {rn, exact, fb_train_nparams(t), NULL, NULL};
  a.g = calloc((size_t)a.np, sizeof *a.g), a.n = calloc((size_t)a.np, sizeof *a.n);
  for (int i = 0; i < a.np; ++i) a.g[i] = fb_train_param(t, i).g, a.n[i] = fb_train_param(t, i).n;
  for (int n = 2; n <= 4; n *= 2) {
    grad_res res = {0};
    int rc = ranks(n, grad_body, &a, &res, sizeof res);
    print_message("    %-6s %d ranks, step 1 gradients: experts %s one rank's (max |d| %.3g); replicated tensors "
                  "|d|/|g| %.3g\n", what, n, res.exp_equal ? "equal" : "DIFFER from", res.exp_maxabs, res.rep_rel);
    assert_int_equal(rc, 0);
    assert_true(res.exp_equal);
    assert_true(res.rep_rel < 1e-5);
  }
  free(a.g), free(a.n);
  fb_train_free(t);
}

static void test_grads(void **st) {
  (void)st;
  grads("sr", 0, 0);
  grads("rn", 1, 0);
  grads("exact", 0, 1);
}

static void test_sr(void **st) { (void)st; compare("sr", 0, 0, 2e-3); }
static void test_rn(void **st) { (void)st; compare("rn", 1, 0, 2e-3); }
static void test_exact(void **st) { (void)st; compare("exact", 0, 1, 1e-6); }

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_comm), cmocka_unit_test(test_grads), cmocka_unit_test(test_sr), cmocka_unit_test(test_rn),
      cmocka_unit_test(test_exact),
      cmocka_unit_test(test_nccl), /* last: NCCL's bootstrap thread lives on in this process, and the others fork */
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
