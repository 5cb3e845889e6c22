"""Feed sessions as custom calls (gpuactor_infeed / gpuactor_outfeed) in
jitted programs: a loop that outfeeds each step's value and infeeds the
next step's input from Python, two sessions at once, and a closed session, a
timeout, an unknown session and a mismatched item each failing the program
with an error that says so, never hanging it.

A handler's error comes with the program's results, not always from the
call: XLA's CUDA client runs every program asynchronously (the call
returns at once), its cpu client any program of 1000 flops or more. So
each test that expects an error waits for the results (run()), and the
bad-input cases run both ways on cpu too: as a small program (run inline)
and with `busy` work added (dispatched asynchronously, as on CUDA)."""
import re
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from gpuactor import jax as gj

SPEC = jax.ShapeDtypeStruct((4,), jnp.float32)
W = jnp.ones((16, 16), jnp.float32)  # busy()'s operand


def run(f, *args):
    """f(*args), waiting for the results: where XLA dispatched the program
    asynchronously (CUDA always) its error shows only then."""
    return jax.block_until_ready(f(*args))


def busy(w):
    """8192 flops, enough that XLA's cpu client dispatches the program
    asynchronously, as the CUDA client does every program (its heuristic:
    inline below 1000 flops). A scalar, to add to a feed call's result."""
    return (w @ w).sum() * 0.0


def maybe_busy(f, asynchronous):
    """The program f(), or f() + busy(w) taking w (dispatched asynchronously)."""
    if not asynchronous:
        return jax.jit(f), ()
    return jax.jit(lambda w: f() + busy(w)), (W,)


@pytest.fixture(autouse=True, scope="module")
def last_program_succeeds():
    """JAX keeps the last effectful program's outcome per device and reports
    an error in it at exit; the failing programs above end with one that works."""
    yield
    with gj.Session("settle") as s:
        run(jax.jit(lambda x: gj.outfeed("settle", x)), jnp.zeros(4, jnp.float32))
        s.pop(timeout=10)


def feed_loop(tag, steps):
    def step(carry, _):
        x, ack = carry
        ack = gj.outfeed(tag, x)
        x = gj.infeed(tag, SPEC, ack)
        return (x * 2, ack), None
    return jax.jit(lambda x: lax.scan(step, (x, jnp.int32(0)), None, length=steps)[0][0])


def serve(session, steps, add, seen):
    """The host side of feed_loop: pops each step's value, pushes value + add."""
    def run():
        for _ in range(steps):
            (v,) = session.pop(timeout=20)
            seen.append(float(v[0]))
            session.push(v + add)
    t = threading.Thread(target=run)
    t.start()
    return t


def expected(x0, add, steps):
    vals, x = [], x0
    for _ in range(steps):
        vals.append(x)
        x = 2 * (x + add)
    return vals, x


def test_loop_outfeed_then_infeed():
    with gj.Session("loop") as s:
        seen = []
        t = serve(s, 5, 1.0, seen)
        r = feed_loop("loop", 5)(jnp.zeros(4, jnp.float32))
        t.join()
    vals, last = expected(0.0, 1.0, 5)
    assert seen == vals
    np.testing.assert_array_equal(r, np.full(4, last, np.float32))


def test_two_sessions_at_once():
    """Two programs on two threads, each with its own session and host
    thread: neither sees the other's items."""
    results, seen = {}, {"a": [], "b": []}
    with gj.Session("a") as sa, gj.Session("b") as sb:
        hosts = [serve(sa, 4, 1.0, seen["a"]), serve(sb, 4, 10.0, seen["b"])]

        def prog(tag, x0):
            results[tag] = np.asarray(feed_loop(tag, 4)(jnp.full(4, x0, jnp.float32)))

        progs = [threading.Thread(target=prog, args=("a", 0.0)), threading.Thread(target=prog, args=("b", 5.0))]
        for t in progs:
            t.start()
        for t in progs + hosts:
            t.join()
    for tag, x0, add in (("a", 0.0, 1.0), ("b", 5.0, 10.0)):
        vals, last = expected(x0, add, 4)
        assert seen[tag] == vals, tag
        np.testing.assert_array_equal(results[tag], np.full(4, last, np.float32))


def test_several_tensors_and_a_sink():
    got = []
    with gj.Session("multi", sink=lambda s, tag, arrays: got.append((tag, arrays))) as s:
        s.push(np.arange(4, dtype=np.float32), np.array([7, 8], np.int32))
        f = jax.jit(lambda x: gj.infeed("multi", [SPEC, jax.ShapeDtypeStruct((2,), jnp.int32)],
                                        gj.outfeed("multi", x, x + 1)))
        a, b = f(jnp.ones(4, jnp.float32))
        np.testing.assert_array_equal(a, np.arange(4, dtype=np.float32))
        np.testing.assert_array_equal(b, [7, 8])
        deadline = time.time() + 10
        while not got and time.time() < deadline:
            time.sleep(0.01)
    assert got and got[0][0] == b"multi"
    np.testing.assert_array_equal(got[0][1][0], np.ones(4, np.float32))
    np.testing.assert_array_equal(got[0][1][1], np.full(4, 2, np.float32))


def test_timeout_is_an_error_not_a_hang():
    with gj.Session("slow") as s:
        f = jax.jit(lambda: gj.infeed("slow", SPEC, timeout=0.2)).lower().compile()
        t = time.time()
        with pytest.raises(Exception, match=r"DEADLINE_EXCEEDED.*gpuactor_infeed: session 'slow'.*no item"):
            run(f)
        assert time.time() - t < 5
        # The session still works after it.
        s.push(np.ones(4, np.float32))
        np.testing.assert_array_equal(run(f), np.ones(4, np.float32))


def test_closed_session_is_an_error_not_a_hang():
    s = gj.Session("closing")
    f = jax.jit(lambda: gj.infeed("closing", SPEC, timeout=30.0)).lower().compile()
    err = []
    calls = gj.stats()["calls"]

    def call():
        try:
            run(f)
        except Exception as e:
            err.append(str(e))
    t = threading.Thread(target=call)
    t.start()
    # Until the infeed is submitted (then it is parked, or will be). The host
    # handlers count a call once submitted; the CUDA ones once it returns,
    # which this one does only when the session closes: there, a second.
    deadline = time.time() + (20 if s.device is None else 1)
    while gj.stats()["calls"] == calls and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    s.close()
    t.join(timeout=20)
    assert not t.is_alive()
    assert err and re.search(r"CANCELLED.*session 'closing'.*closed", err[0]), err
    # A closed (or never opened) session: NOT_FOUND at once.
    with pytest.raises(Exception, match=r"NOT_FOUND.*no open session 'closing'"):
        run(f)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_item_that_does_not_match_is_named(asynchronous):
    with gj.Session("mismatch") as s:
        s.push(np.ones(5, np.float32))
        f, args = maybe_busy(lambda: gj.infeed("mismatch", SPEC, timeout=5.0), asynchronous)
        with pytest.raises(Exception, match=r"gpuactor_infeed: session 'mismatch'.*(shape|ESHAPE)"):
            run(f, *args)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_missing_session_attribute(asynchronous):
    f, args = maybe_busy(lambda: jax.ffi.ffi_call("gpuactor_infeed", SPEC, has_side_effect=True)(), asynchronous)
    with pytest.raises(Exception, match=r"gpuactor_infeed: missing attribute 'session'"):
        run(f, *args)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_unknown_session_is_named(asynchronous):
    f, args = maybe_busy(lambda: gj.infeed("nobody", SPEC, timeout=1.0), asynchronous)
    with pytest.raises(Exception, match=r"NOT_FOUND.*gpuactor_infeed: .*no open session 'nobody'"):
        run(f, *args)


def test_errors_come_with_the_results():
    """Why run() waits: a program dispatched asynchronously returns from
    the call without its handler's error (on CUDA, every program; this is
    the H100's 'missing attribute' left for JAX's exit to report); the
    error comes with its results."""
    f, args = maybe_busy(lambda: jax.ffi.ffi_call("gpuactor_infeed", SPEC, has_side_effect=True)(), True)
    r = f(*args)  # no error here: the program runs on XLA's thread
    with pytest.raises(Exception, match=r"gpuactor_infeed: missing attribute 'session'"):
        jax.block_until_ready(r)


def test_session_tags_are_unique():
    with gj.Session("dup"):
        with pytest.raises(RuntimeError, match="open already"):
            gj.Session("dup")

