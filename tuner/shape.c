/* shape.c — the problem size of each kernel spec of a plan at a number of tokens per rank (the tuner's shape
 * bucket), and the framing of the driver <-> worker messages (tune.h). Entry points: fb_tune_shape(),
 * fb_tune_send(), fb_tune_recv(), fb_tune_now_ms().
 * Sizes, with T tokens per rank, k = top_k, E experts, E_r = E / ep experts per rank, D = d_model, F = d_ff:
 *   dispatch side (role "dispatch", router, permute, unpermute): T rows of D (router: T x E logits)
 *   expert side (everything else on activations): T k rows (the dispatched copies) of D; SwiGLU: T k x F
 *   weights (role "weights", AdamW): E_r x 2F rows of D (W13), per-expert groups
 *   bcopy: as the quantizers (weights: E_r x 2F rows of D), codes + scales in, BF16 out
 *   GEMMs (docs/numerics.md's op table), rows per expert R_e = T k / E_r balanced, padded to 128 (the permutation pads
 *   to the row tile): w13 fwd N = 2F, K = D; w2 fwd N = D, K = F; w2 dgrad N = F, K = D; w13 dgrad N = D, K = 2F;
 *   wgrad dW2 = dY^T A (M = D, N = F) and dW13 = dH^T X (M = 2F, N = D), K = R_e */
#include "tune.h"

#include "fb_error.h"
#include "fb_gemm_host.h"

#include <errno.h>
#include <stdio.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

fb_status fb_tune_shape(const fb_kernel_spec *k, const fb_model *m, int ep, long long T, fb_tune_shape_t *s) {
  memset(s, 0, sizeof *s);
  if (T < 1 || !m || m->d_model < 32 || ep < 1) return FB_ERR(FB_EINVAL, "%s: no shape for %lld tokens", k->name, T);
  long long D = m->d_model, F = m->d_ff, K = m->top_k, E = m->experts, Er = m->experts / ep;
  long long TK = T * K, W = Er * 2 * F;
  int weights = strstr(k->role, "weights") != NULL, dispatch = strstr(k->role, "dispatch") != NULL;
  s->ngroups = 1, s->experts = (int)E, s->top_k = (int)K, s->tile = 128;
  switch (k->op) {
  case FB_OP_ROUTER:
    s->rows = T, s->cols = E, s->bytes = 8.0 * T * E + 8.0 * TK;
    break;
  case FB_OP_PERMUTE: {
    size_t b[3];
    FB_TRY(fb_payload_planes(k->q.format, k->q.format == FB_FMT_NVFP4 && k->q.outer == FB_GRAN_TOKEN, (size_t)D, b));
    s->rows = T, s->cols = D, s->bytes = 8.0 * TK + (double)(T + TK) * (double)(b[0] + b[1] + b[2]);
    break;
  }
  case FB_OP_UNPERMUTE:
    s->rows = T, s->cols = D;
    s->bytes = TK * (k->q.format == FB_FMT_S2F6 ? D + D / 32.0 : 2.0 * D) + 8.0 * TK + (k->out_bf16 ? 2.0 : 4.0) * T * D;
    break;
  case FB_OP_SWIGLU_FWD:
  case FB_OP_SWIGLU_BWD:
    s->rows = TK, s->cols = F, s->bytes = (k->op == FB_OP_SWIGLU_BWD ? 12.0 : 6.0) * TK * F;
    break;
  case FB_OP_ADAMW:
    s->rows = W, s->cols = D, s->experts = (int)Er, s->ngroups = (unsigned)Er, s->bytes = 28.0 * W * D;
    break;
  case FB_OP_GEMM_FWD13:
  case FB_OP_GEMM_FWD2:
  case FB_OP_GEMM_DGRAD2:
  case FB_OP_GEMM_DGRAD13:
  case FB_OP_GEMM_WGRAD: {
    long long re = (TK + Er - 1) / Er;
    re = (re + 127) / 128 * 128;
    s->rows_per_expert = re, s->rows = re * Er, s->experts = (int)Er, s->ngroups = (unsigned)Er, s->tile = 128;
    double ab = k->act.format == FB_FMT_NVFP4 ? 0.5 + 1.0 / 16 : k->act.format == FB_FMT_BF16 ? 2.0 : 1.0 + 1.0 / 32;
    if (k->op == FB_OP_GEMM_WGRAD) {
      s->gm = (int)D, s->gn = (int)F, s->gm2 = (int)(2 * F), s->gn2 = (int)D;
      s->flops = 2.0 * s->rows * ((double)s->gm * s->gn + (double)s->gm2 * s->gn2);
      s->bytes = (ab + 2.0) * s->rows * (D + F + 2 * F + D) + 4.0 * Er * (D * F + 2 * F * D);
    } else {
      s->gn = (int)(k->op == FB_OP_GEMM_FWD13 ? 2 * F : k->op == FB_OP_GEMM_DGRAD2 ? F : D);
      s->gk = (int)(k->op == FB_OP_GEMM_FWD13 || k->op == FB_OP_GEMM_DGRAD2 ? D : k->op == FB_OP_GEMM_FWD2 ? F : 2 * F);
      s->flops = 2.0 * s->rows * s->gn * s->gk;
      s->bytes = ab * s->rows * s->gk + 2.0 * Er * s->gn * s->gk + (k->op == FB_OP_GEMM_DGRAD2 ? 6.0 : 2.0) * s->rows * s->gn;
    }
    s->cols = s->gn;
    return FB_OK; /* rows: whole 128-row tiles already */
  }
  case FB_OP_BCOPY:
    if (weights) s->rows = W, s->cols = D, s->ngroups = (unsigned)Er;
    else s->rows = dispatch ? T : TK, s->cols = D;
    s->bytes = (k->q.format == FB_FMT_NVFP4 ? 0.5 + 1.0 / 16 : 1.0 + 1.0 / 32) * s->rows * s->cols + 2.0 * s->rows * s->cols;
    break;
  default: /* the quantizers on rows x cols */
    if (weights || k->in_f32) s->rows = W, s->cols = D, s->ngroups = (unsigned)Er;
    else s->rows = dispatch ? T : TK, s->cols = D;
    if (k->q.outer == FB_GRAN_EXPERT && !weights && !k->in_f32) s->ngroups = (unsigned)Er;
    if (k->op == FB_OP_REQUANT && k->src.outer == FB_GRAN_EXPERT) s->ngroups = (unsigned)Er;
    if (k->op == FB_OP_REQUANT && k->src.outer != FB_GRAN_EXPERT) s->ngroups = 1;
    s->bytes = (k->in_f32 ? 4.0 : 2.0) * s->rows * s->cols + 1.1 * s->rows * s->cols;
    if (k->op == FB_OP_REQUANT && k->out_bf16) /* the source's codes and scales in, the BF16 copy out */
      s->bytes = (k->src.format == FB_FMT_NVFP4 ? 0.5 + 1.0 / 16 : k->src.format == FB_FMT_MXFP8 ? 1.0 + 1.0 / 32 : 2.0) * s->rows * s->cols +
                 2.0 * s->rows * s->cols;
    break;
  }
  if (s->rows % 32) s->rows += 32 - s->rows % 32; /* whole MX blocks down a column */
  return FB_OK;
}

int fb_tune_is_gemm(const fb_kernel_spec *k) {
  return k->op == FB_OP_GEMM_FWD13 || k->op == FB_OP_GEMM_FWD2 || k->op == FB_OP_GEMM_DGRAD2 || k->op == FB_OP_GEMM_WGRAD ||
         k->op == FB_OP_GEMM_DGRAD13;
}

int fb_tune_gemm_fits(const fb_kernel_spec *k, const fb_variant *v, const fb_tune_shape_t *s, char *why, size_t n) {
  fb_gemm_cfg c;
  if (fb_gemm_config(k, v, &c) != FB_OK) {
    snprintf(why, n, "%s", fb_errmsg());
    return 0;
  }
  if (c.mode) {
    int pm[2] = {s->gm, s->gm2}, pn[2] = {s->gn, s->gn2};
    const int tm = c.family == 2 ? 128 * c.cluster : c.tile_m; /* tcgen05: a cluster walks 128 rows a CTA */
    for (int i = 0; i < 2; ++i)
      if (pm[i] % tm || pn[i] % c.tile_n) {
        snprintf(why, n, "tile %d x %d does not divide M x N = %d x %d", tm, c.tile_n, pm[i], pn[i]);
        return 0;
      }
    if (s->rows_per_expert % c.tile_k) {
      snprintf(why, n, "tile_k %d does not divide the rows per expert (%lld)", c.tile_k, s->rows_per_expert);
      return 0;
    }
  } else if (s->gn % c.tile_n || s->gk % fb_gemm_k_unit(c.tile_k, c.mma_k)) {
    if (c.mma_k) snprintf(why, n, "tile_n %d does not divide N = %d or K = %d is not a multiple of %d (K = 96 MMAs)", c.tile_n, s->gn,
                          s->gk, fb_gemm_k_unit(c.tile_k, c.mma_k));
    else snprintf(why, n, "tile_n x tile_k %d x %d does not divide N x K = %d x %d", c.tile_n, c.tile_k, s->gn, s->gk);
    return 0;
  }
  return 1;
}

long long fb_tune_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    c += w, n -= (size_t)w;
  }
  return 0;
}

int fb_tune_send(int fd, int type, const void *a, size_t an, const void *b, size_t bn, const void *c, size_t cn) {
  uint32_t h[2] = {(uint32_t)type, (uint32_t)(an + bn + cn)};
  if (write_all(fd, h, sizeof h)) return -1;
  if (an && write_all(fd, a, an)) return -1;
  if (bn && write_all(fd, b, bn)) return -1;
  if (cn && write_all(fd, c, cn)) return -1;
  return 0;
}

static int read_all(int fd, void *p, size_t n, long long deadline) {
  char *c = p;
  while (n) {
    if (deadline >= 0) {
      long long left = deadline - fb_tune_now_ms();
      if (left <= 0) return -2;
      struct pollfd pf = {fd, POLLIN, 0};
      int r = poll(&pf, 1, left > 1000000 ? 1000000 : (int)left);
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) continue;
      if (r < 0) return -1;
    }
    ssize_t got = read(fd, c, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return -1;
    c += got, n -= (size_t)got;
  }
  return 0;
}

int fb_tune_recv(int fd, int *type, void **buf, size_t *len, long long deadline_ms) {
  uint32_t h[2];
  long long dl = deadline_ms < 0 ? -1 : fb_tune_now_ms() + deadline_ms;
  int r = read_all(fd, h, sizeof h, dl);
  if (r) return r;
  void *b = realloc(*buf, h[1] ? h[1] : 1);
  if (!b) return -1;
  *buf = b;
  if ((r = read_all(fd, b, h[1], dl))) return r;
  *type = (int)h[0], *len = h[1];
  return 0;
}
