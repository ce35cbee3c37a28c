/* fb_kparams.h — the parameter block of every generated memory-bound kernel: one struct passed by value
 * as the kernel's only argument (fb_kp_mem: the quantizers; fb_kp_moe: router, permute, unpermute, SwiGLU,
 * AdamW), with the same layout in host C and device code (fixed-width fields;
 * device pointers as 64-bit integers). Each template's header says which fields it reads. */
#ifndef FB_KPARAMS_H
#define FB_KPARAMS_H

typedef unsigned long long fb_dptr;

typedef struct {
  fb_dptr in;            /* rows x cols input: BF16 (or FP32 where the template says FB_IN_F32) */
  fb_dptr out;           /* codes (quant: NVFP4 packed / E4M3 / int8 S2F6) or FP32 output (dequant) */
  fb_dptr scales;        /* block scales: E4M3 (NVFP4) or E8M0 (MXFP8, S2F6) */
  fb_dptr s_dec;         /* NVFP4 outer scales: written per row; read/written per tensor or group */
  fb_dptr amax;          /* FP32 amax: per tensor [1] or group [ngroups] (read by quant; written by amax) */
  fb_dptr group_offsets; /* long long [ngroups + 1] row offsets for per-group (expert) outer scales */
  fb_dptr flags;         /* unsigned: amax sets bit 0 when it meets a non-finite value */
  fb_dptr src_scales;    /* requant: the source's block scales */
  fb_dptr src_s_dec;     /* requant: the source's NVFP4 outer scales */
  long long rows, cols;  /* of the input as stored (requant: of the source) */
  unsigned ngroups;
  unsigned seed, stream, step; /* SR: Philox key (seed, stream), counter step */
  unsigned signs;        /* RHT-32 sign mask */
  unsigned out_group;    /* requant to the BF16 copy (mx_col.cuh FB_KBF16): source rows a regrouped output row (0: none) */
  unsigned pad_;
  /* the SR index map of the MXFP8 quantizers with SR (quant_mxfp8.cuh, mx_col.cuh; as fb_mxfp8_quantize_rows_at):
   * element (i, j) of the output as stored (rows of 32-blocks: the input's rows for quant_mxfp8, its columns for the
   * transposing mx_col) draws the bits of index (sr_row0 + i) * sr_ld + sr_col0 + j, so that a slice of a matrix (a
   * rank's rows, a chunk of experts) draws what the whole matrix draws there. sr_ld 0: the identity map. */
  long long sr_row0, sr_ld, sr_col0;
  /* mx_col.cuh FB_BOTH (a BF16 matrix quantized down its columns as above and, in the same pass, along its rows): the
   * row-wise codes (rows x cols E4M3) and scales (rows x cols/32 E8M0), their SR stream and index map (as sr_* above,
   * in the row-wise output's layout) */
  fb_dptr out2, scales2;
  unsigned stream2, pad2_;
  long long sr2_row0, sr2_ld, sr2_col0;
} fb_kp_mem;

/* ---- the MoE and optimizer kernels: router.cuh, permute.cuh, unpermute.cuh, swiglu.cuh, adamw.cuh ---- */
#define FB_MOE_MAX_TOPK 64     /* router: a warp keeps the ranks in two registers per lane */
#define FB_PERMUTE_CHUNK 1024  /* permute: (token, slot) entries per chunk; the chunk table is
                                  ceil(T*k / FB_PERMUTE_CHUNK) x E int32 */

/* Each template's header says which fields it reads and writes; unused ones may be 0. */
typedef struct {
  fb_dptr in;           /* router: logits FP32; permute: payload rows (BF16 / codes); unpermute: y rows
                           (BF16 / S2F6 int8); swiglu: H BF16; adamw: the gradient FP32 */
  fb_dptr in_scales;    /* permute / unpermute: the payload's block scales (E4M3 / E8M0) */
  fb_dptr in_outer;     /* permute: NVFP4 per-token FP32 outer scales */
  fb_dptr in2;          /* swiglu backward: dA BF16 */
  fb_dptr out;          /* router: -; permute: gathered rows; unpermute: tokens FP32 / BF16; swiglu: A / dH;
                           adamw: next step's weights (BF16 copy / E4M3 codes) */
  fb_dptr out_scales;   /* permute: gathered block scales; adamw: E8M0 scales of the MXFP8 weights */
  fb_dptr out_outer;    /* permute: gathered per-token outer scales */
  fb_dptr probs;        /* router: FP32 T x E */
  fb_dptr topk_idx;     /* int32 T x k: router writes, permute reads */
  fb_dptr topk_w;       /* FP32 T x k: router writes, unpermute reads (0: every weight is 1) */
  fb_dptr row_of;       /* int32 [T*k]: destination row of entry (t, slot); -1 for a dropped entry */
  fb_dptr token_of;     /* int32 [rows]: source token of each destination row; -1 for padding */
  fb_dptr offsets;      /* long long [E+1]: padded first row of each expert (fb_kp_mem.group_offsets' type) */
  fb_dptr counts;       /* int32 [E]: entries per expert */
  fb_dptr chunk_counts; /* int32 [nchunks x E]: permute's workspace (no initialization needed) */
  fb_dptr master;       /* adamw: FP32 master weights, rows x cols, updated in place */
  fb_dptr m, v;         /* adamw: FP32 moments, updated in place */
  fb_dptr amax;         /* adamw NVFP4: FP32 max |w| per tensor [1] / expert [E]; zero before the launch */
  fb_dptr flags;        /* adamw: bit 0 set on a non-finite new weight (0: not reported) */
  long long rows, cols; /* router, permute, unpermute: rows = tokens; swiglu: rows x f; adamw: E*N x K */
  int experts, top_k;
  int tile;             /* permute: destination rows of each expert are padded to a multiple of tile */
  int pass;             /* permute: 0 count, 1 scan, 2 place, 3 gather */
  float lr, b1, b2, eps, wd, bc1, bc2, gscale; /* adamw */
  unsigned seed, stream, step; /* adamw MXFP8 SR: Philox key (seed, stream), counter step */
  unsigned signs;       /* unpermute, combine_bwd: RHT-32 sign mask */
  fb_dptr grad_w;       /* combine_bwd: FP32 T x k, dL/dtopk_w */
} fb_kp_moe;

#endif
