"""Actors, queues, buffers, tensors, handles and batches over the C API.

Every object that holds a C resource is a context manager and also frees it
when garbage-collected. Objects that live inside an actor (queues, buffers,
tensors) refuse to be used once the actor is closed: the C objects are gone
then (handles are refcounted and stay valid).
"""
import ctypes
import threading

import numpy as np

from . import _lib as L

# gpa_dtype values and their numpy equivalents (bf16 is carried as raw uint16).
F32, F16, BF16, I32, U8, I64 = 1, 2, 3, 4, 5, 6
_DTYPE_NAMES = {"f32": F32, "f16": F16, "bf16": BF16, "i32": I32, "u8": U8, "i64": I64}
_NP_OF = {F32: np.float32, F16: np.float16, BF16: np.uint16, I32: np.int32, U8: np.uint8, I64: np.int64}
_GPA_OF = {np.dtype(np.float32): F32, np.dtype(np.float16): F16, np.dtype(np.int32): I32,
           np.dtype(np.uint8): U8, np.dtype(np.int64): I64}

ATTR_INT, ATTR_FLOAT = 1, 2
_NS = 1_000_000_000


class GpaError(Exception):
    """A gpuactor call failed: .status (negative int), .name ("GPA_EINVAL"), .message (detail)."""

    def __init__(self, status, message=""):
        self.status = int(status)
        self.name = L.status_name(self.status).decode()
        self.message = message or L.strerror(self.status).decode()
        super().__init__("%s: %s" % (self.name, self.message))


def _check(st, message=None):
    if st != 0:
        raise GpaError(st, message if message is not None else L.last_error_message().decode(errors="replace"))


def _timeout_ns(timeout):
    return -1 if timeout is None else max(0, int(timeout * _NS))


def dtype_of(dtype):
    """A gpa dtype number from a name ("f32"), a number, or a numpy dtype."""
    if isinstance(dtype, int):
        return dtype
    if isinstance(dtype, str) and dtype in _DTYPE_NAMES:
        return _DTYPE_NAMES[dtype]
    d = np.dtype(dtype)
    if d not in _GPA_OF:
        raise GpaError(-14, "no gpa dtype for numpy %s" % d)
    return _GPA_OF[d]


def numpy_dtype(dtype):
    return np.dtype(_NP_OF[dtype_of(dtype)])


class _Closing:
    """close() when a with-statement ends and, errors dropped, when garbage
    collected: the owners of a C object that has no refcount (actor, buffer,
    feed)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def version():
    return L.version_string().decode()


class Handle:
    """The completion of one message, usable as a future: done(), wait(),
    result(timeout), exception(). Refcounted in C; released by release(),
    by the with-statement, or when garbage-collected."""

    def __init__(self, ptr, kind="op"):
        self._ptr = ptr
        self.kind = kind

    def _p(self):
        if not self._ptr:
            raise GpaError(-1, "handle already released")
        return self._ptr

    def release(self):
        if self._ptr:
            L.handle_release(self._ptr)
            self._ptr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        self.release()

    @property
    def status(self):
        """The handle's status: 0, a negative error, or GPA_EPENDING (-18)."""
        return L.handle_status(self._p())

    def done(self):
        return self.status != -18

    def wait(self, timeout=None):
        """Waits (releasing the GIL) and returns the status (ETIMEDOUT if still pending)."""
        return L.await_(self._p(), _timeout_ns(timeout))

    def exception(self, timeout=None):
        st = self.wait(timeout)
        if st == 0:
            return None
        if st == -4 and not self.done():
            return GpaError(st, "await timed out")
        return GpaError(st, L.handle_error_message(self._ptr).decode(errors="replace"))

    def result(self, timeout=None):
        """Waits; raises GpaError on failure. Readbacks return a numpy copy of the data."""
        e = self.exception(timeout)
        if e is not None:
            raise e
        return None

    def __repr__(self):
        return "<gpuactor.Handle %s %s>" % (self.kind, "released" if not self._ptr else L.status_name(self.status).decode())


class Readback(Handle):
    """A readback: result() is a numpy array (a copy). array() reads it after
    the batch was synced without waiting (ENOTSYNCED before). It also
    exports its data through DLPack without a copy (numpy.from_dlpack)."""

    def __init__(self, ptr, dtype, shape):
        super().__init__(ptr, "readback")
        self.dtype = numpy_dtype(dtype)
        self.shape = tuple(shape)

    def _view(self):
        data = ctypes.c_void_p()
        size = ctypes.c_uint64()
        st = L.handle_data(self._p(), ctypes.byref(data), ctypes.byref(size))
        _check(st, L.handle_error_message(self._ptr).decode(errors="replace") if st not in (-7, -1) else None)
        n = size.value
        if n == 0:
            return np.zeros(self.shape, self.dtype)
        buf = (ctypes.c_char * n).from_address(data.value)
        return np.frombuffer(buf, dtype=self.dtype).reshape(self.shape)

    def array(self):
        return self._view().copy()

    def result(self, timeout=None):
        super().result(timeout)
        return self.array()

    def __dlpack__(self, stream=None):
        from . import dlpack
        return dlpack.export_readback(self)

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


class Tensor:
    """A view of an actor buffer: dtype and shape over (buffer, offset)."""

    _cached_wrap = False  # gpuactor.torch: True on the wraps it keeps (a class default: no getattr per call)

    def __init__(self, buffer, shape, dtype=F32, offset=0):
        self.buffer = buffer
        self.dtype = dtype_of(dtype)
        self.shape = tuple(int(d) for d in shape)
        self.offset = int(offset)
        if len(self.shape) > L.MAX_RANK:
            raise ValueError("gpuactor: rank %d > %d" % (len(self.shape), L.MAX_RANK))

    @property
    def numel(self):
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self):
        return self.numel * L.dtype_size(self.dtype)

    def view(self, *shape, dtype=None, offset=0):
        """The same bytes with another shape (and dtype, offset in bytes)."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return Tensor(self.buffer, shape, self.dtype if dtype is None else dtype, self.offset + offset)

    def c(self):
        t = L.Tensor()
        t.buffer = self.buffer.id
        t.offset = self.offset
        t.dtype = self.dtype
        t.rank = len(self.shape)
        for i, d in enumerate(self.shape):
            t.shape[i] = d
        return t

    def upload(self, array, queue=None, version=0):
        """Uploads a numpy array (converted to the tensor's dtype); returns the handle."""
        return (queue or self.buffer.actor.queue).upload(self, array, version)

    def numpy(self, queue=None, timeout=None):
        """Reads the tensor back and waits: a numpy copy."""
        with (queue or self.buffer.actor.queue).readback(self) as h:
            return h.result(timeout)

    def __dlpack__(self, stream=None, **protocol):
        """A DLPack capsule over the tensor's own memory (no copy); the buffer
        stays allocated until the consumer's deleter runs."""
        from . import dlpack
        return dlpack.export_tensor(self, stream)

    def __dlpack_device__(self):
        return (1, 0) if self.buffer.actor.backend == "cpu" else (2, 0)  # kDLCPU / kDLCUDA

    def __repr__(self):
        return "<gpuactor.Tensor %s %s buffer %#x>" % (np.dtype(_NP_OF[self.dtype]).name, self.shape, self.buffer.id)


def _release_later(actor, buffer_id):
    with actor._lock:  # close() swaps the pointer under it: the actor is alive while this runs
        if actor._ptr:
            L.buffer_release(actor._ptr, buffer_id)


class Buffer(_Closing):
    """Device memory of an actor (gpa_buffer_acquire); released on close()."""

    external = False  # True: the memory is a DLPack producer's (gpa_buffer_wrap)

    @classmethod
    def _adopt(cls, actor, buffer_id, nbytes):
        """The Python owner of a buffer id the library already gave out."""
        b = cls.__new__(cls)
        b.actor, b.nbytes, b.label, b.id = actor, int(nbytes), None, buffer_id
        return b

    def __init__(self, actor, nbytes, label=None):
        self.actor = actor
        self.nbytes = int(nbytes)
        self.label = label
        out = ctypes.c_uint64()
        _check(L.buffer_acquire(actor._p(), label.encode() if label else None, self.nbytes, ctypes.byref(out)))
        self.id = out.value

    def release(self):
        buffer_id, self.id = self.id, 0
        if not buffer_id or not self.actor._ptr:
            return
        if isinstance(threading.current_thread(), threading._DummyThread):
            # A thread Python did not start, maybe the actor's own (garbage
            # collected during a release callback into Python): the release
            # waits for the actor, so it goes to a thread of its own.
            threading.Thread(target=_release_later, args=(self.actor, buffer_id), daemon=True).start()
        else:
            L.buffer_release(self.actor._ptr, buffer_id)

    close = release

    def info(self):
        i = L.BufferInfo(size_of=ctypes.sizeof(L.BufferInfo))
        _check(L.buffer_query(self.actor._p(), self.id, ctypes.byref(i)))
        return {"size": i.size, "capacity": i.capacity, "version": i.version, "refs": i.refs,
                "label": i.label.decode()}

    def tensor(self, shape, dtype=F32, offset=0):
        return Tensor(self, shape, dtype, offset)


def _attrs(attrs):
    if not attrs:
        return None, 0, []
    arr = (L.Attr * len(attrs))()
    keep = []
    for i, (k, v) in enumerate(attrs.items()):
        name = k.encode()
        keep.append(name)
        arr[i].name = name
        if isinstance(v, (bool, int, np.integer)):
            arr[i].type, arr[i].i = ATTR_INT, int(v)
        elif isinstance(v, (float, np.floating)):
            arr[i].type, arr[i].f = ATTR_FLOAT, float(v)
        else:
            raise TypeError("gpuactor: attribute %s must be int or float, not %s" % (k, type(v).__name__))
    return arr, len(attrs), keep


def _tensors(ts):
    arr = (L.Tensor * max(1, len(ts)))()
    for i, t in enumerate(ts):
        arr[i] = t.c()
    return arr


class Call:
    """An op call built once for the C API (gpa_op_call: the op's name, its
    tensors' buffers, offsets, dtypes and shapes, the attributes), to
    submit as often as wanted: Queue.submit(call) / Queue.post(call). It
    keeps its tensors; what it names is what they were when it was built."""
    __slots__ = ("op", "c", "ref", "_keep")

    def __init__(self, op, inputs=(), outputs=(), attrs=None):
        ins, outs = _tensors(inputs), _tensors(outputs)
        a, n_attrs, names = _attrs(attrs)
        self.op = op
        self.c = L.OpCall(op.encode(), ins, len(inputs), outs, len(outputs), a if a is not None else None, n_attrs)
        self.ref = ctypes.byref(self.c)  # made once: a submit passes it as is
        self._keep = (tuple(inputs), tuple(outputs), ins, outs, a, names)  # what c points into


class Batch:
    """with queue.batch("label") as b: ... — begin on enter, sync on exit;
    b.stats holds the batch stats and the first error is raised. graph:
    None (the actor's GPA_GRAPHS), True (record or replay as a CUDA graph),
    False (eager); docs/graphs.md."""

    def __init__(self, queue, label, graph=None):
        self.queue, self.label, self.graph, self.stats = queue, label, graph, None

    def __enter__(self):
        self.queue.batch_begin(self.label, self.graph)
        return self

    def __exit__(self, exc_type, *exc):
        try:
            self.stats = self.queue.sync()
        except GpaError:
            if exc_type is None:
                raise
        return False


class Queue:
    """An ordered lane of work of an actor. Submits never block on the device."""

    def __init__(self, actor, ptr, owned):
        self.actor, self._ptr_, self._owned = actor, ptr, owned

    def _p(self):
        p = self._ptr_
        if p and self.actor._ptr:
            return p
        self.actor._p()  # raises first if the actor is closed
        raise GpaError(-17, "queue destroyed")

    def close(self):
        if self._owned and self._ptr_ and self.actor._ptr:
            L.queue_destroy(self._ptr_)
        self._ptr_ = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def submit(self, op, inputs=(), outputs=(), attrs=None):
        """Submits op by registry name (or a Call); returns its Handle."""
        call = op if isinstance(op, Call) else Call(op, inputs, outputs, attrs)
        h = ctypes.c_void_p()
        _check(L.submit(self._p(), call.ref, ctypes.byref(h)))
        return Handle(h.value, call.op)

    def post(self, op, inputs=(), outputs=(), attrs=None):
        """Submits op (a name, or a Call) without a handle (gpa_submit with
        out NULL): the queue's batch tracks it, and its failure shows at the
        queue's next sync, as a released handle's would; no Handle to make
        or release."""
        call = op if isinstance(op, Call) else Call(op, inputs, outputs, attrs)
        _check(L.submit(self._p(), call.ref, None))

    def upload(self, tensor, array, version=0):
        arr = np.ascontiguousarray(array, dtype=_NP_OF[tensor.dtype])
        if arr.size != tensor.numel:
            raise GpaError(-13, "upload of %d elements into a tensor of %d" % (arr.size, tensor.numel))
        t = tensor.c()
        h = ctypes.c_void_p()
        _check(L.upload(self._p(), ctypes.byref(t), arr.ctypes.data_as(ctypes.c_void_p), arr.nbytes, version,
                        ctypes.byref(h)))
        return Handle(h.value, "upload")

    def readback(self, tensor):
        t = tensor.c()
        h = ctypes.c_void_p()
        _check(L.readback(self._p(), ctypes.byref(t), ctypes.byref(h)))
        return Readback(h.value, tensor.dtype, tensor.shape)

    def batch_begin(self, label=None, graph=None):
        """graph: None (the actor's GPA_GRAPHS), True (CUDA graph), False (eager)."""
        mode = 0 if graph is None else (2 if graph else 1)
        opts = L.BatchOptions(size=ctypes.sizeof(L.BatchOptions), graph=mode)
        _check(L.batch_begin_opts(self._p(), label.encode() if label else None, ctypes.byref(opts)))

    def sync(self):
        """gpa_sync_batch (the GIL is released while it waits): the batch's stats
        as a dict; raises the batch's first error."""
        s = L.BatchStats(size=ctypes.sizeof(L.BatchStats))
        st = L.sync_batch(self._p(), ctypes.byref(s))
        stats = {"ops": s.ops, "errors": s.errors, "bytes_moved": s.bytes_moved,
                 "uploads_skipped": s.uploads_skipped, "host_ns": s.host_ns, "device_ns": s.device_ns,
                 "first_error": s.first_error, "label": s.label.decode(errors="replace"),
                 "graph": s.graph}
        _check(st, s.first_error_message.decode(errors="replace"))
        return stats

    def batch(self, label=None, graph=None):
        return Batch(self, label, graph)

    def infeed(self, feed, outputs, timeout=None):
        outs = _tensors(outputs)
        h = ctypes.c_void_p()
        _check(L.infeed(self._p(), feed._p(), outs, len(outputs), _timeout_ns(timeout), ctypes.byref(h)))
        return Handle(h.value, "infeed")

    def wait_event(self, event, block=True):
        """The queue's later work waits for `event` (a CUevent handle, int).
        block=False posts the wait without a round trip to the actor; a
        failure then shows at the queue's next sync (gpa_queue_wait_event_async)."""
        _check((L.queue_wait_event if block else L.queue_wait_event_async)(self._p(), event))

    def record_event(self, event):
        """Records `event` (a CUevent handle, int) after the queue's earlier work."""
        _check(L.queue_record_event(self._p(), event))

    def outfeed(self, feed, inputs):
        ins = _tensors(inputs)
        h = ctypes.c_void_p()
        _check(L.outfeed(self._p(), feed._p(), ins, len(inputs), ctypes.byref(h)))
        return Handle(h.value, "outfeed")


class Actor(_Closing):
    """One device's actor. Actor(device="cpu", threads=2, ...) or Actor() for
    the defaults and the environment (GPA_DEVICE, ...). A context manager;
    close() destroys it (after which its queues and buffers refuse use)."""

    def __init__(self, device=None, threads=0, mailbox_size=0, mem_budget=0, trace_path=None, log_level=0):
        opts = L.ActorOptions(size=ctypes.sizeof(L.ActorOptions), device=device.encode() if device else None,
                              mailbox_size=mailbox_size, threads=threads, mem_budget=mem_budget,
                              trace_path=trace_path.encode() if trace_path else None, log_level=log_level)
        p = ctypes.c_void_p()
        _check(L.actor_create(ctypes.byref(opts), ctypes.byref(p)))
        self._ptr = p.value
        self._exports = 0  # DLPack exports whose deleter has not run yet
        self._lock = threading.Lock()
        self.queue = Queue(self, L.actor_default_queue(self._ptr), owned=False)

    def _p(self):
        if not self._ptr:
            raise GpaError(-12, "actor closed")
        return self._ptr

    def close(self):
        with self._lock:
            if getattr(self, "_exports", 0):
                raise GpaError(-20, "actor has %d DLPack exports alive: their consumers still use its memory"
                               % self._exports)
            p, self._ptr = self._ptr, None
        if p:
            L.actor_destroy(p)

    @property
    def backend(self):
        return L.actor_backend(self._p()).decode()

    def stats(self):
        s = L.ActorStats(size=ctypes.sizeof(L.ActorStats))
        _check(L.actor_stats_get(self._p(), ctypes.byref(s)))
        return {n: getattr(s, n) for n, _ in L.ActorStats._fields_[1:]}

    def create_queue(self, name=None):
        p = ctypes.c_void_p()
        _check(L.queue_create(self._p(), name.encode() if name else None, ctypes.byref(p)))
        return Queue(self, p.value, owned=True)

    def buffer(self, nbytes, label=None):
        return Buffer(self, nbytes, label)

    def tensor(self, shape, dtype=F32, label=None):
        """A tensor in a buffer of its own (labeled: the same label, the same buffer)."""
        d = dtype_of(dtype)
        shape = tuple(int(s) for s in shape)
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        return Tensor(Buffer(self, max(1, n) * L.dtype_size(d), label), shape, d)

    def from_numpy(self, array, label=None, queue=None):
        """A tensor holding a copy of `array` (the upload is queued; the source is copied at once)."""
        arr = np.asarray(array)
        t = self.tensor(arr.shape, dtype_of(arr.dtype), label)
        (queue or self.queue).upload(t, arr).release()
        return t

    def from_dlpack(self, obj, label=None, queue=None, copy=False, stream=None):
        """A tensor over a DLPack producer's memory, without a copy (kDLCPU on
        cpu, kDLCUDA on cuda/sim): ops read and write the producer's array.
        copy=True: a tensor holding a copy (CPU data, any strides). `stream`
        is passed to the producer's __dlpack__."""
        from . import dlpack
        return dlpack.import_tensor(self, obj, label, queue, copy, stream)

    def feed(self, tag=b"", sink=None, outfeed_capacity=0, outfeed_policy=0, infeed_capacity=0):
        from .feed import Feed
        return Feed(self, tag, sink, outfeed_capacity, outfeed_policy, infeed_capacity)
