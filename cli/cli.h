/* cli.h — subcommands of the fourbit binary and the helpers they share. */
#ifndef FB_CLI_H
#define FB_CLI_H
#include "fourbit.h"
#include <stdio.h>

int fb_cli_quant(int argc, char **argv, int dequant);
int fb_cli_plan(int argc, char **argv);
int fb_cli_gen(int argc, char **argv);
int fb_cli_cache(int argc, char **argv);

/* Parse a decimal unsigned integer in [lo, hi]; 0 on success, -1 (message printed) otherwise. */
int fb_cli_parse_u64(const char *cmd, const char *flag, const char *s, unsigned long long lo,
                     unsigned long long hi, unsigned long long *out);
/* Read a whole file that must be exactly `expect` bytes. 0 ok; -1 with a message. *buf is malloc'd. */
int fb_cli_read_exact(const char *cmd, const char *path, size_t expect, const char *what, void **buf);
/* Write `n` parts to path atomically: a temporary file beside it, fsync, rename. Nothing partial is
 * ever left at path. 0 ok; -1 with a message. */
int fb_cli_write_atomic(const char *cmd, const char *path, const void *const *parts, const size_t *sizes, int n);
#endif
