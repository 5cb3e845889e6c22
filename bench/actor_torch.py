"""PyTorch's figures for gpa-bench cuda_actor (bench/bench_cuda_actor.c runs
it when GPA_BENCH_ACTOR_TORCH names this file).

    python3 actor_torch.py N OPS ITERS

The same tiny op as the bench: an add of N f32 into a preallocated output.
Prints "name value" lines (microseconds, host wall time):
  eager_us     OPS torch.add(out=) launches then one synchronize, per op
               (best of 5 after a warm-up)
  graph_us     the same OPS launches captured once in a torch.cuda.CUDAGraph,
               replayed: per op
  sync_p50_us  one add + torch.cuda.synchronize, median of ITERS
  sync_p99_us  its 99th percentile
Prints nothing when torch or CUDA is missing."""
import sys
import time

from torch_cuda import cuda_torch


def main():
    torch = cuda_torch()
    if torch is None:
        return
    n, ops, iters = map(int, sys.argv[1:4])
    a = torch.full((n,), 0.25, device="cuda")
    b = torch.full((n,), 0.5, device="cuda")
    y = torch.empty(n, device="cuda")

    def stream():
        for _ in range(ops):
            torch.add(a, b, out=y)

    def best(fn, reps=5):
        fn()
        torch.cuda.synchronize()
        t = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            t.append(time.perf_counter() - t0)
        return min(t)

    print(f"eager_us {best(stream) / ops * 1e6:.3f}", flush=True)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up on a side stream before capture
        stream()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        stream()
    print(f"graph_us {best(g.replay) / ops * 1e6:.3f}", flush=True)

    v = []
    for i in range(iters + 50):
        t0 = time.perf_counter()
        torch.add(a, b, out=y)
        torch.cuda.synchronize()
        if i >= 50:
            v.append(time.perf_counter() - t0)
    v.sort()
    print(f"sync_p50_us {v[len(v) // 2] * 1e6:.3f}", flush=True)
    print(f"sync_p99_us {v[len(v) * 99 // 100] * 1e6:.3f}", flush=True)


if __name__ == "__main__":
    main()
