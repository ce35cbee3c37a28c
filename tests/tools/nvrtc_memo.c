/* nvrtc_memo.c — make test's NVRTC memo: an LD_PRELOAD library that answers nvrtcCompileProgram from a folder of
 * earlier answers to the same input, so that the tiers of one `make test` that compile the same kernels (test_train_gpu
 * --compile-only and its run on the fake driver, the ranks and runs of test_ep_gpu.sh, test_gen.sh's second run, ...)
 * run NVRTC once per distinct input.
 *
 * The input is everything NVRTC is given: the program's name and source, every header's include name and text (the
 * embedded templates/), the options (the arch among them) and NVRTC's version; its SHA-256 names the entry. An entry
 * is the cubin and the whole program log (ptxas's report included, which test_gemm --compile-only and fourbit gen
 * read), written to a temporary file and renamed, so concurrent processes and threads see it whole or not at all. The
 * first to miss an entry compiles it; the ranks and threads asking for the same input meanwhile wait for its entry
 * (a lock file holds the compiler's pid, so a dead one's lock is taken over). A compile that fails is not stored: it
 * runs again. The Makefile empties the folder at the start of each make test, so
 * every distinct kernel is compiled by NVRTC in every run.
 *
 * FB_NVRTC_MEMO=DIR turns it on (LD_PRELOAD=build/tests/tools/libnvrtc_memo.so); without it every call goes straight
 * to NVRTC. FB_NVRTC_MEMO_STATS=FILE appends a line "hit NAME" or "compiled NAME" per compile (for counting).
 * Interposed: nvrtcCreateProgram, nvrtcCompileProgram, nvrtcGetCUBINSize, nvrtcGetCUBIN, nvrtcGetProgramLogSize,
 * nvrtcGetProgramLog, nvrtcDestroyProgram (what gen/nvrtc.c and the tests call); a program answered from the memo that
 * is asked for its PTX is compiled by NVRTC then. A program given name expressions is never answered from the memo. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include "fourbit.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef struct entry {
  struct entry *next;
  nvrtcProgram prog;
  char *in;        /* the input so far: name, source, headers (the options are added at compile time) */
  size_t n;
  int nomemo;      /* given name expressions: always NVRTC */
  int hit;         /* answered from the memo: cubin and log below, NVRTC never compiled it */
  char *cubin, *log;
  size_t ncubin, nlog; /* nlog counts the terminating NUL, as nvrtcGetProgramLogSize does */
  int nopt;
  char **opts;     /* kept for a late real compile (PTX asked of a hit) */
} entry;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static entry *entries;

/* NVRTC's own entry points, looked up once (the first call of any) */
static struct {
  nvrtcResult (*create)(nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *);
  nvrtcResult (*add_name)(nvrtcProgram, const char *const);
  nvrtcResult (*compile)(nvrtcProgram, int, const char *const *);
  nvrtcResult (*cubin_size)(nvrtcProgram, size_t *);
  nvrtcResult (*cubin)(nvrtcProgram, char *);
  nvrtcResult (*log_size)(nvrtcProgram, size_t *);
  nvrtcResult (*log)(nvrtcProgram, char *);
  nvrtcResult (*ptx_size)(nvrtcProgram, size_t *);
  nvrtcResult (*ptx)(nvrtcProgram, char *);
  nvrtcResult (*destroy)(nvrtcProgram *);
  nvrtcResult (*version)(int *, int *);
} real;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static void resolve(void) {
  *(void **)&real.create = dlsym(RTLD_NEXT, "nvrtcCreateProgram");
  *(void **)&real.add_name = dlsym(RTLD_NEXT, "nvrtcAddNameExpression");
  *(void **)&real.compile = dlsym(RTLD_NEXT, "nvrtcCompileProgram");
  *(void **)&real.cubin_size = dlsym(RTLD_NEXT, "nvrtcGetCUBINSize");
  *(void **)&real.cubin = dlsym(RTLD_NEXT, "nvrtcGetCUBIN");
  *(void **)&real.log_size = dlsym(RTLD_NEXT, "nvrtcGetProgramLogSize");
  *(void **)&real.log = dlsym(RTLD_NEXT, "nvrtcGetProgramLog");
  *(void **)&real.ptx_size = dlsym(RTLD_NEXT, "nvrtcGetPTXSize");
  *(void **)&real.ptx = dlsym(RTLD_NEXT, "nvrtcGetPTX");
  *(void **)&real.destroy = dlsym(RTLD_NEXT, "nvrtcDestroyProgram");
  *(void **)&real.version = dlsym(RTLD_NEXT, "nvrtcVersion");
}
#define REAL pthread_once(&once, resolve)

static entry *find(nvrtcProgram p) {
  pthread_mutex_lock(&mu);
  entry *e = entries;
  while (e && e->prog != p) e = e->next;
  pthread_mutex_unlock(&mu);
  return e;
}

static int append(entry *e, const void *p, size_t len) {
  char *q = realloc(e->in, e->n + len);
  if (!q) return -1;
  memcpy(q + e->n, p, len);
  e->in = q, e->n += len;
  return 0;
}
static int append_str(entry *e, const char *s) { return append(e, s ? s : "", strlen(s ? s : "") + 1); }

static char *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  if (len >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)len + 1))) {
    if (fread(buf, 1, (size_t)len, f) != (size_t)len) free(buf), buf = NULL;
    else buf[len] = 0, *n = (size_t)len;
  }
  fclose(f);
  return buf;
}

static void write_atomic(const char *path, const void *data, size_t n) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%d.%lx", path, (int)getpid(), (unsigned long)pthread_self());
  FILE *f = fopen(tmp, "wb");
  if (!f) return;
  int ok = fwrite(data, 1, n, f) == n;
  ok &= fclose(f) == 0;
  if (!ok || rename(tmp, path)) unlink(tmp);
}

static void stat_line(const char *what, const char *name) {
  const char *s = getenv("FB_NVRTC_MEMO_STATS");
  if (!s || !*s) return;
  int fd = open(s, O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd < 0) return;
  char line[512];
  int l = snprintf(line, sizeof line, "%s %s\n", what, name);
  if (write(fd, line, (size_t)(l < (int)sizeof line ? l : (int)sizeof line - 1)) < 0) { /* counting only */ }
  close(fd);
}

EXPORT nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name, int nh,
                                      const char *const *headers, const char *const *names) {
  REAL;
  nvrtcResult r = real.create(prog, src, name, nh, headers, names);
  const char *dir = getenv("FB_NVRTC_MEMO");
  if (r != NVRTC_SUCCESS || !dir || !*dir) return r;
  entry *e = calloc(1, sizeof *e);
  if (!e) return r;
  e->prog = *prog;
  int maj = 0, min = 0;
  if (!real.version || real.version(&maj, &min) != NVRTC_SUCCESS) e->nomemo = 1;
  char v[64];
  snprintf(v, sizeof v, "fourbit nvrtc memo 1, nvrtc %d.%d, %d headers", maj, min, nh);
  int bad = append_str(e, v) || append_str(e, name) || append_str(e, src);
  for (int i = 0; i < nh && !bad; ++i) bad = append_str(e, names ? names[i] : NULL) || append_str(e, headers[i]);
  if (bad) e->nomemo = 1;
  pthread_mutex_lock(&mu);
  e->next = entries, entries = e;
  pthread_mutex_unlock(&mu);
  return r;
}

EXPORT nvrtcResult nvrtcAddNameExpression(nvrtcProgram prog, const char *const expr) {
  REAL;
  entry *e = find(prog);
  if (e) e->nomemo = 1;
  return real.add_name(prog, expr);
}

/* the memo's entry for E, if there is one: E is then answered from it (1) */
static int answer(entry *e, const char *cpath, const char *lpath, int nopt, const char *const *opts) {
  size_t nc = 0, nl = 0;
  char *cub = read_all(cpath, &nc), *log = cub ? read_all(lpath, &nl) : NULL;
  if (!cub || !log) {
    free(cub), free(log);
    return 0;
  }
  e->opts = calloc((size_t)(nopt ? nopt : 1), sizeof *e->opts);
  for (int i = 0; e->opts && i < nopt; ++i) e->opts[i] = strdup(opts[i]);
  e->nopt = nopt;
  e->hit = 1, e->cubin = cub, e->ncubin = nc, e->log = log, e->nlog = nl + 1;
  stat_line("hit", e->in + strlen(e->in) + 1);
  return 1;
}

EXPORT nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int nopt, const char *const *opts) {
  REAL;
  entry *e = find(prog);
  const char *dir = getenv("FB_NVRTC_MEMO");
  if (!e || e->nomemo || e->hit || !dir || !*dir) return real.compile(prog, nopt, opts);
  char n[32];
  snprintf(n, sizeof n, "%d options", nopt);
  int bad = append_str(e, n);
  for (int i = 0; i < nopt && !bad; ++i) bad = append_str(e, opts[i]);
  if (bad) return real.compile(prog, nopt, opts);
  char hex[65], cpath[4200], lpath[4200];
  fb_sha256_hex(e->in, e->n, hex);
  snprintf(cpath, sizeof cpath, "%s/%s.cubin", dir, hex);
  snprintf(lpath, sizeof lpath, "%s/%s.log", dir, hex);
  const char *name = e->in + strlen(e->in) + 1;
  if (answer(e, cpath, lpath, nopt, opts)) return NVRTC_SUCCESS;
  /* the first to miss compiles, holding HEX.lock (its pid inside); the others wait for its entry, and compile
     themselves only if it ends without one (its compile failed, or it died: then its lock is taken over) */
  char kpath[4200];
  snprintf(kpath, sizeof kpath, "%s/%s.lock", dir, hex);
  mkdir(dir, 0755);
  int fd;
  while ((fd = open(kpath, O_WRONLY | O_CREAT | O_EXCL, 0644)) < 0 && errno == EEXIST) {
    size_t wn = 0;
    char *who = read_all(kpath, &wn);
    int pid = who ? atoi(who) : 0;
    free(who);
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) { unlink(kpath); continue; } /* its owner died */
    usleep(50000);
    if (answer(e, cpath, lpath, nopt, opts)) return NVRTC_SUCCESS;
    if (access(kpath, F_OK) != 0 && access(cpath, F_OK) != 0) break; /* released without an entry: a failed compile */
  }
  if (fd >= 0) {
    char pid[32];
    int l = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (write(fd, pid, (size_t)l) != l) { /* the lock stands without its pid: waiters only wait longer */ }
    close(fd);
    if (answer(e, cpath, lpath, nopt, opts)) return unlink(kpath), NVRTC_SUCCESS; /* stored while we took the lock */
  }
  nvrtcResult r = real.compile(prog, nopt, opts);
  stat_line("compiled", name);
  if (r != NVRTC_SUCCESS) {
    if (fd >= 0) unlink(kpath);
    return r;
  }
  size_t lsz = 0, nc = 0;
  char *cub, *log;
  if (real.cubin_size(prog, &nc) != NVRTC_SUCCESS || real.log_size(prog, &lsz) != NVRTC_SUCCESS) {
    if (fd >= 0) unlink(kpath);
    return r;
  }
  cub = malloc(nc ? nc : 1), log = malloc(lsz + 1);
  if (cub && log && real.cubin(prog, cub) == NVRTC_SUCCESS && real.log(prog, log) == NVRTC_SUCCESS) {
    log[lsz] = 0;
    mkdir(dir, 0755);
    write_atomic(lpath, log, strlen(log)); /* the log first: an entry counts once its cubin is there */
    write_atomic(cpath, cub, nc);
  }
  free(cub), free(log);
  if (fd >= 0) unlink(kpath);
  return r;
}

/* a hit asked for something the memo does not keep: compile it for real now */
static nvrtcResult unhit(entry *e) {
  REAL;
  if (!e->hit) return NVRTC_SUCCESS;
  e->hit = 0;
  return real.compile(e->prog, e->nopt, (const char *const *)e->opts);
}

EXPORT nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *n) {
  REAL;
  entry *e = find(prog);
  if (e && e->hit) return *n = e->ncubin, NVRTC_SUCCESS;
  return real.cubin_size(prog, n);
}

EXPORT nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin) {
  REAL;
  entry *e = find(prog);
  if (e && e->hit) return memcpy(cubin, e->cubin, e->ncubin), NVRTC_SUCCESS;
  return real.cubin(prog, cubin);
}

EXPORT nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *n) {
  REAL;
  entry *e = find(prog);
  if (e && e->hit) return *n = e->nlog, NVRTC_SUCCESS;
  return real.log_size(prog, n);
}

EXPORT nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log) {
  REAL;
  entry *e = find(prog);
  if (e && e->hit) return memcpy(log, e->log, e->nlog), NVRTC_SUCCESS;
  return real.log(prog, log);
}

EXPORT nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *n) {
  REAL;
  entry *e = find(prog);
  nvrtcResult r = e ? unhit(e) : NVRTC_SUCCESS;
  return r != NVRTC_SUCCESS ? r : real.ptx_size(prog, n);
}

EXPORT nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx) {
  REAL;
  entry *e = find(prog);
  nvrtcResult r = e ? unhit(e) : NVRTC_SUCCESS;
  return r != NVRTC_SUCCESS ? r : real.ptx(prog, ptx);
}

EXPORT nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog) {
  REAL;
  pthread_mutex_lock(&mu);
  entry **pp = &entries;
  while (*pp && (*pp)->prog != *prog) pp = &(*pp)->next;
  entry *e = *pp;
  if (e) *pp = e->next;
  pthread_mutex_unlock(&mu);
  if (e) {
    for (int i = 0; i < e->nopt && e->opts; ++i) free(e->opts[i]);
    free(e->opts), free(e->in), free(e->cubin), free(e->log), free(e);
  }
  return real.destroy(prog);
}
