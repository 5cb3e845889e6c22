"""Actors, tensors, ops, handles as futures, batches, errors."""
import numpy as np
import pytest

import gpuactor as ga


def test_version_and_backend(actor):
    assert ga.version().count(".") == 2
    assert actor.backend in ("cpu", "sim", "cuda")


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint8, np.int64])
def test_numpy_round_trip(actor, dtype):
    src = (np.arange(2 * 3 * 5) % 7).astype(dtype).reshape(2, 3, 5)
    t = actor.from_numpy(src)
    assert t.shape == (2, 3, 5) and t.dtype == ga.dtype_of(dtype)
    out = t.numpy()
    assert out.dtype == src.dtype and np.array_equal(out, src)


def test_op_matches_numpy(actor):
    rng = np.random.default_rng(0)
    x, W, b = (rng.standard_normal(s).astype(np.float32) for s in ((5, 7), (3, 7), (3,)))
    tx, tW, tb = actor.from_numpy(x), actor.from_numpy(W), actor.from_numpy(b)
    y = actor.tensor((5, 3))
    with actor.queue.submit("linear_fwd", [tx, tW, tb], [y]) as h:
        assert h.result(timeout=10) is None
        assert h.done() and h.status == 0
    np.testing.assert_allclose(y.numpy(), x @ W.T + b, rtol=1e-5, atol=1e-6)


def test_batch_deferred_readback(actor):
    q = actor.queue
    x = actor.from_numpy(np.full((4,), 3.0, np.float32))
    y = actor.tensor((4,))
    with q.batch("py") as b:
        q.submit("scale", [x], [y], {"alpha": 0.5}).release()
        rb = q.readback(y)
        with pytest.raises(ga.GpaError) as e:  # not readable before the sync, deterministically
            rb.array()
        assert e.value.name == "GPA_ENOTSYNCED"
    assert b.stats["label"] == "py" and b.stats["ops"] >= 2 and b.stats["errors"] == 0
    assert np.array_equal(rb.array(), np.full((4,), 1.5, np.float32))
    rb.release()
    with pytest.raises(ga.GpaError):
        rb.status


def test_batch_as_cuda_graph(actor):
    """graph=True: recorded, then replayed on a CUDA device (eager on the host); the same results."""
    q = actor.queue
    x = actor.from_numpy(np.arange(8, dtype=np.float32))
    y = actor.tensor((8,))
    graphed = actor.backend in ("sim", "cuda")
    for step in range(3):
        with q.batch("py_graph", graph=True) as b:
            q.submit("scale", [x], [y], {"alpha": 0.5 + step}).release()
            rb = q.readback(y)
        assert b.stats["graph"] == ((1 if step == 0 else 2) if graphed else 0)
        assert np.array_equal(rb.array(), np.arange(8, dtype=np.float32) * np.float32(0.5 + step))
        rb.release()


def test_submit_errors_raise_with_name_and_message(actor):
    x, y = actor.tensor((4,)), actor.tensor((5,))
    with pytest.raises(ga.GpaError) as e:
        actor.queue.submit("add", [x, x], [y])
    assert e.value.name == "GPA_ESHAPE" and e.value.status == -13 and "add" in e.value.message
    with pytest.raises(ga.GpaError) as e:
        actor.queue.submit("no_such_op", [x], [y])
    assert e.value.name == "GPA_ENOTFOUND"
    with pytest.raises(ga.GpaError) as e:
        actor.queue.submit("scale", [x], [x], {"alpha": 1.0, "bogus": 1})
    assert e.value.name == "GPA_EINVAL" and "bogus" in e.value.message
    with pytest.raises(TypeError):
        actor.queue.submit("scale", [x], [x], {"alpha": "one"})


def test_execution_error_on_handle_and_batch(actor):
    q = actor.queue
    table = actor.from_numpy(np.zeros((4, 2), np.float32))
    ids = actor.from_numpy(np.array([[0, 9]], np.int32))  # 9 is out of range: found when the op runs
    y = actor.tensor((1, 2, 2))
    q.batch_begin("bad")
    h = q.submit("embedding_fwd", [ids, table], [y])
    with pytest.raises(ga.GpaError) as e:
        q.sync()
    assert e.value.name == "GPA_ERANGE" and "ids[0,1]" in e.value.message
    exc = h.exception(timeout=5)
    assert isinstance(exc, ga.GpaError) and exc.name == "GPA_ERANGE"
    with pytest.raises(ga.GpaError):
        h.result()
    h.release()


def test_bad_options_and_closed_actor():
    with pytest.raises(ga.GpaError) as e:
        ga.Actor(device="tpu")
    assert e.value.name == "GPA_EINVAL" and "tpu" in e.value.message
    a = ga.Actor(threads=1)
    t = a.tensor((2,))
    a.close()
    with pytest.raises(ga.GpaError) as e:
        a.queue.submit("fill", [], [t], {"value": 1.0})
    assert e.value.name == "GPA_ESHUTDOWN"
    t.buffer.release()  # no use-after-free after close: a no-op
    a.close()  # idempotent


def test_with_statement_closes():
    """Leaving a with-statement closes an actor, a buffer and a feed."""
    with ga.Actor(threads=1) as a:
        with a.buffer(64) as b:
            assert b.id
        assert b.id == 0
        with a.feed() as f:
            f.push(np.array([1], np.float32))
        with pytest.raises(ga.GpaError) as e:
            f.push(np.array([1], np.float32))
        assert "feed closed" in e.value.message
    with pytest.raises(ga.GpaError) as e:
        a.backend
    assert "actor closed" in e.value.message


def test_labeled_buffers_and_queues(actor):
    with actor.buffer(64, label="py.same") as b1:
        b2 = actor.buffer(64, label="py.same")
        assert b1.id == b2.id and b1.info()["refs"] == 2
        with pytest.raises(ga.GpaError) as e:
            actor.buffer(128, label="py.same")
        assert e.value.name == "GPA_EMISMATCH"
        b2.release()
    with actor.create_queue("side") as q2:
        t = actor.tensor((3,))
        q2.submit("fill", [], [t], {"value": 2.0}).result(timeout=10)
        assert np.array_equal(t.numpy(queue=q2), [2, 2, 2])
    with pytest.raises(ga.GpaError):
        q2.submit("fill", [], [t], {"value": 2.0})


def test_timeout_and_wait(actor):
    with actor.feed() as f:
        t = actor.tensor((1,))
        q = actor.create_queue()
        h = q.infeed(f, [t])  # parks: nothing pushed yet
        assert h.wait(timeout=0.01) == -4 and not h.done()
        exc = h.exception(timeout=0)
        assert exc.name == "GPA_ETIMEDOUT"
        f.push(np.array([7], np.float32))
        assert h.result(timeout=10) is None
        assert t.numpy(queue=q)[0] == 7
        h.release()
        q.close()
