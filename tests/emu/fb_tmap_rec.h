/* fb_tmap_rec.h — what a tensor map holds for the CPU stand-ins of the CUDA driver, in the 128-byte CUtensorMap:
 * the fields of cuTensorMapEncodeTiled, in a layout of fourbit's own (the real driver's bits are opaque).
 *   - The fake driver (tests/gpu/mock_libcuda.c) writes it from the calls runtime/gemm_host.c makes.
 *   - The functional model of the Blackwell instructions (tests/emu/tc_model.h) writes it too (tc::encode_tmap),
 *     and its TMA loads read it.
 * So a map the runtime's host code encoded is one the model's TMA can load through. C and C++; under the
 * functional model and the fake driver only, never for a GPU.
 *
 * Layout (little-endian, 108 of the 128 bytes, the rest 0):
 *   0 gaddr (u64, the global address: word 0, as the fake driver's GEMM reads it)
 *   8 magic "FBTM" (u32)
 *   12 rank, element bytes, swizzle bytes (0/32/64/128), OOB NaN fill (u8 each)
 *   16 dims[5] (u32)
 *   36 box[5] (u32)
 *   56 element strides[5] (u32)
 *   76 interleave (u32)
 *   80 byte strides of dims 1.. [4] (u64) */
#ifndef FB_TMAP_REC_H
#define FB_TMAP_REC_H
#include <stdint.h>
#include <string.h>

typedef struct {
  uint64_t gaddr;
  uint32_t magic;
  uint8_t rank, esize, swizzle, oob_nan;
  uint32_t dims[5], box[5], estr[5], interleave;
  uint64_t strides[4];
} fbemu_tmap_rec;
#define FBEMU_TMAP_MAGIC 0x4D544246u /* "FBTM" */

/* cuTensorMapEncodeTiled's checks (CUDA driver API: 16-byte aligned address and strides, box extents in
 * 1..256, the inner box a multiple of 16 bytes and within the swizzle span), then the record. NULL, or why not. */
static inline const char *fbemu_tmap_encode(void *map128, unsigned esize, unsigned rank, const void *gaddr,
                                            const uint64_t *dims, const uint64_t *strides, const uint32_t *box,
                                            const uint32_t *estr, unsigned interleave, unsigned swizzle,
                                            unsigned oob_nan) {
  fbemu_tmap_rec r;
  unsigned i;
  if (rank < 1 || rank > 5) return "tensor map: rank not in 1..5";
  if ((uintptr_t)gaddr % 16) return "tensor map: global address not 16-byte aligned";
  if (swizzle != 0 && swizzle != 32 && swizzle != 64 && swizzle != 128) return "tensor map: swizzle not 0/32/64/128";
  memset(&r, 0, sizeof r);
  r.magic = FBEMU_TMAP_MAGIC, r.rank = (uint8_t)rank, r.esize = (uint8_t)esize, r.swizzle = (uint8_t)swizzle;
  r.oob_nan = (uint8_t)oob_nan, r.gaddr = (uint64_t)(uintptr_t)gaddr, r.interleave = interleave;
  for (i = 0; i < rank; ++i) {
    if (dims[i] < 1 || dims[i] > (1ull << 32)) return "tensor map: a dimension not in 1..2^32";
    if (box[i] < 1 || box[i] > 256) return "tensor map: a box extent not in 1..256";
    r.dims[i] = (uint32_t)dims[i], r.box[i] = box[i], r.estr[i] = estr ? estr[i] : 1;
    if (i) {
      if (strides[i - 1] % 16) return "tensor map: a global stride not a multiple of 16 bytes";
      r.strides[i - 1] = strides[i - 1];
    }
  }
  if ((box[0] * esize) % 16) return "tensor map: the box's inner extent is not a multiple of 16 bytes";
  if (swizzle && box[0] * esize > swizzle) return "tensor map: the box's inner extent exceeds the swizzle span";
  memset(map128, 0, 128);
  memcpy(map128, &r, sizeof r);
  return NULL;
}
#endif
