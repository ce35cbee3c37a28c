/* fb_kparams.h — the parameter block of every generated memory-bound kernel: one struct passed by value
 * as the kernel's only argument, with the same layout in host C and device code (fixed-width fields;
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
  unsigned pad_;
} fb_kp_mem;

#endif
