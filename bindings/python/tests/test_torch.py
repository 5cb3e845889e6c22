"""gpuactor.torch on the CPU: ops on torch tensors in place, and the
attention autograd Function against PyTorch's own attention (forward and
gradients). Skipped without torch (Debian's python3-torch)."""
import gc

import pytest

torch = pytest.importorskip("torch")
import gpuactor.torch as gt  # noqa: E402
from gpuactor import dlpack  # noqa: E402


@pytest.fixture
def cpu_actor(actor):
    if actor.backend != "cpu":
        pytest.skip("CPU tensors: the cpu backend (the CUDA path needs a GPU build of torch)")
    return actor


def test_run_in_place(cpu_actor):
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
