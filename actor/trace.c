/* The built-in Chrome/Perfetto trace writer (GPA_TRACE=path): the JSON
 * array form of the trace-event format. One track (tid) per queue, named by
 * a metadata event; ops are complete ("X") events with their shapes in args;
 * batches are begin/end ("B"/"E") spans on their queue's track. Written
 * through a buffered FILE on the actor thread; closed at shutdown. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actor/internal.h"

typedef struct trace {
  FILE *f;
  int64_t t0;
  bool first;
  uint64_t named[4]; /* queue ids that got a name event (bit set, ids < 256) */
} trace;

static void event_sep(trace *t) {
  fputs(t->first ? "\n" : ",\n", t->f);
  t->first = false;
}

/* JSON string contents: names and labels come from users. */
static void put_str(FILE *f, const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
}

static void name_track(trace *t, uint32_t id, const char *name) {
  if (id < 256 && (t->named[id / 64] >> (id % 64) & 1)) return;
  if (id < 256) t->named[id / 64] |= 1ull << (id % 64);
  event_sep(t);
  fprintf(t->f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%u,\"args\":{\"name\":\"", id);
  put_str(t->f, name);
  fputs("\"}}", t->f);
}

static double us(const trace *t, int64_t ns) { return (double)(ns - t->t0) / 1e3; }

static void on_op(const gpa_prof_op *op, void *ud) {
  trace *t = ud;
  name_track(t, op->queue_id, op->queue);
  event_sep(t);
  fputs("{\"name\":\"", t->f);
  put_str(t->f, op->name);
  fprintf(t->f, "\",\"cat\":\"op\",\"ph\":\"X\",\"pid\":1,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"shapes\":\"",
          op->queue_id, us(t, op->start_ns), (double)(op->end_ns - op->start_ns) / 1e3);
  for (uint32_t i = 0; i < op->n_inputs + op->n_outputs; i++) {
    const gpa_tensor *x = &op->tensors[i];
    fprintf(t->f, "%s%s%s[", i ? " " : "", i == op->n_inputs ? "-> " : "", gpa_dtype_name(x->dtype));
    for (uint32_t k = 0; k < x->rank && k < GPA_MAX_RANK; k++) fprintf(t->f, k ? ",%" PRId64 : "%" PRId64, x->shape[k]);
    fputc(']', t->f);
  }
  fprintf(t->f, "\",\"device_us\":%.3f,\"bytes\":%" PRIu64 ",\"queue_depth\":%u,\"status\":\"%s\"}}",
          (double)op->device_ns / 1e3, op->bytes, op->queue_depth, gpa_status_name(op->status));
}

static void on_batch(const gpa_prof_batch *b, void *ud) {
  trace *t = ud;
  name_track(t, b->queue_id, b->queue);
  for (int end = 0; end < 2; end++) {
    event_sep(t);
    fputs("{\"name\":\"", t->f);
    put_str(t->f, b->label[0] ? b->label : "batch");
    fprintf(t->f, "\",\"cat\":\"batch\",\"ph\":\"%s\",\"pid\":1,\"tid\":%u,\"ts\":%.3f", end ? "E" : "B", b->queue_id,
            us(t, end ? b->end_ns : b->start_ns));
    if (end)
      fprintf(t->f, ",\"args\":{\"ops\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"device_us\":%.3f}",
              b->ops, b->errors, b->bytes, (double)b->device_ns / 1e3);
    fputc('}', t->f);
  }
}

static void flush(void *ud) { fflush(((trace *)ud)->f); }

static void destroy(void *ud) {
  trace *t = ud;
  fputs("\n]\n", t->f);
  fclose(t->f);
  free(t);
}

gpa_status gpa__trace_profiler(const char *path, gpa_profiler *out, char *msg, size_t cap) {
  trace *t = calloc(1, sizeof *t);
  if (!t) return GPA_ENOMEM;
  t->f = fopen(path, "w");
  if (!t->f) {
    snprintf(msg, cap, "GPA_TRACE: cannot open '%s' for writing", path);
    free(t);
    return GPA_EINVAL;
  }
  setvbuf(t->f, NULL, _IOFBF, 1 << 20);
  t->t0 = gpa__clock_ns();
  t->first = true;
  fputc('[', t->f);
  *out = (gpa_profiler){sizeof *out, on_op, on_batch, flush, destroy, t};
  return GPA_OK;
}
