/* fb_gemm_host.h — the host side of the generated grouped GEMMs (templates/gemm_sm90.cuh, gemm_mma.cuh): the configuration a
 * spec and variant give, the shared memory they need, the parameter block with its TMA descriptors, the launch,
 * and the BF16 weight copy that the NVFP4 kernels (FB_KIND 1) multiply by.
 * Entry points: fb_gemm_config(), fb_gemm_smem_bytes(), fb_gemm_params(), fb_gemm_launch(),
 * fb_gemm_weights_bf16_ref(), fb_gemm_kperm(). */
#ifndef FB_GEMM_HOST_H
#define FB_GEMM_HOST_H
#include "fb_cuda.h"
#include "fb_gemm.h"
#include "fourbit.h"

typedef struct {
  int family;    /* 0 gemm_sm90.cuh (wgmma, TMA), 1 gemm_mma.cuh (mma.sync, cp.async: every arch from sm_89), 2 gemm_sm100.cuh
                    (tcgen05, TMA: sm_100a / sm_103a; run under the functional model only, never on a Blackwell GPU) */
  int kind;      /* 0 BF16 x BF16, 1 NVFP4 x BF16 copy, 2 MXFP8 x MXFP8 (FP8 wgmma; block-scaled tcgen05), 3 MXFP8 x BF16
                    copy, 4 NVFP4 x NVFP4 (block-scaled tcgen05: B the NVFP4 codes, E4M3 scales and per-expert S_dec) */
  int mode;      /* 0 rows grouped (fwd, dgrad), 1 K grouped (wgrad) */
  int out_bf16;  /* BF16 output, else FP32 */
  int s2f6;      /* w2 fwd: the combine payload, RHT-32 (s2f6 == 2) or not (1) + S2F6 with E8M0 per 32 */
  int swiglu;    /* 1 w13 fwd: A = silu(gate) * up, rows x N/2 BF16 (fb_gemm.h's N is 2f);
                    2 w2 dgrad: dH = [dg | du] of the SwiGLU backward, rows x 2N BF16, from dA and H (args.aux) */
  int tile_m, tile_n, tile_k, stages, consumers; /* family 1: consumers groups of 4 warps compute the tile */
  int cluster;   /* CTAs a cluster: 1, or 2 for family 2 (a cluster launch): the CTA pair (tile_m 256, cta_group::2) or
                    B multicast (tile_m 128, two 1-CTA tiles sharing B) */
  int mma_k;     /* family 2: 96 for NVFP4's K = 96 MMAs (sm_103a; K need not divide by tile_k: fb_gemm_k_unit), else 0 */
} fb_gemm_cfg;

/* FB_EINVAL when k is not a GEMM with a template or v not one of its variants. */
fb_status fb_gemm_config(const fb_kernel_spec *k, const fb_variant *v, fb_gemm_cfg *c);
size_t fb_gemm_smem_bytes(const fb_gemm_cfg *c);
unsigned fb_gemm_threads(const fb_gemm_cfg *c);

/* Device pointers and sizes of one call (fb_gemm.h describes them). a, b: the operands' elements (BF16, NVFP4
 * codes, E4M3) — for kind 1, b is the BF16 copy from fb_gemm_weights_bf16_ref() or its kernel; for kind 4, the NVFP4
 * codes themselves with b_sf and b_outer. */
typedef struct {
  unsigned long long a, b, out, offsets, a_sf, b_sf, a_outer, b_outer;
  long long rows;
  int experts, M, N, K;
  unsigned long long aux; /* w2 dgrad with the SwiGLU backward: H (rows x 2N BF16) */
  unsigned long long out_sf; /* w2 fwd with the S2F6 epilogue: E8M0 scales, rows x N/32 (out: int8 codes) */
  unsigned signs;            /* ... and its RHT-32 sign mask */
} fb_gemm_args;

/* The parameter block: checks the sizes against the tile (FB_EINVAL naming what does not divide) and encodes
 * the two tensor maps with the driver. */
fb_status fb_gemm_params(const fb_gemm_cfg *c, const fb_gemm_args *a, fb_kp_gemm *p);
/* The persistent grid: one CTA per SM (family 0; family 2 in clusters of 2: an even count, at least 2), as many as fit on
 * each of the sms SMs (family 1). fb_gemm_launch launches clusters of c->cluster CTAs (fb_kernel_launch_cluster). */
fb_status fb_gemm_ctas(const fb_kernel *k, const fb_gemm_cfg *c, int sms, unsigned *ctas);
fb_status fb_gemm_launch(const fb_kernel *k, const fb_gemm_cfg *c, const fb_kp_gemm *p, int sms);

/* The K permutation inside every 32-group of the BF16 weight copy: position P (0..31) holds element
 * fb_gemm_kperm(P) of the group (gemm_sm90.cuh, FB_KIND 1). */
int fb_gemm_kperm(int P);
/* The BF16 weight copy on the CPU: codes/sf an NVFP4 matrix rows x K (no outer scale); out[r][32g + P] =
 * bf16(e2m1(q) * sf) of element 32g + fb_gemm_kperm(P) of row r — exact, so the rounding never acts. */
fb_status fb_gemm_weights_bf16_ref(const uint8_t *codes, const uint8_t *sf, size_t rows, size_t K, uint16_t *out);
/* The same for an MXFP8 matrix (FB_KIND 3): out[r][16g + p] = bf16(e4m3(q) * 2^(e-127)) of element 16g +
 * fb_gemm_kperm16(p) — exact unless the product falls below BF16's normal range. */
int fb_gemm_kperm16(int p);
fb_status fb_gemm_mxfp8_bf16_ref(const uint8_t *codes, const uint8_t *e8m0, size_t rows, size_t K, uint16_t *out);
#endif
