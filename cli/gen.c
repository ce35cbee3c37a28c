/* gen.c — `fourbit gen RECIPE`: every variant of every kernel the recipe's plan needs, as CUDA source and
 * cubins for each arch, compiled in parallel by NVRTC. */
#include "cli.h"
#include "fb_str.h"
#include <stdint.h>

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void gen_usage(FILE *f) {
  fprintf(f,
          "usage: fourbit gen RECIPE [--arch LIST] [--out DIR] [--jobs N] [--only SUBSTR]\n"
          "\n"
          "Generates every tile variant of every kernel RECIPE's plan needs (variants from its tune values,\n"
          "illegal ones pruned with a reason) and compiles each with NVRTC for each arch. Writes\n"
          "DIR/<kernel>.cu and DIR/<kernel>.<arch>.cubin, and prints the compile time per kernel, the\n"
          "registers and spills ptxas reports, and the kernels that have no template yet.\n"
          "Each GEMM has the variants of every family its arch runs: wgmma (sm_90a) and the portable\n"
          "mma.sync family (every arch), and tcgen05 on sm_100a / sm_103a. Only sm_90a kernels have run (on an\n"
          "H200): sm_89, sm_100a, sm_103a and sm_120a (L40S / RTX 4090, B200, GB300, RTX 5090) are compiled here\n"
          "and never run on such a GPU (none is at hand); the tcgen05 GEMMs run only under fourbit's functional\n"
          "model of the instructions.\n"
          "\n"
          "  --arch LIST    comma-separated archs of sm_89, sm_90a, sm_100a, sm_103a, sm_120a (default sm_90a)\n"
          "  --out DIR      output folder (default build/kernels); created if missing\n"
          "  --jobs N       parallel compiles (default: the number of cores)\n"
          "  --only SUBSTR  only kernels whose name contains SUBSTR\n"
          "  --cache DIR    the LMDB kernel cache: cubins found there (same source, arch, NVRTC version and\n"
          "                 options) are not compiled again, new ones are stored; DIR on a local disk\n"
          "  -h, --help     this text\n");
}

typedef struct {
  fb_kernel_spec spec;
  fb_variant var;
  char arch[16];
  char *src;
  fb_cubin cubin;
  fb_status st;
  int cached;
  uint8_t key[32];
  char err[2048];
} job;

typedef struct {
  job *jobs;
  int n, next, done;
  pthread_mutex_t mu;
  const char *out;
  fb_cache *cache;
  int tty;
} pool;

static void *worker(void *arg) {
  pool *p = arg;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    int i = p->next++;
    pthread_mutex_unlock(&p->mu);
    if (i >= p->n) return NULL;
    job *j = &p->jobs[i];
    if (p->cache) {
      fb_cache_kernel_key(j->src, j->arch, j->key);
      void *cub;
      size_t n;
      if (fb_cache_get_kernel(p->cache, j->key, &cub, &n) == FB_OK) {
        j->cubin.cubin = cub, j->cubin.size = n, j->cached = 1, j->st = FB_OK;
        pthread_mutex_lock(&p->mu);
        ++p->done;
        pthread_mutex_unlock(&p->mu);
        continue;
      }
    }
    j->st = fb_nvrtc_compile(j->var.name, j->src, j->arch, &j->cubin);
    if (j->st != FB_OK) snprintf(j->err, sizeof j->err, "%s", fb_errmsg());
    pthread_mutex_lock(&p->mu);
    ++p->done;
    if (p->tty) fprintf(stderr, "\r[%d/%d] compiling", p->done, p->n);
    pthread_mutex_unlock(&p->mu);
  }
}

static int write_file(const char *dir, const char *name, const char *ext, const void *data, size_t n) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s%s", dir, name, ext);
  const void *parts[1] = {data};
  size_t sizes[1] = {n};
  return fb_cli_write_atomic("gen", path, parts, sizes, 1);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* "registers N, spills S" from ptxas's verbose log */
static void resources(const char *log, int *regs, int *spill) {
  *regs = -1, *spill = 0;
  const char *s = log ? strstr(log, "Used ") : NULL;
  if (s) sscanf(s, "Used %d registers", regs);
  for (const char *t = log; t && (t = strstr(t, "bytes spill")); ++t) {
    const char *b = t;
    while (b > log && b[-1] != ' ' && b[-1] != ',') --b;
    while (b > log && b[-1] == ' ') --b;
    while (b > log && b[-1] >= '0' && b[-1] <= '9') --b;
    *spill += atoi(b);
  }
}

int fb_cli_gen(int argc, char **argv) {
  static const struct option opts[] = {{"arch", required_argument, 0, 'a'}, {"out", required_argument, 0, 'o'},
                                       {"jobs", required_argument, 0, 'j'}, {"only", required_argument, 0, 'O'},
                                       {"cache", required_argument, 0, 'c'}, {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  const char *archs = "sm_90a", *out = "build/kernels", *only = NULL, *cache_dir = NULL;
  unsigned long long jobs = (unsigned long long)sysconf(_SC_NPROCESSORS_ONLN);
  int c;
  optind = 0;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'a': archs = optarg; break;
    case 'o': out = optarg; break;
    case 'O': only = optarg; break;
    case 'j':
      if (fb_cli_parse_u64("gen", "--jobs", optarg, 1, 1024, &jobs)) return 2;
      break;
    case 'c': cache_dir = optarg; break;
    case 'h': gen_usage(stdout); return 0;
    default:
      fprintf(stderr, "fourbit gen: unknown or incomplete option '%s' (see --help)\n", fb_cli_badopt(argc, argv));
      return 2;
    }
  }
  if (argc - optind != 1) {
    fprintf(stderr, "fourbit gen: expected one RECIPE file (see --help)\n");
    return 2;
  }
  char archv[5][16];
  int na = 0;
  for (const char *s = archs; *s;) {
    size_t l = strcspn(s, ",");
    if (na == 5) {
      fprintf(stderr, "fourbit gen: --arch: more than 5 archs\n");
      return 2;
    }
    snprintf(archv[na], sizeof archv[na], "%.*s", (int)l, s);
    if (!fb_arch_known(archv[na])) {
      fprintf(stderr, "fourbit gen: --arch: unknown arch '%s' (%s)\n", archv[na], FB_ARCHS);
      return 2;
    }
    ++na;
    s += l + (s[l] == ',');
  }
  if (!na) {
    fprintf(stderr, "fourbit gen: --arch: empty list\n");
    return 2;
  }
  fb_recipe *r = NULL;
  if (fb_recipe_load(argv[optind], &r) != FB_OK) {
    fprintf(stderr, "fourbit gen: %s\n", fb_errmsg());
    return 2;
  }
  /* OUT must be a folder we can write into before anything compiles (not a failure per kernel afterwards) */
  struct stat ost;
  if (mkdir(out, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "fourbit gen: --out %s: %s\n", out, strerror(errno));
    fb_recipe_free(r);
    return 2;
  }
  if (stat(out, &ost) != 0 || !S_ISDIR(ost.st_mode) || access(out, W_OK | X_OK) != 0) {
    fprintf(stderr, "fourbit gen: --out %s: %s\n", out, stat(out, &ost) != 0 ? strerror(errno)
                    : !S_ISDIR(ost.st_mode) ? "not a folder" : strerror(errno));
    fb_recipe_free(r);
    return 2;
  }
  int cap = 256, n = 0, rc = 0, skipped = 0, pruned_total = 0, matched = 0;
  job *jobs_v = calloc((size_t)cap, sizeof *jobs_v);
  fb_str notice = {0};
  for (int a = 0; a < na && jobs_v; ++a) {
    fb_plan *p = NULL;
    if (fb_plan_resolve(r, archv[a], &p) != FB_OK) {
      fprintf(stderr, "fourbit gen: %s\n", fb_errmsg());
      rc = 1;
      break;
    }
    for (int k = 0; k < p->nkernels; ++k) {
      const fb_kernel_spec *ks = &p->kernels[k];
      if (only && !strstr(ks->name, only)) continue;
      ++matched;
      const char *why;
      if (!fb_gen_template(ks, &why)) {
        fb_str_printf(&notice, "  %-52s %s\n", ks->name, why);
        ++skipped;
        continue;
      }
      const fb_tune_family *fam = NULL;
      for (int f = 0; f < r->nfamilies; ++f)
        if (!strcmp(r->families[f].family, ks->family)) fam = &r->families[f];
      fb_variant *vs = NULL;
      int nv = 0, pruned = 0;
      char pwhy[256];
      if ((!fam && !fb_gen_fixed(ks)) || fb_gen_variants(ks, fam, &vs, &nv, &pruned, pwhy, sizeof pwhy) != FB_OK) {
        if (fam || fb_gen_fixed(ks)) fprintf(stderr, "fourbit gen: %s\n", fb_errmsg());
        else fprintf(stderr, "fourbit gen: %s: the recipe has no tune family %s\n", ks->name, ks->family);
        rc = 1;
        continue;
      }
      pruned_total += pruned;
      if (pruned) printf("%s: %d variants pruned (%s)\n", ks->name, pruned, pwhy);
      for (int v = 0; v < nv; ++v) {
        if (n == cap) {
          job *nj = realloc(jobs_v, sizeof *jobs_v * (size_t)(cap *= 2));
          if (!nj) break;
          jobs_v = nj;
        }
        job *j = &jobs_v[n];
        memset(j, 0, sizeof *j);
        j->spec = *ks;
        j->var = vs[v];
        snprintf(j->arch, sizeof j->arch, "%s", archv[a]);
        if (fb_gen_source(ks, &vs[v], r->path, p->sha256, &j->src) != FB_OK) {
          fprintf(stderr, "fourbit gen: %s\n", fb_errmsg());
          rc = 1;
          continue;
        }
        ++n;
      }
      free(vs);
    }
    fb_plan_free(p);
  }
  if (!jobs_v) {
    fprintf(stderr, "fourbit gen: out of memory (%zu bytes for the compile jobs)\n", sizeof *jobs_v * (size_t)cap);
    fb_recipe_free(r);
    return 1;
  }
  if (only && !matched && rc == 0) {
    fprintf(stderr, "fourbit gen: --only %s: no kernel of %s's plan (%s) matches\n", only, argv[optind], archs);
    free(notice.buf);
    free(jobs_v);
    fb_recipe_free(r);
    return 2;
  }
  pool pl = {.jobs = jobs_v, .n = n, .out = out, .tty = isatty(2)};
  if (cache_dir && fb_cache_open(cache_dir, &pl.cache) != FB_OK) {
    fprintf(stderr, "fourbit gen: --cache: %s\n", fb_errmsg());
    for (int i = 0; i < n; ++i) free(jobs_v[i].src);
    free(jobs_v);
    fb_recipe_free(r);
    return 2;
  }
  pthread_mutex_init(&pl.mu, NULL);
  int nt = (int)(jobs < (unsigned long long)n ? jobs : (unsigned long long)(n ? n : 1));
  pthread_t th[1024];
  for (int t = 0; t < nt; ++t) pthread_create(&th[t], NULL, worker, &pl);
  for (int t = 0; t < nt; ++t) pthread_join(th[t], NULL);
  if (pl.tty) fprintf(stderr, "\r%40s\r", "");
  double *ms = calloc((size_t)(n ? n : 1), sizeof *ms);
  int ok = 0, spilled = 0, hits = 0, stored = 0, unstored = 0, dhits = 0, nc = 0; /* nc: compiled here, ms[0 .. nc) */
  printf("%-64s %-8s %8s %5s %6s\n", "kernel", "arch", "compile", "regs", "spill");
  for (int i = 0; i < n; ++i) {
    job *j = &jobs_v[i];
    if (j->st != FB_OK) {
      fprintf(stderr, "fourbit gen: %s\n", j->err);
      rc = 1;
      continue;
    }
    if (pl.cache && !j->cached && fb_cache_readonly(pl.cache)) {
      ++unstored; /* a read-only cache: its cubins were used, the new ones are not kept (said once, below) */
    } else if (pl.cache && !j->cached) {
      if (fb_cache_put_kernel(pl.cache, j->key, j->src, j->cubin.cubin, j->cubin.size) != FB_OK) {
        fprintf(stderr, "fourbit gen: --cache: %s\n", fb_errmsg());
        rc = 1;
      } else {
        ++stored;
      }
    }
    hits += j->cached;
    int regs, spill;
    resources(j->cubin.log, &regs, &spill);
    spilled += spill > 0;
    char ext[32];
    snprintf(ext, sizeof ext, ".%s.cubin", j->arch);
    if (write_file(out, j->var.name, ".cu", j->src, strlen(j->src)) ||
        write_file(out, j->var.name, ext, j->cubin.cubin, j->cubin.size)) {
      rc = 1;
      continue;
    }
    if (j->cached) {
      printf("%-64s %-8s %9s %5s %6s\n", j->var.name, j->arch, "cached", "-", "-");
      ++ok;
      continue;
    }
    if (!j->cubin.ptxas) { /* the driver's compute cache answered: no compile, no ptxas report */
      printf("%-64s %-8s %6.0f ms %5s %6s  (driver cache)\n", j->var.name, j->arch, j->cubin.ms, "-", "-");
      ++ok, ++dhits;
      continue;
    }
    ms[nc++] = j->cubin.ms, ++ok;
    printf("%-64s %-8s %6.0f ms %5d %6d\n", j->var.name, j->arch, j->cubin.ms, regs, spill);
  }
  qsort(ms, (size_t)nc, sizeof *ms, cmp_double);
  printf("\n%d of %d variants written to %s: %d compiled (median %.0f ms, max %.0f ms, %d threads), %d from the cache%s\n",
         ok, n, out, nc, nc ? ms[nc / 2] : 0.0, nc ? ms[nc - 1] : 0.0, nt, hits,
         pruned_total ? "; illegal variants pruned as listed" : "");
  if (dhits)
    printf("%d of them NVRTC took from the CUDA driver's compute cache (no ptxas report, so no registers or spills, and "
           "their time is a lookup, left out of the median); CUDA_CACHE_DISABLE=1 compiles every one\n", dhits);
  if (pl.cache) printf("cache %s: %d kernels stored\n", cache_dir, stored);
  if (unstored)
    printf("note: cache %s is read-only (no write access): %d compiled kernels were not stored in it\n", cache_dir, unstored);
  fb_cache_close(pl.cache);
  if (spilled) printf("warning: %d variants spill registers to local memory (see the spill column)\n", spilled);
  if (skipped) printf("%d kernels have no template yet and were not generated:\n%s", skipped, notice.buf);
  for (int a = 0; a < na; ++a) /* what these kernels are: compiled here; run on a GPU of that arch only for sm_90a */
    printf("%s: GEMM families %s; %s\n", archv[a], fb_arch_families(archv[a]),
           !strcmp(archv[a], "sm_90a") ? "run and checked on an H200 (make test-gpu)"
           : !strcmp(archv[a], "sm_100a") || !strcmp(archv[a], "sm_103a")
               ? "compiled and inspected here, never run on such a GPU (none is at hand); the tcgen05 GEMMs run only under "
                 "fourbit's functional model of the instructions (tests/test_gemm_sm100.cpp)"
               : "compiled and inspected here, never run on such a GPU (none is at hand)");
  for (int i = 0; i < n; ++i) free(jobs_v[i].src), fb_cubin_free(&jobs_v[i].cubin);
  free(jobs_v);
  free(ms);
  free(notice.buf);
  fb_recipe_free(r);
  return rc;
}
