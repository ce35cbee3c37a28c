/* fb_philox.h — Philox4x32-10 (Salmon et al., SC'11), shared verbatim by host C and NVRTC device
 * code: no includes, no library calls, 32-bit unsigned arithmetic only.
 * Entry points: fb_philox4x32_10(ctr, key, out); fb_philox_sr_byte(seed, stream, step, i).
 * Key and counter conventions for stochastic rounding are those of docs/numerics.md: key = (seed,
 * stream), counter = (step, c mod 2^32, c div 2^32, 0) with c = i / 16; byte j of the 128-bit output
 * (words little-endian) is r for element 16c + j. Checked against Random123 in tests/test_philox.c. */
#ifndef FB_PHILOX_H
#define FB_PHILOX_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FB_PHILOX_FN __host__ __device__ static __forceinline__
#else
#define FB_PHILOX_FN static inline
#endif

typedef unsigned int fb_u32;
typedef unsigned long long fb_u64;

#define FB_PHILOX_M0 0xD2511F53u
#define FB_PHILOX_M1 0xCD9E8D57u
#define FB_PHILOX_W0 0x9E3779B9u
#define FB_PHILOX_W1 0xBB67AE85u

FB_PHILOX_FN void fb_philox4x32_10(const fb_u32 ctr_in[4], const fb_u32 key_in[2], fb_u32 out[4]) {
  fb_u32 c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
  fb_u32 k0 = key_in[0], k1 = key_in[1];
  for (int round = 0; round < 10; ++round) {
    fb_u64 p0 = (fb_u64)FB_PHILOX_M0 * c0;
    fb_u64 p1 = (fb_u64)FB_PHILOX_M1 * c2;
    fb_u32 hi0 = (fb_u32)(p0 >> 32), lo0 = (fb_u32)p0;
    fb_u32 hi1 = (fb_u32)(p1 >> 32), lo1 = (fb_u32)p1;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += FB_PHILOX_W0;
    k1 += FB_PHILOX_W1;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/* The 8 SR bits of output element i. */
FB_PHILOX_FN unsigned char fb_philox_sr_byte(fb_u32 seed, fb_u32 stream, fb_u32 step, fb_u64 i) {
  fb_u64 c = i >> 4;
  fb_u32 ctr[4] = {step, (fb_u32)c, (fb_u32)(c >> 32), 0u};
  fb_u32 key[2] = {seed, stream};
  fb_u32 out[4];
  fb_philox4x32_10(ctr, key, out);
  unsigned j = (unsigned)(i & 15u);
  return (unsigned char)(out[j >> 2] >> (8u * (j & 3u)));
}

#endif
