/* The built-in Chrome/Perfetto trace writer (GPA_TRACE=path): the JSON
 * array form of the trace-event format. One track (tid) per queue, named by
 * a metadata event; ops are complete ("X") events with their shapes in args;
 * batches are begin/end ("B"/"E") spans on their queue's track.
 *
 * Why two stages: formatting JSON with stdio costs about 25,000
 * instructions an op (printf's float conversion most of all), which was
 * 1.5-2% of a training step. So on_op and on_batch only append a compact
 * binary record (the numbers and copies of the strings) to a preallocated
 * log; the log is turned into JSON in one go, with integer formatting, when
 * it fills up, at gpa_actor_profile_flush and at shutdown. Everything runs on
 * the actor thread: no lock, no extra thread. Times are printed as
 * microseconds with three decimals, which is exact for integer ns. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actor/internal.h"

enum { LOG_CAP = 1 << 20, OUT_CAP = 1 << 16, NAME_MAX_LEN = 127 };
enum { REC_TRACK, REC_OP, REC_BATCH };

/* One record's fixed part; strings and shapes follow it in the log. */
typedef struct rec {
  uint8_t kind, n_in, n_out, pad;
  uint32_t queue_id;
  int32_t status;
  uint32_t depth;
  int64_t start_ns, end_ns, device_ns;
  uint64_t bytes, ops, errors;
} rec;

typedef struct trace {
  FILE *f;
  int64_t t0;
  bool first;
  uint64_t named[4]; /* queue ids that got a name event (bit set, ids < 256) */
  unsigned char *log;
  size_t log_len;
  char out[OUT_CAP];
  size_t out_len;
} trace;

/* ---- recording (the per-event path) ------------------------------------------------------------ */

static void put_bytes(trace *t, const void *p, size_t n) {
  memcpy(t->log + t->log_len, p, n);
  t->log_len += n;
}

/* A string as a length byte and its bytes (cut at NAME_MAX_LEN). */
static void put_name(trace *t, const char *s) {
  size_t n = strnlen(s, NAME_MAX_LEN);
  t->log[t->log_len++] = (unsigned char)n;
  put_bytes(t, s, n);
}

static void format_log(trace *t);

/* Room for `need` more bytes of log, formatting what is there if needed. */
static void reserve(trace *t, size_t need) {
  if (t->log_len + need > LOG_CAP) format_log(t);
}

static void track(trace *t, uint32_t id, const char *name) {
  if (id < 256 && (t->named[id / 64] >> (id % 64) & 1)) return;
  if (id < 256) t->named[id / 64] |= 1ull << (id % 64);
  reserve(t, sizeof(rec) + 1 + NAME_MAX_LEN);
  put_bytes(t, &(rec){.kind = REC_TRACK, .queue_id = id}, sizeof(rec));
  put_name(t, name);
}

static void on_op(const gpa_prof_op *op, void *ud) {
  trace *t = ud;
  track(t, op->queue_id, op->queue);
  uint32_t n = op->n_inputs + op->n_outputs;
  if (op->n_inputs > 255 || op->n_outputs > 255) n = 0; /* no shapes rather than a bad record */
  reserve(t, sizeof(rec) + 1 + NAME_MAX_LEN + (size_t)n * (2 + GPA_MAX_RANK * sizeof(int64_t)));
  rec r = {REC_OP, (uint8_t)(n ? op->n_inputs : 0), (uint8_t)(n ? op->n_outputs : 0), 0, op->queue_id,
           op->status, op->queue_depth, op->start_ns, op->end_ns, op->device_ns, op->bytes, 0, 0};
  put_bytes(t, &r, sizeof r);
  put_name(t, op->name);
  for (uint32_t i = 0; i < n; i++) {
    const gpa_tensor *x = &op->tensors[i];
    uint8_t rank = x->rank < GPA_MAX_RANK ? (uint8_t)x->rank : GPA_MAX_RANK;
    t->log[t->log_len++] = (unsigned char)x->dtype;
    t->log[t->log_len++] = rank;
    put_bytes(t, x->shape, rank * sizeof(int64_t));
  }
}

static void on_batch(const gpa_prof_batch *b, void *ud) {
  trace *t = ud;
  track(t, b->queue_id, b->queue);
  reserve(t, sizeof(rec) + 1 + NAME_MAX_LEN);
  rec r = {REC_BATCH, 0, 0, 0, b->queue_id, 0, 0, b->start_ns, b->end_ns, b->device_ns, b->bytes, b->ops, b->errors};
  put_bytes(t, &r, sizeof r);
  put_name(t, b->label[0] ? b->label : "batch");
}

/* ---- formatting (in bulk) ---------------------------------------------------------------------- */

static void out_flush(trace *t) {
  if (t->out_len) fwrite(t->out, 1, t->out_len, t->f);
  t->out_len = 0;
}

/* Room checks go by pieces that are far smaller than this (an event's fixed
 * part with its escaped name; one tensor's shape), not by byte. */
enum { EVENT_MAX = 2048 };
static void out_room(trace *t) {
  if (t->out_len + EVENT_MAX > OUT_CAP) out_flush(t);
}

static void out_lit(trace *t, const char *s) {
  size_t n = strlen(s);
  memcpy(t->out + t->out_len, s, n);
  t->out_len += n;
}

static void out_u64(trace *t, uint64_t v) {
  char tmp[20];
  int n = 0;
  do tmp[n++] = (char)('0' + v % 10);
  while (v /= 10);
  while (n) t->out[t->out_len++] = tmp[--n];
}

static void out_i64(trace *t, int64_t v) {
  if (v < 0) t->out[t->out_len++] = '-';
  out_u64(t, v < 0 ? 0 - (uint64_t)v : (uint64_t)v);
}

/* ns as microseconds with three decimals ("%.3f" of ns / 1e3). */
static void out_us(trace *t, int64_t ns) {
  uint64_t a = ns < 0 ? 0 - (uint64_t)ns : (uint64_t)ns;
  if (ns < 0) t->out[t->out_len++] = '-';
  out_u64(t, a / 1000);
  uint32_t f = (uint32_t)(a % 1000);
  char *p = t->out + t->out_len;
  p[0] = '.', p[1] = (char)('0' + f / 100), p[2] = (char)('0' + f / 10 % 10), p[3] = (char)('0' + f % 10);
  t->out_len += 4;
}

/* A member: key is the literal text before the value (",\"bytes\":"). */
static void out_key_u64(trace *t, const char *key, uint64_t v) {
  out_lit(t, key);
  out_u64(t, v);
}

static void out_key_us(trace *t, const char *key, int64_t ns) {
  out_lit(t, key);
  out_us(t, ns);
}

/* JSON string contents from a log name: names and labels come from users. */
static const unsigned char *out_name(trace *t, const unsigned char *p) {
  size_t n = *p++;
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    unsigned char c = p[i];
    if (c == '"' || c == '\\') {
      t->out[t->out_len++] = '\\';
      t->out[t->out_len++] = (char)c;
    } else if (c < 0x20) {
      memcpy(t->out + t->out_len, "\\u00", 4);
      t->out[t->out_len + 4] = hex[c >> 4];
      t->out[t->out_len + 5] = hex[c & 15];
      t->out_len += 6;
    } else {
      t->out[t->out_len++] = (char)c;
    }
  }
  return p + n;
}

static void event_open(trace *t, const char *lead) {
  out_room(t);
  out_lit(t, t->first ? "\n" : ",\n");
  t->first = false;
  out_lit(t, lead);
}

static const unsigned char *format_op(trace *t, const rec *r, const unsigned char *p) {
  event_open(t, "{\"name\":\"");
  p = out_name(t, p);
  out_key_u64(t, "\",\"cat\":\"op\",\"ph\":\"X\",\"pid\":1,\"tid\":", r->queue_id);
  out_key_us(t, ",\"ts\":", r->start_ns - t->t0);
  out_key_us(t, ",\"dur\":", r->end_ns - r->start_ns);
  out_lit(t, ",\"args\":{\"shapes\":\"");
  for (uint32_t i = 0; i < (uint32_t)r->n_in + r->n_out; i++) {
    out_room(t);
    if (i) out_lit(t, " ");
    if (i == r->n_in) out_lit(t, "-> ");
    out_lit(t, gpa_dtype_name(p[0]));
    out_lit(t, "[");
    uint8_t rank = p[1];
    p += 2;
    for (uint8_t k = 0; k < rank; k++, p += sizeof(int64_t)) {
      int64_t d;
      memcpy(&d, p, sizeof d);
      if (k) out_lit(t, ",");
      out_i64(t, d);
    }
    out_lit(t, "]");
  }
  out_room(t);
  out_key_us(t, "\",\"device_us\":", r->device_ns);
  out_key_u64(t, ",\"bytes\":", r->bytes);
  out_key_u64(t, ",\"queue_depth\":", r->depth);
  out_lit(t, ",\"status\":\"");
  out_lit(t, gpa_status_name(r->status));
  out_lit(t, "\"}}");
  return p;
}

static const unsigned char *format_batch(trace *t, const rec *r, const unsigned char *p) {
  const unsigned char *label = p;
  for (int end = 0; end < 2; end++) {
    event_open(t, "{\"name\":\"");
    p = out_name(t, label);
    out_lit(t, end ? "\",\"cat\":\"batch\",\"ph\":\"E\",\"pid\":1,\"tid\":"
                   : "\",\"cat\":\"batch\",\"ph\":\"B\",\"pid\":1,\"tid\":");
    out_u64(t, r->queue_id);
    out_key_us(t, ",\"ts\":", (end ? r->end_ns : r->start_ns) - t->t0);
    if (end) {
      out_key_u64(t, ",\"args\":{\"ops\":", r->ops);
      out_key_u64(t, ",\"errors\":", r->errors);
      out_key_u64(t, ",\"bytes\":", r->bytes);
      out_key_us(t, ",\"device_us\":", r->device_ns);
      out_lit(t, "}");
    }
    out_lit(t, "}");
  }
  return p;
}

static const unsigned char *format_track(trace *t, const rec *r, const unsigned char *p) {
  event_open(t, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":");
  out_u64(t, r->queue_id);
  out_lit(t, ",\"args\":{\"name\":\"");
  p = out_name(t, p);
  out_lit(t, "\"}}");
  return p;
}

static void format_log(trace *t) {
  const unsigned char *p = t->log, *end = t->log + t->log_len;
  while (p < end) {
    rec r;
    memcpy(&r, p, sizeof r);
    p += sizeof r;
    p = r.kind == REC_OP ? format_op(t, &r, p) : r.kind == REC_BATCH ? format_batch(t, &r, p) : format_track(t, &r, p);
  }
  t->log_len = 0;
  out_flush(t);
}

/* ---- the profiler ------------------------------------------------------------------------------ */

static void flush(void *ud) {
  trace *t = ud;
  format_log(t);
  fflush(t->f);
}

static void destroy(void *ud) {
  trace *t = ud;
  format_log(t);
  fputs("\n]\n", t->f);
  if (ferror(t->f) | fclose(t->f)) gpa__log(GPA_LOG_ERROR, GPA_LOG_ERROR, "GPA_TRACE: writing the trace failed");
  free(t->log);
  free(t);
}

gpa_status gpa__trace_profiler(const char *path, gpa_profiler *out, char *msg, size_t cap) {
  trace *t = calloc(1, sizeof *t);
  unsigned char *log = malloc(LOG_CAP);
  if (!t || !log) {
    free(t);
    free(log);
    snprintf(msg, cap, "GPA_TRACE: out of memory for the trace log");
    return GPA_ENOMEM;
  }
  t->log = log;
  t->f = fopen(path, "w");
  if (!t->f) {
    snprintf(msg, cap, "GPA_TRACE: cannot open '%s' for writing", path);
    free(log);
    free(t);
    return GPA_EINVAL;
  }
  t->t0 = gpa__clock_ns();
  t->first = true;
  fputc('[', t->f);
  *out = (gpa_profiler){sizeof *out, on_op, on_batch, flush, destroy, t};
  return GPA_OK;
}
