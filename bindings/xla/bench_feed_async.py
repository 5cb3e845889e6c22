"""What a feed call's future buys on XLA's CPU runtime (docs/xla.md).

A jitted program runs an infeed whose item arrives 300 ms after the call
and, independent of it, ~100 ms of XLA's own work (six 700x700 matmuls).
With futures (the default) XLA runs that work while the infeed waits;
with GPA_XLA_FEED_ASYNC=0 the blocking infeed holds XLA's thread and the
work runs after it. Prints both times, best of 3 each.

    PYTHONPATH=bindings/python GPA_LIBRARY=build/libgpuactor.so \\
    GPA_XLA_LIBRARY=build/bindings/xla/libgpuactor_xla.so JAX_PLATFORMS=cpu \\
    build/xla-venv/bin/python bindings/xla/bench_feed_async.py   # and again with GPA_XLA_FEED_ASYNC=0
"""
import os
import threading
import time

import jax
import jax.numpy as jnp

from gpuactor import jax as gj

SPEC = jax.ShapeDtypeStruct((4,), jnp.float32)


def heavy(m):
    for _ in range(6):
        m = jnp.tanh(m @ m)
    return m


def main():
    m = jnp.ones((700, 700), jnp.float32) * 1e-3
    alone = jax.jit(heavy)
    f = jax.jit(lambda a, m: (gj.infeed("bench", SPEC, a, timeout=10.0) + 1, heavy(m)))
    with gj.Session("bench") as s:
        s.push(jnp.zeros(4, jnp.float32))
        jax.block_until_ready(f(jnp.int32(0), m))
        jax.block_until_ready(alone(m))
        t_alone = t_both = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            jax.block_until_ready(alone(m))
            t_alone = min(t_alone, time.perf_counter() - t0)
            timer = threading.Timer(0.3, lambda: s.push(jnp.ones(4, jnp.float32)))
            timer.start()
            t0 = time.perf_counter()
            jax.block_until_ready(f(jnp.int32(0), m))
            t_both = min(t_both, time.perf_counter() - t0)
            timer.join()
    mode = "blocking" if os.environ.get("GPA_XLA_FEED_ASYNC") == "0" else "futures"
    print("%s: independent work alone %.0f ms; with an infeed whose item comes at 300 ms: %.0f ms"
          % (mode, 1e3 * t_alone, 1e3 * t_both))


if __name__ == "__main__":
    main()
