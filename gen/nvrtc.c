/* nvrtc.c — compile generated source with NVRTC for the archs of FB_ARCHS (sm_89 .. sm_120a). The templates/ headers
 * are handed over from memory (the embedded copies), so nothing depends on the working directory.
 * Options: --fmad=false, because the CPU reference contracts nothing (docs/numerics.md says where fmaf is
 * meant, and the templates call fmaf there); --ptxas-options=-v puts registers, shared memory and spills
 * into the log. Entry points: fb_nvrtc_compile(), fb_cubin_free(). NVRTC is thread-safe. */
#include "fb_embed.h"
#include "fb_error.h"
#include "fourbit.h"

#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The options besides --gpu-architecture, in one place: they are part of a cubin's cache key. */
static const char *const OPTIONS[] = {"--std=c++17", "--fmad=false", "--ptxas-options=-v", "-lineinfo"};
#define NOPT (int)(sizeof OPTIONS / sizeof OPTIONS[0])

const char *fb_nvrtc_options(void) { return "--std=c++17 --fmad=false --ptxas-options=-v -lineinfo"; }

fb_status fb_nvrtc_compile(const char *name, const char *src, const char *arch, fb_cubin *out) {
  memset(out, 0, sizeof *out);
  if (!fb_arch_known(arch)) return FB_ERR(FB_EINVAL, "%s: unknown arch %s (%s)", name, arch, FB_ARCHS);
  int nh = 0;
  while (fb_embedded[nh].name) ++nh;
  const char *hdr[64], *hname[64];
  for (int i = 0; i < nh && i < 64; ++i) hdr[i] = fb_embedded[i].text, hname[i] = fb_embedded[i].name;
  char archopt[64];
  snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
  const char *opts[1 + NOPT] = {archopt};
  for (int i = 0; i < NOPT; ++i) opts[1 + i] = OPTIONS[i];
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  nvrtcProgram prog = NULL;
  fb_status rc = FB_OK;
  char *log = NULL;
  NVRTC_CHECK(nvrtcCreateProgram(&prog, src, name, nh, hdr, hname), NULL);
  nvrtcResult cr = nvrtcCompileProgram(prog, (int)(sizeof opts / sizeof opts[0]), opts);
  size_t loglen = 0;
  if (nvrtcGetProgramLogSize(prog, &loglen) == NVRTC_SUCCESS && (log = malloc(loglen + 1))) {
    if (nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = 0;
    log[loglen] = 0;
  }
  if (cr != NVRTC_SUCCESS) {
    rc = FB_ERR(FB_ENVRTC, "%s (%s): nvrtcCompileProgram: %s\n--- NVRTC log ---\n%s", name, arch, nvrtcGetErrorString(cr),
                log ? log : "");
    goto done;
  }
  size_t n = 0;
  NVRTC_CHECK_GOTO(nvrtcGetCUBINSize(prog, &n), &prog, done);
  out->cubin = malloc(n ? n : 1);
  if (!out->cubin) {
    rc = FB_ERR(FB_ENOMEM, "%s: cubin", name);
    goto done;
  }
  NVRTC_CHECK_GOTO(nvrtcGetCUBIN(prog, out->cubin), &prog, done);
  out->size = n;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  out->ptxas = log && strstr(log, "ptxas info") != NULL;
  out->ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  out->log = log;
  log = NULL;
done:
  nvrtcDestroyProgram(&prog);
  free(log);
  if (rc != FB_OK) fb_cubin_free(out);
  return rc;
}

void fb_cubin_free(fb_cubin *c) {
  if (!c) return;
  free(c->cubin);
  free(c->log);
  memset(c, 0, sizeof *c);
}
