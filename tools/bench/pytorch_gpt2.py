#!/usr/bin/env python3
"""PyTorch reference for `taco-bench step`: the same GPT-2 training step, timed the same way.

The model is taco's (model/gpt.h): pre-LayerNorm blocks, fused QKV, causal attention through
F.scaled_dot_product_attention (flash backend by default), 4x MLP with tanh GELU, final
LayerNorm, LM head tied to the token embedding, vocabulary padded to a multiple of 64 (50257 ->
50304). Weights are fp32 under bf16 autocast (the usual PyTorch mixed precision), AdamW is the
fused CUDA one (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices only), and the gradient
norm is clipped at 1.0. One step is what taco times:

  zero_grad -> forward (loss) -> backward -> clip_grad_norm_ -> optimizer.step

Each variant (eager, torch.compile of the model) runs --warmup steps and then --steps steps
between two CUDA events on the same random tokens, and prints one JSON line:

  {"impl": "torch", "variant": "eager", "ms_per_step": ..., "tokens_per_s": ..., "mfu": ...,
   "peak_mem_gib": ..., "loss": ..., ...}

MFU counts 6N + 6LTd flops per token (N parameters, docs/design.md §7) against --peak-tflops.

  python3 tools/bench/pytorch_gpt2.py --layers 12 --d-model 768 --heads 12 --seq-len 1024 \
      --batch 16 [--variants eager,compile] [--steps 20] [--warmup 5] [--sdpa flash|auto]

The flags mirror taco's model keys (model.n_layer, d_model, n_head, seq_len, vocab_size:
docs/config-reference.md); taco-bench step --torch passes them.
"""
import argparse
import json
import math
import sys


def make_parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--layers", type=int, default=12, help="transformer blocks [12]")
    p.add_argument("--d-model", type=int, default=768, help="hidden size [768]")
    p.add_argument("--heads", type=int, default=12, help="attention heads [12]")
    p.add_argument("--seq-len", type=int, default=1024, help="tokens per window [1024]")
    p.add_argument("--batch", type=int, default=16, help="windows per step [16]")
    p.add_argument("--vocab", type=int, default=50257, help="real vocabulary; padded to 64")
    p.add_argument("--steps", type=int, default=20, help="timed steps [20]")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first [5]")
    p.add_argument("--lr", type=float, default=1e-4, help="AdamW learning rate [1e-4]")
    p.add_argument("--seed", type=int, default=1234, help="weights and tokens [1234]")
    p.add_argument("--variants", default="eager,compile", help="eager, compile or both")
    p.add_argument("--sdpa", choices=["flash", "auto"], default="flash",
                   help="attention backend [flash]")
    p.add_argument("--peak-tflops", type=float, default=989.0,
                   help="bf16 peak for MFU [989, an H100/H200]")
    return p


if __name__ == "__main__":
    ARGS = make_parser().parse_args()  # --help answers here, on a machine without PyTorch too

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        # [B, T, C] -> [B, heads, T, hs]
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, d, heads, seq_len, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq_len, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(d)
        # GPT-2 init: N(0, 0.02), residual projections scaled by 1/sqrt(2 L), zero biases.
        for name, p in self.named_parameters():
            if p.dim() == 2:
                scaled = name.endswith(("proj.weight", "fc2.weight"))
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers) if scaled else 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.lnf(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def make_optimizer(model, lr):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)


def choose_sdpa(name):
    if name == "flash":
        torch.backends.cuda.enable_flash_sdp(True)
        torch.backends.cuda.enable_mem_efficient_sdp(False)
        torch.backends.cuda.enable_math_sdp(False)
        if hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
            torch.backends.cuda.enable_cudnn_sdp(False)


def run_variant(args, variant, vocab_padded, tokens, targets):
    torch.manual_seed(args.seed)
    model = GPT(args.layers, args.d_model, args.heads, args.seq_len, vocab_padded).cuda()
    n_params = sum(p.numel() for p in model.parameters())
    optimizer = make_optimizer(model, args.lr)
    fwd = torch.compile(model) if variant == "compile" else model

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(args.steps):
        loss = step()
    stop.record()
    stop.synchronize()
    ms = start.elapsed_time(stop) / args.steps
    tokens_per_step = args.batch * args.seq_len
    flops_per_token = 6 * n_params + 6 * args.layers * args.seq_len * args.d_model
    tokens_per_s = tokens_per_step / (ms / 1e3)
    result = {
        "impl": "torch",
        "variant": variant,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "layers": args.layers,
        "d_model": args.d_model,
        "heads": args.heads,
        "seq_len": args.seq_len,
        "batch": args.batch,
        "vocab": vocab_padded,
        "params": n_params,
        "steps": args.steps,
        "ms_per_step": ms,
        "tokens_per_s": tokens_per_s,
        "mfu": tokens_per_s * flops_per_token / (args.peak_tflops * 1e12),
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30,
        "reserved_peak_gib": torch.cuda.max_memory_reserved() / 2**30,
        "loss": float(loss.item()),
    }
    del model, optimizer, fwd
    torch.cuda.empty_cache()
    return result


def main(args):
    if not torch.cuda.is_available():
        print("pytorch_gpt2.py: no CUDA device visible to PyTorch", file=sys.stderr)
        return 2
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in ("eager", "compile"):
            print(f"pytorch_gpt2.py: --variants: unknown '{v}' (eager, compile)", file=sys.stderr)
            return 2
    torch.backends.cuda.matmul.allow_tf32 = True
    choose_sdpa(args.sdpa)
    vocab_padded = (args.vocab + 63) // 64 * 64
    g = torch.Generator(device="cuda").manual_seed(args.seed)
    shape = (args.batch, args.seq_len)
    tokens = torch.randint(0, args.vocab, shape, device="cuda", generator=g)
    targets = torch.randint(0, args.vocab, shape, device="cuda", generator=g)
    for v in variants:
        print(json.dumps(run_variant(args, v, vocab_padded, tokens, targets)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
