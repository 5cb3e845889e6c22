"""gpuactor for Python: the C API over ctypes (nothing to compile).

    import numpy as np, gpuactor as ga
    with ga.Actor(device="cpu") as a:
        x = a.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
        y = a.tensor((2, 3))
        with a.queue.batch("step"):
            a.queue.submit("scale", [x], [y], {"alpha": 2.0})
            rb = a.queue.readback(y)
        print(rb.array())          # deferred readback, readable after the sync

The C library is found through GPA_LIBRARY (a path to libgpuactor.so), else
the build tree next to the sources, else the loader's path. Blocking calls
(await, sync, feed pop, close) release the GIL. Errors raise GpaError with
.status, .name ("GPA_ESHAPE") and .message (the library's detail text).
See docs/bindings.md.
"""
from ._lib import path as library_path
from .core import (BF16, F16, F32, I32, I64, U8, Actor, Batch, Buffer, GpaError, Handle, Queue, Readback, Tensor,
                   dtype_of, numpy_dtype, version)
from .feed import Feed

__version__ = version()  # the C library's (the package's version is read from version.h)

__all__ = ["Actor", "Batch", "Buffer", "Feed", "GpaError", "Handle", "Queue", "Readback", "Tensor", "F32", "F16",
           "BF16", "I32", "U8", "I64", "dtype_of", "numpy_dtype", "version", "library_path"]
