/* abi.c — build/libfourbit.so's C ABI (include/fourbit/libfourbit.h) over the library: recipes and plans
 * (recipes/loader.c, gen/plan.c), the cache (cache/cache.c), the host quantizers exactly as `fourbit quant` calls them
 * (cli/quant.c: same options, same refusals, same bytes), and the GPU expert layer (runtime/experts_gpu.c) on the
 * caller's device pointers and stream. Only fourbit_* symbols leave the library (its version script, lib/libfourbit.map).
 *
 * Entry points: the header's. Streams: the layer queues its work on the caller's stream itself (stream_enter sets
 * it as the thread's stream, which experts_gpu.c's launches, copies and memsets all take). */
#include "fourbit/libfourbit.h"

#include "experts_gpu.h"
#include "fb_cuda.h"
#include "fb_error.h"
#include "fb_kparams.h"
#include "fb_str.h"
#include "fourbit.h"
#include "fourbit_train.h"
#include "comm.h"
#include "../tuner/tune.h"

#include <dlfcn.h>
#include <lauxlib.h>
#include <lmdb.h>
#include <lua.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fourbit_abi_version(void) { return FOURBIT_ABI_VERSION; }
const char *fourbit_version(void) { return FB_VERSION; }
const char *fourbit_errmsg(void) { return fb_errmsg(); }
const char *fourbit_status_name(int status) { return fb_status_name((fb_status)status); }
void fourbit_free(void *p) { free(p); }

/* a struct from the caller: its size field must cover what this library reads */
static fb_status check_size(const void *p, uint32_t have, size_t want, const char *what) {
  if (!p) return FB_USERERR(FB_EINVAL, "%s: NULL", what);
  if (have < want) return FB_USERERR(FB_EINVAL, "%s: size %u, this library needs %zu (set size = sizeof the struct)", what, have, want);
  return FB_OK;
}

static void jstr(fb_str *s, const char *v) {
  fb_str_printf(s, "\"");
  for (const unsigned char *p = (const unsigned char *)v; *p; ++p) {
    if (*p == '"' || *p == '\\') fb_str_printf(s, "\\%c", *p);
    else if (*p < 0x20) fb_str_printf(s, "\\u%04x", *p);
    else fb_str_printf(s, "%c", *p);
  }
  fb_str_printf(s, "\"");
}
static fb_status jdone(fb_str *s, char **out) {
  if (s->oom) {
    free(s->buf);
    return FB_ERR(FB_ENOMEM, "fourbit: out of memory for a JSON answer");
  }
  *out = s->buf;
  return FB_OK;
}

int fourbit_info_json(char **out) {
  if (!out) return FB_USERERR(FB_EINVAL, "fourbit_info_json: out is NULL");
  *out = NULL;
  fb_str s = {0};
  int major = 0, minor = 0, nccl = 0, n = 0;
  fb_str_printf(&s, "{\"version\": \"%s\", \"abi\": %d, \"lua\": \"%s\", \"lmdb\": ", FB_VERSION, FOURBIT_ABI_VERSION, LUA_RELEASE);
  jstr(&s, mdb_version(NULL, NULL, NULL));
  if (nvrtcVersion(&major, &minor) == NVRTC_SUCCESS) fb_str_printf(&s, ", \"nvrtc\": \"%d.%d\"", major, minor);
  else fb_str_printf(&s, ", \"nvrtc\": null");
  if (fb_comm_nccl_version(&nccl) == FB_OK) fb_str_printf(&s, ", \"nccl\": \"%d.%d.%d\"", nccl / 10000, nccl / 100 % 100, nccl % 100);
  else fb_str_printf(&s, ", \"nccl\": null");
  fb_str_printf(&s, ", \"cuda\": ");
  if (fb_cuda_device_count(&n) != FB_OK) {
    jstr(&s, fb_errmsg());
    n = 0;
  } else {
    fb_str_printf(&s, "\"driver loaded\"");
  }
  fb_str_printf(&s, ", \"devices\": [");
  for (int d = 0; d < n; ++d) {
    fb_cuda_device_info info;
    if (fb_cuda_device_info_get(d, &info) != FB_OK) break;
    fb_str_printf(&s, "%s{\"ordinal\": %d, \"name\": ", d ? ", " : "", d);
    jstr(&s, info.name);
    fb_str_printf(&s, ", \"sm\": \"sm_%d%d\", \"sms\": %d, \"memory\": %zu, \"driver\": %d}", info.cc_major, info.cc_minor,
                  info.sm_count, info.mem_bytes, info.driver_version);
  }
  char dir[4096];
  fb_str_printf(&s, "], \"cache_dir\": ");
  jstr(&s, fb_cache_default_dir(dir, sizeof dir));
  fb_str_printf(&s, "}");
  fb_clearerr();
  return jdone(&s, out);
}

/* ---- recipes and plans ------------------------------------------------------------------------------------------ */
struct fourbit_recipe {
  fb_recipe *r;
};

int fourbit_recipe_open(const char *path, const fourbit_dims *dims, fourbit_recipe **out) {
  if (!out) return FB_USERERR(FB_EINVAL, "fourbit_recipe_open: out is NULL");
  *out = NULL;
  if (!path || !*path) return FB_USERERR(FB_EINVAL, "fourbit_recipe_open: no recipe path");
  fb_model over = {0};
  if (dims) {
    FB_TRY(check_size(dims, dims->size, sizeof *dims, "fourbit_recipe_open: dims"));
    const int v[6] = {dims->layers, dims->d_model, dims->d_ff, dims->experts, dims->top_k, dims->vocab};
    const char *nm[6] = {"layers", "d_model", "d_ff", "experts", "top_k", "vocab"};
    for (int i = 0; i < 6; ++i)
      if (v[i] < 0) return FB_USERERR(FB_EINVAL, "%s: dims.%s = %d: a size is positive (0: the recipe's)", path, nm[i], v[i]);
    over.layers = dims->layers, over.d_model = dims->d_model, over.d_ff = dims->d_ff, over.experts = dims->experts;
    over.top_k = dims->top_k, over.vocab = dims->vocab;
  }
  fourbit_recipe *h = calloc(1, sizeof *h);
  if (!h) return FB_ERR(FB_ENOMEM, "fourbit_recipe_open");
  fb_status s = fb_train_recipe_load(path, &over, &h->r);
  if (s != FB_OK) {
    free(h);
    return s;
  }
  *out = h;
  return FB_OK;
}

void fourbit_recipe_close(fourbit_recipe *r) {
  if (!r) return;
  fb_recipe_free(r->r);
  free(r);
}

int fourbit_recipe_plan_json(const fourbit_recipe *r, const char *arch, char **out) {
  if (!r || !out) return FB_USERERR(FB_EINVAL, "fourbit_recipe_plan_json: NULL argument");
  *out = NULL;
  const char *a = arch && *arch ? arch : "sm_90a";
  if (strcmp(a, "sm_90a") && strcmp(a, "sm_100a") && strcmp(a, "sm_103a"))
    return FB_USERERR(FB_EINVAL, "arch '%s': unknown (sm_90a, sm_100a, sm_103a)", a);
  fb_plan *p = NULL;
  FB_TRY(fb_plan_resolve(r->r, a, &p));
  fb_status s = fb_plan_json(p, out);
  fb_plan_free(p);
  return s;
}

/* ---- the cache -------------------------------------------------------------------------------------------------- */
struct fourbit_cache {
  fb_cache *c;
};

int fourbit_cache_open(const char *dir, fourbit_cache **out) {
  if (!out) return FB_USERERR(FB_EINVAL, "fourbit_cache_open: out is NULL");
  *out = NULL;
  char def[4096];
  const char *d = dir && *dir ? dir : fb_cache_default_dir(def, sizeof def);
  fourbit_cache *h = calloc(1, sizeof *h);
  if (!h) return FB_ERR(FB_ENOMEM, "fourbit_cache_open");
  fb_status s = fb_cache_open(d, &h->c);
  if (s != FB_OK) {
    free(h);
    return s;
  }
  *out = h;
  return FB_OK;
}

const char *fourbit_cache_dir(const fourbit_cache *c) { return c ? fb_cache_dir(c->c) : ""; }

void fourbit_cache_close(fourbit_cache *c) {
  if (!c) return;
  fb_cache_close(c->c);
  free(c);
}

/* ---- quantizers ------------------------------------------------------------------------------------------------- */
static const char *fmt_name(int f) { return f == FOURBIT_NVFP4 ? "nvfp4" : f == FOURBIT_MXFP8 ? "mxfp8" : "s2f6"; }

int fourbit_quant_layout(const fourbit_quant_opts *o, size_t rows, size_t cols, size_t *code_bytes, size_t *scale_bytes,
                         size_t *n_outer) {
  FB_TRY(check_size(o, o ? o->size : 0, sizeof *o, "quant options"));
  int f = o->format;
  if (f != FOURBIT_NVFP4 && f != FOURBIT_MXFP8 && f != FOURBIT_S2F6)
    return FB_USERERR(FB_EINVAL, "format %d: unknown (nvfp4, mxfp8, s2f6)", f);
  if (f != FOURBIT_NVFP4 && (o->outer_row || o->four_over_six))
    return FB_USERERR(FB_EINVAL, "outer and four_over_six apply to format nvfp4 only (format %s)", fmt_name(f));
  if (f == FOURBIT_S2F6 && (o->sr || o->step))
    return FB_USERERR(FB_EINVAL, "rounding and step do not apply to format s2f6");
  if (f != FOURBIT_S2F6 && o->rht) return FB_USERERR(FB_EINVAL, "rht applies to format s2f6 only (format %s)", fmt_name(f));
  if (rows < 1 || rows > (1ull << 31) || cols < 1 || cols > (1ull << 31))
    return FB_USERERR(FB_EINVAL, "%zu x %zu: rows and cols are in [1, 2^31]", rows, cols);
  size_t bs = f == FOURBIT_NVFP4 ? 16 : 32, n = rows * cols;
  if (cols % bs) return FB_USERERR(FB_EINVAL, "cols %zu is not a multiple of the %s block (%zu)", cols, fmt_name(f), bs);
  if (n > (1ull << 33)) return FB_USERERR(FB_EINVAL, "%zu x %zu is more than 2^33 values", rows, cols);
  if (code_bytes) *code_bytes = f == FOURBIT_NVFP4 ? n / 2 : n;
  if (scale_bytes) *scale_bytes = n / bs;
  if (n_outer) *n_outer = f == FOURBIT_NVFP4 ? (o->outer_row ? rows : 1) : 0;
  return FB_OK;
}

static void lib_opts(const fourbit_quant_opts *o, fb_nvfp4_opts *no, fb_sr_opts *so) {
  memset(no, 0, sizeof *no);
  no->outer = o->outer_row ? FB_OUTER_ROW : FB_OUTER_TENSOR, no->four_over_six = o->four_over_six != 0;
  no->rounding = o->sr ? FB_ROUND_SR : FB_ROUND_RN, no->seed = o->seed, no->stream = 0, no->step = o->step;
  *so = (fb_sr_opts){.rounding = no->rounding, .seed = o->seed, .stream = 0, .step = o->step};
}

int fourbit_quantize(const fourbit_quant_opts *o, const float *x, size_t rows, size_t cols, uint8_t *codes,
                     uint8_t *scales, float *outer) {
  size_t no_ = 0;
  FB_TRY(fourbit_quant_layout(o, rows, cols, NULL, NULL, &no_));
  if (!x || !codes || !scales || (no_ && !outer)) return FB_USERERR(FB_EINVAL, "fourbit_quantize: a NULL buffer");
  fb_nvfp4_opts no;
  fb_sr_opts so;
  lib_opts(o, &no, &so);
  if (o->format == FOURBIT_NVFP4) return fb_nvfp4_quantize(x, rows, cols, &no, codes, scales, outer, NULL);
  if (o->format == FOURBIT_MXFP8) return fb_mxfp8_quantize(x, rows, cols, FB_MX_ROWWISE, &so, codes, scales);
  return fb_s2f6_quantize(x, rows, cols, o->rht != 0, fb_rht_signs(o->seed, 0), (int8_t *)codes, scales);
}

int fourbit_dequantize(const fourbit_quant_opts *o, const uint8_t *codes, const uint8_t *scales, const float *outer,
                       size_t rows, size_t cols, float *y) {
  size_t no_ = 0;
  FB_TRY(fourbit_quant_layout(o, rows, cols, NULL, NULL, &no_));
  if (!y || !codes || !scales || (no_ && !outer)) return FB_USERERR(FB_EINVAL, "fourbit_dequantize: a NULL buffer");
  fb_nvfp4_opts no;
  fb_sr_opts so;
  lib_opts(o, &no, &so);
  if (o->format == FOURBIT_NVFP4) return fb_nvfp4_dequantize(codes, scales, outer, rows, cols, &no, y);
  if (o->format == FOURBIT_MXFP8) return fb_mxfp8_dequantize(codes, scales, rows, cols, y);
  return fb_s2f6_dequantize((const int8_t *)codes, scales, rows, cols, o->rht != 0, fb_rht_signs(o->seed, 0), y);
}

/* ---- the GPU expert layer --------------------------------------------------------------------------------------- */
/* Driver calls fb_cu does not carry (base/cuda_driver.c's table is what the runtime needs), resolved from the same
 * libcuda.so.1 once fb_cuda_load has opened it. */
static struct {
  CUresult (*PrimaryCtxRelease)(CUdevice);
} xcu;
static pthread_once_t xcu_once = PTHREAD_ONCE_INIT;
static void xcu_load(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) return;
  *(void **)&xcu.PrimaryCtxRelease = dlsym(h, "cuDevicePrimaryCtxRelease_v2");
}

/* A handle's device: its primary context (retained, never a new one) and the stream state of its calls: an event recorded
 * after each call's own work on its stream (the fence of a later call on another stream) */
typedef struct {
  CUdevice dev;
  CUcontext ctx;
  CUevent done;
  CUstream last; /* the stream of the last call (used: there was one) */
  int used;
} hdev;

static void hdev_close(hdev *h);
/* The ordinal checked against the driver, its primary context retained and made current, the event made. */
static fb_status hdev_open(int device, hdev *h) {
  memset(h, 0, sizeof *h);
  if (device < 0) return FB_USERERR(FB_EINVAL, "device %d: a CUDA ordinal is >= 0", device);
  FB_TRY(fb_cuda_load());
  pthread_once(&xcu_once, xcu_load);
  int ndev = 0;
  FB_TRY(fb_cuda_device_count(&ndev));
  if (device >= ndev) return FB_USERERR(FB_EINVAL, "device %d: the driver sees %d GPU(s)", device, ndev);
  int cr = fb_cu.DeviceGet(&h->dev, device);
  if (!cr) cr = fb_cu.DevicePrimaryCtxRetain(&h->ctx, h->dev);
  if (!cr) cr = fb_cu.CtxSetCurrent(h->ctx);
  if (!cr) cr = fb_cu.EventCreate(&h->done, CU_EVENT_DISABLE_TIMING);
  if (!cr) return FB_OK;
  fb_status rc = FB_ERR(FB_ECUDA, "device %d: primary context and event: %s", device, fb_cu_errstr(cr));
  hdev_close(h);
  return rc;
}
/* after what the handle freed on the device (its context current) */
static void hdev_close(hdev *h) {
  if (h->done) fb_cu.EventDestroy(h->done);
  if (h->ctx && xcu.PrimaryCtxRelease) xcu.PrimaryCtxRelease(h->dev);
  memset(h, 0, sizeof *h);
}

typedef struct { /* a lookup answer, for fourbit_layer_kernels_json */
  char spec[128], variant[192], note[256];
  int winner, found;
} kseen;

struct fourbit_layer {
  pthread_mutex_t mu;
  const fourbit_recipe *r;
  int device;
  hdev hd;
  fb_gpu_experts *g;
  fb_plan *plan;           /* the layers' precisions (sm_90a) */
  fb_cache *cache;         /* borrowed */
  fb_fingerprint fp;
  kseen *seen;
  int nseen, capseen;
  FILE *log;               /* the layer's kernel lines (open_memstream) */
  char *logbuf;
  size_t loglen;
  int verbose;
};

struct fourbit_saved {
  fourbit_layer *l;
  fb_moe_layer L;
};

static fb_status layer_lookup(void *user, const fb_kernel_spec *k, long long tokens, char *vn, size_t vl, void **cubin,
                              size_t *size, double *ms, char *note, size_t nl) {
  fourbit_layer *l = user;
  fb_tune_choice ch;
  fb_status s = fb_tune_lookup(l->cache, &l->fp, l->r->r, l->plan, k, tokens, &ch, cubin, size, note, nl);
  if (ms) *ms = s == FB_OK && ch.from_winner ? ch.winner.median_ms : 0;
  if (s == FB_OK) snprintf(vn, vl, "%s", ch.var.name);
  if (l->nseen == l->capseen) {
    int cap = l->capseen ? 2 * l->capseen : 64;
    kseen *n = realloc(l->seen, (size_t)cap * sizeof *n);
    if (!n) return s; /* the listing loses a line; the layer does not */
    l->seen = n, l->capseen = cap;
  }
  kseen *e = &l->seen[l->nseen++];
  memset(e, 0, sizeof *e);
  snprintf(e->spec, sizeof e->spec, "%s", k->name);
  snprintf(e->variant, sizeof e->variant, "%s", s == FB_OK ? ch.var.name : "");
  snprintf(e->note, sizeof e->note, "%s", s == FB_OK ? note : fb_errmsg());
  e->found = s == FB_OK, e->winner = s == FB_OK && ch.from_winner;
  return s;
}

/* the caller's context: the device's primary one, current on this thread (PyTorch's own; never a new one) */
static fb_status layer_enter(fourbit_layer *l) {
  CU_CHECK(fb_cu.CtxSetCurrent(l->hd.ctx));
  return FB_OK;
}
/* The layer's work goes on the caller's stream itself (fb_cuda_set_stream for the length of the call: every launch,
 * copy and memset of runtime/experts_gpu.c), so it is ordered after what the caller queued before and before what it
 * queues after, with no fence. The pool's memory is reused from call to call: every call ends by recording an event
 * after its own work on its stream, and a call on another stream first makes that stream wait for it (only for the
 * layer's own last work: not for what the caller queued on the old stream since, which may be long). */
static fb_status stream_enter(hdev *h, void *stream) {
  CU_CHECK(fb_cu.CtxSetCurrent(h->ctx)); /* the caller's context: the device's primary one, current on this thread */
  if (h->used && (CUstream)stream != h->last) CU_CHECK(fb_cu.StreamWaitEvent((CUstream)stream, h->done, 0));
  fb_cuda_set_stream((CUstream)stream);
  return FB_OK;
}
/* after a call's work was queued (also when it failed part way: what it queued may still use the pool) */
static fb_status stream_leave(hdev *h, void *stream, fb_status rc) {
  fb_cuda_set_stream(NULL);
  CUresult r = fb_cu.EventRecord(h->done, (CUstream)stream);
  if (r == CUDA_SUCCESS) h->used = 1, h->last = (CUstream)stream;
  else if (rc == FB_OK) rc = FB_ERR(FB_ECUDA, "cuEventRecord after the call: %s", fb_cu_errstr((int)r));
  return rc;
}

void fourbit_layer_free(fourbit_layer *l) {
  if (!l) return;
  if (l->hd.ctx) fb_cu.CtxSetCurrent(l->hd.ctx);
  fb_gpu_experts_free(l->g);
  hdev_close(&l->hd);
  fb_plan_free(l->plan);
  if (l->log) fclose(l->log);
  free(l->logbuf);
  free(l->seen);
  pthread_mutex_destroy(&l->mu);
  free(l);
}

int fourbit_layer_create(const fourbit_recipe *r, const fourbit_layer_opts *o, fourbit_layer **out) {
  if (!out) return FB_USERERR(FB_EINVAL, "fourbit_layer_create: out is NULL");
  *out = NULL;
  if (!r) return FB_USERERR(FB_EINVAL, "fourbit_layer_create: no recipe");
  FB_TRY(check_size(o, o ? o->size : 0, sizeof *o, "fourbit_layer_create: options"));
  const fb_recipe *rec = r->r;
  if (o->tokens < 0) return FB_USERERR(FB_EINVAL, "tokens %d: >= 0 (0: the recipe's)", o->tokens);
  hdev hd;
  FB_TRY(hdev_open(o->device, &hd));
  fourbit_layer *l = calloc(1, sizeof *l);
  if (!l) {
    hdev_close(&hd);
    return FB_ERR(FB_ENOMEM, "fourbit_layer_create");
  }
  pthread_mutex_init(&l->mu, NULL);
  l->r = r, l->device = o->device, l->verbose = o->verbose, l->hd = hd;
  l->cache = o->cache ? o->cache->c : NULL;
  fb_status rc = FB_OK;
  FB_TRY_GOTO(fb_plan_resolve(rec, "sm_90a", &l->plan), fail);
  if (l->cache) FB_TRY_GOTO(fb_tune_fingerprint(&l->fp), fail);
  l->log = open_memstream(&l->logbuf, &l->loglen);
  if (!l->log) {
    rc = FB_ERR(FB_ENOMEM, "fourbit_layer_create: open_memstream");
    goto fail;
  }
  fb_gpu_experts_opts go = {.recipe = rec, .tokens = o->tokens ? o->tokens : rec->tokens, .lookup = l->cache ? layer_lookup : NULL,
                            .lookup_user = l, .log = l->log, .verbose = 1, .device = o->device};
  FB_TRY_GOTO(fb_gpu_experts_create(&go, &l->g), fail);
  int cr = fb_cu.CtxSynchronize(); /* what create copied up (legacy stream) is there before a call on another stream */
  if (cr) {
    rc = FB_ERR(FB_ECUDA, "device %d: after loading the layer's kernels: %s", o->device, fb_cu_errstr(cr));
    goto fail;
  }
  fflush(l->log);
  if (l->verbose && l->logbuf) fputs(l->logbuf, stderr);
  *out = l;
  return FB_OK;
fail:
  fourbit_layer_free(l);
  return rc;
}

int fourbit_layer_kernels_json(const fourbit_layer *l, char **out) {
  if (!l || !out) return FB_USERERR(FB_EINVAL, "fourbit_layer_kernels_json: NULL argument");
  *out = NULL;
  fourbit_layer *m = (fourbit_layer *)l; /* the log stream is flushed under the lock */
  pthread_mutex_lock(&m->mu);
  fflush(m->log);
  fb_gpu_experts_stats st = fb_gpu_experts_stats_get(l->g);
  fb_str s = {0};
  fb_str_printf(&s, "{\"kernels\": %d, \"from_cache\": %d, \"compiled\": %d, \"compile_ms\": %.1f, \"cache\": ", st.kernels,
                st.from_cache, st.compiled, st.compile_ms);
  if (l->cache) jstr(&s, fb_cache_dir(l->cache));
  else fb_str_printf(&s, "null");
  fb_str_printf(&s, ", \"loaded\": [");
  /* one "  kernel VARIANT NOTE" line per kernel loaded (experts_gpu.c's verbose notice), matched to the lookup's answer
     for its spec (the variant name starts with the spec's) */
  int first = 1;
  for (const char *p = l->logbuf ? l->logbuf : ""; *p;) {
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    char line[2048];
    snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), p);
    p += n + (e ? 1 : 0);
    char var[192];
    int off = 0;
    if (sscanf(line, " kernel %191s %n", var, &off) != 1) continue;
    const char *note = line + off;
    const kseen *k = NULL;
    for (int i = 0; i < l->nseen; ++i)
      if (!strncmp(var, l->seen[i].spec, strlen(l->seen[i].spec)) && (!k || strlen(l->seen[i].spec) > strlen(k->spec))) k = &l->seen[i];
    const char *from = strstr(note, "compiled (NVRTC)") ? "nvrtc" : k && k->found && !strcmp(k->variant, var) ? (k->winner ? "winner" : "default") : "cache";
    char spec[192], arch[16];
    size_t tail = 0;
    fb_kernel_spec ks;
    if (k) snprintf(spec, sizeof spec, "%s", k->spec);
    else if (fb_kernel_parse(var, &ks, arch, sizeof arch, &tail) == FB_OK) snprintf(spec, sizeof spec, "%.*s", (int)tail, var);
    else snprintf(spec, sizeof spec, "%s", var); /* not a canonical name (cannot happen for the layer's kernels) */
    fb_str_printf(&s, "%s{\"spec\": ", first ? "" : ", ");
    jstr(&s, spec);
    fb_str_printf(&s, ", \"variant\": ");
    jstr(&s, var);
    fb_str_printf(&s, ", \"from\": \"%s\", \"note\": ", from);
    jstr(&s, note);
    fb_str_printf(&s, "}");
    first = 0;
  }
  fb_str_printf(&s, "]}");
  fb_clearerr(); /* a failed parse above is not the call's error */
  pthread_mutex_unlock(&m->mu);
  return jdone(&s, out);
}

static fb_status check_call(const fourbit_layer *l, int layer, int tokens) {
  if (layer < 1 || layer > l->plan->nlayers)
    return FB_USERERR(FB_EINVAL, "%s: layer %d: the recipe's model has layers 1..%d", l->r->r->path, layer, l->plan->nlayers);
  if (tokens < 1) return FB_USERERR(FB_EINVAL, "tokens %d: at least one", tokens);
  return FB_OK;
}

int fourbit_layer_forward(fourbit_layer *l, int layer, int tokens, uint64_t x, uint64_t topk_idx, uint64_t topk_w, uint64_t w13,
                          uint64_t w2, uint64_t y, uint32_t seed, uint32_t step, void *stream, fourbit_saved **saved) {
  if (!l || !saved) return FB_USERERR(FB_EINVAL, "fourbit_layer_forward: NULL argument");
  *saved = NULL;
  FB_TRY(check_call(l, layer, tokens));
  if (!x || !topk_idx || !topk_w || !w13 || !w2 || !y) return FB_USERERR(FB_EINVAL, "fourbit_layer_forward: a NULL device pointer");
  fourbit_saved *sv = calloc(1, sizeof *sv);
  if (!sv) return FB_ERR(FB_ENOMEM, "fourbit_layer_forward");
  const fb_model *M = &l->r->r->model;
  sv->l = l;
  fb_moe_layer *L = &sv->L;
  L->layer = layer, L->prec = &l->plan->layers[layer - 1], L->tokens = tokens, L->d_model = M->d_model;
  L->d_ff = M->d_ff, L->experts = M->experts, L->top_k = M->top_k, L->seed = seed, L->step = step;
  fb_gpu_layer_io io;
  memset(&io, 0, sizeof io);
  io.x = x, io.topk_idx = topk_idx, io.topk_w = topk_w, io.w13 = w13, io.w2 = w2, io.y = y;
  fb_status rc = FB_OK;
  pthread_mutex_lock(&l->mu);
  FB_TRY_GOTO(stream_enter(&l->hd, stream), done);
  rc = stream_leave(&l->hd, stream, fb_gpu_experts_forward_dev(l->g, L, &io));
done:
  if (rc != FB_OK && L->saved) fb_gpu_experts_ops(l->g)->release(l->g, L);
  pthread_mutex_unlock(&l->mu);
  if (rc != FB_OK) {
    free(sv);
    return rc;
  }
  *saved = sv;
  return FB_OK;
}

int fourbit_layer_backward(fourbit_layer *l, fourbit_saved *saved, uint64_t dy, uint64_t dx, uint64_t dw13, uint64_t dw2,
                           uint64_t dtopk_w, void *stream) {
  if (!l || !saved) return FB_USERERR(FB_EINVAL, "fourbit_layer_backward: NULL argument");
  if (saved->l != l) return FB_USERERR(FB_EINVAL, "fourbit_layer_backward: the saved state is another layer's");
  fb_gpu_layer_io io;
  memset(&io, 0, sizeof io);
  io.dy = dy, io.dx = dx, io.dw13 = dw13, io.dw2 = dw2, io.dtopk_w = dtopk_w;
  fb_status rc = FB_OK;
  pthread_mutex_lock(&l->mu);
  if (!dy || !dx || !dw13 || !dw2 || !dtopk_w) {
    rc = FB_USERERR(FB_EINVAL, "fourbit_layer_backward: a NULL device pointer");
    goto done;
  }
  FB_TRY_GOTO(stream_enter(&l->hd, stream), done);
  rc = stream_leave(&l->hd, stream, fb_gpu_experts_backward_dev(l->g, &saved->L, &io));
done:
  if (saved->L.saved) fb_gpu_experts_ops(l->g)->release(l->g, &saved->L);
  pthread_mutex_unlock(&l->mu);
  free(saved);
  return rc;
}

void fourbit_saved_free(fourbit_saved *s) {
  if (!s) return;
  fourbit_layer *l = s->l;
  pthread_mutex_lock(&l->mu);
  (void)layer_enter(l); /* the pool may give memory back to the driver */
  if (s->L.saved) fb_gpu_experts_ops(l->g)->release(l->g, &s->L);
  pthread_mutex_unlock(&l->mu);
  free(s);
}

/* ---- quantizers on device pointers ------------------------------------------------------------------------------ */
/* The generator's own quantizer kernels (templates/quant_nvfp4.cuh, quant_mxfp8.cuh, amax.cuh, s2f6.cuh) and its copy
 * kernel as the dequantizer of NVFP4 and MXFP8 (tcopy.cuh: no transpose, FP32 out), each form compiled with NVRTC at its
 * first use and kept by the handle. Their variant is one fixed tile (QFAM below): these calls serve a user's tensors,
 * not the layer's tuned shapes. The GPU checks every kernel against the CPU reference bit for bit (tests/gpu/
 * test_kernels.c), so the bytes are fourbit_quantize's. */
typedef struct {
  fb_kernel_spec spec;
  fb_variant v;
  fb_kernel k;
} qkern;

struct fourbit_quantizer {
  pthread_mutex_t mu;
  int device, verbose;
  hdev hd;                /* as the layer's */
  const char *arch;
  qkern *kt;
  int nk, cap;
  CUdeviceptr scratch;    /* the per-tensor amax (FP32) and its flags word: 256 bytes */
  double compile_ms;
};

/* one variant for every kernel of these calls: the first of recipes/inkling2_small.lua's quant family (rows 8, 128
 * threads, no staging); the other templates read only threads */
static const char *const QPARAM[] = {"rows", "cols", "threads", "stage", "vec"};
static const int QVAL[] = {8, 64, 128, 0, 4};

static fb_status qkernel(fourbit_quantizer *q, fb_kernel_spec k, const qkern **out) {
  FB_TRY(fb_kernel_spec_name(&k, q->arch));
  for (int i = 0; i < q->nk; ++i)
    if (!strcmp(q->kt[i].spec.name, k.name)) { *out = &q->kt[i]; return FB_OK; }
  if (q->nk == q->cap) {
    int cap = q->cap ? 2 * q->cap : 16;
    qkern *n = realloc(q->kt, (size_t)cap * sizeof *n);
    if (!n) return FB_ERR(FB_ENOMEM, "quantizer: kernel table");
    q->kt = n, q->cap = cap;
  }
  fb_tune_family fam;
  memset(&fam, 0, sizeof fam);
  snprintf(fam.family, sizeof fam.family, "%s", k.family);
  fam.nparams = (int)(sizeof QPARAM / sizeof QPARAM[0]), fam.nvariants = 1, fam.values = (int *)QVAL;
  for (int i = 0; i < fam.nparams; ++i) snprintf(fam.param[i], sizeof fam.param[i], "%s", QPARAM[i]);
  fb_variant *vs = NULL;
  int nv = 0;
  char why[256];
  FB_TRY(fb_gen_variants(&k, &fam, &vs, &nv, NULL, why, sizeof why));
  if (!nv) {
    free(vs);
    return FB_ERR(FB_EVARIANT, "quantizer: %s: its one variant is illegal (%s)", k.name, why);
  }
  qkern *e = &q->kt[q->nk];
  memset(e, 0, sizeof *e);
  e->spec = k, e->v = vs[0];
  free(vs);
  char *src = NULL;
  FB_TRY(fb_gen_source(&k, &e->v, "libfourbit.so (fourbit_quantize_device)", "-", &src));
  fb_cubin cb;
  memset(&cb, 0, sizeof cb);
  fb_status s = fb_nvrtc_compile(e->v.name, src, q->arch, &cb);
  free(src);
  if (s == FB_OK) s = fb_kernel_load(cb.cubin, e->v.name, &e->k);
  const double ms = cb.ms;
  q->compile_ms += ms;
  fb_cubin_free(&cb);
  FB_TRY(s);
  if (q->verbose) fprintf(stderr, "fourbit: quantizer kernel %s compiled (NVRTC, %.0f ms)\n", e->v.name, ms);
  *out = &q->kt[q->nk++];
  return FB_OK;
}

static fb_status qlaunch(const qkern *e, fb_kp_mem *p, unsigned ng) {
  unsigned gx, gy, th;
  FB_TRY(fb_launch_dims(&e->spec, &e->v, p->rows, p->cols, ng, &gx, &gy, &th));
  return fb_kernel_launch(&e->k, gx, gy, th, p, sizeof *p);
}

void fourbit_quantizer_free(fourbit_quantizer *q) {
  if (!q) return;
  if (q->hd.ctx) fb_cu.CtxSetCurrent(q->hd.ctx);
  for (int i = 0; i < q->nk; ++i) fb_kernel_unload(&q->kt[i].k);
  free(q->kt);
  if (q->scratch) fb_cu.MemFree(q->scratch);
  hdev_close(&q->hd);
  pthread_mutex_destroy(&q->mu);
  free(q);
}

int fourbit_quantizer_create(const fourbit_quantizer_opts *o, fourbit_quantizer **out) {
  if (!out) return FB_USERERR(FB_EINVAL, "fourbit_quantizer_create: out is NULL");
  *out = NULL;
  FB_TRY(check_size(o, o ? o->size : 0, sizeof *o, "fourbit_quantizer_create: options"));
  hdev hd;
  FB_TRY(hdev_open(o->device, &hd));
  const char *arch = NULL;
  fb_status as = fb_gpu_device_arch(o->device, &arch);
  fourbit_quantizer *q = as == FB_OK ? calloc(1, sizeof *q) : NULL;
  if (!q) {
    hdev_close(&hd);
    return as != FB_OK ? as : FB_ERR(FB_ENOMEM, "fourbit_quantizer_create");
  }
  pthread_mutex_init(&q->mu, NULL);
  q->device = o->device, q->verbose = o->verbose, q->arch = arch, q->hd = hd;
  int cr = fb_cu.MemAlloc(&q->scratch, 256);
  if (cr) {
    fb_status rc = FB_ERR(FB_ECUDA, "device %d: the quantizer's scratch: %s", o->device, fb_cu_errstr(cr));
    fourbit_quantizer_free(q);
    return rc;
  }
  *out = q;
  return FB_OK;
}


static fb_status quantize_dev(fourbit_quantizer *q, const fourbit_quant_opts *o, int dtype, uint64_t x, size_t rows,
                              size_t cols, uint64_t codes, uint64_t scales, uint64_t outer) {
  const int f32 = dtype == FOURBIT_F32;
  fb_kp_mem p;
  memset(&p, 0, sizeof p);
  p.in = x, p.out = codes, p.scales = scales, p.rows = (long long)rows, p.cols = (long long)cols;
  p.seed = o->seed, p.stream = 0, p.step = o->step; /* SR: random stream 0, as fourbit_quantize */
  const qkern *e;
  if (o->format == FOURBIT_S2F6) {
    fb_kernel_spec k;
    memset(&k, 0, sizeof k);
    k.op = FB_OP_S2F6_Q, k.q.format = FB_FMT_S2F6, k.q.rht = o->rht ? 32 : 0, k.in_f32 = f32;
    snprintf(k.family, sizeof k.family, "combine");
    FB_TRY(qkernel(q, k, &e));
    p.signs = fb_rht_signs(o->seed, 0);
    return qlaunch(e, &p, 0);
  }
  fb_qspec qs = {.format = o->format == FOURBIT_NVFP4 ? FB_FMT_NVFP4 : FB_FMT_MXFP8,
                 .rounding = o->sr ? FB_ROUND_SR : FB_ROUND_RN};
  if (o->format == FOURBIT_MXFP8) {
    FB_TRY(qkernel(q, fb_spec_quant(&qs, 0, f32, NULL), &e));
    return qlaunch(e, &p, 0);
  }
  qs.outer = o->outer_row ? FB_GRAN_TOKEN : FB_GRAN_TENSOR, qs.four_over_six = o->four_over_six != 0;
  FB_TRY(qkernel(q, fb_spec_quant(&qs, 0, f32, NULL), &e));
  p.s_dec = outer;
  if (!o->outer_row) { /* the tensor's amax first (NaN ignored, a non-finite value flagged), zeroed for its atomicMax */
    const qkern *ea;
    FB_TRY(qkernel(q, fb_spec_amax(FB_GRAN_TENSOR, f32, NULL), &ea));
    CU_CHECK(fb_cu.MemsetD8Async(q->scratch, 0, 8, fb_cuda_stream()));
    fb_kp_mem pa;
    memset(&pa, 0, sizeof pa);
    pa.in = x, pa.rows = p.rows, pa.cols = p.cols, pa.amax = q->scratch, pa.flags = q->scratch + 4, pa.ngroups = 1;
    FB_TRY(qlaunch(ea, &pa, 1));
    p.amax = q->scratch, p.ngroups = 1;
    return qlaunch(e, &p, 1);
  }
  return qlaunch(e, &p, 0);
}

static fb_status dequantize_dev(fourbit_quantizer *q, const fourbit_quant_opts *o, uint64_t codes, uint64_t scales,
                                uint64_t outer, size_t rows, size_t cols, uint64_t y) {
  fb_kp_mem p;
  memset(&p, 0, sizeof p);
  p.rows = (long long)rows, p.cols = (long long)cols, p.out = y;
  const qkern *e;
  if (o->format == FOURBIT_S2F6) {
    fb_kernel_spec k;
    memset(&k, 0, sizeof k);
    k.op = FB_OP_S2F6_DQ, k.q.format = FB_FMT_S2F6, k.q.rht = o->rht ? 32 : 0;
    snprintf(k.family, sizeof k.family, "combine");
    FB_TRY(qkernel(q, k, &e));
    p.in = codes, p.scales = scales, p.signs = fb_rht_signs(o->seed, 0);
    return qlaunch(e, &p, 0);
  }
  /* NVFP4 and MXFP8: tcopy.cuh from the codes, not transposed, FP32 out; exactly fb_{nvfp4,mxfp8}_dequantize */
  const int nv = o->format == FOURBIT_NVFP4;
  FB_TRY(qkernel(q, fb_spec_tcopy(nv ? FB_FMT_NVFP4 : FB_FMT_MXFP8, nv && o->outer_row ? FB_GRAN_TOKEN : FB_GRAN_TENSOR, 0, 0, 0,
                                  0, 0, NULL), &e));
  p.in = codes, p.src_scales = scales, p.src_s_dec = nv ? outer : 0;
  return qlaunch(e, &p, 0);
}

static fb_status qcheck(fourbit_quantizer *q, const fourbit_quant_opts *o, size_t rows, size_t cols, const char *fn,
                        uint64_t a, uint64_t b, uint64_t c, uint64_t outer) {
  if (!q) return FB_USERERR(FB_EINVAL, "%s: no quantizer", fn);
  size_t no = 0;
  FB_TRY(fourbit_quant_layout(o, rows, cols, NULL, NULL, &no));
  if (!a || !b || !c || (no && !outer)) return FB_USERERR(FB_EINVAL, "%s: a NULL device pointer", fn);
  return FB_OK;
}

int fourbit_quantize_device(fourbit_quantizer *q, const fourbit_quant_opts *o, int dtype, uint64_t x, size_t rows,
                            size_t cols, uint64_t codes, uint64_t scales, uint64_t outer, void *stream) {
  FB_TRY(qcheck(q, o, rows, cols, "fourbit_quantize_device", x, codes, scales, outer));
  if (dtype != FOURBIT_F32 && dtype != FOURBIT_BF16)
    return FB_USERERR(FB_EINVAL, "fourbit_quantize_device: dtype %d (FOURBIT_F32 0 or FOURBIT_BF16 1)", dtype);
  pthread_mutex_lock(&q->mu);
  fb_status rc = stream_enter(&q->hd, stream); /* a change of stream waits for the handle's last call: the scratch is shared */
  if (rc == FB_OK) rc = stream_leave(&q->hd, stream, quantize_dev(q, o, dtype, x, rows, cols, codes, scales, outer));
  pthread_mutex_unlock(&q->mu);
  return rc;
}

int fourbit_dequantize_device(fourbit_quantizer *q, const fourbit_quant_opts *o, uint64_t codes, uint64_t scales,
                              uint64_t outer, size_t rows, size_t cols, uint64_t y, void *stream) {
  FB_TRY(qcheck(q, o, rows, cols, "fourbit_dequantize_device", codes, scales, y, outer));
  pthread_mutex_lock(&q->mu);
  fb_status rc = stream_enter(&q->hd, stream);
  if (rc == FB_OK) rc = stream_leave(&q->hd, stream, dequantize_dev(q, o, codes, scales, outer, rows, cols, y));
  pthread_mutex_unlock(&q->mu);
  return rc;
}

int fourbit_quantizer_kernels_json(const fourbit_quantizer *q, char **out) {
  if (!q || !out) return FB_USERERR(FB_EINVAL, "fourbit_quantizer_kernels_json: NULL argument");
  *out = NULL;
  fourbit_quantizer *m = (fourbit_quantizer *)q;
  pthread_mutex_lock(&m->mu);
  fb_str s = {0};
  fb_str_printf(&s, "{\"arch\": \"%s\", \"compiled\": %d, \"compile_ms\": %.1f, \"loaded\": [", q->arch, q->nk, q->compile_ms);
  for (int i = 0; i < q->nk; ++i) {
    fb_str_printf(&s, "%s", i ? ", " : "");
    jstr(&s, q->kt[i].v.name);
  }
  fb_str_printf(&s, "]}");
  pthread_mutex_unlock(&m->mu);
  return jdone(&s, out);
}
