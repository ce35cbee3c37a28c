/* train.c — `fourbit train RECIPE [options]`: train the runtime's MoE model with a recipe's numerics
 * (include/fourbit_train.h), a line per step, a CSV log, checkpoints and bit-exact resume. Also the option
 * parsing and the train loop that `fourbit compare` (cli/compare.c) shares: fb_cli_train_parse,
 * fb_cli_train_one.
 *
 * Expert parallelism: `--ranks N` (or `--gpus N` with --device gpu) makes this process a launcher: it creates the
 * socket mesh (runtime/comm.h), starts N processes of this binary with RANK, WORLD_SIZE, LOCAL_RANK set, waits for
 * them, and reports each rank that failed; when a rank fails the others get 10 s to exit and are then killed, and
 * every child is reaped (a child also dies with the launcher: PR_SET_PDEATHSIG). With RANK set in the environment
 * (the launcher's children, or torchrun-style processes with MASTER_ADDR/MASTER_PORT) the process is one rank:
 * rank 0 alone prints and writes the log and the checkpoint; every rank takes part in each step and checkpoint. */
#include "cli.h"
#include "../runtime/comm.h"
#include "../runtime/experts_gpu.h"
#include "../runtime/train_gpu.h"
#include "../tuner/tune.h"
#include "fb_str.h"
#include "fourbit_train.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *OPTIONS_HELP =
    "  --device cpu|gpu     where the step runs (default cpu; gpu: the whole step on one H200-class GPU,\n"
    "                       sm_90a: the generated kernels, cuBLAS for the dense GEMMs, AdamW on the GPU;\n"
    "                       d_model and d_ff multiples of 128, e.g. --d-ff 128)\n"
    "  --steps N            steps of the run and of its schedule (default 300)\n"
    "  --batch T            tokens per step, a multiple of --seq-len (default: the recipe's batch.tokens,\n"
    "                       or the --model-override preset's)\n"
    "  --seq-len S          tokens per sequence (default 32); the convolution does not cross sequences\n"
    "  --seed S             data, initialization, SR and RHT streams (default: the recipe's seed)\n"
    "  --model-override P   shrink the recipe's model for the CPU: small (6 layers, d_model 128, d_ff 64,\n"
    "                       8 experts, top-2, vocab 256: tiny.lua's size; batch 256) or micro (4 layers, 64,\n"
    "                       32, 4 experts, top-2, vocab 64; batch 64). The recipe's layer rules are\n"
    "                       resolved again for the new layer count.\n"
    "  --layers N --d-model N --d-ff N --experts N --top-k N --vocab N --conv-width N\n"
    "                       override one dimension (after the preset)\n"
    "  --lr X --min-lr X --warmup N --wd X --clip X --aux X\n"
    "                       AdamW peak and final learning rate (3e-3, 3e-4), linear warm-up steps\n"
    "                       (min(100, steps/10)), weight decay (0.1), global gradient-norm clip (1.0), weight\n"
    "                       of the router's load-balancing loss (0.01)\n"
    "  --successors N       successors per state of the synthetic Markov language (default 4)\n"
    "  --print-every N      a line every N steps (default 1; the last step always)\n"
    "  --quiet              nothing on stdout (errors only; with --log /dev/stdout, the CSV alone)\n"
    "  --cache DIR          GPU: kernels from this kernel cache (fourbit tune's winners, else the cached default\n"
    "                       variant); without it every kernel's default variant is compiled with NVRTC at start\n"
    "  --require-tuned      GPU: fail, listing them, when a kernel has no tuned winner in --cache\n"
    "  --pick FAMILY        GPU: every expert GEMM from one family's variants: wgmma (Hopper's), tcgen05\n"
    "                       (Blackwell's: compiled and run under a model only) or mma (the portable\n"
    "                       mma.sync family, every GPU from sm_89); with --cache its tuned winner\n"
    "                       of that family, else its first variant (default: the winner of any family)\n"
    "  --ranks N            expert parallelism over N processes of this binary (default 1): rank r holds\n"
    "                       experts [r E/N, (r+1) E/N) and sequences [r, r+1) x (batch/seq-len)/N of the\n"
    "                       global batch (the same batch and seed as one rank); N must divide the experts\n"
    "                       and the sequences. Dispatch and combine exchange the recipe's quantized payloads\n"
    "                       (CPU: over sockets); rank 0 prints, logs and writes the checkpoint (one file,\n"
    "                       every expert: it resumes on any N). torchrun-style RANK/WORLD_SIZE/LOCAL_RANK\n"
    "                       (+ MASTER_ADDR/MASTER_PORT) in the environment: this process is that rank\n"
    "  --gpus N             --device gpu: N ranks as --ranks N, one per GPU (LOCAL_RANK picks the device);\n"
    "                       the expert layers exchange their payloads with NCCL (default 1: one GPU, the\n"
    "                       same code with NCCL on one rank)\n"
    "  --verbose            a line per step with the expert layers' payload bytes against BF16 payloads\n"
    "  --exact              FP32 everywhere, no quantization (the gradient-check model; for comparisons)\n";

static const struct option OPTS[] = {
    {"device", required_argument, 0, 'D'}, {"steps", required_argument, 0, 's'},
    {"batch", required_argument, 0, 'b'},  {"seq-len", required_argument, 0, 'q'},
    {"seed", required_argument, 0, 'S'},   {"log", required_argument, 0, 'l'},
    {"checkpoint", required_argument, 0, 'c'}, {"checkpoint-every", required_argument, 0, 'C'},
    {"resume", required_argument, 0, 'r'}, {"stop-at", required_argument, 0, 'X'},
    {"model-override", required_argument, 0, 'm'}, {"layers", required_argument, 0, 1},
    {"d-model", required_argument, 0, 2}, {"d-ff", required_argument, 0, 3},
    {"experts", required_argument, 0, 4}, {"top-k", required_argument, 0, 5},
    {"vocab", required_argument, 0, 6}, {"conv-width", required_argument, 0, 7},
    {"lr", required_argument, 0, 10}, {"min-lr", required_argument, 0, 11},
    {"warmup", required_argument, 0, 12}, {"wd", required_argument, 0, 13},
    {"clip", required_argument, 0, 14}, {"aux", required_argument, 0, 15},
    {"successors", required_argument, 0, 16}, {"print-every", required_argument, 0, 17},
    {"quiet", no_argument, 0, 18}, {"gpus", required_argument, 0, 19},
    {"cache", required_argument, 0, 20}, {"require-tuned", no_argument, 0, 21},
    {"ranks", required_argument, 0, 22}, {"verbose", no_argument, 0, 23}, {"exact", no_argument, 0, 24},
    {"pick", required_argument, 0, 25},
    {"out", required_argument, 0, 'o'}, {"baseline", required_argument, 0, 'B'},
    {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};

static int parse_f(const char *cmd, const char *flag, const char *s, float lo, float hi, float *out) {
  char *end = NULL;
  double v = s ? strtod(s, &end) : NAN;
  if (!s || !*s || *end || !(v >= lo && v <= hi)) {
    fprintf(stderr, "fourbit %s: %s: '%s' is not a number in [%g, %g]\n", cmd, flag, s ? s : "", lo, hi);
    return -1;
  }
  *out = (float)v;
  return 0;
}

int fb_cli_train_parse(const char *cmd, int argc, char **argv, fb_cli_train_cfg *c, void (*usage)(FILE *)) {
  memset(c, 0, sizeof *c);
  c->device = "cpu", c->steps = 300, c->seq_len = 32, c->print_every = 1, c->gpus = 1, c->succ = 4, c->ranks = 1;
  int gpus_set = 0;
  c->lr = 3e-3f, c->min_lr = 3e-4f, c->wd = 0.1f, c->clip = 1.0f, c->aux = 0.01f, c->warmup = -1;
  int ch;
  unsigned long long u;
  optind = 0;
  opterr = 0;
  int dims[8] = {0}, li = -1;
  char flagbuf[40];
  while ((li = -1, ch = getopt_long(argc, argv, "h", OPTS, &li)) != -1) {
    snprintf(flagbuf, sizeof flagbuf, "--%s", li >= 0 ? OPTS[li].name : "?");
    const char *flag = li >= 0 ? flagbuf : optind > 0 && optind <= argc ? argv[optind - 1] : "?";
#define U64(lo, hi) do { if (fb_cli_parse_u64(cmd, flag, optarg, (lo), (hi), &u)) return 2; } while (0)
    switch (ch) {
    case 'D':
      if (strcmp(optarg, "cpu") && strcmp(optarg, "gpu")) {
        fprintf(stderr, "fourbit %s: --device: '%s' is not cpu or gpu\n", cmd, optarg);
        return 2;
      }
      c->device = optarg;
      break;
    case 's': U64(1, 100000000); c->steps = (int)u; break;
    case 'b': U64(1, 1 << 24); c->batch = (int)u; break;
    case 'q': U64(1, 1 << 20); c->seq_len = (int)u; break;
    case 'S': U64(0, 0xFFFFFFFFull); c->seed = (uint32_t)u, c->seed_set = 1; break;
    case 'l': c->log = optarg; break;
    case 'c': c->checkpoint = optarg; break;
    case 'C': U64(1, 100000000); c->ckpt_every = (int)u; break;
    case 'r': c->resume = optarg; break;
    case 'X': U64(1, 100000000); c->stop_at = (int)u; break;
    case 'm':
      if (!strcmp(optarg, "small") || !strcmp(optarg, "tiny"))
        c->over = (fb_model){6, 128, 64, 8, 2, 256, 0}, c->preset_batch = 256;
      else if (!strcmp(optarg, "micro"))
        c->over = (fb_model){4, 64, 32, 4, 2, 64, 0}, c->preset_batch = 64;
      else {
        fprintf(stderr, "fourbit %s: --model-override: '%s' is not small or micro\n", cmd, optarg);
        return 2;
      }
      break;
    case 1: case 2: case 3: case 4: case 5: case 6: case 7: U64(1, 1 << 24); dims[ch] = (int)u; break;
    case 10: if (parse_f(cmd, flag, optarg, 1e-9f, 10.0f, &c->lr)) return 2; break;
    case 11: if (parse_f(cmd, flag, optarg, 0.0f, 10.0f, &c->min_lr)) return 2; break;
    case 12: U64(0, 100000000); c->warmup = (int)u; break;
    case 13: if (parse_f(cmd, flag, optarg, 0.0f, 10.0f, &c->wd)) return 2; break;
    case 14: if (parse_f(cmd, flag, optarg, 1e-6f, 1e6f, &c->clip)) return 2; break;
    case 15: if (parse_f(cmd, flag, optarg, 0.0f, 100.0f, &c->aux)) return 2; break;
    case 16: U64(1, 1024); c->succ = (int)u; break;
    case 17: U64(1, 100000000); c->print_every = (int)u; break;
    case 18: c->quiet = 1; break;
    case 19: U64(1, 4096); c->gpus = (int)u, gpus_set = 1; break;
    case 20: c->cache = optarg; break;
    case 21: c->require_tuned = 1; break;
    case 22: U64(1, 4096); c->ranks = (int)u; break;
    case 23: c->verbose = 1; break;
    case 24: c->exact = 1; break;
    case 25:
      if (strcmp(optarg, "mma") && strcmp(optarg, "wgmma") && strcmp(optarg, "tcgen05")) {
        fprintf(stderr, "fourbit %s: --pick: '%s' is not a GEMM family (wgmma, tcgen05, mma)\n", cmd, optarg);
        return 2;
      }
      c->pick = optarg;
      break;
    case 'o': c->out = optarg; break;
    case 'B': c->baseline = optarg; break;
    case 'h': usage(stdout); return 1;
    default:
      fprintf(stderr, "fourbit %s: unknown or incomplete option '%s' (see --help)\n", cmd, flag);
      return 2;
    }
#undef U64
  }
  if (dims[1]) c->over.layers = dims[1];
  if (dims[2]) c->over.d_model = dims[2];
  if (dims[3]) c->over.d_ff = dims[3];
  if (dims[4]) c->over.experts = dims[4];
  if (dims[5]) c->over.top_k = dims[5];
  if (dims[6]) c->over.vocab = dims[6];
  if (dims[7]) c->over.conv_width = dims[7];
  int gpu = !strcmp(c->device, "gpu");
  if (gpus_set && !gpu) {
    fprintf(stderr, "fourbit %s: --gpus goes with --device gpu (CPU ranks: --ranks N)\n", cmd);
    return 2;
  }
  if (gpus_set && c->ranks > 1 && c->ranks != c->gpus) {
    fprintf(stderr, "fourbit %s: --gpus %d and --ranks %d disagree (one rank per GPU)\n", cmd, c->gpus, c->ranks);
    return 2;
  }
  if (gpu) c->ranks = c->ranks > c->gpus ? c->ranks : c->gpus;
  if (strcmp(cmd, "train") && (c->ranks > 1 || c->verbose || c->exact)) {
    fprintf(stderr, "fourbit %s: --ranks, --verbose and --exact are options of fourbit train\n", cmd);
    return 2;
  }
  if (strcmp(c->device, "gpu") && (c->cache || c->require_tuned || c->pick)) {
    fprintf(stderr, "fourbit %s: --cache and --require-tuned go with --device gpu\n", cmd);
    return 2;
  }
  if (c->ckpt_every && !c->checkpoint) {
    fprintf(stderr, "fourbit %s: --checkpoint-every needs --checkpoint FILE\n", cmd);
    return 2;
  }
  if (c->stop_at && c->stop_at > c->steps) {
    fprintf(stderr, "fourbit %s: --stop-at %d is past --steps %d\n", cmd, c->stop_at, c->steps);
    return 2;
  }
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --device gpu: kernels from the cache through the tuner's train-start lookup */
typedef struct {
  fb_cache *cache;
  fb_fingerprint fp;
  const fb_recipe *r;
  fb_plan *plan;
  int winners, defaults, missing;
  uint64_t digest; /* sum over the cache's answers of sha256(kernel | variant | sha256(cubin)): the same on every rank
                      that loaded the same winners, in any order */
  char untuned[2048];
} gpu_lookup;

static fb_status lookup_kernel(void *user, const fb_kernel_spec *k, long long tokens, char *var_name, size_t var_len,
                               void **cubin, size_t *size, double *ms, char *note, size_t notelen) {
  gpu_lookup *u = user;
  fb_tune_choice ch;
  fb_status s = fb_tune_lookup(u->cache, &u->fp, u->r, u->plan, k, tokens, &ch, cubin, size, note, notelen);
  if (ms) *ms = s == FB_OK && ch.from_winner ? ch.winner.median_ms : 0;
  if (s == FB_OK) {
    snprintf(var_name, var_len, "%s", ch.var.name);
    char hex[65], line[600];
    uint8_t h[32];
    fb_sha256_hex(*cubin, *size, hex);
    int n = snprintf(line, sizeof line, "%s|%s|%s", k->name, ch.var.name, hex);
    fb_sha256(line, (size_t)(n < (int)sizeof line ? n : (int)sizeof line - 1), h);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | h[i];
    u->digest += v;
  }
  if (s != FB_OK || !ch.from_winner) {
    size_t n = strlen(u->untuned);
    if (!strstr(u->untuned, k->name) && n + strlen(k->name) + 3 < sizeof u->untuned)
      snprintf(u->untuned + n, sizeof u->untuned - n, "%s%s", n ? ", " : "", k->name);
  }
  if (s == FB_OK) ch.from_winner ? ++u->winners : ++u->defaults;
  else ++u->missing;
  return s;
}

/* The GPU expert ops (kernels loaded or compiled now, with one notice line); 0 ok, else the exit status. */
static int gpu_setup(const char *cmd, const fb_cli_train_cfg *c, const fb_recipe *r, int tokens, gpu_lookup *u,
                     fb_gpu_experts **g) {
  memset(u, 0, sizeof *u);
  u->r = r;
  if (c->cache) {
    if (fb_cache_open(c->cache, &u->cache) != FB_OK) {
      fprintf(stderr, "fourbit %s: --cache %s: %s\n", cmd, c->cache, fb_errmsg());
      return 2;
    }
    const char *arch = NULL;
    if (fb_cuda_load() != FB_OK || fb_tune_fingerprint(&u->fp) != FB_OK ||
        fb_gpu_device_arch(c->comm ? fb_comm_local_rank(c->comm) : 0, &arch) != FB_OK || fb_plan_resolve(r, arch, &u->plan) != FB_OK) {
      fprintf(stderr, "fourbit %s: --device gpu: %s\n", cmd, fb_errmsg());
      return 1;
    }
  }
  fb_gpu_experts_opts go = {.recipe = r, .tokens = tokens, .lookup = c->cache ? lookup_kernel : NULL, .lookup_user = u,
                            .log = stdout, .comm = c->comm, .pick_family = c->pick};
  double t0 = now_s();
  fb_status s = fb_gpu_experts_create(&go, g);
  if (s != FB_OK) {
    fprintf(stderr, "fourbit %s: --device gpu: %s\n", cmd, fb_errmsg());
    return s == FB_EINVAL ? 2 : 1;
  }
  fb_gpu_experts_stats st = fb_gpu_experts_stats_get(*g);
  int lead = !c->comm || fb_comm_rank(c->comm) == 0; /* rank 0 alone prints */
  if (lead && c->cache)
    printf("kernels: %d (%d from the cache: %d tuned winners, %d default variants; %d compiled with NVRTC in %.1f s: not in the "
           "cache or not fitting this shape) in %.1f s\n", st.kernels, st.from_cache, u->winners, u->defaults, st.compiled,
           st.compile_ms / 1e3, now_s() - t0);
  else if (lead)
    printf("kernels: no --cache: compiled the default variant of each of %d kernels with NVRTC: %.1f s of compile, %.1f s in all\n",
           st.kernels, st.compile_ms / 1e3, now_s() - t0);
  if (lead && st.unplanned) /* cannot happen for the shipped recipes (tests/gpu/test_names.c): say so if it does */
    printf("kernels: %d the plan does not name, so fourbit tune never tuned them (first: %s)\n", st.unplanned, st.unplanned_names[0]);
  if (c->require_tuned && (u->untuned[0] || !c->cache)) {
    fprintf(stderr, "fourbit %s: --require-tuned: no tuned winner for: %s\n", cmd, c->cache ? u->untuned : "(no --cache given)");
    return 2;
  }
  return 0;
}

static void gpu_teardown(gpu_lookup *u, fb_gpu_experts *g) {
  fb_gpu_experts_free(g);
  if (u->cache) fb_cache_close(u->cache);
  fb_plan_free(u->plan);
}

/* The signal that asked the run to stop: SIGINT (Ctrl-C) or SIGTERM (what a cluster scheduler sends before it kills).
 * Either one ends the run at the next step boundary, with the checkpoint written; the exit status is 128 + it. */
static volatile sig_atomic_t g_stop;
static void on_stop(int sig) { g_stop = sig; }

static const char LOG_HEADER[] = "step,loss,floor,aux,lr,grad_norm,skipped,tokens_per_s,ms_per_step\n";

/* --resume into an existing log (a regular file): keep the header and the rows up to the checkpoint's step k and cut
 * the file at the first row that is past k or incomplete (steps a crashed run logged after its last checkpoint), so
 * the resumed run logs each step once. One ftruncate: the log is either as it was or cut, never half rewritten.
 * 0 ok (*empty: nothing to keep, write the header), else the exit status. */
static int log_trim(const char *cmd, const char *path, int k, int *empty) {
  *empty = 1;
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return 0;
  FILE *f = fopen(path, "r+");
  if (!f) {
    fprintf(stderr, "fourbit %s: --log %s: cannot open for writing: %s\n", cmd, path, strerror(errno));
    return 2;
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  off_t cut = -1, at = 0;
  int rc = 0, row = 0;
  while ((len = getline(&line, &cap, f)) > 0) {
    if (row++ == 0) {
      if (strcmp(line, LOG_HEADER)) {
        fprintf(stderr, "fourbit %s: --log %s: its first line is not the train log's header: not resuming into it\n",
                cmd, path);
        rc = 2;
        break;
      }
    } else {
      char *end;
      long step = strtol(line, &end, 10);
      if (line[len - 1] != '\n' || end == line || *end != ',' || step > k) { cut = at; break; }
    }
    at += len;
  }
  free(line);
  if (rc == 0 && cut >= 0 && (fflush(f) != 0 || ftruncate(fileno(f), cut) != 0)) {
    fprintf(stderr, "fourbit %s: --log %s: cannot cut the rows past step %d: %s\n", cmd, path, k, strerror(errno));
    rc = 1;
  }
  if (fclose(f) != 0 && rc == 0) rc = 1;
  if (rc == 0) *empty = 0;
  return rc;
}


static void bar(int done, int total, double eta) {
  char b[41];
  int n = (int)(40.0 * done / total);
  for (int i = 0; i < 40; ++i) b[i] = i < n ? '=' : (i == n ? '>' : ' ');
  b[40] = 0;
  fprintf(stderr, "\r[%s] %d/%d  eta %dm%02ds ", b, done, total, (int)eta / 60, (int)eta % 60);
  fflush(stderr);
}

/* --verbose: the step's payload against BF16 payloads of the same rows */
static void print_traffic(const fb_ep_traffic *x, int nranks) {
  if (!(x->bf16 > 0)) return;
  double nv_outer = x->dispatch_outer; /* only NVFP4 rows carry an outer scale */
  printf("  payload: %.0f rows x %.0f B in BF16; dispatch %.0f B = %.4f of BF16 (NVFP4 rows %.4f, %.4f without their "
         "outer scales), combine %.0f B = %.4f, dY %.4f, dX %.4f; %.0f B (%.1f%%) to other ranks of %d\n",
         x->rows, x->bf16 / x->rows, x->dispatch, x->dispatch / x->bf16,
         x->nvfp4_bf16 > 0 ? x->nvfp4 / x->nvfp4_bf16 : 0.0, x->nvfp4_bf16 > 0 ? (x->nvfp4 - nv_outer) / x->nvfp4_bf16 : 0.0,
         x->combine, x->combine / x->bf16, x->dy / x->bf16, x->dx / x->bf16, x->remote,
         100.0 * x->remote / (x->dispatch + x->combine + x->dy + x->dx), nranks);
}

/* --gpus N: every rank's kernel lookups, gathered to rank 0, which prints one line a rank and whether they agree
 * (the same tuned winners from the same cache: the same digest). A collective: every rank calls it. */
typedef struct {
  int32_t kernels, from_cache, winners, defaults, compiled, pad;
  uint64_t digest;
} rank_kernels;

static fb_status report_rank_kernels(const fb_cli_train_cfg *c, const gpu_lookup *u, const fb_gpu_experts *ge,
                                     const fb_train_gpu_stats *ts, int *agree) {
  int n = fb_comm_size(c->comm), rank = fb_comm_rank(c->comm);
  fb_gpu_experts_stats es = fb_gpu_experts_stats_get(ge);
  rank_kernels mine = {.kernels = es.kernels + ts->kernels, .from_cache = es.from_cache + ts->from_cache,
                       .winners = u->winners, .defaults = u->defaults, .compiled = es.compiled + ts->compiled,
                       .digest = u->digest};
  rank_kernels *all = calloc((size_t)n, sizeof *all);
  if (!all) return FB_ENOMEM; /* the caller says "out of memory" */
  fb_status s = fb_comm_allgather(c->comm, &mine, sizeof mine, all);
  *agree = 1;
  for (int q = 1; q < n && s == FB_OK; ++q)
    if (all[q].digest != all[0].digest || all[q].winners != all[0].winners || all[q].defaults != all[0].defaults) *agree = 0;
  if (s == FB_OK && rank == 0) {
    for (int q = 0; q < n; ++q)
      printf("  rank %d kernels: %d (%d from the cache: %d tuned winners, %d default variants; %d compiled with NVRTC); "
             "cache answers digest %016llx\n", q, all[q].kernels, all[q].from_cache, all[q].winners, all[q].defaults,
             all[q].compiled, (unsigned long long)all[q].digest);
    if (*agree)
      printf("  every rank (%d) loaded the same kernels from the cache (%d tuned winners, %d default variants)\n", n,
             all[0].winners, all[0].defaults);
    else
      fprintf(stderr, "fourbit train: warning: the ranks loaded different kernels from the cache (digests above): is "
                      "--cache the same on every host?\n");
    fflush(stdout);
  }
  free(all);
  return s;
}

int fb_cli_train_one(const char *cmd, const fb_cli_train_cfg *c, const char *path, fb_cli_train_result *res) {
  memset(res, 0, sizeof *res);
  int rank = c->comm ? fb_comm_rank(c->comm) : 0, nranks = c->comm ? fb_comm_size(c->comm) : 1, lead = rank == 0;
  char who[32] = "";
  if (nranks > 1) snprintf(who, sizeof who, "rank %d: ", rank);
  int quiet = c->quiet || !lead;
  fb_recipe *r = NULL;
  fb_trainer *t = NULL;
  FILE *log = NULL;
  int rc = 0;
  int gpu = !strcmp(c->device, "gpu");
  gpu_lookup gl;
  fb_gpu_experts *ge = NULL;
  memset(&gl, 0, sizeof gl);
  if (c->checkpoint) { /* before anything runs: a checkpoint that cannot be written would lose the run at its end */
    int32_t bad = lead && fb_train_save_check(c->checkpoint) != FB_OK;
    if (bad) fprintf(stderr, "fourbit %s: --checkpoint %s\n", cmd, fb_errmsg());
    if (nranks > 1 && fb_comm_bcast(c->comm, &bad, sizeof bad, 0) != FB_OK) { /* rank 0 writes: its answer holds */
      fprintf(stderr, "fourbit %s: %s%s\n", cmd, who, fb_errmsg());
      return 1;
    }
    if (bad) return 2;
  }
  fb_status s = fb_train_recipe_load(path, &c->over, &r);
  if (s != FB_OK) { /* the same file and options on every rank: the same error, said once */
    if (lead || s == FB_ENOMEM) fprintf(stderr, "fourbit %s: %s%s\n", cmd, s == FB_ENOMEM ? who : "", fb_errmsg());
    return s == FB_ENOMEM ? 1 : 2;
  }
  snprintf(res->name, sizeof res->name, "%s", r->name);
  fb_train_opts o;
  int batch = c->batch ? c->batch : c->preset_batch ? c->preset_batch : r->tokens;
  fb_train_opts_default(&o, c->steps, batch, c->seed_set ? c->seed : r->seed);
  o.seq_len = c->seq_len, o.lr = c->lr, o.min_lr = c->min_lr, o.wd = c->wd, o.clip = c->clip, o.aux_coef = c->aux;
  o.markov_succ = c->succ, o.exact = c->exact, o.comm = c->comm;
  if (c->warmup >= 0) o.warmup = c->warmup;
  if (o.min_lr > o.lr) o.min_lr = o.lr;
  if (gpu && (rc = gpu_setup(cmd, c, r, o.tokens, &gl, &ge)) != 0) goto out;
  if (gpu) o.arch = fb_gpu_experts_arch(ge); /* the plan and the resident step's kernels for this GPU's arch */
  s = fb_train_create(r, &o, gpu ? fb_gpu_experts_ops(ge) : NULL, &t);
  if (s != FB_OK) {
    fprintf(stderr, "fourbit %s: %s%s: %s\n", cmd, who, path, fb_errmsg());
    rc = s == FB_ENOMEM ? 1 : 2;
    goto out;
  }
  /* --device gpu: the whole step on the GPU (train_gpu.h); FOURBIT_TRAIN_HOST=1 keeps the host step around the GPU
     expert layer (the comparison tests/test_ep_gpu.sh makes) */
  const char *host_step = getenv("FOURBIT_TRAIN_HOST");
  int resident = gpu && !(host_step && *host_step && strcmp(host_step, "0"));
  fb_train_gpu_stats ts; /* the resident step's own kernels (none without it) */
  memset(&ts, 0, sizeof ts);
  if (resident) {
    fb_train_gpu_opts to = {.recipe = r, .experts = ge, .cache = gl.cache, .lookup = c->cache ? lookup_kernel : NULL,
                            .lookup_user = &gl, .log = stdout, .verbose = 0};
    double t1 = now_s();
    s = fb_train_gpu_attach(t, &to);
    if (s != FB_OK) {
      fprintf(stderr, "fourbit %s: %s--device gpu: %s\n", cmd, who, fb_errmsg());
      rc = s == FB_EINVAL ? 2 : 1;
      goto out;
    }
    ts = fb_train_gpu_stats_get(t);
    if (lead)
      printf("train step kernels: %d (%d from the cache, %d compiled with NVRTC in %.1f s) in %.1f s; dense GEMMs: cuBLAS\n",
             ts.kernels, ts.from_cache, ts.compiled, ts.compile_ms / 1e3, now_s() - t1);
  }
  if (gpu && nranks > 1 && c->cache) {
    int agree;
    s = report_rank_kernels(c, &gl, ge, &ts, &agree);
    if (s != FB_OK) {
      fprintf(stderr, "fourbit %s: %s%s\n", cmd, who, s == FB_ENOMEM ? "out of memory" : fb_errmsg());
      rc = 1;
      goto out;
    }
  }
  if (c->resume) {
    s = fb_train_load(t, c->resume);
    if (s != FB_OK) {
      fprintf(stderr, "fourbit %s: %s--resume %s\n", cmd, who, fb_errmsg());
      rc = s == FB_ENOMEM ? 1 : 2;
      goto out;
    }
  }
  res->floor = fb_train_floor(t);
  res->steps = c->steps;
  res->loss = malloc((size_t)c->steps * sizeof *res->loss);
  if (!res->loss) { fprintf(stderr, "fourbit %s: out of memory\n", cmd); rc = 1; goto out; }
  for (int i = 0; i < c->steps; ++i) res->loss[i] = NAN;
  if (c->log && lead) {
    int empty = 1;
    if (c->resume && (rc = log_trim(cmd, c->log, fb_train_step_index(t), &empty)) != 0) goto out;
    log = fopen(c->log, empty ? "w" : "a");
    if (!log) {
      fprintf(stderr, "fourbit %s: --log %s: cannot open for writing\n", cmd, c->log);
      rc = 2;
      goto out;
    }
    if (empty) fputs(LOG_HEADER, log);
  }
  const fb_model *M = &r->model;
  const fb_plan *p = fb_train_plan(t);
  if (!quiet) {
    printf("train %s (%s): %d layers, d_model %d, d_ff %d, %d experts top-%d, vocab %d, conv %d; %.2fM parameters\n",
           r->name, r->path, M->layers, M->d_model, M->d_ff, M->experts, M->top_k, M->vocab, M->conv_width,
           (double)fb_train_param_count(t) / 1e6);
    printf("  device %s, plan sha256 %.16s..., %d tokens/step (%d x %d), seed %u\n",
           gpu ? (!resident ? "gpu (FOURBIT_TRAIN_HOST: the expert layers on the GPU; the rest, the router and AdamW on the CPU)"
                  : nranks > 1 ? "gpu (the whole step on GPU LOCAL_RANK of each rank: parameters, optimizer and every layer)"
                               : "gpu (the whole step on GPU 0: parameters, optimizer and every layer)")
               : "cpu (the CPU reference of the recipe's numerics)",
           p->sha256, o.tokens, o.tokens / o.seq_len, o.seq_len, o.seed);
    if (nranks > 1)
      printf("  expert parallelism: %d ranks (processes), %d experts and %d sequences each; payloads over %s\n",
             nranks, M->experts / nranks, o.tokens / o.seq_len / nranks,
             !gpu ? "sockets" : fb_comm_dev_is_host(c->comm) ? "the host mesh (a CUDA driver whose device memory is host memory)" : "NCCL");
    if (c->exact) printf("  exact: FP32 everywhere, no quantization\n");
    printf("  data: Markov chain over %d tokens, %d successors each: entropy rate %.4f nats/token (the loss floor)\n",
           M->vocab, o.markov_succ, res->floor);
    if (c->resume) printf("  resumed from %s at step %d\n", c->resume, fb_train_step_index(t));
    fflush(stdout);
  }
  int tty = isatty(2) && !quiet;
  struct sigaction sa, old, old_term;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  g_stop = 0;
  sigaction(SIGINT, &sa, &old);
  sigaction(SIGTERM, &sa, &old_term);
  int stop = 0; /* the signal all ranks stop on, after the same step */
  double t0 = now_s();
  int start = fb_train_step_index(t), last = c->stop_at ? c->stop_at : c->steps;
  for (int step = start; step < last; ++step) {
    fb_step_stats st;
    s = fb_train_step(t, &st);
    if (s != FB_OK) {
      if (tty) fprintf(stderr, "\r\033[K");
      fprintf(stderr, "fourbit %s: %sstep %d: %s\n", cmd, who, step + 1, fb_errmsg());
      rc = 1;
      break;
    }
    stop = g_stop;
    if (nranks > 1) { /* every rank stops after the same step (a signal reaches them at different times) */
      float f[2] = {stop == SIGINT ? 1.0f : 0.0f, stop == SIGTERM ? 1.0f : 0.0f};
      s = fb_comm_allreduce_f32(c->comm, f, 2);
      if (s != FB_OK) { fprintf(stderr, "fourbit %s: %s%s\n", cmd, who, fb_errmsg()); rc = 1; break; }
      stop = f[1] > 0 ? SIGTERM : f[0] > 0 ? SIGINT : 0;
    }
    res->loss[step] = st.loss;
    res->done = st.step;
    double tps = (double)o.tokens / (st.ms * 1e-3);
    if (log) {
      fprintf(log, "%d,%.9g,%.9g,%.9g,%.9g,%.9g,%d,%.1f,%.2f\n", st.step, st.loss, res->floor, st.aux, st.lr,
              st.grad_norm, st.skipped, tps, st.ms);
      fflush(log);
    }
    if (!quiet && (st.step % c->print_every == 0 || st.step == last)) {
      if (tty) fprintf(stderr, "\r\033[K");
      printf("step %5d/%d  loss %.4f  floor %.4f  gap %.4f  aux %.4f  lr %.2e  |g| %.3f%s  tok/s %6.0f  ms/step %6.1f\n",
             st.step, c->steps, st.loss, res->floor, st.loss - res->floor, st.aux, st.lr, st.grad_norm,
             st.skipped ? "  SKIPPED (non-finite)" : "", tps, st.ms);
      if (c->verbose) print_traffic(&st.traffic, nranks);
      fflush(stdout);
    }
    if (tty) {
      double el = now_s() - t0;
      bar(st.step, c->steps, el / (st.step - start) * (last - st.step));
    }
    if (c->checkpoint && c->ckpt_every && st.step % c->ckpt_every == 0 && st.step != last) {
      s = fb_train_save(t, c->checkpoint);
      if (s != FB_OK) { fprintf(stderr, "\nfourbit %s: %s--checkpoint %s\n", cmd, who, fb_errmsg()); rc = 1; break; }
    }
    if (stop) {
      if (tty) fprintf(stderr, "\r\033[K");
      if (lead) fprintf(stderr, "fourbit %s: %s after step %d%s\n", cmd, stop == SIGTERM ? "terminated (SIGTERM)" : "interrupted",
              st.step, c->checkpoint ? "; writing the checkpoint" : " (no --checkpoint: nothing saved)");
      rc = 128 + stop;
      break;
    }
  }
  if (tty) fprintf(stderr, "\r\033[K");
  sigaction(SIGINT, &old, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  res->seconds = now_s() - t0;
  if ((rc == 0 || (stop && rc == 128 + stop)) && c->checkpoint) {
    s = fb_train_save(t, c->checkpoint);
    if (s != FB_OK) {
      fprintf(stderr, "fourbit %s: %s--checkpoint %s\n", cmd, who, fb_errmsg());
      rc = 1;
    } else if (!quiet) {
      printf("checkpoint %s (step %d)\n", c->checkpoint, fb_train_step_index(t));
    }
  }
  if (rc == 0 && res->done > start) {
    int n = res->done - start, w = n / 10 > 10 ? n / 10 : (n < 10 ? n : 10);
    double m = 0;
    for (int i = res->done - w; i < res->done; ++i) m += res->loss[i];
    res->final = m / w;
    if (!quiet)
      printf("%s: %d steps in %.1f s (%.0f ms/step); loss %.4f (mean of the last %d steps), floor %.4f, gap %.4f\n",
             r->name, n, res->seconds, 1e3 * res->seconds / n, res->final, w, res->floor, res->final - res->floor);
  }
out:
  if (log && fclose(log) != 0 && rc == 0) {
    fprintf(stderr, "fourbit %s: --log %s: write failed\n", cmd, c->log);
    rc = 1;
  }
  fb_train_free(t);
  if (gpu) gpu_teardown(&gl, ge);
  fb_recipe_free(r);
  return rc;
}

static void train_usage(FILE *f) {
  fprintf(f,
          "usage: fourbit train RECIPE [--device cpu|gpu] [--steps N] [--batch T] [--seed S] [--log FILE.csv]\n"
          "                     [--checkpoint FILE [--checkpoint-every N]] [--resume FILE] [--stop-at N]\n"
          "                     [--model-override small|micro] [--layers N ...] [optimizer options]\n"
          "\n"
          "Trains the runtime's MoE language model (embedding; L x [RMSNorm, causal depthwise convolution,\n"
          "residual, RMSNorm, router, top-k experts, residual]; RMSNorm; LM head; cross-entropy) with RECIPE's\n"
          "numerics: the expert layers exactly as its plan says (fourbit plan RECIPE), the rest in BF16, AdamW on\n"
          "FP32 masters. The data is a synthetic Markov language generated from the seed; its entropy rate, the\n"
          "best loss any model can reach, is printed beside the loss. On the CPU every quantizer is the numerics\n"
          "library's (the oracle of the GPU kernels): slow but exact.\n"
          "\n"
          "Prints a line per step: step, loss, floor, gap, load-balancing loss, learning rate, gradient norm,\n"
          "tokens/s, ms/step (with a progress bar when stderr is a terminal).\n"
          "\n"
          "%s"
          "  --log FILE.csv       the per-step log: step,loss,floor,aux,lr,grad_norm,skipped,tokens_per_s,ms_per_step\n"
          "                       (appended to when resuming into an existing file, after its rows past the\n"
          "                       checkpoint's step are cut off: each step is in the log once)\n"
          "  --checkpoint FILE    write masters, AdamW state, step and RNG state at the end (and every\n"
          "                       --checkpoint-every N steps, and on Ctrl-C or SIGTERM): versioned, sha256-checked,\n"
          "                       atomic; its directory is checked before the first step\n"
          "  --resume FILE        continue a checkpointed run; with the same options it reproduces the\n"
          "                       uninterrupted run bit for bit (the options must match the checkpoint's)\n"
          "  --stop-at N          stop after step N of the --steps schedule (an interruption, for tests)\n"
          "  -h, --help           this text\n"
          "\n"
          "Exit status: 0 ok, 1 failure while training, 2 bad usage or input (a bad recipe, a checkpoint of\n"
          "another run), 130 interrupted (SIGINT), 143 terminated (SIGTERM): both after a whole step, with the\n"
          "checkpoint written.\n",
          OPTIONS_HELP);
}

/* ---- the launcher ---- */
static volatile sig_atomic_t g_fwd_sig, g_alarm;
static void on_fwd(int sig) { g_fwd_sig = sig; }
static void on_alarm(int sig) { (void)sig; g_alarm = 1; }

/* Start n ranks of this binary (the same arguments; RANK, WORLD_SIZE, LOCAL_RANK, FOURBIT_COMM_FDS set) and wait
 * for all of them. The exit status: 0, the common status of the failed ranks, or 1. */
static int launch(int n, int gpu, char **argv) {
  int *fds = malloc((size_t)n * (size_t)n * sizeof *fds);
  pid_t *pid = calloc((size_t)n, sizeof *pid);
  int *st = calloc((size_t)n, sizeof *st), *done = calloc((size_t)n, sizeof *done), *ours = calloc((size_t)n, sizeof *ours);
  int rc = 0;
  if (!fds || !pid || !st || !done || !ours) { fprintf(stderr, "fourbit train: out of memory\n"); rc = 1; goto out; }
  if (fb_comm_mesh_create(n, fds) != FB_OK) { fprintf(stderr, "fourbit train: %s\n", fb_errmsg()); rc = 1; goto out; }
  if (gpu) {
    setenv("NCCL_NVLS_ENABLE", "0", 0); /* NVLink multicast off unless the user set it */
    if (fb_comm_nccl_unique_id_env() != FB_OK) { fprintf(stderr, "fourbit train: --gpus: %s\n", fb_errmsg()); rc = 1; goto out; }
  }
  struct sigaction sa, old_int, old_term, old_alrm;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_IGN; /* Ctrl-C reaches the ranks (one process group); they stop together */
  sigaction(SIGINT, &sa, &old_int);
  sa.sa_handler = on_fwd;
  sigaction(SIGTERM, &sa, &old_term);
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, &old_alrm);
  g_fwd_sig = 0, g_alarm = 0;
  pid_t me = getpid();
  fflush(stdout), fflush(stderr);
  int started = 0;
  for (int i = 0; i < n; ++i) {
    pid_t p = fork();
    if (p < 0) { fprintf(stderr, "fourbit train: fork of rank %d: %s\n", i, strerror(errno)); rc = 1; break; }
    if (p == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL); /* no orphans if the launcher dies */
      if (getppid() != me) _exit(1);
      signal(SIGINT, SIG_DFL), signal(SIGTERM, SIG_DFL);
      char v[3][16];
      snprintf(v[0], 16, "%d", i), snprintf(v[1], 16, "%d", n);
      if (fb_comm_mesh_child(n, i, fds) != FB_OK || setenv("RANK", v[0], 1) || setenv("LOCAL_RANK", v[0], 1) ||
          setenv("WORLD_SIZE", v[1], 1))
        _exit(1);
      execv("/proc/self/exe", argv);
      fprintf(stderr, "fourbit train: rank %d: exec /proc/self/exe: %s\n", i, strerror(errno));
      _exit(127);
    }
    pid[i] = p, ++started;
  }
  for (int k = 0; k < n * n; ++k)
    if (fds[k] >= 0) close(fds[k]); /* the ranks hold the only ends: a dead rank's peers see its sockets close */
  int alive = started, failed = rc ? 1 : 0;
  if (rc) { /* a fork failed: stop the ranks that started */
    for (int i = 0; i < started; ++i) kill(pid[i], SIGKILL), ours[i] = 1;
  }
  while (alive > 0) {
    int ws;
    pid_t p = waitpid(-1, &ws, 0);
    if (p < 0) {
      if (errno != EINTR) break;
      if (g_fwd_sig) {
        for (int i = 0; i < started; ++i)
          if (!done[i]) kill(pid[i], g_fwd_sig);
        g_fwd_sig = 0;
      }
      if (g_alarm) { /* the others had their time to notice and exit */
        for (int i = 0; i < started; ++i)
          if (!done[i]) kill(pid[i], SIGKILL), ours[i] = 1;
        g_alarm = 0;
      }
      continue;
    }
    int i = 0;
    while (i < started && pid[i] != p) ++i;
    if (i == started) continue;
    done[i] = 1, st[i] = ws, --alive;
    if (!(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) && !failed) {
      failed = 1;
      alarm(10);
    }
  }
  alarm(0);
  sigaction(SIGINT, &old_int, NULL), sigaction(SIGTERM, &old_term, NULL), sigaction(SIGALRM, &old_alrm, NULL);
  /* report: ranks killed by a signal first (the cause, usually), then the ranks that exited with an error */
  int code = -1;
  char *said = calloc((size_t)(started > 0 ? started : 1), 1);
  if (!said) { free(fds), free(pid), free(st), free(done), free(ours); return 1; }
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < started; ++i) {
      int ws = st[i];
      if (!done[i] || (WIFEXITED(ws) && WEXITSTATUS(ws) == 0)) continue;
      if (pass == 0 && WIFSIGNALED(ws) && !ours[i])
        fprintf(stderr, "fourbit train: rank %d (pid %d) was killed by signal %d (%s)\n", i, (int)pid[i], WTERMSIG(ws),
                strsignal(WTERMSIG(ws)));
      else if (pass == 1 && WIFSIGNALED(ws) && ours[i])
        fprintf(stderr, "fourbit train: rank %d (pid %d) was stopped by the launcher after another rank failed\n", i,
                (int)pid[i]);
      else if (pass == 1 && WIFEXITED(ws) && !said[i]) { /* one line for every rank that exited with this status */
        fb_str line = {0};
        int nr = 0;
        for (int j = i; j < started; ++j)
          if (done[j] && WIFEXITED(st[j]) && WEXITSTATUS(st[j]) == WEXITSTATUS(ws)) {
            fb_str_printf(&line, "%s%d (pid %d)", nr ? ", " : "", j, (int)pid[j]);
            said[j] = 1, ++nr;
          }
        fprintf(stderr, "fourbit train: rank%s %s exited with status %d\n", nr > 1 ? "s" : "", line.buf ? line.buf : "?",
                WEXITSTATUS(ws));
        free(line.buf);
      }
      if (pass == 1) {
        int c = WIFEXITED(ws) ? WEXITSTATUS(ws) : 1;
        code = code < 0 || code == c ? c : 1;
      }
    }
  free(said);
  if (code > 0) rc = code;
  else if (failed) rc = 1;
out:
  free(fds), free(pid), free(st), free(done), free(ours);
  return rc;
}

int fb_cli_train(int argc, char **argv) {
  fb_cli_train_cfg c;
  int rc = fb_cli_train_parse("train", argc, argv, &c, train_usage);
  if (rc) return rc == 1 ? 0 : rc;
  int gpu = !strcmp(c.device, "gpu");
  const char *env_rank = getenv("RANK");
  if (c.ranks > 1 && !(env_rank && *env_rank)) {
    if (argc - optind != 1) {
      fprintf(stderr, "fourbit train: expected one RECIPE file (see --help)\n");
      return 2;
    }
    return launch(c.ranks, gpu, argv - 1); /* main() passed argv + 1: argv - 1 is the whole command line */
  }
  if (c.out || c.baseline) {
    fprintf(stderr, "fourbit train: --out and --baseline are options of fourbit compare\n");
    return 2;
  }
  if (argc - optind != 1) {
    fprintf(stderr, "fourbit train: expected one RECIPE file (see --help)\n");
    return 2;
  }
  fb_comm *comm = NULL;
  if (env_rank && *env_rank) { /* a rank: of our launcher, or of torchrun-style processes */
    fb_status s = fb_comm_init_env(&comm);
    if (s != FB_OK) {
      fprintf(stderr, "fourbit train: rank %s: %s\n", env_rank, fb_errmsg());
      return s == FB_EINVAL ? 2 : 1;
    }
    if (c.ranks > 1 && c.ranks != fb_comm_size(comm)) {
      fprintf(stderr, "fourbit train: --ranks %d, but WORLD_SIZE is %d\n", c.ranks, fb_comm_size(comm));
      fb_comm_free(comm);
      return 2;
    }
    c.comm = comm;
  }
  fb_cli_train_result res;
  rc = fb_cli_train_one("train", &c, argv[optind], &res);
  free(res.loss);
  fb_comm_free(comm);
  return rc;
}
