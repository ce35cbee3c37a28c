/* gemm_host.c — configuration, tensor maps and launch of the generated grouped GEMMs, both families (fb_gemm_host.h). */
#include "fb_gemm_host.h"

#include "fb_error.h"

#include <string.h>

#define vparam fb_variant_param

fb_status fb_gemm_config(const fb_kernel_spec *k, const fb_variant *v, fb_gemm_cfg *c) {
  memset(c, 0, sizeof *c);
  if (!strcmp(v->tmpl, "gemm_mma.cuh")) c->family = 1;
  else if (!strcmp(v->tmpl, "gemm_sm100.cuh")) c->family = 2;
  else if (strcmp(v->tmpl, "gemm_sm90.cuh")) return FB_ERR(FB_EINVAL, "%s: not a GEMM variant (template %s)", v->name, v->tmpl);
  c->kind = k->src.format == FB_FMT_NVFP4 ? 1 : k->src.format == FB_FMT_MXFP8 ? 2 : 0;
  c->mode = k->op == FB_OP_GEMM_WGRAD;
  c->out_bf16 = k->out_bf16 && !c->mode;
  c->swiglu = k->op == FB_OP_GEMM_FWD13 ? 1 : k->op == FB_OP_GEMM_DGRAD2 ? 2 : 0;
  c->s2f6 = k->op == FB_OP_GEMM_FWD2 && k->q.format == FB_FMT_S2F6 ? (k->q.rht ? 2 : 1) : 0;
  if (c->s2f6) c->out_bf16 = 0;
  if (c->kind == 2 && vparam(v, "weights_bf16", 0)) c->kind = 3; /* MXFP8 A decoded in registers x BF16 copy */
  if (c->family == 2 && c->kind == 1) c->kind = 4; /* tcgen05: NVFP4 x NVFP4 (B the weights' codes and scales) */
  c->tile_m = vparam(v, "tile_m", 128), c->tile_n = vparam(v, "tile_n", 128), c->tile_k = vparam(v, "tile_k", 64);
  c->stages = vparam(v, "stages", 4), c->consumers = vparam(v, "consumers", 1);
  c->cluster = c->family == 1 ? 1 : vparam(v, "cluster", 1);
  c->mma_k = c->family == 2 ? vparam(v, "mma_k", 0) : 0;
  if (c->cluster != 1 && !(c->family == 2 && c->cluster == 2 && (c->tile_m == 256 || c->tile_m == 128)))
    return FB_ERR(FB_EINVAL, "%s: cluster %d: only the tcgen05 clusters of 2 (the CTA pair at tile_m 256, B multicast at 128) are written",
                  v->name, c->cluster);
  return FB_OK;
}

size_t fb_gemm_smem_bytes(const fb_gemm_cfg *c) { /* fb_gemm.h */
  if (c->family == 2) return (size_t)fb_gemm_tc_smem_total(c->kind == 4 ? 1 : c->kind, c->tile_m, c->tile_n, c->tile_k, c->stages);
  if (c->family == 1) return (size_t)fb_gemm_mma_smem_total(c->kind, c->tile_m, c->tile_n, c->tile_k, c->stages);
  return (size_t)fb_gemm_smem_total(c->kind, c->tile_m, c->tile_n, c->tile_k, c->stages);
}

unsigned fb_gemm_threads(const fb_gemm_cfg *c) {
  if (c->family == 2) return 192u; /* gemm_sm100.cuh: producer, MMA issuer, four epilogue warps */
  return 128u * (unsigned)(c->family == 1 ? c->consumers : 1 + c->consumers);
}

/* A 2D K-major map: inner (contiguous) extent `inner` elements of `esize` bytes, `outer` rows. */
static fb_status tmap(fb_tmap *m, unsigned long long ptr, int u8, unsigned long long inner, unsigned long long outer,
                      unsigned box_inner, unsigned box_outer, int swizzle_bytes) {
  CUtensorMap cm;
  cuuint64_t dims[2] = {inner, outer}, strides[1] = {inner * (u8 ? 1 : 2)};
  cuuint32_t box[2] = {box_inner, box_outer}, es[2] = {1, 1};
  CUtensorMapSwizzle sw = swizzle_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : swizzle_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                                                                 : CU_TENSOR_MAP_SWIZZLE_32B;
  if (strides[0] % 16) return FB_ERR(FB_EINVAL, "gemm: a row of %llu %s is not a multiple of 16 bytes (TMA)", inner, u8 ? "bytes" : "BF16 values");
  CU_CHECK(fb_cu.TensorMapEncodeTiled(&cm, u8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                                      (void *)(uintptr_t)ptr, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, sw,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  memcpy(m, &cm, sizeof *m);
  return FB_OK;
}

fb_status fb_gemm_params(const fb_gemm_cfg *c, const fb_gemm_args *a, fb_kp_gemm *p) {
  memset(p, 0, sizeof *p);
  FB_TRY(fb_cuda_load());
  if (!fb_cu.TensorMapEncodeTiled && c->family != 1) return FB_ERR(FB_ECUDA, "gemm: this driver has no cuTensorMapEncodeTiled");
  if (a->experts < 1) return FB_ERR(FB_EINVAL, "gemm: experts = %d", a->experts);
  if (a->N % c->tile_n) return FB_ERR(FB_EINVAL, "gemm: N = %d is not a multiple of tile_n = %d", a->N, c->tile_n);
  if (c->mode == 0 && !c->mma_k && a->K % c->tile_k) return FB_ERR(FB_EINVAL, "gemm: K = %d is not a multiple of tile_k = %d", a->K, c->tile_k);
  if (c->mode == 0 && c->mma_k && a->K % fb_gemm_k_unit(c->tile_k, c->mma_k))
    return FB_ERR(FB_EINVAL, "gemm: K = %d is not a multiple of %d (K = 96 MMAs: a partial last K tile, whole 16-byte TMA rows)", a->K,
                  fb_gemm_k_unit(c->tile_k, c->mma_k));
  if (c->mode == 1 && a->M % c->tile_m) return FB_ERR(FB_EINVAL, "gemm: M = %d is not a multiple of tile_m = %d", a->M, c->tile_m);
  if (c->mode == 1 && c->family == 2 && a->M % (128 * c->cluster)) /* a cluster walks 256 rows of M (the pair; B multicast) */
    return FB_ERR(FB_EINVAL, "gemm: M = %d is not a multiple of the cluster's %d rows", a->M, 128 * c->cluster);
  if (c->mode == 1 && a->rows % c->tile_k) return FB_ERR(FB_EINVAL, "gemm: wgrad rows = %lld is not a multiple of tile_k", a->rows);
  unsigned long long rows = (unsigned long long)a->rows, K = (unsigned long long)a->K, N = (unsigned long long)a->N;
  unsigned long long EN = (unsigned long long)a->experts * N, M = (unsigned long long)a->M;
  unsigned tm = (unsigned)c->tile_m, tn = (unsigned)(c->swiglu == 1 ? c->tile_n / 2 : c->tile_n); /* B box rows */
  if (c->swiglu == 2 && !a->aux) return FB_ERR(FB_EINVAL, "gemm: the SwiGLU backward epilogue needs H (args.aux)");
  if (c->swiglu == 1 && (c->mode || a->N % 2 || (a->N / 2) % (c->tile_n / 2)))
    return FB_ERR(FB_EINVAL, "gemm: SwiGLU needs N = 2f with f a multiple of tile_n / 2 (N = %d)", a->N);
  /* A: mode 0 rows x K; mode 1 M x rows. B: mode 0 experts*N x K; mode 1 N x rows */
  unsigned long long a_in = c->mode ? rows : K, a_out = c->mode ? M : rows, b_in = c->mode ? rows : K, b_out = c->mode ? N : EN;
  if ((c->kind == 1 || c->kind == 4) && c->mode) return FB_ERR(FB_EINVAL, "gemm: NVFP4 wgrad is not a recipe GEMM");
  if (c->family == 2) { /* gemm_sm100.cuh: a stage row of rb bytes, boxes of min(rb, 128) bytes swizzled by as many; a CTA's
                          boxes: A's 128 rows, B's tile_n (tile_n / 2 with SwiGLU or in a cluster of 2, each CTA its half:
                          the pair's MMA reads it from both CTAs, B multicast loads it into both) */
    int rb = fb_gemm_tc_row_bytes(c->kind == 4 ? 1 : c->kind, c->tile_k), sw = rb < 128 ? rb : 128, u8 = c->kind != 0;
    unsigned bi = (unsigned)(u8 ? sw : sw / 2); /* the box's inner extent in the map's elements */
    tm = 128, tn = c->cluster == 2 ? (unsigned)c->tile_n / 2 : tn;
    if (c->kind == 4) { /* codes: K / 2 bytes a row */
      FB_TRY(tmap(&p->ta, a->a, 1, K / 2, rows, bi, tm, sw));
      FB_TRY(tmap(&p->tb, a->b, 1, K / 2, EN, bi, tn, sw));
    } else {
      FB_TRY(tmap(&p->ta, a->a, u8, a_in, a_out, bi, tm, sw));
      FB_TRY(tmap(&p->tb, a->b, u8, b_in, b_out, bi, tn, sw));
    }
  } else if (c->family == 1) { /* gemm_mma.cuh reads p->a and p->b with cp.async: 16-byte rows (K and rows divide the tile) */
    (void)a_in, (void)a_out, (void)b_in, (void)b_out, (void)tm, (void)tn;
  } else if (c->kind == 0) {
    FB_TRY(tmap(&p->ta, a->a, 0, a_in, a_out, 64, tm, 128));
    FB_TRY(tmap(&p->tb, a->b, 0, b_in, b_out, 64, tn, 128));
  } else if (c->kind == 1) {
    FB_TRY(tmap(&p->ta, a->a, 1, K / 2, rows, 64, tm, 64));
    FB_TRY(tmap(&p->tb, a->b, 0, K, EN, 64, tn, 128));
  } else if (c->kind == 2) {
    FB_TRY(tmap(&p->ta, a->a, 1, a_in, a_out, 128, tm, 128));
    FB_TRY(tmap(&p->tb, a->b, 1, b_in, b_out, 128, tn, 128));
  } else {
    FB_TRY(tmap(&p->ta, a->a, 1, a_in, a_out, 128, tm, 128));
    FB_TRY(tmap(&p->tb, a->b, 0, b_in, b_out, 64, tn, 128));
  }
  p->a = a->a, p->b = a->b;
  p->out = a->out, p->offsets = a->offsets, p->a_sf = a->a_sf, p->b_sf = a->b_sf;
  p->a_outer = a->a_outer, p->b_outer = a->b_outer;
  p->rows = a->rows, p->experts = a->experts, p->M = a->M, p->N = a->N, p->K = a->K, p->aux = a->aux;
  p->out_sf = a->out_sf, p->signs = a->signs;
  if (c->s2f6 && (!a->out_sf || a->N % 32)) return FB_ERR(FB_EINVAL, "gemm: the S2F6 epilogue needs its scale buffer and N %% 32 == 0");
  return FB_OK;
}

fb_status fb_gemm_ctas(const fb_kernel *k, const fb_gemm_cfg *c, int sms, unsigned *ctas) {
  unsigned n = (unsigned)(sms > 0 ? sms : 1);
  if (c->cluster == 2) n = n < 2 ? 2 : n & ~1u; /* the CTA pair, B multicast: whole clusters of 2 (an odd SM count leaves one idle) */
  if (c->family == 1) { /* the portable family: as many CTAs as fit on an SM at once, on every SM */
    unsigned smem = (unsigned)fb_gemm_smem_bytes(c);
    int per = 1;
    if (smem > 48 * 1024) CU_CHECK(fb_cu.FuncSetAttribute(k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem));
    if (fb_cu.OccupancyMaxActiveBlocksPerMultiprocessor)
      CU_CHECK(fb_cu.OccupancyMaxActiveBlocksPerMultiprocessor(&per, k->fn, (int)fb_gemm_threads(c), smem));
    if (per < 1) return FB_ERR(FB_ECUDA, "gemm: %u threads with %u bytes of shared memory do not fit on an SM", fb_gemm_threads(c), smem);
    n *= (unsigned)per;
  }
  *ctas = n;
  return FB_OK;
}

fb_status fb_gemm_launch(const fb_kernel *k, const fb_gemm_cfg *c, const fb_kp_gemm *p, int sms) {
  unsigned ctas;
  FB_TRY(fb_gemm_ctas(k, c, sms, &ctas));
  if (c->cluster > 1)
    return fb_kernel_launch_cluster(k, ctas, 1, fb_gemm_threads(c), (unsigned)c->cluster, (unsigned)fb_gemm_smem_bytes(c), p, sizeof *p);
  return fb_kernel_launch_smem(k, ctas, 1, fb_gemm_threads(c), (unsigned)fb_gemm_smem_bytes(c), p, sizeof *p);
}

int fb_gemm_kperm(int P) {
  int s = P >> 4, p = P & 15;
  return 8 * ((p & 7) >> 1) + 4 * s + 2 * (p >> 3) + (p & 1);
}

int fb_gemm_kperm16(int p) { return 4 * ((p & 7) >> 1) + 2 * (p >> 3) + (p & 1); }

fb_status fb_gemm_weights_bf16_ref(const uint8_t *codes, const uint8_t *sf, size_t rows, size_t K, uint16_t *out) {
  if (K % 32) return FB_ERR(FB_EINVAL, "gemm weights: K = %zu is not a multiple of 32", K);
  for (size_t r = 0; r < rows; ++r)
    for (size_t g = 0; g < K / 32; ++g)
      for (int P = 0; P < 32; ++P) {
        size_t i = r * K + 32 * g + (size_t)fb_gemm_kperm(P);
        uint8_t q = (uint8_t)((codes[i / 2] >> (4 * (i & 1))) & 15);
        float v = fb_e2m1_decode(q) * fb_e4m3_decode(sf[i / 16]);
        out[r * K + 32 * g + (size_t)P] = fb_bf16_from_f32(v);
      }
  return FB_OK;
}

fb_status fb_gemm_mxfp8_bf16_ref(const uint8_t *codes, const uint8_t *e8m0, size_t rows, size_t K, uint16_t *out) {
  if (K % 32) return FB_ERR(FB_EINVAL, "gemm MXFP8 copy: K = %zu is not a multiple of 32", K);
  for (size_t r = 0; r < rows; ++r)
    for (size_t g = 0; g < K / 16; ++g)
      for (int P = 0; P < 16; ++P) {
        size_t i = r * K + 16 * g + (size_t)fb_gemm_kperm16(P);
        float v = fb_e4m3_decode(codes[i]) * fb_e8m0_decode(e8m0[i / 32]);
        out[r * K + 16 * g + (size_t)P] = fb_bf16_from_f32(v);
      }
  return FB_OK;
}
