/* launch.c — the launch geometry of a variant, from its template's row (gen/templates.c), in one place for the
 * tests, the tuner and the runtime. Entry points: fb_launch_dims(), fb_launch_smem(). */
#include "fb_error.h"
#include "fb_tmpl.h"

fb_status fb_launch_dims(const fb_kernel_spec *k, const fb_variant *v, long long rows, long long cols, unsigned ngroups,
                         unsigned *gx, unsigned *gy, unsigned *threads) {
  const fb_tmpl *t = fb_tmpl_by_file(v->tmpl);
  if (!t || !t->grid) return FB_ERR(FB_EINVAL, "%s: no launch rule for template %s", v->name, v->tmpl);
  *threads = (unsigned)fb_variant_param(v, "threads", 256), *gy = 1;
  t->grid(k, v, rows, cols, ngroups, gx, gy, threads);
  return FB_OK;
}

unsigned fb_launch_smem(const fb_kernel_spec *k, const fb_variant *v) {
  const fb_tmpl *t = fb_tmpl_by_file(v->tmpl);
  return t && t->smem ? t->smem(k, v) : 0;
}
