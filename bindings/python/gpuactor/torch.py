"""gpuactor ops on torch.Tensors, without copies (optional: needs PyTorch).

    import torch, gpuactor as ga, gpuactor.torch as gt
    a = ga.Actor()
    x = torch.randn(4, 1024); y = torch.empty_like(x)
    gt.run(a, "gelu_fwd", [x], [y])               # y written in place
    o = gt.attention(a, q, k, v, causal=True)     # differentiable: our forward and backward

Inputs are read and outputs written in place, in torch's own memory.
Tensors must be contiguous (a refusal says so; call .contiguous()).

CPU tensors on a cpu actor are views of one external buffer per actor over
the whole user address space (its "host arena", wrapped at the actor's
first such call, released with the actor, no release callback): a tensor
is the arena at its data pointer, with no wrap, release or DLPack capsule
of its own. That is safe because run() waits for the op on the CPU: torch's
memory is in use by the actor only while run() holds the tensors, and the
cpu backend never touches wrapped memory outside an op. (Nothing holds the
storage itself: a tensor resized or set_() by another thread while run()
waits for an op on it leaves the op with memory torch may have freed.) A new tensor per
call (an op's output, as a model makes them) cost a wrap and a release
through DLPack, two round trips to the actor, the second entering Python on
the actor's thread for torch's deleter: ~100 µs a tensor beside a 1.1 ms
conv1d, more than the op's whole margin over PyTorch (docs/benchmarks.md,
"gpuactor.torch: fresh outputs"). GPA_TORCH_HOST_ARENA=0 (read at import)
or HOST_ARENA = False turns it off: every tensor then goes through DLPack
as below.

Every other tensor (CUDA tensors; CPU tensors past the arena, of zero
bytes, or with the arena off) goes through DLPack as an external buffer
over torch's memory (gpuactor.dlpack). A wrap is kept while the torch
tensor it was made for lives (a weak reference), so a tensor used op after
op is wrapped once: the wrap and its release are round trips to the actor
that would otherwise cost more than a small op. When the tensor dies the
wrap is released, and torch's deleter runs once the actor is done with the
memory.

Ordering. On the CPU, run() waits for the op: torch sees the result when it
returns. On CUDA, the actor's queue waits for an event recorded on torch's
current stream of the tensors' device (posted: no round trip), the op is
posted (no handle), and torch's current stream waits for an event recorded
after the op (the call's one round trip: the record must be on the actor's
stream before torch's wait is): no wait for the device and no device-wide
sync. The two events are a pair from a small pool per device, reused: a
call gives its pair back only after its round trip, when the actor has
enqueued its wait on the first and its record of the second and torch's
stream its wait on the second, and CUDA reads an event when a wait on it is
enqueued, so a later record changes nothing already ordered.

Host cost. torch's side of a call is two driver calls through ctypes,
cuEventRecord and cuStreamWaitEvent on torch's raw current stream (the
integer Triton reads, torch._C._cuda_getCurrentRawStream) and the pair's
CUevent handles, where torch.cuda.current_stream() and Event.record /
Stream.wait_event build and check Python objects for several microseconds a
call. The raw stream of the default stream is 0, which the driver reads as
the legacy stream of the calling thread's current context: the driver path
is taken only while torch's current device is the tensors' device, and a
record it refuses (a thread without a current context yet) is done by
torch's own Event.record on torch's Stream instead, as is every call where
libcuda cannot be loaded (stats["torch_stream_calls"] counts them). (The
CUDA path needs a GPU with a CUDA build of PyTorch; this repository's CI has
neither: there its steps are tested with stand-ins for torch's stream,
events and the driver, tests/test_torch.py.)
"""
import atexit
import ctypes
import os
import weakref

import torch as _torch

from . import core as _core

_GPA_OF = {_torch.float32: _core.F32, _torch.float16: _core.F16, _torch.bfloat16: _core.BF16,
           _torch.int32: _core.I32, _torch.uint8: _core.U8, _torch.int64: _core.I64}
# (actor id, device index (-1: CPU), data pointer) ->
# (gpuactor Tensor over the wrap, weak reference to the torch tensor, its torch dtype)
_wraps = {}


def _drop(key):
    hit = _wraps.pop(key, None)
    if hit is not None:
        hit[0].buffer.release()


def _wrap(actor, t, q):
    """The gpuactor tensor over t's memory: the cached wrap itself (kept
    while t lives), or a view of it (another shape or dtype within its
    bytes), made anew."""
    # get_device(), an int, not t.device (an object made per call); the size
    # is read only when t is not the wrap's own shape and dtype
    key = (id(actor), t.get_device(), t.data_ptr())
    hit = _wraps.get(key)
    if hit is not None:
        g = hit[0]
        if hit[1]() is not None and g.buffer.actor is actor and actor._ptr and t.is_contiguous():
            if t.dtype is hit[2] and g.shape == t.shape:  # torch.Size is a tuple
                return g
            dtype = _GPA_OF.get(t.dtype)
            if dtype is not None and g.offset + t.numel() * t.element_size() <= g.buffer.nbytes:
                return _core.Tensor(g.buffer, tuple(t.shape), dtype, g.offset)
    g = actor.from_dlpack(t.detach(), queue=q)  # a tensor past the wrap's bytes replaces it
    g._cached_wrap = True
    if hit is not None:
        _drop(key)
    _wraps[key] = (g, weakref.ref(t, lambda _r, key=key: _drop(key)), t.dtype)
    return g


# Calls built once (core.Call) for the cached wraps they name: (op, its
# attributes, the wraps' ids) -> Call. A Call keeps its wraps, so no other
# object takes their ids while it is here: a tensor wrapped anew (its torch
# tensor died, its memory reused) is another object and another key, and
# the old entry is never hit again. Cleared when full.
_calls = {}
CALLS_MAX = 256


def _call(op, ins, outs, attrs):
    for g in ins + outs:
        if not g._cached_wrap:  # a view made for this call: built for it alone
            return _core.Call(op, ins, outs, attrs)
    try:
        # the values' types too: 1 and 1.0 are equal keys but an int and a float
        # attribute. Unsorted: the same attributes in another order are another
        # entry for the same call, which costs an entry, never a wrong call.
        key = (op, tuple(map(id, ins)), tuple(map(id, outs)),
               (tuple(attrs.items()), tuple(map(type, attrs.values()))) if attrs else ())
        c = _calls.get(key)
    except TypeError:  # an attribute value that cannot be a key: Call names what is wrong with it
        return _core.Call(op, ins, outs, attrs)
    if c is None:
        if len(_calls) >= CALLS_MAX:
            _calls.clear()
        c = _calls[key] = _core.Call(op, ins, outs, attrs)
    return c


# The host arena (the module's docstring): [ARENA_BASE, ARENA_END), the
# user half of a 48-bit address space above its first 64 KiB (never
# mapped: Linux's mmap_min_addr). A tensor outside it (5-level paging can
# place memory higher) goes through DLPack.
HOST_ARENA = os.environ.get("GPA_TORCH_HOST_ARENA", "1") != "0"
ARENA_BASE, ARENA_END = 1 << 16, 1 << 47
_NO_ARENA = object()  # an actor whose backend refused the arena (not cpu)


def _arena(actor):
    """The actor's host arena Buffer, made at its first call; None off the
    cpu backend (CPU tensors there go through DLPack, which refuses them
    with its message)."""
    b = actor.__dict__.get("_torch_arena")
    if b is None:
        b = _NO_ARENA
        if actor.backend == "cpu":
            desc = _core.L.ExternalDesc(size_of=ctypes.sizeof(_core.L.ExternalDesc), kind=1,  # GPA_MEM_HOST
                                        ptr=ARENA_BASE, bytes=ARENA_END - ARENA_BASE)
            out = ctypes.c_uint64()
            if _core.L.buffer_wrap(actor._p(), ctypes.byref(desc), ctypes.byref(out)) == 0:
                b = _core.Buffer._adopt(actor, out.value, desc.bytes)
                b.external = True
        actor._torch_arena = b
    return None if b is _NO_ARENA else b


def _host_view(arena, t):
    """t (contiguous) as a view of the arena, or None where it must go
    through DLPack (a dtype it maps or refuses, zero bytes, past the arena)."""
    dtype = _GPA_OF.get(t.dtype)
    n = t.numel() * t.element_size()
    p = t.data_ptr()
    if dtype is None or n == 0 or p < ARENA_BASE or p + n > ARENA_END:
        return None
    return _core.Tensor(arena, tuple(t.shape), dtype, p - ARENA_BASE)


# Calls on the host arena: (the arena's id, op, each tensor's data pointer,
# shape and dtype, the attributes) -> Call. Pointer arithmetic on the
# arena, so an entry stays right whichever tensor is at those addresses
# later (a new output where the last one was freed hits it); it keeps the
# arena, so no other object takes the arena's id while it is here.
# Cleared when full.
_host_calls = {}


def _host_call(arena, op, inputs, outputs, attrs):
    """The Call of op on CPU tensors through the arena, or None where one of
    them must go through DLPack."""
    try:
        key = (id(arena), op, tuple((t.data_ptr(), t.shape, t.dtype) for t in inputs),
               tuple((t.data_ptr(), t.shape, t.dtype) for t in outputs),
               (tuple(attrs.items()), tuple(map(type, attrs.values()))) if attrs else ())
        c = _host_calls.get(key)
    except TypeError:  # an attribute value that cannot be a key
        key, c = None, None
    if c is not None:
        return c
    ins = [_host_view(arena, t) for t in inputs]
    outs = [_host_view(arena, t) for t in outputs]
    if any(v is None for v in ins) or any(v is None for v in outs):
        return None
    c = _core.Call(op, ins, outs, attrs)
    if key is not None:
        if len(_host_calls) >= CALLS_MAX:
            _host_calls.clear()
        _host_calls[key] = c
    return c


@atexit.register
def _release_wraps():
    """Hands every cached wrap back at exit, while Python still runs: a
    wrap's release calls torch's deleter from the actor's thread, which
    cannot enter Python once the interpreter is finalizing (the thread is
    stopped there and the release never answers: a process that left an
    actor open with wraps cached hung at exit)."""
    for key in list(_wraps):
        _drop(key)


__all__ = ["run", "attention", "Attention"]


def _cuda_event_handle(ev):
    handle = getattr(ev, "cuda_event", None)
    if not handle:
        raise RuntimeError("gpuactor.torch: this PyTorch does not expose CUDA event handles (Event.cuda_event)")
    return handle


class _Driver:
    """The two driver calls of torch's side of a call, on raw handles.
    CDLL: the GIL is released around each (a record can block while the
    device's launch queue is full)."""
    __slots__ = ("record", "wait")

    def __init__(self, lib):
        self.record = lib.cuEventRecord  # (CUevent, CUstream)
        self.record.argtypes, self.record.restype = [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int
        self.wait = lib.cuStreamWaitEvent  # (CUstream, CUevent, flags)
        self.wait.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
        self.wait.restype = ctypes.c_int


def _load_driver():
    if not getattr(_torch.version, "cuda", None):
        return None  # a CPU build of torch: no CUDA tensors to order
    try:
        return _Driver(ctypes.CDLL("libcuda.so.1"))  # torch's CUDA has it loaded already
    except (OSError, AttributeError):
        return None


_cu = _load_driver()  # None: torch's own Event / Stream methods every call
_raw_stream = getattr(_torch._C, "_cuda_getCurrentRawStream", None)
_current_device = getattr(_torch._C, "_cuda_getDevice", None)
if _raw_stream is None or _current_device is None:
    _cu = None


def _stream(index):
    """torch's current stream of device `index` as a raw CUstream for the
    driver's calls, or None where they might not reach it: the default
    stream's handle (0) names the current device's."""
    if _cu is None or _current_device() != index:
        return None
    return _raw_stream(index)


class _Events:
    """One call's pair of torch CUDA events: `ready`, recorded on torch's
    stream, which the actor's queue waits for; `done`, recorded by the actor
    after the op, which torch's stream waits for. Their CUevent handles
    are read once."""
    __slots__ = ("ready", "done", "ready_h", "done_h")

    def __init__(self, stream):
        self.ready, self.done = _torch.cuda.Event(), _torch.cuda.Event()
        for ev in (self.ready, self.done):
            ev.record(stream)  # torch makes the event at its first record, on the stream's device
        self.ready_h, self.done_h = _cuda_event_handle(self.ready), _cuda_event_handle(self.done)


POOL_MAX = 8  # free pairs kept per device: as many calls as may run at once from different threads
_free = {}  # device index -> [_Events]
_retired = []  # pairs a posted wait may still name (a round trip failed): never reused nor destroyed
# event_pairs: pairs made (a steady loop makes one per device, and thread at once);
# torch_stream_calls: calls ordered through torch's Stream and Event objects, not the driver
stats = {"event_pairs": 0, "torch_stream_calls": 0}


def _take(index):
    try:
        return _free[index].pop()
    except (KeyError, IndexError):
        stats["event_pairs"] += 1
        return _Events(_torch.cuda.current_stream(index))


def _give(index, ev):
    free = _free.setdefault(index, [])
    if len(free) < POOL_MAX:
        free.append(ev)


def _settle(q, index, stream, ev):
    """The call's round trip, then torch's wait; the pair goes back to the pool."""
    try:
        q.record_event(ev.done_h)
    except BaseException:
        _retired.append(ev)
        raise
    # the driver refusing a wait on the stream it has just recorded on is an
    # error torch's own wait reports in torch's words
    if stream is None or _cu.wait(stream, ev.done_h, 0):
        _torch.cuda.current_stream(index).wait_event(ev.done)
    _give(index, ev)


def _ordered(q, index, call):
    """`call` posted on q between torch's current stream of device `index`
    and the events, as the module's docstring says."""
    ev = _take(index)
    stream = _stream(index)
    if stream is None or _cu.record(ev.ready_h, stream):  # nonzero: refused, nothing recorded
        stream = None
        stats["torch_stream_calls"] += 1
        ev.ready.record(_torch.cuda.current_stream(index))
    try:
        q.wait_event(ev.ready_h, block=False)  # ordered before the op; the record below is the round trip
    except BaseException:
        _give(index, ev)  # nothing posted: nothing names the pair
        raise
    try:
        q.post(call)  # errors come back at the queue's next sync
    finally:
        _settle(q, index, stream, ev)  # also after a refused post: the posted wait is done before reuse


def run(actor, op, inputs=(), outputs=(), attrs=None, queue=None):
    """Runs gpuactor op `op` on torch tensors; returns `outputs`."""
    q = queue or actor.queue
    if HOST_ARENA:
        ts = [*inputs, *outputs]
        if all(t.get_device() < 0 for t in ts):
            for t in ts:  # before any cache: a restrided tensor keeps its address and shape
                if not t.is_contiguous():
                    raise _core.GpaError(-1, "gpuactor.torch: a tensor of shape %s and strides %s is not "
                                         "contiguous: make it contiguous first (.contiguous())"
                                         % (tuple(t.shape), t.stride()))
            arena = _arena(actor)
            call = _host_call(arena, op, list(inputs), list(outputs), attrs) if arena is not None else None
            if call is not None:
                q.submit(call).result()  # done before the tensors can go: the actor keeps nothing of them
                return outputs
    ins = [_wrap(actor, t, q) for t in inputs]
    outs = [_wrap(actor, t, q) for t in outputs]
    call = _call(op, ins, outs, attrs)
    # One tensor tells the device: a backend wraps only its own kind of
    # memory (a CPU tensor on cuda, a CUDA one on cpu, was refused above).
    index = inputs[0].get_device() if inputs else outputs[0].get_device() if outputs else -1
    if index < 0:
        q.submit(call).result()
    else:
        _ordered(q, index, call)
    return outputs


def _attention_fwd(actor, q, k, v, scale, causal, queue):
    B, S, H, D = q.shape
    o = _torch.empty_like(q)
    lse = _torch.empty((B, H, S), dtype=_torch.float32, device=q.device)
    run(actor, "attention_fwd", [q, k, v], [o, lse], {"scale": float(scale), "causal": int(causal)}, queue)
    return o, lse


class Attention(_torch.autograd.Function):
    """Attention (q [B,S,H,D], k/v [B,Sk,Hkv,D]) whose forward and backward
    are gpuactor's attention_fwd / attention_bwd."""

    @staticmethod
    def forward(ctx, q, k, v, actor, scale, causal, queue):
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        o, lse = _attention_fwd(actor, q, k, v, scale, causal, queue)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.actor, ctx.scale, ctx.causal, ctx.queue = actor, scale, causal, queue
        return o

    @staticmethod
    def backward(ctx, dout):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = _torch.empty_like(q), _torch.empty_like(k), _torch.empty_like(v)
        run(ctx.actor, "attention_bwd", [dout.contiguous(), q, k, v, o, lse], [dq, dk, dv],
            {"scale": float(ctx.scale), "causal": int(ctx.causal)}, ctx.queue)
        return dq, dk, dv, None, None, None, None


def attention(actor, q, k, v, scale=None, causal=False, queue=None):
    """softmax(q k^T * scale [+ causal mask]) v, differentiable. scale
    defaults to 1/sqrt(D)."""
    if scale is None:
        scale = q.shape[-1] ** -0.5
    return Attention.apply(q, k, v, actor, scale, causal, queue)
