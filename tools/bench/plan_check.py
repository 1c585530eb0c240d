#!/usr/bin/env python3
"""taco-plan's predictions against measured CPU-rank runs, side by side.

For each layout (TPxPPxDP) and codec: taco-train on CONFIG under mpirun (random tokens, as
tools/bench/train_bench.py makes them), the median ms/step after --warmup from metrics.jsonl;
then `taco-plan CONFIG --cluster CLUSTER --layout L --json` for the same layout and codec.
Prints a markdown table (measured, predicted, error) and writes OUT/plan-check.json.
The planner and its cluster files: docs/planner.md; config keys: docs/config-reference.md.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_bench  # noqa: E402  (shards, metrics reading, the same step statistics)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
        "Cluster files: docs/planner.md; config keys for --set: docs/config-reference.md."))
    p.add_argument("--config", default=os.path.join(REPO, "configs/tiny-cpu.yaml"))
    p.add_argument("--cluster", default=os.path.join(REPO, "configs/clusters/cpu-2core.yaml"))
    p.add_argument("--layouts", default="1x1x1,2x1x1,1x2x1,1x1x2,2x2x1",
                   help="TPxPPxDP list [%(default)s]")
    p.add_argument("--codecs", default="none,taco",
                   help="codecs for layouts with tp > 1 (others run none) [%(default)s]")
    p.add_argument("--steps", type=int, default=22)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--build", default="build-cpu", help="folder with taco-train and taco-plan")
    p.add_argument("--out", default="out/plan-check")
    p.add_argument("--mpirun", default="mpirun")
    return p.parse_args(argv)


def measure(a, layout, codec, data):
    tp, pp, dp = (int(x) for x in layout.split("x"))
    name = f"{layout}-{codec}"
    runs = os.path.abspath(os.path.join(a.out, "runs"))
    cmd = [a.mpirun, "-np", str(tp * pp * dp)]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += ["--oversubscribe", "--bind-to", "none", "-x", "OMP_NUM_THREADS",
            "--mca", "orte_abort_on_non_zero_status", "1",
            os.path.join(a.build, "taco-train"), a.config]
    for kv in [f"parallel.tp={tp}", f"parallel.pp={pp}", f"parallel.dp={dp}",
               f"train.steps={a.steps}", "train.device=cpu", "checkpoint.keep=0",
               f"run.name={name}", f"run.dir={runs}", "log.every=10", "log.eval_every=0",
               "log.eval_batches=1", f"data.train={data[0]}", f"data.val={data[1]}"
               ] + train_bench.CODECS[codec]:
        cmd += ["--set", kv]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"plan_check: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-2000:]}"
                 f"{r.stderr[-2000:]}")
    train, _ = train_bench.read_metrics(os.path.join(runs, name, "metrics.jsonl"))
    times = []
    for rec in train:
        n = len(rec["step_ms"])
        times += [(rec["step"] - n + 1 + i, t) for i, t in enumerate(rec["step_ms"])]
    return statistics.median(t for s, t in times if s > a.warmup), " ".join(cmd)


def predict(a, layout, codec):
    out = os.path.join(a.out, f"plan-{layout}.json")
    subprocess.run([os.path.join(a.build, "taco-plan"), a.config, "--cluster", a.cluster,
                    "--layout", layout, "--json", out], check=True, capture_output=True)
    with open(out) as f:
        preds = json.load(f)["predictions"]
    return next(p for p in preds if p["policy"] == codec)


def main(argv):
    a = parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    model = train_bench.Model(a.config)
    data = train_bench.random_shards(a.out, model, 1234)
    rows = []
    for layout in a.layouts.split(","):
        tp = int(layout.split("x")[0])
        for codec in (a.codecs.split(",") if tp > 1 else ["none"]):
            ms, cmd = measure(a, layout, codec, data)
            p = predict(a, layout, codec)
            rows.append({"layout": layout, "codec": codec, "measured_ms": ms,
                         "predicted_ms": p["step_ms"], "error": p["step_ms"] / ms - 1,
                         "prediction": p, "command": cmd})
            print(f"{layout} {codec}: measured {ms:.1f} ms, predicted {p['step_ms']:.1f} ms "
                  f"({100 * rows[-1]['error']:+.1f}%)", flush=True)
    print("\n| layout | codec | measured ms/step | predicted | error |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['layout']} | {r['codec']} | {r['measured_ms']:.1f} | "
              f"{r['predicted_ms']:.1f} | {100 * r['error']:+.1f}% |")
    with open(os.path.join(a.out, "plan-check.json"), "w") as f:
        json.dump({"tool": "tools/bench/plan_check.py", "argv": argv, "config": a.config,
                   "cluster": a.cluster, "load_average": os.getloadavg(), "rows": rows}, f,
                  indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
