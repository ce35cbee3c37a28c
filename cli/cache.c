/* cache.c — `fourbit cache ls|show NAME|verify|export FILE|import FILE|gc`: look into, check, move and trim the
 * LMDB cache (cache/cache.c) of cubins, tuned winners and trials. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static void cache_usage(FILE *f) {
  fprintf(f,
          "usage: fourbit cache <command> [--cache DIR] [options]\n"
          "\n"
          "The LMDB cache of compiled kernels (kernels), tuned winners per device and shape bucket (winners), and\n"
          "every measured candidate (trials). DIR: --cache, else $FOURBIT_CACHE, else ~/.cache/fourbit; it must\n"
          "sit on a local disk (LMDB's locks do not work on network file systems).\n"
          "\n"
          "commands:\n"
          "  ls                 counts by database and one line per winner\n"
          "  show NAME          every winner and trial whose kernel spec or key contains NAME\n"
          "  verify             check every entry (format, checksum, fingerprint, a winner's cubin); exit 1 if any is bad\n"
          "  export FILE        write the cache (or a filter of it) to one checksummed file\n"
          "  import FILE        merge an export; on a conflict the faster winner stays (printed); a corrupt file: exit 2\n"
          "  gc                 drop the cubins no winner uses\n"
          "\n"
          "'fourbit cache <command> --help' describes each. Exit status: 0 ok, 1 failure or bad entries, 2 bad usage or input.\n");
}

static const char *const HELP[] = {
    "usage: fourbit cache ls [--cache DIR] [--fingerprint ID|TEXT] [--recipe NAME]\n\n"
    "Counts of kernels, winners and trials, then one line per winner: fingerprint id, kernel spec, shape bucket,\n"
    "the chosen variant's tile tag, its median time, the speed-up over the default variant, candidates, recipe.\n",
    "usage: fourbit cache show NAME [--cache DIR]\n\n"
    "Every field of every winner whose kernel spec or key contains NAME, and its trials (fastest first, failures last).\n",
    "usage: fourbit cache verify [--cache DIR]\n\n"
    "Reads every entry of every database and checks its format version, checksum, that its value belongs to its\n"
    "key (fingerprint), and that a winner's cubin is present and good. Prints the counts by database and each bad\n"
    "entry; exit 1 if there is any.\n",
    "usage: fourbit cache export FILE [--cache DIR] [--fingerprint ID|TEXT] [--recipe NAME|SHA]\n\n"
    "Writes the good entries to FILE (versioned, sha256 at the end; written to a temporary file and renamed).\n"
    "With a filter: the winners and trials whose fingerprint (id prefix or a piece of its text, e.g. H200) and\n"
    "recipe (name or plan sha prefix) match, and the cubins those winners use.\n",
    "usage: fourbit cache import FILE [--cache DIR]\n\n"
    "Checks the whole of FILE first (a corrupt or truncated file: exit 2, nothing written), then merges it in one\n"
    "transaction. A winner present on both sides: the faster median stays, and a line says which. Trials and\n"
    "cubins already present stay.\n",
    "usage: fourbit cache gc [--cache DIR] [--dry-run]\n\n"
    "Drops the cubins in kernels that no winner uses (--dry-run: only count them).\n",
};
static const char *const CMDS[] = {"ls", "show", "verify", "export", "import", "gc"};

static const char *tag_of(const fb_winner *w) {
  size_t l = strlen(w->spec);
  return !strncmp(w->variant, w->spec, l) ? w->variant + l + (w->variant[l] == '_') : w->variant;
}

static int print_bad(const fb_cache_entry *e, void *arg) {
  (void)arg;
  printf("BAD %s/%s: %s\n", fb_cache_db_name(e->db), e->key, e->why);
  return 0;
}

typedef struct {
  const fb_cache_filter *f;
  const char *name;
  int shown;
} ls_ctx;

static int ls_winner(const fb_cache_entry *e, void *arg) {
  ls_ctx *x = arg;
  if (!e->winner) {
    printf("%-16s %s: %s\n", "BAD", e->key, e->why);
    return 0;
  }
  const fb_winner *w = e->winner;
  char id[17], fpt[512];
  fb_fingerprint_id(&w->fp, id);
  fb_fingerprint_text(&w->fp, fpt, sizeof fpt);
  if (x->f->fingerprint && *x->f->fingerprint && strncmp(id, x->f->fingerprint, strlen(x->f->fingerprint)) &&
      !strstr(fpt, x->f->fingerprint))
    return 0;
  if (x->f->recipe && *x->f->recipe && strcmp(w->recipe, x->f->recipe) && strncmp(w->recipe_sha, x->f->recipe, strlen(x->f->recipe)))
    return 0;
  if (!x->shown++)
    printf("%-16s %-48s %8s %-22s %10s %8s %5s %s\n", "fingerprint", "kernel spec", "bucket", "variant", "median ms", "speed-up",
           "cand", "recipe");
  char sp[16] = "-";
  if (w->default_ms > 0 && w->median_ms > 0) snprintf(sp, sizeof sp, "%.2fx", w->default_ms / w->median_ms);
  printf("%-16s %-48s %8lld %-22s %10.4f %8s %5d %s\n", id, w->spec, w->bucket, tag_of(w), w->median_ms, sp, w->candidates, w->recipe);
  return 0;
}

static int show_winner(const fb_cache_entry *e, void *arg) {
  ls_ctx *x = arg;
  if (!strstr(e->key, x->name) && !(e->winner && strstr(e->winner->spec, x->name))) return 0;
  ++x->shown;
  if (!e->winner) {
    printf("winners/%s: BAD: %s (not loaded)\n\n", e->key, e->why);
    return 0;
  }
  const fb_winner *w = e->winner;
  char fpt[512], kh[65], date[64];
  fb_fingerprint_text(&w->fp, fpt, sizeof fpt);
  for (int i = 0; i < 32; ++i) snprintf(kh + 2 * i, 3, "%02x", w->kernel[i]);
  time_t t = (time_t)w->date;
  struct tm tm;
  strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", gmtime_r(&t, &tm));
  printf("winners/%s\n  fingerprint   %s\n  kernel spec   %s (%s)\n  bucket        %lld tokens (measured at %lld)\n", e->key, fpt,
         w->spec, w->arch, w->bucket, w->shape);
  printf("  variant       %s\n  median        %.4f ms (spread %.4f ms, %d runs)\n  runner-up     %s (%.4f ms)\n", w->variant,
         w->median_ms, w->spread_ms, w->runs, w->runner_up[0] ? w->runner_up : "-", w->runner_up_ms);
  printf("  default       %s (%.4f ms)%s\n  candidates    %d (%d failed)\n  cubin         kernels/%s\n", w->default_variant[0] ? w->default_variant : "-",
         w->default_ms, "", w->candidates, w->failed, kh);
  printf("  recipe        %s (plan sha256 %s)\n  measured      %s on %s\n\n", w->recipe, w->recipe_sha, date, w->host);
  return 0;
}

typedef struct {
  const char *name;
  fb_trial *t;
  int n, cap;
} trials_ctx;

static int collect_trial(const fb_cache_entry *e, void *arg) {
  trials_ctx *x = arg;
  if (!strstr(e->key, x->name) && !(e->trial && strstr(e->trial->spec, x->name))) return 0;
  if (!e->trial) {
    printf("trials/%s: BAD: %s (not loaded)\n", e->key, e->why);
    return 0;
  }
  if (x->n == x->cap) {
    fb_trial *nt = realloc(x->t, sizeof *nt * (size_t)(x->cap = x->cap ? 2 * x->cap : 64));
    if (!nt) return 1;
    x->t = nt;
  }
  x->t[x->n++] = *e->trial;
  return 0;
}

static int cmp_trial(const void *a, const void *b) {
  const fb_trial *x = a, *y = b;
  int c = strcmp(x->spec, y->spec);
  if (c) return c;
  if (x->bucket != y->bucket) return x->bucket < y->bucket ? -1 : 1;
  if ((x->status == FB_TRIAL_OK) != (y->status == FB_TRIAL_OK)) return x->status == FB_TRIAL_OK ? -1 : 1;
  return x->median_ms < y->median_ms ? -1 : x->median_ms > y->median_ms;
}

static void print_note(const char *msg, void *arg) {
  (void)arg;
  printf("%s\n", msg);
}

int fb_cli_cache(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    cache_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  int cmd = -1;
  for (int i = 0; i < 6; ++i)
    if (!strcmp(argv[1], CMDS[i])) cmd = i;
  if (cmd < 0) {
    fprintf(stderr, "fourbit cache: unknown command '%s' (ls, show, verify, export, import, gc; see --help)\n", argv[1]);
    return 2;
  }
  static const struct option opts[] = {{"cache", required_argument, 0, 'c'}, {"fingerprint", required_argument, 0, 'f'},
                                       {"recipe", required_argument, 0, 'r'}, {"dry-run", no_argument, 0, 'n'},
                                       {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
  char dirbuf[512];
  const char *dir = NULL;
  fb_cache_filter filt = {0};
  int dry = 0, c;
  optind = 0;
  opterr = 0;
  argc -= 1, argv += 1;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'c': dir = optarg; break;
    case 'f': filt.fingerprint = optarg; break;
    case 'r': filt.recipe = optarg; break;
    case 'n': dry = 1; break;
    case 'h': fputs(HELP[cmd], stdout); return 0;
    default:
      fprintf(stderr, "fourbit cache %s: unknown or incomplete option '%s' (see --help)\n", CMDS[cmd], argv[optind - 1]);
      return 2;
    }
  }
  int want_arg = cmd == 1 || cmd == 3 || cmd == 4;
  if (argc - optind != want_arg) {
    fprintf(stderr, "fourbit cache %s: %s (see --help)\n", CMDS[cmd], want_arg ? "expected one argument" : "takes no argument");
    return 2;
  }
  if ((filt.fingerprint || filt.recipe) && cmd != 0 && cmd != 3) {
    fprintf(stderr, "fourbit cache %s: --fingerprint and --recipe go with ls and export\n", CMDS[cmd]);
    return 2;
  }
  if (dry && cmd != 5) {
    fprintf(stderr, "fourbit cache %s: --dry-run goes with gc\n", CMDS[cmd]);
    return 2;
  }
  const char *arg = want_arg ? argv[optind] : NULL;
  if (!dir) dir = fb_cache_default_dir(dirbuf, sizeof dirbuf);
  /* import reads and checks its file before the cache is even opened */
  void *file = NULL;
  size_t fsize = 0;
  if (cmd == 4) {
    struct stat st;
    errno = 0;
    if (stat(arg, &st) != 0 || !S_ISREG(st.st_mode)) {
      fprintf(stderr, "fourbit cache import: %s: %s\n", arg, errno ? strerror(errno) : "not a regular file");
      return 2;
    }
    if (fb_cli_read_exact("cache import", arg, (size_t)st.st_size, "the file", &file)) return 2;
    fsize = (size_t)st.st_size;
  }
  struct stat st;
  if (cmd != 3 && cmd != 4 && stat(dir, &st) != 0) { /* only export's and import's target may be new */
    fprintf(stderr, "fourbit cache %s: %s: no cache there (%s)\n", CMDS[cmd], dir, strerror(errno));
    free(file);
    return 2;
  }
  fb_cache *cache = NULL;
  /* ls, show, verify and export only read: a read-only open, so that a cache without write access reads too */
  int reads = cmd <= 3 && stat(dir, &st) == 0;
  if ((reads ? fb_cache_open_readonly(dir, &cache) : fb_cache_open(dir, &cache)) != FB_OK) {
    fprintf(stderr, "fourbit cache %s: %s\n", CMDS[cmd], fb_errmsg());
    free(file);
    return 2;
  }
  int rc = 0;
  switch (cmd) {
  case 0: { /* ls */
    fb_cache_counts n;
    if (fb_cache_verify(cache, &n, NULL, NULL) != FB_OK) { rc = 1; break; }
    printf("cache %s: %ld kernels, %ld winners, %ld trials", dir, n.entries[0], n.entries[1], n.entries[2]);
    long bad = n.bad[0] + n.bad[1] + n.bad[2];
    if (bad) printf(" (%ld bad: see fourbit cache verify)", bad);
    printf("\n");
    ls_ctx x = {&filt, NULL, 0};
    if (fb_cache_iterate(cache, FB_DB_WINNERS, ls_winner, &x) != FB_OK) rc = 1;
    break;
  }
  case 1: { /* show */
    ls_ctx x = {&filt, arg, 0};
    trials_ctx t = {arg, NULL, 0, 0};
    if (fb_cache_iterate(cache, FB_DB_WINNERS, show_winner, &x) != FB_OK ||
        fb_cache_iterate(cache, FB_DB_TRIALS, collect_trial, &t) != FB_OK) {
      rc = 1;
      break;
    }
    qsort(t.t, (size_t)t.n, sizeof *t.t, cmp_trial);
    if (t.n) printf("%-14s %-64s %8s %-15s %10s %10s  %s\n", "trials", "variant", "bucket", "status", "median ms", "spread", "message");
    for (int i = 0; i < t.n; ++i) {
      char id[17];
      fb_fingerprint_id(&t.t[i].fp, id);
      printf("%-14.14s %-64s %8lld %-15s %10.4f %10.4f  %s\n", id, t.t[i].variant, t.t[i].bucket, fb_trial_status_name(t.t[i].status),
             t.t[i].median_ms, t.t[i].spread_ms, t.t[i].message);
    }
    free(t.t);
    if (!x.shown && !t.n) {
      fprintf(stderr, "fourbit cache show: nothing in %s matches '%s'\n", dir, arg);
      rc = 1;
    }
    break;
  }
  case 2: { /* verify */
    fb_cache_counts n;
    if (fb_cache_verify(cache, &n, print_bad, NULL) != FB_OK) { rc = 1; break; }
    long bad = 0;
    for (int d = 0; d < 3; ++d) {
      printf("%-8s %6ld entries, %ld bad\n", fb_cache_db_name((fb_cache_db)d), n.entries[d], n.bad[d]);
      bad += n.bad[d];
    }
    printf("verify %s: %s\n", dir, bad ? "BAD ENTRIES (listed above; they are never loaded)" : "clean");
    rc = bad ? 1 : 0;
    break;
  }
  case 3: { /* export */
    void *data;
    size_t size;
    fb_cache_counts n;
    if (fb_cache_export(cache, &filt, &data, &size, &n) != FB_OK) { rc = 1; break; }
    const void *parts[1] = {data};
    size_t sizes[1] = {size};
    int w = fb_cli_write_atomic("cache export", arg, parts, sizes, 1);
    if (w) rc = w; /* 2: an OUT that cannot be written (named), 1: a failed write */
    else printf("exported %ld kernels, %ld winners, %ld trials to %s (%zu bytes)%s\n", n.entries[0], n.entries[1], n.entries[2], arg, size,
                n.bad[0] + n.bad[1] + n.bad[2] ? "; bad entries were left out" : "");
    free(data);
    break;
  }
  case 4: { /* import */
    fb_cache_counts added;
    int kept;
    fb_status s = fb_cache_import(cache, file, fsize, arg, print_note, NULL, &added, &kept);
    if (s != FB_OK) {
      fprintf(stderr, "fourbit cache import: %s\n", fb_errmsg());
      rc = s == FB_EINVAL ? 2 : 1;
      break;
    }
    printf("imported %s into %s: %ld kernels, %ld winners, %ld trials written; %d local winners kept (faster)\n", arg, dir,
           added.entries[0], added.entries[1], added.entries[2], kept);
    break;
  }
  case 5: { /* gc */
    long dropped, kept;
    if (fb_cache_gc(cache, &dropped, &kept, dry) != FB_OK) { rc = 1; break; }
    printf("gc %s: %ld cubins %s no winner uses, %ld kept\n", dir, dropped, dry ? "would be dropped:" : "dropped:", kept);
    break;
  }
  }
  if (rc == 1 && fb_errmsg()[0] && cmd != 2 && cmd != 1) fprintf(stderr, "fourbit cache %s: %s\n", CMDS[cmd], fb_errmsg());
  free(file);
  fb_cache_close(cache);
  return rc;
}
