/* util.c — number parsing and whole-file I/O for the subcommands.
 *   fb_cli_read_exact    a whole regular file of a known size (a FIFO, device or folder is refused, never waited on)
 *   fb_cli_write_atomic  OUT whole or not at all: temp + rename for a regular file (through its symbolic links);
 *                        a character device or FIFO is written into, never replaced */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
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

/* Is a a cluster of short options ("-xy") holding c? */
static int short_cluster_has(const char *a, int c) {
  return a && a[0] == '-' && a[1] && a[1] != '-' && c > 0 && c < 256 && strchr(a + 1, c);
}

const char *fb_cli_badopt(int argc, char **argv) {
  /* getopt leaves optind on a cluster of short options until its last letter is read: "-xy" failing on x is
     argv[optind]; failing on its last letter (or any long option), optind has moved past it */
  int i = optind;
  if (optopt && i < argc && !short_cluster_has(i > 0 ? argv[i - 1] : NULL, optopt) && short_cluster_has(argv[i], optopt))
    return argv[i];
  return i > 0 && i <= argc ? argv[i - 1] : "?";
}

int fb_cli_read_exact(const char *cmd, const char *path, size_t expect, const char *what, void **buf) {
  *buf = NULL;
  /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; fstat refuses it before any read */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    fprintf(stderr, "fourbit %s: %s: cannot open: %s\n", cmd, path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    fprintf(stderr, "fourbit %s: %s: not a regular file\n", cmd, path);
    close(fd);
    return -1;
  }
  int fl = fcntl(fd, F_GETFL);
  FILE *f = fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0 ? NULL : fdopen(fd, "rb");
  if (!f) {
    fprintf(stderr, "fourbit %s: %s: cannot open: %s\n", cmd, path, strerror(errno));
    close(fd);
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
  fb_status s = fb_file_write(path, parts, sizes, n); /* base/file.c: what OUT may be */
  if (s == FB_OK) return 0;
  fprintf(stderr, "fourbit %s: %s\n", cmd, fb_errmsg());
  return s == FB_EINVAL ? 2 : 1;
}
