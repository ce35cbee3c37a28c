/* train.c — the train loop's step and state: AdamW (fb_adamw_ref) on the FP32 masters, global-norm gradient
 * clipping, linear warm-up then cosine decay, checkpoints (versioned, sha256-checked, written atomically) from
 * which a resumed run reproduces the uninterrupted one bit for bit.
 *
 * Entry points (include/fourbit_train.h): fb_train_opts_default, fb_train_create, fb_train_free, fb_train_step,
 * fb_train_step_index, fb_train_floor, fb_train_plan, fb_train_param_count, fb_train_save, fb_train_load,
 * fb_train_load_buffer, fb_train_save_check, fb_train_nparams, fb_train_param, fb_train_loss_grad.
 *
 * A step that meets a non-finite loss or gradient norm is skipped (no update; docs/numerics.md: never silently used)
 * and reported in fb_step_stats.skipped; the step counter still advances, so the data and the random streams
 * stay where the uninterrupted run has them.
 *
 * Expert parallelism (o->comm of N ranks): every function here that touches the state is collective. The step's
 * loss, aux and gradient norm are global (model.c gathers them; the norm adds every rank's expert squares), so all
 * ranks clip, skip and step alike and the replicated parameters stay identical. Checkpoints hold every expert in
 * one file of the one-rank format: rank 0 gathers the experts and writes, every rank reads and keeps its own. */
#include "comm.h"
#include "fb_error.h"
#include "model_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void fb_train_opts_default(fb_train_opts *o, int steps, int tokens, uint32_t seed) {
  memset(o, 0, sizeof *o);
  o->steps = steps, o->tokens = tokens, o->seed = seed, o->seq_len = 32;
  o->lr = 3e-3f, o->min_lr = 3e-4f, o->b1 = 0.9f, o->b2 = 0.95f, o->eps = 1e-8f, o->wd = 0.1f, o->clip = 1.0f;
  o->aux_coef = 0.01f;
  o->warmup = steps / 10 < 100 ? steps / 10 : 100;
  o->markov_succ = 4;
}

void fb_train_free(fb_trainer *t) {
  if (!t) return;
  fbr_gpu_free(t);
  fbr_model_free(t);
  if (t->own_comm) fb_comm_free(t->comm);
  fb_markov_free(t->data);
  fb_plan_free(t->plan);
  free(t);
}

fb_status fb_train_create(const fb_recipe *r, const fb_train_opts *o, const fb_expert_ops *ops, fb_trainer **out) {
  *out = NULL;
  const fb_model *M = &r->model;
  if (o->steps < 1) return FB_USERERR(FB_EINVAL, "steps: %d, need at least 1", o->steps);
  if (o->seq_len < 1 || o->tokens < o->seq_len || o->tokens % o->seq_len)
    return FB_USERERR(FB_EINVAL, "batch: %d tokens are not a positive multiple of the sequence length %d", o->tokens,
                      o->seq_len);
  if (M->d_model % 32 || M->d_ff % 32 || M->top_k > M->experts || M->top_k < 1 || M->vocab < 2)
    return FB_USERERR(FB_EINVAL, "model: d_model %d and d_ff %d must be multiples of 32, 1 <= top_k %d <= experts %d",
                      M->d_model, M->d_ff, M->top_k, M->experts);
  if (o->warmup < 0 || o->warmup > o->steps)
    return FB_USERERR(FB_EINVAL, "warmup: %d steps, need 0..%d", o->warmup, o->steps);
  if (!(o->lr > 0) || !(o->min_lr >= 0) || !(o->clip > 0) || !(o->b1 >= 0 && o->b1 < 1) || !(o->b2 >= 0 && o->b2 < 1))
    return FB_USERERR(FB_EINVAL, "optimizer: lr %g, min_lr %g, clip %g, betas (%g, %g) out of range", o->lr, o->min_lr,
                      o->clip, o->b1, o->b2);
  double bytes = 4.0 * 4.0 * ((double)M->layers * (double)M->experts * 3.0 * M->d_model * M->d_ff +
                              2.0 * (double)M->vocab * M->d_model);
  if (bytes > 64.0 * (1u << 30))
    return FB_USERERR(FB_EINVAL, "model: %d layers x %d experts, d_model %d, d_ff %d, vocab %d needs %.0f GiB of FP32 "
                      "masters and AdamW state: too large for the CPU path (shrink it: --model-override small, or "
                      "--layers/--d-model/--d-ff/--experts/--vocab)", M->layers, M->experts, M->d_model, M->d_ff,
                      M->vocab, bytes / (1u << 30));
  fb_trainer *t = calloc(1, sizeof *t);
  if (!t) return FB_ERR(FB_ENOMEM, "trainer");
  t->M = *M, t->o = *o, t->ops = ops ? ops : fb_expert_ops_cpu();
  fb_status rc = FB_OK;
  t->comm = o->comm;
  if (!t->comm) {
    FB_TRY_GOTO(fb_comm_single(&t->comm), fail);
    t->own_comm = 1;
  }
  t->o.comm = t->comm;
  t->rank = fb_comm_rank(t->comm), t->nranks = fb_comm_size(t->comm);
  t->Tg = o->tokens, t->nseq_g = o->tokens / o->seq_len;
  if (M->experts % t->nranks) {
    rc = FB_USERERR(FB_EINVAL, "parallel.ep (--ranks/--gpus): %d ranks do not divide the model's %d experts", t->nranks,
                    M->experts);
    goto fail;
  }
  if (t->nseq_g % t->nranks) {
    rc = FB_USERERR(FB_EINVAL, "batch: %d sequences (%d tokens / %d) do not split over %d ranks", t->nseq_g, o->tokens,
                    o->seq_len, t->nranks);
    goto fail;
  }
  t->nE = M->experts / t->nranks, t->e0 = t->rank * t->nE;
  t->nseq = t->nseq_g / t->nranks, t->T = t->nseq * o->seq_len;
  snprintf(t->recipe_name, sizeof t->recipe_name, "%s", r->name);
  rc = fb_plan_resolve(r, o->arch ? o->arch : "sm_90a", &t->plan);
  if (rc != FB_OK) goto fail;
  if (t->plan->nlayers != M->layers) {
    rc = FB_ERR(FB_EINVAL, "plan has %d layers, the model %d", t->plan->nlayers, M->layers);
    goto fail;
  }
  snprintf(t->plan_sha, sizeof t->plan_sha, "%s", t->plan->sha256);
  FB_TRY_GOTO(fb_markov_create(M->vocab, o->markov_succ, o->seed, &t->data), fail);
  t->floor = fb_markov_entropy_rate(t->data);
  FB_TRY_GOTO(fbr_model_init(t), fail);
  *out = t;
  return FB_OK;
fail:
  fb_train_free(t);
  return rc;
}

int fb_train_step_index(const fb_trainer *t) { return t->step; }
double fb_train_floor(const fb_trainer *t) { return t->floor; }
const fb_plan *fb_train_plan(const fb_trainer *t) { return t->plan; }
int fb_train_nparams(const fb_trainer *t) { return t->np; }
size_t fb_train_param_count(const fb_trainer *t) {
  size_t n = 0;
  for (int i = 0; i < t->np; ++i) n += t->p[i].rows * t->p[i].cols * (t->p[i].expert ? (size_t)t->nranks : 1);
  return n;
}
fb_param_view fb_train_param(const fb_trainer *t, int i) {
  if (t->gpu) fbr_gpu_sync_host((fb_trainer *)t); /* the host copies are refreshed when read (a failure leaves them stale) */
  fb_param_view v = {t->p[i].name, t->p[i].w, t->p[i].g, t->p[i].rows * t->p[i].cols};
  return v;
}

fb_status fb_train_loss_grad(fb_trainer *t, uint32_t step, int grad, double *loss) {
  double ce, aux;
  FB_TRY(t->gpu ? fbr_gpu_run(t, step, grad, &ce, &aux) : fbr_model_run(t, step, grad, &ce, &aux));
  *loss = ce + (double)t->o.aux_coef * aux;
  return FB_OK;
}

static double lr_at(const fb_train_opts *o, int s) {
  if (s < o->warmup) return (double)o->lr * (double)(s + 1) / (double)o->warmup;
  double prog = o->steps > o->warmup ? (double)(s - o->warmup) / (double)(o->steps - o->warmup) : 1.0;
  if (prog > 1) prog = 1;
  return (double)o->min_lr + 0.5 * ((double)o->lr - (double)o->min_lr) * (1.0 + cos(3.141592653589793 * prog));
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

fb_status fb_train_step(fb_trainer *t, fb_step_stats *st) {
  double t0 = now_ms();
  memset(st, 0, sizeof *st);
  int s = t->step;
  double ce, aux;
  memset(&t->traffic, 0, sizeof t->traffic);
  FB_TRY(t->gpu ? fbr_gpu_run(t, (uint32_t)s, 1, &ce, &aux) : fbr_model_run(t, (uint32_t)s, 1, &ce, &aux));
  double n2 = 0;
  if (t->gpu) { /* the device's sums, in the order below (one rank: every tensor in n2; N: experts apart) */
    double ex2 = 0;
    FB_TRY(fbr_gpu_sumsq(t, &n2, &ex2));
    if (t->nranks > 1) {
      double *all = malloc((size_t)t->nranks * sizeof *all);
      if (!all) return FB_ERR(FB_ENOMEM, "gradient norm");
      fb_status rc = fb_comm_allgather(t->comm, &ex2, sizeof ex2, all);
      for (int q = 0; rc == FB_OK && q < t->nranks; ++q) n2 += all[q];
      free(all);
      if (rc != FB_OK) return rc;
    }
  } else if (t->nranks == 1) {
    for (int i = 0; i < t->np; ++i) {
      const fbr_param *p = &t->p[i];
      for (size_t k = 0; k < p->rows * p->cols; ++k) n2 += (double)p->g[k] * (double)p->g[k];
    }
  } else { /* the replicated tensors (identical on every rank), then every rank's experts in rank order */
    double ex2 = 0, *all = malloc((size_t)t->nranks * sizeof *all);
    if (!all) return FB_ERR(FB_ENOMEM, "gradient norm");
    for (int i = 0; i < t->np; ++i) {
      const fbr_param *p = &t->p[i];
      double *acc = p->expert ? &ex2 : &n2;
      for (size_t k = 0; k < p->rows * p->cols; ++k) *acc += (double)p->g[k] * (double)p->g[k];
    }
    fb_status rc = fb_comm_allgather(t->comm, &ex2, sizeof ex2, all);
    for (int q = 0; rc == FB_OK && q < t->nranks; ++q) n2 += all[q];
    free(all);
    if (rc != FB_OK) return rc;
  }
  st->traffic = t->traffic;
  if (t->nranks > 1) {
    enum { NT = sizeof(fb_ep_traffic) / sizeof(double) };
    double *all = malloc((size_t)t->nranks * NT * sizeof *all), *sum = (double *)&st->traffic;
    if (!all) return FB_ERR(FB_ENOMEM, "traffic");
    fb_status rc = fb_comm_allgather(t->comm, &t->traffic, sizeof t->traffic, all);
    for (int j = 0; j < NT; ++j) {
      sum[j] = 0;
      for (int q = 0; q < t->nranks; ++q) sum[j] += all[(size_t)q * NT + j];
    }
    free(all);
    if (rc != FB_OK) return rc;
  }
  double gn = sqrt(n2), lr = lr_at(&t->o, s);
  st->step = s + 1, st->loss = ce, st->aux = aux, st->grad_norm = gn, st->lr = lr;
  if (!isfinite(ce) || !isfinite(gn) || !isfinite(aux)) {
    st->skipped = 1;
  } else {
    fb_adamw_hparams h = {0};
    h.lr = (float)lr, h.b1 = t->o.b1, h.b2 = t->o.b2, h.eps = t->o.eps;
    h.bc1 = (float)(1.0 - pow((double)t->o.b1, (double)(s + 1)));
    h.bc2 = (float)(1.0 - pow((double)t->o.b2, (double)(s + 1)));
    h.gscale = gn > (double)t->o.clip ? (float)((double)t->o.clip / gn) : 1.0f;
    if (t->gpu) FB_TRY(fbr_gpu_adamw(t, &h));
    for (int i = 0; !t->gpu && i < t->np; ++i) {
      fbr_param *p = &t->p[i];
      h.wd = p->decay ? t->o.wd : 0.0f;
      FB_TRY(fb_adamw_ref(p->w, p->m, p->v, p->g, p->rows, p->cols, &h, NULL));
    }
  }
  t->step = s + 1;
  st->ms = now_ms() - t0;
  return FB_OK;
}

/* ---- checkpoints ----------------------------------------------------------------------------------- */
#define CKPT_MAGIC "FBCKPT\r\n"
#define CKPT_VERSION 1u

typedef struct {
  uint8_t *b;
  size_t n, cap;
  int oom;
} buf_t;

static void put(buf_t *b, const void *p, size_t n) {
  if (b->oom) return;
  if (b->n + n > b->cap) {
    size_t nc = b->cap ? b->cap : 4096;
    while (nc < b->n + n) nc *= 2;
    uint8_t *nb = realloc(b->b, nc);
    if (!nb) { b->oom = 1; return; }
    b->b = nb, b->cap = nc;
  }
  memcpy(b->b + b->n, p, n);
  b->n += n;
}
static void put_u32(buf_t *b, uint32_t v) { put(b, &v, 4); }

/* The run's identity, in a fixed order: what a resumed run must share. */
typedef struct {
  const char *name;
  uint32_t v;
  int is_float; /* v holds a float's bits */
} ident_t;
static int identity(const fb_trainer *t, ident_t *id) {
  const fb_model *M = &t->M;
  const fb_train_opts *o = &t->o;
  float f[8] = {o->lr, o->min_lr, o->b1, o->b2, o->eps, o->wd, o->clip, o->aux_coef};
  uint32_t u[8];
  memcpy(u, f, sizeof u);
  int n = 0;
  id[n++] = (ident_t){"model.layers", (uint32_t)M->layers, 0};
  id[n++] = (ident_t){"model.d_model", (uint32_t)M->d_model, 0};
  id[n++] = (ident_t){"model.d_ff", (uint32_t)M->d_ff, 0};
  id[n++] = (ident_t){"model.experts", (uint32_t)M->experts, 0};
  id[n++] = (ident_t){"model.top_k", (uint32_t)M->top_k, 0};
  id[n++] = (ident_t){"model.vocab", (uint32_t)M->vocab, 0};
  id[n++] = (ident_t){"model.conv_width", (uint32_t)M->conv_width, 0};
  id[n++] = (ident_t){"steps", (uint32_t)o->steps, 0};
  id[n++] = (ident_t){"batch (tokens)", (uint32_t)o->tokens, 0};
  id[n++] = (ident_t){"seq_len", (uint32_t)o->seq_len, 0};
  id[n++] = (ident_t){"seed", o->seed, 0};
  id[n++] = (ident_t){"warmup", (uint32_t)o->warmup, 0};
  id[n++] = (ident_t){"markov successors", (uint32_t)o->markov_succ, 0};
  id[n++] = (ident_t){"exact", (uint32_t)o->exact, 0};
  const char *fn[8] = {"lr", "min_lr", "beta1", "beta2", "eps", "weight_decay", "clip", "aux_coef"};
  for (int i = 0; i < 8; ++i) id[n++] = (ident_t){fn[i], u[i], 1};
  return n;
}

/* Rank 0: all = every rank's n floats in rank order; the others send theirs. */
static fb_status gather0(fb_comm *c, const float *mine, size_t n, float *all) {
  int N = fb_comm_size(c), me = fb_comm_rank(c);
  size_t *a = malloc(4 * (size_t)N * sizeof *a);
  float dummy = 0;
  if (!a) return FB_ERR(FB_ENOMEM, "checkpoint gather");
  for (int p = 0; p < N; ++p) {
    a[p] = p == 0 ? n * sizeof *mine : 0, a[N + p] = 0;
    a[2 * N + p] = me == 0 ? n * sizeof *mine : 0, a[3 * N + p] = (size_t)p * n * sizeof *mine;
  }
  fb_status s = fb_comm_alltoallv(c, mine, a, a + N, me == 0 ? (void *)all : (void *)&dummy, a + 2 * N, a + 3 * N);
  free(a);
  return s;
}

static fb_status save_rank0(const fb_trainer *t, const char *path, buf_t *b);

fb_status fb_train_save(const fb_trainer *t, const char *path) {
  buf_t b = {0};
  if (t->gpu) FB_TRY(fbr_gpu_sync_host((fb_trainer *)t)); /* the device holds the newest masters and moments */
  fb_status rc = save_rank0(t, path, &b);
  free(b.b);
  if (t->nranks == 1) return rc;
  int32_t st = (int32_t)rc; /* every rank returns rank 0's outcome */
  fb_status bs = fb_comm_bcast(t->comm, &st, sizeof st, 0);
  if (bs != FB_OK) return bs;
  if (t->rank != 0 && st != FB_OK) return FB_USERERR((fb_status)st, "%s: rank 0 could not write the checkpoint", path);
  return rc;
}

/* Collective: every rank sends its experts; rank 0 builds the file in *b and writes it. */
static fb_status save_rank0(const fb_trainer *t, const char *path, buf_t *bp) {
  buf_t b = {0};
  int root = t->rank == 0;
  put(&b, CKPT_MAGIC, 8);
  put_u32(&b, CKPT_VERSION);
  char name[64] = {0}, sha[72] = {0};
  snprintf(name, sizeof name, "%s", t->recipe_name);
  snprintf(sha, sizeof sha, "%s", t->plan_sha);
  put(&b, name, sizeof name);
  put(&b, sha, sizeof sha);
  ident_t id[32];
  int nid = identity(t, id);
  put_u32(&b, (uint32_t)nid);
  for (int i = 0; i < nid; ++i) put_u32(&b, id[i].v);
  put_u32(&b, (uint32_t)t->step);     /* the step ... */
  put_u32(&b, t->o.seed);             /* ... and the RNG state: every stream is counter-based on (seed, step) */
  put_u32(&b, (uint32_t)t->step);
  put_u32(&b, (uint32_t)t->np);
  float *all = NULL;
  fb_status rc = FB_OK;
  for (int i = 0; i < t->np; ++i) {
    const fbr_param *p = &t->p[i];
    size_t n = p->rows * p->cols;
    if (!p->expert || t->nranks == 1) {
      put_u32(&b, (uint32_t)n);
      put(&b, p->w, n * 4), put(&b, p->m, n * 4), put(&b, p->v, n * 4);
      continue;
    }
    size_t ng = n * (size_t)t->nranks; /* every rank's experts, in rank order: the one-rank tensor */
    if (root && !all && !(all = malloc(ng * sizeof *all))) b.oom = 1;
    put_u32(&b, (uint32_t)ng);
    const float *src[3] = {p->w, p->m, p->v};
    for (int k = 0; k < 3; ++k) {
      fb_status s = gather0(t->comm, src[k], n, root && all ? all : (float *)src[k]);
      if (s != FB_OK && rc == FB_OK) rc = s;
      if (root && all) put(&b, all, ng * 4);
    }
    free(all), all = NULL;
  }
  *bp = b;
  if (rc != FB_OK) return rc;
  if (!root) return FB_OK;
  uint8_t h[32];
  if (!b.oom) fb_sha256(b.b, b.n, h), put(&b, h, 32);
  *bp = b;
  if (b.oom) return FB_ERR(FB_ENOMEM, "checkpoint: %zu bytes", b.n);

  /* whole or not at all, beside the file a link names (the link kept); base/file.c */
  const void *parts[1] = {b.b};
  size_t sizes[1] = {b.n};
  return fb_file_write(path, parts, sizes, 1);
}

typedef struct {
  const uint8_t *b;
  size_t n, off;
} rd_t;
static int get(rd_t *r, void *p, size_t n) {
  if (r->off + n > r->n) return -1;
  memcpy(p, r->b + r->off, n);
  r->off += n;
  return 0;
}

/* The file: stat'd before it is opened (a FIFO or a device is refused without being opened, and so without
 * blocking), opened non-blocking and checked again (it may have been replaced in between), then read whole. */
fb_status fb_train_load(fb_trainer *t, const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return FB_USERERR(FB_EIO, "%s: cannot open: %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode)) return FB_USERERR(FB_EINVAL, "%s: not a regular file", path);
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return FB_USERERR(FB_EIO, "%s: cannot open: %s", path, strerror(errno));
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return FB_USERERR(FB_EINVAL, "%s: not a regular file", path);
  }
  size_t n = (size_t)st.st_size, got = 0;
  uint8_t *b = malloc(n ? n : 1);
  if (!b) { close(fd); return FB_ERR(FB_ENOMEM, "checkpoint: %zu bytes", n); }
  while (got < n) {
    ssize_t k = read(fd, b + got, n - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    got += (size_t)k;
  }
  close(fd);
  fb_status rc = got == n ? fb_train_load_buffer(t, b, n, path) : FB_USERERR(FB_EIO, "%s: short read", path);
  free(b);
  return rc;
}

/* Two passes over the tensors: the first checks every count and length, the second copies, so a refused
 * checkpoint leaves the trainer as it was. */
fb_status fb_train_load_buffer(fb_trainer *t, const void *data, size_t n, const char *path) {
  const uint8_t *b = data;
  fb_status rc = FB_OK;
  rd_t r = {b, n, 0};
  char magic[8], name[64], sha[72];
  uint32_t ver, nid, step, seed, rstep, np;
  if (n < 8 + 4 + 32 || get(&r, magic, 8) || memcmp(magic, CKPT_MAGIC, 8))
    return FB_USERERR(FB_EINVAL, "%s: not a fourbit checkpoint (bad magic)", path);
  get(&r, &ver, 4);
  if (ver != CKPT_VERSION)
    return FB_USERERR(FB_EINVAL, "%s: checkpoint format version %u, this build reads version %u", path, ver, CKPT_VERSION);
  uint8_t h[32];
  fb_sha256(b, n - 32, h);
  if (memcmp(h, b + n - 32, 32)) return FB_USERERR(FB_EINVAL, "%s: checksum mismatch (truncated or corrupted checkpoint)", path);
  r.n = n - 32;
  if (get(&r, name, 64) || get(&r, sha, 72) || get(&r, &nid, 4)) goto short_;
  name[63] = 0, sha[71] = 0;
  if (strcmp(name, t->recipe_name))
    return FB_USERERR(FB_EINVAL, "%s: recipe: the checkpoint is of recipe '%s', this run is '%s'", path, name, t->recipe_name);
  if (strcmp(sha, t->plan_sha))
    return FB_USERERR(FB_EINVAL, "%s: plan: the checkpoint's plan (sha256 %.12s...) differs from this run's (%.12s...)",
                      path, sha, t->plan_sha);
  ident_t id[32];
  uint32_t nmine = (uint32_t)identity(t, id);
  if (nid != nmine) return FB_USERERR(FB_EINVAL, "%s: %u identity fields, expected %u", path, nid, nmine);
  for (uint32_t i = 0; i < nid; ++i) {
    uint32_t v;
    if (get(&r, &v, 4)) goto short_;
    if (v == id[i].v) continue;
    if (id[i].is_float) {
      float a, c;
      memcpy(&a, &v, 4), memcpy(&c, &id[i].v, 4);
      return FB_USERERR(FB_EINVAL, "%s: %s: the checkpoint has %g, this run %g: resume with the same options", path,
                        id[i].name, (double)a, (double)c);
    }
    return FB_USERERR(FB_EINVAL, "%s: %s: the checkpoint has %u, this run %u: resume with the same options", path,
                      id[i].name, v, id[i].v);
  }
  if (get(&r, &step, 4) || get(&r, &seed, 4) || get(&r, &rstep, 4) || get(&r, &np, 4)) goto short_;
  if (np != (uint32_t)t->np) return FB_USERERR(FB_EINVAL, "%s: %u parameter tensors (expected %d)", path, np, t->np);
  if (seed != t->o.seed || rstep != step)
    return FB_USERERR(FB_EINVAL, "%s: RNG state (seed %u, step %u) does not match the checkpoint's seed %u and step %u",
                      path, seed, rstep, t->o.seed, step);
  if (step > (uint32_t)t->o.steps) return FB_USERERR(FB_EINVAL, "%s: step %u is past the run's %d steps", path, step, t->o.steps);
  size_t tensors = r.off;
  for (int pass = 0; pass < 2; ++pass) { /* 0: check, 1: copy */
    r.off = tensors;
    for (int i = 0; i < t->np; ++i) {
      fbr_param *p = &t->p[i];
      uint32_t cnt;
      size_t m = p->rows * p->cols, mg = m * (p->expert ? (size_t)t->nranks : 1), off = p->expert ? (size_t)t->rank * m : 0;
      if (get(&r, &cnt, 4)) goto short_;
      if (cnt != mg) return FB_USERERR(FB_EINVAL, "%s: %s: %u values, expected %zu", path, p->name, cnt, mg);
      float *dst[3] = {p->w, p->m, p->v};
      for (int k = 0; k < 3; ++k) { /* this rank's experts: its slice of the one-rank tensor */
        if (r.n - r.off < mg * 4) goto short_;
        if (pass) memcpy(dst[k], r.b + r.off + off * 4, m * 4);
        r.off += mg * 4;
      }
    }
    if (r.off != r.n) return FB_USERERR(FB_EINVAL, "%s: %zu trailing bytes", path, r.n - r.off);
  }
  t->step = (int)step;
  if (t->gpu) rc = fbr_gpu_upload(t);
  return rc;
short_:
  return FB_USERERR(FB_EINVAL, "%s: truncated checkpoint", path);
}

fb_status fb_train_save_check(const char *path) {
  if (!path || !*path) return FB_USERERR(FB_EINVAL, "the checkpoint path is empty");
  struct stat st;
  if (stat(path, &st) == 0) {
    if (S_ISDIR(st.st_mode)) return FB_USERERR(FB_EINVAL, "%s: is a directory (the checkpoint is a file: give its name)", path);
    if (!S_ISREG(st.st_mode)) return FB_USERERR(FB_EINVAL, "%s: not a regular file", path);
  } else if (errno != ENOENT) {
    return FB_USERERR(FB_EINVAL, "%s: %s", path, strerror(errno));
  }
  return fb_file_check(path); /* what fb_train_save's write (base/file.c) would refuse */
}

/* ---- recipes with a smaller model ------------------------------------------------------------------ */
fb_status fb_train_recipe_load(const char *path, const fb_model *over, fb_recipe **out) {
  *out = NULL;
  int any = over && (over->layers || over->d_model || over->d_ff || over->experts || over->top_k || over->vocab ||
                     over->conv_width);
  if (!any) return fb_recipe_load(path, out);
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  char dir[1024];
  if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  else snprintf(dir, sizeof dir, ".");
  char fields[512] = "", *p = fields;
  const char *names[7] = {"layers", "d_model", "d_ff", "experts", "top_k", "vocab", "conv_width"};
  int vals[7] = {over->layers, over->d_model, over->d_ff, over->experts, over->top_k, over->vocab, over->conv_width};
  for (int i = 0; i < 7; ++i)
    if (vals[i]) p += snprintf(p, sizeof fields - (size_t)(p - fields), "%s = %d, ", names[i], vals[i]);
  char text[2048], name[1100];
  int n = snprintf(text, sizeof text, "return recipe(extend(include \"%s\", { model = { %s}, parallel = { ep = 1 } }))\n", base, fields);
  if (n < 0 || (size_t)n >= sizeof text) return FB_ERR(FB_EINVAL, "recipe path too long: %s", path);
  snprintf(name, sizeof name, "%s (model overridden)", path);
  return fb_recipe_load_buffer(text, (size_t)n, name, dir, out);
}
