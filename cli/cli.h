/* cli.h — subcommands of the fourbit binary and the helpers they share. */
#ifndef FB_CLI_H
#define FB_CLI_H
#include "fourbit.h"
#include <stdio.h>

int fb_cli_quant(int argc, char **argv, int dequant);
int fb_cli_plan(int argc, char **argv);
int fb_cli_gen(int argc, char **argv);
int fb_cli_cache(int argc, char **argv);
int fb_cli_tune(int argc, char **argv);

/* Parse a decimal unsigned integer in [lo, hi]; 0 on success, -1 (message printed) otherwise. */
int fb_cli_parse_u64(const char *cmd, const char *flag, const char *s, unsigned long long lo,
                     unsigned long long hi, unsigned long long *out);
/* The argument getopt_long just refused (after it returned '?' with opterr 0): "--bogus", "--rows" (no value), or
 * the whole cluster "-xy" for an unknown short option in it. */
const char *fb_cli_badopt(int argc, char **argv);
/* Read a whole regular file that must be exactly `expect` bytes. 0 ok; -1 with a message naming path (missing,
 * not a regular file -- a FIFO is refused without waiting for a writer --, wrong size). *buf is malloc'd. */
int fb_cli_read_exact(const char *cmd, const char *path, size_t expect, const char *what, void **buf);
/* Write `n` parts to path whole or not at all: a temporary file beside the file path names (its symbolic links
 * followed: a link stays a link), fsync, rename; the file's mode is kept. A character device or FIFO (/dev/null,
 * /dev/stdout) is written into directly and never replaced; a folder or any other kind of file is refused.
 * 0 ok; 2 OUT cannot be written (a folder, no permission, no such folder, ...); 1 failure while writing
 * (no space, I/O); a message naming path on both. */
int fb_cli_write_atomic(const char *cmd, const char *path, const void *const *parts, const size_t *sizes, int n);
/* fourbit train / fourbit compare (cli/train.c, cli/compare.c): shared options and the train loop. */
typedef struct {
  const char *device, *log, *checkpoint, *resume, *cache, *out, *baseline;
  int steps, batch, preset_batch, seq_len, seed_set, ckpt_every, stop_at, warmup, succ, print_every, quiet, gpus;
  int require_tuned;
  const char *pick; /* --pick FAMILY: the GEMMs from one family (mma, wgmma) */
  int ranks, verbose, exact;  /* train: processes (expert parallelism), payload lines, FP32 mode */
  struct fb_comm *comm;       /* train: this process's rank (NULL: one rank) */
  uint32_t seed;
  fb_model over; /* 0 = the recipe's */
  float lr, min_lr, wd, clip, aux;
} fb_cli_train_cfg;
typedef struct {
  char name[64];
  double *loss; /* steps entries (NaN where not run), malloc'd */
  int steps, done;
  double floor, final, seconds;
} fb_cli_train_result;
/* 0 ok, 1 --help printed, 2 bad usage (message printed). Positional arguments start at optind. */
int fb_cli_train_parse(const char *cmd, int argc, char **argv, fb_cli_train_cfg *c, void (*usage)(FILE *));
/* Train one recipe; the exit status of the command. */
int fb_cli_train_one(const char *cmd, const fb_cli_train_cfg *c, const char *recipe, fb_cli_train_result *res);
int fb_cli_train(int argc, char **argv);
int fb_cli_compare(int argc, char **argv);
#endif
