/* one_variant.h — for the emulator's tests (tests/test_emu.cpp, tests/test_cvt_model.cpp): the variant of spec k with
 * these tune values, made by the generator from a one-variant family. Returns 1 with *out set, or 0 having printed why. */
#ifndef FB_EMU_ONE_VARIANT_H
#define FB_EMU_ONE_VARIANT_H
#include "fourbit.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utility>
#include <vector>

static inline int fbemu_one_variant(const fb_kernel_spec &k, const std::vector<std::pair<const char *, int>> &params, fb_variant *out) {
  fb_tune_family fam;
  memset(&fam, 0, sizeof fam);
  snprintf(fam.family, sizeof fam.family, "%s", k.family);
  int vals[FB_TUNE_MAXPARAMS];
  fam.nparams = (int)params.size(), fam.nvariants = 1, fam.values = vals;
  for (size_t i = 0; i < params.size(); ++i) snprintf(fam.param[i], sizeof fam.param[i], "%s", params[i].first), vals[i] = params[i].second;
  fb_variant *vs = NULL;
  int nv = 0, pruned = 0;
  char why[256] = "";
  if (fb_gen_variants(&k, &fam, &vs, &nv, &pruned, why, sizeof why) != FB_OK || nv != 1) {
    printf("    %s: no variant (%s %s)\n", k.name, fb_errmsg(), why);
    free(vs);
    return 0;
  }
  *out = vs[0];
  free(vs);
  return 1;
}
#endif
