/* abi.c — build/libfourbit.so's C ABI (include/fourbit/libfourbit.h) over the library: recipes and plans
 * (recipes/loader.c, gen/plan.c), the cache (cache/cache.c), the host quantizers exactly as `fourbit quant` calls them
 * (cli/quant.c: same options, same refusals, same bytes), and the GPU expert layer (runtime/experts_gpu.c) on the
 * caller's device pointers and stream. Only fourbit_* symbols leave the library (its version script, lib/libfourbit.map).
 *
 * Entry points: the header's. Streams: the layer queues its work on the context's legacy default stream (where
 * experts_gpu.c launches, copies and sets); a caller's other stream is fenced against it both ways with events
 * (cuStreamWaitEvent), so that the layer runs after what the caller queued before and before what it queues after. */
#include "fourbit/libfourbit.h"

#include "experts_gpu.h"
#include "fb_cuda.h"
#include "fb_error.h"
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
  CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*PrimaryCtxRelease)(CUdevice);
} xcu;
static pthread_once_t xcu_once = PTHREAD_ONCE_INIT;
static void xcu_load(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) return;
  *(void **)&xcu.StreamWaitEvent = dlsym(h, "cuStreamWaitEvent");
  *(void **)&xcu.PrimaryCtxRelease = dlsym(h, "cuDevicePrimaryCtxRelease_v2");
}

typedef struct { /* a lookup answer, for fourbit_layer_kernels_json */
  char spec[128], variant[192], note[256];
  int winner, found;
} kseen;

struct fourbit_layer {
  pthread_mutex_t mu;
  const fourbit_recipe *r;
  int device;
  CUdevice dev;
  CUcontext ctx;
  CUevent ev_in, ev_out;
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
                              size_t *size, char *note, size_t nl) {
  fourbit_layer *l = user;
  fb_tune_choice ch;
  fb_status s = fb_tune_lookup(l->cache, &l->fp, l->r->r, l->plan, k, tokens, &ch, cubin, size, note, nl);
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
  CU_CHECK(fb_cu.CtxSetCurrent(l->ctx));
  return FB_OK;
}
/* the layer's work after the caller's stream's, on the legacy default stream */
static fb_status fence_in(fourbit_layer *l, void *stream) {
  if (!stream) return FB_OK;
  if (!xcu.StreamWaitEvent) return FB_ERR(FB_ECUDA, "libcuda.so.1 has no cuStreamWaitEvent: only the default stream (NULL) is served");
  CU_CHECK(fb_cu.EventRecord(l->ev_in, (CUstream)stream));
  CU_CHECK(xcu.StreamWaitEvent(NULL, l->ev_in, 0));
  return FB_OK;
}
static fb_status fence_out(fourbit_layer *l, void *stream) {
  if (!stream) return FB_OK;
  CU_CHECK(fb_cu.EventRecord(l->ev_out, NULL));
  CU_CHECK(xcu.StreamWaitEvent((CUstream)stream, l->ev_out, 0));
  return FB_OK;
}

void fourbit_layer_free(fourbit_layer *l) {
  if (!l) return;
  if (l->ctx) fb_cu.CtxSetCurrent(l->ctx);
  fb_gpu_experts_free(l->g);
  if (l->ev_in) fb_cu.EventDestroy(l->ev_in);
  if (l->ev_out) fb_cu.EventDestroy(l->ev_out);
  if (l->ctx && xcu.PrimaryCtxRelease) xcu.PrimaryCtxRelease(l->dev);
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
  if (o->device < 0) return FB_USERERR(FB_EINVAL, "device %d: a CUDA ordinal is >= 0", o->device);
  if (o->tokens < 0) return FB_USERERR(FB_EINVAL, "tokens %d: >= 0 (0: the recipe's)", o->tokens);
  FB_TRY(fb_cuda_load());
  pthread_once(&xcu_once, xcu_load);
  int ndev = 0;
  FB_TRY(fb_cuda_device_count(&ndev));
  if (o->device >= ndev) return FB_USERERR(FB_EINVAL, "device %d: the driver sees %d GPU(s)", o->device, ndev);
  fourbit_layer *l = calloc(1, sizeof *l);
  if (!l) return FB_ERR(FB_ENOMEM, "fourbit_layer_create");
  pthread_mutex_init(&l->mu, NULL);
  l->r = r, l->device = o->device, l->verbose = o->verbose;
  l->cache = o->cache ? o->cache->c : NULL;
  fb_status rc = FB_OK;
  int cr = fb_cu.DeviceGet(&l->dev, o->device);
  if (!cr) cr = fb_cu.DevicePrimaryCtxRetain(&l->ctx, l->dev);
  if (!cr) cr = fb_cu.CtxSetCurrent(l->ctx);
  if (!cr) cr = fb_cu.EventCreate(&l->ev_in, CU_EVENT_DISABLE_TIMING);
  if (!cr) cr = fb_cu.EventCreate(&l->ev_out, CU_EVENT_DISABLE_TIMING);
  if (cr) {
    rc = FB_ERR(FB_ECUDA, "device %d: primary context and events: %s", o->device, fb_cu_errstr(cr));
    goto fail;
  }
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
  FB_TRY_GOTO(layer_enter(l), done);
  FB_TRY_GOTO(fence_in(l, stream), done);
  FB_TRY_GOTO(fb_gpu_experts_forward_dev(l->g, L, &io), done);
  FB_TRY_GOTO(fence_out(l, stream), done);
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
  FB_TRY_GOTO(layer_enter(l), done);
  FB_TRY_GOTO(fence_in(l, stream), done);
  FB_TRY_GOTO(fb_gpu_experts_backward_dev(l->g, &saved->L, &io), done);
  FB_TRY_GOTO(fence_out(l, stream), done);
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
