#!/usr/bin/env python3
"""taco-plan's predicted speedup of taco over none against the tensor-parallel link's bandwidth.

Reads the JSON of `taco-plan CONFIG --cluster FILE --sweep GBPS,... --json FILE.json` and draws
one line per layout (speedup = none's predicted step / taco's) against the intra-node link's
bandwidth in GB/s; without matplotlib (python3-matplotlib) it prints the same numbers as a table.
The planner, its cluster files and the sweep: docs/planner.md; config keys:
docs/config-reference.md.
"""
import argparse
import json
import sys


def main(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("json", help="taco-plan --json output with a --sweep")
    p.add_argument("png", nargs="?", help="picture to write (omit: print a table)")
    p.add_argument("--layouts", type=int, default=6, help="most layouts drawn [%(default)s]")
    a = p.parse_args(argv)
    with open(a.json) as f:
        plan = json.load(f)
    lines = {}
    for point in plan.get("sweep", []):
        lines.setdefault(point["layout"], []).append((point["bandwidth_GBps"], point["speedup"]))
    if not lines:
        sys.exit(f"plan_plot: {a.json} holds no sweep; run taco-plan with --sweep GBPS,...")
    # The layouts taco helps most at the slowest bandwidth first.
    names = sorted(lines, key=lambda n: -min(lines[n])[1])[:a.layouts]
    if not a.png:
        for name in names:
            print(name + ": " + ", ".join(f"{bw:g} GB/s {s:.2f}x" for bw, s in sorted(lines[name])))
        return 0
    try:
        import matplotlib
    except ImportError:
        sys.exit("plan_plot: matplotlib not found; install python3-matplotlib, or omit PNG")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in names:
        points = sorted(lines[name])
        ax.plot([bw for bw, _ in points], [s for _, s in points], marker="o", label=name)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel(f"{plan.get('sweep_link', 'link')} bandwidth (GB/s per rank)")
    ax.set_ylabel("predicted step speedup, taco over none")
    ax.set_title(f"{plan.get('config', '')} on {plan.get('cluster_name', '')}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.png, dpi=120)
    print(f"wrote {a.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
