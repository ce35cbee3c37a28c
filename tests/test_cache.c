/* test_cache.c — the LMDB cache (cache/cache.c) on the CPU: winners and trials round trip with the nearest-bucket
 * fallback; a foreign fingerprint is ignored with a message; a flipped byte in a stored value is found by verify
 * and never loaded; several processes writing at once (fork) while the map grows, one of them SIGKILL'd in the
 * middle, leave a cache that verifies clean with every committed entry readable; export / import round trip with
 * the merge rule (the faster winner stays, and a message says so); a corrupt export writes nothing; gc.
 *   test_cache                  the tests
 *   test_cache --fill DIR TAG   fill DIR with a few winners, trials and kernels (tests/test_cache.sh uses it):
 *                               TAG "a" or "b" pick two overlapping sets with different times
 *   test_cache --fuzz-seeds DIR the seed corpus of tests/fuzz/fuzz_cache.c (its input format) from a cache filled
 *                               with both sets: every stored value, each record's text, the export, its entries
 * An LMDB error in the middle of a walk (a damaged page) is an error, never the end of the data: verify, export and
 * the winner lookup fail, gc deletes nothing, and a later open calls the cache damaged (test_lmdb_error_mid_walk). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fourbit.h"

static char root[256];

static void fp_make(fb_fingerprint *fp, const char *gpu, int sms) {
  memset(fp, 0, sizeof *fp);
  snprintf(fp->gpu, sizeof fp->gpu, "%s", gpu);
  fp->cc_major = 9, fp->cc_minor = 0, fp->sm_count = sms, fp->driver_version = 13000, fp->mem_bytes = 150ull << 30;
  fb_fingerprint_toolchain(fp);
}

static void dir_for(char *out, size_t n, const char *name) {
  snprintf(out, n, "%s/%s", root, name);
}

/* a fake cubin of n bytes from seed, its source text, and its content key */
static void fake_kernel(unsigned seed, size_t n, uint8_t *cubin, char *src, size_t sn, uint8_t key[32]) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) s ^= s << 13, s ^= s >> 7, s ^= s << 17, cubin[i] = (uint8_t)s;
  snprintf(src, sn, "// fake kernel %u of %zu bytes\n", seed, n);
  fb_cache_kernel_key(src, "sm_90a", key);
}

static void winner_make(fb_winner *w, const fb_fingerprint *fp, const char *spec, long long shape, const char *variant,
                        double ms, const uint8_t kernel[32], const char *recipe) {
  memset(w, 0, sizeof *w);
  w->fp = *fp;
  snprintf(w->spec, sizeof w->spec, "%s", spec);
  w->shape = shape, w->bucket = fb_cache_bucket(shape);
  snprintf(w->arch, sizeof w->arch, "sm_90a");
  snprintf(w->variant, sizeof w->variant, "%s_%s", spec, variant);
  memcpy(w->kernel, kernel, 32);
  w->median_ms = ms, w->spread_ms = ms / 50, w->runs = 25;
  snprintf(w->runner_up, sizeof w->runner_up, "%s_runnerup", spec);
  w->runner_up_ms = ms * 1.1;
  snprintf(w->default_variant, sizeof w->default_variant, "%s_default", spec);
  w->default_ms = ms * 1.5;
  w->candidates = 12, w->failed = 1;
  snprintf(w->recipe, sizeof w->recipe, "%s", recipe);
  snprintf(w->recipe_sha, sizeof w->recipe_sha, "%064d", 7);
  fb_winner_stamp(w);
}

static void trial_make(fb_trial *t, const fb_fingerprint *fp, const char *spec, long long shape, const char *variant,
                       fb_trial_status st, double ms) {
  memset(t, 0, sizeof *t);
  t->fp = *fp;
  snprintf(t->spec, sizeof t->spec, "%s", spec);
  t->shape = shape, t->bucket = fb_cache_bucket(shape);
  snprintf(t->variant, sizeof t->variant, "%s", variant);
  t->status = st, t->median_ms = ms, t->runs = st == FB_TRIAL_OK ? 25 : 0;
  snprintf(t->message, sizeof t->message, "%s", st == FB_TRIAL_OK ? "" : "CUDA_ERROR_ILLEGAL_ADDRESS");
  snprintf(t->recipe, sizeof t->recipe, "tiny");
  t->date = 1700000000;
}

/* ---- round trip, nearest bucket ------------------------------------------------------------------------ */
static void test_winner_roundtrip(void **state) {
  (void)state;
  char d[300];
  dir_for(d, sizeof d, "rt");
  fb_cache *c;
  assert_int_equal(fb_cache_open(d, &c), FB_OK);
  fb_fingerprint fp;
  fp_make(&fp, "NVIDIA H200", 132);
  uint8_t cub[300], key[32];
  char src[128];
  fake_kernel(1, sizeof cub, cub, src, sizeof src, key);
  assert_int_equal(fb_cache_put_kernel(c, key, src, cub, sizeof cub), FB_OK);
  fb_winner w, got;
  winner_make(&w, &fp, "quant_mxfp8_row_sm90a", 8192, "t256", 0.125, key, "tiny");
  assert_int_equal(fb_cache_put_winner(c, &w), FB_OK);
  winner_make(&w, &fp, "quant_mxfp8_row_sm90a", 512, "t128", 0.01, key, "tiny");
  assert_int_equal(fb_cache_put_winner(c, &w), FB_OK);
  char note[512];
  assert_int_equal(fb_cache_get_winner(c, &fp, "quant_mxfp8_row_sm90a", 8000, &got, note, sizeof note), FB_OK);
  assert_int_equal(got.bucket, 8192);
  assert_string_equal(got.variant, "quant_mxfp8_row_sm90a_t256");
  assert_true(got.median_ms == 0.125 && got.runs == 25 && got.candidates == 12 && !memcmp(got.kernel, key, 32));
  assert_string_equal(got.fp.gpu, "NVIDIA H200");
  assert_non_null(strstr(note, "tuned for bucket 8192"));
  /* 65536 is 3 octaves from 8192 and 7 from 512: the nearest bucket, said so */
  assert_int_equal(fb_cache_get_winner(c, &fp, "quant_mxfp8_row_sm90a", 65536, &got, note, sizeof note), FB_OK);
  assert_int_equal(got.bucket, 8192);
  assert_non_null(strstr(note, "nearest bucket 8192"));
  assert_int_equal(fb_cache_get_winner(c, &fp, "quant_mxfp8_row_sm90a", 300, &got, note, sizeof note), FB_OK);
  assert_int_equal(got.bucket, 512);
  assert_int_equal(fb_cache_get_winner(c, &fp, "quant_nvfp4_tok_row_sm90a", 8192, &got, note, sizeof note), FB_ENOTFOUND);
  /* the cubin comes back byte for byte */
  void *back;
  size_t n;
  assert_int_equal(fb_cache_get_kernel(c, got.kernel, &back, &n), FB_OK);
  assert_int_equal(n, sizeof cub);
  assert_memory_equal(back, cub, n);
  free(back);
  fb_trial t, tg;
  trial_make(&t, &fp, "quant_mxfp8_row_sm90a", 8192, "quant_mxfp8_row_sm90a_t64", FB_TRIAL_FAULT, 0);
  assert_int_equal(fb_cache_put_trial(c, &t), FB_OK);
  assert_int_equal(fb_cache_get_trial(c, &fp, "quant_mxfp8_row_sm90a", 8192, "quant_mxfp8_row_sm90a_t64", &tg), FB_OK);
  assert_int_equal(tg.status, FB_TRIAL_FAULT);
  assert_string_equal(tg.message, "CUDA_ERROR_ILLEGAL_ADDRESS");
  fb_cache_counts cnt;
  assert_int_equal(fb_cache_verify(c, &cnt, NULL, NULL), FB_OK);
  assert_int_equal(cnt.entries[FB_DB_KERNELS], 1);
  assert_int_equal(cnt.entries[FB_DB_WINNERS], 2);
  assert_int_equal(cnt.entries[FB_DB_TRIALS], 1);
  assert_int_equal(cnt.bad[0] + cnt.bad[1] + cnt.bad[2], 0);
  fb_cache_close(c);
}

/* ---- a foreign fingerprint ------------------------------------------------------------------------------ */
static void test_foreign_fingerprint(void **state) {
  (void)state;
  char d[300];
  dir_for(d, sizeof d, "foreign");
  fb_cache *c;
  assert_int_equal(fb_cache_open(d, &c), FB_OK);
  fb_fingerprint h200, b200, h200_other_driver;
  fp_make(&h200, "NVIDIA H200", 132);
  fp_make(&b200, "NVIDIA B200", 148);
  h200_other_driver = h200;
  h200_other_driver.driver_version = 12080;
  uint8_t key[32] = {1};
  fb_winner w, got;
  winner_make(&w, &b200, "router_top8_e384_sm90a", 8192, "t128", 0.2, key, "inkling2_small");
  assert_int_equal(fb_cache_put_winner(c, &w), FB_OK);
  char note[512];
  assert_int_equal(fb_cache_get_winner(c, &h200, "router_top8_e384_sm90a", 8192, &got, note, sizeof note), FB_ENOTFOUND);
  assert_non_null(strstr(note, "other fingerprints"));
  assert_non_null(strstr(note, "NVIDIA B200"));
  assert_non_null(strstr(note, "ignored"));
  /* the same GPU with another driver is another fingerprint too */
  assert_int_equal(fb_cache_get_winner(c, &h200_other_driver, "router_top8_e384_sm90a", 8192, &got, note, sizeof note), FB_ENOTFOUND);
  char a[17], b[17];
  fb_fingerprint_id(&h200, a);
  fb_fingerprint_id(&h200_other_driver, b);
  assert_string_not_equal(a, b);
  fb_cache_close(c);
}

/* ---- a flipped byte -------------------------------------------------------------------------------------- */
/* flip one byte at every occurrence of marker in file (LMDB's copy-on-write pages may hold stale copies of a
 * value beside the live one): the number of places flipped */
static int flip_in_file(const char *path, const char *marker, int delta) {
  FILE *f = fopen(path, "r+b");
  if (!f) return 0;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  char *buf = malloc((size_t)n);
  fseek(f, 0, SEEK_SET);
  if (fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); fclose(f); return 0; }
  size_t ml = strlen(marker);
  int hits = 0;
  for (long i = 0; i + (long)ml <= n; ++i)
    if (!memcmp(buf + i, marker, ml)) {
      char ch = (char)(buf[i + delta] ^ 0x20);
      fseek(f, i + delta, SEEK_SET);
      fwrite(&ch, 1, 1, f);
      ++hits;
    }
  fclose(f);
  free(buf);
  return hits;
}

static int count_bad(const fb_cache_entry *e, void *arg) {
  char *last = arg;
  snprintf(last, 512, "%s/%s: %s", fb_cache_db_name(e->db), e->key, e->why);
  return 0;
}

static void test_flipped_byte(void **state) {
  (void)state;
  char d[300], data[400];
  dir_for(d, sizeof d, "flip");
  fb_cache *c;
  assert_int_equal(fb_cache_open(d, &c), FB_OK);
  fb_fingerprint fp;
  fp_make(&fp, "NVIDIA H200", 132);
  uint8_t cub[256], key[32], cub2[256], key2[32];
  char src[128], src2[128];
  fake_kernel(7, sizeof cub, cub, src, sizeof src, key);
  memcpy(cub + 100, "CUBINMARK", 9);
  assert_int_equal(fb_cache_put_kernel(c, key, src, cub, sizeof cub), FB_OK);
  fake_kernel(8, sizeof cub2, cub2, src2, sizeof src2, key2);
  assert_int_equal(fb_cache_put_kernel(c, key2, src2, cub2, sizeof cub2), FB_OK);
  fb_winner w, got;
  winner_make(&w, &fp, "amax_ten_bf16_sm90a", 8192, "t256", 0.05, key2, "tiny");
  snprintf(w.host, sizeof w.host, "FLIPMEHOST");
  assert_int_equal(fb_cache_put_winner(c, &w), FB_OK);
  winner_make(&w, &fp, "amax_tok_bf16_sm90a", 8192, "t256", 0.05, key2, "tiny");
  assert_int_equal(fb_cache_put_winner(c, &w), FB_OK);
  fb_cache_close(c);
  snprintf(data, sizeof data, "%s/data.mdb", d);
  assert_true(flip_in_file(data, "FLIPMEHOST", 3) > 0); /* the winner's text: its checksum no longer matches */
  assert_true(flip_in_file(data, "CUBINMARK", 2) > 0); /* the cubin's bytes */
  assert_int_equal(fb_cache_open(d, &c), FB_OK);
  fb_cache_counts n;
  char last[512] = "";
  assert_int_equal(fb_cache_verify(c, &n, count_bad, last), FB_OK);
  assert_int_equal(n.entries[FB_DB_WINNERS], 2);
  assert_int_equal(n.bad[FB_DB_WINNERS], 1);
  assert_int_equal(n.bad[FB_DB_KERNELS], 1);
  assert_int_equal(n.bad[FB_DB_TRIALS], 0);
  char note[512];
  assert_int_equal(fb_cache_get_winner(c, &fp, "amax_ten_bf16_sm90a", 8192, &got, note, sizeof note), FB_ENOTFOUND);
  assert_non_null(strstr(note, "fails its checksum"));
  assert_non_null(strstr(note, "not loaded"));
  assert_int_equal(fb_cache_get_winner(c, &fp, "amax_tok_bf16_sm90a", 8192, &got, note, sizeof note), FB_OK); /* the other one */
  void *back;
  size_t sz;
  assert_int_equal(fb_cache_get_kernel(c, key, &back, &sz), FB_ELMDB);
  assert_null(back);
  assert_non_null(strstr(fb_errmsg(), "checksum"));
  assert_int_equal(fb_cache_get_kernel(c, key2, &back, &sz), FB_OK);
  free(back);
  fb_cache_close(c);
}

/* ---- many writers at once, one killed ------------------------------------------------------------------- */
enum { WRITERS = 4, PER = 30 };

static void writer_entry(int wid, int i, fb_fingerprint *fp, fb_winner *w, fb_trial *t, uint8_t *cub, size_t *cn, char *src,
                         uint8_t key[32]) {
  char spec[64], var[32];
  fp_make(fp, "NVIDIA H200", 132);
  *cn = 2000 + (size_t)(i * 997 + wid * 131) % 20000; /* up to 22 KB a cubin: the 1 MiB map must grow */
  fake_kernel((unsigned)(wid * 1000 + i), *cn, cub, src, 128, key);
  snprintf(spec, sizeof spec, "spec_w%d_%03d_sm90a", wid, i);
  snprintf(var, sizeof var, "v%d", i);
  winner_make(w, fp, spec, 1024 << (i % 4), var, 0.01 * (i + 1), key, "tiny");
  w->date = 1700000000 + i;
  snprintf(w->host, sizeof w->host, "writer%d", wid);
  trial_make(t, fp, spec, 1024 << (i % 4), var, i % 5 ? FB_TRIAL_OK : FB_TRIAL_WRONG, 0.01 * (i + 1));
}

static int writer(const char *d, int wid, int forever) {
  fb_cache *c;
  if (fb_cache_open_ex(d, 1 << 20, &c) != FB_OK) return 10;
  uint8_t *cub = malloc(32768);
  for (int i = 0; forever || i < PER; ++i) {
    fb_fingerprint fp;
    fb_winner w;
    fb_trial t;
    size_t cn;
    char src[128];
    uint8_t key[32];
    writer_entry(wid, i % 100000, &fp, &w, &t, cub, &cn, src, key);
    if (fb_cache_put_kernel(c, key, src, cub, cn) != FB_OK) return 11;
    if (fb_cache_put_trial(c, &t) != FB_OK) return 12;
    if (fb_cache_put_winner(c, &w) != FB_OK) return 13;
  }
  free(cub);
  fb_cache_close(c);
  return 0;
}

static void test_concurrent_writers_and_kill(void **state) {
  (void)state;
  char d[300];
  dir_for(d, sizeof d, "concurrent");
  pid_t pid[WRITERS + 1];
  for (int k = 0; k <= WRITERS; ++k) {
    pid[k] = fork();
    assert_true(pid[k] >= 0);
    if (pid[k] == 0) _exit(writer(d, k, k == WRITERS)); /* the last one writes until it is killed */
  }
  struct timespec ts = {0, 400 * 1000 * 1000};
  nanosleep(&ts, NULL);
  kill(pid[WRITERS], SIGKILL);
  for (int k = 0; k <= WRITERS; ++k) {
    int st;
    assert_int_equal(waitpid(pid[k], &st, 0), pid[k]);
    if (k < WRITERS) {
      assert_true(WIFEXITED(st));
      assert_int_equal(WEXITSTATUS(st), 0);
    } else {
      assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    }
  }
  fb_cache *c;
  alarm(60); /* a lock the killed writer left held would hang here: fail instead */
  assert_int_equal(fb_cache_open(d, &c), FB_OK);
  fb_cache_counts n;
  char last[512] = "";
  assert_int_equal(fb_cache_verify(c, &n, count_bad, last), FB_OK);
  if (n.bad[0] + n.bad[1] + n.bad[2]) fprintf(stderr, "bad: %s\n", last);
  assert_int_equal(n.bad[0] + n.bad[1] + n.bad[2], 0);
  assert_true(n.entries[FB_DB_WINNERS] >= WRITERS * PER);
  assert_true(n.entries[FB_DB_TRIALS] >= WRITERS * PER);
  /* every entry the finished writers committed reads back equal */
  uint8_t *cub = malloc(32768);
  for (int k = 0; k < WRITERS; ++k)
    for (int i = 0; i < PER; ++i) {
      fb_fingerprint fp;
      fb_winner w, got;
      fb_trial t, tg;
      size_t cn, gn;
      char src[128];
      uint8_t key[32];
      void *back;
      writer_entry(k, i, &fp, &w, &t, cub, &cn, src, key);
      assert_int_equal(fb_cache_get_winner(c, &fp, w.spec, w.shape, &got, NULL, 0), FB_OK);
      assert_string_equal(got.variant, w.variant);
      assert_true(got.median_ms == w.median_ms && got.bucket == w.bucket);
      assert_int_equal(fb_cache_get_trial(c, &fp, t.spec, t.bucket, t.variant, &tg), FB_OK);
      assert_int_equal(tg.status, t.status);
      assert_int_equal(fb_cache_get_kernel(c, key, &back, &gn), FB_OK);
      assert_int_equal(gn, cn);
      assert_memory_equal(back, cub, cn);
      free(back);
    }
  free(cub);
  char data[400];
  struct stat st;
  snprintf(data, sizeof data, "%s/data.mdb", d);
  assert_int_equal(stat(data, &st), 0);
  assert_true(st.st_size > (1 << 20)); /* the writers opened a 1 MiB map: it grew */
  /* the killed writer left no lock behind: a new writer commits */
  fb_fingerprint fp;
  fp_make(&fp, "NVIDIA H200", 132);
  fb_trial t;
  trial_make(&t, &fp, "after_kill_sm90a", 8192, "v", FB_TRIAL_OK, 1.0);
  assert_int_equal(fb_cache_put_trial(c, &t), FB_OK);
  alarm(0);
  fprintf(stderr, "    concurrent: %ld kernels, %ld winners, %ld trials after %d writers + 1 killed; data.mdb %lld KiB (map opened at 1 MiB)\n",
          n.entries[0], n.entries[1], n.entries[2], WRITERS, (long long)st.st_size >> 10);
  fb_cache_close(c);
}

/* ---- export / import / merge / gc ----------------------------------------------------------------------- */
/* The sets of --fill: "a" and "b" share spec s1 (a faster) and s2 (b faster); s3 only in a, s4 only in b. */
static void fill(const char *d, const char *tag) {
  fb_cache *c;
  if (fb_cache_open(d, &c) != FB_OK) { fprintf(stderr, "%s\n", fb_errmsg()); exit(1); }
  fb_fingerprint fp, other;
  fp_make(&fp, "NVIDIA H200", 132);
  fp_make(&other, "NVIDIA B200", 148);
  int a = !strcmp(tag, "a");
  static const char *specs[] = {"quant_mxfp8_row_sm90a", "amax_ten_bf16_sm90a", "router_top2_e8_sm90a", "permute_bf16_sm90a"};
  double ms[2][4] = {{0.10, 0.30, 0.50, 0}, {0.20, 0.25, 0, 0.40}};
  for (int s = 0; s < 4; ++s) {
    double m = ms[a ? 0 : 1][s];
    if (m == 0) continue;
    uint8_t cub[512], key[32];
    char src[128];
    fake_kernel((unsigned)(s * 10 + a), sizeof cub, cub, src, sizeof src, key);
    if (fb_cache_put_kernel(c, key, src, cub, sizeof cub) != FB_OK) exit(1);
    fb_winner w;
    winner_make(&w, s == 2 ? &other : &fp, specs[s], 256, a ? "from_a" : "from_b", m, key, s == 3 ? "inkling2_small" : "tiny");
    if (fb_cache_put_winner(c, &w) != FB_OK) exit(1);
    fb_trial t;
    trial_make(&t, &fp, specs[s], 256, w.variant, FB_TRIAL_OK, m);
    if (fb_cache_put_trial(c, &t) != FB_OK) exit(1);
  }
  uint8_t cub[512], key[32];
  char src[128];
  fake_kernel(999 + (unsigned)a, sizeof cub, cub, src, sizeof src, key); /* a cubin no winner uses */
  if (fb_cache_put_kernel(c, key, src, cub, sizeof cub) != FB_OK) exit(1);
  fb_cache_close(c);
}

/* ---- an LMDB error in the middle of a walk ----------------------------------------------------------------- */
/* Set the flags of every leaf page of data.mdb that holds a value of magic's database (and no other database's) to
 * `flags`, through the file, under a cache that is open; keeps the old bytes in old[] (offsets in at[]). */
enum { PSZ = 4096 };
static int set_leaf_flags(const char *data, const char *magic, uint16_t flags, long *at, uint16_t *old, int max) {
  FILE *f = fopen(data, "r+b");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long size = ftell(f), n = 0;
  uint8_t pg[PSZ];
  for (long i = 2; i < size / PSZ && n < max; ++i) {
    fseek(f, i * PSZ, SEEK_SET);
    assert_int_equal(fread(pg, 1, PSZ, f), PSZ);
    uint64_t pgno;
    uint16_t fl;
    memcpy(&pgno, pg, 8), memcpy(&fl, pg + 10, 2); /* LMDB 0.9's page header: pgno, pad, flags, lower, upper */
    int others = 0;
    for (const char *const *m = (const char *const[]){"FBW1", "FBT1", "FBK1", NULL}; *m; ++m)
      others += strcmp(*m, magic) && memmem(pg, PSZ, *m, 4);
    if (pgno != (uint64_t)i || fl != 0x02 /* P_LEAF */ || !memmem(pg, PSZ, magic, 4) || others) continue;
    at[n] = i * PSZ + 10, old[n] = fl;
    fseek(f, at[n], SEEK_SET);
    fwrite(&flags, 2, 1, f);
    ++n;
  }
  fclose(f);
  return (int)n;
}
static void restore_flags(const char *data, const long *at, const uint16_t *old, int n) {
  FILE *f = fopen(data, "r+b");
  assert_non_null(f);
  for (int i = 0; i < n; ++i) fseek(f, at[i], SEEK_SET), fwrite(&old[i], 2, 1, f);
  fclose(f);
}

static void fill(const char *d, const char *tag);
static void test_lmdb_error_mid_walk(void **state) {
  (void)state;
  char d[300], data[400];
  dir_for(d, sizeof d, "midwalk");
  fill(d, "a");
  snprintf(data, sizeof data, "%s/data.mdb", d);
  fb_cache *c;
  assert_int_equal(fb_cache_open(d, &c), FB_OK);
  fb_cache_counts n0, n;
  assert_int_equal(fb_cache_verify(c, &n0, NULL, NULL), FB_OK);
  assert_int_equal(n0.entries[FB_DB_WINNERS], 3);
  long at[8];
  uint16_t old[8];
  int hit = set_leaf_flags(data, "FBW1", 0x10 /* not a leaf, not a branch: LMDB says MDB_CORRUPTED */, at, old, 8);
  assert_true(hit > 0);
  /* verify, export, the lookup: an error naming LMDB's, not "0 winners" */
  fb_status s = fb_cache_verify(c, &n, NULL, NULL);
  if (s == FB_OK) fprintf(stderr, "  verify of a damaged winners page: FB_OK, %ld winners\n", n.entries[FB_DB_WINNERS]);
  assert_int_equal(s, FB_ELMDB);
  assert_non_null(strstr(fb_errmsg(), "MDB_"));
  void *data_out = NULL;
  size_t size;
  s = fb_cache_export(c, NULL, &data_out, &size, &n);
  if (s == FB_OK) fprintf(stderr, "  export of a damaged winners page: FB_OK, %zu bytes\n", size), free(data_out);
  assert_int_equal(s, FB_ELMDB);
  fb_fingerprint fp;
  fb_winner w;
  fp_make(&fp, "NVIDIA H200", 132);
  char note[512];
  assert_int_equal(fb_cache_get_winner(c, &fp, "quant_mxfp8_row_sm90a", 256, &w, note, sizeof note), FB_ELMDB);
  /* gc: its walk of winners fails, so it deletes nothing */
  long dropped = -1, kept = -1;
  s = fb_cache_gc(c, &dropped, &kept, 0);
  if (s == FB_OK) fprintf(stderr, "  gc over a damaged winners page: FB_OK, %ld dropped\n", dropped);
  assert_int_not_equal(s, FB_OK);
  fb_cache_close(c);
  /* a new open finds it in its check and calls the cache damaged */
  assert_int_equal(fb_cache_open(d, &c), FB_EIO);
  assert_non_null(strstr(fb_errmsg(), "damaged"));
  assert_non_null(strstr(fb_errmsg(), data));
  restore_flags(data, at, old, hit);
  assert_int_equal(fb_cache_open(d, &c), FB_OK);
  assert_int_equal(fb_cache_verify(c, &n, NULL, NULL), FB_OK);
  assert_memory_equal(&n, &n0, sizeof n); /* every cubin still there */
  /* kernels, the export's last pass: not an export without them */
  hit = set_leaf_flags(data, "FBK1", 0x10, at, old, 8);
  assert_true(hit > 0);
  s = fb_cache_export(c, NULL, &data_out, &size, &n);
  if (s == FB_OK) fprintf(stderr, "  export of a damaged kernels page: FB_OK, %ld kernels\n", n.entries[FB_DB_KERNELS]), free(data_out);
  assert_int_equal(s, FB_ELMDB);
  restore_flags(data, at, old, hit);
  fb_cache_close(c);
}

/* ---- the seed corpus of tests/fuzz/fuzz_cache.c ------------------------------------------------------------ */
static void seed(const char *dir, int i, uint8_t mode, const void *a, size_t an, const void *b, size_t bn, int keyed) {
  char p[400];
  snprintf(p, sizeof p, "%s/seed_%03d_%u", dir, i, mode);
  FILE *f = fopen(p, "wb");
  if (!f) { perror(p); exit(1); }
  uint8_t kl[2] = {(uint8_t)an, (uint8_t)(an >> 8)};
  fwrite(&mode, 1, 1, f);
  if (keyed) fwrite(kl, 1, 2, f);
  fwrite(a, 1, an, f);
  fwrite(b, 1, bn, f);
  fclose(f);
}
static int fuzz_seeds(const char *dir) {
  char d[400];
  snprintf(d, sizeof d, "%s/cache", dir);
  fill(d, "a"), fill(d, "b");
  fb_cache *c;
  void *x;
  size_t xn;
  fb_cache_counts n;
  if (fb_cache_open(d, &c) != FB_OK || fb_cache_export(c, NULL, &x, &xn, &n) != FB_OK) return fprintf(stderr, "%s\n", fb_errmsg()), 1;
  fb_cache_close(c);
  const uint8_t *p = x;
  int i = 0;
  seed(dir, i++, 5, p, xn, NULL, 0, 0);                 /* the export, as written */
  seed(dir, i++, 6, p + 8, xn - 8 - 32, NULL, 0, 0);    /* its count and entries */
  for (size_t off = 16; off + 13 <= xn - 32;) {          /* each entry: db u8 | key u32 | value u64 | key | value */
    uint32_t kl;
    uint64_t vl;
    memcpy(&kl, p + off + 1, 4), memcpy(&vl, p + off + 5, 8);
    const uint8_t *k = p + off + 13, *v = k + kl;
    seed(dir, i++, p[off], k, kl, v, vl, 1);
    if (p[off] != FB_DB_KERNELS && vl >= 44) seed(dir, i++, (uint8_t)(p[off] + 2), k, kl, v + 12, vl - 44, 1);
    off += 13 + kl + vl;
  }
  free(x);
  printf("%d seeds in %s\n", i, dir);
  return 0;
}

static void note_count(const char *msg, void *arg) {
  int *n = arg;
  ++*n;
  if (strstr(msg, "kept the local")) n[1]++;
  if (strstr(msg, "kept the imported")) n[2]++;
}

static void test_export_import_merge_gc(void **state) {
  (void)state;
  char da[300], db[300], dc[300];
  dir_for(da, sizeof da, "ea"), dir_for(db, sizeof db, "eb"), dir_for(dc, sizeof dc, "ec");
  fill(da, "a");
  fill(db, "b");
  fb_cache *a, *b, *c;
  assert_int_equal(fb_cache_open(da, &a), FB_OK);
  assert_int_equal(fb_cache_open(db, &b), FB_OK);
  assert_int_equal(fb_cache_open(dc, &c), FB_OK);
  void *x;
  size_t xn;
  fb_cache_counts en, added;
  assert_int_equal(fb_cache_export(a, NULL, &x, &xn, &en), FB_OK);
  assert_int_equal(en.entries[FB_DB_WINNERS], 3);
  assert_int_equal(en.entries[FB_DB_KERNELS], 4);
  /* into an empty cache: the same entries */
  int notes[3] = {0}, kept;
  assert_int_equal(fb_cache_import(c, x, xn, "a.fbx", note_count, notes, &added, &kept), FB_OK);
  assert_int_equal(added.entries[FB_DB_WINNERS], 3);
  assert_int_equal(notes[0], 0);
  void *x2;
  size_t xn2;
  assert_int_equal(fb_cache_export(c, NULL, &x2, &xn2, &en), FB_OK);
  assert_int_equal(xn2, xn);
  assert_memory_equal(x2, x, xn); /* byte-for-byte the same export */
  free(x2);
  /* a corrupt export: nothing written */
  uint8_t *bad = malloc(xn);
  memcpy(bad, x, xn);
  bad[xn / 2] ^= 1;
  fb_cache_counts before, after;
  assert_int_equal(fb_cache_verify(b, &before, NULL, NULL), FB_OK);
  assert_int_equal(fb_cache_import(b, bad, xn, "bad.fbx", note_count, notes, &added, &kept), FB_EINVAL);
  assert_non_null(strstr(fb_errmsg(), "bad.fbx"));
  assert_int_equal(fb_cache_import(b, bad, xn / 2, "short.fbx", note_count, notes, &added, &kept), FB_EINVAL);
  assert_int_equal(fb_cache_verify(b, &after, NULL, NULL), FB_OK);
  assert_memory_equal(&before, &after, sizeof before);
  free(bad);
  /* merge a into b: s1 a faster (imported kept), s2 b faster (local kept), s3 added */
  memset(notes, 0, sizeof notes);
  assert_int_equal(fb_cache_import(b, x, xn, "a.fbx", note_count, notes, &added, &kept), FB_OK);
  assert_int_equal(notes[0], 2);
  assert_int_equal(notes[1], 1);
  assert_int_equal(notes[2], 1);
  assert_int_equal(kept, 1);
  fb_fingerprint fp, other;
  fp_make(&fp, "NVIDIA H200", 132);
  fp_make(&other, "NVIDIA B200", 148);
  fb_winner w;
  assert_int_equal(fb_cache_get_winner(b, &fp, "quant_mxfp8_row_sm90a", 256, &w, NULL, 0), FB_OK);
  assert_true(w.median_ms == 0.10);
  assert_non_null(strstr(w.variant, "from_a"));
  assert_int_equal(fb_cache_get_winner(b, &fp, "amax_ten_bf16_sm90a", 256, &w, NULL, 0), FB_OK);
  assert_true(w.median_ms == 0.25);
  assert_int_equal(fb_cache_get_winner(b, &other, "router_top2_e8_sm90a", 256, &w, NULL, 0), FB_OK);
  assert_int_equal(fb_cache_get_winner(b, &fp, "permute_bf16_sm90a", 256, &w, NULL, 0), FB_OK);
  assert_int_equal(fb_cache_verify(b, &after, NULL, NULL), FB_OK);
  assert_int_equal(after.bad[0] + after.bad[1] + after.bad[2], 0);
  free(x);
  /* filters: by fingerprint text, by recipe */
  fb_cache_filter f = {.fingerprint = "B200"};
  assert_int_equal(fb_cache_export(b, &f, &x, &xn, &en), FB_OK);
  assert_int_equal(en.entries[FB_DB_WINNERS], 1);
  assert_int_equal(en.entries[FB_DB_KERNELS], 1);
  free(x);
  fb_cache_filter fr = {.recipe = "inkling2_small"};
  assert_int_equal(fb_cache_export(b, &fr, &x, &xn, &en), FB_OK);
  assert_int_equal(en.entries[FB_DB_WINNERS], 1);
  free(x);
  /* gc: b holds 4 winners' cubins + 2 stale (s1 of b, s2 of a lost their merges) + b's unused one + a's unused one */
  long dropped, keptk;
  assert_int_equal(fb_cache_gc(b, &dropped, &keptk, 1), FB_OK);
  assert_int_equal(keptk, 4);
  long dry = dropped;
  assert_true(dry >= 2);
  assert_int_equal(fb_cache_gc(b, &dropped, &keptk, 0), FB_OK);
  assert_int_equal(dropped, dry);
  assert_int_equal(fb_cache_verify(b, &after, NULL, NULL), FB_OK);
  assert_int_equal(after.entries[FB_DB_KERNELS], 4);
  assert_int_equal(after.bad[0] + after.bad[1] + after.bad[2], 0); /* every winner still has its cubin */
  fb_cache_close(a), fb_cache_close(b), fb_cache_close(c);
}

static void test_default_dir(void **state) {
  (void)state;
  char buf[512];
  setenv("FOURBIT_CACHE", "/tmp/somewhere", 1);
  assert_string_equal(fb_cache_default_dir(buf, sizeof buf), "/tmp/somewhere");
  unsetenv("FOURBIT_CACHE");
  setenv("HOME", "/home/u", 1);
  assert_string_equal(fb_cache_default_dir(buf, sizeof buf), "/home/u/.cache/fourbit");
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "--fill")) {
    fill(argv[2], argv[3]);
    return 0;
  }
  if (argc == 3 && !strcmp(argv[1], "--fuzz-seeds")) return fuzz_seeds(argv[2]);
  snprintf(root, sizeof root, "/tmp/fb_test_cache_XXXXXX");
  if (!mkdtemp(root)) return perror("mkdtemp"), 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_winner_roundtrip),   cmocka_unit_test(test_foreign_fingerprint),
      cmocka_unit_test(test_flipped_byte),       cmocka_unit_test(test_concurrent_writers_and_kill),
      cmocka_unit_test(test_export_import_merge_gc), cmocka_unit_test(test_default_dir),
      cmocka_unit_test(test_lmdb_error_mid_walk),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", root);
  return rc;
}
