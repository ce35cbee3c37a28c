/* experts_gpu.h — the expert layer on one GPU (sm_90a): an fb_expert_ops (include/fourbit_train.h) whose forward and
 * backward run the generated kernels (templates/) in the order of docs/numerics.md's "The expert layer, op by op" table.
 * Expert parallelism: with opts.comm of N ranks (one process per GPU, device fb_comm_local_rank), rank r owns experts
 * [r E/N, (r+1) E/N) and the layers exchange their payloads with NCCL (runtime/comm.h); without one, a one-rank
 * communicator of its own. One rank exchanges nothing: the dispatch permute writes the owner's padded layout itself and
 * the way back reads the owner's rows in place (fb_gpu_experts_set_exchange: through the exchange path all the same,
 * NCCL sends to itself; the same bytes out).
 *
 * Entry points: fb_gpu_experts_create(), fb_gpu_experts_ops(), fb_gpu_experts_stats(), fb_gpu_experts_free(),
 * fb_gpu_experts_probe() (tests: the saved device tensors of a layer between its forward and backward). */
#ifndef FB_EXPERTS_GPU_H
#define FB_EXPERTS_GPU_H
#include "fourbit_train.h"
#include <stdio.h>

/* Where a kernel's cubin comes from before NVRTC: the caller's cache lookup (cli/train.c wraps fb_tune_lookup; the
 * runtime does not link the tuner). On FB_OK *cubin (malloc'd, the callee frees it after loading) holds the variant
 * named var_name; anything else means "compile the default here". *ms (may be NULL): a tuned winner's median time at
 * its shape bucket, else 0 (the runtime chooses between a fused kernel and the unfused pair by it: grad_both). note: one
 * line for people. */
typedef fb_status (*fb_gpu_kernel_lookup)(void *user, const fb_kernel_spec *k, long long tokens, char *var_name,
                                          size_t var_len, void **cubin, size_t *size, double *ms, char *note, size_t notelen);

typedef struct {
  const fb_recipe *recipe;       /* its model and layer rules; kept by reference */
  int tokens;                    /* tokens per step: the shape bucket of cache lookups */
  fb_gpu_kernel_lookup lookup;   /* NULL: compile every kernel's default variant with NVRTC */
  void *lookup_user;
  FILE *log;                     /* kernel notices (NULL: quiet) */
  int verbose;                   /* one line per kernel instead of the summary */
  int compile_only;              /* no GPU: generate and compile every kernel the layers need, load nothing (the ops
                                    must not be called) */
  const char *pick_family;       /* a GEMM family ("wgmma", "mma": gen/fb_tmpl.h's family names): every GEMM from its
                                    variants only (a cached winner of another family is passed over, said in the notes);
                                    NULL: the winner of any family */
  struct fb_comm *comm;          /* the ranks of expert parallelism (kept by reference; the layers' L->comm must be it
                                    when N > 1); NULL: one rank. Create is collective over them (NCCL's init). */
  int device;                    /* without comm: the GPU ordinal (0 by default; with comm: fb_comm_local_rank) */
} fb_gpu_experts_opts;

#define FB_GPU_UNPLANNED_MAX 16
typedef struct {
  int kernels, from_cache, compiled;
  double compile_ms;             /* NVRTC wall time, summed */
  int unplanned;                 /* kernels run that the plan does not name (fourbit tune cannot have tuned them) */
  char unplanned_names[FB_GPU_UNPLANNED_MAX][128];
  long long amax_reused;         /* forward weight quantizations that took the caller's amax (io.w13_amax / w2_amax)
                                    instead of an amax pass over the masters */
} fb_gpu_experts_stats;

typedef struct fb_gpu_experts fb_gpu_experts;

/* Makes GPU fb_comm_local_rank(comm) current (o->device without comm), makes the NCCL communicator, checks the model against what the kernels take (FB_EINVAL naming the dimension), and loads
 * every kernel the recipe's layers need (cache, else NVRTC), so that no compile happens inside a step. */
fb_status fb_gpu_experts_create(const fb_gpu_experts_opts *o, fb_gpu_experts **out);
/* The arch fourbit generates the kernels of GPU `device` for (one of FB_ARCHS; the layer plans, names and compiles for
 * it, and a GEMM gets the variants of every family that arch has), or FB_EINVAL naming the GPU when it has none. */
fb_status fb_gpu_device_arch(int device, const char **arch);
const char *fb_gpu_experts_arch(const fb_gpu_experts *g);
const fb_expert_ops *fb_gpu_experts_ops(fb_gpu_experts *g);
fb_gpu_experts_stats fb_gpu_experts_stats_get(const fb_gpu_experts *g);
void fb_gpu_experts_free(fb_gpu_experts *g);

/* ---- the layer on device tensors (benchmarks; a GPU-resident train step) ----------------------------------------
 * Pointers are device addresses (CUdeviceptr). Forward reads x (T x D BF16), topk_idx (int32 T x k), topk_w (FP32
 * T x k, copied: the caller may reuse it), w13 / w2 (FP32 masters of this rank's experts, laid out as fb_expert_ops
 * says) and writes y (T x D BF16); it keeps what the backward needs in L->saved (device memory of g's pool) and
 * synchronizes with the host at the row counts (one rank: there only; N ranks: the counts are exchanged over the host
 * mesh and the owner's two row maps go up in one more synchronous copy). Backward reads dy (T x D FP32) and writes dx (T x D FP32), dw13,
 * dw2 (FP32, shaped like the masters) and dtopk_w (FP32 T x k), and releases L->saved; it does not synchronize. Work is
 * queued on the default stream. */
typedef struct {
  unsigned long long x, topk_idx, topk_w, w13, w2, y;   /* forward */
  unsigned long long dy, dx, dw13, dw2, dtopk_w;        /* backward */
  /* forward, optional (0: the layer finds them itself): max |w| of the masters w13 / w2 as they are now, NaN ignored
     (templates/amax.cuh's rule), FP32, one per expert of this rank (NVFP4 forward weights with a per-expert outer scale)
     or one (per tensor): what AdamW's NVFP4 form (templates/adamw.cuh FB_WFMT 1) leaves; the layer then skips its own
     amax pass over the masters */
  unsigned long long w13_amax, w2_amax;
} fb_gpu_layer_io;
fb_status fb_gpu_experts_forward_dev(fb_gpu_experts *g, fb_moe_layer *L, const fb_gpu_layer_io *io);
fb_status fb_gpu_experts_backward_dev(fb_gpu_experts *g, fb_moe_layer *L, const fb_gpu_layer_io *io);

/* Per-launch times: begin marks every launch that follows with an event pair; end synchronizes and hands back up to
 * max entries, in launch order. */
typedef struct {
  char name[96], phase[24]; /* kernel variant; step of the layer ("fwd w13", "bwd w2 wgrad", ...) */
  float ms;
} fb_gpu_prof;
void fb_gpu_experts_profile_begin(fb_gpu_experts *g);
fb_status fb_gpu_experts_profile_end(fb_gpu_experts *g, fb_gpu_prof *out, int max, int *n);
/* Device memory of the pool: handed out now, the most handed out at once, held from the driver (bytes). */
void fb_gpu_experts_memory(const fb_gpu_experts *g, size_t *live, size_t *peak, size_t *held);
/* Give everything the pool holds back to the driver and forget its peak and its placement plan (the pool must be empty:
 * no forward waiting for its backward; FB_EINVAL otherwise). The next step sizes the pool afresh, as the first did:
 * bench_layer trims after its check through the other path, so that the timed path's pool is its own. */
fb_status fb_gpu_experts_trim(fb_gpu_experts *g);
/* the phase (bench_layer's profile names: "bwd w13 dgrad", ...) in which the pool reached its peak */
const char *fb_gpu_experts_peak_phase(const fb_gpu_experts *g);

/* A saved tensor of L (after forward, before backward), copied to the host (malloc'd *out, *bytes). Names:
 * x_codes x_scales x_sdec (the dispatched payload, R rows), w13_codes w13_scales w13_sdec, w2_codes w2_scales
 * w2_sdec, a_codes a_scales a_sdec, h (R x 2f BF16) — R: the owner's rows of its nE experts —, y_codes y_scales (the
 * S2F6 combine payload as the source received it: its Rs rows in send order), offsets (long long [nE+1], the owner's
 * padded rows), row_of (int32 [T*k]: one rank, the owner row of each (token, slot) as fb_permute_ref with padding 128
 * gives it; N ranks, the source's send row), source_row_of (the send row: by expert, then token, no padding). BF16
 * tensors (BF16 layers, a BF16 combine): *_codes / y_codes are the BF16 values, no scales; a per-tensor NVFP4 tensor's
 * *_sdec is one float. FB_ENOTFOUND for a name the layer does not have. */
fb_status fb_gpu_experts_probe(const fb_moe_layer *L, const char *name, void **out, size_t *bytes);

/* FOURBIT_GPU_SYNC=1 in the environment: synchronize after every launch and name the kernel of a fault (debugging). */

/* One rank through the exchange path of N ranks (on: a self-send, the owner's regroup and the way back's regather as
 * with N ranks) instead of the direct one; both give the same bytes (tests and bench_layer compare them). Initially on
 * where FOURBIT_GPU_EXCHANGE=1 is in the environment at create. No effect with N > 1 ranks. Takes effect at the next
 * forward (a saved layer keeps its path to its backward). */
void fb_gpu_experts_set_exchange(fb_gpu_experts *g, int on);
int fb_gpu_experts_exchange(const fb_gpu_experts *g);

/* Destination rows of each expert are padded to this (the wgrad GEMM's K tile; the CPU path pads to 32). */
#define FB_GPU_EXPERT_PAD 128
#endif
