#!/usr/bin/env python3
"""Where the GPU sits idle: steps of a libtaco-cupti-trace.so timeline, with their gaps.

  python3 tools/bench/trace/gpu_gaps.py TRACE [--boundary REGEX] [--steps N] [--top N]

A step runs from the end of one run of boundary operations (default: the AdamW kernel, the
last op of a training step) to the end of the next. For each of the last --steps steps it
prints the wall time, the idle time (no kernel, copy or memset running) and its gaps, largest
first with the operations on either side, the idle time by the operation that followed, and the
busy time by operation. Bad input: one line on stderr, exit 2.
"""
import argparse
import collections
import re
import sys


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(2)


def short(name):
    name = name.replace("(anonymous namespace)::", "")
    if name.startswith("void "):
        name = name[5:]
    return re.sub(r"\(.*", "", name)[-90:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--boundary", default="adamw", help="regex naming a step's last operation")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()

    events = []
    try:
        with open(args.trace) as f:
            for number, line in enumerate(f, 1):
                fields = line.rstrip("\n").split(" ", 3)
                if len(fields) != 4 or fields[2] not in ("K", "C", "S"):
                    fail(f"{args.trace}:{number}: expected '<start> <end> <K|C|S> <name>', the "
                         "format libtaco-cupti-trace.so writes")
                events.append((int(fields[0]), int(fields[1]), fields[2], fields[3]))
    except (OSError, ValueError) as e:
        fail(f"{args.trace}: cannot read a trace ({e}); write one with libtaco-cupti-trace.so")
    events.sort()
    boundary = re.compile(args.boundary)
    # Index of the last event of each run of consecutive boundary operations.
    ends = [i for i, e in enumerate(events)
            if boundary.search(e[3]) and not (i + 1 < len(events) and boundary.search(events[i + 1][3]))]
    if len(ends) < 2:
        fail(f"{args.trace}: fewer than two steps end in an operation matching "
             f"'{args.boundary}'; name a step's last operation with --boundary")

    for s in range(max(0, len(ends) - 1 - args.steps), len(ends) - 1):
        first, last = ends[s] + 1, ends[s + 1]
        t0 = events[ends[s]][1]
        covered_to, before = t0, events[ends[s]][3]
        gaps, busy = [], collections.defaultdict(float)
        for start, end, _, name in events[first:last + 1]:
            if start > covered_to:
                gaps.append((start - covered_to, short(before), short(name)))
            busy[short(name)] += (end - start) / 1e3
            covered_to, before = max(covered_to, end), name
        wall = (events[last][1] - t0) / 1e3
        idle = sum(g[0] for g in gaps) / 1e3
        print(f"step {s + 1} of the trace: {wall:.1f} us, idle {idle:.1f} us ({100 * idle / wall:.1f}%) "
              f"in {len(gaps)} gaps, {last - first + 1} operations")
        print("  largest gaps:")
        for gap, after, then in sorted(gaps, reverse=True)[:args.top]:
            print(f"    {gap / 1e3:8.1f} us  after {after}  before {then}")
        by_next = collections.defaultdict(lambda: [0, 0.0])
        for gap, _, then in gaps:
            by_next[then][0] += 1
            by_next[then][1] += gap / 1e3
        print("  idle time by the operation that followed:")
        for name, (n, us) in sorted(by_next.items(), key=lambda x: -x[1][1])[:args.top]:
            print(f"    {us:8.1f} us {n:4d}x  {name}")
        print("  busy time by operation:")
        for name, us in sorted(busy.items(), key=lambda x: -x[1])[:2 * args.top]:
            print(f"    {us:8.1f} us  {name}")


if __name__ == "__main__":
    main()
