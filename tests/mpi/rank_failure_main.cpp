// A peer that dies mid-run, for tests/unit/test_rank_failure.cpp.
//
//   rank_failure_main PID_DIR ITERATIONS FAIL_RANK FAIL_ITERATION EXIT_CODE
//
// Every rank writes PID_DIR/rank<R>.pid, then runs ITERATIONS all-reduces over a
// MpiCommunicator. At iteration FAIL_ITERATION, rank FAIL_RANK leaves at once with EXIT_CODE,
// without MPI_Finalize; the others are then blocked in an all-reduce that can never complete,
// and only the launcher can end them. FAIL_RANK -1: nobody dies and every rank exits 0.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <unistd.h>

#include "kernels/check.h"
#include "parallel/mpi_communicator.h"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s PID_DIR ITERATIONS FAIL_RANK FAIL_ITERATION EXIT_CODE\n",
                 argv[0]);
    return 2;
  }
  const std::string pid_dir = argv[1];
  const long iterations = std::atol(argv[2]);
  const int fail_rank = std::atoi(argv[3]);
  const long fail_iteration = std::atol(argv[4]);
  const int exit_code = std::atoi(argv[5]);

  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  taco::set_error_rank(rank);
  if (FILE* f = std::fopen((pid_dir + "/rank" + std::to_string(rank) + ".pid").c_str(), "w")) {
    std::fprintf(f, "%d\n", int(getpid()));
    std::fclose(f);
  }
  try {
    taco::MpiCommunicator world(MPI_COMM_WORLD, "world");
    std::vector<float> x(4096, float(rank));
    for (long i = 0; i < iterations; ++i) {
      if (rank == fail_rank && i == fail_iteration) {
        std::fprintf(stderr, "rank %d: leaving with exit code %d at iteration %ld\n", rank,
                     exit_code, i);
        std::fflush(stderr);
        std::_Exit(exit_code);  // no MPI_Finalize, no destructors: a crash, as far as MPI knows
      }
      world.all_reduce(x.data(), x.data(), x.size(), taco::DType::f32, taco::ReduceOp::max,
                       nullptr);
    }
  } catch (const taco::Error& e) {  // a backend that reports the dead peer (e.g. ULFM)
    std::fprintf(stderr, "%s\n", e.what());
    return e.exit_code();
  }
  MPI_Finalize();
  return 0;
}
