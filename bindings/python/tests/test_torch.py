"""gpuactor.torch on the CPU: ops on torch tensors in place (through the
host arena, and through DLPack wraps with the arena off), and the
attention autograd Function against PyTorch's own attention (forward and
gradients). Skipped without torch (Debian's python3-torch)."""
import gc
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import gpuactor.torch as gt  # noqa: E402
from gpuactor import dlpack  # noqa: E402


@pytest.fixture
def cpu_actor(actor):
    if actor.backend != "cpu":
        pytest.skip("CPU tensors: the cpu backend (the CUDA path needs a GPU build of torch)")
    return actor


@pytest.fixture
def dlpack_path(cpu_actor, monkeypatch):
    """A cpu actor with the host arena off: CPU tensors through DLPack wraps,
    the path every CUDA tensor takes."""
    monkeypatch.setattr(gt, "HOST_ARENA", False)
    return cpu_actor


def test_host_arena_in_place(cpu_actor):
    """CPU tensors are views of the actor's one host arena at their data
    pointers: ops read and write torch's memory in place, views and other
    dtypes included, with no DLPack import and no wrap per tensor."""
    x = torch.arange(4096, dtype=torch.float32).reshape(64, 64)
    y = torch.zeros_like(x)
    ptr = y.data_ptr()
    gt.run(cpu_actor, "scale", [x], [y], {"alpha": 0.5})
    assert y.data_ptr() == ptr and torch.equal(y, x * 0.5)
    arena = cpu_actor._torch_arena
    assert not dlpack._imports and arena.external
    assert arena.info()["size"] == gt.ARENA_END - gt.ARENA_BASE
    gt.run(cpu_actor, "scale", [y], [x], {"alpha": 4.0})
    assert torch.equal(x, torch.arange(4096, dtype=torch.float32).reshape(64, 64) * 2)
    # a view at an offset (not 16-byte aligned), and the same bytes as int32
    y.zero_()
    gt.run(cpu_actor, "scale", [x.view(-1)[5:21]], [y.view(-1)[7:23]], {"alpha": 0.25})
    flat = y.view(-1)
    assert torch.equal(flat[7:23], x.view(-1)[5:21] * 0.25) and not flat[:7].any() and not flat[23:].any()
    gt.run(cpu_actor, "copy", [x.view(torch.int32)], [y.view(torch.int32)])
    assert torch.equal(y, x)
    assert cpu_actor._torch_arena is arena and not dlpack._imports


def test_host_arena_refusals(cpu_actor):
    """Not contiguous: refused before any cached call is looked up (a
    transposed square matrix has the contiguous one's address and shape).
    A dtype without a gpa dtype goes to DLPack, which says so."""
    x = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    y = torch.zeros(8, 8)
    gt.run(cpu_actor, "scale", [x], [y], {"alpha": 1.0})  # the call for x's address and shape, cached
    with pytest.raises(Exception, match="contiguous"):
        gt.run(cpu_actor, "scale", [x.t()], [y], {"alpha": 1.0})
    with pytest.raises(Exception, match="contiguous"):
        gt.run(cpu_actor, "scale", [x], [y.t()], {"alpha": 1.0})
    assert torch.equal(y, x)  # nothing ran
    with pytest.raises(Exception, match="dtype"):
        gt.run(cpu_actor, "scale", [x.double()], [y.double()], {"alpha": 1.0})


def test_host_arena_fresh_outputs(cpu_actor):
    """A new output tensor per call (as a model makes them) costs the op's
    message alone: no wrap or release round trip, one live buffer (the
    arena) whatever the number of tensors, and the op's C call is built
    again only for addresses, shapes, dtypes or attributes not seen."""
    x = torch.randn(32, 96)
    gt.run(cpu_actor, "gelu_fwd", [x], [torch.empty(32, 96)])  # the arena exists
    s0 = cpu_actor.stats()
    own = cpu_actor.stats()["messages"] - s0["messages"]  # a stats call's own messages
    s0 = cpu_actor.stats()
    outs = []
    for i in range(10):
        y = torch.empty(32, 96)
        gt.run(cpu_actor, "gelu_fwd", [x], [y])
        outs.append(y)
        if i % 2:
            del outs[0]  # freed: its memory may come back at the next empty()
    s1 = cpu_actor.stats()
    # the ops alone (through DLPack: 25, a wrap per output and a release per one freed)
    assert s1["messages"] - s0["messages"] - own == 10
    assert s1["live_buffers"] == s0["live_buffers"]
    ref = torch.nn.functional.gelu(x)
    assert all(torch.allclose(y, ref, atol=1e-5) for y in outs)
    assert not dlpack._imports
    gt._host_calls.clear()
    y = torch.empty(32, 96)
    for _ in range(3):
        gt.run(cpu_actor, "scale", [x], [y], {"alpha": 0.5})
    assert len(gt._host_calls) == 1 and torch.equal(y, x * 0.5)
    gt.run(cpu_actor, "scale", [x], [y], {"alpha": 2.0})  # other attributes: another call
    gt.run(cpu_actor, "scale", [x.view(96, 32)], [y.view(96, 32)], {"alpha": 3.0})  # another shape
    assert len(gt._host_calls) == 3 and torch.equal(y, x * 3)


def test_run_in_place(dlpack_path):
    cpu_actor = dlpack_path
    x = torch.arange(4096, dtype=torch.float32).reshape(64, 64)
    y = torch.zeros_like(x)
    ptr = y.data_ptr()
    gt.run(cpu_actor, "scale", [x], [y], {"alpha": 0.5})
    assert y.data_ptr() == ptr and torch.equal(y, x * 0.5)
    assert len(dlpack._imports) == 2  # wrapped once while the tensors live
    gt.run(cpu_actor, "scale", [y], [x], {"alpha": 4.0})
    assert torch.equal(x, torch.arange(4096, dtype=torch.float32).reshape(64, 64) * 2)
    assert len(dlpack._imports) == 2
    with pytest.raises(Exception) as e:
        gt.run(cpu_actor, "scale", [x.t()], [y], {"alpha": 1.0})  # a transposed view: not contiguous
    assert "contiguous" in str(e.value)
    # torch's memory is handed back once its tensors are gone and the actor is done with it
    del x, y, e
    gc.collect()
    cpu_actor.queue.submit("noop").result()
    assert not dlpack._imports


def test_calls_built_once(dlpack_path):
    """A call on the same cached wraps and attributes is built once (core.Call)
    and submitted again; other attributes, views and new wraps are other calls."""
    cpu_actor = dlpack_path
    gt._calls.clear()
    x, y = torch.arange(64, dtype=torch.float32), torch.zeros(64)
    for _ in range(3):
        gt.run(cpu_actor, "scale", [x], [y], {"alpha": 0.5})
    assert len(gt._calls) == 1 and torch.equal(y, x * 0.5)
    gt.run(cpu_actor, "scale", [x], [y], {"alpha": 2.0})
    assert len(gt._calls) == 2 and torch.equal(y, x * 2)
    gt.run(cpu_actor, "scale", [x], [y], {"alpha": 0.5})
    assert len(gt._calls) == 2 and torch.equal(y, x * 0.5)
    gt.run(cpu_actor, "scale", [x.view(8, 8)], [y.view(8, 8)], {"alpha": 3.0})  # views: built for the call
    assert len(gt._calls) == 2 and torch.equal(y, x * 3)
    del x
    gc.collect()
    x2 = torch.full((64,), 4.0)  # wrapped anew (its memory maybe x's): its own call
    gt.run(cpu_actor, "scale", [x2], [y], {"alpha": 0.5})
    assert len(gt._calls) == 3 and torch.equal(y, torch.full((64,), 2.0))
    del x2, y
    gt._calls.clear()
    gc.collect()
    cpu_actor.queue.submit("noop").result()
    assert not dlpack._imports


def test_views_within_a_wrap(dlpack_path):
    """A tensor at a wrap's address is the wrap itself (its shape and dtype),
    a view of it where its bytes fit in the wrap's, or else wrapped anew in
    its place (the smaller one then a view of the new wrap)."""
    cpu_actor = dlpack_path
    big = torch.arange(64, dtype=torch.float32)
    y = torch.zeros(64)
    before = len(dlpack._imports)
    small, y16 = big[:16], y[:16]  # the same addresses, a quarter of the bytes
    gt.run(cpu_actor, "scale", [small], [y16], {"alpha": 2.0})
    assert len(dlpack._imports) == before + 2
    assert torch.equal(y16, torch.arange(16, dtype=torch.float32) * 2) and not y[16:].any()
    gt.run(cpu_actor, "scale", [big], [y], {"alpha": 3.0})  # past the small wraps: big's and y's replace them
    assert len(dlpack._imports) == before + 2 and torch.equal(y, big * 3)
    for _ in range(2):
        gt.run(cpu_actor, "scale", [small], [y16], {"alpha": 4.0})  # within big's and y's wraps: views
        gt.run(cpu_actor, "scale", [big.view(8, 8)], [y.view(8, 8)], {"alpha": 5.0})
        gt.run(cpu_actor, "copy", [big.view(torch.int32)], [y.view(torch.int32)])  # another dtype, the same bytes
    assert len(dlpack._imports) == before + 2 and torch.equal(y, big)
    gt.run(cpu_actor, "scale", [small], [y16], {"alpha": 4.0})
    assert torch.equal(y16, small * 4) and torch.equal(y[16:], big[16:])
    assert len(dlpack._imports) == before + 2
    del big, small, y, y16
    gc.collect()
    cpu_actor.queue.submit("noop").result()
    assert len(dlpack._imports) == before


def _reference(q, k, v, scale, causal):
    # [B,S,H,D] -> [B,H,S,D]
    qh, kh, vh = (t.permute(0, 2, 1, 3) for t in (q, k, v))
    s = qh @ kh.transpose(-1, -2) * scale
    if causal:
        S, Sk = s.shape[-2:]
        mask = torch.ones(S, Sk, dtype=torch.bool).triu(1 + Sk - S)
        s = s.masked_fill(mask, float("-inf"))
    return (s.softmax(-1) @ vh).permute(0, 2, 1, 3)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_function(cpu_actor, causal):
    torch.manual_seed(0)
    B, S, H, D = 2, 24, 2, 32
    q, k, v = (torch.randn(B, S, H, D, requires_grad=True) for _ in range(3))
    o = gt.attention(cpu_actor, q, k, v, causal=causal)
    ref_in = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    ref = _reference(*ref_in, D ** -0.5, causal)
    assert torch.allclose(o, ref, atol=1e-5, rtol=1e-4)
    g = torch.randn_like(o)
    o.backward(g)
    ref.backward(g)
    for ours, theirs in zip((q, k, v), ref_in):
        assert torch.allclose(ours.grad, theirs.grad, atol=1e-4, rtol=1e-3)
    del o, q, k, v, g, ours, theirs, ref, ref_in
    gc.collect()
    cpu_actor.queue.submit("noop").result()
    assert not dlpack._imports


# ---- the CUDA path's steps, with stand-ins for torch's stream, events and the driver ----
# (CI has no GPU: the real thing is test_torch_cuda.py on a GPU machine.)

class _FakeEvent:
    made = 0

    def __init__(self, log):
        self.log, self.cuda_event = log, 0

    def record(self, stream):
        if not self.cuda_event:  # as torch: the event is made at its first record
            _FakeEvent.made += 1
            self.cuda_event = 1000 + _FakeEvent.made
        self.log.append(("record", self.cuda_event, stream.name))


class _FakeStream:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def wait_event(self, ev):
        self.log.append(("stream_wait", ev.cuda_event, self.name))


class _FakeDriver:
    """cuEventRecord / cuStreamWaitEvent on raw handles: 0 or a CUresult."""

    def __init__(self, log):
        self.log, self.refuse = log, 0

    def record(self, event, stream):
        if self.refuse:
            return self.refuse  # nothing recorded
        self.log.append(("cu_record", event, stream))
        return 0

    def wait(self, stream, event, flags):
        self.log.append(("cu_wait", event, stream, flags))
        return 0


class _FakeQueue:
    def __init__(self, log, fail=()):
        self.log, self.fail = log, set(fail)

    def wait_event(self, h, block=True):
        if "wait" in self.fail:
            raise RuntimeError("wait refused")
        self.log.append(("queue_wait", h, block))

    def post(self, call):
        if callable(call):  # a test's hook, run as the op is posted
            call()
        else:
            self.log.append(("post", call))

    def record_event(self, h):
        if "record" in self.fail:
            raise RuntimeError("record refused")
        self.log.append(("queue_record", h))


RAW = 0x5000  # torch's raw current stream of device i is RAW + i in these tests


@pytest.fixture
def fake_cuda(monkeypatch):
    """The log of every step; torch's current device is 0 (log.device[0])."""
    log = []
    streams = {}

    def current_stream(device):
        return streams.setdefault(device, _FakeStream(log, "torch:%s" % device))

    monkeypatch.setattr(gt._torch.cuda, "Event", lambda: _FakeEvent(log))
    monkeypatch.setattr(gt._torch.cuda, "current_stream", current_stream)
    monkeypatch.setattr(gt, "_cu", _FakeDriver(log))
    monkeypatch.setattr(gt, "_raw_stream", lambda i: RAW + i)
    monkeypatch.setattr(gt, "_current_device", lambda: 0)
    monkeypatch.setattr(gt, "_free", {})
    monkeypatch.setattr(gt, "_retired", [])
    monkeypatch.setattr(gt, "stats", {"event_pairs": 0, "torch_stream_calls": 0})
    return log


def _made(log):
    """The pair made at a call's start: both recorded once on torch's stream so that their handles exist."""
    (r, ready, s1), (r2, done, s2) = log[:2]
    assert r == r2 == "record" and s1 == s2
    return ready, done


def test_cuda_order_and_event_reuse(fake_cuda):
    """The driver's path: torch's raw current stream and the pair's handles."""
    log, q = fake_cuda, _FakeQueue(fake_cuda)
    gt._ordered(q, 0, "op")
    assert gt.stats == {"event_pairs": 1, "torch_stream_calls": 0}
    ready, done = _made(log)
    one_call = [("cu_record", ready, RAW),    # torch's work so far ...
                ("queue_wait", ready, False),  # ... before the op (posted: no round trip)
                ("post", "op"),
                ("queue_record", done),        # the one round trip, after the op
                ("cu_wait", done, RAW, 0)]     # torch's later work after it
    assert log[2:] == one_call
    n = len(log)
    gt._ordered(q, 0, "op")
    assert log[n:] == one_call and gt.stats["event_pairs"] == 1  # the same pair again: nothing made


def test_cuda_other_device_through_torch(fake_cuda):
    """Device 1 while torch's current device is 0: the raw default stream
    (0) would name device 0's, so torch's Stream and Event objects order it;
    device 1 has its own pairs."""
    log, q = fake_cuda, _FakeQueue(fake_cuda)
    gt._ordered(q, 1, "op")
    ready, done = _made(log)
    assert log[2:] == [("record", ready, "torch:1"), ("queue_wait", ready, False), ("post", "op"),
                       ("queue_record", done), ("stream_wait", done, "torch:1")]
    assert gt.stats == {"event_pairs": 1, "torch_stream_calls": 1}
    assert list(gt._free) == [1]


def test_cuda_driver_refusal_falls_back_to_torch(fake_cuda, monkeypatch):
    """A record the driver refuses (a thread with no current context yet:
    CUDA_ERROR_INVALID_CONTEXT) is recorded by torch, and torch's stream
    waits through torch too; without libcuda every call goes that way."""
    log, q = fake_cuda, _FakeQueue(fake_cuda)
    gt._cu.refuse = 201
    gt._ordered(q, 0, "op")
    ready, done = _made(log)
    through_torch = [("record", ready, "torch:0"), ("queue_wait", ready, False), ("post", "op"),
                     ("queue_record", done), ("stream_wait", done, "torch:0")]
    assert log[2:] == through_torch and gt.stats["torch_stream_calls"] == 1
    monkeypatch.setattr(gt, "_cu", None)
    n = len(log)
    gt._ordered(q, 0, "op")
    assert log[n:] == through_torch and gt.stats == {"event_pairs": 1, "torch_stream_calls": 2}


def test_cuda_pairs_in_flight_are_distinct(fake_cuda):
    """A call running while another holds its pair (another thread) takes
    its own pair; both go back after their round trips."""
    log, q = fake_cuda, _FakeQueue(fake_cuda)
    gt._ordered(q, 0, lambda: gt._ordered(q, 0, "inner"))
    waits = [e[1] for e in log if e[0] == "queue_wait"]
    records = [e[1] for e in log if e[0] == "queue_record"]
    assert len(set(waits)) == 2 and len(set(records)) == 2 and gt.stats["event_pairs"] == 2
    assert len(gt._free[0]) == 2


def test_cuda_failures_never_reuse_a_named_pair(fake_cuda):
    log, q = fake_cuda, _FakeQueue(fake_cuda)

    def refused():
        raise RuntimeError("submit refused")
    # the op refused after the wait was posted: the round trip still runs
    # (the actor has done the wait before the pair is used again)
    with pytest.raises(RuntimeError, match="submit refused"):
        gt._ordered(q, 0, refused)
    assert [e[0] for e in log[2:]] == ["cu_record", "queue_wait", "queue_record", "cu_wait"]
    assert len(gt._free[0]) == 1
    # the round trip failing: a posted wait may still name the pair, retired for good
    q.fail = {"record"}
    with pytest.raises(RuntimeError, match="record refused"):
        gt._ordered(q, 0, "op")
    assert len(gt._retired) == 1 and not gt._free[0]
    assert log[-1][0] == "post"  # torch's stream never waits on a record that did not happen
    # the wait itself refused: nothing was posted, the pair is free again
    q.fail = {"wait"}
    with pytest.raises(RuntimeError, match="wait refused"):
        gt._ordered(q, 0, "op")
    assert len(gt._free[0]) == 1 and gt.stats["event_pairs"] == 2
    q.fail = set()
    gt._ordered(q, 0, "op")
    assert gt.stats["event_pairs"] == 2  # the free one reused, the retired one not


def test_post_reports_at_the_next_sync(cpu_actor):
    """Queue.post (the CUDA path's submit): no handle; the op runs in the
    queue's order, a call refused on the calling thread raises at once, and
    a failure while running shows at the queue's next sync."""
    a, q = cpu_actor, cpu_actor.queue
    x = a.tensor((4,))
    q.batch_begin("post")
    q.post("fill", [], [x], {"value": 3.0})
    q.sync()
    assert list(x.numpy()) == [3.0] * 4
    with pytest.raises(Exception, match="copy"):
        q.post("copy", [x], [a.tensor((8,))])  # shapes differ: refused before it is queued
    qa = a.from_numpy(np.ones((1, 2, 1, 8), np.float32))
    lengths = a.from_numpy(np.array([100], np.int32))  # past Sk = 2: the op fails as it runs
    q.batch_begin("post fails")
    q.post("attention_fwd", [qa, qa, qa, lengths], [a.tensor((1, 2, 1, 8)), a.tensor((1, 1, 2))],
           {"causal": 0, "scale": 0.0})
    with pytest.raises(Exception, match="lengths"):
        q.sync()


LEFT_OPEN = r"""
import torch, gpuactor as ga, gpuactor.torch as gt
a = ga.Actor(device="cpu", threads=2)  # never closed: Python's exit finds it open
x, y = torch.randn(64), torch.empty(64)
gt.run(a, "gelu_fwd", [x], [y])  # x and y wrapped, the wraps cached
print("ran", flush=True)
"""


@pytest.mark.parametrize("arena", ["0", "1"])
def test_exit_with_an_actor_left_open(arena):
    """A process that leaves an actor open with wraps cached exits: the wraps
    go back before the interpreter finalizes (it hung there, the actor's
    thread stopped inside torch's deleter). With the host arena (no wraps:
    nothing to hand back) too."""
    env = dict(os.environ, GPA_DEVICE="cpu", GPA_TORCH_HOST_ARENA=arena,
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", LEFT_OPEN], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=60)
    assert r.returncode == 0 and "ran" in r.stdout, r.stdout[-2000:]
