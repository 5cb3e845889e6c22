/* gpa-demo: a workload through the actor using only the core ops.
 *
 * Several producer threads, each with its own queue, run "steps": upload a
 * versioned weight and a fresh input, fill/copy through labeled buffers, a
 * burst of no-ops (the messaging floor), a readback of a checksum slice, then
 * sync the batch and verify the data that came back. Prints throughput and
 * batch stats as it goes. */
#include <gpuactor.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define DIE(st, what)                                                                           \
  do {                                                                                          \
    fprintf(stderr, "gpa-demo: %s failed: %s (%s)\n", what, gpa_status_name(st), gpa_last_error_message()); \
    exit(1);                                                                                    \
  } while (0)
#define TRY(expr, what)               \
  do {                                \
    gpa_status s_ = (expr);           \
    if (s_ != GPA_OK) DIE(s_, what);  \
  } while (0)

enum { N = 1 << 18, NOOPS = 2000 };

typedef struct worker {
  gpa_actor *a;
  int id;
  double seconds;
  long steps, msgs;
  uint64_t bytes, skipped;
  int64_t host_ns, device_ns;
} worker;

static atomic_int progress_steps;

static void *run_worker(void *arg) {
  worker *w = arg;
  gpa_queue *q;
  char name[32];
  snprintf(name, sizeof name, "worker%d", w->id);
  TRY(gpa_queue_create(w->a, name, &q), "queue create");
  char label[64];
  gpa_buffer_id wb, xb, yb;
  snprintf(label, sizeof label, "demo.w%d.weight", w->id);
  TRY(gpa_buffer_acquire(w->a, label, N * 4, &wb), "acquire weight");
  snprintf(label, sizeof label, "demo.w%d.act", w->id);
  TRY(gpa_buffer_acquire(w->a, label, N * 4, &xb), "acquire activations");
  TRY(gpa_buffer_acquire(w->a, NULL, N * 4, &yb), "acquire scratch");
  gpa_tensor W = {wb, 0, GPA_F32, 1, {N}}, X = {xb, 0, GPA_F32, 1, {N}}, Y = {yb, 0, GPA_F32, 1, {N}};
  float *host = malloc(N * 4);
  for (int i = 0; i < N; i++) host[i] = (float)(i % 97);
  double end = now_s() + w->seconds;
  while (now_s() < end) {
    char blabel[32];
    snprintf(blabel, sizeof blabel, "step%ld", w->steps);
    TRY(gpa_batch_begin(q, blabel), "batch begin");
    /* The weight changes every 10 steps: 9 of 10 uploads are skipped. */
    TRY(gpa_upload(q, &W, host, N * 4, 1 + (uint64_t)w->steps / 10, NULL), "upload weight");
    host[0] = (float)w->steps;
    TRY(gpa_upload(q, &X, host, N * 4, 0, NULL), "upload input");
    gpa_attr v = {"value", GPA_ATTR_FLOAT, 0, (double)w->id};
    TRY(gpa_submit(q, &(gpa_op_call){.op = "fill", .outputs = &Y, .n_outputs = 1, .attrs = &v, .n_attrs = 1}, NULL),
        "fill");
    gpa_tensor Yh = Y;
    Yh.shape[0] = N / 2;
    gpa_tensor Xh = X;
    Xh.shape[0] = N / 2;
    TRY(gpa_submit(q, &(gpa_op_call){.op = "copy", .inputs = &Xh, .n_inputs = 1, .outputs = &Yh, .n_outputs = 1},
                   NULL),
        "copy");
    for (int i = 0; i < NOOPS; i++) TRY(gpa_submit(q, &(gpa_op_call){.op = "noop"}, NULL), "noop");
    gpa_tensor probe = Y;
    probe.shape[0] = 4;
    gpa_tensor tail = Y;
    tail.offset = (N - 4) * 4;
    tail.shape[0] = 4;
    gpa_handle *r1, *r2;
    TRY(gpa_readback(q, &probe, &r1), "readback");
    TRY(gpa_readback(q, &tail, &r2), "readback");
    gpa_batch_stats st = {.size = sizeof st};
    TRY(gpa_sync_batch(q, &st), "sync");
    const void *d1, *d2;
    uint64_t n1, n2;
    TRY(gpa_handle_data(r1, &d1, &n1), "readback data");
    TRY(gpa_handle_data(r2, &d2, &n2), "readback data");
    const float *p1 = d1, *p2 = d2;
    if (p1[0] != (float)w->steps || p1[1] != 1.0f || p2[3] != (float)w->id) {
      fprintf(stderr, "gpa-demo: wrong data read back in step %ld of worker %d\n", w->steps, w->id);
      exit(1);
    }
    gpa_handle_release(r1);
    gpa_handle_release(r2);
    w->steps++;
    w->msgs += st.ops;
    w->bytes += st.bytes_moved;
    w->skipped += st.uploads_skipped;
    w->host_ns += st.host_ns;
    w->device_ns += st.device_ns;
    atomic_fetch_add(&progress_steps, 1);
  }
  free(host);
  TRY(gpa_buffer_release(w->a, wb), "release");
  TRY(gpa_buffer_release(w->a, xb), "release");
  TRY(gpa_buffer_release(w->a, yb), "release");
  TRY(gpa_queue_destroy(q), "queue destroy");
  return NULL;
}

int main(int argc, char **argv) {
  double seconds = 6;
  int workers = 3;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--workers") && i + 1 < argc) workers = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: gpa-demo [--seconds S] [--workers N]\n");
      return 2;
    }
  }
  if (workers < 1 || workers > 64 || !(seconds > 0)) {
    fprintf(stderr, "gpa-demo: need 1..64 workers and a positive duration\n");
    return 2;
  }
  gpa_actor *a;
  TRY(gpa_actor_create(NULL, &a), "actor create");
  printf("gpa-demo: gpuactor %s on backend '%s': %d producer threads, one queue each, for %.0f s\n",
         gpa_version_string(), gpa_actor_backend(a), workers, seconds);
  printf("  each step: versioned weight upload, input upload, fill, copy, %d no-ops, 2 readbacks, sync\n", NOOPS);
  worker *w = calloc((size_t)workers, sizeof *w);
  pthread_t *th = calloc((size_t)workers, sizeof *th);
  double t0 = now_s();
  for (int i = 0; i < workers; i++) {
    w[i] = (worker){.a = a, .id = i, .seconds = seconds};
    pthread_create(&th[i], NULL, run_worker, &w[i]);
  }
  for (double next = t0 + 1; now_s() < t0 + seconds;) {
    struct timespec ts = {0, 50 * 1000000};
    nanosleep(&ts, NULL);
    if (now_s() >= next) {
      printf("  [%4.1fs] %d steps done\n", now_s() - t0, atomic_load(&progress_steps));
      fflush(stdout);
      next += 1;
    }
  }
  long steps = 0, msgs = 0;
  uint64_t bytes = 0, skipped = 0;
  int64_t host_ns = 0, dev_ns = 0;
  for (int i = 0; i < workers; i++) {
    pthread_join(th[i], NULL);
    steps += w[i].steps;
    msgs += w[i].msgs;
    bytes += w[i].bytes;
    skipped += w[i].skipped;
    host_ns += w[i].host_ns;
    dev_ns += w[i].device_ns;
  }
  double el = now_s() - t0;
  gpa_actor_stats as = {.size = sizeof as};
  TRY(gpa_actor_stats_get(a, &as), "stats");
  printf("gpa-demo: %ld steps, %ld messages in %.2f s: %.2f M msg/s, %.0f steps/s\n", steps, msgs, el, msgs / el / 1e6,
         steps / el);
  printf("  batches: mean host time %.1f us, device time %.1f us, %.1f MB moved per step, %llu uploads skipped\n",
         steps ? host_ns / 1e3 / steps : 0, steps ? dev_ns / 1e3 / steps : 0, steps ? bytes / 1e6 / steps : 0,
         (unsigned long long)skipped);
  printf("  buffer cache: %llu hits, %llu misses, %llu evictions, %.1f MB held; %llu producer threads\n",
         (unsigned long long)as.cache_hits, (unsigned long long)as.cache_misses, (unsigned long long)as.evictions,
         as.bytes_allocated / 1e6, (unsigned long long)as.producers);
  TRY(gpa_actor_destroy(a), "actor destroy");
  free(w);
  free(th);
  printf("gpa-demo: all data verified\n");
  return 0;
}
