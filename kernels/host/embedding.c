/* Embedding gather and deterministic scatter-add; see embedding.h. */
#include "kernels/host/embedding.h"

#include <string.h>

#include "kernels/host/nt_store.h"

#define EMB_GRAIN 16384 /* elements per task */
#define EMB_COLS 512    /* double accumulators per pass of a backward row */

typedef struct emb_ctx {
  float *out;
  const float *src;
  const int32_t *ids;
  int64_t n, V, D;
  int accumulate;
  const int64_t *off;   /* [V + 1] bucket offsets */
  const int32_t *order; /* [n] positions, bucketed by id, ascending within one */
  int nt;               /* stream whole rows of the table (nt_store.h) */
} emb_ctx;

int64_t gpa__embedding_first_bad_id(const int32_t *ids, int64_t n, int64_t V) {
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || (int64_t)ids[i] >= V) return i;
  return -1;
}

static void fwd_rows(int64_t s, int64_t e, void *p) {
  const emb_ctx *c = p;
  const size_t row = (size_t)c->D * sizeof(float);
  for (int64_t i = s; i < e; i++) memcpy(c->out + i * c->D, c->src + (int64_t)c->ids[i] * c->D, row);
}

void gpa__embedding_fwd_f32(const gpa__par *par, float *y, const int32_t *ids, const float *table, int64_t n,
                            int64_t D) {
  if (D <= 0) return;
  emb_ctx c = {.out = y, .src = table, .ids = ids, .n = n, .D = D};
  int64_t grain = EMB_GRAIN / D;
  gpa__pfor(par, n, grain < 1 ? 1 : grain, fwd_rows, &c);
}

GPA__KCLONES static void add_rows(float *restrict out, const float *restrict dy, const int32_t *restrict pos,
                                  int64_t k, int64_t D, int accumulate) {
  double acc[EMB_COLS];
  for (int64_t d0 = 0; d0 < D; d0 += EMB_COLS) {
    int64_t nd = D - d0 < EMB_COLS ? D - d0 : EMB_COLS;
    for (int64_t j = 0; j < nd; j++) acc[j] = accumulate ? (double)out[d0 + j] : 0.0;
    for (int64_t t = 0; t < k; t++) {
      const float *restrict r = dy + (int64_t)pos[t] * D + d0;
      for (int64_t j = 0; j < nd; j++) acc[j] += (double)r[j];
    }
    for (int64_t j = 0; j < nd; j++) out[d0 + j] = (float)acc[j];
  }
}

static void bwd_vocab(int64_t s, int64_t e, void *p) {
  const emb_ctx *c = p;
  const int64_t D = c->D;
  for (int64_t v = s; v < e; v++) {
    int64_t b = c->off[v], k = c->off[v + 1] - b;
    float *row = c->out + v * D;
    if (k == 0) {
      if (c->accumulate) continue;
      if (c->nt)
        gpa__nt_zero(row, D);
      else
        memset(row, 0, (size_t)D * sizeof *row);
    } else if (k == 1 && !c->accumulate) {
      if (c->nt)
        gpa__nt_copy(row, c->src + (int64_t)c->order[b] * D, D);
      else
        memcpy(row, c->src + (int64_t)c->order[b] * D, (size_t)D * sizeof *row);
    } else {
      add_rows(row, c->src, c->order + b, k, D, c->accumulate);
    }
  }
  if (c->nt) gpa__nt_fence();
}

size_t gpa__embedding_bwd_scratch(int64_t n, int64_t V) {
  return (size_t)(V + 1) * sizeof(int64_t) + (size_t)(n > 0 ? n : 0) * sizeof(int32_t);
}

void gpa__embedding_bwd_f32(const gpa__par *par, float *dtable, const float *dy, const int32_t *ids,
                            int64_t n, int64_t V, int64_t D, int accumulate, void *scratch) {
  if (D <= 0 || V <= 0) return;
  int64_t *off = scratch;
  int32_t *order = (int32_t *)(off + V + 1);
  /* Stable counting sort of the positions by id (serial: O(n + V)). */
  memset(off, 0, (size_t)(V + 1) * sizeof *off);
  for (int64_t i = 0; i < n; i++) off[ids[i] + 1]++;
  for (int64_t v = 0; v < V; v++) off[v + 1] += off[v];
  for (int64_t i = 0; i < n; i++) order[off[ids[i]]++] = (int32_t)i;
  /* off[v] is now the end of bucket v, i.e. the start of bucket v + 1. */
  memmove(off + 1, off, (size_t)V * sizeof *off);
  off[0] = 0;
  /* The table is mostly rows written once (zeros or one copied row): past
   * the cache, stream them. Not when accumulating (rows are read first). */
  emb_ctx c = {.out = dtable, .src = dy, .ids = ids, .n = n, .V = V, .D = D, .accumulate = accumulate,
               .off = off, .order = order,
               .nt = !accumulate && gpa__nt_worth(4 * ((uint64_t)V + (uint64_t)(n > 0 ? n : 0)) * (uint64_t)D)};
  int64_t grain = EMB_GRAIN / D;
  gpa__pfor(par, V, grain < 1 ? 1 : grain, bwd_vocab, &c);
}
