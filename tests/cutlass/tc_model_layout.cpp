// tc_model_layout.cpp — the functional model of the tcgen05 instructions (tests/emu/tc_model.h) against CUTLASS 4.2
// (a test-only dependency: the nvidia-cutlass wheel's headers, fetched from PyPI by the build into build/deps/cutlass;
// no CUTLASS code is in fourbit's kernels). tcgen05_desc.cpp checks fb_tcgen05.h's encoders; this program checks the
// model itself, so that it is not only the kernels' own belief. The model runs on the CPU only: none of it, nor the
// tcgen05 GEMMs it runs (templates/gemm_sm100.cuh), has run on a Blackwell GPU; CuTe's layouts are CUTLASS's reading of
// the same PTX ISA text, a second opinion, not hardware.
//  1. The smem operand layout. For a grid of (element: BF16, E4M3, E2M1; K- / MN-major; no swizzle, 32B, 64B, 128B;
//     rows 32, 64, 128, 256 (M of A, N of B); K tile 64, 128, 256 bytes; the atoms tiled MN-first (CuTe's tile_to_shape
//     default) or K-first) the tile is CuTe's canonical one: tile_to_shape(UMMA::Layout_{K,MN}_{INTER,SW32,SW64,
//     SW128}_Atom<T>, (rows, K)). Each MMA's K block (32 bytes: 16 BF16, 32 E4M3, 64 E2M1) gets CuTe's descriptor the
//     way CUTLASS's MMA does (make_tensor<UMMA::smem_desc<Major>> over the tile divided into MMA blocks:
//     make_umma_desc's LBO / SBO / layout, the block's start address from the descriptor iterator); fb_tcgen05.h's
//     encoder (fb_tc_sdesc with our own layout code, base offset 0 as the kernels pass it) must give the same 64 bits
//     (CuTe's base offset is 0 at every MMA start here); the model
//     decodes it (tc::decode_sdesc) and tc::operand_addr's byte address (and, for E2M1, the nibble) of every (row, k)
//     of the block must equal CuTe's: the atom's layout at (row, k) in elements, to bytes, through the atom's byte
//     swizzle Swizzle<B,4,3> (cross-checked with CuTe's own as_position_independent_swizzle_layout). Where fourbit
//     places tiles itself (gemm_sm100.cuh: K-major swizzled, boxes MN-first; test_tc_model's plan_operand: K-major
//     unswizzled MN-first, MN-major K-first) its start / LBO / SBO rules must equal CuTe's descriptors. And the
//     K = 96 E2M1 form (sm_103a): 48-byte MMAs over a 384-byte K-major SW128 stage row in the absolute-LBO mode, as
//     gemm_sm100.cuh issues them, read by the model against CuTe's layout of that tile.
//     The swizzle 128B_BASE32B (Layout_MN_SW128_32B_Atom) is not compared: the model does not model it (an MMA with
//     layout code 1 is reported as unmodelled).
//  2. The model's decoders against CUTLASS's bitfield structs directly: descriptors built field by field in
//     UMMA::SmemDescriptor, UMMA::InstrDescriptor and UMMA::InstrDescriptorBlockScaled (every value of every field,
//     and random combinations), decoded by tc::decode_sdesc / tc::decode_idesc, field against field; every bit that
//     CUTLASS's SmemDescriptor leaves unnamed (reserved) makes the model's decode invalid.
//  3. Self-tests, in the same run: the layout check run again with a deliberate error (the descriptor's layout code
//     SW64 <-> SW128, LBO + 16 bytes, SBO + 16 bytes, or a local copy of the model's mapping with the 32B and 64B
//     swizzles swapped) must report mismatches in every case the error touches; otherwise the check could pass
//     vacuously. Exit 0 when everything agrees and every self-test is caught, 1 otherwise.
#include <cute/arch/mma_sm100_desc.hpp>
#include <cute/atom/mma_traits_sm100.hpp>
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <random>

#include "emu/tc_model.h"
#include "fb_tcgen05.h"

namespace tc = fbemu::tc;

static long checked = 0, bad = 0;
static bool quiet_bad = false; /* the self-tests: mismatches expected, counted per case, not printed */
static long case_bad = 0;
static void report(unsigned long long ours, unsigned long long theirs, const char *what, const char *cs, int r, int k) {
  ++checked;
  if (ours == theirs) return;
  ++case_bad;
  if (quiet_bad) return;
  if (++bad <= 25) std::printf("  MISMATCH %s: model/fourbit 0x%llx, CuTe/CUTLASS 0x%llx [%s] (row %d, k %d)\n", what, ours, theirs, cs, r, k);
}
#define EXPECT_EQ(ours, theirs, what, cs, r, k) report((unsigned long long)(ours), (unsigned long long)(theirs), what, cs, r, k)

/* On the host CuTe's cast_smem_ptr_to_uint prints "ERROR: cast_smem_ptr_to_uint not supported but used." and takes the
   start address as 0 (the block offsets the descriptor iterator adds are right; the base is added below). */
struct Quiet {
  int fd;
  Quiet() { std::fflush(stdout), fd = dup(1), dup2(open("/dev/null", O_WRONLY), 1); }
  ~Quiet() { std::fflush(stdout), dup2(fd, 1), close(fd); }
};

/* ---- 1. the operand layout ----------------------------------------------------------------------------------- */
enum Mut { MUT_NONE, MUT_SWAP_LAYOUT, MUT_LBO, MUT_SBO, MUT_LOCAL_SWAP, MUT_N };
static const char *mut_name[MUT_N] = {"none", "descriptor layout code SW64 <-> SW128", "LBO + 16 bytes", "SBO + 16 bytes",
                                      "a local copy of operand_addr with the 32B and 64B swizzles swapped"};
static long mut_cases[MUT_N], mut_caught[MUT_N];

/* A line-for-line copy of tc::operand_addr (relative LBO mode), with the swizzle spans of 32B and 64B swapped when
   `swap`: the self-test's wrong mapping. Unswapped, it must equal the model (checked below), so that the self-test
   exercises the mapping the model has. */
static unsigned mapping_copy(const tc::Sdesc &s, int mn_major, unsigned ebits, unsigned r, unsigned k, bool swap) {
  unsigned S = tc::swizzle_span(s.layout), a;
  if (swap) S = S == 32 ? 64 : S == 64 ? 32 : S;
  if (!mn_major) {
    unsigned kb = k * ebits / 8;
    a = !S ? s.start + (r / 8) * s.sbo + (r % 8) * 16 + (kb / 16) * s.lbo + kb % 16 : s.start + (r / 8) * s.sbo + (r % 8) * S + kb;
  } else {
    unsigned eb = ebits / 8;
    a = !S ? s.start + (r % (16 / eb)) * eb + (r / (16 / eb)) * s.sbo + (k % 8) * 16 + (k / 8) * s.lbo
           : s.start + (r % (S / eb)) * eb + (r / (S / eb)) * s.lbo + (k % 8) * S + (k / 8) * s.sbo;
  }
  return S ? a ^ (((a >> 7) & (S / 16 - 1)) << 4) : a;
}

template <class T, bool MN, int SW> auto atom() {
  using namespace cute;
  if constexpr (!MN) {
    if constexpr (SW == 0) return UMMA::Layout_K_INTER_Atom<T>{};
    else if constexpr (SW == 32) return UMMA::Layout_K_SW32_Atom<T>{};
    else if constexpr (SW == 64) return UMMA::Layout_K_SW64_Atom<T>{};
    else return UMMA::Layout_K_SW128_Atom<T>{};
  } else {
    if constexpr (SW == 0) return UMMA::Layout_MN_INTER_Atom<T>{};
    else if constexpr (SW == 32) return UMMA::Layout_MN_SW32_Atom<T>{};
    else if constexpr (SW == 64) return UMMA::Layout_MN_SW64_Atom<T>{};
    else return UMMA::Layout_MN_SW128_Atom<T>{};
  }
}
static int layout_code(int sw) { return sw == 0 ? FB_TC_SW_NONE : sw == 32 ? FB_TC_SW32 : sw == 64 ? FB_TC_SW64 : FB_TC_SW128; }

static const uint32_t kBase = 0x6400; /* the tile's shared address: 1024-aligned (the swizzle repeat), not 0 */
static long layout_cases = 0, elems_checked = 0, desc_checked = 0, rule_checked = 0, cute_self = 0;

/* One tile: T elements, K- or MN-major, swizzle SW bytes (0: none), R rows, a K tile of KTB bytes, atoms K-first or
   MN-first. Returns the mismatches of this case. */
template <class T, bool MN, int SW, int R, int KTB, bool KF> void layout_case(int mut) {
  using namespace cute;
  constexpr int eb = sizeof_bits<T>::value, KT = KTB * 8 / eb, KMMA = 256 / eb; /* an MMA reads 32 bytes of K */
  auto A = atom<T, MN, SW>();
  auto L = [&] {
    if constexpr (KF) return tile_to_shape(A, Shape<Int<R>, Int<KT>>{}, Step<_2, _1>{});
    else return tile_to_shape(A, Shape<Int<R>, Int<KT>>{});
  }();
  auto pi = as_position_independent_swizzle_layout(L); /* CuTe's element-unit view of the same layout */
  auto tiles = zipped_divide(make_tensor(make_smem_ptr((T *)nullptr), L), Shape<Int<R>, Int<KMMA>>{});
  auto descs = [&] {
    Quiet q;
    return make_tensor<UMMA::smem_desc<MN ? UMMA::Major::MN : UMMA::Major::K>>(tiles);
  }();
  char cs[160];
  std::snprintf(cs, sizeof cs, "%s-bit %s-major %s, %d rows, K tile %d bytes, atoms %s-first", eb == 16 ? "16" : eb == 8 ? "8" : "4",
                MN ? "MN" : "K", SW ? (SW == 32 ? "SW32" : SW == 64 ? "SW64" : "SW128") : "no swizzle", R, KTB, KF ? "K" : "MN");
  const bool applies = mut == MUT_SWAP_LAYOUT ? SW >= 64
                       : mut == MUT_LOCAL_SWAP ? SW == 32 || SW == 64
                       : mut == MUT_SBO        ? true
                       : mut == MUT_LBO        ? (SW == 0 || (MN && R * eb / 8 > SW)) /* the LBO is read */
                                               : false;
  if (mut != MUT_NONE && !applies) return;
  case_bad = 0;
  for (int j = 0; j < KT / KMMA; ++j) {
    UMMA::SmemDescriptor d = descs(0, make_coord(0, j));
    d.start_address_ = uint16_t(d.start_address_ + (kBase >> 4));
    const uint32_t start = uint32_t(d.start_address_) << 4, lbo = uint32_t(d.leading_byte_offset_) << 4,
                   sbo = uint32_t(d.stride_byte_offset_) << 4;
    const int lc = layout_code(SW);
    uint64_t ours = fb_tc_sdesc(start, lbo, sbo, lc, 0, 0); /* base offset 0, as every kernel passes it */
    if (mut == MUT_NONE) {
      EXPECT_EQ(ours, uint64_t(d), "fb_tc_sdesc vs make_umma_desc", cs, -1, j), ++desc_checked;
      /* (with base offset 0 in ours, the equality above says CuTe encodes 0 at every MMA start of these aligned tiles, a
         K block advanced inside a pattern too: fb_tc_base_offset took (start >> 7) & 7 there and was removed) */
      /* fourbit's own placement rules, where it places such tiles */
      if (SW && !MN && !KF) { /* gemm_sm100.cuh: MMA j at box j / (SW / 32), byte 32 (j % (SW / 32)); LBO 16, SBO 8 SW */
        const int x = j / (SW / 32), o = 32 * (j % (SW / 32));
        EXPECT_EQ(fb_tc_sdesc(kBase + x * R * SW + o, 16, 8 * SW, lc, 0, 0), uint64_t(d), "gemm_sm100.cuh's descriptor", cs, -1, j);
        ++rule_checked;
      }
      if (!SW && !MN && !KF) /* test_tc_model plan_operand: LBO R 16, SBO 128, a step of 2 LBO */
        EXPECT_EQ(fb_tc_sdesc(kBase + j * 2 * R * 16, R * 16, 128, lc, 0, 0), uint64_t(d), "plan_operand's K-major descriptor", cs, -1, j),
            ++rule_checked;
      if (MN && KF) { /* test_tc_model plan_operand, MN-major: none LBO 128, SBO K 16; swizzled LBO K S, SBO 8 S */
        /* one atom of MN (rows x element = SW bytes): the LBO is not read, CuTe leaves it 0 */
        const uint32_t mn_lbo = R * eb / 8 > SW ? KT * SW : lbo;
        const uint64_t want = SW ? fb_tc_sdesc(kBase + j * KMMA * SW, mn_lbo, 8 * SW, lc, 0, 0)
                                 : fb_tc_sdesc(kBase + j * KMMA / 8 * 128, 128, KT * 16, lc, 0, 0);
        EXPECT_EQ(want, uint64_t(d), "plan_operand's MN-major descriptor", cs, -1, j), ++rule_checked;
      }
    }
    if (mut == MUT_SWAP_LAYOUT) ours = (ours & ~(7ull << 61)) | uint64_t(SW == 64 ? FB_TC_SW128 : FB_TC_SW64) << 61;
    if (mut == MUT_LBO) ours += 1ull << 16;
    if (mut == MUT_SBO) ours += 1ull << 32;
    const tc::Sdesc s = tc::decode_sdesc(ours);
    if (mut == MUT_NONE) { /* the model's decoder on CuTe's descriptor, field by field */
      EXPECT_EQ(s.start, start, "decode_sdesc start", cs, -1, j), EXPECT_EQ(s.lbo, lbo, "decode_sdesc LBO", cs, -1, j);
      EXPECT_EQ(s.sbo, sbo, "decode_sdesc SBO", cs, -1, j), EXPECT_EQ(s.layout, d.layout_type_, "decode_sdesc layout", cs, -1, j);
      EXPECT_EQ(s.version, d.version_, "decode_sdesc version", cs, -1, j), EXPECT_EQ(s.base_off, d.base_offset_, "decode_sdesc base", cs, -1, j);
      EXPECT_EQ(s.lbo_abs, d.lbo_mode_, "decode_sdesc LBO mode", cs, -1, j), EXPECT_EQ(s.rsv, 0, "decode_sdesc reserved", cs, -1, j);
    }
    for (int r = 0; r < R; ++r)
      for (int k = 0; k < KMMA; ++k) {
        const int e = int(L.layout_b()(r, j * KMMA + k)); /* CuTe: element offset, unswizzled */
        const uint32_t cute_byte = kBase + uint32_t(L.layout_a()(e * eb / 8));
        unsigned model = mut == MUT_LOCAL_SWAP ? mapping_copy(s, MN, eb, r, k, true) : tc::operand_addr(s, MN, eb, r, k);
        EXPECT_EQ(model, cute_byte, "operand_addr", cs, r, j * KMMA + k);
        if (eb == 4) EXPECT_EQ(k % 2, e % 2, "E2M1 nibble", cs, r, j * KMMA + k); /* the model: the even k the low nibble */
        if (mut == MUT_NONE) {
          ++elems_checked;
          EXPECT_EQ(mapping_copy(s, MN, eb, r, k, false), model, "the self-test's copy of operand_addr", cs, r, k);
          /* CuTe against itself: the swizzle applied in element units (its position-independent form) */
          const int pe = int(pi(r, j * KMMA + k));
          if (eb >= 8) EXPECT_EQ(cute_byte, kBase + uint32_t(pe * eb / 8), "CuTe's position-independent layout", cs, r, k), ++cute_self;
          else EXPECT_EQ((cute_byte - kBase) * 2 + e % 2, uint32_t(pe), "CuTe's position-independent layout", cs, r, k), ++cute_self;
        }
      }
  }
  ++layout_cases;
  if (mut != MUT_NONE) {
    ++mut_cases[mut];
    if (case_bad) ++mut_caught[mut];
    else std::printf("  SELF-TEST NOT CAUGHT (%s): %s\n", mut_name[mut], cs);
  }
}

template <class T, bool MN, int SW, int R, int KTB> void both_orders(int mut) {
  if constexpr (MN || KTB % (SW ? SW : 16) == 0) { /* K-major atoms span SW (or 16) bytes of K */
    layout_case<T, MN, SW, R, KTB, false>(mut);
    layout_case<T, MN, SW, R, KTB, true>(mut);
  }
}
template <class T, bool MN, int SW, int R> void k_tiles(int mut) {
  constexpr int eb = cute::sizeof_bits<T>::value;
  /* MN-major atoms span (SW or 16 bytes) of MN: the rows must fill whole atoms */
  if constexpr (!MN || R * eb / 8 % (SW ? SW : 16) == 0) {
    both_orders<T, MN, SW, R, 64>(mut);
    both_orders<T, MN, SW, R, 128>(mut);
    both_orders<T, MN, SW, R, 256>(mut);
  }
}
template <class T, bool MN, int SW> void rows(int mut) {
  k_tiles<T, MN, SW, 32>(mut), k_tiles<T, MN, SW, 64>(mut), k_tiles<T, MN, SW, 128>(mut), k_tiles<T, MN, SW, 256>(mut);
}
template <class T, bool MN> void swizzles(int mut) { rows<T, MN, 0>(mut), rows<T, MN, 32>(mut), rows<T, MN, 64>(mut), rows<T, MN, 128>(mut); }
static void layout_grid(int mut) {
  swizzles<cutlass::bfloat16_t, false>(mut), swizzles<cutlass::bfloat16_t, true>(mut);
  swizzles<cutlass::float_e4m3_t, false>(mut), swizzles<cutlass::float_e4m3_t, true>(mut);
  swizzles<cutlass::float_e2m1_t, false>(mut); /* FP4 is K-major only (the ISA; the model reports MN-major FP4) */
}

/* K = 96 (sm_103a, kind::mxf4nvf4): MMA j of a 384-byte K-major SW128 stage row (three 128-byte boxes of R rows) starts at
   byte 48 j; one whose 48 bytes cross its box's 128-byte row takes the rest from the next box by the absolute LBO, as
   gemm_sm100.cuh issues it (TCK_K96). The model's reading of that mode is [unverified]; CuTe's layout of the tile says
   where CUTLASS's sm103 mainloop, which issues the same descriptors (tcgen05_desc.cpp), expects each element. */
template <int R> static void k96_case() {
  using namespace cute;
  using T = cutlass::float_e2m1_t;
  auto L = tile_to_shape(UMMA::Layout_K_SW128_Atom<T>{}, Shape<Int<R>, Int<768>>{});
  char cs[96];
  std::snprintf(cs, sizeof cs, "K = 96 E2M1 K-major SW128 absolute LBO, %d rows, K tile 384 bytes", R);
  for (int j = 0; j < 8; ++j) {
    const int x = 48 * j / 128, o = 48 * j % 128, nx = o + 48 > 128 ? x + 1 : x;
    const tc::Sdesc s = tc::decode_sdesc(fb_tc_sdesc(kBase + x * R * 128 + o, kBase + nx * R * 128, 1024, FB_TC_SW128, 0, 1));
    for (int r = 0; r < R; ++r)
      for (int k = 0; k < 96; ++k) {
        const int e = int(L.layout_b()(r, 96 * j + k));
        EXPECT_EQ(tc::operand_addr(s, 0, 4, r, k), kBase + uint32_t(L.layout_a()(e / 2)), "operand_addr (K = 96)", cs, r, 96 * j + k);
        EXPECT_EQ(k % 2, e % 2, "E2M1 nibble (K = 96)", cs, r, 96 * j + k);
        ++elems_checked;
      }
  }
  ++layout_cases;
}

/* ---- 2. the decoders against CUTLASS's bitfield structs ---------------------------------------------------- */
static long dec_checked = 0;
static void sdesc_decoder() {
  using namespace cute;
  std::mt19937_64 g(19);
  auto one = [&](unsigned a, unsigned l, unsigned s, unsigned v, unsigned bo, unsigned m, unsigned lt) {
    UMMA::SmemDescriptor d;
    d.desc_ = 0;
    d.start_address_ = uint16_t(a), d.leading_byte_offset_ = uint16_t(l), d.stride_byte_offset_ = uint16_t(s), d.version_ = uint16_t(v);
    d.base_offset_ = uint8_t(bo), d.lbo_mode_ = uint8_t(m), d.layout_type_ = uint8_t(lt);
    const tc::Sdesc x = tc::decode_sdesc(uint64_t(d));
    char cs[64];
    std::snprintf(cs, sizeof cs, "SmemDescriptor 0x%016llx", (unsigned long long)uint64_t(d));
    EXPECT_EQ(x.start, unsigned(d.start_address_) * 16, "decode_sdesc start", cs, -1, -1);
    EXPECT_EQ(x.lbo, unsigned(d.leading_byte_offset_) * 16, "decode_sdesc LBO", cs, -1, -1);
    EXPECT_EQ(x.sbo, unsigned(d.stride_byte_offset_) * 16, "decode_sdesc SBO", cs, -1, -1);
    EXPECT_EQ(x.version, d.version_, "decode_sdesc version", cs, -1, -1);
    EXPECT_EQ(x.base_off, d.base_offset_, "decode_sdesc base offset", cs, -1, -1);
    EXPECT_EQ(x.lbo_abs, d.lbo_mode_, "decode_sdesc LBO mode", cs, -1, -1);
    EXPECT_EQ(x.layout, d.layout_type_, "decode_sdesc layout", cs, -1, -1);
    EXPECT_EQ(x.rsv, 0, "decode_sdesc reserved bits", cs, -1, -1);
    dec_checked += 8;
  };
  /* every value of each field (14-bit fields: every value), the others random; then random combinations */
  for (unsigned f = 0; f < 7; ++f) {
    const unsigned n = f < 3 ? 1u << 14 : f == 3 ? 4 : f == 4 ? 8 : f == 5 ? 2 : 8;
    for (unsigned v = 0; v < n; ++v)
      for (int rep = 0; rep < (n > 8 ? 2 : 256); ++rep) {
        unsigned w[7] = {unsigned(g() & 0x3FFF), unsigned(g() & 0x3FFF), unsigned(g() & 0x3FFF), unsigned(g() & 3),
                         unsigned(g() & 7),      unsigned(g() & 1),      unsigned(g() & 7)};
        w[f] = v;
        one(w[0], w[1], w[2], w[3], w[4], w[5], w[6]);
      }
  }
  for (int i = 0; i < 100000; ++i) one(g() & 0x3FFF, g() & 0x3FFF, g() & 0x3FFF, g() & 3, g() & 7, g() & 1, g() & 7);
  /* the bits CUTLASS names: every field at its maximum; each other bit set on a valid descriptor must make the model's
     decode invalid (a reserved bit, or a version other than 1) */
  UMMA::SmemDescriptor all;
  all.desc_ = 0;
  all.start_address_ = 0x3FFF, all.leading_byte_offset_ = 0x3FFF, all.stride_byte_offset_ = 0x3FFF, all.version_ = 3;
  all.base_offset_ = 7, all.lbo_mode_ = 1, all.layout_type_ = 7;
  const uint64_t named = uint64_t(all), valid = fb_tc_sdesc(0x2000, 16, 1024, FB_TC_SW128, 0, 0);
  int reserved = 0;
  for (int b = 0; b < 64; ++b)
    if (!(named >> b & 1)) {
      const tc::Sdesc x = tc::decode_sdesc(valid | 1ull << b);
      char cs[64];
      std::snprintf(cs, sizeof cs, "SmemDescriptor reserved bit %d", b);
      EXPECT_EQ(x.rsv != 0 || x.version != 1, 1, "decode_sdesc flags a bit CUTLASS leaves unnamed", cs, -1, -1);
      ++reserved, ++dec_checked;
    }
  std::printf("  smem descriptor: %d bits CUTLASS leaves unnamed, each flagged by the model's decoder\n", reserved);
}

static void idesc_decoder() {
  using namespace cute;
  std::mt19937_64 g(23);
  /* plain kinds: sparse_id2, sparse_flag, saturate, c_format, a_format, b_format, a_negate, b_negate, a_major, b_major,
     n_dim, m_dim, max_shift */
  static const unsigned pw[13] = {2, 1, 1, 2, 3, 3, 1, 1, 1, 1, 6, 5, 2};
  auto plain = [&](const unsigned *w) {
    UMMA::InstrDescriptor p;
    p.desc_ = 0;
    p.sparse_id2_ = w[0], p.sparse_flag_ = w[1], p.saturate_ = w[2], p.c_format_ = w[3], p.a_format_ = w[4], p.b_format_ = w[5];
    p.a_negate_ = w[6], p.b_negate_ = w[7], p.a_major_ = w[8], p.b_major_ = w[9], p.n_dim_ = w[10], p.m_dim_ = w[11];
    p.max_shift_ = w[12];
    const tc::Idesc x = tc::decode_idesc(uint32_t(p));
    char cs[64];
    std::snprintf(cs, sizeof cs, "InstrDescriptor 0x%08x", uint32_t(p));
    EXPECT_EQ(x.sparse_sel, p.sparse_id2_, "decode_idesc sparse id2", cs, -1, -1);
    EXPECT_EQ(x.sparse, p.sparse_flag_, "decode_idesc sparse", cs, -1, -1);
    EXPECT_EQ(x.sat, p.saturate_, "decode_idesc saturate", cs, -1, -1);
    EXPECT_EQ(x.d_fmt_or_bsf, p.c_format_, "decode_idesc D format", cs, -1, -1);
    EXPECT_EQ(x.a_fmt, p.a_format_, "decode_idesc A format", cs, -1, -1);
    EXPECT_EQ(x.b_fmt, p.b_format_, "decode_idesc B format", cs, -1, -1);
    EXPECT_EQ(x.neg_a, p.a_negate_, "decode_idesc negate A", cs, -1, -1);
    EXPECT_EQ(x.neg_b, p.b_negate_, "decode_idesc negate B", cs, -1, -1);
    EXPECT_EQ(x.a_mn, p.a_major_, "decode_idesc A major", cs, -1, -1);
    EXPECT_EQ(x.b_mn, p.b_major_, "decode_idesc B major", cs, -1, -1);
    EXPECT_EQ(x.n, unsigned(p.n_dim_) * 8, "decode_idesc N", cs, -1, -1);
    EXPECT_EQ(x.m, unsigned(p.m_dim_) * 16, "decode_idesc M", cs, -1, -1);
    EXPECT_EQ(x.ws, p.max_shift_, "decode_idesc max shift", cs, -1, -1);
    EXPECT_EQ(x.bit6 | x.bit23 | (x.asf & 1), 0, "decode_idesc reserved bits 6, 23, 29", cs, -1, -1);
    dec_checked += 14;
  };
  /* block-scaled kinds: sparse_id2, sparse_flag, b_sf_id, a_format, b_format, a_negate, b_negate, a_major, b_major, n_dim,
     scale_format, m_dim, a_sf_id, k_size */
  static const unsigned bw[14] = {2, 1, 2, 3, 3, 1, 1, 1, 1, 6, 1, 5, 2, 1};
  auto scaled = [&](const unsigned *w) {
    UMMA::InstrDescriptorBlockScaled s;
    s.desc_ = 0;
    s.sparse_id2_ = w[0], s.sparse_flag_ = w[1], s.b_sf_id_ = w[2], s.a_format_ = w[3], s.b_format_ = w[4], s.a_negate_ = w[5];
    s.b_negate_ = w[6], s.a_major_ = w[7], s.b_major_ = w[8], s.n_dim_ = w[9], s.scale_format_ = w[10], s.m_dim_ = w[11];
    s.a_sf_id_ = w[12], s.k_size_ = w[13];
    const tc::Idesc x = tc::decode_idesc(uint32_t(s));
    char cs[64];
    std::snprintf(cs, sizeof cs, "InstrDescriptorBlockScaled 0x%08x", uint32_t(s));
    EXPECT_EQ(x.sparse_sel, s.sparse_id2_, "decode_idesc sparse id2", cs, -1, -1);
    EXPECT_EQ(x.sparse, s.sparse_flag_, "decode_idesc sparse", cs, -1, -1);
    EXPECT_EQ(x.d_fmt_or_bsf, s.b_sf_id_, "decode_idesc B scale-factor id", cs, -1, -1);
    EXPECT_EQ(x.a_fmt, s.a_format_, "decode_idesc A format", cs, -1, -1);
    EXPECT_EQ(x.b_fmt, s.b_format_, "decode_idesc B format", cs, -1, -1);
    EXPECT_EQ(x.neg_a, s.a_negate_, "decode_idesc negate A", cs, -1, -1);
    EXPECT_EQ(x.neg_b, s.b_negate_, "decode_idesc negate B", cs, -1, -1);
    EXPECT_EQ(x.a_mn, s.a_major_, "decode_idesc A major", cs, -1, -1);
    EXPECT_EQ(x.b_mn, s.b_major_, "decode_idesc B major", cs, -1, -1);
    EXPECT_EQ(x.n, unsigned(s.n_dim_) * 8, "decode_idesc N", cs, -1, -1);
    EXPECT_EQ(x.bit23, s.scale_format_, "decode_idesc scale format", cs, -1, -1);
    EXPECT_EQ(x.m, unsigned(s.m_dim_) * 16, "decode_idesc M", cs, -1, -1);
    EXPECT_EQ(x.asf, s.a_sf_id_, "decode_idesc A scale-factor id", cs, -1, -1);
    EXPECT_EQ(x.k96, s.k_size_, "decode_idesc K size", cs, -1, -1);
    EXPECT_EQ(x.sat | x.bit6, 0, "decode_idesc reserved bits 3, 6", cs, -1, -1);
    dec_checked += 15;
  };
  auto grid = [&](const unsigned *widths, int nf, auto &&fn) {
    unsigned w[16];
    for (int f = 0; f < nf; ++f)
      for (unsigned v = 0; v < 1u << widths[f]; ++v)
        for (int rep = 0; rep < 64; ++rep) {
          for (int i = 0; i < nf; ++i) w[i] = unsigned(g()) & ((1u << widths[i]) - 1);
          w[f] = v;
          fn(w);
        }
    for (int i = 0; i < 100000; ++i) {
      for (int j = 0; j < nf; ++j) w[j] = unsigned(g()) & ((1u << widths[j]) - 1);
      fn(w);
    }
  };
  grid(pw, 13, plain);
  grid(bw, 14, scaled);
}

int main() {
  /* the decoders */
  long c0 = checked;
  sdesc_decoder();
  idesc_decoder();
  std::printf("  decoders: %ld field comparisons of tc::decode_sdesc / decode_idesc with CUTLASS's SmemDescriptor, "
              "InstrDescriptor and InstrDescriptorBlockScaled\n", checked - c0);
  /* the operand layout */
  c0 = checked;
  layout_grid(MUT_NONE);
  k96_case<128>(), k96_case<256>();
  std::printf("  operand layout: %ld cases, %ld MMA descriptors (fb_tc_sdesc = make_umma_desc, decoded field by field), %ld of "
              "them against fourbit's placement rules, %ld (row, k) elements through tc::operand_addr = CuTe's layout; %ld "
              "comparisons in all\n", layout_cases, desc_checked, rule_checked, elems_checked, checked - c0);
  std::printf("  (and %ld elements of CuTe's byte-swizzled layout against its own position-independent form)\n", cute_self);
  const long real_bad = bad, real_checked = checked;
  /* the self-tests: each must be caught in every case it touches */
  bool selftest_ok = true;
  quiet_bad = true;
  for (int m = MUT_SWAP_LAYOUT; m < MUT_N; ++m) {
    layout_grid(m);
    std::printf("  self-test (%s): caught in %ld of %ld cases\n", mut_name[m], mut_caught[m], mut_cases[m]);
    if (!mut_cases[m] || mut_caught[m] != mut_cases[m]) selftest_ok = false;
  }
  std::printf("tc_model_layout: %ld comparisons of the model with CUTLASS 4.2, %ld mismatches; self-tests %s\n", real_checked,
              real_bad, selftest_ok ? "all caught" : "NOT ALL CAUGHT");
  return real_bad || !selftest_ok || real_checked < 1000000 ? 1 : 0;
}
