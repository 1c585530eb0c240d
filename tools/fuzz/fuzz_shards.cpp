// libFuzzer harness: engine/data's TokenShards on a fuzzed shard file.
//
// Input: byte 0 picks the vocabulary and the window; the rest is the file's content. A shard
// that opens is then sampled (training and evaluation windows), and every token handed out must
// be below the vocabulary size. A taco::UserError is the expected answer to a bad file; a crash,
// a sanitizer report or any other exception is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/data/shards.h"
#include "kernels/check.h"

namespace {

// One file per fuzzing process (-jobs/-workers run several in one directory).
const std::string& shard_path() {
  static const std::string path = [] {
    const char* tmp = std::getenv("TMPDIR");
    return std::string(tmp && *tmp ? tmp : "/tmp") + "/taco_fuzz_shard_" +
           std::to_string(getpid()) + ".bin";
  }();
  return path;
}

void write_bytes(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

void check_tokens(const std::vector<int32_t>& tokens, int vocab) {
  for (int32_t t : tokens) {
    if (t < 0 || t >= vocab) std::abort();  // the loader let an out-of-vocabulary id through
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const int kVocab[] = {256, 50257, 65536, 7};
  const int vocab = kVocab[data[0] & 3];
  const int window = 2 + (data[0] >> 2);  // 2..65
  write_bytes(shard_path(), data + 1, size - 1);
  try {
    const taco::TokenShards shards(shard_path(), vocab, window);
    const int T = window - 1, rows = 3;
    std::vector<int32_t> inputs(size_t(rows) * T), targets(inputs.size());
    for (int64_t step = 0; step < 3; ++step) {
      shards.sample_batch(uint64_t(size), step, int(step), 0, rows, T, inputs.data(),
                          targets.data());
      check_tokens(inputs, vocab);
      check_tokens(targets, vocab);
    }
    const size_t windows = shards.num_eval_windows(T);
    if (windows == 0 || shards.num_tokens() == 0) std::abort();  // opened, yet holds no window
    for (int batch = 0; batch < 3; ++batch) {
      shards.eval_batch(batch, rows, 0, rows, T, inputs.data(), targets.data());
      check_tokens(inputs, vocab);
      check_tokens(targets, vocab);
    }
  } catch (const taco::UserError&) {
  }
  return 0;
}
