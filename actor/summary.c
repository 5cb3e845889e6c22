/* The built-in summary profiler (GPA_PROFILE=1): per op name, count, host
 * and device time and bytes; per queue, batches. Printed to stderr at
 * shutdown, most device time first. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actor/internal.h"

typedef struct row {
  const char *key; /* the name pointer it was last found by (an op's registered name) */
  char name[64];
  uint64_t count, errors, bytes;
  int64_t host_ns, device_ns;
} row;

typedef struct summary {
  row *rows;
  uint32_t n, cap;
  uint64_t batches;
  int64_t batch_host_ns, batch_device_ns;
} summary;

/* Per op while profiling: the row is found by the name's pointer (the op's
 * registered name: the same pointer every time) with one strcmp, not a
 * strcmp with every row; a new pointer (another registration of the name,
 * or memory reused by another name) falls back to the names. */
static row *find(summary *s, const char *name) {
  for (uint32_t i = 0; i < s->n; i++)
    if (s->rows[i].key == name && !strcmp(s->rows[i].name, name)) return &s->rows[i];
  for (uint32_t i = 0; i < s->n; i++)
    if (!strcmp(s->rows[i].name, name)) {
      s->rows[i].key = name;
      return &s->rows[i];
    }
  if (s->n == s->cap) {
    uint32_t cap = s->cap ? s->cap * 2 : 32;
    row *r = realloc(s->rows, cap * sizeof *r);
    if (!r) return NULL;
    s->rows = r;
    s->cap = cap;
  }
  row *r = &s->rows[s->n++];
  memset(r, 0, sizeof *r);
  r->key = name;
  snprintf(r->name, sizeof r->name, "%s", name);
  return r;
}

static void on_op(const gpa_prof_op *op, void *ud) {
  row *r = find(ud, op->name);
  if (!r) return;
  r->count++;
  r->errors += op->status != GPA_OK;
  r->bytes += op->bytes;
  r->host_ns += op->end_ns - op->start_ns;
  r->device_ns += op->device_ns;
}

static void on_batch(const gpa_prof_batch *b, void *ud) {
  summary *s = ud;
  s->batches++;
  s->batch_host_ns += b->end_ns - b->start_ns;
  s->batch_device_ns += b->device_ns;
}

static int by_device(const void *x, const void *y) {
  const row *a = x, *b = y;
  return (a->device_ns < b->device_ns) - (a->device_ns > b->device_ns);
}

static void destroy(void *ud) {
  summary *s = ud;
  qsort(s->rows, s->n, sizeof *s->rows, by_device);
  fprintf(stderr, "gpuactor profile: %-24s %10s %7s %12s %12s %10s %12s\n", "op", "count", "errors", "device ms",
          "host ms", "us/op", "MB moved");
  for (uint32_t i = 0; i < s->n; i++) {
    row *r = &s->rows[i];
    fprintf(stderr, "gpuactor profile: %-24s %10" PRIu64 " %7" PRIu64 " %12.3f %12.3f %10.2f %12.1f\n", r->name,
            r->count, r->errors, r->device_ns / 1e6, r->host_ns / 1e6, r->device_ns / 1e3 / (double)r->count,
            r->bytes / 1e6);
  }
  if (s->batches)
    fprintf(stderr, "gpuactor profile: %" PRIu64 " batches, mean %.3f ms wall, %.3f ms device\n", s->batches,
            s->batch_host_ns / 1e6 / (double)s->batches, s->batch_device_ns / 1e6 / (double)s->batches);
  free(s->rows);
  free(s);
}

gpa_status gpa__summary_profiler(gpa_profiler *out) {
  summary *s = calloc(1, sizeof *s);
  if (!s) return GPA_ENOMEM;
  *out = (gpa_profiler){sizeof *out, on_op, on_batch, NULL, destroy, s};
  return GPA_OK;
}
