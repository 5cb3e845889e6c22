"""What gpuactor.jax registers with JAX, and where its feed sessions live.

Everywhere: the registration table against the library's own tables
(gpa_xla_targets, gpa_xla_cuda_targets: names and function addresses,
the CUDA feed calls included), the platform choice (CUDA only where JAX has
a CUDA backend), how a session's device is read (fake devices), a device
session refused with a clear error where no CUDA actor can be made, and,
where the build has the simulated device, device sessions opened on it
(GPA_DEVICE=sim, in a child process: the variable is read once per
process).

With a CUDA JAX (run this file and test_feed.py without JAX_PLATFORMS=cpu
and without GPA_DEVICE; run_tests.py forces both, so there these skip): a
jitted outfeed/infeed loop on each CUDA device (up to two) with a session
opened on that device, a session of the host named by a CUDA program
failing on attribute 'session', and sessions defaulting to JAX's default
device."""
import ctypes
import os
import subprocess
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpuactor import jax as gj
from test_feed import feed_loop, serve  # the same loop and host side as the host-session tests


class _Target(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("handler", ctypes.c_void_p)]


def library_table(fn):
    f = getattr(gj.lib, fn)
    f.restype = ctypes.POINTER(_Target)
    rows, t = [], f()
    while t[len(rows)].name:
        rows.append((t[len(rows)].name.decode(), t[len(rows)].handler))
    return rows


def address(sym):
    return ctypes.cast(getattr(gj.lib, sym), ctypes.c_void_p).value


def test_registration_table_is_the_library_s():
    host = gj.registrations(False)
    assert {p for _, _, p in host} == {"cpu"}
    assert [(n, address(s)) for n, s, _ in host] == library_table("gpa_xla_targets")
    both = gj.registrations(True)
    assert both[:len(host)] == host
    cuda = both[len(host):]
    assert {p for _, _, p in cuda} == {"CUDA"}
    assert [(n, address(s)) for n, s, _ in cuda] == library_table("gpa_xla_cuda_targets")
    names = [n for n, _, _ in cuda]
    assert "gpuactor_infeed" in names and "gpuactor_outfeed" in names
    assert dict((n, s) for n, s, _ in cuda)["gpuactor_infeed"] == "gpa_xla_cuda_infeed"


def test_cuda_registered_only_with_a_cuda_backend():
    def raises(exc):
        def devices(platform):
            assert platform == "cuda"
            raise exc("Unknown backend cuda")
        return devices

    assert not gj._has_cuda(raises(RuntimeError))
    assert not gj._has_cuda(raises(ValueError))
    assert not gj._has_cuda(lambda p: [])
    assert gj._has_cuda(lambda p: [object()])
    try:
        real = bool(jax.devices("cuda"))
    except (RuntimeError, ValueError):
        real = False
    assert gj.has_cuda == real


def test_session_device_choice():
    cpu = types.SimpleNamespace(platform="cpu", id=0)
    g0 = types.SimpleNamespace(platform="gpu", id=0, local_hardware_id=0)
    g1 = types.SimpleNamespace(platform="gpu", id=1, local_hardware_id=3)  # XLA's ordinal: the hardware id
    rocm = types.SimpleNamespace(platform="gpu", id=2, local_hardware_id=2)  # not one of JAX's CUDA devices
    cuda = [g0, g1]
    o = gj.session_ordinal
    assert o(None, default=lambda: g1, cuda_devices=cuda) == 3
    assert o(None, default=lambda: cpu, cuda_devices=[]) is None
    assert o(g0, cuda_devices=cuda) == 0 and o(g1, cuda_devices=cuda) == 3
    assert o(cpu, cuda_devices=cuda) is None
    assert o("cpu") is None and o("host") is None
    assert o(2) == 2 and o(np.int32(1)) == 1 and o("cuda:1") == 1
    for bad in ("tpu", "cuda:x", -1, True, rocm):
        with pytest.raises(ValueError, match="gpuactor.jax"):
            o(bad, cuda_devices=cuda)
    if not gj.has_cuda:  # JAX's default device here is its cpu
        assert o(None) is None


@pytest.mark.skipif(os.environ.get("GPA_DEVICE") != "cpu", reason="needs GPA_DEVICE=cpu (run_tests.py sets it)")
def test_device_session_needs_a_cuda_actor():
    with pytest.raises(RuntimeError, match="the CUDA handlers need a cuda actor, but GPA_DEVICE chose the cpu"):
        gj.Session("nowhere", device=0)
    with gj.Session("nowhere") as s:  # the failed open left nothing behind
        assert s.device is None


SIM_CHILD = r"""
import numpy as np
from gpuactor import jax as gj
s = gj.Session("dev", device=0)
assert s.device == 0 and s.actor._p()
s.push(np.ones(4, np.float32))
for tag, dev, msg in (("dev", 0, "session 'dev' is open already"),
                      ("other", 1, "the simulated device is device 0 only"),
                      ("big", 99, "device ordinal 99 is past")):
    try:
        gj.Session(tag, device=dev)
        raise SystemExit("opened %s on %d" % (tag, dev))
    except RuntimeError as e:
        assert msg in str(e), e
s.close()
gj.Session("dev", device="cuda:0").close()  # closed: the tag is free again
print("sim sessions: ok")
"""


def test_device_sessions_on_the_simulated_device():
    lib = os.environ.get("GPA_LIBRARY", "")
    if not os.path.exists(os.path.join(os.path.dirname(lib), "sim", "libgpa_sim_cuda.so")):
        pytest.skip("this build has no simulated device")
    env = dict(os.environ, GPA_DEVICE="sim", JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, "-c", SIM_CHILD], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    assert r.returncode == 0 and "sim sessions: ok" in r.stdout, r.stdout[-3000:]


# ---- on a CUDA JAX -----------------------------------------------------------

cuda_only = pytest.mark.skipif(not gj.has_cuda, reason="JAX has no CUDA backend here")


@cuda_only
def test_feed_loop_on_each_cuda_device():
    for d in jax.devices("cuda")[:2]:
        tag = "loop%d" % d.id
        with gj.Session(tag, device=d) as s:
            assert s.device == gj.session_ordinal(d)
            seen = []
            t = serve(s, 3, 1.0, seen)
            x = jax.device_put(jnp.zeros(4, jnp.float32), d)
            r = feed_loop(tag, 3)(x)
            t.join()
        assert seen == [0.0, 2.0, 6.0]
        np.testing.assert_array_equal(np.asarray(r), np.full(4, 14.0, np.float32))
        assert r.devices() == {d}


@cuda_only
def test_host_session_named_by_a_cuda_program():
    d = jax.devices("cuda")[0]
    with gj.Session("on_host", device="cpu"):
        x = jax.device_put(jnp.zeros(4, jnp.float32), d)
        with pytest.raises(Exception, match=r"attribute 'session': session 'on_host' is on the host"):
            jax.jit(lambda x: gj.outfeed("on_host", x))(x).block_until_ready()
    # JAX keeps that program's error as the device's last effectful outcome and
    # reports it at exit: end with a program that works (as test_feed.py does).
    with gj.Session("after_error", device=d) as s:
        jax.jit(lambda x: gj.outfeed("after_error", x))(x).block_until_ready()
        s.pop(timeout=10)


@cuda_only
def test_sessions_default_to_jax_s_default_device():
    with gj.Session("default") as s:
        assert s.device == gj.session_ordinal(jax.devices()[0])
