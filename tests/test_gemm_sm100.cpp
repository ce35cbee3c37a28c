/* test_gemm_sm100.cpp — templates/sm100/gemm_sm100.cuh, the first cut of the Blackwell grouped GEMM, on the CPU under
 * the functional model of the tcgen05 / TMA / mbarrier instructions (tests/emu/tc_model.h): BF16 and MXFP8 over
 * uneven experts (an empty one, partial 128-row blocks), persistent CTAs taking several tiles each, against a
 * reference computed here from the logical matrices in the model's documented order (each MMA's K products exact,
 * summed in double, rounded once to FP32, FP32 adds), bit for bit; and it compiles with NVRTC for sm_100a and
 * sm_103a. Never run on a Blackwell GPU. Run from the repository root. */
#define FBEMU_KERNEL
#include "emu/fb_emu.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

extern "C" {
#include <cmocka.h>
}
#include "fb_error.h"
#include "fourbit.h"

#include "emu/emu_core.h"
#include "emu/tc_model.h"
#include "fb_tc_ops.h" /* once, outside the kernels' namespaces */

namespace bf16 {
#define FBS_KIND 0
#define FBS_TILE_N 128
#define FBS_STAGES 3
#define FBS_NAME fbs_gemm_bf16_n128
#include "sm100/gemm_sm100.cuh"
#undef FBS_KIND
#undef FBS_TILE_N
#undef FBS_STAGES
#undef FBS_NAME
} // namespace bf16
namespace bf16n64 {
#define FBS_KIND 0
#define FBS_TILE_N 64
#define FBS_STAGES 2
#define FBS_NAME fbs_gemm_bf16_n64
#include "sm100/gemm_sm100.cuh"
#undef FBS_KIND
#undef FBS_TILE_N
#undef FBS_STAGES
#undef FBS_NAME
} // namespace bf16n64
namespace mxf8 {
#define FBS_KIND 1
#define FBS_TILE_N 256
#define FBS_STAGES 2
#define FBS_NAME fbs_gemm_mxf8_n256
#include "sm100/gemm_sm100.cuh"
#undef FBS_KIND
#undef FBS_TILE_N
#undef FBS_STAGES
#undef FBS_NAME
} // namespace mxf8
namespace nvf4 {
#define FBS_KIND 2
#define FBS_TILE_N 128
#define FBS_STAGES 3
#define FBS_NAME fbs_gemm_nvf4_n128
#include "sm100/gemm_sm100.cuh"
#undef FBS_KIND
#undef FBS_TILE_N
#undef FBS_STAGES
#undef FBS_NAME
} // namespace nvf4
namespace nvf4n256 {
#define FBS_KIND 2
#define FBS_TILE_N 256
#define FBS_STAGES 2
#define FBS_NAME fbs_gemm_nvf4_n256
#include "sm100/gemm_sm100.cuh"
#undef FBS_KIND
#undef FBS_TILE_N
#undef FBS_STAGES
#undef FBS_NAME
} // namespace nvf4n256

/* the same BF16 kernel with one wait or fence left out (FBS_TEST_BREAK): the model must report each */
namespace brk1 {
#define FBS_TEST_BREAK 1
#define FBS_NAME fbs_gemm_break1
#include "sm100/gemm_sm100.cuh"
#undef FBS_NAME
} // namespace brk1
namespace brk2 {
#define FBS_TEST_BREAK 2
#define FBS_NAME fbs_gemm_break2
#include "sm100/gemm_sm100.cuh"
#undef FBS_NAME
} // namespace brk2
namespace brk3 {
#define FBS_TEST_BREAK 3
#define FBS_NAME fbs_gemm_break3
#include "sm100/gemm_sm100.cuh"
#undef FBS_NAME
} // namespace brk3

namespace tc = fbemu::tc;

namespace {
uint64_t rs = 0x1234567887654321ull;
unsigned rnd() {
  rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
  return (unsigned)(rs >> 11);
}

struct Case {
  int kind, tile_n, N, K, grid;
  std::vector<int> rows; /* per expert */
};

template <class P, class F>
void run_case(const Case &c, F kernel, unsigned smem, const char *expect_error = NULL) {
  const int E = (int)c.rows.size(), N = c.N, K = c.K;
  std::vector<int> off(E + 1, 0);
  for (int e = 0; e < E; ++e) off[e + 1] = off[e] + c.rows[e];
  const int R = off[E];
  const size_t es = c.kind ? 1 : 2, rowb = c.kind == 2 ? (size_t)K / 2 : (size_t)K * es; /* bytes a row */
  const int blk = c.kind == 2 ? 16 : 32;
  std::vector<unsigned char> A((size_t)R * rowb), B((size_t)E * N * rowb);
  std::vector<unsigned char> sfa((size_t)R * K / blk), sfb((size_t)E * N * K / blk);
  auto code = [&](unsigned char *p) {
    if (c.kind == 2)
      *p = (unsigned char)(rnd() & 0xFF); /* two E2M1 codes */
    else if (c.kind) {
      unsigned v;
      do v = rnd() & 0xFF;
      while ((v & 0x7F) == 0x7F);
      *p = (unsigned char)v;
    } else {
      uint16_t h = fb_bf16_from_f32((float)((int)(rnd() % 33) - 16) / 8.0f * (float)(1 << (rnd() % 4)));
      memcpy(p, &h, 2);
    }
  };
  for (size_t i = 0; i < A.size(); i += es) code(&A[i]);
  for (size_t i = 0; i < B.size(); i += es) code(&B[i]);
  for (auto &x : sfa) x = (unsigned char)(c.kind == 2 ? 0x20 + rnd() % 0x30 : 122 + rnd() % 10);
  for (auto &x : sfb) x = (unsigned char)(c.kind == 2 ? 0x20 + rnd() % 0x30 : 122 + rnd() % 10);
  P p;
  memset(&p, 0, sizeof p);
  const unsigned kbox = c.kind ? 128 : 64; /* one 128-byte swizzle row of K */
  const uint64_t inner = rowb / es;        /* the map's inner extent: BF16 elements or bytes */
  uint64_t da[2] = {inner, (uint64_t)(R > 0 ? R : 1)}, db[2] = {inner, (uint64_t)E * N}, sa[1] = {rowb}, sb[1] = {rowb};
  uint32_t ba[2] = {kbox, 128}, bb[2] = {kbox, (uint32_t)c.tile_n};
  assert_null(tc::encode_tmap(&p.ta, (unsigned)es, 2, A.data(), da, sa, ba, NULL, 0, 128, 0));
  assert_null(tc::encode_tmap(&p.tb, (unsigned)es, 2, B.data(), db, sb, bb, NULL, 0, 128, 0));
  std::vector<float> out((size_t)R * N, NAN);
  p.out = (unsigned long long)(uintptr_t)out.data(), p.offsets = (unsigned long long)(uintptr_t)off.data();
  p.sfa = (unsigned long long)(uintptr_t)sfa.data(), p.sfb = (unsigned long long)(uintptr_t)sfb.data();
  p.experts = E, p.N = N, p.K = K;
  fbemu_table = &fbemu::api;
  const char *err = tc::launch((unsigned)c.grid, 1, 192, 1, smem, [&p, kernel] { kernel(p); });
  if (expect_error) {
    printf("  broken build: %s\n", err ? err : "(not reported)");
    bool found = false; /* any of the |-separated symptoms (which one comes first depends on the schedule) */
    for (std::string rest = expect_error; err && !found;) {
      size_t bar = rest.find('|');
      found = strstr(err, rest.substr(0, bar).c_str()) != NULL;
      if (bar == std::string::npos) break;
      rest = rest.substr(bar + 1);
    }
    if (!found) fail_msg("expected a report containing \"%s\"", expect_error);
    return;
  }
  const char *kname = c.kind == 2 ? "NVFP4" : c.kind ? "MXFP8" : "BF16";
  if (err) fail_msg("%s N%d K%d: %s", kname, N, K, err);
  /* the reference */
  const int kmma = c.kind == 2 ? 64 : c.kind ? 32 : 16;
  int bad = 0;
  for (int e = 0; e < E; ++e)
    for (int r = off[e]; r < off[e + 1]; ++r)
      for (int n = 0; n < N; ++n) {
        float acc = 0;
        const size_t brow = (size_t)e * N + n;
        for (int k0 = 0; k0 < K; k0 += kmma) {
          double s = 0;
          for (int k = k0; k < k0 + kmma; ++k) {
            double x, y;
            if (c.kind == 2) {
              x = (double)fb_e2m1_decode((uint8_t)(A[(size_t)r * rowb + k / 2] >> (4 * (k % 2)))) * fb_e4m3_decode(sfa[(size_t)r * K / 16 + k / 16]);
              y = (double)fb_e2m1_decode((uint8_t)(B[brow * rowb + k / 2] >> (4 * (k % 2)))) * fb_e4m3_decode(sfb[brow * K / 16 + k / 16]);
            } else if (c.kind) {
              x = (double)fb_e4m3_decode(A[(size_t)r * K + k]) * fb_e8m0_decode(sfa[(size_t)r * K / 32 + k / 32]);
              y = (double)fb_e4m3_decode(B[brow * K + k]) * fb_e8m0_decode(sfb[brow * K / 32 + k / 32]);
            } else {
              uint16_t ha, hb;
              memcpy(&ha, &A[((size_t)r * K + k) * 2], 2), memcpy(&hb, &B[(brow * K + k) * 2], 2);
              x = fb_bf16_to_f32(ha), y = fb_bf16_to_f32(hb);
            }
            s += x * y;
          }
          acc = k0 ? acc + (float)s : (float)s;
        }
        if (memcmp(&acc, &out[(size_t)r * N + n], 4)) {
          if (!bad) printf("    first difference: row %d col %d: %g, want %g\n", r, n, out[(size_t)r * N + n], acc);
          ++bad;
        }
      }
  printf("  %s tile_n %d: %d experts (rows", kname, c.tile_n, E);
  for (int x : c.rows) printf(" %d", x);
  printf("), N %d, K %d, %d persistent CTAs: %s\n", N, K, c.grid, bad ? "MISMATCH" : "bit-exact");
  if (bad) fail_msg("%d of %zu outputs differ", bad, out.size());
}

void test_bf16(void **state) {
  (void)state;
  run_case<bf16::fbs_gemm_params>(Case{0, 128, 256, 256, 2, {100, 0, 300, 128}}, bf16::fbs_gemm_bf16_n128, bf16::fbs_gemm_smem_bytes());
  run_case<bf16n64::fbs_gemm_params>(Case{0, 64, 192, 128, 3, {37, 129}}, bf16n64::fbs_gemm_bf16_n64, bf16n64::fbs_gemm_smem_bytes());
}
void test_mxf8(void **state) {
  (void)state;
  run_case<mxf8::fbs_gemm_params>(Case{1, 256, 256, 512, 2, {130, 0, 64}}, mxf8::fbs_gemm_mxf8_n256, mxf8::fbs_gemm_smem_bytes());
}

void test_broken(void **state) {
  (void)state;
  const Case c{0, 128, 256, 512, 1, {300, 200}}; /* one CTA, 8 tiles: accumulator stages reused, stages wrap */
  run_case<brk1::fbs_gemm_params>(c, brk1::fbs_gemm_break1, brk1::fbs_gemm_smem_bytes(), "read without an ordering");
  run_case<brk2::fbs_gemm_params>(c, brk2::fbs_gemm_break2, brk2::fbs_gemm_smem_bytes(),
                                  "may not have read yet|arrivals on an mbarrier phase that expects");
  run_case<brk3::fbs_gemm_params>(c, brk3::fbs_gemm_break3, brk3::fbs_gemm_smem_bytes(), "fence::after_thread_sync");
}

void test_nvf4(void **state) {
  (void)state;
  run_case<nvf4::fbs_gemm_params>(Case{2, 128, 256, 512, 2, {200, 0, 57}}, nvf4::fbs_gemm_nvf4_n128, nvf4::fbs_gemm_smem_bytes());
  run_case<nvf4n256::fbs_gemm_params>(Case{2, 256, 512, 256, 2, {129, 64}}, nvf4n256::fbs_gemm_nvf4_n256, nvf4n256::fbs_gemm_smem_bytes());
}

void test_nvrtc(void **state) {
  (void)state;
  FILE *f = fopen("templates/sm100/gemm_sm100.cuh", "rb");
  if (!f) fail_msg("run from the repository root (templates/sm100/gemm_sm100.cuh)");
  std::string src;
  char b[4096];
  size_t n;
  while ((n = fread(b, 1, sizeof b, f)) > 0) src.append(b, n);
  fclose(f);
  for (const char *pre : {"#define FBS_KIND 0\n#define FBS_TILE_N 128\n", "#define FBS_KIND 1\n#define FBS_TILE_N 256\n#define FBS_STAGES 3\n",
                          "#define FBS_KIND 2\n#define FBS_TILE_N 128\n#define FBS_STAGES 4\n"})
    for (const char *arch : {"sm_100a", "sm_103a"}) {
      fb_cubin c;
      memset(&c, 0, sizeof c);
      std::string s = std::string(pre) + src;
      if (fb_nvrtc_compile("fbs_gemm_sm100", s.c_str(), arch, &c) != FB_OK) fail_msg("%s: %s", arch, fb_errmsg());
      assert_true(c.size > 1000);
      if (c.log && strstr(c.log, "bytes spill stores") && !strstr(c.log, " 0 bytes spill stores")) fail_msg("%s spills: %s", arch, c.log);
      printf("  NVRTC %s %s: %zu-byte cubin\n", arch, strstr(pre, "KIND 2") ? "NVFP4" : strstr(pre, "KIND 1") ? "MXFP8" : "BF16", c.size);
      fb_cubin_free(&c);
    }
}
} // namespace

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_bf16), cmocka_unit_test(test_mxf8), cmocka_unit_test(test_nvf4), cmocka_unit_test(test_broken),
                                     cmocka_unit_test(test_nvrtc)};
  int r = cmocka_run_group_tests(tests, NULL, NULL);
  fbemu::free_stacks();
  return r;
}
