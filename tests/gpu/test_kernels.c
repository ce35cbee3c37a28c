/* test_kernels.c — every generated memory-bound kernel and every tile variant against the CPU reference
 * (runtime/numerics.c), on the GPU: fresh random inputs (Gaussian, wide dynamic range) and the edge
 * cases of docs/numerics.md (zeros, -0, NaN, Inf, subnormals, saturating values, underflowing blocks), output
 * buffers poisoned first, bit-exact comparison, the count of wrong elements printed per kernel.
 *   test_kernels [--quick]      all specs and variants (quick: one variant of each template, one case:
 *                               what compute-sanitizer runs)
 *   test_kernels --only SUBSTR  only specs whose name contains SUBSTR
 *   test_kernels --variant SUBSTR  only variants whose name contains SUBSTR (with --quick: the first such
 *                               variant of each spec; specs with none are left out, amax's kept for the checks)
 * Exit status 0 only if every element of every run matched. Needs a GPU (libcuda.so.1); without one it
 * says SKIPPED and exits 77. Variants come from recipes/tiny.lua's tune families (the requantizers': inkling2_small's). */
#include "fb_exit.h"
#include "harness.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv) {
  int quick = 0, compile_only = 0;
  const char *only = NULL, *vsub = NULL;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "--compile-only")) compile_only = 1;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--variant") && i + 1 < argc) vsub = argv[++i];
    else { fprintf(stderr, "usage: test_kernels [--quick] [--compile-only] [--only SUBSTR] [--variant SUBSTR]\n"); return 2; }
  }
  if (!compile_only && fb_cuda_use_device(0) != FB_OK) {
    printf("test_kernels: SKIPPED (not passed): %s\n", fb_errmsg());
    return 77;
  }
  fb_recipe *r = NULL, *rq = NULL;
  CK(fb_recipe_load("recipes/tiny.lua", &r));
  /* the requantizers' variants are inkling2_small's (a superset of the defaults: its raw-ring and f16-tile forms) */
  CK(fb_recipe_load("recipes/inkling2_small.lua", &rq));
  build_specs();
  units = calloc(4096, sizeof *units);
  int matched = 0; /* variants --variant picked (amax's aside) */
  for (int s = 0; s < nspecs; ++s) {
    if (only && !strstr(specs[s].k.name, only) && strcmp(specs[s].family, "amax")) continue;
    const fb_tune_family *fam = NULL;
    const fb_recipe *fr = strcmp(specs[s].family, "requant") ? r : rq;
    for (int f = 0; f < fr->nfamilies; ++f)
      if (!strcmp(fr->families[f].family, specs[s].family)) fam = &fr->families[f];
    fb_variant *vs;
    int nv;
    CK(fb_gen_variants(&specs[s].k, fam, &vs, &nv, NULL, NULL, 0));
    const int keep_all = !vsub || !strcmp(specs[s].family, "amax"); /* amax: the tensor quantizers' checks need it */
    for (int v = 0, taken = 0; v < nv && (!quick || !taken); ++v) {
      if (!keep_all && !strstr(vs[v].name, vsub)) continue;
      ++taken, matched += !keep_all;
      unit *u = &units[nunits++];
      u->t = &specs[s];
      u->v = vs[v];
      CK(fb_gen_source(&specs[s].k, &vs[v], "tests/gpu/test_kernels.c", "-", &u->src));
    }
    free(vs);
  }
  if (vsub && !matched) {
    fprintf(stderr, "test_kernels: --variant %s: no variant of the chosen specs has that in its name\n", vsub);
    return 2;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pthread_t th[16];
  for (int i = 0; i < 16; ++i) pthread_create(&th[i], NULL, compile_worker, NULL);
  for (int i = 0; i < 16; ++i) pthread_join(th[i], NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double *ms = malloc(sizeof(double) * (size_t)(nunits ? nunits : 1));
  int fails = 0, nms = 0; /* ms[0 .. nms): the kernels ptxas compiled (not the driver cache's answers) */
  for (int i = 0; i < nunits; ++i) {
    if (units[i].st != FB_OK) {
      fprintf(stderr, "COMPILE FAILED %s\n", units[i].err);
      ++fails;
    } else if (units[i].cubin.ptxas) {
      ms[nms++] = units[i].cubin.ms;
    }
  }
  for (int i = 1; i < nms; ++i) /* insertion sort for the median */
    for (int j = i; j > 0 && ms[j] < ms[j - 1]; --j) { double t = ms[j]; ms[j] = ms[j - 1]; ms[j - 1] = t; }
  printf("compiled %d kernels for sm_90a in %.1f s wall on 16 threads: ", nunits,
         (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
  if (nms) printf("median %.0f ms, max %.0f ms per kernel", ms[nms / 2], ms[nms - 1]);
  else printf("no compile time to report");
  if (nms < nunits - fails) /* NVRTC took these from the CUDA driver's compute cache: a lookup, not a compile */
    printf(" (%s%d came from the driver's compute cache, not compiled; CUDA_CACHE_DISABLE=1 compiles them)",
           nms ? "over the ptxas-compiled ones; " : "", nunits - fails - nms);
  printf("\n");
  if (compile_only) {
    printf("test_kernels --compile-only: %s\n", fails ? "FAILED" : "every kernel compiled (nothing ran)");
    return fails ? 1 : 0;
  }
  /* the amax kernels the NVFP4 tensor / group quantizers need */
  for (int i = 0; i < nunits; ++i)
    if (units[i].t->k.op == FB_OP_AMAX && units[i].st == FB_OK && units[i].v.value[0] == 256) {
      int mode = units[i].t->k.q.outer == FB_GRAN_TOKEN ? 1 : units[i].t->k.q.outer == FB_GRAN_EXPERT ? 2 : 0;
      if (!amax_kernel[mode].fn) CK(fb_kernel_load(units[i].cubin.cubin, units[i].v.name, &amax_kernel[mode]));
    }
  printf("%-52s %8s %6s %10s %8s\n", "kernel spec", "variants", "cases", "elements", "#wrong");
  long total_wrong = 0;
  for (int s = 0; s < nspecs; ++s) {
    long wrong = 0, elements = 0;
    int nv = 0, cases = 0;
    for (int i = 0; i < nunits; ++i) {
      if (units[i].t != &specs[s] || units[i].st != FB_OK) continue;
      fb_kernel kern;
      CK(fb_kernel_load(units[i].cubin.cubin, units[i].v.name, &kern));
      ++nv;
      for (int c = 0; c < (quick ? 1 : NCASES); ++c) {
        for (int rep = 0; rep < (quick ? 1 : 2); ++rep) { /* fresh inputs and seeds each time */
          long R = specs[s].shape ? 77 : 256, C = specs[s].shape ? 320 : 1024;
          long w;
          CK(run_case(&units[i], &kern, c, (unsigned)(rnd() & 0xFFFF), R, C, &w));
          if (w) fprintf(stderr, "  %s: %ld wrong on %s inputs\n", units[i].v.name, w, case_name[c]);
          wrong += w;
          ++cases;
          elements += specs[s].shape ? 77 * 320 : 256 * 1024;
        }
      }
      fb_kernel_unload(&kern);
    }
    if (!nv) continue;
    printf("%-52s %8d %6d %10ld %8ld\n", specs[s].k.name, nv, cases, elements, wrong);
    total_wrong += wrong;
  }
  printf("test_kernels: %s (%ld wrong elements, %d compile failures)\n", total_wrong || fails ? "FAILED" : "passed",
         total_wrong, fails);
  fb_recipe_free(r);
  fb_recipe_free(rq);
  return total_wrong || fails ? 1 : 0;
}
