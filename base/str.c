/* str.c — fb_str: appendable text buffer (see fb_str.h). */
#include "fb_str.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int fb_str_printf(fb_str *s, const char *fmt, ...) {
  if (s->oom) return 0;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = s->cap - s->len;
    int n = vsnprintf(s->buf ? s->buf + s->len : NULL, s->buf ? room : 0, fmt, ap);
    va_end(ap);
    if (n < 0) return 0;
    if (s->buf && (size_t)n < room) {
      s->len += (size_t)n;
      return n;
    }
    size_t nc = s->cap ? s->cap : 256;
    while (nc < s->len + (size_t)n + 1) nc *= 2;
    char *nb = realloc(s->buf, nc);
    if (!nb) {
      s->oom = 1;
      return 0;
    }
    s->buf = nb, s->cap = nc;
  }
}
