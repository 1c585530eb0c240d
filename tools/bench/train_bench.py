#!/usr/bin/env python3
"""The training benchmark a researcher runs: taco-train under mpirun, codecs side by side.

For each setup (model x tensor-parallel size) and codec it runs

    mpirun -np TP build/taco-train CONFIG --set parallel.tp=TP --set parallel.backend=mpi ...

on random-token shards it writes itself (or --data-train/--data-val), one micro-batch per step
(B16 x T1024 for the GPT-2 configs; with --pp P, P pipeline stages on TP x P ranks and P
micro-batches a step, so 1F1B has one per stage), logged every --log-every steps as a user
trains, and reads runs/<name>/metrics.jsonl (one record per logged step, listing every step's
time since the last one). Per run: the steady-state ms/step (median of the step times after
--warmup), tokens/s, communication share, wire and logical bytes per step, speedup over `none`
of the same setup (none_ms / ms), a logged step's time over an unlogged one's, the loss after
--steps, and the breakdown of a step (means over the same steps): codec kernels, wire (comm -
staging - codec), staging copies, compute (step - comm).

With --rounds N the codec list runs N times, interleaved (none, taco, ..., none, taco, ...):
on a shared machine whose speed drifts, each speedup is taken against the `none` run beside it,
and a summary gives the median and range of ms/step, speedup and logged ratio over the rounds.

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
import signal
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_bench_report as tbr  # noqa: E402  (the table and the plot)

MODELS = {
    "124m": "configs/gpt2-124m.yaml",
    "350m": "configs/gpt2-350m.yaml",
    "tiny": "configs/tiny-cpu.yaml",  # for CPU tests
}

# codec name -> the --set keys that select it. With dp = pp = 1 the default codec reaches only
# the tensor-parallel sites (with --pp also pp.act and pp.grad) (attn/mlp in/out, embed, head.in); group auto calibrates G and the
# axis per site over the first step (compression/README.md "Policy").
CODECS = {
    "none": ["compression.default.codec=none"],
    "taco": ["compression.default.codec=taco"],
    "fp8_block": ["compression.default.codec=fp8_block"],
    "fp8_tensor": ["compression.default.codec=fp8_tensor"],
    "taco-auto": ["compression.default.codec=taco", "compression.default.group=auto",
                  "compression.calibrate_steps=1"],
    # codec: auto (not taco-auto's group: auto): each site compresses with taco only where the
    # run's measured link and codec speeds predict a gain (compression/policy.h).
    "codec-auto": ["compression.default.codec=auto"],
}
DEFAULT_CODECS = "none,taco,fp8_block,taco-auto"

# Files a benchmark run leaves in runs/<name>/ (checkpoint.keep = 0 writes no checkpoint); a
# folder holding anything else is not ours to replace.
RUN_FILES = {"config.yaml", "log.txt", "metrics.jsonl", "calibration.json"}

class BadInput(Exception):
    """Exit 2 with this one line."""


def fail(message):
    raise BadInput(message)


# --- inputs ---------------------------------------------------------------------------------


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, as every other bad input
        fail(message)


def parse_args(argv):
    p = Parser(prog="train_bench.py", description=__doc__.split("\n\n")[0],
               epilog="Config keys for --set: docs/config-reference.md; the metrics.jsonl it "
               "reads: docs/logs-and-metrics.md.")
    p.add_argument("--tp", default="2,4", help="tensor-parallel sizes [2,4]")
    p.add_argument("--pp", type=int, default=1,
                   help="pipeline stages: TP x PP ranks, PP micro-batches a step [1]")
    p.add_argument("--models", default="124m", help="124m,350m (or tiny, or a YAML path) [124m]")
    p.add_argument("--codecs", default=DEFAULT_CODECS, help=f"[{DEFAULT_CODECS}]")
    p.add_argument("--steps", type=int, default=40, help="optimizer steps per run [40]")
    p.add_argument("--warmup", type=int, default=10, help="steps left out of the statistics [10]")
    p.add_argument("--log-every", type=int, default=10,
                   help="log.every of each run, as a user trains [10]; the last step of each "
                        "interval is the logged one, which measures the codec error")
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
    p.add_argument("--rounds", type=int, default=1,
                   help="run the codec list this many times, interleaved (none, taco, ..., "
                   "none, taco, ...), so that a shared machine's drift falls on every codec "
                   "alike; speedups are taken within each round, and a summary gives their "
                   "median and range [1]")
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
    if a.rounds < 1:
        fail(f"--rounds {a.rounds}: expected at least 1")
    if a.pp < 1:
        fail(f"--pp {a.pp}: expected at least 1")
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

    def check_pp(self, pp):
        if self.n_layer % pp:
            fail(f"--pp {pp}: model {self.name} has n_layer = {self.n_layer}, which pp must "
                 "divide")
        self.tokens_per_step *= pp  # one micro-batch per stage


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
    if r.returncode != 0:
        return 0
    return sum(1 for line in r.stdout.splitlines() if line.startswith("GPU "))


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
        if gpus is not None and max(a.tp) * a.pp > gpus:
            fail(f"--backend nccl: {max(a.tp) * a.pp} ranks (tp x pp) but {gpus} GPU(s); NCCL "
                 "cannot put two ranks on one GPU, use --backend mpi")


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


def run_name(model, tp, codec, round_=0, pp=1):
    """round_: 1, 2, ... with --rounds > 1 (a suffix -rK), 0 without."""
    return (f"{model.name}-tp{tp}" + (f"-pp{pp}" if pp > 1 else "") + f"-{codec}" +
            (f"-r{round_}" if round_ else ""))


def build_command(a, taco_train, model, tp, codec, name, data):
    runs = os.path.join(a.out, "runs")
    sets = [
        f"parallel.tp={tp}", f"parallel.pp={a.pp}", f"parallel.backend={a.backend}",
        f"train.steps={a.steps}",
        f"train.micro_batch_size={model.micro_batch_size}",
        f"train.global_batch_tokens={model.tokens_per_step}",  # one micro-batch per stage
        f"train.device={a.device}", "train.precision=auto",  # bf16 on cuda, fp32 on cpu
        "checkpoint.keep=0", f"run.name={name}", f"run.dir={runs}",
        f"log.every={a.log_every}", "log.eval_every=0", "log.eval_batches=1",
        f"data.train={data[0]}", f"data.val={data[1]}",
    ] + CODECS[codec] + a.set
    cmd = [a.mpirun, "-np", str(tp * a.pp)]
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


def check_run_folder(folder):
    """An earlier benchmark run's folder may be replaced; one holding anything else may not."""
    if os.path.exists(folder):
        others = sorted(set(os.listdir(folder)) - RUN_FILES)
        if others:
            fail(f"{folder} holds {', '.join(others)}: not a benchmark run's folder; choose "
                 "another --out")


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


def summarize(train, val, steps, warmup, tokens_per_step):
    """The numbers of one run from its per-interval records (one step each at log.every=1)."""
    step_ms = []  # (step, ms) for every step the records cover
    logged_ms, unlogged_ms = [], []  # after warm-up: the logged steps, and the others
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
        if times and step > warmup:
            logged_ms.append(float(times[-1]))  # the record's own step is the logged one
            unlogged_ms += [float(t) for i, t in enumerate(times[:-1]) if step - n + 1 + i > warmup]
        if step - n >= warmup:
            measured.append((r, n))
        prev = step
    timed = [ms for s, ms in step_ms if s > warmup]
    if not timed or not measured:
        raise ValueError(f"no step after the {warmup} warm-up steps in metrics.jsonl")

    def field(key):
        """Mean per step over the measured records (each weighs the steps it covers)."""
        pairs = [(number(r.get(key)), n) for r, n in measured]
        pairs = [(v, n) for v, n in pairs if v is not None]
        if not pairs:
            missing.add(key)
            return None
        return sum(v * n for v, n in pairs) / sum(n for _, n in pairs)

    ms_mean = field("ms")
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
        # A logged step (it measures the codec error) against the median unlogged one.
        "logged_ms": statistics.median(logged_ms) if logged_ms else None,
        "unlogged_ms": statistics.median(unlogged_ms) if unlogged_ms else None,
        "logged_ratio": (statistics.median(logged_ms) / statistics.median(unlogged_ms)
                         if logged_ms and unlogged_ms else None),
        "sites": last.get("sites") if isinstance(last.get("sites"), dict) else None,
        "missing_fields": sorted(missing),
    }


def tail(text, lines=15):
    """The last lines of a run's output, without mpirun's rules of dashes."""
    kept = [line for line in text.rstrip().splitlines() if line.strip("- ")]
    return "\n".join(kept[-lines:])


def launch(cmd, env, timeout):
    """(output, exit code); past `timeout` s the launcher and its ranks (one process group) get
    SIGTERM, then SIGKILL, so no rank is left running."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, errors="replace", start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
        return output, proc.returncode
    except subprocess.TimeoutExpired:
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                output, _ = proc.communicate(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                output = ""
        note = f"\ntrain_bench.py: stopped after {timeout:.0f} s (--timeout)\n"
        return (output or "") + note, 124


def run_one(a, taco_train, model, tp, codec, data, env, round_=0):
    name = run_name(model, tp, codec, round_, a.pp)
    folder = os.path.join(a.out, "runs", name)
    check_run_folder(folder)
    shutil.rmtree(folder, ignore_errors=True)
    cmd = build_command(a, taco_train, model, tp, codec, name, data)
    run = {"name": name, "round": round_, "model": model.name, "config": model.config, "tp": tp,
           "pp": a.pp, "codec": codec,
           "device": a.device, "backend": a.backend, "steps": a.steps, "warmup": a.warmup,
           "tokens_per_step": model.tokens_per_step, "command": cmd,
           "command_line": " ".join(shlex.quote(c) for c in cmd),
           "output": os.path.join(a.out, "runs", name + ".out")}
    print(f"# run {name}: {run['command_line']}", flush=True)
    start = time.monotonic()
    output, code = launch(cmd, env, a.timeout)
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
    """Each run against `none` of the same setup and round."""
    def key(r):
        return (r["model"], r["tp"], r.get("round", 0))
    base = {key(r): r for r in runs if r["codec"] == "none" and r["status"] == "ok"}
    for r in runs:
        b = base.get(key(r))
        ok = r["status"] == "ok" and b is not None
        r["speedup"] = b["ms_per_step"] / r["ms_per_step"] if ok else None
        r["baseline"] = b["name"] if b else None


def round_summary(runs):
    """Per setup and codec over the rounds that passed: the median and range of ms/step, of the
    within-round speedup and of the logged/unlogged ratio."""
    groups = {}
    for r in runs:
        if r["status"] == "ok":
            groups.setdefault((r["model"], r["tp"], r["codec"]), []).append(r)
    out = []
    for (model, tp, codec), rs in groups.items():
        row = {"model": model, "tp": tp, "codec": codec, "rounds": len(rs)}
        for field in ("ms_per_step", "speedup", "logged_ratio"):
            values = [r[field] for r in rs if r.get(field) is not None]
            row[field + "_median"] = statistics.median(values) if values else None
            row[field + "_min"] = min(values) if values else None
            row[field + "_max"] = max(values) if values else None
        out.append(row)
    return out


def summary_text(summary):
    def cell(row, field, fmt):
        m = row[field + "_median"]
        if m is None:
            return "-"
        return f"{m:{fmt}} [{row[field + '_min']:{fmt}}-{row[field + '_max']:{fmt}}]"
    lines = ["# over the rounds: median [min-max]; speedup within each round",
             f"# {'model':8} {'tp':>3}  {'codec':12} {'rounds':>6}  {'ms/step':>26}  "
             f"{'speedup':>23}  {'logged':>23}"]
    for row in summary:
        lines.append(f"  {row['model']:8} {row['tp']:>3}  {row['codec']:12} {row['rounds']:>6}  "
                     f"{cell(row, 'ms_per_step', '.2f'):>26}  {cell(row, 'speedup', '.3f'):>23}  "
                     f"{cell(row, 'logged_ratio', '.3f'):>23}")
    return "\n".join(lines) + "\n"


def plot_only(json_path, png):
    try:
        with open(json_path) as f:
            data = json.load(f)
        if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
            fail(f"{json_path}: not a train_bench.py JSON (no 'runs' list)")
    except (OSError, json.JSONDecodeError) as e:
        fail(f"{json_path}: cannot read ({e})")
    if tbr.plot(data, png):
        print(f"plot: {png}")
        return 0
    if tbr.render_plot_elsewhere(__file__, json_path, png):
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
        m.check_pp(a.pp)
    resolve_device(a)
    a.out = os.path.abspath(a.out)
    os.makedirs(os.path.join(a.out, "runs"), exist_ok=True)
    if a.data_train:
        data_for = {m.name: (a.data_train, a.data_val) for m in models}
    else:
        data_for = {m.name: random_shards(a.out, m, a.seed) for m in models}

    rounds = list(range(1, a.rounds + 1)) if a.rounds > 1 else [0]
    plan = [(m, tp, codec, k) for k in rounds for m in models for tp in a.tp for codec in a.codecs]
    for m, tp, codec, k in plan:  # before anything runs
        check_run_folder(os.path.join(a.out, "runs", run_name(m, tp, codec, k, a.pp)))
    env = dict(os.environ)
    if "OMP_NUM_THREADS" not in env:  # the ranks share the cores
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // (max(a.tp) * a.pp)))
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    runs = [run_one(a, taco_train, m, tp, codec, data_for[m.name], env, k)
            for m, tp, codec, k in plan]
    add_speedups(runs)
    summary = round_summary(runs) if a.rounds > 1 else None

    args_line = "train_bench.py " + " ".join(shlex.quote(x) for x in argv)
    report = {
        "tool": "tools/bench/train_bench.py",
        "command": [sys.executable, os.path.abspath(__file__)] + list(argv),
        "started": started, "device": a.device, "backend": a.backend, "pp": a.pp,
        "steps": a.steps,
        "warmup": a.warmup, "omp_num_threads": env["OMP_NUM_THREADS"],
        "data": {m.name: list(data_for[m.name]) for m in models},
        "data_kind": "real" if a.data_train else f"uniform random tokens, seed {a.seed}",
        "rounds": a.rounds, "runs": runs,
    }
    if summary is not None:
        report["summary"] = summary
    json_path = os.path.join(a.out, "train_bench.json")
    with open(json_path, "w") as f:
        json.dump(report, f, indent=1)
    text = tbr.table(runs, args_line)
    if summary is not None:
        text += summary_text(summary)
    with open(os.path.join(a.out, "train_bench.txt"), "w") as f:
        f.write(text)
    print(text, end="")
    print(f"# json: {json_path}")
    png = os.path.join(a.out, "train_bench.png")
    if tbr.plot(report, png) or tbr.render_plot_elsewhere(__file__, json_path, png):
        print(f"# plot: {png}")
    else:
        print(f"# plot skipped (matplotlib is not importable); render it later with: "
              f"{tbr.plot_command(json_path, png)}")
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
