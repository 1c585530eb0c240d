#!/usr/bin/env python3
"""The training benchmark a researcher runs: taco-train under mpirun, codecs side by side.

For each setup (model x tensor-parallel size) and codec it runs

    mpirun -np TP build/taco-train CONFIG --set parallel.tp=TP --set parallel.backend=mpi ...

on random-token shards it writes itself (or --data-train/--data-val), one micro-batch per step
(B16 x T1024 for the GPT-2 configs), and reads runs/<name>/metrics.jsonl (one record per step
with log.every=1). Per run: the steady-state ms/step (median of the step times after --warmup),
tokens/s, communication share, wire and logical bytes per step, speedup over `none` of the same
setup (none_ms / ms), the loss after --steps, and the breakdown of a step (means over the same
steps): codec kernels, wire (comm - staging - codec), staging copies, compute (step - comm).

Output: a table on stdout (also OUT/train_bench.txt), OUT/train_bench.json with every number
and each run's exact command, and OUT/train_bench.png when matplotlib is importable. Re-render
the plot from the JSON alone with

    python3 tools/bench/train_bench.py --plot OUT/train_bench.json OUT.png

Exit codes: 0 all runs passed, 1 some run failed (its last log lines are printed, the others
still run), 2 bad input (one line: an unknown model or codec, a missing build, a device or
backend that cannot run here). Standard library only; matplotlib only for the plot.
"""
import argparse
import array
import json
import math
import os
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEBIAN_PYTHON = "/usr/bin/python3"  # has python3-matplotlib where tools/setup.sh ran

MODELS = {
    "124m": "configs/gpt2-124m.yaml",
    "350m": "configs/gpt2-350m.yaml",
    "tiny": "configs/tiny-cpu.yaml",  # for CPU tests
}

# codec name -> the --set keys that select it. With dp = pp = 1 the default codec reaches only
# the tensor-parallel sites (attn/mlp in/out, embed, head.in); group auto calibrates G and the
# axis per site over the first step (compression/README.md "Policy").
CODECS = {
    "none": ["compression.default.codec=none"],
    "taco": ["compression.default.codec=taco"],
    "fp8_block": ["compression.default.codec=fp8_block"],
    "fp8_tensor": ["compression.default.codec=fp8_tensor"],
    "taco-auto": ["compression.default.codec=taco", "compression.default.group=auto",
                  "compression.calibrate_steps=1"],
}
DEFAULT_CODECS = "none,taco,fp8_block,taco-auto"

# Files a benchmark run leaves in runs/<name>/ (checkpoint.keep = 0 writes no checkpoint); a
# folder holding anything else is not ours to replace.
RUN_FILES = {"config.yaml", "log.txt", "metrics.jsonl", "calibration.json"}

# Breakdown of a step, bottom to top in the plot.
PARTS = ["compute", "wire", "staging", "codec"]
PART_COLOURS = {"compute": "#4c72b0", "wire": "#dd8452", "staging": "#937860", "codec": "#55a868"}


class BadInput(Exception):
    """Exit 2 with this one line."""


def fail(message):
    raise BadInput(message)


# --- inputs ---------------------------------------------------------------------------------


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, as every other bad input
        fail(message)


def parse_args(argv):
    p = Parser(prog="train_bench.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--tp", default="2,4", help="tensor-parallel sizes [2,4]")
    p.add_argument("--models", default="124m", help="124m,350m (or tiny, or a YAML path) [124m]")
    p.add_argument("--codecs", default=DEFAULT_CODECS, help=f"[{DEFAULT_CODECS}]")
    p.add_argument("--steps", type=int, default=40, help="optimizer steps per run [40]")
    p.add_argument("--warmup", type=int, default=10, help="steps left out of the statistics [10]")
    p.add_argument("--build", default="build", help="build folder holding taco-train [build]")
    p.add_argument("--out", default="train-bench", help="output folder [train-bench]")
    p.add_argument("--device", default="auto", choices=["cpu", "cuda", "auto"])
    p.add_argument("--backend", default="mpi", choices=["mpi", "nccl"],
                   help="parallel.backend: mpi stages device buffers through host memory, so "
                   "several ranks can share one GPU [mpi]")
    p.add_argument("--mpirun", default="mpirun", help="the MPI launcher [mpirun]")
    p.add_argument("--mpirun-args", default="", help="extra mpirun arguments, one string")
    p.add_argument("--data-train", help="real train shards (glob) instead of random tokens")
    p.add_argument("--data-val", help="real val shards (glob), with --data-train")
    p.add_argument("--seed", type=int, default=1234, help="seed of the random-token shards")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per run [1800]")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="one more taco-train --set for every run (repeatable)")
    p.add_argument("--plot", nargs=2, metavar=("JSON", "PNG"),
                   help="only re-render the plot of an earlier run's JSON")
    a = p.parse_args(argv)
    if a.plot:
        return a
    a.tp = int_list(a.tp, "--tp")
    a.models = [m for m in a.models.split(",") if m]
    a.codecs = [c for c in a.codecs.split(",") if c]
    for c in a.codecs:
        if c not in CODECS:
            fail(f"--codecs: unknown codec '{c}' (taco-train runs {', '.join(CODECS)})")
    if len(set(a.codecs)) != len(a.codecs):
        fail("--codecs: a codec is listed twice")
    if not a.models:
        fail("--models: no model given")
    if a.warmup < 0 or a.steps <= a.warmup:
        fail(f"--steps {a.steps} must exceed --warmup {a.warmup} (the statistics use the steps "
             "after warm-up)")
    if bool(a.data_train) != bool(a.data_val):
        fail("--data-train and --data-val go together")
    for kv in a.set:
        if "=" not in kv:
            fail(f"--set {kv}: expected KEY=VALUE")
    return a


def int_list(text, flag):
    try:
        values = [int(v) for v in text.split(",") if v]
    except ValueError:
        fail(f"{flag} {text}: expected integers separated by commas")
    if not values or any(v < 1 for v in values):
        fail(f"{flag} {text}: expected integers >= 1")
    return values


class Model:
    """The sizes of one config that the benchmark needs, read from its flow-style YAML."""

    def __init__(self, name):
        self.name = name
        path = MODELS.get(name)
        if path is None:
            if not name.endswith((".yaml", ".yml")):
                fail(f"--models: unknown model '{name}' (choose from {', '.join(MODELS)}, "
                     "or give a YAML path)")
            path = name
            self.name = os.path.splitext(os.path.basename(name))[0]
        self.config = path if os.path.isabs(path) else os.path.join(REPO, path)
        if not os.path.isfile(self.config):
            fail(f"--models {name}: config {self.config} not found")
        with open(self.config) as f:
            text = f.read()
        for key in ("n_layer", "n_head", "d_model", "seq_len", "vocab_size", "micro_batch_size"):
            m = re.search(rf"\b{key}:\s*(\d+)", text)
            if not m:
                fail(f"{self.config}: no '{key}: N' found; the benchmark reads it from the config")
            setattr(self, key, int(m.group(1)))
        self.tokens_per_step = self.micro_batch_size * self.seq_len  # one micro-batch, dp = 1

    def check_tp(self, tp):
        for key in ("n_head", "d_model"):
            if getattr(self, key) % tp:
                fail(f"--tp {tp}: model {self.name} has {key} = {getattr(self, key)}, which tp "
                     "must divide")


def cmake_cache_has_cuda(build):
    """True/False from the build's CMakeCache.txt; None when there is none to read."""
    path = os.path.join(build, "CMakeCache.txt")
    if not os.path.isfile(path):
        return None
    cache = open(path).read()
    if re.search(r"^TACO_CUDA:\w+=OFF$", cache, re.M):
        return False
    m = re.search(r"^CMAKE_CUDA_COMPILER:\w+=(.*)$", cache, re.M)
    return bool(m and m.group(1).strip() and not m.group(1).endswith("NOTFOUND"))


def gpu_count():
    """GPUs nvidia-smi lists; None when there is no nvidia-smi to ask."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in r.stdout.splitlines() if line.startswith("GPU ")) if r.returncode == 0 else 0


def resolve_device(a):
    cuda_build = cmake_cache_has_cuda(a.build)
    gpus = gpu_count()
    if a.device == "auto":
        a.device = "cuda" if cuda_build is not False and gpus else "cpu"
    if a.device == "cuda":
        if cuda_build is False:
            fail(f"--device cuda: {a.build} was built without CUDA (TACO_CUDA off or no nvcc); "
                 "use --device cpu or a CUDA build")
        if gpus == 0:
            fail("--device cuda: nvidia-smi lists no GPU on this machine; use --device cpu")
    if a.backend == "nccl":
        if a.device != "cuda":
            fail("--backend nccl: NCCL needs a GPU per rank; --device cpu runs MPI on host memory")
        if gpus is not None and max(a.tp) > gpus:
            fail(f"--backend nccl: tp = {max(a.tp)} ranks but {gpus} GPU(s); NCCL cannot put two "
                 "ranks on one GPU, use --backend mpi")


# --- data -----------------------------------------------------------------------------------


def write_shard(path, tokens):
    """llm.c's format: 256 int32 (magic 20240520, version 1, token count, zeros), uint16 tokens."""
    header = array.array("i", [0] * 256)
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    if sys.byteorder != "little":
        header.byteswap()
        tokens = array.array("H", tokens)
        tokens.byteswap()
    with open(path + ".tmp", "wb") as f:
        header.tofile(f)
        tokens.tofile(f)
    os.replace(path + ".tmp", path)


def random_shards(out, model, seed):
    """Uniform tokens below the vocabulary: train holds 64 micro-batches of windows, val 4."""
    folder = os.path.join(out, "data")
    os.makedirs(folder, exist_ok=True)
    rng = random.Random(f"{seed}-{model.vocab_size}")
    window = model.micro_batch_size * (model.seq_len + 1)
    paths = []
    for split, windows in (("train", 64), ("val", 4)):
        path = os.path.join(folder, f"random-v{model.vocab_size}-{split}.bin")
        n = windows * window
        write_shard(path, array.array("H", (rng.randrange(model.vocab_size) for _ in range(n))))
        paths.append(path)
    return paths


# --- one run --------------------------------------------------------------------------------


def run_name(model, tp, codec):
    return f"{model.name}-tp{tp}-{codec}"


def build_command(a, taco_train, model, tp, codec, name, data):
    runs = os.path.join(a.out, "runs")
    sets = [
        f"parallel.tp={tp}", f"parallel.backend={a.backend}",
        f"train.steps={a.steps}",
        f"train.micro_batch_size={model.micro_batch_size}",
        f"train.global_batch_tokens={model.tokens_per_step}",  # one micro-batch per step
        f"train.device={a.device}", "train.precision=auto",  # bf16 on cuda, fp32 on cpu
        "checkpoint.keep=0", f"run.name={name}", f"run.dir={runs}",
        "log.every=1", "log.eval_every=0", "log.eval_batches=1",
        f"data.train={data[0]}", f"data.val={data[1]}",
    ] + CODECS[codec] + a.set
    cmd = [a.mpirun, "-np", str(tp)]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    # Ranks may outnumber cores (several tp ranks on one GPU, or the CPU test); a rank that
    # dies ends the job (parallel/README.md).
    cmd += ["--oversubscribe", "--bind-to", "none", "-x", "OMP_NUM_THREADS",
            "--mca", "orte_abort_on_non_zero_status", "1"]
    cmd += shlex.split(a.mpirun_args) + [taco_train, model.config]
    for kv in sets:
        cmd += ["--set", kv]
    return cmd


def clear_run_folder(folder):
    """Replace an earlier benchmark run's folder; refuse one holding anything else."""
    if not os.path.exists(folder):
        return
    others = sorted(set(os.listdir(folder)) - RUN_FILES)
    if others:
        fail(f"{folder} holds {', '.join(others)}: not a benchmark run's folder; choose another "
             "--out")
    shutil.rmtree(folder)


def number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def read_metrics(path):
    train, val = [], []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{i}: not JSON ({e})")
            if not isinstance(r, dict) or number(r.get("step")) is None:
                continue
            if "val_loss" in r:
                val.append(r)
            elif "loss" in r:
                train.append(r)
    return train, val


def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def summarize(train, val, steps, warmup, tokens_per_step):
    """The numbers of one run from its per-interval records (one step each at log.every=1)."""
    step_ms = []  # (step, ms) for every step the records cover
    measured = []  # records wholly after warm-up: their means are per-step means
    prev = 0
    missing = set()
    for r in train:
        step = int(r["step"])
        n = int(number(r.get("steps")) or (step - prev) or 1)
        times = r.get("step_ms")
        if not (isinstance(times, list) and len(times) == n and all(number(t) is not None
                                                                    for t in times)):
            missing.add("step_ms")
            ms = number(r.get("ms"))
            times = [ms] * n if ms is not None else []
        step_ms += [(step - n + 1 + i, float(t)) for i, t in enumerate(times)]
        if step - n >= warmup:
            measured.append(r)
        prev = step
    timed = [ms for s, ms in step_ms if s > warmup]
    if not timed or not measured:
        raise ValueError(f"no step after the {warmup} warm-up steps in metrics.jsonl")

    def field(key):
        values = [number(r.get(key)) for r in measured]
        if all(v is None for v in values):
            missing.add(key)
            return None
        return mean(values)

    ms_mean = mean([number(r.get("ms")) for r in measured])
    comm = field("comm_ms")
    staging, codec = field("staging_ms"), field("codec_ms")
    median = statistics.median(timed)
    parts = {"codec": codec, "staging": staging, "wire": None, "compute": None}
    if comm is not None:
        parts["wire"] = max(0.0, comm - (staging or 0.0) - (codec or 0.0))
        if ms_mean is not None:
            parts["compute"] = max(0.0, ms_mean - comm)
    last = train[-1]
    return {
        "steps_done": int(last["step"]),
        "measured_steps": len(timed),
        "ms_per_step": median,
        "ms_mean": ms_mean,
        "ms_min": min(timed),
        "ms_max": max(timed),
        "tok_per_s": tokens_per_step / (median / 1e3),
        "tok_per_s_logged": field("tok_per_s"),
        "mfu": field("mfu"),
        "comm_ms": comm,
        "comm_share": comm / ms_mean if comm is not None and ms_mean else None,
        "staging_ms": staging,
        "codec_ms": codec,
        "breakdown_ms": parts,
        "wire_bytes": field("wire_bytes"),
        "logical_bytes": field("comm_bytes"),
        "saved_bytes": field("saved_bytes"),
        "loss": number(last.get("loss")),
        "val_loss": number(val[-1].get("val_loss")) if val else None,
        "step_ms": [ms for _, ms in step_ms],
        "sites": last.get("sites") if isinstance(last.get("sites"), dict) else None,
        "missing_fields": sorted(missing),
    }


def tail(text, lines=15):
    """The last lines of a run's output, without mpirun's rules of dashes."""
    kept = [line for line in text.rstrip().splitlines() if line.strip("- ")]
    return "\n".join(kept[-lines:])


def run_one(a, taco_train, model, tp, codec, data, env):
    name = run_name(model, tp, codec)
    folder = os.path.join(a.out, "runs", name)
    clear_run_folder(folder)
    cmd = build_command(a, taco_train, model, tp, codec, name, data)
    run = {"name": name, "model": model.name, "config": model.config, "tp": tp, "codec": codec,
           "device": a.device, "backend": a.backend, "steps": a.steps, "warmup": a.warmup,
           "tokens_per_step": model.tokens_per_step, "command": cmd,
           "command_line": " ".join(shlex.quote(c) for c in cmd),
           "output": os.path.join(a.out, "runs", name + ".out")}
    print(f"# run {name}: {run['command_line']}", flush=True)
    start = time.monotonic()
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=env, timeout=a.timeout, errors="replace")
        output, code = r.stdout, r.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout or ""
        output = (out.decode(errors="replace") if isinstance(out, bytes) else out)
        output += f"\ntrain_bench.py: stopped after {a.timeout:.0f} s (--timeout)\n"
        code = 124
    run["wall_s"] = time.monotonic() - start
    run["exit_code"] = code
    with open(run["output"], "w") as f:
        f.write(output)
    error = None
    if code != 0:
        error = f"exit code {code}"
        said = [line for line in output.splitlines() if "error" in line.lower()
                and not line.startswith("mpirun")]
        if said:  # the trainer's one line, before mpirun's banner
            error += ": " + said[0].strip()
    else:
        try:
            train, val = read_metrics(os.path.join(folder, "metrics.jsonl"))
            run.update(summarize(train, val, a.steps, a.warmup, model.tokens_per_step))
            if run["steps_done"] != a.steps:
                error = f"stopped at step {run['steps_done']} of {a.steps}"
            elif run["loss"] is None:
                error = "the loss is not finite"
        except (OSError, ValueError, KeyError) as e:
            error = str(e)
    run["status"] = "failed" if error else "ok"
    if error:
        run["error"] = error
        run["log_tail"] = tail(output)
        print(f"# run {name} FAILED: {error}; its last log lines ({run['output']}):")
        print("\n".join("#   " + line for line in run["log_tail"].splitlines()), flush=True)
    return run


def add_speedups(runs):
    base = {(r["model"], r["tp"]): r for r in runs if r["codec"] == "none" and r["status"] == "ok"}
    for r in runs:
        b = base.get((r["model"], r["tp"]))
        ok = r["status"] == "ok" and b is not None
        r["speedup"] = b["ms_per_step"] / r["ms_per_step"] if ok else None
        r["baseline"] = b["name"] if b else None


# --- report ---------------------------------------------------------------------------------

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
             "# comp = step - comm); MB per step; speedup = none's ms/step / ms/step; "
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
        centres.append(((first + x - 1.0) / 2, f"{model} tp={tp}"))
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


def render_plot_elsewhere(json_path, png):
    """A python3 first on PATH (pyenv, a venv) may lack Debian's matplotlib: try Debian's."""
    here = os.path.realpath(sys.executable)
    if not os.path.exists(DEBIAN_PYTHON) or here == os.path.realpath(DEBIAN_PYTHON):
        return False
    r = subprocess.run([DEBIAN_PYTHON, os.path.abspath(__file__), "--plot", json_path, png],
                       capture_output=True, text=True)
    return r.returncode == 0


def plot_only(json_path, png):
    try:
        with open(json_path) as f:
            report = json.load(f)
        if not isinstance(report, dict) or not isinstance(report.get("runs"), list):
            fail(f"{json_path}: not a train_bench.py JSON (no 'runs' list)")
    except (OSError, json.JSONDecodeError) as e:
        fail(f"{json_path}: cannot read ({e})")
    if plot(report, png):
        print(f"plot: {png}")
        return 0
    if render_plot_elsewhere(json_path, png):
        print(f"plot: {png}")
        return 0
    fail("--plot: matplotlib is not importable here; install python3-matplotlib "
         "(tools/setup.sh) or run it where it is")


# --- main -----------------------------------------------------------------------------------


def main(argv):
    a = parse_args(argv)
    if a.plot:
        return plot_only(*a.plot)
    taco_train = os.path.abspath(os.path.join(a.build, "taco-train"))
    if not (os.path.isfile(taco_train) and os.access(taco_train, os.X_OK)):
        fail(f"--build {a.build}: no taco-train there; build it with cmake --build {a.build} "
             "--target taco-train")
    if not shutil.which(a.mpirun):
        fail(f"--mpirun {a.mpirun}: not found on PATH (install OpenMPI: tools/setup.sh)")
    models = [Model(m) for m in a.models]
    for m in models:
        for tp in a.tp:
            m.check_tp(tp)
    resolve_device(a)
    a.out = os.path.abspath(a.out)
    os.makedirs(os.path.join(a.out, "runs"), exist_ok=True)
    if a.data_train:
        data_for = {m.name: (a.data_train, a.data_val) for m in models}
    else:
        data_for = {m.name: random_shards(a.out, m, a.seed) for m in models}

    env = dict(os.environ)
    if "OMP_NUM_THREADS" not in env:  # the ranks share the cores
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // max(a.tp)))
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    runs = []
    for m in models:
        for tp in a.tp:
            for codec in a.codecs:
                runs.append(run_one(a, taco_train, m, tp, codec, data_for[m.name], env))
    add_speedups(runs)

    args_line = "train_bench.py " + " ".join(shlex.quote(x) for x in argv)
    report = {
        "tool": "tools/bench/train_bench.py",
        "command": [sys.executable, os.path.abspath(__file__)] + list(argv),
        "started": started, "device": a.device, "backend": a.backend, "steps": a.steps,
        "warmup": a.warmup, "omp_num_threads": env["OMP_NUM_THREADS"],
        "data": {m.name: list(data_for[m.name]) for m in models},
        "data_kind": "real" if a.data_train else f"uniform random tokens, seed {a.seed}",
        "runs": runs,
    }
    json_path = os.path.join(a.out, "train_bench.json")
    with open(json_path, "w") as f:
        json.dump(report, f, indent=1)
    text = table(runs, args_line)
    with open(os.path.join(a.out, "train_bench.txt"), "w") as f:
        f.write(text)
    print(text, end="")
    print(f"# json: {json_path}")
    png = os.path.join(a.out, "train_bench.png")
    if plot(report, png) or render_plot_elsewhere(json_path, png):
        print(f"# plot: {png}")
    else:
        print(f"# plot skipped (matplotlib is not importable); render it later with: "
              f"{plot_command(json_path, png)}")
    failed = [r["name"] for r in runs if r["status"] != "ok"]
    if failed:
        print(f"# {len(failed)} of {len(runs)} runs failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BadInput as e:
        sys.stderr.write(f"train_bench.py: {e}\n")
        sys.exit(2)
    except KeyboardInterrupt:
        sys.stderr.write("train_bench.py: interrupted\n")
        sys.exit(130)
