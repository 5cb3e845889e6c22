"""gpuactor ops inside compiled JAX programs, as XLA FFI custom calls.

    import jax, jax.numpy as jnp
    from gpuactor import jax as gj
    o = jax.jit(lambda q, k, v: gj.attention(q, k, v, causal=True))(q, k, v)
    dq = jax.grad(lambda q: gj.attention(q, k, v).sum())(q)

Optional: importing it needs jax. The handlers live in libgpuactor_xla.so
(bindings/xla), found through GPA_XLA_LIBRARY, else next to the C library
this package loaded; importing registers them with jax.ffi for the cpu
platform, and for CUDA where JAX has a CUDA backend. XLA's buffers are used
in place: on cpu by the process's host actor (one per process, shared by
every call), each call waiting for its op before XLA goes on, or with
GPA_XLA_ASYNC=1 handing XLA a future to wait on; on CUDA by the actor of
XLA's device, ordered with XLA's stream by events (the call does not wait
for the GPU). See docs/xla.md.
"""
import ctypes
import functools
import os
import re

import jax
import jax.numpy as jnp
import numpy as np

from . import _lib as L
from ._lib import path as _gpa_path
from .feed import Feed

TARGETS = ("attention_fwd", "attention_bwd", "layernorm_fwd", "layernorm_bwd", "gelu_fwd", "gelu_bwd",
           "linear_fwd", "linear_bwd", "op", "nothing", "infeed", "outfeed")


class _Stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("calls", "wraps", "wrap_hits", "bytes_uploaded", "bytes_read_back",
                                               "watched", "watched_done", "deferred_errors")]


def _candidates():
    env = os.environ.get("GPA_XLA_LIBRARY")
    if env:
        yield env
        return
    d = os.path.dirname(os.path.abspath(_gpa_path)) if os.path.sep in _gpa_path else ""
    if d:
        yield os.path.join(d, "libgpuactor_xla.so")
        yield os.path.join(d, "bindings", "xla", "libgpuactor_xla.so")  # a build tree
    yield "libgpuactor_xla.so"


def _load():
    errors = []
    for p in _candidates():
        try:
            return ctypes.CDLL(p), p
        except OSError as e:
            errors.append("%s: %s" % (p, e))
    raise ImportError("gpuactor.jax: cannot load libgpuactor_xla.so (set GPA_XLA_LIBRARY): " + "; ".join(errors))


lib, library_path = _load()
lib.gpa_xla_stats_get.restype = ctypes.c_int
lib.gpa_xla_stats_get.argtypes = (ctypes.POINTER(_Stats), ctypes.c_char_p, ctypes.c_uint64)
lib.gpa_xla_actor.restype = ctypes.c_void_p
lib.gpa_xla_actor.argtypes = (ctypes.c_char_p, ctypes.c_uint64)
lib.gpa_xla_session_open.restype = ctypes.c_int
lib.gpa_xla_session_open.argtypes = (ctypes.POINTER(L.FeedOptions), ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p,
                                     ctypes.c_uint64)
lib.gpa_xla_cuda_actor_get.restype = ctypes.c_void_p
lib.gpa_xla_cuda_actor_get.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint64)
lib.gpa_xla_cuda_session_open.restype = ctypes.c_int
lib.gpa_xla_cuda_session_open.argtypes = (ctypes.c_int, ctypes.POINTER(L.FeedOptions),
                                          ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_uint64)
lib.gpa_xla_session_close.restype = ctypes.c_int
lib.gpa_xla_session_close.argtypes = (ctypes.c_void_p,)

lib.gpa_xla_ffi_version.restype = None
lib.gpa_xla_ffi_version.argtypes = (ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32))


def _library_ffi_version():
    """The XLA FFI version (major, minor) the handlers were built against:
    what they answer XLA's metadata query with."""
    major, minor = ctypes.c_int32(-1), ctypes.c_int32(-1)
    lib.gpa_xla_ffi_version(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def _jaxlib_ffi_version():
    """The XLA FFI version this jaxlib implements: that of the header it
    ships (its runtime is built from it); None if it cannot be read."""
    try:
        with open(os.path.join(jax.ffi.include_dir(), "xla", "ffi", "api", "c_api.h")) as f:
            src = f.read()
    except (OSError, AttributeError):
        return None
    found = [re.search(r"^#define XLA_FFI_API_%s (\d+)" % k, src, re.M) for k in ("MAJOR", "MINOR")]
    return tuple(int(m.group(1)) for m in found) if all(found) else None


def check_ffi_version(built, runtime):
    """Raises ImportError where XLA would refuse the handlers: jax 0.10's
    registration does not say so (the refused targets are just missing when
    a program runs), so the mismatch is named here. XLA takes handlers built
    against its own FFI version or an older one of the same major."""
    if runtime is None:
        return
    if built[0] != runtime[0] or built > runtime:
        raise ImportError("gpuactor.jax: %s was built against XLA FFI %d.%d, but this jaxlib (%s) implements %d.%d "
                          "and would refuse its handlers: build libgpuactor_xla.so against this jax's headers "
                          "(cmake -DGPA_XLA_PYTHON=<this python>; docs/xla.md)" %
                          (library_path, built[0], built[1], jax.__version__, runtime[0], runtime[1]))


ffi_version = _library_ffi_version()
check_ffi_version(ffi_version, _jaxlib_ffi_version())

# The CUDA handlers (same target names; XLA picks by the platform a program
# runs on): the op handlers, the baseline (one function serves both
# platforms) and the feed calls, whose sessions are opened on the device
# (Session(device=...)). The same rows as the library's
# gpa_xla_cuda_targets().
CUDA_TARGETS = TARGETS


def registrations(cuda):
    """(target, handler symbol, jax platform) for each handler this module
    registers: the host ones for "cpu", and with cuda the CUDA ones for
    "CUDA"."""
    regs = [("gpuactor_" + t, "gpa_xla_" + t, "cpu") for t in TARGETS]
    if cuda:
        regs += [("gpuactor_" + t, "gpa_xla_nothing" if t == "nothing" else "gpa_xla_cuda_" + t, "CUDA")
                 for t in CUDA_TARGETS]
    return regs


def _cuda_devices(devices=None):
    """JAX's CUDA devices ([] without a CUDA backend)."""
    try:
        return list((devices or jax.devices)("cuda"))
    except (RuntimeError, ValueError):  # no CUDA backend (JAX_PLATFORMS, or jax without the CUDA plugin)
        return []


def _has_cuda(devices=None):
    return bool(_cuda_devices(devices))


has_cuda = _has_cuda()
for _name, _sym, _platform in registrations(has_cuda):
    jax.ffi.register_ffi_target(_name, jax.ffi.pycapsule(getattr(lib, _sym)), platform=_platform)


def stats():
    """The handlers' counters and the actor's copy counters (a dict)."""
    s, msg = _Stats(), ctypes.create_string_buffer(256)
    if lib.gpa_xla_stats_get(ctypes.byref(s), msg, len(msg)) != 0:
        raise RuntimeError("gpuactor.jax: " + msg.value.decode())
    return {n: getattr(s, n) for n, _ in _Stats._fields_}


def _call(target, outs, *args, **attrs):
    return jax.ffi.ffi_call("gpuactor_" + target, outs, vmap_method="sequential")(*args, **attrs)


def _sds(shape, dtype):
    return jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype))


# ---- attention ---------------------------------------------------------------
# q [B,S,H,D], k and v [B,Sk,Hkv,D]; lengths [B] int32 or None; scale None
# is 1/sqrt(D). The forward keeps o and the log-sum-exp for the backward.

def _attn_attrs(causal, scale):
    return dict(causal=np.int32(1 if causal else 0), scale=np.float64(scale if scale else 0.0))


def _attn_fwd_call(q, k, v, lengths, causal, scale):
    B, S, H, _ = q.shape
    args = (q, k, v) if lengths is None else (q, k, v, lengths)
    return _call("attention_fwd", (_sds(q.shape, q.dtype), _sds((B, H, S), jnp.float32)), *args,
                 **_attn_attrs(causal, scale))


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _attention(q, k, v, lengths, causal, scale):
    return _attn_fwd_call(q, k, v, lengths, causal, scale)[0]


def _attention_fwd(q, k, v, lengths, causal, scale):
    o, lse = _attn_fwd_call(q, k, v, lengths, causal, scale)
    return o, (q, k, v, lengths, o, lse)


def _attention_bwd(causal, scale, res, do):
    q, k, v, lengths, o, lse = res
    args = (do, q, k, v, o, lse) + (() if lengths is None else (lengths,))
    dq, dk, dv = _call("attention_bwd", (_sds(q.shape, q.dtype), _sds(k.shape, k.dtype), _sds(v.shape, v.dtype)),
                       *args, **_attn_attrs(causal, scale))
    return dq, dk, dv, None


_attention.defvjp(_attention_fwd, _attention_bwd)


def attention(q, k, v, causal=False, scale=None, lengths=None):
    """softmax(scale q k^T, masked) v (docs/ops.md, "attention"); differentiable in q, k, v."""
    return _attention(q, k, v, lengths, bool(causal), float(scale) if scale else 0.0)


# ---- layer norm --------------------------------------------------------------

def _ln_fwd_call(x2, gamma, beta, eps):
    N, D = x2.shape
    return _call("layernorm_fwd", (_sds((N, D), x2.dtype), _sds((N,), jnp.float32), _sds((N,), jnp.float32)),
                 x2, gamma, beta, eps=np.float64(eps))


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _layer_norm(x2, gamma, beta, eps):
    return _ln_fwd_call(x2, gamma, beta, eps)[0]


def _layer_norm_fwd(x2, gamma, beta, eps):
    y, mean, rstd = _ln_fwd_call(x2, gamma, beta, eps)
    return y, (x2, gamma, mean, rstd)


def _layer_norm_bwd(eps, res, dy):
    x2, gamma, mean, rstd = res
    dx, dg, db = _call("layernorm_bwd", (_sds(x2.shape, x2.dtype), _sds(gamma.shape, gamma.dtype),
                                          _sds(gamma.shape, gamma.dtype)), x2, dy, gamma, mean, rstd)
    return dx, dg, db


_layer_norm.defvjp(_layer_norm_fwd, _layer_norm_bwd)


def layer_norm(x, gamma, beta, eps=1e-5):
    """LayerNorm over the last axis of x (any leading axes)."""
    D = x.shape[-1]
    return _layer_norm(x.reshape(-1, D), gamma, beta, float(eps)).reshape(x.shape)


# ---- GELU --------------------------------------------------------------------

@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _gelu(x, approximate):
    return _call("gelu_fwd", _sds(x.shape, x.dtype), x, approximate=np.int32(approximate))


def _gelu_fwd(x, approximate):
    return _gelu(x, approximate), x


def _gelu_bwd(approximate, x, dy):
    return (_call("gelu_bwd", _sds(x.shape, x.dtype), x, dy, approximate=np.int32(approximate)),)


_gelu.defvjp(_gelu_fwd, _gelu_bwd)


def gelu(x, approximate=False):
    """GELU: the erf form, or the tanh form with approximate=True."""
    return _gelu(x, 1 if approximate else 0)


# ---- linear ------------------------------------------------------------------
# gelu: GELU (tanh form) fused after the bias; the forward for the gradient
# also keeps the pre-activation, which the backward needs.

def _lin_args(x, W, b):
    return (x, W) if b is None else (x, W, b)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _linear(x, W, b, gelu):
    return _call("linear_fwd", _sds(x.shape[:-1] + (W.shape[0],), x.dtype), *_lin_args(x, W, b),
                 gelu=np.int32(gelu))


def _linear_fwd(x, W, b, gelu):
    if not gelu:
        return _linear(x, W, b, gelu), (x, W, b, None)
    out = _sds(x.shape[:-1] + (W.shape[0],), x.dtype)
    y, pre = _call("linear_fwd", (out, out), *_lin_args(x, W, b), gelu=np.int32(1))
    return y, (x, W, b, pre)


def _linear_bwd(gelu, res, dy):
    x, W, b, pre = res
    outs = (_sds(x.shape, x.dtype), _sds(W.shape, W.dtype)) + (() if b is None else (_sds(W.shape[:1], W.dtype),))
    args = (dy, x, W) + (() if pre is None else (pre,))
    grads = _call("linear_bwd", outs, *args, gelu=np.int32(gelu))
    return (grads[0], grads[1], None if b is None else grads[2])


_linear.defvjp(_linear_fwd, _linear_bwd)


def linear(x, W, b=None, gelu=False):
    """x W^T + b, then GELU (tanh form) if gelu; x [..., in], W [out, in], b [out] or None."""
    return _linear(x, W, b, 1 if gelu else 0)


# ---- any op ------------------------------------------------------------------

def op(name, *args, out, **attrs):
    """Runs the registered gpuactor op `name` on args; out is a
    jax.ShapeDtypeStruct (one result) or a sequence of them. Attributes:
    Python ints and bools go as integers, floats as floats. Not
    differentiable."""
    conv = {}
    for k, v in attrs.items():
        if isinstance(v, (bool, np.bool_)):
            conv[k] = np.int32(bool(v))
        elif isinstance(v, (int, np.integer)):
            conv[k] = np.int64(v)
        elif isinstance(v, (float, np.floating)):
            conv[k] = np.float64(v)
        else:
            raise TypeError("gpuactor.jax.op: attribute %r must be an int, bool or float, not %s" % (k, type(v)))
    return _call("op", out, *args, op=name, **conv)


# ---- feeds -------------------------------------------------------------------
# A jitted program talks to host code through tagged sessions: outfeed(tag,
# *xs) hands tensors out, infeed(tag, shapes, *after) takes the next pushed
# item. Both are side-effecting custom calls; outfeed returns an s32 scalar
# that an infeed (or a later outfeed) takes as an operand, which is what
# orders them in the program (XLA orders by data, not by effects).

class _HandlersActor:
    """What Feed needs of an actor, for the handlers' own actor: the host's
    (device None) or that of CUDA device `device`."""

    def __init__(self, device=None):
        msg = ctypes.create_string_buffer(256)
        if device is None:
            self._ptr = lib.gpa_xla_actor(msg, len(msg))
        else:
            self._ptr = lib.gpa_xla_cuda_actor_get(device, msg, len(msg))
        if not self._ptr:
            raise RuntimeError("gpuactor.jax: " + msg.value.decode())

    def _p(self):
        return self._ptr


def _default_device():
    """The device a jitted program runs on unless told otherwise."""
    d = getattr(jax.config, "jax_default_device", None)
    if isinstance(d, str):
        return jax.devices(d)[0]
    return d if d is not None else jax.devices()[0]


def session_ordinal(device, default=_default_device, cuda_devices=None):
    """Where a session for programs on `device` lives: None (the host actor)
    or the CUDA ordinal XLA's calls on that device report (their
    XLA_FFI_DeviceOrdinal_Get: the device's local hardware id). device: None
    (JAX's default device, default()), "cpu", an int or "cuda:N" (a CUDA
    ordinal), or a jax Device (cuda_devices: JAX's CUDA devices; None: ask
    JAX)."""
    if device is None:
        device = default()
    if isinstance(device, str):
        if device in ("cpu", "host"):
            return None
        if device.startswith("cuda:") and device[5:].isdigit():
            return int(device[5:])
        raise ValueError("gpuactor.jax: device %r is not 'cpu' or 'cuda:N'" % device)
    if isinstance(device, (int, np.integer)) and not isinstance(device, bool):
        if device < 0:
            raise ValueError("gpuactor.jax: CUDA ordinal %d < 0" % device)
        return int(device)
    if device in (_cuda_devices() if cuda_devices is None else cuda_devices):
        hw = getattr(device, "local_hardware_id", None)
        return int(device.id if hw is None else hw)
    if getattr(device, "platform", None) == "cpu":
        return None
    raise ValueError("gpuactor.jax: %r is neither a CUDA device of JAX nor a cpu device" % (device,))


class Session(Feed):
    """A feed session of the custom calls, named by its tag (a str, unique
    among open sessions of the host and the devices). push(*arrays) queues
    an item for infeed; outfeed items go to sink(session, tag, arrays) on the
    session's delivery thread, or wait for pop(timeout). close() (or leaving
    the with block) makes a program waiting on the session fail instead of
    hang; so does an infeed that waits past its timeout.

    device: where the programs that use it run (session_ordinal says how it
    is read; None: JAX's default device). A CUDA device's session is on that
    device's actor (gpa_xla_cuda_session_open): the CUDA feed calls move
    XLA's device buffers to and from it; a program on another device, or on
    the host, fails naming the attribute 'session'. self.device: the CUDA
    ordinal, or None for the host."""

    def __init__(self, tag, sink=None, outfeed_capacity=0, outfeed_policy=0, infeed_capacity=0, device=None):
        self.device = session_ordinal(device)
        self.actor = _HandlersActor(self.device)
        self.name = str(tag)
        self.tag = self.name.encode()
        self.sink = sink
        self.sink_errors = []
        self._tagbuf = ctypes.create_string_buffer(self.tag, len(self.tag) or 1)
        self._cb = L.SINK_FN(self._deliver) if sink else L.SINK_FN()
        opts = L.FeedOptions(size=ctypes.sizeof(L.FeedOptions), tag=ctypes.cast(self._tagbuf, ctypes.c_void_p),
                             tag_len=len(self.tag), sink=self._cb, user_data=None,
                             outfeed_capacity=outfeed_capacity, outfeed_policy=outfeed_policy,
                             infeed_capacity=infeed_capacity)
        p, msg = ctypes.c_void_p(), ctypes.create_string_buffer(256)
        if self.device is None:
            rc = lib.gpa_xla_session_open(ctypes.byref(opts), ctypes.byref(p), msg, len(msg))
        else:
            rc = lib.gpa_xla_cuda_session_open(self.device, ctypes.byref(opts), ctypes.byref(p), msg, len(msg))
        if rc != 0:
            raise RuntimeError("gpuactor.jax: " + msg.value.decode())
        self._ptr = p.value

    def close(self):
        p, self._ptr = getattr(self, "_ptr", None), None
        if p:
            lib.gpa_xla_session_close(p)


def _tag(session):
    return session.name if isinstance(session, Session) else str(session)


def outfeed(session, *xs):
    """Hands xs to the session (host code pops them or its sink gets them);
    returns an s32 scalar to pass to later feed calls as `after`."""
    return jax.ffi.ffi_call("gpuactor_outfeed", _sds((), jnp.int32), has_side_effect=True)(*xs, session=_tag(session))


def infeed(session, shapes, *after, timeout=10.0):
    """The session's next pushed item, as arrays of `shapes` (a
    jax.ShapeDtypeStruct or a sequence of them; dtypes and shapes must match
    what was pushed). after: values it must come after (an outfeed's
    result). Waits up to `timeout` seconds (None: no limit), then fails the
    program with DEADLINE_EXCEEDED."""
    ms = -1 if timeout is None else max(0, int(timeout * 1000))
    single = isinstance(shapes, jax.ShapeDtypeStruct)
    outs = (shapes,) if single else tuple(shapes)
    r = jax.ffi.ffi_call("gpuactor_infeed", outs, has_side_effect=True)(*after, session=_tag(session),
                                                                          timeout_ms=np.int64(ms))
    return r[0] if single else list(r)
