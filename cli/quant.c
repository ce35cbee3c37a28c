/* quant.c — `fourbit quant` and `fourbit dequant`: the numerics library on files.
 * File layouts (little-endian, row-major, blocks along a row):
 *   IN of quant / OUT of dequant: R x C float32.
 *   nvfp4: codes R*C/2 bytes (even element in the low nibble), E4M3 scales R*C/16 bytes,
 *          S_dec float32 x (1 for --outer tensor, R for --outer row).
 *   mxfp8: E4M3 codes R*C bytes, E8M0 scales R*C/32 bytes.
 *   s2f6:  int8 codes R*C bytes, E8M0 scales R*C/32 bytes.
 * SR uses stream 0 with counter step --step; the RHT sign mask is fb_rht_signs(seed, 0). */
#include "cli.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { F_NONE, F_NVFP4, F_MXFP8, F_S2F6 };

static void quant_usage(FILE *f, const char *cmd) {
  fprintf(f,
          "usage: fourbit %s --format nvfp4 [--outer tensor|row] [--four-over-six] [--rounding rn|sr]\n"
          "                     [--seed S] [--step N] --rows R --cols C IN OUT\n"
          "       fourbit %s --format mxfp8 [--rounding rn|sr] [--seed S] [--step N] --rows R --cols C IN OUT\n"
          "       fourbit %s --format s2f6 [--rht] [--seed S] --rows R --cols C IN OUT\n"
          "\n"
          "quant reads IN, R x C little-endian float32 (row-major; blocks run along a row), and writes OUT:\n"
          "the codes (row-major; NVFP4 two per byte, even element in the low nibble), then one scale byte per\n"
          "block (E4M3 per 16 for nvfp4, E8M0 per 32 for mxfp8 and s2f6), then for nvfp4 the float32 S_dec\n"
          "outer scales (1 for --outer tensor, R for --outer row). dequant reads that and writes float32;\n"
          "give it the same flags. Formats and rounding are those of docs/numerics.md.\n"
          "\n"
          "  --format F        nvfp4 | mxfp8 | s2f6 (required)\n"
          "  --rows R --cols C the matrix shape (required); C a multiple of 16 (nvfp4) or 32 (mxfp8, s2f6)\n"
          "  --outer G         nvfp4 outer-scale granularity: tensor (default) | row (per token)\n"
          "  --four-over-six   nvfp4: choose per block between the scales for 6 and for 4 (4/6)\n"
          "  --rounding M      rn (default, round to nearest even) | sr (stochastic, stream 0)\n"
          "  --seed S          32-bit seed of SR and of the RHT sign mask (default 0)\n"
          "  --step N          SR counter step (default 0)\n"
          "  --rht             s2f6: apply the 32-point random Hadamard transform first (signs from --seed)\n"
          "  --stats           quant only: print RMSE, max abs error and mean signed error (bias) of the\n"
          "                    round trip IN -> OUT -> float32, over the finite inputs\n"
          "  -h, --help        this text\n"
          "\n"
          "OUT is written whole or not at all (a temporary file renamed into place); a character device or\n"
          "FIFO (/dev/null, /dev/stdout) is written into instead.\n"
          "Exit status: 0 ok, 1 failure, 2 bad usage or input.\n",
          cmd, cmd, cmd);
}

typedef struct {
  int format, outer_row, fos, sr, rht, stats;
  int have_rows, have_cols, have_outer, have_rounding, have_step;
  unsigned long long rows, cols, seed, step;
} qargs;

static void print_stats(const float *x, const float *y, size_t n) {
  double se = 0, bias = 0, maxabs = 0, sx = 0;
  size_t m = 0, nonfinite = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!isfinite(x[i])) {
      ++nonfinite;
      continue;
    }
    double d = (double)y[i] - (double)x[i];
    se += d * d;
    bias += d;
    sx += (double)x[i] * x[i];
    if (fabs(d) > maxabs || isnan(d)) maxabs = fabs(d);
    ++m;
  }
  double rmse = m ? sqrt(se / m) : 0, rms = m ? sqrt(sx / m) : 0;
  printf("round trip over %zu finite values: rmse %.6g (%.4g%% of input rms %.6g), max abs error %.6g, "
         "mean signed error (bias) %.6g\n",
         m, rmse, rms > 0 ? 100 * rmse / rms : 0.0, rms, maxabs, m ? bias / m : 0.0);
  if (nonfinite) printf("%zu non-finite input values were left out of the statistics\n", nonfinite);
}

int fb_cli_quant(int argc, char **argv, int dequant) {
  const char *cmd = dequant ? "dequant" : "quant";
  static const struct option opts[] = {
      {"format", required_argument, 0, 'f'}, {"outer", required_argument, 0, 'o'},
      {"four-over-six", no_argument, 0, '4'}, {"rounding", required_argument, 0, 'r'},
      {"seed", required_argument, 0, 's'},   {"step", required_argument, 0, 'n'},
      {"rows", required_argument, 0, 'R'},   {"cols", required_argument, 0, 'C'},
      {"rht", no_argument, 0, 'H'},          {"stats", no_argument, 0, 'S'},
      {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
  qargs a = {0};
  optind = 0;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'f':
      if (!strcmp(optarg, "nvfp4")) a.format = F_NVFP4;
      else if (!strcmp(optarg, "mxfp8")) a.format = F_MXFP8;
      else if (!strcmp(optarg, "s2f6")) a.format = F_S2F6;
      else {
        fprintf(stderr, "fourbit %s: --format: unknown format '%s' (nvfp4, mxfp8, s2f6)\n", cmd, optarg);
        return 2;
      }
      break;
    case 'o':
      a.have_outer = 1;
      if (!strcmp(optarg, "row")) a.outer_row = 1;
      else if (strcmp(optarg, "tensor")) {
        fprintf(stderr, "fourbit %s: --outer: unknown granularity '%s' (tensor, row)\n", cmd, optarg);
        return 2;
      }
      break;
    case '4': a.fos = 1; break;
    case 'r':
      a.have_rounding = 1;
      if (!strcmp(optarg, "sr")) a.sr = 1;
      else if (strcmp(optarg, "rn")) {
        fprintf(stderr, "fourbit %s: --rounding: unknown mode '%s' (rn, sr)\n", cmd, optarg);
        return 2;
      }
      break;
    case 's':
      if (fb_cli_parse_u64(cmd, "--seed", optarg, 0, 0xFFFFFFFFull, &a.seed)) return 2;
      break;
    case 'n':
      a.have_step = 1;
      if (fb_cli_parse_u64(cmd, "--step", optarg, 0, 0xFFFFFFFFull, &a.step)) return 2;
      break;
    case 'R':
      a.have_rows = 1;
      if (fb_cli_parse_u64(cmd, "--rows", optarg, 1, 1ull << 31, &a.rows)) return 2;
      break;
    case 'C':
      a.have_cols = 1;
      if (fb_cli_parse_u64(cmd, "--cols", optarg, 1, 1ull << 31, &a.cols)) return 2;
      break;
    case 'H': a.rht = 1; break;
    case 'S': a.stats = 1; break;
    case 'h': quant_usage(stdout, cmd); return 0;
    default:
      fprintf(stderr, "fourbit %s: unknown or incomplete option '%s' (see --help)\n", cmd, fb_cli_badopt(argc, argv));
      return 2;
    }
  }
  const char *err = NULL;
  if (!a.format) err = "--format is required";
  else if (!a.have_rows || !a.have_cols) err = "--rows and --cols are required";
  else if (argc - optind != 2) err = "expected two file arguments: IN OUT";
  else if (a.format != F_NVFP4 && (a.have_outer || a.fos)) err = "--outer and --four-over-six apply to --format nvfp4 only";
  else if (a.format == F_S2F6 && (a.have_rounding || a.have_step)) err = "--rounding and --step do not apply to --format s2f6";
  else if (a.format != F_S2F6 && a.rht) err = "--rht applies to --format s2f6 only";
  else if (dequant && a.stats) err = "--stats applies to quant (it compares the round trip with the input)";
  if (err) {
    fprintf(stderr, "fourbit %s: %s (see --help)\n", cmd, err);
    return 2;
  }
  size_t R = a.rows, C = a.cols, n = R * C, bs = a.format == F_NVFP4 ? 16 : 32;
  if (C % bs) {
    fprintf(stderr, "fourbit %s: --cols %zu is not a multiple of the %s block (%zu)\n", cmd, C,
            a.format == F_NVFP4 ? "nvfp4" : a.format == F_MXFP8 ? "mxfp8" : "s2f6", bs);
    return 2;
  }
  if (n > (1ull << 33)) {
    fprintf(stderr, "fourbit %s: %zu x %zu is more than 2^33 values\n", cmd, R, C);
    return 2;
  }
  const char *in = argv[optind], *out = argv[optind + 1];
  size_t nouter = a.outer_row ? R : 1;
  size_t code_bytes = a.format == F_NVFP4 ? n / 2 : n, scale_bytes = n / bs;
  size_t outer_bytes = a.format == F_NVFP4 ? nouter * sizeof(float) : 0;
  size_t qbytes = code_bytes + scale_bytes + outer_bytes;

  fb_nvfp4_opts no = {.outer = a.outer_row ? FB_OUTER_ROW : FB_OUTER_TENSOR, .four_over_six = a.fos,
                      .rounding = a.sr ? FB_ROUND_SR : FB_ROUND_RN, .seed = (uint32_t)a.seed, .stream = 0,
                      .step = (uint32_t)a.step};
  fb_sr_opts so = {.rounding = no.rounding, .seed = no.seed, .stream = 0, .step = no.step};
  uint32_t signs = fb_rht_signs((uint32_t)a.seed, 0);
  int rc = 1;
  void *inbuf = NULL;
  float *x = NULL, *y = NULL;
  uint8_t *q = NULL;
  char what[128];
  if (!dequant) snprintf(what, sizeof what, "%zu x %zu float32", R, C);
  else snprintf(what, sizeof what, "the %s encoding of %zu x %zu", a.format == F_NVFP4 ? "nvfp4" : a.format == F_MXFP8 ? "mxfp8" : "s2f6", R, C);
  if (fb_cli_read_exact(cmd, in, dequant ? qbytes : n * sizeof(float), what, &inbuf)) return 2;

  fb_status s = FB_OK;
  if (!dequant) {
    x = inbuf;
    q = malloc(qbytes);
    if (!q) goto oom;
    uint8_t *codes = q, *scales = q + code_bytes;
    float *sdec = malloc(nouter * sizeof *sdec);
    if (!sdec) goto oom;
    if (a.format == F_NVFP4) s = fb_nvfp4_quantize(x, R, C, &no, codes, scales, sdec, NULL);
    else if (a.format == F_MXFP8) s = fb_mxfp8_quantize(x, R, C, FB_MX_ROWWISE, &so, codes, scales);
    else s = fb_s2f6_quantize(x, R, C, a.rht, signs, (int8_t *)codes, scales);
    if (a.format == F_NVFP4) memcpy(q + code_bytes + scale_bytes, sdec, outer_bytes);
    if (s != FB_OK) {
      free(sdec);
      goto libfail;
    }
    if (a.stats) {
      y = malloc(n * sizeof *y);
      if (!y) {
        free(sdec);
        goto oom;
      }
      /* sdec, not OUT's copy: at code_bytes + scale_bytes the outer scales need not be 4-byte aligned */
      if (a.format == F_NVFP4) s = fb_nvfp4_dequantize(codes, scales, sdec, R, C, &no, y);
      else if (a.format == F_MXFP8) s = fb_mxfp8_dequantize(codes, scales, R, C, y);
      else s = fb_s2f6_dequantize((int8_t *)codes, scales, R, C, a.rht, signs, y);
      free(sdec);
      sdec = NULL;
      if (s != FB_OK) goto libfail;
      print_stats(x, y, n);
    }
    free(sdec);
    const void *parts[1] = {q};
    size_t sizes[1] = {qbytes};
    rc = fb_cli_write_atomic(cmd, out, parts, sizes, 1);
  } else {
    uint8_t *codes = inbuf, *scales = codes + code_bytes;
    y = malloc(n * sizeof *y);
    if (!y) goto oom;
    if (a.format == F_NVFP4) {
      float *sdec = malloc(outer_bytes);
      if (!sdec) goto oom;
      memcpy(sdec, scales + scale_bytes, outer_bytes);
      s = fb_nvfp4_dequantize(codes, scales, sdec, R, C, &no, y);
      free(sdec);
    } else if (a.format == F_MXFP8) {
      s = fb_mxfp8_dequantize(codes, scales, R, C, y);
    } else {
      s = fb_s2f6_dequantize((int8_t *)codes, scales, R, C, a.rht, signs, y);
    }
    if (s != FB_OK) goto libfail;
    const void *parts[1] = {y};
    size_t sizes[1] = {n * sizeof(float)};
    rc = fb_cli_write_atomic(cmd, out, parts, sizes, 1);
  }
  goto done;
oom:
  fprintf(stderr, "fourbit %s: out of memory for %zu x %zu\n", cmd, R, C);
  rc = 1;
  goto done;
libfail:
  fprintf(stderr, "fourbit %s: %s\n", cmd, fb_errmsg());
  rc = s == FB_EINVAL ? 2 : 1;
done:
  free(inbuf);
  free(q);
  free(y);
  return rc;
}
