#!/usr/bin/env python3
"""Our library's instructions in a callgrind dump, the simulated driver's
left out (issue 24; bench/msg_callgrind.sh runs it).

Counted: the inclusive cost of the entry functions given (the producer's
API calls, the actor's mailbox drain, completions and the backend's
flush/reap/park/poll), less every call from a function reachable from them
into a simulated library (libgpa_sim_*: the emulated driver, cuBLAS,
cuDNN): our code and its libc calls, not the emulator's work. The waits
(await's spin, the actor's idle loop) are outside the entries: they spin
for a time, not a count.

Usage: msg_callgrind.py DUMP ENTRY [ENTRY...]; prints the instructions
and the calls into the simulator (the driver calls a real GPU would pay).
With -v, the calls into the simulator that were subtracted, largest first.
"""
import collections
import re
import sys


def parse(path):
    """fn key -> self cost; (caller, callee) -> inclusive call cost. Keys are
    (object, function name). Expects --compress-strings=no --compress-pos=no."""
    self_cost = collections.Counter()
    calls = collections.Counter()
    ncalls = collections.Counter()
    ob = fn = cob = cfn = None
    pending = False  # the next cost line is a call's
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            if line.startswith("ob="):
                ob = line[3:]
            elif line.startswith("fn="):
                fn = (ob, line[3:])
                cob = None
            elif line.startswith("cob="):
                cob = line[4:]
            elif line.startswith("cfn="):
                cfn = (cob if cob is not None else ob, line[4:])
            elif line.startswith("calls="):
                pending = True
                ncalls[(fn, cfn)] += int(line[6:].split()[0])
            elif line[0].isdigit() or line[0] in "+-*":
                parts = line.split()
                cost = int(parts[1]) if len(parts) > 1 else 0
                if pending:
                    calls[(fn, cfn)] += cost
                    pending = False
                    cob = None
                elif fn is not None:
                    self_cost[fn] += cost
            elif line.startswith(("cfi=", "cfl=", "fl=", "fi=", "fe=")):
                continue
    return self_cost, calls, ncalls


def main():
    args = sys.argv[1:]
    verbose = args and args[0] == "-v"
    if verbose:
        args = args[1:]
    dump, entries = args[0], set(args[1:])
    self_cost, calls, ncalls = parse(dump)
    sim = re.compile(r"libgpa_sim_")
    out = collections.defaultdict(list)
    for (a, b), c in calls.items():
        out[a].append((b, c))
    is_sim = lambda k: bool(k[0] and sim.search(k[0]))
    roots = [k for k in set(self_cost) | set(out) if k[1] in entries and not is_sim(k)]
    total = 0
    for r in roots:
        total += self_cost[r] + sum(c for _, c in out[r])
    # functions reachable from the entries without passing through the simulator
    seen, stack = set(roots), list(roots)
    while stack:
        f = stack.pop()
        for g, _ in out[f]:
            if g not in seen and not is_sim(g):
                seen.add(g)
                stack.append(g)
    cut = collections.Counter()
    driver = collections.Counter()  # calls into the simulator, by callee
    for f in seen:
        for g, c in out[f]:
            if is_sim(g):
                cut[(f[1], g[1])] += c
                driver[g[1]] += ncalls[(f, g)]
    print(total - sum(cut.values()), sum(driver.values()))
    if verbose:
        for (f, g), c in cut.most_common(15):
            print(f"  {c:>12} {f} -> {g}", file=sys.stderr)
        for g, n in driver.most_common():
            print(f"  {n:>12} calls of {g}", file=sys.stderr)
        # where ours goes: our own functions' self cost, and the calls
        # from them into other libraries (libc, ...), inclusive
        own = lambda k: k[0] == roots[0][0]
        where = collections.Counter()
        for f in seen:
            if own(f):
                where[f[1]] += self_cost[f]
                for g, c in out[f]:
                    if not own(g) and not is_sim(g):
                        where[f"{f[1]} -> {g[1]}"] += c
        for k, c in where.most_common(40):
            print(f"  {c:>12} {k}", file=sys.stderr)


if __name__ == "__main__":
    main()
