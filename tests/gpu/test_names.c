/* test_names.c — every kernel the runtime requests is a kernel of the plan, so that `fourbit tune RECIPE` tunes it and
 * a train start after the tune compiles nothing. For every shipped recipe (shrunk as test_train_gpu.c does: 6 layers,
 * d_model 128, d_ff 128, 8 experts top-2) and each GPU path — the expert layer (fb_gpu_experts: its kernel table at
 * create, then one forward and backward of every layer through a host train step), the same through the exchange
 * machinery (FOURBIT_GPU_EXCHANGE=1), and the GPU-resident step (fb_train_gpu_attach: dense.cuh, router, AdamW) — it
 * lists the kernels requested through the cache lookup and fails on any the plan does not name. The lookup answers
 * with a stand-in cubin, so nothing compiles: run on the fake driver (LD_LIBRARY_PATH=build/mockcuda; make test),
 * whose kernels are their CPU references by name.
 *   test_names [RECIPE...]    (default: every recipes/NAME.lua)
 * Exit 0 only when no requested kernel is missing from the plan. */
#include "experts_gpu.h"
#include "fb_cuda.h"
#include "fb_error.h"
#include "fourbit.h"
#include "fourbit_train.h"
#include "train_gpu.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const fb_model SHAPE = {6, 128, 128, 8, 2, 256, 4};
#define TOKENS 256

typedef struct {
  const fb_recipe *r;
  const fb_plan *plan;
  char names[256][128];
  int n, missing;
} rec;

static void die(const char *what) {
  fprintf(stderr, "test_names: %s: %s\n", what, fb_errmsg());
  exit(1);
}

/* the variant with the smallest tiles (it divides every shape the small model has) */
static int smallest(const fb_variant *v, int n) {
  int best = 0;
  long bv = -1;
  for (int i = 0; i < n; ++i) {
    long p = 1;
    for (int j = 0; j < v[i].nparams; ++j)
      if (!strncmp(v[i].param[j], "tile_", 5)) p *= v[i].value[j];
    if (bv < 0 || p < bv) bv = p, best = i;
  }
  return best;
}

static fb_status lookup(void *user, const fb_kernel_spec *k, long long tokens, char *var_name, size_t var_len, void **cubin,
                        size_t *size, double *ms, char *note, size_t notelen) {
  (void)tokens;
  if (ms) *ms = 0;
  rec *u = user;
  int seen = 0;
  for (int i = 0; i < u->n && !seen; ++i) seen = !strcmp(u->names[i], k->name);
  if (!seen && u->n < 256) {
    snprintf(u->names[u->n++], sizeof u->names[0], "%s", k->name);
    int planned = 0;
    for (int i = 0; i < u->plan->nkernels && !planned; ++i) planned = !strcmp(u->plan->kernels[i].name, k->name);
    if (!planned) {
      printf("    NOT IN THE PLAN: %s\n", k->name);
      ++u->missing;
    }
  }
  const fb_tune_family *fam = NULL;
  for (int i = 0; i < u->r->nfamilies; ++i)
    if (!strcmp(u->r->families[i].family, k->family)) fam = &u->r->families[i];
  fb_variant *vs = NULL;
  int nv = 0;
  if ((!fam && !fb_gen_fixed(k)) || fb_gen_variants(k, fam, &vs, &nv, NULL, NULL, 0) != FB_OK || !nv) {
    free(vs);
    return FB_ERR(FB_ENOTFOUND, "%s: no variant", k->name);
  }
  snprintf(var_name, var_len, "%s", vs[smallest(vs, nv)].name);
  free(vs);
  *cubin = malloc(16), *size = 16; /* the fake driver loads anything */
  memset(*cubin, 0, 16);
  snprintf(note, notelen, "stand-in (test_names)");
  return FB_OK;
}

/* one recipe, one path: 0 the expert layer (host step), 1 the same through the exchange, 2 the resident step */
static int run(const char *path, int mode) {
  fb_recipe *r = NULL;
  if (fb_train_recipe_load(path, &SHAPE, &r) != FB_OK) die(path);
  fb_plan *plan = NULL;
  if (fb_plan_resolve(r, "sm_90a", &plan) != FB_OK) die("plan");
  static rec u;
  memset(&u, 0, sizeof u);
  u.r = r, u.plan = plan;
  if (mode == 1) setenv("FOURBIT_GPU_EXCHANGE", "1", 1);
  else unsetenv("FOURBIT_GPU_EXCHANGE");
  fb_gpu_experts_opts go = {.recipe = r, .tokens = TOKENS, .lookup = lookup, .lookup_user = &u};
  fb_gpu_experts *g = NULL;
  if (fb_gpu_experts_create(&go, &g) != FB_OK) die("fb_gpu_experts_create");
  fb_train_opts o;
  fb_train_opts_default(&o, 2, TOKENS, 1234);
  fb_trainer *t = NULL;
  if (fb_train_create(r, &o, fb_gpu_experts_ops(g), &t) != FB_OK) die("fb_train_create");
  if (mode == 2) {
    fb_train_gpu_opts to = {.recipe = r, .experts = g, .lookup = lookup, .lookup_user = &u};
    if (fb_train_gpu_attach(t, &to) != FB_OK) die("fb_train_gpu_attach");
  }
  fb_step_stats st;
  if (fb_train_step(t, &st) != FB_OK) die("fb_train_step");
  fb_gpu_experts_stats gs = fb_gpu_experts_stats_get(g);
  int rc = mode == 2 ? fb_train_gpu_stats_get(t).compiled : 0;
  static const char *what[3] = {"expert layer", "expert layer, exchange path", "resident step"};
  printf("  %-28s %-28s %3d kernels requested, %d not in the plan (%d plan kernels); compiled %d, unplanned %d\n", path,
         what[mode], u.n, u.missing, plan->nkernels, gs.compiled + rc, gs.unplanned);
  for (int i = 0; i < gs.unplanned && i < FB_GPU_UNPLANNED_MAX; ++i) printf("    unplanned (layer): %s\n", gs.unplanned_names[i]);
  int bad = u.missing + gs.unplanned + gs.compiled + rc;
  fb_train_free(t);
  fb_gpu_experts_free(g);
  fb_plan_free(plan);
  fb_recipe_free(r);
  return bad;
}

int main(int argc, char **argv) {
  if (fb_cuda_load() != FB_OK || fb_cu.Init(0)) {
    printf("test_names: SKIPPED (no CUDA driver, not even the fake one: LD_LIBRARY_PATH=build/mockcuda)\n");
    return 77;
  }
  glob_t gl;
  memset(&gl, 0, sizeof gl);
  int n = argc - 1;
  char **paths = argv + 1;
  if (!n) {
    if (glob("recipes/*.lua", 0, NULL, &gl) || !gl.gl_pathc) {
      fprintf(stderr, "test_names: no recipes/*.lua (run from the repository root)\n");
      return 2;
    }
    n = (int)gl.gl_pathc, paths = gl.gl_pathv;
  }
  int bad = 0;
  for (int i = 0; i < n; ++i)
    for (int m = 0; m < 3; ++m) bad += run(paths[i], m);
  printf("test_names: %d recipes x 3 GPU paths: %s\n", n, bad ? "FAIL (kernels the plan does not name, or compiled)" : "every requested kernel is a plan kernel");
  globfree(&gl);
  return bad ? 1 : 0;
}
