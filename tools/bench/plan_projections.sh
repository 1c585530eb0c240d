#!/usr/bin/env bash
# Issue 24's projections: taco-plan for GPT 1.3B, 2.7B and 13B at tp = 8 on each shipped cluster
# file, and at 1024 GPUs (tp 8 x dp 128 on configs/clusters/128x8-h200-ib400.yaml, 4M tokens a
# step). One line per (model, cluster, GPUs, codec): predicted ms/step, tokens/s and the speedup
# over none. 13B: configs/gpt-2.7b.yaml with 40 layers, d_model 5120, 40 heads.
# Usage: bash tools/bench/plan_projections.sh [BUILD_DIR]   (default build/)
set -euo pipefail
cd "$(dirname "$0")/../.."
plan="${1:-build}/taco-plan"
[ -x "$plan" ] || { echo "plan_projections.sh: $plan not found; build taco-plan first" >&2; exit 2; }
printf '%-6s %-20s %5s %-5s %12s %12s %8s\n' model cluster gpus codec ms/step tokens/s speedup
for model in 1.3b 2.7b 13b; do
  cfg=configs/gpt-$model.yaml
  extra=()
  if [ $model = 13b ]; then
    cfg=configs/gpt-2.7b.yaml
    extra=(--set model.n_layer=40 --set model.d_model=5120 --set model.n_head=40)
  fi
  row() {  # GPUS, then taco-plan arguments
    local gpus=$1 cluster=$3
    shift
    "$plan" "$cfg" "${extra[@]}" "$@" | awk -v m=$model -v c="$(basename "$cluster" .yaml)" -v g=$gpus \
      '/^tp[0-9]/ { printf "%-6s %-20s %5s %-5s %12s %12s %8s\n", m, c, g, $4, $6, $7, $NF }'
  }
  for c in 8xh200-nvlink 8gpu-pcie-nop2p 4x8-h200-ib400 128x8-h200-ib400; do
    row 8 --cluster configs/clusters/$c.yaml --layout 8x1x1
  done
  row 1024 --cluster configs/clusters/128x8-h200-ib400.yaml --layout 8x1x128 \
    --set train.global_batch_tokens=4194304
done
