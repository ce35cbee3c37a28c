/* fb_embed.h — the templates/ files compiled into the library (build/gen/embedded.c, by mk/embed.c). */
#ifndef FB_EMBED_H
#define FB_EMBED_H
#include <stddef.h>
typedef struct {
  const char *name; /* base name, e.g. "fb_philox.h" */
  const char *text;
  size_t len;
} fb_embedded_file;
extern const fb_embedded_file fb_embedded[]; /* ends with a {0} entry */
#endif
