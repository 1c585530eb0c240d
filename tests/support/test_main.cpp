// GoogleTest entry point for every taco test binary. Initializes MPI (a no-op cost for
// single-process tests, required for mpi_ tests) and lets only rank 0 print results, so a test
// run under mpirun reads like one process.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>

#include "kernels/check.h"

// Defined (to any value) by unit-test files whose tests need MPI.
extern "C" const int taco_test_joins_mpi __attribute__((weak));

int main(int argc, char** argv) {
  // A test binary joins MPI when mpirun started it, or when it defines taco_test_joins_mpi
  // (its tests build communicators; alone it is a singleton). Others skip MPI_Init, which costs
  // ~0.5 s per process. test::run_command strips a singleton's environment from the commands a
  // test starts, so a child taco-train or mpirun starts its own job.
  const bool under_mpirun = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE");
  const bool mpi = under_mpirun || &taco_test_joins_mpi != nullptr;
  int rank = 0;
  if (mpi) {
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
  if (mpi) {
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
  }
  return worst;
}
