/* test_tcgen05.c — the tcgen05 descriptors of templates/fb_tcgen05.h against the values CUTLASS 4.2's headers printed
 * for the project's Blackwell fact sheet (docs/hardware.md, "Blackwell": instruction descriptors of each kind, shared
 * memory descriptors of each swizzle, scale-factor byte offsets), and every encoder against its decoders over a grid.
 * The bit-for-bit comparison with CUTLASS's own unions over a larger grid is tests/cutlass/tcgen05_desc.cpp. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "fb_tcgen05.h"

static void test_idesc_known(void **state) {
  (void)state;
  /* NVFP4 (e2m1, UE4M3 scales), M128 N256, K-major both */
  assert_int_equal(fb_tc_idesc_bs(FB_TC_MXF4_E2M1, FB_TC_MXF4_E2M1, 0, 128, 256, 0, 0, 0, 0, 0), 0x08400480u);
  assert_int_equal(fb_tc_idesc_bs(FB_TC_MXF4_E2M1, FB_TC_MXF4_E2M1, 1, 128, 256, 0, 0, 0, 0, 0), 0x08c00480u); /* MXFP4 */
  assert_int_equal(fb_tc_idesc_bs(FB_TC_MXF4_E2M1, FB_TC_MXF4_E2M1, 0, 256, 256, 0, 0, 0, 0, 0), 0x10400480u); /* 2-CTA */
  assert_int_equal(fb_tc_idesc_bs(FB_TC_E4M3, FB_TC_E4M3, 1, 128, 256, 0, 0, 0, 0, 0), 0x08c00000u);           /* MXFP8 */
  assert_int_equal(fb_tc_idesc_bs(FB_TC_E4M3, FB_TC_E5M2, 1, 128, 128, 1, 0, 0, 0, 0), 0x08a08400u);           /* A MN */
  assert_int_equal(fb_tc_idesc_bs(FB_TC_E4M3, FB_TC_E4M3, 1, 256, 256, 1, 1, 0, 0, 0), 0x10c18000u);
  assert_int_equal(fb_tc_idesc(FB_TC_BF16, FB_TC_BF16, FB_TC_D_F32, 128, 256, 0, 0), 0x08400490u);
  assert_int_equal(fb_tc_idesc(FB_TC_E4M3, FB_TC_E4M3, FB_TC_D_F32, 128, 128, 0, 0), 0x08200010u);
  /* the scale-factor ids CUTLASS takes from the top 2 bits of the TMEM addresses: sfa 0x100, sfb 0x80000104 */
  assert_int_equal(fb_tc_idesc_bs(FB_TC_MXF4_E2M1, FB_TC_MXF4_E2M1, 0, 128, 256, 0, 0, 0x100u >> 30, 0x80000104u >> 30, 0),
                   0x084004a0u);
}

static void test_sdesc_known(void **state) {
  (void)state;
  /* K-major uint8 128 x 128 bytes at address 0: SBO = 8 rows x the swizzle width, LBO 16 (unused when swizzled) */
  assert_true(fb_tc_sdesc(0, 16, 1024, FB_TC_SW128, 0, 0) == 0x4000404000010000ull);
  assert_true(fb_tc_sdesc(0, 16, 512, FB_TC_SW64, 0, 0) == 0x8000402000010000ull);
  assert_true(fb_tc_sdesc(0, 16, 256, FB_TC_SW32, 0, 0) == 0xc000401000010000ull);
  assert_true(fb_tc_sdesc(0, 0, 128, FB_TC_SW_NONE, 0, 0) == 0x0000400800000000ull);
  /* Hopper's wgmma descriptor has no version bit: it is not a valid sm100 descriptor */
  assert_false(fb_tc_sdesc_valid(0x4000004000010000ull));
  assert_true(fb_tc_sdesc_valid(0x4000404000010000ull));
  assert_false(fb_tc_sdesc_valid(0x6000404000010000ull)); /* layout 3 */
}

static void test_sf_known(void **state) {
  (void)state;
  /* M = 256, K = 1024 NVFP4: 64 k-blocks of 16 a row */
  assert_int_equal(fb_tc_sf_offset(0, 1, 64), 1);
  assert_int_equal(fb_tc_sf_offset(1, 0, 64), 16);
  assert_int_equal(fb_tc_sf_offset(32, 0, 64), 4);
  assert_int_equal(fb_tc_sf_offset(64, 0, 64), 8);
  assert_int_equal(fb_tc_sf_offset(127, 3, 64), 511);
  assert_int_equal(fb_tc_sf_offset(0, 4, 64), 512);
  assert_int_equal(fb_tc_sf_offset(128, 0, 64), 8192);
  /* a bijection onto [0, rows x kblocks) for whole atoms */
  static unsigned char seen[256 * 8];
  for (unsigned m = 0; m < 256; ++m)
    for (unsigned kb = 0; kb < 8; ++kb) {
      unsigned long long o = fb_tc_sf_offset(m, kb, 8);
      assert_true(o < sizeof seen);
      assert_int_equal(seen[o]++, 0);
    }
}

static void test_roundtrip(void **state) {
  (void)state;
  int n_checked = 0;
  for (int m = 64; m <= 256; m *= 2)
    for (int n = 8; n <= 256; n += 8)
      for (int fa = 0; fa < 8; ++fa)
        for (int maj = 0; maj < 4; ++maj)
          for (int id = 0; id < 4; ++id) {
            uint32_t d = fb_tc_idesc_bs(fa, 7 - fa, id & 1, m, n, maj & 1, maj >> 1, id, 3 - id, id >> 1);
            assert_int_equal(fb_tc_idesc_m(d), m);
            assert_int_equal(fb_tc_idesc_n(d), n);
            assert_int_equal(fb_tc_idesc_a_fmt(d), fa);
            assert_int_equal(fb_tc_idesc_b_fmt(d), 7 - fa);
            assert_int_equal(fb_tc_idesc_a_major(d), maj & 1);
            assert_int_equal(fb_tc_idesc_b_major(d), maj >> 1);
            assert_int_equal(fb_tc_idesc_sf_ue8m0(d), id & 1);
            assert_int_equal(fb_tc_idesc_a_sf_id(d), id);
            assert_int_equal(fb_tc_idesc_b_sf_id(d), 3 - id);
            assert_int_equal(fb_tc_idesc_k96(d), id >> 1);
            assert_int_equal(fb_tc_idesc_sparse(d), 0);
            assert_int_equal(fb_tc_idesc_negate(d), 0);
            uint32_t p = fb_tc_idesc(fa, 7 - fa, id & 3, m, n, maj & 1, maj >> 1);
            assert_int_equal(fb_tc_idesc_d_fmt(p), id & 3);
            assert_int_equal(fb_tc_idesc_m(p), m);
            ++n_checked;
          }
  static const int layouts[] = {FB_TC_SW_NONE, FB_TC_SW128_BASE32B, FB_TC_SW128, FB_TC_SW64, FB_TC_SW32};
  for (uint32_t addr = 0; addr < (1u << 18); addr += 16 * 37)
    for (int l = 0; l < 5; ++l) {
      uint32_t lbo = (addr * 7) & 0x3FFF0, sbo = (addr * 13) & 0x3FFF0;
      int bo = (int)((addr >> 7) & 7); /* the field's round trip, every value */
      uint64_t d = fb_tc_sdesc(addr, lbo, sbo, layouts[l], bo, l & 1);
      assert_true(fb_tc_sdesc_valid(d));
      assert_int_equal(fb_tc_sdesc_addr(d), addr);
      assert_int_equal(fb_tc_sdesc_lbo(d), lbo);
      assert_int_equal(fb_tc_sdesc_sbo(d), sbo);
      assert_int_equal(fb_tc_sdesc_layout(d), layouts[l]);
      assert_int_equal(fb_tc_sdesc_base_offset(d), bo);
      assert_int_equal(fb_tc_sdesc_lbo_abs(d), l & 1);
      ++n_checked;
    }
  assert_true(n_checked > 10000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_idesc_known),
      cmocka_unit_test(test_sdesc_known),
      cmocka_unit_test(test_sf_known),
      cmocka_unit_test(test_roundtrip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
