// taco-bench codec on the GPU (the default where a device exists): bench_codec_gpu.cpp.
#pragma once

#include <cstdint>
#include <string>

namespace taco::bench {

struct GpuCodecArgs {
  int reps = 3;  // timed repetitions per measurement; the best is kept
  uint64_t seed = 1234;
  int64_t min_bytes = int64_t(1) << 20;  // message sizes min_bytes, 4 x min_bytes, ... <= max_bytes
  int64_t max_bytes = int64_t(1) << 30;
  std::string json;
};

int codec_gpu(const GpuCodecArgs& args);

}  // namespace taco::bench
