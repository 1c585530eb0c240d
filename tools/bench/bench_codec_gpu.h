// taco-bench codec on the GPU (the default where a device exists): bench_codec_gpu.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "compression/codec_options.h"

namespace taco::bench {

struct GpuCodecArgs {
  int reps = 3;  // timed repetitions per measurement; the best is kept
  uint64_t seed = 1234;
  int64_t min_bytes = int64_t(1) << 20;  // message sizes min_bytes, 4 x min_bytes, ... <= max_bytes
  int64_t max_bytes = int64_t(1) << 30;
  std::string json;
  std::vector<CodecKind> kinds;  // the codecs to run (--codecs); empty: all
};

// Whether a codec of `kind` runs under --codecs `kinds` (empty: all run).
inline bool selected(const std::vector<CodecKind>& kinds, CodecKind kind) {
  return kinds.empty() || std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

int codec_gpu(const GpuCodecArgs& args);

}  // namespace taco::bench
