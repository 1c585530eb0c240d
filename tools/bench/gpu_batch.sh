#!/usr/bin/env bash
# Batches for a GPU machine: build, every gpu_ test, the benchmarks. Logs and JSON go to $OUT (or
# ./out). Usage: bash tools/bench/gpu_batch.sh [PART...]
#   build      cmake + build into build-gpu (Release)                 ~240 s on 16 cores (H100)
#              (GPU_TARGETS="t1 t2 ..." builds only those targets)
#   tests      ctest -L gpu                                                     ~150 s
#   step       taco-bench step, GPT-2 124M, with PyTorch and the per-kernel rows ~70 s
#   sizes      taco-bench step, GPT-2 350M and GPT 1.3B, with PyTorch            ~220 s
#   stepab     taco-bench step 124M of STEPAB_BASE (an older build's taco-bench, carried; the
#              libraries it was linked with in STEPAB_LIBS) against this build's, alternated
#              STEPAB_ROUNDS times (3): "the step is not slower"                  ~40 s a run
#   graph      the step as a CUDA graph against the eager step (issue 26): its GPU tests, then
#              taco-bench step --graph off/on alternated 3 times, then taco-train with
#              train.cuda_graph off/auto alternated 3 times (train_bench.py, tp = 1) ~200 s
#   trainstep  taco-train on configs/gpt2-124m.yaml, one GPU, random tokens, logged every 10
#              steps (train_bench.py, tp = 1), beside taco-bench step 124M in the same part:
#              the trainer's tok/s over the bench's                               ~120 s
#   trace      the 124M step under libtaco-cupti-trace.so, then gpu_gaps.py      ~20 s
#   attention  PyTorch's SDPA on the model shapes (attention_vs_torch.py)        ~30 s
#   codec      taco-bench codec (device codecs against a device-to-device copy)  ~80 s
#   codecab    taco-bench codec at 128 MB of CODECAB_BASE (an older build's taco-bench, carried;
#              its libraries in CODECAB_LIBS) against this build's, alternated CODECAB_ROUNDS
#              times (2): GB/s and % of the copy of each kernel, side by side      ~30 s a run
#   comm       taco-bench comm on this one GPU                                   ~30 s
#   commstaged taco-bench comm, 2 ranks on the one GPU, MPI staged through host memory ~40 s
#   stagesweep taco-bench comm, 2 ranks through host memory (STAGESWEEP_NP=4: four): the
#              compressed all-reduce in 6 pipeline pieces (the old auto) against one piece (auto
#              over a blocking communicator), at staging pieces of 4M, 1M and 512K   ~60 s
#   hfcheck    taco-export against transformers: a tiny tp=2 run on CPU ranks, exported, its
#              logits compared with GPT2LMHeadModel's (fp32 CPU, bf16 GPU)           ~60 s
#   sass       SASS of taco's G=128 bf16 encode kernel and its opcode counts     ~5 s
#   profile    Nsight Compute source counters (executed instructions and stall
#              samples per SASS line) of taco's 128 MB encode and bf16 decode    ~25 s
#   launchtimes  Nsight Compute's time of each token-axis encode/decode launch (LAUNCH_KERNELS),
#              this build and CODECAB_BASE, beside the bench's back-to-back timing   ~60 s
#   slowtests  the gpu_/mpi_ tests of the host-staged (slow-link) path           ~40 s
#   slowlink   tools/bench/train_bench.py: GPT-2 124M, tp=2 and 4 ranks on the one GPU through
#              host memory, none / taco / fp8_block / taco group auto, 40 steps each  ~400 s
#              (SLOWLINK_TP, SLOWLINK_CODECS narrow it; SLOWLINK_MODELS=124m,350m adds 350M;
#              SLOWLINK_SET="k=v k=v" adds --set keys;
#              SLOWLINK_STEPS: steps per run, 40 by default, logged every 10; SLOWLINK_ROUNDS:
#              the codec list run that many times interleaved, speedups within each round)
#   parity     taco-train 124M tp=2 on the one GPU, 300 steps on GPT-2-tokenized fortunes, none
#              vs taco on every TP site (carry data/fortunes-gpt2, made here with
#              taco-prep --tokenizer gpt2 --val-every 5)                          ~330 s
#   pack       everything under $OUT into one results.tgz (a device call returns <= 8 files)
# Default: build tests step codec comm (quick: build tests). A device call runs at most 600 s:
# split larger batches over calls (build-gpu is kept while the machine stays warm).
set -uo pipefail
cd "$(dirname "$0")/../.."
mkdir -p "${OUT:-out}"
OUT=$(cd "${OUT:-out}" && pwd)  # absolute: the tests part runs from the build folder
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
B=build-gpu
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(build tests step codec comm)
[ "${parts[*]}" = quick ] && parts=(build tests)
t0=$(date +%s)
elapsed() { echo "[$1: $(($(date +%s) - t0)) s]"; }

for part in "${parts[@]}"; do
  case $part in
  build)
    nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
    cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
    # GPU_TARGETS="taco-train gpu_codecs ...": only those targets (and what they link), to save
    # device time when a call needs a few
    cmake --build $B -j16 ${GPU_TARGETS:+--target $GPU_TARGETS} > "$OUT/build.log" 2>&1 ||
      { grep -E "error" -A3 "$OUT/build.log" | head -40; exit 1; }
    ;;
  tests)
    (cd $B && ctest -L gpu -j3 --output-on-failure --timeout 200 > "$OUT/gpu_tests.log" 2>&1)
    grep -E "tests passed|tests failed|Failed|\*\*\*" "$OUT/gpu_tests.log" | head -40
    ;;
  step)
    $B/taco-bench step --model 124m --torch --per-kernel --json "$OUT/step-124m.json" \
      > "$OUT/step-124m.log" 2>&1
    grep -E "^taco |torch (eager|compile)|GEMM|attention \(|gaps|CUDA graph" "$OUT/step-124m.log"
    ;;
  sizes)
    for m in 350m 1.3b; do
      $B/taco-bench step --model $m --torch --json "$OUT/step-$m.json" > "$OUT/step-$m.log" 2>&1
      grep -E "^taco |torch (eager|compile)" "$OUT/step-$m.log"
    done
    ;;
  stepab)
    # taco-bench step, old build against new, alternated; tok/s is the fifth column of "taco".
    [ -x "${STEPAB_BASE:-}" ] || { echo "stepab: STEPAB_BASE is not an executable"; exit 2; }
    for r in $(seq "${STEPAB_ROUNDS:-3}"); do
      for side in base new; do
        bin=$B/taco-bench; [ $side = base ] && bin="env LD_LIBRARY_PATH=${STEPAB_LIBS:-} $STEPAB_BASE"
        $bin step --model 124m --steps 30 --warmup 5 > "$OUT/stepab-$side-$r.log" 2>&1
        awk -v s=$side -v r=$r '$1 == "taco" && NF == 10 { printf "round %s %-4s %s ms/step %s tok/s\n", r, s, $2, $5 }' \
          "$OUT/stepab-$side-$r.log"
      done
    done | tee "$OUT/stepab.txt"
    awk '{ t[$3] += $6; n[$3]++ } END { if (n["base"] && n["new"])
      printf "new / base tok/s, mean of %d rounds: %.4f\n", n["new"], (t["new"] / n["new"]) / (t["base"] / n["base"]) }' \
      "$OUT/stepab.txt" | tee -a "$OUT/stepab.txt"
    ;;
  graph)
    (cd $B && ctest -R "GpuTrainGraph|GraphReplayed|DeviceScalars" --output-on-failure \
      --timeout 200 > "$OUT/graph_tests.log" 2>&1)
    grep -E "tests passed|tests failed|Failed|\*\*\*" "$OUT/graph_tests.log" | head -10
    for r in 1 2 3; do
      for g in off on; do
        $B/taco-bench step --graph $g --model 124m --steps 30 --warmup 5 > "$OUT/graph-$g-$r.log" 2>&1
        awk -v g=$g -v r=$r '$1 == "taco" && NF == 10 { printf "round %s graph %-3s %s ms/step %s tok/s\n", r, g, $2, $5 }' \
          "$OUT/graph-$g-$r.log"
        grep -h "CUDA graph" "$OUT/graph-$g-$r.log"
      done
    done
    for r in 1 2 3; do
      for v in off auto; do
        timeout 150 python3 tools/bench/train_bench.py --build $B --models 124m --tp 1 --codecs none \
          --steps 60 --warmup 10 --log-every 10 --set train.cuda_graph=$v \
          --out "$OUT/graph-train-$v-$r" > "$OUT/graph-train-$v-$r.log" 2>&1
        echo "round $r taco-train train.cuda_graph=$v: rc $?"
        grep -E "^  124m" "$OUT/graph-train-$v-$r.log"
      done
    done
    ;;
  trainstep)
    # The trainer's steady state on one GPU (logging included) against the bench's step.
    $B/taco-bench step --model 124m --steps 30 --warmup 5 > "$OUT/trainstep-bench.log" 2>&1
    awk '$1 == "taco" && NF == 10 { print "taco-bench step: " $5 " tok/s" }' "$OUT/trainstep-bench.log"
    timeout 300 python3 tools/bench/train_bench.py --build $B --models 124m --tp 1 --codecs none \
      --steps "${TRAINSTEP_STEPS:-60}" --warmup 10 --log-every 10 --out "$OUT/trainstep" \
      > "$OUT/trainstep-train.log" 2>&1
    echo "train_bench rc $?"
    grep -vE "^# run " "$OUT/trainstep-train.log" | tail -6
    $B/taco-bench step --model 124m --steps 30 --warmup 5 > "$OUT/trainstep-bench2.log" 2>&1
    awk '$1 == "taco" && NF == 10 { print "taco-bench step again: " $5 " tok/s" }' "$OUT/trainstep-bench2.log"
    ;;
  trace)
    TACO_TRACE_OUT="$OUT/trace.txt" LD_PRELOAD=$PWD/$B/libtaco-cupti-trace.so \
      $B/taco-bench step --model 124m --warmup 3 --steps 4 > "$OUT/trace-step.log" 2>&1
    python3 tools/bench/trace/gpu_gaps.py "$OUT/trace.txt" > "$OUT/gaps.txt" 2>&1
    head -25 "$OUT/gaps.txt"
    ;;
  attention)
    for be in auto flash cudnn; do
      timeout 60 python3 tools/bench/attention_vs_torch.py --backend $be 2>&1 | tail -3
    done
    ;;
  codec)
    timeout 300 $B/taco-bench codec --json "$OUT/codec-gpu.json" > "$OUT/codec-gpu.log" 2>&1
    tail -40 "$OUT/codec-gpu.log"
    ;;
  codecab)
    [ -x "${CODECAB_BASE:-}" ] || { echo "codecab: CODECAB_BASE is not an executable"; exit 2; }
    for r in $(seq "${CODECAB_ROUNDS:-2}"); do
      for side in base new; do
        bin=$B/taco-bench; [ $side = base ] && bin="env LD_LIBRARY_PATH=${CODECAB_LIBS:-} $CODECAB_BASE"
        timeout 120 $bin codec --codecs fp8_block,taco --min-bytes 128M --max-bytes 128M \
          --json "$OUT/codecab-$side-$r.json" > "$OUT/codecab-$side-$r.log" 2>&1
      done
    done
    python3 - "$OUT" "${CODECAB_ROUNDS:-2}" <<'PY' | tee "$OUT/codecab.txt"
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
keys = ["encode_gbps", "decode_gbps", "decode_accumulate_gbps", "decode_sum_encode_gbps"]
print("round side codec: " + ", ".join(k[:-5] for k in keys) + " GB/s (% of the copy)")
for r in range(1, rounds + 1):
    for side in ("base", "new"):
        try:
            rows = json.load(open(f"{out}/codecab-{side}-{r}.json"))["results"]
        except Exception as e:
            print(r, side, "no result:", e)
            continue
        for row in rows:
            c = row["copy_gbps"]
            cells = ", ".join(f"{row[k]:.0f} ({100 * row[k] / c:.0f}%)" for k in keys)
            print(f"{r} {side:4} {row['codec']}: {cells}; copy {c:.0f}")
PY
    ;;
  comm)
    timeout 120 mpirun -np 1 $B/taco-bench comm --max-bytes 256M --json "$OUT/comm-1gpu.json" \
      > "$OUT/comm-1gpu.log" 2>&1
    tail -30 "$OUT/comm-1gpu.log"
    ;;
  commstaged)
    timeout 150 mpirun --oversubscribe -np 2 $B/taco-bench comm --device cuda --backend mpi \
      --min-bytes 1M --max-bytes 64M --json "$OUT/comm-staged.json" > "$OUT/comm-staged.log" 2>&1
    echo "comm staged rc $?"
    tail -30 "$OUT/comm-staged.log"
    ;;
  stagesweep)
    for v in "--chunks 6" "--chunks auto" "--chunks auto --stage-piece 1M" \
      "--chunks auto --stage-piece 512K"; do
      echo "== comm $v"
      timeout 90 mpirun --oversubscribe -np "${STAGESWEEP_NP:-2}" $B/taco-bench comm --device cuda --backend mpi \
        --ops all_reduce --codecs none,taco --min-bytes 16M --max-bytes 32M --factor 2 --iters 10 \
        --warmup 3 $v > "$OUT/stagesweep.log" 2>&1
      echo "rc $?"
      grep -vE "^#" "$OUT/stagesweep.log" | tail -7
    done
    ;;
  hfcheck)
    name=hf-tiny
    $B/taco-prep --tokenizer byte --out /tmp/hf-data README.md docs/design.md > /dev/null
    timeout 200 mpirun --oversubscribe -np 2 $B/taco-train configs/tiny-cpu.yaml \
      --set train.device=cpu --set parallel.tp=2 --set train.steps=20 --set log.eval_every=0 \
      --set 'data.train=/tmp/hf-data/train_*.bin' --set 'data.val=/tmp/hf-data/val_*.bin' \
      --set run.dir="$OUT" --set run.name=$name > "$OUT/$name.out" 2>&1
    echo "train rc $?"
    rm -rf /tmp/hf-tiny && $B/taco-export "$OUT/$name" --format hf /tmp/hf-tiny
    for d in "--dtype fp32 --device cpu" "--dtype bf16 --device cuda"; do
      python3 tools/export/check_hf.py /tmp/hf-tiny --run "$OUT/$name" --generate $B/taco-generate $d
      echo "check_hf $d: exit $?"
    done
    ;;
  sass)
    # Static counts over the whole kernel (every path) of taco's default-options variant.
    obj=$(find $B -name codec_fp8_encode.cu.o | head -1)
    cuobjdump=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
    "$cuobjdump" -sass "$obj" |
      awk '/Function :/ { p = ($0 ~ /fp8_group_encode_kernelItLi128ELb0ELb1ELNS1_12FixedOptionsE1/) } p' > "$OUT/encode-g128.sass"
    grep -oE '^ +/\*[0-9a-f]+\*/ +(@!?U?P[0-9T] +)?[A-Z0-9_.]+' "$OUT/encode-g128.sass" |
      awk '{ print $NF }' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -30
    ;;
  profile)
    # PROFILE_KERNELS="regex ..." (mangled-name regexes; default: taco's G=128 dual encode and
    # bf16 decode along hidden, the first launch of each under --codecs taco). Per kernel: the
    # details page (speed of light, stall reasons, launch and occupancy) in $OUT/<regex>.txt and
    # the per-SASS-line counters in $OUT/<regex>.csv.
    for k in ${PROFILE_KERNELS:-fp8_group_encode_kernelItLi128ELb0 fp8_group_decode_kernelItLi128ELb0ELb0}; do
      f=$(echo "$k" | tr -c 'A-Za-z0-9_\n' _)
      ncu --clock-control none --kernel-name-base mangled --kernel-name "regex:$k" --launch-count 1 \
        -f -o /tmp/prof --section SourceCounters --section SpeedOfLight --section WarpStateStats \
        --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis \
        --section MemoryWorkloadAnalysis \
        $B/taco-bench codec --codecs "${PROFILE_CODECS:-taco}" --reps 1 --min-bytes 128M \
        --max-bytes 128M > "$OUT/profile.log" 2>&1 || { tail -5 "$OUT/profile.log"; continue; }
      ncu --import /tmp/prof.ncu-rep --page source --print-source sass --csv > "$OUT/$f.csv"
      ncu --import /tmp/prof.ncu-rep --page details > "$OUT/$f.txt"
      echo "== $k"
      grep -E "Duration|Throughput|Executed Ipc|Registers Per|Achieved Occupancy|Theoretical Occ|Stall|Issue Slots Busy" "$OUT/$f.txt" | head -30
    done
    ;;
  launchtimes)
    # Nsight Compute's duration of each of the first 12 launches matching LAUNCH_KERNELS (a
    # mangled-name regex; default: taco's G = 128 bf16 token-axis encode and decode) under
    # taco-bench codec at 128 MB, caches not flushed, for this build and for CODECAB_BASE where
    # set: each kernel's own time, beside the bench's back-to-back timing (RESULTS.md,
    # 2026-12-07: the two disagreed on the paired token lanes).
    for side in new base; do
      bin=$B/taco-bench
      if [ $side = base ]; then
        [ -x "${CODECAB_BASE:-}" ] || continue
        bin="env LD_LIBRARY_PATH=${CODECAB_LIBS:-} $CODECAB_BASE"
      fi
      timeout 120 ncu --cache-control none --clock-control none --kernel-name-base mangled \
        --kernel-name "regex:${LAUNCH_KERNELS:-(en|de)code_token_stages_kernelIt(Lb0E)?Li128}" \
        --launch-count 12 --metrics gpu__time_duration.sum \
        $bin codec --codecs taco --reps 2 --min-bytes 128M --max-bytes 128M > "$OUT/launchtimes-$side.log" 2>&1
      echo "$side (rc $?): us per launch"
      awk '/_kernel/ { k = ($0 ~ /decode/) ? "decode" : "encode" }
           /gpu__time_duration/ { printf "%s %s\n", k, $NF }' "$OUT/launchtimes-$side.log" | paste -sd' '
      grep "dual token" "$OUT/launchtimes-$side.log"
    done
    ;;
  slowtests)
    (cd $B && ctest -R "CudaRoundTripError|GpuStagedSum|CudaCodecs|mpi_device_collectives|mpi_staged|mpi_gpu_training" \
      --output-on-failure --timeout 200 > "$OUT/slow_tests.log" 2>&1)
    grep -E "tests passed|tests failed|Failed|\*\*\*" "$OUT/slow_tests.log" | head -20
    ;;
  slowlink)
    # Issue 21's table: tp=2 and 4 ranks on the one GPU through host memory (MPI staged), every
    # codec against the best uncompressed baseline, GPT-2 124M, random tokens (train_bench.py).
    # SLOWLINK_TP / SLOWLINK_CODECS narrow the runs to fit one device call.
    timeout 560 python3 tools/bench/train_bench.py --build $B --models "${SLOWLINK_MODELS:-124m}" --tp "${SLOWLINK_TP:-2,4}" \
      --codecs "${SLOWLINK_CODECS:-none,taco,fp8_block,taco-auto}" --steps "${SLOWLINK_STEPS:-40}" --warmup 10 --rounds "${SLOWLINK_ROUNDS:-1}" --out "$OUT/train-bench" \
      $(for kv in ${SLOWLINK_SET:-}; do printf -- '--set %s ' "$kv"; done) \
      > "$OUT/train-bench.log" 2>&1
    echo "train_bench rc $?"
    grep -vE "^# run " "$OUT/train-bench.log" | tail -14
    ;;
  parity)
    # 300 steps on GPT-2-tokenized fortunes, tp=2 on the one GPU, none vs taco on every TP site.
    for codec in none taco; do
      name=parity-tp2-$codec
      timeout 280 mpirun --allow-run-as-root --oversubscribe -np 2 $B/taco-train configs/gpt2-124m.yaml \
        --set parallel.tp=2 --set parallel.backend=mpi --set train.global_batch_tokens=16384 \
        --set checkpoint.keep=0 --set compression.default.codec=$codec --set run.dir="$OUT" \
        --set run.name=$name --set 'data.train=data/fortunes-gpt2/train_*.bin' \
        --set 'data.val=data/fortunes-gpt2/val_*.bin' --set train.steps=300 \
        --set train.warmup_steps=30 --set log.every=10 --set log.eval_every=50 \
        --set log.eval_batches=8 > "$OUT/$name.out" 2>&1
      echo "$name rc $?"
      grep -E "step .*(loss|val)" "$OUT/$name.out" | tail -3
    done
    ;;
  pack)
    (cd "$OUT" && tar czf /tmp/results.tgz --exclude=results.tgz . && rm -rf ./* && mv /tmp/results.tgz .)
    ls -la "$OUT"
    ;;
  *)
    echo "gpu_batch.sh: unknown part '$part'; see the top of tools/bench/gpu_batch.sh" >&2
    exit 2
    ;;
  esac
  elapsed "$part"
done
