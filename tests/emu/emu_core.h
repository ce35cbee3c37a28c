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
  unsigned tid;
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
std::function<void()> g_body;
std::mt19937 g_rng(12345);
const char *g_fault; /* the first protocol error: reported after the launch */

void yield_() { swapcontext(&threads[cur].ctx, &sched); }

fbemu_dim3 e_thread_idx() { return fbemu_dim3{threads[cur].tid, 0, 0}; }
fbemu_dim3 e_block_idx() { return g_block; }
fbemu_dim3 e_grid_dim() { return g_grid; }
fbemu_dim3 e_block_dim() { return g_bdim; }

void e_exchange(unsigned mask, unsigned long long v, unsigned long long out[32]) {
  unsigned lane = threads[cur].tid & 31u, w = threads[cur].tid >> 5;
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
  if (alive && bar_arrived == alive) bar_arrived = 0, ++bar_gen;
}

void e_syncthreads() {
  unsigned g = bar_gen;
  ++bar_arrived, ++progress;
  release_barrier();
  while (bar_gen == g) yield_();
}

fbemu_api api = {e_thread_idx, e_block_idx, e_grid_dim, e_block_dim, e_exchange, e_syncthreads};

void entry() {
  g_body();
  threads[cur].done = true;
  --alive, ++progress;
  release_barrier(); /* an exited thread no longer holds a barrier up */
}

/* (getcontext returns twice, like setjmp: kept out of the scheduler's loops) */
__attribute__((noinline)) void start_thread(unsigned t) {
  Thread &th = threads[t];
  th.tid = t, th.done = false;
  getcontext(&th.ctx);
  th.ctx.uc_stack.ss_sp = stacks[t];
  th.ctx.uc_stack.ss_size = kStack;
  th.ctx.uc_link = &sched;
  makecontext(&th.ctx, entry, 0);
}

/* Run body over the grid, CTA after CTA; returns 0, or a message. */
const char *run_grid(unsigned gx, unsigned gy, unsigned nt, std::function<void()> body) {
  g_body = body, g_fault = NULL;
  g_grid = fbemu_dim3{gx, gy, 1}, g_bdim = fbemu_dim3{nt, 1, 1};
  while (stacks.size() < nt) stacks.push_back((char *)malloc(kStack));
  threads.assign(nt, Thread());
  std::vector<int> order;
  for (unsigned by = 0; by < gy; ++by)
    for (unsigned bx = 0; bx < gx; ++bx) {
      g_block = fbemu_dim3{bx, by, 0};
      warps.assign((nt + 31) / 32, std::vector<Slot>());
      alive = nt, bar_arrived = 0;
      for (unsigned t = 0; t < nt; ++t) start_thread(t);
      while (alive) {
        order.clear();
        for (unsigned t = 0; t < nt; ++t)
          if (!threads[t].done) order.push_back((int)t);
        std::shuffle(order.begin(), order.end(), g_rng);
        unsigned long long p0 = progress;
        for (int t : order) {
          if (threads[t].done) continue;
          cur = t;
          swapcontext(&sched, &threads[t].ctx);
        }
        if (alive && progress == p0) return "deadlock: every live thread waits at a collective or barrier that cannot complete";
      }
      if (g_fault) return g_fault;
    }
  return NULL;
}

void free_stacks() {
  for (char *s : stacks) free(s);
  stacks.clear();
}
} // namespace fbemu
#endif
