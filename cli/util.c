/* util.c — number parsing and whole-file I/O for the subcommands (atomic writes: temp + rename). */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
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

int fb_cli_write_atomic(const char *cmd, const char *path, const void *const *parts, const size_t *sizes, int n) {
  size_t len = strlen(path);
  char *tmp = malloc(len + 16);
  if (!tmp) {
    fprintf(stderr, "fourbit %s: out of memory\n", cmd);
    return -1;
  }
  snprintf(tmp, len + 16, "%s.tmp.XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    fprintf(stderr, "fourbit %s: %s: cannot create a temporary file beside it: %s\n", cmd, path, strerror(errno));
    free(tmp);
    return -1;
  }
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
  free(tmp);
  return 0;
fail:
  fprintf(stderr, "fourbit %s: %s: write failed: %s\n", cmd, path, strerror(errno));
  if (fd >= 0) close(fd);
  unlink(tmp);
  free(tmp);
  return -1;
}
