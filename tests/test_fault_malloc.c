/* Host allocation failure at each malloc site of the runtime in turn, on the
 * device GPA_DEVICE names (cpu or sim).
 *
 * This executable links the library's objects, so the runtime's calls to
 * malloc/calloc/realloc/aligned_alloc come from its own text: the wrappers
 * below fail the N-th such call (callers outside the executable, e.g.
 * libstdc++ inside the simulator, are never failed). A workload (buffers,
 * uploads, fill, add, layernorm, readbacks, a second queue, batch syncs)
 * makes `count` of them; for N = 1..count a fresh actor runs it with the N-th
 * failing, then again without faults. Asserted: no crash, no hang (awaits
 * bounded), a refused call returns an error status, every accepted message
 * finishes exactly once (counting profiler) with GPA_OK or GPA_ENOMEM, and
 * the second run's results are right. Normal builds only: the sanitizers
 * own malloc. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "util/testutil.h"

#if defined(GPA_ASAN) || defined(GPA_TSAN)
int main(void) {
  fprintf(stderr, "skipped: the sanitizers interpose malloc themselves\n");
  return 77;
}
#else
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern char __executable_start, etext;

static _Atomic long countdown; /* > 0: armed; the call that takes it to 0 fails */
static _Atomic long calls;     /* eligible calls seen while counting */
static _Atomic int counting;

static int fail_here(void *ret) {
  if ((char *)ret < &__executable_start || (char *)ret >= &etext) return 0;
  if (atomic_load_explicit(&counting, memory_order_relaxed)) atomic_fetch_add(&calls, 1);
  long v = atomic_load_explicit(&countdown, memory_order_relaxed);
  while (v > 0)
    if (atomic_compare_exchange_weak(&countdown, &v, v - 1)) return v == 1;
  return 0;
}

void *malloc(size_t n) { return fail_here(__builtin_return_address(0)) ? NULL : __libc_malloc(n); }
void *calloc(size_t k, size_t n) { return fail_here(__builtin_return_address(0)) ? NULL : __libc_calloc(k, n); }
void *realloc(void *p, size_t n) { return fail_here(__builtin_return_address(0)) ? NULL : __libc_realloc(p, n); }
void *aligned_alloc(size_t al, size_t n) {
  return fail_here(__builtin_return_address(0)) ? NULL : __libc_memalign(al, n);
}

static _Atomic uint64_t finished;
static void on_op(const gpa_prof_op *op, void *ud) {
  (void)op;
  (void)ud;
  atomic_fetch_add(&finished, 1);
}

enum { N = 8, D = 32 };
#define AWAIT_NS (60 * 1000000000ll)

typedef struct run {
  uint64_t accepted, ok, enomem, refused;
  float y[N * D], z[N * D];
} run;

/* A call the runtime may refuse for want of memory: counted, never fatal. */
static int accept(run *r, gpa_status st) {
  if (st == GPA_OK) {
    r->accepted++;
    return 1;
  }
  CHECK(st == GPA_ENOMEM);
  r->refused++;
  return 0;
}

static void workload(gpa_actor *a, run *r) {
  memset(r, 0, sizeof *r);
  gpa_buffer_id b[6];
  int nb = 0;
  for (; nb < 6; nb++) {
    gpa_status st = gpa_buffer_acquire(a, NULL, nb < 2 || nb == 5 ? N * D * 4 : (nb < 4 ? D * 4 : N * 8), &b[nb]);
    if (st != GPA_OK) break;
  }
  if (nb < 6) {
    r->refused++;
    for (int i = 0; i < nb; i++) gpa_buffer_release(a, b[i]);
    return;
  }
  gpa_tensor x = {b[0], 0, GPA_F32, 2, {N, D}}, y = {b[1], 0, GPA_F32, 2, {N, D}}, g = {b[2], 0, GPA_F32, 1, {D}},
             be = {b[3], 0, GPA_F32, 1, {D}}, mr = {b[4], 0, GPA_F32, 1, {N}}, rs = {b[4], N * 4, GPA_F32, 1, {N}},
             z = {b[5], 0, GPA_F32, 2, {N, D}};
  static float xv[N * D];
  for (int i = 0; i < N * D; i++) xv[i] = (float)(i % 17) - 8.0f;
  gpa_queue *q = gpa_actor_default_queue(a), *q2 = NULL;
  if (gpa_queue_create(a, "second", &q2) != GPA_OK) {
    r->refused++;
    q2 = q;
  }
  gpa_handle *h[16];
  int nh = 0;
  if (accept(r, gpa_upload(q, &x, xv, sizeof xv, 0, &h[nh]))) nh++;
  gpa_attr one = {"value", GPA_ATTR_FLOAT, 0, 1.0}, zero = {"value", GPA_ATTR_FLOAT, 0, 0.0};
  gpa_op_call fg = {"fill", NULL, 0, &g, 1, &one, 1}, fb = {"fill", NULL, 0, &be, 1, &zero, 1};
  if (accept(r, gpa_submit(q, &fg, &h[nh]))) nh++;
  if (accept(r, gpa_submit(q, &fb, &h[nh]))) nh++;
  gpa_tensor lin[3] = {x, g, be}, lout[3] = {y, mr, rs};
  gpa_op_call ln = {"layernorm_fwd", lin, 3, lout, 3, NULL, 0};
  if (accept(r, gpa_submit(q, &ln, &h[nh]))) nh++;
  int rb_y = -1, rb_z = -1;
  if (accept(r, gpa_readback(q, &y, &h[nh]))) rb_y = nh++;
  gpa_status s0 = gpa_sync_batch(q, NULL); /* q2 reads x after this */
  CHECK(s0 == GPA_OK || s0 == GPA_ENOMEM);
  gpa_tensor ain[2] = {x, x};
  gpa_op_call add = {"add", ain, 2, &z, 1, NULL, 0};
  if (accept(r, gpa_submit(q2, &add, &h[nh]))) nh++;
  if (accept(r, gpa_readback(q2, &z, &h[nh]))) rb_z = nh++;
  for (int i = 0; i < nh; i++) {
    gpa_status st = gpa_await(h[i], AWAIT_NS);
    if (st != GPA_OK && st != GPA_ENOMEM) {
      fprintf(stderr, "handle %d: %s: %s\n", i, gpa_status_name(st), gpa_handle_error_message(h[i]));
      CHECK(0);
    }
    if (st == GPA_OK) r->ok++;
    else r->enomem++;
  }
  const void *d;
  uint64_t sz;
  if (rb_y >= 0 && gpa_handle_data(h[rb_y], &d, &sz) == GPA_OK) memcpy(r->y, d, sz);
  if (rb_z >= 0 && gpa_handle_data(h[rb_z], &d, &sz) == GPA_OK) memcpy(r->z, d, sz);
  for (int i = 0; i < nh; i++) gpa_handle_release(h[i]);
  gpa_status s1 = gpa_sync_batch(q, NULL), s2 = gpa_sync_batch(q2, NULL);
  CHECK(s1 == GPA_OK || s1 == GPA_ENOMEM);
  CHECK(s2 == GPA_OK || s2 == GPA_ENOMEM);
  if (q2 != q) CHECK_OK(gpa_queue_destroy(q2));
  for (int i = 0; i < 6; i++) CHECK_OK(gpa_buffer_release(a, b[i]));
}

static void check_results(const run *r) {
  for (int i = 0; i < N * D; i++) CHECK(r->z[i] == 2.0f * ((float)(i % 17) - 8.0f));
  for (int row = 0; row < N; row++) {
    double s = 0;
    for (int j = 0; j < D; j++) s += r->y[row * D + j];
    CHECK(s / D < 1e-4 && s / D > -1e-4); /* normalized rows: mean 0 */
  }
}

int main(void) {
  static run ref, f, again;
  /* Count the workload's eligible calls in a fresh actor. */
  gpa_actor *a = tu_actor(NULL);
  gpa_profiler prof = {.size = sizeof prof, .on_op = on_op};
  CHECK_OK(gpa_actor_add_profiler(a, &prof));
  atomic_store(&counting, 1);
  workload(a, &ref);
  atomic_store(&counting, 0);
  long count = atomic_load(&calls);
  CHECK(ref.ok == ref.accepted && ref.refused == 0);
  check_results(&ref);
  CHECK_OK(gpa_actor_destroy(a));
  printf("workload on %s: %llu messages, %ld host allocations by the runtime\n", getenv("GPA_DEVICE") ? getenv("GPA_DEVICE") : "auto",
         (unsigned long long)ref.accepted, count);
  CHECK(count > 0);
  uint64_t refused = 0, failed = 0, msgs = 0, absorbed = 0;
  for (long n = 1; n <= count; n++) {
    gpa_actor *b = tu_actor(NULL);
    CHECK_OK(gpa_actor_add_profiler(b, &prof));
    atomic_store(&finished, 0);
    atomic_store(&countdown, n);
    workload(b, &f);
    long left = atomic_exchange(&countdown, 0);
    CHECK(atomic_load(&finished) == f.accepted);
    workload(b, &again);
    CHECK(again.ok == again.accepted && again.refused == 0);
    check_results(&again);
    CHECK(atomic_load(&finished) == f.accepted + again.accepted);
    CHECK_OK(gpa_actor_destroy(b));
    refused += f.refused;
    failed += f.enomem;
    msgs += f.accepted;
    absorbed += left == 0 && f.refused == 0 && f.enomem == 0;
  }
  printf("ok: %ld host allocation faults: %llu calls refused with ENOMEM, %llu messages, %llu completed ENOMEM, "
         "%llu faults without a visible effect, 0 handles lost\n",
         count, (unsigned long long)refused, (unsigned long long)msgs, (unsigned long long)failed,
         (unsigned long long)absorbed);
  return 0;
}
#endif
