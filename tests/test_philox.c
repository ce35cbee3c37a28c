/* test_philox.c — templates/fb_philox.h and the SR / RHT bit streams of libfourbit, checked
 * against Random123's philox4x32 (10 rounds; Debian librandom123-dev), which we did not write.
 *
 *   kat        Random123's published known-answer vectors for philox4x32_10, on both.
 *   random     fb_philox4x32_10 == philox4x32 on 1,000,000 random (counter, key) pairs.
 *   edges      all-zero / all-one words, counters and keys at the 2^32 wrap, every single-bit
 *              counter and key, consecutive counters carried across 2^32 (the (c mod 2^32,
 *              c div 2^32) split of docs/numerics.md).
 *   sr byte    fb_philox_sr_byte (header) and fb_sr_bits (library) == the docs/numerics.md definition
 *              computed here with Random123: key = (seed, stream), counter = (step, c mod 2^32,
 *              c div 2^32, 0) with c = i / 16, byte j = i % 16 of the four output words read
 *              little-endian; for i over whole 16-blocks, i >= 2^36 (c >= 2^32), up to 2^64 - 1.
 *   rht signs  fb_rht_signs(seed, step) == word 0 of philox4x32 with key (seed, 1) and counter
 *              (step, 0, 0, 0).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wsign-compare"
#include <Random123/philox.h>
#pragma GCC diagnostic pop

#include "fourbit.h"
#include "fb_philox.h"

/* ---- helpers ----------------------------------------------------------------------------- */
static uint64_t sm_state;
static uint64_t rnd64(void) { /* splitmix64 */
  uint64_t z = (sm_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static uint32_t rnd32(void) { return (uint32_t)(rnd64() >> 32); }

/* Random123's answer. */
static void r123(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  philox4x32_ctr_t c = {{ctr[0], ctr[1], ctr[2], ctr[3]}};
  philox4x32_key_t k = {{key[0], key[1]}};
  philox4x32_ctr_t r = philox4x32(c, k);
  for (int w = 0; w < 4; ++w) out[w] = r.v[w];
}

static unsigned long long n_compared, n_bad;

/* Compare fb_philox4x32_10 with Random123 on one (counter, key). */
static void cmp_block(const uint32_t ctr[4], const uint32_t key[2]) {
  fb_u32 c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]}, k[2] = {key[0], key[1]}, ours[4];
  uint32_t ref[4];
  fb_philox4x32_10(c, k, ours);
  r123(ctr, key, ref);
  ++n_compared;
  if (ours[0] != ref[0] || ours[1] != ref[1] || ours[2] != ref[2] || ours[3] != ref[3]) {
    if (n_bad < 16)
      fprintf(stderr,
              "  MISMATCH philox ctr=(%08x %08x %08x %08x) key=(%08x %08x): fb (%08x %08x %08x %08x),"
              " Random123 (%08x %08x %08x %08x)\n",
              ctr[0], ctr[1], ctr[2], ctr[3], key[0], key[1], ours[0], ours[1], ours[2], ours[3],
              ref[0], ref[1], ref[2], ref[3]);
    ++n_bad;
  }
}

static void begin(void) { n_compared = n_bad = 0; }
static void end(const char *what) {
  printf("  %-34s %9llu compared, %llu mismatches\n", what, n_compared, n_bad);
  if (n_bad) fail_msg("%s: %llu of %llu differ\n", what, n_bad, n_compared);
}

/* ---- Philox4x32-10 itself --------------------------------------------------------------------- */
static void test_kat(void **state) {
  (void)state;
  /* Random123 kat_vectors, philox4x32 10 rounds. */
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
       0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
       0x94fdcceb, 0x5001e420, 0x24126ea1},
  };
  for (int t = 0; t < 3; ++t) {
    uint32_t ref[4];
    fb_u32 c[4] = {kat[t][0], kat[t][1], kat[t][2], kat[t][3]}, k[2] = {kat[t][4], kat[t][5]}, o[4];
    r123(kat[t], kat[t] + 4, ref);
    fb_philox4x32_10(c, k, o);
    for (int w = 0; w < 4; ++w) {
      if (ref[w] != kat[t][6 + w]) fail_msg("Random123 KAT %d word %d: %08x != %08x\n", t, w, ref[w], kat[t][6 + w]);
      if (o[w] != kat[t][6 + w]) fail_msg("fb_philox4x32_10 KAT %d word %d: %08x != %08x\n", t, w, o[w], kat[t][6 + w]);
    }
  }
  printf("  %-34s %9d compared, 0 mismatches\n", "known-answer vectors", 3);
}

static void test_random_pairs(void **state) {
  (void)state;
  sm_state = 0x5EED0001ull;
  begin();
  for (int n = 0; n < 1000000; ++n) {
    uint32_t ctr[4] = {rnd32(), rnd32(), rnd32(), rnd32()}, key[2] = {rnd32(), rnd32()};
    cmp_block(ctr, key);
  }
  end("random (counter, key)");
}

static void test_edge_pairs(void **state) {
  (void)state;
  sm_state = 0x5EED0002ull;
  begin();
  /* word values at the edges: 0, 1, 2^31 +- 1, 2^32 - 1 - k */
  static const uint32_t ev[] = {0u, 1u, 2u, 0x7FFFFFFFu, 0x80000000u, 0x80000001u,
                                0xFFFFFFFDu, 0xFFFFFFFEu, 0xFFFFFFFFu};
  const int ne = (int)(sizeof ev / sizeof ev[0]);
  /* every combination of edge values in the 4 counter words, with edge keys */
  static const uint32_t ek[][2] = {{0u, 0u}, {0xFFFFFFFFu, 0xFFFFFFFFu}, {0u, 0xFFFFFFFFu},
                                   {0xFFFFFFFFu, 0u}, {1u, 1u},
                                   /* keys whose Weyl increments wrap at once */
                                   {0x100000000ull - 0x9E3779B9ull, 0x100000000ull - 0xBB67AE85ull}};
  for (size_t k = 0; k < sizeof ek / sizeof ek[0]; ++k)
    for (int a = 0; a < ne; ++a)
      for (int b = 0; b < ne; ++b)
        for (int c = 0; c < ne; ++c)
          for (int d = 0; d < ne; ++d) {
            uint32_t ctr[4] = {ev[a], ev[b], ev[c], ev[d]};
            cmp_block(ctr, ek[k]);
          }
  /* every single-bit counter and key, and their complements */
  for (int bit = 0; bit < 192; ++bit) {
    uint32_t ctr[4] = {0, 0, 0, 0}, key[2] = {0, 0};
    if (bit < 128) ctr[bit / 32] = 1u << (bit % 32);
    else key[(bit - 128) / 32] = 1u << (bit % 32);
    cmp_block(ctr, key);
    for (int w = 0; w < 4; ++w) ctr[w] = ~ctr[w];
    key[0] = ~key[0];
    key[1] = ~key[1];
    cmp_block(ctr, key);
  }
  /* consecutive 64-bit block indices c carried across 2^32 and 2^64: counter (step, lo, hi, 0) */
  static const uint64_t c0s[] = {0ull, 0xFFFFF000ull, 0x1FFFFF000ull, 0xFFFFFFFFFFFFF000ull,
                                 0x00000FFFFFFFF000ull};
  for (size_t s = 0; s < sizeof c0s / sizeof c0s[0]; ++s) {
    uint32_t key[2] = {rnd32(), rnd32()}, step = rnd32();
    for (uint64_t c = c0s[s]; c != c0s[s] + 0x2000u; ++c) {
      uint32_t ctr[4] = {step, (uint32_t)c, (uint32_t)(c >> 32), 0u};
      cmp_block(ctr, key);
    }
  }
  /* step near the 2^32 wrap with random keys and blocks */
  for (uint32_t d = 0; d < 4096; ++d) {
    uint32_t key[2] = {rnd32(), rnd32()};
    uint32_t ctr[4] = {0xFFFFFFFFu - (d & 2047u), rnd32(), d < 2048 ? 0u : 0xFFFFFFFFu, 0u};
    cmp_block(ctr, key);
  }
  end("edge (counter, key)");
}

/* ---- the SR bits of docs/numerics.md ----------------------------------------------------------------- */
/* The definition, written out with Random123: r for element i. */
static uint8_t spec_sr_byte(uint32_t seed, uint32_t stream, uint32_t step, uint64_t i) {
  uint64_t c = i / 16;
  uint32_t ctr[4] = {step, (uint32_t)(c % 4294967296ull), (uint32_t)(c / 4294967296ull), 0u};
  uint32_t key[2] = {seed, stream}, out[4];
  r123(ctr, key, out);
  unsigned j = (unsigned)(i % 16);
  /* bytes 0..15 = the four words, each little-endian */
  uint8_t bytes[16];
  for (int w = 0; w < 4; ++w)
    for (int b = 0; b < 4; ++b) bytes[4 * w + b] = (uint8_t)((out[w] >> (8 * b)) & 0xFFu);
  return bytes[j];
}

static unsigned long long sr_compared, sr_bad_lib, sr_bad_hdr;

/* Check the 16 elements of block c (all bytes j) for one (seed, stream, step). */
static void sr_check_block(uint32_t seed, uint32_t stream, uint32_t step, uint64_t c) {
  for (unsigned j = 0; j < 16; ++j) {
    uint64_t i = c * 16 + j;
    uint8_t want = spec_sr_byte(seed, stream, step, i);
    uint8_t lib = fb_sr_bits(seed, stream, step, i);
    uint8_t hdr = fb_philox_sr_byte(seed, stream, step, i);
    ++sr_compared;
    if (lib != want) {
      if (sr_bad_lib < 16)
        fprintf(stderr, "  MISMATCH fb_sr_bits(seed=%08x, stream=%08x, step=%08x, i=%llu (0x%llx)) = 0x%02x,"
                        " docs/numerics.md via Random123 = 0x%02x\n",
                seed, stream, step, (unsigned long long)i, (unsigned long long)i, lib, want);
      ++sr_bad_lib;
    }
    if (hdr != want) {
      if (sr_bad_hdr < 16)
        fprintf(stderr, "  MISMATCH fb_philox_sr_byte(seed=%08x, stream=%08x, step=%08x, i=0x%llx) = 0x%02x,"
                        " docs/numerics.md via Random123 = 0x%02x\n",
                seed, stream, step, (unsigned long long)i, hdr, want);
      ++sr_bad_hdr;
    }
  }
}

static void test_sr_bits(void **state) {
  (void)state;
  sm_state = 0x5EED0003ull;
  sr_compared = sr_bad_lib = sr_bad_hdr = 0;
  /* small i, the start of a tensor: blocks 0..4095 for a few (seed, stream, step) */
  static const uint32_t ssw[][3] = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {0, 0, 1},
                                    {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, {12345u, 7u, 1000u}};
  for (size_t s = 0; s < sizeof ssw / sizeof ssw[0]; ++s)
    for (uint64_t c = 0; c < 4096; ++c) sr_check_block(ssw[s][0], ssw[s][1], ssw[s][2], c);
  /* c across 2^32 (i across 2^36) and up to the top of the 64-bit index */
  static const uint64_t cs[] = {0xFFFFFFFFull - 1024, 0x100000000ull - 1, 0x100000000ull,
                                0x1FFFFFFFFull, 0x200000000ull, 0xFFFFFFFFFFFFFFFull - 1024};
  for (size_t s = 0; s < sizeof cs / sizeof cs[0]; ++s) {
    uint32_t seed = rnd32(), stream = rnd32(), step = rnd32();
    for (uint64_t c = cs[s]; c <= cs[s] + 1024 && c >= cs[s]; ++c) sr_check_block(seed, stream, step, c);
  }
  /* random everything, i over the full 64-bit range and over i >= 2^36 */
  for (int n = 0; n < 40000; ++n) {
    uint64_t i = rnd64();
    if (n & 1) i = (i >> 27) | (1ull << 36); /* 2^36 <= i < 2^37 + ... : c >= 2^32 */
    sr_check_block(rnd32(), rnd32(), rnd32(), i / 16);
  }
  /* single elements at arbitrary i (not block-aligned) */
  for (int n = 0; n < 100000; ++n) {
    uint32_t seed = rnd32(), stream = rnd32() & 0xFFu, step = rnd32() & 0xFFFFu;
    uint64_t i = rnd64() >> (rnd32() % 64);
    uint8_t want = spec_sr_byte(seed, stream, step, i);
    uint8_t lib = fb_sr_bits(seed, stream, step, i), hdr = fb_philox_sr_byte(seed, stream, step, i);
    ++sr_compared;
    if (lib != want) {
      if (sr_bad_lib < 16)
        fprintf(stderr, "  MISMATCH fb_sr_bits(%08x, %08x, %08x, i=0x%llx) = 0x%02x, expected 0x%02x\n",
                seed, stream, step, (unsigned long long)i, lib, want);
      ++sr_bad_lib;
    }
    if (hdr != want) ++sr_bad_hdr;
  }
  printf("  %-34s %9llu compared, %llu mismatches (fb_sr_bits), %llu (fb_philox_sr_byte)\n",
         "SR bytes per docs/numerics.md", sr_compared, sr_bad_lib, sr_bad_hdr);
  if (sr_bad_lib) fail_msg("fb_sr_bits: %llu of %llu differ from docs/numerics.md\n", sr_bad_lib, sr_compared);
  if (sr_bad_hdr) fail_msg("fb_philox_sr_byte: %llu of %llu differ from docs/numerics.md\n", sr_bad_hdr, sr_compared);
}

/* The SR byte stream as a byte array: 16 consecutive elements are the 16 bytes of one block,
 * which on a little-endian host is the block's memory image. */
static void test_sr_byte_order(void **state) {
  (void)state;
  uint32_t ctr[4] = {3u, 0x89ABCDEFu, 0x1u, 0u}, key[2] = {42u, 9u}, out[4];
  r123(ctr, key, out);
  uint64_t c = 0x189ABCDEFull;
  unsigned checked = 0;
  for (unsigned j = 0; j < 16; ++j) {
    uint8_t want = (uint8_t)(out[j / 4] >> (8 * (j % 4)));
    assert_int_equal(fb_sr_bits(42u, 9u, 3u, c * 16 + j), want);
    ++checked;
  }
  const uint16_t probe = 1;
  if (*(const uint8_t *)&probe == 1) { /* little-endian host: the memory image agrees */
    uint8_t img[16];
    memcpy(img, out, sizeof img);
    for (unsigned j = 0; j < 16; ++j) assert_int_equal(fb_sr_bits(42u, 9u, 3u, c * 16 + j), img[j]);
    checked += 16;
  }
  printf("  %-34s %9u compared, 0 mismatches\n", "SR byte order (one block)", checked);
}

/* ---- RHT signs ------------------------------------------------------------------------------------- */
static void test_rht_signs(void **state) {
  (void)state;
  sm_state = 0x5EED0004ull;
  unsigned long long n = 0, bad = 0;
  for (int t = 0; t < 200000; ++t) {
    uint32_t seed, step;
    if (t < 64) { seed = (t & 1) ? 0xFFFFFFFFu : (uint32_t)t; step = (t & 2) ? 0xFFFFFFFFu - (uint32_t)t : (uint32_t)(t / 4); }
    else if (t < 4160) { seed = rnd32(); step = 0; } /* the default "fixed per run" mask */
    else { seed = rnd32(); step = rnd32(); }
    uint32_t ctr[4] = {step, 0u, 0u, 0u}, key[2] = {seed, 1u}, out[4];
    r123(ctr, key, out);
    uint32_t got = fb_rht_signs(seed, step);
    ++n;
    if (got != out[0]) {
      if (bad < 16)
        fprintf(stderr, "  MISMATCH fb_rht_signs(seed=%08x, step=%08x) = %08x, Random123 word 0 = %08x\n",
                seed, step, got, out[0]);
      ++bad;
    }
  }
  printf("  %-34s %9llu compared, %llu mismatches\n", "RHT sign masks", n, bad);
  if (bad) fail_msg("fb_rht_signs: %llu of %llu differ\n", bad, n);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kat),
      cmocka_unit_test(test_random_pairs),
      cmocka_unit_test(test_edge_pairs),
      cmocka_unit_test(test_sr_byte_order),
      cmocka_unit_test(test_sr_bits),
      cmocka_unit_test(test_rht_signs),
  };
  return cmocka_run_group_tests_name("philox", tests, NULL, NULL);
}
