"""The XLA FFI handlers under jax.jit on the cpu platform (run_tests.py
makes the environment: jax in a venv, GPA_LIBRARY, GPA_XLA_LIBRARY).

Each op against a jax.numpy reference and against the same op through the
plain C API (the ctypes binding, its own actor); gradients of the custom_vjp
ops against jax.grad of the reference; XLA's buffers used in place; bad
input giving an XLA error that names it."""
import os
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gpuactor as ga
from gpuactor import jax as gj

jax.config.update("jax_platforms", "cpu")
RNG = np.random.default_rng(29)
TOL = dict(rtol=2e-5, atol=2e-5)  # f32 against f32 results (vmap, threads)


def rand(*shape):
    return jnp.asarray(RNG.standard_normal(shape).astype(np.float32))


def via_c_api(op, inputs, out_shapes, attrs=None):
    """The op through the plain C API (its own actor), for parity."""
    with ga.Actor(device="cpu") as a:
        ins = [a.from_numpy(np.asarray(x)) for x in inputs]
        outs = [a.tensor(s, ga.dtype_of(np.dtype(d))) for s, d in out_shapes]
        a.queue.submit(op, ins, outs, attrs).result()
        return [t.numpy() for t in outs]


# ---- references --------------------------------------------------------------

def ref_attention(q, k, v, causal, scale=None, lengths=None):
    B, S, H, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    k = jnp.repeat(k, H // Hkv, axis=2)
    v = jnp.repeat(v, H // Hkv, axis=2)
    s = jnp.einsum("bshd,bthd->bhst", q, k) * (scale or 1.0 / np.sqrt(D))
    visible = jnp.ones((B, 1, S, Sk), bool)
    if causal:
        visible &= (jnp.arange(Sk)[None, :] <= jnp.arange(S)[:, None] + Sk - S)[None, None]
    if lengths is not None:
        visible &= (jnp.arange(Sk)[None, None, None, :] < lengths[:, None, None, None])
    p = jax.nn.softmax(jnp.where(visible, s, -jnp.inf), axis=-1)
    return jnp.einsum("bhst,bthd->bshd", p, v)


def ref_layer_norm(x, g, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    return (x - m) / jnp.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + eps) * g + b


# ---- ops ---------------------------------------------------------------------
# Against float64 references with the parity harness's rule (tests/parity/
# harness.h): |got - ref| <= rtol |ref| + rtol 1e-2 max|ref|, rtol 1e-5 for
# outputs and 1e-4 for gradients (the harness's gradient tolerance).
GRAD = 1e-4

def _x64():
    return jax.enable_x64(True) if hasattr(jax, "enable_x64") else jax.experimental.enable_x64()


def ref64(fn, *args):
    """fn on float64 copies of the float arguments (None and integer arrays as they are)."""
    with _x64():
        conv = [a if a is None or not jnp.issubdtype(a.dtype, jnp.floating)
                else jnp.asarray(np.asarray(a, np.float64)) for a in args]
        return jax.tree.map(lambda r: np.asarray(r, np.float64), fn(*conv))


def close(got, ref, rtol=1e-5):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * 1e-2 * np.abs(ref).max())


def close_all(got, refs, rtol=1e-5):
    assert len(got) == len(refs)
    for g, r in zip(got, refs):
        close(g, r, rtol)


@pytest.mark.parametrize("approximate", [False, True])
def test_gelu(approximate):
    x, dy = rand(3, 5, 16), rand(3, 5, 16)
    y = jax.jit(lambda x: gj.gelu(x, approximate))(x)
    close(y, ref64(lambda x: jax.nn.gelu(x, approximate=approximate), x))
    (c,) = via_c_api("gelu_fwd", [x], [(x.shape, np.float32)], {"approximate": int(approximate)})
    np.testing.assert_array_equal(np.asarray(y), c)
    loss = lambda fn: (lambda x, dy: (fn(x) * dy).sum())  # noqa: E731
    g = jax.jit(jax.grad(loss(lambda x: gj.gelu(x, approximate))))(x, dy)
    close(g, ref64(jax.grad(loss(lambda x: jax.nn.gelu(x, approximate=approximate))), x, dy), GRAD)


def test_layer_norm():
    x, g, b, dy = rand(2, 6, 32), rand(32), rand(32), rand(2, 6, 32)
    f = jax.jit(lambda x, g, b: gj.layer_norm(x, g, b, eps=1e-5))
    close(f(x, g, b), ref64(ref_layer_norm, x, g, b))
    y, _, _ = via_c_api("layernorm_fwd", [x.reshape(12, 32), g, b],
                        [((12, 32), np.float32), ((12,), np.float32), ((12,), np.float32)])
    np.testing.assert_array_equal(np.asarray(f(x, g, b)).reshape(12, 32), y)
    loss = lambda fn: (lambda x, g, b, dy: (fn(x, g, b) * dy).sum())  # noqa: E731
    got = jax.jit(jax.grad(loss(gj.layer_norm), argnums=(0, 1, 2)))(x, g, b, dy)
    close_all(got, ref64(jax.grad(loss(ref_layer_norm), argnums=(0, 1, 2)), x, g, b, dy), GRAD)


@pytest.mark.parametrize("bias,gelu", [(True, False), (False, False), (True, True), (False, True)])
def test_linear(bias, gelu):
    x, W, dy = rand(4, 3, 24), rand(10, 24), rand(4, 3, 10)
    b = rand(10) if bias else None

    def ref(x, W, b):
        y = x @ W.T + (0 if b is None else b)
        return jax.nn.gelu(y, approximate=True) if gelu else y

    ours = lambda x, W, b: gj.linear(x, W, b, gelu=gelu)  # noqa: E731
    close(jax.jit(ours)(x, W, b), ref64(ref, x, W, b))
    argnums = (0, 1, 2) if bias else (0, 1)
    loss = lambda fn: (lambda x, W, b, dy: (fn(x, W, b) * dy).sum())  # noqa: E731
    got = jax.jit(jax.grad(loss(ours), argnums=argnums))(x, W, b, dy)
    close_all(got, ref64(jax.grad(loss(ref), argnums=argnums), x, W, b, dy), GRAD)


@pytest.mark.parametrize("causal,S,Sk,H,Hkv", [(False, 7, 7, 4, 4), (True, 7, 7, 4, 2), (True, 5, 9, 4, 1)])
def test_attention(causal, S, Sk, H, Hkv):
    q, k, v, do = rand(2, S, H, 16), rand(2, Sk, Hkv, 16), rand(2, Sk, Hkv, 16), rand(2, S, H, 16)
    o = jax.jit(lambda q, k, v: gj.attention(q, k, v, causal=causal))(q, k, v)
    close(o, ref64(lambda q, k, v: ref_attention(q, k, v, causal), q, k, v))
    c, _ = via_c_api("attention_fwd", [q, k, v], [(q.shape, np.float32), ((2, H, S), np.float32)],
                     {"causal": int(causal)})
    np.testing.assert_array_equal(np.asarray(o), c)
    loss = lambda fn: (lambda q, k, v, do: (fn(q, k, v, causal) * do).sum())  # noqa: E731
    ours = loss(lambda q, k, v, c: gj.attention(q, k, v, causal=c))
    got = jax.jit(jax.grad(ours, argnums=(0, 1, 2)))(q, k, v, do)
    close_all(got, ref64(jax.grad(loss(ref_attention), argnums=(0, 1, 2)), q, k, v, do), GRAD)


def test_attention_lengths_and_scale():
    q, k, v = rand(3, 6, 2, 8), rand(3, 6, 2, 8), rand(3, 6, 2, 8)
    lengths = jnp.asarray([6, 3, 1], jnp.int32)
    o = jax.jit(lambda q, k, v, n: gj.attention(q, k, v, scale=0.2, lengths=n))(q, k, v, lengths)
    close(o, ref64(lambda q, k, v, n: ref_attention(q, k, v, False, 0.2, n), q, k, v, lengths))
    g = jax.grad(lambda q: gj.attention(q, k, v, scale=0.2, lengths=lengths).sum())(q)
    close(g, ref64(jax.grad(lambda q, k, v, n: ref_attention(q, k, v, False, 0.2, n).sum()), q, k, v, lengths),
          GRAD)


def test_generic_op():
    a, b = rand(5, 7), rand(5, 7)
    out = jax.ShapeDtypeStruct(a.shape, jnp.float32)
    f = jax.jit(lambda a, b: gj.op("add", gj.op("scale", a, out=out, alpha=2.5), b, out=out))
    np.testing.assert_allclose(f(a, b), 2.5 * a + b, **TOL)
    (y,) = jax.jit(lambda: gj.op("fill", out=[out], value=3.0))()
    np.testing.assert_array_equal(y, np.full(a.shape, 3.0, np.float32))


def test_bf16_attention():
    q = rand(1, 4, 2, 8).astype(jnp.bfloat16)
    o = jax.jit(lambda q: gj.attention(q, q, q, causal=True))(q)
    assert o.dtype == jnp.bfloat16
    r = ref_attention(q.astype(jnp.float32), q.astype(jnp.float32), q.astype(jnp.float32), True)
    np.testing.assert_allclose(o.astype(jnp.float32), r, rtol=2e-2, atol=2e-2)


# ---- in place ------------------------------------------------------------------

def address(x):
    return x.unsafe_buffer_pointer()


def test_buffers_used_in_place():
    """xla_probe's implementation writes the addresses it runs on; they must be
    XLA's own: the parameters' and the result's."""
    x, y = rand(64), rand(8, 8)
    before = gj.stats()
    f = jax.jit(lambda x, y: gj.op("xla_probe", x, y, out=jax.ShapeDtypeStruct((3, 2), jnp.int32)))
    p = f(x, y)
    seen = [(int(lo) & 0xFFFFFFFF) | (int(hi) & 0xFFFFFFFF) << 32 for lo, hi in np.asarray(p)]
    assert seen == [address(x), address(y), address(p)]
    # The same call again finds its wraps cached: no new wrap, no copy.
    f(x, y).block_until_ready()
    after = gj.stats()
    assert after["calls"] - before["calls"] == 2
    assert after["wrap_hits"] >= before["wrap_hits"] + 2
    assert after["bytes_uploaded"] == 0 and after["bytes_read_back"] == 0


def test_no_copies_through_the_actor():
    """Across every op of this suite the actor copied nothing in or out."""
    x = rand(4, 32)
    jax.jit(lambda x: gj.gelu(gj.layer_norm(x, jnp.ones(32), jnp.zeros(32))))(x).block_until_ready()
    s = gj.stats()
    assert s["calls"] > 0 and s["bytes_uploaded"] == 0 and s["bytes_read_back"] == 0, s


def test_threads():
    """Several Python threads running jitted calls at once share the actor."""
    f = jax.jit(lambda x: gj.gelu(x) + 1.0)
    xs = [rand(32, 16) for _ in range(4)]
    want = [np.asarray(jax.nn.gelu(x, approximate=False) + 1.0) for x in xs]
    bad = []

    def run(i):
        for _ in range(20):
            if not np.allclose(f(xs[i]), want[i], **TOL):
                bad.append(i)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not bad


# ---- bad input ---------------------------------------------------------------

def raw(target, outs, *args, **attrs):
    """The call, waited for: an error comes with the results where XLA
    dispatches asynchronously (test_feed.py, run())."""
    return jax.block_until_ready(jax.jit(lambda *a: jax.ffi.ffi_call(target, outs)(*a, **attrs))(*args))


def test_wrong_dtype_is_named():
    x = jnp.ones((4, 4), jnp.int16)
    with pytest.raises(Exception, match=r"gpuactor_gelu_fwd: x has dtype s16"):
        raw("gpuactor_gelu_fwd", jax.ShapeDtypeStruct((4, 4), jnp.int16), x)
    # A dtype gpuactor has but the op does not take: the op's own check names it.
    xi = jnp.ones((4, 4), jnp.int32)
    with pytest.raises(Exception, match=r"gpuactor_gelu_fwd: gelu_fwd: x .*(f32|dtype)"):
        raw("gpuactor_gelu_fwd", jax.ShapeDtypeStruct((4, 4), jnp.int32), xi)


def test_wrong_rank_is_named():
    x, g = rand(2, 3, 8), rand(8)
    outs = (jax.ShapeDtypeStruct((6, 8), jnp.float32), jax.ShapeDtypeStruct((6,), jnp.float32),
            jax.ShapeDtypeStruct((6,), jnp.float32))
    with pytest.raises(Exception, match=r"gpuactor_layernorm_fwd: x has rank 3, not 2"):
        raw("gpuactor_layernorm_fwd", outs, x, g, g)
    q = rand(2, 4, 2, 8)
    bad_k = rand(2, 4, 16)
    outs = (jax.ShapeDtypeStruct(q.shape, jnp.float32), jax.ShapeDtypeStruct((2, 2, 4), jnp.float32))
    with pytest.raises(Exception, match=r"gpuactor_attention_fwd: k has rank 3, not 4"):
        raw("gpuactor_attention_fwd", outs, q, bad_k, q, causal=np.int32(0))


def test_shape_mismatch_is_named():
    q, k = rand(2, 4, 3, 8), rand(2, 4, 2, 8)
    outs = (jax.ShapeDtypeStruct(q.shape, jnp.float32), jax.ShapeDtypeStruct((2, 3, 4), jnp.float32))
    with pytest.raises(Exception, match=r"gpuactor_attention_fwd: attention_fwd: k has 2 heads"):
        raw("gpuactor_attention_fwd", outs, q, k, k, causal=np.int32(0))


def test_unknown_op_is_named():
    out = jax.ShapeDtypeStruct((4,), jnp.float32)
    with pytest.raises(Exception, match=r"no_such_op"):
        jax.block_until_ready(jax.jit(lambda x: gj.op("no_such_op", x, out=out))(rand(4)))


def test_missing_attribute_is_named():
    q = rand(1, 4, 2, 8)
    outs = (jax.ShapeDtypeStruct(q.shape, jnp.float32), jax.ShapeDtypeStruct((1, 2, 4), jnp.float32))
    with pytest.raises(Exception, match=r"gpuactor_attention_fwd: missing attribute 'causal'"):
        raw("gpuactor_attention_fwd", outs, q, q, q)
    with pytest.raises(Exception, match=r"gpuactor_op: missing attribute 'op'"):
        raw("gpuactor_op", jax.ShapeDtypeStruct((4,), jnp.float32), rand(4))
    # The op's own required attribute, through the generic handler.
    with pytest.raises(Exception, match=r"gpuactor_op: .*value"):
        jax.block_until_ready(jax.jit(lambda: gj.op("fill", out=jax.ShapeDtypeStruct((4,), jnp.float32)))())
    with pytest.raises(Exception, match=r"gpuactor_gelu_fwd: unknown attribute 'approx'"):
        raw("gpuactor_gelu_fwd", jax.ShapeDtypeStruct((4,), jnp.float32), rand(4), approx=np.int32(1))


def test_errors_leave_the_handlers_working():
    x = rand(8)
    np.testing.assert_allclose(jax.jit(gj.gelu)(x), jax.nn.gelu(x, approximate=False), **TOL)


def test_c_api_registration():
    """What EXLA would do: XLA_FFI_Handler_Register through the C API (here
    with XLA's api pointer as a handler last saw it), under other names;
    the custom calls then find those handlers."""
    import ctypes
    jax.jit(gj.gelu)(rand(4)).block_until_ready()
    gj.lib.gpa_xla_api.restype = ctypes.c_void_p
    reg = gj.lib.gpa_xla_register
    reg.restype = ctypes.c_int
    reg.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64)
    api, msg = gj.lib.gpa_xla_api(), ctypes.create_string_buffer(512)
    assert api
    assert reg(api, b"Host", b"exla_gpa_", msg, len(msg)) == 0, msg.value
    assert reg(api, b"Host", None, msg, len(msg)) == 0, msg.value  # the same again: accepted
    x = rand(3, 8)
    y = jax.jit(lambda x: jax.ffi.ffi_call("exla_gpa_gelu_fwd", jax.ShapeDtypeStruct(x.shape, x.dtype))(x))(x)
    np.testing.assert_allclose(y, jax.nn.gelu(x, approximate=False), **TOL)


def test_ffi_version_handshake():
    """The handlers' FFI version is one this jaxlib takes, as XLA's own API
    table reports its version (XLA has checked the handlers' metadata answer
    at registration: every other test needs that), and the import check
    refuses what XLA would."""
    import ctypes

    class ApiHead(ctypes.Structure):  # XLA_FFI_Api's first fields: struct_size, extension_start, api_version
        _fields_ = [("size", ctypes.c_size_t), ("ext", ctypes.c_void_p), ("vsize", ctypes.c_size_t),
                    ("vext", ctypes.c_void_p), ("major", ctypes.c_int), ("minor", ctypes.c_int)]

    jax.jit(gj.gelu)(rand(4)).block_until_ready()
    gj.lib.gpa_xla_api.restype = ctypes.c_void_p
    head = ApiHead.from_address(gj.lib.gpa_xla_api())
    runtime = (head.major, head.minor)
    assert gj._jaxlib_ffi_version() == runtime  # the header jaxlib ships is its runtime's
    assert gj.ffi_version[0] == runtime[0] and gj.ffi_version <= runtime, (gj.ffi_version, runtime)
    known = {"0.10": (0, 3), "0.11": (0, 4)}  # the releases docs/xla.md names
    rel = ".".join(jax.__version__.split(".")[:2])
    if rel in known:
        assert runtime == known[rel]
    for built, rt in (((0, 3), (0, 3)), ((0, 3), (0, 4)), ((0, 4), (0, 4))):
        gj.check_ffi_version(built, rt)
    for built, rt in (((0, 4), (0, 3)), ((1, 0), (0, 4)), ((0, 3), (1, 0))):
        with pytest.raises(ImportError, match=r"built against XLA FFI %d\.%d" % built):
            gj.check_ffi_version(built, rt)
    gj.check_ffi_version((0, 9), None)  # unknown runtime: XLA's own check stands


def test_runtime_error_is_reported():
    """An op that fails while it runs (not at submit) fails the program: in
    the async mode this goes through the future (GPA_XLA_ASYNC=1 pass)."""
    q = rand(1, 6, 2, 8)
    before = gj.stats()["watched"]
    with pytest.raises(Exception, match=r"gpuactor_attention_fwd: attention_fwd: lengths\[0\] = 100 is outside"):
        jax.jit(lambda q, n: gj.attention(q, q, q, lengths=n))(q, jnp.asarray([100], jnp.int32)).block_until_ready()
    if os.environ.get("GPA_XLA_ASYNC") == "1":  # XLA took a future: the completion thread had the op
        assert gj.stats()["watched"] > before


def _sd(a):
    return jax.ShapeDtypeStruct(a.shape, a.dtype)


def test_backward_handlers_match_the_c_api():
    """The backward handlers (and linear's forward) called directly under jit
    give what the same ops give through the plain C API."""
    close = dict(rtol=1e-6, atol=1e-6)
    x, dy = rand(6, 16), rand(6, 16)
    (got,) = [jax.jit(lambda x, dy: gj._call("gelu_bwd", _sd(x), x, dy, approximate=np.int32(0)))(x, dy)]
    np.testing.assert_allclose(got, via_c_api("gelu_bwd", [x, dy], [(x.shape, np.float32)])[0], **close)

    g, b = rand(16), rand(16)
    _, mean, rstd = jax.jit(lambda x, g, b: gj._ln_fwd_call(x, g, b, 1e-5))(x, g, b)
    got = jax.jit(lambda *a: gj._call("layernorm_bwd", (_sd(x), _sd(g), _sd(g)), *a))(x, dy, g, mean, rstd)
    want = via_c_api("layernorm_bwd", [x, dy, g, mean, rstd], [(x.shape, np.float32), ((16,), np.float32),
                                                                ((16,), np.float32)])
    for a, w in zip(got, want):
        np.testing.assert_allclose(a, w, **close)

    W, bias, dyl = rand(5, 16), rand(5), rand(6, 5)
    y = jax.jit(gj.linear)(x, W, bias)
    np.testing.assert_allclose(y, via_c_api("linear_fwd", [x, W, bias], [((6, 5), np.float32)])[0], **close)
    got = jax.jit(lambda *a: gj._call("linear_bwd", (_sd(x), _sd(W), _sd(bias)), *a))(dyl, x, W)
    want = via_c_api("linear_bwd", [dyl, x, W], [(x.shape, np.float32), (W.shape, np.float32), ((5,), np.float32)])
    for a, w in zip(got, want):
        np.testing.assert_allclose(a, w, **close)

    q, k, v, do = rand(2, 5, 4, 8), rand(2, 7, 2, 8), rand(2, 7, 2, 8), rand(2, 5, 4, 8)
    o, lse = jax.jit(lambda q, k, v: gj._attn_fwd_call(q, k, v, None, True, 0.0))(q, k, v)
    got = jax.jit(lambda *a: gj._call("attention_bwd", (_sd(q), _sd(k), _sd(v)), *a, causal=np.int32(1),
                                      scale=np.float64(0.0)))(do, q, k, v, o, lse)
    want = via_c_api("attention_bwd", [do, q, k, v, o, lse], [(q.shape, np.float32), (k.shape, np.float32),
                                                              (v.shape, np.float32)], {"causal": 1})
    for a, w in zip(got, want):
        np.testing.assert_allclose(a, w, **close)


def test_vmap_runs_the_calls_one_by_one():
    x = rand(3, 4, 8)
    np.testing.assert_allclose(jax.jit(jax.vmap(gj.gelu))(x), jax.nn.gelu(x, approximate=False), **TOL)
    q = rand(2, 1, 5, 2, 8)  # a batch of 2 attention calls
    o = jax.vmap(lambda q: gj.attention(q, q, q, causal=True))(q)
    np.testing.assert_allclose(o[1], ref_attention(q[1], q[1], q[1], True), **TOL)


def test_wrap_cache_evicts_under_threads():
    """More distinct buffers than the cache holds (64), from several threads:
    evicted wraps are released and every result is still right."""
    f = jax.jit(lambda x: gj.gelu(x) * 2.0)
    xs = [rand(64) for _ in range(96)]  # all alive: 96 distinct addresses
    before = gj.stats()["wraps"]
    bad = []

    def run(part):
        for x in xs[part::3]:
            if not np.allclose(f(x), 2.0 * jax.nn.gelu(x, approximate=False), **TOL):
                bad.append(x.shape)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not bad
    assert gj.stats()["wraps"] - before >= 96
