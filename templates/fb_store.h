/* fb_store.h — device-only store helpers shared by templates (kernels only: NVRTC, or the emulator's build). */
#ifndef FB_STORE_H
#define FB_STORE_H

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
  if (ain) {
    reinterpret_cast<uint4 *>(a)[0] = odd ? make_uint4(x[0], x[1], x[2], x[3]) : make_uint4(o[0], o[1], o[2], o[3]);
    reinterpret_cast<uint4 *>(a + 32u)[0] = odd ? make_uint4(x[4], x[5], x[6], x[7]) : make_uint4(o[8], o[9], o[10], o[11]);
  }
  if (bin) {
    reinterpret_cast<uint4 *>(b)[0] = odd ? make_uint4(o[4], o[5], o[6], o[7]) : make_uint4(x[0], x[1], x[2], x[3]);
    reinterpret_cast<uint4 *>(b + 32u)[0] = odd ? make_uint4(o[12], o[13], o[14], o[15]) : make_uint4(x[4], x[5], x[6], x[7]);
  }
}

#endif
