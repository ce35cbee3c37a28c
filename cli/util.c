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

/* The file a path names once its symbolic links are followed, whether or not that file exists yet (a link to a
 * new file names the file to create). 0 ok; -1 with errno (ELOOP past 40 links, ENAMETOOLONG). */
static int resolve_links(const char *path, char *out, size_t cap) {
  if (strlen(path) >= cap) return errno = ENAMETOOLONG, -1;
  strcpy(out, path);
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st;
    if (lstat(out, &st) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISLNK(st.st_mode)) return 0;
    char link[4096];
    ssize_t n = readlink(out, link, sizeof link - 1);
    if (n < 0) return -1;
    link[n] = 0;
    if (link[0] == '/') {
      if ((size_t)n >= cap) return errno = ENAMETOOLONG, -1;
      memcpy(out, link, (size_t)n + 1);
    } else { /* relative to the link's own folder */
      char *slash = strrchr(out, '/');
      size_t keep = slash ? (size_t)(slash - out) + 1 : 0;
      if (keep + (size_t)n >= cap) return errno = ENAMETOOLONG, -1;
      memcpy(out + keep, link, (size_t)n + 1);
    }
  }
  return errno = ELOOP, -1;
}

static int write_all(int fd, const void *const *parts, const size_t *sizes, int n) {
  for (int i = 0; i < n; ++i) {
    const char *p = parts[i];
    size_t left = sizes[i];
    while (left) {
      ssize_t w = write(fd, p, left);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return -1;
      if (w == 0) return errno = EIO, -1;
      p += w;
      left -= (size_t)w;
    }
  }
  return 0;
}

/* OUT as a character device or a FIFO (/dev/null, /dev/stdout on a terminal or a pipe): written into directly,
 * never replaced. No O_CREAT or O_TRUNC: the device stays what it is. */
static int write_device(const char *cmd, const char *path, const void *const *parts, const size_t *sizes, int n) {
  int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
    fprintf(stderr, "fourbit %s: %s: cannot open for writing: %s\n", cmd, path, fd < 0 ? strerror(errno) : "it changed");
    if (fd >= 0) close(fd);
    return 2;
  }
  int bad = write_all(fd, parts, sizes, n);
  if (bad) fprintf(stderr, "fourbit %s: %s: write failed: %s\n", cmd, path, strerror(errno));
  if (close(fd) != 0 && !bad && errno != EINTR) {
    fprintf(stderr, "fourbit %s: %s: write failed: %s\n", cmd, path, strerror(errno));
    bad = 1;
  }
  return bad ? 1 : 0;
}

int fb_cli_write_atomic(const char *cmd, const char *path, const void *const *parts, const size_t *sizes, int n) {
  struct stat st;
  if (stat(path, &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)))
    return write_device(cmd, path, parts, sizes, n);
  char target[4096];
  if (resolve_links(path, target, sizeof target) != 0) {
    fprintf(stderr, "fourbit %s: %s: cannot write: %s\n", cmd, path, strerror(errno));
    return 2;
  }
  mode_t mode = 0644;
  if (stat(target, &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      fprintf(stderr, "fourbit %s: %s: is a directory\n", cmd, path);
      return 2;
    }
    if (!S_ISREG(st.st_mode)) {
      fprintf(stderr, "fourbit %s: %s: not a regular file, character device or FIFO: not replaced\n", cmd, path);
      return 2;
    }
    if (access(target, W_OK) != 0) {
      fprintf(stderr, "fourbit %s: %s: cannot write: %s\n", cmd, path, strerror(errno));
      return 2;
    }
    mode = st.st_mode & 07777;
  } else if (errno != ENOENT) {
    fprintf(stderr, "fourbit %s: %s: cannot write: %s\n", cmd, path, strerror(errno));
    return 2;
  }
  /* the temporary file beside the target (a symbolic link stays a link, to the new file) */
  size_t len = strlen(target);
  char *tmp = malloc(len + 16);
  if (!tmp) {
    fprintf(stderr, "fourbit %s: %s: out of memory (%zu bytes for the temporary file's name)\n", cmd, path, len + 16);
    return 1;
  }
  snprintf(tmp, len + 16, "%s.tmp.XXXXXX", target);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    int e = errno;
    fprintf(stderr, "fourbit %s: %s: cannot create a temporary file beside it: %s\n", cmd, path, strerror(e));
    free(tmp);
    return e == EACCES || e == EPERM || e == ENOENT || e == ENOTDIR || e == EROFS || e == ELOOP || e == ENAMETOOLONG ? 2 : 1;
  }
  if (write_all(fd, parts, sizes, n) != 0 || fchmod(fd, mode) != 0 || fsync(fd) != 0) goto fail;
  if (close(fd) != 0) {
    fd = -1;
    goto fail;
  }
  fd = -1;
  if (rename(tmp, target) != 0) goto fail;
  free(tmp);
  return 0;
fail:
  fprintf(stderr, "fourbit %s: %s: write failed: %s\n", cmd, path, strerror(errno));
  if (fd >= 0) close(fd);
  unlink(tmp);
  free(tmp);
  return 1;
}
