/* model_internal.h — helpers shared by the runtime's model files (model.c, model_experts.c, model_gemm.c,
 * train.c); not part of the public API.
 *
 * GEMMs: C = A B with FP32 accumulation, for every output element in the order k = 0, 1, ..., K-1 starting
 * from +0 (acc = 0) or from C (acc = 1); no fused multiply-add (-ffp-contract=off), so the result does not
 * depend on vectorization. Operands are the exactly dequantized values (docs/numerics.md): the FP32 product of
 * them is what every GEMM of the CPU path computes. */
#ifndef FB_MODEL_INTERNAL_H
#define FB_MODEL_INTERNAL_H
#include "fourbit_train.h"
#include <stddef.h>

/* C (M x N, ldc) = A (M x K, lda) B (K x N, ldb). */
void fbr_gemm_nn(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc, int acc);
/* C = A B^T, B is N x K (ldb). */
fb_status fbr_gemm_nt(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
                      int acc);
/* C = A^T B, A is K x M (lda), B is K x N (ldb). */
fb_status fbr_gemm_tn(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
                      int acc);
/* dst (cols x rows) = src^T (src rows x cols, lds). */
void fbr_transpose(const float *src, size_t rows, size_t cols, size_t lds, float *dst);

/* BF16 rounding of a value (identity when exact). */
float fbr_rb(float x, int exact);
void fbr_rb_n(float *x, size_t n, int exact);
#endif

/* ---- the trainer's state (model.c: parameters, forward, backward; train.c: steps, checkpoints) ---- */
#ifndef FBR_TRAINER_STATE
#define FBR_TRAINER_STATE
typedef struct {
  char name[40];
  float *w, *g, *m, *v; /* FP32 master, gradient, AdamW moments */
  float *wb;            /* what the forward reads: BF16 values of w (non-expert parameters; exact: w) */
  size_t rows, cols;
  int decay;            /* weight decay applies */
  int expert;           /* the expert ops quantize it themselves (wb unused) */
} fbr_param;

/* Per-layer parameters: P_N1 (norm 1, d), P_CONV (d x width), P_N2, P_ROUTER (experts x d),
 * P_W13 (experts x 2f x d), P_W2 (experts x d x f). Global: embedding, final norm, head. */
enum { P_N1 = 0, P_CONV, P_N2, P_ROUTER, P_W13, P_W2, P_PER_LAYER };
enum { P_EMB = 0, P_NF, P_HEAD, P_GLOBAL };

typedef struct {
  float *x_in, *n1, *r1, *xm, *n2, *r2, *probs, *topk_w;
  int32_t *topk_idx;
  int32_t *gcnt;  /* experts: (token, slot) pairs of the global batch routed to each expert */
  fb_moe_layer moe;
} fbr_layer_act;

struct fb_trainer {
  char recipe_name[64], plan_sha[65];
  fb_plan *plan;
  fb_model M;
  fb_train_opts o;
  const fb_expert_ops *ops;
  fb_markov *data;
  double floor;
  int np;
  fbr_param *p;
  int step;
  int T, nseq;                  /* this rank's tokens and sequences */
  int Tg, nseq_g;               /* the global batch's */
  struct fb_comm *comm;         /* expert parallelism: never NULL (a one-rank communicator when the opts had none) */
  int own_comm;                 /* comm was made by fb_train_create */
  int rank, nranks, nE, e0;     /* this rank's experts: [e0, e0 + nE) */
  fb_ep_traffic traffic;        /* of the current step, this rank's */
  int32_t *tokens, *inp, *tgt;  /* tokens: the global batch; inp, tgt: this rank's sequences */
  float *gprobs;                /* Tg x E, Tg x K (EP: the global batch's router outputs, for the aux loss) */
  int32_t *gidx;
  double *ce_tok;               /* Tg: per-token cross-entropy (EP: gathered, summed in token order) */
  fbr_layer_act *act;
  float *xf, *rf, *hf, *logits;
  float *dx, *dn, *dtmp, *dlog; /* backward scratch */
  double last_ce, last_aux;
  struct fbr_gpu *gpu;          /* the GPU-resident step (train_gpu.c), NULL: this file's host path */
};

fb_status fbr_model_init(fb_trainer *t);              /* parameters and buffers, initialized from the seed */
void fbr_model_free(fb_trainer *t);
/* Forward (and backward with grad) of the batch of `step`; gradients into p[i].g. */
fb_status fbr_model_run(fb_trainer *t, uint32_t step, int grad, double *ce, double *aux);
/* The batch of `step`: t->tokens (the global batch), t->inp and t->tgt (this rank's sequences). */
void fbr_model_batch(fb_trainer *t, uint32_t step);

/* The GPU-resident step (train_gpu.c), when t->gpu: forward (and backward) on the device, the gradients' squared norms
 * (replicated / every tensor with one rank, and this rank's experts with N), AdamW, the host copies. */
fb_status fbr_gpu_run(fb_trainer *t, uint32_t step, int grad, double *ce, double *aux);
fb_status fbr_gpu_sumsq(fb_trainer *t, double *rep, double *ex);
fb_status fbr_gpu_adamw(fb_trainer *t, const fb_adamw_hparams *h);
fb_status fbr_gpu_upload(fb_trainer *t);    /* host masters and moments -> device (after a checkpoint load) */
fb_status fbr_gpu_sync_host(fb_trainer *t); /* device w, g, m, v -> host, when the device has newer ones */
void fbr_gpu_free(fb_trainer *t);
#endif
