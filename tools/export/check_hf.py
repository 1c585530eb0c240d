#!/usr/bin/env python3
"""Checks a taco-export folder against taco itself: loads it with transformers'
GPT2LMHeadModel, runs a token sequence through it, and compares the next-token logits with
taco's forward on the same tokens (taco-generate --dump-logits, the CPU fp32 reference).

  check_hf.py HF_DIR --run RUN_DIR [--generate build/taco-generate]
  check_hf.py HF_DIR --taco-logits FILE --token-ids I,J,...

With --run it calls taco-generate itself; with --taco-logits it reads logits dumped earlier
(taco-generate RUN --token-ids I,J,... --dump-logits FILE), e.g. on a machine without taco.
Tokens: --token-ids, else --length pseudo-random ids (--seed) below the vocabulary size.

It prints the largest absolute logit difference and how often the two argmaxes agree, and exits
1 on a mismatch: a difference above the tolerance (default 1e-3 x max(1, largest |logit|) in
fp32, 5e-2 x that in bf16) or an argmax that differs where taco's best logit leads HF's choice
by more than the tolerance (a near tie may flip under rounding; a real disagreement may not).
Exit 2 for bad arguments or missing inputs. Needs torch and transformers (not taco's CI).
"""

import argparse
import array
import json
import os
import random
import subprocess
import sys
import tempfile


def fail(message, code=1):
    print(f"check_hf: {message}", file=sys.stderr)
    sys.exit(code)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("hf_dir", help="the folder taco-export wrote")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", help="the taco run (or checkpoint folder) it was exported from")
    source.add_argument("--taco-logits", help="logits dumped by taco-generate --dump-logits")
    p.add_argument("--generate", default="build/taco-generate", help="the taco-generate binary")
    p.add_argument("--token-ids", help="comma-separated token ids (required with --taco-logits)")
    p.add_argument("--length", type=int, default=64, help="random tokens when no --token-ids")
    p.add_argument("--seed", type=int, default=1, help="seed of the random tokens")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32",
                   help="the precision transformers runs in (taco's side is fp32)")
    p.add_argument("--device", default="cpu", help="torch device for transformers (cpu, cuda)")
    p.add_argument("--tolerance", type=float,
                   help="relative tolerance (default 1e-3 fp32, 5e-2 bf16), times max(1, |logit|)")
    args = p.parse_args(argv)
    if args.taco_logits and not args.token_ids:
        p.error("--taco-logits needs the --token-ids it was dumped for")
    return args


def read_config(hf_dir):
    path = os.path.join(hf_dir, "config.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: cannot read ({e}); is {hf_dir} a taco-export folder?", 2)


def token_ids(args, config):
    vocab, window = config["vocab_size"], config["n_positions"]
    if args.token_ids:
        try:
            ids = [int(t) for t in args.token_ids.split(",")]
        except ValueError:
            fail(f"--token-ids {args.token_ids}: not a list of integers", 2)
    else:
        rng = random.Random(args.seed)
        ids = [rng.randrange(vocab) for _ in range(min(args.length, window))]
    if not ids or len(ids) > window or min(ids) < 0 or max(ids) >= vocab:
        fail(f"{len(ids)} token ids: need 1..{window} ids in [0, {vocab})", 2)
    return ids


def read_logits(path, rows, vocab):
    values = array.array("f")
    try:
        with open(path, "rb") as f:
            values.frombytes(f.read())
    except OSError as e:
        fail(f"{path}: cannot read ({e})", 2)
    if sys.byteorder == "big":
        values.byteswap()  # the file is little-endian
    if len(values) != rows * vocab:
        fail(f"{path}: {len(values)} floats, expected {rows} tokens x {vocab} = {rows * vocab} "
             "(another run, or other tokens?)")
    return values


def taco_logits(args, ids, vocab):
    if args.taco_logits:
        return read_logits(args.taco_logits, len(ids), vocab)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "logits.bin")
        cmd = [args.generate, args.run, "--token-ids", ",".join(map(str, ids)),
               "--dump-logits", out]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:
            fail(f"{args.generate}: cannot run ({e}); pass --generate PATH", 2)
        if r.returncode != 0:
            fail(f"taco-generate failed ({r.returncode}): {r.stderr.strip()}")
        return read_logits(out, len(ids), vocab)


def hf_logits(args, ids):
    try:
        import torch
        from transformers import GPT2LMHeadModel
    except ImportError as e:
        fail(f"needs torch and transformers ({e})")
    model = GPT2LMHeadModel.from_pretrained(args.hf_dir)  # float32, as written
    if args.dtype == "bf16":
        model = model.to(torch.bfloat16)
    model = model.to(args.device).eval()
    with torch.no_grad():
        out = model(torch.tensor([ids], device=args.device)).logits[0]
    return out.float().cpu()


def compare(taco, hf, ids, vocab, tolerance_rel):
    import torch
    ref = torch.tensor(taco, dtype=torch.float32).view(len(ids), vocab)
    if tuple(hf.shape) != (len(ids), vocab):
        return False, f"HF logits have shape {tuple(hf.shape)}, taco's ({len(ids)}, {vocab})"
    largest = ref.abs().max().item()
    tolerance = tolerance_rel * max(1.0, largest)
    diff = (hf - ref).abs()
    worst = diff.max().item()
    where = divmod(int(diff.argmax().item()), vocab)
    taco_top, hf_top = ref.argmax(dim=1), hf.argmax(dim=1)
    agree = int((taco_top == hf_top).sum().item())
    # Where the argmaxes differ: by how much taco's best leads the token HF picked, in taco's view.
    lead = ref.max(dim=1).values - ref.gather(1, hf_top.view(-1, 1)).view(-1)
    real_flips = int(((taco_top != hf_top) & (lead > tolerance)).sum().item())
    print(f"check_hf: {len(ids)} tokens, vocabulary {vocab}: max |HF - taco| = {worst:.3e} "
          f"(token {where[0]}, id {where[1]}; tolerance {tolerance:.3e}, largest |logit| "
          f"{largest:.3f}); argmax agrees on {agree}/{len(ids)} tokens")
    problems = []
    if not worst <= tolerance:  # also catches NaN
        problems.append(f"max |diff| {worst:.3e} > tolerance {tolerance:.3e}")
    if real_flips:
        problems.append(f"{real_flips} argmax disagreement(s) beyond the tolerance")
    return not problems, "; ".join(problems)


def main(argv):
    args = parse_args(argv)
    config = read_config(args.hf_dir)
    vocab = config["vocab_size"]
    ids = token_ids(args, config)
    print(f"check_hf: token ids {','.join(map(str, ids))}")
    taco = taco_logits(args, ids, vocab)
    hf = hf_logits(args, ids)
    rel = args.tolerance if args.tolerance is not None else (5e-2 if args.dtype == "bf16" else 1e-3)
    ok, why = compare(taco, hf, ids, vocab, rel)
    if not ok:
        fail(f"MISMATCH ({args.dtype} on {args.device}): {why}")
    print(f"check_hf: OK ({args.dtype} on {args.device}): {args.hf_dir} matches taco's logits")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
