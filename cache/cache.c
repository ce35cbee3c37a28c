/* cache.c — the LMDB kernel cache: one LMDB environment per directory (local disk only: LMDB's locks and
 * its memory map do not work on network file systems; see cache/README.md), three named databases.
 *
 * kernels: key   = sha256(source || NUL || arch || NUL || NVRTC version || NUL || compile options)
 *          value = "FBK1" | u32 format version | u64 cubin size | sha256(source) | sha256(cubin) | cubin
 * winners: key   = "<fingerprint id>/<kernel spec>/b<bucket, 12 digits>"
 *          value = "FBW1" | u32 format version | u32 n | n bytes of "field=value\n" lines | sha256(all before)
 * trials:  key   = "<fingerprint id>/<kernel spec>/b<bucket>/<variant>"
 *          value = "FBT1" | ... as winners
 * The fingerprint id is the first 16 hex digits of sha256 of the device fingerprint and toolchain
 * (fb_fingerprint_text); the value repeats the whole fingerprint, and an entry whose value names another
 * fingerprint than its key is reported and never loaded, as is one of another format or failing its checksum.
 *
 * Transactions are short; readers never block writers; many processes may write at once (LMDB serializes
 * writers with a robust mutex, so a killed writer's lock is recovered and its open transaction simply never
 * happened). The map grows on MDB_MAP_FULL (doubling) and adopts another process's growth on MDB_MAP_RESIZED.
 *
 * An existing data.mdb is checked before it is used (check_env: a forked child reads every page; a damaged cache
 * is FB_EIO, never a crash), every walk's LMDB error other than MDB_NOTFOUND is an error, and a cache without
 * write access opens read-only (see "environment" below and cache/README.md).
 *
 * Entry points: fb_cache_open(), fb_cache_open_readonly(), fb_cache_kernel_key(), fb_cache_put_kernel()/get_kernel(), fb_fingerprint_*(),
 * fb_cache_put_winner()/get_winner(), fb_cache_put_trial()/get_trial(), fb_cache_iterate(), fb_cache_verify(),
 * fb_cache_export()/import(), fb_cache_gc(), fb_cache_default_dir(), and the decoders on their own:
 * fb_cache_decode(), fb_cache_check_export() (tests/fuzz/fuzz_cache.c). */
#include "fb_error.h"
#include "fb_str.h"
#include "fourbit.h"

#include <errno.h>
#include <lmdb.h>
#include <math.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KERNEL_FORMAT 1u
/* 2: kernel names from gen/kname.c (2026-12-01): the GEMMs of NVFP4 operands with a per-tensor outer scale gained
   _ten, the per-tensor amax is amax_ten_bf16; a format-1 winner may name a kernel under its old name, so format-1
   records are reported as another format, never loaded */
#define RECORD_FORMAT 2u
#define HDR (4 + 4 + 8 + 32 + 32)
#define EXPORT_FORMAT 1u

struct fb_cache {
  MDB_env *env;
  MDB_dbi dbi[3]; /* FB_DB_KERNELS, FB_DB_WINNERS, FB_DB_TRIALS */
  pthread_rwlock_t grow; /* transactions hold it shared; a map resize holds it exclusively (LMDB's rule) */
  int ro;                /* opened read-only (no write access): every write fails with a message saying so */
  int have[3];           /* the database exists (a read-only cache may lack one: it reads as empty) */
  char dir[512];
};

static const char *const DBNAME[3] = {"kernels", "winners", "trials"};
const char *fb_cache_db_name(fb_cache_db db) { return (unsigned)db < 3 ? DBNAME[db] : "?"; }

/* ---- environment ------------------------------------------------------------------------------------------
 * A damaged data.mdb must not crash whoever opens it: LMDB trusts its pages, so a truncated file faults (SIGBUS)
 * and a flipped byte in a page can send a pointer anywhere (SIGSEGV). fb_cache_open therefore checks an existing
 * file before this process maps it: a 0-byte file is damaged (LMDB would silently start a new, empty cache over
 * it), and a forked child opens the environment, checks that the pages the meta page claims fit in the file, then
 * walks every key and value of every database (entries in order, as many as the database's stat says). The
 * child's death by a signal, or any LMDB error in the walk, makes the cache damaged (FB_EIO, with how to rebuild
 * it), and the caller never touches its pages. A cache without write access (permission bits, a read-only mount)
 * is opened read-only: MDB_RDONLY, and without LMDB's lock file when that cannot be opened either. */
static int mkdir_p(const char *dir) {
  char tmp[512];
  snprintf(tmp, sizeof tmp, "%s", dir);
  for (char *p = tmp + 1; *p; ++p)
    if (*p == '/') {
      *p = 0;
      if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
      *p = '/';
    }
  return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

const char *fb_cache_default_dir(char *buf, size_t n) {
  const char *e = getenv("FOURBIT_CACHE"), *h = getenv("HOME");
  if (e && *e) snprintf(buf, n, "%s", e);
  else snprintf(buf, n, "%s/.cache/fourbit", h && *h ? h : ".");
  return buf;
}

static fb_status damaged(const char *dir, const char *why) {
  return FB_USERERR(FB_EIO,
                    "%s/data.mdb: the cache is damaged (%s); fourbit does not read it. Move the directory away "
                    "(mv %s %s.damaged) and rebuild it with `fourbit tune` (cubins: `fourbit gen --cache`), or import "
                    "an export into a fresh directory (`fourbit cache import FILE --cache %s`)",
                    dir, why, dir, dir, dir);
}

/* Create and open *env on dir read-write, else (no write access) read-only, else read-only without the lock file
 * (a read-only cache has no writers to lock out). *ro: which. mapsize 0: LMDB's (the file's own size). A failed
 * mdb_env_open leaves the handle unusable (LMDB's rule), so each try has a new one. */
static int env_open(MDB_env **env, const char *dir, size_t mapsize, int force_ro, int *ro) {
  unsigned tries[3] = {MDB_NOTLS, MDB_NOTLS | MDB_RDONLY, MDB_NOTLS | MDB_RDONLY | MDB_NOLOCK};
  int r = EACCES;
  *env = NULL;
  for (int i = force_ro ? 1 : 0; i < 3; ++i) {
    if ((r = mdb_env_create(env))) return r;
    r = mdb_env_set_maxdbs(*env, 8);
    if (!r && mapsize) r = mdb_env_set_mapsize(*env, mapsize);
    if (!r) r = mdb_env_set_maxreaders(*env, 512);
    if (!r) r = mdb_env_open(*env, dir, tries[i], 0644);
    if (!r) {
      *ro = i > 0;
      return 0;
    }
    mdb_env_close(*env);
    *env = NULL;
    if (r != EACCES && r != EROFS) return r;
  }
  return r;
}

/* The pages the environment's meta page claims must lie inside the file (a truncated file faults on the first
 * touch of a missing page). NULL when they do, else why not (in buf). */
static const char *size_bad(MDB_env *env, char *buf, size_t n) {
  MDB_envinfo info;
  MDB_stat st;
  mdb_filehandle_t fd;
  struct stat fs;
  if (mdb_env_info(env, &info) || mdb_env_stat(env, &st) || mdb_env_get_fd(env, &fd) || fstat(fd, &fs))
    return snprintf(buf, n, "its size cannot be read"), buf;
  unsigned long long need = ((unsigned long long)info.me_last_pgno + 1) * st.ms_psize;
  if (need <= (unsigned long long)fs.st_size) return NULL;
  snprintf(buf, n, "truncated: %lld bytes, but its pages end at byte %llu", (long long)fs.st_size, need);
  return buf;
}

/* Where the child's map of data.mdb lies ([lo, lo + the used pages)), for the walk's bounds checks: from
 * /proc/self/maps, the mapping of data.mdb's inode. 0 when found. */
typedef struct {
  uintptr_t lo, end;
  size_t psize;
} map_span;
static int find_map(MDB_env *env, map_span *m) {
  mdb_filehandle_t fd;
  struct stat fs;
  MDB_envinfo info;
  MDB_stat st;
  if (mdb_env_get_fd(env, &fd) || fstat(fd, &fs) || mdb_env_info(env, &info) || mdb_env_stat(env, &st)) return -1;
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  char line[1024];
  int found = -1;
  while (found && fgets(line, sizeof line, f)) {
    unsigned long a, b, ino;
    if (sscanf(line, "%lx-%lx %*s %*s %*s %lu", &a, &b, &ino) == 3 && ino == (unsigned long)fs.st_ino && strstr(line, "data.mdb")) {
      m->lo = a, m->psize = st.ms_psize, m->end = a + (uintptr_t)(info.me_last_pgno + 1) * st.ms_psize;
      found = m->end <= b ? 0 : -1;
    }
  }
  fclose(f);
  return found;
}

/* A key and its value as LMDB 0.9 lays them out: both inside the used pages; a small value in the key's page, a
 * big one at the start (after the 16-byte header) of overflow pages (P_OVERFLOW, enough of them). NULL when so. */
static const char *node_bad(const map_span *m, const MDB_val *k, const MDB_val *v) {
  uintptr_t kp = (uintptr_t)k->mv_data, vp = (uintptr_t)v->mv_data;
  if (!m->lo) return NULL;
  if (kp < m->lo || kp + k->mv_size > m->end || vp < m->lo || vp + v->mv_size > m->end) return "a node points outside the file";
  size_t pk = (kp - m->lo) / m->psize;
  if (k->mv_size && (kp + k->mv_size - 1 - m->lo) / m->psize != pk) return "a key runs over its page";
  if ((vp - m->lo) / m->psize == pk) return v->mv_size && (vp + v->mv_size - 1 - m->lo) / m->psize != pk ? "a value runs over its page" : NULL;
  uint16_t flags;
  uint32_t pages;
  if ((vp - m->lo) % m->psize != 16) return "a big value does not start an overflow page";
  memcpy(&flags, (const void *)(vp - 16 + 10), 2), memcpy(&pages, (const void *)(vp - 16 + 12), 4);
  if (!(flags & 0x04) || (uint64_t)pages * m->psize < 16 + (uint64_t)v->mv_size) return "a big value's overflow pages are wrong";
  return NULL;
}

/* Every page of a B-tree checked as LMDB 0.9 lays it out (lmdb's mdb.c: MDB_page, MDB_node, MDB_meta, MDB_db) before
 * LMDB touches it: a writer copies a page by its lower/upper bounds and follows branch pointers without checks,
 * so a flipped bit there faults a later put even when every read succeeded. Page: pgno u64 | pad u16 | flags u16
 * | lower u16 | upper u16 (overflow: pages u32) | node offsets u16...; node: lo u16 | hi u16 | flags u16 | ksize
 * u16 | key | data (a branch node's child page: lo | hi << 16 | flags << 32; a leaf's data size: lo | hi << 16).
 * NULL when the tree is sound, else what is wrong. */
typedef struct {
  const uint8_t *map;
  uint64_t npages;
  size_t psize;
  uint64_t entries;
  const char *why;
} tree_ctx;
static uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static void tree_page(tree_ctx *t, uint64_t pg, int depth, int want_depth) {
  if (t->why) return;
  if (pg < 2 || pg >= t->npages) { t->why = "a page number outside the file"; return; }
  if (depth > want_depth || depth > 32) { t->why = "a tree deeper than its record says"; return; }
  const uint8_t *p = t->map + pg * t->psize;
  uint16_t flags = rd16(p + 10), lower = rd16(p + 12), upper = rd16(p + 14);
  int branch = (flags & 0x03) == 0x01, leaf = (flags & 0x03) == 0x02;
  if (rd64(p) != pg) { t->why = "a page that is not where its number says"; return; }
  if (!branch && !leaf) { t->why = "a page that is neither branch nor leaf"; return; }
  if (branch != (depth < want_depth)) { t->why = "a leaf where a branch belongs, or the reverse"; return; }
  if (lower < 16 || lower > upper || upper > t->psize || (lower & 1)) { t->why = "a page's bounds are wrong"; return; }
  for (int i = 0; i < (lower - 16) / 2 && !t->why; ++i) {
    uint16_t off = rd16(p + 16 + 2 * i);
    if (off < upper || (size_t)off + 8 > t->psize || (off & 1)) { t->why = "a node offset outside its page"; return; }
    const uint8_t *n = p + off;
    uint16_t lo = rd16(n), hi = rd16(n + 2), nf = rd16(n + 4), ks = rd16(n + 6);
    if (branch) {
      if ((size_t)off + 8 + ks > t->psize) { t->why = "a branch key runs over its page"; return; }
      tree_page(t, (uint64_t)lo | (uint64_t)hi << 16 | (uint64_t)nf << 32, depth + 1, want_depth);
      continue;
    }
    uint64_t ds = (uint64_t)lo | (uint64_t)hi << 16;
    ++t->entries;
    if (nf & ~0x03u) { t->why = "a node of a kind fourbit never stores"; return; }
    if ((size_t)off + 8 + ks + (nf & 0x01 ? 8 : ds) > t->psize) { t->why = "a leaf node runs over its page"; return; }
    if (nf & 0x01) { /* F_BIGDATA: the data is in overflow pages */
      uint64_t op = rd64(n + 8 + ks);
      if (op < 2 || op >= t->npages) { t->why = "an overflow page number outside the file"; return; }
      const uint8_t *o = t->map + op * t->psize;
      uint32_t pages;
      memcpy(&pages, o + 12, 4);
      if (rd64(o) != op || !(rd16(o + 10) & 0x04) || op + pages > t->npages || (uint64_t)pages * t->psize < 16 + ds) {
        t->why = "a big value's overflow pages are wrong";
        return;
      }
    }
  }
}
/* One database's tree from its MDB_db record (md_depth u16 at 6, md_entries at 32, md_root at 40). */
static const char *tree_bad(tree_ctx *t, const uint8_t *db) {
  uint64_t root = rd64(db + 40), entries = rd64(db + 32);
  uint16_t depth = rd16(db + 6);
  if (root == ~(uint64_t)0) return entries ? "an empty database with entries" : NULL;
  t->entries = 0, t->why = NULL;
  tree_page(t, root, 1, depth);
  if (!t->why && t->entries != entries) t->why = "a database holds another count of entries than its record says";
  return t->why;
}
/* The free-page and main trees of the snapshot of read transaction `txnid` (its meta page: the one of that txnid,
 * copied and then found unchanged; the transaction keeps writers off the snapshot's pages), then each named
 * database's tree from its record in main. 1 in *skip when that meta page was already rewritten by newer commits. */
static const char *pages_bad(const map_span *m, uint64_t txnid, int *skip) {
  *skip = 0;
  if (!m->lo) return NULL;
  tree_ctx t = {(const uint8_t *)m->lo, (m->end - m->lo) / m->psize, m->psize, 0, NULL};
  /* MDB_meta: magic u32 | version u32 | address | mapsize | the free and main MDB_db (48 bytes each) | last page | txnid */
  uint8_t meta[136];
  const volatile uint8_t *src = t.map + (txnid & 1) * m->psize + 16;
  for (int i = 0; i < 136; ++i) meta[i] = src[i];
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (rd64(meta + 128) != txnid || rd64((const uint8_t *)src + 128) != txnid) return *skip = 1, NULL;
  const char *why = tree_bad(&t, meta + 24);
  if (!why) why = tree_bad(&t, meta + 72);
  if (why) return why;
  uint64_t root = rd64(meta + 72 + 40); /* main: its leaves are the named databases' records (F_SUBDATA) */
  if (root == ~(uint64_t)0) return NULL;
  const uint8_t *stack[32];
  int sp = 0;
  stack[sp++] = t.map + root * t.psize;
  while (sp) {
    const uint8_t *p = stack[--sp];
    uint16_t lower = rd16(p + 12);
    for (int i = 0; i < (lower - 16) / 2; ++i) {
      const uint8_t *n = p + rd16(p + 16 + 2 * i);
      uint16_t lo = rd16(n), hi = rd16(n + 2), nf = rd16(n + 4), ks = rd16(n + 6);
      if ((rd16(p + 10) & 0x03) == 0x01) {
        if (sp < 32) stack[sp++] = t.map + ((uint64_t)lo | (uint64_t)hi << 16 | (uint64_t)nf << 32) * t.psize;
        continue;
      }
      if (!(nf & 0x02)) continue;
      if (((uint64_t)lo | (uint64_t)hi << 16) != 48) return "a database record of a wrong size";
      if ((why = tree_bad(&t, n + 8 + ks))) return why;
    }
  }
  return NULL;
}

/* A value of LMDB's free-page database: a count, then that many page numbers, each a page of the file. */
static const char *free_bad(const map_span *m, const MDB_val *v) {
  size_t cnt;
  if (v->mv_size < sizeof cnt || v->mv_size % sizeof cnt) return "a free-page list of a wrong length";
  memcpy(&cnt, v->mv_data, sizeof cnt);
  if (cnt != v->mv_size / sizeof cnt - 1) return "a free-page list of a wrong count";
  for (size_t i = 1; i <= cnt && m->lo; ++i) {
    size_t pg;
    memcpy(&pg, (const char *)v->mv_data + i * sizeof pg, sizeof pg);
    if (pg < 2 || pg >= (m->end - m->lo) / m->psize) return "a free-page list names a page outside the file";
  }
  return NULL;
}

/* Walk one database: every key and value read, keys in order, the count as its stat says. 0 or an LMDB code. */
static int walk_db(MDB_txn *txn, MDB_dbi dbi, const map_span *m, unsigned long long *sum, char *why, size_t n) {
  MDB_cursor *cur;
  MDB_stat st;
  MDB_val k, v, prev = {0, NULL};
  size_t count = 0;
  int r = mdb_stat(txn, dbi, &st);
  if (!r) r = mdb_cursor_open(txn, dbi, &cur);
  if (r) return r;
  for (r = mdb_cursor_get(cur, &k, &v, MDB_FIRST); r == 0; r = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    const char *nb = node_bad(m, &k, &v);
    if (nb) {
      snprintf(why, n, "%s", nb);
      r = MDB_CORRUPTED;
      break;
    }
    if (dbi == 0 && (nb = free_bad(m, &v))) { /* FREE_DBI: what writers allocate pages from */
      snprintf(why, n, "%s", nb);
      r = MDB_CORRUPTED;
      break;
    }
    for (size_t i = 0; i < k.mv_size; ++i) *sum += ((const uint8_t *)k.mv_data)[i];
    for (size_t i = 0; i < v.mv_size; ++i) *sum += ((const uint8_t *)v.mv_data)[i];
    if (prev.mv_data && mdb_cmp(txn, dbi, &prev, &k) >= 0) {
      snprintf(why, n, "its keys are out of order");
      r = MDB_CORRUPTED;
      break;
    }
    prev = k, ++count;
  }
  mdb_cursor_close(cur);
  if (r == MDB_NOTFOUND && count != st.ms_entries) {
    snprintf(why, n, "%zu entries read, %zu stated", count, (size_t)st.ms_entries);
    return MDB_CORRUPTED;
  }
  return r == MDB_NOTFOUND ? 0 : r;
}

/* The child's side of check_env: its verdict on fd ("ok", else why not), then _exit. */
static void check_child(const char *dir, int fd) {
  char why[400] = "", buf[400];
  struct rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core); /* a fault is the verdict, not a core file */
  signal(SIGBUS, SIG_DFL), signal(SIGSEGV, SIG_DFL), signal(SIGPIPE, SIG_IGN);
  MDB_env *env = NULL;
  MDB_txn *txn = NULL;
  int ro = 0, r = env_open(&env, dir, 0, 1, &ro);
  if (r) {
    /* not a verdict on the pages (the caller's own open reports it), except a file that is not LMDB's */
    snprintf(buf, sizeof buf, "%s%s", r == MDB_INVALID || r == MDB_VERSION_MISMATCH ? "bad " : "open ", mdb_strerror(r));
    goto say;
  }
  const char *sz = size_bad(env, why, sizeof why);
  if (sz) {
    snprintf(buf, sizeof buf, "bad %s", sz);
    goto say;
  }
  unsigned long long sum = 0;
  map_span m = {0, 0, 0};
  if (find_map(env, &m)) m.lo = 0; /* no /proc: the walk without its bounds checks */
  for (int attempt = 0, skip = 1; skip && attempt < 8; ++attempt) {
    if (txn) mdb_txn_abort(txn), txn = NULL;
    if ((r = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn))) break;
    if ((sz = pages_bad(&m, mdb_txn_id(txn), &skip))) {
      snprintf(buf, sizeof buf, "bad %s", sz);
      goto say;
    }
  }
  MDB_dbi main_dbi = 0, dbi;
  if (!r) r = mdb_dbi_open(txn, NULL, 0, &main_dbi);
  if (!r) r = walk_db(txn, 0 /* FREE_DBI */, &m, &sum, why, sizeof why);
  if (!r) r = walk_db(txn, main_dbi, &m, &sum, why, sizeof why);
  for (int d = 0; d < 3 && !r; ++d) {
    r = mdb_dbi_open(txn, DBNAME[d], 0, &dbi);
    if (r == MDB_NOTFOUND) { r = 0; continue; } /* not created yet */
    if (!r) r = walk_db(txn, dbi, &m, &sum, why, sizeof why);
    if (r && !why[0]) snprintf(why, sizeof why, "reading %s: %s", DBNAME[d], mdb_strerror(r));
  }
  if (r && !why[0]) snprintf(why, sizeof why, "%s", mdb_strerror(r));
  if (r) snprintf(buf, sizeof buf, "bad %s", why);
  else snprintf(buf, sizeof buf, "ok %llu", sum);
say:;
  size_t len = strlen(buf);
  if (write(fd, buf, len) != (ssize_t)len) _exit(3);
  _exit(0);
}

/* Check an existing data.mdb in a forked child (a crash there cannot take this process down). FB_OK when it reads
 * whole, FB_EIO (damaged, with how to rebuild) when not. A child that cannot even open it leaves that to the
 * caller's own open, which reports why. */
static fb_status check_env(const char *dir) {
  int p[2];
  if (pipe(p) != 0) return FB_ERR(FB_EIO, "%s: checking the cache: pipe: %s", dir, strerror(errno));
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    close(p[0]), close(p[1]);
    return FB_ERR(FB_EIO, "%s: checking the cache: fork: %s", dir, strerror(errno));
  }
  if (pid == 0) {
    close(p[0]);
    check_child(dir, p[1]);
  }
  close(p[1]);
  char msg[512];
  size_t got = 0;
  for (;;) {
    ssize_t n = read(p[0], msg + got, sizeof msg - 1 - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || (got += (size_t)n) == sizeof msg - 1) break;
  }
  msg[got] = 0;
  close(p[0]);
  int st = 0;
  pid_t w;
  while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR) {}
  if (!strncmp(msg, "ok ", 3) || !strncmp(msg, "open ", 5)) return FB_OK;
  if (!strncmp(msg, "bad ", 4)) return damaged(dir, msg + 4);
  char why[128];
  if (w == pid && WIFSIGNALED(st))
    snprintf(why, sizeof why, "reading it killed the checking process with signal %d, %s", WTERMSIG(st), strsignal(WTERMSIG(st)));
  else snprintf(why, sizeof why, "the checking process died without a verdict");
  return damaged(dir, why);
}

static fb_status open_impl(const char *dir, size_t mapsize, int force_ro, fb_cache **out) {
  *out = NULL;
  struct stat st;
  char path[600];
  if (force_ro) {
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
      return FB_USERERR(FB_ENOTFOUND, "%s: no cache there (%s)", dir, errno ? strerror(errno) : "not a directory");
  } else if (mkdir_p(dir) != 0 || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    return FB_USERERR(FB_EIO, "%s: cannot create the cache directory", dir);
  }
  snprintf(path, sizeof path, "%s/data.mdb", dir);
  if (stat(path, &st) == 0) {
    /* 0 bytes: LMDB would start an empty cache over it. A process creating the cache right now writes its meta
       pages within microseconds of creating the file, so look again for 50 ms before calling it damaged. */
    for (int i = 0; st.st_size == 0 && i < 10; ++i) {
      nanosleep(&(struct timespec){0, 5000000}, NULL);
      if (stat(path, &st) != 0) break;
    }
    if (st.st_size == 0) return damaged(dir, "data.mdb is 0 bytes");
    /* a writer of another process growing the map while the child reads it can make one reading look damaged (seen
       once in test_cache's concurrent writers: an open failed among 4 writers); damage stays damaged, so a verdict of
       damaged is taken only when a second and a third reading, 20 ms apart, give it too */
    fb_status cs = check_env(dir);
    for (int i = 0; cs == FB_EIO && i < 2; ++i) nanosleep(&(struct timespec){0, 20000000}, NULL), cs = check_env(dir);
    FB_TRY(cs);
  }
  fb_cache *c = calloc(1, sizeof *c);
  if (!c) return FB_ERR(FB_ENOMEM, "cache");
  snprintf(c->dir, sizeof c->dir, "%s", dir);
  pthread_rwlock_init(&c->grow, NULL);
  fb_status rc = FB_OK;
  MDB_txn *txn = NULL;
  int dead = 0, r;
  char why[400];
  /* MDB_NOTLS: read transactions are not tied to a thread slot (the tuner's compile pool reads from threads) */
  if ((r = env_open(&c->env, dir, mapsize ? mapsize : (size_t)256 << 20, force_ro, &c->ro))) {
    if (r == MDB_INVALID || r == MDB_VERSION_MISMATCH) rc = damaged(dir, mdb_strerror(r));
    else rc = FB_ERR(FB_ELMDB, "%s: mdb_env_open: %s", dir, mdb_strerror(r));
    goto fail;
  }
  const char *sz = size_bad(c->env, why, sizeof why); /* truncated since the check: before any page is touched */
  if (sz) {
    rc = damaged(dir, sz);
    goto fail;
  }
  if (!c->ro) mdb_reader_check(c->env, &dead); /* reader slots of killed processes */
  for (int attempt = 0;; ++attempt) {
    r = mdb_txn_begin(c->env, NULL, c->ro ? MDB_RDONLY : 0, &txn);
    if (r == MDB_MAP_RESIZED && attempt < 4) {
      mdb_env_set_mapsize(c->env, 0);
      continue;
    }
    LMDB_CHECK_GOTO(r, fail);
    break;
  }
  for (int d = 0; d < 3; ++d) {
    r = mdb_dbi_open(txn, DBNAME[d], c->ro ? 0 : MDB_CREATE, &c->dbi[d]);
    if (r == MDB_NOTFOUND && c->ro) continue; /* a read-only cache without it: empty */
    LMDB_CHECK_GOTO(r, fail);
    c->have[d] = 1;
  }
  LMDB_CHECK_GOTO(mdb_txn_commit(txn), fail); /* read-only too: the handles opened in it stay for the environment */
  txn = NULL;
  *out = c;
  return FB_OK;
fail:
  if (txn) mdb_txn_abort(txn);
  if (c->env) mdb_env_close(c->env);
  pthread_rwlock_destroy(&c->grow);
  free(c);
  return rc;
}

fb_status fb_cache_open_ex(const char *dir, size_t mapsize, fb_cache **out) { return open_impl(dir, mapsize, 0, out); }
fb_status fb_cache_open(const char *dir, fb_cache **out) { return open_impl(dir, 0, 0, out); }
fb_status fb_cache_open_readonly(const char *dir, fb_cache **out) { return open_impl(dir, 0, 1, out); }

void fb_cache_close(fb_cache *c) {
  if (!c) return;
  mdb_env_close(c->env);
  pthread_rwlock_destroy(&c->grow);
  free(c);
}

const char *fb_cache_dir(const fb_cache *c) { return c->dir; }
int fb_cache_readonly(const fb_cache *c) { return c->ro; }

size_t fb_cache_mapsize(fb_cache *c) {
  MDB_envinfo info;
  mdb_env_info(c->env, &info);
  return info.me_mapsize;
}

/* Begin a transaction, adopting a map another process grew. Holds c->grow shared until end_txn(). */
static int begin_txn(fb_cache *c, unsigned flags, MDB_txn **txn) {
  if (c->ro && !(flags & MDB_RDONLY)) return EACCES; /* the callers that write say so first (read_only()) */
  for (int attempt = 0;; ++attempt) {
    pthread_rwlock_rdlock(&c->grow);
    int r = mdb_txn_begin(c->env, NULL, flags, txn);
    if (r != MDB_MAP_RESIZED || attempt >= 4) {
      if (r) pthread_rwlock_unlock(&c->grow);
      return r;
    }
    pthread_rwlock_unlock(&c->grow);
    pthread_rwlock_wrlock(&c->grow);
    mdb_env_set_mapsize(c->env, 0);
    pthread_rwlock_unlock(&c->grow);
  }
}
static void end_txn(fb_cache *c, MDB_txn *txn, int commit, int *r) {
  if (commit) *r = mdb_txn_commit(txn);
  else mdb_txn_abort(txn);
  pthread_rwlock_unlock(&c->grow);
}
static int grow_map(fb_cache *c) {
  pthread_rwlock_wrlock(&c->grow);
  MDB_envinfo info;
  mdb_env_info(c->env, &info);
  int r = mdb_env_set_mapsize(c->env, info.me_mapsize * 2);
  pthread_rwlock_unlock(&c->grow);
  return r;
}

/* A write to a cache opened read-only: what failed, why, and what to do. */
static fb_status read_only(fb_cache *c, const char *what) {
  return FB_USERERR(FB_EIO, "%s: %s: the cache is open read-only (no write access to the directory or its files): nothing written; "
                    "give it write access, or use a writable --cache DIR", c->dir, what);
}

/* One write transaction of n puts (skip_existing: MDB_NOOVERWRITE, an existing key is left as it is). Retries
 * with a doubled map on MDB_MAP_FULL. */
typedef struct {
  int db;
  MDB_val k, v;
} put_op;
static fb_status put_many(fb_cache *c, const put_op *ops, int n, int skip_existing, const char *what) {
  if (c->ro) return read_only(c, what);
  for (int attempt = 0; attempt < 16; ++attempt) {
    MDB_txn *txn = NULL;
    int r = begin_txn(c, 0, &txn);
    if (r) return FB_ERR(FB_ELMDB, "%s: %s: mdb_txn_begin: %s", c->dir, what, mdb_strerror(r));
    for (int i = 0; i < n && r == 0; ++i) {
      MDB_val k = ops[i].k, v = ops[i].v;
      r = mdb_put(txn, c->dbi[ops[i].db], &k, &v, skip_existing ? MDB_NOOVERWRITE : 0);
      if (r == MDB_KEYEXIST) r = 0;
    }
    if (r == 0) end_txn(c, txn, 1, &r);
    else end_txn(c, txn, 0, NULL);
    if (r == MDB_MAP_FULL) {
      if (grow_map(c) == 0) continue;
    }
    if (r) return FB_ERR(FB_ELMDB, "%s: %s: %s", c->dir, what, mdb_strerror(r));
    return FB_OK;
  }
  return FB_ERR(FB_ELMDB, "%s: %s: the map would not grow enough", c->dir, what);
}

/* ---- kernels ---------------------------------------------------------------------------------------------- */
void fb_cache_kernel_key(const char *src, const char *arch, uint8_t key[32]) {
  int maj = 0, min = 0;
  nvrtcVersion(&maj, &min);
  size_t n = strlen(src), a = strlen(arch);
  char tail[256];
  int t = snprintf(tail, sizeof tail, "nvrtc %d.%d|%s", maj, min, fb_nvrtc_options());
  char *buf = malloc(n + a + (size_t)t + 3);
  if (!buf) {
    memset(key, 0, 32);
    return;
  }
  memcpy(buf, src, n + 1);
  memcpy(buf + n + 1, arch, a + 1);
  memcpy(buf + n + a + 2, tail, (size_t)t + 1);
  fb_sha256(buf, n + a + (size_t)t + 3, key);
  free(buf);
}

fb_status fb_cache_put_kernel(fb_cache *c, const uint8_t key[32], const char *src, const void *cubin, size_t size) {
  size_t vn = HDR + size;
  uint8_t *v = malloc(vn);
  if (!v) return FB_ERR(FB_ENOMEM, "cache value");
  uint32_t ver = KERNEL_FORMAT;
  uint64_t sz = size;
  memcpy(v, "FBK1", 4);
  memcpy(v + 4, &ver, 4);
  memcpy(v + 8, &sz, 8);
  fb_sha256(src, strlen(src), v + 16);
  fb_sha256(cubin, size, v + 48);
  memcpy(v + HDR, cubin, size);
  put_op op = {FB_DB_KERNELS, {32, (void *)key}, {vn, v}};
  fb_status rc = put_many(c, &op, 1, 0, "storing a kernel");
  free(v);
  return rc;
}

/* Check a kernels value; NULL when good, else why not. */
static const char *kernel_bad(const uint8_t *p, size_t n) {
  uint32_t ver;
  uint64_t sz;
  uint8_t sum[32];
  if (n < HDR) return "truncated";
  memcpy(&ver, p + 4, 4);
  memcpy(&sz, p + 8, 8);
  if (memcmp(p, "FBK1", 4) || ver != KERNEL_FORMAT) return "another format";
  if (sz != n - HDR) return "wrong length";
  fb_sha256(p + HDR, sz, sum);
  if (memcmp(sum, p + 48, 32)) return "fails its checksum";
  return NULL;
}

fb_status fb_cache_get_kernel(fb_cache *c, const uint8_t key[32], void **cubin, size_t *size) {
  *cubin = NULL, *size = 0;
  MDB_txn *txn = NULL;
  fb_status rc = FB_OK;
  if (!c->have[FB_DB_KERNELS]) return FB_ENOTFOUND;
  int r = begin_txn(c, MDB_RDONLY, &txn);
  if (r) return FB_ERR(FB_ELMDB, "%s: mdb_txn_begin: %s", c->dir, mdb_strerror(r));
  MDB_val k = {32, (void *)key}, v;
  r = mdb_get(txn, c->dbi[FB_DB_KERNELS], &k, &v);
  if (r == MDB_NOTFOUND) {
    rc = FB_ENOTFOUND;
  } else if (r != 0) {
    rc = FB_ERR(FB_ELMDB, "%s: reading a kernel: %s", c->dir, mdb_strerror(r));
  } else {
    const char *bad = kernel_bad(v.mv_data, v.mv_size);
    char hex[65];
    if (bad) {
      for (int i = 0; i < 32; ++i) snprintf(hex + 2 * i, 3, "%02x", key[i]);
      rc = FB_ERR(FB_ELMDB, "%s: kernels/%.16s: %s: not loaded", c->dir, hex, bad);
    } else if (!(*cubin = malloc(v.mv_size - HDR ? v.mv_size - HDR : 1))) {
      rc = FB_ERR(FB_ENOMEM, "cubin");
    } else {
      memcpy(*cubin, (const uint8_t *)v.mv_data + HDR, v.mv_size - HDR), *size = v.mv_size - HDR;
    }
  }
  end_txn(c, txn, 0, NULL);
  return rc;
}

/* ---- fingerprints ----------------------------------------------------------------------------------------- */
void fb_fingerprint_text(const fb_fingerprint *fp, char *buf, size_t n) {
  snprintf(buf, n, "%s sm_%d%d %dSM %lluMiB driver %d nvrtc %d.%d fourbit %s", fp->gpu, fp->cc_major, fp->cc_minor,
           fp->sm_count, fp->mem_bytes >> 20, fp->driver_version, fp->nvrtc_major, fp->nvrtc_minor, fp->fourbit);
}

void fb_fingerprint_id(const fb_fingerprint *fp, char id[17]) {
  char t[512], hex[65];
  fb_fingerprint_text(fp, t, sizeof t);
  fb_sha256_hex(t, strlen(t), hex);
  memcpy(id, hex, 16);
  id[16] = 0;
}

void fb_fingerprint_toolchain(fb_fingerprint *fp) {
  nvrtcVersion(&fp->nvrtc_major, &fp->nvrtc_minor);
  snprintf(fp->fourbit, sizeof fp->fourbit, "%s", FB_VERSION);
}

static int fp_equal(const fb_fingerprint *a, const fb_fingerprint *b) {
  return !strcmp(a->gpu, b->gpu) && a->cc_major == b->cc_major && a->cc_minor == b->cc_minor && a->sm_count == b->sm_count &&
         a->mem_bytes == b->mem_bytes && a->driver_version == b->driver_version && a->nvrtc_major == b->nvrtc_major &&
         a->nvrtc_minor == b->nvrtc_minor && !strcmp(a->fourbit, b->fourbit);
}

long long fb_cache_bucket(long long shape) {
  long long b = 1;
  while (b < shape && b < (1ll << 40)) b <<= 1;
  return b;
}

/* ---- records (winners, trials): "field=value" lines in a checksummed frame -------------------------------- */
static void put_str(fb_str *s, const char *k, const char *v) {
  fb_str_printf(s, "%s=", k);
  for (const char *p = v; *p; ++p) fb_str_printf(s, "%c", *p == '\n' || *p == '\r' ? ' ' : *p);
  fb_str_printf(s, "\n");
}
static void put_fp(fb_str *s, const fb_fingerprint *fp) {
  put_str(s, "gpu", fp->gpu);
  fb_str_printf(s, "cc=%d.%d\nsms=%d\nmem=%llu\ndriver=%d\nnvrtc=%d.%d\n", fp->cc_major, fp->cc_minor, fp->sm_count, fp->mem_bytes,
                fp->driver_version, fp->nvrtc_major, fp->nvrtc_minor);
  put_str(s, "fourbit", fp->fourbit);
}
static void hex32(const uint8_t *b, char *out) {
  for (int i = 0; i < 32; ++i) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static void winner_text(const fb_winner *w, fb_str *s) {
  char kh[65];
  hex32(w->kernel, kh);
  put_fp(s, &w->fp);
  put_str(s, "spec", w->spec);
  fb_str_printf(s, "bucket=%lld\nshape=%lld\n", w->bucket, w->shape);
  put_str(s, "arch", w->arch);
  put_str(s, "variant", w->variant);
  fb_str_printf(s, "kernel=%s\nmedian_ms=%.9g\nspread_ms=%.9g\nruns=%d\n", kh, w->median_ms, w->spread_ms, w->runs);
  put_str(s, "runner_up", w->runner_up);
  fb_str_printf(s, "runner_up_ms=%.9g\n", w->runner_up_ms);
  put_str(s, "default_variant", w->default_variant);
  fb_str_printf(s, "default_ms=%.9g\ncandidates=%d\nfailed=%d\n", w->default_ms, w->candidates, w->failed);
  put_str(s, "recipe", w->recipe);
  put_str(s, "recipe_sha", w->recipe_sha);
  fb_str_printf(s, "date=%lld\n", w->date);
  put_str(s, "host", w->host);
}

static const char *const TRIAL_STATUS[] = {"ok", "compile-failed", "wrong", "fault", "timeout"};
const char *fb_trial_status_name(fb_trial_status s) { return (unsigned)s < 5 ? TRIAL_STATUS[s] : "?"; }

static void trial_text(const fb_trial *t, fb_str *s) {
  put_fp(s, &t->fp);
  put_str(s, "spec", t->spec);
  fb_str_printf(s, "bucket=%lld\nshape=%lld\n", t->bucket, t->shape);
  put_str(s, "variant", t->variant);
  put_str(s, "status", fb_trial_status_name(t->status));
  fb_str_printf(s, "median_ms=%.9g\nspread_ms=%.9g\nruns=%d\nwrong=%ld\n", t->median_ms, t->spread_ms, t->runs, t->wrong);
  put_str(s, "message", t->message);
  put_str(s, "recipe", t->recipe);
  fb_str_printf(s, "date=%lld\n", t->date);
}

/* field lookup in a record's text: copies the value of `key` (up to n-1 bytes); 0 if absent */
static int field(const char *txt, size_t len, const char *key, char *out, size_t n) {
  size_t kl = strlen(key);
  for (size_t i = 0; i < len;) {
    const char *line = txt + i, *nl = memchr(line, '\n', len - i);
    size_t ll = nl ? (size_t)(nl - line) : len - i;
    if (ll > kl && !memcmp(line, key, kl) && line[kl] == '=') {
      size_t vl = ll - kl - 1 < n - 1 ? ll - kl - 1 : n - 1;
      memcpy(out, line + kl + 1, vl);
      out[vl] = 0;
      return 1;
    }
    i += ll + 1;
  }
  return 0;
}
#define FIELD(name, dst) (field(txt, len, name, dst, sizeof(dst)) ? 1 : (missing = name, 0))

static const char *parse_fp(const char *txt, size_t len, fb_fingerprint *fp) {
  char b[64];
  const char *missing = NULL;
  memset(fp, 0, sizeof *fp);
  FIELD("gpu", fp->gpu);
  if (FIELD("cc", b)) sscanf(b, "%d.%d", &fp->cc_major, &fp->cc_minor);
  if (FIELD("sms", b)) fp->sm_count = atoi(b);
  if (FIELD("mem", b)) fp->mem_bytes = strtoull(b, NULL, 10);
  if (FIELD("driver", b)) fp->driver_version = atoi(b);
  if (FIELD("nvrtc", b)) sscanf(b, "%d.%d", &fp->nvrtc_major, &fp->nvrtc_minor);
  FIELD("fourbit", fp->fourbit);
  return missing;
}

static const char *parse_winner(const char *txt, size_t len, fb_winner *w) {
  char b[96], kh[80];
  memset(w, 0, sizeof *w);
  const char *missing = parse_fp(txt, len, &w->fp);
  FIELD("spec", w->spec);
  if (FIELD("bucket", b)) w->bucket = atoll(b);
  if (FIELD("shape", b)) w->shape = atoll(b);
  FIELD("arch", w->arch);
  FIELD("variant", w->variant);
  if (FIELD("kernel", kh)) {
    if (strlen(kh) != 64) return "kernel";
    for (int i = 0; i < 32; ++i) {
      unsigned x;
      if (sscanf(kh + 2 * i, "%2x", &x) != 1) return "kernel";
      w->kernel[i] = (uint8_t)x;
    }
  }
  if (FIELD("median_ms", b)) w->median_ms = atof(b);
  if (FIELD("spread_ms", b)) w->spread_ms = atof(b);
  if (FIELD("runs", b)) w->runs = atoi(b);
  FIELD("runner_up", w->runner_up);
  if (FIELD("runner_up_ms", b)) w->runner_up_ms = atof(b);
  FIELD("default_variant", w->default_variant);
  if (FIELD("default_ms", b)) w->default_ms = atof(b);
  if (FIELD("candidates", b)) w->candidates = atoi(b);
  if (FIELD("failed", b)) w->failed = atoi(b);
  FIELD("recipe", w->recipe);
  FIELD("recipe_sha", w->recipe_sha);
  if (FIELD("date", b)) w->date = atoll(b);
  FIELD("host", w->host);
  return missing;
}

static const char *parse_trial(const char *txt, size_t len, fb_trial *t) {
  char b[64];
  memset(t, 0, sizeof *t);
  const char *missing = parse_fp(txt, len, &t->fp);
  FIELD("spec", t->spec);
  if (FIELD("bucket", b)) t->bucket = atoll(b);
  if (FIELD("shape", b)) t->shape = atoll(b);
  FIELD("variant", t->variant);
  if (FIELD("status", b)) {
    t->status = (fb_trial_status)-1;
    for (int i = 0; i < 5; ++i)
      if (!strcmp(b, TRIAL_STATUS[i])) t->status = (fb_trial_status)i;
    if ((int)t->status < 0) return "status";
  }
  if (FIELD("median_ms", b)) t->median_ms = atof(b);
  if (FIELD("spread_ms", b)) t->spread_ms = atof(b);
  if (FIELD("runs", b)) t->runs = atoi(b);
  if (FIELD("wrong", b)) t->wrong = atol(b);
  FIELD("message", t->message);
  FIELD("recipe", t->recipe);
  if (FIELD("date", b)) t->date = atoll(b);
  return missing;
}

/* frame: magic | u32 version | u32 n | text | sha256(everything before) */
static uint8_t *frame(const char *magic, const fb_str *s, size_t *vn) {
  uint32_t ver = RECORD_FORMAT, n = (uint32_t)s->len;
  *vn = 12 + (size_t)n + 32;
  uint8_t *v = malloc(*vn);
  if (!v) return NULL;
  memcpy(v, magic, 4);
  memcpy(v + 4, &ver, 4);
  memcpy(v + 8, &n, 4);
  memcpy(v + 12, s->buf, n);
  fb_sha256(v, 12 + (size_t)n, v + 12 + n);
  return v;
}
/* NULL when the frame is good (*txt, *len: its text), else why not */
static const char *unframe(const char *magic, const uint8_t *p, size_t n, const char **txt, size_t *len) {
  uint32_t ver, tn;
  uint8_t sum[32];
  if (n < 12 + 32) return "truncated";
  memcpy(&ver, p + 4, 4);
  memcpy(&tn, p + 8, 4);
  if (memcmp(p, magic, 4) || ver != RECORD_FORMAT) return "another format";
  if ((size_t)tn + 44 != n) return "wrong length";
  fb_sha256(p, 12 + (size_t)tn, sum);
  if (memcmp(sum, p + 12 + tn, 32)) return "fails its checksum";
  *txt = (const char *)p + 12, *len = tn;
  return NULL;
}

static void winner_key(const fb_fingerprint *fp, const char *spec, long long bucket, char *key, size_t n) {
  char id[17];
  fb_fingerprint_id(fp, id);
  snprintf(key, n, "%s/%s/b%012lld", id, spec, bucket);
}
static void trial_key(const fb_fingerprint *fp, const char *spec, long long bucket, const char *variant, char *key, size_t n) {
  char id[17];
  fb_fingerprint_id(fp, id);
  snprintf(key, n, "%s/%s/b%012lld/%s", id, spec, bucket, variant);
}

/* Decode and check one winners/trials value against its key. NULL when good. */
static const char *record_bad(fb_cache_db db, const MDB_val *k, const MDB_val *v, fb_winner *w, fb_trial *t) {
  const char *txt;
  size_t len;
  const char *bad = unframe(db == FB_DB_WINNERS ? "FBW1" : "FBT1", v->mv_data, v->mv_size, &txt, &len);
  if (bad) return bad;
  const char *missing = db == FB_DB_WINNERS ? parse_winner(txt, len, w) : parse_trial(txt, len, t);
  if (missing) return "a field is missing or malformed";
  char key[512];
  if (db == FB_DB_WINNERS) winner_key(&w->fp, w->spec, w->bucket, key, sizeof key);
  else trial_key(&t->fp, t->spec, t->bucket, t->variant, key, sizeof key);
  if (strlen(key) != k->mv_size || memcmp(key, k->mv_data, k->mv_size)) return "its value belongs to another fingerprint or key";
  return NULL;
}

/* Decode and check any database's value against its key. NULL when good. */
static const char *value_bad(fb_cache_db db, const MDB_val *k, const MDB_val *v, fb_winner *w, fb_trial *t) {
  if (db == FB_DB_KERNELS) return k->mv_size == 32 ? kernel_bad(v->mv_data, v->mv_size) : "key is not 32 bytes";
  return record_bad(db, k, v, w, t);
}

const char *fb_cache_decode(fb_cache_db db, const void *key, size_t klen, const void *val, size_t vlen, fb_winner *w, fb_trial *t) {
  if ((unsigned)db > 2) return "no such database";
  MDB_val k = {klen, (void *)key}, v = {vlen, (void *)val};
  return value_bad(db, &k, &v, w, t);
}

fb_status fb_cache_put_winner(fb_cache *c, const fb_winner *w) {
  fb_str s = {0};
  winner_text(w, &s);
  if (s.oom) return free(s.buf), FB_ERR(FB_ENOMEM, "winner");
  char key[512];
  winner_key(&w->fp, w->spec, w->bucket, key, sizeof key);
  size_t vn;
  uint8_t *v = frame("FBW1", &s, &vn);
  free(s.buf);
  if (!v) return FB_ERR(FB_ENOMEM, "winner");
  put_op op = {FB_DB_WINNERS, {strlen(key), key}, {vn, v}};
  fb_status rc = put_many(c, &op, 1, 0, "storing a winner");
  free(v);
  return rc;
}

fb_status fb_cache_put_trial(fb_cache *c, const fb_trial *t) {
  fb_str s = {0};
  trial_text(t, &s);
  if (s.oom) return free(s.buf), FB_ERR(FB_ENOMEM, "trial");
  char key[512];
  trial_key(&t->fp, t->spec, t->bucket, t->variant, key, sizeof key);
  size_t vn;
  uint8_t *v = frame("FBT1", &s, &vn);
  free(s.buf);
  if (!v) return FB_ERR(FB_ENOMEM, "trial");
  put_op op = {FB_DB_TRIALS, {strlen(key), key}, {vn, v}};
  fb_status rc = put_many(c, &op, 1, 0, "storing a trial");
  free(v);
  return rc;
}

fb_status fb_cache_get_trial(fb_cache *c, const fb_fingerprint *fp, const char *spec, long long bucket, const char *variant,
                             fb_trial *out) {
  char key[512];
  trial_key(fp, spec, bucket, variant, key, sizeof key);
  if (!c->have[FB_DB_TRIALS]) return FB_ENOTFOUND;
  MDB_txn *txn;
  int r = begin_txn(c, MDB_RDONLY, &txn);
  if (r) return FB_ERR(FB_ELMDB, "%s: mdb_txn_begin: %s", c->dir, mdb_strerror(r));
  MDB_val k = {strlen(key), key}, v;
  fb_status rc = FB_OK;
  r = mdb_get(txn, c->dbi[FB_DB_TRIALS], &k, &v);
  if (r == MDB_NOTFOUND) rc = FB_ENOTFOUND;
  else if (r) rc = FB_ERR(FB_ELMDB, "%s: reading a trial: %s", c->dir, mdb_strerror(r));
  else {
    fb_winner w;
    const char *bad = record_bad(FB_DB_TRIALS, &k, &v, &w, out);
    if (bad) rc = FB_ERR(FB_ELMDB, "%s: trials/%s: %s: not loaded", c->dir, key, bad);
  }
  end_txn(c, txn, 0, NULL);
  return rc;
}

static double bucket_distance(long long a, long long b) { return fabs(log2((double)(a > 0 ? a : 1) / (double)(b > 0 ? b : 1))); }

fb_status fb_cache_get_winner(fb_cache *c, const fb_fingerprint *fp, const char *spec, long long shape, fb_winner *out,
                              char *note, size_t notelen) {
  if (note && notelen) note[0] = 0;
  long long want = fb_cache_bucket(shape);
  char prefix[512], id[17];
  fb_fingerprint_id(fp, id);
  snprintf(prefix, sizeof prefix, "%s/%s/b", id, spec);
  size_t pl = strlen(prefix);
  if (!c->have[FB_DB_WINNERS]) {
    if (note && notelen) snprintf(note, notelen, "no winner of %s for this device and toolchain", spec);
    return FB_ENOTFOUND;
  }
  MDB_txn *txn;
  MDB_cursor *cur = NULL;
  int r = begin_txn(c, MDB_RDONLY, &txn);
  if (r) return FB_ERR(FB_ELMDB, "%s: mdb_txn_begin: %s", c->dir, mdb_strerror(r));
  fb_status rc = FB_OK;
  int found = 0, bad_n = 0, foreign = 0;
  double best_d = 1e30;
  char bad_msg[768] = "", foreign_fp[512] = "";
  r = mdb_cursor_open(txn, c->dbi[FB_DB_WINNERS], &cur);
  if (r) {
    rc = FB_ERR(FB_ELMDB, "%s: mdb_cursor_open: %s", c->dir, mdb_strerror(r));
    goto done;
  }
  /* our fingerprint's buckets of spec */
  MDB_val k = {pl, prefix}, v;
  for (r = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); r == 0 && k.mv_size >= pl && !memcmp(k.mv_data, prefix, pl);
       r = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    fb_winner w;
    fb_trial t;
    const char *bad = record_bad(FB_DB_WINNERS, &k, &v, &w, &t);
    if (!bad && !fp_equal(&w.fp, fp)) bad = "its value belongs to another fingerprint";
    if (bad) {
      if (!bad_n++) snprintf(bad_msg, sizeof bad_msg, "winners/%.*s: %s: not loaded", (int)k.mv_size, (char *)k.mv_data, bad);
      continue;
    }
    double d = bucket_distance(w.bucket, want);
    if (d < best_d || (d == best_d && w.bucket > out->bucket)) best_d = d, *out = w, found = 1;
  }
  if (r && r != MDB_NOTFOUND) { /* a damaged page, not the end of the data */
    rc = FB_ERR(FB_ELMDB, "%s: reading winners of %s: %s", c->dir, spec, mdb_strerror(r));
    goto done;
  }
  if (!found) { /* anything for spec under other fingerprints? */
    r = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    for (; r == 0; r = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
      const char *s = memchr(k.mv_data, '/', k.mv_size);
      size_t sl = strlen(spec);
      if (!s || (size_t)((const char *)k.mv_data + k.mv_size - s) < sl + 3 || memcmp(s + 1, spec, sl) || s[1 + sl] != '/') continue;
      if (k.mv_size >= 16 && !memcmp(k.mv_data, id, 16)) continue;
      fb_winner w;
      fb_trial t;
      if (record_bad(FB_DB_WINNERS, &k, &v, &w, &t)) continue;
      if (!foreign++) fb_fingerprint_text(&w.fp, foreign_fp, sizeof foreign_fp);
    }
    if (r != MDB_NOTFOUND) {
      rc = FB_ERR(FB_ELMDB, "%s: reading winners of %s: %s", c->dir, spec, mdb_strerror(r));
      goto done;
    }
  }
  if (found) {
    if (note && notelen) {
      if (out->bucket == want) snprintf(note, notelen, "tuned for bucket %lld", want);
      else snprintf(note, notelen, "no winner for bucket %lld: the nearest bucket %lld", want, out->bucket);
      if (bad_n) {
        size_t u = strlen(note);
        snprintf(note + u, notelen - u, "; %d bad entries skipped (%s)", bad_n, bad_msg);
      }
    }
  } else {
    rc = FB_ENOTFOUND;
    if (note && notelen) {
      if (bad_n) snprintf(note, notelen, "%s", bad_msg);
      else if (foreign) snprintf(note, notelen, "%d winners of %s belong to other fingerprints (%s%s): ignored", foreign, spec, foreign_fp, foreign > 1 ? ", ..." : "");
      else snprintf(note, notelen, "no winner of %s for this device and toolchain", spec);
    }
    if (bad_n || foreign) FB_ERR(FB_ENOTFOUND, "%s", note ? note : "no usable winner");
  }
done:
  if (cur) mdb_cursor_close(cur);
  end_txn(c, txn, 0, NULL);
  return rc;
}

/* ---- iterate, verify ------------------------------------------------------------------------------------- */
static void entry_of(fb_cache_db db, const MDB_val *k, const MDB_val *v, fb_cache_entry *e, fb_winner *w, fb_trial *t, char *keybuf,
                     size_t kn) {
  memset(e, 0, sizeof *e);
  e->db = db;
  e->size = v->mv_size;
  if (db == FB_DB_KERNELS) {
    if (k->mv_size == 32) hex32(k->mv_data, keybuf);
    else snprintf(keybuf, kn, "(a %zu-byte key)", k->mv_size);
    e->why = k->mv_size == 32 ? kernel_bad(v->mv_data, v->mv_size) : "key is not 32 bytes";
    if (!e->why) e->cubin_size = v->mv_size - HDR;
  } else {
    snprintf(keybuf, kn, "%.*s", (int)(k->mv_size < kn - 1 ? k->mv_size : kn - 1), (const char *)k->mv_data);
    e->why = record_bad(db, k, v, w, t);
    if (!e->why) {
      if (db == FB_DB_WINNERS) e->winner = w;
      else e->trial = t;
    }
  }
  e->key = keybuf;
}

fb_status fb_cache_iterate(fb_cache *c, fb_cache_db db, fb_cache_visit fn, void *arg) {
  if ((unsigned)db > 2) return FB_ERR(FB_EINVAL, "no database %d", (int)db);
  if (!c->have[db]) return FB_OK;
  MDB_txn *txn;
  MDB_cursor *cur;
  int r = begin_txn(c, MDB_RDONLY, &txn);
  if (r) return FB_ERR(FB_ELMDB, "%s: mdb_txn_begin: %s", c->dir, mdb_strerror(r));
  if ((r = mdb_cursor_open(txn, c->dbi[db], &cur))) {
    end_txn(c, txn, 0, NULL);
    return FB_ERR(FB_ELMDB, "%s: mdb_cursor_open: %s", c->dir, mdb_strerror(r));
  }
  MDB_val k, v;
  char keybuf[600];
  fb_winner w;
  fb_trial t;
  for (r = mdb_cursor_get(cur, &k, &v, MDB_FIRST); r == 0; r = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    fb_cache_entry e;
    entry_of(db, &k, &v, &e, &w, &t, keybuf, sizeof keybuf);
    if (fn(&e, arg)) {
      r = MDB_NOTFOUND; /* stopped by fn: as good as the end */
      break;
    }
  }
  mdb_cursor_close(cur);
  end_txn(c, txn, 0, NULL);
  if (r != MDB_NOTFOUND) /* a damaged page, not the end of the data */
    return FB_ERR(FB_ELMDB, "%s: reading %s: %s (fourbit cache verify; rebuild it with fourbit tune, or import an export)", c->dir,
                  DBNAME[db], mdb_strerror(r));
  return FB_OK;
}

typedef struct {
  fb_cache *c;
  fb_cache_counts *n;
  fb_cache_visit bad;
  void *arg;
  int db;
} verify_ctx;

static int verify_one(const fb_cache_entry *e, void *arg) {
  verify_ctx *x = arg;
  fb_cache_entry ce = *e;
  x->n->entries[x->db]++;
  if (!ce.why && ce.winner) { /* a winner must be loadable: its cubin present and good */
    void *cub;
    size_t sz;
    fb_status s = fb_cache_get_kernel(x->c, ce.winner->kernel, &cub, &sz);
    if (s == FB_OK) free(cub);
    else ce.why = s == FB_ENOTFOUND ? "its cubin is missing from kernels" : "its cubin is bad";
  }
  if (ce.why) {
    x->n->bad[x->db]++;
    if (x->bad) x->bad(&ce, x->arg);
  }
  return 0;
}

fb_status fb_cache_verify(fb_cache *c, fb_cache_counts *n, fb_cache_visit bad, void *arg) {
  memset(n, 0, sizeof *n);
  for (int d = 0; d < 3; ++d) {
    verify_ctx x = {c, n, bad, arg, d};
    FB_TRY(fb_cache_iterate(c, (fb_cache_db)d, verify_one, &x));
  }
  return FB_OK;
}

/* ---- export / import --------------------------------------------------------------------------------------
 * file: "FBX1" | u32 format version | u64 entries | entries | sha256(everything before)
 * entry: u8 database | u32 key bytes | u64 value bytes | key | value (the database's own value, unchanged) */
typedef struct {
  fb_str out;
  const fb_cache_filter *f;
  uint64_t count;
  fb_cache_counts *n;
  uint8_t (*keep)[32]; /* kernels the exported winners use */
  int nkeep, capkeep;
} export_ctx;

static void emit(export_ctx *x, int db, const void *k, uint32_t kl, const void *v, uint64_t vl) {
  uint8_t d = (uint8_t)db;
  size_t need = x->out.len + 13 + kl + vl;
  if (x->out.oom) return;
  if (need > x->out.cap) {
    size_t cap = x->out.cap ? x->out.cap : 4096;
    while (cap < need) cap *= 2;
    char *b = realloc(x->out.buf, cap);
    if (!b) { x->out.oom = 1; return; }
    x->out.buf = b, x->out.cap = cap;
  }
  char *p = x->out.buf + x->out.len;
  memcpy(p, &d, 1), memcpy(p + 1, &kl, 4), memcpy(p + 5, &vl, 8), memcpy(p + 13, k, kl), memcpy(p + 13 + kl, v, vl);
  x->out.len = need;
  x->count++;
  x->n->entries[db]++;
}

static int match(const fb_cache_filter *f, const fb_fingerprint *fp, const char *recipe, const char *recipe_sha) {
  if (!f) return 1;
  if (f->fingerprint && *f->fingerprint) {
    char id[17], t[512];
    fb_fingerprint_id(fp, id);
    fb_fingerprint_text(fp, t, sizeof t);
    if (strncmp(id, f->fingerprint, strlen(f->fingerprint)) && !strstr(t, f->fingerprint)) return 0;
  }
  if (f->recipe && *f->recipe && strcmp(recipe, f->recipe) && strncmp(recipe_sha, f->recipe, strlen(f->recipe))) return 0;
  return 1;
}

fb_status fb_cache_export(fb_cache *c, const fb_cache_filter *f, void **data, size_t *size, fb_cache_counts *n) {
  *data = NULL, *size = 0;
  memset(n, 0, sizeof *n);
  export_ctx x = {.f = f, .n = n};
  fb_str_printf(&x.out, "FBX1%c%c%c%c%c%c%c%c%c%c%c%c", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0); /* header, filled below */
  x.out.len = 16;
  MDB_txn *txn;
  int r = begin_txn(c, MDB_RDONLY, &txn);
  if (r) return free(x.out.buf), FB_ERR(FB_ELMDB, "%s: mdb_txn_begin: %s", c->dir, mdb_strerror(r));
  fb_status rc = FB_OK;
  int filtered = f && ((f->fingerprint && *f->fingerprint) || (f->recipe && *f->recipe));
  for (int pass = 0; pass < 3 && rc == FB_OK; ++pass) { /* winners, trials, then kernels (the winners' when filtered) */
    int db = pass == 0 ? FB_DB_WINNERS : pass == 1 ? FB_DB_TRIALS : FB_DB_KERNELS;
    MDB_cursor *cur;
    if (!c->have[db]) continue;
    if ((r = mdb_cursor_open(txn, c->dbi[db], &cur))) {
      rc = FB_ERR(FB_ELMDB, "%s: mdb_cursor_open: %s", c->dir, mdb_strerror(r));
      break;
    }
    MDB_val k, v;
    for (r = mdb_cursor_get(cur, &k, &v, MDB_FIRST); r == 0; r = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
      fb_winner w;
      fb_trial t;
      if (db == FB_DB_KERNELS) {
        if (k.mv_size != 32 || kernel_bad(v.mv_data, v.mv_size)) { n->bad[db]++; continue; }
        if (filtered) {
          int used = 0;
          for (int i = 0; i < x.nkeep && !used; ++i) used = !memcmp(x.keep[i], k.mv_data, 32);
          if (!used) continue;
        }
      } else {
        if (record_bad((fb_cache_db)db, &k, &v, &w, &t)) { n->bad[db]++; continue; } /* bad entries stay behind */
        if (db == FB_DB_WINNERS && !match(f, &w.fp, w.recipe, w.recipe_sha)) continue;
        if (db == FB_DB_TRIALS && !match(f, &t.fp, t.recipe, "")) continue;
        if (db == FB_DB_WINNERS) {
          if (x.nkeep == x.capkeep) {
            void *nk = realloc(x.keep, sizeof *x.keep * (size_t)(x.capkeep = x.capkeep ? 2 * x.capkeep : 64));
            if (!nk) { rc = FB_ERR(FB_ENOMEM, "export"); break; }
            x.keep = nk;
          }
          memcpy(x.keep[x.nkeep++], w.kernel, 32);
        }
      }
      emit(&x, db, k.mv_data, (uint32_t)k.mv_size, v.mv_data, v.mv_size);
    }
    if (rc == FB_OK && r != MDB_NOTFOUND) /* a damaged page, not the end of the data: no export of a part */
      rc = FB_ERR(FB_ELMDB, "%s: export: reading %s: %s: nothing exported", c->dir, DBNAME[db], mdb_strerror(r));
    mdb_cursor_close(cur);
  }
  end_txn(c, txn, 0, NULL);
  free(x.keep);
  if (rc == FB_OK && x.out.oom) rc = FB_ERR(FB_ENOMEM, "export");
  if (rc == FB_OK) {
    char *b = realloc(x.out.buf, x.out.len + 32);
    if (!b) rc = FB_ERR(FB_ENOMEM, "export");
    else x.out.buf = b;
  }
  if (rc == FB_OK) {
    uint32_t ver = EXPORT_FORMAT;
    memcpy(x.out.buf + 4, &ver, 4);
    memcpy(x.out.buf + 8, &x.count, 8);
    fb_sha256(x.out.buf, x.out.len, (uint8_t *)x.out.buf + x.out.len);
    *data = x.out.buf, *size = x.out.len + 32;
    return FB_OK;
  }
  free(x.out.buf);
  return rc;
}

/* Parse and check a whole export (header, checksum, every entry decoded as fb_cache_decode does) without writing
 * anything: FB_EINVAL naming name and the entry when any of it is bad. *ops_out (malloc'd): the entries, pointing
 * into data. */
static fb_status parse_export(const void *data, size_t size, const char *name, put_op **ops_out, uint64_t *count_out) {
  *ops_out = NULL, *count_out = 0;
  const uint8_t *p = data;
  uint32_t ver;
  uint64_t count;
  uint8_t sum[32];
  if (size < 16 + 32 || memcmp(p, "FBX1", 4)) return FB_USERERR(FB_EINVAL, "%s: not a fourbit cache export (no FBX1 header)", name);
  memcpy(&ver, p + 4, 4);
  memcpy(&count, p + 8, 8);
  if (ver != EXPORT_FORMAT) return FB_USERERR(FB_EINVAL, "%s: export format %u, this fourbit reads %u", name, ver, EXPORT_FORMAT);
  fb_sha256(p, size - 32, sum);
  if (memcmp(sum, p + size - 32, 32)) return FB_USERERR(FB_EINVAL, "%s: fails its checksum (truncated or corrupt): nothing imported", name);
  /* every entry is parsed and checked before anything is written */
  if (count > (size - 48) / 13) return FB_USERERR(FB_EINVAL, "%s: bad entry count", name); /* 13 bytes an entry at least */
  put_op *ops = calloc(count ? count : 1, sizeof *ops);
  if (!ops) return FB_ERR(FB_ENOMEM, "%s: %llu entries", name, (unsigned long long)count);
  size_t off = 16;
  fb_status rc = FB_OK;
  for (uint64_t i = 0; i < count; ++i) {
    uint32_t kl;
    uint64_t vl;
    if (off + 13 > size - 32) { rc = FB_USERERR(FB_EINVAL, "%s: entry %llu: truncated", name, (unsigned long long)i); goto out; }
    memcpy(&kl, p + off + 1, 4), memcpy(&vl, p + off + 5, 8);
    int db = p[off];
    if (db > 2 || kl > 4096 || vl > size || off + 13 + kl + vl > size - 32) {
      rc = FB_USERERR(FB_EINVAL, "%s: entry %llu: bad header", name, (unsigned long long)i);
      goto out;
    }
    MDB_val k = {kl, (void *)(p + off + 13)}, v = {vl, (void *)(p + off + 13 + kl)};
    fb_winner w;
    fb_trial t;
    const char *bad = value_bad((fb_cache_db)db, &k, &v, &w, &t);
    if (bad) {
      rc = FB_USERERR(FB_EINVAL, "%s: entry %llu (%s): %s: nothing imported", name, (unsigned long long)i, DBNAME[db], bad);
      goto out;
    }
    ops[i] = (put_op){db, k, v};
    off += 13 + kl + vl;
  }
  if (off != size - 32) rc = FB_USERERR(FB_EINVAL, "%s: %zu stray bytes after the entries", name, size - 32 - off);
out:
  if (rc != FB_OK) free(ops);
  else *ops_out = ops, *count_out = count;
  return rc;
}

fb_status fb_cache_check_export(const void *data, size_t size, const char *name, fb_cache_counts *n) {
  put_op *ops;
  uint64_t count;
  memset(n, 0, sizeof *n);
  FB_TRY(parse_export(data, size, name, &ops, &count));
  for (uint64_t i = 0; i < count; ++i) n->entries[ops[i].db]++;
  free(ops);
  return FB_OK;
}

fb_status fb_cache_import(fb_cache *c, const void *data, size_t size, const char *name, fb_cache_note note, void *arg,
                          fb_cache_counts *added, int *kept_local) {
  memset(added, 0, sizeof *added);
  *kept_local = 0;
  put_op *ops = NULL;
  uint64_t count = 0;
  fb_status rc = parse_export(data, size, name, &ops, &count);
  if (rc != FB_OK) return rc;
  if (c->ro) return free(ops), read_only(c, "import");
  /* winners: on a conflict keep the faster measured one */
  for (int attempt = 0; attempt < 16; ++attempt) {
    MDB_txn *txn;
    int r = begin_txn(c, 0, &txn);
    if (r) { rc = FB_ERR(FB_ELMDB, "%s: mdb_txn_begin: %s", c->dir, mdb_strerror(r)); goto out; }
    fb_cache_counts a;
    int kl_n = 0;
    memset(&a, 0, sizeof a);
    for (uint64_t i = 0; i < count && r == 0; ++i) {
      MDB_val k = ops[i].k, v = ops[i].v, old;
      int g = mdb_get(txn, c->dbi[ops[i].db], &k, &old);
      if (g && g != MDB_NOTFOUND) { /* a damaged page: not "absent" */
        r = g;
        break;
      }
      if (g == 0 && old.mv_size == v.mv_size && !memcmp(old.mv_data, v.mv_data, v.mv_size)) continue; /* already here */
      if (g == 0 && ops[i].db == FB_DB_WINNERS) {
        fb_winner ow, nw;
        fb_trial t;
        int old_ok = !record_bad(FB_DB_WINNERS, &k, &old, &ow, &t);
        record_bad(FB_DB_WINNERS, &k, &v, &nw, &t);
        char msg[1024];
        if (old_ok && ow.median_ms <= nw.median_ms) {
          snprintf(msg, sizeof msg, "conflict on winners/%.*s: kept the local %s (%.4f ms) over the imported %s (%.4f ms)", (int)k.mv_size,
                   (char *)k.mv_data, ow.variant, ow.median_ms, nw.variant, nw.median_ms);
          ++kl_n;
          if (note) note(msg, arg);
          continue;
        }
        snprintf(msg, sizeof msg, "conflict on winners/%.*s: kept the imported %s (%.4f ms) over the local %s%s (%.4f ms)", (int)k.mv_size,
                 (char *)k.mv_data, nw.variant, nw.median_ms, old_ok ? "" : "bad entry ", old_ok ? ow.variant : "", old_ok ? ow.median_ms : 0.0);
        if (note) note(msg, arg);
      } else if (g == 0 && ops[i].db == FB_DB_TRIALS) {
        continue; /* a trial already recorded here stays */
      } else if (g == 0 && ops[i].db == FB_DB_KERNELS && !kernel_bad(old.mv_data, old.mv_size)) {
        continue;
      }
      r = mdb_put(txn, c->dbi[ops[i].db], &k, &v, 0);
      if (r == 0) a.entries[ops[i].db]++;
    }
    if (r == 0) end_txn(c, txn, 1, &r);
    else end_txn(c, txn, 0, NULL);
    if (r == MDB_MAP_FULL && grow_map(c) == 0) {
      note = NULL; /* the conflicts were said once */
      continue;
    }
    if (r) { rc = FB_ERR(FB_ELMDB, "%s: import: %s", c->dir, mdb_strerror(r)); goto out; }
    *added = a;
    *kept_local = kl_n;
    break;
  }
out:
  free(ops);
  return rc;
}

/* ---- gc: drop the cubins no winner uses ------------------------------------------------------------------- */
fb_status fb_cache_gc(fb_cache *c, long *dropped, long *kept, int dry_run) {
  *dropped = 0, *kept = 0;
  if (c->ro && !dry_run) return read_only(c, "gc");
  for (int attempt = 0; attempt < 16; ++attempt) {
    MDB_txn *txn;
    MDB_cursor *cur = NULL;
    int r = begin_txn(c, dry_run ? MDB_RDONLY : 0, &txn);
    if (r) return FB_ERR(FB_ELMDB, "%s: mdb_txn_begin: %s", c->dir, mdb_strerror(r));
    uint8_t (*use)[32] = NULL;
    int nuse = 0, cap = 0;
    long d = 0, k_ = 0;
    MDB_val k, v;
    /* every winner's cubin is kept: a walk of winners that ends on anything but its end deletes nothing */
    int g = r = c->have[FB_DB_WINNERS] ? mdb_cursor_open(txn, c->dbi[FB_DB_WINNERS], &cur) : 0;
    for (g = r ? r : c->have[FB_DB_WINNERS] ? mdb_cursor_get(cur, &k, &v, MDB_FIRST) : MDB_NOTFOUND; g == 0;
         g = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
      fb_winner w;
      fb_trial t;
      if (record_bad(FB_DB_WINNERS, &k, &v, &w, &t)) continue;
      if (nuse == cap) {
        void *nu = realloc(use, sizeof *use * (size_t)(cap = cap ? 2 * cap : 64));
        if (!nu) { r = ENOMEM; break; }
        use = nu;
      }
      memcpy(use[nuse++], w.kernel, 32);
    }
    if (!r && g != MDB_NOTFOUND) r = g;
    if (cur) mdb_cursor_close(cur), cur = NULL;
    if (!r && c->have[FB_DB_KERNELS]) {
      r = mdb_cursor_open(txn, c->dbi[FB_DB_KERNELS], &cur);
      for (g = r ? r : mdb_cursor_get(cur, &k, &v, MDB_FIRST); !r && g == 0; g = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        int used = 0;
        for (int i = 0; i < nuse && !used; ++i) used = k.mv_size == 32 && !memcmp(use[i], k.mv_data, 32);
        if (used) { ++k_; continue; }
        ++d;
        if (!dry_run) r = mdb_cursor_del(cur, 0);
      }
      if (!r && g != MDB_NOTFOUND) r = g;
    }
    if (cur) mdb_cursor_close(cur);
    free(use);
    if (r == 0 && !dry_run) end_txn(c, txn, 1, &r);
    else end_txn(c, txn, 0, NULL);
    if (r == MDB_MAP_FULL && grow_map(c) == 0) continue;
    if (r) return FB_ERR(FB_ELMDB, "%s: gc: %s: nothing deleted", c->dir, r == ENOMEM ? "out of memory" : mdb_strerror(r));
    *dropped = d, *kept = k_;
    return FB_OK;
  }
  return FB_ERR(FB_ELMDB, "%s: gc: the map would not grow", c->dir);
}

/* The winner's provenance fields that are the same for every entry of a run: date and host. */
void fb_winner_stamp(fb_winner *w) {
  w->date = (long long)time(NULL);
  if (gethostname(w->host, sizeof w->host) != 0) snprintf(w->host, sizeof w->host, "?");
  w->host[sizeof w->host - 1] = 0;
}
