#!/usr/bin/env python3
"""Kills taco-train ranks at random points, resumes, and counts what was lost.

    tools/fault_inject.py [--trials 50] [--seed S] [--build build] [--data data/fortunes]

Each trial trains the tiny model on 2 CPU ranks (tp = 2) under mpirun and kills one rank with
SIGKILL at a random point: inside a collective, half-way through writing its checkpoint file,
between the written files and the folder's rename, before the COMPLETE marker, before retention
(the TACO_FAULT_POINT test hook, parallel/fault_point.h), or from outside at a random moment.
mpirun is told at random either to abort the job when a rank dies (the README's launch line) or
not to (then the survivor's watchdog, parallel.timeout_s = 3, must end it). The run is then
resumed (checkpoint.resume: auto) to the end and compared with an uninterrupted run.

Counts printed at the end:
  checkpoints lost     the resume started before the newest checkpoint the crashed run reported
                       as saved ("step N | checkpoint ..." in its log)
  hangs                a crashed job still running after timeout_s + 10 s (+ 15 s for mpirun's
                       start on a loaded machine), ended by `timeout`
  non-finite ckpts     checkpoint files (any left after the resume) with NaN/Inf parameters or
                       moments
  loss mismatches      a logged loss of the crashed + resumed run that differs from the
                       uninterrupted run's (metrics.jsonl, %.9g)
  state mismatches     a final rank file that differs from the uninterrupted run's, byte for byte
  resume failures      the resumed run did not finish with exit code 0
Exit code 0 when every count but the kills is 0.
"""
import argparse
import array
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time

STEPS, EVERY, KEEP, TIMEOUT_S = 24, 4, 2, 3
BOUND_S = TIMEOUT_S + 10 + 15
POINTS = ["comm", "ckpt.write", "ckpt.rename", "ckpt.marker", "ckpt.retention", "external"]


def model_args(data, run_name):
    sets = {
        "run.name": run_name, "parallel.tp": 2, "model.n_layer": 2, "model.d_model": 32,
        "model.n_head": 2, "model.seq_len": 32, "train.micro_batch_size": 4,
        "train.global_batch_tokens": 256, "train.steps": STEPS, "train.warmup_steps": 2,
        "log.every": 1, "log.eval_every": 0, "log.eval_batches": 1, "checkpoint.every": EVERY,
        "checkpoint.keep": KEEP, "parallel.timeout_s": TIMEOUT_S,
        "data.train": f"{data}/train_*.bin", "data.val": f"{data}/val_*.bin"}
    out = []
    for k, v in sets.items():
        out += ["--set", f"{k}={v}"]
    return out


def mpirun(abort):
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-x", "OMP_NUM_THREADS=1",
           "--mca", "mpi_yield_when_idle", "1"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if abort:
        cmd += ["--mca", "orte_abort_on_non_zero_status", "1", "--mca", "orte_enable_recovery", "0"]
    else:  # what a user's environment may say: the survivors would wait forever
        cmd += ["--mca", "orte_abort_on_non_zero_status", "0", "--mca", "orte_enable_recovery", "1"]
    return cmd + ["-np", "2"]


def run(cmd, cwd, env=None, limit=120):
    """Runs cmd; returns (exit code, seconds, output). Exit code 124: ended by the limit."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=limit)
        code = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        code = 124
    return code, time.monotonic() - t0, out.decode(errors="replace")


def rank_pids(run_name):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != "taco-train":
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f"run.name={run_name}".encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def external_kill(cmd, cwd, env, run_name, rng):
    """Starts the job and kills one rank with SIGKILL once a random number of steps (0 = during
    start-up) are logged, i.e. at a random moment of the training; waits for the job."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    after = rng.randrange(STEPS)
    metrics = os.path.join(cwd, "runs", run_name, "metrics.jsonl")
    pids = []
    while p.poll() is None and time.monotonic() - t0 < 60:
        pids = rank_pids(run_name)
        if len(pids) == 2 and (after == 0 or len(losses_of(metrics)) >= after):
            break
        time.sleep(0.002)
    if p.poll() is None and pids:
        os.kill(rng.choice(pids), signal.SIGKILL)
    try:
        out, _ = p.communicate(timeout=BOUND_S + 60)
        code = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        code = 124
    return code, time.monotonic() - t0, out.decode(errors="replace"), f"external@{after}"


def losses_of(path):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                rec = json.loads(line)
                if "loss" in rec:
                    out[rec["step"]] = rec["loss"]
    except (OSError, ValueError):
        pass
    return out


def losses(run_dir):
    return losses_of(os.path.join(run_dir, "metrics.jsonl"))


def saved_steps(log_text):
    """Steps whose save the run reported as done ("step N/M | checkpoint ...")."""
    steps = []
    for line in log_text.splitlines():
        if "| checkpoint " in line and line.startswith("step"):
            steps.append(int(line.split()[1].split("/")[0]))
    return steps


def rank_file_finite(path):
    """False when a parameter / moment section holds NaN or Inf (fp32 CPU checkpoints)."""
    with open(path, "rb") as f:
        blob = f.read()
    header_len = struct.unpack_from("<Q", blob, 12)[0]
    text = blob[20:20 + header_len].decode()
    at = 20 + header_len
    for line in text.splitlines():
        if not line.startswith("section="):
            continue
        name, size = line[len("section="):].rsplit(" ", 1)
        size = int(size)
        values = array.array("f")
        values.frombytes(blob[at:at + size - size % 4])
        at += size
        if any(v != v or v in (float("inf"), float("-inf")) for v in values):
            return False
    return True


def checkpoint_folders(run_dir):
    ckpt = os.path.join(run_dir, "ckpt")
    if not os.path.isdir(ckpt):
        return []
    return [os.path.join(ckpt, d) for d in sorted(os.listdir(ckpt))
            if os.path.exists(os.path.join(ckpt, d, "COMPLETE"))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--build", default="build")
    ap.add_argument("--data", default="data/fortunes")
    ap.add_argument("--out", default=None, help="work folder (default BUILD/fault-inject)")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 30)
    rng = random.Random(seed)
    train = os.path.abspath(os.path.join(a.build, "taco-train"))
    data = os.path.abspath(a.data)
    config = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "configs",
                                          "tiny-cpu.yaml"))
    work = os.path.abspath(a.out or os.path.join(a.build, "fault-inject"))
    if not os.path.exists(train) or not os.path.isdir(data):
        sys.exit(f"fault_inject: need {train} and token shards in {data} (tools/demo.sh)")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("PMIX_") or (k.startswith("OMPI_") and "ALLOW_RUN_AS_ROOT" not in k
                                             and k != "OMPI_MCA_rmaps_base_oversubscribe"))}
    print(f"fault_inject: seed {seed}, {a.trials} trials, work in {work}", flush=True)

    code, _, out = run(mpirun(True) + [train, config] + model_args(data, "straight"), work, env)
    if code != 0:
        sys.exit("fault_inject: the uninterrupted run failed:\n" + out)
    ref_dir = os.path.join(work, "runs", "straight")
    ref_losses = losses(ref_dir)
    final = f"step_{STEPS:08d}"
    ref_files = [open(os.path.join(ref_dir, "ckpt", final, f"rank_{r:05d}.bin"), "rb").read()
                 for r in range(2)]

    counts = {k: 0 for k in ["checkpoints lost", "hangs", "non-finite ckpts", "loss mismatches",
                             "state mismatches", "resume failures", "watchdog exits",
                             "no crash (point not reached)"]}
    per_point = {p: 0 for p in POINTS}
    for t in range(a.trials):
        point = rng.choice(POINTS)
        abort = rng.random() < 0.5
        rank = 0 if point in ("ckpt.rename", "ckpt.marker", "ckpt.retention") else rng.randrange(2)
        name = f"t{t:03d}"
        cmd = mpirun(abort) + [train, config] + model_args(data, name)
        trial_env = dict(env)
        if point == "external":
            code, secs, out, spec = external_kill(cmd, work, trial_env, name, rng)
        else:
            # rank 0 makes ~26 SiteComm calls a step here: up to 20 a step lands inside the run
            count = rng.randint(1, STEPS * 20) if point == "comm" else rng.randint(1, STEPS // EVERY)
            spec = f"{point}:{count}@{rank}"
            trial_env["TACO_FAULT_POINT"] = spec
            code, secs, out = run(cmd, work, trial_env, limit=BOUND_S + 60)
        per_point[point] += 1
        run_dir = os.path.join(work, "runs", name)
        log_text = ""
        if os.path.exists(os.path.join(run_dir, "log.txt")):
            log_text = open(os.path.join(run_dir, "log.txt")).read()
        crashed = f"step {STEPS:5d}/{STEPS} | checkpoint" not in log_text
        hang = code == 124 or (crashed and secs > BOUND_S)
        counts["hangs"] += hang
        counts["watchdog exits"] += "watchdog:" in out
        if not crashed:
            counts["no crash (point not reached)"] += 1
        saved = saved_steps(log_text)
        # Resume to the end (auto: a crash before the first save starts afresh).
        rcode, _, rout = run(mpirun(True) + [train, config] + model_args(data, name) +
                             ["--set", "checkpoint.resume=auto"], work, env)
        resumed_at = 0
        for line in rout.splitlines():
            if line.startswith("resumed from") and "(step " in line:
                resumed_at = int(line.rsplit("(step ", 1)[1].rstrip(")"))
        lost = bool(saved) and resumed_at < max(saved)
        counts["checkpoints lost"] += lost
        counts["resume failures"] += rcode != 0
        got = losses(run_dir)
        loss_bad = got != ref_losses
        counts["loss mismatches"] += loss_bad
        state_bad = False
        for r in range(2):
            path = os.path.join(run_dir, "ckpt", final, f"rank_{r:05d}.bin")
            state_bad |= not os.path.exists(path) or open(path, "rb").read() != ref_files[r]
        counts["state mismatches"] += state_bad
        nonfinite = 0
        for folder in checkpoint_folders(run_dir):
            for f in sorted(os.listdir(folder)):
                if f.endswith(".bin") and not rank_file_finite(os.path.join(folder, f)):
                    nonfinite += 1
        counts["non-finite ckpts"] += nonfinite
        flags = [w for w, bad in [("LOST", lost), ("HANG", hang), ("LOSS", loss_bad),
                                  ("STATE", state_bad), ("RESUME", rcode != 0),
                                  ("NONFINITE", nonfinite)] if bad]
        print(f"trial {t:3d}: {spec:22s} mpirun {'aborts' if abort else 'waits '} | exit {code:3d} "
              f"in {secs:5.1f} s | saved {max(saved) if saved else '-'} resumed at {resumed_at} | "
              f"{' '.join(flags) or 'ok'}", flush=True)
        if flags:
            print("  crashed run:\n" + out[-2000:] + "\n  resumed run:\n" + rout[-2000:])

    print(f"\nfault_inject: {a.trials} trials (seed {seed}); kill points: " +
          ", ".join(f"{p} {n}" for p, n in per_point.items()))
    for k, v in counts.items():
        print(f"  {k:30s} {v}")
    bad = sum(v for k, v in counts.items()
              if k not in ("watchdog exits", "no crash (point not reached)"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
