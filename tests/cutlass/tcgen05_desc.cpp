// tcgen05_desc.cpp — templates/fb_tcgen05.h against CUTLASS 4.2 (a test-only dependency: the nvidia-cutlass wheel's
// headers, fetched from PyPI by the build into build/deps/cutlass; no CUTLASS code is in fourbit's kernels). For a
// grid of (kind, A/B format, M, N, majorness, scale type, scale-factor ids, K size) the instruction descriptor equals the
// one CUTLASS's InstrDescriptor / InstrDescriptorBlockScaled bitfields give, and CUTLASS's make_instr_desc templates
// for the recipe's types; for a grid of (start address, LBO, SBO, layout, base offset, LBO mode) the shared-memory
// descriptor equals UMMA::SmemDescriptor's, and the absolute-LBO descriptors of K = 96 MMAs equal SM103::mma_unpack's
// (sm_103a); the scale-factor byte offsets equal CuTe's layout Sm1xxBlockScaledConfig<16 | 32>::tile_atom_to_shape_SFA
// over whole matrices. Exit 0 when all agree, 1 otherwise.
#include <cute/arch/mma_sm100_desc.hpp>
#include <cute/atom/mma_traits_sm100.hpp>
#include <cute/tensor.hpp>
#include <cutlass/detail/sm100_blockscaled_layout.hpp>
#include <cutlass/numeric_types.h>

#include <cstdio>

#include "fb_tcgen05.h"

static long checked = 0, bad = 0;
#define EXPECT_EQ(ours, theirs, ...)                                                                              \
  do {                                                                                                            \
    ++checked;                                                                                                    \
    if ((unsigned long long)(ours) != (unsigned long long)(theirs)) {                                             \
      if (++bad <= 20) {                                                                                          \
        std::printf("  MISMATCH ours 0x%llx cutlass 0x%llx: ", (unsigned long long)(ours), (unsigned long long)(theirs)); \
        std::printf(__VA_ARGS__);                                                                                 \
        std::printf("\n");                                                                                        \
      }                                                                                                           \
    }                                                                                                             \
  } while (0)

static void idesc_grid() {
  using namespace cute;
  static const int Ms[] = {64, 128, 256};
  for (int m : Ms)
    for (int n = 8; n <= 256; n += 8)
      for (int af = 0; af < 8; ++af)
        for (int bf = 0; bf < 8; bf += 3)
          for (int maj = 0; maj < 4; ++maj) {
            UMMA::InstrDescriptor p = {};
            p.c_format_ = 1, p.a_format_ = af, p.b_format_ = bf, p.a_major_ = maj & 1, p.b_major_ = maj >> 1;
            p.n_dim_ = n >> 3, p.m_dim_ = m >> 4;
            EXPECT_EQ(fb_tc_idesc(af, bf, FB_TC_D_F32, m, n, maj & 1, maj >> 1), uint32_t(p), "plain m%d n%d a%d b%d maj%d", m, n, af, bf, maj);
            for (int id = 0; id < 16; ++id) {
              UMMA::InstrDescriptorBlockScaled s = {};
              s.a_format_ = af, s.b_format_ = bf, s.a_major_ = maj & 1, s.b_major_ = maj >> 1;
              s.n_dim_ = n >> 3, s.m_dim_ = m >> 4, s.scale_format_ = id & 1, s.a_sf_id_ = id & 3, s.b_sf_id_ = id >> 2;
              s.k_size_ = (id >> 1) & 1;
              EXPECT_EQ(fb_tc_idesc_bs(af, bf, id & 1, m, n, maj & 1, maj >> 1, id & 3, id >> 2, (id >> 1) & 1), uint32_t(s),
                        "block-scaled m%d n%d a%d b%d maj%d id%d", m, n, af, bf, maj, id);
            }
          }
  // the recipe's operand types through CUTLASS's own type-to-code mapping
  using E2M1 = cutlass::float_e2m1_t;
  using E4M3 = cutlass::float_e4m3_t;
  using E5M2 = cutlass::float_e5m2_t;
  using UE4M3 = cutlass::float_ue4m3_t;
  using UE8M0 = cutlass::float_ue8m0_t;
  using K = UMMA::Major;
  EXPECT_EQ(fb_tc_idesc_bs(FB_TC_MXF4_E2M1, FB_TC_MXF4_E2M1, 0, 128, 256, 0, 0, 0, 0, 0),
            uint32_t(UMMA::make_instr_desc_block_scaled<E2M1, E2M1, float, UE4M3, 128, 256, K::K, K::K>()), "NVFP4 M128 N256");
  EXPECT_EQ(fb_tc_idesc_bs(FB_TC_MXF4_E2M1, FB_TC_MXF4_E2M1, 0, 256, 128, 0, 0, 0, 0, 0),
            uint32_t(UMMA::make_instr_desc_block_scaled<E2M1, E2M1, float, UE4M3, 256, 128, K::K, K::K>()), "NVFP4 M256 N128");
  EXPECT_EQ(fb_tc_idesc_bs(FB_TC_E4M3, FB_TC_E4M3, 1, 128, 256, 0, 0, 0, 0, 0),
            uint32_t(UMMA::make_instr_desc_block_scaled<E4M3, E4M3, float, UE8M0, 128, 256, K::K, K::K>()), "MXFP8 K/K");
  EXPECT_EQ(fb_tc_idesc_bs(FB_TC_E4M3, FB_TC_E5M2, 1, 128, 128, 1, 0, 0, 0, 0),
            uint32_t(UMMA::make_instr_desc_block_scaled<E4M3, E5M2, float, UE8M0, 128, 128, K::MN, K::K>()), "MXFP8 e4m3 x e5m2");
  EXPECT_EQ(fb_tc_idesc_bs(FB_TC_E4M3, FB_TC_E4M3, 1, 256, 256, 1, 1, 0, 0, 0),
            uint32_t(UMMA::make_instr_desc_block_scaled<E4M3, E4M3, float, UE8M0, 256, 256, K::MN, K::MN>()), "MXFP8 MN/MN");
  EXPECT_EQ(fb_tc_idesc(FB_TC_BF16, FB_TC_BF16, FB_TC_D_F32, 128, 256, 0, 0),
            uint32_t(UMMA::make_instr_desc<cutlass::bfloat16_t, cutlass::bfloat16_t, float, 128, 256, K::K, K::K>()), "BF16");
  EXPECT_EQ(fb_tc_idesc(FB_TC_BF16, FB_TC_BF16, FB_TC_D_F32, 64, 64, 1, 1),
            uint32_t(UMMA::make_instr_desc<cutlass::bfloat16_t, cutlass::bfloat16_t, float, 64, 64, K::MN, K::MN>()), "BF16 MN");
  // the scale-factor ids from TMEM addresses, as CUTLASS's runtime descriptor takes them
  for (uint32_t hi = 0; hi < 4; ++hi) {
    uint64_t e = UMMA::make_runtime_instr_desc_block_scaled<E2M1, E2M1, float, UE4M3, 128, 256, K::K, K::K>(hi << 30 | 0x100,
                                                                                                           (3 - hi) << 30 | 4);
    EXPECT_EQ(fb_tc_idesc_bs(FB_TC_MXF4_E2M1, FB_TC_MXF4_E2M1, 0, 128, 256, 0, 0, int(hi), int(3 - hi), 0), uint32_t(e >> 32),
              "runtime sf ids %u", hi);
  }
}

static void sdesc_grid() {
  using namespace cute;
  static const int layouts[] = {FB_TC_SW_NONE, FB_TC_SW128_BASE32B, FB_TC_SW128, FB_TC_SW64, FB_TC_SW32};
  for (uint32_t addr = 0; addr < (1u << 18); addr += 16 * 113)
    for (int l : layouts)
      for (int mode = 0; mode < 2; ++mode) {
        uint32_t lbo = (addr * 5 + 16) & 0x3FFF0, sbo = (addr * 11 + 1024) & 0x3FFF0;
        int bo = int((addr >> 7) & 7); /* every base-offset value, against CUTLASS's bitfield */
        UMMA::SmemDescriptor d;
        d.desc_ = 0;
        d.start_address_ = uint16_t(addr >> 4), d.leading_byte_offset_ = uint16_t(lbo >> 4);
        d.stride_byte_offset_ = uint16_t(sbo >> 4), d.version_ = 1, d.base_offset_ = uint8_t(bo), d.lbo_mode_ = uint8_t(mode);
        d.layout_type_ = uint8_t(l);
        EXPECT_EQ(fb_tc_sdesc(addr, lbo, sbo, l, bo, mode), uint64_t(d), "sdesc addr %u lbo %u sbo %u layout %d mode %d", addr,
                  lbo, sbo, l, mode);
      }
}

/* K = 96 (sm_103a): CUTLASS's SM103::mma_unpack (cute/atom/mma_traits_sm100.hpp) takes the K-major descriptor of an MMA's
   48-byte chunk and of the next 128-byte K slice, sets lbo_mode_ = 1 and the LBO field to the next one's start address:
   the same bits as fb_tc_sdesc(start, next, SBO, SW128, 0, 1), the descriptors gemm_sm100.cuh issues at FB_MMA_K 96 */
static void sdesc_k96() {
  using namespace cute;
  auto L = tile_to_shape(UMMA::Layout_K_SW128_Atom<uint8_t>{}, Shape<_128, _128>{});
  /* (on the host CuTe prints "ERROR: cast_smem_ptr_to_uint not supported but used." and takes the start address as 0:
     the start fields are set below) */
  UMMA::SmemDescriptor base = UMMA::make_umma_desc<UMMA::Major::K>(make_tensor(make_smem_ptr((uint8_t *)nullptr), L));
  for (uint32_t stage = 0x400; stage < 0x30000; stage += 0x6400)
    for (int j = 0; j < 8; ++j) { /* MMA j of a 384-byte stage row: three 128-row x 128-byte boxes, 16 KiB apart */
      const uint32_t x = 48 * j / 128, o = 48 * j % 128, nx = o + 48 > 128 ? x + 1 : x;
      const uint32_t start = stage + x * 16384 + o, next = stage + nx * 16384;
      UMMA::SmemDescriptor a = base, n = base;
      a.start_address_ = uint16_t((start & 0x3FFFF) >> 4), n.start_address_ = uint16_t((next & 0x3FFFF) >> 4);
      a.lbo_mode_ = 1, a.leading_byte_offset_ = n.start_address_; /* SM103::mma_unpack */
      EXPECT_EQ(fb_tc_sdesc(start, next, 1024, FB_TC_SW128, 0, 1), uint64_t(a), "K = 96 MMA %d of the stage at 0x%x", j, stage);
    }
}

template <int V> static void sf_layout(int M, int K) {
  using namespace cute;
  auto L = cutlass::detail::Sm1xxBlockScaledConfig<V>::tile_atom_to_shape_SFA(make_shape(M, 128, K, 1));
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < K; k += V)
      EXPECT_EQ(fb_tc_sf_offset(uint64_t(m), uint64_t(k / V), uint64_t(K / V)), uint64_t(L(m, k, 0)), "SF%d M%d K%d (%d, %d)", V,
                M, K, m, k);
}

int main() {
  idesc_grid();
  sdesc_grid();
  sdesc_k96();
  sf_layout<16>(256, 1024);
  sf_layout<16>(384, 512);
  sf_layout<32>(128, 2048);
  sf_layout<32>(512, 256);
  std::printf("tcgen05_desc: %ld comparisons with CUTLASS 4.2, %ld mismatches\n", checked, bad);
  return bad || checked < 10000 ? 1 : 0;
}
