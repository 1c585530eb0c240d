#!/usr/bin/env python3
"""Link bandwidth below which a compressed all-reduce beats NCCL's bf16 all-reduce.

Reads the JSON of `taco-bench codec --json` (GPU) and, per codec, message size and group size p,
prints the crossover bus bandwidth B* (GB/s). The model (issue 9 measures it on several GPUs):

  NCCL ring, bf16:          t_none = 2 (p-1)/p * S / B
  compressed two-shot:      t_comp = 2 (p-1)/p * W / B + t_codec
      W        wire bytes of the whole message (S * bytes_per_element / 2)
      t_codec  encode the message (S in, W out, at encode GB/s)
               + the middle step: decode p chunks of W/p, sum, re-encode (p W/p in + W/p out, at
                 the decode-sum-encode GB/s, which the bench measured for 2 inputs)
               + decode all p chunks (W in, S out, at decode GB/s)
  t_comp < t_none  <=>  B < B* = 2 (p-1)/p * (S - W) / t_codec

Compute and transfer are taken as serial (no overlap of codec kernels with the wire), so B* is a
lower bound of where compression pays; chunked overlap raises it. Every GB/s here is bytes moved
over time, as the bench reports it.

Usage: crossover.py CODEC_JSON [--ranks 2,4,8] [--codec SUBSTRING] [--json OUT]
The result bears on compression.min_bytes and the codec rules (docs/config-reference.md).
"""
import argparse
import json
import sys


def codec_seconds(row, p):
    s = row["message_bytes"]
    w = s * row["bytes_per_element"] / 2.0  # bf16 input: 2 bytes per element
    gb = 1e9
    encode = (s + w) / (row["encode_gbps"] * gb)
    middle = (w + w / p) / (row["decode_sum_encode_gbps"] * gb)
    decode = (w + s) / (row["decode_gbps"] * gb)
    return encode + middle + decode, w


def crossover_gbps(row, p):
    """B* in GB/s, or 0 when the codec cannot pay at any bandwidth."""
    t, w = codec_seconds(row, p)
    s = row["message_bytes"]
    if s <= w or t <= 0:
        return 0.0
    return 2.0 * (p - 1) / p * (s - w) / t / 1e9


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("codec_json", help="the file taco-bench codec --json wrote (GPU rows)")
    ap.add_argument("--ranks", default="2,4,8", help="group sizes p to evaluate [2,4,8]")
    ap.add_argument("--codec", default="", help="only codecs whose name contains this")
    ap.add_argument("--json", default="", help="also write the table here")
    a = ap.parse_args(argv)
    try:
        with open(a.codec_json) as f:
            data = json.load(f)
        rows = data["results"]
        ranks = [int(x) for x in a.ranks.split(",")]
    except (OSError, ValueError, KeyError) as e:
        print(f"crossover.py: {a.codec_json}: {e}; expected the JSON of taco-bench codec --json",
              file=sys.stderr)
        return 2
    if any(p < 2 for p in ranks):
        print("crossover.py: --ranks: every group size must be >= 2", file=sys.stderr)
        return 2
    needed = ("decode_sum_encode_gbps", "encode_gbps", "decode_gbps", "bytes_per_element")
    rows = [r for r in rows if a.codec in r["codec"] and all(k in r for k in needed)]
    if not rows:
        print("crossover.py: no matching GPU codec rows (a CPU bench JSON has no device timings)",
              file=sys.stderr)
        return 2
    print("crossover bus bandwidth B* (GB/s): a compressed all-reduce is faster below it")
    header = f"{'size':>9} {'codec':<29}" + "".join(f" {'p=' + str(p):>9}" for p in ranks)
    print(header)
    out = []
    for r in rows:
        vals = [crossover_gbps(r, p) for p in ranks]
        print(f"{r['message_bytes'] >> 20:>6} MB {r['codec']:<29}" +
              "".join(f" {v:>9.1f}" for v in vals))
        out.append({"message_bytes": r["message_bytes"], "codec": r["codec"],
                    "crossover_gbps": {str(p): v for p, v in zip(ranks, vals)}})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"source": a.codec_json, "results": out}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
