"""DLPack (the legacy DLManagedTensor capsule, as numpy >= 1.22 and torch
speak it) in ctypes. No copies either way.

Import (Actor.from_dlpack): a kDLCPU, kDLCUDA or kDLCUDAHost tensor becomes
an external buffer over the producer's memory (gpa_buffer_wrap). The
capsule is consumed only when the wrap succeeded; the producer's deleter
runs exactly once, when the actor no longer needs the memory (the tensor's
buffer released and the work naming it done, or the actor destroyed). The
data must be row-major contiguous (strides are checked) and of a dtype the
library has; anything else is refused with the reason and the capsule left
to its producer. copy=True uploads a copy instead (any strides, CPU only).

Export (Tensor.__dlpack__, Readback.__dlpack__): the capsule points at the
buffer's own memory (gpa_buffer_lend), which stays allocated until the
consumer calls the deleter; the actor refuses to close while exports are
alive. The work submitted before the export has finished when the capsule
is returned, so any consumer stream may use it (the `stream` argument of the
protocol needs no further wait).
"""
import ctypes
import itertools
import threading

import numpy as np

from . import _lib as L
from .core import GpaError, dtype_of


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST = 1, 2, 3
_KIND_OF = {KDL_CPU: L.MEM_HOST, KDL_CUDA: L.MEM_DEVICE, KDL_CUDA_HOST: L.MEM_HOST_PINNED}
_DEVICE_OF = {v: k for k, v in _KIND_OF.items()}
_DLTENSOR, _USED = b"dltensor", b"used_dltensor"  # capsules keep the name pointer: module constants
_CODES = {1: (2, 32), 2: (2, 16), 3: (4, 16), 4: (0, 32), 5: (1, 8), 6: (0, 64)}  # gpa dtype -> (code, bits)
_GPA_OF = {v: k for k, v in _CODES.items()}

_api = ctypes.pythonapi
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))

# Exports alive: address of the DLManagedTensor -> (struct, shape array, handle).
_live = {}


def _deleter(mt):
    addr = ctypes.addressof(mt.contents)
    entry = _live.pop(addr, None)
    if entry is not None:
        entry[2].release()


_DELETER = DELETER(_deleter)


def _capsule_destructor(capsule):
    # A consumer that took the tensor renamed the capsule "used_dltensor" and
    # calls the deleter itself; otherwise the capsule owns it.
    if _raw_is_valid(capsule, _DLTENSOR):
        p = _raw_get_pointer(capsule, _DLTENSOR)
        if p:
            _deleter(ctypes.cast(p, ctypes.POINTER(DLManagedTensor)))


_DESTRUCTOR = _CAPSULE_DESTRUCTOR(_capsule_destructor)


def export_readback(rb):
    """A "dltensor" capsule over a readback's data (waits for it first)."""
    rb.result()  # raises if it failed; makes the data readable
    arr = rb._view()
    code, bits = _CODES[dtype_of(arr.dtype) if arr.dtype != np.uint16 else 3]
    mt = DLManagedTensor()
    shape = (ctypes.c_int64 * max(1, arr.ndim))(*arr.shape)
    mt.dl_tensor.data = arr.ctypes.data if arr.size else None
    mt.dl_tensor.device = DLDevice(KDL_CPU, 0)
    mt.dl_tensor.ndim = arr.ndim
    mt.dl_tensor.dtype = DLDataType(code, bits, 1)
    mt.dl_tensor.shape = shape
    mt.dl_tensor.strides = None  # compact row-major
    mt.dl_tensor.byte_offset = 0
    mt.deleter = _DELETER
    # the handle owns the bytes: keep our own reference to it
    from .core import Readback
    L.handle_retain(rb._ptr)
    ref = Readback(rb._ptr, rb.dtype, rb.shape)
    addr = ctypes.addressof(mt)
    _live[addr] = (mt, shape, ref)
    return _api.PyCapsule_New(addr, _DLTENSOR, _DESTRUCTOR)


def _managed(mt, shape, device_type, data, code, bits, ndim, entry):
    mt.dl_tensor.data = data
    mt.dl_tensor.device = DLDevice(device_type, 0)
    mt.dl_tensor.ndim = ndim
    mt.dl_tensor.dtype = DLDataType(code, bits, 1)
    mt.dl_tensor.shape = shape
    mt.dl_tensor.strides = None  # compact row-major
    mt.dl_tensor.byte_offset = 0
    mt.deleter = _DELETER
    addr = ctypes.addressof(mt)
    _live[addr] = entry
    return _api.PyCapsule_New(addr, _DLTENSOR, _DESTRUCTOR)


class _Loan:
    """The export's reference to a buffer: given back by the deleter."""

    def __init__(self, actor, buffer_id):
        self.actor, self.buffer_id = actor, buffer_id
        actor._exports += 1

    def release(self):
        actor, self.actor = self.actor, None
        if actor is None:
            return
        if isinstance(threading.current_thread(), threading._DummyThread):
            # A thread Python did not start: the actor's own, when an export
            # of this actor was imported back and its release callback runs
            # this deleter. gpa_buffer_release waits for the actor, so it
            # goes to a thread of its own.
            threading.Thread(target=self._give_back, args=(actor,), daemon=True).start()
        else:
            self._give_back(actor)

    def _give_back(self, actor):
        with actor._lock:  # close() takes it too: the actor stays alive meanwhile
            if actor._ptr:
                L.buffer_release(actor._ptr, self.buffer_id)
            actor._exports -= 1


def export_tensor(t, stream=None):
    """A "dltensor" capsule over a tensor's own memory (no copy)."""
    actor = t.buffer.actor
    # The work submitted so far writes the memory: it must be done first.
    actor.queue.submit("noop").result()
    loan = L.BufferLoan(size_of=ctypes.sizeof(L.BufferLoan))
    st = L.buffer_lend(actor._p(), t.buffer.id, ctypes.byref(loan))
    if st != 0:
        raise GpaError(st, L.last_error_message().decode(errors="replace"))
    ref = _Loan(actor, t.buffer.id)
    code, bits = _CODES[t.dtype]
    ndim = len(t.shape)
    shape = (ctypes.c_int64 * max(1, ndim))(*t.shape)
    mt = DLManagedTensor()
    return _managed(mt, shape, _DEVICE_OF[loan.kind], (loan.ptr or 0) + t.offset, code, bits, ndim,
                    (mt, shape, ref))


# Imports alive: token -> the producer's DLManagedTensor (its deleter runs once).
_imports = {}
_tokens = itertools.count(1)


def _release_import(ptr, token):
    # Called once by the actor (its thread, or the one destroying it).
    mtp = _imports.pop(token, None)
    if mtp is not None and mtp.contents.deleter:
        mtp.contents.deleter(mtp)


_RELEASE = L.RELEASE_FN(_release_import)


def _capsule_of(obj, stream):
    if hasattr(obj, "__dlpack__"):
        return obj.__dlpack__() if stream is None else obj.__dlpack__(stream=stream)
    return obj


def _contiguous(shape, strides):
    expect = 1
    for n, st in zip(reversed(shape), reversed(strides)):
        if n != 1 and st != expect:
            return False
        expect *= n
    return True


def import_tensor(actor, obj, label=None, queue=None, copy=False, stream=None):
    """A tensor over a DLPack producer's memory (copy=False) or a copy of it."""
    if copy:
        return _import_copy(actor, obj, label, queue)
    if label is not None:
        raise GpaError(-1, "DLPack import: a wrapped buffer has no label (pass copy=True for a labeled copy)")
    capsule = _capsule_of(obj, stream)
    if not _api.PyCapsule_IsValid(capsule, _DLTENSOR):
        if _api.PyCapsule_IsValid(capsule, _USED):
            raise GpaError(-1, "DLPack import: this capsule was already consumed (a capsule is used once)")
        raise GpaError(-1, "DLPack import: not a 'dltensor' capsule")
    mtp = ctypes.cast(_api.PyCapsule_GetPointer(capsule, _DLTENSOR), ctypes.POINTER(DLManagedTensor))
    dl = mtp.contents.dl_tensor
    # Every check before the capsule is consumed: a refusal leaves it to its producer.
    if dl.device.device_type not in _KIND_OF:
        raise GpaError(-8, "DLPack import: device type %d is not supported (kDLCPU, kDLCUDA, kDLCUDAHost)"
                       % dl.device.device_type)
    if not mtp.contents.deleter:
        raise GpaError(-1, "DLPack import: the capsule has no deleter, so nothing would say when its memory may "
                       "go: refused")
    key = (dl.dtype.code, dl.dtype.bits)
    if key not in _GPA_OF or dl.dtype.lanes != 1:
        raise GpaError(-14, "DLPack import: dtype code %d bits %d lanes %d has no gpa dtype" % (
            dl.dtype.code, dl.dtype.bits, dl.dtype.lanes))
    gdt = _GPA_OF[key]
    shape = tuple(dl.shape[i] for i in range(dl.ndim))
    if dl.strides and not _contiguous(shape, [dl.strides[i] for i in range(dl.ndim)]):
        raise GpaError(-1, "DLPack import: strides %s are not row-major contiguous for shape %s: make the tensor "
                       "contiguous first (or pass copy=True on the CPU)"
                       % (tuple(dl.strides[i] for i in range(dl.ndim)), shape))
    n = 1
    for d in shape:
        n *= d
    nbytes = n * (dl.dtype.bits // 8)
    if nbytes == 0:
        t = actor.tensor(shape, gdt)  # no memory to share: an empty tensor of its own
        _api.PyCapsule_SetName(capsule, _USED)
        mtp.contents.deleter(mtp)
        return t
    # Wrapped memory starts aligned: wrap the aligned base, address the view at its offset.
    base = (dl.data or 0) + dl.byte_offset
    start = base - base % L.EXTERNAL_ALIGN
    token = next(_tokens)
    desc = L.ExternalDesc(size_of=ctypes.sizeof(L.ExternalDesc), kind=_KIND_OF[dl.device.device_type], ptr=start,
                          bytes=base - start + nbytes, release=_RELEASE, user_data=token)
    _imports[token] = mtp
    out = ctypes.c_uint64()
    st = L.buffer_wrap(actor._p(), ctypes.byref(desc), ctypes.byref(out))
    if st != 0:
        del _imports[token]
        raise GpaError(st, L.last_error_message().decode(errors="replace"))
    _api.PyCapsule_SetName(capsule, _USED)  # ours now: the release callback calls the deleter
    from .core import Buffer, Tensor
    buf = Buffer._adopt(actor, out.value, desc.bytes)
    buf.external = True
    return Tensor(buf, shape, gdt, base - start)


def _import_copy(actor, obj, label=None, queue=None):
    """Uploads the CPU data of a DLPack producer into a new tensor."""
    if hasattr(obj, "__dlpack_device__"):
        dev = obj.__dlpack_device__()
        if int(dev[0]) != KDL_CPU:
            raise GpaError(-8, "DLPack import: only CPU tensors (device type %d)" % int(dev[0]))
    capsule = obj.__dlpack__() if hasattr(obj, "__dlpack__") else obj
    if not _api.PyCapsule_IsValid(capsule, _DLTENSOR):
        raise GpaError(-1, "DLPack import: not an unused 'dltensor' capsule")
    mt = ctypes.cast(_api.PyCapsule_GetPointer(capsule, _DLTENSOR), ctypes.POINTER(DLManagedTensor)).contents
    dl = mt.dl_tensor
    try:
        if dl.device.device_type != KDL_CPU:
            raise GpaError(-8, "DLPack import: only CPU tensors (device type %d)" % dl.device.device_type)
        key = (dl.dtype.code, dl.dtype.bits)
        if key not in _GPA_OF or dl.dtype.lanes != 1:
            raise GpaError(-14, "DLPack import: dtype code %d bits %d lanes %d not supported" % (
                dl.dtype.code, dl.dtype.bits, dl.dtype.lanes))
        gdt = _GPA_OF[key]
        shape = tuple(dl.shape[i] for i in range(dl.ndim))
        from .core import _NP_OF
        npdt = np.dtype(_NP_OF[gdt])
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        base = (dl.data or 0) + dl.byte_offset
        if n == 0:
            arr = np.zeros(shape, npdt)
        else:
            # honour strides (elements); compact arrays have strides NULL
            strides = tuple(dl.strides[i] * npdt.itemsize for i in range(dl.ndim)) if dl.strides else None
            span = n * npdt.itemsize if strides is None else (
                sum((s - 1) * abs(st) for s, st in zip(shape, strides)) + npdt.itemsize)
            raw = (ctypes.c_char * span).from_address(base)
            arr = np.ndarray(shape, npdt, buffer=raw, strides=strides)
        t = actor.tensor(shape, gdt, label)
        (queue or actor.queue).upload(t, arr).release()  # src copied before the call returns
    finally:
        _api.PyCapsule_SetName(capsule, _USED)
        if mt.deleter:
            mt.deleter(ctypes.pointer(mt))
    return t
