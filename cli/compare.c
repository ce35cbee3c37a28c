/* compare.c — `fourbit compare RECIPE... [options]`: train each recipe with the same model, steps, batch and
 * seed (so the same data, initialization and schedule), then write the loss curves (CSV, and a PNG through
 * gnuplot when it is installed) and a table of each recipe's final loss gap to the baseline (bf16) expressed
 * as compute.
 *
 * Compute efficiency. The baseline's loss curve is fitted with L(s) = E + A s^-alpha (least squares over the
 * steps after warm-up: for each alpha on a grid of 0.01 in [0.01, 3] the best E and A are a linear fit, and the
 * alpha of the lowest squared error is kept). A recipe's gap d is the mean of (its loss - the baseline's loss)
 * over the last 10% of the steps (at least 10), step by step: both read the same batches, so the data's noise
 * cancels. Its final loss on the baseline's curve is l = L(N) + d, and s* = (A / (l - E))^(1 / alpha) is the
 * number of steps the baseline needs to reach l (s* = N for the baseline itself).
 * Compute efficiency = s* / N (N = the steps both ran; 1 = as good as the baseline, 0.8 = the recipe's N steps
 * are worth 0.8 N baseline steps), and the extra compute the recipe needs for the baseline's loss is about
 * N / s* - 1. Steps of equal tokens are counted as equal compute: the formula measures what the numerics cost
 * in quality, not the speed of the 4-bit kernels. s* beyond N is an extrapolation of the fit, marked so. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void compare_usage(FILE *f) {
  fprintf(f,
          "usage: fourbit compare RECIPE... [--out DIR] [--baseline NAME] [the options of fourbit train]\n"
          "\n"
          "Trains every RECIPE (fourbit train --help) for the same steps, batch, seed and model (use\n"
          "--model-override small or the dimension options: the shipped recipes name an Inkling-sized model),\n"
          "then writes into DIR (default build/compare):\n"
          "  RECIPE.csv        each run's per-step log\n"
          "  losses.csv        step, then one loss column per recipe\n"
          "  loss.png          the loss curves (moving average) with the entropy floor (gnuplot; without it the\n"
          "                    command says so and writes everything else)\n"
          "  summary.txt       the table printed at the end\n"
          "The table gives each recipe's final loss, its gap to the floor and to the baseline (the recipe named\n"
          "bf16, or --baseline NAME, or the first), and that gap as compute: the baseline's curve is fitted with\n"
          "L(s) = E + A s^-alpha, s* = the steps the baseline needs to reach the recipe's final loss, compute\n"
          "efficiency = s* / steps, extra compute = steps / s* - 1 (equal tokens per step = equal compute).\n"
          "\n"
          "  --out DIR            output folder (created)\n"
          "  --baseline NAME      the recipe the others are measured against (default bf16 if present)\n"
          "  --log, --checkpoint, --resume, --stop-at are options of fourbit train only.\n"
          "  -h, --help           this text\n");
}

typedef struct {
  double E, A, alpha, rms;
  int ok;
} fit_t;

/* L(s) = E + A s^-alpha over steps [from, n) (1-based s = i + 1), NaN steps skipped. */
static fit_t fit_power(const double *loss, int from, int n) {
  fit_t best = {0, 0, 0, INFINITY, 0};
  for (int ai = 1; ai <= 300; ++ai) {
    double a = ai * 0.01, sx = 0, sy = 0, sxx = 0, sxy = 0;
    int m = 0;
    for (int i = from; i < n; ++i) {
      if (!isfinite(loss[i])) continue;
      double x = pow((double)(i + 1), -a);
      sx += x, sy += loss[i], sxx += x * x, sxy += x * loss[i], ++m;
    }
    if (m < 3) return best;
    double den = m * sxx - sx * sx;
    if (fabs(den) < 1e-300) continue;
    double A = (m * sxy - sx * sy) / den, E = (sy - A * sx) / m, sse = 0;
    for (int i = from; i < n; ++i)
      if (isfinite(loss[i])) {
        double d = loss[i] - (E + A * pow((double)(i + 1), -a));
        sse += d * d;
      }
    if (sse < best.rms) best = (fit_t){E, A, a, sse, 1};
  }
  int m = 0;
  for (int i = from; i < n; ++i) m += isfinite(loss[i]) != 0;
  best.rms = sqrt(best.rms / (m ? m : 1));
  return best;
}

static int mkdir_p(const char *dir) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", dir);
  for (char *p = buf + 1; *p; ++p)
    if (*p == '/') {
      *p = 0;
      if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
      *p = '/';
    }
  return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* s as the inside of a gnuplot single-quoted string: a quote doubled (a recipe name or --out folder with a ' in it
   would otherwise end the string, and the rest would run as gnuplot commands) */
static void gp_str(FILE *f, const char *s) {
  for (; *s; ++s) {
    if (*s == '\'') fputc('\'', f);
    if (*s != '\n' && *s != '\r') fputc(*s, f);
  }
}

static int have_gnuplot(void) {
  const char *path = getenv("PATH");
  if (!path) return 0;
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *tok = strtok(buf, ":"); tok; tok = strtok(NULL, ":")) {
    char f[4200];
    snprintf(f, sizeof f, "%s/gnuplot", tok);
    if (access(f, X_OK) == 0) return 1;
  }
  return 0;
}

int fb_cli_compare(int argc, char **argv) {
  fb_cli_train_cfg c;
  int rc = fb_cli_train_parse("compare", argc, argv, &c, compare_usage);
  if (rc) return rc == 1 ? 0 : rc;
  if (c.log || c.checkpoint || c.resume || c.stop_at) {
    fprintf(stderr, "fourbit compare: --log, --checkpoint, --resume and --stop-at are options of fourbit train\n");
    return 2;
  }
  int n = argc - optind;
  if (n < 1) {
    fprintf(stderr, "fourbit compare: expected one or more RECIPE files (see --help)\n");
    return 2;
  }
  char **paths = argv + optind;
  const char *out = c.out ? c.out : "build/compare";
  if (mkdir_p(out) != 0) {
    fprintf(stderr, "fourbit compare: --out %s: cannot create the folder: %s\n", out, strerror(errno));
    return 2;
  }
  fb_cli_train_result *res = calloc((size_t)n, sizeof *res);
  char (*logs)[1100] = calloc((size_t)n, sizeof *logs);
  if (!res || !logs) { free(res); free(logs); fprintf(stderr, "fourbit compare: out of memory\n"); return 1; }
  if (c.print_every == 1 && !c.quiet) c.print_every = c.steps / 20 > 1 ? c.steps / 20 : 1;
  for (int i = 0; i < n && rc == 0; ++i) {
    fb_cli_train_cfg ci = c;
    const char *base = strrchr(paths[i], '/');
    base = base ? base + 1 : paths[i];
    snprintf(logs[i], sizeof logs[i], "%s/%.*s.csv", out, (int)(strlen(base) > 4 ? strlen(base) - 4 : strlen(base)), base);
    ci.log = logs[i];
    if (!c.quiet) printf("== %s (%d of %d)\n", paths[i], i + 1, n);
    fflush(stdout);
    rc = fb_cli_train_one("compare", &ci, paths[i], &res[i]);
    if (rc == 0 && res[i].done < c.steps) rc = 1;
  }
  if (rc != 0) goto done;
  for (int i = 1; i < n; ++i)
    if (fabs(res[i].floor - res[0].floor) > 1e-12) {
      fprintf(stderr, "fourbit compare: %s and %s trained on different data (floors %.6f, %.6f): the vocabularies "
                      "differ; give --vocab\n", paths[0], paths[i], res[0].floor, res[i].floor);
      rc = 2;
      goto done;
    }
  int b = 0;
  const char *want = c.baseline ? c.baseline : "bf16";
  int found = 0;
  for (int i = 0; i < n; ++i)
    if (!strcmp(res[i].name, want)) b = i, found = 1;
  if (c.baseline && !found) {
    fprintf(stderr, "fourbit compare: --baseline %s: no recipe of that name among the %d compared\n", c.baseline, n);
    rc = 2;
    goto done;
  }
  int N = c.steps;

  /* losses.csv */
  char path[1200];
  snprintf(path, sizeof path, "%s/losses.csv", out);
  FILE *f = fopen(path, "w");
  if (!f) { fprintf(stderr, "fourbit compare: %s: cannot write\n", path); rc = 1; goto done; }
  fprintf(f, "step,floor");
  for (int i = 0; i < n; ++i) fprintf(f, ",%s", res[i].name);
  fprintf(f, "\n");
  for (int s = 0; s < N; ++s) {
    fprintf(f, "%d,%.9g", s + 1, res[0].floor);
    for (int i = 0; i < n; ++i) fprintf(f, ",%.9g", res[i].loss[s]);
    fprintf(f, "\n");
  }
  /* the moving average the plot shows */
  int w = N / 50 > 1 ? N / 50 : 1;
  snprintf(path, sizeof path, "%s/losses_smooth.csv", out);
  FILE *g = fopen(path, "w");
  if (fclose(f) != 0 || !g) { fprintf(stderr, "fourbit compare: %s: cannot write\n", path); if (g) fclose(g); rc = 1; goto done; }
  for (int s = 0; s < N; ++s) {
    fprintf(g, "%d,%.9g", s + 1, res[0].floor);
    for (int i = 0; i < n; ++i) {
      double m = 0;
      int lo = s - w + 1 < 0 ? 0 : s - w + 1;
      for (int k = lo; k <= s; ++k) m += res[i].loss[k];
      fprintf(g, ",%.9g", m / (s - lo + 1));
    }
    fprintf(g, "\n");
  }
  if (fclose(g) != 0) { fprintf(stderr, "fourbit compare: %s: write failed\n", path); rc = 1; goto done; }

  /* the table */
  int warm = c.warmup >= 0 ? c.warmup : (N / 10 < 100 ? N / 10 : 100);
  fit_t ft = fit_power(res[b].loss, warm, N);
  char *tab = NULL;
  size_t tlen = 0;
  FILE *t = open_memstream(&tab, &tlen);
  if (!t) { fprintf(stderr, "fourbit compare: out of memory\n"); rc = 1; goto done; }
  fprintf(t, "fourbit compare: %d steps x %d tokens, seed %s, entropy floor %.4f nats/token; baseline %s\n", N,
          c.batch ? c.batch : c.preset_batch, c.seed_set ? "given" : "the recipes'", res[0].floor, res[b].name);
  if (ft.ok)
    fprintf(t, "baseline fit over steps %d..%d: L(s) = %.4f + %.4f s^-%.2f (rms residual %.4f)\n", warm + 1, N, ft.E,
            ft.A, ft.alpha, ft.rms);
  else
    fprintf(t, "baseline fit: too few steps after warm-up (%d of %d): no compute figures\n", N - warm, N);
  fprintf(t, "%-16s %10s %10s %10s %12s %11s %8s\n", "recipe", "final", "gap floor", "vs base", "base steps s*",
          "efficiency", "extra");
  int win = N / 10 > 10 ? N / 10 : (N < 10 ? N : 10);
  for (int i = 0; i < n; ++i) {
    double d = 0; /* paired by step: the runs read the same batches, so the data's noise cancels */
    for (int s = N - win; s < N; ++s) d += res[i].loss[s] - res[b].loss[s];
    d /= win;
    fprintf(t, "%-16s %10.4f %10.4f %+10.4f", res[i].name, res[i].final, res[i].final - res[i].floor, d);
    double l = ft.E + ft.A * pow((double)N, -ft.alpha) + d;
    if (ft.ok && ft.A > 0 && l > ft.E) {
      double ss = pow(ft.A / (l - ft.E), 1.0 / ft.alpha);
      double extra = 100.0 * ((double)N / ss - 1.0);
      fprintf(t, " %12.0f%s %10.3f %+7.1f%%\n", ss, ss > N + 0.5 ? "*" : " ", ss / N, fabs(extra) < 0.05 ? 0.0 : extra);
    } else {
      fprintf(t, " %12s  %10s %8s\n", "beyond fit", "-", "-");
    }
  }
  fprintf(t, "final = mean loss of the last %d steps; vs base = the mean of (loss - baseline loss) over those steps,\n"
             "step by step; s* = the steps at which the baseline's fit reaches fit(%d) + vs base; efficiency = s* / %d;\n"
             "extra = %d / s* - 1: the compute the recipe needs beyond the baseline's for the same loss, at equal\n"
             "compute per step; * = s* extrapolated past %d.\n",
          win, N, N, N, N);
  fclose(t);
  fputs(tab, stdout);
  snprintf(path, sizeof path, "%s/summary.txt", out);
  const void *parts[1] = {tab};
  size_t sizes[1] = {tlen};
  if (fb_cli_write_atomic("compare", path, parts, sizes, 1) != 0) rc = 1;
  free(tab);

  /* the plot */
  if (!have_gnuplot()) {
    printf("gnuplot not found (Debian: apt-get install gnuplot-nox): no PNG; the curves are in %s/losses.csv\n", out);
    goto done;
  }
  snprintf(path, sizeof path, "%s/loss.gp", out);
  f = fopen(path, "w");
  if (!f) { fprintf(stderr, "fourbit compare: %s: cannot write\n", path); rc = 1; goto done; }
  double ymax = res[0].floor;
  for (int i = 0; i < n; ++i)
    for (int s = 0; s < N; ++s)
      if (isfinite(res[i].loss[s]) && res[i].loss[s] > ymax) ymax = res[i].loss[s];
  fprintf(f, "set terminal pngcairo size 1000,640 noenhanced\nset output '");
  gp_str(f, out);
  fprintf(f, "/loss.png'\nset datafile separator ','\n");
  fprintf(f, "set title 'fourbit compare: %d steps, moving average over %d steps'\n", N, w);
  fprintf(f, "set xlabel 'step'\nset ylabel 'cross-entropy (nats/token)'\nset grid\nset key top right\n");
  fprintf(f, "set termoption noenhanced\nset logscale x\nset xrange [1:%d]\nset yrange [%.4f:%.4f]\n", N,
          res[0].floor - 0.1, ymax + 0.05);
  fprintf(f, "plot '");
  gp_str(f, out);
  fprintf(f, "/losses_smooth.csv' using 1:2 with lines dashtype 2 lw 2 lc rgb 'black' title 'entropy floor %.3f'",
          res[0].floor);
  for (int i = 0; i < n; ++i) {
    fprintf(f, ", '' using 1:%d with lines lw 2 title '", i + 3);
    gp_str(f, res[i].name);
    fprintf(f, " (%.3f)'", res[i].final);
  }
  fprintf(f, "\n");
  if (fclose(f) != 0) { fprintf(stderr, "fourbit compare: %s: write failed\n", path); rc = 1; goto done; }
  /* gnuplot PATH without a shell: the folder's name is an argument, never shell text */
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    execlp("gnuplot", "gnuplot", path, (char *)NULL);
    _exit(127);
  }
  int ws = 0;
  while (pid > 0 && waitpid(pid, &ws, 0) < 0 && errno == EINTR) {}
  if (pid < 0 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
    fprintf(stderr, "fourbit compare: gnuplot failed on %s/loss.gp\n", out);
    rc = 1;
  } else {
    printf("plot: %s/loss.png\n", out);
  }
done:
  for (int i = 0; i < n; ++i) free(res[i].loss);
  free(res);
  free(logs);
  return rc;
}
