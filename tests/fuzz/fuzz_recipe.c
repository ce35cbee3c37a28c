/* fuzz_recipe.c — libFuzzer target for the recipe loader and the plan: any input must either load and
 * resolve into a plan (then print it both ways) or fail with a message; never crash, leak or hang.
 * Built with clang -fsanitize=fuzzer,address,undefined by `make fuzz`; `make test` runs it briefly
 * over a corpus of the shipped recipes and the bad-recipe fixtures. Includes resolve in recipes/. */
#include "fourbit.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  setenv("FOURBIT_RECIPE_TIMEOUT", "5", 0); /* the loader's wall-clock limit, well inside libFuzzer's -timeout=20 */
  fb_recipe_instr_limit = 20000000; /* a tenth of the default: a runaway input costs 0.1-0.2 s, not 1-2 */
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fb_recipe *r = NULL;
  if (fb_recipe_load_buffer((const char *)data, size, "fuzz.lua", "recipes", &r) != FB_OK) {
    if (!fb_errmsg()[0]) abort(); /* a failure must say why */
    return 0;
  }
  fb_plan *p = NULL;
  if (fb_plan_resolve(r, "sm_90a", &p) == FB_OK) {
    char *t = NULL;
    if (fb_plan_json(p, &t) == FB_OK) free(t);
    if (fb_plan_text(p, &t) == FB_OK) free(t);
    fb_plan_free(p);
  }
  fb_recipe_free(r);
  return 0;
}
