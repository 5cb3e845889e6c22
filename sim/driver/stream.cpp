/* gpa-sim driver: streams, events and host functions.
 *
 * A stream is an ordered work list run by its own OS thread, so streams
 * overlap as on a GPU and host code never runs device work itself. After a
 * sticky error, copies and kernels are skipped, but event records, event
 * waits and host functions still run: whoever waits on them is woken (and
 * sees the error at its next synchronizing call) instead of hanging. A real
 * driver calls no host function after a sticky error; the fault switch
 * gpa_sim_fault_host_fns_after_sticky(0) models that, so the library's own
 * detection of the error (without callbacks) can be tested.
 * The legacy default stream's implicit synchronization is modelled only for
 * synchronous copies and memsets (they wait for the NULL stream and every
 * blocking stream); work queued on the NULL stream does not wait for other
 * streams (see docs/sim.md).
 * Event timestamps are host monotonic time when the stream reaches the
 * record, so elapsed times are emulated times. */
#include <time.h>
#include <unistd.h>
#include "internal.h"

struct CUevent_st {
  unsigned flags;
  uint64_t recorded = 0;  /* records issued (under g_ev_mu) */
  uint64_t completed = 0; /* the latest record its stream has reached */
  /* Records issued and not reached. A wait is for one record (the latest
   * when the wait was made), which may be reached after a later record on
   * a faster stream: `completed` alone would release it early. */
  std::set<uint64_t> pending;
  int64_t t_ns = 0;
  unsigned waiters = 0;   /* queued cuStreamWaitEvent operations that refer to it */
};

namespace {
std::mutex g_ev_mu;
std::condition_variable g_ev_cv;
std::mutex g_streams_mu;
std::set<CUstream_st *> g_streams; /* live handles, for handle checks */
std::set<CUevent> g_events;        /* live events (under g_ev_mu): a context reset frees them */
std::atomic<size_t> g_host_fns{0}; /* cuLaunchHostFunc calls, for tests */
std::atomic<size_t> g_ev_records{0}; /* cuEventRecord calls, for tests */

int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Runs one operation; what it throws becomes a sticky error of the
 * context (an asynchronous failure, as a fault in a kernel would be). */
void run_op(CUstream_st *s, gpa_sim_op &op) {
  CUresult r;
  try {
    r = op.fn();
    if (r != CUDA_SUCCESS) gpa_sim__ctx_set_sticky(s->ctx, r, "asynchronous operation failed");
    return;
  } catch (...) {
    r = gpa_sim__caught("stream operation");
  }
  try {
    gpa_sim__ctx_set_sticky(s->ctx, r, "asynchronous operation failed (see above)");
  } catch (...) {
    int none = 0;
    s->ctx->sticky.compare_exchange_strong(none, (int)r);
  }
}

void stream_main(CUstream_st *s) {
  std::unique_lock<std::mutex> lk(s->mu);
  for (;;) {
    while (s->q.empty() && !s->stop) s->cv.wait(lk);
    if (s->q.empty()) break;
    gpa_sim_op op = std::move(s->q.front());
    s->q.pop_front();
    lk.unlock();
    unsigned delay = s->delay_us.load() + gpa_sim__fault_delay_all();
    if (op.host_fn) delay += gpa_sim__fault_host_fn_delay();
    if (delay) usleep(delay);
    bool sticky = s->ctx->sticky.load() != 0;
    if (!sticky || (op.always && !(op.host_fn && gpa_sim__fault_skip_host_fns()))) run_op(s, op);
    op.fn = nullptr; /* what it captured goes before the wait ends */
    lk.lock();
    s->done++;
    if (s->waiters) s->idle_cv.notify_all();
  }
}

void stream_unref(CUstream_st *s) {
  if (s->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  {
    std::lock_guard<std::mutex> lk(s->mu);
    s->stop = true;
  }
  s->cv.notify_all();
  s->th.join(); /* pending work completes first, as on a GPU */
  delete s;
}

bool event_live(CUevent e) {
  std::lock_guard<std::mutex> lk(g_ev_mu);
  return g_events.count(e) != 0;
}
} // namespace

CUresult gpa_sim__stream_create(CUctx_st *ctx, unsigned flags, CUstream_st **out) {
  CUstream_st *s = new CUstream_st();
  s->ctx = ctx;
  s->flags = flags;
  try {
    s->th = std::thread(stream_main, s);
    {
      std::lock_guard<std::mutex> lk(ctx->mu);
      ctx->streams.insert(s);
    }
    std::lock_guard<std::mutex> lk(g_streams_mu);
    g_streams.insert(s);
  } catch (...) {
    {
      std::lock_guard<std::mutex> lk(ctx->mu);
      ctx->streams.erase(s);
    }
    if (s->th.joinable()) {
      {
        std::lock_guard<std::mutex> lk(s->mu);
        s->stop = true;
      }
      s->cv.notify_all();
      s->th.join();
    }
    delete s;
    throw;
  }
  *out = s;
  return CUDA_SUCCESS;
}

void gpa_sim__stream_destroy(CUstream_st *s) {
  {
    std::lock_guard<std::mutex> lk(g_streams_mu);
    g_streams.erase(s);
  }
  stream_unref(s);
}

CUresult gpa_sim__stream_get(CUctx_st *ctx, CUstream h, CUstream_st **out) {
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    *out = ctx->null_stream;
    return CUDA_SUCCESS;
  }
  std::lock_guard<std::mutex> lk(g_streams_mu);
  if (!g_streams.count(h))
    return gpa_sim__failf(CUDA_ERROR_INVALID_HANDLE, "stream %p is not a live stream (destroyed?)", (void *)h);
  *out = h;
  return CUDA_SUCCESS;
}

void gpa_sim__stream_push(CUstream_st *s, std::function<CUresult()> fn, bool always, bool host_fn, bool mem_node) {
  {
    std::lock_guard<std::mutex> lk(s->mu);
    if (s->cap) { /* captured: it runs when a graph of it is launched */
      s->cap->push_back(gpa_sim_op{std::move(fn), always, host_fn, mem_node});
      return;
    }
    s->q.push_back(gpa_sim_op{std::move(fn), always, host_fn});
    s->pushed++;
  }
  s->cv.notify_one();
}

bool gpa_sim__stream_mem_node(CUstream_st *s) {
  std::lock_guard<std::mutex> lk(s->mu);
  if (!s->cap) return false;
  s->cap->push_back(gpa_sim_op{[] { return CUDA_SUCCESS; }, false, false, true});
  return true;
}

bool gpa_sim__stream_capture_violated(CUstream_st *s) {
  std::lock_guard<std::mutex> lk(s->mu);
  if (!s->cap) return false;
  s->cap_invalid = true;
  return true;
}

void gpa_sim__stream_wait(CUstream_st *s) {
  std::unique_lock<std::mutex> lk(s->mu);
  uint64_t target = s->pushed;
  s->waiters++;
  s->idle_cv.wait(lk, [s, target] { return s->done >= target; });
  s->waiters--;
}

void gpa_sim__ctx_sync(CUctx_st *ctx, bool legacy) {
  std::vector<CUstream_st *> v;
  {
    std::lock_guard<std::mutex> lk(ctx->mu);
    v.reserve(ctx->streams.size());
    for (CUstream_st *s : ctx->streams)
      if (!legacy || s == ctx->null_stream || !(s->flags & CU_STREAM_NON_BLOCKING)) {
        s->refs.fetch_add(1, std::memory_order_relaxed);
        v.push_back(s);
      }
  }
  for (CUstream_st *s : v) gpa_sim__stream_wait(s);
  for (CUstream_st *s : v) stream_unref(s);
}

GPA_SIM_API CUresult cuStreamCreate(CUstream *out, unsigned int flags) {
  return gpa_sim__guard("cuStreamCreate", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    if (!out || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
    return gpa_sim__stream_create(ctx, flags, out);
  });
}

GPA_SIM_API CUresult cuStreamCreateWithPriority(CUstream *out, unsigned int flags, int priority) {
  return gpa_sim__guard("cuStreamCreateWithPriority", [&]() -> CUresult {
    (void)priority; /* priorities do not change the emulation's schedule */
    return cuStreamCreate(out, flags);
  });
}

GPA_SIM_API CUresult cuStreamDestroy(CUstream h) {
  return gpa_sim__guard("cuStreamDestroy", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    CUstream_st *s;
    if (!h) return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = gpa_sim__stream_get(ctx, h, &s);
    if (r) return r;
    if (s == ctx->null_stream) return CUDA_ERROR_INVALID_HANDLE;
    {
      std::lock_guard<std::mutex> lk(ctx->mu);
      ctx->streams.erase(s);
    }
    gpa_sim__stream_destroy(s);
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuStreamSynchronize(CUstream h) {
  return gpa_sim__guard("cuStreamSynchronize", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    CUstream_st *s;
    CUresult r = gpa_sim__stream_get(ctx, h, &s);
    if (r) return r;
    if (gpa_sim__stream_capture_violated(s))
      return gpa_sim__fail(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "cuStreamSynchronize on a capturing stream "
                           "(the capture is invalidated)");
    gpa_sim__stream_wait(s);
    return (CUresult)ctx->sticky.load();
  });
}

GPA_SIM_API CUresult cuStreamQuery(CUstream h) {
  return gpa_sim__guard("cuStreamQuery", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    CUstream_st *s;
    CUresult r = gpa_sim__stream_get(ctx, h, &s);
    if (r) return r;
    if (gpa_sim__stream_capture_violated(s))
      return gpa_sim__fail(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "cuStreamQuery on a capturing stream "
                           "(the capture is invalidated)");
    std::lock_guard<std::mutex> lk(s->mu);
    return s->done < s->pushed ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuStreamGetFlags(CUstream h, unsigned int *flags) {
  return gpa_sim__guard("cuStreamGetFlags", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    CUstream_st *s;
    CUresult r = gpa_sim__stream_get(ctx, h, &s);
    if (r) return r;
    if (!flags) return CUDA_ERROR_INVALID_VALUE;
    *flags = s->flags;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuLaunchHostFunc(CUstream h, CUhostFn fn, void *user_data) {
  return gpa_sim__guard("cuLaunchHostFunc", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    CUstream_st *s;
    CUresult r = gpa_sim__stream_get(ctx, h, &s);
    if (r) return r;
    if (!fn) return CUDA_ERROR_INVALID_VALUE;
    g_host_fns.fetch_add(1, std::memory_order_relaxed);
    if (gpa_sim__fault_take_host_fn())
      return gpa_sim__fail(CUDA_ERROR_OUT_OF_MEMORY, "cuLaunchHostFunc: injected fault (gpa_sim_fault_host_fn)");
    gpa_sim__stream_push(s, [fn, user_data] { fn(user_data); return CUDA_SUCCESS; }, true, true);
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuEventCreate(CUevent *out, unsigned int flags) {
  return gpa_sim__guard("cuEventCreate", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    (void)ctx;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    CUevent e = new CUevent_st();
    e->flags = flags;
    {
      std::lock_guard<std::mutex> lk(g_ev_mu);
      g_events.insert(e);
    }
    *out = e;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuEventDestroy(CUevent e) {
  return gpa_sim__guard("cuEventDestroy", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    (void)ctx;
    if (!event_live(e)) return CUDA_ERROR_INVALID_HANDLE;
    /* a pending record still refers to the event: let it land first */
    std::unique_lock<std::mutex> lk(g_ev_mu);
    g_ev_cv.wait(lk, [e] { return e->pending.empty() && e->waiters == 0; });
    if (!g_events.erase(e)) return CUDA_ERROR_INVALID_HANDLE; /* a reset took it meanwhile */
    lk.unlock();
    delete e;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API size_t gpa_sim_host_fns(void) { return g_host_fns.load(); }
GPA_SIM_API size_t gpa_sim_event_records(void) { return g_ev_records.load(); }

/* A context reset or destroy frees its events, as a driver does: a handle
 * kept past that is dangling (a real driver crashes on its destroy; here
 * every call on it answers CUDA_ERROR_INVALID_HANDLE). The context's streams
 * are gone first, so no record is pending. */
void gpa_sim__events_release_all(void) {
  std::lock_guard<std::mutex> lk(g_ev_mu);
  for (CUevent e : g_events) delete e;
  g_events.clear();
}

GPA_SIM_API CUresult cuEventRecord(CUevent e, CUstream h) {
  return gpa_sim__guard("cuEventRecord", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    CUstream_st *s;
    CUresult r = gpa_sim__stream_get(ctx, h, &s);
    if (r) return r;
    if (!event_live(e)) return CUDA_ERROR_INVALID_HANDLE;
    g_ev_records.fetch_add(1, std::memory_order_relaxed);
    {
      /* In a capture a record only orders the graph's nodes; the event
       * itself is untouched (a query of it would never see the record). */
      std::lock_guard<std::mutex> lk(s->mu);
      if (s->cap) return CUDA_SUCCESS;
    }
    uint64_t seq;
    {
      std::lock_guard<std::mutex> lk(g_ev_mu);
      seq = ++e->recorded;
      e->pending.insert(seq);
    }
    gpa_sim__stream_push(s, [e, seq] {
      std::lock_guard<std::mutex> lk(g_ev_mu);
      e->pending.erase(seq);
      if (seq > e->completed) {
        e->completed = seq;
        e->t_ns = now_ns();
      }
      g_ev_cv.notify_all();
      return CUDA_SUCCESS;
    }, true);
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuEventRecordWithFlags(CUevent e, CUstream h, unsigned int flags) {
  return gpa_sim__guard("cuEventRecordWithFlags", [&]() -> CUresult {
    (void)flags;
    return cuEventRecord(e, h);
  });
}

GPA_SIM_API CUresult cuEventQuery(CUevent e) {
  return gpa_sim__guard("cuEventQuery", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    (void)ctx;
    if (!event_live(e)) return CUDA_ERROR_INVALID_HANDLE;
    std::lock_guard<std::mutex> lk(g_ev_mu);
    return e->completed >= e->recorded ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
  });
}

GPA_SIM_API CUresult cuEventSynchronize(CUevent e) {
  return gpa_sim__guard("cuEventSynchronize", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    if (!event_live(e)) return CUDA_ERROR_INVALID_HANDLE;
    std::unique_lock<std::mutex> lk(g_ev_mu);
    uint64_t target = e->recorded;
    g_ev_cv.wait(lk, [e, target] { return !e->pending.count(target); });
    return (CUresult)ctx->sticky.load();
  });
}

GPA_SIM_API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
  return gpa_sim__guard("cuEventElapsedTime", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    (void)ctx;
    if (!ms) return CUDA_ERROR_INVALID_VALUE;
    if (!event_live(a) || !event_live(b)) return CUDA_ERROR_INVALID_HANDLE;
    if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
    std::lock_guard<std::mutex> lk(g_ev_mu);
    if (!a->recorded || !b->recorded) return CUDA_ERROR_INVALID_HANDLE;
    if (a->completed < a->recorded || b->completed < b->recorded) return CUDA_ERROR_NOT_READY;
    *ms = (float)((double)(b->t_ns - a->t_ns) / 1e6);
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned int flags) {
  return gpa_sim__guard("cuStreamWaitEvent", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    (void)flags;
    CUstream_st *s;
    CUresult r = gpa_sim__stream_get(ctx, h, &s);
    if (r) return r;
    if (!event_live(e)) return CUDA_ERROR_INVALID_HANDLE;
    uint64_t target;
    {
      std::lock_guard<std::mutex> lk(g_ev_mu);
      target = e->recorded; /* the record issued before this call; none = no wait */
      if (target == 0) return CUDA_SUCCESS;
      e->waiters++;
    }
    gpa_sim__stream_push(s, [e, target] {
      std::unique_lock<std::mutex> lk(g_ev_mu);
      g_ev_cv.wait(lk, [e, target] { return !e->pending.count(target); });
      e->waiters--;
      g_ev_cv.notify_all();
      return CUDA_SUCCESS;
    }, true);
    return CUDA_SUCCESS;
  });
}
