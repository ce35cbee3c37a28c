/* driver.cpp — the CUDA driver as tests/gpu/test_kernels uses it, on the CPU: build/emu/test_kernels is
 * tests/gpu/test_kernels.c + tuner/check/harness.c linked against this file instead of base/cuda_driver.c. Device
 * memory is host memory; fb_kernel_load compiles the unit's generated source (the same text NVRTC compiled) with
 * the host C++ compiler against fb_emu.h into a shared library and loads it; fb_kernel_launch runs it under the warp
 * emulator (emu_core.h). So the GPU test harness — its inputs, buffer sizes, launches and comparisons — and the
 * kernels' logic are checked where no GPU is at hand. Slow (a coroutine switch per warp collective): use
 * --quick and --only. Run from the repository root (it compiles against templates/ and tests/emu/).
 * Not emulated: timing, the memory model between CTAs, device-only instructions (fb_formats.h's software E4M3
 * path stands in for cvt.rn.satfinite). FB_EMU_MEMO=DIR (make test sets it): a kernel whose compile command and
 * preprocessed source an earlier compile had is not compiled again; that compile's library is copied from DIR. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <map>
#include <string>

extern "C" {
#include "harness.h"
}
#include "emu_core.h"
#include "tc_model.h" /* the functional model of the Blackwell instructions: the tcgen05 GEMMs run under it */
extern "C" {
#include "fb_gemm.h"
}

namespace {
std::map<std::string, void *> loaded;

/* harness.c compiles its own FB_IN_F32 quantizer when the run's specs hold none: rebuild its source here */
char *own_quantizer_source(const char *name) {
  static const char pre[] = "quant_nvfp4_f32_for_";
  if (strncmp(name, pre, sizeof pre - 1)) return NULL;
  for (int s = 0; s < nspecs; ++s) {
    size_t l = strlen(specs[s].k.name);
    if (strncmp(name + sizeof pre - 1, specs[s].k.name, l) || strcmp(name + sizeof pre - 1 + l, "_r16_t256")) continue;
    fb_kernel_spec q = specs[s].k;
    q.op = FB_OP_QUANT, q.in_f32 = 1;
    fb_variant v;
    memset(&v, 0, sizeof v);
    snprintf(v.tmpl, sizeof v.tmpl, "quant_nvfp4.cuh");
    v.nparams = 2, v.value[0] = 16, v.value[1] = 256;
    snprintf(v.param[0], sizeof v.param[0], "rows"), snprintf(v.param[1], sizeof v.param[1], "threads");
    snprintf(v.name, sizeof v.name, "%s", name);
    char *src = NULL;
    if (fb_gen_source(&q, &v, "-", "-", &src) == FB_OK) return src;
  }
  return NULL;
}

char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  std::string b;
  char chunk[65536];
  size_t k;
  while ((k = fread(chunk, 1, sizeof chunk, f)) > 0) b.append(chunk, k);
  fclose(f);
  char *out = (char *)malloc(b.size() + 1);
  if (!out) return NULL;
  memcpy(out, b.data(), b.size());
  out[b.size()] = 0, *n = b.size();
  return out;
}

/* 0 when FROM was copied to TO whole */
int copy_file(const char *from, const char *to) {
  size_t n = 0;
  char *b = read_file(from, &n);
  if (!b) return 1;
  FILE *o = fopen(to, "wb");
  int ok = o && fwrite(b, 1, n, o) == n;
  if (o) ok &= fclose(o) == 0;
  free(b);
  if (!ok) unlink(to);
  return !ok;
}

void *compile_kernel(const char *name) {
  const char *src = NULL;
  for (int i = 0; i < nunits && !src; ++i)
    if (!strcmp(units[i].v.name, name)) src = units[i].src;
  char *own = src ? NULL : own_quantizer_source(name);
  if (own) src = own;
  if (!src) { fprintf(stderr, "emu: no generated source for %s\n", name); exit(1); }
  char dir[] = "/tmp/fb_emuk_XXXXXX";
  if (!mkdtemp(dir)) { perror("emu: mkdtemp"); exit(1); }
  std::string f = std::string(dir) + "/k.cpp", so = std::string(dir) + "/k.so";
  FILE *o = fopen(f.c_str(), "w");
  if (!o) { perror("emu"); exit(1); }
  fputs(src, o);
  fclose(o);
  free(own);
  const char *cxx = getenv("CXX") && *getenv("CXX") ? getenv("CXX") : "g++";
  std::string flags = std::string(cxx) + " -std=c++17 -O1 -fPIC -shared -ffp-contract=off -w -Wno-psabi -fsanitize=undefined "
                      "-fno-sanitize-recover=all -DFBEMU_KERNEL -include tests/emu/fb_emu.h -Itemplates";
  /* a kernel for sm_100a / sm_103a is built as one: templates/fb_cvt.h's conversion wrappers call their models */
  if (strstr(name, "_sm100a")) flags += " -DFB_EMU_SM=100";
  else if (strstr(name, "_sm103a")) flags += " -DFB_EMU_SM=103";
  std::string cmd = flags + " -o " + so + " " + f;
  /* make test's memo (FB_EMU_MEMO=DIR: the tuner's sweeps, whose replacement workers load the same kernels again):
     the library of an earlier compile of the same command and preprocessed source is copied in; a new one goes to
     DIR, written aside and renamed */
  const char *memo = getenv("FB_EMU_MEMO");
  std::string kept;
  if (memo && *memo) {
    std::string ii = std::string(dir) + "/k.ii";
    size_t n = 0;
    char *pp = system((flags + " -E -P -o " + ii + " " + f).c_str()) ? NULL : read_file(ii.c_str(), &n);
    unlink(ii.c_str());
    if (pp) {
      std::string in = flags + '\n' + std::string(pp, n);
      char hex[65];
      fb_sha256_hex(in.data(), in.size(), hex);
      free(pp);
      kept = std::string(memo) + "/" + hex + ".emu.so";
    }
  }
  if (kept.empty() || copy_file(kept.c_str(), so.c_str())) {
    if (system(cmd.c_str())) { fprintf(stderr, "emu: compiling %s failed: %s\n", name, cmd.c_str()); exit(1); }
    std::string tmp = kept + ".tmp." + std::to_string(getpid());
    if (!kept.empty() && copy_file(so.c_str(), tmp.c_str()) == 0 && rename(tmp.c_str(), kept.c_str())) unlink(tmp.c_str());
  }
  void *h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "emu: %s\n", dlerror()); exit(1); }
  fbemu_api **tab = (fbemu_api **)dlsym(h, "fbemu_table");
  void *fn = dlsym(h, name);
  if (!tab || !fn) { fprintf(stderr, "emu: %s: symbols missing\n", name); exit(1); }
  *tab = &fbemu::api;
  unlink(f.c_str()), unlink(so.c_str()), rmdir(dir); /* the mapping stays */
  return fn;
}

CUresult e_alloc(CUdeviceptr *p, size_t n) {
  void *m = malloc(n + 64);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = (CUdeviceptr)(uintptr_t)m;
  return CUDA_SUCCESS;
}
CUresult e_free(CUdeviceptr p) { free((void *)(uintptr_t)p); return CUDA_SUCCESS; }
CUresult e_htod(CUdeviceptr d, const void *h, size_t n) { memcpy((void *)(uintptr_t)d, h, n); return CUDA_SUCCESS; }
CUresult e_dtoh(void *h, CUdeviceptr d, size_t n) { memcpy(h, (const void *)(uintptr_t)d, n); return CUDA_SUCCESS; }
CUresult e_dtod(CUdeviceptr d, CUdeviceptr s, size_t n) { memmove((void *)(uintptr_t)d, (const void *)(uintptr_t)s, n); return CUDA_SUCCESS; }
CUresult e_memset(CUdeviceptr d, unsigned char v, size_t n) { memset((void *)(uintptr_t)d, v, n); return CUDA_SUCCESS; }
CUresult e_sync(void) { return CUDA_SUCCESS; }
CUresult e_errstr(CUresult r, const char **m) { (void)r; *m = "(emulated driver)"; return CUDA_SUCCESS; }
} // namespace

extern "C" {
fb_cu_api fb_cu;
const char *fb_cu_errstr(int r) { (void)r; return "(emulated driver)"; }
fb_status fb_cuda_load(void) { return FB_OK; }
fb_status fb_cuda_device_count(int *n) { *n = 1; return FB_OK; }
int fb_cuda_emulated(void) { return 1; }
/* compute capability 0.0 (the tuner plans sm_90a then), or FB_EMU_CC=MAJOR.MINOR: 10.0 / 10.3 plan sm_100a / sm_103a,
   whose tcgen05 GEMMs run under the functional model */
fb_status fb_cuda_device_info_get(int ordinal, fb_cuda_device_info *info) {
  (void)ordinal;
  memset(info, 0, sizeof *info);
  snprintf(info->name, sizeof info->name, "warp emulator (tests/emu)");
  info->sm_count = 1;
  const char *cc = getenv("FB_EMU_CC");
  if (cc && sscanf(cc, "%d.%d", &info->cc_major, &info->cc_minor) != 2) {
    fprintf(stderr, "emu: FB_EMU_CC=%s: not MAJOR.MINOR\n", cc);
    exit(2);
  }
  if (info->cc_major == 10 && info->cc_minor == 3) fbemu::tc::set_arch(103);
  return FB_OK;
}
fb_status fb_cuda_use_device(int ordinal) {
  (void)ordinal;
  fb_cu.MemAlloc = e_alloc, fb_cu.MemFree = e_free, fb_cu.MemcpyHtoD = e_htod, fb_cu.MemcpyDtoH = e_dtoh;
  fb_cu.MemcpyDtoD = e_dtod, fb_cu.MemsetD8 = e_memset, fb_cu.CtxSynchronize = e_sync, fb_cu.GetErrorString = e_errstr;
  fb_cu.TensorMapEncodeTiled = fbemu::tc::encode_tmap_cu; /* the model's TMA reads the maps runtime/gemm_host.c encodes */
  return FB_OK;
}
/* A GEMM (fb_kp_gemm): the tcgen05 family's run under the functional model (tc::launch: its protocol errors are
   reported and end the run); the wgmma and mma.sync families are not emulated. */
fb_status fb_kernel_launch_cluster(const fb_kernel *k, unsigned gx, unsigned gy, unsigned threads, unsigned cluster, unsigned smem,
                                   const void *params, size_t size) {
  if (size != sizeof(fb_kp_gemm)) return fb_kernel_launch(k, gx, gy, threads, params, size);
  fb_kp_gemm p;
  memcpy(&p, params, size);
  void (*fn)(fb_kp_gemm) = (void (*)(fb_kp_gemm))(void *)k->fn;
  if (const char *err = fbemu::tc::launch(gx, gy, threads, cluster ? cluster : 1, smem, [fn, p] { fn(p); })) {
    fprintf(stderr, "emu: under the functional model: %s\n", err);
    exit(1);
  }
  return FB_OK;
}
fb_status fb_kernel_launch_smem(const fb_kernel *k, unsigned gx, unsigned gy, unsigned threads, unsigned smem, const void *params,
                                size_t size) {
  return fb_kernel_launch_cluster(k, gx, gy, threads, 1, smem, params, size);
}
fb_status fb_kernel_load(const void *cubin, const char *name, fb_kernel *k) {
  (void)cubin;
  auto it = loaded.find(name);
  void *fn = it != loaded.end() ? it->second : (loaded[name] = compile_kernel(name));
  k->mod = NULL;
  k->fn = (CUfunction)fn;
  return FB_OK;
}
void fb_kernel_unload(fb_kernel *k) { k->fn = NULL; }
fb_status fb_kernel_launch(const fb_kernel *k, unsigned gx, unsigned gy, unsigned threads, const void *params, size_t size) {
  const char *err;
  if (size == sizeof(fb_kp_moe)) {
    fb_kp_moe p;
    memcpy(&p, params, size);
    void (*fn)(fb_kp_moe) = (void (*)(fb_kp_moe))(void *)k->fn;
    err = fbemu::run_grid(gx, gy, threads, [fn, p] { fn(p); });
  } else if (size == sizeof(fb_kp_mem)) {
    fb_kp_mem p;
    memcpy(&p, params, size);
    void (*fn)(fb_kp_mem) = (void (*)(fb_kp_mem))(void *)k->fn;
    err = fbemu::run_grid(gx, gy, threads, [fn, p] { fn(p); });
  } else {
    fprintf(stderr, "emu: a parameter block of %zu bytes is neither fb_kp_mem nor fb_kp_moe\n", size);
    exit(1);
  }
  if (err) { fprintf(stderr, "emu: %s\n", err); exit(1); }
  return FB_OK;
}
}
