/* test_nvrtc_philox.c — templates/fb_philox.h compiles as device code under NVRTC.
 *
 * A small kernel that includes "fb_philox.h" (handed to NVRTC as an in-memory header, read from
 * templates/fb_philox.h relative to the repo root, where `make test` runs) and calls both entry
 * points is compiled to a cubin for sm_90a, sm_100a and sm_103a. Each compile must succeed with an
 * empty or warning-free log and give a non-empty ELF cubin that holds the kernel's symbol.
 * No GPU is needed: NVRTC compiles without one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>
#include <cmocka.h>
#include <nvrtc.h>

#define HEADER_PATH "templates/fb_philox.h"

static const char kKernel[] =
    "#include \"fb_philox.h\"\n"
    "extern \"C\" __global__ void fb_philox_probe(const unsigned *ctr, const unsigned *key,\n"
    "                                            unsigned *out, unsigned char *sr,\n"
    "                                            unsigned long long n) {\n"
    "  unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (t >= n) return;\n"
    "  fb_u32 c[4] = {ctr[4 * t], ctr[4 * t + 1], ctr[4 * t + 2], ctr[4 * t + 3]};\n"
    "  fb_u32 k[2] = {key[2 * t], key[2 * t + 1]};\n"
    "  fb_u32 o[4];\n"
    "  fb_philox4x32_10(c, k, o);\n"
    "  for (int w = 0; w < 4; ++w) out[4 * t + w] = o[w];\n"
    "  sr[t] = fb_philox_sr_byte(k[0], k[1], c[0], t * 0x100000001ull);\n"
    "}\n";

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap + 1);
  if (!buf) { fclose(f); return NULL; }
  for (;;) {
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (n < cap) break;
    char *nb = realloc(buf, 2 * cap + 1);
    if (!nb) { free(buf); fclose(f); return NULL; }
    buf = nb;
    cap *= 2;
  }
  fclose(f);
  buf[n] = '\0';
  *len = n;
  return buf;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Does the log hold anything but whitespace? (NVRTC leaves it empty on a clean compile.) */
static int log_nonblank(const char *s) {
  for (; *s; ++s)
    if (*s != ' ' && *s != '\n' && *s != '\r' && *s != '\t') return 1;
  return 0;
}

static int arch_supported(int sm) {
  int n = 0;
  if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) return -1;
  int *a = malloc(sizeof(int) * (size_t)n);
  if (!a) return -1;
  int found = 0;
  if (nvrtcGetSupportedArchs(a) == NVRTC_SUCCESS)
    for (int i = 0; i < n; ++i) found |= a[i] == sm;
  free(a);
  return found;
}

static void compile_for(const char *arch, int sm) {
  size_t hlen = 0;
  char *hdr = read_file(HEADER_PATH, &hlen);
  if (!hdr)
    fail_msg("cannot read %s: %s (run this test from the repo root, as `make test` does)\n", HEADER_PATH,
             strerror(errno));
  if (arch_supported(sm) == 0) {
    free(hdr);
    fail_msg("this NVRTC does not list %s among its supported architectures\n", arch);
  }

  const char *headers[1] = {hdr};
  const char *names[1] = {"fb_philox.h"};
  nvrtcProgram prog;
  nvrtcResult r = nvrtcCreateProgram(&prog, kKernel, "fb_philox_probe.cu", 1, headers, names);
  if (r != NVRTC_SUCCESS) {
    free(hdr);
    fail_msg("nvrtcCreateProgram: %s\n", nvrtcGetErrorString(r));
  }
  char archopt[64];
  snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
  const char *opts[] = {archopt, "--std=c++17"};
  double t0 = now_s();
  nvrtcResult cr = nvrtcCompileProgram(prog, (int)(sizeof opts / sizeof opts[0]), opts);
  double dt = now_s() - t0;

  size_t loglen = 0;
  char *log = NULL;
  if (nvrtcGetProgramLogSize(prog, &loglen) == NVRTC_SUCCESS && loglen > 0) {
    log = malloc(loglen + 1);
    if (log && nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS) log[loglen] = '\0';
    else if (log) log[0] = '\0';
  }
  const char *logs = log ? log : "";

  size_t cubinlen = 0;
  char *cubin = NULL;
  if (cr == NVRTC_SUCCESS && nvrtcGetCUBINSize(prog, &cubinlen) == NVRTC_SUCCESS && cubinlen > 0) {
    cubin = malloc(cubinlen);
    if (cubin && nvrtcGetCUBIN(prog, cubin) != NVRTC_SUCCESS) cubinlen = 0;
  }
  nvrtcDestroyProgram(&prog);
  free(hdr);

  int elf = cubin && cubinlen >= 20 && memcmp(cubin, "\177ELF", 4) == 0;
  int has_sym = 0;
  if (cubin) {
    const char *sym = "fb_philox_probe";
    size_t sl = strlen(sym);
    for (size_t i = 0; i + sl <= cubinlen && !has_sym; ++i) has_sym = memcmp(cubin + i, sym, sl) == 0;
  }
  unsigned machine = elf ? (unsigned)(uint8_t)cubin[18] | ((unsigned)(uint8_t)cubin[19] << 8) : 0;
  printf("  %-8s compile %.3f s, cubin %zu bytes (ELF %s, e_machine %u, kernel symbol %s), log %zu chars\n",
         arch, dt, cubinlen, elf ? "yes" : "no", machine, has_sym ? "found" : "missing",
         log_nonblank(logs) ? strlen(logs) : (size_t)0);
  int warn = log_nonblank(logs);
  if (warn) fprintf(stderr, "  NVRTC log for %s:\n%s\n", arch, logs);
  free(cubin);
  free(log);

  if (cr != NVRTC_SUCCESS) fail_msg("%s: nvrtcCompileProgram: %s (log above)\n", arch, nvrtcGetErrorString(cr));
  if (warn) fail_msg("%s: compiled, but the NVRTC log is not empty (printed above)\n", arch);
  if (cubinlen == 0) fail_msg("%s: empty cubin\n", arch);
  if (!elf) fail_msg("%s: the cubin is not an ELF image\n", arch);
  if (machine != 190) fail_msg("%s: cubin e_machine %u, expected 190 (EM_CUDA)\n", arch, machine);
  if (!has_sym) fail_msg("%s: kernel symbol fb_philox_probe not in the cubin\n", arch);
}

static void test_sm90a(void **state) { (void)state; compile_for("sm_90a", 90); }
static void test_sm100a(void **state) { (void)state; compile_for("sm_100a", 100); }
static void test_sm103a(void **state) { (void)state; compile_for("sm_103a", 103); }

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  printf("NVRTC %d.%d: compiling a kernel that includes %s\n", major, minor, HEADER_PATH);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sm90a),
      cmocka_unit_test(test_sm100a),
      cmocka_unit_test(test_sm103a),
  };
  return cmocka_run_group_tests_name("nvrtc_philox", tests, NULL, NULL);
}
