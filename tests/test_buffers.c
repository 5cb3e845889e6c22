/* Buffer cache: labels, stale ids, versions, reuse, eviction under a budget. */
#include "util/testutil.h"

static gpa_actor_stats stats(gpa_actor *a) {
  gpa_actor_stats s = {.size = sizeof s};
  CHECK_OK(gpa_actor_stats_get(a, &s));
  return s;
}

int main(void) {
  /* budget: room for three 1 MiB buffers */
  gpa_actor *a = tu_actor(&(gpa_actor_options){.mem_budget = 3u << 20});
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_buffer_id w1, w2, w3;
  CHECK_OK(gpa_buffer_acquire(a, "enc.block3.w", 1 << 20, &w1));
  CHECK_OK(gpa_buffer_acquire(a, "enc.block3.w", 1 << 20, &w2));
  CHECK(w1 == w2); /* same label, same buffer */
  CHECK_ST(gpa_buffer_acquire(a, "enc.block3.w", 1000, &w3), GPA_EMISMATCH);
  CHECK_MSG("enc.block3.w");
  gpa_buffer_info info = {0};
  CHECK_OK(gpa_buffer_query(a, w1, &info));
  CHECK(info.refs == 2 && info.size == 1 << 20 && info.capacity >= info.size && !strcmp(info.label, "enc.block3.w"));

  /* contents and version survive a release + re-acquire of the label */
  gpa_tensor t = {w1, 0, GPA_F32, 1, {1 << 18}};
  CHECK_OK(tu_fill(q, &t, 3.0, NULL));
  CHECK_OK(gpa_upload(q, &(gpa_tensor){w1, 0, GPA_F32, 1, {1}}, &(float){9.0f}, 4, 42, NULL));
  CHECK_OK(gpa_sync_batch(q, NULL));
  CHECK_OK(gpa_buffer_release(a, w1));
  CHECK_OK(gpa_buffer_release(a, w1));
  /* the id is stale now: every use says so */
  CHECK_ST(gpa_buffer_release(a, w1), GPA_ESTALE);
  CHECK_ST(tu_fill(q, &t, 1.0, NULL), GPA_ESTALE);
  CHECK_MSG("stale");
  gpa_handle *h;
  CHECK_ST(gpa_readback(q, &t, &h), GPA_ESTALE);
  CHECK_ST(gpa_buffer_query(a, w1, &info), GPA_ESTALE);
  gpa_actor_stats s0 = stats(a);
  CHECK(s0.bytes_cached >= 1 << 20 && s0.live_buffers == 0);
  CHECK_OK(gpa_buffer_acquire(a, "enc.block3.w", 1 << 20, &w3));
  CHECK(w3 != w1); /* a new generation */
  CHECK(stats(a).cache_hits == s0.cache_hits + 1);
  CHECK_OK(gpa_buffer_query(a, w3, &info));
  CHECK(info.version == 42);
  float back[2];
  tu_get(q, &(gpa_tensor){w3, 0, GPA_F32, 1, {2}}, back, 2);
  CHECK(back[0] == 9.0f && back[1] == 3.0f);
  /* a repeated versioned upload is skipped; a new version lands */
  CHECK_OK(gpa_upload(q, &(gpa_tensor){w3, 0, GPA_F32, 1, {1}}, &(float){1.0f}, 4, 42, NULL));
  tu_get(q, &(gpa_tensor){w3, 0, GPA_F32, 1, {1}}, back, 1);
  CHECK(back[0] == 9.0f);
  CHECK_OK(gpa_upload(q, &(gpa_tensor){w3, 0, GPA_F32, 1, {1}}, &(float){1.0f}, 4, 43, NULL));
  tu_get(q, &(gpa_tensor){w3, 0, GPA_F32, 1, {1}}, back, 1);
  CHECK(back[0] == 1.0f);
  CHECK(stats(a).uploads_skipped == 1);

  /* anonymous reuse of the same size class */
  gpa_buffer_id an;
  CHECK_OK(gpa_buffer_acquire(a, NULL, 1000000, &an));
  CHECK_OK(gpa_buffer_release(a, an));
  gpa_actor_stats s1 = stats(a);
  gpa_buffer_id an2;
  CHECK_OK(gpa_buffer_acquire(a, NULL, 1000001, &an2)); /* same class */
  gpa_actor_stats s2 = stats(a);
  CHECK(s2.cache_hits == s1.cache_hits + 1 && s2.cache_misses == s1.cache_misses);
  CHECK(s2.bytes_allocated == s1.bytes_allocated);

  /* eviction: live w3 (1 MiB) + an2 (~1 MiB); cache some, then exceed */
  gpa_buffer_id c1;
  CHECK_OK(gpa_buffer_acquire(a, "cached.one", 1 << 20, &c1));
  CHECK_OK(gpa_buffer_release(a, c1));
  gpa_actor_stats s3 = stats(a);
  CHECK(s3.evictions == 0);
  gpa_buffer_id big;
  CHECK_OK(gpa_buffer_acquire(a, NULL, 1 << 20, &big)); /* needs the cached one's room */
  gpa_actor_stats s4 = stats(a);
  CHECK(s4.evictions >= 1);
  CHECK(s4.bytes_allocated <= 3u << 20);
  /* the evicted label starts over: version 0 */
  gpa_buffer_id c2;
  CHECK_ST(gpa_buffer_acquire(a, "cached.one", 1 << 20, &c2), GPA_ENOMEM); /* all live: over budget */
  CHECK_MSG("budget");
  CHECK_OK(gpa_buffer_release(a, big));
  CHECK_OK(gpa_buffer_acquire(a, "cached.one", 1 << 20, &c2));
  CHECK_OK(gpa_buffer_query(a, c2, &info));
  CHECK(info.version == 0);

  /* release waits for work already submitted by this thread on the buffer */
  gpa_tensor tt = {c2, 0, GPA_F32, 1, {1 << 18}};
  for (int i = 0; i < 50; i++) CHECK_OK(tu_fill(q, &tt, i, NULL));
  CHECK_OK(gpa_buffer_release(a, c2));
  CHECK_OK(gpa_sync_batch(q, NULL)); /* the fills ran on a pinned buffer: no error */

  /* misuse */
  CHECK_ST(gpa_buffer_acquire(a, NULL, 0, &c2), GPA_EINVAL);
  CHECK_ST(gpa_buffer_acquire(a, NULL, UINT64_MAX, &c2), GPA_EOVERFLOW);
  CHECK_ST(gpa_buffer_acquire(a, "", 16, &c2), GPA_EINVAL);
  char longlabel[100];
  memset(longlabel, 'x', 99);
  longlabel[99] = 0;
  CHECK_ST(gpa_buffer_acquire(a, longlabel, 16, &c2), GPA_EINVAL);
  CHECK_ST(gpa_buffer_release(a, 0), GPA_ESTALE);
  CHECK_ST(gpa_buffer_release(a, 0xdeadbeef00000001ull), GPA_ESTALE);
  CHECK_ST(gpa_buffer_release(a, 0x0000000100ffffffull), GPA_ESTALE); /* slot never made */
  CHECK_OK(gpa_actor_destroy(a));
  printf("buffers: ok\n");
  return 0;
}
