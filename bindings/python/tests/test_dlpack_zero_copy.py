"""DLPack without copies: imports wrap the producer's memory (data pointers
equal, an op's write visible in the producer's array, the deleter once),
exports lend the buffer's own memory; bad input refused, nothing leaked."""
import ctypes
import gc
import time

import numpy as np
import pytest

import gpuactor as ga
from gpuactor import dlpack


def on_cpu(actor):
    if actor.backend != "cpu":
        pytest.skip("host memory: the cpu backend (device memory is test_external_sim's)")


class Producer:
    """A DLPack producer that counts its deleter's calls (numpy's capsule
    with the deleter swapped for one that records, then chains to numpy's)."""

    def __init__(self, arr, deleter=True):
        self.arr, self.deleted, self.with_deleter = arr, 0, deleter

    def __dlpack__(self, stream=None):
        cap = self.arr.__dlpack__()
        mt = ctypes.cast(dlpack._api.PyCapsule_GetPointer(cap, b"dltensor"),
                         ctypes.POINTER(dlpack.DLManagedTensor)).contents
        inner = dlpack.DELETER(ctypes.cast(mt.deleter, ctypes.c_void_p).value)  # the value, not the field

        def counting(p):
            self.deleted += 1
            inner(p)

        self._keep = dlpack.DELETER(counting)
        mt.deleter = self._keep if self.with_deleter else dlpack.DELETER()
        self._inner = inner
        return cap

    def __dlpack_device__(self):
        return (1, 0)


def test_import_is_in_place(actor):
    on_cpu(actor)
    src = np.arange(64, dtype=np.float32).reshape(2, 32)
    p = Producer(src)
    x = actor.from_dlpack(p)
    assert x.buffer.external and x.shape == (2, 32) and x.dtype == ga.F32
    # the loan of the wrapped buffer points at the producer's own bytes
    cap = x.__dlpack__()
    y = np.from_dlpack(type("C", (), {"__dlpack__": lambda s, stream=None: cap,
                                      "__dlpack_device__": lambda s: (1, 0)})())
    assert y.ctypes.data == src.ctypes.data
    del y, cap
    # an op's write lands in the producer's array
    with actor.queue.batch():
        actor.queue.submit("scale", [x.view(32)], [x.view(32, offset=128)], {"alpha": 2.0}).release()
    assert np.array_equal(src[1], 2 * np.arange(32, dtype=np.float32))
    # ... and the producer's write is what the next op reads
    src[0, :] = 5
    assert np.array_equal(x.numpy()[0], np.full(32, 5, np.float32))
    assert p.deleted == 0
    x.buffer.release()
    actor.queue.submit("noop").result()
    assert p.deleted == 1
    del x
    gc.collect()
    assert p.deleted == 1


def test_import_outlives_the_producers_name(actor):
    on_cpu(actor)
    # The import holds the producer's reference: dropping every Python name
    # of the array frees nothing (ASan would see a use after free here).
    src = np.arange(1 << 16, dtype=np.float32)
    p = Producer(src)
    x = actor.from_dlpack(p)
    del src, p.arr
    gc.collect()
    actor.queue.submit("scale", [x], [x], {"alpha": 2.0}).result()
    assert x.numpy()[-1] == 2 * ((1 << 16) - 1)
    x.buffer.release()
    actor.queue.submit("noop").result()
    assert p.deleted == 1


def test_import_unaligned_view(actor):
    on_cpu(actor)
    base = np.arange(20, dtype=np.float32)
    view = base[3:11]  # 12 bytes past an aligned start
    x = actor.from_dlpack(view)
    assert x.offset == view.ctypes.data % 16  # wrapped from the aligned base below the view
    with actor.queue.batch():
        actor.queue.submit("fill", [], [x], {"value": -1.0}).release()
    assert np.array_equal(base[3:11], np.full(8, -1, np.float32))
    assert base[2] == 2 and base[11] == 11  # nothing outside the view written


def test_deleter_once_at_close():
    a = ga.Actor(threads=1)
    if a.backend != "cpu":
        a.close()
        pytest.skip("host memory: the cpu backend")
    p = Producer(np.ones(16, np.float32))
    x = a.from_dlpack(p)
    a.queue.submit("scale", [x], [x], {"alpha": 3.0}).result()
    assert p.deleted == 0
    a.close()  # never released: the actor hands it back once
    assert p.deleted == 1
    assert np.array_equal(p.arr, np.full(16, 3, np.float32))
    x.buffer.release()  # the actor is gone: nothing more happens
    assert p.deleted == 1


def test_bad_imports(actor):
    # non-contiguous strides
    strided = np.arange(40, dtype=np.float32).reshape(5, 8)[:, ::2]
    with pytest.raises(ga.GpaError) as e:
        actor.from_dlpack(strided)
    assert e.value.name == "GPA_EINVAL" and "contiguous" in e.value.message
    # an unsupported dtype
    with pytest.raises(ga.GpaError) as e:
        actor.from_dlpack(np.zeros(3, np.complex64))
    assert e.value.name == "GPA_EDTYPE"
    # a capsule consumed twice
    if actor.backend == "cpu":
        cap = np.zeros(8, np.float32).__dlpack__()
        actor.from_dlpack(cap)
        with pytest.raises(ga.GpaError) as e:
            actor.from_dlpack(cap)
        assert "already consumed" in e.value.message
    # a NULL deleter: refused, the capsule not consumed
    p = Producer(np.zeros(8, np.float32), deleter=False)
    cap = p.__dlpack__()
    with pytest.raises(ga.GpaError) as e:
        actor.from_dlpack(cap)
    assert "deleter" in e.value.message
    assert dlpack._api.PyCapsule_IsValid(cap, b"dltensor")
    # an unsupported device (kDLOpenCL = 4)
    src = np.zeros(8, np.float32)
    cap = src.__dlpack__()
    mt = ctypes.cast(dlpack._api.PyCapsule_GetPointer(cap, b"dltensor"), ctypes.POINTER(dlpack.DLManagedTensor))
    mt.contents.dl_tensor.device.device_type = 4
    with pytest.raises(ga.GpaError) as e:
        actor.from_dlpack(cap)
    assert e.value.name == "GPA_EUNSUPPORTED" and "device type 4" in e.value.message
    mt.contents.dl_tensor.device.device_type = 1


def test_device_memory_refused_on_cpu(actor):
    on_cpu(actor)
    # a kDLCUDA capsule handed to the cpu backend
    src = np.zeros(16, np.float32)
    cap = src.__dlpack__()
    mt = ctypes.cast(dlpack._api.PyCapsule_GetPointer(cap, b"dltensor"), ctypes.POINTER(dlpack.DLManagedTensor))
    mt.contents.dl_tensor.device.device_type = 2
    with pytest.raises(ga.GpaError) as e:
        actor.from_dlpack(cap)
    assert e.value.name == "GPA_EUNSUPPORTED" and "device memory" in e.value.message
    assert dlpack._api.PyCapsule_IsValid(cap, b"dltensor")  # still the producer's
    mt.contents.dl_tensor.device.device_type = 1


def test_export_lends_the_buffer(actor):
    t = actor.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4))
    dev = t.__dlpack_device__()
    assert dev == ((1, 0) if actor.backend == "cpu" else (2, 0))
    cap = t.__dlpack__(stream=None)
    if actor.backend == "cpu":
        arr = np.from_dlpack(type("C", (), {"__dlpack__": lambda s, stream=None: cap,
                                            "__dlpack_device__": lambda s: dev})())
        assert np.array_equal(arr, np.arange(12).reshape(3, 4))
        # the consumer's view is the buffer itself: an op's later write shows
        actor.queue.submit("fill", [], [t], {"value": 8.0}).result()
        assert np.all(arr == 8)
        t.buffer.release()  # the owner lets go; the export keeps it allocated
        assert np.all(arr == 8)
        with pytest.raises(ga.GpaError) as e:
            actor.close()
        assert e.value.name == "GPA_EBUSY"
        del arr, cap
        gc.collect()
        assert actor._exports == 0
    else:
        # a device capsule: consumed by this actor again, the same memory
        y = actor.from_dlpack(cap)
        actor.queue.submit("scale", [y], [y], {"alpha": 2.0}).result()
        assert np.array_equal(t.numpy(), 2 * np.arange(12, dtype=np.float32).reshape(3, 4))
        y.buffer.release()
        actor.queue.submit("noop").result()
        deadline = time.monotonic() + 10  # the loan goes back on a thread of its own
        while actor._exports and time.monotonic() < deadline:
            time.sleep(0.01)
        assert actor._exports == 0


def test_cuda_host_capsule_is_host_memory_on_cpu(actor):
    on_cpu(actor)
    # kDLCUDAHost (page-locked host memory) is host memory to the cpu backend
    src = np.zeros(32, np.float32)
    cap = src.__dlpack__()
    mt = ctypes.cast(dlpack._api.PyCapsule_GetPointer(cap, b"dltensor"), ctypes.POINTER(dlpack.DLManagedTensor))
    mt.contents.dl_tensor.device.device_type = 3
    x = actor.from_dlpack(cap)
    actor.queue.submit("fill", [], [x], {"value": 6.0}).result()
    assert np.all(src == 6)
    x.buffer.release()
