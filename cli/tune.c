/* tune.c — `fourbit tune RECIPE`: the autotune sweep (tuner/tune.c), its --dry-run and --warm-start-bench, and the
 * hidden `fourbit __compile NAME ARCH` that compiles one kernel (source on stdin, cubin on stdout) in a child
 * process, so that the sweep can kill a compile that runs past its time-out. */
#include "cli.h"
#include "../tuner/strategy.h"
#include "../tuner/tune.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void tune_usage(FILE *f) {
  fprintf(f,
          "usage: fourbit tune RECIPE [--cache DIR] [--shapes T1,T2,...] [--strategy exhaustive|random|halving]\n"
          "                           [--budget N | --time S] [--jobs N] [--only SUBSTR] [--dry-run [--arch A]] [--warm-start-bench]\n"
          "\n"
          "For each kernel spec of RECIPE's plan that has a template and each shape bucket: compiles the legal tile\n"
          "variants in parallel (the cache's kernels first; NVRTC in a child process with a hard time-out, new cubins\n"
          "stored), then in a worker process (replaced when a candidate kills it) loads each, checks it bit for bit\n"
          "against the CPU reference on fresh random inputs, and times the survivors (CUDA events, warm-up, inputs\n"
          "rotated over more than twice the L2, candidates interleaved, median and spread); the best three are\n"
          "re-measured with the default variant, and the winner goes to the cache's winners (every candidate, failures\n"
          "included, to trials: a failure is not retried by a later sweep). Prints a summary table per kernel.\n"
          "Needs a GPU (exit 1 without one); --dry-run lists what it would compile and measure, and needs none.\n"
          "\n"
          "  --cache DIR         the LMDB cache (default $FOURBIT_CACHE, else ~/.cache/fourbit); a local disk\n"
          "  --shapes LIST       tokens per rank to tune for (default: the recipe's batch.tokens); each is bucketed\n"
          "                      to the next power of two\n"
          "  --strategy S        exhaustive (default: a quick look at every variant, the close ones measured fully),\n"
          "                      random, or halving (successive halving: the budget goes to the good ones)\n"
          "  --budget N          effort units per kernel spec and bucket (one unit = 5 timed runs of one variant;\n"
          "                      default 3 x the variants)\n"
          "  --time S            the whole sweep in about S seconds (each spec and bucket gets an equal share)\n"
          "  --jobs N            parallel compiles (default: the number of cores)\n"
          "  --only SUBSTR       only kernel specs whose name contains SUBSTR\n"
          "  --dry-run           list the specs, variants (a GEMM's per family: wgmma on sm_90a, the portable mma on\n"
          "                      every arch), shapes and cached cubins; compile and measure nothing\n"
          "  --arch A            the arch of the dry run (default sm_90a; one of sm_89, sm_90a, sm_100a, sm_103a,\n"
          "                      sm_120a); with a GPU the GPU's arch, which --arch must then name\n"
          "  --warm-start-bench  load every kernel of RECIPE from the cache (the winner, else the default variant) as\n"
          "                      train start does, timed, against NVRTC compiles of the same kernels\n"
          "  -h, --help          this text\n"
          "\n"
          "environment: FOURBIT_TUNE_WORKER (the worker executable; default fourbit-worker beside this one),\n"
          "FOURBIT_TUNE_FAULT=SUBSTR (test hook: variants whose name contains it are first launched with invalid pointers),\n"
          "FOURBIT_TUNE_TIMEOUT (seconds a worker request may take, default 120), FOURBIT_TUNE_COMPILE_TIMEOUT (default 300).\n");
}

/* `fourbit __compile NAME ARCH`: NVRTC on the source read from stdin; the cubin to stdout */
static int compile_child(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "fourbit __compile: NAME ARCH (source on stdin)\n");
    return 2;
  }
  size_t cap = 1 << 16, n = 0;
  char *src = malloc(cap + 1);
  for (;;) {
    if (!src) return 1;
    if (n == cap) src = realloc(src, (cap *= 2) + 1);
    if (!src) return 1;
    size_t got = fread(src + n, 1, cap - n, stdin);
    if (!got) break;
    n += got;
  }
  src[n] = 0;
  fb_cubin cb;
  if (fb_nvrtc_compile(argv[1], src, argv[2], &cb) != FB_OK) {
    fprintf(stderr, "%s\n", fb_errmsg());
    free(src);
    return 1;
  }
  int rc = fwrite(cb.cubin, 1, cb.size, stdout) == cb.size && fflush(stdout) == 0 ? 0 : 1;
  fb_cubin_free(&cb);
  free(src);
  return rc;
}

static double env_num(const char *name, double dflt) {
  const char *e = getenv(name);
  char *end;
  double v = e && *e ? strtod(e, &end) : dflt;
  return e && *e && (*end || v <= 0) ? dflt : v;
}

int fb_cli_tune(int argc, char **argv) {
  if (argc >= 1 && !strcmp(argv[0], "__compile")) return compile_child(argc, argv);
  static const struct option opts[] = {{"cache", required_argument, 0, 'c'},  {"shapes", required_argument, 0, 's'},
                                       {"strategy", required_argument, 0, 'S'}, {"budget", required_argument, 0, 'b'},
                                       {"time", required_argument, 0, 't'},   {"jobs", required_argument, 0, 'j'},
                                       {"only", required_argument, 0, 'O'},   {"dry-run", no_argument, 0, 'n'},
                                       {"arch", required_argument, 0, 'a'},
                                       {"warm-start-bench", no_argument, 0, 'W'}, {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  fb_tune_opts o;
  memset(&o, 0, sizeof o);
  o.jobs = (int)sysconf(_SC_NPROCESSORS_ONLN);
  o.strategy = FB_STRATEGY_EXHAUSTIVE;
  int warm = 0, c, have_budget = 0;
  unsigned long long u;
  optind = 0;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'c': o.cache_dir = optarg; break;
    case 's':
      o.nshapes = 0;
      for (char *s = optarg; *s;) {
        char one[32];
        size_t l = strcspn(s, ",");
        snprintf(one, sizeof one, "%.*s", (int)(l < 31 ? l : 31), s);
        if (o.nshapes == 16) { fprintf(stderr, "fourbit tune: --shapes: at most 16\n"); return 2; }
        if (fb_cli_parse_u64("tune", "--shapes", one, 1, 1ull << 24, &u)) return 2;
        o.shapes[o.nshapes++] = (long long)u;
        s += l + (s[l] == ',');
      }
      if (!o.nshapes) { fprintf(stderr, "fourbit tune: --shapes: empty list\n"); return 2; }
      break;
    case 'S': {
      fb_strategy st;
      if (fb_strategy_parse(optarg, &st)) {
        fprintf(stderr, "fourbit tune: --strategy: '%s' is not exhaustive, random or halving\n", optarg);
        return 2;
      }
      o.strategy = st;
      break;
    }
    case 'b':
      if (fb_cli_parse_u64("tune", "--budget", optarg, 1, 1ull << 30, &u)) return 2;
      o.budget = (long)u, have_budget = 1;
      break;
    case 't': {
      char *end;
      errno = 0;
      o.time_s = strtod(optarg, &end);
      if (errno || *end || !(o.time_s > 0) || o.time_s > 1e6) {
        fprintf(stderr, "fourbit tune: --time: '%s' is not a number of seconds in (0, 1e6]\n", optarg);
        return 2;
      }
      break;
    }
    case 'j':
      if (fb_cli_parse_u64("tune", "--jobs", optarg, 1, 256, &u)) return 2;
      o.jobs = (int)u;
      break;
    case 'O': o.only = optarg; break;
    case 'n': o.dry_run = 1; break;
    case 'a':
      if (!fb_arch_known(optarg)) {
        fprintf(stderr, "fourbit tune: --arch: unknown arch '%s' (%s)\n", optarg, FB_ARCHS);
        return 2;
      }
      o.arch = optarg;
      break;
    case 'W': warm = 1; break;
    case 'h': tune_usage(stdout); return 0;
    default:
      fprintf(stderr, "fourbit tune: unknown or incomplete option '%s' (see --help)\n", fb_cli_badopt(argc, argv));
      return 2;
    }
  }
  if (argc - optind != 1) {
    fprintf(stderr, "fourbit tune: expected one RECIPE file (see --help)\n");
    return 2;
  }
  if (have_budget && o.time_s > 0) {
    fprintf(stderr, "fourbit tune: --budget and --time exclude each other\n");
    return 2;
  }
  if (warm && o.dry_run) {
    fprintf(stderr, "fourbit tune: --warm-start-bench and --dry-run exclude each other\n");
    return 2;
  }
  o.recipe = argv[optind];
  o.tty = isatty(2);
  /* this executable, and the worker beside it */
  static char self[PATH_MAX], wk[PATH_MAX + 32];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    fprintf(stderr, "fourbit tune: /proc/self/exe: %s\n", strerror(errno));
    return 1;
  }
  self[n] = 0;
  o.self = self;
  const char *ew = getenv("FOURBIT_TUNE_WORKER");
  if (ew && *ew) {
    o.worker = ew;
  } else {
    char *slash = strrchr(self, '/');
    snprintf(wk, sizeof wk, "%.*s/fourbit-worker", (int)(slash ? slash - self : 1), slash ? self : ".");
    o.worker = wk;
  }
  o.fault = getenv("FOURBIT_TUNE_FAULT");
  o.worker_timeout_s = env_num("FOURBIT_TUNE_TIMEOUT", 120);
  o.compile_timeout_s = env_num("FOURBIT_TUNE_COMPILE_TIMEOUT", 300);
  if (!o.dry_run && !warm && access(o.worker, X_OK) != 0) {
    fprintf(stderr, "fourbit tune: the worker %s is missing (make builds it beside fourbit; FOURBIT_TUNE_WORKER names another)\n", o.worker);
    return 1;
  }
  fb_status st = warm ? fb_tune_warm_start_bench(&o) : fb_tune_run(&o);
  if (st == FB_OK) return 0;
  fprintf(stderr, "fourbit tune: %s\n", fb_errmsg());
  /* 2: the input is bad (the recipe, its plan, the cache folder); 1: it cannot be done here (no GPU, no winner, ...) */
  return st == FB_EINVAL || st == FB_ELUA || st == FB_EIO || st == FB_ELMDB ? 2 : 1;
}
