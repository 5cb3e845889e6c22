"""ctypes declarations of the gpuactor C API (nothing to compile).

The shared library is found through, in order: the GPA_LIBRARY environment
variable (a path to libgpuactor.so); for an installed package, the library
its wheel carries (gpuactor/lib/) or the one named at install time
(GPA_PREFIX, recorded in _build_config.py); in the source tree, the build
trees next to it (build/, and $BUILD_DIR); then the dynamic loader's search
path (libgpuactor.so.0). ctypes.CDLL releases the GIL around every foreign call,
so a blocking call (await, sync, pop, destroy) never holds up other Python
threads.
"""
import ctypes
import ctypes.util
import os

MAX_RANK = 8

c_status = ctypes.c_int
c_p = ctypes.c_void_p


def _candidates():
    env = os.environ.get("GPA_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    bundled = os.path.join(here, "lib", "libgpuactor.so.0")
    if os.path.exists(bundled):
        yield bundled
    try:
        from ._build_config import LIBRARY
        if LIBRARY:
            yield LIBRARY
    except ImportError:
        pass  # the source tree: no install step wrote it
    root = os.path.abspath(os.path.join(here, "..", "..", ".."))
    for build in (os.environ.get("BUILD_DIR"), "build"):
        if build:
            yield os.path.join(root if not os.path.isabs(build) else "", build, "libgpuactor.so")
    yield "libgpuactor.so.0"
    found = ctypes.util.find_library("gpuactor")
    if found:
        yield found


def _load():
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            errors.append("%s: %s" % (path, e))
    raise ImportError("gpuactor: cannot load the C library (set GPA_LIBRARY to libgpuactor.so): "
                      + "; ".join(errors))


lib, path = _load()


class Tensor(ctypes.Structure):
    _fields_ = [("buffer", ctypes.c_uint64), ("offset", ctypes.c_uint64), ("dtype", ctypes.c_int32),
                ("rank", ctypes.c_uint32), ("shape", ctypes.c_int64 * MAX_RANK)]


class Attr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("type", ctypes.c_int32), ("i", ctypes.c_int64),
                ("f", ctypes.c_double)]


class OpCall(ctypes.Structure):
    _fields_ = [("op", ctypes.c_char_p), ("inputs", ctypes.POINTER(Tensor)), ("n_inputs", ctypes.c_uint32),
                ("outputs", ctypes.POINTER(Tensor)), ("n_outputs", ctypes.c_uint32),
                ("attrs", ctypes.POINTER(Attr)), ("n_attrs", ctypes.c_uint32)]


class ActorOptions(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("device", ctypes.c_char_p), ("mailbox_size", ctypes.c_uint32),
                ("full_policy", ctypes.c_int32), ("full_timeout_ns", ctypes.c_int64),
                ("shutdown_policy", ctypes.c_int32), ("mem_budget", ctypes.c_uint64),
                ("threads", ctypes.c_uint32), ("max_pending", ctypes.c_uint32), ("log_level", ctypes.c_int32),
                ("trace_path", ctypes.c_char_p), ("profile", ctypes.c_int32)]


class BatchStats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("ops", ctypes.c_uint64), ("errors", ctypes.c_uint64),
                ("bytes_moved", ctypes.c_uint64), ("uploads_skipped", ctypes.c_uint64),
                ("host_ns", ctypes.c_int64), ("device_ns", ctypes.c_int64), ("first_error", ctypes.c_int32),
                ("first_error_message", ctypes.c_char * 192), ("label", ctypes.c_char * 64),
                ("graph", ctypes.c_uint32)]


class BatchOptions(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("graph", ctypes.c_uint32)]


class BufferInfo(ctypes.Structure):
    _fields_ = [("size_of", ctypes.c_uint32), ("size", ctypes.c_uint64), ("capacity", ctypes.c_uint64),
                ("version", ctypes.c_uint64), ("refs", ctypes.c_uint32), ("label", ctypes.c_char * 64)]


class ActorStats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32)] + [(n, ctypes.c_uint64) for n in (
        "messages", "cache_hits", "cache_misses", "evictions", "bytes_allocated", "bytes_cached",
        "live_buffers", "uploads_skipped", "bytes_uploaded", "bytes_read_back", "producers")]


class HostTensor(ctypes.Structure):
    _fields_ = [("data", c_p), ("bytes", ctypes.c_uint64), ("dtype", ctypes.c_int32), ("rank", ctypes.c_uint32),
                ("shape", ctypes.c_int64 * MAX_RANK)]


# void sink(gpa_feed *, const void *tag, uint32_t tag_len, const gpa_host_tensor *, uint32_t n, void *user)
SINK_FN = ctypes.CFUNCTYPE(None, c_p, c_p, ctypes.c_uint32, ctypes.POINTER(HostTensor), ctypes.c_uint32, c_p)


class FeedOptions(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("tag", c_p), ("tag_len", ctypes.c_uint32), ("sink", SINK_FN),
                ("user_data", c_p), ("outfeed_capacity", ctypes.c_uint32), ("outfeed_policy", ctypes.c_int32),
                ("infeed_capacity", ctypes.c_uint32)]


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


P = ctypes.POINTER
strerror = _fn("gpa_strerror", ctypes.c_char_p, ctypes.c_int)
status_name = _fn("gpa_status_name", ctypes.c_char_p, ctypes.c_int)
last_error_message = _fn("gpa_last_error_message", ctypes.c_char_p)
version_string = _fn("gpa_version_string", ctypes.c_char_p)
dtype_size = _fn("gpa_dtype_size", ctypes.c_uint32, ctypes.c_int)

actor_create = _fn("gpa_actor_create", c_status, P(ActorOptions), P(c_p))
actor_destroy = _fn("gpa_actor_destroy", c_status, c_p)
actor_shutdown = _fn("gpa_actor_shutdown", c_status, c_p)
actor_backend = _fn("gpa_actor_backend", ctypes.c_char_p, c_p)
actor_default_queue = _fn("gpa_actor_default_queue", c_p, c_p)
actor_stats_get = _fn("gpa_actor_stats_get", c_status, c_p, P(ActorStats))
queue_create = _fn("gpa_queue_create", c_status, c_p, ctypes.c_char_p, P(c_p))
queue_destroy = _fn("gpa_queue_destroy", c_status, c_p)

buffer_acquire = _fn("gpa_buffer_acquire", c_status, c_p, ctypes.c_char_p, ctypes.c_uint64, P(ctypes.c_uint64))
buffer_release = _fn("gpa_buffer_release", c_status, c_p, ctypes.c_uint64)
buffer_query = _fn("gpa_buffer_query", c_status, c_p, ctypes.c_uint64, P(BufferInfo))

submit = _fn("gpa_submit", c_status, c_p, P(OpCall), P(c_p))
await_ = _fn("gpa_await", c_status, c_p, ctypes.c_int64)
handle_status = _fn("gpa_handle_status", c_status, c_p)
handle_error_message = _fn("gpa_handle_error_message", ctypes.c_char_p, c_p)
handle_retain = _fn("gpa_handle_retain", None, c_p)
handle_release = _fn("gpa_handle_release", None, c_p)
readback = _fn("gpa_readback", c_status, c_p, P(Tensor), P(c_p))
handle_data = _fn("gpa_handle_data", c_status, c_p, P(c_p), P(ctypes.c_uint64))
upload = _fn("gpa_upload", c_status, c_p, P(Tensor), c_p, ctypes.c_uint64, ctypes.c_uint64, P(c_p))
batch_begin = _fn("gpa_batch_begin", c_status, c_p, ctypes.c_char_p)
batch_begin_opts = _fn("gpa_batch_begin_opts", c_status, c_p, ctypes.c_char_p, c_p)
sync_batch = _fn("gpa_sync_batch", c_status, c_p, P(BatchStats))

feed_open = _fn("gpa_feed_open", c_status, c_p, P(FeedOptions), P(c_p))
feed_close = _fn("gpa_feed_close", c_status, c_p)
feed_id = _fn("gpa_feed_id", ctypes.c_uint64, c_p)
infeed_push = _fn("gpa_infeed_push", c_status, c_p, P(HostTensor), ctypes.c_uint32)
infeed = _fn("gpa_infeed", c_status, c_p, c_p, P(Tensor), ctypes.c_uint32, ctypes.c_int64, P(c_p))
outfeed = _fn("gpa_outfeed", c_status, c_p, c_p, P(Tensor), ctypes.c_uint32, P(c_p))
outfeed_pop = _fn("gpa_outfeed_pop", c_status, c_p, ctypes.c_int64, P(c_p))
outfeed_item_count = _fn("gpa_outfeed_item_count", ctypes.c_uint32, c_p)
outfeed_item_tensor = _fn("gpa_outfeed_item_tensor", c_status, c_p, ctypes.c_uint32, P(HostTensor))

# External buffers and loans (include/gpuactor/external.h).
MEM_HOST, MEM_DEVICE, MEM_HOST_PINNED = 1, 2, 3
EXTERNAL_ALIGN = 16
RELEASE_FN = ctypes.CFUNCTYPE(None, c_p, c_p)


class ExternalDesc(ctypes.Structure):
    _fields_ = [("size_of", ctypes.c_uint32), ("kind", ctypes.c_int32), ("ptr", c_p), ("bytes", ctypes.c_uint64),
                ("release", RELEASE_FN), ("user_data", c_p), ("ready_event", c_p)]


class BufferLoan(ctypes.Structure):
    _fields_ = [("size_of", ctypes.c_uint32), ("kind", ctypes.c_int32), ("ptr", c_p), ("bytes", ctypes.c_uint64)]


buffer_wrap = _fn("gpa_buffer_wrap", c_status, c_p, P(ExternalDesc), P(ctypes.c_uint64))
buffer_lend = _fn("gpa_buffer_lend", c_status, c_p, ctypes.c_uint64, P(BufferLoan))
queue_wait_event = _fn("gpa_queue_wait_event", c_status, c_p, c_p)
queue_wait_event_async = _fn("gpa_queue_wait_event_async", c_status, c_p, c_p)
queue_record_event = _fn("gpa_queue_record_event", c_status, c_p, c_p)
