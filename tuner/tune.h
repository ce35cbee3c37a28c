/* tune.h — the sweep driver (tuner/tune.c), the problem shapes of a kernel spec (tuner/shape.c), and the wire
 * protocol between `fourbit tune` and its measuring worker (build/fourbit-worker, tuner/worker/worker.c).
 *
 * The worker is a separate process (exec'd, never forked from a process that touched CUDA) that loads cubins,
 * checks them against the CPU reference and times them. A candidate that faults kills at most the worker: the
 * driver sees the pipe close (or the deadline pass, and kills it), records the failure, and starts a new one.
 * Messages: a header {u32 type, u32 bytes} and a payload of the structs below (both sides are built from the
 * same tree; HELLO carries FB_TUNE_PROTO so that a stale worker binary is refused). */
#ifndef FB_TUNER_TUNE_H
#define FB_TUNER_TUNE_H
#include "fourbit.h"

#define FB_TUNE_PROTO 2
#define FB_TUNE_MAXBATCH 64

enum { FB_MSG_HELLO = 1, FB_MSG_DEVICE, FB_MSG_LOAD, FB_MSG_VERIFIED, FB_MSG_TIME, FB_MSG_TIMES, FB_MSG_QUIT };

/* The sizes a kernel spec runs at for a number of tokens per rank (fb_tune_shape). */
typedef struct {
  long long rows, cols; /* fb_launch_dims' rows and cols */
  unsigned ngroups;     /* per-expert (group) outer scales */
  int experts, top_k;   /* router, permute, unpermute: all experts; adamw: experts per rank */
  int tile;             /* permute: rows per expert padded to this */
  double bytes;         /* bytes one launch reads + writes (for GB/s) */
  /* the GEMMs: rows (above) = experts x rows_per_expert, balanced, each padded to 128; cols = N. Mode 0 (fwd,
     dgrad): D = A B^T with N = gn, K = gk; wgrad: M = gm, N = gn, K = the rows of each expert, and a second
     problem gm2 x gn2 (the wgrad spec computes dW2 and dW13: one launch of each is timed together) */
  long long rows_per_expert;
  int gm, gn, gk, gm2, gn2;
  double flops;
} fb_tune_shape_t;
fb_status fb_tune_shape(const fb_kernel_spec *k, const fb_model *m, int ep, long long tokens, fb_tune_shape_t *s);
/* A GEMM op (FB_OP_GEMM_*) */
int fb_tune_is_gemm(const fb_kernel_spec *k);
/* Whether GEMM variant v of k can run shape s (its tiles divide N, K, M and the rows per expert); why says not. */
int fb_tune_gemm_fits(const fb_kernel_spec *k, const fb_variant *v, const fb_tune_shape_t *s, char *why, size_t n);

typedef struct {
  int proto, ok;
  fb_fingerprint fp;
  long long l2_bytes;
  char msg[512];
} fb_msg_device;

typedef struct {
  int id, fault;         /* fault: the FOURBIT_TUNE_FAULT test hook: launch once with invalid pointers first */
  fb_kernel_spec spec;
  fb_variant var;
  unsigned long long cubin_len, src_len; /* followed by the cubin, then the source (the emulator compiles it) */
} fb_msg_load;

typedef struct {
  int id, ok;
  long wrong;
  char msg[512];
} fb_msg_verified;

typedef struct {
  int n, effort;          /* effort: runs = 5 x effort per candidate, after 2 warm-ups each */
  int ids[FB_TUNE_MAXBATCH];
  fb_kernel_spec spec;
  fb_tune_shape_t shape;
} fb_msg_time;

typedef struct {
  int n, runs, ok;
  double median_ms[FB_TUNE_MAXBATCH], spread_ms[FB_TUNE_MAXBATCH]; /* spread: (p90 - p10) / 2 */
  int sets;               /* input sets rotated over */
  double set_mb;          /* MB one launch reads */
  char msg[512];
} fb_msg_times;

int fb_tune_send(int fd, int type, const void *a, size_t an, const void *b, size_t bn, const void *c, size_t cn);
/* Read one message into *buf (malloc'd, grown); deadline_ms < 0: none. 0 ok, -1 closed/error, -2 timed out. */
int fb_tune_recv(int fd, int *type, void **buf, size_t *len, long long deadline_ms);
long long fb_tune_now_ms(void);

/* ---- the sweep ---- */
typedef struct {
  const char *recipe;
  const char *cache_dir;     /* NULL: the default */
  long long shapes[16];      /* tokens per rank; nshapes 0: the recipe's */
  int nshapes;
  int strategy;              /* fb_strategy */
  long budget;               /* effort units per kernel spec and bucket; 0: 3 x candidates */
  double time_s;             /* > 0: the whole sweep's time; the budget is then what the time allows */
  int jobs;                  /* parallel compiles */
  const char *only;          /* kernel specs whose name contains this */
  int dry_run;
  const char *arch;          /* --arch: the dry run's arch (default sm_90a); with a GPU it must be the GPU's */
  const char *self;          /* this executable: `self __compile` compiles one kernel in a child process */
  const char *worker;        /* the worker executable */
  double compile_timeout_s;  /* hard, per compile */
  double worker_timeout_s;   /* per request to the worker */
  const char *fault;         /* FOURBIT_TUNE_FAULT: variants whose name contains this fault on purpose */
  int tty;                   /* progress line */
} fb_tune_opts;
/* The sweep, its progress and summary printed. FB_ECUDA without a GPU to measure on; FB_ENOTFOUND when a spec and
 * bucket got no winner; the recipe's, plan's or cache's own status when one of them is bad. */
fb_status fb_tune_run(const fb_tune_opts *o);

/* One kernel at train start: the winner for spec at tokens (nearest bucket), else the default variant (the first
 * legal one), loaded from the cache without compiling. note says which and why. FB_ENOTFOUND when the cubin of
 * neither is in the cache. */
typedef struct {
  fb_kernel_spec spec;
  fb_variant var;
  int from_winner;  /* 0: the default variant */
  fb_winner winner;
} fb_tune_choice;
fb_status fb_tune_lookup(fb_cache *c, const fb_fingerprint *fp, const fb_recipe *r, const fb_plan *p, const fb_kernel_spec *k,
                         long long tokens, fb_tune_choice *ch, void **cubin, size_t *size, char *note, size_t notelen);
/* `fourbit tune RECIPE --warm-start-bench`: lookup + cuModuleLoadData of every kernel of the recipe from the cache,
 * against NVRTC compiles of the same kernels. Needs a GPU (FB_ECUDA); FB_ENOTFOUND when a kernel is missing. */
fb_status fb_tune_warm_start_bench(const fb_tune_opts *o);
/* Whether the worker can check and time spec k: every op with a template (GEMMs: tuner/check/gemm_harness.c). */
int fb_tune_measurable(const fb_kernel_spec *k);
/* Why the worker does not check and time k (NULL: it does); tune compiles such a kernel's default into the cache. */
const char *fb_tune_untimed(const fb_kernel_spec *k);
/* The device fingerprint of GPU 0 (the driver + this toolchain). */
fb_status fb_tune_fingerprint(fb_fingerprint *fp);
#endif
