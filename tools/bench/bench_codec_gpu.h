// taco-bench codec on the GPU (the default where a device exists): bench_codec_gpu.cpp.
#pragma once

#include <cstdint>
#include <string>

namespace taco::bench {

struct GpuCodecArgs {
  int reps = 3;  // timed repetitions per measurement; the best is kept
  uint64_t seed = 1234;
  std::string json;
};

int codec_gpu(const GpuCodecArgs& args);

}  // namespace taco::bench
