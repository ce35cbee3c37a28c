/* Shared by the cmocka unit tests that compare many values (tests/test_numerics.c, tests/test_ops.c): mismatch
 * bookkeeping that prints the first few and fails the test at END(), float bit helpers, allocation that fails the test
 * when it fails, and a seeded splitmix64 generator. Include after <cmocka.h>, <math.h>, <stdint.h>, <stdio.h>,
 * <stdlib.h> and <string.h>. */
#ifndef FB_TEST_UTIL_H
#define FB_TEST_UTIL_H

static long g_fail;
#define EXPECT(cond, ...)                                                                      \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      if (g_fail < 12) {                                                                       \
        printf("    MISMATCH line %d: ", __LINE__);                                            \
        printf(__VA_ARGS__);                                                                   \
        printf("\n");                                                                          \
      }                                                                                        \
      ++g_fail;                                                                                \
    }                                                                                          \
  } while (0)
#define BEGIN() (g_fail = 0)
#define END()                                                                                  \
  do {                                                                                         \
    if (g_fail) printf("    %ld mismatches\n", g_fail);                                        \
    assert_int_equal(g_fail, 0);                                                               \
  } while (0)

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
/* Bitwise float equality (NaN == NaN of any payload, -0 != +0). */
static inline int same_f(float a, float b) { return (isnan(a) && isnan(b)) || f2u(a) == f2u(b); }
static inline void *xmalloc(size_t n) { void *p = malloc(n ? n : 1); assert_non_null(p); return p; }
static inline void *xcalloc(size_t n) { void *p = calloc(n ? n : 1, 1); assert_non_null(p); return p; }

/* seeded generator (splitmix64) */
typedef struct { uint64_t s; } rng_t;
static inline uint64_t rng_next(rng_t *g) {
  uint64_t z = (g->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static inline double rng_u01(rng_t *g) { return ((double)(rng_next(g) >> 11) + 0.5) * 0x1p-53; } /* (0,1) */
static inline int rng_int(rng_t *g, int lo, int hi) { return lo + (int)(rng_next(g) % (uint64_t)(hi - lo + 1)); }

#endif
