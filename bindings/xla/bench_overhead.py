#!/usr/bin/env python3
"""Host time a gpuactor handler adds per custom call, against a handler that
does nothing (gpuactor_nothing), on the platform JAX runs the program on:
cpu (JAX_PLATFORMS=cpu) or, with a CUDA JAX on a GPU, CUDA (the CUDA
handlers: events on XLA's stream and one round trip to the device's actor
per call; the chain's device work is 200 tiny kernels, far less than the
host's part).

One jitted function chains N custom calls on a small f32 vector (each takes
the previous result), so JAX's dispatch is paid once per N calls; the best
time per call (over rounds in which the cases take turns) of a chain of do-nothing handlers is XLA's own cost of a custom
call, and what a gpuactor handler takes beyond it is the figure in
docs/xla.md. Prints one JSON object per case, with the platform.

    PYTHONPATH=bindings/python GPA_LIBRARY=build/libgpuactor.so \\
    GPA_XLA_LIBRARY=build/bindings/xla/libgpuactor_xla.so JAX_PLATFORMS=cpu \\
    build/xla-venv/bin/python bindings/xla/bench_overhead.py

On a GPU: JAX_PLATFORMS=cuda and GPA_DEVICE=cuda (or unset) instead, with a
python whose jax has CUDA (docs/xla.md, "Measurement").
"""
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from gpuactor import jax as gj

CHAIN = 200
ROUNDS, REPEATS = 6, 8  # the cases take turns, so a burst of load elsewhere hits them all alike


def chain(step):
    def f(x):
        for _ in range(CHAIN):
            x = step(x)
        return x
    return jax.jit(f)


def best_us(f, x, best):
    for _ in range(REPEATS):
        t = time.perf_counter()
        f(x).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    n = int(os.environ.get("GPA_BENCH_N", "16"))
    x = jnp.asarray(np.random.default_rng(0).standard_normal(n).astype(np.float32))
    platform = next(iter(x.devices())).platform
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    cases = {
        "nothing": lambda x: jax.ffi.ffi_call("gpuactor_nothing", out)(x),
        "gelu_fwd": lambda x: gj.gelu(x),
        "op:scale": lambda x: gj.op("scale", x, out=out, alpha=1.0),
        "jnp_gelu": lambda x: jax.nn.gelu(x, approximate=False),
    }
    fns = {name: chain(step) for name, step in cases.items()}
    for f in fns.values():
        f(x).block_until_ready()  # compile, and the first wraps
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(ROUNDS):
        for name, f in fns.items():
            best[name] = best_us(f, x, best[name])
    base = best["nothing"] / CHAIN * 1e6
    for name, t in best.items():
        us = t / CHAIN * 1e6
        print(json.dumps({"case": name, "platform": platform, "elements": n, "us_per_call": round(us, 2), "added_us": round(us - base, 2),
                          "wrap_cache": os.environ.get("GPA_XLA_WRAP_CACHE", "1") != "0",
                          "async": os.environ.get("GPA_XLA_ASYNC", "0") == "1"}), flush=True)
    print(json.dumps({"stats": gj.stats()}))


if __name__ == "__main__":
    main()
