#!/usr/bin/env bash
# One batch on a GPU machine: build, run every gpu_ test, then the benchmarks.
# Logs go to $OUT (or ./out). Usage: bash tools/bench/gpu_batch.sh [quick]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
t0=$(date +%s)
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
cmake --build build-gpu -j16 > "$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -40; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
(cd build-gpu && ctest -L gpu --output-on-failure --timeout 150 > "$OUT/gpu_tests.log" 2>&1)
grep -E "tests passed|tests failed|Failed|\*\*\*" "$OUT/gpu_tests.log" | head -40
grep -E "\[ timing \]" -r build-gpu/Testing 2>/dev/null | head; grep -E "timing" "$OUT/gpu_tests.log" | head
[ "${1:-}" = quick ] && exit 0
build-gpu/taco-bench step --check --per-kernel --json "$OUT/step-124m.json" > "$OUT/step-124m.log" 2>&1
tail -60 "$OUT/step-124m.log"
# The device codecs against a device-to-device copy, and the collectives on this one GPU.
timeout 300 build-gpu/taco-bench codec --json "$OUT/codec-gpu.json" > "$OUT/codec-gpu.log" 2>&1
tail -40 "$OUT/codec-gpu.log"
timeout 120 mpirun -np 1 build-gpu/taco-bench comm --max-bytes 256M --json "$OUT/comm-1gpu.json" \
  > "$OUT/comm-1gpu.log" 2>&1
tail -30 "$OUT/comm-1gpu.log"
