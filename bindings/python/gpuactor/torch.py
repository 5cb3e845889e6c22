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
current stream (posted: no round trip), and torch's current stream waits for
an event recorded after the op (the call's one round trip: the record must
be on the actor's stream before torch's wait is): no wait for the device
and no device-wide sync. (The CUDA path needs a
GPU with a CUDA build of PyTorch; this repository's CI has neither, so only
the CPU path is tested there.)
"""
import weakref

import torch as _torch

from . import core as _core

_GPA_OF = {_torch.float32: _core.F32, _torch.float16: _core.F16, _torch.bfloat16: _core.BF16,
           _torch.int32: _core.I32, _torch.uint8: _core.U8, _torch.int64: _core.I64}
# (actor id, device, data pointer, bytes) -> (gpuactor Tensor over the wrap, weak reference to the torch tensor)
_wraps = {}


def _drop(key):
    hit = _wraps.pop(key, None)
    if hit is not None:
        hit[0].buffer.release()


def _wrap(actor, t, q):
    key = (id(actor), str(t.device), t.data_ptr(), t.numel() * t.element_size())
    hit = _wraps.get(key)
    if (hit is not None and hit[0].buffer.actor is actor and actor._ptr and hit[1]() is not None
            and t.dtype in _GPA_OF and t.is_contiguous()):
        g = hit[0]  # the same bytes: another view of them takes its own shape and dtype
        if g.shape == tuple(t.shape) and g.dtype == _GPA_OF[t.dtype]:
            return g
        return _core.Tensor(g.buffer, tuple(t.shape), _GPA_OF[t.dtype], g.offset)
    g = actor.from_dlpack(t.detach(), queue=q)
    if hit is not None:
        _drop(key)
    _wraps[key] = (g, weakref.ref(t, lambda _r, key=key: _drop(key)))
    return g

__all__ = ["run", "attention", "Attention"]


def _cuda_event_handle(ev):
    handle = getattr(ev, "cuda_event", None)
    if not handle:
        raise RuntimeError("gpuactor.torch: this PyTorch does not expose CUDA event handles (Event.cuda_event)")
    return handle


def run(actor, op, inputs=(), outputs=(), attrs=None, queue=None):
    """Runs gpuactor op `op` on torch tensors; returns `outputs`."""
    q = queue or actor.queue
    ts = list(inputs) + list(outputs)
    on_cuda = any(t.is_cuda for t in ts)
    wrapped = [_wrap(actor, t, q) for t in ts]
    if on_cuda:
        ready = _torch.cuda.Event()
        ready.record(_torch.cuda.current_stream())
        q.wait_event(_cuda_event_handle(ready), block=False)  # ordered before the op; the record below is the round trip
    h = q.submit(op, wrapped[:len(inputs)], wrapped[len(inputs):], attrs)
    if on_cuda:
        done = _torch.cuda.Event()
        done.record(_torch.cuda.current_stream())  # makes the event; re-recorded on the actor's stream
        q.record_event(_cuda_event_handle(done))
        _torch.cuda.current_stream().wait_event(done)
        h.release()  # errors come back at the queue's next sync
    else:
        h.result()
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
