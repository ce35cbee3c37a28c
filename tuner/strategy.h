/* strategy.h — search strategies over a list of candidates with a cost oracle (tuner/strategy.c). Generic: a
 * candidate is an index 0..n-1; the oracle measures a batch of them (so that the caller can interleave their
 * runs) at an effort (1: a quick measurement; e: e times as many runs, less noise) and may fail a candidate,
 * which is then never asked for again. The budget counts effort units: a batch of k at effort e spends k*e.
 *   exhaustive  every candidate at effort 1 (pruning: those that fail, and those whose quick cost is beyond
 *               best x (1 + margin), get no more), then the survivors at a higher effort, best quick cost first,
 *               while the budget lasts
 *   random      a random sample at effort 1 with 3/4 of the budget, then the best few re-measured
 *   halving     successive halving: a sample at a low effort; each round keeps the better half and doubles the
 *               effort, until one is left (the budget goes where the candidates are good)
 * Entry point: fb_search_run(). */
#ifndef FB_TUNER_STRATEGY_H
#define FB_TUNER_STRATEGY_H
#include "fourbit.h"

typedef enum { FB_STRATEGY_EXHAUSTIVE = 0, FB_STRATEGY_RANDOM, FB_STRATEGY_HALVING } fb_strategy;
const char *fb_strategy_name(fb_strategy s);
/* "exhaustive", "random", "halving" -> 0 with *s set; -1 otherwise */
int fb_strategy_parse(const char *name, fb_strategy *s);

/* Measure ids[0..k) at effort: cost[j] (lower is better) where ok[j], else the candidate failed. Return nonzero
 * to stop the search (e.g. out of time); what was measured so far still counts. */
typedef int (*fb_search_oracle)(void *arg, const int *ids, int k, int effort, double *cost, int *ok);

typedef struct {
  int n;                   /* candidates */
  fb_search_oracle measure;
  void *arg;
  long budget;             /* effort units; <= 0: 4 n */
  int full_effort;         /* the effort of a final measurement (exhaustive, random); <= 0: 8 */
  double margin;           /* exhaustive: prune a quick cost beyond best x (1 + margin); <= 0: 0.15 */
  unsigned seed;
  const int *skip;         /* may be NULL: skip[i] nonzero = known to fail already (a recorded trial), never measured */
} fb_search;

typedef struct {
  int best, runner_up;     /* -1 if none */
  double best_cost, runner_up_cost;
  int best_effort;         /* the effort of the measurement best_cost comes from */
  int measured;            /* distinct candidates measured at least once */
  int failed;              /* candidates the oracle failed */
  long spent;              /* effort units used */
  int stopped;             /* the oracle asked to stop */
} fb_search_result;

fb_status fb_search_run(fb_strategy s, const fb_search *p, fb_search_result *r);
#endif
