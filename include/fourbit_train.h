/* fourbit_train.h — the runtime: a small MoE language model trained with a recipe's numerics
 * (docs/design.md "Runtime", docs/numerics.md "The expert layer, op by op").
 *
 * Entry points, by module:
 *   data      (runtime/data.c)  fb_markov_*: a synthetic language from a seed, a random sparse Markov
 *             chain whose entropy rate (the best achievable loss, in nats) is computed exactly.
 *   experts   (runtime/model_experts.c) fb_expert_ops: the expert layer's forward and backward behind a
 *             struct of function pointers; fb_expert_ops_cpu() is the CPU reference of the recipe's
 *             numerics (NVFP4 / MXFP8 / BF16 forward, the dispatch payload reused by the backward, MXFP8
 *             or NVFP4 backward with SR requantization, the S2F6 + RHT-32 combine). The GPU path plugs a
 *             second fb_expert_ops in (--device gpu).
 *   model     (runtime/model.c) the model, its forward and backward: embedding; L x [RMSNorm -> causal
 *             depthwise convolution -> residual -> RMSNorm -> router -> top-k experts -> residual];
 *             RMSNorm; LM head; cross-entropy (+ the router's load-balancing loss).
 *   train     (runtime/train.c) fb_trainer: AdamW on FP32 masters, gradient clipping, warm-up + cosine
 *             decay, checkpoints (versioned, checksummed, atomic), bit-exact resume.
 *
 * Numerics of the non-expert parts: what a BF16 model does. Master weights are FP32; a forward or
 * backward GEMM rounds its operands to BF16 (round to nearest even) and accumulates in FP32 (k in
 * increasing order); norm and convolution outputs and the combined expert output are BF16 values; the
 * residual stream, logits, loss and every weight gradient are FP32. With `exact` set (the gradient
 * check mode) nothing is rounded or quantized anywhere: the same model in plain FP32.
 * Every random stream is counter-based (Philox4x32-10 keyed by the seed), indexed by the step: the
 * RNG state of a run is (seed, step), which is what a checkpoint stores.
 */
#ifndef FOURBIT_TRAIN_H
#define FOURBIT_TRAIN_H

#include "fourbit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- data: a random sparse Markov chain ------------------------------------------------------ */
/* Every state has `succ` distinct successors (one of them (i+1) mod vocab, which makes the chain
 * irreducible) with probabilities drawn from Dirichlet(1, ..., 1). The stationary distribution pi is
 * found by power iteration on the lazy chain (P + I) / 2 to an L1 change below 1e-14, and the entropy
 * rate is H = sum_i pi_i * H(P_i) nats per token. Sequences start from pi, so every next-token target
 * of every position has expected optimal loss H exactly. */
typedef struct fb_markov fb_markov;
fb_status fb_markov_create(int vocab, int succ, uint32_t seed, fb_markov **out);
void fb_markov_free(fb_markov *m);
double fb_markov_entropy_rate(const fb_markov *m);   /* nats per token */
double fb_markov_stationary_entropy(const fb_markov *m);
/* Batch of step `step`: nseq sequences of seq_len + 1 tokens (inputs are [0, seq_len), targets
 * [1, seq_len]), tokens[b * (seq_len + 1) + j]. A pure function of (seed, step, nseq, seq_len). */
void fb_markov_batch(const fb_markov *m, uint32_t step, int nseq, int seq_len, int32_t *tokens);

/* ---- the expert layer interface ---------------------------------------------------------------- */
/* One expert layer's call: the shape, the plan's precision, and the random streams. `saved` belongs to
 * the ops between forward and backward (what the forward keeps for the backward: the dispatched
 * payload, H, the quantized A, the quantized weights, the combine payload, the routing). */
struct fb_comm; /* runtime/comm.h: the ranks of an expert-parallel run */

/* Payload bytes of the expert layers' exchanges (runtime/model_experts.c "EP"), added up over a step's layers.
 * Every (token, expert) row is counted, the rows a rank keeps for its own experts included, so the figures do not
 * depend on the rank count; `remote` is the part that crossed to another rank. */
typedef struct {
  double rows;            /* (token, expert) rows dispatched */
  double dispatch;        /* forward dispatch payload (NVFP4: codes + E4M3 block scales + the FP32 outer scale) */
  double dispatch_outer;  /* of it, the per-token FP32 outer scales */
  double nvfp4, nvfp4_bf16; /* of it, the rows in NVFP4 (layers with an MXFP8 or BF16 forward differ), and their BF16 size */
  double combine;         /* the combine payload back (S2F6 + E8M0, or BF16) */
  double dy, dx;          /* backward: dY rows out (BF16), dX rows back (BF16) */
  double bf16;            /* what each of those four would be in BF16: rows x 2 d_model bytes */
  double remote;          /* bytes of all four that went to another rank */
} fb_ep_traffic;

typedef struct fb_moe_layer {
  int layer;                  /* 1-based */
  const fb_layer_prec *prec;  /* the plan's resolved precision of this layer */
  int tokens, d_model, d_ff, experts, top_k; /* tokens: this rank's; experts: all ranks' */
  uint32_t seed, step;        /* SR and RHT streams: key (seed, fb_moe_stream(layer, operand)), counter step */
  int exact;                  /* no quantization, no BF16 rounding (gradient check) */
  void *saved;
  /* Expert parallelism: with comm of N > 1 ranks, rank r owns experts [r E/N, (r+1) E/N) (w13, w2, dw13, dw2 hold
   * those only) and its `tokens` are global tokens [r tokens, (r+1) tokens). NULL: one rank, every expert. */
  struct fb_comm *comm;
  fb_ep_traffic *traffic;     /* the layer adds its payload bytes here (NULL: not counted) */
} fb_moe_layer;

/* The operands that are rounded stochastically each get a stream id: (layer << 8) | operand. */
enum {
  FB_MOE_OP_X = 1, FB_MOE_OP_W13, FB_MOE_OP_A, FB_MOE_OP_W2, FB_MOE_OP_DY_ROW, FB_MOE_OP_DY_COL,
  FB_MOE_OP_W2_T, FB_MOE_OP_A_T, FB_MOE_OP_DH_ROW, FB_MOE_OP_DH_COL, FB_MOE_OP_W13_T, FB_MOE_OP_X_T
};
uint32_t fb_moe_stream(int layer, int operand);

/* Forward: y[t] = sum_s topk_w[t,s] * expert_{topk_idx[t,s]}(x[t]), expert_e(x) = W2_e (silu(g) * u),
 * [g | u] = W13_e x, with the plan's numerics. x: tokens x d_model (BF16 values held in FP32);
 * w13: experts x 2 d_ff x d_model FP32 masters (gate rows, then up rows); w2: experts x d_model x d_ff;
 * y: tokens x d_model. Keeps what the backward needs in L->saved.
 * Backward: from dy (tokens x d_model) writes dx (tokens x d_model), dw13, dw2 (shaped like the masters,
 * overwritten) and dtopk_w (tokens x top_k: dL/dtopk_w); releases L->saved. The gradients are those of the
 * quantized forward with every quantizer taken as the identity (the straight-through estimator).
 * release: drops L->saved without a backward (evaluation, errors). */
typedef struct fb_expert_ops {
  const char *name;
  void *ctx;
  fb_status (*forward)(void *ctx, fb_moe_layer *L, const float *x, const int32_t *topk_idx, const float *topk_w,
                       const float *w13, const float *w2, float *y);
  fb_status (*backward)(void *ctx, fb_moe_layer *L, const float *dy, float *dx, float *dw13, float *dw2,
                        float *dtopk_w);
  void (*release)(void *ctx, fb_moe_layer *L);
} fb_expert_ops;

/* The CPU reference (runtime/model_experts.c), single-threaded and deterministic. */
const fb_expert_ops *fb_expert_ops_cpu(void);

/* ---- training ------------------------------------------------------------------------------------ */
typedef struct {
  int steps;          /* the schedule's length: warm-up, then cosine decay to min_lr at `steps` */
  int tokens;         /* tokens per step (a multiple of seq_len) */
  int seq_len;        /* tokens per sequence; the convolution does not cross sequences */
  uint32_t seed;      /* data, initialization, SR and RHT streams */
  float lr, min_lr, b1, b2, eps, wd, clip, aux_coef;
  int warmup;         /* steps of linear warm-up */
  int markov_succ;    /* successors per state of the synthetic language */
  int exact;          /* gradient-check mode: FP32 everywhere, no quantization */
  /* Expert parallelism (runtime/comm.h; NULL: one rank). Every rank of comm calls fb_train_create, fb_train_step,
   * fb_train_save and fb_train_load together (they are collective). Rank r holds the global batch's sequences
   * [r, r+1) x nseq/N (nseq/N must be whole), experts [r E/N, (r+1) E/N) with their masters and AdamW state, and a
   * replica of every other parameter, whose gradients are summed over the ranks. Not part of a run's identity: a
   * checkpoint of N ranks resumes on any rank count that divides the experts. */
  struct fb_comm *comm;
  const char *arch;    /* the arch the plan names its kernels for (the GPU's, fb_gpu_device_arch); NULL: sm_90a */
} fb_train_opts;

/* Defaults: lr 3e-3, min_lr 3e-4, betas (0.9, 0.95), eps 1e-8, wd 0.1 (not on norms), clip 1.0,
 * aux_coef 0.01, warm-up min(100, steps / 10), seq_len 32, 4 successors; steps, tokens, seed from args. */
void fb_train_opts_default(fb_train_opts *o, int steps, int tokens, uint32_t seed);

typedef struct {
  int step;            /* 1-based: the number of steps taken after this one */
  double loss;         /* mean cross-entropy, nats */
  double aux;          /* load-balancing loss (before aux_coef) */
  double grad_norm;    /* before clipping */
  double lr;
  int skipped;         /* non-finite loss or gradient: the update was not applied */
  double ms;           /* wall time of the step */
  fb_ep_traffic traffic; /* the expert layers' payload bytes of the step, all ranks together */
} fb_step_stats;

typedef struct fb_trainer fb_trainer;

/* Load a recipe with its model's dimensions overridden (fields of `over` that are 0 keep the recipe's):
 * the recipe is evaluated again as extend(include "RECIPE", { model = { ... } }), so its layer rules
 * (last_fraction(1/6) ...) resolve against the new layer count; parallel.ep becomes 1 (one CPU rank).
 * over may be NULL (fb_recipe_load). */
fb_status fb_train_recipe_load(const char *path, const fb_model *over, fb_recipe **out);

/* The model is r->model (override it in the recipe before); the plan is resolved for sm_90a.
 * ops may be NULL (the CPU reference). */
fb_status fb_train_create(const fb_recipe *r, const fb_train_opts *o, const fb_expert_ops *ops, fb_trainer **out);
void fb_train_free(fb_trainer *t);
/* One step: forward, backward, clipping, AdamW. */
fb_status fb_train_step(fb_trainer *t, fb_step_stats *st);
int fb_train_step_index(const fb_trainer *t);   /* steps taken so far */
double fb_train_floor(const fb_trainer *t);     /* the data's entropy rate, nats */
const fb_plan *fb_train_plan(const fb_trainer *t);
size_t fb_train_param_count(const fb_trainer *t); /* scalars, all ranks' experts counted */

/* Checkpoint (collective under EP: rank 0 gathers every rank's experts and writes one file, the format of one
 * rank's; load: every rank reads the file and keeps its experts): "FBCKPT" magic, format version, the run's identity (recipe, model, options), the step,
 * the RNG state (seed, step), masters + AdamW moments; a sha256 of everything before it at the end.
 * Written to a temporary file beside path, fsync'd, renamed. load refuses another version, a bad
 * checksum, or a run of another recipe, model or options (FB_EINVAL naming the field). */
fb_status fb_train_save(const fb_trainer *t, const char *path);
fb_status fb_train_load(fb_trainer *t, const char *path);
/* The parser fb_train_load calls: the checkpoint's bytes from memory (name is the file's name in messages). The
 * whole input is checked before any of it is used: on an error the trainer is as it was. */
fb_status fb_train_load_buffer(fb_trainer *t, const void *data, size_t n, const char *name);
/* Before a run: can fb_train_save write path? Its directory must exist and take a new file (a temporary file is
 * created there and removed), and path must not be a directory or another non-regular file (FB_EINVAL, naming
 * path). Not collective: the caller asks on the rank that writes. */
fb_status fb_train_save_check(const char *path);

/* ---- gradient check support ------------------------------------------------------------------------ */
/* Parameter tensors: name ("layer3.w13"), masters and gradients (of the last fb_train_loss_grad); under EP the
 * expert tensors hold this rank's experts. */
int fb_train_nparams(const fb_trainer *t);
typedef struct { const char *name; float *w, *g; size_t n; } fb_param_view;
fb_param_view fb_train_param(const fb_trainer *t, int i);
/* Loss (cross-entropy + aux_coef * aux) of the batch of `step` at the current masters, in double;
 * with grad, the gradients of it (fb_train_param(...).g). No update. */
fb_status fb_train_loss_grad(fb_trainer *t, uint32_t step, int grad, double *loss);

#ifdef __cplusplus
}
#endif
#endif
