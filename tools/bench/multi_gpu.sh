#!/usr/bin/env bash
# Issue 9's measurements on one machine with several GPUs: TACO against NCCL's bf16 collectives,
# with NVLink and with NCCL_P2P_DISABLE=1 (traffic through host shared memory, as PCIe-class
# clusters behave). Always NCCL_NVLS_ENABLE=0. Results go to $OUT (default out/multi-gpu):
#   comm-<link>.json        taco-bench comm: all_reduce, reduce_scatter, all_gather x none, taco,
#                           fp8_block, 1 MB .. 1 GB, on all GPUs
#   runs/<link>-<model>-tp<T>pp<P>-sp<0|1>-<codec>/metrics.jsonl
#                           taco-train throughput runs: GPT 1.3B and 2.7B at tp = N and at
#                           tp = N/2 x pp = 2, sequence parallelism off and on, codecs none, taco
#                           on every TP site, and taco with compression.min_bytes from the comm
#                           crossover (taco_min)
#   runs/parity-<codec>/    loss parity: 300 steps of GPT 1.3B at tp = N on text, none vs taco
#   summary.json, summary.md  tools/bench/multi_gpu_report.py
# Each part fits one device call when run alone: --parts comm|train|parity (comma list),
# --links nvlink,p2p_off, --models 1.3b,2.7b. --cpu runs the same steps on CPU ranks with a tiny
# model and small messages, to check the script (its numbers mean nothing).
# Usage: bash tools/bench/multi_gpu.sh [--gpus N] [--parts ...] [--links ...] [--models ...]
#                                      [--steps S] [--parity-steps S] [--cpu]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/multi-gpu}
parts=comm,train,parity
links=nvlink,p2p_off
models=1.3b,2.7b
steps=12
parity_steps=300
cpu=0
gpus=""
while [ $# -gt 0 ]; do
  case "$1" in
    --gpus) gpus=$2; shift 2 ;;
    --parts) parts=$2; shift 2 ;;
    --links) links=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --parity-steps) parity_steps=$2; shift 2 ;;
    --cpu) cpu=1; shift ;;
    *) echo "multi_gpu.sh: unknown option '$1' (see the header of tools/bench/multi_gpu.sh)" >&2; exit 2 ;;
  esac
done
if [ -z "$gpus" ]; then
  if [ "$cpu" = 1 ]; then gpus=2; else gpus=$(nvidia-smi -L 2>/dev/null | wc -l); fi
fi
if [ "$gpus" -lt 2 ] || [ $((gpus % 2)) -ne 0 ]; then
  echo "multi_gpu.sh: needs an even number of GPUs >= 2 (found $gpus); --gpus N to set it" >&2
  exit 2
fi
has() { case ",$1," in *",$2,"*) return 0 ;; *) return 1 ;; esac; }
mkdir -p "$OUT/runs"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target taco-bench taco-train taco-prep >/dev/null

launch() {  # launch LINK NP COMMAND...
  local link=$1 np=$2
  shift 2
  local env=(-x NCCL_NVLS_ENABLE=0)
  [ "$link" = p2p_off ] && env+=(-x NCCL_P2P_DISABLE=1)
  [ "$cpu" = 1 ] && env+=(-x OMP_NUM_THREADS=1)
  mpirun --oversubscribe --bind-to none --mca orte_abort_on_non_zero_status 1 "${env[@]}" \
    -np "$np" "$@"
}

# Text for the training runs: GPT-2 BPE shards of the fortunes corpus, or of this repository's
# own text where there is none (the GPU machines have no network; carry .cache/gpt2-bpe there).
data=$OUT/data
if [ ! -f "$data/train_000000.bin" ]; then
  src=/usr/share/games/fortunes
  if [ ! -d "$src" ]; then
    src=$OUT/text
    mkdir -p "$src"
    find . -path ./build -prune -o -path ./out -prune -o -path ./.git -prune -o \
      \( -name '*.md' -o -name '*.h' -o -name '*.cpp' -o -name '*.cu' \) -type f -print |
      sort | while read -r f; do cp "$f" "$src/$(echo "${f#./}" | tr / _)"; done
  fi
  if [ "$cpu" = 1 ]; then
    build/taco-prep --tokenizer byte --out "$data" "$src" >/dev/null
  else
    bash tools/fetch_bpe.sh >/dev/null
    build/taco-prep --tokenizer gpt2 --bpe-dir "${TACO_CACHE:-.cache}/gpt2-bpe" --out "$data" \
      "$src" >/dev/null
  fi
fi

comm_max=1G
group=128
[ "$cpu" = 1 ] && comm_max=4M && group=32
if has "$parts" comm; then
  for link in ${links//,/ }; do
    echo "== comm, $link, $gpus ranks"
    launch "$link" "$gpus" build/taco-bench comm --ops all_reduce,reduce_scatter,all_gather \
      --codecs none,taco,fp8_block --min-bytes 1M --max-bytes "$comm_max" \
      --json "$OUT/comm-$link.json"
  done
fi

# One training run: train LINK NAME TP PP SP CODEC MIN_BYTES STEPS MODEL [--set ...]
train() {
  local link=$1 name=$2 tp=$3 pp=$4 sp=$5 codec=$6 min_bytes=$7 n=$8 model=$9
  shift 9
  local config=configs/gpt-$model.yaml
  local sets=(--set parallel.tp="$tp" --set parallel.pp="$pp" --set parallel.dp=1
    --set parallel.sequence_parallel="$sp"
    --set train.steps="$n" --set log.every=1 --set checkpoint.keep=0
    --set "data.train=$data/train_*.bin" --set "data.val=$data/val_*.bin"
    --set run.dir="$OUT/runs" --set run.name="$name" --set compression.min_bytes="$min_bytes")
  [ "$codec" != none ] && sets+=(--set "compression.default={codec: taco, format: e4m3, group: $group}")
  if [ "$cpu" = 1 ]; then
    config=configs/tiny-cpu.yaml
    sets+=(--set model.n_head=4 --set train.device=cpu)
  else
    # 8 micro-batches of 8 x 2048 per optimizer step: long enough to time, short enough to fit
    sets+=(--set train.global_batch_tokens=$((8 * 8 * 2048)))
  fi
  rm -rf "${OUT:?}/runs/$name"
  echo "== train $name"
  if ! launch "$link" "$((tp * pp))" build/taco-train "$config" "${sets[@]}" "$@" \
    >"$OUT/runs/$name.log" 2>&1; then
    echo "FAILED: $name (log: $OUT/runs/$name.log)" | tee -a "$OUT/failed.txt"
  fi
  grep -E "step +$n/$n " "$OUT/runs/$name.log" | tail -2 || true
}

if has "$parts" train; then
  for link in ${links//,/ }; do
    min_bytes=0
    if [ -f "$OUT/comm-$link.json" ]; then
      min_bytes=$(python3 tools/bench/multi_gpu_report.py min-bytes "$OUT/comm-$link.json")
    fi
    for model in ${models//,/ }; do
      for layout in "$gpus 1" "$((gpus / 2)) 2"; do
        read -r tp pp <<<"$layout"
        for sp in false true; do
          for codec in none taco taco_min; do
            mb=0
            [ "$codec" = taco_min ] && mb=$min_bytes
            train "$link" "$link-$model-tp${tp}pp$pp-sp$([ $sp = true ] && echo 1 || echo 0)-$codec" \
              "$tp" "$pp" "$sp" "$codec" "$mb" "$steps" "$model" --set log.eval_every=0
          done
        done
      done
    done
  done
fi

if has "$parts" parity; then
  for codec in none taco; do
    model=1.3b
    train nvlink "parity-$codec" "$gpus" 1 false "$codec" 0 "$parity_steps" "$model" \
      --set log.eval_every=50 --set log.eval_batches=4
  done
fi

python3 tools/bench/multi_gpu_report.py summary "$OUT" --gpus "$gpus"
