/* fuzz_checkpoint.c — libFuzzer target for the checkpoint reader, fb_train_load_buffer (runtime/train.c, the parser
 * fb_train_load calls): any input must load or be refused with a message, and never crash, leak, hang or read out
 * of bounds. Each input is tried twice: as it is (the magic, version and checksum checks), then with its last 32
 * bytes replaced by the sha256 of the rest, so that mutations reach the parse behind the checksum (identity fields,
 * step, RNG state, tensor counts and lengths).
 *
 * The trainer the inputs are loaded into is the run that `make fuzz-checkpoint` trains for the seed corpus: tiny.lua,
 * --model-override micro --layers 3 --d-model 32 --experts 2 --top-k 1 --vocab 16 --steps 2 (FUZZ_MODEL, FUZZ_STEPS;
 * change both together). With FOURBIT_FUZZ_MUST_LOAD=1 an input that does not load aborts: the Makefile runs the seed
 * that way first, so a drift between the two shows as a failure, not as a fuzzer stuck at the identity check.
 * Built with clang -fsanitize=fuzzer,address,undefined by the Makefile (fuzz-checkpoint). */
#include "fourbit_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_STEPS 2
static const fb_model FUZZ_MODEL = {3, 32, 32, 2, 1, 16, 0}; /* layers, d_model, d_ff, experts, top_k, vocab, conv */
static fb_trainer *g_t;
static int g_must_load;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  const char *e = getenv("FOURBIT_FUZZ_MUST_LOAD");
  g_must_load = e && !strcmp(e, "1");
  fb_recipe *r = NULL;
  if (fb_train_recipe_load("recipes/tiny.lua", &FUZZ_MODEL, &r) != FB_OK) {
    fprintf(stderr, "fuzz_checkpoint: %s\n", fb_errmsg());
    abort();
  }
  fb_train_opts o;
  fb_train_opts_default(&o, FUZZ_STEPS, 64, r->seed); /* fourbit train's defaults; micro's batch of 64 */
  if (fb_train_create(r, &o, NULL, &g_t) != FB_OK) {
    fprintf(stderr, "fuzz_checkpoint: %s\n", fb_errmsg());
    abort();
  }
  fb_recipe_free(r);
  return 0;
}

static void one(const uint8_t *data, size_t size) {
  fb_status s = fb_train_load_buffer(g_t, data, size, "fuzz.ckpt");
  if (s == FB_OK) return;
  if (!fb_errmsg()[0]) abort(); /* a refusal must say why */
  if (g_must_load) {
    fprintf(stderr, "fuzz_checkpoint: the seed does not load: %s\n", fb_errmsg());
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  one(data, size);
  if (size < 8 + 4 + 32 || g_must_load) return 0;
  uint8_t *b = malloc(size);
  if (!b) return 0;
  memcpy(b, data, size);
  fb_sha256(b, size - 32, b + size - 32);
  one(b, size);
  free(b);
  return 0;
}
