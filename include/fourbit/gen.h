/* fourbit/gen.h — the generator (gen/gen.c: a kernel spec's tile variants and their CUDA source), launch geometry
 * (gen/launch.c), both from one descriptor per template (gen/templates.c), and NVRTC (gen/nvrtc.c: source to cubin). */
#ifndef FOURBIT_GEN_H
#define FOURBIT_GEN_H

#include "fourbit/base.h"
#include "fourbit/plan.h"
#include "fourbit/recipe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the generator (gen/gen.c) and NVRTC (gen/nvrtc.c) ----------------------------------------- */
/* One tile variant of a kernel spec: the values of the tune parameters its template uses. */
typedef struct {
  char name[192];     /* spec name + variant tag: the extern "C" kernel name and program name */
  char tmpl[32];      /* template file */
  int nparams;
  char param[FB_TUNE_MAXPARAMS][16];
  int value[FB_TUNE_MAXPARAMS];
} fb_variant;

/* Whether spec k's template has one fixed variant and no tune family (dense.cuh: FB_DENSE_THREADS threads); then
 * fb_gen_variants takes fam NULL. */
int fb_gen_fixed(const fb_kernel_spec *k);
#define FB_DENSE_THREADS 256
/* A variant's tune parameter by name (dflt when its template does not take it), and whether it takes it. */
int fb_variant_param(const fb_variant *v, const char *name, int dflt);
int fb_variant_has(const fb_variant *v, const char *name);
/* The template for spec k, or NULL with the reason in *why. */
const char *fb_gen_template(const fb_kernel_spec *k, const char **why);
/* The distinct variants of k under tune family fam (values no template uses are dropped and the
 * duplicates merged); variants a hardware or template limit rules out are skipped, and counted in
 * *pruned with the first reason in why (may be NULL). *out is malloc'd. */
fb_status fb_gen_variants(const fb_kernel_spec *k, const fb_tune_family *fam, fb_variant **out, int *n,
                          int *pruned, char *why, size_t whylen);
/* The CUDA source of variant v: the generated header (docs/style.md), the parameters as #defines, then the
 * template body. origin: the recipe path; plan_sha: its plan hash ("-" if none). Deterministic. */
fb_status fb_gen_source(const fb_kernel_spec *k, const fb_variant *v, const char *origin, const char *plan_sha,
                        char **src);

/* Grid and block of variant v over a rows x cols input (ngroups: per-group scales). */
fb_status fb_launch_dims(const fb_kernel_spec *k, const fb_variant *v, long long rows, long long cols, unsigned ngroups,
                         unsigned *gx, unsigned *gy, unsigned *threads);
/* The dynamic shared memory variant v is launched with, bytes (0: its template has static shared memory only). */
unsigned fb_launch_smem(const fb_kernel_spec *k, const fb_variant *v);

typedef struct {
  void *cubin;
  size_t size;
  double ms;  /* compile time */
  char *log;  /* NVRTC's log (ptxas resource usage included), "" if none */
  int ptxas;  /* 1: the log holds ptxas's report (a compile); 0: none, the cubin came from the CUDA driver's
                 compute cache, which NVRTC (CUDA 12.9+) consults where a driver is loaded (CUDA_CACHE_DISABLE=1
                 turns it off), so ms is a cache lookup, not a compile */
} fb_cubin;
/* Compile src for arch (one of FB_ARCHS: sm_89, sm_90a, sm_100a, sm_103a, sm_120a) with the templates as in-memory headers. On failure
 * FB_ENVRTC with the kernel name and NVRTC's log in fb_errmsg(). */
fb_status fb_nvrtc_compile(const char *name, const char *src, const char *arch, fb_cubin *out);
void fb_cubin_free(fb_cubin *c);
/* The NVRTC options every kernel is compiled with (besides the arch), as one string. */
const char *fb_nvrtc_options(void);

#ifdef __cplusplus
}
#endif
#endif
