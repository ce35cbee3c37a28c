/* main.c — the fourbit command line: one binary, subcommands. The only place that exits.
 *   fourbit plan RECIPE         a recipe's resolved plan (cli/plan.c)
 *   fourbit gen RECIPE          kernel sources and cubins (cli/gen.c)
 *   fourbit quant|dequant ...   the numerics library on files (cli/quant.c)
 *   fourbit tune RECIPE         the autotune sweep (cli/tune.c, tuner/)
 *   fourbit cache ...           the kernel cache: ls, show, verify, export, import, gc (cli/cache.c)
 *   fourbit train RECIPE        train the runtime's MoE model with a recipe's numerics (cli/train.c)
 *   fourbit compare RECIPE...   train several recipes alike; loss curves and the gap to BF16 (cli/compare.c)
 *   fourbit info                what this build links and which GPU (if any) it sees
 * Exit status: 0 success, 1 failure while running, 2 bad usage or bad input. */
#include "cli.h"

#include <lauxlib.h>
#include <lmdb.h>
#include <lua.h>
#include <nvrtc.h>
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "fb_cuda.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: fourbit <command> [options]\n"
          "\n"
          "commands:\n"
          "  plan      load and validate a Lua recipe; print its per-layer plan and kernels (see 'fourbit plan --help')\n"
          "  gen       generate and compile (NVRTC) every kernel variant a recipe needs (see 'fourbit gen --help')\n"
          "  quant     quantize a float32 matrix file to NVFP4, MXFP8 or S2F6 (see 'fourbit quant --help')\n"
          "  dequant   the inverse of quant, to float32\n"
          "  tune      autotune every kernel variant of a recipe on this GPU; winners to the cache (see 'fourbit tune --help')\n"
          "  cache     the LMDB cache of cubins and tuned winners: ls, show, verify, export, import, gc (see 'fourbit cache --help')\n"
          "  train     train the runtime's MoE model with a recipe's numerics (see 'fourbit train --help')\n"
          "  compare   train several recipes alike: loss curves, and the gap to BF16 as compute (see 'fourbit compare --help')\n"
          "  info      versions of what this build links, and the GPUs the CUDA driver sees\n"
          "  help      this text\n"
          "\n"
          "'fourbit <command> --help' describes each command. Exit status: 0 ok, 1 failure, 2 bad usage or input.\n");
}

/* the arch line of a GPU or of --arch: its GEMM families and what has run of it */
static void arch_line(const char *arch) {
  printf("         arch %s: GEMM families %s (the tuner checks and times the variants of each; %s)\n", arch, fb_arch_families(arch),
         !strcmp(arch, "sm_90a") ? "both run on an H200" : "compiled here, never run on such a GPU");
}

static int cmd_info(int argc, char **argv) {
  const char *arch = NULL;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: fourbit info [--arch A]\n\nPrints the fourbit, Lua, LMDB and NVRTC versions this binary was built with, the\n"
             "NCCL version found at run time (libnccl.so.2, loaded with dlopen; \"not found\" without one), and the\n"
             "GPUs the CUDA driver (libcuda.so.1, loaded with dlopen) reports, each with its arch and the GEMM families\n"
             "fourbit tries there (wgmma on sm_90a; the portable mma.sync family on every arch from sm_89).\n"
             "  --arch A   also the families of arch A (%s), with or without such a GPU\n"
             "Exit status 0 even when there is no driver: the line says so.\n", FB_ARCHS);
      return 0;
    }
    if (!strcmp(argv[i], "--arch") && i + 1 < argc) {
      arch = argv[++i];
      if (!fb_arch_known(arch)) {
        fprintf(stderr, "fourbit info: --arch: unknown arch '%s' (%s)\n", arch, FB_ARCHS);
        return 2;
      }
      continue;
    }
    fprintf(stderr, "fourbit info: unknown argument '%s' (see --help)\n", argv[i]);
    return 2;
  }
  int major = 0, minor = 0, nccl = 0;
  lua_State *L = luaL_newstate();
  printf("fourbit  %s\n", FB_VERSION);
  printf("lua      %s (static)%s\n", LUA_RELEASE, L ? "" : " -- luaL_newstate failed");
  if (L) lua_close(L);
  printf("lmdb     %s (static)\n", mdb_version(NULL, NULL, NULL));
  if (nvrtcVersion(&major, &minor) == NVRTC_SUCCESS) printf("nvrtc    %d.%d\n", major, minor);
  if (fb_comm_nccl_version(&nccl) == FB_OK) printf("nccl     %d.%d.%d (libnccl.so.2, dlopen)\n", nccl / 10000, nccl / 100 % 100, nccl % 100);
  else printf("nccl     not found (%s): expert parallelism on GPUs (--gpus) needs it\n", fb_errmsg());
  if (arch) printf("--arch   %s\n", arch), arch_line(arch);
  int n = 0;
  if (fb_cuda_device_count(&n) != FB_OK) {
    printf("cuda     %s\n", fb_errmsg());
    return 0;
  }
  for (int d = 0; d < n; ++d) {
    fb_cuda_device_info info;
    if (fb_cuda_device_info_get(d, &info) != FB_OK) {
      fprintf(stderr, "fourbit info: %s\n", fb_errmsg());
      return 1;
    }
    printf("gpu %d    %s sm_%d%d, %d SMs, %.1f GiB, driver %d.%d\n", d, info.name, info.cc_major, info.cc_minor,
           info.sm_count, (double)info.mem_bytes / (1u << 30), info.driver_version / 1000,
           info.driver_version % 1000 / 10);
    const char *ga = fb_arch_of_cc(info.cc_major, info.cc_minor);
    if (ga) arch_line(ga);
    else printf("         no GEMM family for sm_%d%d: fourbit generates for %s\n", info.cc_major, info.cc_minor, FB_ARCHS);
  }
  if (n == 0) printf("cuda     driver loaded, no devices\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "plan")) return fb_cli_plan(argc - 1, argv + 1);
  if (!strcmp(cmd, "gen")) return fb_cli_gen(argc - 1, argv + 1);
  if (!strcmp(cmd, "cache")) return fb_cli_cache(argc - 1, argv + 1);
  if (!strcmp(cmd, "tune") || !strcmp(cmd, "__compile")) return fb_cli_tune(argc - 1, argv + 1);
  if (!strcmp(cmd, "train")) return fb_cli_train(argc - 1, argv + 1);
  if (!strcmp(cmd, "compare")) return fb_cli_compare(argc - 1, argv + 1);
  if (!strcmp(cmd, "quant")) return fb_cli_quant(argc - 1, argv + 1, 0);
  if (!strcmp(cmd, "dequant")) return fb_cli_quant(argc - 1, argv + 1, 1);
  if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
  if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(cmd, "--version")) {
    printf("fourbit %s\n", FB_VERSION);
    return 0;
  }
  fprintf(stderr, "fourbit: unknown command '%s'\n\n", cmd);
  usage(stderr);
  return 2;
}
