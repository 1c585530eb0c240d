// The communication watchdog (parallel.timeout_s): a rank stuck in one blocking call whose peer
// died or hangs ends itself with one line and a non-zero exit, whatever mpirun is told.
//
// Plain OpenMPI 4.1 never returns an error from a collective whose peer is gone (that needs
// ULFM), and a launcher may be set not to kill the job when a rank dies; NCCL users expect a
// timeout instead. So every blocking call is wrapped in a WatchScope; a thread of this process
// checks how long the current scope has been open and, past the timeout, prints
//
//   taco: rank 3: watchdog: 600 s inside all_reduce at site attn.out.fwd (layer 2) of group tp
//   (group rank 1 of 2), waiting on world rank(s) 2; a peer died or hangs; stopping this rank
//   (parallel.timeout_s = 600)
//
// (one line) and leaves with _exit(kWatchdogExitCode). Every surviving rank either waits in a
// call with the dead rank or reaches one within a step, so every rank is gone within about the
// timeout. Only time inside a call counts, never the length of a step: a long but healthy step
// never fires it. Scopes nest (a compressed collective calls the native ones); the outermost one
// of a thread is the one watched.
//
// Use: one line before the blocking call,
//   WatchScope watch("all_reduce", site, layer, comm);                  // a collective over `comm`
//   WatchScope watch("send", site, layer, comm, peer);                  // point to point (group
//   rank) WatchScope watch("barrier", Site::startup, -1, mpi_comm, "world");  // a raw MPI call
// The line names the site as site_name() writes it (compression/sites.h).
// Cost: one uncontended mutex and a few stores per call (~0.1 us), nothing while disabled.
#pragma once

#include <mpi.h>

#include <string>
#include <utility>

#include "compression/sites.h"
#include "parallel/communicator.h"

namespace taco {

// The exit code of a rank the watchdog ended (EX_TEMPFAIL: resume from the last checkpoint).
inline constexpr int kWatchdogExitCode = 75;
inline constexpr int kNoPeer = -1;  // a collective: every other rank of the group

// This process's world rank and size from the launcher's environment (OpenMPI, PMI, Slurm), for
// scopes and messages before MPI_Init; {0, 1} where none says.
std::pair<int, int> launcher_rank_and_size();

// Starts the watchdog thread, or changes its timeout when it runs. timeout_s <= 0 disables it.
// `world_rank` names this rank in the message.
void start_watchdog(double timeout_s, int world_rank);
double watchdog_timeout();  // 0 while disabled

// Seconds the current outermost scope has been open (0 when none): for tests.
double watchdog_open_seconds();

class WatchScope {
 public:
  // A call of `op` ("all_reduce", "recv", ...) at `site` (layer -1: none) over `group`;
  // peers are group ranks (kNoPeer: all other ranks).
  WatchScope(const char* op, Site site, int layer, const Communicator& group, int peer = kNoPeer,
             int second_peer = kNoPeer);
  // The same over a raw MPI communicator named `group_name`.
  WatchScope(const char* op, Site site, int layer, MPI_Comm group, const char* group_name,
             int peer = kNoPeer, int second_peer = kNoPeer);
  // Before MPI_Init (no communicator to ask): this process is world rank `world_rank` of
  // `world_size` ranks as the launcher's environment gives them, waiting on all the others.
  WatchScope(const char* op, Site site, int world_rank, int world_size);
  ~WatchScope();
  WatchScope(const WatchScope&) = delete;
  WatchScope& operator=(const WatchScope&) = delete;

 private:
  bool armed_ = false;  // this scope is the outermost one and the watchdog is on
};

}  // namespace taco
