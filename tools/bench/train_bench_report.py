"""The table and the plot of tools/bench/train_bench.py (its runs' dicts, or its JSON).

A module that train_bench.py imports, not a command: run train_bench.py, or redraw a plot from
its JSON with `python3 tools/bench/train_bench.py --plot OUT/train_bench.json OUT.png`.
Columns: model, tp, codec; ms/step and tok/s (steady state); comm% (share of the step inside
collectives); codec_ms, wire_ms, stage_ms, comp_ms (a step's breakdown: codec kernels, time on the
wire, host staging copies, compute); wire_MB and logic_MB (bytes per step sent and before
compression); speedup (none's ms/step over this run's); logged (a logged step's time over an
unlogged one's); loss (after the last step); status. The runs' config keys:
docs/config-reference.md; their metrics.jsonl: docs/logs-and-metrics.md.
"""
import os
import subprocess
import sys

DEBIAN_PYTHON = "/usr/bin/python3"  # has python3-matplotlib where tools/setup.sh ran

# Breakdown of a step, bottom to top in the plot.
PARTS = ["compute", "wire", "staging", "codec"]
PART_COLOURS = {"compute": "#4c72b0", "wire": "#dd8452", "staging": "#937860", "codec": "#55a868"}


COLUMNS = [  # header, width, alignment, value
    ("model", 6, "<", lambda r: r["model"]),
    ("tp", 3, ">", lambda r: str(r["tp"])),
    ("codec", 10, "<", lambda r: r["codec"]),
    ("ms/step", 9, ">", lambda r: fmt(r.get("ms_per_step"), ".2f")),
    ("tok/s", 8, ">", lambda r: human(r.get("tok_per_s"))),
    ("comm%", 6, ">", lambda r: fmt(r.get("comm_share"), ".1%")),
    ("codec_ms", 8, ">", lambda r: fmt(part(r, "codec"), ".2f")),
    ("wire_ms", 8, ">", lambda r: fmt(part(r, "wire"), ".2f")),
    ("stage_ms", 8, ">", lambda r: fmt(part(r, "staging"), ".2f")),
    ("comp_ms", 8, ">", lambda r: fmt(part(r, "compute"), ".2f")),
    ("wire_MB", 8, ">", lambda r: fmt(mb(r.get("wire_bytes")), ".2f")),
    ("logic_MB", 8, ">", lambda r: fmt(mb(r.get("logical_bytes")), ".2f")),
    ("speedup", 7, ">", lambda r: fmt(r.get("speedup"), ".3f")),
    ("logged", 6, ">", lambda r: fmt(r.get("logged_ratio"), ".3f")),
    ("loss", 7, ">", lambda r: fmt(r.get("loss"), ".4f")),
    ("status", 6, "<", lambda r: r["status"]),
]


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def mb(value):
    return None if value is None else value / 1e6


def human(value):
    if value is None:
        return "-"
    for div, unit in ((1e6, "M"), (1e3, "k")):
        if value >= div:
            return f"{value / div:.1f}{unit}"
    return f"{value:.0f}"


def part(run, name):
    return (run.get("breakdown_ms") or {}).get(name)


def table(runs, args_line):
    """One row per run, columns aligned (nccl-tests' style: '#' lines are comments)."""
    def row(cells):
        return "  ".join(f"{c:{align}{w}}" for c, (_, w, align, _) in zip(cells, COLUMNS))

    lines = [f"# {args_line}",
             "# ms/step: median after warm-up; *_ms: mean per step over the same steps (wire = "
             "comm - staging - codec,",
             "# comp = step - comm); MB per step; speedup = none's ms/step / ms/step; logged = a "
             "logged step's median time / an unlogged one's; "
             "'-' = not reported", "#",
             "# " + row([h for h, _, _, _ in COLUMNS])]
    lines += ["  " + row([get(r) for _, _, _, get in COLUMNS]) for r in runs]
    missing = sorted({f for r in runs for f in r.get("missing_fields", [])})
    if missing:
        lines.append(f"# this taco-train's metrics.jsonl has no {', '.join(missing)}: those "
                     "columns show '-' (wire_ms then includes them)")
    return "\n".join(lines) + "\n"


def import_pyplot():
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot(report, png):
    """ms/step stacked by the breakdown, one bar per run, grouped by setup (model, tp)."""
    plt = import_pyplot()
    if plt is None:
        return False
    runs = report["runs"]
    setups = []
    for r in runs:
        if (r["model"], r["tp"]) not in setups:
            setups.append((r["model"], r["tp"]))
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(runs) + 2), 4.5))
    x, ticks, labels, centres = 0.0, [], [], []
    drawn, top = set(), 0.0
    unreported = [p for p in ("staging", "codec")
                  if all(part(r, p) is None for r in runs if r["status"] == "ok")]
    names = {p: p for p in PARTS}
    if unreported:  # today's trainer: the wire segment holds them
        names["wire"] = "wire (incl. " + " and ".join(unreported) + ": not reported)"
    for model, tp in setups:
        group = [r for r in runs if (r["model"], r["tp"]) == (model, tp)]
        first = x
        for r in group:
            ticks.append(x)
            labels.append(r["codec"])
            if r["status"] != "ok":
                ax.text(x, 0, "failed", rotation=90, ha="center", va="bottom", fontsize=8)
            else:
                bottom = 0.0
                for name in PARTS:
                    h = part(r, name) or 0.0
                    label = names[name] if name not in drawn | set(unreported) else None
                    drawn.add(name)
                    ax.bar(x, h, 0.8, bottom=bottom, color=PART_COLOURS[name], label=label)
                    bottom += h
                if part(r, "compute") is None:  # no breakdown: the median alone
                    ax.bar(x, r["ms_per_step"], 0.8, color="#bbbbbb")
                ax.plot([x - 0.4, x + 0.4], [r["ms_per_step"]] * 2, color="black", lw=1.5,
                        label="median" if "median" not in drawn else None)
                drawn.add("median")
                top = max(top, bottom, r["ms_per_step"])
                if r.get("speedup"):
                    ax.text(x, max(bottom, r["ms_per_step"]), f"{r['speedup']:.2f}x",
                            ha="center", va="bottom", fontsize=8)
            x += 1.0
        pp = group[0].get("pp", 1)
        label = f"{model} tp={tp}" + (f" pp={pp}" if pp > 1 else "")
        centres.append(((first + x - 1.0) / 2, label))
        x += 0.6
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    for c, text in centres:
        ax.annotate(text, (c, 0), xycoords=("data", "axes fraction"), xytext=(0, -42),
                    textcoords="offset points", ha="center", fontsize=9, weight="bold")
    ax.set_ylabel("ms per step")
    ax.set_ylim(0, 1.12 * top if top > 0 else 1.0)
    device = report.get("device", "?")
    ax.set_title(f"taco-train ms/step ({device}, {report.get('backend', '?')}): stacked mean "
                 "breakdown, line = median", fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return True


def plot_command(json_path, png):
    return f"python3 tools/bench/train_bench.py --plot {json_path} {png}"


def render_plot_elsewhere(script, json_path, png):
    """A python3 first on PATH (pyenv, a venv) may lack Debian's matplotlib: try Debian's."""
    here = os.path.realpath(sys.executable)
    if not os.path.exists(DEBIAN_PYTHON) or here == os.path.realpath(DEBIAN_PYTHON):
        return False
    r = subprocess.run([DEBIAN_PYTHON, os.path.abspath(script), "--plot", json_path, png],
                       capture_output=True, text=True)
    return r.returncode == 0


if __name__ == "__main__":
    print(__doc__.strip())
    sys.exit(0 if sys.argv[1:] in (["-h"], ["--help"]) else 2)
