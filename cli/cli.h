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
/* Read a whole file that must be exactly `expect` bytes. 0 ok; -1 with a message. *buf is malloc'd. */
int fb_cli_read_exact(const char *cmd, const char *path, size_t expect, const char *what, void **buf);
/* Write `n` parts to path atomically: a temporary file beside it, fsync, rename. Nothing partial is
 * ever left at path. 0 ok; -1 with a message. */
int fb_cli_write_atomic(const char *cmd, const char *path, const void *const *parts, const size_t *sizes, int n);
/* fourbit train / fourbit compare (cli/train.c, cli/compare.c): shared options and the train loop. */
typedef struct {
  const char *device, *log, *checkpoint, *resume, *cache, *out, *baseline;
  int steps, batch, preset_batch, seq_len, seed_set, ckpt_every, stop_at, warmup, succ, print_every, quiet, gpus;
  int require_tuned;
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
