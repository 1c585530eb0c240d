// MpiCommunicator: the Communicator over an MPI communicator, for buffers in host memory.
//
// It works on its own duplicate of the communicator it is given (so taco's traffic never matches
// a user's messages) with MPI_ERRORS_RETURN set, and checks every call through TACO_CHECK_MPI.
// bf16 reductions use user-defined MPI_Ops that add (or compare) in fp32 and round back to bf16
// after every pairwise combine, so for p ranks the sum carries at most p-1 bf16 roundings.
// Counts above INT_MAX elements are split into several MPI calls where the call allows it
// (all_reduce, broadcast, send, recv); the chunked collectives take at most INT_MAX per chunk.
// The Stream argument is ignored: host memory, and every call returns when its data has moved.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "parallel/communicator.h"
#include "parallel/mpi_check.h"

namespace taco {

class MpiCommunicator final : public Communicator {
 public:
  // Collective over `comm`: wraps a duplicate of it named `name`. MPI must be initialized.
  MpiCommunicator(MPI_Comm comm, std::string name);
  // Frees the duplicate (skipped once MPI is finalized).
  ~MpiCommunicator() override;

  // Collective over this group: ranks passing the same `color` form a new group, ordered by
  // `key` (ties by rank here). A rank passing MPI_UNDEFINED joins none and gets nullptr.
  std::unique_ptr<MpiCommunicator> split(int color, int key, std::string name) const;

  // The underlying communicator, e.g. to bootstrap an NCCL communicator over the same ranks.
  MPI_Comm comm() const { return comm_; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }

  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                  Stream stream) override;
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op,
                      Stream stream) override;
  void all_gather(const void* send, void* recv, size_t send_count, DType dtype,
                  Stream stream) override;
  void all_to_all(const void* send, void* recv, size_t count, DType dtype, Stream stream) override;
  void send(const void* buf, size_t count, DType dtype, int peer, int tag, Stream stream) override;
  void recv(void* buf, size_t count, DType dtype, int peer, int tag, Stream stream) override;
  void send_recv(const void* send_buf, size_t send_count, int dst, void* recv_buf,
                 size_t recv_count, int src, DType dtype, int tag, Stream stream) override;
  void broadcast(void* buf, size_t count, DType dtype, int root, Stream stream) override;
  void barrier(Stream stream) override;
  void all_reduce_values(double* values, size_t count, ReduceOp op) override;

 private:
  struct Adopt {};
  // Takes ownership of `comm` as it is (the result of a split).
  MpiCommunicator(Adopt, MPI_Comm comm, std::string name);
  void init_from_comm();

  // Internal-misuse checks that name this group: dtype allowed for the op, peer/root/tag range.
  void check_peer(int peer, const char* what, CommOp op) const;
  void check_tag(int tag, CommOp op) const;
  void check_received(const MPI_Status& status, DType dtype, size_t expected, int peer, int tag,
                      CommOp op) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace taco
