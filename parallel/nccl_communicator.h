// NcclCommunicator: the Communicator over NCCL, for buffers in device memory (one GPU per rank).
//
// Bootstrap: the group's rank 0 makes the unique id and sends it to the others over the group's
// MPI communicator (the MpiCommunicator of the same ranks), then every rank joins with
// ncclCommInitRank. The process grid makes one per tp, pp and dp group the same way.
// Calls enqueue on the given stream and return before the data has moved (NCCL semantics);
// stats record the enqueue time only. bf16 reductions are NCCL's (fp32 accumulation inside a
// kernel, one rounding per step of its algorithm). ReduceOp::max maps to ncclMax.
//
// Errors: every NCCL call is checked; an asynchronous error (a dead or hung peer, a network
// failure) is caught by wait(), which polls the stream and ncclCommGetAsyncError and, after
// `timeout_seconds` without progress, aborts the communicator and throws taco::Error naming the
// group, the rank and the last call, so every rank ends with an error instead of hanging.
// In a build without CUDA, make_nccl_communicator throws UserError.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "parallel/communicator.h"
#include "parallel/staged_communicator.h"

namespace taco {

class MpiCommunicator;

// Collective over `bootstrap`'s ranks; `device` is this rank's CUDA device (set before).
std::unique_ptr<Communicator> make_nccl_communicator(const MpiCommunicator& bootstrap,
                                                     std::string name,
                                                     double timeout_seconds = 600.0);

// Is NCCL usable here: a CUDA build, with a device.
bool nccl_available();

// parallel.backend for device buffers, decided the same on every rank of `world` (collective):
// "nccl" and "mpi" as named, "auto" NCCL where every rank of a node has a GPU of its own (NCCL
// refuses two ranks on one device), else MPI with host staging. "nccl" with ranks sharing a GPU
// throws UserError naming `source`.
bool use_nccl_backend(MPI_Comm world, const std::string& backend, const std::string& source);

// GPUs a run uses together: on each node, the distinct devices its ranks chose (ranks may share
// one), summed over the nodes. Collective over `world`; `device_index` is this rank's device.
int gpus_in_use(const MpiCommunicator& world, int device_index);

// The device-buffer communicator of `group`: NCCL, or MPI with host staging whose sums take
// the path `staged_reduce` (parallel.staged_reduce; parallel/staged_communicator.h), staged in
// pieces of `stage_piece_bytes` (parallel.stage_piece_bytes). NCCL ignores both.
std::unique_ptr<Communicator> make_device_communicator(
    MpiCommunicator& group, bool nccl, StagedReduce staged_reduce = StagedReduce::automatic,
    size_t stage_piece_bytes = staging::kDefaultPieceBytes);

// Blocks until everything enqueued on `stream` by `comm` (an NCCL communicator) has finished,
// checking for asynchronous NCCL errors; throws taco::Error on an error or after the timeout.
// For other backends it only synchronizes the stream (CUDA builds) or does nothing.
void wait_for_communicator(Communicator& comm, Stream stream);

}  // namespace taco
