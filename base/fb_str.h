/* fb_str.h — a growing string for emitting text (plans, JSON, generated source). Zero-initialise;
 * after an allocation failure `oom` is set and further appends are dropped. buf is malloc'd. */
#ifndef FB_STR_H
#define FB_STR_H
#include <stddef.h>
typedef struct {
  char *buf;
  size_t len, cap;
  int oom;
} fb_str;
/* Returns the number of characters appended (0 after a failure). */
int fb_str_printf(fb_str *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#endif
