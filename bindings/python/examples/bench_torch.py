#!/usr/bin/env python3
"""What gpuactor.torch costs over the same op on gpuactor tensors (docs/benchmarks.md):
each round runs the op both ways, alternating, and the ratio is of medians
over rounds. gpuactor.torch adds a cached wrap lookup per tensor and, on
CUDA, its events (docs/bindings.md): no copy.

usage: bench_torch.py [--rounds N] [--shape R C] [--device cpu|cuda] [--breakdown]
(GPA_DEVICE=cpu, or cuda with --device cuda: torch's CUDA tensors; each op
then counts until torch's current stream has seen it finish, as .result()
counts until the actor has.) --breakdown adds one line per op with the host
time of each step of a call alone, in µs (medians over rounds): the wrap
lookups; on CUDA torch's current_stream, its event record + stream wait,
the posted queue wait, the posted op, the record round trip on an idle
queue, and run() without the stream synchronize.
"""
import argparse
import json
import statistics
import time

import torch

import gpuactor as ga
import gpuactor.torch as gt


def timed(fn, reps):
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def breakdown(a, op, xs, y, gxs, gy, args):
    """Each step of a gt.run call timed alone (µs, medians over rounds)."""
    q, ts = a.queue, xs + [y]
    steps = {"wraps": lambda: [gt._wrap(a, t, q) for t in ts]}
    if args.device == "cuda":
        dev = y.device
        stream = torch.cuda.current_stream(dev)
        ev = gt._Events(stream)
        steps.update({
            "current_stream": lambda: torch.cuda.current_stream(dev),
            "torch_record_and_wait": lambda: (ev.ready.record(stream), stream.wait_event(ev.done)),
            "queue_wait_posted": lambda: q.wait_event(ev.ready_h, block=False),
            "op_posted": lambda: q.post(op, gxs, [gy]),
            "record_round_trip": lambda: q.record_event(ev.done_h),
            "run_no_sync": lambda: gt.run(a, op, xs, [y]),
        })
    else:
        steps["submit_no_wait"] = lambda: q.submit(op, gxs, [gy]).release()
    rounds = {k: [] for k in steps}
    for _ in range(args.rounds):
        for k, fn in steps.items():
            rounds[k].append(timed(fn, args.reps))
        q.submit("noop").result()  # the posted work done before the next round
        if args.device == "cuda":
            torch.cuda.synchronize()
    return {k: round(statistics.median(v) * 1e6, 2) for k, v in rounds.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--shape", type=int, nargs=2, default=(1024, 1024))
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--breakdown", action="store_true")
    args = ap.parse_args()
    dev = args.device
    with ga.Actor(threads=2) as a:
        for op in ("gelu_fwd", "add"):
            n_in = 2 if op == "add" else 1
            xs = [torch.randn(*args.shape, device=dev) for _ in range(n_in)]
            y = torch.empty(*args.shape, device=dev)
            gxs = [a.from_numpy(x.cpu().numpy()) for x in xs]
            gy = a.tensor(args.shape)
            q = a.queue
            ours = lambda: q.submit(op, gxs, [gy]).result()  # noqa: E731
            if dev == "cuda":
                def via_torch():
                    gt.run(a, op, xs, [y])
                    torch.cuda.current_stream().synchronize()
            else:
                via_torch = lambda: gt.run(a, op, xs, [y])  # noqa: E731
            ours(), via_torch()
            r_ours, r_torch = [], []
            for _ in range(args.rounds):
                r_ours.append(timed(ours, args.reps))
                r_torch.append(timed(via_torch, args.reps))
            m_ours, m_torch = statistics.median(r_ours), statistics.median(r_torch)
            print(json.dumps({"name": "torch_" + op, "backend": a.backend, "shape": list(args.shape),
                              "ns": int(m_torch * 1e9), "ref": "same op on gpuactor tensors",
                              "ref_ns": int(m_ours * 1e9), "ratio": round(m_ours / m_torch, 3),
                              "overhead_x": round(m_torch / m_ours, 3)}))
            if args.breakdown:
                print(json.dumps(dict({"name": "torch_%s_breakdown" % op, "backend": a.backend, "unit": "us"},
                                      **breakdown(a, op, xs, y, gxs, gy, args))))


if __name__ == "__main__":
    main()
