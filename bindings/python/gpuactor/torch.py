"""gpuactor ops on torch.Tensors, without copies (optional: needs PyTorch).

    import torch, gpuactor as ga, gpuactor.torch as gt
    a = ga.Actor()
    x = torch.randn(4, 1024); y = torch.empty_like(x)
    gt.run(a, "gelu_fwd", [x], [y])               # y written in place
    o = gt.attention(a, q, k, v, causal=True)     # differentiable: our forward and backward

Every tensor goes through DLPack as an external buffer over torch's own
memory (gpuactor.dlpack): inputs are read and outputs written in place.
Tensors must be contiguous (a refusal says so; call .contiguous()). A wrap
is kept while the torch tensor it was made for lives (a weak reference),
so a tensor used op after op is wrapped once: the wrap and its release are
round trips to the actor that would otherwise cost more than a small op.
When the tensor dies the wrap is released, and torch's deleter runs once the
actor is done with the memory.

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
enqueued, so a later record changes nothing already ordered. (The CUDA path
needs a GPU with a CUDA build of PyTorch; this repository's CI has neither:
there its steps are tested with stand-ins for torch's stream and events,
tests/test_torch.py.)
"""
import atexit
import weakref

import torch as _torch

from . import core as _core

_GPA_OF = {_torch.float32: _core.F32, _torch.float16: _core.F16, _torch.bfloat16: _core.BF16,
           _torch.int32: _core.I32, _torch.uint8: _core.U8, _torch.int64: _core.I64}
# (actor id, torch.device, data pointer, bytes) -> (gpuactor Tensor over the wrap, weak reference to the torch tensor)
_wraps = {}


def _drop(key):
    hit = _wraps.pop(key, None)
    if hit is not None:
        hit[0].buffer.release()


def _wrap(actor, t, q):
    """The gpuactor tensor over t's memory: the cached wrap itself (kept
    while t lives), or a view of it (another shape or dtype), made anew."""
    key = (id(actor), t.device, t.data_ptr(), t.numel() * t.element_size())
    hit = _wraps.get(key)
    if hit is not None and hit[1]() is not None and hit[0].buffer.actor is actor and actor._ptr and t.is_contiguous():
        g, dtype, shape = hit[0], _GPA_OF.get(t.dtype), tuple(t.shape)
        if g.shape == shape and g.dtype == dtype:
            return g
        if dtype is not None:  # the same bytes: another view of them takes its own shape and dtype
            return _core.Tensor(g.buffer, shape, dtype, g.offset)
    g = actor.from_dlpack(t.detach(), queue=q)
    g._cached_wrap = True
    if hit is not None:
        _drop(key)
    _wraps[key] = (g, weakref.ref(t, lambda _r, key=key: _drop(key)))
    return g


# Calls built once (core.Call) for the cached wraps they name: (op, its
# attributes, the wraps' ids) -> Call. A Call keeps its wraps, so no other
# object takes their ids while it is here: a tensor wrapped anew (its torch
# tensor died, its memory reused) is another object and another key, and
# the old entry is never hit again. Cleared when full.
_calls = {}
CALLS_MAX = 256


def _call(op, ins, outs, attrs):
    cached = all(_wraps_hold(g) for g in ins) and all(_wraps_hold(g) for g in outs)
    try:
        # the value's type too: 1 and 1.0 are equal keys but an int and a float attribute
        named = tuple(sorted((k, type(v), v) for k, v in attrs.items())) if attrs else ()
        key = (op, named, tuple(map(id, ins)), tuple(map(id, outs)))
        hash(key)
    except TypeError:  # an attribute value that cannot be a key: Call names what is wrong with it
        cached = False
    if not cached:
        return _core.Call(op, ins, outs, attrs)
    c = _calls.get(key)
    if c is None:
        if len(_calls) >= CALLS_MAX:
            _calls.clear()
        c = _calls[key] = _core.Call(op, ins, outs, attrs)
    return c


def _wraps_hold(g):
    """Whether g is a cached wrap (not a view made for one call)."""
    return getattr(g, "_cached_wrap", False)


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
_free = {}  # torch.device -> [_Events]
_retired = []  # pairs a posted wait may still name (a round trip failed): never reused nor destroyed
stats = {"event_pairs": 0}  # pairs made: a steady loop makes one per device (and thread at once)


def _take(device, stream):
    try:
        return _free[device].pop()
    except (KeyError, IndexError):
        stats["event_pairs"] += 1
        return _Events(stream)


def _settle(q, device, stream, ev):
    """The call's round trip, then torch's wait; the pair goes back to the pool."""
    try:
        q.record_event(ev.done_h)
    except BaseException:
        _retired.append(ev)
        raise
    stream.wait_event(ev.done)
    free = _free.setdefault(device, [])
    if len(free) < POOL_MAX:
        free.append(ev)


def _ordered(q, device, post):
    """post() (which posts the op on q) between torch's current stream of
    `device` and the events, as the module's docstring says."""
    stream = _torch.cuda.current_stream(device)
    ev = _take(device, stream)
    ev.ready.record(stream)
    try:
        q.wait_event(ev.ready_h, block=False)  # ordered before the op; the record below is the round trip
    except BaseException:
        _free.setdefault(device, []).append(ev)  # nothing posted: nothing names the pair
        raise
    try:
        post()
    except BaseException:
        _settle(q, device, stream, ev)  # the posted wait is done before the pair is used again
        raise
    _settle(q, device, stream, ev)


def run(actor, op, inputs=(), outputs=(), attrs=None, queue=None):
    """Runs gpuactor op `op` on torch tensors; returns `outputs`."""
    q = queue or actor.queue
    ins = [_wrap(actor, t, q) for t in inputs]
    outs = [_wrap(actor, t, q) for t in outputs]
    call = _call(op, ins, outs, attrs)
    device = next((t.device for t in (*inputs, *outputs) if t.is_cuda), None)
    if device is None:
        q.submit(call).result()
    else:
        _ordered(q, device, lambda: q.post(call))  # errors come back at the queue's next sync
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
