#!/usr/bin/env python3
"""PyTorch's causal attention on the shapes of taco's flash-attention kernels, as a yardstick.

Times F.scaled_dot_product_attention(q, k, v, is_causal=True) in bf16, forward and backward, on
the GPT-2 124M shape (B16 T1024 NH12 hs64) and the 1.3B shape (B8 T2048 NH16 hs128), and prints
the same line as taco's gpu_attention test (LastHeadMatchesReferenceAndTimingIsReported):

  fwd ms, TFLOP/s | bwd ms, TFLOP/s | fwd+bwd ms, TFLOP/s

FLOPs count the causal half of the two forward matmuls, 4 * B * NH * T^2 * hs / 2, and 2.5x that
for the five backward matmuls (FlashAttention's convention). Times are the mean over --reps
launches after --warmup, measured with CUDA events; the backward alone is timed by replaying
autograd on a retained graph.

  python3 tools/bench/attention_vs_torch.py [--backend auto|flash|efficient|cudnn|math]

A yardstick only; it reads no taco config (taco's keys: docs/config-reference.md).
"""
import argparse
import contextlib

SHAPES = {  # name: (B, T, NH, hs)
    "gpt2-124M": (16, 1024, 12, 64),
    "gpt-1.3B": (8, 2048, 16, 128),
}


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="auto",
                        choices=["auto", "flash", "efficient", "cudnn", "math"],
                        help="PyTorch's SDPA backend [auto]")
    parser.add_argument("--warmup", type=int, default=5, help="untimed launches first [5]")
    parser.add_argument("--reps", type=int, default=20, help="timed launches [20]")
    parser.add_argument("--shape", choices=sorted(SHAPES), action="append",
                        help="run only these shapes (default: all)")
    return parser


if __name__ == "__main__":
    ARGS = make_parser().parse_args()  # --help answers here, on a machine without PyTorch too

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def backend_context(name):
    if name == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "math": SDPBackend.MATH,
    }
    return sdpa_kernel(backends[name])


def time_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / reps


def bench(name, B, T, NH, hs, warmup, reps):
    # taco's layout is qkv [B, T, 3, NH, hs] and dout [B, T, NH, hs]; SDPA takes [B, NH, T, hs]
    # views of them. q, k, v are leaves so that the backward times the kernel alone, not the
    # scatter of their gradients into one qkv tensor.
    qkv = torch.randn(B, T, 3, NH, hs, device="cuda", dtype=torch.bfloat16)
    q, k, v = (qkv[:, :, i].transpose(1, 2).detach().requires_grad_() for i in range(3))
    dout = torch.randn(B, T, NH, hs, device="cuda", dtype=torch.bfloat16).transpose(1, 2)

    def forward():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def backward():
        torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

    fwd = time_ms(forward, warmup, reps)
    bwd = time_ms(backward, warmup, reps)
    flop = 4.0 * B * NH * T * T * hs / 2
    tf = lambda f, ms: f / ms * 1e-9
    print(
        f"[ timing ] torch sdpa {name} B{B}_T{T}_NH{NH}_hs{hs} bf16 causal: "
        f"fwd {fwd:.3f} ms {tf(flop, fwd):.1f} TFLOP/s | "
        f"bwd {bwd:.3f} ms {tf(2.5 * flop, bwd):.1f} TFLOP/s | "
        f"fwd+bwd {fwd + bwd:.3f} ms {tf(3.5 * flop, fwd + bwd):.1f} TFLOP/s",
        flush=True,
    )


def main(args):
    if not torch.cuda.is_available():
        raise SystemExit("attention_vs_torch.py: no CUDA device; run it on the GPU machine")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, backend {args.backend}")
    with backend_context(args.backend):
        for name in args.shape or SHAPES:
            bench(name, *SHAPES[name], args.warmup, args.reps)


if __name__ == "__main__":
    main(ARGS)
