/* The training text: bytes to tokens, the split, batches, a seeded generator. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lm.h"

int64_t lm_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

uint64_t lm_rng_next(lm_rng *r) { /* splitmix64 */
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double lm_rng_uniform(lm_rng *r) { return (double)(lm_rng_next(r) >> 11) / 9007199254740992.0; }

double lm_rng_normal(lm_rng *r) {
  double u = lm_rng_uniform(r) + 1e-300, v = lm_rng_uniform(r);
  return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

int lm_text_load(const char *path, double eval_fraction, lm_text *t) {
  memset(t, 0, sizeof *t);
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  if (fseek(f, 0, SEEK_END) != 0) goto fail;
  long n = ftell(f);
  if (n <= 0 || fseek(f, 0, SEEK_SET) != 0) goto fail;
  t->bytes = malloc((size_t)n);
  t->tok = malloc(sizeof(int32_t) * (size_t)n);
  if (!t->bytes || !t->tok || fread(t->bytes, 1, (size_t)n, f) != (size_t)n) goto fail;
  fclose(f);
  t->n = n;
  int64_t count[256] = {0};
  for (int64_t i = 0; i < n; i++) count[t->bytes[i]]++;
  int32_t id_of[256];
  for (int b = 0; b < 256; b++) {
    id_of[b] = -1;
    if (count[b]) {
      t->byte_of[t->vocab] = (uint8_t)b;
      id_of[b] = t->vocab++;
      double p = (double)count[b] / (double)n;
      t->unigram_nats -= p * log(p);
    }
  }
  for (int64_t i = 0; i < n; i++) t->tok[i] = id_of[t->bytes[i]];
  t->n_train = (int64_t)((double)n * (1 - eval_fraction));
  return 0;
fail:
  fclose(f);
  lm_text_free(t);
  return -1;
}

void lm_text_free(lm_text *t) {
  free(t->bytes);
  free(t->tok);
  memset(t, 0, sizeof *t);
}

void lm_sample(const lm_text *t, int64_t lo, int64_t hi, int B, int L, lm_rng *rng, int shift, int32_t *ids,
               int32_t *targets) {
  int64_t span = hi - lo - (L + 1); /* starts in [lo, lo + span] */
  if (span < 0) span = 0;
  for (int b = 0; b < B; b++) {
    int64_t start;
    if (rng) {
      start = lo + (int64_t)(lm_rng_uniform(rng) * (double)(span + 1));
    } else {
      int64_t k = (int64_t)shift * B + b, slots = span / (L + 1) + 1;
      start = lo + (k % slots) * (L + 1);
    }
    if (start > lo + span) start = lo + span;
    memcpy(ids + (int64_t)b * L, t->tok + start, sizeof(int32_t) * (size_t)L);
    memcpy(targets + (int64_t)b * L, t->tok + start + 1, sizeof(int32_t) * (size_t)L);
  }
}
