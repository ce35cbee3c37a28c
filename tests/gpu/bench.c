/* bench.c — `make bench`: the memory-bound kernels at the design's S1 sizes (65536 x 5120 activations;
 * 48 experts' W13 weights, 196608 x 5120), each variant of inkling2_small's tune values timed, the best
 * reported as GB/s against the device copy bandwidth measured in the same run, and beside the PyTorch peer
 * (x.to(torch.float8_e4m3fn), measured by tests/gpu/bench_peer.py in the same device call: --peer FILE).
 * Every kernel is checked against the CPU reference (2048 x 5120, fresh inputs) immediately before it is
 * timed; a kernel that fails its check is not timed.
 * Timing: CUDA events around each launch, 3 warm-ups, the median of 25; inputs of 0.6 GB and more, far
 * past the 60 MB L2, so no rotation is needed.
 * usage: bench [--peer FILE] [--csv FILE] */
#include "harness.h"

#include <pthread.h>
#include <string.h>

static int cmpf(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* median ms of 25 timed launches after 3 warm-ups */
static float time_kernel(const fb_kernel *k, unsigned gx, unsigned gy, unsigned th, const fb_kp_mem *p) {
  CUevent a, b;
  CU(fb_cu.EventCreate(&a, 0));
  CU(fb_cu.EventCreate(&b, 0));
  float t[25];
  for (int i = 0; i < 3; ++i) CK(fb_kernel_launch(k, gx, gy, th, p, sizeof *p));
  for (int i = 0; i < 25; ++i) {
    CU(fb_cu.EventRecord(a, NULL));
    CK(fb_kernel_launch(k, gx, gy, th, p, sizeof *p));
    CU(fb_cu.EventRecord(b, NULL));
    CU(fb_cu.EventSynchronize(b));
    CU(fb_cu.EventElapsedTime(&t[i], a, b));
  }
  fb_cu.EventDestroy(a), fb_cu.EventDestroy(b);
  qsort(t, 25, sizeof t[0], cmpf);
  return t[12];
}

static CUdeviceptr big(size_t n, int random) {
  CUdeviceptr p;
  CU(fb_cu.MemAlloc(&p, n));
  if (!random) {
    CU(fb_cu.MemsetD8(p, 0, n));
    return p;
  }
  /* random BF16-ish / code bytes: a 64 MiB host block, copied over the buffer */
  size_t blk = 64u << 20;
  uint16_t *h = malloc(blk);
  for (size_t i = 0; i < blk / 2; ++i) {
    uint64_t r = rnd();
    /* BF16 with exponents near 1 (Gaussian-like magnitudes), random sign and mantissa; valid codes too */
    h[i] = (uint16_t)(((r >> 8) & 0x8000u) | ((0x3C00u + ((r >> 20) % 0x700u)) & 0x7F80u) | (r & 0x7Fu));
  }
  for (size_t o = 0; o < n; o += blk) CU(fb_cu.MemcpyHtoD(p + o, h, n - o < blk ? n - o : blk));
  free(h);
  return p;
}

typedef struct {
  const char *what;  /* row label */
  const char *match; /* spec name in harness.c */
  long long rows, cols;
  unsigned ngroups;
  double bytes;      /* bytes moved: each input read once, each output written once */
  int peer;          /* compare with the PyTorch cast */
} bench_row;

int main(int argc, char **argv) {
  const char *peer_file = NULL, *csv_file = NULL, *only = NULL;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--peer") && i + 1 < argc) peer_file = argv[++i];
    else if (!strcmp(argv[i], "--csv") && i + 1 < argc) csv_file = argv[++i];
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i]; /* rows whose spec name holds this */
    else { fprintf(stderr, "usage: bench [--peer FILE] [--csv FILE] [--only SUBSTR]\n"); return 2; }
  }
  if (fb_cuda_use_device(0) != FB_OK) {
    printf("bench: SKIPPED (not passed): %s\n", fb_errmsg());
    return 77;
  }
  fb_cuda_device_info info;
  CK(fb_cuda_device_info_get(0, &info));
  double peer_gbs = 0, peer_copy = 0;
  if (peer_file) {
    FILE *f = fopen(peer_file, "r");
    if (!f || fscanf(f, "%lf %lf", &peer_gbs, &peer_copy) != 2) fprintf(stderr, "bench: cannot read the peer's figures from %s\n", peer_file);
    if (f) fclose(f);
  }
  /* ceiling: device-to-device copy, 2 GiB, bytes read + written */
  size_t cb = 2ull << 30;
  CUdeviceptr c0 = big(cb, 0), c1 = big(cb, 0);
  CUevent a, b;
  CU(fb_cu.EventCreate(&a, 0));
  CU(fb_cu.EventCreate(&b, 0));
  float ct[15];
  for (int i = 0; i < 18; ++i) {
    CU(fb_cu.EventRecord(a, NULL));
    CU(fb_cu.MemcpyDtoD(c1, c0, cb));
    CU(fb_cu.EventRecord(b, NULL));
    CU(fb_cu.EventSynchronize(b));
    if (i >= 3) CU(fb_cu.EventElapsedTime(&ct[i - 3], a, b));
  }
  qsort(ct, 15, sizeof ct[0], cmpf);
  double copy_gbs = 2.0 * cb / (ct[7] * 1e-3) / 1e9;
  fb_cu.MemFree(c0), fb_cu.MemFree(c1);

  const long long R = 65536, C = 5120, W = 48ll * 4096;
  const double n = (double)R * C, nw = (double)W * C;
  bench_row rows[] = {
      {"amax per tensor (BF16 X)", "amax_ten_bf16", R, C, 1, 2 * n, 0},
      {"NVFP4 quant, token 4/6 (dispatch X)", "quant_nvfp4_4o6_tok_row", R, C, 1, 2 * n + n / 2 + n / 16 + 4.0 * R, 1},
      {"NVFP4 quant, tensor (NVIDIA X)", "quant_nvfp4_ten_row", R, C, 1, 2 * n + n / 2 + n / 16, 1},
      {"MXFP8 quant rows, RN (last-1/6 forward X)", "quant_mxfp8_row", R, C, 1, 2 * n + n + n / 32, 1},
      {"MXFP8 quant rows, SR (dY)", "quant_mxfp8_sr_row", R, C, 1, 2 * n + n + n / 32, 1},
      {"MXFP8 quant columns, SR (dY for wgrad)", "quant_mxfp8_sr_col", R, C, 1, 2 * n + n + n / 32, 1},
      {"requant NVFP4 tok -> MXFP8^T SR (saved X)", "requant_nvfp4_tok_mxfp8_sr_t", R, C, 1, n / 2 + n / 16 + 4.0 * R + n + n / 32, 0},
      {"requant NVFP4 exp -> MXFP8^T SR (W13, 48 experts)", "requant_nvfp4_exp_mxfp8_sr_t", W, C, 48, nw / 2 + nw / 16 + 4.0 * 48 + nw + nw / 32, 0},
      {"RHT-32 + S2F6 quant (combine Y)", "s2f6_quant_rht32", R, C, 1, 2 * n + n + n / 32, 1},
      {"S2F6 dequant + inverse RHT -> FP32", "s2f6_dequant_rht32", R, C, 1, n + n / 32 + 4 * n, 0},
  };
  const int nrows = (int)(sizeof rows / sizeof rows[0]);
  fb_recipe *rec = NULL;
  CK(fb_recipe_load("recipes/inkling2_small.lua", &rec));
  build_specs();
  units = calloc(2048, sizeof *units);
  int first[32], count[32];
  for (int i = 0; i < nrows; ++i) {
    first[i] = nunits, count[i] = 0;
    if (only && !strstr(rows[i].match, only)) continue;
    for (int s = 0; s < nspecs; ++s) {
      if (strncmp(specs[s].k.name, rows[i].match, strlen(rows[i].match)) || strcmp(specs[s].k.name + strlen(rows[i].match), "_sm90a")) continue;
      const fb_tune_family *fam = NULL;
      for (int f = 0; f < rec->nfamilies; ++f)
        if (!strcmp(rec->families[f].family, specs[s].family)) fam = &rec->families[f];
      fb_variant *vs;
      int nv;
      CK(fb_gen_variants(&specs[s].k, fam, &vs, &nv, NULL, NULL, 0));
      for (int v = 0; v < nv; ++v) {
        unit *u = &units[nunits++];
        u->t = &specs[s];
        u->v = vs[v];
        CK(fb_gen_source(&specs[s].k, &vs[v], "tests/gpu/bench.c", "-", &u->src));
        ++count[i];
      }
      free(vs);
    }
    if (!count[i] && !only) { fprintf(stderr, "bench: no spec named %s\n", rows[i].match); return 1; }
  }
  pthread_t th[16];
  for (int i = 0; i < 16; ++i) pthread_create(&th[i], NULL, compile_worker, NULL);
  for (int i = 0; i < 16; ++i) pthread_join(th[i], NULL);
  for (int i = 0; i < nunits; ++i)
    if (units[i].st != FB_OK) { fprintf(stderr, "%s\n", units[i].err); return 1; }
  /* the amax kernels the tensor quantizers' check needs */
  for (int s = 0; s < nspecs; ++s) {
    if (specs[s].k.op != FB_OP_AMAX) continue;
    fb_variant av = {.tmpl = "amax.cuh", .nparams = 1, .param = {"threads"}, .value = {256}};
    snprintf(av.name, sizeof av.name, "%.120s_t256", specs[s].k.name);
    char *src;
    fb_cubin cub;
    CK(fb_gen_source(&specs[s].k, &av, "tests/gpu/bench.c", "-", &src));
    CK(fb_nvrtc_compile(av.name, src, "sm_90a", &cub));
    int mode = specs[s].k.q.outer == FB_GRAN_TOKEN ? 1 : specs[s].k.q.outer == FB_GRAN_EXPERT ? 2 : 0;
    CK(fb_kernel_load(cub.cubin, av.name, &amax_kernel[mode]));
    free(src);
  }

  /* S1 buffers, shared by all rows (sized for the largest) */
  size_t maxn = (size_t)W * C;
  CUdeviceptr din = big(maxn * 2, 1), dout = big(maxn * 4, 0), dsc = big(maxn / 16, 1), dsd = big(W * 4, 0),
              damax = big(4096, 0), doff = big(49 * 8, 0), dflags = big(4, 0), dss = big(maxn / 16, 1), dssd = big(W * 4, 0);
  { /* valid E4M3 source scales (no NaN codes) and S_dec = 1 */
    uint8_t *h = malloc(maxn / 16);
    for (size_t i = 0; i < maxn / 16; ++i) h[i] = (uint8_t)(0x30 + rnd() % 0x30);
    CU(fb_cu.MemcpyHtoD(dss, h, maxn / 16));
    CU(fb_cu.MemcpyHtoD(dsc, h, maxn / 16));
    free(h);
    float *o = malloc(W * 4);
    for (long long i = 0; i < W; ++i) o[i] = 1.0f / 2688.0f;
    CU(fb_cu.MemcpyHtoD(dssd, o, W * 4));
    CU(fb_cu.MemcpyHtoD(damax, o, 1024));
    free(o);
    long long off[49];
    for (int g = 0; g <= 48; ++g) off[g] = (long long)g * 4096;
    CU(fb_cu.MemcpyHtoD(doff, off, sizeof off));
  }
  FILE *csv = csv_file ? fopen(csv_file, "w") : NULL;
  if (csv) fprintf(csv, "kernel,variant,rows,cols,ms,gbs,copy_gbs,pct_copy,peer_gbs,ratio_to_peer,checked_wrong\n");
  printf("\n%s, %d SMs; device copy %.0f GB/s (read + write, 2 GiB, median of 15)", info.name, info.sm_count, copy_gbs);
  if (peer_gbs > 0) printf("; PyTorch x.to(float8_e4m3fn) %.0f GB/s, PyTorch copy %.0f GB/s", peer_gbs, peer_copy);
  printf("\n%-52s %-44s %8s %8s %7s %8s %6s\n", "kernel (S1)", "best variant", "ms", "GB/s", "%copy", "x peer", "#wrong");
  int failed = 0;
  for (int i = 0; i < nrows; ++i) {
    if (!count[i]) continue;
    float best = 1e30f;
    int bu = -1;
    long wrong_total = 0;
    for (int j = first[i]; j < first[i] + count[i]; ++j) {
      unit *u = &units[j];
      fb_kernel kern;
      CK(fb_kernel_load(u->cubin.cubin, u->v.name, &kern));
      /* the check, just before the timing: fresh inputs against the CPU reference */
      long long cr = rows[i].ngroups > 1 ? 48 * 64 : 2048;
      long wrong = run_case(u, &kern, CASE_WIDE, (unsigned)(rnd() & 0xFFFF), cr, C);
      wrong_total += wrong;
      if (wrong) {
        fprintf(stderr, "bench: %s failed its check (%ld wrong): not timed\n", u->v.name, wrong);
        fb_kernel_unload(&kern);
        continue;
      }
      fb_kp_mem p;
      memset(&p, 0, sizeof p);
      p.in = din, p.out = dout, p.scales = dsc, p.s_dec = dsd, p.amax = damax, p.group_offsets = doff, p.flags = dflags;
      p.src_scales = dss, p.src_s_dec = dssd, p.rows = rows[i].rows, p.cols = rows[i].cols, p.ngroups = rows[i].ngroups;
      p.seed = 1, p.stream = 2, p.step = 3, p.signs = 0x9E3779B9u;
      if (u->t->k.op == FB_OP_S2F6_DQ) p.scales = dss; /* valid E8M0-ish exponents */
      if (u->t->k.op == FB_OP_REQUANT && u->t->k.src.outer == FB_GRAN_TOKEN) p.ngroups = 1;
      unsigned gx, gy, nt;
      CK(fb_launch_dims(&u->t->k, &u->v, p.rows, p.cols, p.ngroups, &gx, &gy, &nt));
      float ms = time_kernel(&kern, gx, gy, nt, &p);
      CU(fb_cu.CtxSynchronize());
      if (ms < best) best = ms, bu = j;
      fb_kernel_unload(&kern);
    }
    if (bu < 0) {
      printf("%-52s %-44s %8s\n", rows[i].what, "(every variant failed its check)", "-");
      failed = 1;
      continue;
    }
    double gbs = rows[i].bytes / (best * 1e-3) / 1e9;
    char ratio[16] = "-";
    if (rows[i].peer && peer_gbs > 0) snprintf(ratio, sizeof ratio, "%.2f", gbs / peer_gbs);
    const char *vn = units[bu].v.name + strlen(units[bu].t->k.name);
    printf("%-52s %-44s %8.3f %8.0f %6.1f%% %8s %6ld\n", rows[i].what, vn, best, gbs, 100 * gbs / copy_gbs, ratio, wrong_total);
    if (csv)
      fprintf(csv, "%s,%s,%lld,%lld,%.4f,%.1f,%.1f,%.1f,%.1f,%s,%ld\n", units[bu].t->k.name, vn + 1, rows[i].rows, rows[i].cols,
              best, gbs, copy_gbs, 100 * gbs / copy_gbs, rows[i].peer ? peer_gbs : 0.0, ratio, wrong_total);
  }
  if (csv) fclose(csv);
  printf("(GB/s = bytes read once + written once / median time; %%copy against the copy above; each variant passed its check at "
         "2048 x 5120 (W13: 48 x 64 rows) just before it was timed)\n");
  fb_recipe_free(rec);
  return failed;
}
