// HostStagedCommunicator: any host-memory Communicator (MPI) made to accept device buffers by
// staging them through pinned host memory: wait for `stream`, copy device -> host, run the
// host call, copy host -> device. Host buffers pass straight through. This is how ranks that
// share one GPU (where NCCL refuses them) or a cluster without NCCL communicate; it costs two
// PCIe copies per call. Stats are the wrapped communicator's call accounting (logical bytes,
// bus bytes) with the staging time included in `seconds`.
// In a build without CUDA no pointer is a device pointer and every call passes through.
#pragma once

#include <memory>
#include <string>

#include "parallel/communicator.h"

namespace taco {

// Is `p` in device memory (CUDA builds; false elsewhere and for nullptr)?
bool is_device_pointer(const void* p);

class HostStagedCommunicator final : public Communicator {
 public:
  explicit HostStagedCommunicator(Communicator& host);
  ~HostStagedCommunicator() override;

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  const char* backend() const override { return "mpi+staging"; }

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

 private:
  struct Buffers;
  // Host views of a call's input and output: the buffers themselves when in host memory, else
  // pinned copies (the input copied in after `stream` is done).
  const void* in(const void* p, size_t bytes, int slot, Stream stream);
  void* out(void* p, size_t bytes, int slot);
  void copy_back(void* device, const void* host, size_t bytes);
  // Records the call in this communicator's stats from the wrapped one's counters.
  void account(CommOp op, size_t bytes, double seconds);

  Communicator& host_;
  std::unique_ptr<Buffers> buffers_;
};

}  // namespace taco
