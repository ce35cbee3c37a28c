/* gemm_sm100_class.h — one build of templates/gemm_sm100.cuh for tests/test_gemm_sm100.cpp: the includer defines the
 * class's FB_* (as gen/templates.c's gemm_defines and the variant's parameters would) and includes this inside the
 * class's namespace; every class macro is undefined afterwards, so that the next class defines its own. No include
 * guard: included once per class. */
#include "gemm_sm100.cuh"
#undef FB_TILE_M
#undef FB_CLUSTER
#undef FB_KIND
#undef FB_MODE
#undef FB_A_OUTER
#undef FB_B_OUTER
#undef FB_OUT_BF16
#undef FB_SWIGLU
#undef FB_S2F6
#undef FB_RHT
#undef FB_TILE_N
#undef FB_TILE_K
#undef FB_STAGES
#undef FB_MMA_K
#undef FB_TEST_BREAK
#undef FB_KERNEL
