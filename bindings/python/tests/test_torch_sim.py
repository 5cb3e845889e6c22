"""gpuactor.torch's CUDA ordering against the simulated driver: run()'s own
steps (gt._ordered, the driver's calls through gt._Driver's ctypes
declarations, the event pool) with a real actor on sim, and streams and
events the simulated driver makes standing for torch's (torch here is a CPU
build). Delays the simulator puts on a stream make a missing event read
stale data. Skipped unless the actor runs on sim (GPA_DEVICE=sim)."""
import ctypes
import os
import struct
import threading

import numpy as np
import pytest

pytest.importorskip("torch")
import gpuactor.torch as gt  # noqa: E402
from gpuactor import _lib as L  # noqa: E402
from gpuactor.core import Call  # noqa: E402

P = ctypes.c_void_p
NOT_READY = 600  # CUDA_ERROR_NOT_READY
N = 4096


class _Sim:
    """The simulated driver the actor loaded, as a CUDA program (torch) calls it."""

    def __init__(self):
        lib = ctypes.CDLL("libgpa_sim_cuda.so", mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        u, i, sz, u64 = ctypes.c_uint, ctypes.c_int, ctypes.c_size_t, ctypes.c_uint64
        for name, args in {"cuInit": [u], "cuDeviceGet": [ctypes.POINTER(i), i],
                           "cuDevicePrimaryCtxRetain": [ctypes.POINTER(P), i], "cuDevicePrimaryCtxRelease_v2": [i],
                           "cuCtxSetCurrent": [P], "cuStreamCreate": [ctypes.POINTER(P), u],
                           "cuStreamDestroy_v2": [P], "cuStreamSynchronize": [P],
                           "cuEventCreate": [ctypes.POINTER(P), u], "cuEventDestroy_v2": [P], "cuEventQuery": [P],
                           "cuEventRecord": [P, P], "cuStreamWaitEvent": [P, P, u],
                           "cuMemsetD32Async": [u64, u, sz, P], "cuMemcpyDtoHAsync_v2": [P, u64, sz, P],
                           "cuMemAllocHost_v2": [ctypes.POINTER(P), sz], "cuMemFreeHost": [P]}.items():
            f = getattr(lib, name)
            f.argtypes, f.restype = args, ctypes.c_int
            setattr(self, name, f)
        self.delay = lib.gpa_sim_fault_stream_delay
        self.delay.argtypes, self.delay.restype = [P, u], None
        self.lib = lib
        dev, ctx = ctypes.c_int(), P()
        assert self.cuInit(0) == 0 and self.cuDeviceGet(ctypes.byref(dev), 0) == 0
        assert self.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
        assert self.cuCtxSetCurrent(ctx) == 0  # this thread's, as torch's runtime makes it
        self.dev, self.ctx = dev, ctx
        self.made = []  # (destroy, handle)

    def stream(self, flags=1):  # CU_STREAM_NON_BLOCKING: no implicit order with the legacy stream
        s = P()
        assert self.cuStreamCreate(ctypes.byref(s), flags) == 0
        self.made.append((self.cuStreamDestroy_v2, s.value))
        return s.value

    def event(self):
        e = P()
        assert self.cuEventCreate(ctypes.byref(e), 2) == 0  # CU_EVENT_DISABLE_TIMING
        self.made.append((self.cuEventDestroy_v2, e.value))
        return e.value

    def pinned(self, n):
        """n float32 of page-locked host memory (what an async copy needs), as numpy."""
        p = P()
        assert self.cuMemAllocHost_v2(ctypes.byref(p), n * 4) == 0
        self.made.append((self.cuMemFreeHost, p.value))
        return np.frombuffer((ctypes.c_float * n).from_address(p.value), np.float32)

    def close(self):
        for destroy, h in reversed(self.made):
            destroy(h)
        self.cuDevicePrimaryCtxRelease_v2(self.dev)


class _TorchEvent:
    """torch.cuda.Event over the simulated driver: made lazily, recorded
    with this thread's context made current first (torch's device guard)."""

    def __init__(self, sim):
        self.sim, self.cuda_event = sim, 0

    def record(self, stream):
        assert self.sim.cuCtxSetCurrent(self.sim.ctx) == 0
        if not self.cuda_event:
            self.cuda_event = self.sim.event()
        assert self.sim.cuEventRecord(self.cuda_event, stream.raw) == 0


class _TorchStream:
    def __init__(self, sim, raw):
        self.sim, self.raw = sim, raw

    def wait_event(self, ev):
        assert self.sim.cuStreamWaitEvent(self.raw, ev.cuda_event, 0) == 0


@pytest.fixture
def sim(actor, monkeypatch):
    if actor.backend != "sim":
        pytest.skip("the simulated driver: GPA_DEVICE=sim (backend is %r)" % actor.backend)
    s = _Sim()
    cur = {"stream": s.stream()}  # torch's current stream of device 0, raw
    monkeypatch.setattr(gt._torch.cuda, "Event", lambda: _TorchEvent(s))
    monkeypatch.setattr(gt._torch.cuda, "current_stream", lambda i: _TorchStream(s, cur["stream"]))
    monkeypatch.setattr(gt, "_cu", gt._Driver(s.lib))
    monkeypatch.setattr(gt, "_raw_stream", lambda i: cur["stream"])
    monkeypatch.setattr(gt, "_current_device", lambda: 0)
    monkeypatch.setattr(gt, "_free", {})
    monkeypatch.setattr(gt, "_retired", [])
    monkeypatch.setattr(gt, "stats", {"event_pairs": 0, "torch_stream_calls": 0})
    s.cur = cur
    try:
        yield s
    finally:
        s.delay(None, 0)
        actor.queue.submit("noop").result()
        s.cuStreamSynchronize(cur["stream"])
        s.close()


def _device_ptr(actor, t):
    """Where the actor keeps t (a loan, given back at once: the tensor keeps the buffer)."""
    loan = L.BufferLoan(size_of=ctypes.sizeof(L.BufferLoan))
    assert L.buffer_lend(actor._p(), t.buffer.id, ctypes.byref(loan)) == 0
    assert L.buffer_release(actor._p(), t.buffer.id) == 0
    return loan.ptr + t.offset


def _bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


def test_sim_run_orders_both_ways(actor, sim):
    a, q = actor, actor.queue
    torch_stream = sim.cur["stream"]
    x, y = a.from_numpy(np.zeros(N, np.float32)), a.from_numpy(np.full(N, -1.0, np.float32))
    xp, yp = _device_ptr(a, x), _device_ptr(a, y)
    half, double = Call("scale", [x], [y], {"alpha": 0.5}), Call("scale", [x], [y], {"alpha": 2.0})
    gt._ordered(q, 0, half)  # the pair made (its first records) before the write below
    assert np.all(y.numpy() == 0.0)
    # the actor waits for torch's late write of x (the event recorded on its stream)
    sim.delay(torch_stream, 20000)
    assert sim.cuMemsetD32Async(xp, _bits(3.0), N, torch_stream) == 0
    gt._ordered(q, 0, half)
    sim.delay(torch_stream, 0)
    assert np.all(y.numpy() == 1.5)
    # torch's stream waits for the actor's op, held ~300 ms behind another stream
    side = sim.stream()
    hold = sim.event()
    sim.delay(side, 300000)
    assert sim.cuEventRecord(hold, side) == 0
    q.wait_event(hold)
    gt._ordered(q, 0, double)
    assert sim.cuEventQuery(hold) == NOT_READY, "run waited on the host for the actor's op"
    out = sim.pinned(N)
    out[:] = 0
    assert sim.cuMemcpyDtoHAsync_v2(out.ctypes.data, yp, out.nbytes, torch_stream) == 0
    assert sim.cuStreamSynchronize(torch_stream) == 0
    assert np.all(out == 6.0)
    # both calls through the driver, on one pair, back in the pool
    assert gt.stats == {"event_pairs": 1, "torch_stream_calls": 0} and len(gt._free[0]) == 1
    q.sync()  # the posted wait and ops reported nothing


def test_sim_new_thread_default_stream(actor, sim):
    """torch's default stream (raw 0, the legacy stream of the current
    context) from a thread with no current context: the driver refuses the
    first record, torch's Event records it (making the context current),
    and the thread's later calls go through the driver."""
    a, q = actor, actor.queue
    sim.cur["stream"] = 0
    x, y = a.from_numpy(np.full(N, 4.0, np.float32)), a.from_numpy(np.zeros(N, np.float32))
    gt._ordered(q, 0, Call("scale", [x], [y], {"alpha": 1.0}))  # the pair made here, pooled
    assert gt.stats == {"event_pairs": 1, "torch_stream_calls": 0} and float(y.numpy()[0]) == 4.0
    seen = []

    def work():
        try:
            for alpha in (0.5, 0.25):
                gt._ordered(q, 0, Call("scale", [x], [y], {"alpha": alpha}))
                seen.append((gt.stats["torch_stream_calls"], float(y.numpy()[N - 1])))
        except BaseException as e:  # reported on the test's thread
            seen.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join(60)
    assert not t.is_alive() and seen == [(1, 2.0), (1, 1.0)], seen
    assert gt.stats["event_pairs"] == 1
    q.sync()
