#!/usr/bin/env bash
# Sets up, builds, prepares the fortunes corpus and trains the embedded default config:
# on the GPU when there is one, else on CPU ranks under mpirun.
# Extra arguments go to taco-train (e.g. --set train.steps=50).
set -euo pipefail
cd "$(dirname "$0")/.."
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

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ranks=1
exec mpirun --oversubscribe --bind-to none -np "$ranks" build/taco-train "$@"
