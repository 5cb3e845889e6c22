#!/usr/bin/env python3
"""Where a training step's GPU time goes, from an ncu CSV of kernel durations.

Input: `ncu --nvtx --metrics gpu__time_duration.sum --csv --page raw
--log-file F <program>` (scripts/gpu_check.sh, step `kernels`). ncu runs the
kernels one at a time, so the durations are the kernels' own, without the
gaps a trainer's host work leaves between them.

Output: per message (the NVTX range the actor opens around each message,
when the CSV has it) and kernel: launches per step and microseconds per
step, largest first, and the total a step. Steps: the number given
(--steps); when the ranges are there, the kernels launched before the
first `embedding_fwd` (setup) and after the last optimizer message (the
final held-out evaluation, forward passes only) are left out, so the
figures are the training steps'.
"""
import argparse
import csv
import io
import sys
from collections import defaultdict


def rows_of(path):
    with open(path, newline="") as f:
        text = f.read()
    # ncu's log holds "==PROF==" lines before the table; the table starts
    # at the header row, which names the kernel column
    start = text.find('"ID"')
    if start < 0:
        sys.exit(f"ncu_kernels: no CSV table in {path}")
    rows = list(csv.reader(io.StringIO(text[start:])))
    head, body = rows[0], rows[1:]
    # --page raw puts a units row under the header
    if body and not body[0][0].strip().isdigit():
        body = body[1:]
    return head, body


def column(head, *names):
    for i, h in enumerate(head):
        if any(n in h for n in names):
            return i
    return -1


def range_name(cell):
    # ncu writes the innermost push/pop range as
    #   TID  "<domain>:NAME:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
    # (the header names the fields); NAME is the message the actor ran
    q = cell.find('"')
    if q < 0:
        return cell.strip()
    fields = cell[q + 1:].rstrip().rstrip('"').split(":")
    return fields[1] if len(fields) > 1 else fields[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, required=True, help="training steps the profiled run took")
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    head, body = rows_of(a.csv)
    k_name = column(head, "Kernel Name")
    k_time = column(head, "gpu__time_duration.sum")
    k_nvtx = column(head, "NVTX", "Push/Pop", "thread Domain")
    if k_name < 0 or k_time < 0:
        sys.exit(f"ncu_kernels: no kernel name or duration column in {head}")
    # ranges present: skip the setup before the first step's first message
    started = k_nvtx < 0 or not any(len(r) > k_nvtx and "embedding_fwd" in r[k_nvtx] for r in body)
    # the last optimizer kernel ends the training steps
    last = len(body)
    if k_nvtx >= 0:
        opt = [i for i, r in enumerate(body) if len(r) > k_nvtx and "adamw" in range_name(r[k_nvtx])]
        if opt:
            last = opt[-1] + 1
    per = defaultdict(lambda: [0, 0.0])
    total = 0.0
    for r in body[:last]:
        if len(r) <= max(k_name, k_time, k_nvtx):
            continue
        msg = range_name(r[k_nvtx]) if k_nvtx >= 0 else ""
        if not started:
            if "embedding_fwd" not in msg:
                continue
            started = True
        try:
            ns = float(r[k_time].replace(",", ""))
        except ValueError:
            continue
        key = (msg, r[k_name].split("(")[0])
        per[key][0] += 1
        per[key][1] += ns
        total += ns
    s = a.steps
    print(f"kernels: {sum(v[0] for v in per.values()) / s:.1f} a step, {total / s / 1e3:.1f} us a step "
          f"(sum of kernel durations, {s} steps)")
    print(f"{'us/step':>9} {'n/step':>7}  message / kernel")
    for (msg, name), (n, ns) in sorted(per.items(), key=lambda kv: -kv[1][1])[: a.top]:
        print(f"{ns / s / 1e3:9.1f} {n / s:7.1f}  {msg + ' / ' if msg else ''}{name}")


if __name__ == "__main__":
    main()
