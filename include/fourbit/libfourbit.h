/* fourbit/libfourbit.h — the stable C ABI of build/libfourbit.so (lib/abi.c), fourbit's front door for other
 * languages (python/fourbit is ctypes over it). It names no Lua, LMDB, CUDA or fourbit-internal type: handles are
 * opaque, device memory and streams are plain integers and pointers, and every struct that crosses it starts with
 * its own size (set it to sizeof the struct: a newer library reads an older caller's struct by that size).
 * docs/abi.md documents it call by call.
 *
 * Versioning: FOURBIT_ABI_VERSION counts incompatible changes (the library's soname is libfourbit.so.<it>); calls and
 * struct fields are only ever added at the end. fourbit_abi_version() is the library's; compare it with the header's.
 *
 * Errors: every call that can fail returns an int status (FOURBIT_OK = 0, else one of FOURBIT_E*, the values of
 * fb_status in fourbit/base.h) and leaves its message in a per-thread buffer, fourbit_errmsg(), naming the input
 * (the recipe's file:line and field, the option, the shape). Nothing in the library exits or prints, except the GPU
 * layer's kernel notices when asked (verbose).
 *
 * Entry points: fourbit_abi_version, fourbit_version, fourbit_errmsg, fourbit_status_name, fourbit_free,
 * fourbit_info_json; fourbit_recipe_open / _close / _plan_json; fourbit_cache_open / _dir / _close;
 * fourbit_quant_layout, fourbit_quantize, fourbit_dequantize (host buffers); fourbit_quantizer_create / _free /
 * _kernels_json, fourbit_quantize_device, fourbit_dequantize_device (device pointers); fourbit_layer_create / _forward /
 * _backward / _kernels_json / _free and fourbit_saved_free (the GPU expert layer on device pointers). */
#ifndef FOURBIT_LIBFOURBIT_H
#define FOURBIT_LIBFOURBIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FOURBIT_ABI_VERSION 1

/* statuses: the values of fb_status */
enum {
  FOURBIT_OK = 0,
  FOURBIT_EINVAL = 1,    /* bad argument or input */
  FOURBIT_ENOMEM = 2,
  FOURBIT_ECUDA = 3,     /* CUDA driver (or no driver) */
  FOURBIT_ENVRTC = 4,
  FOURBIT_ELMDB = 5,
  FOURBIT_ENCCL = 6,
  FOURBIT_ELUA = 7,      /* a recipe's Lua */
  FOURBIT_ENOTFOUND = 8,
  FOURBIT_EVARIANT = 9,
  FOURBIT_ENUMERIC = 10,
  FOURBIT_EIO = 11       /* file system */
};

int fourbit_abi_version(void);
const char *fourbit_version(void);         /* "0.1.0" */
const char *fourbit_errmsg(void);          /* the last failure's message on this thread; "" if none */
const char *fourbit_status_name(int status);
void fourbit_free(void *p);                /* strings the library returns (the *_json calls) */

/* What this library links and finds: {"version", "abi", "lua", "lmdb", "nvrtc", "nccl", "cuda", "devices": [...],
 * "cache_dir"}: a JSON object, malloc'd into *out (fourbit_free). Never fails for want of a GPU. */
int fourbit_info_json(char **out);

/* ---- recipes and plans ------------------------------------------------------------------------------------------ */
typedef struct fourbit_recipe fourbit_recipe;
/* The model's sizes, overriding the recipe's (fields 0: the recipe's; the recipe's layer rules are resolved again for
 * a new layer count, as fourbit train --layers does). */
typedef struct {
  uint32_t size;             /* sizeof(fourbit_dims) */
  int layers, d_model, d_ff, experts, top_k, vocab;
} fourbit_dims;
/* Load and validate a recipe (sandboxed Lua; closed before returning). dims may be NULL. */
int fourbit_recipe_open(const char *path, const fourbit_dims *dims, fourbit_recipe **out);
void fourbit_recipe_close(fourbit_recipe *r);
/* The plan for arch (NULL: "sm_90a"; else "sm_100a", "sm_103a") as `fourbit plan --json` prints it, into *out. */
int fourbit_recipe_plan_json(const fourbit_recipe *r, const char *arch, char **out);

/* ---- the kernel cache ------------------------------------------------------------------------------------------- */
typedef struct fourbit_cache fourbit_cache;
/* dir NULL or "": $FOURBIT_CACHE, else ~/.cache/fourbit. Created when missing; read-only without write access. On a
 * local disk only (cache/README.md). */
int fourbit_cache_open(const char *dir, fourbit_cache **out);
const char *fourbit_cache_dir(const fourbit_cache *c);
void fourbit_cache_close(fourbit_cache *c);

/* ---- quantizers on host buffers (docs/numerics.md; the bytes of `fourbit quant`) ------------------------------- */
enum { FOURBIT_NVFP4 = 1, FOURBIT_MXFP8 = 2, FOURBIT_S2F6 = 3 };
typedef struct {
  uint32_t size;             /* sizeof(fourbit_quant_opts) */
  int format;                /* FOURBIT_NVFP4 | FOURBIT_MXFP8 | FOURBIT_S2F6 */
  int outer_row;             /* nvfp4: one outer scale per row (else one per tensor) */
  int four_over_six;         /* nvfp4: 4/6 block scaling */
  int sr;                    /* nvfp4, mxfp8: stochastic rounding (random stream 0) */
  int rht;                   /* s2f6: the 32-point random Hadamard transform first */
  uint32_t seed;             /* of SR, and of the RHT sign mask */
  uint32_t step;             /* SR counter step */
} fourbit_quant_opts;
/* Sizes of an R x C matrix's encoding: code bytes (nvfp4 R*C/2, else R*C), scale bytes (one per block of 16 for
 * nvfp4, 32 else) and outer scales (nvfp4: 1 or R floats; else 0). FOURBIT_EINVAL for options that do not apply to
 * the format (as `fourbit quant` refuses them), C not a multiple of the block, R or C out of [1, 2^31], more than
 * 2^33 values. */
int fourbit_quant_layout(const fourbit_quant_opts *o, size_t rows, size_t cols, size_t *code_bytes, size_t *scale_bytes,
                         size_t *n_outer);
/* x: rows x cols float32, row-major. codes / scales / outer: the sizes of fourbit_quant_layout (outer may be NULL for
 * mxfp8 and s2f6). The bytes `fourbit quant` writes, part by part. */
int fourbit_quantize(const fourbit_quant_opts *o, const float *x, size_t rows, size_t cols, uint8_t *codes,
                     uint8_t *scales, float *outer);
/* The inverse: y rows x cols float32, the bytes `fourbit dequant` writes. */
int fourbit_dequantize(const fourbit_quant_opts *o, const uint8_t *codes, const uint8_t *scales, const float *outer,
                       size_t rows, size_t cols, float *y);

/* ---- quantizers on device pointers (lib/abi.c: the generator's GPU kernels) ------------------------------------ */
/* The same bytes as fourbit_quantize / fourbit_dequantize, computed on the GPU from and into device memory: the
 * generator's quantizer kernels (and tcopy.cuh as the NVFP4 / MXFP8 dequantizer), each form compiled with NVRTC at its
 * first use (about a second) and kept by the handle. A handle retains the device's primary context, like the layer. */
typedef struct fourbit_quantizer fourbit_quantizer;
typedef struct {
  uint32_t size;             /* sizeof(fourbit_quantizer_opts) */
  int device;                /* CUDA ordinal */
  int verbose;               /* a line on stderr for each kernel compiled */
} fourbit_quantizer_opts;
enum { FOURBIT_F32 = 0, FOURBIT_BF16 = 1 }; /* the input's element type */
int fourbit_quantizer_create(const fourbit_quantizer_opts *o, fourbit_quantizer **out);
void fourbit_quantizer_free(fourbit_quantizer *q);
/* x: rows x cols FP32 or BF16 (dtype; BF16 values quantize as their exact FP32 values do), row-major, on the device;
 * codes / scales / outer: device buffers of fourbit_quant_layout's sizes (outer 0 for mxfp8 and s2f6). Queued on stream
 * (a CUstream; NULL: the legacy default stream); nothing synchronizes with the host. Options and refusals: as
 * fourbit_quantize. Calls on one handle are serialized; a call on another stream than the last waits for the last. */
int fourbit_quantize_device(fourbit_quantizer *q, const fourbit_quant_opts *o, int dtype, uint64_t x, size_t rows,
                            size_t cols, uint64_t codes, uint64_t scales, uint64_t outer, void *stream);
/* The inverse into y (rows x cols FP32, device): fourbit_dequantize's values bit for bit, except that a NaN may carry
 * another payload (the GPU's arithmetic gives its canonical NaN; the NaNs are in the same places). */
int fourbit_dequantize_device(fourbit_quantizer *q, const fourbit_quant_opts *o, uint64_t codes, uint64_t scales,
                              uint64_t outer, size_t rows, size_t cols, uint64_t y, void *stream);
/* {"arch", "compiled", "compile_ms", "loaded": [variant names]} (malloc'd): the kernels this handle compiled. */
int fourbit_quantizer_kernels_json(const fourbit_quantizer *q, char **out);

/* ---- the GPU expert layer (runtime/experts_gpu.c; sm_90a) ----------------------------------------------------- */
typedef struct fourbit_layer fourbit_layer;
typedef struct fourbit_saved fourbit_saved;
typedef struct {
  uint32_t size;             /* sizeof(fourbit_layer_opts) */
  int device;                /* CUDA ordinal; its primary context is retained and made current (never a new one) */
  int tokens;                /* tokens per call: the shape bucket of the cache's winners (0: the recipe's) */
  fourbit_cache *cache;      /* NULL: every kernel's default variant compiled with NVRTC */
  int verbose;               /* kernel notices on stderr */
} fourbit_layer_opts;
/* The expert layers of recipe r (its model sizes as opened) on one GPU, every kernel of every layer loaded now: the
 * cache's tuned winner, else its default variant, else compiled with NVRTC (fourbit_layer_kernels_json says which).
 * One handle serves all the model's layers (the forward names one). r must outlive it. */
int fourbit_layer_create(const fourbit_recipe *r, const fourbit_layer_opts *o, fourbit_layer **out);
/* Each kernel the layer loaded: [{"spec", "variant", "from": "winner"|"default"|"nvrtc", "note"}, ...] (malloc'd),
 * with "kernels", "from_cache", "compiled", "compile_ms" beside it. */
int fourbit_layer_kernels_json(const fourbit_layer *l, char **out);
void fourbit_layer_free(fourbit_layer *l); /* after every fourbit_saved of it is freed */

/* Device pointers (CUdeviceptr values) of the layer's tensors, T tokens, D d_model, F d_ff, E experts, k top_k:
 * forward  x (T x D BF16), topk_idx (int32 T x k, each in [0, E)), topk_w (FP32 T x k), w13 (FP32 E x 2F x D: gate
 *          rows, then up rows), w2 (FP32 E x D x F) -> y (T x D BF16);
 * backward dy (T x D FP32) -> dx (T x D FP32), dw13, dw2 (FP32, shaped like the masters, overwritten), dtopk_w (FP32
 *          T x k).
 * layer: which of the recipe's layers (1-based: its precision, and its random streams' ids).
 * stream: the caller's CUstream (NULL: the legacy default stream). The layer's work (every launch, copy and memset) is
 * queued on that stream itself, after what the caller queued on it before the call and before what it queues after.
 * A call on another stream than the layer's last call first makes it wait for the last stream's work (the layer's
 * memory pool is reused from call to call). The forward synchronizes the stream with the host once (the rows per
 * expert). seed, step: the SR and RHT streams (as fourbit
 * train's step). The forward hands back *saved (what the backward needs, in device memory of the layer's pool);
 * the backward consumes it, as does fourbit_saved_free (no backward). Calls on one layer are serialized. */
int fourbit_layer_forward(fourbit_layer *l, int layer, int tokens, uint64_t x, uint64_t topk_idx, uint64_t topk_w, uint64_t w13,
                          uint64_t w2, uint64_t y, uint32_t seed, uint32_t step, void *stream, fourbit_saved **saved);
int fourbit_layer_backward(fourbit_layer *l, fourbit_saved *saved, uint64_t dy, uint64_t dx, uint64_t dw13,
                           uint64_t dw2, uint64_t dtopk_w, void *stream);
void fourbit_saved_free(fourbit_saved *s);

#ifdef __cplusplus
}
#endif
#endif
