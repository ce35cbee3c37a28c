/* train_gpu.h — the GPU-resident train step (runtime/train_gpu.c): `fourbit train --device gpu` runs the whole step on
 * the GPU. The parameters (FP32 masters, gradients, AdamW moments, the BF16 copies the forward reads) live in device
 * memory for the whole run; the forward and backward of every non-expert piece run as templates/dense.cuh kernels and
 * cuBLAS GEMMs (base/fb_cublas.h), the router as the plan's router kernel, the expert layers as
 * fb_gpu_experts_forward_dev / _backward_dev (experts_gpu.h), the gradient norm as a deterministic device reduction
 * and AdamW as templates/adamw.cuh. The trainer's host copies of the parameters are refreshed only when someone reads
 * them (fb_train_param, fb_train_save) and uploaded again after fb_train_load.
 *
 * Entry points: fb_train_gpu_attach(), fb_train_gpu_stats_get(), fb_train_gpu_compile(). */
#ifndef FB_TRAIN_GPU_H
#define FB_TRAIN_GPU_H
#include "experts_gpu.h"
#include "fourbit_train.h"

typedef struct {
  const fb_recipe *recipe;       /* the trainer's recipe (its path keys the cached kernels) */
  fb_gpu_experts *experts;       /* made for the same recipe, tokens and communicator as the trainer */
  fb_cache *cache;               /* cubins by content key: read, and written after an NVRTC compile (NULL: none) */
  fb_gpu_kernel_lookup lookup;   /* the router: the tuned winner (or cached default) first; NULL: none */
  void *lookup_user;
  FILE *log;                     /* kernel notices with verbose (NULL: quiet) */
  int verbose;
} fb_train_gpu_opts;

typedef struct {
  int kernels, from_cache, compiled;
  double compile_ms;
} fb_train_gpu_stats;

/* From now on the trainer's steps run on the GPU of the experts (collective under expert parallelism): loads the
 * step's kernels (cache, else NVRTC), creates the cuBLAS handle, allocates the device state and uploads the masters and
 * moments. FB_EINVAL for exact mode (gradient checks run on the CPU path). */
fb_status fb_train_gpu_attach(fb_trainer *t, const fb_train_gpu_opts *o);
fb_train_gpu_stats fb_train_gpu_stats_get(const fb_trainer *t);
/* No GPU: generate and compile the step's own kernels (dense.cuh, the plan's router, AdamW with a BF16 copy) for
 * arch (sm_90a, sm_100a, sm_103a); with cache, put them there as attach would. */
fb_status fb_train_gpu_compile(const fb_recipe *r, const char *arch, fb_cache *cache, fb_train_gpu_stats *st);
#endif
