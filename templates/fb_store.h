/* fb_store.h — device-only store helpers shared by templates (kernels only: NVRTC, or the emulator's build). */
#ifndef FB_STORE_H
#define FB_STORE_H

/* a 16-byte store to global memory at generic address a: st.global, as the compiler emits for a pointer it knows is
 * global (the pair's addresses travel through shuffles as integers, after which it would emit a generic ST) */
static __device__ __forceinline__ void fbf_stg16(unsigned long long a, unsigned x, unsigned y, unsigned z, unsigned w) {
#if defined(__CUDA_ARCH__)
  asm volatile("{ .reg .u64 g; cvta.to.global.u64 g, %0; st.global.v4.b32 [g], {%1, %2, %3, %4}; }" ::"l"(a), "r"(x), "r"(y),
               "r"(z), "r"(w)
               : "memory");
#else
  *reinterpret_cast<uint4 *>(a) = make_uint4(x, y, z, w); /* the emulator */
#endif
}
/* The 64-byte BF16 copies of two blocks written by a lane pair (lanes l, l ^ 1; `odd` = l & 1) so that each of the four
 * 16-byte store instructions writes whole 32-byte sectors: the even lane's block A (its bytes at a) and the odd lane's B
 * (at b) go out as A[0, 32), A[32, 64), B[0, 32), B[32, 64), each sector's halves from the two lanes (the lanes trade
 * half their chunks first). A lane storing its own 64 bytes alone writes half sectors, which the L2 merges at twice the
 * requests (ncu on the H100: bcopy and the requantizers' copies L2-bound at 90% / 73% with DRAM at 46% / 26%). Every lane
 * of the warp calls it (the shuffles); in: whether this lane's block is stored. */
static __device__ __forceinline__ void fbf_store64_pair(unsigned long long mine, const unsigned o[16], bool in, bool odd) {
  const unsigned long long other = __shfl_xor_sync(0xFFFFFFFFu, mine, 1);
  const bool oin = __shfl_xor_sync(0xFFFFFFFFu, in ? 1 : 0, 1) != 0;
  unsigned x[8]; /* even: B's chunks 0 and 2; odd: A's chunks 1 and 3 */
#pragma unroll
  for (int j = 0; j < 4; ++j) x[j] = __shfl_xor_sync(0xFFFFFFFFu, odd ? o[j] : o[4 + j], 1);
#pragma unroll
  for (int j = 0; j < 4; ++j) x[4 + j] = __shfl_xor_sync(0xFFFFFFFFu, odd ? o[8 + j] : o[12 + j], 1);
  const unsigned long long a = (odd ? other : mine) + (odd ? 16u : 0u), b = (odd ? mine : other) + (odd ? 16u : 0u);
  const bool ain = odd ? oin : in, bin = odd ? in : oin;
  /* the values by selects, not branches: a pair's two lanes must issue each store together (one instruction, whole sectors) */
  unsigned v[16];
#pragma unroll
  for (int j = 0; j < 4; ++j)
    v[j] = odd ? x[j] : o[j], v[4 + j] = odd ? x[4 + j] : o[8 + j], v[8 + j] = odd ? o[4 + j] : x[j], v[12 + j] = odd ? o[12 + j] : x[4 + j];
  if (ain) fbf_stg16(a, v[0], v[1], v[2], v[3]), fbf_stg16(a + 32u, v[4], v[5], v[6], v[7]);
  if (bin) fbf_stg16(b, v[8], v[9], v[10], v[11]), fbf_stg16(b + 32u, v[12], v[13], v[14], v[15]);
}

#endif
