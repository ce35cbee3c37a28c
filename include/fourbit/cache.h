/* fourbit/cache.h — the LMDB kernel cache (cache/cache.c): content-addressed cubins, the tuned winners per device
 * fingerprint and shape bucket, the trials; verify, export / import, gc (cache/README.md: the schema). */
#ifndef FOURBIT_CACHE_H
#define FOURBIT_CACHE_H

#include "fourbit/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the LMDB kernel cache (cache/cache.c) ------------------------------------------------------ */
typedef struct fb_cache fb_cache;
/* Open (creating) the cache environment in dir: a local disk, not a network file system. An existing data.mdb is
 * checked first, in a forked child (every page of every database read): a damaged one (truncated, 0 bytes, a
 * page LMDB cannot read) is FB_EIO with how to rebuild it, never a crash. Without write access the cache is
 * opened read-only (writes then fail with FB_EIO saying so). Open it before starting threads: the child of a fork
 * from a multithreaded process could wait forever on a lock another thread held (fourbit's commands, the tuner and
 * train start all open it first). */
fb_status fb_cache_open(const char *dir, fb_cache **out);
/* The same, read-only and never creating anything (FB_ENOTFOUND when dir is not there): ls, verify, export. */
fb_status fb_cache_open_readonly(const char *dir, fb_cache **out);
void fb_cache_close(fb_cache *c);
/* The content address of a compiled kernel: sha256 of its source, arch, NVRTC version and options. */
void fb_cache_kernel_key(const char *src, const char *arch, uint8_t key[32]);
fb_status fb_cache_put_kernel(fb_cache *c, const uint8_t key[32], const char *src, const void *cubin, size_t size);
/* FB_ENOTFOUND when absent; an entry of another format or failing its checksum is reported, not loaded. */
fb_status fb_cache_get_kernel(fb_cache *c, const uint8_t key[32], void **cubin, size_t *size);
/* fb_cache_open with an initial map size in bytes (0: 256 MiB); the map doubles whenever it is full. */
fb_status fb_cache_open_ex(const char *dir, size_t mapsize, fb_cache **out);
const char *fb_cache_dir(const fb_cache *c);
int fb_cache_readonly(const fb_cache *c); /* opened read-only (no write access, or fb_cache_open_readonly) */
size_t fb_cache_mapsize(fb_cache *c);
/* $FOURBIT_CACHE, else ~/.cache/fourbit, into buf. */
const char *fb_cache_default_dir(char *buf, size_t n);

/* What winners are keyed by: the device (GPU name, compute capability, SMs, memory, driver) and the
 * toolchain (NVRTC and fourbit versions). */
typedef struct {
  char gpu[96];
  int cc_major, cc_minor, sm_count, driver_version;
  unsigned long long mem_bytes;
  int nvrtc_major, nvrtc_minor;
  char fourbit[16];
} fb_fingerprint;
void fb_fingerprint_text(const fb_fingerprint *fp, char *buf, size_t n); /* for people, and what the id hashes */
void fb_fingerprint_id(const fb_fingerprint *fp, char id[17]);            /* 16 hex digits */
void fb_fingerprint_toolchain(fb_fingerprint *fp);                        /* fill the NVRTC and fourbit fields */

/* Shape buckets: the tokens per rank rounded up to a power of two. */
long long fb_cache_bucket(long long shape);

/* The tuned variant of a kernel spec for one fingerprint and shape bucket. */
typedef struct {
  fb_fingerprint fp;
  char spec[128];            /* kernel spec name (the plan's) */
  long long bucket, shape;   /* bucket, and the tokens per rank it was measured at */
  char arch[16];
  char variant[192];         /* the winner's full name */
  uint8_t kernel[32];        /* its cubin's key in `kernels` */
  double median_ms, spread_ms;
  int runs;
  char runner_up[192];
  double runner_up_ms;
  char default_variant[192]; /* what runs untuned, and its time */
  double default_ms;
  int candidates, failed;
  char recipe[64], recipe_sha[65];
  long long date;            /* unix seconds */
  char host[64];
} fb_winner;
void fb_winner_stamp(fb_winner *w); /* date and host of now, here */

typedef enum { FB_TRIAL_OK = 0, FB_TRIAL_COMPILE, FB_TRIAL_WRONG, FB_TRIAL_FAULT, FB_TRIAL_TIMEOUT } fb_trial_status;
const char *fb_trial_status_name(fb_trial_status s);
/* One measured (or failed) candidate: failures are kept so that a later sweep does not retry them. */
typedef struct {
  fb_fingerprint fp;
  char spec[128];
  long long bucket, shape;
  char variant[192];
  fb_trial_status status;
  double median_ms, spread_ms;
  int runs;
  long wrong;
  char message[256];
  char recipe[64];
  long long date;
} fb_trial;

fb_status fb_cache_put_winner(fb_cache *c, const fb_winner *w);
/* The winner of spec for fp at shape's bucket, else the nearest bucket (log distance; ties to the larger).
 * note (may be NULL) says which: exact, nearest, or why none (bad entries skipped; winners that exist only for
 * other fingerprints, ignored). FB_ENOTFOUND when none is usable. Bad and foreign entries are never loaded. */
fb_status fb_cache_get_winner(fb_cache *c, const fb_fingerprint *fp, const char *spec, long long shape, fb_winner *out,
                              char *note, size_t notelen);
fb_status fb_cache_put_trial(fb_cache *c, const fb_trial *t);
fb_status fb_cache_get_trial(fb_cache *c, const fb_fingerprint *fp, const char *spec, long long bucket, const char *variant,
                             fb_trial *out);

typedef enum { FB_DB_KERNELS = 0, FB_DB_WINNERS = 1, FB_DB_TRIALS = 2 } fb_cache_db;
const char *fb_cache_db_name(fb_cache_db db);
typedef struct {
  fb_cache_db db;
  const char *key;          /* printable: hex for kernels */
  size_t size;              /* value bytes */
  const char *why;          /* NULL when good, else what is wrong (format, checksum, foreign key) */
  size_t cubin_size;        /* kernels */
  const fb_winner *winner;  /* winners, when good */
  const fb_trial *trial;    /* trials, when good */
} fb_cache_entry;
/* Return nonzero to stop. Pointers are valid during the call only. */
typedef int (*fb_cache_visit)(const fb_cache_entry *e, void *arg);
fb_status fb_cache_iterate(fb_cache *c, fb_cache_db db, fb_cache_visit fn, void *arg);
typedef struct {
  long entries[3], bad[3]; /* by fb_cache_db */
} fb_cache_counts;
/* Every entry checked (format, checksum, key against value; a winner's cubin present and good); bad ones go
 * to fn (may be NULL). */
fb_status fb_cache_verify(fb_cache *c, fb_cache_counts *n, fb_cache_visit bad, void *arg);

/* Export: one buffer (FBX1, versioned, sha256 at the end) of the good entries; with a filter, the winners and
 * trials whose fingerprint (id prefix or text substring) and recipe (name or sha prefix) match, and the
 * cubins those winners use. *data is malloc'd. */
typedef struct {
  const char *fingerprint, *recipe; /* NULL or "": any */
} fb_cache_filter;
fb_status fb_cache_export(fb_cache *c, const fb_cache_filter *f, void **data, size_t *size, fb_cache_counts *n);
/* Import (merge) an export: the whole file is checked first (FB_EINVAL, nothing written, if any of it is bad),
 * then written in one transaction. A winner already here under the same key: the faster median stays, and
 * note() says which. Trials and good cubins already here stay. */
typedef void (*fb_cache_note)(const char *msg, void *arg);
fb_status fb_cache_import(fb_cache *c, const void *data, size_t size, const char *name, fb_cache_note note, void *arg,
                          fb_cache_counts *added, int *kept_local);
/* The decoders, on their own (tests/fuzz/fuzz_cache.c): one stored value of db under its key, checked as verify
 * and every read check it (format, length, checksum, fields, the key it belongs to): NULL when good, else why not;
 * *w (winners) or *t (trials) filled when good. And a whole export file, checked as import checks it before it
 * writes (FB_EINVAL naming name and the entry; n: the entries by database). */
const char *fb_cache_decode(fb_cache_db db, const void *key, size_t klen, const void *val, size_t vlen, fb_winner *w, fb_trial *t);
fb_status fb_cache_check_export(const void *data, size_t size, const char *name, fb_cache_counts *n);
/* Drop the cubins no good winner uses (dry_run: only count). */
fb_status fb_cache_gc(fb_cache *c, long *dropped, long *kept, int dry_run);

#ifdef __cplusplus
}
#endif
#endif
