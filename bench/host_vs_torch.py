"""GEMM-shaped host ops beside PyTorch CPU (issue 26), in one process.

Each row times one op through gpuactor (gpuactor.torch.run on the same
torch tensors: no copies, the op's wait included) and the same op in
PyTorch (F.linear, F.conv1d and their autograd backward: oneDNN / MKL
inside torch), alternately, and prints the medians and the ratio
(PyTorch's time over ours: > 1 is faster). Both sides get the same
threads (GPA_THREADS / torch.set_num_threads). Skips (exit 77) without
torch.

    PYTHONPATH=bindings/python GPA_LIBRARY=build/libgpuactor.so \\
        GPA_DEVICE=cpu python3 bench/host_vs_torch.py [rounds] [mode] [filter]

mode (GPA_BENCH_TORCH_MODE):
  alternate  (default) ours, then PyTorch, then ours, ...: each call starts
             right after the other library's. PyTorch's OpenMP threads keep
             spinning after its call (libgomp's default wait policy, several
             ms), so on a 2-CPU machine the call that follows PyTorch's
             shares the cores with them: this mode charges that to ours.
  settled    the same order with a 50 ms pause before each timed call, so
             each starts with the other library's threads asleep.
  blocks     `rounds` calls of ours, then `rounds` of PyTorch, four times
             over, each block after a 50 ms pause (the other library's
             threads asleep: PyTorch's spin for 5-10 ms, longer than a
             whole block of 1 ms calls); the first call of each block is not
             counted: each side as in a loop that calls only it.
filter: only rows whose name contains it (e.g. conv1d).
GPA_BENCH_TORCH_OUTPUTS=fresh: our side allocates its outputs in each call
(torch.empty), as F.conv1d and F.linear do theirs and as a model's forward
does; the default passes the same output tensors every call. The "outputs"
field says which.
"""
import json
import os
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("host_vs_torch: no torch", file=sys.stderr)
    sys.exit(77)

import gpuactor as ga
import gpuactor.torch as gt

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 7
MODE = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("GPA_BENCH_TORCH_MODE", "alternate")
FILTER = sys.argv[3] if len(sys.argv) > 3 else ""
if MODE not in ("alternate", "settled", "blocks"):
    sys.exit("host_vs_torch: mode must be alternate, settled or blocks")
FRESH = os.environ.get("GPA_BENCH_TORCH_OUTPUTS", "kept") == "fresh"
THREADS = int(os.environ.get("GPA_THREADS", os.cpu_count() or 1))
torch.set_num_threads(THREADS)


def timed(f):
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def best_pair(ours, theirs):
    a, b = [], []
    ours(), theirs()  # warm: wraps, plans, caches
    if MODE == "blocks":
        for _ in range(4):
            time.sleep(0.05)
            a += [timed(ours) for _ in range(ROUNDS + 1)][1:]
            time.sleep(0.05)
            b += [timed(theirs) for _ in range(ROUNDS + 1)][1:]
        return statistics.median(a), statistics.median(b)
    for _ in range(ROUNDS):
        if MODE == "settled":
            time.sleep(0.05)
        a.append(timed(ours))
        if MODE == "settled":
            time.sleep(0.05)
        b.append(timed(theirs))
    return statistics.median(a), statistics.median(b)


def row(name, shape, flops, ours, theirs):
    if FILTER not in name:
        return
    o, t = best_pair(ours, theirs)
    print(json.dumps({"name": name, "backend": "cpu", "mode": MODE, "shape": shape, "ns": round(o * 1e9),
                      "gflops": round(flops / o / 1e9, 1), "ref": "pytorch_cpu_" + torch.__version__,
                      "ref_ns": round(t * 1e9), "ref_gflops": round(flops / t / 1e9, 1),
                      "ratio": round(t / o, 3), "threads": THREADS,
                      "outputs": "fresh" if FRESH else "kept"}), flush=True)


def ours_run(a, op, inputs, outputs, attrs=None):
    """gt.run of op into `outputs`, or (fresh) into new tensors of their shapes."""
    if FRESH:
        return lambda: gt.run(a, op, inputs, [torch.empty(o.shape) for o in outputs], attrs)
    return lambda: gt.run(a, op, inputs, outputs, attrs)


def main():
    a = ga.Actor()
    g = torch.Generator().manual_seed(0)
    # linear fwd: y = x W^T + b
    for (N, IN, OUT) in [(4096, 768, 3072), (1024, 1024, 1024)]:
        x = torch.randn(N, IN, generator=g); W = torch.randn(OUT, IN, generator=g) * 0.03
        b = torch.randn(OUT, generator=g); y = torch.empty(N, OUT)
        row("linear_fwd_vs_torch", f"{N}x{IN}->{OUT}", 2.0 * N * IN * OUT,
            ours_run(a, "linear_fwd", [x, W, b], [y]), lambda: F.linear(x, W, b))
        dy = torch.randn(N, OUT, generator=g); dx = torch.empty(N, IN); dW = torch.empty(OUT, IN)
        db = torch.empty(OUT)
        xr = x.clone().requires_grad_(); Wr = W.clone().requires_grad_(); br = b.clone().requires_grad_()

        def torch_bwd():
            xr.grad = Wr.grad = br.grad = None
            F.linear(xr, Wr, br).backward(dy)
        row("linear_bwd_vs_torch", f"{N}x{IN}->{OUT}", 4.0 * N * IN * OUT,
            ours_run(a, "linear_bwd", [dy, x, W], [dx, dW, db]), torch_bwd)
    # conv1d, causal (left pad (K-1) dilation), fwd and bwd
    for (B, C, L, K, d) in [(8, 256, 1024, 3, 4), (32, 96, 128, 3, 1)]:
        x = torch.randn(B, C, L, generator=g); W = torch.randn(C, C, K, generator=g) * 0.05
        b = torch.randn(C, generator=g); y = torch.empty(B, C, L)
        attrs = {"dilation": d, "causal": 1}
        pad = (K - 1) * d
        flops = 2.0 * B * C * C * K * L
        row("conv1d_fwd_vs_torch", f"B{B}_C{C}_L{L}_K{K}_d{d}_causal", flops,
            ours_run(a, "conv1d_fwd", [x, W, b], [y], attrs),
            lambda: F.conv1d(F.pad(x, (pad, 0)), W, b, dilation=d))
        dy = torch.randn(B, C, L, generator=g); dx = torch.empty(B, C, L); dW = torch.empty(C, C, K)
        db = torch.empty(C)
        xr = x.clone().requires_grad_(); Wr = W.clone().requires_grad_(); br = b.clone().requires_grad_()

        def torch_conv_bwd():
            xr.grad = Wr.grad = br.grad = None
            F.conv1d(F.pad(xr, (pad, 0)), Wr, br, dilation=d).backward(dy)
        row("conv1d_bwd_vs_torch", f"B{B}_C{C}_L{L}_K{K}_d{d}_causal", 2 * flops,
            ours_run(a, "conv1d_bwd", [dy, x, W], [dx, dW, db], attrs), torch_conv_bwd)
    a.close()


if __name__ == "__main__":
    main()
