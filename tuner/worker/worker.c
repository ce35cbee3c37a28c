/* worker.c — build/fourbit-worker: the process in which `fourbit tune` loads, checks and times candidates, so that
 * one that faults (illegal address, launch failure, a hang the driver kills on its deadline) ends this process and
 * not the sweep. It reads requests on stdin and answers on stdout (tuner/tune.h):
 *   HELLO         -> DEVICE: the fingerprint of GPU 0 and its L2 size, or why there is no GPU
 *   LOAD id ...   -> VERIFIED: cuModuleLoadData of the cubin, then the check of tuner/check/harness.c (run_case: fresh
 *                    random inputs, Gaussian and the edge cases of docs/numerics.md, poisoned outputs, bit-exact against
 *                    the CPU reference) at the harness's small sizes
 *   TIME ids ...  -> TIMES: the candidates interleaved at the spec's shape: 2 warm-ups each, then 5 x effort rounds
 *                    in which each candidate runs once between CUDA events, on input sets rotated so that all sets
 *                    together exceed 2.5 x the L2 size (each launch reads its inputs from HBM); median and spread
 *   QUIT
 * The GEMMs (tuner/check/gemm_harness.c): LOAD checks the variant on a small grouped problem (4 experts of 701, 37, 0
 * and 129 rows; N 768, K 512; wgrad 4 experts of 256, 0, 384, 128 rows, M 512) against the FP64 reference of the
 * exactly dequantized operands: FP32 out within a relative error of 1e-5, BF16 out (SwiGLU and SwiGLU backward
 * included) within 1e-5 beyond BF16's rounding, the S2F6 combine payload dequantized within 2e-2 (S2F6's own error;
 * test_gemm checks it bit for bit against a companion run). The problem is made once per operand kind and reused.
 * TIME runs the GEMM at the bucket's shape (shape.c: the model's widths, balanced rows per expert padded to 128) on
 * operands at training magnitudes; the wgrad spec's time is one dW2 and one dW13 launch together. bcopy (the BF16
 * operand copy) is checked bit-exact by gemm_bcopy_check.
 * A CUDA or fourbit error, the harness's (returned as fb_status) or this file's, is printed and ends the worker
 * (exit 1: after a fault the context is lost), which the driver records as the candidate's failure.
 * The FOURBIT_TUNE_FAULT test hook (LOAD.fault): the candidate is first launched with invalid pointers. The
 * FOURBIT_TUNE_WRONG=SUBSTR one: a GEMM whose name contains SUBSTR and passed its check is reported as failing it (how
 * the tuner falls back to another GEMM family is tested with it on the GPU).
 * Linked with tuner/check/ (build/libfourbit-check.a); build/emu/fourbit-worker links tests/emu/driver.cpp instead of
 * the driver, so the protocol, the checks and the fault path run on the CPU (timed there by the wall clock, which
 * means nothing). */
#include "fb_exit.h"
#include "harness.h"
#include "gemm_harness.h"
#include "../tune.h"
#include "fb_error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  int id, loaded;
  tspec *t; /* its own allocation: units[] keeps a pointer to it while cands[] grows */
  unit *u;
  fb_kernel kern;
  fb_gemm_cfg gcfg; /* a GEMM being timed: its configuration and parameter blocks, 2 a set */
  fb_kp_gemm *gkp;
} cand;

/* The GEMMs' launch (base/cuda_driver.c; tests/emu/driver.cpp's runs the tcgen05 GEMMs under the functional model):
 * a weak stand-in for a driver without one. */
__attribute__((weak)) fb_status fb_kernel_launch_smem(const fb_kernel *k, unsigned gx, unsigned gy, unsigned threads, unsigned smem,
                                                      const void *params, size_t size) {
  (void)k, (void)gx, (void)gy, (void)threads, (void)smem, (void)params, (void)size;
  return FB_ERR(FB_ECUDA, "the emulated driver cannot launch a GEMM (dynamic shared memory, TMA, wgmma)");
}
__attribute__((weak)) fb_status fb_kernel_launch_cluster(const fb_kernel *k, unsigned gx, unsigned gy, unsigned threads, unsigned cluster,
                                                         unsigned smem, const void *params, size_t size) {
  (void)k, (void)gx, (void)gy, (void)threads, (void)cluster, (void)smem, (void)params, (void)size;
  return FB_ERR(FB_ECUDA, "the emulated driver cannot launch a GEMM (clusters, dynamic shared memory, TMA, tcgen05)");
}

static cand *cands;
static int sms = 1; /* the GEMMs' persistent CTAs: one per SM */
static int ncands, capcands;
static int unit_cap;

static cand *find(int id) {
  for (int i = 0; i < ncands; ++i)
    if (cands[i].id == id && cands[i].loaded) return &cands[i];
  return NULL;
}

static unit *new_unit(void) {
  if (nunits == unit_cap) {
    fprintf(stderr, "fourbit-worker: more than %d kernels in one worker\n", unit_cap);
    exit(1);
  }
  return &units[nunits++];
}

/* the amax pass the NVFP4 tensor / expert quantizers' check runs first (harness.c run_case) */
static void ensure_amax(int mode) {
  if (amax_kernel[mode].fn) return;
  static tspec at[3];
  tspec *t = &at[mode];
  memset(t, 0, sizeof *t);
  t->k.op = FB_OP_AMAX;
  t->k.q.outer = mode == 1 ? FB_GRAN_TOKEN : mode == 2 ? FB_GRAN_EXPERT : FB_GRAN_TENSOR;
  t->family = "amax";
  snprintf(t->k.name, sizeof t->k.name, "amax_%s_bf16_sm90a_worker", mode == 1 ? "tok" : mode == 2 ? "exp" : "ten");
  unit *u = new_unit();
  memset(u, 0, sizeof *u);
  u->t = t;
  u->v = (fb_variant){.tmpl = "amax.cuh", .nparams = 1, .param = {"threads"}, .value = {256}};
  snprintf(u->v.name, sizeof u->v.name, "%s_t256", t->k.name);
  CK(fb_gen_source(&t->k, &u->v, "tuner/worker/worker.c", "-", &u->src));
  CK(fb_nvrtc_compile(u->v.name, u->src, "sm_90a", &u->cubin));
  CK(fb_kernel_load(u->cubin.cubin, u->v.name, &amax_kernel[mode]));
}

/* the harness's sizes: odd rows (a partial last CTA) for the row kernels, 256 x 1024 for the others */
static int small_shape(const fb_kernel_spec *k) {
  if (k->op == FB_OP_AMAX || k->op == FB_OP_S2F6_Q || k->op == FB_OP_S2F6_DQ) return 1;
  return k->op == FB_OP_QUANT && !k->col && !k->in_f32 && (k->q.format == FB_FMT_MXFP8 || k->q.outer == FB_GRAN_TOKEN);
}

/* ---- the GEMMs' and bcopy's check (tuner/check/gemm_harness.c) ---------------------------------------------- */
static gemm_problem probs[5][2][2]; /* by kind (fb_gemm_cfg's, 0..4), mode, tensor outer: made once (the FP64 reference takes a while) */
static int have_prob[5][2][2];

static void check_gemm(cand *c, const fb_msg_load *m, fb_msg_verified *r) {
  char *text = NULL;
  size_t tlen = 0;
  FILE *log = open_memstream(&text, &tlen);
  if (!log) exit(1);
  int fail = 0;
  if (m->spec.op == FB_OP_BCOPY) {
    int f1, f2;
    CK(gemm_bcopy_check(&m->spec, &m->var, &c->kern, 77, 320, log, &f1));
    CK(gemm_bcopy_check(&m->spec, &m->var, &c->kern, 256, 1024, log, &f2));
    fail = f1 | f2;
  } else {
    fb_gemm_cfg cfg;
    CK(fb_gemm_config(&m->spec, &m->var, &cfg));
    int to = m->spec.src.outer == FB_GRAN_TENSOR && (cfg.kind == 1 || cfg.kind == 4);
    if (!have_prob[cfg.kind][cfg.mode][to]) {
      CK(gemm_make_problem(&probs[cfg.kind][cfg.mode][to], cfg.kind, cfg.mode, to, 1)); /* skewed: an empty expert */
      have_prob[cfg.kind][cfg.mode][to] = 1;
    }
    free(gemm_companion); /* no bit-exact companion here: the check against the FP64 reference only */
    gemm_companion = NULL;
    CK(gemm_run(&m->spec, &m->var, &c->kern, &probs[cfg.kind][cfg.mode][to], sms, log, 1, &fail));
    free(gemm_companion);
    gemm_companion = NULL;
  }
  fclose(log);
  r->ok = !fail, r->wrong = fail;
  if (fail) {
    size_t s = 0;
    while (text && text[s] == ' ') ++s;
    snprintf(r->msg, sizeof r->msg, "against the reference: %s", text ? text + s : "?");
    size_t l = strlen(r->msg);
    while (l && (r->msg[l - 1] == '\n')) r->msg[--l] = 0;
    for (char *p = r->msg; (p = strchr(p, '\n'));) *p = ';';
  }
  free(text);
}

static void do_load(const fb_msg_load *m, const char *cubin, const char *src) {
  if (ncands == capcands) {
    cands = realloc(cands, sizeof *cands * (size_t)(capcands = capcands ? 2 * capcands : 64));
    if (!cands) exit(1);
  }
  for (int i = 0; i < ncands; ++i) /* an id loaded again: the old one goes */
    if (cands[i].id == m->id && cands[i].loaded) fb_kernel_unload(&cands[i].kern), cands[i].loaded = 0;
  cand *c = &cands[ncands++];
  memset(c, 0, sizeof *c);
  c->id = m->id;
  c->t = calloc(1, sizeof *c->t);
  c->t->k = m->spec;
  c->t->family = "tune";
  c->t->shape = small_shape(&m->spec);
  if (c->t->k.op == FB_OP_ADAMW) c->t->k.experts = 4; /* the harness's AdamW case: 4 experts of R/4 rows */
  unit *u = new_unit();
  memset(u, 0, sizeof *u);
  u->t = c->t;
  u->v = m->var;
  u->src = malloc(m->src_len + 1);
  u->cubin.cubin = malloc(m->cubin_len + 1);
  memcpy(u->src, src, m->src_len), u->src[m->src_len] = 0;
  memcpy(u->cubin.cubin, cubin, m->cubin_len), u->cubin.size = m->cubin_len;
  c->u = u;
  fb_msg_verified r = {.id = m->id};
  if (fb_tune_is_gemm(&m->spec) && (!fb_cu.TensorMapEncodeTiled || (fb_cuda_emulated() && strcmp(m->var.tmpl, "gemm_sm100.cuh")))) {
    /* the emulated driver runs the tcgen05 GEMMs under the functional model, not wgmma or mma.sync */
    snprintf(r.msg, sizeof r.msg, "%s", fb_cu.TensorMapEncodeTiled ? "the emulated driver runs only the tcgen05 GEMMs (under the functional model): not checked"
                                                                    : "this driver has no cuTensorMapEncodeTiled: not checked");
    fb_tune_send(1, FB_MSG_VERIFIED, &r, sizeof r, NULL, 0, NULL, 0);
    return;
  }
  if (fb_kernel_load(u->cubin.cubin, u->v.name, &c->kern) != FB_OK) {
    snprintf(r.msg, sizeof r.msg, "load: %s", fb_errmsg());
    fb_tune_send(1, FB_MSG_VERIFIED, &r, sizeof r, NULL, 0, NULL, 0);
    return;
  }
  if (m->fault) { /* the test hook: every pointer of the parameter block invalid */
    fb_kp_moe bad;
    memset(&bad, 0xA7, sizeof bad);
    unsigned char blk[sizeof(fb_kp_moe) > sizeof(fb_kp_mem) ? sizeof(fb_kp_moe) : sizeof(fb_kp_mem)];
    memcpy(blk, &bad, sizeof blk);
    int moe = m->spec.op == FB_OP_ROUTER || m->spec.op == FB_OP_PERMUTE || m->spec.op == FB_OP_UNPERMUTE ||
              m->spec.op == FB_OP_SWIGLU_FWD || m->spec.op == FB_OP_SWIGLU_BWD || m->spec.op == FB_OP_ADAMW;
    if (moe) { fb_kp_moe *p = (fb_kp_moe *)blk; p->rows = 4096, p->cols = 1024, p->experts = 8, p->top_k = 2, p->tile = 16; }
    else { fb_kp_mem *p = (fb_kp_mem *)blk; p->rows = 4096, p->cols = 1024, p->ngroups = 1; }
    fprintf(stderr, "fourbit-worker: FOURBIT_TUNE_FAULT: launching %s with invalid pointers\n", u->v.name);
    fb_gemm_cfg gc;
    if (fb_tune_is_gemm(&m->spec) && fb_gemm_config(&m->spec, &m->var, &gc) == FB_OK) {
      fb_kp_gemm bad_g;
      memset(&bad_g, 0xA7, sizeof bad_g);
      bad_g.rows = 4096, bad_g.experts = 4, bad_g.M = bad_g.N = bad_g.K = 1024;
      CK(fb_gemm_launch(&c->kern, &gc, &bad_g, sms));
    } else {
      CK(fb_kernel_launch(&c->kern, 64, 1, 256, blk, moe ? sizeof(fb_kp_moe) : sizeof(fb_kp_mem)));
    }
    CU(fb_cu.CtxSynchronize());
  }
  if (fb_tune_is_gemm(&m->spec) || m->spec.op == FB_OP_BCOPY) {
    check_gemm(c, m, &r);
    const char *wrong_hook = getenv("FOURBIT_TUNE_WRONG"); /* test hook: a variant that ran as it does reported wrong */
    if (r.ok && wrong_hook && *wrong_hook && strstr(u->v.name, wrong_hook)) {
      r.ok = 0, r.wrong = 1;
      snprintf(r.msg, sizeof r.msg, "FOURBIT_TUNE_WRONG=%.60s: reported as failing its check (test hook)", wrong_hook);
    }
    if (!r.ok) fb_kernel_unload(&c->kern);
    else c->loaded = 1;
    fb_tune_send(1, FB_MSG_VERIFIED, &r, sizeof r, NULL, 0, NULL, 0);
    return;
  }
  long wrong = 0;
  if (m->spec.op == FB_OP_QUANT && m->spec.q.format == FB_FMT_NVFP4 && !m->spec.in_f32 && m->spec.q.outer != FB_GRAN_TOKEN)
    ensure_amax(m->spec.q.outer == FB_GRAN_EXPERT ? 2 : 0);
  long long R = c->t->shape ? 77 : 256, C = c->t->shape ? 320 : 1024;
  static const int kinds[2] = {CASE_GAUSS, CASE_EDGE};
  for (int i = 0; i < 2; ++i) {
    long w;
    CK(run_case(u, &c->kern, kinds[i], (unsigned)(rnd() & 0xFFFF), R, C, &w));
    wrong += w;
  }
  r.wrong = wrong;
  r.ok = wrong == 0;
  if (wrong) snprintf(r.msg, sizeof r.msg, "%ld wrong elements against the CPU reference (gauss + edge inputs, %lld x %lld)", wrong, R, C);
  if (wrong) fb_kernel_unload(&c->kern);
  else c->loaded = 1;
  fb_tune_send(1, FB_MSG_VERIFIED, &r, sizeof r, NULL, 0, NULL, 0);
}

/* ---- timing buffers: nsets parameter blocks of one spec at one shape -------------------------------------- */
typedef struct {
  char spec[128];
  fb_tune_shape_t shape;
  int nsets, moe;
  fb_kp_mem *mem;
  fb_kp_moe *mo;
  CUdeviceptr *buf;
  size_t *len;    /* each buffer's size; a guard of GUARD bytes follows it */
  int *set_of;
  int nbuf, capbuf, cur_set;
  double set_bytes;
} bufs;
static bufs B;
/* a GEMM's operands in one set (what fb_gemm_args takes, whichever kind the variant multiplies in) */
typedef struct {
  CUdeviceptr a, b, a_sf, b_sf, a_outer, b_outer, out, out_sf, h, offsets;
} gemm_set;
static gemm_set *G;
static CUdeviceptr g0[16]; /* set 0's buffers: the later sets are copies (the same data from other addresses) */

/* Every timing buffer is followed by GUARD bytes of 0xA5, checked after each TIME: a kernel that writes past what
 * one_set sized for it (an op whose output this file undersizes) is reported by name instead of corrupting the next
 * buffer or, where the next page is not mapped, faulting as an illegal address. */
#define GUARD 4096
static CUdeviceptr dev(size_t n, int kind, double scale) { /* kind 0 zero, 1 BF16 ~N(0,1), 2 FP32 scale N(0,1), 3 E4M3/E8M0 0x30..0x5F, 4 FP32 const scale,
                                                    5 FP32 scale * 2^U(-2, 2): a row's own, as per-token outer scales */
  CUdeviceptr p;
  if (!n) n = 4;
  CU(fb_cu.MemAlloc(&p, n + GUARD));
  CU(fb_cu.MemsetD8(p + n, 0xA5, GUARD));
  if (B.nbuf == B.capbuf) {
    B.capbuf = B.capbuf ? 2 * B.capbuf : 256;
    B.buf = realloc(B.buf, sizeof *B.buf * (size_t)B.capbuf);
    B.len = realloc(B.len, sizeof *B.len * (size_t)B.capbuf);
    B.set_of = realloc(B.set_of, sizeof *B.set_of * (size_t)B.capbuf);
    if (!B.buf || !B.len || !B.set_of) exit(1);
  }
  B.len[B.nbuf] = n, B.set_of[B.nbuf] = B.cur_set;
  B.buf[B.nbuf++] = p;
  B.set_bytes += (double)n;
  if (kind == 0) {
    CU(fb_cu.MemsetD8(p, 0, n));
    return p;
  }
  size_t blk = n < (16u << 20) ? n : (16u << 20);
  unsigned char *h = malloc(blk + 8);
  for (size_t i = 0; i + 4 <= blk || (i < blk && kind == 3); i += kind == 3 ? 1 : kind == 1 ? 2 : 4) {
    uint64_t r = rnd();
    if (kind == 1) { uint16_t v = (uint16_t)(((r >> 8) & 0x8000u) | ((0x3C00u + ((r >> 20) % 0x700u)) & 0x7F80u) | (r & 0x7Fu)); memcpy(h + i, &v, 2); }
    else if (kind == 2) { float v = (float)(scale * (((double)(r >> 11) / 9007199254740992.0) * 3.4 - 1.7)); memcpy(h + i, &v, 4); }
    else if (kind == 3) h[i] = (unsigned char)(0x30 + r % 0x30);
    else if (kind == 5) { float v = (float)(scale * exp2((double)(r >> 11) / 9007199254740992.0 * 4.0 - 2.0)); memcpy(h + i, &v, 4); }
    else { float v = (float)scale; memcpy(h + i, &v, 4); }
  }
  for (size_t o = 0; o < n; o += blk) CU(fb_cu.MemcpyHtoD(p + o, h, n - o < blk ? n - o : blk));
  free(h);
  return p;
}
static CUdeviceptr put(const void *h, size_t n) {
  CUdeviceptr p = dev(n, 0, 0);
  CU(fb_cu.MemcpyHtoD(p, h, n));
  return p;
}

static void free_bufs(void) {
  for (int i = 0; i < B.nbuf; ++i) fb_cu.MemFree(B.buf[i]);
  free(B.buf), free(B.len), free(B.set_of), free(B.mem), free(B.mo), free(G);
  G = NULL;
  memset(&B, 0, sizeof B);
}

/* topk_idx: k distinct experts per token, uniformly; weights summing to 1 */
static void routing(long long T, int K, int E, int32_t *idx, float *w) {
  for (long long t = 0; t < T; ++t) {
    float s = 0;
    for (int j = 0; j < K; ++j) {
      int e, dup;
      do {
        e = (int)(rnd() % (unsigned)E), dup = 0;
        for (int i = 0; i < j; ++i) dup |= idx[t * K + i] == e;
      } while (dup && K <= E);
      idx[t * K + j] = e;
      s += w[t * K + j] = (float)((rnd() >> 11) % 1000 + 1);
    }
    for (int j = 0; j < K; ++j) w[t * K + j] /= s;
  }
}

/* buffer i of a GEMM set: set 0 filled as gemm_fill_random's `what` says, the others copied from it */
static CUdeviceptr gdev(int set, int i, size_t n, int what, float scale) {
  CUdeviceptr p = dev(n, 0, 0);
  if (what < 0) return p;
  if (set == 0) {
    CK(gemm_fill_random(p, n, what, scale));
    g0[i] = p;
  } else {
    CU(fb_cu.MemcpyDtoD(p, g0[i], n));
  }
  return p;
}

static void gemm_one_set(const fb_kernel_spec *k, const fb_tune_shape_t *s, int set, gemm_set *g) {
  const size_t E = (size_t)s->experts, R = (size_t)s->rows;
  const int wgrad = k->op == FB_OP_GEMM_WGRAD;
  const int fa = k->act.format == FB_FMT_NVFP4 ? 1 : k->act.format == FB_FMT_BF16 ? 0 : 3; /* kinds as fb_gemm_cfg's */
  /* A: rows x K (wgrad: M x rows); B: E N x K (wgrad: N x rows); the largest of wgrad's two problems */
  size_t am = wgrad ? (size_t)(s->gm > s->gm2 ? s->gm : s->gm2) : R, ak = wgrad ? R : (size_t)s->gk;
  size_t bn = wgrad ? (size_t)(s->gn > s->gn2 ? s->gn : s->gn2) : E * (size_t)s->gn;
  size_t outn = wgrad ? E * (size_t)((double)s->gm * s->gn > (double)s->gm2 * s->gn2 ? (size_t)s->gm * s->gn : (size_t)s->gm2 * s->gn2)
                      : R * (size_t)s->gn;
  float bscale = (float)(1.0 / sqrt((double)ak)); /* A of order 1, B of 1/sqrt(K): outputs of order 1 */
  g->a = gdev(set, 0, am * ak * (fa == 0 ? 2 : 1) / (fa == 1 ? 2 : 1), fa == 0 ? 0 : 1, 1);
  g->b = gdev(set, 1, bn * ak * 2, 0, bscale); /* BF16 (or the BF16 copy of NVFP4 / MXFP8 weights; or their codes) */
  g->a_sf = gdev(set, 2, am * ak / 16 + 64, fa == 1 ? 2 : 3, 1);
  /* B's scales when a variant takes B quantized (FP8 variants: E8M0 per 32; tcgen05 NVFP4: E4M3 per 16) */
  g->b_sf = gdev(set, 3, bn * ak / 16 + 64, k->src.format == FB_FMT_NVFP4 ? 2 : 3, 1);
  g->a_outer = gdev(set, 4, am * 4 + 64, 4, 1);
  g->b_outer = gdev(set, 5, E * 4 + 64, 4, 1);
  g->out = gdev(set, 6, outn * 4, -1, 0); /* FP32, or BF16 of up to 2N columns (SwiGLU backward) */
  g->out_sf = gdev(set, 7, outn / 32 + 64, -1, 0);
  g->h = k->op == FB_OP_GEMM_DGRAD2 ? gdev(set, 8, R * 2 * (size_t)s->gn * 2, 0, 1) : 0;
  long long *off = malloc(sizeof *off * (E + 1));
  for (size_t e = 0; e <= E; ++e) off[e] = (long long)e * s->rows_per_expert;
  g->offsets = put(off, sizeof *off * (E + 1));
  free(off);
}

/* the parameter blocks of candidate c on set g: [0], and wgrad's second problem [1] */
static void gemm_params(cand *c, const fb_tune_shape_t *s, const gemm_set *g, fb_gemm_cfg *cfg, fb_kp_gemm kp[2]) {
  CK(fb_gemm_config(&c->t->k, &c->u->v, cfg));
  int kd = cfg->kind, wgrad = cfg->mode;
  for (int i = 0; i < 1 + (wgrad && s->gm2); ++i) {
    fb_gemm_args ga = {.a = g->a, .b = g->b, .out = g->out, .offsets = g->offsets, .a_sf = kd ? g->a_sf : 0,
                       .b_sf = kd == 2 || kd == 4 ? g->b_sf : 0, .a_outer = kd == 1 || kd == 4 ? g->a_outer : 0,
                       .b_outer = kd == 1 || kd == 4 ? g->b_outer : 0,
                       .rows = s->rows, .experts = s->experts, .M = wgrad ? (i ? s->gm2 : s->gm) : 0,
                       .N = wgrad ? (i ? s->gn2 : s->gn) : s->gn, .K = wgrad ? 0 : s->gk, .aux = g->h, .out_sf = g->out_sf,
                       .signs = 0x5A5A0F0Fu};
    CK(fb_gemm_params(cfg, &ga, &kp[i]));
  }
}

static void one_set(const fb_kernel_spec *k, const fb_tune_shape_t *s, fb_kp_mem *q, fb_kp_moe *p) {
  const long long R = s->rows, C = s->cols, T = s->rows, K = s->top_k, E = s->experts;
  const size_t n = (size_t)(R * C);
  switch (k->op) {
  case FB_OP_ROUTER:
    p->in = dev((size_t)(T * E) * 4, 2, 2.0), p->probs = dev((size_t)(T * E) * 4, 0, 0);
    p->topk_idx = dev((size_t)(T * K) * 4, 0, 0), p->topk_w = dev((size_t)(T * K) * 4, 0, 0);
    p->rows = T, p->experts = (int)E, p->top_k = (int)K;
    return;
  case FB_OP_PERMUTE:
  case FB_OP_UNPERMUTE: {
    size_t TK = (size_t)(T * K), maxr = fb_permute_max_rows((size_t)T, (int)K, (int)E, s->tile), total = 0;
    int32_t *idx = malloc(TK * 4), *cnt = malloc((size_t)E * 4), *row = malloc(TK * 4), *tok = malloc(maxr * 4);
    float *w = malloc(TK * 4);
    long long *off = malloc((size_t)(E + 1) * 8);
    routing(T, (int)K, (int)E, idx, w);
    CK(fb_permute_ref(idx, (size_t)T, (int)K, (int)E, s->tile, cnt, off, row, tok, &total));
    p->rows = T, p->cols = C, p->experts = (int)E, p->top_k = (int)K, p->tile = s->tile;
    if (k->op == FB_OP_PERMUTE) {
      size_t b[3], nch = (TK + FB_PERMUTE_CHUNK - 1) / FB_PERMUTE_CHUNK;
      CK(fb_payload_planes(k->q.format, k->q.format == FB_FMT_NVFP4 && k->q.outer == FB_GRAN_TOKEN, (size_t)C, b));
      p->topk_idx = put(idx, TK * 4), p->chunk_counts = dev(nch * (size_t)E * 4, 0, 0), p->counts = dev((size_t)E * 4, 0, 0);
      p->offsets = dev((size_t)(E + 1) * 8, 0, 0), p->row_of = dev(TK * 4, 0, 0), p->token_of = dev(maxr * 4, 0, 0);
      fb_dptr *in[3] = {&p->in, &p->in_scales, &p->in_outer}, *out[3] = {&p->out, &p->out_scales, &p->out_outer};
      for (int i = 0; i < 3; ++i)
        if (b[i]) *in[i] = dev((size_t)T * b[i], 1, 0), *out[i] = dev(maxr * b[i], 0, 0);
    } else {
      int s2f6 = k->q.format == FB_FMT_S2F6;
      size_t ny = total * (size_t)C;
      p->in = dev(s2f6 ? ny : ny * 2, 1, 0);
      if (s2f6) p->in_scales = dev(ny / 32 + 1, 3, 0);
      p->row_of = put(row, TK * 4), p->topk_w = put(w, TK * 4);
      p->out = dev((size_t)(T * C) * (k->out_bf16 ? 2 : 4), 0, 0);
      p->signs = fb_rht_signs(20260101u, 0);
    }
    free(idx), free(cnt), free(row), free(tok), free(w), free(off);
    return;
  }
  case FB_OP_SWIGLU_FWD:
  case FB_OP_SWIGLU_BWD: {
    int bwd = k->op == FB_OP_SWIGLU_BWD;
    p->in = dev(n * 4, 1, 0);
    if (bwd) p->in2 = dev(n * 2, 1, 0);
    p->out = dev(bwd ? n * 4 : n * 2, 0, 0);
    p->rows = R, p->cols = C;
    return;
  }
  case FB_OP_ADAMW: {
    p->master = dev(n * 4, 2, 0.02), p->m = dev(n * 4, 2, 1e-3), p->v = dev(n * 4, 4, 1e-6), p->in = dev(n * 4, 2, 1e-2);
    if (k->q.format == FB_FMT_MXFP8) p->out = dev(n, 0, 0), p->out_scales = dev(n / 32, 0, 0);
    else if (k->q.format == FB_FMT_NVFP4) p->amax = dev((size_t)E * 4 + 64, 0, 0);
    else p->out = dev(n * 2, 0, 0);
    p->flags = dev(4, 0, 0);
    p->rows = R, p->cols = C, p->experts = (int)E;
    p->lr = 3e-4f, p->b1 = 0.9f, p->b2 = 0.95f, p->eps = 1e-8f, p->wd = 0.1f, p->gscale = 1.0f;
    p->bc1 = 1.0f - powf(p->b1, 100.0f), p->bc2 = 1.0f - powf(p->b2, 100.0f);
    p->seed = 1, p->stream = 2, p->step = 3;
    return;
  }
  case FB_OP_BCOPY: { /* codes and block scales in, the BF16 copy out (2 bytes an element) */
    int nv = k->q.format == FB_FMT_NVFP4;
    q->in = dev(nv ? n / 2 : n, 0, 0), q->scales = dev(nv ? n / 16 : n / 32, 0, 0), q->out = dev(n * 2, 0, 0);
    CK(gemm_fill_random(q->in, nv ? n / 2 : n, 1, 1));
    CK(gemm_fill_random(q->scales, nv ? n / 16 : n / 32, nv ? 2 : 3, 1));
    q->rows = R, q->cols = C, q->ngroups = 1;
    return;
  }
  default: { /* fb_kp_mem: the quantizers, amax, requant, S2F6 */
    unsigned ng = s->ngroups ? s->ngroups : 1;
    long long *off = malloc(sizeof *off * (ng + 1));
    for (unsigned g = 0; g <= ng; ++g) off[g] = R * g / ng;
    q->in = dev(n * (k->in_f32 ? 4 : (k->op == FB_OP_S2F6_DQ || k->op == FB_OP_REQUANT ? 1 : 2)), k->in_f32 ? 2 : 1, 0.02);
    q->out = dev(n * (k->op == FB_OP_S2F6_DQ ? 4 : k->op == FB_OP_REQUANT && k->out_bf16 ? 2 : 1), 0, 0);
    q->scales = dev(n / 16 + 64, 3, 0);
    q->s_dec = dev((size_t)R * 4 + 64, 4, 1.0 / 2688.0);
    q->amax = dev((size_t)(R > (long long)ng ? R : ng) * 4 + 64, 4, 0.1);
    q->group_offsets = put(off, sizeof *off * (ng + 1));
    q->flags = dev(4, 0, 0);
    if (k->op == FB_OP_REQUANT) q->src_scales = dev(n / 16 + 64, 3, 0), q->src_s_dec = dev((size_t)R * 4 + 64, 5, 1.0 / 2688.0);
    if (k->op == FB_OP_QUANT && k->col == 2) q->out2 = dev(n, 0, 0), q->scales2 = dev(n / 32 + 64, 0, 0), q->stream2 = 5;
    q->rows = R, q->cols = C, q->ngroups = ng, q->seed = 1, q->stream = 2, q->step = 3, q->signs = 0x9E3779B9u;
    /* the BF16 copy of requantized weights is regrouped per expert as the layer writes it */
    if (k->op == FB_OP_REQUANT && k->out_bf16 && ng > 1 && R % ng == 0 && (R / ng) % 32 == 0) q->out_group = (unsigned)(R / ng);
    free(off);
    return;
  }
  }
}

static int is_mem(const fb_kernel_spec *k) {
  return !(k->op == FB_OP_ROUTER || k->op == FB_OP_PERMUTE || k->op == FB_OP_UNPERMUTE || k->op == FB_OP_SWIGLU_FWD ||
           k->op == FB_OP_SWIGLU_BWD || k->op == FB_OP_ADAMW);
}

static void setup(const fb_kernel_spec *k, const fb_tune_shape_t *s, long long l2) {
  if (!strcmp(B.spec, k->name) && !memcmp(&B.shape, s, sizeof *s)) return;
  free_bufs();
  snprintf(B.spec, sizeof B.spec, "%s", k->name);
  B.shape = *s;
  B.moe = !is_mem(k);
  int cap = 256;
  B.mem = calloc((size_t)cap, sizeof *B.mem), B.mo = calloc((size_t)cap, sizeof *B.mo);
  if (fb_tune_is_gemm(k)) {
    G = calloc((size_t)cap, sizeof *G);
    double want = 2.5 * (double)l2; /* no L2 (the emulated device): 2 sets */
    for (B.nsets = 0; B.nsets < cap && (B.nsets < 2 || B.set_bytes < want); ++B.nsets)
      B.cur_set = B.nsets, gemm_one_set(k, s, B.nsets, &G[B.nsets]);
    CU(fb_cu.CtxSynchronize());
    return;
  }
  /* sets until all of them together exceed 2.5 x L2 (at least 2: consecutive launches never share inputs) */
  double want = 2.5 * (double)l2; /* no L2 (the emulated device): 2 sets */
  for (B.nsets = 0; B.nsets < cap && (B.nsets < 2 || B.set_bytes < want);) {
    B.cur_set = B.nsets;
    one_set(k, s, &B.mem[B.nsets], &B.mo[B.nsets]);
    ++B.nsets;
  }
  CU(fb_cu.CtxSynchronize());
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double wall_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void launch(cand *c, int set) {
  const fb_kernel_spec *k = &c->t->k;
  unsigned gx, gy, th;
  fb_kernel_spec ks = *k;
  if (G) {
    const fb_kp_gemm *kp = &c->gkp[2 * set];
    CK(fb_gemm_launch(&c->kern, &c->gcfg, &kp[0], sms));
    if (c->gcfg.mode && B.shape.gm2) CK(fb_gemm_launch(&c->kern, &c->gcfg, &kp[1], sms));
    return;
  }
  ks.experts = B.shape.experts, ks.top_k = B.shape.top_k;
  CK(fb_launch_dims(&ks, &c->u->v, B.shape.rows, B.shape.cols, B.shape.ngroups, &gx, &gy, &th));
  if (!B.moe) {
    CK(fb_kernel_launch(&c->kern, gx, gy, th, &B.mem[set], sizeof B.mem[set]));
  } else if (k->op == FB_OP_PERMUTE) {
    fb_kp_moe p = B.mo[set];
    for (p.pass = 0; p.pass < 4; ++p.pass) CK(fb_kernel_launch(&c->kern, gx, gy, th, &p, sizeof p));
  } else {
    CK(fb_kernel_launch(&c->kern, gx, gy, th, &B.mo[set], sizeof B.mo[set]));
  }
}

/* 0, or 1 with msg naming the first buffer whose guard was written */
static int guards_broken(char *msg, size_t n) {
  unsigned char g[GUARD];
  CU(fb_cu.CtxSynchronize());
  for (int i = 0; i < B.nbuf; ++i) {
    CU(fb_cu.MemcpyDtoH(g, B.buf[i] + B.len[i], GUARD));
    int first = 0;
    for (int j = 0; j < GUARD; ++j)
      if (g[j] != 0xA5) { first = j + 1; break; }
    if (!first) continue;
    int k = 0;
    for (int j = 0; j < i; ++j) k += B.set_of[j] == B.set_of[i];
    snprintf(msg, n, "%s: written past the end of buffer %d of input set %d (%zu bytes; byte %d after it): the worker "
             "sizes this op's buffers wrong (tuner/worker/worker.c one_set)", B.spec, k, B.set_of[i], B.len[i], first - 1);
    return 1;
  }
  return 0;
}

static void do_time(const fb_msg_time *m, long long l2) {
  fb_msg_times r;
  memset(&r, 0, sizeof r);
  r.n = m->n;
  cand *cs[FB_TUNE_MAXBATCH];
  for (int j = 0; j < m->n; ++j)
    if (!(cs[j] = find(m->ids[j]))) {
      snprintf(r.msg, sizeof r.msg, "candidate %d is not loaded", m->ids[j]);
      fb_tune_send(1, FB_MSG_TIMES, &r, sizeof r, NULL, 0, NULL, 0);
      return;
    }
  setup(&m->spec, &m->shape, l2);
  if (G)
    for (int j = 0; j < m->n; ++j) {
      free(cs[j]->gkp);
      cs[j]->gkp = calloc((size_t)B.nsets * 2, sizeof *cs[j]->gkp);
      if (!cs[j]->gkp) exit(1);
      for (int s = 0; s < B.nsets; ++s) gemm_params(cs[j], &B.shape, &G[s], &cs[j]->gcfg, &cs[j]->gkp[2 * s]);
    }
  int runs = 5 * (m->effort > 0 ? m->effort : 1), set = 0;
  double *t = malloc(sizeof *t * (size_t)runs * (size_t)m->n);
  int events = fb_cu.EventCreate != NULL; /* the emulator has none: the wall clock, which means nothing there */
  CUevent a = NULL, b = NULL;
  if (events) {
    CU(fb_cu.EventCreate(&a, 0));
    CU(fb_cu.EventCreate(&b, 0));
  }
  for (int j = 0; j < m->n; ++j)
    for (int w = 0; w < 2; ++w) launch(cs[j], set++ % B.nsets);
  CU(fb_cu.CtxSynchronize());
  for (int i = 0; i < runs; ++i)
    for (int j = 0; j < m->n; ++j) { /* interleaved: candidate j's run i, then j+1's */
      int s = set++ % B.nsets;
      if (events) {
        float ms;
        CU(fb_cu.EventRecord(a, NULL));
        launch(cs[j], s);
        CU(fb_cu.EventRecord(b, NULL));
        CU(fb_cu.EventSynchronize(b));
        CU(fb_cu.EventElapsedTime(&ms, a, b));
        t[(size_t)j * runs + i] = ms;
      } else {
        double t0 = wall_ms();
        launch(cs[j], s);
        CU(fb_cu.CtxSynchronize());
        t[(size_t)j * runs + i] = wall_ms() - t0;
      }
    }
  if (events) fb_cu.EventDestroy(a), fb_cu.EventDestroy(b);
  for (int j = 0; j < m->n; ++j) free(cs[j]->gkp), cs[j]->gkp = NULL;
  for (int j = 0; j < m->n; ++j) {
    double *x = t + (size_t)j * runs;
    qsort(x, (size_t)runs, sizeof *x, cmpd);
    r.median_ms[j] = x[runs / 2];
    r.spread_ms[j] = (x[(runs * 9) / 10 < runs ? (runs * 9) / 10 : runs - 1] - x[runs / 10]) / 2;
  }
  free(t);
  r.ok = 1, r.runs = runs, r.sets = B.nsets, r.set_mb = B.set_bytes / B.nsets / 1e6;
  if (guards_broken(r.msg, sizeof r.msg)) {
    fprintf(stderr, "fourbit-worker: %s\n", r.msg);
    r.ok = 0;
    fb_tune_send(1, FB_MSG_TIMES, &r, sizeof r, NULL, 0, NULL, 0);
    free_bufs(); /* not to be reused: the next request sets them up again */
    return;
  }
  if (!events) snprintf(r.msg, sizeof r.msg, "wall clock (no CUDA events: an emulated device)");
  fb_tune_send(1, FB_MSG_TIMES, &r, sizeof r, NULL, 0, NULL, 0);
}

int main(int argc, char **argv) {
  (void)argv;
  if (argc != 1) {
    fprintf(stderr, "fourbit-worker: started by fourbit tune (requests on stdin, answers on stdout); takes no arguments\n");
    return 2;
  }
  unit_cap = 8192;
  units = calloc((size_t)unit_cap, sizeof *units);
  long long l2 = 0;
  void *buf = NULL;
  size_t len = 0;
  for (;;) {
    int type;
    if (fb_tune_recv(0, &type, &buf, &len, -1)) return 0; /* the driver went away */
    if (type == FB_MSG_QUIT) return 0;
    if (type == FB_MSG_HELLO) {
      fb_msg_device d;
      memset(&d, 0, sizeof d);
      d.proto = FB_TUNE_PROTO;
      if (fb_cuda_use_device(0) != FB_OK || fb_tune_fingerprint(&d.fp) != FB_OK) {
        snprintf(d.msg, sizeof d.msg, "%s", fb_errmsg());
      } else {
        d.ok = 1;
        int v = 0;
        if (fb_cu.DeviceGetAttribute && fb_cu.DeviceGet) {
          CUdevice dv;
          if (fb_cu.DeviceGet(&dv, 0) == CUDA_SUCCESS && fb_cu.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dv) == CUDA_SUCCESS)
            d.l2_bytes = v;
        }
        l2 = d.l2_bytes;
        fb_cuda_device_info info;
        if (fb_cuda_device_info_get(0, &info) == FB_OK && info.sm_count > 0) sms = info.sm_count;
      }
      fb_tune_send(1, FB_MSG_DEVICE, &d, sizeof d, NULL, 0, NULL, 0);
    } else if (type == FB_MSG_LOAD && len >= sizeof(fb_msg_load)) {
      fb_msg_load m;
      memcpy(&m, buf, sizeof m);
      if (len != sizeof m + m.cubin_len + m.src_len) return 3;
      do_load(&m, (const char *)buf + sizeof m, (const char *)buf + sizeof m + m.cubin_len);
    } else if (type == FB_MSG_TIME && len == sizeof(fb_msg_time)) {
      fb_msg_time m;
      memcpy(&m, buf, sizeof m);
      do_time(&m, l2);
    } else {
      fprintf(stderr, "fourbit-worker: unknown request %d (%zu bytes)\n", type, len);
      return 3;
    }
  }
}
