/* util.c — number parsing and whole-file I/O for the subcommands (atomic writes: temp + rename).
 * The temporary file is PATH.tmp.<pid>.XXXXXX beside PATH: SIGINT, SIGTERM and SIGHUP during the write remove it
 * (then the signal does what it did), and a write to PATH removes the ones that a process no longer running left
 * (killed with SIGKILL, a crash, a power cut). */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fb_cli_parse_u64(const char *cmd, const char *flag, const char *s, unsigned long long lo,
                     unsigned long long hi, unsigned long long *out) {
  char *end = NULL;
  errno = 0;
  if (!s || !*s || *s == '-' || *s == '+') goto bad;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v < lo || v > hi) goto bad;
  *out = v;
  return 0;
bad:
  fprintf(stderr, "fourbit %s: %s: '%s' is not an integer in [%llu, %llu]\n", cmd, flag, s ? s : "", lo, hi);
  return -1;
}

int fb_cli_read_exact(const char *cmd, const char *path, size_t expect, const char *what, void **buf) {
  *buf = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "fourbit %s: %s: cannot open: %s\n", cmd, path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fprintf(stderr, "fourbit %s: %s: not a regular file\n", cmd, path);
    fclose(f);
    return -1;
  }
  if ((size_t)st.st_size != expect) {
    fprintf(stderr, "fourbit %s: %s: %lld bytes, but %s is %zu bytes\n", cmd, path, (long long)st.st_size, what,
            expect);
    fclose(f);
    return -1;
  }
  void *p = malloc(expect ? expect : 1);
  if (!p || fread(p, 1, expect, f) != expect) {
    fprintf(stderr, "fourbit %s: %s: %s\n", cmd, path, p ? "short read" : "out of memory");
    free(p);
    fclose(f);
    return -1;
  }
  fclose(f);
  *buf = p;
  return 0;
}

/* The temporary file being written, for the signal handler (one write at a time: the CLI is one thread here). */
static char *volatile tmp_now;
static struct sigaction old_act[3];
static const int TMP_SIGS[3] = {SIGINT, SIGTERM, SIGHUP};
static void tmp_on_signal(int sig) {
  char *t = tmp_now;
  if (t) unlink(t);
  for (int i = 0; i < 3; ++i)
    if (TMP_SIGS[i] == sig) sigaction(sig, &old_act[i], NULL);
  raise(sig);
}
static void tmp_guard(char *tmp) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = tmp_on_signal;
  sigemptyset(&sa.sa_mask);
  tmp_now = tmp;
  for (int i = 0; i < 3; ++i) {
    sigaction(TMP_SIGS[i], NULL, &old_act[i]);
    if (old_act[i].sa_handler != SIG_IGN) sigaction(TMP_SIGS[i], &sa, NULL); /* ignored (nohup) stays ignored */
  }
}
static void tmp_unguard(void) {
  for (int i = 0; i < 3; ++i) sigaction(TMP_SIGS[i], &old_act[i], NULL);
  tmp_now = NULL;
}

/* Remove PATH.tmp.<pid>.* whose process is gone. */
static void tmp_sweep(const char *path) {
  char *a = strdup(path), *b = strdup(path);
  if (!a || !b) goto done;
  const char *dir = dirname(a), *base = basename(b);
  size_t bl = strlen(base);
  DIR *d = opendir(dir);
  if (!d) goto done;
  for (struct dirent *e; (e = readdir(d));) {
    const char *nm = e->d_name;
    if (strncmp(nm, base, bl) || strncmp(nm + bl, ".tmp.", 5)) continue;
    char *end;
    long pid = strtol(nm + bl + 5, &end, 10);
    if (end == nm + bl + 5 || *end != '.' || pid <= 0 || pid == (long)getpid()) continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* still running (or not ours to ask): leave it */
    char full[4096];
    snprintf(full, sizeof full, "%s/%s", dir, nm);
    unlink(full);
  }
  closedir(d);
done:
  free(a), free(b);
}

int fb_cli_write_atomic(const char *cmd, const char *path, const void *const *parts, const size_t *sizes, int n) {
  size_t len = strlen(path);
  char *tmp = malloc(len + 40);
  if (!tmp) {
    fprintf(stderr, "fourbit %s: out of memory\n", cmd);
    return -1;
  }
  tmp_sweep(path);
  snprintf(tmp, len + 40, "%s.tmp.%ld.XXXXXX", path, (long)getpid());
  int fd = mkstemp(tmp);
  if (fd < 0) {
    fprintf(stderr, "fourbit %s: %s: cannot create a temporary file beside it: %s\n", cmd, path, strerror(errno));
    free(tmp);
    return -1;
  }
  tmp_guard(tmp);
  for (int i = 0; i < n; ++i) {
    const char *p = parts[i];
    size_t left = sizes[i];
    while (left) {
      ssize_t w = write(fd, p, left);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) goto fail;
      p += w;
      left -= (size_t)w;
    }
  }
  if (fchmod(fd, 0644) != 0 || fsync(fd) != 0) goto fail;
  if (close(fd) != 0) {
    fd = -1;
    goto fail;
  }
  fd = -1;
  if (rename(tmp, path) != 0) goto fail;
  tmp_unguard();
  free(tmp);
  return 0;
fail:
  fprintf(stderr, "fourbit %s: %s: write failed: %s\n", cmd, path, strerror(errno));
  if (fd >= 0) close(fd);
  unlink(tmp);
  tmp_unguard();
  free(tmp);
  return -1;
}
