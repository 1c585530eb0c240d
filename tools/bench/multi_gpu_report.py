#!/usr/bin/env python3
"""Summarizes tools/bench/multi_gpu.sh's results (issue 9).

  multi_gpu_report.py min-bytes COMM_JSON
      The compression.min_bytes that the comm benchmark supports: the smallest message size from
      which taco's all_reduce is faster than NCCL's bf16 one at that size and every larger size
      measured (2^62 when it never is: nothing gets compressed).
  multi_gpu_report.py summary OUT [--gpus N]
      Reads OUT/comm-*.json and OUT/runs/*/metrics.jsonl; writes OUT/summary.json and
      OUT/summary.md (comm speedups per op and size; tokens/s, MFU and communication share of each
      training run against its `none` run; final loss of the parity runs) and prints the markdown.
      With matplotlib, also OUT/parity.png (tools/plot) of the parity runs.
Bad input exits 2 with one line on stderr. compression.min_bytes and the other config keys:
docs/config-reference.md; the metrics.jsonl records it reads: docs/logs-and-metrics.md.
"""
import glob
import json
import os
import re
import statistics
import subprocess
import sys

NEVER = 1 << 62
PEAK_BF16 = 989e12  # H200 dense bf16 FLOP/s (the MFU denominator used in RESULTS.md)


class BadInput(Exception):
    pass


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise BadInput(f"{path}: {e}")


def comm_times(rows, op):
    """{codec: {size: time_us}} for one op."""
    out = {}
    for r in rows:
        if r.get("op") == op:
            out.setdefault(r["codec"], {})[int(r["size_bytes"])] = float(r["time_us"])
    return out


def min_bytes(path):
    rows = read_json(path)
    t = comm_times(rows, "all_reduce")
    if "none" not in t or "taco" not in t:
        raise BadInput(f"{path}: no all_reduce rows for both none and taco")
    sizes = sorted(set(t["none"]) & set(t["taco"]))
    best = NEVER
    for s in reversed(sizes):  # from the largest down, while taco keeps winning
        if t["taco"][s] < t["none"][s]:
            best = s
        else:
            break
    return best


def metrics(path):
    steps, evals = [], []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except ValueError as e:
                raise BadInput(f"{path}: {e}")
            if "loss" in r and "ms" in r:
                steps.append(r)
            elif "val_loss" in r:
                evals.append(r)
    return steps, evals


def model_shape(run_dir):
    """(n_layer, d_model, seq_len, vocab) from the run's saved config.yaml."""
    text = open(os.path.join(run_dir, "config.yaml")).read()
    def key(name):
        m = re.search(rf"\b{name}:\s*(\d+)", text)
        if not m:
            raise BadInput(f"{run_dir}/config.yaml: no {name}")
        return int(m.group(1))
    return key("n_layer"), key("d_model"), key("seq_len"), key("vocab_size")


def flops_per_token(n_layer, d, t, vocab):
    # 6 N for the dense weights (12 L d^2 + vocab d), plus attention's QK^T and PV: 6 L t d
    # (forward 2 L t d with causal halving counted as full, times 3 for forward + backward).
    params = 12 * n_layer * d * d + vocab * d
    return 6 * params + 6 * n_layer * t * d


def run_row(run_dir, gpus):
    steps, evals = metrics(os.path.join(run_dir, "metrics.jsonl"))
    if len(steps) < 3:
        return None
    timed = steps[2:]  # the first two steps warm up
    tok = statistics.median(r["tok_per_s"] for r in timed)
    ms = sum(r["ms"] for r in timed)
    comm = sum(r.get("comm_ms", 0.0) for r in timed)
    L, d, t, v = model_shape(run_dir)
    return {
        "run": os.path.basename(run_dir),
        "tok_per_s": tok,
        "mfu": tok * flops_per_token(L, d, t, v) / (gpus * PEAK_BF16),
        "comm_share": comm / ms if ms > 0 else 0.0,
        "final_loss": steps[-1]["loss"],
        "final_val_loss": evals[-1]["val_loss"] if evals else None,
        "steps": len(steps),
    }


def summary(out, gpus):
    lines, result = [], {"gpus": gpus, "comm": {}, "train": [], "parity": {}}
    for path in sorted(glob.glob(os.path.join(out, "comm-*.json"))):
        link = os.path.basename(path)[len("comm-"):-len(".json")]
        rows = read_json(path)
        result["comm"][link] = rows
        lines.append(f"### comm, {link}, {gpus} ranks (time in us; speedup = none / codec)\n")
        lines.append("| op | size | none | taco | fp8_block | taco speedup | fp8_block speedup |")
        lines.append("|---|---|---|---|---|---|---|")
        for op in ("all_reduce", "reduce_scatter", "all_gather"):
            t = comm_times(rows, op)
            for s in sorted(t.get("none", {})):
                n = t["none"][s]
                c = {k: t.get(k, {}).get(s) for k in ("taco", "fp8_block")}
                cell = lambda v: f"{v:.1f}" if v else "-"
                ratio = lambda v: f"{n / v:.2f}x" if v else "-"
                lines.append(f"| {op} | {s >> 20} MB | {n:.1f} | {cell(c['taco'])} | "
                             f"{cell(c['fp8_block'])} | {ratio(c['taco'])} | "
                             f"{ratio(c['fp8_block'])} |")
        lines.append(f"\ncompression.min_bytes from this crossover: {min_bytes(path)}\n")

    runs = {}
    for run_dir in sorted(glob.glob(os.path.join(out, "runs", "*"))):
        if not os.path.isfile(os.path.join(run_dir, "metrics.jsonl")):
            continue
        row = run_row(run_dir, gpus)
        if row:
            runs[row["run"]] = row
    train = [r for name, r in runs.items() if not name.startswith("parity-")]
    if train:
        lines.append("### training throughput (median tokens/s after 2 warm-up steps)\n")
        lines.append("| run | tokens/s | MFU | comm share | vs none |")
        lines.append("|---|---|---|---|---|")
        for r in train:
            base = runs.get(re.sub(r"-(taco|taco_min)$", "-none", r["run"]))
            r["vs_none"] = r["tok_per_s"] / base["tok_per_s"] if base else None
            vs = f"{r['vs_none']:.3f}x" if r["vs_none"] else "-"
            lines.append(f"| {r['run']} | {r['tok_per_s'] / 1e3:.1f}k | {100 * r['mfu']:.1f}% | "
                         f"{100 * r['comm_share']:.1f}% | {vs} |")
            result["train"].append(r)
        lines.append("")
    if "parity-none" in runs and "parity-taco" in runs:
        a, b = runs["parity-none"], runs["parity-taco"]
        diff = (b["final_loss"] - a["final_loss"]) / a["final_loss"]
        result["parity"] = {"none": a, "taco": b, "final_loss_rel_diff": diff}
        lines.append(f"### loss parity ({a['steps']} steps): none {a['final_loss']:.4f}, taco "
                     f"{b['final_loss']:.4f}, difference {100 * diff:+.2f}%\n")
        plot = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plot")
        subprocess.run([sys.executable, plot, os.path.join(out, "parity.png"),
                        os.path.join(out, "runs", "parity-none"),
                        os.path.join(out, "runs", "parity-taco")], check=False)
    text = "\n".join(lines)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(text)


def main(argv):
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if len(argv) >= 2 and argv[0] == "min-bytes":
        print(min_bytes(argv[1]))
        return 0
    if len(argv) >= 2 and argv[0] == "summary":
        gpus = 1
        if "--gpus" in argv:
            try:
                gpus = int(argv[argv.index("--gpus") + 1])
            except (IndexError, ValueError):
                raise BadInput("--gpus: needs an integer")
        summary(argv[1], gpus)
        return 0
    raise BadInput("usage: multi_gpu_report.py min-bytes COMM_JSON | summary OUT [--gpus N]")


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BadInput as e:
        print(f"multi_gpu_report.py: {e}", file=sys.stderr)
        sys.exit(2)
