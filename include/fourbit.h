/* fourbit.h — the public C API of libfourbit: every module's header (include/fourbit/), one per module, each of
 * which reads on its own.
 *
 * Entry points, by module:
 *   base      fourbit/base.h      (base/) fb_status, fb_errmsg(), fb_status_name(); SHA-256; libcuda.so.1
 *                                 loaded with dlopen at first use (fb_cuda_load()).
 *   numerics  fourbit/numerics.h  (runtime/numerics.c) every format of docs/numerics.md, bit by bit: element
 *                                 encode/decode (E2M1, E4M3, E5M2, E8M0, S2F6), NVFP4 and MXFP8 block quantizers,
 *                                 the backward's requantize-transpose, RHT-32, S2F6 blocks. This is the CPU reference
 *                                 that every GPU kernel is checked against.
 *   recipe    fourbit/recipe.h    (recipes/loader.c) formats, per-layer precision, tune families; fb_recipe_load().
 *   plan      fourbit/plan.h      (gen/plan.c) fb_plan_resolve(): the kernel specs a recipe needs.
 *   gen       fourbit/gen.h       (gen/) variants, source emission, launch geometry, NVRTC.
 *   cache     fourbit/cache.h     (cache/cache.c) the LMDB kernel cache: cubins, winners, trials.
 *   ops       fourbit/ops.h       (runtime/ops.c) CPU references of the router, permute, unpermute, SwiGLU and AdamW
 *                                 kernels, and BF16 rounding.
 *   philox    templates/fb_philox.h (host C and NVRTC device code compile the same header)
 *
 * Conventions: matrices are row-major float32; blocks run along a row (the GEMM's K). NVFP4 codes
 * are packed two per byte, even element in the low nibble. Functions that can fail return
 * fb_status and leave a message in fb_errmsg().
 */
#ifndef FOURBIT_H
#define FOURBIT_H

#include "fourbit/base.h"
#include "fourbit/numerics.h"
#include "fourbit/recipe.h"
#include "fourbit/plan.h"
#include "fourbit/gen.h"
#include "fourbit/cache.h"
#include "fourbit/ops.h"

#endif
