/* fb_tmpl.h — one descriptor per template (gen/templates.c): what a template implements, its tune parameters, what
 * makes a variant illegal and why, its #defines, its variant tag, its grid and its dynamic shared memory. The
 * generator (gen/gen.c) and the launch rules (gen/launch.c) read these rows and know no template by name.
 *
 * To add a template: write templates/NAME.cuh, add a row to FB_TEMPLATES in gen/templates.c (match, params, the
 * hooks it needs), and its parameters to FB_TUNE_PARAMS (recipes/loader.c) if they are new. docs/design.md, "The generator". */
#ifndef FB_TMPL_H
#define FB_TMPL_H

#include "fb_str.h"
#include "fourbit.h"

/* What match() answers for a spec. */
enum { FB_TMPL_NOT_MINE = 0, FB_TMPL_YES = 1, FB_TMPL_UNSUPPORTED = -1 };

typedef struct fb_tmpl {
  const char *file; /* templates/FILE: the variant's tmpl, the embedded text's name */
  /* FB_TMPL_YES when this template implements k (then *params: the tune parameters it reads, in template order,
   * NULL-terminated; the order names the variant); FB_TMPL_UNSUPPORTED when k is of this template's op but a case
   * it does not implement (then *why says which); FB_TMPL_NOT_MINE otherwise. The rows are asked in table order. */
  int (*match)(const fb_kernel_spec *k, const char *const **params, const char **why);
  /* A hardware or template limit that rules variant v out, and why; NULL when legal. NULL: every variant is. */
  const char *(*illegal)(const fb_kernel_spec *k, const fb_variant *v);
  /* The spec's own #defines, "NAME VALUE\n" each, appended to d (the variant's parameters follow as FB_PARAM). */
  void (*defines)(const fb_kernel_spec *k, fb_str *d);
  /* A parameter's #define when it is not FB_<NAME> <value>: 1 when written to d. NULL: all are. */
  int (*param_define)(const char *param, int value, fb_str *d);
  /* The variant tag after the spec name (name[len..size)). NULL: parameter initials and values in template order,
   * e.g. _r32_c64_t256, leaving out the parameters that are off at 0. */
  void (*tag)(const fb_variant *v, char *name, size_t size, int len);
  /* The grid of v over a rows x cols input (ngroups: per-group scales); *threads is preset to the variant's threads
   * (256 when it has none) and *gy to 1. */
  void (*grid)(const fb_kernel_spec *k, const fb_variant *v, long long rows, long long cols, unsigned ngroups,
               unsigned *gx, unsigned *gy, unsigned *threads);
  /* Dynamic shared memory at launch, bytes. NULL: none (static shared memory only). */
  unsigned (*smem)(const fb_kernel_spec *k, const fb_variant *v);
  int fixed; /* one variant of FB_DENSE_THREADS threads and no tune family (dense.cuh) */
  /* The GEMM family of the row ("wgmma", "mma"; later "tcgen05"): what fourbit info and tune --dry-run name, and what
   * --pick chooses. NULL: the op has one template. */
  const char *family;
} fb_tmpl;

/* The first row that implements k, or NULL with the reason in *why; *params: its tune parameters for k. */
const fb_tmpl *fb_tmpl_for_spec(const fb_kernel_spec *k, const char *const **params, const char **why);
/* The next row after index `after` (-1: from the first) that implements k (*params its parameters; *why the reason a
 * row of its op before it gave for not implementing k, or NULL), or NULL past the last (*why: the reason none does,
 * when none before did). Walk: for (t = fb_tmpl_next(k, -1, ..); t; t = fb_tmpl_next(k, fb_tmpl_index(t), ..)). */
const fb_tmpl *fb_tmpl_next(const fb_kernel_spec *k, int after, const char *const **params, const char **why);
int fb_tmpl_index(const fb_tmpl *t);
/* Row i of the table (0, 1, ...), NULL past the last. */
const fb_tmpl *fb_tmpl_at(int i);
/* The row of template file name (a variant's tmpl), or NULL. */
const fb_tmpl *fb_tmpl_by_file(const char *file);

#endif
