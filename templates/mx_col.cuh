/* mx_col.cuh — MXFP8 with blocks down the columns, stored transposed (cols x rows, E8M0 per 32 along the
 * output rows), from three sources: FB_SRC 0 = a BF16/FP32 matrix (quant _col, exactly as
 * fb_mxfp8_quantize(FB_MX_COLWISE)); 1 = an NVFP4 matrix, dequantized in FP32 first (requantize-
 * transpose, as fb_requant_nvfp4_to_mxfp8t); 2 = an MXFP8 row-wise matrix (fb_requant_mxfp8_to_mxfp8t).
 * Parameters: FB_KERNEL, FB_THREADS, FB_RB (32-row blocks per tile), FB_COLS (tile columns), FB_SR,
 * FB_IN_F32, FB_SRC_OUTER (NVFP4 source: 0 tensor, 1 token, 2 group),
 * FB_SLOTS (NVFP4 sources: the raw ring's depth; 0 the register path), FB_HALF (NVFP4 sources: 1 the f16 tile),
 * FB_KBF16 (requantizers of NVFP4 / MXFP8 sources: 1 writes the requantized values' exact BF16 copy instead, below),
 * FB_BOTH (quantizers of BF16 matrices: 1 also quantizes each tile along its rows into p.out2 / p.scales2, exactly as
 * quant_mxfp8.cuh with SR stream p.stream2 and map sr2_*; cols % 32 == 0).
 * Reads p.in (source codes or values, rows x cols as stored), p.src_scales, p.src_s_dec, p.group_offsets;
 * writes p.out (cols x rows E4M3), p.scales (cols x rows/32 E8M0). rows % 32 == 0, cols % 16 == 0.
 * FB_KBF16 1: the same codes and scales are made (the same SR draws: by their element of the cols x rows layout), and
 * then each block is written as the Hopper GEMMs' BF16 copy of B (gemm_bcopy.cuh's, fbf_mx_block_kbf16: K permuted in
 * each 16), 2 bytes an element, no scales; p.out_group G (0: none) regroups the output as the GEMMs read transposed
 * weights: source rows [g G, (g + 1) G) of column c go to output row g cols + c (rows of G values), which the layer's
 * separate gather pass and BF16 copy made before. G % 32 == 0.
 * A CTA dequantizes a (32*FB_RB) x FB_COLS tile into shared memory, then a thread per (column, 32-row block)
 * quantizes down the column and writes its 32 contiguous output bytes. The tiles of a band are software-pipelined: the
 * next tile's raw source chunks are loaded into registers before this tile's column phase and dequantized into the
 * tile after it (two barriers a tile), so that the loads' latency overlaps the column work.
 * Load phase: a warp takes 8 (or 16) rows x 4 (2) chunks of 16 elements of a row (32 source bytes of BF16, 16 of
 * E4M3, 8 of NVFP4 codes), so that each row's bytes of a load are whole 32-byte sectors, and writes each chunk to the tile as
 * 16-byte stores that the row pitch (FB_COLS + 4 floats) spreads over all banks. NVFP4 is dequantized through f16
 * pairs (fb_formats.h fbf_nvfp4_deq8), E4M3 through the f16 unpack. Column phase: a thread's 32 values come as 32
 * 4-byte loads (a warp reads 32 consecutive floats of a row at a time: no bank conflicts; one column a thread keeps
 * the registers, and so the occupancy, of the pipeline affordable), and the SR path is fb_formats.h's branch-free one
 * (fbf_e4m3x4_srz) for every block with a finite amax below 448 * 2^29. BF16 sources take the ring path instead (see
 * FB_RING below): raw tiles copied to shared memory by cp.async several tiles ahead, no registers held for them. */
#include "fb_formats.h"
#include "fb_kparams.h"
#include "fb_philox.h"

#define TR (32 * FB_RB)
#define PITCH (FB_COLS + 4)
/* the raw ring of NVFP4 sources (FB_SLOTS slots; see below); 0, the default: the register path */
#ifndef FB_SLOTS
#define FB_SLOTS 0
#endif
#if FB_SLOTS && FB_SRC != 1
#error "mx_col FB_SLOTS: NVFP4 sources only"
#endif
/* the f16 tile of NVFP4 sources (see FB_HALF below); 0, the default: the FP32 tile */
#ifndef FB_HALF
#define FB_HALF 0
#endif
#ifndef FB_KBF16
#define FB_KBF16 0
#endif
/* FB_BOTH (quantizers of BF16 matrices: the ring path below): also along the rows, from the same tile (see there) */
#ifndef FB_BOTH
#define FB_BOTH 0
#endif
#if FB_BOTH && (FB_SRC != 0 || FB_IN_F32)
#error "mx_col FB_BOTH: quantizers of BF16 matrices only"
#endif
#if FB_KBF16 && FB_SRC == 0
#error "mx_col FB_KBF16: requantizers of NVFP4 / MXFP8 sources only"
#endif
#ifndef FB_PAIR
#define FB_PAIR 0
#endif
#if FB_PAIR && !FB_KBF16
#error "mx_col FB_PAIR: the BF16 copy's stores (FB_KBF16) only"
#endif
#if FB_KBF16
#include "fb_store.h"
/* FB_KBF16's store of one block: column col (the output row before regrouping), source rows row .. row + 31 (codes w,
 * scale e), as 64 contiguous bytes; FB_PAIR 1 (tune value pair): written with the partner lane (lane ^ 1, whose column is
 * the neighbouring item's) as whole sectors (fb_store.h fbf_store64_pair), 0: by this lane alone (half sectors a store
 * instruction). Every lane of the warp calls it (the shuffles); in: whether this lane's block is stored */
static __device__ __forceinline__ void kbf16_store(const fb_kp_mem &p, long long col, long long row, const unsigned w[8], unsigned e,
                                                   bool in, bool odd) {
  unsigned o[16];
  fbf_mx_block_kbf16(w, e, o);
  long long ob = col * p.rows + row;
  if (p.out_group) {
    const long long G = p.out_group, g = row / G;
    ob = (g * p.cols + col) * G + (row - g * G);
  }
#if FB_PAIR
  fbf_store64_pair((unsigned long long)p.out + (unsigned long long)ob * 2u, o, in, odd);
#else
  (void)odd;
  if (in) {
    uint4 *d = reinterpret_cast<uint4 *>(p.out) + (ob >> 3);
#pragma unroll
    for (int k = 0; k < 4; ++k) d[k] = make_uint4(o[4 * k], o[4 * k + 1], o[4 * k + 2], o[4 * k + 3]);
  }
#endif
}
#endif

/* The SR index of output element o (output row i: the source's column) under p's map (fb_kparams.h sr_*); the
 * identity without one. Kept a multiple of 32 for a block's first element (the host checks sr_ld and sr_col0). */
static __device__ __forceinline__ unsigned long long sr_at(const fb_kp_mem &p, unsigned long long o, long long i) {
  if (!p.sr_ld) return o;
  return o + (unsigned long long)(i * (p.sr_ld - p.rows) + p.sr_row0 * p.sr_ld + p.sr_col0);
}

/* S_dec of source row `row` (NVFP4 sources), found once per tile row */
static __device__ __forceinline__ float row_sdec(const fb_kp_mem &p, long long row) {
#if FB_SRC == 1
  long long g = 0;
#if FB_SRC_OUTER == 1
  g = row;
#elif FB_SRC_OUTER == 2
  const long long *off = reinterpret_cast<const long long *>(p.group_offsets);
  long long lo = 0, hi = (long long)p.ngroups - 1;
  while (lo < hi) {
    long long mid = (lo + hi + 1) >> 1;
    if (off[mid] <= row) lo = mid;
    else hi = mid - 1;
  }
  g = lo;
#endif
  return reinterpret_cast<const float *>(p.src_s_dec)[g];
#else
  (void)p, (void)row;
  return 1.0f;
#endif
}

/* One chunk of 16 elements of the source: loaded raw (the next tile's loads are in flight during this tile's column
 * phase, in registers: 8 words of BF16, 3 of NVFP4, 5 of MXFP8), then dequantized to floats when stored to the tile.
 * Element tb + off: tb the tile's first element (a multiple of 32), off the item's offset in it (a multiple of 16), so
 * that each pointer is the tile's base plus a 32-bit offset computed once per thread. */
#define CHUNK 16
struct raw_chunk {
#if FB_SRC == 0 && FB_IN_F32
  float4 q[4];
#elif FB_SRC == 0
  uint4 q[2];
#elif FB_SRC == 1
  uint2 c;
  unsigned s;
#else
  uint4 c;
  unsigned s;
#endif
};
static __device__ __forceinline__ void load_raw(const fb_kp_mem &p, long long tb, unsigned off, raw_chunk &r) {
#if FB_SRC == 0 && FB_IN_F32
  const float4 *s = reinterpret_cast<const float4 *>(reinterpret_cast<const float *>(p.in) + tb) + (off >> 2);
#pragma unroll
  for (int k = 0; k < 4; ++k) r.q[k] = s[k];
#elif FB_SRC == 0
  const uint4 *s = reinterpret_cast<const uint4 *>(reinterpret_cast<const unsigned short *>(p.in) + tb) + (off >> 3);
  r.q[0] = s[0], r.q[1] = s[1];
#elif FB_SRC == 1
  r.c = (reinterpret_cast<const uint2 *>(p.in) + (tb >> 4))[off >> 4];
  r.s = (reinterpret_cast<const unsigned char *>(p.src_scales) + (tb >> 4))[off >> 4];
#else
  r.c = (reinterpret_cast<const uint4 *>(p.in) + (tb >> 4))[off >> 4];
  r.s = (reinterpret_cast<const unsigned char *>(p.src_scales) + (tb >> 5))[off >> 5];
#endif
}
/* the chunk's values, its row's S_dec sd (NVFP4 sources) */
static __device__ __forceinline__ void deq_raw(const raw_chunk &r, float sd, float t[CHUNK]) {
#if FB_SRC == 0 && FB_IN_F32
#pragma unroll
  for (int k = 0; k < 4; ++k) t[4 * k] = r.q[k].x, t[4 * k + 1] = r.q[k].y, t[4 * k + 2] = r.q[k].z, t[4 * k + 3] = r.q[k].w;
  (void)sd;
#elif FB_SRC == 0
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    unsigned w[4] = {r.q[k].x, r.q[k].y, r.q[k].z, r.q[k].w};
#pragma unroll
    for (int j = 0; j < 4; ++j) t[8 * k + 2 * j] = __uint_as_float(w[j] << 16), t[8 * k + 2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
  }
  (void)sd;
#elif FB_SRC == 1
  const unsigned sfh2 = fbf_nvfp4_sfh2(r.s);
  fbf_nvfp4_deq8(r.c.x, sfh2, sd, t);
  fbf_nvfp4_deq8(r.c.y, sfh2, sd, t + 8);
#else
  /* e4m3 * 2^(e-127) (or the E8M0 rule's 2^-127 / NaN): the f16 values of the codes, to fp32, times the scale */
  const float sc = fbf_e8m0_dec(r.s);
  unsigned w[4] = {r.c.x, r.c.y, r.c.z, r.c.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    unsigned lo = fbf_e4m3x2_to_h2(w[j]), hi = fbf_e4m3x2_to_h2(w[j] >> 16);
    t[4 * j] = fbf_h2_lo(lo) * sc, t[4 * j + 1] = fbf_h2_hi(lo) * sc, t[4 * j + 2] = fbf_h2_lo(hi) * sc, t[4 * j + 3] = fbf_h2_hi(hi) * sc;
  }
  (void)sd;
#endif
}

/* the 32 codes of one column block (v: 32 values down the column, o: its first output element; SR stream `stream`) as
 * 8 words; FB_BOTH's row blocks take it too (32 values along a row, their stream p.stream2) */
static __device__ __forceinline__ unsigned col_block(const fb_kp_mem &p, unsigned stream, const float v[32], long long o, unsigned w[8]) {
#if FB_SR
  unsigned r[8]; /* independent of the values: first, so that its chains can overlap the amax */
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    unsigned long long c = ((unsigned long long)o >> 4) + h;
    fb_u32 ctr[4] = {p.step, (fb_u32)c, (fb_u32)(c >> 32), 0u}, key[2] = {p.seed, stream};
    fb_philox4x32_10(ctr, key, r + 4 * h);
  }
#endif
  /* amax as a tree of depth 5 (was a chain of 32): max is exact, so any order gives the same value; NaN propagates
   * (the scale becomes 0xFF) */
  float m[16];
#pragma unroll
  for (int j = 0; j < 16; ++j) m[j] = fbf_absmax_nan(fabsf(v[j]), v[j + 16]);
#pragma unroll
  for (int j = 0; j < 8; ++j) m[j] = fbf_absmax_nan(m[j], m[j + 8]);
#pragma unroll
  for (int j = 0; j < 4; ++j) m[j] = fbf_absmax_nan(m[j], m[j + 4]);
  m[0] = fbf_absmax_nan(m[0], m[2]), m[1] = fbf_absmax_nan(m[1], m[3]);
  m[0] = fbf_absmax_nan(m[0], m[1]);
  const unsigned e = fbf_e8m0_up(m[0] * (1.0f / 448.0f));
#if FB_SR
  if (e <= FBF_SRZ_EMAX) {
    const float s = fbf_srz_scale(e);
#pragma unroll
    for (int q = 0; q < 8; ++q) w[q] = fbf_e4m3x4_srz(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3], s, r[q]);
  } else { /* NaN, Inf or huge amax */
    const float inv = fbf_pow2(127 - (int)e);
#pragma unroll
    for (int q = 0; q < 8; ++q)
      w[q] = fbf_e4m3x2_sr(v[4 * q] * inv, v[4 * q + 1] * inv, r[q] & 255u, (r[q] >> 8) & 255u) |
             fbf_e4m3x2_sr(v[4 * q + 2] * inv, v[4 * q + 3] * inv, (r[q] >> 16) & 255u, r[q] >> 24) << 16;
  }
#else
  (void)p, (void)o, (void)stream;
  const float inv = fbf_pow2(127 - (int)e);
#pragma unroll
  for (int q = 0; q < 8; ++q)
    w[q] = fbf_e4m3x2_rn(v[4 * q] * inv, v[4 * q + 1] * inv) | fbf_e4m3x2_rn(v[4 * q + 2] * inv, v[4 * q + 3] * inv) << 16;
#endif
  return e;
}

/* sm_100a/sm_103a: ptxas spilled to local memory under the one-argument bound (seen in make inspect); sm_90a
 * keeps the code that was measured on the H200. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
#define FB_LAUNCH_BOUNDS __launch_bounds__(FB_THREADS, 1)
#else
/* 24 warps an SM, the occupancy of the measured path: with the one-argument bound ptxas kept 80 registers and spilled
 * 16 bytes in the out-of-line SR pair of r64_c64_t128 (tok) */
#define FB_LAUNCH_BOUNDS __launch_bounds__(FB_THREADS, 640 / FB_THREADS)
#endif

/* load phase geometry: a warp covers LR rows x LC chunks */
#define LC ((FB_COLS / CHUNK) < 4 ? (FB_COLS / CHUNK) : 4)
#define LR (32 / LC)
#define NWARPS (FB_THREADS / 32)
#define NITEMS ((TR / LR) * (FB_COLS / CHUNK / LC))

/* BF16 source: the ring path. Raw BF16 tiles go straight to a ring of NST shared-memory slots by cp.async (16 bytes
 * a thread, L2 only), NST - 1 tiles ahead of the tile being quantized, so that a CTA keeps (NST - 1) * TR * FB_COLS * 2
 * bytes of loads in flight without holding them in registers, and one barrier a tile suffices. The column phase reads
 * the BF16 values from the slot (a warp reads 64 contiguous bytes of a row: no bank conflicts) and widens them with a
 * shift. NST fills 44 KiB with the scale bytes, at most 5: r32_c128 holds 5 slots of 8 KiB (4 tiles, 32 KiB in
 * flight), so that 5 CTAs of 45 KiB fit an SM, about 3.9 waves of 1024-row bands at S1. Lanes pair up for the
 * stores: each 16-byte store instruction writes whole 32-byte sectors (a lane and its neighbour the two halves of one
 * column's 32 bytes), so the L2 receives 16 full sectors per instruction rather than 32 half sectors. */
#if FB_SRC == 0 && !FB_IN_F32
#define FB_RING 1
#else
#define FB_RING 0
#endif

#if FB_RING
#define SLOT (TR * FB_COLS)                         /* BF16 elements of a slot */
#define NST_FIT ((44 * 1024 - FB_COLS * 32) / (SLOT * 2))
#define NST (NST_FIT > 5 ? 5 : NST_FIT)
#define NCH (SLOT / 8)                               /* 16-byte chunks of a tile */
#define CPT ((NCH + FB_THREADS - 1) / FB_THREADS)     /* chunks a thread */
#define NIC ((FB_RB * FB_COLS + FB_THREADS - 1) / FB_THREADS) /* column items a thread */
#if FB_BOTH
#define NIR (TR * (FB_COLS / 32) / FB_THREADS) /* FB_BOTH: row items a thread */
#if NIR * FB_THREADS != TR * (FB_COLS / 32) || NIR < 1
#error "mx_col FB_BOTH: FB_THREADS must divide the tile's row blocks"
#endif
#endif
#if NST < 2
#error "mx_col ring: fewer than two slots fit"
#endif

static __device__ __forceinline__ void cp16(unsigned short *dst, const unsigned short *src) {
#if defined(__CUDA_ARCH__)
  unsigned d;
  asm volatile("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(d) : "l"(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
#else
  memcpy(dst, src, 16); /* the emulator: the copy lands at once, which the wait below allows */
#endif
}
static __device__ __forceinline__ void cp_commit(void) {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
/* this thread's copies of all but the newest n groups have landed */
template <int n> static __device__ __forceinline__ void cp_wait(void) {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_group %0;" ::"n"(n) : "memory");
#endif
}

/* registers for 20 warps an SM (5 CTAs of 128 threads, which the 45 KiB of shared memory of r32_c128 also allow) */
#define FB_RING_BOUNDS __launch_bounds__(FB_THREADS, (640 / FB_THREADS) > 0 ? (640 / FB_THREADS) : 1)
extern "C" __global__ void FB_RING_BOUNDS FB_KERNEL(const fb_kp_mem p) {
  __shared__ uint4 ring4[NST * SLOT / 8];
  unsigned short *ring = reinterpret_cast<unsigned short *>(ring4);
  __shared__ uint4 sc4[FB_COLS * 2];
  unsigned char(*sc)[32] = reinterpret_cast<unsigned char(*)[32]>(sc4);
  const long long SB = 1024;
  const long long bands_r = (p.rows + SB - 1) / SB, tiles_c = (p.cols + FB_COLS - 1) / FB_COLS;
  const int lane = threadIdx.x & 31;
  /* this thread's chunks: chunk q = threadIdx.x + k * FB_THREADS of a tile is its row q / (FB_COLS / 8), elements
   * 8 * (q % (FB_COLS / 8)) + 0..7 (consecutive threads read consecutive 16 bytes of a row); as FB_THREADS is a multiple
   * of FB_COLS / 8, chunk k is KR * k rows below chunk 0 */
#define KR (FB_THREADS * 8 / FB_COLS)
#if (FB_THREADS * 8) % FB_COLS != 0
#error "mx_col ring: FB_THREADS must be a multiple of FB_COLS / 8"
#endif
  const int ch_rr = (int)threadIdx.x / (FB_COLS / 8), ch_cc = ((int)threadIdx.x % (FB_COLS / 8)) * 8;
  const unsigned ring_sh = (unsigned)(ch_rr * FB_COLS + ch_cc); /* element offset of chunk 0 in a slot */
  const unsigned long long kstride = (unsigned long long)KR * (unsigned long long)p.cols * 2u; /* bytes */
  for (long long t = blockIdx.x; t < bands_r * tiles_c; t += gridDim.x) {
    const long long b0 = (t / tiles_c) * SB, c0 = (t % tiles_c) * FB_COLS, b1 = b0 + SB < p.rows ? b0 + SB : p.rows;
    const int nt = (int)((b1 - b0 + TR - 1) / TR);
    /* the band is whole tiles inside the matrix (every band at S1): no bounds per chunk */
    const bool whole = (b1 - b0) % TR == 0 && c0 + FB_COLS <= p.cols;
    const char *src = reinterpret_cast<const char *>(p.in) + ((b0 + ch_rr) * p.cols + c0 + ch_cc) * 2; /* tile 0, chunk 0 */
    const long long tstride = (long long)TR * p.cols * 2; /* bytes from a tile to the next */
    /* tile i of the band into slot i % NST (the caller keeps i % NST in s); one commit group per tile, empty past the
     * band, so that "all but the newest NST - 2 groups" is always tile i. Values outside the matrix are not loaded:
     * their 32-row blocks and columns are never quantized. */
    auto issue = [&](int i, int s) {
      if (i < nt) {
        const char *g = src + (long long)i * tstride;
        unsigned short *d = ring + s * SLOT + ring_sh;
        if (whole) {
#pragma unroll
          for (int k = 0; k < CPT; ++k)
            if (NCH % FB_THREADS == 0 || (int)threadIdx.x + k * FB_THREADS < NCH)
              cp16(d + k * KR * FB_COLS, reinterpret_cast<const unsigned short *>(g + k * kstride));
        } else {
          const long long r0 = b0 + (long long)i * TR;
#pragma unroll
          for (int k = 0; k < CPT; ++k)
            if ((NCH % FB_THREADS == 0 || (int)threadIdx.x + k * FB_THREADS < NCH) && r0 + ch_rr + k * KR < p.rows &&
                c0 + ch_cc < p.cols)
              cp16(d + k * KR * FB_COLS, reinterpret_cast<const unsigned short *>(g + k * kstride));
        }
      }
      cp_commit();
    };
    __syncthreads(); /* the previous band's column phases have read the ring and its scale stores have read sc */
    /* column phase items: item k = threadIdx.x + n * FB_THREADS of a tile is column cc = k % FB_COLS, 32-row block
     * rb = k / FB_COLS; a thread holds one column's 32 values. Lanes 2i, 2i + 1 hold columns cc, cc + 1 (both inside
     * the matrix or both outside, as cols % 16 == 0) and trade half their codes, so that store A writes column cc's 32
     * bytes and store B column cc + 1's, each as one whole sector from two lanes. FB_COLS % 32 == 0, so a warp's items
     * share rb: lanes of columns outside the matrix (a ragged last tile) compute on stale values and store nothing,
     * so that the whole warp takes the shuffles. Per item, for tile 0 of the band: it_o the output element index of
     * its first code, it_st where its lane's stores A go (B: one output row further) */
    const bool odd = lane & 1;
    int it_cc[NIC], it_rb[NIC];
    unsigned it_sh[NIC];
    bool it_in[NIC];
    long long it_o[NIC];
    unsigned char *it_st[NIC];
#pragma unroll
    for (int n = 0; n < NIC; ++n) {
      const int k = (int)threadIdx.x + n * FB_THREADS;
      it_cc[n] = k % FB_COLS, it_rb[n] = k / FB_COLS;
      it_sh[n] = (unsigned)(32 * it_rb[n] * FB_COLS + it_cc[n]);
      it_in[n] = c0 + it_cc[n] < p.cols;
      it_o[n] = (c0 + it_cc[n]) * p.rows + b0 + 32 * it_rb[n];
      it_st[n] = reinterpret_cast<unsigned char *>(p.out) + it_o[n] + (odd ? 16 - p.rows : 0);
    }
#pragma unroll
    for (int i = 0; i < NST - 1; ++i) issue(i, i);
    for (int i = 0, s = 0; i < nt; ++i, s = s == NST - 1 ? 0 : s + 1) {
      cp_wait<NST - 2>(); /* this thread's copies of tile i have landed */
      __syncthreads();    /* everyone's have; everyone is done with tile i - 1, whose slot the next issue refills */
      issue(i + NST - 1, s == 0 ? NST - 1 : s - 1);
      const long long r0 = b0 + (long long)i * TR;
      const unsigned short *slot = ring + s * SLOT;
      /* column phase: this thread's items (column cc, 32-row block rb of the tile; fixed for the band, set up above) */
#pragma unroll
      for (int n = 0; n < NIC; ++n) {
        if (NIC * FB_THREADS != FB_RB * FB_COLS && (int)threadIdx.x + n * FB_THREADS >= FB_RB * FB_COLS) break;
        if (r0 + 32 * it_rb[n] >= p.rows) continue; /* the whole warp */
        const unsigned short *cp = slot + it_sh[n];
        float v[32];
#pragma unroll
        for (int j = 0; j < 32; ++j) v[j] = __uint_as_float((unsigned)cp[j * FB_COLS] << 16);
        unsigned w[8];
        const long long o = it_o[n] + (long long)i * TR; /* output element index, row-major in the transposed layout */
        const unsigned e = col_block(p, p.stream, v, (long long)sr_at(p, (unsigned long long)o, c0 + it_cc[n]), w);
        unsigned x[4], sa[4], sb[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          x[q] = __shfl_xor_sync(0xFFFFFFFFu, odd ? w[q] : w[4 + q], 1); /* even: the odd column's low half; odd: the even's high */
          sa[q] = odd ? x[q] : w[q], sb[q] = odd ? w[4 + q] : x[q];
        }
        if (it_in[n]) {
          uint4 *a = reinterpret_cast<uint4 *>(it_st[n] + (long long)i * TR);
          a[0] = make_uint4(sa[0], sa[1], sa[2], sa[3]);
          *reinterpret_cast<uint4 *>(reinterpret_cast<unsigned char *>(a) + p.rows) = make_uint4(sb[0], sb[1], sb[2], sb[3]);
          sc[it_cc[n]][i * FB_RB + it_rb[n]] = (unsigned char)e;
        }
      }
#if FB_BOTH
      /* row phase (FB_BOTH): the same tile quantized along its rows, exactly as quant_mxfp8.cuh (row-wise MXFP8 of the
       * whole matrix: p.out2 rows x cols E4M3, p.scales2 rows x cols/32 E8M0, SR stream p.stream2 under the map sr2_*),
       * so that a gradient wanted both ways is read from memory once. Item k = threadIdx.x + n * FB_THREADS of the tile
       * is row k / (FB_COLS / 32), 32-column block k % (FB_COLS / 32): a thread reads its block's 64 bytes from the slot
       * (16-byte loads; a quarter warp's eight lanes meet in two bank groups, a 4-way conflict that costs shared-memory
       * cycles far below the tile's DRAM time) and writes its 32 codes and one scale; a warp writes whole rows' codes. */
#pragma unroll
      for (int n = 0; n < NIR; ++n) {
        const int k = (int)threadIdx.x + n * FB_THREADS, rr = k / (FB_COLS / 32), cb = k % (FB_COLS / 32);
        const long long row = r0 + rr, col = c0 + 32 * cb;
        if (row >= p.rows || col >= p.cols) continue;
        const uint4 *sp = reinterpret_cast<const uint4 *>(slot + rr * FB_COLS + 32 * cb);
        float v[32];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const uint4 x = sp[q];
          const unsigned xw[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
          for (int j = 0; j < 4; ++j) v[8 * q + 2 * j] = __uint_as_float(xw[j] << 16), v[8 * q + 2 * j + 1] = __uint_as_float(xw[j] & 0xFFFF0000u);
        }
        long long o = row * p.cols + col; /* the row-wise output's element, then its SR index under the map */
        if (p.sr2_ld) o = (row + p.sr2_row0) * p.sr2_ld + p.sr2_col0 + col;
        unsigned w[8];
        const unsigned e = col_block(p, p.stream2, v, o, w);
        uint4 *d = reinterpret_cast<uint4 *>(reinterpret_cast<unsigned char *>(p.out2) + row * p.cols + col);
        d[0] = make_uint4(w[0], w[1], w[2], w[3]);
        d[1] = make_uint4(w[4], w[5], w[6], w[7]);
        reinterpret_cast<unsigned char *>(p.scales2)[(row * p.cols + col) >> 5] = (unsigned char)e;
      }
#endif
    }
    __syncthreads();
    /* the band's scales: output row col holds (b1 - b0) / 32 consecutive bytes at (col * rows + b0) / 32, written as
     * one whole sector rather than bytes scattered over sectors that other CTAs fill; sc holds them by column, so that
     * a whole band of a matrix whose rows are a multiple of 512 stores sc4 as is, two aligned 16-byte stores a column */
    const int nsb = (int)((b1 - b0) >> 5);
    if (nsb == 32 && p.rows % 512 == 0) {
      for (int k = threadIdx.x; k < FB_COLS * 2; k += FB_THREADS) {
        const long long col = c0 + (k >> 1);
        if (col < p.cols)
          reinterpret_cast<uint4 *>(reinterpret_cast<unsigned char *>(p.scales) + ((col * p.rows + b0) >> 5))[k & 1] = sc4[k];
      }
    } else {
      for (int k = threadIdx.x; k < FB_COLS * nsb; k += FB_THREADS) {
        int cc = k / nsb, j = k % nsb;
        long long col = c0 + cc;
        if (col < p.cols) reinterpret_cast<unsigned char *>(p.scales)[((col * p.rows + b0) >> 5) + j] = sc[cc][j];
      }
    }
  }
  cp_wait<0>();
}
#else /* FB_RING: the register path (NVFP4, MXFP8 and FP32 sources) */
/* The register path. Its first form (measured on the H200 at dev4a, 9c238b6) is gone; this one gives the same codes
 * and scales bit for bit with fewer instructions an element:
 * - Philox: for counters below 2^32 (the counter's high word zero: outputs below 2^36 elements, every matrix at S1)
 *   the first three rounds partly depend on (step, seed, stream) alone; those parts are computed once a thread
 *   (rq2_pre), and a block's two draws (counters c, c + 1) take 34 instructions each instead of 40 plus the key
 *   schedule. Larger counters take fb_philox4x32_10 itself.
 * - E8M0: the rounded-up exponent of a finite amax as one add and shift (fbf_e8m0_up's rule; the rare huge or
 *   non-finite amax takes fbf_e8m0_up itself).
 * - The column items (column, 32-row block, output offset, store address) are set up once a band, and a band that
 *   is whole tiles inside the matrix loads without per-chunk bounds tests. */
struct rq2_pre {
  unsigned k0_0, k0_3, d1, e0, e2, f2, k0[6], k1[6]; /* k0[i], k1[i]: the keys of round 4 + i */
};
static __device__ __forceinline__ void rq2_mulhilo(unsigned a, unsigned m, unsigned &hi, unsigned &lo) {
  const unsigned long long x = (unsigned long long)a * m;
  hi = (unsigned)(x >> 32), lo = (unsigned)x;
}
static __device__ __forceinline__ rq2_pre rq2_prepare(const fb_kp_mem &p) {
  rq2_pre q;
  const unsigned K0 = p.seed, K1 = p.stream;
  unsigned a2, a3, b0, b1, chi, c3, h, l;
  /* round 0 with counter (step, clo, 0, 0): c2 = hi(M0 step) ^ k1, c3 = lo(M0 step); c0 = clo ^ k0, c1 = 0 */
  rq2_mulhilo(p.step, FB_PHILOX_M0, h, l);
  a2 = h ^ K1, a3 = l;
  /* round 1: the M1 product is of c2 = a2 alone: c0 = hi ^ 0 ^ k0(1), c1 = lo; c2 = hi(M0 c0) ^ a3 ^ k1(1) */
  rq2_mulhilo(a2, FB_PHILOX_M1, h, l);
  b0 = h ^ (K0 + FB_PHILOX_W0), b1 = l;
  q.d1 = a3 ^ (K1 + FB_PHILOX_W1);
  /* round 2: the M0 product is of c0 = b0 alone: c2 = hi(M0 b0) ^ c3 ^ k1(2), c3 = lo(M0 b0); c0 = hi(M1 c2) ^ b1 ^ k0(2) */
  rq2_mulhilo(b0, FB_PHILOX_M0, chi, c3);
  q.e0 = b1 ^ (K0 + 2u * FB_PHILOX_W0);
  q.e2 = chi ^ (K1 + 2u * FB_PHILOX_W1);
  /* round 3: c3 = lo(M0 b0) is known: c2 = hi(M0 c0) ^ c3 ^ k1(3) */
  q.f2 = c3 ^ (K1 + 3u * FB_PHILOX_W1);
  q.k0_0 = K0, q.k0_3 = K0 + 3u * FB_PHILOX_W0;
#pragma unroll
  for (int i = 0; i < 6; ++i) q.k0[i] = K0 + (unsigned)(4 + i) * FB_PHILOX_W0, q.k1[i] = K1 + (unsigned)(4 + i) * FB_PHILOX_W1;
#if defined(__CUDA_ARCH__)
  /* kept in registers across the loops: without this the compiler recomputes them from seed and stream for every
   * block (an add or a multiply each) */
  unsigned *u = reinterpret_cast<unsigned *>(&q);
#pragma unroll
  for (int i = 0; i < (int)(sizeof q / 4); ++i) asm volatile("" : "+r"(u[i]));
#endif
  return q;
}
/* fb_philox4x32_10 of counter (step, clo, 0, 0), key (seed, stream), through the precomputed q */
static __device__ __forceinline__ void rq2_philox(const rq2_pre &q, unsigned clo, unsigned out[4]) {
  unsigned c0, c1, c2, c3, h0, l0, h1, l1;
  /* round 1 (after round 0: c0 = clo ^ k0) */
  rq2_mulhilo(clo ^ q.k0_0, FB_PHILOX_M0, h0, l0);
  c2 = h0 ^ q.d1, c3 = l0; /* c0 = b0, c1 = b1: in q.e0 / q.e2 */
  /* round 2 */
  rq2_mulhilo(c2, FB_PHILOX_M1, h1, l1);
  c0 = h1 ^ q.e0, c1 = l1, c2 = c3 ^ q.e2; /* c3 = lo(M0 b0): in q.f2 */
  /* round 3 */
  rq2_mulhilo(c0, FB_PHILOX_M0, h0, l0);
  rq2_mulhilo(c2, FB_PHILOX_M1, h1, l1);
  c0 = h1 ^ c1 ^ q.k0_3, c1 = l1, c2 = h0 ^ q.f2, c3 = l0;
#pragma unroll
  for (int i = 0; i < 6; ++i) {
    rq2_mulhilo(c0, FB_PHILOX_M0, h0, l0);
    rq2_mulhilo(c2, FB_PHILOX_M1, h1, l1);
    c0 = h1 ^ c1 ^ q.k0[i], c1 = l1, c2 = h0 ^ c3 ^ q.k1[i], c3 = l0;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}
/* E8M0 of amax / 448 (fbf_e8m0_up's rule): for |a| below 2^30 (bits below 0x4E800000) the exponent plus one where
 * the mantissa is not zero is (bits + 0x7FFFFF) >> 23, subnormals up to 0x400000 (and zero) give 0; above, and on
 * sm_100a/sm_103a (one instruction there), the rule itself. The f16-tile kernel's; col_block2 below writes the same rule
 * inline, split around its SR branch (calling this there reordered the SASS of every FP32-tile requantizer) */
static __device__ __forceinline__ unsigned rq2_e8m0(float amax) {
  const float a = amax * (1.0f / 448.0f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
  return fbf_e8m0_up(a);
#else
  const unsigned ab = fbf_f2u(a) & 0x7FFFFFFFu;
  if (ab >= 0x4E800000u) return fbf_e8m0_up(a);
  const unsigned e = (ab + 0x7FFFFFu) >> 23;
  return ab - 1u < 0x400000u ? 0u : e;
#endif
}
/* col_block's codes and scale, with the precomputed Philox rounds and the cheap E8M0 */
static __device__ __forceinline__ unsigned col_block2(const fb_kp_mem &p, const rq2_pre &q, const float v[32],
                                                      unsigned long long o, unsigned w[8]) {
#if FB_SR
  unsigned r[8];
  const unsigned long long c = o >> 4; /* even: o is a multiple of 32 */
  if ((unsigned)(c >> 32) == 0u) {
    rq2_philox(q, (unsigned)c, r);
    rq2_philox(q, (unsigned)c | 1u, r + 4);
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const unsigned long long ch = c + (unsigned)h;
      fb_u32 ctr[4] = {p.step, (fb_u32)ch, (fb_u32)(ch >> 32), 0u}, key[2] = {p.seed, p.stream};
      fb_philox4x32_10(ctr, key, r + 4 * h);
    }
  }
#else
  (void)q, (void)o;
#endif
  float m[16];
#pragma unroll
  for (int j = 0; j < 16; ++j) m[j] = fbf_absmax_nan(fabsf(v[j]), v[j + 16]);
#pragma unroll
  for (int j = 0; j < 8; ++j) m[j] = fbf_absmax_nan(m[j], m[j + 8]);
#pragma unroll
  for (int j = 0; j < 4; ++j) m[j] = fbf_absmax_nan(m[j], m[j + 4]);
  m[0] = fbf_absmax_nan(m[0], m[2]), m[1] = fbf_absmax_nan(m[1], m[3]);
  m[0] = fbf_absmax_nan(m[0], m[1]);
  const float a = m[0] * (1.0f / 448.0f);
  /* fbf_e8m0_up(a) for |a| below 2^30 (bits below 0x4E800000): the exponent plus one where the mantissa is not
   * zero is (bits + 0x7FFFFF) >> 23; subnormals up to 0x400000 (and zero) give 0. Above, the rule itself. */
  const unsigned ab = fbf_f2u(a) & 0x7FFFFFFFu;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
  unsigned e = fbf_e8m0_up(a); /* one instruction there */
#else
  unsigned e = (ab + 0x7FFFFFu) >> 23;
  if (ab - 1u < 0x400000u) e = 0u;
#endif
#if FB_SR
  if (e <= FBF_SRZ_EMAX) {
    const float s = fbf_srz_scale(e);
#pragma unroll
    for (int k = 0; k < 8; ++k) w[k] = fbf_e4m3x4_srz(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3], s, r[k]);
  } else { /* NaN, Inf or huge amax */
    e = fbf_e8m0_up(a);
    const float inv = fbf_pow2(127 - (int)e);
#pragma unroll
    for (int k = 0; k < 8; ++k)
      w[k] = fbf_e4m3x2_sr(v[4 * k] * inv, v[4 * k + 1] * inv, r[k] & 255u, (r[k] >> 8) & 255u) |
             fbf_e4m3x2_sr(v[4 * k + 2] * inv, v[4 * k + 3] * inv, (r[k] >> 16) & 255u, r[k] >> 24) << 16;
  }
#else
  if (ab >= 0x4E800000u) e = fbf_e8m0_up(a);
  const float inv = fbf_pow2(127 - (int)e);
#pragma unroll
  for (int k = 0; k < 8; ++k)
    w[k] = fbf_e4m3x2_rn(v[4 * k] * inv, v[4 * k + 1] * inv) | fbf_e4m3x2_rn(v[4 * k + 2] * inv, v[4 * k + 3] * inv) << 16;
#endif
  return e;
}

/* The band's scales from scj (row j: 32-row block j of the band, by tile column) to their output rows: a whole band
 * of a matrix whose rows are a multiple of 512 as two aligned 16-byte stores a column (its 32 bytes gathered with
 * byte permutes), others byte by byte */
static __device__ __forceinline__ void mx_flush_scales(const fb_kp_mem &p, const unsigned char (*scj)[FB_COLS], long long b0,
                                                       long long b1, long long c0) {
  const int nsb = (int)((b1 - b0) >> 5);
  if (nsb == 32 && p.rows % 512 == 0) {
    for (int k = threadIdx.x; k < FB_COLS * 2; k += FB_THREADS) {
      const int cc = k >> 1, j0 = (k & 1) * 16;
      const long long col = c0 + cc;
      unsigned qv[4];
#pragma unroll
      for (int u = 0; u < 4; ++u)
        qv[u] = fbf_prmt(fbf_prmt(scj[j0 + 4 * u][cc], scj[j0 + 4 * u + 1][cc], 0x0040u),
                         fbf_prmt(scj[j0 + 4 * u + 2][cc], scj[j0 + 4 * u + 3][cc], 0x0040u), 0x5410u);
      if (col < p.cols)
        reinterpret_cast<uint4 *>(reinterpret_cast<unsigned char *>(p.scales) + ((col * p.rows + b0) >> 5))[k & 1] =
            make_uint4(qv[0], qv[1], qv[2], qv[3]);
    }
  } else {
    for (int k = threadIdx.x; k < FB_COLS * nsb; k += FB_THREADS) {
      int cc = k / nsb, j = k % nsb;
      long long col = c0 + cc;
      if (col < p.cols) reinterpret_cast<unsigned char *>(p.scales)[((col * p.rows + b0) >> 5) + j] = scj[j][cc];
    }
  }
}
#define NIT ((NITEMS + NWARPS - 1) / NWARPS)
#define NIC2 (FB_RB * FB_COLS / FB_THREADS) /* column items a thread (variants keep FB_RB * FB_COLS >= FB_THREADS) */
#if NIC2 * FB_THREADS != FB_RB * FB_COLS
#error "mx_col register path: FB_THREADS must divide the tile's column items"
#endif
/* The column phase of tile i (first row r0) of the band, shared by the register path and the raw ring: item n (column
 * ic_cc[n] of the tile, 32-row block ic_rb[n], first value at tile + ic_t[n]; its first code's output element in tile 0
 * ic_o[n], its lane's store address ic_st[n], ic_in[n] whether its column is inside the matrix) from its 32 values down
 * the column to codes and a scale; lane pairs trade half their codes (whole-sector stores); the scales into scj */
static __device__ __forceinline__ void rq2_columns(const fb_kp_mem &p, const rq2_pre &q, const float *tile, const int ic_cc[NIC2],
                                                   const int ic_rb[NIC2], const unsigned ic_t[NIC2],
                                                   const unsigned long long ic_o[NIC2], unsigned char *const ic_st[NIC2],
                                                   const bool ic_in[NIC2], unsigned char (*scj)[FB_COLS], long long r0, int i,
                                                   bool whole, bool odd, long long c0) {
#pragma unroll
  for (int n = 0; n < NIC2; ++n) {
    if (!whole && r0 + 32 * ic_rb[n] >= p.rows) continue; /* the whole warp */
    const float *cp = tile + ic_t[n];
    float v[32];
#pragma unroll
    for (int j = 0; j < 32; ++j) v[j] = cp[j * PITCH];
    unsigned w[8];
    const unsigned long long o = ic_o[n] + (unsigned long long)i * TR;
    const unsigned e = col_block2(p, q, v, sr_at(p, o, c0 + ic_cc[n]), w);
#if FB_KBF16
    (void)ic_st, (void)scj;
    kbf16_store(p, c0 + ic_cc[n], r0 + 32 * ic_rb[n], w, e, whole || ic_in[n], odd);
    continue;
#endif
    unsigned x[4], sa[4], sb[4];
#pragma unroll
    for (int qq = 0; qq < 4; ++qq) {
      x[qq] = __shfl_xor_sync(0xFFFFFFFFu, odd ? w[qq] : w[4 + qq], 1);
      sa[qq] = odd ? x[qq] : w[qq], sb[qq] = odd ? w[4 + qq] : x[qq];
    }
    if (whole || ic_in[n]) {
      uint4 *a = reinterpret_cast<uint4 *>(ic_st[n] + (long long)i * TR);
      a[0] = make_uint4(sa[0], sa[1], sa[2], sa[3]);
      *reinterpret_cast<uint4 *>(reinterpret_cast<unsigned char *>(a) + p.rows) = make_uint4(sb[0], sb[1], sb[2], sb[3]);
      scj[i * FB_RB + ic_rb[n]][ic_cc[n]] = (unsigned char)e;
    }
  }
}
#if FB_HALF
/* FB_HALF (tune value half, NVFP4 sources; 0, the default: the FP32 tile of the paths below): the tile holds the
 * sources' exact f16 products p = e2m1 * sf (the same pairs fbf_nvfp4_deq8 makes), not the FP32 values p * S_dec, and
 * a thread takes two columns of a 32-row block (one 32-bit word a row: half the tile, half the column reads). The
 * load phase then skips the widening and the S_dec product, and the column phase does them where they are needed:
 * - amax: where the block's 32 rows share one S_dec (per-tensor and per-expert sources, and any block whose rows
 *   agree), max |p| over the pairs (max.NaN.xorsign.abs.f16x2, both columns at once) times S_dec gives the
 *   reference's max |p * S_dec| exactly (the FP32 product rounds monotonically); otherwise the FP32 values p * S_dec
 *   row by row, as the reference makes them.
 * - SR: for a column whose every non-zero value x * inv is an E4M3 normal (>= 2^-6; found from the tile's smallest
 *   block scale and the block's smallest S_dec, so no element is tested), the add-and-mask of fbf_srz_one works on
 *   x * inv itself (bits 12..19 are the 8 discarded bits there), so that the 2^-120 and 2^120 rescaling drop out; a
 *   shared S_dec folds into inv (p * (S_dec * inv), one product, equal to (p * S_dec) * inv when both are normal:
 *   checked). Other columns take the exact paths of col_block2 (fbf_e4m3x4_srz, or the general SR).
 * Word layout of a tile row: each 8 columns' 16 products as the four f16 pairs fbf_nvfp4_deq8 makes, columns
 * (0, 2), (4, 6), (1, 3), (5, 7); so a thread's two columns are 2 apart, and the even and odd lanes of a pair hold
 * columns 4 apart, which the lane-pair stores use. */
#if FB_SRC != 1 || FB_SLOTS
#error "mx_col FB_HALF: NVFP4 sources, without the raw ring"
#endif
#if FB_COLS % 64 != 0
#error "mx_col FB_HALF: FB_COLS a multiple of 64 (a warp's 32 column pairs in one tile row)"
#endif
#define HP (FB_COLS / 2 + 4) /* 32-bit words of a tile row (16 bytes of padding: the load phase's stores hit all banks) */
#define NIH (FB_RB * (FB_COLS / 2) / FB_THREADS) /* column-pair items a thread */
#if NIH * FB_THREADS != FB_RB * (FB_COLS / 2)
#error "mx_col FB_HALF: FB_THREADS must divide the tile's column-pair items"
#endif
/* max.NaN.xorsign.abs.f16x2: per half the larger magnitude (NaN if either is NaN); the callers use magnitudes only */
static __device__ __forceinline__ unsigned rh_max2(unsigned a, unsigned b) {
#if defined(__CUDA_ARCH__)
  unsigned r;
  asm("max.NaN.xorsign.abs.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
#else
  unsigned r = 0;
  for (int h = 0; h < 2; ++h) {
    unsigned x = (a >> (16 * h)) & 0xFFFFu, y = (b >> (16 * h)) & 0xFFFFu, mx = x & 0x7FFFu, my = y & 0x7FFFu, m;
    if (mx > 0x7C00u || my > 0x7C00u) m = 0x7FFFu;
    else m = (mx > my ? mx : my) | ((x ^ y) & 0x8000u);
    r |= m << (16 * h);
  }
  return r;
#endif
}
/* the f16 products of one 16-element chunk, as 8 words in the tile's row layout; k: the smallest key of a non-zero
 * block scale seen so far ((code & 0x7F) - 1, unsigned: a zero scale is the largest key) */
static __device__ __forceinline__ void rh_deq(const raw_chunk &r, unsigned h[8], unsigned &k) {
  const unsigned sfh2 = fbf_nvfp4_sfh2(r.s), kk = (r.s & 0x7Fu) - 1u;
  k = kk < k ? kk : k;
#pragma unroll
  for (int g = 0; g < 2; ++g) {
    const unsigned w = g ? r.c.y : r.c.x;
    const unsigned ev = ((w << 2) & 0x1C1C1C1Cu) | ((w << 4) & 0x80808080u); /* nibbles 0 2 4 6 as E4M3 bytes */
    const unsigned od = ((w >> 2) & 0x1C1C1C1Cu) | (w & 0x80808080u);        /* nibbles 1 3 5 7 */
    h[4 * g] = fbf_hmul2(fbf_e4m3x2_to_h2(ev), sfh2), h[4 * g + 1] = fbf_hmul2(fbf_e4m3x2_to_h2(ev >> 16), sfh2);
    h[4 * g + 2] = fbf_hmul2(fbf_e4m3x2_to_h2(od), sfh2), h[4 * g + 3] = fbf_hmul2(fbf_e4m3x2_to_h2(od >> 16), sfh2);
  }
}
template <int C> static __device__ __forceinline__ float rh_f(unsigned h) { return C ? fbf_h2_hi(h) : fbf_h2_lo(h); }
/* Column C (0: the low halves, 1: the high ones) of a thread's 32 pairs h: its 32 codes w (row order) given its
 * scale e, its first output element o, S_dec (sdu: the block's shared S_dec, or 0 when its rows' differ: then sdr,
 * the rows' own), and xmin: a lower bound of every non-zero |p * S_dec| of the block (0: none known) */
template <int C>
static __device__ __forceinline__ void rh_col(const fb_kp_mem &p, const rq2_pre &q, const unsigned h[32], unsigned e,
                                              unsigned long long o, float sdu, const float4 *sdr, float xmin,
                                              unsigned w[8]) {
#if FB_SR
  unsigned r[8];
  const unsigned long long c = o >> 4;
  if ((unsigned)(c >> 32) == 0u) {
    rq2_philox(q, (unsigned)c, r);
    rq2_philox(q, (unsigned)c | 1u, r + 4);
  } else {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const unsigned long long ch = c + (unsigned)hh;
      fb_u32 ctr[4] = {p.step, (fb_u32)ch, (fb_u32)(ch >> 32), 0u}, key[2] = {p.seed, p.stream};
      fb_philox4x32_10(ctr, key, r + 4 * hh);
    }
  }
  const float inv = fbf_pow2(127 - (int)(e > 254u ? 254u : e));
  /* the normal fast path: every non-zero x * inv >= 2^-6 (xmin * inv is exact there, inv a power of two) */
  const bool norm = e <= FBF_SRZ_EMAX && xmin >= 1.17549435e-38f && xmin * inv >= 0.015625f;
  const float si = sdu * inv; /* exact when normal: S_dec scaled by a power of two */
  if (norm && sdu > 0.0f && si >= 1.17549435e-38f && si < 3.0e38f) {
#pragma unroll
    for (int k = 0; k < 8; ++k)
      w[k] = fbf_e4m3x4_sr_norm(rh_f<C>(h[4 * k]) * si, rh_f<C>(h[4 * k + 1]) * si, rh_f<C>(h[4 * k + 2]) * si,
                                rh_f<C>(h[4 * k + 3]) * si, r[k]);
  } else if (norm) {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float4 s4 = sdr[k];
      w[k] = fbf_e4m3x4_sr_norm((rh_f<C>(h[4 * k]) * s4.x) * inv, (rh_f<C>(h[4 * k + 1]) * s4.y) * inv,
                                (rh_f<C>(h[4 * k + 2]) * s4.z) * inv, (rh_f<C>(h[4 * k + 3]) * s4.w) * inv, r[k]);
    }
  } else if (e <= FBF_SRZ_EMAX) { /* col_block2's branch-free SR on the exact values */
    const float sz = fbf_srz_scale(e);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float4 s4 = sdr[k];
      const float s[4] = {s4.x, s4.y, s4.z, s4.w};
      float x[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) x[j] = rh_f<C>(h[4 * k + j]) * (sdu > 0.0f ? sdu : s[j]);
      w[k] = fbf_e4m3x4_srz(x[0], x[1], x[2], x[3], sz, r[k]);
    }
  } else { /* NaN, Inf or huge amax (e is final: rq2_e8m0 took the rule itself there) */
    const float iv = fbf_pow2(127 - (int)e);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float4 s4 = sdr[k];
      const float s[4] = {s4.x, s4.y, s4.z, s4.w};
      float x[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) x[j] = rh_f<C>(h[4 * k + j]) * (sdu > 0.0f ? sdu : s[j]) * iv;
      w[k] = fbf_e4m3x2_sr(x[0], x[1], r[k] & 255u, (r[k] >> 8) & 255u) |
             fbf_e4m3x2_sr(x[2], x[3], (r[k] >> 16) & 255u, r[k] >> 24) << 16;
    }
  }
#else
  (void)p, (void)q, (void)o, (void)xmin;
  const float iv = fbf_pow2(127 - (int)e);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float4 s4 = sdr[k];
    const float s[4] = {s4.x, s4.y, s4.z, s4.w};
    float x[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) x[j] = rh_f<C>(h[4 * k + j]) * (sdu > 0.0f ? sdu : s[j]) * iv;
    w[k] = fbf_e4m3x2_rn(x[0], x[1]) | fbf_e4m3x2_rn(x[2], x[3]) << 16;
  }
#endif
}
/* FB_LAUNCH_BOUNDS (above): 640 / FB_THREADS CTAs on sm_90a, as measured; one on sm_100a/sm_103a, where the 96-register
 * bound spilled 16-88 bytes in the h1 variants (make inspect), and 4 CTAs (128 registers) still spilled at 64 x 128 and 128 x 128 */
extern "C" __global__ void FB_LAUNCH_BOUNDS FB_KERNEL(const fb_kp_mem p) {
  __shared__ uint4 tile4[TR * HP / 4];
  unsigned *tileh = reinterpret_cast<unsigned *>(tile4);
  __shared__ float4 sdec4[2][TR / 4]; /* this tile's rows' S_dec and the next one's */
  __shared__ unsigned sst[2][FB_RB][2]; /* per 32-row block: the smallest and the largest S_dec (bits) */
  __shared__ uint4 shs4[2][TR / 4];     /* per row: H = f16(S_dec * 2^(3 - E)) as a pair, E the block's largest exponent */
  __shared__ unsigned skey[NWARPS];     /* per warp: the smallest block-scale key of the tile */
  __shared__ uint4 sc4[FB_COLS * 2];
  unsigned char(*scj)[FB_COLS] = reinterpret_cast<unsigned char(*)[FB_COLS]>(sc4);
  const long long SB = 1024;
  const long long bands_r = (p.rows + SB - 1) / SB, tiles_c = (p.cols + FB_COLS - 1) / FB_COLS;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const rq2_pre q = rq2_prepare(p);
  int it_rr[NIT], it_cc[NIT];
  unsigned it_off[NIT], it_t[NIT];
#pragma unroll
  for (int it = 0; it < NIT; ++it) {
    const int wi = warp + it * NWARPS;
    it_rr[it] = (wi % (TR / LR)) * LR + lane % LR, it_cc[it] = ((wi / (TR / LR)) * LC + lane / LR) * CHUNK;
    it_off[it] = (unsigned)it_rr[it] * (unsigned)p.cols + (unsigned)it_cc[it];
    it_t[it] = (unsigned)(it_rr[it] * HP + it_cc[it] / 2);
  }
  /* column-pair items: k = threadIdx.x + n * FB_THREADS is word kw = k % (FB_COLS / 2) of the rows of 32-row block
   * rb = k / (FB_COLS / 2); its columns ccA = 8 (kw / 4) + (kw & 2 ? 1 : 0) + (kw & 1 ? 4 : 0) and ccA + 2 */
  int ic_cc[NIH], ic_rb[NIH];
  unsigned ic_t[NIH];
#pragma unroll
  for (int n = 0; n < NIH; ++n) {
    const int k = (int)threadIdx.x + n * FB_THREADS, kw = k % (FB_COLS / 2);
    ic_cc[n] = 8 * (kw >> 2) + ((kw & 2) ? 1 : 0) + ((kw & 1) ? 4 : 0), ic_rb[n] = k / (FB_COLS / 2);
    ic_t[n] = (unsigned)(32 * ic_rb[n] * HP + kw);
#if defined(__CUDA_ARCH__)
    asm volatile("" : "+r"(ic_t[n]));
#endif
  }
  const bool odd = threadIdx.x & 1;
  /* S_dec of the rows of the tile at r0 into sdec4[b], and each 32-row block's smallest and largest (a warp a block) */
#if TR > FB_THREADS
#error "mx_col FB_HALF: TR <= FB_THREADS (fill_sdec: a thread a row, a warp a 32-row block)"
#endif
  auto fill_sdec = [&](long long r0, int b) {
    float *sd = reinterpret_cast<float *>(sdec4[b]);
    const int k = threadIdx.x;
    const float s = k < TR && r0 + k < p.rows ? row_sdec(p, r0 + k) : 0.0f;
    /* the block's smallest and largest S_dec, reduced where every lane of the warp is (warps past TR reduce nothing) */
    const unsigned mn = __reduce_min_sync(0xFFFFFFFFu, fbf_f2u(s)), mx = __reduce_max_sync(0xFFFFFFFFu, fbf_f2u(s));
    if (k < TR) {
      sd[k] = s;
      if ((k & 31) == 0) sst[b][k >> 5][0] = mn, sst[b][k >> 5][1] = mx;
      /* the bound pass's f16 S_dec: the block's largest lands in [8, 16) (products of |p| <= 2688 stay below 65504);
       * 0 where the largest is not a normal float with a scale in range (the block then takes the exact pass) */
      const float sc = mx - 0x01800000u < 0x7E000000u ? fbf_pow2(130 - (int)(mx >> 23)) : 0.0f;
      const unsigned hs = fbf_f2h_rn_sw(s * sc);
      reinterpret_cast<unsigned *>(shs4[b])[k] = hs | hs << 16;
    }
  };
  for (long long t = blockIdx.x; t < bands_r * tiles_c; t += gridDim.x) {
    const long long b0 = (t / tiles_c) * SB, c0 = (t % tiles_c) * FB_COLS, b1 = b0 + SB < p.rows ? b0 + SB : p.rows;
    const bool whole = (b1 - b0) % TR == 0 && c0 + FB_COLS <= p.cols;
    raw_chunk pre[NIT];
    __syncthreads(); /* the previous band's scale stores have read sc and sdec4 */
    fill_sdec(b0, 0);
#pragma unroll
    for (int it = 0; it < NIT; ++it) {
      if (NITEMS % NWARPS != 0 && warp + it * NWARPS >= NITEMS) break;
      if (whole || (b0 + it_rr[it] < p.rows && c0 + it_cc[it] < p.cols)) load_raw(p, b0 * p.cols + c0, it_off[it], pre[it]);
    }
    unsigned long long ic_o[NIH];
    unsigned char *ic_st[NIH];
    bool ic_in[NIH];
#pragma unroll
    for (int n = 0; n < NIH; ++n) {
      ic_in[n] = c0 + ic_cc[n] < p.cols;
      ic_o[n] = (unsigned long long)((c0 + ic_cc[n]) * p.rows + b0 + 32 * ic_rb[n]);
      /* the even lane of a pair: its own column's first 16 bytes (store A); the odd lane: the even lane's column
       * (4 to its left), bytes 16..31 */
      ic_st[n] = reinterpret_cast<unsigned char *>(p.out) + ic_o[n] + (odd ? 16 - 4 * p.rows : 0);
    }
    int buf = 0, i = 0;
    for (long long r0 = b0; r0 < b1; r0 += TR, buf ^= 1, ++i) {
      __syncthreads(); /* the previous tile's columns are done; sdec4[buf] is written */
      unsigned kmin = 0xFFFFFFFFu;
#pragma unroll
      for (int it = 0; it < NIT; ++it) {
        if (NITEMS % NWARPS != 0 && warp + it * NWARPS >= NITEMS) break;
        const int rr = it_rr[it], cc = it_cc[it];
        if (whole || (r0 + rr < p.rows && c0 + cc < p.cols)) {
          unsigned h[8];
          rh_deq(pre[it], h, kmin);
          uint4 *d = reinterpret_cast<uint4 *>(tileh + it_t[it]);
          d[0] = make_uint4(h[0], h[1], h[2], h[3]), d[1] = make_uint4(h[4], h[5], h[6], h[7]);
        }
      }
      kmin = __reduce_min_sync(0xFFFFFFFFu, kmin);
      if (lane == 0) skey[warp] = kmin;
      const long long rn = r0 + TR;
      if (rn < b1) fill_sdec(rn, buf ^ 1);
      __syncthreads();
      if (rn < b1) {
#pragma unroll
        for (int it = 0; it < NIT; ++it) {
          if (NITEMS % NWARPS != 0 && warp + it * NWARPS >= NITEMS) break;
          if (whole || (rn + it_rr[it] < p.rows && c0 + it_cc[it] < p.cols)) load_raw(p, rn * p.cols + c0, it_off[it], pre[it]);
        }
      }
      /* the tile's smallest non-zero block scale (none: every product is zero), as the smallest non-zero |p| */
      unsigned kt = skey[0];
#pragma unroll
      for (int wv = 1; wv < NWARPS; ++wv) kt = skey[wv] < kt ? skey[wv] : kt;
      const float pmin = kt >= 0x7Eu ? 0.0f : 0.5f * fbf_e4m3_dec_cvt(kt + 1u); /* 0x7F (NaN): no bound */
      const bool pnone = kt == 0xFFFFFFFFu;
#pragma unroll
      for (int n = 0; n < NIH; ++n) {
        if (!whole && r0 + 32 * ic_rb[n] >= p.rows) continue; /* the whole warp */
        const unsigned *cp = tileh + ic_t[n];
        unsigned h[32];
#pragma unroll
        for (int j = 0; j < 32; ++j) h[j] = cp[j * HP];
        const float4 *sdr = sdec4[buf] + 8 * ic_rb[n];
        const unsigned smn = sst[buf][ic_rb[n]][0], smx = sst[buf][ic_rb[n]][1];
        const float sdmin = fbf_u2f(smn);
        /* a shared S_dec: positive and finite (others go the row-by-row way, as the reference) */
        const float sdu = smn == smx && sdmin > 0.0f && sdmin < 3.0e38f ? sdmin : 0.0f;
        float a0, a1;
        int eb0 = -1, eb1 = -1; /* the scales the bound pass found (-1: none) */
        if (sdu > 0.0f) {
          unsigned m[16];
#pragma unroll
          for (int j = 0; j < 16; ++j) m[j] = rh_max2(h[j], h[j + 16]);
#pragma unroll
          for (int j = 0; j < 8; ++j) m[j] = rh_max2(m[j], m[j + 8]);
#pragma unroll
          for (int j = 0; j < 4; ++j) m[j] = rh_max2(m[j], m[j + 4]);
          m[0] = rh_max2(rh_max2(m[0], m[2]), rh_max2(m[1], m[3]));
          a0 = fabsf(fbf_h2_lo(m[0])) * sdu, a1 = fabsf(fbf_h2_hi(m[0])) * sdu;
        } else if (smx - 0x01800000u < 0x7E000000u && sdmin > 0.0f &&
                   sdmin * fbf_pow2(130 - (int)(smx >> 23)) >= 6.103515625e-05f) {
          /* rows with their own S_dec: bounds first. u = f16(p * H) with H = f16(S_dec * 2^(3-E)) in [2^-14, 16) is
           * p * S_dec * 2^(3-E) within a factor (1 +- 2^-11)^2 wherever u is a normal f16, so the largest |u|, U,
           * scaled back, brackets the exact amax within (1 +- 2^-9) when U >= 2^-13 (the largest exact product is
           * then a normal f16 too); a column whose two ends give the same E8M0 has that scale (E8M0 of the amax is
           * monotonic), the others (a bracket across a power of two: rare) take the exact amax */
          const uint4 *hr = shs4[buf] + 8 * ic_rb[n];
          /* the chains start at the first two products, not at 0: NVRTC 13.0 (sm_90a) compiled
           * max.NaN.xorsign.abs.f16x2(0, u) to a ReLU of u (HFMA2.RELU), which drops a negative u's magnitude
           * (seen on the H200: blocks whose largest |u| was a negative first row got a scale 2^2 too small) */
          unsigned mm[2];
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            const uint4 h4 = hr[k];
            const unsigned hh[4] = {h4.x, h4.y, h4.z, h4.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              const unsigned u = fbf_hmul2(h[4 * k + j], hh[j]);
              mm[j & 1] = k == 0 && j < 2 ? u : rh_max2(mm[j & 1], u);
            }
          }
          const unsigned um = rh_max2(mm[0], mm[1]);
          const float ps = fbf_pow2((int)(smx >> 23) - 130), u0 = fabsf(fbf_h2_lo(um)), u1 = fabsf(fbf_h2_hi(um));
          const float l0 = u0 * ps * 0.998046875f, g0 = u0 * ps * 1.001953125f;
          const float l1 = u1 * ps * 0.998046875f, g1 = u1 * ps * 1.001953125f;
          const unsigned e0l = rq2_e8m0(l0), e1l = rq2_e8m0(l1);
          const bool ok0 = u0 >= 1.220703125e-04f && l0 >= 1e-30f && e0l == rq2_e8m0(g0);
          const bool ok1 = u1 >= 1.220703125e-04f && l1 >= 1e-30f && e1l == rq2_e8m0(g1);
          a0 = a1 = 0.0f;
          if (!ok0 || !ok1) {
            float m0[2] = {0.0f, 0.0f}, m1[2] = {0.0f, 0.0f};
#pragma unroll
            for (int k = 0; k < 8; ++k) {
              const float4 s4 = sdr[k];
              const float s[4] = {s4.x, s4.y, s4.z, s4.w};
#pragma unroll
              for (int j = 0; j < 4; ++j) {
                m0[j & 1] = fbf_absmax_nan(m0[j & 1], fbf_h2_lo(h[4 * k + j]) * s[j]);
                m1[j & 1] = fbf_absmax_nan(m1[j & 1], fbf_h2_hi(h[4 * k + j]) * s[j]);
              }
            }
            a0 = fbf_absmax_nan(m0[0], m0[1]), a1 = fbf_absmax_nan(m1[0], m1[1]);
          }
          eb0 = ok0 ? (int)e0l : -1, eb1 = ok1 ? (int)e1l : -1;
        } else {
          float m0[2] = {0.0f, 0.0f}, m1[2] = {0.0f, 0.0f};
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            const float4 s4 = sdr[k];
            const float s[4] = {s4.x, s4.y, s4.z, s4.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              m0[j & 1] = fbf_absmax_nan(m0[j & 1], fbf_h2_lo(h[4 * k + j]) * s[j]);
              m1[j & 1] = fbf_absmax_nan(m1[j & 1], fbf_h2_hi(h[4 * k + j]) * s[j]);
            }
          }
          a0 = fbf_absmax_nan(m0[0], m0[1]), a1 = fbf_absmax_nan(m1[0], m1[1]);
        }
        const unsigned e0 = eb0 >= 0 ? (unsigned)eb0 : rq2_e8m0(a0), e1 = eb1 >= 0 ? (unsigned)eb1 : rq2_e8m0(a1);
        /* every non-zero |p * S_dec| of the block is at least xmin (RN is monotonic); 0: no bound, no fast path */
        const float xmin = pnone ? 3.0e38f : (sdmin > 0.0f && smx < 0x7F800000u ? pmin * sdmin : 0.0f);
        const unsigned long long o = ic_o[n] + (unsigned long long)i * TR;
        /* lane pairs: store A writes the even lane's column (ccA, then ccA + 2), store B the odd lane's, each as one
         * whole sector: the even lane the first 16 bytes, the odd lane the last 16 */
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          unsigned w[8];
          if (c == 0) rh_col<0>(p, q, h, e0, sr_at(p, o, c0 + ic_cc[n]), sdu, sdr, xmin, w);
          else rh_col<1>(p, q, h, e1, sr_at(p, o + 2ull * (unsigned long long)p.rows, c0 + ic_cc[n] + 2), sdu, sdr, xmin, w);
#if FB_KBF16
          kbf16_store(p, c0 + ic_cc[n] + 2 * c, r0 + 32 * ic_rb[n], w, c ? e1 : e0, whole || ic_in[n], odd);
          continue;
#endif
          unsigned y[4], sa[4], sb[4];
#pragma unroll
          for (int qq = 0; qq < 4; ++qq) {
            y[qq] = __shfl_xor_sync(0xFFFFFFFFu, odd ? w[qq] : w[4 + qq], 1);
            sa[qq] = odd ? y[qq] : w[qq], sb[qq] = odd ? w[4 + qq] : y[qq];
          }
          if (whole || ic_in[n]) {
            unsigned char *a = ic_st[n] + (long long)i * TR + 2ll * c * p.rows;
            *reinterpret_cast<uint4 *>(a) = make_uint4(sa[0], sa[1], sa[2], sa[3]);
            *reinterpret_cast<uint4 *>(a + 4 * p.rows) = make_uint4(sb[0], sb[1], sb[2], sb[3]);
          }
        }
        if (whole || ic_in[n]) {
          scj[i * FB_RB + ic_rb[n]][ic_cc[n]] = (unsigned char)e0;
          scj[i * FB_RB + ic_rb[n]][ic_cc[n] + 2] = (unsigned char)e1;
        }
      }
    }
#if !FB_KBF16
    __syncthreads();
    mx_flush_scales(p, scj, b0, b1, c0);
#endif
  }
}
#elif FB_SLOTS
/* FB_SLOTS (tune value slots, NVFP4 sources only; 0, the default: the kernel after this one): the raw ring. A tile's
 * raw NVFP4 source (E2M1 codes, the E4M3 block scales and, for per-token outer scales, the rows' S_dec) is copied by
 * cp.async into a ring of FB_SLOTS shared-memory slots, FB_SLOTS tiles ahead of the tile being quantized, so that a
 * CTA keeps FB_SLOTS * 9/16 * TR * FB_COLS bytes of loads in flight without holding them in registers. Each tile is
 * then dequantized from its slot into the FP32 tile with the same deq_raw as the register path (the same values bit
 * for bit: e2m1 * sf exact in f16, times S_dec once in FP32), and the column phase is the register path's. Slot
 * layout: the codes, TR rows of FB_COLS / 2 bytes, each row's 16-byte chunks XOR-swizzled by row (so that the
 * decode's 8-byte reads, 8 rows x 2 chunks a half-warp, hit distinct banks); the scales, TR rows of FB_COLS / 16
 * bytes; per-token S_dec, TR floats. Bands that are whole tiles inside an aligned matrix copy with cp.async (16-byte
 * code chunks, 8- or 4-byte scale rows, 4-byte S_dec); others copy bytes with plain loads, bounds-tested. */
#if FB_COLS < 64 || FB_SLOTS < 2
#error "mx_col FB_SLOTS: FB_COLS >= 64 and FB_SLOTS >= 2"
#endif
#define NCR (FB_COLS / 32)          /* 16-byte code chunks of a tile row */
#define SPR (FB_COLS / 16)          /* scale bytes of a tile row: 4 or 8 (or more: whole 16-byte multiples) */
#define CODEB (TR * FB_COLS / 2)
#define SCB (TR * SPR)
#define SDB (FB_SRC_OUTER == 1 ? TR * 4 : 0)
#define SLOTB (CODEB + SCB + SDB)
#define SWZ(r) (((r) / (8 / NCR > 0 ? 8 / NCR : 1)) % NCR) /* chunk swizzle of tile row r */
static __device__ __forceinline__ void rr_cp(void *dst, const void *src, int n) {
#if defined(__CUDA_ARCH__)
  unsigned d;
  asm volatile("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(d) : "l"(dst));
  if (n == 16) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
  else if (n == 8) asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(d), "l"(src) : "memory");
  else asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
#else
  memcpy(dst, src, (size_t)n); /* the emulator: the copy lands at once, which the wait below allows */
#endif
}
static __device__ __forceinline__ void rr_commit(void) {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int n> static __device__ __forceinline__ void rr_wait(void) {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_group %0;" ::"n"(n) : "memory");
#endif
}
/* a tile's slot filled byte by byte with plain loads, bounds-tested (ragged or unaligned matrices; out of line: the
 * registers of the hot loop) */
static __device__ __noinline__ void rr_issue_slow(const unsigned char *in, const unsigned char *ss, const float *sdp,
                                                  long long rows, long long cols, unsigned char *sl, long long r0, long long c0) {
  (void)sdp; /* the fields of p by value: p itself passed by reference would be copied to local memory */
  for (int k = threadIdx.x; k < CODEB; k += FB_THREADS) {
    const int r = k / (FB_COLS / 2), j = k % (FB_COLS / 2);
    if (r0 + r < rows && c0 + 2 * j < cols)
      sl[r * (FB_COLS / 2) + 16 * ((j / 16) ^ SWZ(r)) + j % 16] = in[(((r0 + r) * cols + c0) >> 1) + j];
  }
  for (int k = threadIdx.x; k < SCB; k += FB_THREADS) {
    const int r = k / SPR, j = k % SPR;
    if (r0 + r < rows && c0 + 16 * j < cols) sl[CODEB + k] = ss[(((r0 + r) * cols + c0) >> 4) + j];
  }
#if FB_SRC_OUTER == 1
  for (int k = threadIdx.x; k < TR; k += FB_THREADS)
    if (r0 + k < rows) reinterpret_cast<float *>(sl + CODEB + SCB)[k] = sdp[r0 + k]; /* row_sdec's per-token value */
#endif
}
#undef FB_LAUNCH_BOUNDS
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
#define FB_LAUNCH_BOUNDS __launch_bounds__(FB_THREADS, 1)
#else
/* 20 warps an SM, as the register path (ptxas 13.0 spilled 120-130 bytes under a 24-warp bound); the ring keeps
 * FB_SLOTS tiles of loads in flight a CTA instead of one */
#define FB_LAUNCH_BOUNDS __launch_bounds__(FB_THREADS, 640 / FB_THREADS)
#endif
extern "C" __global__ void FB_LAUNCH_BOUNDS FB_KERNEL(const fb_kp_mem p) {
  __shared__ float4 tile4[TR * PITCH / 4]; /* 16-byte aligned rows */
  float *tile = reinterpret_cast<float *>(tile4);
  __shared__ uint4 ring4[FB_SLOTS * SLOTB / 16];
  unsigned char *ring = reinterpret_cast<unsigned char *>(ring4);
  __shared__ uint4 sc4[FB_COLS * 2];
  unsigned char(*scj)[FB_COLS] = reinterpret_cast<unsigned char(*)[FB_COLS]>(sc4);
#if FB_SRC_OUTER == 2
  __shared__ float sdx[1024];
#endif
  const long long SB = 1024;
  const long long bands_r = (p.rows + SB - 1) / SB, tiles_c = (p.cols + FB_COLS - 1) / FB_COLS;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const rq2_pre q = rq2_prepare(p);
#if FB_SRC_OUTER == 0
  const float sd0 = row_sdec(p, 0);
#endif
  /* cp.async needs aligned sources: 16-byte code rows, scale rows of SPR bytes */
  const bool aligned = ((unsigned long long)p.in & 15u) == 0 && p.cols % 32 == 0 &&
                       ((unsigned long long)p.src_scales % SPR) == 0 && (p.cols / 16) % SPR == 0 &&
                       ((unsigned long long)p.src_s_dec & 3u) == 0;
  /* load items (as the register path's): row and column in the tile, where its codes and scale lie in a slot, tile offset */
  int it_rr[NIT], it_cc[NIT];
  unsigned it_b[NIT], it_t[NIT];
#pragma unroll
  for (int it = 0; it < NIT; ++it) {
    const int wi = warp + it * NWARPS;
    it_rr[it] = (wi % (TR / LR)) * LR + lane % LR, it_cc[it] = ((wi / (TR / LR)) * LC + lane / LR) * CHUNK;
    it_b[it] = (unsigned)(it_rr[it] * (FB_COLS / 2) + 16 * ((it_cc[it] / 32) ^ SWZ(it_rr[it])) + ((it_cc[it] / 16) & 1) * 8);
    it_t[it] = (unsigned)(it_rr[it] * PITCH + it_cc[it]);
  }
  int ic_cc[NIC2], ic_rb[NIC2];
  unsigned ic_t[NIC2];
#pragma unroll
  for (int n = 0; n < NIC2; ++n) {
    const int k = (int)threadIdx.x + n * FB_THREADS;
    ic_cc[n] = k % FB_COLS, ic_rb[n] = k / FB_COLS;
    ic_t[n] = (unsigned)(32 * ic_rb[n] * PITCH + ic_cc[n]);
#if defined(__CUDA_ARCH__)
    asm volatile("" : "+r"(ic_t[n]));
#endif
  }
  const bool odd = threadIdx.x & 1;
  for (long long t = blockIdx.x; t < bands_r * tiles_c; t += gridDim.x) {
    const long long b0 = (t / tiles_c) * SB, c0 = (t % tiles_c) * FB_COLS, b1 = b0 + SB < p.rows ? b0 + SB : p.rows;
    const int nt = (int)((b1 - b0 + TR - 1) / TR);
    const bool whole = (b1 - b0) % TR == 0 && c0 + FB_COLS <= p.cols;
    const bool fast = whole && aligned;
    /* tile i of the band into slot s; one commit group per tile, empty past the band, so that "all but the newest
     * FB_SLOTS - 1 groups" is always tile i at its turn */
    auto issue = [&](int i, int s) {
      if (i < nt) {
        const long long r0 = b0 + (long long)i * TR;
        unsigned char *sl = ring + s * SLOTB;
        if (fast) {
          const unsigned char *gc = reinterpret_cast<const unsigned char *>(p.in) + ((r0 * p.cols + c0) >> 1);
          const unsigned char *gs = reinterpret_cast<const unsigned char *>(p.src_scales) + ((r0 * p.cols + c0) >> 4);
          const unsigned rowc = (unsigned)p.cols >> 1, rows_ = (unsigned)p.cols >> 4; /* source row pitches, bytes */
#pragma unroll
          for (int k = threadIdx.x; k < TR * NCR; k += FB_THREADS) {
            const int r = k / NCR, ch = k % NCR;
            rr_cp(sl + r * (FB_COLS / 2) + 16 * (ch ^ SWZ(r)), gc + (unsigned)r * rowc + 16u * (unsigned)ch, 16);
          }
#pragma unroll
          for (int k = threadIdx.x; k < TR * (SPR / (SPR > 16 ? 16 : SPR)); k += FB_THREADS) {
            const int w = SPR > 16 ? 16 : SPR, r = k / (SPR / w), j = k % (SPR / w);
            rr_cp(sl + CODEB + r * SPR + j * w, gs + (unsigned)r * rows_ + (unsigned)(j * w), w);
          }
#if FB_SRC_OUTER == 1
#pragma unroll
          for (int k = threadIdx.x; k < TR; k += FB_THREADS)
            rr_cp(sl + CODEB + SCB + 4 * k, reinterpret_cast<const float *>(p.src_s_dec) + r0 + k, 4);
#endif
        } else /* bytes, bounds-tested (ragged or unaligned matrices), out of line */
          rr_issue_slow(reinterpret_cast<const unsigned char *>(p.in), reinterpret_cast<const unsigned char *>(p.src_scales),
                        reinterpret_cast<const float *>(p.src_s_dec), p.rows, p.cols, sl, r0, c0);
      }
      rr_commit();
    };
    __syncthreads(); /* the previous band has read the ring, the tile and its scales */
#pragma unroll 1
    for (int i = 0; i < FB_SLOTS; ++i) issue(i, i);
#if FB_SRC_OUTER == 2
    /* per-expert S_dec of the band's rows: row_sdec's search, once a band, while the first tiles load */
    for (int k = threadIdx.x; k < (int)(b1 - b0); k += FB_THREADS) sdx[k] = row_sdec(p, b0 + k);
#endif
    unsigned long long ic_o[NIC2];
    unsigned char *ic_st[NIC2];
    bool ic_in[NIC2];
#pragma unroll
    for (int n = 0; n < NIC2; ++n) {
      ic_in[n] = c0 + ic_cc[n] < p.cols;
      ic_o[n] = (unsigned long long)((c0 + ic_cc[n]) * p.rows + b0 + 32 * ic_rb[n]);
      ic_st[n] = reinterpret_cast<unsigned char *>(p.out) + ic_o[n] + (odd ? 16 - p.rows : 0);
    }
    for (int i = 0, s = 0; i < nt; ++i, s = s == FB_SLOTS - 1 ? 0 : s + 1) {
      const long long r0 = b0 + (long long)i * TR;
      rr_wait<FB_SLOTS - 1>(); /* this thread's copies of tile i have landed */
      __syncthreads();         /* everyone's have; the previous tile's columns are done */
      const unsigned char *sl = ring + s * SLOTB;
#pragma unroll
      for (int it = 0; it < NIT; ++it) {
        if (NITEMS % NWARPS != 0 && warp + it * NWARPS >= NITEMS) break;
        const int rr = it_rr[it], cc = it_cc[it];
        if (whole || (r0 + rr < p.rows && c0 + cc < p.cols)) {
          raw_chunk r;
          r.c = *reinterpret_cast<const uint2 *>(sl + it_b[it]);
          r.s = sl[CODEB + rr * SPR + cc / 16];
#if FB_SRC_OUTER == 0
          const float sd = sd0;
#elif FB_SRC_OUTER == 1
          const float sd = reinterpret_cast<const float *>(sl + CODEB + SCB)[rr];
#else
          const float sd = sdx[r0 - b0 + rr];
#endif
          float v[CHUNK];
          deq_raw(r, sd, v);
          float4 *d = reinterpret_cast<float4 *>(tile + it_t[it]);
#pragma unroll
          for (int j = 0; j < CHUNK / 4; ++j) d[j] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
        }
      }
      __syncthreads(); /* the tile is written; slot s has been read */
      issue(i + FB_SLOTS, s);
      rq2_columns(p, q, tile, ic_cc, ic_rb, ic_t, ic_o, ic_st, ic_in, scj, r0, i, whole, odd, c0);
    }
#if !FB_KBF16
    __syncthreads();
    mx_flush_scales(p, scj, b0, b1, c0);
#endif
  }
  rr_wait<0>();
}
#else /* FB_SLOTS */
extern "C" __global__ void FB_LAUNCH_BOUNDS FB_KERNEL(const fb_kp_mem p) {
  __shared__ float4 tile4[TR * PITCH / 4]; /* 16-byte aligned rows */
  float *tile = reinterpret_cast<float *>(tile4);
  __shared__ float sdec[2][TR]; /* NVFP4 sources: this tile's rows and the next one's */
  __shared__ uint4 sc4[FB_COLS * 2];
  unsigned char(*scj)[FB_COLS] = reinterpret_cast<unsigned char(*)[FB_COLS]>(sc4);
  const long long SB = 1024;
  const long long bands_r = (p.rows + SB - 1) / SB, tiles_c = (p.cols + FB_COLS - 1) / FB_COLS;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const rq2_pre q = rq2_prepare(p);
  /* load items (as the register path's): row and column in the tile, element offset in the source, tile offset */
  int it_rr[NIT], it_cc[NIT];
  unsigned it_off[NIT], it_t[NIT];
#pragma unroll
  for (int it = 0; it < NIT; ++it) {
    const int wi = warp + it * NWARPS;
    it_rr[it] = (wi % (TR / LR)) * LR + lane % LR, it_cc[it] = ((wi / (TR / LR)) * LC + lane / LR) * CHUNK;
    it_off[it] = (unsigned)it_rr[it] * (unsigned)p.cols + (unsigned)it_cc[it];
    it_t[it] = (unsigned)(it_rr[it] * PITCH + it_cc[it]);
  }
  /* column items: k = threadIdx.x + n * FB_THREADS is column cc = k % FB_COLS, 32-row block rb = k / FB_COLS of a tile
   * (a warp's items share rb: FB_COLS % 32 == 0) */
  int ic_cc[NIC2], ic_rb[NIC2];
  unsigned ic_t[NIC2]; /* the item's first value in the tile */
#pragma unroll
  for (int n = 0; n < NIC2; ++n) {
    const int k = (int)threadIdx.x + n * FB_THREADS;
    ic_cc[n] = k % FB_COLS, ic_rb[n] = k / FB_COLS;
    ic_t[n] = (unsigned)(32 * ic_rb[n] * PITCH + ic_cc[n]);
#if defined(__CUDA_ARCH__)
    asm volatile("" : "+r"(ic_t[n]));
#endif
  }
  const bool odd = threadIdx.x & 1;
  for (long long t = blockIdx.x; t < bands_r * tiles_c; t += gridDim.x) {
    const long long b0 = (t / tiles_c) * SB, c0 = (t % tiles_c) * FB_COLS, b1 = b0 + SB < p.rows ? b0 + SB : p.rows;
    /* the band is whole tiles inside the matrix (every band at S1): no bounds per chunk or item */
    const bool whole = (b1 - b0) % TR == 0 && c0 + FB_COLS <= p.cols;
    raw_chunk pre[NIT];
    __syncthreads(); /* the previous band's scale stores have read sc and sdec */
#if FB_SRC == 1
    for (int k = threadIdx.x; k < TR; k += FB_THREADS) sdec[0][k] = b0 + k < p.rows ? row_sdec(p, b0 + k) : 0.0f;
#endif
#pragma unroll
    for (int it = 0; it < NIT; ++it) {
      if (NITEMS % NWARPS != 0 && warp + it * NWARPS >= NITEMS) break;
      if (whole || (b0 + it_rr[it] < p.rows && c0 + it_cc[it] < p.cols)) load_raw(p, b0 * p.cols + c0, it_off[it], pre[it]);
    }
    /* per item, for tile 0 of the band: the output element index of its first code, where its lane's stores A go
     * (B: one output row further), whether its column is inside the matrix */
    unsigned long long ic_o[NIC2];
    unsigned char *ic_st[NIC2];
    bool ic_in[NIC2];
#pragma unroll
    for (int n = 0; n < NIC2; ++n) {
      ic_in[n] = c0 + ic_cc[n] < p.cols;
      ic_o[n] = (unsigned long long)((c0 + ic_cc[n]) * p.rows + b0 + 32 * ic_rb[n]);
      ic_st[n] = reinterpret_cast<unsigned char *>(p.out) + ic_o[n] + (odd ? 16 - p.rows : 0);
    }
    int buf = 0, i = 0;
    for (long long r0 = b0; r0 < b1; r0 += TR, buf ^= 1, ++i) {
      __syncthreads(); /* the previous tile's columns are done; sdec[buf] is written */
#pragma unroll
      for (int it = 0; it < NIT; ++it) {
        if (NITEMS % NWARPS != 0 && warp + it * NWARPS >= NITEMS) break;
        const int rr = it_rr[it], cc = it_cc[it];
        if (whole || (r0 + rr < p.rows && c0 + cc < p.cols)) {
          float v[CHUNK];
          deq_raw(pre[it], FB_SRC == 1 ? sdec[buf][rr] : 1.0f, v);
          float4 *d = reinterpret_cast<float4 *>(tile + it_t[it]);
#pragma unroll
          for (int j = 0; j < CHUNK / 4; ++j) d[j] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
        }
      }
      const long long rn = r0 + TR; /* the next tile of the band */
#if FB_SRC == 1
      if (rn < b1)
        for (int k = threadIdx.x; k < TR; k += FB_THREADS) sdec[buf ^ 1][k] = rn + k < p.rows ? row_sdec(p, rn + k) : 0.0f;
#endif
      __syncthreads();
      if (rn < b1) {
#pragma unroll
        for (int it = 0; it < NIT; ++it) {
          if (NITEMS % NWARPS != 0 && warp + it * NWARPS >= NITEMS) break;
          if (whole || (rn + it_rr[it] < p.rows && c0 + it_cc[it] < p.cols)) load_raw(p, rn * p.cols + c0, it_off[it], pre[it]);
        }
      }
      /* column phase: item = (column, 32-row block); lane pairs trade half their codes (whole-sector stores) */
      rq2_columns(p, q, tile, ic_cc, ic_rb, ic_t, ic_o, ic_st, ic_in, scj, r0, i, whole, odd, c0);
    }
#if !FB_KBF16
    __syncthreads();
    mx_flush_scales(p, scj, b0, b1, c0);
#endif
  }
}
#endif /* FB_SLOTS */
#undef NIT
#endif /* FB_RING */
