// Shared by the test_codec_* tests: a fixture whose every test gets a fresh seed, printed with
// any failure.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/test_util.h"

namespace taco::test {

class FreshSeedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = fresh_seed();
    trace_ = std::make_unique<::testing::ScopedTrace>(__FILE__, __LINE__,
                                                      "seed " + std::to_string(seed_));
  }
  uint64_t seed_ = 0;
  std::unique_ptr<::testing::ScopedTrace> trace_;
};

// The orthonormal Walsh-Hadamard transform of y (a power of two long), in double: the codecs'
// WHT_G, exact enough to check theirs against.
inline void orthonormal_wht(std::vector<double>& y) {
  for (size_t h = 1; h < y.size(); h *= 2) {
    for (size_t i = 0; i < y.size(); ++i) {
      if (i & h) continue;
      const double a = y[i], b = y[i + h];
      y[i] = a + b;
      y[i + h] = a - b;
    }
  }
  for (double& v : y) v /= std::sqrt(double(y.size()));
}

}  // namespace taco::test
