// GoogleTest entry point for every taco test binary. Initializes MPI (a no-op cost for
// single-process tests, required for mpi_ tests) and lets only rank 0 print results, so a test
// run under mpirun reads like one process.
#include <gtest/gtest.h>
#include <mpi.h>

#include "kernels/check.h"

#include <cstdlib>

int main(int argc, char** argv) {
  // Only binaries launched by mpirun join MPI; unit tests stay plain processes, so they can
  // start taco-train (itself an MPI program) as a child without nesting MPI singletons.
  const bool under_mpirun = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE");
  int rank = 0;
  if (under_mpirun) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  }
  taco::set_error_rank(rank);
  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int rc = RUN_ALL_TESTS();
  // A failure on any rank fails the run on every rank.
  int worst = rc;
  if (under_mpirun) {
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
  }
  return worst;
}
