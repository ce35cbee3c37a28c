/* train.c — `fourbit train RECIPE [options]`: train the runtime's MoE model with a recipe's numerics
 * (include/fourbit_train.h), a line per step, a CSV log, checkpoints and bit-exact resume. Also the option
 * parsing and the train loop that `fourbit compare` (cli/compare.c) shares: fb_cli_train_parse,
 * fb_cli_train_one. */
#include "cli.h"
#include "../runtime/experts_gpu.h"
#include "../tuner/tune.h"
#include "fourbit_train.h"

#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *OPTIONS_HELP =
    "  --device cpu|gpu     where the expert layers run (default cpu; gpu: one H200-class GPU, sm_90a, the\n"
    "                       generated kernels; d_model and d_ff multiples of 128, e.g. --d-ff 128)\n"
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
    "  --quiet              no per-step lines (the summary only)\n"
    "  --cache DIR          GPU: kernels from this kernel cache (fourbit tune's winners, else the cached default\n"
    "                       variant); without it every kernel's default variant is compiled with NVRTC at start\n"
    "  --require-tuned      GPU: fail, listing them, when a kernel has no tuned winner in --cache\n"
    "  --gpus N             GPUs (1: expert parallelism over NCCL is not wired yet)\n";

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
  c->device = "cpu", c->steps = 300, c->seq_len = 32, c->print_every = 1, c->gpus = 1, c->succ = 4;
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
    case 19: U64(1, 4096); c->gpus = (int)u; break;
    case 20: c->cache = optarg; break;
    case 21: c->require_tuned = 1; break;
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
  if (c->gpus > 1) {
    fprintf(stderr, "fourbit %s: --gpus %d: one rank only (expert parallelism over NCCL is not wired yet)\n", cmd, c->gpus);
    return 2;
  }
  if (strcmp(c->device, "gpu") && (c->cache || c->require_tuned)) {
    fprintf(stderr, "fourbit %s: --cache and --require-tuned go with --device gpu\n", cmd);
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
  char untuned[2048];
} gpu_lookup;

static fb_status lookup_kernel(void *user, const fb_kernel_spec *k, long long tokens, char *var_name, size_t var_len,
                               void **cubin, size_t *size, char *note, size_t notelen) {
  gpu_lookup *u = user;
  fb_tune_choice ch;
  fb_status s = fb_tune_lookup(u->cache, &u->fp, u->r, u->plan, k, tokens, &ch, cubin, size, note, notelen);
  if (s == FB_OK) snprintf(var_name, var_len, "%s", ch.var.name);
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
    if (fb_cuda_load() != FB_OK || fb_tune_fingerprint(&u->fp) != FB_OK || fb_plan_resolve(r, "sm_90a", &u->plan) != FB_OK) {
      fprintf(stderr, "fourbit %s: --device gpu: %s\n", cmd, fb_errmsg());
      return 1;
    }
  }
  fb_gpu_experts_opts go = {.recipe = r, .tokens = tokens, .lookup = c->cache ? lookup_kernel : NULL, .lookup_user = u,
                            .log = stdout};
  double t0 = now_s();
  fb_status s = fb_gpu_experts_create(&go, g);
  if (s != FB_OK) {
    fprintf(stderr, "fourbit %s: --device gpu: %s\n", cmd, fb_errmsg());
    return s == FB_EINVAL ? 2 : 1;
  }
  fb_gpu_experts_stats st = fb_gpu_experts_stats_get(*g);
  if (c->cache)
    printf("kernels: %d (%d from the cache: %d tuned winners, %d default variants; %d compiled with NVRTC in %.1f s: not in the "
           "cache or not fitting this shape) in %.1f s\n", st.kernels, st.from_cache, u->winners, u->defaults, st.compiled,
           st.compile_ms / 1e3, now_s() - t0);
  else
    printf("kernels: no --cache: compiled the default variant of each of %d kernels with NVRTC: %.1f s of compile, %.1f s in all\n",
           st.kernels, st.compile_ms / 1e3, now_s() - t0);
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

static volatile sig_atomic_t g_stop;
static void on_sigint(int sig) { (void)sig; g_stop = 1; }


static void bar(int done, int total, double eta) {
  char b[41];
  int n = (int)(40.0 * done / total);
  for (int i = 0; i < 40; ++i) b[i] = i < n ? '=' : (i == n ? '>' : ' ');
  b[40] = 0;
  fprintf(stderr, "\r[%s] %d/%d  eta %dm%02ds ", b, done, total, (int)eta / 60, (int)eta % 60);
  fflush(stderr);
}

int fb_cli_train_one(const char *cmd, const fb_cli_train_cfg *c, const char *path, fb_cli_train_result *res) {
  memset(res, 0, sizeof *res);
  fb_recipe *r = NULL;
  fb_trainer *t = NULL;
  FILE *log = NULL;
  int rc = 0;
  int gpu = !strcmp(c->device, "gpu");
  gpu_lookup gl;
  fb_gpu_experts *ge = NULL;
  memset(&gl, 0, sizeof gl);
  fb_status s = fb_train_recipe_load(path, &c->over, &r);
  if (s != FB_OK) {
    fprintf(stderr, "fourbit %s: %s\n", cmd, fb_errmsg());
    return s == FB_ENOMEM ? 1 : 2;
  }
  snprintf(res->name, sizeof res->name, "%s", r->name);
  fb_train_opts o;
  int batch = c->batch ? c->batch : c->preset_batch ? c->preset_batch : r->tokens;
  fb_train_opts_default(&o, c->steps, batch, c->seed_set ? c->seed : r->seed);
  o.seq_len = c->seq_len, o.lr = c->lr, o.min_lr = c->min_lr, o.wd = c->wd, o.clip = c->clip, o.aux_coef = c->aux;
  o.markov_succ = c->succ;
  if (c->warmup >= 0) o.warmup = c->warmup;
  if (o.min_lr > o.lr) o.min_lr = o.lr;
  if (gpu && (rc = gpu_setup(cmd, c, r, o.tokens, &gl, &ge)) != 0) goto out;
  s = fb_train_create(r, &o, gpu ? fb_gpu_experts_ops(ge) : NULL, &t);
  if (s != FB_OK) {
    fprintf(stderr, "fourbit %s: %s: %s\n", cmd, path, fb_errmsg());
    rc = s == FB_ENOMEM ? 1 : 2;
    goto out;
  }
  if (c->resume) {
    s = fb_train_load(t, c->resume);
    if (s != FB_OK) {
      fprintf(stderr, "fourbit %s: --resume %s\n", cmd, fb_errmsg());
      rc = s == FB_ENOMEM ? 1 : 2;
      goto out;
    }
  }
  res->floor = fb_train_floor(t);
  res->steps = c->steps;
  res->loss = malloc((size_t)c->steps * sizeof *res->loss);
  if (!res->loss) { fprintf(stderr, "fourbit %s: out of memory\n", cmd); rc = 1; goto out; }
  for (int i = 0; i < c->steps; ++i) res->loss[i] = NAN;
  if (c->log) {
    struct stat st;
    int append = c->resume && stat(c->log, &st) == 0 && st.st_size > 0;
    log = fopen(c->log, append ? "a" : "w");
    if (!log) {
      fprintf(stderr, "fourbit %s: --log %s: cannot open for writing\n", cmd, c->log);
      rc = 2;
      goto out;
    }
    if (!append) fprintf(log, "step,loss,floor,aux,lr,grad_norm,skipped,tokens_per_s,ms_per_step\n");
  }
  const fb_model *M = &r->model;
  const fb_plan *p = fb_train_plan(t);
  if (!c->quiet) {
    printf("train %s (%s): %d layers, d_model %d, d_ff %d, %d experts top-%d, vocab %d, conv %d; %.2fM parameters\n",
           r->name, r->path, M->layers, M->d_model, M->d_ff, M->experts, M->top_k, M->vocab, M->conv_width,
           (double)fb_train_param_count(t) / 1e6);
    printf("  device %s, plan sha256 %.16s..., %d tokens/step (%d x %d), seed %u\n",
           gpu ? "gpu (the expert layers on GPU 0; the rest, the router and AdamW on the CPU)"
               : "cpu (the CPU reference of the recipe's numerics)",
           p->sha256, o.tokens, o.tokens / o.seq_len, o.seq_len, o.seed);
    printf("  data: Markov chain over %d tokens, %d successors each: entropy rate %.4f nats/token (the loss floor)\n",
           M->vocab, o.markov_succ, res->floor);
    if (c->resume) printf("  resumed from %s at step %d\n", c->resume, fb_train_step_index(t));
    fflush(stdout);
  }
  int tty = isatty(2) && !c->quiet;
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, &old);
  g_stop = 0;
  double t0 = now_s();
  int start = fb_train_step_index(t), last = c->stop_at ? c->stop_at : c->steps;
  for (int step = start; step < last; ++step) {
    fb_step_stats st;
    s = fb_train_step(t, &st);
    if (s != FB_OK) {
      if (tty) fprintf(stderr, "\r\033[K");
      fprintf(stderr, "fourbit %s: step %d: %s\n", cmd, step + 1, fb_errmsg());
      rc = 1;
      break;
    }
    res->loss[step] = st.loss;
    res->done = st.step;
    double tps = (double)o.tokens / (st.ms * 1e-3);
    if (log) {
      fprintf(log, "%d,%.9g,%.9g,%.9g,%.9g,%.9g,%d,%.1f,%.2f\n", st.step, st.loss, res->floor, st.aux, st.lr,
              st.grad_norm, st.skipped, tps, st.ms);
      fflush(log);
    }
    if (!c->quiet && (st.step % c->print_every == 0 || st.step == last)) {
      if (tty) fprintf(stderr, "\r\033[K");
      printf("step %5d/%d  loss %.4f  floor %.4f  gap %.4f  aux %.4f  lr %.2e  |g| %.3f%s  tok/s %6.0f  ms/step %6.1f\n",
             st.step, c->steps, st.loss, res->floor, st.loss - res->floor, st.aux, st.lr, st.grad_norm,
             st.skipped ? "  SKIPPED (non-finite)" : "", tps, st.ms);
      fflush(stdout);
    }
    if (tty) {
      double el = now_s() - t0;
      bar(st.step, c->steps, el / (st.step - start) * (last - st.step));
    }
    if (c->checkpoint && c->ckpt_every && st.step % c->ckpt_every == 0 && st.step != last) {
      s = fb_train_save(t, c->checkpoint);
      if (s != FB_OK) { fprintf(stderr, "\nfourbit %s: --checkpoint %s\n", cmd, fb_errmsg()); rc = 1; break; }
    }
    if (g_stop) {
      if (tty) fprintf(stderr, "\r\033[K");
      fprintf(stderr, "fourbit %s: interrupted after step %d%s\n", cmd, st.step,
              c->checkpoint ? "; writing the checkpoint" : " (no --checkpoint: nothing saved)");
      rc = 130;
      break;
    }
  }
  if (tty) fprintf(stderr, "\r\033[K");
  sigaction(SIGINT, &old, NULL);
  res->seconds = now_s() - t0;
  if ((rc == 0 || rc == 130) && c->checkpoint) {
    s = fb_train_save(t, c->checkpoint);
    if (s != FB_OK) {
      fprintf(stderr, "fourbit %s: --checkpoint %s\n", cmd, fb_errmsg());
      rc = 1;
    } else if (!c->quiet) {
      printf("checkpoint %s (step %d)\n", c->checkpoint, fb_train_step_index(t));
    }
  }
  if (rc == 0 && res->done > start) {
    int n = res->done - start, w = n / 10 > 10 ? n / 10 : (n < 10 ? n : 10);
    double m = 0;
    for (int i = res->done - w; i < res->done; ++i) m += res->loss[i];
    res->final = m / w;
    if (!c->quiet)
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
          "                       (appended to when resuming into an existing file)\n"
          "  --checkpoint FILE    write masters, AdamW state, step and RNG state at the end (and every\n"
          "                       --checkpoint-every N steps, and on Ctrl-C): versioned, sha256-checked, atomic\n"
          "  --resume FILE        continue a checkpointed run; with the same options it reproduces the\n"
          "                       uninterrupted run bit for bit (the options must match the checkpoint's)\n"
          "  --stop-at N          stop after step N of the --steps schedule (an interruption, for tests)\n"
          "  -h, --help           this text\n"
          "\n"
          "Exit status: 0 ok, 1 failure while training, 2 bad usage or input (a bad recipe, a checkpoint of\n"
          "another run), 130 interrupted.\n",
          OPTIONS_HELP);
}

int fb_cli_train(int argc, char **argv) {
  fb_cli_train_cfg c;
  int rc = fb_cli_train_parse("train", argc, argv, &c, train_usage);
  if (rc) return rc == 1 ? 0 : rc;
  if (c.out || c.baseline) {
    fprintf(stderr, "fourbit train: --out and --baseline are options of fourbit compare\n");
    return 2;
  }
  if (argc - optind != 1) {
    fprintf(stderr, "fourbit train: expected one RECIPE file (see --help)\n");
    return 2;
  }
  fb_cli_train_result res;
  rc = fb_cli_train_one("train", &c, argv[optind], &res);
  free(res.loss);
  return rc;
}
