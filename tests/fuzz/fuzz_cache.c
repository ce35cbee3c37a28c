/* fuzz_cache.c — libFuzzer target for the cache's decoders (cache/cache.c): a stored value of kernels, winners or
 * trials under its key (fb_cache_decode), and a whole export file (fb_cache_check_export). Any input must decode or
 * be refused with a reason; never crash, leak, hang or read outside the input.
 * The first byte picks what the rest is:
 *   0..2  a value of that database: u16 key length | key | value, as stored
 *   3..4  a winners (3) or trials (4) record: u16 key length | key | the record's text; the FBW1/FBT1 frame and its
 *         sha256 are put around the text here, so that the fields' parser is reached past the checksum
 *   5     an export file, as written
 *   6     an export's entries: the FBX1 header (entry count from the next 8 bytes) and the sha256 are put around
 *         them here
 * Built with clang -fsanitize=fuzzer,address,undefined by `make fuzz-cache`; `make test` runs it briefly over the
 * seeds `build/tests/test_cache --fuzz-seeds DIR` writes (every value of a filled cache, and its export). */
#include "fourbit.h"

#include <stdlib.h>
#include <string.h>

static void value(int db, const uint8_t *p, size_t n, int frame_it) {
  if (n < 2) return;
  size_t kl = (size_t)p[0] | (size_t)p[1] << 8;
  if (kl > n - 2) kl = n - 2;
  const uint8_t *key = p + 2, *v = p + 2 + kl;
  size_t vl = n - 2 - kl;
  fb_winner w;
  fb_trial t;
  if (!frame_it) {
    const char *why = fb_cache_decode((fb_cache_db)db, key, kl, v, vl, &w, &t);
    if (why && !*why) abort(); /* a refusal says why */
    return;
  }
  uint8_t *f = malloc(12 + vl + 32);
  if (!f) return;
  uint32_t ver = 2, tn = (uint32_t)vl; /* RECORD_FORMAT of cache.c */
  memcpy(f, db == 3 ? "FBW1" : "FBT1", 4), memcpy(f + 4, &ver, 4), memcpy(f + 8, &tn, 4), memcpy(f + 12, v, vl);
  fb_sha256(f, 12 + vl, f + 12 + vl);
  const char *why = fb_cache_decode(db == 3 ? FB_DB_WINNERS : FB_DB_TRIALS, key, kl, f, 12 + vl + 32, &w, &t);
  if (why && !*why) abort();
  free(f);
}

static void export_file(const uint8_t *p, size_t n) {
  fb_cache_counts c;
  if (fb_cache_check_export(p, n, "fuzz.fbx", &c) != FB_OK && !fb_errmsg()[0]) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const uint8_t *p = data + 1;
  size_t n = size - 1;
  switch (data[0] % 7) {
  case 0: case 1: case 2: value(data[0] % 7, p, n, 0); break;
  case 3: case 4: value(data[0] % 7, p, n, 1); break;
  case 5: export_file(p, n); break;
  case 6: {
    if (n < 8) return 0;
    uint8_t *f = malloc(16 + (n - 8) + 32);
    if (!f) return 0;
    uint32_t ver = 1; /* EXPORT_FORMAT */
    memcpy(f, "FBX1", 4), memcpy(f + 4, &ver, 4), memcpy(f + 8, p, 8), memcpy(f + 16, p + 8, n - 8);
    fb_sha256(f, 16 + (n - 8), f + 16 + (n - 8));
    export_file(f, 16 + (n - 8) + 32);
    free(f);
    break;
  }
  }
  return 0;
}
