/* test_sha256.c — base/sha256.c (fb_sha256, fb_sha256_hex), which cache keys, plan hashes and checkpoints rest on,
 * against published known answers.
 *
 *   nist       the FIPS 180-2 / NIST example vectors: "abc", the empty string, the 448-bit
 *              "abcdbcdecdefdefg...nopq" (two blocks: its padding does not fit the first), the 896-bit
 *              "abcdefghbcdefghi...nopqrstu", and one million 'a' (15625 blocks).
 *   lengths    every length 0..199 of a fixed message, so every case of the padding (the length field in this
 *              block or the next: 55, 56, 63, 64, 119, 120 bytes) is hashed: a few against digests computed with
 *              Python's hashlib, all 200 together as the sha256 of their concatenated digests (hashlib again).
 *              fb_sha256 is one-shot (there is no init/update/final API), so "every split of a message" is
 *              every length that ends at another offset within a block.
 *   hex        fb_sha256_hex is the lower-case hex of fb_sha256, NUL-terminated.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fourbit.h"

static void hex_of(const uint8_t d[32], char out[65]) {
  for (int i = 0; i < 32; ++i) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void check(const void *msg, size_t len, const char *want) {
  uint8_t d[32];
  char got[65];
  fb_sha256(msg, len, d);
  hex_of(d, got);
  if (strcmp(got, want)) printf("    sha256 of %zu bytes: %s, expected %s\n", len, got, want);
  assert_string_equal(got, want);
}

static void test_nist(void **state) {
  (void)state;
  check("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  check("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  assert_int_equal(strlen(m448), 56);
  check(m448, 56, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                     "mnopqrstnopqrstu";
  assert_int_equal(strlen(m896), 112);
  check(m896, 112, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  char *mil = malloc(1000000);
  assert_non_null(mil);
  memset(mil, 'a', 1000000);
  check(mil, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  free(mil);
}

static void test_lengths(void **state) {
  (void)state;
  uint8_t msg[200], all[200 * 32];
  for (int i = 0; i < 200; ++i) msg[i] = (uint8_t)(i * 7 + 3);
  static const struct { size_t n; const char *hex; } at[] = {
      {55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b"},
      {56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27"},
      {63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055"},
      {64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241"},
      {119, "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e"},
      {120, "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5"}};
  for (size_t i = 0; i < sizeof at / sizeof at[0]; ++i) check(msg, at[i].n, at[i].hex);
  /* each length at an odd address too (no alignment assumed) */
  for (size_t n = 0; n < 200; ++n) {
    uint8_t copy[201];
    memcpy(copy + 1, msg, n);
    fb_sha256(msg, n, all + 32 * n);
    uint8_t d[32];
    fb_sha256(copy + 1, n, d);
    assert_memory_equal(d, all + 32 * n, 32);
  }
  /* python3: m = bytes((i*7+3) & 255 for i in range(200));
     sha256(b''.join(sha256(m[:n]).digest() for n in range(200))).hexdigest() */
  check(all, sizeof all, "615d67a99b8c846e1f0582dfe127019e93c33a66e89ced6a4f81f932c82ece87");
}

static void test_hex(void **state) {
  (void)state;
  char h[66];
  memset(h, 'x', sizeof h);
  fb_sha256_hex("abc", 3, h);
  assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  assert_int_equal(h[64], 0);
  assert_int_equal(h[65], 'x');
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nist),
      cmocka_unit_test(test_lengths),
      cmocka_unit_test(test_hex),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
