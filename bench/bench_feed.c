/* Feed sessions against plain upload + readback, same data, same run.
 *
 *  feed_roundtrip_<bytes>: push -> infeed -> outfeed -> pop of one item, p50;
 *                          ref: upload -> readback -> await, p50.
 *  feed_throughput_<bytes>: K items in flight (push all, infeed/outfeed all,
 *                          pop all) per item; ref: K uploads + K readbacks,
 *                          one sync, per item. */
#include <gpuactor.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define OK(x)                                                                             \
  do {                                                                                    \
    if ((x) != GPA_OK) {                                                                  \
      fprintf(stderr, "bench_feed: %s failed: %s\n", #x, gpa_last_error_message());      \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

static void one_size(gpa_actor *a, int64_t n) {
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_feed *s;
  OK(gpa_feed_open(a, &(gpa_feed_options){.outfeed_capacity = 1024, .infeed_capacity = 4096}, &s));
  gpa_tensor x = {0, 0, GPA_F32, 1, {n}};
  OK(gpa_buffer_acquire(a, NULL, (uint64_t)n * 4, &x.buffer));
  float *src = calloc((size_t)n, 4);
  gpa_host_tensor ht = {src, (uint64_t)n * 4, GPA_F32, 1, {n}};
  int reps = gpa_bench_reps(2000);
  double *ours = malloc(sizeof(double) * reps), *ref = malloc(sizeof(double) * reps);
  for (int i = 0; i < reps; i++) {
    double t0 = gpa_bench_now_ns();
    OK(gpa_infeed_push(s, &ht, 1));
    OK(gpa_infeed(q, s, &x, 1, -1, NULL));
    OK(gpa_outfeed(q, s, &x, 1, NULL));
    gpa_handle *item;
    OK(gpa_outfeed_pop(s, -1, &item));
    ours[i] = gpa_bench_now_ns() - t0;
    gpa_handle_release(item);

    t0 = gpa_bench_now_ns();
    OK(gpa_upload(q, &x, src, (uint64_t)n * 4, 0, NULL));
    gpa_handle *rb;
    OK(gpa_readback(q, &x, &rb));
    OK(gpa_await(rb, -1));
    ref[i] = gpa_bench_now_ns() - t0;
    gpa_handle_release(rb);
  }
  gpa_bench_sort(ours, (size_t)reps);
  gpa_bench_sort(ref, (size_t)reps);
  char name[64], shape[32], extra[96];
  snprintf(shape, sizeof shape, "%lldB", (long long)n * 4);
  snprintf(name, sizeof name, "feed_roundtrip_%lldB", (long long)n * 4);
  snprintf(extra, sizeof extra, "\"p99_ns\":%.1f,\"ref_p99_ns\":%.1f,\"stat\":\"p50\"", ours[reps * 99 / 100],
           ref[reps * 99 / 100]);
  gpa_bench_emit(&(gpa_bench_result){.name = name, .backend = gpa_actor_backend(a), .shape = shape,
                                     .ref = "upload_readback_await", .ns = ours[reps / 2], .ref_ns = ref[reps / 2],
                                     .bytes = 2.0 * n * 4, .extra = extra});

  enum { K = 256 };
  double best = 1e300, best_ref = 1e300;
  gpa_handle *rbs[K];
  for (int r = 0; r < 5; r++) {
    double t0 = gpa_bench_now_ns();
    for (int i = 0; i < K; i++) OK(gpa_infeed_push(s, &ht, 1));
    for (int i = 0; i < K; i++) {
      OK(gpa_infeed(q, s, &x, 1, -1, NULL));
      OK(gpa_outfeed(q, s, &x, 1, NULL));
    }
    for (int i = 0; i < K; i++) {
      gpa_handle *item;
      OK(gpa_outfeed_pop(s, -1, &item));
      gpa_handle_release(item);
    }
    double t = (gpa_bench_now_ns() - t0) / K;
    if (t < best) best = t;
    t0 = gpa_bench_now_ns();
    for (int i = 0; i < K; i++) {
      OK(gpa_upload(q, &x, src, (uint64_t)n * 4, 0, NULL));
      OK(gpa_readback(q, &x, &rbs[i]));
    }
    OK(gpa_sync_batch(q, NULL));
    t = (gpa_bench_now_ns() - t0) / K;
    for (int i = 0; i < K; i++) gpa_handle_release(rbs[i]);
    if (t < best_ref) best_ref = t;
  }
  snprintf(name, sizeof name, "feed_throughput_%lldB", (long long)n * 4);
  gpa_bench_emit(&(gpa_bench_result){.name = name, .backend = gpa_actor_backend(a), .shape = shape,
                                     .ref = "upload_readback_sync", .ns = best, .ref_ns = best_ref,
                                     .bytes = 2.0 * n * 4});
  OK(gpa_sync_batch(q, NULL));
  OK(gpa_feed_close(s));
  OK(gpa_buffer_release(a, x.buffer));
  free(src);
  free(ours);
  free(ref);
}

void gpa_bench_feed(void) {
  gpa_actor *a;
  OK(gpa_actor_create(NULL, &a));
  one_size(a, 256);         /* 1 KiB: latency-bound */
  one_size(a, 1 << 18);     /* 1 MiB: copy-bound */
  OK(gpa_actor_destroy(a));
}
