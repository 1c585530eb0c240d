// A test hook (never set in production): kill this process with SIGKILL at a named point, so
// that tests and tools/fault_inject.sh can crash a rank exactly where a real failure would hurt.
//
//   TACO_FAULT_POINT=NAME[:COUNT][@RANK]
//
// The COUNT-th time (default 1) world rank RANK (default 0) passes fault_point(NAME), it raises
// SIGKILL: no handler, no flush, no MPI_Finalize, as a crash or an OOM kill. Points in use:
//   startup          before MPI_Init, so the other ranks wait there (engine/train/main.cpp;
//                    RANK is the launcher's rank, OMPI_COMM_WORLD_RANK)
//   comm             inside a SiteComm call, before the data moves (parallel/site_comm.cpp)
//   ckpt.write       half-way through writing this rank's checkpoint file (engine/train)
//   ckpt.rename      rank 0, every rank file written, before the folder is renamed
//   ckpt.marker      rank 0, folder renamed, before the COMPLETE marker is written
//   ckpt.retention   rank 0, marker written, before older checkpoints are removed
// Unset, fault_point costs one load and a branch.
#pragma once

namespace taco {

// Reads TACO_FAULT_POINT; `world_rank` is this process's rank (MPI's, or before MPI_Init the
// launcher's). Calling it again with the same rank arms the same point afresh.
void init_fault_point(int world_rank);
void fault_point(const char* name);

}  // namespace taco
