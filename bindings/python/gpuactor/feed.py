"""Feed sessions: infeed pushes from Python, outfeed items to a Python sink
(called on the session's own delivery thread, with the GIL taken by ctypes)
or popped with Feed.pop()."""
import ctypes
import sys

import numpy as np

from . import _lib as L
from .core import GpaError, _NP_OF, _Closing, _check, _timeout_ns, dtype_of


def _host_tensors(arrays):
    arrs = [np.ascontiguousarray(a) for a in arrays]
    ht = (L.HostTensor * max(1, len(arrs)))()
    for i, a in enumerate(arrs):
        ht[i].data = a.ctypes.data_as(ctypes.c_void_p)
        ht[i].bytes = a.nbytes
        ht[i].dtype = dtype_of(a.dtype)
        ht[i].rank = a.ndim
        for k, d in enumerate(a.shape):
            ht[i].shape[k] = d
    return ht, arrs


def _arrays_of(ptr, n):
    out = []
    for i in range(n):
        t = ptr[i]
        shape = tuple(t.shape[k] for k in range(t.rank))
        dt = np.dtype(_NP_OF[t.dtype])
        if t.bytes:
            buf = (ctypes.c_char * t.bytes).from_address(t.data)
            out.append(np.frombuffer(buf, dtype=dt).reshape(shape).copy())
        else:
            out.append(np.zeros(shape, dt))
    return out


class Feed(_Closing):
    """A tagged channel. sink(feed, tag, arrays) gets each outfeed item (numpy
    copies) on the session's delivery thread; without a sink, pop() takes
    items. A context manager: close() cancels what is parked or undelivered."""

    def __init__(self, actor, tag=b"", sink=None, outfeed_capacity=0, outfeed_policy=0, infeed_capacity=0):
        self.actor = actor
        self.tag = bytes(tag)
        self.sink = sink
        self.sink_errors = []
        self._tagbuf = ctypes.create_string_buffer(self.tag, len(self.tag) or 1)
        self._cb = L.SINK_FN(self._deliver) if sink else L.SINK_FN()
        opts = L.FeedOptions(size=ctypes.sizeof(L.FeedOptions),
                             tag=ctypes.cast(self._tagbuf, ctypes.c_void_p) if self.tag else None,
                             tag_len=len(self.tag), sink=self._cb, user_data=None,
                             outfeed_capacity=outfeed_capacity, outfeed_policy=outfeed_policy,
                             infeed_capacity=infeed_capacity)
        p = ctypes.c_void_p()
        _check(L.feed_open(actor._p(), ctypes.byref(opts), ctypes.byref(p)))
        self._ptr = p.value

    def _deliver(self, session, tag, tag_len, tensors, n, user):
        try:
            self.sink(self, ctypes.string_at(tag, tag_len) if tag_len else b"", _arrays_of(tensors, n))
        except BaseException as e:  # nothing may propagate into C
            self.sink_errors.append(e)
            print("gpuactor: feed sink raised %r" % (e,), file=sys.stderr)

    def _p(self):
        self.actor._p()
        if not self._ptr:
            raise GpaError(-17, "feed closed")
        return self._ptr

    @property
    def id(self):
        return L.feed_id(self._p())

    def push(self, *arrays):
        """Pushes one item of numpy arrays (copied before return)."""
        ht, _keep = _host_tensors(arrays)
        _check(L.infeed_push(self._p(), ht, len(arrays)))

    def pop(self, timeout=None):
        """The next outfeed item as a list of numpy arrays (waits, GIL released)."""
        h = ctypes.c_void_p()
        _check(L.outfeed_pop(self._p(), _timeout_ns(timeout), ctypes.byref(h)))
        try:
            n = L.outfeed_item_count(h.value)
            ht = (L.HostTensor * max(1, n))()
            for i in range(n):
                _check(L.outfeed_item_tensor(h.value, i, ctypes.byref(ht[i])))
            return _arrays_of(ht, n)
        finally:
            L.handle_release(h.value)

    def close(self):
        p, self._ptr = getattr(self, "_ptr", None), None
        if p and self.actor._ptr:
            L.feed_close(p)
