/* fb_dense.h — the parameter block of the GPU-resident train step's small kernels (templates/dense.cuh): one struct
 * passed by value, the same layout in host C (runtime/train_gpu.c, tests/gpu/mock_libcuda.c) and device code.
 * Device pointers are 64-bit integers; unused fields are 0. Each kernel of dense.cuh says which fields it reads. */
#ifndef FB_DENSE_H
#define FB_DENSE_H

typedef unsigned long long fb_ddptr;

typedef struct {
  fb_ddptr x;      /* FP32 rows x cols input (residual stream, logits, ...) */
  fb_ddptr y;      /* FP32 rows x cols output */
  fb_ddptr yb;     /* BF16 rows x cols output (or input: resid's expert output) */
  fb_ddptr w;      /* BF16 weights: a norm's gain (cols), the convolution (cols x width), the embedding (V x cols) */
  fb_ddptr r;      /* FP32 [rows]: RMSNorm's 1/rms */
  fb_ddptr a;      /* FP32 rows x cols second input (the convolution's normed input n1) */
  fb_ddptr dy;     /* FP32 incoming gradient */
  fb_ddptr dx;     /* FP32 outgoing gradient */
  fb_ddptr dg;     /* FP32 weight gradient (overwritten) */
  fb_ddptr idx;    /* int32: token ids / targets / top-k experts */
  fb_ddptr idx2;   /* int32: CSR positions (embedding backward) */
  fb_ddptr probs;  /* FP32 rows x experts: the router's probabilities */
  fb_ddptr tw;     /* FP32 rows x top_k: the router's weights */
  fb_ddptr cnt;    /* int32 [experts]: token-slots routed to each expert (global batch) */
  fb_ddptr dbl;    /* double: per-token cross-entropy; the aux loss's sums; partial sums of squares */
  fb_ddptr acc;    /* double [1]: a running sum of squares */
  fb_ddptr part;   /* FP32 [nparts x cols]: per-chunk column sums (rms_bwd_g, conv_bwd_k), summed by colsum */
  long long rows, cols;
  long long tg;    /* tokens of the global batch */
  int width, seq;  /* convolution width, tokens per sequence */
  int accum;       /* rms_bwd_x: add to dx instead of overwriting */
  int grad;        /* ce: also write the logit gradient */
  int experts, top_k, layers, nparts; /* nparts: sumsq's blocks; the token chunks of the column sums */
  float aux_coef;
  unsigned pad_;
} fb_kp_dense;

#endif
