"""gpuactor's attention as an XLA custom call vs jax.nn.dot_product_attention,
in one jitted step each, on the same shapes, on JAX's GPU (issue 29).

    PYTHONPATH=bindings/python GPA_LIBRARY=build/libgpuactor.so \\
    GPA_XLA_LIBRARY=build/bindings/xla/libgpuactor_xla.so python bench/xla_attention_vs_jax.py

Needs jax with a CUDA backend (pip install "jax[cuda12]"); prints
"skipped: ..." and exits 77 elsewhere. For each case: the best time of a
jitted forward (and forward + backward) step over rounds in which the two
implementations take turns, and the largest difference between their
outputs. The host time our handler adds per call is the CUDA row of
docs/xla.md's table: bindings/xla/bench_overhead.py on this machine.
"""
import sys
import time


def skip(why):
    print("skipped: " + why)
    sys.exit(77)


try:
    import jax
    import jax.numpy as jnp
except ImportError as e:
    skip("no jax (%s)" % e)
try:
    if not jax.devices("cuda"):
        skip("JAX has no CUDA device")
except RuntimeError as e:
    skip("JAX has no CUDA backend (%s)" % str(e).splitlines()[0])

from gpuactor import jax as gj  # registers the CUDA handlers once JAX has CUDA

CASES = [  # B, S, H, Hkv, D, dtype, causal
    (4, 1024, 16, 16, 64, jnp.bfloat16, True),
    (4, 2048, 16, 16, 128, jnp.bfloat16, True),
    (2, 4096, 32, 8, 128, jnp.bfloat16, True),
    (4, 1024, 16, 16, 64, jnp.float32, False),
]
ROUNDS, RUNS = 5, 10


def ours(q, k, v, causal):
    return gj.attention(q, k, v, causal=causal)


def theirs(q, k, v, causal):
    return jax.nn.dot_product_attention(q, k, v, is_causal=causal)


def best_time(f, args):
    jax.block_until_ready(f(*args))  # compile, warm (a gradient step returns a tuple)
    t = float("inf")
    for _ in range(RUNS):
        t0 = time.perf_counter()
        out = f(*args)
        jax.block_until_ready(out)
        t = min(t, time.perf_counter() - t0)
    return t


def main():
    print("device: %s; jax %s" % (jax.devices("cuda")[0].device_kind, jax.__version__))
    print("%-34s %12s %12s %12s %12s %10s" % ("case", "ours fwd ms", "jax fwd ms", "ours f+b ms", "jax f+b ms",
                                              "max |diff|"))
    for B, S, H, Hkv, D, dt, causal in CASES:
        key = jax.random.PRNGKey(0)
        kq, kk, kv = jax.random.split(key, 3)
        q = jax.random.normal(kq, (B, S, H, D), jnp.float32).astype(dt)
        k = jax.random.normal(kk, (B, S, Hkv, D), jnp.float32).astype(dt)
        v = jax.random.normal(kv, (B, S, Hkv, D), jnp.float32).astype(dt)
        fwd = {n: jax.jit(lambda q, k, v, f=f: f(q, k, v, causal)) for n, f in (("ours", ours), ("jax", theirs))}
        step = {n: jax.jit(jax.grad(lambda q, k, v, f=f: f(q, k, v, causal).astype(jnp.float32).sum(),
                                    argnums=(0, 1, 2)))
                for n, f in (("ours", ours), ("jax", theirs))}
        diff = float(jnp.max(jnp.abs(fwd["ours"](q, k, v).astype(jnp.float32) -
                                     fwd["jax"](q, k, v).astype(jnp.float32))))
        t = {}
        for _ in range(ROUNDS):  # the two take turns, so a noisy spell hits both
            for n in ("ours", "jax"):
                t[n, "fwd"] = min(t.get((n, "fwd"), float("inf")), best_time(fwd[n], (q, k, v)))
                t[n, "step"] = min(t.get((n, "step"), float("inf")), best_time(step[n], (q, k, v)))
        name = "B%d S%d H%d/%d D%d %s%s" % (B, S, H, Hkv, D, jnp.dtype(dt).name, " causal" if causal else "")
        print("%-34s %12.3f %12.3f %12.3f %12.3f %10.2e" % (name, 1e3 * t["ours", "fwd"], 1e3 * t["jax", "fwd"],
                                                          1e3 * t["ours", "step"], 1e3 * t["jax", "step"], diff))
    s = gj.stats()
    print("handler calls %d, completed %d, deferred errors %d" % (s["calls"], s["watched_done"],
                                                                  s["deferred_errors"]))


if __name__ == "__main__":
    main()
