// The one status check for MPI calls (docs/style.md: one helper per library). Every taco
// communicator sets MPI_ERRORS_RETURN, so a failing call comes back here instead of aborting,
// and becomes taco::Error (exit code 1) with one line:
//   rank 1: MPI MPI_Allreduce failed (15): all_reduce of 4000 bytes in group tp: MPI_ERR_TRUNCATE:
//   message truncated [parallel/mpi_communicator.cpp:120]
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string_view>

#include "kernels/check.h"

namespace taco {

// `call_text` is the stringified call; the message keeps only the function name.
[[noreturn]] void fail_mpi(int code, std::string_view call_text, std::string_view group,
                           std::string_view op, size_t bytes, const char* file, int line);

}  // namespace taco

// TACO_CHECK_MPI(MPI_Allreduce(...), name(), "all_reduce", count * 4): throws on failure.
#define TACO_CHECK_MPI(call, group, op, bytes)                                                     \
  do {                                                                                             \
    const int taco_mpi_status_ = (call);                                                           \
    if (taco_mpi_status_ != MPI_SUCCESS)                                                           \
      ::taco::fail_mpi(taco_mpi_status_, #call, (group), (op), size_t(bytes), __FILE__, __LINE__); \
  } while (0)
