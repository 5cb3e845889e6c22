"""DLPack (the legacy DLManagedTensor capsule, as numpy >= 1.22 and torch
speak it) in ctypes.

Export: a readback handle's host data is lent without a copy; the capsule's
manager keeps a reference to the handle until the consumer calls the
deleter (or, when no consumer took it, until the capsule dies).
Import: any object with __dlpack__ whose data is on the CPU; the data is
uploaded into a new tensor (a copy, so the producer may free it at once), and
the producer's deleter is called.
"""
import ctypes

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

KDL_CPU = 1
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
    if _raw_is_valid(capsule, b"dltensor"):
        p = _raw_get_pointer(capsule, b"dltensor")
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
    return _api.PyCapsule_New(addr, b"dltensor", _DESTRUCTOR)


def import_tensor(actor, obj, label=None, queue=None):
    """Uploads the CPU data of a DLPack producer into a new tensor."""
    if hasattr(obj, "__dlpack_device__"):
        dev = obj.__dlpack_device__()
        if int(dev[0]) != KDL_CPU:
            raise GpaError(-8, "DLPack import: only CPU tensors (device type %d)" % int(dev[0]))
    capsule = obj.__dlpack__() if hasattr(obj, "__dlpack__") else obj
    if not _api.PyCapsule_IsValid(capsule, b"dltensor"):
        raise GpaError(-1, "DLPack import: not an unused 'dltensor' capsule")
    mt = ctypes.cast(_api.PyCapsule_GetPointer(capsule, b"dltensor"), ctypes.POINTER(DLManagedTensor)).contents
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
        _api.PyCapsule_SetName(capsule, b"used_dltensor")
        if mt.deleter:
            mt.deleter(ctypes.pointer(mt))
    return t
