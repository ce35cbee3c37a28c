/* launch.c — the launch geometry of each template, in one place for the tests, the tuner and the runtime.
 * Entry point: fb_launch_dims(). */
#include "fb_error.h"
#include "fourbit.h"

#include <string.h>

#define param fb_variant_param

static unsigned cap(long long n, long long hi) { return (unsigned)(n < 1 ? 1 : n > hi ? hi : n); }

fb_status fb_launch_dims(const fb_kernel_spec *k, const fb_variant *v, long long rows, long long cols, unsigned ngroups,
                         unsigned *gx, unsigned *gy, unsigned *threads) {
  int t = param(v, "threads", 256);
  *threads = (unsigned)t, *gy = 1;
  const char *tm = v->tmpl;
  if (!strcmp(tm, "quant_nvfp4.cuh")) {
    if (k->q.two_d) *gx = cap((rows / 16 + (long long)ngroups + 1) * (cols / 16) / t + 1, 4096);
    else *gx = cap((rows + param(v, "rows", 16) - 1) / param(v, "rows", 16), 1ll << 31);
  } else if (!strcmp(tm, "quant_mxfp8.cuh") || !strcmp(tm, "s2f6.cuh") || !strcmp(tm, "gemm_bcopy.cuh")) {
    *gx = cap((rows * cols / 32 + t - 1) / t, 16384);
  } else if (!strcmp(tm, "tcopy.cuh")) { /* a thread per 16 outputs, grid-stride */
    *gx = cap((rows * cols / 16 + t - 1) / t, 1ll << 16);
  } else if (!strcmp(tm, "mx_col.cuh")) {
    long long tc = param(v, "cols", 64); /* a CTA per 1024-row band of tc columns */
    *gx = cap(((rows + 1023) / 1024) * ((cols + tc - 1) / tc), 1ll << 20);
  } else if (!strcmp(tm, "amax.cuh")) {
    if (k->q.outer == FB_GRAN_TOKEN) *gx = cap((rows * 32 + t - 1) / t, 1ll << 20);
    else if (k->q.outer == FB_GRAN_EXPERT) *gx = 64, *gy = ngroups ? ngroups : 1;
    else *gx = cap((rows * cols / 8 + t - 1) / t, 2048);
  } else if (!strcmp(tm, "router.cuh")) { /* a warp per token (rows) */
    *gx = cap((rows * 32 + t - 1) / t, 1ll << 20);
  } else if (!strcmp(tm, "permute.cuh")) { /* every pass: warps grid-stride over chunks or rows (rows = tokens) */
    long long w = t / 32, entries = rows * (k->top_k > 0 ? k->top_k : 1);
    *gx = cap((entries + w - 1) / w, 1ll << 16);
  } else if (!strcmp(tm, "unpermute.cuh")) { /* param rows tokens per CTA */
    long long r = param(v, "rows", 1);
    *gx = cap((rows + r - 1) / r, (1ll << 31) - 1);
  } else if (!strcmp(tm, "combine_bwd.cuh")) { /* a CTA per token */
    *gx = cap(rows, (1ll << 31) - 1);
  } else if (!strcmp(tm, "swiglu.cuh")) { /* rows x f (cols) in tiles, grid-stride */
    long long tr = param(v, "rows", 4), tc = param(v, "cols", 256);
    *gx = cap(((rows + tr - 1) / tr) * ((cols + tc - 1) / tc), 1ll << 20);
  } else if (!strcmp(tm, "adamw.cuh")) {
    if (k->q.format == FB_FMT_MXFP8) *gx = cap((rows * cols / 32 + t - 1) / t, 16384);
    else *gx = cap((rows * cols / param(v, "vec", 4) + t - 1) / t, 4096);
  } else if (!strcmp(tm, "gemm_sm90.cuh")) { /* persistent: gx = 0 means one CTA per SM, the caller's count */
    *threads = 128u * (unsigned)(1 + param(v, "consumers", 1)), *gx = 0;
  } else {
    return FB_ERR(FB_EINVAL, "%s: no launch rule for template %s", v->name, tm);
  }
  return FB_OK;
}
