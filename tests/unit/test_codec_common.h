// Shared by the test_codec_* tests: a fixture whose every test gets a fresh seed, printed with
// any failure.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>

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

}  // namespace taco::test
