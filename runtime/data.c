/* data.c — the synthetic language the runtime trains on: a random sparse Markov chain over the vocabulary,
 * generated from the seed, with its entropy rate computed exactly (the loss floor printed beside the loss).
 *
 * Entry points (include/fourbit_train.h): fb_markov_create, fb_markov_free, fb_markov_entropy_rate,
 * fb_markov_stationary_entropy, fb_markov_batch.
 *
 * Random numbers: Philox4x32-10 (templates/fb_philox.h), key (seed, stream), counter (a, b, c, 0): the chain
 * from stream DATA_CHAIN, the batches from stream DATA_BATCH with counter (step, sequence, position), so a
 * batch is a pure function of (seed, step) and a resumed run reads exactly the batches it would have read. */
#include "fb_error.h"
#include "fb_philox.h"
#include "fourbit_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { DATA_CHAIN = 0xDA7A0001u, DATA_BATCH = 0xDA7A0002u };

struct fb_markov {
  int vocab, succ;
  uint32_t seed;
  int32_t *next;  /* vocab x succ successor states */
  double *cdf;    /* vocab x succ cumulative probabilities (last = 1) */
  double *prob;   /* vocab x succ */
  double *cdf_pi; /* vocab: cumulative stationary distribution */
  double rate, h_pi;
};

/* A uniform double in [0, 1) from 53 bits of the Philox output at (stream, a, b, c). */
static double uni(uint32_t seed, uint32_t stream, uint32_t a, uint32_t b, uint32_t c) {
  fb_u32 ctr[4] = {a, b, c, 0}, key[2] = {seed, stream}, o[4];
  fb_philox4x32_10(ctr, key, o);
  uint64_t u = ((uint64_t)o[0] << 21) ^ ((uint64_t)o[1] >> 11);
  return (double)(u & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

fb_status fb_markov_create(int vocab, int succ, uint32_t seed, fb_markov **out) {
  *out = NULL;
  if (vocab < 2 || succ < 1 || succ > vocab)
    return FB_ERR(FB_EINVAL, "markov: vocab %d, %d successors: need vocab >= 2 and 1 <= successors <= vocab", vocab,
                  succ);
  fb_markov *m = calloc(1, sizeof *m);
  if (!m) return FB_ERR(FB_ENOMEM, "markov");
  size_t V = (size_t)vocab, S = (size_t)succ;
  m->vocab = vocab, m->succ = succ, m->seed = seed;
  m->next = malloc(V * S * sizeof *m->next);
  m->cdf = malloc(V * S * sizeof *m->cdf);
  m->prob = malloc(V * S * sizeof *m->prob);
  m->cdf_pi = malloc(V * sizeof *m->cdf_pi);
  double *pi = malloc(V * sizeof *pi), *np = malloc(V * sizeof *np);
  fb_status rc = FB_OK;
  if (!m->next || !m->cdf || !m->prob || !m->cdf_pi || !pi || !np) {
    rc = FB_ERR(FB_ENOMEM, "markov: vocab %d", vocab);
    goto done;
  }
  for (size_t i = 0; i < V; ++i) {
    int32_t *nx = m->next + i * S;
    nx[0] = (int32_t)((i + 1) % V);
    uint32_t draw = 0;
    for (size_t k = 1; k < S; ++k) { /* distinct random successors by rejection */
      for (;;) {
        int32_t c = (int32_t)(uni(seed, DATA_CHAIN, (uint32_t)i, 0, draw++) * (double)V);
        int dup = 0;
        for (size_t j = 0; j < k; ++j) dup |= nx[j] == c;
        if (!dup) { nx[k] = c; break; }
      }
    }
    double sum = 0, *p = m->prob + i * S;
    for (size_t k = 0; k < S; ++k) { /* Dirichlet(1): normalized Exp(1) draws */
      p[k] = -log(1.0 - uni(seed, DATA_CHAIN, (uint32_t)i, 1, (uint32_t)k));
      sum += p[k];
    }
    double c = 0;
    for (size_t k = 0; k < S; ++k) p[k] /= sum, c += p[k], m->cdf[i * S + k] = c;
    m->cdf[i * S + S - 1] = 1.0;
  }
  /* Stationary distribution: power iteration on the lazy chain (same pi, aperiodic). */
  for (size_t i = 0; i < V; ++i) pi[i] = 1.0 / (double)V;
  double change = 1;
  for (int it = 0; it < 1000000 && change > 1e-14; ++it) {
    for (size_t i = 0; i < V; ++i) np[i] = 0.5 * pi[i];
    for (size_t i = 0; i < V; ++i)
      for (size_t k = 0; k < S; ++k) np[m->next[i * S + k]] += 0.5 * pi[i] * m->prob[i * S + k];
    change = 0;
    double tot = 0;
    for (size_t i = 0; i < V; ++i) tot += np[i];
    for (size_t i = 0; i < V; ++i) np[i] /= tot, change += fabs(np[i] - pi[i]), pi[i] = np[i];
  }
  if (change > 1e-14) {
    rc = FB_ERR(FB_ENUMERIC, "markov: the stationary distribution did not converge (L1 change %g)", change);
    goto done;
  }
  double rate = 0, hpi = 0, c = 0;
  for (size_t i = 0; i < V; ++i) {
    double h = 0;
    for (size_t k = 0; k < S; ++k) {
      double p = m->prob[i * S + k];
      if (p > 0) h -= p * log(p);
    }
    rate += pi[i] * h;
    if (pi[i] > 0) hpi -= pi[i] * log(pi[i]);
    c += pi[i];
    m->cdf_pi[i] = c;
  }
  m->cdf_pi[V - 1] = 1.0;
  m->rate = rate, m->h_pi = hpi;
done:
  free(pi);
  free(np);
  if (rc != FB_OK) fb_markov_free(m);
  else *out = m;
  return rc;
}

void fb_markov_free(fb_markov *m) {
  if (!m) return;
  free(m->next);
  free(m->cdf);
  free(m->prob);
  free(m->cdf_pi);
  free(m);
}

double fb_markov_entropy_rate(const fb_markov *m) { return m->rate; }
double fb_markov_stationary_entropy(const fb_markov *m) { return m->h_pi; }

/* The first index whose cumulative value exceeds u. */
static int pick(const double *cdf, int n, double u) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (cdf[mid] > u) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

void fb_markov_batch(const fb_markov *m, uint32_t step, int nseq, int seq_len, int32_t *tokens) {
  for (int b = 0; b < nseq; ++b) {
    int32_t *s = tokens + (size_t)b * (size_t)(seq_len + 1);
    s[0] = pick(m->cdf_pi, m->vocab, uni(m->seed, DATA_BATCH, step, (uint32_t)b, 0));
    for (int j = 1; j <= seq_len; ++j) {
      int cur = s[j - 1];
      int k = pick(m->cdf + (size_t)cur * (size_t)m->succ, m->succ, uni(m->seed, DATA_BATCH, step, (uint32_t)b, (uint32_t)j));
      s[j] = m->next[(size_t)cur * (size_t)m->succ + k];
    }
  }
}
