// Shared pieces of the parallel/ tests that run under mpirun.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/support/test_util.h"

namespace taco::test {

// Only rank 0 prints test results (tests/support/test_main.cpp). So that a failure seen on
// another rank is not silent, every test ends by gathering each rank's verdict, and rank 0
// records which ranks failed. Test bodies must reach the end on every rank (use EXPECT_*,
// not ASSERT_*, after the first collective), or the gather would wait for a rank that left.
class MpiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  }

  void TearDown() override {
    int failed = HasFailure() ? 1 : 0;
    std::vector<int> all(size_t(world_size_), 0);
    MPI_Allgather(&failed, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
    std::string ranks;
    for (int r = 1; r < world_size_; ++r) {
      if (all[size_t(r)]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    }
    if (world_rank_ == 0 && !ranks.empty()) ADD_FAILURE() << "failed on rank(s) " << ranks;
  }

  // A fresh seed drawn by rank 0 and shared, so every rank can regenerate every rank's input.
  uint64_t shared_seed() const {
    uint64_t seed = fresh_seed();
    MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    return seed;
  }

  int world_rank_ = 0;
  int world_size_ = 1;
};

}  // namespace taco::test
