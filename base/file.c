/* file.c — writing a whole file safely, for every command and the checkpoint (fb_file_write, fb_file_resolve).
 *
 * OUT is written whole or not at all, and never turned into something else:
 *   - a character device or a FIFO (/dev/null, a terminal, a pipe, /dev/stdout) is opened and written into: no
 *     O_CREAT, no O_TRUNC, no rename, so the device stays a device (as root, `quant ... /dev/null` once replaced the
 *     machine's /dev/null);
 *   - a regular file, or a name that does not exist yet, is written to a temporary file beside it, synced and
 *     renamed over it: a reader sees the old file or the new one, a process killed midway leaves the old one;
 *   - symbolic links are followed to the file they name (existing or not), and the temporary file goes beside that
 *     file, so the link stays a link;
 *   - anything else (a folder, a block device, a socket), a missing folder, an unwritable file: FB_EINVAL naming the
 *     path (the commands exit 2), nothing written. A failure while writing (a full disk): FB_EIO, the old file kept.
 * The temporary file is TARGET.tmp.<pid>.XXXXXX. While it exists, SIGINT, SIGTERM and SIGHUP remove it before they
 * end the process (only where they would end it: a handler of the caller's, such as the trainer's, is left alone,
 * and an ignored signal stays ignored); a write to TARGET removes those a process no longer running left (SIGKILL,
 * a crash, a power cut). */
#include "fb_error.h"
#include "fourbit/base.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fb_file_resolve(const char *path, char *out, size_t cap) {
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

/* The temporary file being written, for the signal handler: one guarded write at a time (guard_mu), so that two
 * threads writing never save each other's handler as the one to restore. */
static pthread_mutex_t guard_mu = PTHREAD_MUTEX_INITIALIZER;
static char *volatile tmp_now;
static struct sigaction old_act[3];
static int guarded[3];
static const int TMP_SIGS[3] = {SIGINT, SIGTERM, SIGHUP};
static void tmp_on_signal(int sig) {
  char *t = tmp_now;
  if (t) unlink(t);
  for (int i = 0; i < 3; ++i)
    if (TMP_SIGS[i] == sig) sigaction(sig, &old_act[i], NULL);
  raise(sig);
}
static void tmp_guard(char *tmp) {
  pthread_mutex_lock(&guard_mu);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = tmp_on_signal;
  sigemptyset(&sa.sa_mask);
  tmp_now = tmp;
  for (int i = 0; i < 3; ++i) {
    guarded[i] = sigaction(TMP_SIGS[i], NULL, &old_act[i]) == 0 && old_act[i].sa_handler == SIG_DFL;
    if (guarded[i]) sigaction(TMP_SIGS[i], &sa, NULL);
  }
}
static void tmp_unguard(void) {
  for (int i = 0; i < 3; ++i)
    if (guarded[i]) sigaction(TMP_SIGS[i], &old_act[i], NULL), guarded[i] = 0;
  tmp_now = NULL;
  pthread_mutex_unlock(&guard_mu);
}

/* Remove TARGET.tmp.<pid>.* whose process is gone. */
static void tmp_sweep(const char *target) {
  char *a = strdup(target), *b = strdup(target);
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
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* still running (or not ours to ask): left alone */
    char full[4096];
    if (snprintf(full, sizeof full, "%s/%s", dir, nm) < (int)sizeof full) unlink(full);
  }
  closedir(d);
done:
  free(a), free(b);
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

static fb_status write_device(const char *path, const void *const *parts, const size_t *sizes, int n) {
  int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
    fb_status s = FB_USERERR(FB_EINVAL, "%s: cannot open for writing: %s", path, fd < 0 ? strerror(errno) : "it changed");
    if (fd >= 0) close(fd);
    return s;
  }
  int bad = write_all(fd, parts, sizes, n);
  fb_status s = bad ? FB_USERERR(FB_EIO, "%s: write failed: %s", path, strerror(errno)) : FB_OK;
  if (close(fd) != 0 && !bad && errno != EINTR) s = FB_USERERR(FB_EIO, "%s: write failed: %s", path, strerror(errno));
  return s;
}

/* The regular file path names (links followed) into *target, its mode to keep, and a temporary file beside it
 * (*tmp, malloc'd; *fd open), the stale ones of dead processes swept first. */
static fb_status open_temp(const char *path, char *target, size_t cap, mode_t *mode, char **tmp, int *fd) {
  struct stat st;
  if (fb_file_resolve(path, target, cap) != 0) return FB_USERERR(FB_EINVAL, "%s: cannot write: %s", path, strerror(errno));
  *mode = 0644;
  if (stat(target, &st) == 0) {
    if (S_ISDIR(st.st_mode)) return FB_USERERR(FB_EINVAL, "%s: is a directory", path);
    if (!S_ISREG(st.st_mode)) return FB_USERERR(FB_EINVAL, "%s: not a regular file, character device or FIFO: not replaced", path);
    if (access(target, W_OK) != 0) return FB_USERERR(FB_EINVAL, "%s: cannot write: %s", path, strerror(errno));
    *mode = st.st_mode & 07777;
  } else if (errno != ENOENT) {
    return FB_USERERR(FB_EINVAL, "%s: cannot write: %s", path, strerror(errno));
  }
  size_t len = strlen(target) + 40;
  if (!(*tmp = malloc(len))) return FB_ERR(FB_ENOMEM, "%s: %zu bytes for the temporary file's name", path, len);
  tmp_sweep(target);
  snprintf(*tmp, len, "%s.tmp.%ld.XXXXXX", target, (long)getpid());
  if ((*fd = mkstemp(*tmp)) < 0) {
    int e = errno;
    free(*tmp), *tmp = NULL;
    int user = e == EACCES || e == EPERM || e == ENOENT || e == ENOTDIR || e == EROFS || e == ELOOP || e == ENAMETOOLONG;
    return FB_USERERR(user ? FB_EINVAL : FB_EIO, "%s: cannot create a temporary file beside it: %s", path, strerror(e));
  }
  return FB_OK;
}

fb_status fb_file_check(const char *path) {
  struct stat st;
  if (stat(path, &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) return FB_OK;
  char target[4096], *tmp;
  mode_t mode;
  int fd;
  FB_TRY(open_temp(path, target, sizeof target, &mode, &tmp, &fd));
  close(fd);
  unlink(tmp);
  free(tmp);
  return FB_OK;
}

fb_status fb_file_write(const char *path, const void *const *parts, const size_t *sizes, int n) {
  struct stat st;
  if (stat(path, &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) return write_device(path, parts, sizes, n);
  char target[4096], *tmp;
  mode_t mode;
  int fd;
  FB_TRY(open_temp(path, target, sizeof target, &mode, &tmp, &fd));
  tmp_guard(tmp);
  if (write_all(fd, parts, sizes, n) != 0 || fchmod(fd, mode) != 0 || fsync(fd) != 0) goto fail;
  if (close(fd) != 0) {
    fd = -1;
    goto fail;
  }
  fd = -1;
  if (rename(tmp, target) != 0) goto fail;
  tmp_unguard();
  free(tmp);
  return FB_OK;
fail:;
  fb_status s = FB_USERERR(FB_EIO, "%s: write failed: %s", path, strerror(errno));
  if (fd >= 0) close(fd);
  unlink(tmp);
  tmp_unguard();
  free(tmp);
  return s;
}
