/* error.c — the per-thread error message behind fb_errmsg(), and the NVRTC failure helper. */
#include "fb_error.h"
#include <nvrtc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char errbuf[8192];

const char *fb_errmsg(void) { return errbuf; }
void fb_clearerr(void) { errbuf[0] = 0; }

const char *fb_status_name(fb_status s) {
  static const char *names[] = {"FB_OK",   "FB_EINVAL", "FB_ENOMEM",    "FB_ECUDA",
                                "FB_ENVRTC", "FB_ELMDB", "FB_ENCCL",    "FB_ELUA",
                                "FB_ENOTFOUND", "FB_EVARIANT", "FB_ENUMERIC", "FB_EIO"};
  return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "FB_E?";
}

fb_status fb_seterr(fb_status s, const char *file, int line, const char *fmt, ...) {
  int n = file ? snprintf(errbuf, sizeof errbuf, "%s:%d: ", file, line) : 0;
  if (n < 0 || (size_t)n >= sizeof errbuf) n = 0;
  /* every FB_ENOMEM says so, whatever its caller names (what ran out, how many bytes) */
  if (s == FB_ENOMEM && strncmp(fmt, "out of memory", 13) != 0) {
    int m = snprintf(errbuf + n, sizeof errbuf - (size_t)n, "out of memory: ");
    if (m > 0 && (size_t)(n + m) < sizeof errbuf) n += m;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(errbuf + n, sizeof errbuf - (size_t)n, fmt, ap);
  va_end(ap);
  return s;
}

fb_status fb_nvrtc_fail(const char *file, int line, const char *call, int result, void *prog) {
  fb_seterr(FB_ENVRTC, file, line, "%s: %s", call, nvrtcGetErrorString((nvrtcResult)result));
  if (prog) {
    size_t len = 0;
    nvrtcProgram p = *(nvrtcProgram *)prog;
    if (p && nvrtcGetProgramLogSize(p, &len) == NVRTC_SUCCESS && len > 1) {
      char *log = malloc(len);
      if (log && nvrtcGetProgramLog(p, log) == NVRTC_SUCCESS) {
        size_t used = strlen(errbuf);
        snprintf(errbuf + used, sizeof errbuf - used, "\n--- NVRTC log ---\n%s", log);
      }
      free(log);
    }
  }
  return FB_ENVRTC;
}
