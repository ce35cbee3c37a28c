/* emu_core.h — the warp emulator behind tests/test_emu.cpp and build/emu/test_kernels: runs a kernel compiled as
 * host C++ (against fb_emu.h) over a grid, CTA after CTA, each CTA's threads as coroutines (ucontext). A thread
 * runs until a warp intrinsic or a barrier, deposits its value and waits for every lane of the mask; waiting
 * threads are resumed in a seeded random order, so a missing __syncwarp / __syncthreads between one lane's write
 * and another's read shows as a wrong result, and a lane missing from a collective as a reported deadlock.
 * Entry points: fbemu::api (the table a loaded kernel library's fbemu_table must point to), fbemu::run_grid().
 * Include in one C++ file of a program. */
#ifndef FB_EMU_CORE_H
#define FB_EMU_CORE_H
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <algorithm>
#include <functional>
#include <random>
#include <vector>

#include "fb_emu.h"

namespace fbemu {

struct Thread {
  ucontext_t ctx;
  unsigned tid, cta; /* threadIdx.x; the CTA's rank in its cluster (0 without clusters) */
  bool done;
};

struct Slot { /* one warp collective in flight */
  bool used, complete;
  unsigned mask, arrived, readers;
  unsigned long long v[32];
};

const size_t kStack = 256 * 1024;
std::vector<Thread> threads;
std::vector<char *> stacks;
std::vector<std::vector<Slot>> warps;
ucontext_t sched;
int cur;
unsigned alive, bar_arrived, bar_gen;
unsigned long long progress;
fbemu_dim3 g_block, g_grid, g_bdim;
/* Clusters (run_grid_cluster): a cluster's CTAs run together, their threads one set of coroutines; per CTA of the
 * cluster its live threads and barrier (the scalars above are CTA 0's, as without clusters). */
unsigned g_csize = 1, g_nt;
std::vector<unsigned> c_alive, c_bar_arrived, c_bar_gen;
/* The model's hooks (tests/emu/tc_model.h), all unset without it: a scheduler round's start (async operations
 * may complete), a round in which no thread progressed (complete one pending async operation: true if one did),
 * a __syncthreads released for CTA c, a thread's exit (cur the exiting thread, already done), a cluster's start
 * and end. */
struct Hooks {
  void (*round)(void);
  bool (*idle)(void);
  void (*barrier)(unsigned cta);
  void (*thread_exit)(void);
  void (*cluster_begin)(unsigned nt, unsigned csize);
  const char *(*cluster_end)(void);
} hooks;
std::function<void()> g_body;
std::mt19937 g_rng(12345);
const char *g_fault; /* the first protocol error: reported after the launch */

void yield_() { swapcontext(&threads[cur].ctx, &sched); }

fbemu_dim3 e_thread_idx() { return fbemu_dim3{threads[cur].tid, 0, 0}; }
fbemu_dim3 e_block_idx() { return fbemu_dim3{g_block.x + threads[cur].cta, g_block.y, g_block.z}; }
fbemu_dim3 e_grid_dim() { return g_grid; }
fbemu_dim3 e_block_dim() { return g_bdim; }

void e_exchange(unsigned mask, unsigned long long v, unsigned long long out[32]) {
  unsigned lane = threads[cur].tid & 31u, w = threads[cur].cta * ((g_nt + 31) / 32) + (threads[cur].tid >> 5);
  if (!(mask >> lane & 1u)) { g_fault = "a lane called a warp collective with a mask that leaves it out"; mask |= 1u << lane; }
  std::vector<Slot> &sl = warps[w];
  int si = -1;
  for (size_t i = 0; i < sl.size() && si < 0; ++i)
    if (sl[i].used && !sl[i].complete && sl[i].mask == mask) si = (int)i;
  if (si < 0) {
    for (size_t i = 0; i < sl.size() && si < 0; ++i)
      if (!sl[i].used) si = (int)i;
    if (si < 0) si = (int)sl.size(), sl.push_back(Slot());
    Slot &s = sl[si];
    s.used = true, s.complete = false, s.mask = mask, s.arrived = 0, s.readers = 0;
    memset(s.v, 0, sizeof s.v);
  }
  sl[si].v[lane] = v;
  sl[si].arrived |= 1u << lane;
  ++progress;
  if (sl[si].arrived == mask) sl[si].complete = true;
  while (!warps[w][si].complete) yield_();
  Slot &s = warps[w][si];
  memcpy(out, s.v, sizeof s.v);
  s.readers |= 1u << lane;
  if (s.readers == mask) s.used = false;
}

void release_barrier() {
  if (g_csize > 1) {
    unsigned c = threads[cur].cta;
    if (c_alive[c] && c_bar_arrived[c] == c_alive[c]) {
      c_bar_arrived[c] = 0, ++c_bar_gen[c];
      if (hooks.barrier) hooks.barrier(c);
    }
    return;
  }
  if (alive && bar_arrived == alive) {
    bar_arrived = 0, ++bar_gen;
    if (hooks.barrier) hooks.barrier(0);
  }
}

void e_syncthreads() {
  if (g_csize > 1) {
    unsigned c = threads[cur].cta, g = c_bar_gen[c];
    ++c_bar_arrived[c], ++progress;
    release_barrier();
    while (c_bar_gen[c] == g) yield_();
    return;
  }
  unsigned g = bar_gen;
  ++bar_arrived, ++progress;
  release_barrier();
  while (bar_gen == g) yield_();
}

fbemu_api api = {e_thread_idx, e_block_idx, e_grid_dim, e_block_dim, e_exchange, e_syncthreads, NULL};

void entry() {
  g_body();
  threads[cur].done = true;
  --alive, ++progress;
  if (g_csize > 1) --c_alive[threads[cur].cta];
  if (hooks.thread_exit) hooks.thread_exit();
  release_barrier(); /* an exited thread no longer holds a barrier up */
}

/* (getcontext returns twice, like setjmp: kept out of the scheduler's loops) */
__attribute__((noinline)) void start_thread(unsigned t) {
  Thread &th = threads[t];
  th.tid = t % g_nt, th.cta = t / g_nt, th.done = false;
  getcontext(&th.ctx);
  th.ctx.uc_stack.ss_sp = stacks[t];
  th.ctx.uc_stack.ss_size = kStack;
  th.ctx.uc_link = &sched;
  makecontext(&th.ctx, entry, 0);
}

/* Run body over the grid, cluster after cluster (cx CTAs along x together: gx a multiple of cx; 1 = CTA after
 * CTA); returns 0, or a message. */
const char *run_grid_cluster(unsigned gx, unsigned gy, unsigned nt, unsigned cx, std::function<void()> body) {
  g_body = body, g_fault = NULL;
  g_grid = fbemu_dim3{gx, gy, 1}, g_bdim = fbemu_dim3{nt, 1, 1};
  if (cx < 1 || gx % cx) return "run_grid_cluster: the grid is not a whole number of clusters";
  g_csize = cx, g_nt = nt;
  unsigned all = nt * cx;
  while (stacks.size() < all) stacks.push_back((char *)malloc(kStack));
  threads.assign(all, Thread());
  std::vector<int> order;
  const char *err = NULL;
  for (unsigned by = 0; by < gy && !err; ++by)
    for (unsigned bx = 0; bx < gx && !err; bx += cx) {
      g_block = fbemu_dim3{bx, by, 0};
      warps.assign(cx * ((nt + 31) / 32), std::vector<Slot>());
      alive = all, bar_arrived = 0;
      c_alive.assign(cx, nt), c_bar_arrived.assign(cx, 0), c_bar_gen.assign(cx, 0);
      if (hooks.cluster_begin) hooks.cluster_begin(nt, cx);
      for (unsigned t = 0; t < all; ++t) start_thread(t);
      while (alive) {
        if (hooks.round) hooks.round();
        order.clear();
        for (unsigned t = 0; t < all; ++t)
          if (!threads[t].done) order.push_back((int)t);
        std::shuffle(order.begin(), order.end(), g_rng);
        unsigned long long p0 = progress;
        for (int t : order) {
          if (threads[t].done) continue;
          cur = t;
          swapcontext(&sched, &threads[t].ctx);
        }
        if (alive && progress == p0 && !(hooks.idle && hooks.idle())) {
          err = "deadlock: every live thread waits at a collective or barrier that cannot complete";
          break;
        }
      }
      if (!err && hooks.cluster_end) err = hooks.cluster_end();
      if (!err && g_fault) err = g_fault;
    }
  g_csize = 1;
  return err;
}

/* Run body over the grid, CTA after CTA; returns 0, or a message. */
const char *run_grid(unsigned gx, unsigned gy, unsigned nt, std::function<void()> body) {
  return run_grid_cluster(gx, gy, nt, 1, body);
}

void free_stacks() {
  for (char *s : stacks) free(s);
  stacks.clear();
}
} // namespace fbemu
#endif
