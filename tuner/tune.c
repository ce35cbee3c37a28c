/* tune.c — the sweep: `fourbit tune RECIPE`. For every unique kernel spec of the recipe's plan that has a template,
 * its legal variants (fb_gen_variants) are compiled in parallel — looked up in the cache's kernels database first,
 * else compiled by NVRTC in a child process (`fourbit __compile`, killed at its hard time-out) and stored — then,
 * per shape bucket, a search strategy (strategy.c) asks the worker process (tuner/worker/worker.c) to load, check
 * and time candidates. A candidate that fails (compile, check, fault, time-out) is recorded in `trials` and never
 * asked for again, here or in a later sweep; a worker that dies is replaced. The best few are re-measured
 * together with the default variant; the winner, its runner-up and the default's time go to `winners`.
 * Entry points: fb_tune_run(), fb_tune_lookup(), fb_tune_warm_start_bench(), fb_tune_fingerprint(). */
#include "tune.h"
#include "fb_tmpl.h"

#include "fb_cuda.h"
#include "fb_error.h"
#include "strategy.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

fb_status fb_tune_fingerprint(fb_fingerprint *fp) {
  memset(fp, 0, sizeof *fp);
  fb_cuda_device_info d;
  FB_TRY(fb_cuda_device_info_get(0, &d));
  snprintf(fp->gpu, sizeof fp->gpu, "%.95s", d.name);
  fp->cc_major = d.cc_major, fp->cc_minor = d.cc_minor, fp->sm_count = d.sm_count, fp->driver_version = d.driver_version;
  fp->mem_bytes = d.mem_bytes;
  fb_fingerprint_toolchain(fp);
  return FB_OK;
}

static const char *arch_of(const fb_fingerprint *fp) {
  if (fp->cc_major == 0) return "sm_90a"; /* the emulator (cc 0.0) */
  return fb_arch_of_cc(fp->cc_major, fp->cc_minor);
}

/* ---- a child process with pipes: the compile children and the worker ---------------------------------------- */
typedef struct {
  pid_t pid;
  int in, out, err; /* our ends: its stdin, stdout, stderr (-1: inherited) */
} child;

static int spawn(child *c, char *const argv[], int capture_err) {
  int pi[2], po[2], pe[2] = {-1, -1};
  if (pipe2(pi, O_CLOEXEC) || pipe2(po, O_CLOEXEC) || (capture_err && pipe2(pe, O_CLOEXEC))) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pi[0], 0);
  posix_spawn_file_actions_adddup2(&fa, po[1], 1);
  if (capture_err) posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
  int r = posix_spawn(&c->pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(pi[0]), close(po[1]);
  if (capture_err) close(pe[1]);
  if (r) {
    close(pi[1]), close(po[0]);
    if (capture_err) close(pe[0]);
    errno = r;
    return -1;
  }
  c->in = pi[1], c->out = po[0], c->err = capture_err ? pe[0] : -1;
  return 0;
}

static void reap(child *c, int kill_it, int *status) {
  if (c->pid <= 0) return;
  if (kill_it) kill(c->pid, SIGKILL);
  int st = 0;
  while (waitpid(c->pid, &st, 0) < 0 && errno == EINTR) {}
  if (status) *status = st;
  if (c->in >= 0) close(c->in);
  if (c->out >= 0) close(c->out);
  if (c->err >= 0) close(c->err);
  c->pid = -1, c->in = c->out = c->err = -1;
}

/* ---- candidates -------------------------------------------------------------------------------------------- */
typedef struct {
  fb_variant var;
  char *src;
  uint8_t key[32];
  void *cubin;
  size_t size;
  int cached;           /* found in kernels */
  int compiled;         /* cubin present */
  double compile_ms;
  char err[512];
  fb_trial_status fail; /* FB_TRIAL_OK while alive */
  int loaded_gen;       /* the worker generation it is loaded in (0: none) */
  double cost;          /* last measured median, ms */
  double spread;
  int effort;
} cand;

typedef struct {
  fb_kernel_spec spec;
  cand *c;
  int n, pruned;
  char pruned_why[256];
  const char *untimed; /* why the worker does not check and time it (its default is compiled into the cache) */
} kspec;

/* ---- compiling --------------------------------------------------------------------------------------------- */
typedef struct {
  kspec *ks;
  int nks, next_s, next_c, done, total;
  pthread_mutex_t mu;
  const fb_tune_opts *o;
  fb_cache *cache;
  const char *arch;
} cpool;

static void compile_one(cpool *p, cand *c) {
  fb_cache_kernel_key(c->src, p->arch, c->key);
  if (p->cache && fb_cache_get_kernel(p->cache, c->key, &c->cubin, &c->size) == FB_OK) {
    c->cached = c->compiled = 1;
    return;
  }
  char *argv[] = {(char *)p->o->self, "__compile", c->var.name, (char *)p->arch, NULL};
  child ch = {-1, -1, -1, -1};
  long long t0 = fb_tune_now_ms(), deadline = t0 + (long long)(p->o->compile_timeout_s * 1000);
  if (spawn(&ch, argv, 1)) {
    snprintf(c->err, sizeof c->err, "cannot start %s __compile: %s", p->o->self, strerror(errno));
    c->fail = FB_TRIAL_COMPILE;
    return;
  }
  size_t sl = strlen(c->src);
  const char *s = c->src;
  while (sl) { /* the child reads all of its source before it compiles */
    ssize_t w = write(ch.in, s, sl);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    s += w, sl -= (size_t)w;
  }
  close(ch.in), ch.in = -1;
  size_t cap = 1 << 16, n = 0, en = 0;
  char *buf = malloc(cap), ebuf[512];
  int open_fds = 2, timed_out = 0;
  while (open_fds && buf) {
    long long left = deadline - fb_tune_now_ms();
    if (left <= 0) { timed_out = 1; break; }
    struct pollfd pf[2] = {{ch.out, POLLIN, 0}, {ch.err, POLLIN, 0}};
    int r = poll(pf, 2, (int)(left > 60000 ? 60000 : left));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    if (pf[0].revents && ch.out >= 0) {
      if (n == cap) {
        char *nb = realloc(buf, cap *= 2);
        if (!nb) break;
        buf = nb;
      }
      ssize_t got = read(ch.out, buf + n, cap - n);
      if (got > 0) n += (size_t)got;
      else if (got == 0) { close(ch.out), ch.out = -1, --open_fds; }
    }
    if (pf[1].revents && ch.err >= 0) {
      char tmp[4096];
      ssize_t got = read(ch.err, tmp, sizeof tmp);
      if (got > 0) {
        size_t k = (size_t)got < sizeof ebuf - 1 - en ? (size_t)got : sizeof ebuf - 1 - en;
        memcpy(ebuf + en, tmp, k), en += k;
      } else if (got == 0) { close(ch.err), ch.err = -1, --open_fds; }
    }
    if (ch.out < 0) pf[0].fd = -1;
    if (ch.err < 0) pf[1].fd = -1;
  }
  ebuf[en] = 0;
  int st = 0;
  reap(&ch, timed_out, &st);
  c->compile_ms = (double)(fb_tune_now_ms() - t0);
  if (timed_out) {
    snprintf(c->err, sizeof c->err, "NVRTC took more than %.0f s: killed", p->o->compile_timeout_s);
    c->fail = FB_TRIAL_TIMEOUT;
    free(buf);
    return;
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !n || !buf) {
    for (char *q = ebuf; *q; ++q) if (*q == '\n') *q = ' ';
    snprintf(c->err, sizeof c->err, "compile failed (%s %d): %s", WIFSIGNALED(st) ? "signal" : "exit",
             WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), ebuf);
    c->fail = FB_TRIAL_COMPILE;
    free(buf);
    return;
  }
  c->cubin = buf, c->size = n, c->compiled = 1;
  if (p->cache && fb_cache_put_kernel(p->cache, c->key, c->src, buf, n) != FB_OK)
    fprintf(stderr, "fourbit tune: --cache: %s\n", fb_errmsg());
}

static void *compile_thread(void *arg) {
  cpool *p = arg;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    while (p->next_s < p->nks && p->next_c >= p->ks[p->next_s].n) p->next_s++, p->next_c = 0;
    if (p->next_s >= p->nks) { pthread_mutex_unlock(&p->mu); return NULL; }
    cand *c = &p->ks[p->next_s].c[p->next_c++];
    pthread_mutex_unlock(&p->mu);
    compile_one(p, c);
    pthread_mutex_lock(&p->mu);
    ++p->done;
    if (p->o->tty) fprintf(stderr, "\r  compiling: %d/%d", p->done, p->total);
    pthread_mutex_unlock(&p->mu);
  }
}

/* ---- the worker -------------------------------------------------------------------------------------------- */
typedef struct {
  child ch;
  int gen;            /* generation: candidates loaded in an earlier one must be loaded again */
  int deaths;
  fb_msg_device dev;
  const fb_tune_opts *o;
  void *buf;
  size_t len;
} worker;

static int worker_start(worker *w) {
  char *argv[] = {(char *)w->o->worker, NULL};
  if (spawn(&w->ch, argv, 0)) {
    snprintf(w->dev.msg, sizeof w->dev.msg, "cannot start the worker %s: %s", w->o->worker, strerror(errno));
    return -1;
  }
  ++w->gen;
  int type;
  if (fb_tune_send(w->ch.in, FB_MSG_HELLO, NULL, 0, NULL, 0, NULL, 0) ||
      fb_tune_recv(w->ch.out, &type, &w->buf, &w->len, (long long)(w->o->worker_timeout_s * 1000)) || type != FB_MSG_DEVICE ||
      w->len != sizeof(fb_msg_device)) {
    int st = 0;
    reap(&w->ch, 1, &st);
    snprintf(w->dev.msg, sizeof w->dev.msg, "the worker %s did not answer (%s %d)", w->o->worker, WIFSIGNALED(st) ? "signal" : "exit",
             WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    return -1;
  }
  memcpy(&w->dev, w->buf, sizeof w->dev);
  if (w->dev.proto != FB_TUNE_PROTO) {
    snprintf(w->dev.msg, sizeof w->dev.msg, "the worker %s speaks protocol %d, this fourbit %d: rebuild both", w->o->worker, w->dev.proto,
             FB_TUNE_PROTO);
    reap(&w->ch, 1, NULL);
    return -1;
  }
  return w->dev.ok ? 0 : -1;
}

/* After a request failed: kill (on a time-out) and reap the worker; what happened, in words. */
static fb_trial_status worker_lost(worker *w, int rc, char *why, size_t n) {
  int st = 0;
  reap(&w->ch, 1, &st);
  ++w->deaths;
  if (rc == -2) {
    snprintf(why, n, "no answer within %.0f s: the worker was killed", w->o->worker_timeout_s);
    return FB_TRIAL_TIMEOUT;
  }
  if (WIFSIGNALED(st) && WTERMSIG(st) != SIGKILL) snprintf(why, n, "the worker died of signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
  else snprintf(why, n, "the worker exited with status %d (a CUDA error: see its message above)", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  return FB_TRIAL_FAULT;
}

static int worker_alive(worker *w) {
  if (w->ch.pid > 0) return 0;
  return worker_start(w);
}

/* ---- one spec at one bucket -------------------------------------------------------------------------------- */
typedef struct {
  const fb_tune_opts *o;
  worker *w;
  fb_cache *cache;
  const fb_recipe *r;
  const fb_plan *plan;
  kspec *ks;
  long long tokens, bucket;
  fb_tune_shape_t shape;
  int *ids;             /* search index -> candidate index */
  int nids;
  long long deadline;   /* ms, 0: none */
  int id_base;          /* worker ids: id_base + candidate index, unique over the sweep's specs */
  int measured, failed_now;
  double best;
  int best_c;
  /* progress */
  int spec_i, nspec_runs;
  long long t_start, sweep_deadline;
} run_ctx;

static void record(run_ctx *x, cand *c, fb_trial_status st, const char *msg, long wrong) {
  fb_trial t;
  memset(&t, 0, sizeof t);
  t.fp = x->w->dev.fp;
  snprintf(t.spec, sizeof t.spec, "%s", x->ks->spec.name);
  t.bucket = x->bucket, t.shape = x->tokens;
  snprintf(t.variant, sizeof t.variant, "%s", c->var.name);
  t.status = st, t.wrong = wrong;
  if (st == FB_TRIAL_OK) t.median_ms = c->cost, t.spread_ms = c->spread, t.runs = 5 * c->effort;
  snprintf(t.message, sizeof t.message, "%s", msg ? msg : "");
  snprintf(t.recipe, sizeof t.recipe, "%s", x->r->name);
  fb_winner stamp;
  fb_winner_stamp(&stamp);
  t.date = stamp.date;
  if (x->cache && fb_cache_put_trial(x->cache, &t) != FB_OK) fprintf(stderr, "fourbit tune: %s\n", fb_errmsg());
}

static void fail_cand(run_ctx *x, cand *c, fb_trial_status st, const char *why, long wrong) {
  c->fail = st;
  snprintf(c->err, sizeof c->err, "%s", why);
  x->failed_now++;
  if (x->o->tty) fprintf(stderr, "\r%120s\r", "");
  fprintf(stderr, "  %s: %s: %s\n", c->var.name, fb_trial_status_name(st), why);
  record(x, c, st, why, wrong);
}

/* load and check candidate c in the worker (alone, so that a fault is its own); 0 when it is ready */
static int ensure_loaded(run_ctx *x, cand *c, int cid) {
  worker *w = x->w;
  if (c->fail != FB_TRIAL_OK) return -1;
  if (c->loaded_gen == w->gen && w->ch.pid > 0) return 0;
  if (worker_alive(w)) {
    fail_cand(x, c, FB_TRIAL_FAULT, w->dev.msg, 0);
    return -1;
  }
  fb_msg_load m;
  memset(&m, 0, sizeof m);
  m.id = x->id_base + cid, m.spec = x->ks->spec, m.var = c->var, m.cubin_len = c->size, m.src_len = strlen(c->src);
  m.fault = x->o->fault && *x->o->fault && strstr(c->var.name, x->o->fault) != NULL;
  int type = 0, rc = fb_tune_send(w->ch.in, FB_MSG_LOAD, &m, sizeof m, c->cubin, c->size, c->src, m.src_len);
  if (!rc) rc = fb_tune_recv(w->ch.out, &type, &w->buf, &w->len, (long long)(x->o->worker_timeout_s * 1000));
  if (rc || type != FB_MSG_VERIFIED || w->len != sizeof(fb_msg_verified)) {
    char why[512];
    fb_trial_status st = worker_lost(w, rc == -2 ? -2 : -1, why, sizeof why);
    char msg[600];
    snprintf(msg, sizeof msg, "while loading and checking it: %s", why);
    fail_cand(x, c, st, msg, 0);
    return -1;
  }
  fb_msg_verified v;
  memcpy(&v, w->buf, sizeof v);
  if (!v.ok) {
    fail_cand(x, c, FB_TRIAL_WRONG, v.msg, v.wrong);
    return -1;
  }
  c->loaded_gen = w->gen;
  return 0;
}

/* time candidates cs[0..n) together; 0 with costs set, -1 if the worker died (cs unchanged) */
static int time_batch(run_ctx *x, const int *cs, int n, int effort, double *med, double *spr, char *why, size_t wn, fb_trial_status *st) {
  worker *w = x->w;
  fb_msg_time m;
  memset(&m, 0, sizeof m);
  m.n = n, m.effort = effort, m.spec = x->ks->spec, m.shape = x->shape;
  for (int j = 0; j < n; ++j) m.ids[j] = x->id_base + cs[j];
  int type = 0;
  long long timeout = (long long)(x->o->worker_timeout_s * 1000) * (1 + effort / 8);
  int rc = fb_tune_send(w->ch.in, FB_MSG_TIME, &m, sizeof m, NULL, 0, NULL, 0);
  if (!rc) rc = fb_tune_recv(w->ch.out, &type, &w->buf, &w->len, timeout);
  if (rc || type != FB_MSG_TIMES || w->len != sizeof(fb_msg_times)) {
    *st = worker_lost(w, rc == -2 ? -2 : -1, why, wn);
    return -1;
  }
  fb_msg_times t;
  memcpy(&t, w->buf, sizeof t);
  if (!t.ok) {
    snprintf(why, wn, "%s", t.msg);
    *st = FB_TRIAL_FAULT;
    return -2;
  }
  for (int j = 0; j < n; ++j) med[j] = t.median_ms[j], spr[j] = t.spread_ms[j];
  return 0;
}

static void progress(run_ctx *x) {
  if (!x->o->tty) return;
  long long now = fb_tune_now_ms();
  double el = (double)(now - x->t_start) / 1000, left;
  if (x->sweep_deadline) left = (double)(x->sweep_deadline - now) / 1000;
  else left = x->spec_i > 0 ? el / x->spec_i * (x->nspec_runs - x->spec_i) : 0;
  char best[160] = "-";
  if (x->best_c >= 0) {
    size_t l = strlen(x->ks->spec.name);
    snprintf(best, sizeof best, "%.4f ms (%s)", x->best, x->ks->c[x->best_c].var.name + l + 1);
  }
  fprintf(stderr, "\r  [%d/%d] %.40s b%lld: %d/%d measured, %d failed, best %s, ~%.0fs left    ", x->spec_i + 1, x->nspec_runs,
          x->ks->spec.name, x->bucket, x->measured, x->nids, x->failed_now, best, left < 0 ? 0 : left);
}

static int oracle(void *arg, const int *ids, int k, int effort, double *cost, int *ok) {
  run_ctx *x = arg;
  int cs[FB_TUNE_MAXBATCH], pos[FB_TUNE_MAXBATCH], n = 0;
  for (int j = 0; j < k; ++j) {
    ok[j] = 0;
    int ci = x->ids[ids[j]];
    if (ensure_loaded(x, &x->ks->c[ci], ci) == 0 && n < FB_TUNE_MAXBATCH) cs[n] = ci, pos[n++] = j;
  }
  /* a later one of the batch may have killed the worker the earlier ones were loaded in: load those again */
  for (int round = 0; round < 4; ++round) {
    int stale = 0, m = 0;
    for (int j = 0; j < n; ++j) stale |= x->ks->c[cs[j]].loaded_gen != x->w->gen || x->w->ch.pid <= 0;
    if (!stale) break;
    for (int j = 0; j < n; ++j)
      if (ensure_loaded(x, &x->ks->c[cs[j]], cs[j]) == 0) cs[m] = cs[j], pos[m++] = pos[j];
    n = m;
  }
  double med[FB_TUNE_MAXBATCH], spr[FB_TUNE_MAXBATCH];
  char why[512];
  fb_trial_status st;
  if (n) {
    int rc = time_batch(x, cs, n, effort, med, spr, why, sizeof why, &st);
    if (rc == -1 && n == 1) {
      fail_cand(x, &x->ks->c[cs[0]], st, why, 0);
      n = 0;
    } else if (rc == -1) { /* which one? each alone, in a new worker */
      if (x->o->tty) fprintf(stderr, "\r%120s\r", "");
      fprintf(stderr, "  %s while timing %d candidates together: each again alone\n", why, n);
      int m2 = 0;
      for (int j = 0; j < n; ++j) {
        cand *c = &x->ks->c[cs[j]];
        if (ensure_loaded(x, c, cs[j])) continue;
        double md, sp;
        fb_trial_status s1;
        char w1[512];
        if (time_batch(x, &cs[j], 1, effort, &md, &sp, w1, sizeof w1, &s1)) {
          fail_cand(x, c, s1, w1, 0);
          continue;
        }
        cs[m2] = cs[j], pos[m2] = pos[j], med[m2] = md, spr[m2] = sp, ++m2;
      }
      n = m2;
    } else if (rc == -2) {
      for (int j = 0; j < n; ++j) fail_cand(x, &x->ks->c[cs[j]], st, why, 0);
      n = 0;
    }
  }
  for (int j = 0; j < n; ++j) {
    cand *c = &x->ks->c[cs[j]];
    if (effort >= c->effort) {
      if (!c->effort) ++x->measured;
      c->cost = med[j], c->spread = spr[j], c->effort = effort;
    }
    ok[pos[j]] = 1, cost[pos[j]] = med[j];
    if (x->best_c < 0 || med[j] < x->best) x->best = med[j], x->best_c = cs[j];
  }
  progress(x);
  return x->deadline && fb_tune_now_ms() > x->deadline;
}

typedef struct {
  char spec[128];
  long long bucket;
  double default_ms, tuned_ms, runner_ms;
  char winner[96], runner[96];
  int cands, failed;
  const char *note;
} summary_row;

static const char *tag(const kspec *ks, const cand *c) {
  size_t l = strlen(ks->spec.name);
  return strncmp(c->var.name, ks->spec.name, l) ? c->var.name : c->var.name + l + (c->var.name[l] == '_');
}

/* A GEMM whose winner is not of the fast family (the first template's: wgmma on sm_90a) when every variant of that
   family failed: said on stderr and in the summary, with the first failure's reason (the portable family is the net). */
static void family_fallback(const kspec *ks, const cand *wc, long long bucket, summary_row *row) {
  const fb_tmpl *t0 = fb_tmpl_by_file(ks->c[0].var.tmpl), *tw = fb_tmpl_by_file(wc->var.tmpl);
  if (!t0 || !tw || !t0->family || t0 == tw) return;
  int n = 0, failed = 0;
  const cand *first = NULL;
  for (int i = 0; i < ks->n; ++i) {
    if (strcmp(ks->c[i].var.tmpl, t0->file)) continue;
    ++n;
    if (ks->c[i].fail != FB_TRIAL_OK) failed += 1, first = first ? first : &ks->c[i];
  }
  if (!n || failed < n) return;
  fprintf(stderr, "  %s b%lld: every %s variant (%d) failed (first: %s: %s): the winner is the %s family's %s\n", ks->spec.name, bucket,
          t0->family, n, first->var.name, first->err[0] ? first->err : fb_trial_status_name(first->fail), tw->family, wc->var.name);
  row->note = tw->family && !strcmp(tw->family, "mma") ? "fallback: mma (every wgmma variant failed)" : "fallback: another family";
}

static void tune_spec_bucket(run_ctx *x, summary_row *row) {
  kspec *ks = x->ks;
  memset(row, 0, sizeof *row);
  snprintf(row->spec, sizeof row->spec, "%s", ks->spec.name);
  row->bucket = x->bucket;
  /* candidates: compiled, not failed in this run, and without a failed trial in the cache for this bucket */
  x->ids = malloc(sizeof *x->ids * (size_t)ks->n);
  int *skip = calloc((size_t)ks->n, sizeof *skip), known_bad = 0;
  x->nids = 0;
  for (int i = 0; i < ks->n; ++i) {
    cand *c = &ks->c[i];
    c->cost = 0, c->effort = 0;
    if (!c->compiled) {
      if (c->fail != FB_TRIAL_OK) record(x, c, c->fail, c->err, 0);
      continue;
    }
    fb_trial t;
    if (x->cache && fb_cache_get_trial(x->cache, &x->w->dev.fp, ks->spec.name, x->bucket, c->var.name, &t) == FB_OK && t.status != FB_TRIAL_OK) {
      skip[x->nids] = 1, ++known_bad; /* failed before: not retried */
    }
    else if (c->fail != FB_TRIAL_OK) skip[x->nids] = 1, record(x, c, c->fail, c->err, 0); /* failed at an earlier bucket */
    x->ids[x->nids++] = i;
  }
  row->cands = ks->n;
  x->measured = 0, x->failed_now = 0, x->best_c = -1, x->best = 0;
  long budget = x->o->budget > 0 ? x->o->budget : 3L * x->nids;
  if (x->deadline) budget = 1000L * (x->nids + 1);
  fb_search p = {.n = x->nids, .measure = oracle, .arg = x, .budget = budget, .seed = (unsigned)x->bucket, .skip = skip};
  fb_search_result res;
  fb_search_run((fb_strategy)x->o->strategy, &p, &res);
  /* the re-measure: the best three and the default variant, together, at a high effort */
  int top[4], nt = 0, *rank = malloc(sizeof *rank * (size_t)ks->n), nr = 0;
  for (int i = 0; i < ks->n; ++i)
    if (ks->c[i].effort && ks->c[i].fail == FB_TRIAL_OK) rank[nr++] = i;
  for (int a = 1; a < nr; ++a) /* by cost (few: insertion) */
    for (int b = a; b > 0 && ks->c[rank[b]].cost < ks->c[rank[b - 1]].cost; --b) { int t = rank[b]; rank[b] = rank[b - 1]; rank[b - 1] = t; }
  for (int j = 0; j < nr && nt < 3; ++j) top[nt++] = rank[j];
  int def = 0; /* the default variant: the first legal one */
  int have_def = 0;
  for (int j = 0; j < nt; ++j) have_def |= top[j] == def;
  if (!have_def && ks->c[def].compiled && ks->c[def].fail == FB_TRIAL_OK && ensure_loaded(x, &ks->c[def], def) == 0) top[nt++] = def;
  double med[4], spr[4];
  char why[512];
  fb_trial_status st;
  int rem_ok = 0;
  for (int attempt = 0; attempt < 2 && nt && !rem_ok; ++attempt) {
    int ok = 1;
    for (int j = 0; j < nt; ++j) ok &= ensure_loaded(x, &ks->c[top[j]], top[j]) == 0;
    if (!ok) { /* one failed on reload: drop it */
      int m = 0;
      for (int j = 0; j < nt; ++j) if (ks->c[top[j]].fail == FB_TRIAL_OK) top[m++] = top[j];
      nt = m;
      continue;
    }
    if (time_batch(x, top, nt, 16, med, spr, why, sizeof why, &st) == 0) rem_ok = 1;
  }
  if (rem_ok)
    for (int j = 0; j < nt; ++j) {
      cand *c = &ks->c[top[j]];
      if (!c->effort) ++x->measured;
      c->cost = med[j], c->spread = spr[j], c->effort = 16;
    }
  /* every measured candidate is a trial */
  for (int i = 0; i < ks->n; ++i)
    if (ks->c[i].effort && ks->c[i].fail == FB_TRIAL_OK) record(x, &ks->c[i], FB_TRIAL_OK, NULL, 0);
  int failed = known_bad;
  for (int i = 0; i < ks->n; ++i) failed += ks->c[i].fail != FB_TRIAL_OK;
  row->failed = failed;
  if (x->o->tty) fprintf(stderr, "\r%160s\r", "");
  if (!rem_ok || !nt) {
    row->note = "no candidate passed";
    fprintf(stderr, "  %s b%lld: no winner (%d candidates, %d failed)\n", ks->spec.name, x->bucket, ks->n, failed);
    free(x->ids), free(skip), free(rank);
    return;
  }
  int b = -1, r2 = -1;
  for (int j = 0; j < nt; ++j) {
    if (b < 0 || med[j] < med[b]) r2 = b, b = j;
    else if (r2 < 0 || med[j] < med[r2]) r2 = j;
  }
  cand *wc = &ks->c[top[b]];
  family_fallback(ks, wc, x->bucket, row);
  fb_winner w;
  memset(&w, 0, sizeof w);
  w.fp = x->w->dev.fp;
  snprintf(w.spec, sizeof w.spec, "%s", ks->spec.name);
  w.bucket = x->bucket, w.shape = x->tokens;
  snprintf(w.arch, sizeof w.arch, "%s", x->plan->arch);
  snprintf(w.variant, sizeof w.variant, "%s", wc->var.name);
  memcpy(w.kernel, wc->key, 32);
  w.median_ms = med[b], w.spread_ms = spr[b], w.runs = 5 * 16;
  if (r2 >= 0) snprintf(w.runner_up, sizeof w.runner_up, "%s", ks->c[top[r2]].var.name), w.runner_up_ms = med[r2];
  snprintf(w.default_variant, sizeof w.default_variant, "%s", ks->c[def].var.name);
  for (int j = 0; j < nt; ++j)
    if (top[j] == def) w.default_ms = med[j];
  w.candidates = ks->n, w.failed = failed;
  snprintf(w.recipe, sizeof w.recipe, "%s", x->r->name);
  snprintf(w.recipe_sha, sizeof w.recipe_sha, "%s", x->plan->sha256);
  fb_winner_stamp(&w);
  if (x->cache && fb_cache_put_winner(x->cache, &w) != FB_OK) fprintf(stderr, "fourbit tune: %s\n", fb_errmsg());
  row->default_ms = w.default_ms, row->tuned_ms = w.median_ms, row->runner_ms = w.runner_up_ms;
  snprintf(row->winner, sizeof row->winner, "%.95s", tag(ks, wc));
  if (r2 >= 0) snprintf(row->runner, sizeof row->runner, "%.95s", tag(ks, &ks->c[top[r2]]));
  free(x->ids), free(skip), free(rank);
}

/* Whether the worker checks and times k (the memory-bound kernels: tuner/check/harness.c's checks and the worker's timing
 * buffers; the GEMMs and bcopy: tuner/check/gemm_harness.c's). The others are compiled into the cache with their default
 * variant, so that train start finds them, and left untimed (make test-gpu checks them: test_kernels, test_train_gpu). */
const char *fb_tune_untimed(const fb_kernel_spec *k) {
  if (k->op == FB_OP_DENSE) return "one fixed variant";
  if (k->op == FB_OP_TCOPY) return "the worker has no timing buffers for tcopy";
  if (k->op == FB_OP_COMBINE_BWD) return "the worker has no check for the combine backward";
  if ((k->op == FB_OP_AMAX || k->op == FB_OP_QUANT) && k->in_f32) return "the worker has no check on FP32 input";
  return NULL;
}

int fb_tune_measurable(const fb_kernel_spec *k) { return fb_tune_untimed(k) == NULL; }

/* ---- the plan's kernels and their variants ----------------------------------------------------------------- */
static fb_status collect(const fb_tune_opts *o, const fb_recipe *r, const fb_plan *p, kspec **out, int *nout) {
  kspec *ks = calloc((size_t)(p->nkernels ? p->nkernels : 1), sizeof *ks);
  int n = 0, notemp = 0;
  if (!ks) return FB_ERR(FB_ENOMEM, "%d kernel specs", p->nkernels);
  for (int k = 0; k < p->nkernels; ++k) {
    const fb_kernel_spec *s = &p->kernels[k];
    if (o->only && !strstr(s->name, o->only)) continue;
    const char *why;
    if (!fb_gen_template(s, &why)) {
      ++notemp;
      continue;
    }
    const fb_tune_family *fam = NULL;
    for (int f = 0; f < r->nfamilies; ++f)
      if (!strcmp(r->families[f].family, s->family)) fam = &r->families[f];
    fb_variant *vs = NULL;
    int nv = 0;
    kspec *x = &ks[n];
    if ((!fam && !fb_gen_fixed(s)) || fb_gen_variants(s, fam, &vs, &nv, &x->pruned, x->pruned_why, sizeof x->pruned_why) != FB_OK) {
      fprintf(stderr, "fourbit tune: %s: %s\n", s->name, fam ? fb_errmsg() : "no tune family");
      continue;
    }
    x->untimed = fb_tune_untimed(s);
    if (x->untimed && nv > 1) nv = 1; /* the default only: train start takes it from the cache */
    if (fb_tune_is_gemm(s) && nv) { /* the variants whose tiles divide the model's widths (N and K do not depend on the
                                       tokens; the rows per expert are whole 128-row tiles) */
      fb_tune_shape_t sh;
      char why[160] = "", first[200] = "";
      int kept = 0, dropped = 0;
      if (fb_tune_shape(s, &r->model, r->ep, r->tokens, &sh) == FB_OK) {
        for (int v = 0; v < nv; ++v) {
          if (fb_tune_gemm_fits(s, &vs[v], &sh, why, sizeof why)) vs[kept++] = vs[v];
          else if (!dropped++) snprintf(first, sizeof first, "%s", why);
        }
        nv = kept;
      }
      if (dropped) {
        char tmp[600];
        int l = snprintf(tmp, sizeof tmp, "%s%s%d do not fit the model's GEMM widths, e.g. %s", x->pruned_why, x->pruned ? "; " : "", dropped, first);
        (void)l;
        snprintf(x->pruned_why, sizeof x->pruned_why, "%.255s", tmp);
        x->pruned += dropped;
      }
      if (!nv) printf("%s: no GEMM variant fits the model's widths (%s): not tuned\n", s->name, first);
    }
    if (!nv) { free(vs); continue; }
    x->spec = *s;
    x->c = calloc((size_t)nv, sizeof *x->c);
    x->n = nv;
    for (int v = 0; v < nv; ++v) {
      x->c[v].var = vs[v];
      fb_status st = fb_gen_source(s, &vs[v], r->path, p->sha256, &x->c[v].src);
      if (st != FB_OK) { /* the caller frees what was collected, this spec included */
        free(vs);
        *out = ks, *nout = n + 1;
        return st;
      }
    }
    free(vs);
    ++n;
  }
  if (notemp) printf("%d kernels of the plan have no template yet (fourbit gen lists them): not tuned\n", notemp);
  *out = ks, *nout = n;
  return FB_OK;
}

static void free_specs(kspec *ks, int n) {
  for (int i = 0; i < n; ++i) {
    for (int v = 0; v < ks[i].n; ++v) free(ks[i].c[v].src), free(ks[i].c[v].cubin);
    free(ks[i].c);
  }
  free(ks);
}

/* s with what the caller was doing before fb_errmsg() ("--cache: ..."); the message keeps its own file:line */
static fb_status context(fb_status s, const char *what) {
  char m[1024];
  snprintf(m, sizeof m, "%s", fb_errmsg());
  return fb_seterr(s, NULL, 0, "%s: %s", what, m);
}

fb_status fb_tune_run(const fb_tune_opts *o) {
  fb_recipe *r = NULL;
  FB_TRY(fb_recipe_load(o->recipe, &r));
  long long shapes[16];
  int ns = o->nshapes;
  memcpy(shapes, o->shapes, sizeof shapes);
  if (!ns) shapes[ns++] = r->tokens;
  long long buckets[16];
  int nb = 0;
  for (int i = 0; i < ns; ++i) {
    long long b = fb_cache_bucket(shapes[i]);
    int dup = 0;
    for (int j = 0; j < nb; ++j) dup |= buckets[j] == b;
    if (!dup) shapes[nb] = shapes[i], buckets[nb++] = b;
  }
  char dirbuf[512];
  const char *dir = o->cache_dir ? o->cache_dir : fb_cache_default_dir(dirbuf, sizeof dirbuf);
  fb_status rc = FB_OK;
  fb_plan *p = NULL;
  kspec *ks = NULL;
  int nks = 0;
  fb_cache *cache = NULL;
  worker w;
  memset(&w, 0, sizeof w);
  w.ch.pid = -1, w.o = o;
  const char *arch = "sm_90a";
  if (!o->dry_run) { /* the device first: it decides the arch, and without one there is nothing to measure */
    if (worker_start(&w)) {
      rc = fb_seterr(FB_ECUDA, NULL, 0, "no GPU to measure on: %s", w.dev.msg); /* the worker's message has its file:line */
      fb_recipe_free(r);
      return rc;
    }
    arch = arch_of(&w.dev.fp);
    if (!arch) {
      rc = fb_seterr(FB_EINVAL, NULL, 0, "%s (sm_%d%d): fourbit generates for %s only", w.dev.fp.gpu, w.dev.fp.cc_major,
                     w.dev.fp.cc_minor, FB_ARCHS);
      goto done;
    }
    if (o->arch && strcmp(o->arch, arch)) {
      rc = fb_seterr(FB_EINVAL, NULL, 0, "--arch %s: this GPU is %s", o->arch, arch);
      goto done;
    }
  } else if (o->arch) {
    arch = o->arch;
  }
  FB_TRY_GOTO(fb_plan_resolve(r, arch, &p), done);
  FB_TRY_GOTO(collect(o, r, p, &ks, &nks), done);
  struct stat st;
  if ((!o->dry_run || stat(dir, &st) == 0) && (rc = fb_cache_open(dir, &cache)) != FB_OK) {
    rc = context(rc, "--cache");
    goto done;
  }
  int total = 0;
  for (int i = 0; i < nks; ++i) total += ks[i].n;
  if (o->dry_run) {
    printf("fourbit tune %s --dry-run: arch %s, plan sha256 %.16s..., cache %s%s\n", r->path, arch, p->sha256, dir, cache ? "" : " (none yet)");
    printf("GEMM families tried on %s: %s (each GEMM's variants of every family are checked and timed together; %s)\n", arch,
           fb_arch_families(arch), strcmp(arch, "sm_90a") ? "this arch has not run here: compiled only" : "both run on an H200");
    printf("shape buckets (tokens per rank):");
    for (int b = 0; b < nb; ++b) printf(" %lld", buckets[b]);
    printf("\n%-52s %-16s %8s %7s %7s  %s\n", "kernel spec", "template", "variants", "cached", "compile", "shape at the first bucket (rows x cols)");
    int cached_all = 0;
    for (int i = 0; i < nks; ++i) {
      int cached = 0;
      for (int v = 0; v < ks[i].n && cache; ++v) {
        uint8_t key[32];
        void *cub;
        size_t sz;
        fb_cache_kernel_key(ks[i].c[v].src, arch, key);
        if (fb_cache_get_kernel(cache, key, &cub, &sz) == FB_OK) ++cached, free(cub);
      }
      cached_all += cached;
      fb_tune_shape_t sh;
      char shp[64] = "-";
      if (fb_tune_shape(&ks[i].spec, &r->model, r->ep, shapes[0], &sh) == FB_OK) snprintf(shp, sizeof shp, "%lld x %lld", sh.rows, sh.cols);
      printf("%-52s %-16s %8d %7d %7d  %s\n", ks[i].spec.name, ks[i].c[0].var.tmpl, ks[i].n, cached, ks[i].n - cached, shp);
      const fb_tmpl *t0 = fb_tmpl_by_file(ks[i].c[0].var.tmpl);
      if (t0 && t0->family) { /* a GEMM: its variants per family */
        printf("    families:");
        for (int r0 = 0; r0 < ks[i].n;) {
          int r1 = r0;
          while (r1 < ks[i].n && !strcmp(ks[i].c[r1].var.tmpl, ks[i].c[r0].var.tmpl)) ++r1;
          const fb_tmpl *t = fb_tmpl_by_file(ks[i].c[r0].var.tmpl);
          printf(" %s %d (%s)%s", t && t->family ? t->family : "?", r1 - r0, ks[i].c[r0].var.tmpl, r1 < ks[i].n ? "," : "\n");
          r0 = r1;
        }
      }
      for (int v = 0; v < ks[i].n; ++v) printf("    %s%s\n", ks[i].c[v].var.name, v == 0 ? "   (default)" : "");
      if (ks[i].pruned) printf("    (%d variants pruned: %s)\n", ks[i].pruned, ks[i].pruned_why);
    }
    char bud[64];
    if (o->time_s > 0) snprintf(bud, sizeof bud, "about %.0f s in all", o->time_s);
    else if (o->budget > 0) snprintf(bud, sizeof bud, "%ld effort units each", o->budget);
    else snprintf(bud, sizeof bud, "3 effort units per variant");
    printf("would compile %d of %d variants (%d in the cache) with %d jobs, then check and time them at %d bucket%s: %d searches, "
           "%s (strategy %s), then the best three and the default re-measured at effort 16\n", total - cached_all, total, cached_all,
           o->jobs, nb, nb > 1 ? "s" : "", nks * nb, bud, fb_strategy_name((fb_strategy)o->strategy));
    goto done;
  }
  {
    char fpt[512], id[17];
    fb_fingerprint_text(&w.dev.fp, fpt, sizeof fpt);
    fb_fingerprint_id(&w.dev.fp, id);
    printf("fourbit tune %s: %s (fingerprint %s), L2 %lld MB, arch %s; cache %s\n", r->path, fpt, id, w.dev.l2_bytes >> 20, arch, dir);
    printf("%d kernel specs, %d variants; buckets:", nks, total);
    for (int b = 0; b < nb; ++b) printf(" %lld", buckets[b]);
    printf("; strategy %s, %s\n", fb_strategy_name((fb_strategy)o->strategy), o->time_s > 0 ? "time-boxed" : "budget per spec and bucket");
    fflush(stdout);
  }
  /* compile */
  long long t0 = fb_tune_now_ms();
  cpool cp = {.ks = ks, .nks = nks, .total = total, .o = o, .cache = cache, .arch = arch};
  pthread_mutex_init(&cp.mu, NULL);
  int nt = o->jobs > 0 ? o->jobs : 1;
  if (nt > 256) nt = 256;
  pthread_t th[256];
  for (int t = 0; t < nt; ++t) pthread_create(&th[t], NULL, compile_thread, &cp);
  for (int t = 0; t < nt; ++t) pthread_join(th[t], NULL);
  int ncached = 0, ncomp = 0, nfail = 0;
  for (int i = 0; i < nks; ++i)
    for (int v = 0; v < ks[i].n; ++v) {
      cand *c = &ks[i].c[v];
      ncached += c->cached, ncomp += c->compiled && !c->cached;
      if (!c->compiled) {
        ++nfail;
        fprintf(stderr, "  %s: %s: %s\n", c->var.name, fb_trial_status_name(c->fail), c->err);
      }
    }
  if (o->tty) fprintf(stderr, "\r%60s\r", "");
  printf("compiled %d, %d from the cache, %d failed, in %.1f s on %d jobs\n", ncomp, ncached, nfail, (double)(fb_tune_now_ms() - t0) / 1000, nt);
  fflush(stdout);
  /* measure */
  summary_row *rows = calloc((size_t)(nks * nb + 1), sizeof *rows);
  run_ctx x = {.o = o, .w = &w, .cache = cache, .r = r, .plan = p, .nspec_runs = nks * nb, .t_start = fb_tune_now_ms()};
  if (o->time_s > 0) x.sweep_deadline = x.t_start + (long long)(o->time_s * 1000);
  int nrows = 0, nuntimed = 0;
  for (int i = 0; i < nks; ++i)
    for (int b = 0; b < nb; ++b, ++x.spec_i) {
      x.ks = &ks[i], x.tokens = shapes[b], x.bucket = buckets[b], x.id_base = i * 65536;
      if (ks[i].untimed) { /* compiled into the cache above; no search. Its record names the default's cubin (runs 0:
                              untimed), so train start finds it by name whatever plan or origin the caller's source has */
        if (b == 0) ++nuntimed;
        cand *dc = &ks[i].c[0];
        if (!dc->compiled || !cache) continue;
        fb_winner w;
        memset(&w, 0, sizeof w);
        w.fp = x.w->dev.fp;
        snprintf(w.spec, sizeof w.spec, "%s", ks[i].spec.name);
        w.bucket = buckets[b], w.shape = shapes[b];
        snprintf(w.arch, sizeof w.arch, "%s", p->arch);
        snprintf(w.variant, sizeof w.variant, "%s", dc->var.name);
        snprintf(w.default_variant, sizeof w.default_variant, "%s", dc->var.name);
        memcpy(w.kernel, dc->key, 32);
        w.candidates = 1;
        snprintf(w.recipe, sizeof w.recipe, "%s", r->name);
        snprintf(w.recipe_sha, sizeof w.recipe_sha, "%s", p->sha256);
        fb_winner_stamp(&w);
        if (fb_cache_put_winner(cache, &w) != FB_OK) fprintf(stderr, "fourbit tune: %s\n", fb_errmsg());
        continue;
      }
      if (fb_tune_shape(&ks[i].spec, &r->model, r->ep, shapes[b], &x.shape) != FB_OK) {
        fprintf(stderr, "fourbit tune: %s\n", fb_errmsg());
        continue;
      }
      if (x.sweep_deadline) { /* an equal share of what is left */
        long long left = x.sweep_deadline - fb_tune_now_ms();
        x.deadline = fb_tune_now_ms() + (left > 0 ? left / (x.nspec_runs - x.spec_i) : 0);
      }
      tune_spec_bucket(&x, &rows[nrows++]);
      fflush(stdout);
    }
  /* summary */
  printf("\n%-48s %8s %11s %11s %8s  %-22s %-30s %5s %6s\n", "kernel spec", "bucket", "default ms", "tuned ms", "speed-up", "winner",
         "runner-up (ms)", "cand", "failed");
  int nowin = 0;
  for (int i = 0; i < nrows; ++i) {
    summary_row *s = &rows[i];
    if (s->note && !s->winner[0]) {
      printf("%-48s %8lld %11s %11s %8s  %-22s %-30s %5d %6d\n", s->spec, s->bucket, "-", "-", "-", s->note, "", s->cands, s->failed);
      ++nowin;
      continue;
    }
    char def[32] = "-", sp[16] = "-", ru[128] = "-";
    if (s->default_ms > 0) snprintf(def, sizeof def, "%.4f", s->default_ms), snprintf(sp, sizeof sp, "%.2fx", s->default_ms / s->tuned_ms);
    if (s->runner[0]) snprintf(ru, sizeof ru, "%s (%.4f)", s->runner, s->runner_ms);
    printf("%-48s %8lld %11s %11.4f %8s  %-22s %-30s %5d %6d\n", s->spec, s->bucket, def, s->tuned_ms, sp, s->winner, ru, s->cands, s->failed);
    if (s->note) printf("%-48s %8s  %s\n", "", "", s->note);
  }
  /* what the GPU layer will make of the fused quantizers' times (runtime/experts_gpu.c grad_both_kernel): a both-ways
     quantizer ("_both") against its row and column quantizers of the same bucket, found by the naming authority */
  for (int i = 0; i < nrows; ++i) {
    fb_kernel_spec kb, kr, kc;
    char arch[16], nr[128], nc[128];
    if (!rows[i].winner[0] || fb_kernel_parse(rows[i].spec, &kb, arch, sizeof arch, NULL) != FB_OK || kb.op != FB_OP_QUANT ||
        kb.col != 2)
      continue;
    kr = kb, kc = kb, kr.col = 0, kc.col = 1;
    if (fb_kernel_name(&kr, arch, nr, sizeof nr) != FB_OK || fb_kernel_name(&kc, arch, nc, sizeof nc) != FB_OK) continue;
    const summary_row *a = NULL, *c2 = NULL;
    for (int j = 0; j < nrows; ++j)
      if (rows[j].winner[0] && rows[j].bucket == rows[i].bucket) {
        if (!strcmp(rows[j].spec, nr)) a = &rows[j];
        if (!strcmp(rows[j].spec, nc)) c2 = &rows[j];
      }
    if (a && c2)
      printf("%s at %lld tokens: %.4f ms against %s + %s %.4f + %.4f ms: the GPU layer quantizes its gradients %s\n",
             rows[i].spec, rows[i].bucket, rows[i].tuned_ms, nr, nc, a->tuned_ms, c2->tuned_ms,
             rows[i].tuned_ms <= a->tuned_ms + c2->tuned_ms ? "in one pass (this kernel)" : "in two passes (those two)");
  }
  int untimed_bad = 0;
  for (int i = 0; i < nks; ++i)
    if (ks[i].untimed && (untimed_bad += !ks[i].c[0].compiled, 1))
      printf("%-48s %8s %11s %11s %8s  %-22s (untimed: %s; its default is in the cache)\n", ks[i].spec.name, "-", "-", "-", "-",
             ks[i].c[0].compiled ? ks[i].c[0].var.name + strlen(ks[i].spec.name) + 1 : "NOT COMPILED", ks[i].untimed);
  printf("\n%d winners stored in %s (%d without one); the worker was replaced %d times; %.1f s measuring\n", nrows - nowin, dir,
         nowin, w.deaths, (double)(fb_tune_now_ms() - x.t_start) / 1000);
  if (nuntimed) printf("%d kernels untimed (listed above): their default variants are in the cache\n", nuntimed);
  free(rows);
  if (nowin) rc = FB_ERR(FB_ENOTFOUND, "%d of %d kernel spec and bucket searches found no winner", nowin, nrows);
  else if (untimed_bad) rc = FB_ERR(FB_ENVRTC, "%d untimed kernels' default variants did not compile", untimed_bad);
done:
  if (w.ch.pid > 0) {
    fb_tune_send(w.ch.in, FB_MSG_QUIT, NULL, 0, NULL, 0, NULL, 0);
    reap(&w.ch, 0, NULL);
  }
  free(w.buf);
  free_specs(ks, nks);
  fb_cache_close(cache);
  fb_plan_free(p);
  fb_recipe_free(r);
  return rc;
}

/* ---- train start: the winner or the default, from the cache, no compiler ----------------------------------- */
fb_status fb_tune_lookup(fb_cache *c, const fb_fingerprint *fp, const fb_recipe *r, const fb_plan *p, const fb_kernel_spec *k,
                         long long tokens, fb_tune_choice *ch, void **cubin, size_t *size, char *note, size_t notelen) {
  memset(ch, 0, sizeof *ch);
  *cubin = NULL, *size = 0;
  ch->spec = *k;
  char wnote[1024];
  fb_status s = fb_cache_get_winner(c, fp, k->name, tokens, &ch->winner, wnote, sizeof wnote);
  if (s == FB_OK) {
    s = fb_cache_get_kernel(c, ch->winner.kernel, cubin, size);
    if (s == FB_OK) {
      ch->from_winner = ch->winner.runs > 0; /* runs 0: an untimed kernel's default, stored by tune */
      snprintf(ch->var.name, sizeof ch->var.name, "%s", ch->winner.variant);
      snprintf(note, notelen, "%s %s: %s", ch->from_winner ? "winner" : "untimed default", ch->winner.variant, wnote);
      return FB_OK;
    }
    snprintf(wnote, sizeof wnote, "the winner's cubin is %s", s == FB_ENOTFOUND ? "missing" : "bad");
  }
  /* the default variant: the first legal one of the recipe's tune values */
  const fb_tune_family *fam = NULL;
  for (int f = 0; f < r->nfamilies; ++f)
    if (!strcmp(r->families[f].family, k->family)) fam = &r->families[f];
  fb_variant *vs = NULL;
  int nv = 0;
  if ((!fam && !fb_gen_fixed(k)) || fb_gen_variants(k, fam, &vs, &nv, NULL, NULL, 0) != FB_OK || !nv) {
    free(vs);
    return FB_ERR(FB_ENOTFOUND, "%s: no winner (%s) and no default variant", k->name, wnote);
  }
  ch->var = vs[0];
  free(vs);
  char *src = NULL;
  FB_TRY(fb_gen_source(k, &ch->var, r->path, p->sha256, &src));
  uint8_t key[32];
  fb_cache_kernel_key(src, p->arch, key);
  free(src);
  s = fb_cache_get_kernel(c, key, cubin, size);
  if (s != FB_OK)
    return FB_ERR(FB_ENOTFOUND, "%s: no winner (%s), and the default %s is not in the cache (fourbit gen --cache or tune puts it there)",
                  k->name, wnote, ch->var.name);
  snprintf(note, notelen, "default %s (%s)", ch->var.name, wnote);
  return FB_OK;
}

typedef struct {
  char **src, **names;
  const char *arch;
  int n, next;
  double sum_ms;
  int fails;
  pthread_mutex_t mu;
} wpool;

static void *warm_compile(void *arg) {
  wpool *p = arg;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    int i = p->next++;
    pthread_mutex_unlock(&p->mu);
    if (i >= p->n) return NULL;
    fb_cubin cb;
    fb_status s = fb_nvrtc_compile(p->names[i], p->src[i], p->arch, &cb);
    pthread_mutex_lock(&p->mu);
    if (s == FB_OK) p->sum_ms += cb.ms;
    else ++p->fails;
    pthread_mutex_unlock(&p->mu);
    fb_cubin_free(&cb);
  }
}

fb_status fb_tune_warm_start_bench(const fb_tune_opts *o) {
  fb_status rc = fb_cuda_use_device(0);
  if (rc != FB_OK) return context(rc, "--warm-start-bench: no GPU");
  fb_fingerprint fp;
  FB_TRY(fb_tune_fingerprint(&fp));
  fb_recipe *r = NULL;
  FB_TRY(fb_recipe_load(o->recipe, &r));
  long long tokens = o->nshapes ? o->shapes[0] : r->tokens;
  char dirbuf[512];
  const char *dir = o->cache_dir ? o->cache_dir : fb_cache_default_dir(dirbuf, sizeof dirbuf);
  fb_plan *p = NULL;
  if ((rc = fb_plan_resolve(r, arch_of(&fp), &p)) != FB_OK) {
    fb_recipe_free(r);
    return rc;
  }
  /* warm start: open the cache, then per kernel: lookup, cuModuleLoadData, cuModuleGetFunction */
  long long t0 = fb_tune_now_ms();
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  fb_cache *c = NULL;
  if ((rc = fb_cache_open(dir, &c)) != FB_OK) {
    rc = context(rc, "--cache");
    fb_plan_free(p), fb_recipe_free(r);
    return rc;
  }
  int n = 0, winners = 0, defaults = 0, missing = 0;
  fb_kernel *kern = calloc((size_t)p->nkernels + 1, sizeof *kern);
  char **src = calloc((size_t)p->nkernels + 1, sizeof *src), **names = calloc((size_t)p->nkernels + 1, sizeof *names);
  double lookup_ms = 0, load_ms = 0;
  for (int k = 0; k < p->nkernels; ++k) {
    const fb_kernel_spec *s = &p->kernels[k];
    const char *why;
    if (o->only && !strstr(s->name, o->only)) continue;
    if (!fb_gen_template(s, &why)) continue;
    fb_tune_choice ch;
    void *cub;
    size_t sz;
    char note[1200];
    struct timespec l0, l1, l2;
    clock_gettime(CLOCK_MONOTONIC, &l0);
    fb_status st = fb_tune_lookup(c, &fp, r, p, s, tokens, &ch, &cub, &sz, note, sizeof note);
    clock_gettime(CLOCK_MONOTONIC, &l1);
    if (st != FB_OK) {
      printf("  %-48s MISSING: %s\n", s->name, fb_errmsg());
      ++missing;
      continue;
    }
    if (fb_kernel_load(cub, ch.var.name, &kern[n]) != FB_OK) {
      printf("  %-48s load failed: %s\n", s->name, fb_errmsg());
      free(cub);
      ++missing;
      continue;
    }
    clock_gettime(CLOCK_MONOTONIC, &l2);
    lookup_ms += (double)(l1.tv_sec - l0.tv_sec) * 1e3 + (double)(l1.tv_nsec - l0.tv_nsec) / 1e6;
    load_ms += (double)(l2.tv_sec - l1.tv_sec) * 1e3 + (double)(l2.tv_nsec - l1.tv_nsec) / 1e6;
    free(cub);
    winners += ch.from_winner, defaults += !ch.from_winner;
    printf("  %-48s %s\n", s->name, note);
    /* the same kernel's source, for the NVRTC comparison */
    const fb_tune_family *fam = NULL;
    for (int f = 0; f < r->nfamilies; ++f)
      if (!strcmp(r->families[f].family, s->family)) fam = &r->families[f];
    fb_variant *vs = NULL;
    int nv = 0;
    if (fam && fb_gen_variants(s, fam, &vs, &nv, NULL, NULL, 0) == FB_OK)
      for (int v = 0; v < nv; ++v)
        if (!strcmp(vs[v].name, ch.var.name) && fb_gen_source(s, &vs[v], r->path, p->sha256, &src[n]) == FB_OK) names[n] = strdup(vs[v].name);
    free(vs);
    ++n;
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  double warm = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
  (void)t0;
  /* cold: NVRTC compiles of the same kernels, in parallel on --jobs threads (NVRTC is thread-safe) */
  int m = 0;
  for (int i = 0; i < n; ++i)
    if (src[i]) src[m] = src[i], names[m] = names[i], ++m;
  wpool wp = {.src = src, .names = names, .arch = p->arch, .n = m};
  pthread_mutex_init(&wp.mu, NULL);
  int nt = o->jobs > 0 ? (o->jobs < 256 ? o->jobs : 256) : 1;
  pthread_t th[256];
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int t = 0; t < nt; ++t) pthread_create(&th[t], NULL, warm_compile, &wp);
  for (int t = 0; t < nt; ++t) pthread_join(th[t], NULL);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double cold = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
  printf("\nwarm start of %s at %lld tokens: %d kernels (%d tuned winners, %d defaults, %d missing) looked up and loaded from %s in "
         "%.1f ms (cache open + lookups %.1f ms, cuModuleLoadData %.1f ms)%s\n",
         r->path, tokens, n, winners, defaults, missing, dir, warm, warm - load_ms, load_ms, warm <= 100 ? "" : " -- over the 100 ms target");
  printf("NVRTC compiles of the same %d kernels: %.0f ms wall on %d threads (%.0f ms of compile time in all)%s; warm start is %.0fx faster\n", m,
         cold, nt, wp.sum_ms, wp.fails ? ", SOME FAILED" : "", warm > 0 ? cold / warm : 0.0);
  (void)lookup_ms;
  for (int i = 0; i < n; ++i) fb_kernel_unload(&kern[i]);
  for (int i = 0; i < m; ++i) free(src[i]), free(names[i]);
  free(kern), free(src), free(names);
  if (missing) rc = FB_ERR(FB_ENOTFOUND, "%d of %d kernels are not in the cache %s", missing, n + missing, dir);
  fb_cache_close(c);
  fb_plan_free(p);
  fb_recipe_free(r);
  return rc;
}
