/* tc_model.h — a functional model of the Blackwell (sm_100a / sm_103a) instructions templates/fb_tc_ops.h wraps,
 * for kernels compiled as host C++ under the warp emulator (emu_core.h; include this after it, in one C++ file of
 * a program). Written from the PTX ISA and the fact sheet (docs/hardware.md, docs/tc_model.md); run under the
 * functional model, never on a Blackwell GPU, so nothing here has been checked against hardware.
 *
 * Per CTA: the dynamic shared memory (the shared::cta window; cluster addresses are rank << 24 | offset, so that
 * CUTLASS's peer mask 0xFEFFFFFF names the even CTA), mbarriers (keyed by their shared address: count, pending
 * arrivals, tx-count, completed phases), 128 lanes x 512 columns of TMEM with a column allocator. Async operations
 * (TMA loads, MMAs, tcgen05.cp, commits) are queued at issue and complete later, at a point the scheduler picks
 * (at random between rounds of the threads, or when every thread waits): a TMA load's bytes land in shared memory
 * and its complete_tx is signalled when it completes; an MMA reads its operands from shared memory and writes TMEM
 * when it completes; tcgen05 operations complete in issue order (one queue per cluster), a commit arrives on its
 * mbarrier when every tcgen05 operation issued before it completed. So a result is seen only through the protocol.
 *
 * Reported, never silently allowed (the launch returns the first message): a wait that can never complete (the
 * emulator's deadlock, with the barrier named by tc::deadlock_detail()); a tcgen05.ld of TMEM an MMA or cp writes
 * before the reading thread observed the commit's mbarrier phase (through its own wait, a __syncthreads or a
 * cluster barrier after another thread's) and then a tcgen05.fence::after_thread_sync; an MMA or cp overwriting
 * TMEM a thread read without an ordering to the issue (vector clocks over the cluster's threads); a TMA load into
 * shared memory an MMA or cp issued earlier may not have read yet; a warp's tcgen05.ld/st
 * outside its lane quarter (32 * (warp % 4) ..); an async read (MMA, cp) of shared memory that generic writes
 * changed after the last fence.proxy.async (a shadow copy of shared memory is the async proxy's view: refreshed
 * at every fence.proxy.async and by TMA writes, compared at every async read); an MMA or cp issued on shared
 * memory a TMA load still writes; descriptors or forms the model does not know (unmodelled, never guessed), and
 * sm_103a-only forms (K = 96) when the kernel runs as sm_100a (set_arch: the arch the emulated kernel stands for).
 * The descriptor's absolute-LBO mode (K = 96's 48-byte chunks split across 128-byte rows) is read as operand_addr
 * documents; K = 96 with cta_group::1 is taken as CUTLASS has it (M = 128) [unverified]. */
#ifndef FB_TC_MODEL_H
#define FB_TC_MODEL_H
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include <map>
#include <string>

#include "emu_core.h"
#include "fb_tmap_rec.h"

namespace fbemu {
namespace tc {

const unsigned kTmemLanes = 128, kTmemCols = 512;

/* ---- the tensor map: what cuTensorMapEncodeTiled takes, kept in the 128-byte CUtensorMap in the layout
 * tests/emu/fb_tmap_rec.h documents (the fake driver, tests/gpu/mock_libcuda.c, writes the same) ------------- */
typedef fbemu_tmap_rec TmapRec;
const uint32_t kTmapMagic = FBEMU_TMAP_MAGIC;
static_assert(sizeof(TmapRec) <= 128, "the record fits a CUtensorMap");

/* The model's cuTensorMapEncodeTiled: esize bytes per element, swizzle in bytes (0/32/64/128). 0, or a message
 * for what the driver would refuse (the rules of the CUDA driver API's cuTensorMapEncodeTiled). */
inline const char *encode_tmap(void *map128, unsigned esize, unsigned rank, const void *gaddr, const uint64_t *dims,
                               const uint64_t *strides, const uint32_t *box, const uint32_t *estr, unsigned interleave,
                               unsigned swizzle, unsigned oob_nan) {
  return fbemu_tmap_encode(map128, esize, rank, gaddr, dims, strides, box, estr, interleave, swizzle, oob_nan);
}

#ifdef __cuda_cuda_h__
/* With cuda.h: cuTensorMapEncodeTiled itself (its signature and enums), onto encode_tmap, for a host path that
 * fills fb_cu.TensorMapEncodeTiled (runtime/gemm_host.c's tmap()) when its kernels run under the model: the
 * emulated driver (tests/emu/driver.cpp) installs it and runs the tcgen05 GEMMs under the model (sm_90's wgmma and
 * mma.sync are not modelled: the tuner's worker leaves them unchecked there). */
inline CUresult encode_tmap_cu(CUtensorMap *m, CUtensorMapDataType t, cuuint32_t rank, void *g, const cuuint64_t *dims,
                               const cuuint64_t *strides, const cuuint32_t *box, const cuuint32_t *es, CUtensorMapInterleave il,
                               CUtensorMapSwizzle sw, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  (void)l2;
  static const unsigned size[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  if ((unsigned)t >= sizeof size / sizeof size[0] || (unsigned)sw > CU_TENSOR_MAP_SWIZZLE_128B) return CUDA_ERROR_NOT_SUPPORTED;
  static const unsigned swb[] = {0, 32, 64, 128};
  uint64_t d[5], st[4];
  for (unsigned i = 0; i < rank && i < 5; ++i) d[i] = dims[i], st[i < 4 ? i : 3] = i < rank - 1 ? strides[i] : 0;
  return encode_tmap(m, size[t], rank, g, d, st, box, es, (unsigned)il, swb[sw], oob == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA)
             ? CUDA_ERROR_INVALID_VALUE
             : CUDA_SUCCESS;
}
#endif

/* ---- the descriptors, decoded from the PTX ISA's bit tables (independently of fb_tcgen05.h; the test checks
 * that both read the same fields) --------------------------------------------------------------------------- */
struct Idesc {
  unsigned sparse_sel, sparse, sat, d_fmt_or_bsf, a_fmt, b_fmt, neg_a, neg_b, a_mn, b_mn, n, m, bit23, asf, k96, ws;
  unsigned bit6;
};
inline Idesc decode_idesc(uint32_t d) {
  Idesc r;
  r.sparse_sel = d & 3, r.sparse = d >> 2 & 1, r.sat = d >> 3 & 1, r.d_fmt_or_bsf = d >> 4 & 3, r.bit6 = d >> 6 & 1;
  r.a_fmt = d >> 7 & 7, r.b_fmt = d >> 10 & 7, r.neg_a = d >> 13 & 1, r.neg_b = d >> 14 & 1;
  r.a_mn = d >> 15 & 1, r.b_mn = d >> 16 & 1, r.n = (d >> 17 & 63) * 8, r.bit23 = d >> 23 & 1;
  r.m = (d >> 24 & 31) * 16, r.asf = d >> 29 & 3, r.k96 = d >> 31 & 1, r.ws = d >> 30 & 3;
  return r;
}
struct Sdesc {
  unsigned start, lbo, sbo, version, base_off, lbo_abs, layout, rsv;
};
inline Sdesc decode_sdesc(uint64_t d) {
  Sdesc r;
  r.start = (unsigned)(d & 0x3FFF) * 16, r.lbo = (unsigned)(d >> 16 & 0x3FFF) * 16, r.sbo = (unsigned)(d >> 32 & 0x3FFF) * 16;
  r.version = (unsigned)(d >> 46 & 7), r.base_off = (unsigned)(d >> 49 & 7), r.lbo_abs = (unsigned)(d >> 52 & 1);
  r.layout = (unsigned)(d >> 61 & 7);
  r.rsv = (unsigned)((d >> 14 & 3) | (d >> 30 & 3) << 2 | (d >> 53 & 0xFF) << 4);
  return r;
}

/* The byte address of element (row r, k) of an MMA operand (row = M for A, N for B) with `ebits` bits an element,
 * per the canonical layouts of the PTX ISA's shared-memory matrix descriptor, in 16-byte units T:
 *   K-major  none: ((8,m),(T,2k)):((1T,SBO),(1,LBO))      swizzled (span S): ((8,m),(T,S/16)):((S/16 T,SBO),(1,T))
 *   MN-major none: ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO))   swizzled: ((T,S/16,m),(8,k)):((1,T,LBO),(S/16 T,SBO))
 * then the swizzle on the address itself: bits [4, 4+b) ^= bits [7, 7+b), b = log2(S/16) (Swizzle<b,4,3>).
 * For FP4 the byte holding the element; its nibble is k % 2 (K-major only).
 * The LBO mode (descriptor bit 52; PTX ISA 9.7.16.3.1: 0 a relative byte offset, 1 an absolute byte address). In the
 * absolute mode the LBO field is the address of a second chunk: a K of 48 bytes would overflow the 128-byte boundary if
 * packed contiguously, so the mode splits it into two chunks, each within an aligned 128-byte boundary, the LBO pointing
 * at the second (9.7.16.3.1.2, paraphrased); only with the 128-byte swizzle, K-major operands and a base offset of 0
 * (9.7.16.3.1.2.1).
 * The model's reading [unverified: the text does not say where the split falls nor how the second chunk's rows are
 * placed]: a row's K bytes up to the end of its 128-byte row come from the start address, the rest (start % 128 + kb -
 * 128 on) from the LBO address, at the same row offsets ((r % 8) 128 + (r / 8) SBO) and the same swizzle of the address;
 * a chunk that does not cross leaves the LBO unused. That is CUTLASS's use (SM103::mma_unpack: the next 128-byte K slice
 * of the stage, its start address as the LBO, every K = 96 MMA in this mode); e_mma reports the rest. */
inline unsigned swizzle_span(unsigned layout) { return layout == 2 ? 128 : layout == 4 ? 64 : layout == 6 ? 32 : 0; }
inline unsigned swizzle_addr(unsigned a, unsigned span) {
  return span ? a ^ (((a >> 7) & (span / 16 - 1)) << 4) : a;
}
inline unsigned operand_addr(const Sdesc &s, int mn_major, unsigned ebits, unsigned r, unsigned k) {
  unsigned S = swizzle_span(s.layout), a;
  if (!mn_major) {
    unsigned kb = k * ebits / 8;
    if (!S)
      a = s.start + (r / 8) * s.sbo + (r % 8) * 16 + (kb / 16) * s.lbo + kb % 16;
    else if (s.lbo_abs && s.start % S + kb >= S) /* the absolute-LBO mode: the bytes past the row's end, from the second chunk */
      a = s.lbo + (r / 8) * s.sbo + (r % 8) * S + (s.start % S + kb - S);
    else
      a = s.start + (r / 8) * s.sbo + (r % 8) * S + kb;
  } else {
    unsigned eb = ebits / 8, per16 = 16 / eb;
    if (!S)
      a = s.start + (r % per16) * eb + (r / per16) * s.sbo + (k % 8) * 16 + (k / 8) * s.lbo;
    else {
      unsigned perS = S / eb;
      a = s.start + (r % perS) * eb + (r / perS) * s.lbo + (k % 8) * S + (k / 8) * s.sbo;
    }
  }
  return swizzle_addr(a, S);
}

/* ---- element formats (OCP MX / IEEE), for the MMA's operands and scales ------------------------------------ */
inline double dec_e4m3(unsigned v) {
  unsigned s = v >> 7 & 1, e = v >> 3 & 15, m = v & 7;
  if (e == 15 && m == 7) return NAN;
  double x = e ? ldexp(1.0 + m / 8.0, (int)e - 7) : ldexp(m / 8.0, -6);
  return s ? -x : x;
}
inline double dec_e5m2(unsigned v) {
  unsigned s = v >> 7 & 1, e = v >> 2 & 31, m = v & 3;
  double x = e == 31 ? (m ? NAN : INFINITY) : e ? ldexp(1.0 + m / 4.0, (int)e - 15) : ldexp(m / 4.0, -14);
  return s ? -x : x;
}
inline double dec_e2m1(unsigned v) {
  static const double t[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return v & 8 ? -t[v & 7] : t[v & 7];
}
inline double dec_bf16(unsigned v) {
  uint32_t u = v << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline double dec_f16(unsigned v) {
  unsigned s = v >> 15 & 1, e = v >> 10 & 31, m = v & 1023;
  double x = e == 31 ? (m ? NAN : INFINITY) : e ? ldexp(1.0 + m / 1024.0, (int)e - 15) : ldexp(m / 1024.0, -14);
  return s ? -x : x;
}
inline double dec_ue8m0(unsigned v) { return v == 255 ? NAN : ldexp(1.0, (int)v - 127); }
inline double dec_ue4m3(unsigned v) { return dec_e4m3(v & 0x7F); }

/* ---- state ------------------------------------------------------------------------------------------------ */
const unsigned kMaxCta = 16; /* a cluster's CTAs at most (the non-portable cluster size) */
/* What a thread knows complete of the tcgen05 operations, per issuing CTA: the seq of the latest commit of that CTA
   whose arrival it observed. A commit covers the tcgen05 operations its own CTA issued before it (the ISA: the
   issuing thread's; the kernels here issue from one thread a CTA), never another CTA's: a peer's MMA is known
   complete only through a commit of the peer's that arrived on a barrier this thread waited on. Async operations are
   tagged seq << 4 | issuing CTA (tseq, aread). */
struct Know {
  unsigned long long c[kMaxCta];
  Know() { memset(c, 0, sizeof c); }
  void merge(const Know &o) {
    for (unsigned i = 0; i < kMaxCta; ++i) c[i] = std::max(c[i], o.c[i]);
  }
  bool done(unsigned long long tag) const { return (tag >> 4) <= c[tag & 15]; }
};
struct Bar {
  unsigned count, pending, phase; /* phase: completed phases */
  long long tx;
  Know acc, rel;                  /* knowledge arriving in this phase / released by completed ones */
  std::vector<uint32_t> vacc, vrel; /* the same for the threads' epochs (vector clocks) */
};
struct Cta {
  std::vector<uint8_t> mem, shadow_mem; /* 1024-aligned inside */
  uint8_t *smem, *shadow;
  std::vector<uint16_t> tma_pending;    /* per byte: TMA loads in flight writing it */
  std::map<unsigned, Bar> bars;
  std::vector<uint32_t> tmem;           /* lane * 512 + column */
  std::vector<unsigned long long> tseq; /* the async op writing that cell last (its tag), 0 none */
  std::vector<int> treader;             /* the thread that read the cell last since it was written, -1 none */
  std::vector<uint32_t> tepoch;         /* and that thread's epoch then */
  std::vector<uint8_t> tunwritten;      /* and whether nothing had written the cell then */
  std::vector<uint8_t> twritten;        /* an MMA, cp or st has written the cell */
  std::vector<unsigned long long> aread; /* per shared byte: the last MMA / cp issued to read it (its tag) */
  int col_owner[kTmemCols / 32];        /* allocation granules: -1 free, else the allocation's first granule */
  int col_len[kTmemCols / 32];
  bool relinquished;
  /* Remote accesses (another CTA's threads: an mbarrier arrive through mapa, a multicast TMA or commit, the pair's MMA
     and cp) must end before the CTA exits (CUDA: distributed shared memory accesses complete before the target exits;
     a cluster barrier orders them). racc[u]: thread u's epoch at its latest access to this CTA (0 none), rwhat[u] what
     it was; checked when the CTA's last thread exits. After that, any access is reported at once. */
  bool exited;
  std::vector<uint32_t> racc;
  std::vector<const char *> rwhat;
};
struct Th {
  Know known_sync, known; /* tcgen05 ops known complete: through a sync; after fence::after */
  bool ld_pending;
  unsigned elects, cgen;
  unsigned wait_bar, wait_parity;
  bool waiting;
};
enum { OP_TMA = 1, OP_MMA, OP_CP, OP_COMMIT };
struct Op {
  int type;
  unsigned long long seq;
  unsigned cta; /* the issuing CTA */
  std::vector<uint32_t> vc; /* a commit: its issuer's clock (the arrive's release); a TMA load: its issuer's epoch */
  /* TMA */
  std::vector<uint8_t> data;
  unsigned dst, bytes, mask, bar;
  /* MMA / cp */
  int kind;
  unsigned d, sfa, sfb, m, n, k;
  Idesc id;
  std::vector<unsigned> aaddr, baddr; /* per element (row-major: r * K + k): byte address */
  unsigned ebits_a, ebits_b;
  bool acc;
  uint64_t sdesc;
};

struct Model {
  unsigned nt = 0, csize = 1, smem_bytes = 0;
  std::vector<Cta> ctas;
  std::vector<Th> th;
  std::vector<Op> ops; /* in issue order */
  /* Vector clocks over the cluster's threads (write-after-read on TMEM): epoch[t] is thread t's, vs[t * T + u] the
     latest epoch of thread u that t synchronized with (waits, barriers), ve the same once t's
     tcgen05.fence::after_thread_sync made it usable for its tcgen05 operations. A thread's epoch advances at each
     release (an arrive, a barrier). */
  unsigned T = 0;
  std::vector<uint32_t> epoch, vs, ve;
  unsigned long long seq = 0;
  std::mt19937 rng{777};
  unsigned cl_arrived = 0, cl_gen = 0;
  int cg = 0; /* the kernel's .cta_group, from its first tcgen05 instruction */
  /* The arch the emulated kernel stands for (100: sm_100a, 103: sm_103a), set by the test with set_arch(): the
     kernel is host C++ here, compiled once, so nothing in it says which target the GPU build would have. sm_103a-only
     forms (K = 96) are reported under 100. Kept across launches. */
  unsigned arch = 100;
  std::string fault_msg, deadlock;
  unsigned long long stats_mma = 0, stats_tma = 0;
} M;

inline void fault(const char *fmt, ...) {
  if (!M.fault_msg.empty()) return;
  char b[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b, sizeof b, fmt, ap);
  va_end(ap);
  M.fault_msg = b;
  g_fault = M.fault_msg.c_str();
}
inline Th &me() { return M.th[cur]; }
/* The target the kernels launched from now on stand for: 100 (sm_100a, the default) or 103 (sm_103a). */
inline void set_arch(unsigned sm) { M.arch = sm; }
inline unsigned my_cta() { return threads[cur].cta; }
inline unsigned my_tid() { return threads[cur].tid; }

/* a shared address: the CTA and the byte offset, or false (reported) */
inline bool resolve(unsigned addr, unsigned len, unsigned *cta, unsigned *off, const char *what) {
  unsigned r = addr >> 24, o = addr & 0xFFFFFFu;
  if (r >= M.csize || (unsigned long long)o + len > M.smem_bytes) {
    fault("%s: shared address 0x%x (+%u bytes) is outside the cluster's shared memory (%u CTAs x %u bytes)", what, addr, len,
          M.csize, M.smem_bytes);
    return false;
  }
  *cta = r, *off = o;
  return true;
}

/* ---- mbarriers ---------------------------------------------------------------------------------------------- */
inline Bar *bar_at(unsigned addr, const char *what, unsigned *cta_out = NULL) {
  unsigned c, o;
  if (!resolve(addr, 8, &c, &o, what)) return NULL;
  if (o % 8) { fault("%s: mbarrier address 0x%x not 8-byte aligned", what, addr); return NULL; }
  auto it = M.ctas[c].bars.find(o);
  if (it == M.ctas[c].bars.end()) { fault("%s: no mbarrier was initialized at 0x%x", what, addr); return NULL; }
  if (cta_out) *cta_out = c;
  return &it->second;
}
inline void bar_try_complete(Bar *b) {
  if (b->pending == 0 && b->tx == 0) {
    ++b->phase, b->pending = b->count;
    b->rel.merge(b->acc), b->acc = Know();
    for (unsigned u = 0; u < M.T; ++u) b->vrel[u] = std::max(b->vrel[u], b->vacc[u]), b->vacc[u] = 0;
    ++progress;
  }
}
/* an arrive releases vc (T epochs: the arriving thread's knowledge, its own epoch included), or nothing (NULL) */
inline void bar_arrive(Bar *b, unsigned n, const Know &know, const char *what, const uint32_t *vc = NULL) {
  if (n > b->pending) { fault("%s: %u arrivals on an mbarrier phase that expects %u more", what, n, b->pending); return; }
  b->pending -= n, b->acc.merge(know);
  if (vc)
    for (unsigned u = 0; u < M.T; ++u) b->vacc[u] = std::max(b->vacc[u], vc[u]);
  if (b->pending == 0 && b->tx < 0) {
    /* complete_tx may precede the expect-tx within a phase (the tx-count goes negative for a while); once every
       arrival, and so every expect-tx, of the phase is in, more bytes than expected is an error */
    fault("%s: the last arrival of an mbarrier phase finds %lld bytes more completed than the phase's expect-tx "
          "announced (bytes the barrier did not expect: a multicast mask naming a CTA that does not wait for them?)",
          what, -b->tx);
    return;
  }
  bar_try_complete(b);
}
/* complete_tx of a TMA load (bytes < 0) on the barrier at `addr`; vc: the issuer's epoch (the load's writes are
   ordered before the phase's completion, so a waiter knows them) */
inline void bar_tx(Bar *b, long long bytes, unsigned addr, const uint32_t *vc = NULL) {
  b->tx += bytes;
  if (vc)
    for (unsigned u = 0; u < M.T; ++u) b->vacc[u] = std::max(b->vacc[u], vc[u]);
  if (b->pending == 0 && b->tx < 0) {
    fault("TMA load: complete_tx of %lld bytes on the mbarrier at 0x%x (CTA %u), whose phase has all its arrivals in and "
          "expected %lld bytes fewer: the barrier did not expect these bytes (a .multicast::cluster mask naming a CTA "
          "that does not wait for the load, or an expect-tx short of what lands)", -bytes, addr, addr >> 24, -b->tx);
    return;
  }
  bar_try_complete(b);
}

/* ---- async operations ----------------------------------------------------------------------------------------- */
inline void complete(size_t i);
inline bool tc_head(size_t i) { /* the first tcgen05 op in the queue (they complete in order) */
  for (size_t j = 0; j < i; ++j)
    if (M.ops[j].type != OP_TMA) return false;
  return true;
}
inline void round_hook() {
  for (size_t i = 0; i < M.ops.size();) {
    bool ok = M.ops[i].type == OP_TMA || tc_head(i);
    if (ok && (M.rng() & 3) == 0) {
      complete(i);
      M.ops.erase(M.ops.begin() + (long)i);
    } else
      ++i;
  }
}
inline bool idle_hook() {
  for (size_t i = 0; i < M.ops.size(); ++i)
    if (M.ops[i].type == OP_TMA || tc_head(i)) {
      complete(i);
      M.ops.erase(M.ops.begin() + (long)i);
      ++progress;
      return true;
    }
  /* a deadlock: name a barrier some thread waits on */
  for (size_t t = 0; t < M.th.size(); ++t)
    if (M.th[t].waiting && !threads[t].done) {
      char b[400];
      unsigned c = M.th[t].wait_bar >> 24, o = M.th[t].wait_bar & 0xFFFFFF;
      auto it = M.ctas[c].bars.find(o);
      if (it == M.ctas[c].bars.end()) continue;
      const Bar &x = it->second;
      snprintf(b, sizeof b,
               "thread %u of CTA %u waits on the mbarrier at 0x%x for the phase of parity %u, which can never complete "
               "(completed phases %u, arrivals pending %u of %u, tx-count %lld, no async operation in flight)",
               threads[t].tid, threads[t].cta, M.th[t].wait_bar, M.th[t].wait_parity, x.phase, x.pending, x.count, x.tx);
      M.deadlock = b;
      break;
    }
  /* and the other barriers waited on (up to 3 more), which may be the cause */
  std::vector<unsigned> seen;
  for (size_t t = 0; t < M.th.size() && !M.deadlock.empty() && seen.size() < 4; ++t)
    if (M.th[t].waiting && !threads[t].done && std::find(seen.begin(), seen.end(), M.th[t].wait_bar) == seen.end()) {
      seen.push_back(M.th[t].wait_bar);
      if (seen.size() == 1) continue; /* the one named above */
      unsigned c = M.th[t].wait_bar >> 24, o = M.th[t].wait_bar & 0xFFFFFF;
      auto it = M.ctas[c].bars.find(o);
      if (it == M.ctas[c].bars.end()) continue;
      char b[200];
      snprintf(b, sizeof b, "; also thread %u of CTA %u on 0x%x (parity %u; phases %u, pending %u of %u, tx-count %lld)",
               threads[t].tid, threads[t].cta, M.th[t].wait_bar, M.th[t].wait_parity, it->second.phase, it->second.pending,
               it->second.count, it->second.tx);
      M.deadlock += b;
    }
  return false;
}
/* threads lo..hi-1 meet at a barrier: their knowledge and epochs merge, then each one's epoch advances */
inline void meet(unsigned lo, unsigned hi) {
  Know k;
  for (unsigned t = lo; t < hi; ++t) k.merge(M.th[t].known_sync);
  std::vector<uint32_t> v(M.T, 0);
  for (unsigned t = lo; t < hi; ++t) {
    M.vs[(size_t)t * M.T + t] = M.epoch[t];
    for (unsigned u = 0; u < M.T; ++u) v[u] = std::max(v[u], M.vs[(size_t)t * M.T + u]);
  }
  for (unsigned t = lo; t < hi; ++t) {
    M.th[t].known_sync = k;
    for (unsigned u = 0; u < M.T; ++u) M.vs[(size_t)t * M.T + u] = std::max(M.vs[(size_t)t * M.T + u], v[u]);
    ++M.epoch[t];
  }
}
inline void barrier_hook(unsigned c) { meet(c * M.nt, (c + 1) * M.nt); } /* __syncthreads in CTA c */
/* the calling thread's clock for a release (its own epoch current), then its epoch advances */
inline const uint32_t *release_vc() {
  static std::vector<uint32_t> v;
  unsigned t = (unsigned)cur;
  v.assign(M.vs.begin() + (long)t * M.T, M.vs.begin() + (long)(t + 1) * M.T);
  v[t] = M.epoch[t]++;
  return v.data();
}
inline void acquire_vc(const Bar *b) {
  uint32_t *v = &M.vs[(size_t)cur * M.T];
  for (unsigned u = 0; u < M.T; ++u) v[u] = std::max(v[u], b->vrel[u]);
}

/* ---- remote accesses and the exit of a CTA ------------------------------------------------------------------ */
/* The current thread reaches CTA c (async operations: at their issue). Reported if c has exited; else kept (the
   thread's epoch now: what it releases next carries it) for the check at c's exit. */
inline bool remote_access(unsigned c, const char *what) {
  if (c == my_cta()) return true;
  Cta &C = M.ctas[c];
  if (C.exited) {
    fault("%s by thread %u of CTA %u reaches CTA %u, which has exited (another CTA's shared memory, mbarriers and TMEM "
          "are the cluster's only while it runs: a cluster barrier before the exit)", what, my_tid(), my_cta(), c);
    return false;
  }
  if (M.epoch[cur] >= C.racc[cur]) C.racc[cur] = M.epoch[cur], C.rwhat[cur] = what;
  return true;
}
/* an async operation of CTA op.cta completing into CTA c: its bytes, complete_tx, arrive or TMEM writes */
inline bool deliver_ok(const Op &op, unsigned c, const char *what) {
  if (c == op.cta || !M.ctas[c].exited) return true;
  fault("%s issued by CTA %u completes into CTA %u, which has exited (nothing in CTA %u waited for it, and no cluster "
        "barrier kept it running)", what, op.cta, c, c);
  return false;
}
/* a thread exits (emu_core's hook); the CTA's last: every remote access made to it so far must be ordered before
   the exit, i.e. known to one of its threads (an arrival it waited on, a cluster barrier) */
inline void thread_exit_hook() {
  const unsigned c = my_cta();
  for (unsigned t = c * M.nt; t < (c + 1) * M.nt; ++t)
    if (!threads[t].done) return;
  Cta &C = M.ctas[c];
  C.exited = true;
  std::vector<uint32_t> V(M.T, 0);
  for (unsigned t = c * M.nt; t < (c + 1) * M.nt; ++t)
    for (unsigned u = 0; u < M.T; ++u) V[u] = std::max(V[u], M.vs[(size_t)t * M.T + u]);
  for (unsigned u = 0; u < M.T; ++u)
    if (u / M.nt != c && C.racc[u] > V[u]) {
      fault("%s by thread %u of CTA %u on CTA %u is not ordered before CTA %u exits (no wait on its arrival and no cluster "
            "barrier between it and the exit: it may reach a CTA that has ended)", C.rwhat[u], threads[u].tid, threads[u].cta,
            c, c);
      return;
    }
}
inline bool cols_allocated(Cta &C, unsigned col, unsigned n);

/* the smem bytes of an async read: unchanged since the async proxy's view (else the missing proxy fence) */
/* (the addresses of an MMA's or cp's operands are cluster addresses: CTA << 24 | offset) */
inline void async_read_check(const std::vector<unsigned> &addrs, const char *what) {
  for (unsigned a : addrs) {
    Cta &C = M.ctas[a >> 24];
    if (C.smem[a & 0xFFFFFF] != C.shadow[a & 0xFFFFFF]) {
      fault("%s reads shared memory at 0x%x that a generic-proxy write changed after the last fence.proxy.async (a "
            "missing fence.proxy.async between the writes and the async read)", what, a);
      return;
    }
  }
}
inline void issue_check(const std::vector<unsigned> &addrs, const char *what) {
  for (unsigned a : addrs)
    if (M.ctas[a >> 24].tma_pending[a & 0xFFFFFF]) {
      fault("%s issued on shared memory at 0x%x that a TMA load is still writing (its mbarrier not waited on)", what, a);
      return;
    }
}

inline unsigned sf_byte(Cta &C, unsigned col, unsigned row, unsigned byte, const char *what) {
  /* the scale of `row` (M or N) at TMEM column col + row / 32, lane row % 32 of each quadrant: all four alike */
  unsigned c = col + row / 32, l = row % 32;
  if (c >= kTmemCols) { fault("%s: scale-factor column %u beyond TMEM", what, c); return 0; }
  unsigned v = C.tmem[l * kTmemCols + c] >> (8 * byte) & 0xFF;
  for (unsigned q = 1; q < 4; ++q)
    if ((C.tmem[(l + 32 * q) * kTmemCols + c] >> (8 * byte) & 0xFF) != v) {
      fault("%s: the scale factor of row %u (TMEM column %u) differs between lane quadrants (not copied with .warpx4)", what,
            row, c);
      return v;
    }
  return v;
}

/* Scale factor j (0-based) of an MMA for `row` (of A: < 128, the CTA's own rows; of B: < N), sf_id its scale-factor
 * id: byte t = sf_id + j of the row's run of scale bytes, i.e. byte t % 4 of scale word t / 4. Word w of the row sits
 * g columns after word 0 (g = 4 for up to 128 rows, the four columns one 32x128b.warpx4 copy writes, 8 for B with
 * N > 128), at column sf + w g + row / 32. Words beyond 0 are used only at K = 96 (3 or 6 scales from byte sf_id on:
 * "4-byte aligned sub-columns", the id a byte offset, PTX ISA 9.7.16.10.7.2.4/5). That the run continues g columns on
 * is the model's reading [unverified]: the ISA shows the K = 96 sub-columns only in figures, which the text does not
 * carry; it is what CUTLASS's 128x4 scale atoms give, copied K atom after K atom, and fits the ISA's separate figures
 * for N <= 128 and N > 128. */
inline unsigned sf_run_byte(Cta &C, unsigned sf, unsigned g, unsigned row, unsigned t, const char *what) {
  return sf_byte(C, sf + (t / 4) * g, row, t % 4, what);
}

inline unsigned d_lane(unsigned m_total, unsigned row) { /* the data-path layouts D (M = 128) and F (M = 64) */
  return m_total == 64 ? 32 * (row / 16) + row % 16 : row;
}

inline const char *mma_name(int kind) {
  return kind == FBEMU_MMA_F16    ? "tcgen05.mma kind::f16"
         : kind == FBEMU_MMA_MXF8 ? "tcgen05.mma kind::mxf8f6f4.block32"
         : kind == FBEMU_MMA_NVF4 ? "tcgen05.mma kind::mxf4nvf4.block16"
                                  : "tcgen05.mma kind::mxf4nvf4.block32";
}

inline void exec_mma(Op &op) {
  Cta &C = M.ctas[op.cta];
  const char *what = mma_name(op.kind);
  async_read_check(op.aaddr, what);
  async_read_check(op.baddr, what);
  unsigned K = op.k, dcol = op.d & 0xFFFF;
  std::vector<double> av((size_t)op.m * K), bv((size_t)op.n * K);
  auto elem = [&](unsigned addr, unsigned ebits, unsigned fmt, unsigned k) -> double {
    uint8_t *p = M.ctas[addr >> 24].smem + (addr & 0xFFFFFF);
    if (op.kind == FBEMU_MMA_F16) {
      unsigned v = p[0] | (unsigned)p[1] << 8;
      return fmt == 1 ? dec_bf16(v) : dec_f16(v);
    }
    if (op.kind == FBEMU_MMA_MXF8) return fmt == 0 ? dec_e4m3(p[0]) : dec_e5m2(p[0]);
    (void)ebits;
    return dec_e2m1(k % 2 ? p[0] >> 4 : p[0] & 15);
  };
  for (unsigned r = 0; r < op.m; ++r)
    for (unsigned k = 0; k < K; ++k) av[(size_t)r * K + k] = elem(op.aaddr[(size_t)r * K + k], op.ebits_a, op.id.a_fmt, k);
  for (unsigned r = 0; r < op.n; ++r)
    for (unsigned k = 0; k < K; ++k) bv[(size_t)r * K + k] = elem(op.baddr[(size_t)r * K + k], op.ebits_b, op.id.b_fmt, k);
  if (op.id.neg_a) for (double &x : av) x = -x;
  if (op.id.neg_b) for (double &x : bv) x = -x;
  if (op.kind != FBEMU_MMA_F16) { /* the block scales, from TMEM */
    unsigned blk = op.kind == FBEMU_MMA_NVF4 ? 16 : 32, nb = K / blk;
    unsigned bsf = op.id.d_fmt_or_bsf, asf = op.id.asf, gb = op.n > 128 ? 8 : 4;
    /* cta_group::2 (M = 256): A's rows 128.. are scaled from the peer's TMEM (its own rows, at the same address), as
       its D rows land there. B: every column's scales from each CTA's own TMEM, which must agree (see e_mma). */
    const bool pair = op.m == 256;
    for (unsigned r = 0; r < op.m; ++r)
      for (unsigned j = 0; j < nb; ++j) {
        unsigned s = sf_run_byte(pair ? M.ctas[op.cta + r / 128] : C, op.sfa & 0xFFFF, 4, pair ? r % 128 : r, asf + j, what);
        double sc = op.id.bit23 ? dec_ue8m0(s) : dec_ue4m3(s);
        for (unsigned k = j * blk; k < (j + 1) * blk; ++k) av[(size_t)r * K + k] *= sc;
      }
    for (unsigned r = 0; r < op.n; ++r)
      for (unsigned j = 0; j < nb; ++j) {
        unsigned s = sf_run_byte(C, op.sfb & 0xFFFF, gb, r, bsf + j, what);
        if (pair) {
          unsigned s2 = sf_run_byte(M.ctas[op.cta + 1], op.sfb & 0xFFFF, gb, r, bsf + j, what);
          if (s2 != s) {
            fault("%s: the scale factor of B column %u, k-block %u differs between the CTAs of the pair (0x%02x in CTA %u, "
                  "0x%02x in CTA %u): with cta_group::2 the model reads B's scales for all N columns from each CTA's own "
                  "TMEM and requires both copies to agree [unverified: the PTX ISA does not say how SFB is shared by the pair]",
                  what, r, j, s, op.cta, s2, op.cta + 1);
            return;
          }
        }
        double sc = op.id.bit23 ? dec_ue8m0(s) : dec_ue4m3(s);
        for (unsigned k = j * blk; k < (j + 1) * blk; ++k) bv[(size_t)r * K + k] *= sc;
      }
  }
  /* D's columns in each CTA it writes: still allocated, the CTA still running (the pair's peer) */
  for (unsigned c = op.cta; c < op.cta + (op.m == 256 ? 2u : 1u); ++c) {
    if (!deliver_ok(op, c, what)) return;
    if (!cols_allocated(M.ctas[c], dcol, op.n)) {
      fault("%s issued by CTA %u writes TMEM columns %u..%u of CTA %u, which were deallocated before it completed (a "
            "dealloc not ordered after the MMA's commit)", what, op.cta, dcol, dcol + op.n - 1, c);
      return;
    }
  }
  /* D[m][n] (+)= fp32(sum over this instruction's K of the exact products, summed in double in k order) */
  for (unsigned r = 0; r < op.m; ++r)
    for (unsigned c = 0; c < op.n; ++c) {
      double s = 0;
      for (unsigned k = 0; k < K; ++k) s += av[(size_t)r * K + k] * bv[(size_t)c * K + k];
      /* cta_group::2 (M = 256): rows 128.. in the peer's TMEM, the same lanes (data path A) */
      Cta &DC = op.m == 256 ? M.ctas[op.cta + r / 128] : C;
      uint32_t &cell = DC.tmem[d_lane(op.m, op.m == 256 ? r % 128 : r) * kTmemCols + dcol + c];
      float f = (float)s, old;
      memcpy(&old, &cell, 4);
      if (op.acc) f = old + f;
      memcpy(&cell, &f, 4);
    }
  ++M.stats_mma;
}

inline void exec_cp(Op &op) {
  async_read_check(op.aaddr, "tcgen05.cp");
  unsigned col = op.d & 0xFFFF;
  for (size_t c0 = 0; c0 < op.aaddr.size(); c0 += 512) { /* cta_group::2: each CTA of the pair from its own memory */
    if (!deliver_ok(op, op.aaddr[c0] >> 24, "tcgen05.cp")) return;
    Cta &C = M.ctas[op.aaddr[c0] >> 24];
    if (!cols_allocated(C, col, 4)) {
      fault("tcgen05.cp issued by CTA %u writes TMEM columns %u..%u of CTA %u, which were deallocated before it completed",
            op.cta, col, col + 3, op.aaddr[c0] >> 24);
      return;
    }
    for (unsigned r = 0; r < 32; ++r)
      for (unsigned w = 0; w < 4; ++w) {
        uint32_t v;
        memcpy(&v, C.smem + (op.aaddr[c0 + r * 16 + w * 4] & 0xFFFFFF), 4);
        for (unsigned q = 0; q < 4; ++q) C.tmem[(r + 32 * q) * kTmemCols + col + w] = v;
      }
  }
}

inline void complete(size_t i) {
  Op &op = M.ops[i];
  if (op.type == OP_TMA) {
    for (unsigned c = 0; c < M.csize; ++c) {
      if (!(op.mask >> c & 1)) continue;
      if (!deliver_ok(op, c, "TMA load .multicast::cluster")) return;
      Cta &C = M.ctas[c];
      unsigned o = op.dst & 0xFFFFFF;
      for (unsigned b = 0; b < op.bytes; ++b) {
        unsigned a = o + b; /* data[] is already in the swizzled order */
        C.smem[a] = C.shadow[a] = op.data[b];
        --C.tma_pending[a];
      }
      auto it = C.bars.find(op.bar & 0xFFFFFF);
      if (it == C.bars.end()) { fault("TMA load: its mbarrier in CTA %u is gone", c); continue; }
      bar_tx(&it->second, -(long long)op.bytes, c << 24 | (op.bar & 0xFFFFFF), op.vc.data());
    }
    ++M.stats_tma;
  } else if (op.type == OP_MMA)
    exec_mma(op);
  else if (op.type == OP_CP)
    exec_cp(op);
  else if (op.type == OP_COMMIT) {
    Know k; /* the operations its CTA issued before it are complete */
    k.c[op.cta] = op.seq;
    for (unsigned c = 0; c < M.csize; ++c) {
      if (!(op.mask >> c & 1)) continue;
      if (!deliver_ok(op, c, "tcgen05.commit")) return;
      auto it = M.ctas[c].bars.find(op.bar & 0xFFFFFF);
      if (it == M.ctas[c].bars.end()) { fault("tcgen05.commit: no mbarrier at 0x%x in CTA %u", op.bar & 0xFFFFFF, c); continue; }
      bar_arrive(&it->second, 1, k, "tcgen05.commit", op.vc.data());
    }
  }
}

/* ---- the api entries -------------------------------------------------------------------------------------------- */
inline void *e_smem() { return M.ctas[my_cta()].smem; }
inline unsigned e_smem_addr(const void *p) {
  const uint8_t *q = (const uint8_t *)p;
  Cta &C = M.ctas[my_cta()];
  if (q < C.smem || q >= C.smem + M.smem_bytes) {
    fault("__cvta_generic_to_shared: %p is not in this CTA's dynamic shared memory (the model keeps none other: use "
          "fbt_smem())", p);
    return 0;
  }
  return my_cta() << 24 | (unsigned)(q - C.smem);
}
inline unsigned e_rank() { return my_cta(); }
inline unsigned e_csize() { return M.csize; }
inline unsigned e_mapa(unsigned a, unsigned r) {
  if (r >= M.csize) fault("mapa: CTA rank %u outside the cluster of %u", r, M.csize);
  return r << 24 | (a & 0xFFFFFF);
}
inline void e_cluster_arrive() {
  me().cgen = M.cl_gen;
  ++M.cl_arrived, ++progress;
}
inline void e_cluster_wait() {
  unsigned g = me().cgen;
  for (;;) {
    if (M.cl_gen != g) return;
    if (M.cl_arrived >= alive) { /* every live thread of the cluster arrived */
      meet(0, M.T);
      M.cl_arrived = 0, ++M.cl_gen, ++progress;
      return;
    }
    yield_();
  }
}
inline void e_mbar_init(unsigned a, unsigned count) {
  unsigned c, o;
  if (!resolve(a, 8, &c, &o, "mbarrier.init")) return;
  if (c != my_cta()) { fault("mbarrier.init.shared::cta on another CTA's address 0x%x", a); return; }
  if (o % 8 || count < 1 || count >= (1u << 20)) { fault("mbarrier.init: address 0x%x or count %u invalid", a, count); return; }
  Bar b;
  b.count = b.pending = count, b.phase = 0, b.tx = 0, b.acc = b.rel = Know();
  b.vacc.assign(M.T, 0), b.vrel.assign(M.T, 0);
  M.ctas[c].bars[o] = b;
  ++progress;
}
inline void e_mbar_arrive(unsigned a, unsigned n) {
  if (me().ld_pending) fault("mbarrier.arrive after a tcgen05.ld without tcgen05.wait::ld");
  if ((a >> 24) < M.csize && !remote_access(a >> 24, "mbarrier.arrive on a barrier of another CTA (mapa)")) return;
  Bar *b = bar_at(a, "mbarrier.arrive");
  if (b) bar_arrive(b, n, me().known_sync, "mbarrier.arrive", release_vc());
  ++progress;
}
inline void e_mbar_arrive_tx(unsigned a, unsigned bytes) {
  Bar *b = bar_at(a, "mbarrier.arrive.expect_tx");
  if (!b) return;
  b->tx += bytes; /* expect-tx, then the arrive */
  bar_arrive(b, 1, me().known_sync, "mbarrier.arrive.expect_tx", release_vc());
  ++progress;
}
inline int e_mbar_try_wait(unsigned a, unsigned parity) {
  Bar *b = bar_at(a, "mbarrier.try_wait");
  if (!b) return 1;
  /* the phase of parity P completed: the current (incomplete) phase has the other parity */
  if ((b->phase & 1) != (parity & 1)) {
    me().known_sync.merge(b->rel);
    acquire_vc(b);
    me().waiting = false;
    return 1;
  }
  me().waiting = true, me().wait_bar = a, me().wait_parity = parity;
  yield_(); /* the suspended time of try_wait: no progress */
  if ((b->phase & 1) != (parity & 1)) {
    me().known_sync.merge(b->rel);
    acquire_vc(b);
    me().waiting = false;
    return 1;
  }
  return 0;
}
inline void e_fence(int which) {
  if (which == FBEMU_FENCE_AFTER) {
    me().known = me().known_sync;
    memcpy(&M.ve[(size_t)cur * M.T], &M.vs[(size_t)cur * M.T], M.T * sizeof(uint32_t));
  }
  else if (which == FBEMU_FENCE_BEFORE) {
    if (me().ld_pending) fault("tcgen05.fence::before_thread_sync after a tcgen05.ld without tcgen05.wait::ld");
  } else if (which == FBEMU_FENCE_PROXY_ASYNC) {
    Cta &C = M.ctas[my_cta()];
    memcpy(C.shadow, C.smem, M.smem_bytes); /* the async proxy now sees every generic write made so far */
  }
}

inline void e_tma_load(unsigned dst, const void *tmap, int rank, const int *crd, unsigned bar, unsigned mask) {
  TmapRec t;
  memcpy(&t, tmap, sizeof t);
  if (t.magic != kTmapMagic) { fault("TMA load: the tensor map was not encoded by the model's cuTensorMapEncodeTiled"); return; }
  if (t.rank != rank) { fault("TMA load: a %dd load through a rank-%u tensor map", rank, t.rank); return; }
  if (t.interleave || t.oob_nan) { fault("TMA load: interleaved maps / NaN out-of-bounds fill are not modelled"); return; }
  for (int i = 0; i < rank; ++i)
    if (t.estr[i] != 1) { fault("TMA load: element strides other than 1 are not modelled"); return; }
  if (mask == 0x10000u) { fault("TMA load .multicast::cluster with an empty CTA mask"); return; }
  unsigned box[3] = {t.box[0], rank > 1 ? t.box[1] : 1, rank > 2 ? t.box[2] : 1};
  unsigned bytes = box[0] * box[1] * box[2] * t.esize;
  unsigned c, o;
  if (!resolve(dst, bytes, &c, &o, "TMA load")) return;
  if (o % 128) { fault("TMA load: destination 0x%x is not 128-byte aligned", dst); return; }
  if (!mask) mask = 1u << c;
  else if (mask >> M.csize) { fault("TMA load: CTA mask 0x%x beyond the cluster of %u", mask, M.csize); return; }
  Op op;
  op.type = OP_TMA, op.seq = ++M.seq, op.cta = my_cta(), op.dst = dst, op.bytes = bytes, op.mask = mask, op.bar = bar;
  op.data.assign(bytes, 0);
  unsigned span = t.swizzle;
  /* the box's elements (x innermost) at consecutive offsets, each 16-byte chunk then moved by the swizzle of its
     shared address (the pattern follows the address bits, so the destination's offset in the 1024-byte repeat
     matters: hardware needs the repeat-aligned destinations CUTLASS uses; the model takes any 128-aligned one) */
  unsigned row = box[0] * t.esize;
  for (unsigned z = 0; z < box[2]; ++z)
    for (unsigned y = 0; y < box[1]; ++y) {
      long long gx0 = crd[0], gy = rank > 1 ? crd[1] + (long long)y : 0, gz = rank > 2 ? crd[2] + (long long)z : 0;
      bool rowin = (rank < 2 || (gy >= 0 && gy < t.dims[1])) && (rank < 3 || (gz >= 0 && gz < t.dims[2]));
      unsigned lin = (z * box[1] + y) * row;
      for (unsigned x = 0; x < box[0]; ++x) {
        long long gx = gx0 + x;
        unsigned char e[16] = {0};
        if (rowin && gx >= 0 && gx < t.dims[0]) {
          uint64_t ga = t.gaddr + (uint64_t)gx * t.esize + (rank > 1 ? (uint64_t)gy * t.strides[0] : 0) +
                        (rank > 2 ? (uint64_t)gz * t.strides[1] : 0);
          memcpy(e, (const void *)(uintptr_t)ga, t.esize);
        }
        for (unsigned b = 0; b < t.esize; ++b) {
          unsigned l = lin + x * t.esize + b;
          unsigned phys = swizzle_addr(o + l, span) - o;
          op.data[phys] = e[b];
        }
      }
    }
  for (unsigned r = 0; r < M.csize; ++r) {
    if (!(mask >> r & 1)) continue;
    if (!remote_access(r, "TMA load .multicast::cluster")) return;
    for (unsigned b = 0; b < bytes; ++b)
      if (!me().known_sync.done(M.ctas[r].aread[o + b])) {
        fault("TMA load into shared memory at 0x%x that an MMA / cp issued earlier may not have read yet (wait on the "
              "barrier its commit arrives on first)", r << 24 | (o + b));
        return;
      }
    for (unsigned b = 0; b < bytes; ++b) ++M.ctas[r].tma_pending[o + b];
    if (!M.ctas[r].bars.count(bar & 0xFFFFFF)) { fault("TMA load: no mbarrier at 0x%x in CTA %u", bar & 0xFFFFFF, r); return; }
  }
  /* the load's complete_tx carries its issuer's epoch (then advanced): a waiter on a destination's barrier has the
     load ordered before it (the exit check) */
  op.vc.assign(M.T, 0);
  op.vc[cur] = M.epoch[cur]++;
  M.ops.push_back(op);
  ++progress;
}

inline unsigned e_elect(unsigned mask) {
  unsigned long long v[32];
  e_exchange(mask, 0, v);
  unsigned n = __builtin_popcount(mask), lane = my_tid() & 31;
  unsigned w = my_cta() * 1000 + my_tid() / 32, k = me().elects++;
  unsigned h = (w * 2654435761u) ^ (k * 40503u + 12345u);
  h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
  unsigned pick = h % n, seen = 0;
  for (unsigned l = 0; l < 32; ++l)
    if (mask >> l & 1) {
      if (seen == pick) return l == lane; /* the elected lane: any of the mask (the model picks one at random) */
      ++seen;
    }
  return 0;
}

inline bool warp_uniform(unsigned v, const char *what) { /* a .sync.aligned form: every lane, the same operands */
  unsigned long long a[32];
  e_exchange(0xffffffffu, v, a);
  for (int i = 0; i < 32; ++i)
    if (a[i] != v) { fault("%s: the lanes of warp %u disagree on an operand (.sync.aligned)", what, my_tid() / 32); return false; }
  return true;
}

/* "every tcgen05 instruction in a kernel must use the same .cta_group" (PTX ISA) */
inline bool cg_check(int cg, const char *what) {
  if (!M.cg) M.cg = cg;
  if (M.cg != cg) { fault("%s: .cta_group::%d in a kernel whose tcgen05 instructions use .cta_group::%d", what, cg, M.cg); return false; }
  return true;
}
/* lane 0 of the warp allocates; the warp leaves together, once the address is in shared memory */
inline void alloc_one(int cg, unsigned dst, unsigned ncols) {
  if (!cg_check(cg, "tcgen05.alloc")) return;
  Cta &C = M.ctas[my_cta()];
  if (cg == 2 && M.csize < 2) { fault("tcgen05.alloc.cta_group::2 outside a cluster of 2"); return; }
  if (C.relinquished) { fault("tcgen05.alloc after tcgen05.relinquish_alloc_permit"); return; }
  if (ncols < 32 || ncols > 512 || (ncols & (ncols - 1))) { fault("tcgen05.alloc: %u columns (a power of 2 in [32, 512])", ncols); return; }
  unsigned g = ncols / 32;
  for (;;) {
    for (unsigned s = 0; s + g <= 16; s += g) { /* first fit, aligned to its size (the model's choice) */
      bool freed = true;
      for (unsigned i = s; i < s + g; ++i) freed &= C.col_owner[i] < 0;
      if (!freed) continue;
      for (unsigned i = s; i < s + g; ++i) C.col_owner[i] = (int)s;
      C.col_len[s] = (int)g;
      unsigned c, o;
      if (!resolve(dst, 4, &c, &o, "tcgen05.alloc")) return;
      uint32_t a = s * 32;
      memcpy(M.ctas[c].smem + o, &a, 4), memcpy(M.ctas[c].shadow + o, &a, 4);
      ++progress;
      return;
    }
    yield_(); /* blocks until columns are freed */
  }
}
inline void e_alloc(int cg, unsigned dst, unsigned ncols) {
  if (!warp_uniform(ncols, "tcgen05.alloc") || !warp_uniform(dst, "tcgen05.alloc")) return;
  if ((my_tid() & 31) == 0) alloc_one(cg, dst, ncols);
  unsigned long long a[32];
  e_exchange(0xffffffffu, 0, a);
}
inline void e_dealloc(int cg, unsigned taddr, unsigned ncols) {
  (void)cg;
  if (!warp_uniform(taddr, "tcgen05.dealloc") || !warp_uniform(ncols, "tcgen05.dealloc")) return;
  if ((my_tid() & 31) != 0) return;
  Cta &C = M.ctas[my_cta()];
  unsigned col = taddr & 0xFFFF, s = col / 32;
  if ((taddr >> 16) || col % 32 || s >= 16 || C.col_owner[s] != (int)s || (unsigned)C.col_len[s] * 32 != ncols) {
    fault("tcgen05.dealloc of 0x%x, %u columns: not an allocation of this CTA", taddr, ncols);
    return;
  }
  for (unsigned i = s; i < s + ncols / 32; ++i) C.col_owner[i] = -1;
  ++progress;
}
inline void e_relinquish(int cg) {
  (void)cg;
  M.ctas[my_cta()].relinquished = true;
}
inline bool cols_allocated(Cta &C, unsigned col, unsigned n) {
  for (unsigned c = col; c < col + n; ++c)
    if (c >= kTmemCols || C.col_owner[c / 32] < 0) return false;
  return true;
}

/* write-after-read on TMEM: the last reader's read must be ordered before this issue (through its arrive on a
   barrier the issuer then waited on, and the issuer's tcgen05.fence::after_thread_sync) */
inline bool war_ok(Cta &C, size_t cell, const char *what) {
  int t = C.treader[cell];
  if (t < 0 || t == cur || M.ve[(size_t)cur * M.T + (unsigned)t] >= C.tepoch[cell]) return true;
  if (C.tunwritten[cell])
    fault("tcgen05.ld by thread %u of CTA %u read TMEM lane %zu column %zu before the MMA / cp writing it was even issued "
          "(a read before the MMA was committed and its mbarrier waited on)", threads[t].tid, threads[t].cta, cell / kTmemCols,
          cell % kTmemCols);
  else
    fault("%s overwrites TMEM lane %zu column %zu that thread %u of CTA %u read without an ordering to this issue (its "
          "arrive on a barrier waited on here, then tcgen05.fence::after_thread_sync)", what, cell / kTmemCols,
          cell % kTmemCols, threads[t].tid, threads[t].cta);
  return false;
}
inline void e_mma(int kind, int cg, unsigned d, unsigned long long adesc, unsigned long long bdesc, unsigned idesc,
                  unsigned sfa, unsigned sfb, int acc) {
  const char *what = mma_name(kind);
  if (!cg_check(cg, what)) return;
  /* The PTX ISA lets any one thread of the pair issue; the model takes the even CTA's only (its rows are 0..127, as in
     CUTLASS's 2-SM kernels: what an odd CTA's issue makes of the row halves is not stated) */
  if (cg == 2 && (M.csize < 2 || my_cta() % 2)) {
    fault("%s: .cta_group::2 issued outside the even CTA of a pair (CTA %u; the model takes the even CTA's issue only)", what, my_cta());
    return;
  }
  Idesc id = decode_idesc(idesc);
  Sdesc sa = decode_sdesc(adesc), sb = decode_sdesc(bdesc);
  Op op;
  op.type = OP_MMA, op.seq = ++M.seq, op.cta = my_cta(), op.kind = kind, op.d = d, op.sfa = sfa, op.sfb = sfb, op.id = id;
  op.acc = acc != 0, op.m = id.m, op.n = id.n;
  unsigned ebits;
  if (id.sparse || id.sparse_sel) { fault("%s: sparse MMAs are not modelled", what); return; }
  if (id.bit6) { fault("%s: idesc reserved bit 6 set", what); return; }
  if (kind == FBEMU_MMA_F16) {
    if (id.sat || id.bit23 || id.asf || id.k96 || id.ws) { fault("%s: idesc 0x%08x sets reserved bits (3, 23, 29-31)", what, idesc); return; }
    if (id.d_fmt_or_bsf != 1) { fault("%s: D format %u (the model has F32 = 1 only)", what, id.d_fmt_or_bsf); return; }
    if (id.a_fmt > 1 || id.b_fmt > 1) { fault("%s: A/B format codes %u/%u (F16 = 0, BF16 = 1)", what, id.a_fmt, id.b_fmt); return; }
    if (cg == 1 && id.m != 64 && id.m != 128) { fault("%s: M = %u (cta_group::1: 64 or 128)", what, id.m); return; }
    if (cg == 2 && id.m != 256) { fault("%s: M = %u with cta_group::2 (the model has M = 256 only)", what, id.m); return; }
    op.k = 16, ebits = 16;
  } else if (kind == FBEMU_MMA_MXF8) {
    if (id.sat || id.k96) { fault("%s: idesc reserved bits set", what); return; }
    if (id.a_fmt > 1 || id.b_fmt > 1) {
      fault("%s: A/B format codes %u/%u (the model has E4M3 = 0, E5M2 = 1; FP6/FP4 in 8-bit containers are not modelled)",
            what, id.a_fmt, id.b_fmt);
      return;
    }
    if (!id.bit23) { fault("%s: scale type UE4M3 (mxf8f6f4 takes UE8M0 scales only)", what); return; }
    op.k = 32, ebits = 8; /* 1X: one scale a row, the id its byte (0-3) */
  } else {
    /* mxf4nvf4: .block16 (UE4M3 or UE8M0) 4 scales a row at K = 64, the id 0 (4X: the whole word); 6 at K = 96, the
       id a byte offset, 0 or 2 (the ISA shows only those two). .block32 (UE8M0 only) 2 at K = 64, the id a half-word
       offset, 0 or 2; 3 at K = 96, the id a byte offset, 0-3 (PTX ISA 9.7.16.10.7, Tables 54 / 55) */
    const bool b16 = kind == FBEMU_MMA_NVF4;
    if (id.sat || (idesc >> 12 & 1)) { fault("%s: idesc reserved bits set", what); return; }
    if (id.a_fmt != 1 || id.b_fmt != 1) { fault("%s: A/B format codes %u/%u (mxf4nvf4: E2M1 = 1)", what, id.a_fmt, id.b_fmt); return; }
    if (id.a_mn || id.b_mn) { fault("%s: FP4 operands must be K-major", what); return; }
    if (!b16 && !id.bit23) { fault("%s: scale type UE4M3 (.block32 takes UE8M0 scales only)", what); return; }
    if (id.k96) {
      if (M.arch != 103) {
        fault("%s: K = 96 (idesc bit 31) is sm_103a only, and the kernel runs as sm_%ua (tc::set_arch; ptxas accepts the "
              "idesc for sm_100a too)", what, M.arch);
        return;
      }
      /* cta_group::1 at M = 128 as well: the PTX ISA's shape table lists K = 96 for cta_group::2, M = 256; CUTLASS has
         a 1-SM K = 96 atom (SM103_MXF4_ULTRA_SS_VS, M = 128) that its example 89 builds a 1-SM kernel on. The model
         takes CUTLASS's reading [unverified: which is right needs a GB300]; M is checked below as for K = 64. */
    }
    bool ids_ok = true;
    for (unsigned v : {id.asf, id.d_fmt_or_bsf})
      ids_ok &= id.k96 ? (b16 ? v % 2 == 0 : true) : (b16 ? v == 0 : v % 2 == 0);
    if (!ids_ok) {
      fault("%s: scale-factor ids A %u / B %u at K = %u (%s)", what, id.asf, id.d_fmt_or_bsf, id.k96 ? 96 : 64,
            id.k96 ? (b16 ? "6 scales from a byte offset: 0 or 2" : "3 scales from a byte offset: 0-3")
                   : (b16 ? "4X: the whole word, id 0" : "2X: a half-word offset, 0 or 2"));
      return;
    }
    op.k = id.k96 ? 96 : 64, ebits = 4;
  }
  if (kind != FBEMU_MMA_F16 && id.m != (cg == 2 ? 256u : 128u)) {
    fault("%s: M = %u (block-scaled: 128 with cta_group::1; the model has M = 256 only with cta_group::2)", what, id.m);
    return;
  }
  if (id.n < 8 || id.n > 256 || id.n % 8) { fault("%s: N = %u", what, id.n); return; }
  if (cg == 2 && id.n % 16) { fault("%s: N = %u with cta_group::2 (a multiple of 16)", what, id.n); return; }
  for (const Sdesc *s : {&sa, &sb}) {
    if (s->version != 1) { fault("%s: smem descriptor version %u (sm100's is 1: bits 46-48 = 0b001)", what, s->version); return; }
    if (s->rsv) { fault("%s: smem descriptor reserved bits set", what); return; }
    if (s->layout == 1 || s->layout == 3 || s->layout == 5 || s->layout == 7) {
      fault("%s: smem descriptor layout code %u (%s)", what, s->layout, s->layout == 1 ? "128B_BASE32B: not modelled" : "invalid");
      return;
    }
    if (s->lbo_abs) {
      /* the absolute-LBO mode (PTX ISA 9.7.16.3.1.2): for a K of 48 bytes; only the 128-byte swizzle, K-major, base offset 0
         (9.7.16.3.1.2.1) */
      const char c = s == &sa ? 'A' : 'B';
      if (op.k * ebits / 8 != 48) {
        fault("%s: %c's descriptor in the absolute-LBO mode with %u-byte K rows (the ISA gives the mode for a K of 48 bytes, "
              "K = 96 FP4: not modelled otherwise)", what, c, op.k * ebits / 8);
        return;
      }
      if (s->layout != 2) { fault("%s: %c's descriptor in the absolute-LBO mode with layout code %u (the ISA allows only the 128-byte swizzle, code 2)", what, c, s->layout); return; }
      if (s->base_off) { fault("%s: %c's descriptor in the absolute-LBO mode with base offset %u (the ISA requires 0)", what, c, s->base_off); return; }
      if (s->lbo % 128) {
        fault("%s: %c's second chunk (the absolute LBO 0x%x) starts inside a 128-byte row: not modelled (only chunks from a "
              "row's start are, as CUTLASS places them [unverified])", what, c, s->lbo);
        return;
      }
    }
    if (s->base_off) { fault("%s: smem descriptor base offset: not modelled", what); return; }
  }
  if ((sa.lbo_abs && id.a_mn) || (sb.lbo_abs && id.b_mn)) { fault("%s: the absolute-LBO mode with an MN-major operand (the ISA allows K-major only)", what); return; }
  /* a K-major swizzled operand's K bytes must stay inside the swizzle row they start in: K = 96 FP4 (48 bytes) packed
     contiguously would cross the 128-byte boundary, which the ISA's absolute-LBO mode splits instead (operand_addr) */
  for (int w = 0; w < 2; ++w) {
    const Sdesc &s = w ? sb : sa;
    unsigned S = swizzle_span(s.layout), kb = op.k * ebits / 8;
    if (S && !s.lbo_abs && !(w ? id.b_mn : id.a_mn) && s.start % S + kb > S) {
      fault("%s: %c's K bytes %u..%u of its %u-byte swizzle row cross the row's end in the relative-LBO mode (48-byte K "
            "chunks across a row take the absolute-LBO mode, descriptor bit 52)", what, w ? 'B' : 'A', s.start % S,
            s.start % S + kb - 1, S);
      return;
    }
  }
  Cta &C = M.ctas[my_cta()];
  unsigned dcol = d & 0xFFFF;
  if (d >> 16) { fault("%s: D's TMEM address 0x%x has a lane (cta_group::1 writes lanes from 0)", what, d); return; }
  if (!cols_allocated(C, dcol, id.n) || (cg == 2 && !cols_allocated(M.ctas[my_cta() + 1], dcol, id.n))) {
    fault("%s: D columns %u..%u are not allocated%s", what, dcol, dcol + id.n - 1, cg == 2 ? " in both CTAs of the pair" : "");
    return;
  }
  if (kind != FBEMU_MMA_F16) {
    /* the columns the scales span: words 0 .. (id + count - 1) / 4, g columns apart (sf_run_byte); with cta_group::2
       in both CTAs (A: each CTA its rows; B: a copy in each) */
    unsigned blk = kind == FBEMU_MMA_NVF4 ? 16 : 32, nsf = op.k / blk;
    unsigned wa = (id.asf + nsf - 1) / 4, wb = (id.d_fmt_or_bsf + nsf - 1) / 4, gb = id.n > 128 ? 8 : 4;
    unsigned a_cols = wa * 4 + (std::min(id.m, 128u) + 31) / 32, b_cols = wb * gb + (id.n + 31) / 32;
    if ((sfa >> 16 & 0x3FFF) || (sfb >> 16 & 0x3FFF)) { fault("%s: a scale-factor TMEM address with a lane", what); return; }
    for (unsigned c = my_cta(); c < my_cta() + (unsigned)cg; ++c)
      if (!cols_allocated(M.ctas[c], sfa & 0xFFFF, a_cols) || !cols_allocated(M.ctas[c], sfb & 0xFFFF, b_cols)) {
        fault("%s: scale-factor columns not allocated%s", what, cg == 2 ? " in both CTAs of the pair" : "");
        return;
      }
  }
  op.ebits_a = op.ebits_b = ebits;
  op.aaddr.resize((size_t)op.m * op.k), op.baddr.resize((size_t)op.n * op.k);
  /* cta_group::2: A's rows 128.. and B's rows N/2.. from the peer's shared memory at the same descriptors, each CTA
     its half of A and of B [the B split: as CUTLASS's 2-SM kernels load B; unverified on hardware] */
  const unsigned ma = cg == 2 ? 128 : op.m, nb = cg == 2 ? op.n / 2 : op.n;
  for (unsigned r = 0; r < op.m; ++r)
    for (unsigned k = 0; k < op.k; ++k)
      op.aaddr[(size_t)r * op.k + k] = (my_cta() + r / ma) << 24 | operand_addr(sa, (int)id.a_mn, ebits, r % ma, k);
  for (unsigned r = 0; r < op.n; ++r)
    for (unsigned k = 0; k < op.k; ++k)
      op.baddr[(size_t)r * op.k + k] = (my_cta() + r / nb) << 24 | operand_addr(sb, (int)id.b_mn, ebits, r % nb, k);
  for (auto *v : {&op.aaddr, &op.baddr})
    for (unsigned a : *v)
      if ((a & 0xFFFFFF) >= M.smem_bytes) { fault("%s: an operand element at 0x%x is outside shared memory (%u bytes)", what, a, M.smem_bytes); return; }
  issue_check(op.aaddr, what);
  issue_check(op.baddr, what);
  if (cg == 2 && !remote_access(my_cta() + 1, what)) return; /* the peer's shared memory and TMEM */
  const unsigned long long tag = op.seq << 4 | op.cta;
  for (unsigned r = 0; r < op.m; ++r)
    for (unsigned c = 0; c < op.n; ++c) {
      Cta &DC = op.m == 256 ? M.ctas[my_cta() + r / 128] : C;
      size_t cell = d_lane(op.m, op.m == 256 ? r % 128 : r) * kTmemCols + dcol + c;
      if (!war_ok(DC, cell, what)) return;
      DC.tseq[cell] = tag, DC.treader[cell] = -1, DC.twritten[cell] = 1;
    }
  for (auto *v : {&op.aaddr, &op.baddr})
    for (unsigned a : *v) M.ctas[a >> 24].aread[a & 0xFFFFFF] = tag;
  M.ops.push_back(op);
  ++progress;
}

inline void e_cp(int shape, int cg, unsigned taddr, unsigned long long sdesc) {
  if (!cg_check(cg, "tcgen05.cp")) return;
  if (shape != FBEMU_CP_32X128B_WARPX4) { fault("tcgen05.cp: only the shape .32x128b.warpx4 is modelled"); return; }
  /* .cta_group::2: "copied into the Tensor Memory of both the current and the peer CTAs" (PTX ISA, tcgen05.cp). Whose
     shared memory the peer's copy reads is not stated; the model reads each CTA's own, at the descriptor's offset
     [unverified], as the pair's MMA reads A's rows 128.. (so each CTA brings the scales of its own rows). Issued by the
     even CTA (the model's rule, as for the MMA; the ISA lets any one thread of the pair issue). */
  if (cg == 2 && (M.csize < 2 || my_cta() % 2)) {
    fault("tcgen05.cp.cta_group::2 issued outside the even CTA of a pair (CTA %u; the model takes the even CTA's issue only)", my_cta());
    return;
  }
  Sdesc s = decode_sdesc(sdesc);
  if (s.version != 1 || s.rsv || s.layout != 0 || s.base_off || s.lbo_abs) {
    fault("tcgen05.cp: source descriptor 0x%016llx (the model takes version 1, no swizzle)", sdesc);
    return;
  }
  unsigned col = taddr & 0xFFFF;
  if (taddr >> 16) { fault("tcgen05.cp: .warpx4 writes lanes from 0 (TMEM address 0x%x)", taddr); return; }
  for (unsigned c = my_cta(); c < my_cta() + (unsigned)cg; ++c)
    if (!cols_allocated(M.ctas[c], col, 4)) {
      fault("tcgen05.cp: TMEM columns %u..%u are not allocated%s", col, col + 3, cg == 2 ? " in both CTAs of the pair" : "");
      return;
    }
  Op op;
  op.type = OP_CP, op.seq = ++M.seq, op.cta = my_cta(), op.d = taddr, op.sdesc = sdesc;
  op.aaddr.resize(32 * 16 * (unsigned)cg); /* per CTA (cta_group::2: the pair's, in order) 32 rows x 16 bytes */
  for (unsigned c = 0; c < (unsigned)cg; ++c)
    for (unsigned r = 0; r < 32; ++r) /* row r: the 16 bytes of core-matrix row r % 8 of the r / 8-th group (SBO apart) */
      for (unsigned b = 0; b < 16; ++b) {
        unsigned a = s.start + (r / 8) * s.sbo + (r % 8) * 16 + b;
        if (a >= M.smem_bytes) { fault("tcgen05.cp: source 0x%x outside shared memory", a); return; }
        op.aaddr[c * 512 + r * 16 + b] = (op.cta + c) << 24 | a;
      }
  issue_check(op.aaddr, "tcgen05.cp");
  if (cg == 2 && !remote_access(my_cta() + 1, "tcgen05.cp.cta_group::2")) return;
  const unsigned long long tag = op.seq << 4 | op.cta;
  for (unsigned c = my_cta(); c < my_cta() + (unsigned)cg; ++c) {
    Cta &C = M.ctas[c];
    for (unsigned l = 0; l < 128; ++l)
      for (unsigned w = 0; w < 4; ++w) {
        size_t cell = l * kTmemCols + col + w;
        if (!war_ok(C, cell, "tcgen05.cp")) return;
        C.tseq[cell] = tag, C.treader[cell] = -1, C.twritten[cell] = 1;
      }
  }
  for (unsigned a : op.aaddr) M.ctas[a >> 24].aread[a & 0xFFFFFF] = tag;
  M.ops.push_back(op);
  ++progress;
}

inline void e_commit(int cg, unsigned bar, unsigned mask) {
  if (!cg_check(cg, "tcgen05.commit")) return;
  if (mask == 0x10000u) { fault("tcgen05.commit .multicast::cluster with an empty CTA mask"); return; }
  unsigned c, o;
  if (!resolve(bar, 8, &c, &o, "tcgen05.commit")) return;
  if (!M.ctas[c].bars.count(o)) { fault("tcgen05.commit: no mbarrier at 0x%x", bar); return; }
  if (cg == 2 && M.csize < 2) { fault("tcgen05.commit.cta_group::2 outside a cluster of 2"); return; }
  if (mask && mask != 0x10000u && mask >> M.csize) { fault("tcgen05.commit: CTA mask 0x%x beyond the cluster of %u", mask, M.csize); return; }
  Op op;
  op.type = OP_COMMIT, op.seq = ++M.seq, op.cta = my_cta(), op.bar = bar, op.mask = mask ? mask : 1u << c;
  for (unsigned r = 0; r < M.csize; ++r)
    if ((op.mask >> r & 1) && !remote_access(r, "tcgen05.commit (an arrive on another CTA's mbarrier)")) return;
  for (unsigned r = 0; r < M.csize; ++r)
    if ((op.mask >> r & 1) && !M.ctas[r].bars.count(o)) { fault("tcgen05.commit: no mbarrier at 0x%x in CTA %u", o, r); return; }
  const uint32_t *v = release_vc();
  op.vc.assign(v, v + M.T);
  M.ops.push_back(op);
  ++progress;
}

inline bool ldst_check(unsigned taddr, unsigned ncols, const char *what) {
  if (!warp_uniform(taddr, what)) return false;
  unsigned w = my_tid() / 32, q = w % 4, lane = taddr >> 16, col = taddr & 0xFFFF;
  if (lane != 32 * q) {
    fault("%s: warp %u (lane quarter %u: TMEM lanes %u..%u) addresses lanes %u..%u", what, w, q, 32 * q, 32 * q + 31, lane,
          lane + 31);
    return false;
  }
  if (!cols_allocated(M.ctas[my_cta()], col, ncols)) { fault("%s: TMEM columns %u..%u are not allocated", what, col, col + ncols - 1); return false; }
  return true;
}
inline void e_ld(int shape, int n, unsigned taddr, unsigned *r) {
  if (shape != FBEMU_LDST_32X32B) { fault("tcgen05.ld: shape not modelled"); return; }
  if (!ldst_check(taddr, (unsigned)n, "tcgen05.ld.32x32b")) return;
  Cta &C = M.ctas[my_cta()];
  unsigned l = (taddr >> 16) + (my_tid() & 31), col = taddr & 0xFFFF;
  for (int j = 0; j < n; ++j) {
    unsigned long long s = C.tseq[l * kTmemCols + col + j];
    if (!me().known.done(s)) {
      fault(me().known_sync.done(s)
                ? "tcgen05.ld of TMEM lane %u column %u after the thread sync that orders it, without tcgen05.fence::after_thread_sync"
                : "tcgen05.ld of TMEM lane %u column %u before the MMA / cp writing it was committed and its mbarrier waited on",
            l, col + j);
      return;
    }
    r[j] = C.tmem[l * kTmemCols + col + j];
    C.treader[l * kTmemCols + col + j] = cur, C.tepoch[l * kTmemCols + col + j] = M.epoch[cur];
    C.tunwritten[l * kTmemCols + col + j] = !C.twritten[l * kTmemCols + col + j];
  }
  me().ld_pending = true;
}
inline void e_st(int shape, int n, unsigned taddr, const unsigned *r) {
  if (shape != FBEMU_LDST_32X32B) { fault("tcgen05.st: shape not modelled"); return; }
  if (!ldst_check(taddr, (unsigned)n, "tcgen05.st.32x32b")) return;
  Cta &C = M.ctas[my_cta()];
  unsigned l = (taddr >> 16) + (my_tid() & 31), col = taddr & 0xFFFF;
  for (int j = 0; j < n; ++j) C.tmem[l * kTmemCols + col + j] = r[j], C.twritten[l * kTmemCols + col + j] = 1;
}
inline void e_wait(int st) {
  if (!st) me().ld_pending = false;
  unsigned long long a[32];
  e_exchange(0xffffffffu, 0, a); /* .sync.aligned */
}

const fbemu_tc_api table = {e_smem,      e_smem_addr,     e_rank,     e_csize,    e_mapa,   e_cluster_arrive,
                            e_cluster_wait, e_mbar_init,  e_mbar_arrive, e_mbar_arrive_tx, e_mbar_try_wait, e_fence,
                            e_tma_load,  e_elect,         e_alloc,    e_dealloc,  e_relinquish, e_mma,
                            e_cp,        e_commit,        e_ld,       e_st,       e_wait};

inline void cluster_begin(unsigned nt, unsigned cs) {
  M.nt = nt, M.csize = cs, M.ops.clear(), M.cl_arrived = 0, M.cl_gen = 0, M.cg = 0;
  M.ctas.assign(cs, Cta());
  for (Cta &C : M.ctas) {
    C.mem.assign(M.smem_bytes + 1024, 0xA5), C.shadow_mem.assign(M.smem_bytes + 1024, 0xA5);
    C.smem = C.mem.data() + (1024 - (uintptr_t)C.mem.data() % 1024) % 1024;
    C.shadow = C.shadow_mem.data() + (1024 - (uintptr_t)C.shadow_mem.data() % 1024) % 1024;
    C.tma_pending.assign(M.smem_bytes, 0);
    C.tmem.assign(kTmemLanes * kTmemCols, 0xFFFFFFFFu); /* NaN until written */
    C.tseq.assign(kTmemLanes * kTmemCols, 0);
    C.treader.assign(kTmemLanes * kTmemCols, -1), C.tepoch.assign(kTmemLanes * kTmemCols, 0);
    C.tunwritten.assign(kTmemLanes * kTmemCols, 0), C.twritten.assign(kTmemLanes * kTmemCols, 0);
    C.aread.assign(M.smem_bytes, 0);
    for (int i = 0; i < 16; ++i) C.col_owner[i] = -1, C.col_len[i] = 0;
    C.relinquished = false;
    C.exited = false, C.racc.assign(nt * cs, 0), C.rwhat.assign(nt * cs, (const char *)NULL);
  }
  M.th.assign(nt * cs, Th());
  M.T = nt * cs, M.epoch.assign(M.T, 1), M.vs.assign((size_t)M.T * M.T, 0), M.ve.assign((size_t)M.T * M.T, 0);
  for (Th &t : M.th) t.known = t.known_sync = Know(), t.ld_pending = false, t.elects = 0, t.cgen = 0, t.waiting = false;
  if (cs > kMaxCta) fault("a cluster of %u CTAs (the model takes up to %u)", cs, kMaxCta);
}
inline const char *cluster_end() {
  if (!M.fault_msg.empty()) return M.fault_msg.c_str();
  while (!M.ops.empty()) { /* async work still in flight at exit: finish it, then judge */
    complete(0);
    M.ops.erase(M.ops.begin());
  }
  for (unsigned c = 0; c < M.csize; ++c)
    for (int i = 0; i < 16; ++i)
      if (M.ctas[c].col_owner[i] >= 0) {
        fault("CTA %u exits with TMEM columns %d.. still allocated (tcgen05.dealloc before exit)", c, i * 32);
        return M.fault_msg.c_str();
      }
  return M.fault_msg.empty() ? NULL : M.fault_msg.c_str();
}

/* Run body over the grid under the model: nt threads a CTA, clusters of cx CTAs along x, smem_bytes of dynamic
 * shared memory a CTA. 0, or the first protocol error (tc::deadlock_detail() names the barrier of a deadlock). */
inline const char *launch(unsigned gx, unsigned gy, unsigned nt, unsigned cx, unsigned smem_bytes, std::function<void()> body) {
  M.smem_bytes = smem_bytes, M.fault_msg.clear(), M.deadlock.clear();
  api.tc = &table;
  hooks.round = round_hook, hooks.idle = idle_hook, hooks.barrier = barrier_hook, hooks.thread_exit = thread_exit_hook;
  hooks.cluster_begin = cluster_begin, hooks.cluster_end = cluster_end;
  const char *r = run_grid_cluster(gx, gy, nt, cx, body);
  hooks = Hooks();
  if (r && !M.fault_msg.empty()) r = M.fault_msg.c_str(); /* the first protocol error, not what followed from it */
  return r;
}
inline const char *deadlock_detail() { return M.deadlock.c_str(); }
/* the TMEM and shared memory of CTA c of the last cluster run (tests) */
inline uint32_t tmem_cell(unsigned c, unsigned lane, unsigned col) { return M.ctas[c].tmem[lane * kTmemCols + col]; }

} // namespace tc
} // namespace fbemu
#endif
