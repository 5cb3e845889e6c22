"""DLPack import/export, feed sessions, the GIL released while blocking."""
import threading
import time

import numpy as np
import pytest

import gpuactor as ga


def test_dlpack_export_is_zero_copy(actor):
    src = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = actor.from_numpy(src)
    with actor.queue.batch():
        rb = actor.queue.readback(t)
    arr = np.from_dlpack(rb)
    assert arr.shape == (3, 4) and np.array_equal(arr, src)
    assert arr.ctypes.data == rb._view().ctypes.data  # the handle's own memory
    rb.release()  # the export holds its own reference
    assert np.array_equal(arr, src)
    del arr
    if actor.backend == "cpu":
        assert np.array_equal(np.from_dlpack(t), src)  # a tensor lends its own memory


def test_dlpack_import(actor):
    src = np.arange(24, dtype=np.int64).reshape(4, 6)
    t = actor.from_dlpack(src, copy=actor.backend != "cpu")  # a device backend cannot use host memory in place
    assert t.dtype == ga.I64 and np.array_equal(t.numpy(), src)
    strided = np.arange(40, dtype=np.float32).reshape(5, 8)[:, ::3]  # non-contiguous producer
    t2 = actor.from_dlpack(strided, copy=True)  # a copy may take any strides
    assert np.array_equal(t2.numpy(), strided)
    with pytest.raises(ga.GpaError) as e:
        actor.from_dlpack(np.zeros(3, np.complex64))
    assert e.value.name == "GPA_EDTYPE"


def test_feed_pop_mode(actor):
    q = actor.queue
    with actor.feed(tag=b"pop") as f:
        x, y = actor.tensor((2, 3)), actor.tensor((2, 3))
        f.push(np.ones((2, 3), np.float32) * 4)
        q.infeed(f, [x], timeout=5).release()
        q.submit("scale", [x], [y], {"alpha": 0.25}).release()
        q.outfeed(f, [y, x]).release()
        out = f.pop(timeout=10)
        assert len(out) == 2 and np.array_equal(out[0], np.ones((2, 3))) and np.array_equal(out[1], 4 * out[0])
        with pytest.raises(ga.GpaError) as e:
            f.pop(timeout=0.01)
        assert e.value.name == "GPA_ETIMEDOUT"
        with pytest.raises(ga.GpaError) as e:
            f.push(np.ones((2, 3), np.complex64))
        assert e.value.name == "GPA_EDTYPE"


def test_feed_sink_gets_tag_in_order(actor):
    got, done = [], threading.Event()

    def sink(feed, tag, arrays):
        got.append((tag, threading.get_ident(), float(arrays[0][0])))
        if len(got) == 5:
            done.set()

    q = actor.queue
    with actor.feed(tag=b"\x01session-7", sink=sink) as f:
        t = actor.tensor((1,))
        for i in range(5):
            q.submit("fill", [], [t], {"value": float(i)}).release()
            q.outfeed(f, [t]).release()
        assert done.wait(10)
    assert [g[2] for g in got] == [0, 1, 2, 3, 4]
    assert all(g[0] == b"\x01session-7" for g in got)
    assert got[0][1] != threading.get_ident()  # the session's delivery thread
    assert not f.sink_errors


def test_blocking_calls_release_the_gil(actor):
    """A thread blocked in sync (its queue parked on an empty infeed) must let
    this thread run Python; with the GIL held it could not count at all."""
    q = actor.create_queue()
    f = actor.feed()
    t = actor.tensor((1,))
    result = {}

    def waiter():
        q.batch_begin("parked")
        q.infeed(f, [t], timeout=20).release()
        result["stats"] = q.sync()

    th = threading.Thread(target=waiter)
    th.start()
    count, end = 0, time.monotonic() + 0.3
    while time.monotonic() < end:
        count += 1
    assert th.is_alive() and count > 1000
    f.push(np.array([1.5], np.float32))
    th.join(10)
    assert not th.is_alive() and result["stats"]["errors"] == 0
    assert t.numpy(queue=q)[0] == 1.5
    f.close()
    q.close()
