#!/usr/bin/env bash
# Sets up, builds, prepares the fortunes corpus and trains the embedded default config with
# TACO (FP8) on every tensor-parallel site: on the GPU when there is one, else on two CPU ranks
# (tp = 2) under mpirun. It ends with the traffic table per site and layer range.
# Extra arguments go to taco-train, after the demo's own (e.g. --set train.steps=50, or
# --set compression.rules=[] --set run.name=tiny-cpu-none for the same run uncompressed).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
  echo "Outputs: runs/<run.name>/ (config.yaml, log.txt, metrics.jsonl, ckpt/); what they say:"
  echo "docs/logs-and-metrics.md. Config keys for --set: docs/config-reference.md."
  exit 0
fi
jobs=$(nproc)

bash tools/setup.sh
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs" --target taco-train taco-prep

if ! ls data/fortunes/train_*.bin >/dev/null 2>&1; then
  build/taco-prep --tokenizer byte --out data/fortunes /usr/share/games/fortunes
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
# Ctrl-C: mpirun sends the ranks SIGTERM odls_base_sigkill_timeout seconds later and SIGKILL
# as long again; the default 1 s is shorter than a step and a save on a busy machine (README).
launch=(mpirun --oversubscribe --bind-to none --mca orte_abort_on_non_zero_status 1
  --mca odls_base_sigkill_timeout 10)
# TACO (E4M3, G = 128, dual scales) on the sites of the tensor-parallel group; the pipeline and
# data-parallel sites carry nothing at pp = dp = 1. A second demo run continues the first one's
# checkpoint (it has nothing left to train once the first has finished) instead of refusing to
# overwrite it.
tp_sites="embed.fwd, embed.bwd, attn.in.fwd, attn.in.bwd, attn.out.fwd, attn.out.bwd"
tp_sites+=", mlp.in.fwd, mlp.in.bwd, mlp.out.fwd, mlp.out.bwd, head.in.fwd, head.in.bwd"
set -- --set run.name=tiny-cpu-taco \
  --set "compression.rules=[{layers: all, sites: [$tp_sites], codec: taco}]" \
  --set checkpoint.resume=auto "$@"
if nvidia-smi -L >/dev/null 2>&1; then
  # One GPU, bf16. The fused attention kernel takes head sizes 64 and 128: 2 heads of 64.
  echo "demo: training on the GPU"
  exec "${launch[@]}" -np 1 build/taco-train --set model.n_head=2 "$@"
fi
# No GPU: two CPU ranks with tensor parallelism, one OpenMP thread each.
echo "demo: no GPU found; training on 2 CPU ranks (tp=2)"
exec "${launch[@]}" -np 2 -x OMP_NUM_THREADS=1 --mca mpi_yield_when_idle 1 \
  build/taco-train --set parallel.tp=2 "$@"
