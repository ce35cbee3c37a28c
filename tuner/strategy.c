/* strategy.c — exhaustive (with pruning), random and successive-halving search over candidates 0..n-1 with a
 * batch cost oracle (strategy.h says the contract). Costs at a higher effort replace those at a lower one: the
 * final choice is made among the candidates measured at the highest effort reached, so a lucky quick
 * measurement never wins over a careful one. Entry point: fb_search_run(). */
#include "strategy.h"

#include "fb_error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const NAMES[] = {"exhaustive", "random", "halving"};
const char *fb_strategy_name(fb_strategy s) { return (unsigned)s < 3 ? NAMES[s] : "?"; }
int fb_strategy_parse(const char *name, fb_strategy *s) {
  for (int i = 0; i < 3; ++i)
    if (!strcmp(name, NAMES[i])) return *s = (fb_strategy)i, 0;
  return -1;
}

typedef struct {
  const fb_search *p;
  double *cost;   /* best-effort cost of each candidate (NAN: not measured) */
  int *effort;    /* the effort cost[i] comes from; 0: not measured */
  int *dead;      /* failed (or skipped) */
  long spent;
  int stopped, failed, measured;
  uint64_t rng;
} state;

static uint64_t next(state *s) {
  s->rng ^= s->rng << 13, s->rng ^= s->rng >> 7, s->rng ^= s->rng << 17;
  return s->rng;
}

/* measure ids at effort, within the budget (a batch is cut to what the budget allows); returns how many ran */
static int measure(state *s, int *ids, int k, int effort) {
  long left = s->p->budget - s->spent;
  if (s->stopped || left < effort) return 0;
  if ((long)k * effort > left) k = (int)(left / effort);
  int m = 0;
  for (int j = 0; j < k; ++j) /* never a dead one */
    if (!s->dead[ids[j]]) ids[m++] = ids[j];
  if (!m) return 0;
  double *c = malloc(sizeof *c * (size_t)m);
  int *ok = calloc((size_t)m, sizeof *ok);
  if (!c || !ok) { free(c), free(ok); s->stopped = 1; return 0; }
  s->stopped = s->p->measure(s->p->arg, ids, m, effort, c, ok) != 0;
  s->spent += (long)m * effort;
  for (int j = 0; j < m; ++j) {
    int i = ids[j];
    if (!ok[j]) {
      s->dead[i] = 1, ++s->failed;
      continue;
    }
    if (!s->effort[i]) ++s->measured;
    if (effort >= s->effort[i]) s->cost[i] = c[j], s->effort[i] = effort;
  }
  free(c), free(ok);
  return m;
}

static state *sort_state; /* qsort has no context argument */
static int by_cost(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  double cx = sort_state->cost[x], cy = sort_state->cost[y];
  return cx < cy ? -1 : cx > cy ? 1 : x - y;
}

/* alive, measured candidates sorted by cost into out; returns their count */
static int ranked(state *s, int *out, int min_effort) {
  int m = 0;
  for (int i = 0; i < s->p->n; ++i)
    if (!s->dead[i] && s->effort[i] >= min_effort) out[m++] = i;
  sort_state = s;
  qsort(out, (size_t)m, sizeof *out, by_cost);
  return m;
}

static void shuffle(state *s, int *v, int n) {
  for (int i = n - 1; i > 0; --i) {
    int j = (int)(next(s) % (uint64_t)(i + 1)), t = v[i];
    v[i] = v[j], v[j] = t;
  }
}

/* re-measure the best `top` (by current cost) at the full effort while the budget lasts */
static void remeasure_top(state *s, int *buf, int top, int full) {
  int m = ranked(s, buf, 1);
  if (m > top) m = top;
  if (m > 0) measure(s, buf, m, full);
}

static void exhaustive(state *s, int *buf) {
  const fb_search *p = s->p;
  int n = 0, full = p->full_effort;
  for (int i = 0; i < p->n; ++i)
    if (!s->dead[i]) buf[n++] = i;
  /* the quick pass, in batches of 8 so that an early stop keeps what was measured */
  for (int j = 0; j < n && !s->stopped; j += 8) measure(s, buf + j, n - j < 8 ? n - j : 8, 1);
  int m = ranked(s, buf, 1);
  if (m) {
    double cut = s->cost[buf[0]] * (1.0 + p->margin);
    int keep = 0;
    while (keep < m && s->cost[buf[keep]] <= cut) ++keep;
    if (keep < 2 && m > 1) keep = 2; /* always a runner-up */
    long afford = (p->budget - s->spent) / full;
    if (keep > afford) keep = (int)afford;
    for (int j = 0; j < keep && !s->stopped; j += 4) measure(s, buf + j, keep - j < 4 ? keep - j : 4, full);
  }
}

static void random_search(state *s, int *buf) {
  const fb_search *p = s->p;
  int n = 0, full = p->full_effort;
  for (int i = 0; i < p->n; ++i)
    if (!s->dead[i]) buf[n++] = i;
  shuffle(s, buf, n);
  long explore = p->budget * 3 / 4, top = 3;
  if (explore > n) explore = n; /* one look at each is all there is to explore */
  for (long j = 0; j < explore && !s->stopped; j += 8) measure(s, buf + j, (int)(explore - j < 8 ? explore - j : 8), 1);
  /* what is left of the budget re-measures the best few at the full effort */
  long left = p->budget - s->spent;
  if (left / full < top) top = left / full;
  if (top >= 1) remeasure_top(s, buf, (int)top, full);
}

static int ilog2(int k) {
  int l = 0;
  while ((1 << (l + 1)) <= k) ++l;
  return l;
}

static void halving(state *s, int *buf) {
  const fb_search *p = s->p;
  int n = 0;
  for (int i = 0; i < p->n; ++i)
    if (!s->dead[i]) buf[n++] = i;
  if (!n) return;
  shuffle(s, buf, n);
  /* round 0: one quick look at every candidate when the budget is at least twice their number, else at a
   * random sample of half the budget */
  int m0 = p->budget >= 2L * n ? n : (int)(p->budget / 2);
  if (m0 < 2) m0 = n < 2 ? n : 2;
  for (int j = 0; j < m0 && !s->stopped; j += 8) measure(s, buf + j, m0 - j < 8 ? m0 - j : 8, 1);
  /* then halving from the best k1 (a power of two) at effort r, doubling each round: log2(k1) rounds of k1 r each.
   * The largest k1 whose rounds fit the rest of the budget at r >= 2; what is left over raises r. */
  int m = ranked(s, buf, 1);
  long rest = p->budget - s->spent;
  int k1 = 1;
  while (2 * k1 <= m && (long)(2 * k1) * ilog2(2 * k1) * 2 <= rest) k1 *= 2;
  if (k1 < 2 && m >= 2 && rest >= 2) k1 = 2;
  if (k1 < 2) return;
  long r = rest / ((long)k1 * ilog2(k1));
  if (r < 1) return;
  int *cur = malloc(sizeof *cur * (size_t)k1);
  if (!cur) return;
  memcpy(cur, buf, sizeof *cur * (size_t)k1);
  for (int k = k1; k >= 2 && !s->stopped; k /= 2, r *= 2) {
    for (int j = 0; j < k && !s->stopped; j += 8) measure(s, cur + j, k - j < 8 ? k - j : 8, (int)r);
    int a = 0; /* the better half of those measured at this round's effort */
    for (int j = 0; j < k; ++j)
      if (!s->dead[cur[j]] && s->effort[cur[j]] >= r) cur[a++] = cur[j];
    sort_state = s;
    qsort(cur, (size_t)a, sizeof *cur, by_cost);
    if (a < k) { /* failures this round: top up from the ranked list so that the halving keeps its shape */
      for (int j = 0; j < m && a < k; ++j) {
        int dup = s->dead[buf[j]];
        for (int q = 0; q < a && !dup; ++q) dup = cur[q] == buf[j];
        if (!dup) cur[a++] = buf[j];
      }
    }
  }
  free(cur);
}

fb_status fb_search_run(fb_strategy strat, const fb_search *p0, fb_search_result *r) {
  memset(r, 0, sizeof *r);
  r->best = r->runner_up = -1;
  if (p0->n < 0 || !p0->measure) return FB_ERR(FB_EINVAL, "search: no candidates or no oracle");
  if ((unsigned)strat > 2) return FB_ERR(FB_EINVAL, "search: unknown strategy %d", (int)strat);
  fb_search p = *p0;
  if (p.budget <= 0) p.budget = 4L * p.n;
  if (p.full_effort <= 0) p.full_effort = 8;
  if (p.margin <= 0) p.margin = 0.15;
  if (!p.n) return FB_OK;
  state s = {.p = &p, .rng = 0x9E3779B97F4A7C15ull ^ ((uint64_t)p.seed * 0xD1B54A32D192ED03ull + 1)};
  s.cost = malloc(sizeof *s.cost * (size_t)p.n);
  s.effort = calloc((size_t)p.n, sizeof *s.effort);
  s.dead = calloc((size_t)p.n, sizeof *s.dead);
  int *buf = malloc(sizeof *buf * (size_t)p.n);
  if (!s.cost || !s.effort || !s.dead || !buf) {
    free(s.cost), free(s.effort), free(s.dead), free(buf);
    return FB_ERR(FB_ENOMEM, "search");
  }
  for (int i = 0; i < p.n; ++i) {
    s.cost[i] = NAN;
    s.dead[i] = p.skip && p.skip[i];
  }
  if (strat == FB_STRATEGY_EXHAUSTIVE) exhaustive(&s, buf);
  else if (strat == FB_STRATEGY_RANDOM) random_search(&s, buf);
  else halving(&s, buf);
  /* the choice: among those measured at the highest effort reached */
  int top = 0;
  for (int i = 0; i < p.n; ++i)
    if (!s.dead[i] && s.effort[i] > top) top = s.effort[i];
  int m = top ? ranked(&s, buf, top) : 0;
  if (m > 0) r->best = buf[0], r->best_cost = s.cost[buf[0]], r->best_effort = top;
  if (m > 1) r->runner_up = buf[1], r->runner_up_cost = s.cost[buf[1]];
  else if (m == 1) { /* a runner-up from a lower effort, for the record */
    int all = ranked(&s, buf, 1);
    for (int j = 0; j < all; ++j)
      if (buf[j] != r->best) { r->runner_up = buf[j], r->runner_up_cost = s.cost[buf[j]]; break; }
  }
  r->measured = s.measured, r->failed = s.failed, r->spent = s.spent, r->stopped = s.stopped;
  free(s.cost), free(s.effort), free(s.dead), free(buf);
  return FB_OK;
}
