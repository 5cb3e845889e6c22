/* Profiling: a user profiler sees every message and batch; the Chrome trace
 * file parses as JSON with well-formed events, one named track per queue and
 * balanced batch spans; the summary table prints at destroy. */
#include <stdlib.h>
#include <unistd.h>

#include "util/testutil.h"

#ifndef GPA_HAVE_JANSSON
int main(void) {
  fprintf(stderr, "skipped: built without jansson (needed to parse the trace)\n");
  return 77;
}
#else
#include <jansson.h>

typedef struct counts {
  int ops, batches, flushes, destroys, errors;
  int64_t last_end;
  char last_name[64];
} counts;

static void on_op(const gpa_prof_op *op, void *ud) {
  counts *c = ud;
  c->ops++;
  c->errors += op->status != GPA_OK;
  CHECK(op->end_ns >= op->start_ns && op->device_ns >= 0);
  snprintf(c->last_name, sizeof c->last_name, "%s", op->name);
}
static void on_batch(const gpa_prof_batch *b, void *ud) {
  counts *c = ud;
  c->batches++;
  CHECK(b->end_ns >= b->start_ns);
}
static void on_flush(void *ud) { ((counts *)ud)->flushes++; }
static void on_destroy(void *ud) { ((counts *)ud)->destroys++; }

static void run_workload(gpa_actor *a, int steps) {
  gpa_queue *q2;
  CHECK_OK(gpa_queue_create(a, "second \"queue\"", &q2));
  gpa_queue *qs[2] = {gpa_actor_default_queue(a), q2};
  gpa_tensor x = tu_f32(a, 1000), y = tu_f32(a, 1000);
  for (int s = 0; s < steps; s++)
    for (int k = 0; k < 2; k++) {
      char label[32];
      snprintf(label, sizeof label, "step %d", s);
      CHECK_OK(gpa_batch_begin(qs[k], label));
      CHECK_OK(tu_fill(qs[k], &x, s, NULL));
      CHECK_OK(gpa_submit(qs[k], &(gpa_op_call){.op = "copy", .inputs = &x, .n_inputs = 1, .outputs = &y,
                                                .n_outputs = 1},
                          NULL));
      gpa_handle *rb;
      CHECK_OK(gpa_readback(qs[k], &y, &rb));
      CHECK_OK(gpa_sync_batch(qs[k], NULL));
      gpa_handle_release(rb);
    }
}

/* How many times `needle` occurs in the file at `path`. */
static int count_in_file(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  CHECK(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  CHECK(buf && fread(buf, 1, (size_t)n, f) == (size_t)n);
  buf[n] = 0;
  fclose(f);
  int c = 0;
  for (const char *p = buf; (p = strstr(p, needle)); p += strlen(needle)) c++;
  free(buf);
  return c;
}

/* The trace keeps binary records and writes JSON later: a flush writes all
 * so far; more events than the in-memory log holds (1 MiB: about 250 no-ops
 * with 64 rank-8 inputs) are written as it fills; names with control
 * characters and quotes are escaped. */
static void trace_log_and_names(void) {
  char path[] = "/tmp/gpa_trace_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  gpa_actor *a = tu_actor(&(gpa_actor_options){.trace_path = path});
  gpa_queue *q = gpa_actor_default_queue(a);
  char label[200];
  memset(label, 'x', sizeof label - 1);
  label[sizeof label - 1] = 0;
  memcpy(label, "tab\there \"q\" \x01", 14);
  enum { NOOPS = 1000, ARGS = 64 };
  gpa_tensor x = tu_f32(a, 16), in[ARGS];
  x.rank = GPA_MAX_RANK;
  for (int k = 0; k < GPA_MAX_RANK; k++) x.shape[k] = k == GPA_MAX_RANK - 1 ? 16 : 1;
  for (int k = 0; k < ARGS; k++) in[k] = x;
  CHECK_OK(gpa_batch_begin(q, label));
  for (int i = 0; i < NOOPS; i++)
    CHECK_OK(gpa_submit(q, &(gpa_op_call){.op = "noop", .inputs = in, .n_inputs = ARGS}, NULL));
  CHECK_OK(gpa_sync_batch(q, NULL));
  CHECK_OK(gpa_actor_profile_flush(a));
  CHECK(count_in_file(path, "\"ph\":\"X\"") == NOOPS); /* all of them, before shutdown */
  CHECK(count_in_file(path, "\"ph\":\"E\"") == 1);
  CHECK_OK(gpa_actor_destroy(a));

  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  if (!root) fprintf(stderr, "trace does not parse: %s line %d\n", err.text, err.line);
  CHECK(root && json_is_array(root));
  int noops = 0, spans = 0;
  size_t i;
  json_t *ev;
  json_array_foreach(root, i, ev) {
    const char *name = json_string_value(json_object_get(ev, "name"));
    const char *ph = json_string_value(json_object_get(ev, "ph"));
    CHECK(name && ph);
    if (!strcmp(ph, "X") && !strcmp(name, "noop")) {
      noops++;
      const char *shapes = json_string_value(json_object_get(json_object_get(ev, "args"), "shapes"));
      CHECK(shapes && !strncmp(shapes, "f32[1,1,1,1,1,1,1,16] f32[", 26) && strlen(shapes) == 64 * 22 - 1);
    }
    if (!strcmp(ph, "B") || !strcmp(ph, "E")) {
      spans++;
      CHECK(strlen(name) >= 32 && !strncmp(name, label, strlen(name))); /* as the batch keeps it (63 bytes) */
    }
  }
  CHECK(noops == NOOPS && spans == 2);
  json_decref(root);
  unlink(path);
}

int main(void) {
  trace_log_and_names();
  char path[] = "/tmp/gpa_trace_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  enum { STEPS = 5 };
  counts c = {0};
  gpa_actor *a = tu_actor(&(gpa_actor_options){.trace_path = path, .profile = 1});
  gpa_profiler p = {sizeof p, on_op, on_batch, on_flush, on_destroy, &c};
  CHECK_OK(gpa_actor_add_profiler(a, &p));
  CHECK_ST(gpa_actor_add_profiler(a, NULL), GPA_EINVAL);
  run_workload(a, STEPS);
  CHECK_OK(gpa_actor_profile_flush(a));
  CHECK(c.ops == STEPS * 2 * 3 && c.batches == STEPS * 2 && c.flushes == 1);
  CHECK(!strcmp(c.last_name, "readback"));
  CHECK_OK(gpa_actor_destroy(a));
  CHECK(c.destroys == 1 && c.flushes == 2);

  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  if (!root) fprintf(stderr, "trace does not parse: %s line %d\n", err.text, err.line);
  CHECK(root && json_is_array(root));
  int x_ops = 0, named = 0, depth[64] = {0}, spans = 0;
  size_t i;
  json_t *ev;
  json_array_foreach(root, i, ev) {
    const char *ph = json_string_value(json_object_get(ev, "ph"));
    CHECK(ph && json_is_string(json_object_get(ev, "name")));
    CHECK(json_is_integer(json_object_get(ev, "pid")) && json_is_integer(json_object_get(ev, "tid")));
    int tid = (int)json_integer_value(json_object_get(ev, "tid"));
    CHECK(tid >= 0 && tid < 64);
    if (!strcmp(ph, "M")) {
      named++;
      const char *qn = json_string_value(json_object_get(json_object_get(ev, "args"), "name"));
      CHECK(qn && (!strcmp(qn, "default") || !strcmp(qn, "second \"queue\"")));
      continue;
    }
    CHECK(json_is_number(json_object_get(ev, "ts")));
    if (!strcmp(ph, "X")) {
      x_ops++;
      CHECK(json_number_value(json_object_get(ev, "dur")) >= 0);
      json_t *args = json_object_get(ev, "args");
      CHECK(json_is_string(json_object_get(args, "shapes")) && json_is_string(json_object_get(args, "status")));
    } else if (!strcmp(ph, "B")) {
      depth[tid]++;
      spans++;
    } else if (!strcmp(ph, "E")) {
      CHECK(depth[tid] > 0);
      depth[tid]--;
    } else {
      CHECK(!"unexpected phase");
    }
  }
  for (int t = 0; t < 64; t++) CHECK(depth[t] == 0); /* balanced */
  CHECK(x_ops == STEPS * 2 * 3 && spans == STEPS * 2 && named == 2);
  json_decref(root);
  unlink(path);

  /* a trace path that cannot be opened fails actor creation with a message */
  gpa_actor *b;
  CHECK_ST(gpa_actor_create(&(gpa_actor_options){.trace_path = "/nonexistent/dir/trace.json"}, &b), GPA_EINVAL);
  CHECK_MSG("cannot open");
  printf("trace_profile: ok (%d op events, %d spans)\n", x_ops, spans);
  return 0;
}
#endif
