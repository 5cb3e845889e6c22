#!/usr/bin/env python3
"""What gpuactor.torch costs over the same op on gpuactor tensors (docs/benchmarks.md):
each round runs the op each way, alternating, and the ratios are of medians
over rounds. gpuactor.torch adds a cached wrap lookup per tensor and, on
CUDA, its events (docs/bindings.md): no copy.

usage: bench_torch.py [--rounds N] [--shape R C] [--device cpu|cuda] [--breakdown]
(GPA_DEVICE=cpu, or cuda with --device cuda: torch's CUDA tensors; each op
then counts until torch's current stream has seen it finish, as .result()
counts until the actor has; the stream is read once, outside the loop.)
Rows: `ns` through gpuactor.torch; `ref_ns` the op submitted by name on
gpuactor tensors (a Call built each time, as q.submit(name, ...) does;
`overhead_x` = ns / ref_ns); `ref_call_ns` the same with the Call built
once, as run() keeps it (`overhead_call_x`). --breakdown adds one line per
op with the host time of each step of a call alone, in µs (medians over
rounds): the wrap lookups, the Call lookup; on CUDA the stream handle run()
uses (`stream`) beside torch.cuda.current_stream, the event record + stream
wait as run() does them (`stream_record_and_wait`: the driver's calls where
it takes them) beside torch's Event / Stream methods, the posted queue wait,
the posted op (the cached Call, as run() posts it), the record round trip on
an idle queue, and run() without the stream synchronize.
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


def breakdown(a, op, xs, y, args):
    """Each step of a gt.run call timed alone (µs, medians over rounds)."""
    q, ts = a.queue, xs + [y]
    ins, outs = [gt._wrap(a, t, q) for t in xs], [gt._wrap(a, y, q)]
    call = gt._call(op, ins, outs, None)  # the cached Call run() submits
    steps = {"wraps": lambda: [gt._wrap(a, t, q) for t in ts],
             "call_lookup": lambda: gt._call(op, ins, outs, None)}
    if args.device == "cuda":
        index = y.get_device()
        stream = torch.cuda.current_stream(index)
        ev = gt._Events(stream)
        raw = gt._stream(index)
        if raw is not None:
            record_and_wait = lambda: (gt._cu.record(ev.ready_h, raw), gt._cu.wait(raw, ev.done_h, 0))  # noqa: E731
        else:  # what run() does where the driver's path does not apply
            record_and_wait = lambda: (ev.ready.record(stream), stream.wait_event(ev.done))  # noqa: E731
        steps.update({
            "stream": lambda: gt._stream(index),
            "current_stream": lambda: torch.cuda.current_stream(index),
            "stream_record_and_wait": record_and_wait,
            "torch_record_and_wait": lambda: (ev.ready.record(stream), stream.wait_event(ev.done)),
            "queue_wait_posted": lambda: q.wait_event(ev.ready_h, block=False),
            "op_posted": lambda: q.post(call),
            "record_round_trip": lambda: q.record_event(ev.done_h),
            "run_no_sync": lambda: gt.run(a, op, xs, [y]),
        })
    else:
        steps["submit_no_wait"] = lambda: q.submit(call).release()
    rounds = {k: [] for k in steps}
    for _ in range(args.rounds):
        for k, fn in steps.items():
            rounds[k].append(timed(fn, args.reps))
        q.submit("noop").result()  # the posted work done before the next round
        if args.device == "cuda":
            torch.cuda.synchronize()
    out = {k: round(statistics.median(v) * 1e6, 2) for k, v in rounds.items()}
    if args.device == "cuda":
        out["driver_path"] = raw is not None
    return out


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
            gcall = ga.core.Call(op, gxs, [gy])
            ours_call = lambda: q.submit(gcall).result()  # noqa: E731
            if dev == "cuda":
                stream = torch.cuda.current_stream()

                def via_torch():
                    gt.run(a, op, xs, [y])
                    stream.synchronize()
            else:
                via_torch = lambda: gt.run(a, op, xs, [y])  # noqa: E731
            ours(), ours_call(), via_torch()
            r_ours, r_call, r_torch = [], [], []
            for _ in range(args.rounds):
                r_ours.append(timed(ours, args.reps))
                r_call.append(timed(ours_call, args.reps))
                r_torch.append(timed(via_torch, args.reps))
            m_ours, m_call, m_torch = (statistics.median(r) for r in (r_ours, r_call, r_torch))
            print(json.dumps({"name": "torch_" + op, "backend": a.backend, "shape": list(args.shape),
                              "ns": int(m_torch * 1e9), "ref": "same op on gpuactor tensors",
                              "ref_ns": int(m_ours * 1e9), "ratio": round(m_ours / m_torch, 3),
                              "overhead_x": round(m_torch / m_ours, 3), "ref_call_ns": int(m_call * 1e9),
                              "overhead_call_x": round(m_torch / m_call, 3)}))
            if args.breakdown:
                print(json.dumps(dict({"name": "torch_%s_breakdown" % op, "backend": a.backend, "unit": "us"},
                                      **breakdown(a, op, xs, y, args))))


if __name__ == "__main__":
    main()
