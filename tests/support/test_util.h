// Helpers shared by tests: fresh random inputs, error norms, paths, running a command.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/dtype.h"

namespace taco::test {

// A seed that differs on every run (printed by the test on failure through SCOPED_TRACE), so
// kernels are checked on fresh inputs, never on a fixed lucky case. TACO_TEST_SEED=<n> in the
// environment replays a printed seed.
uint64_t fresh_seed();

std::vector<float> random_normal(size_t n, uint64_t seed, float mean = 0.f, float stddev = 1.f);

// Element-wise conversions, bf16 rounded to nearest even.
std::vector<bf16> to_bf16(const std::vector<float>& x);
std::vector<float> to_float(const std::vector<bf16>& x);

// ||a - b|| / ||b|| over n elements, in double.
double relative_l2(const float* a, const float* b, size_t n);

// Source tree and build tree of this build.
std::string source_dir();
std::string binary_dir();

// A fresh empty directory under the build tree for one test's files.
std::string scratch_dir(const std::string& name);

struct CommandResult {
  int exit_code;
  std::string output;  // stdout and stderr together
};
// Runs a shell command and captures its output and exit code.
CommandResult run_command(const std::string& cmd);

void write_file(const std::string& path, const std::string& text);
std::string read_file(const std::string& path);

}  // namespace taco::test

// In gpu_ tests: skip (with the reason) when this build has no CUDA or the machine no device.
#include "engine/runtime/device.h"
#define TACO_SKIP_WITHOUT_GPU()                                                   \
  do {                                                                            \
    if (!::taco::built_with_cuda()) GTEST_SKIP() << "built without CUDA";         \
    if (::taco::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device found"; \
  } while (0)
