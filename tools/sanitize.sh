#!/usr/bin/env bash
# The sanitizer pass, CPU only, in two parts (both by default; name one to run it alone):
#   asan  build-asan/: -DTACO_CUDA=OFF -DTACO_SANITIZE=ON (AddressSanitizer + UBSan, every UB
#         check fatal), then every unit and mpi test there (ctest -LE 'gpu|slow': a test labelled
#         slow is one that would take many minutes under ASan's ~3x slowdown). Extra ctest
#         arguments: TACO_SANITIZE_CTEST_ARGS (e.g. "-R Codec").
#   fuzz  build-fuzz/: clang, -DTACO_FUZZ=ON; builds the libFuzzer harnesses of tools/fuzz/ and
#         runs each for TACO_FUZZ_SECONDS (default 60) from its committed seed corpus
#         tools/fuzz/corpus/<name>/ plus the corpus earlier runs grew in build-fuzz/corpus/<name>/.
#         A finding leaves its input in build-fuzz/artifacts/ and the log's tail on the terminal.
#
#   tools/sanitize.sh [asan|fuzz]...
#
# Leaks: every test binary joins MPI, and Open MPI keeps memory until exit in plugins it has
# unloaded by then, so LeakSanitizer's reports can be neither attributed nor suppressed by
# library: the asan part runs with detect_leaks=0 (build too: test discovery runs the binaries).
# The fuzzers, which never touch MPI, keep libFuzzer's leak check. Exit code 0 only if every step
# passed.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
fuzz_seconds=${TACO_FUZZ_SECONDS:-60}
fuzzers=(fuzz_config fuzz_shards fuzz_wire)
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(asan fuzz)
for part in "${parts[@]}"; do
  case "$part" in
    asan | fuzz) ;;
    *) echo "sanitize: unknown part '$part'; use asan, fuzz or nothing (both)" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

run_asan() {
  echo "== sanitize asan: build (build-asan/)"
  local started=$SECONDS
  export ASAN_OPTIONS=detect_leaks=0
  cmake -S . -B build-asan -DTACO_CUDA=OFF -DTACO_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    >/dev/null
  cmake --build build-asan -j"$jobs"
  echo "== sanitize asan: tests (unit + mpi)"
  # shellcheck disable=SC2086  # word splitting of the extra arguments is intended
  ctest --test-dir build-asan -LE 'gpu|slow' --output-on-failure -j"$jobs" --timeout 1200 \
    ${TACO_SANITIZE_CTEST_ARGS:-}
  unset ASAN_OPTIONS
  echo "== sanitize asan: passed in $((SECONDS - started)) s"
}

run_fuzz() {
  echo "== sanitize fuzz: build (build-fuzz/, clang)"
  local started=$SECONDS
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -DTACO_CUDA=OFF -DTACO_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build-fuzz -j"$jobs" --target "${fuzzers[@]}"
  echo "== sanitize fuzz: ${fuzzers[*]}, ${fuzz_seconds} s each, side by side"
  mkdir -p build-fuzz/artifacts
  local pids=() name
  for name in "${fuzzers[@]}"; do
    mkdir -p "build-fuzz/corpus/$name"
    build-fuzz/"$name" -max_total_time="$fuzz_seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/$name-" \
      "build-fuzz/corpus/$name" "tools/fuzz/corpus/$name" >"build-fuzz/$name.log" 2>&1 &
    pids+=($!)
  done
  local failed=0 i
  for i in "${!fuzzers[@]}"; do
    name=${fuzzers[$i]}
    if wait "${pids[$i]}"; then
      echo "$name: $(grep -E '^Done [0-9]+ runs' "build-fuzz/$name.log" | tail -n 1), no finding"
    else
      failed=1
      echo "$name: FINDING (log build-fuzz/$name.log, input in build-fuzz/artifacts/):"
      tail -n 40 "build-fuzz/$name.log"
    fi
  done
  [ "$failed" -eq 0 ] || return 1
  echo "== sanitize fuzz: passed in $((SECONDS - started)) s"
}

for part in "${parts[@]}"; do
  "run_$part"
done
