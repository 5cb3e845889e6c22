/* libFuzzer target over the public API's validation: random op names,
 * arities, tensors (dtypes, ranks, shapes near overflow, offsets, live, stale
 * and made-up buffer ids), attributes (names, types, NaN/Inf), uploads,
 * readbacks, buffer acquisitions near the size limits, feed pushes and feed
 * ops. Whatever passes validation also runs, so the host kernels see odd
 * shapes too. Every call must return a status; the fuzzer's sanitizers catch
 * anything else. One actor for the whole run. */
#include <gpuactor.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct rd {
  const uint8_t *p;
  size_t n;
} rd;

static uint64_t take(rd *r, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) {
    v = v << 8 | (r->n ? *r->p : 0);
    if (r->n) r->p++, r->n--;
  }
  return v;
}

static gpa_actor *A;
static gpa_queue *Q;
static gpa_feed *F;
static gpa_buffer_id B[4];
static gpa_buffer_id STALE;

static const char *const OPS[] = {
    "noop", "copy", "fill", "add", "scale", "axpy", "mask_zero", "masked_mean_fwd", "masked_mean_bwd",
    "add_broadcast_fwd", "add_broadcast_bwd", "gelu_fwd", "gelu_bwd", "layernorm_fwd", "layernorm_bwd", "linear_fwd",
    "linear_gelu_fwd", "linear_bwd", "linear_bwd_nobias", "conv1d_fwd", "conv1d_bwd", "conv1d_bwd_nobias",
    "embedding_fwd", "embedding_bwd", "cross_entropy_fwd", "cross_entropy_bwd", "mse", "cosine", "adamw", "sgd",
    "adamw_multi",
    "attention_fwd", "attention_bwd", "no_such_op", ""};
static const char *const ATTRS[] = {"value", "alpha", "eps", "approximate", "gelu", "stride", "padding", "dilation",
                                    "groups", "causal", "scale", "ignore_index", "lr", "beta1", "beta2",
                                    "weight_decay", "step", "momentum", "nesterov", "accumulate", "decay_mask", "bogus"};
#define COUNT(x) (sizeof x / sizeof x[0])

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  /* A budget: an unbudgeted acquire of 20 GB would be granted, and be the
   * fuzzer's out-of-memory rather than ours. */
  if (gpa_actor_create(&(gpa_actor_options){.device = "cpu", .threads = 1, .mem_budget = 256u << 20}, &A) != GPA_OK)
    abort();
  Q = gpa_actor_default_queue(A);
  const uint64_t sizes[4] = {64, 4096, 1 << 16, 1 << 20};
  for (int i = 0; i < 4; i++)
    if (gpa_buffer_acquire(A, NULL, sizes[i], &B[i]) != GPA_OK) abort();
  gpa_buffer_acquire(A, NULL, 64, &STALE);
  gpa_buffer_release(A, STALE);
  gpa_feed_open(A, NULL, &F);
  return 0;
}

static gpa_buffer_id pick_buffer(rd *r) {
  switch (take(r, 1) % 7) {
    case 0: return 0;
    case 1: return STALE;
    case 2: return take(r, 8);
    default: return B[take(r, 1) % 4];
  }
}

static int64_t pick_dim(rd *r) {
  switch (take(r, 1) % 8) {
    case 0: return (int64_t)take(r, 8);       /* anything, negative included */
    case 1: return INT64_MAX / (1 + (int64_t)take(r, 1));
    case 2: return 0;
    default: return (int64_t)(take(r, 1) % 40);
  }
}

static void pick_tensor(rd *r, gpa_tensor *t) {
  memset(t, 0, sizeof *t);
  t->buffer = pick_buffer(r);
  t->offset = take(r, 1) % 5 == 0 ? take(r, 8) : take(r, 1) * 4;
  t->dtype = (int32_t)(take(r, 1) % 9) - 1;
  t->rank = (uint32_t)(take(r, 1) % 11);
  for (int k = 0; k < GPA_MAX_RANK; k++) t->shape[k] = pick_dim(r);
}

static void pick_attr(rd *r, gpa_attr *a) {
  a->name = take(r, 1) % 17 == 0 ? NULL : ATTRS[take(r, 1) % COUNT(ATTRS)];
  a->type = (int32_t)(take(r, 1) % 4);
  a->i = (int64_t)take(r, 1) % 9 == 0 ? (int64_t)take(r, 8) : (int64_t)(take(r, 1) % 8) - 2;
  switch (take(r, 1) % 6) {
    case 0: a->f = NAN; break;
    case 1: a->f = INFINITY; break;
    case 2: a->f = -1e300; break;
    default: a->f = (double)(int8_t)take(r, 1) / 16.0; break;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rd r = {data, size};
  gpa_tensor t[12];
  gpa_attr at[6];
  uint8_t host[512];
  memset(host, 0x3f, sizeof host);
  for (int call = 0; call < 6 && r.n; call++) {
    gpa_handle *h = NULL;
    switch (take(&r, 1) % 8) {
      case 0:
      case 1:
      case 2: { /* an op */
        uint32_t nin = (uint32_t)(take(&r, 1) % 8), nout = (uint32_t)(take(&r, 1) % 5), na = (uint32_t)(take(&r, 1) % 6);
        for (uint32_t i = 0; i < nin + nout; i++) pick_tensor(&r, &t[i]);
        for (uint32_t i = 0; i < na; i++) pick_attr(&r, &at[i]);
        gpa_op_call c = {OPS[take(&r, 1) % COUNT(OPS)], take(&r, 1) % 13 ? t : NULL, nin, t + nin, nout, at, na};
        gpa_submit(Q, &c, take(&r, 1) & 1 ? &h : NULL);
        break;
      }
      case 3:
        pick_tensor(&r, &t[0]);
        gpa_upload(Q, &t[0], host, take(&r, 1) % 3 ? take(&r, 2) % sizeof host : take(&r, 8), take(&r, 1) % 3, NULL);
        break;
      case 4:
        pick_tensor(&r, &t[0]);
        gpa_readback(Q, &t[0], &h);
        break;
      case 5: { /* buffers near the limits */
        gpa_buffer_id id;
        uint64_t sz = take(&r, 1) % 4 == 0 ? take(&r, 8) : take(&r, 3);
        char label[8] = {'L', (char)('a' + take(&r, 1) % 4), 0};
        if (gpa_buffer_acquire(A, take(&r, 1) & 1 ? label : NULL, sz, &id) == GPA_OK) gpa_buffer_release(A, id);
        gpa_buffer_release(A, pick_buffer(&r));
        break;
      }
      case 6: { /* feed push */
        gpa_host_tensor ht[3];
        uint32_t n = (uint32_t)(take(&r, 1) % 4);
        for (uint32_t i = 0; i < n; i++) {
          ht[i] = (gpa_host_tensor){host, take(&r, 2) % 600, (int32_t)(take(&r, 1) % 8), (uint32_t)(take(&r, 1) % 4),
                                    {(int64_t)(take(&r, 1) % 9), (int64_t)(take(&r, 1) % 9), 1, 1}};
          if (take(&r, 1) % 11 == 0) ht[i].data = NULL;
        }
        gpa_infeed_push(F, ht, n);
        break;
      }
      default: { /* feed ops, never parking for long */
        uint32_t n = (uint32_t)(take(&r, 1) % 3);
        for (uint32_t i = 0; i < n; i++) pick_tensor(&r, &t[i]);
        if (take(&r, 1) & 1) gpa_infeed(Q, F, t, n, 0, NULL);
        else gpa_outfeed(Q, F, t, n, NULL);
        gpa_handle *item;
        while (gpa_outfeed_pop(F, 0, &item) == GPA_OK) gpa_handle_release(item);
        break;
      }
    }
    if (h) {
      gpa_await(h, -1);
      const void *d;
      uint64_t sz;
      gpa_handle_data(h, &d, &sz);
      gpa_handle_release(h);
    }
  }
  gpa_sync_batch(Q, NULL);
  gpa_handle *item;
  while (gpa_outfeed_pop(F, 0, &item) == GPA_OK) gpa_handle_release(item);
  return 0;
}
