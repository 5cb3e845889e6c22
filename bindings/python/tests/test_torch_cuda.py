"""gpuactor.torch on a GPU: torch CUDA tensors handed to an actor on the cuda
backend without copies (DLPack wraps), ordered with torch's current stream by
events only (no torch.cuda.synchronize anywhere: a missing event reads stale
data here, as each test makes the other side busy first), attention in bf16
against PyTorch's SDPA (forward and gradients), DLPack export of actor memory
to torch, and every wrap and loan handed back once the tensors are gone.
The ordering runs through the driver's calls on torch's raw stream (checked
by gt.stats["torch_stream_calls"]), on the default stream, a side stream and
a thread of its own. Skipped unless torch has CUDA and the actor runs on it
(GPA_DEVICE=cuda)."""
import gc
import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import gpuactor.torch as gt  # noqa: E402
from gpuactor import dlpack  # noqa: E402

N = 64 << 20  # 64M floats (256 MiB): an op of this size takes a while on the device


@pytest.fixture
def cuda_actor(actor):
    if not torch.cuda.is_available():
        pytest.skip("torch CUDA tensors: needs a CUDA build of PyTorch and a GPU (torch.cuda.is_available() "
                    "is False; torch %s)" % torch.__version__)
    if actor.backend != "cuda":
        pytest.skip("torch CUDA tensors: needs the actor on the GPU (GPA_DEVICE=cuda; backend is %r)"
                    % actor.backend)
    return actor


def _spin(ms):
    """Keeps torch's current stream busy on the device for about `ms` ms (a spin kernel at ~2 GHz)."""
    torch.cuda._sleep(int(ms * 2_000_000))


def _released(actor, imports=0, timeout=10.0):
    """Every wrap and loan handed back: the tensors are gone and the actor is done with them.
    Releases from threads Python did not start (autograd's) go to a thread of their own: poll."""
    gc.collect()
    actor.queue.submit("noop").result()
    deadline = time.monotonic() + timeout
    while (len(dlpack._imports) > imports or actor._exports) and time.monotonic() < deadline:
        time.sleep(0.01)
        gc.collect()
    assert len(dlpack._imports) == imports and actor._exports == 0


def test_run_waits_for_torch_writes(cuda_actor):
    # torch's stream spins, then writes x: the actor must wait for that write
    # (the event recorded on torch's current stream), and torch's read of y
    # must wait for the actor's op (the event recorded after it).
    before = len(dlpack._imports)
    through_torch = gt.stats["torch_stream_calls"]
    x = torch.zeros(N, device="cuda")
    y = torch.full_like(x, -1.0)
    ptr = y.data_ptr()
    x.normal_()  # warm: every kernel below loaded now (a lazy load after the spin may sync the device)
    gt.run(cuda_actor, "gelu_fwd", [x], [y])
    gt.run(cuda_actor, "scale", [x], [y], {"alpha": 0.5})
    for value in (3.0, 5.0, 7.0):  # x's previous value is what a read without the wait would see
        _spin(25)
        x.fill_(value)
        gt.run(cuda_actor, "scale", [x], [y], {"alpha": 0.5})
        assert y.data_ptr() == ptr  # written in place, in torch's own memory
        assert torch.equal(y, torch.full_like(y, value * 0.5))  # exact: value * 0.5 is a float
    assert len(dlpack._imports) == before + 2  # x and y wrapped once, reused op after op
    assert any(k[2] == ptr and g.buffer.external for k, (g, _) in gt._wraps.items())  # y's own bytes
    _spin(25)
    x.normal_()
    gt.run(cuda_actor, "gelu_fwd", [x], [y])
    ref = torch.nn.functional.gelu(x)
    err = (y - ref).abs().max().item()
    assert torch.allclose(y, ref, rtol=1e-5, atol=1e-6), "gelu_fwd: max abs err %g" % err
    assert y.data_ptr() == ptr and len(dlpack._imports) == before + 2
    # every call above ordered by cuEventRecord / cuStreamWaitEvent on the raw stream
    assert gt._cu is not None, ("gpuactor.torch's driver path is off (libcuda.so.1 not loaded, or no torch._C."
                                "_cuda_getCurrentRawStream / _cuda_getDevice): torch's objects order every call")
    assert gt.stats["torch_stream_calls"] == through_torch
    del x, y, ref
    _released(cuda_actor, before)


def test_run_on_a_side_stream(cuda_actor):
    # torch's current stream a stream of its own (a raw handle other than the
    # default stream's 0): the actor waits for its write of x, and its read of
    # y (z = y * 2) waits for the actor's write.
    before = len(dlpack._imports)
    through_torch = gt.stats["torch_stream_calls"]
    x = torch.zeros(N, device="cuda")
    y, z = torch.zeros_like(x), torch.empty_like(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())  # x, y, z made on the default stream
    with torch.cuda.stream(side):
        gt.run(cuda_actor, "scale", [x], [y], {"alpha": 0.5})  # warm: kernels loaded, x and y wrapped
        torch.mul(y, 2, out=z)
        for value in (3.0, 5.0):
            _spin(25)
            x.fill_(value)
            gt.run(cuda_actor, "scale", [x], [y], {"alpha": 0.5})
            torch.mul(y, 2, out=z)
            assert torch.equal(z, torch.full_like(z, value))
        assert torch.cuda.current_stream() == side
    assert gt.stats["torch_stream_calls"] == through_torch
    torch.cuda.current_stream().wait_stream(side)
    del x, y, z
    _released(cuda_actor, before)


def test_run_from_a_new_thread(cuda_actor):
    # gt.run as a thread's first CUDA call: the driver has no current context
    # there yet, so at most that first record goes through torch's Event, and
    # the ordering holds both ways on the default stream, which the thread shares.
    before = len(dlpack._imports)
    x = torch.zeros(N, device="cuda")
    y = torch.full_like(x, -1.0)
    gt.run(cuda_actor, "scale", [x], [y], {"alpha": 0.5})  # warm: kernels loaded, x and y wrapped
    through_torch = gt.stats["torch_stream_calls"]
    seen = {}

    def work(x, y):
        try:
            gt.run(cuda_actor, "scale", [x], [y], {"alpha": 0.5})
            seen["first"] = torch.equal(y, torch.full_like(y, 1.5))
            _spin(25)
            x.fill_(7.0)
            gt.run(cuda_actor, "scale", [x], [y], {"alpha": 0.5})
            seen["second"] = torch.equal(y, torch.full_like(y, 3.5))
        except BaseException as e:  # noqa: B902 - reported on the test's thread
            seen["error"] = e

    _spin(25)
    x.fill_(3.0)  # the thread's first run must wait for it
    t = threading.Thread(target=work, args=(x, y))
    t.start()
    t.join(60)
    assert not t.is_alive() and "error" not in seen, seen.get("error")
    assert seen == {"first": True, "second": True}
    assert gt.stats["torch_stream_calls"] - through_torch <= 1
    del x, y
    _released(cuda_actor, before)


def test_torch_waits_for_the_actor(cuda_actor):
    # The actor's queue is held ~300 ms behind a spin on a side stream; torch's
    # current stream is idle. z = y * 2 on torch right after run must wait for
    # the actor's write of y (without the event it reads y's zeros at once).
    before = len(dlpack._imports)
    x = torch.full((N,), 2.0, device="cuda")
    y, z = torch.zeros_like(x), torch.empty_like(x)  # allocated before the spin: no cudaMalloc after it
    gt.run(cuda_actor, "scale", [x], [z], {"alpha": 1.0})  # warm: the kernels loaded, x wrapped
    torch.mul(z, 2, out=z)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        _spin(300)
    hold = torch.cuda.Event()
    hold.record(side)
    cuda_actor.queue.wait_event(hold.cuda_event)
    gt.run(cuda_actor, "scale", [x], [y], {"alpha": 3.0})
    torch.mul(y, 2, out=z)
    # run ordered on the device only: the actor's op, behind the spin, is not done yet
    assert not hold.query(), "gt.run (or y * 2) waited on the host for the actor's op"
    assert torch.equal(z, torch.full_like(z, 12.0))
    assert torch.equal(y, torch.full_like(y, 6.0))
    del x, y, z
    _released(cuda_actor, before)


def _close(ours, ref, what, rel_tol):
    ours, ref = ours.float(), ref.float()
    err = (ours - ref).abs().max().item()
    scale = max(1.0, ref.abs().max().item())
    rel = ((ours - ref).norm() / ref.norm()).item()
    assert err <= 2e-2 * scale and rel <= rel_tol, "%s: max abs err %g (|ref| max %g), relative norm err %g" % (
        what, err, scale, rel)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_bf16_against_sdpa(cuda_actor, causal):
    torch.manual_seed(0)
    before = len(dlpack._imports)
    B, S, H, D = 2, 256, 4, 64
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    o = gt.attention(cuda_actor, q, k, v, causal=causal)
    assert o.dtype == torch.bfloat16 and o.shape == q.shape and o.is_cuda
    # PyTorch's attention in fp32 on the same (bf16) values, [B,S,H,D] -> [B,H,S,D] and back
    ref_in = [t.detach().float().requires_grad_(True) for t in (q, k, v)]
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(t.transpose(1, 2) for t in ref_in), is_causal=causal).transpose(1, 2)
    _close(o, ref, "o", 1e-2)
    g = torch.randn_like(o)
    o.backward(g)  # our attention_bwd, run by autograd's device thread on the forward's stream
    ref.backward(g.float())
    for name, ours, theirs in zip("qkv", (q, k, v), ref_in):
        assert ours.grad is not None and ours.grad.dtype == torch.bfloat16
        _close(ours.grad, theirs.grad, "d" + name, 2e-2)
    del o, q, k, v, g, ours, theirs, ref, ref_in
    _released(cuda_actor, before)


def test_export_to_torch(cuda_actor):
    a = cuda_actor
    before = len(dlpack._imports)
    # an actor-owned device buffer: torch gets a kDLCUDA tensor over the same memory
    t = a.from_numpy(np.arange(4096, dtype=np.float32).reshape(64, 64))
    assert t.__dlpack_device__() == (2, 0)
    tt = torch.from_dlpack(t)
    assert tt.is_cuda and tt.device.index == 0 and tt.dtype == torch.float32 and tuple(tt.shape) == (64, 64)
    assert a._exports == 1
    assert torch.equal(tt.cpu(), torch.arange(4096, dtype=torch.float32).reshape(64, 64))
    a.queue.submit("fill", [], [t], {"value": 8.0}).result()  # done on the device when it completes
    assert torch.equal(tt, torch.full_like(tt, 8.0))  # the actor's write shows: no copy
    # a readback is host memory: a CPU tensor
    rb = a.queue.readback(t)
    host = torch.from_dlpack(rb)
    assert host.device.type == "cpu" and torch.equal(host, torch.full((64, 64), 8.0))
    # torch memory wrapped by the actor and exported back: the very same device pointer
    x = torch.arange(1024, dtype=torch.float32, device="cuda")
    w = a.from_dlpack(x)
    assert w.buffer.external
    back = torch.from_dlpack(w)
    assert back.is_cuda and back.data_ptr() == x.data_ptr() and torch.equal(back, x)
    assert len(dlpack._imports) == before + 1
    del tt, host, rb, back
    gc.collect()
    w.buffer.release()
    t.buffer.release()
    _released(a, before)
    assert torch.equal(x, torch.arange(1024, dtype=torch.float32, device="cuda"))  # still torch's, intact
