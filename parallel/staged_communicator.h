// HostStagedCommunicator: any host-memory Communicator (MPI) made to accept device buffers by
// staging them through pinned host memory. This is how ranks that share one GPU (where NCCL
// refuses them) or a cluster without NCCL communicate: the slow-link testbed, what NCCL's
// shared-memory transport does on a node without P2P. Host buffers pass straight through.
//
// Collectives on device buffers are pipelined (parallel/staging_engine.h, staged_plan.h): a
// message is cut into pieces of about piece_bytes() (summed over its chunks); piece j + 1 is
// copied down on a copy stream while the host MPI call moves piece j and piece j - 1 is copied
// up on another. Only bytes that must cross the link are staged: in all_to_all and all_gather a
// rank's own chunk is a device-to-device copy (or nothing, in place), and the host transfer is
// pairwise MPI_Sendrecv (tag kStagingTag) that never copies a rank's own chunk. Results are the
// same bits as the unpipelined staging for data movement; for reductions see below.
//
// Sums (all_reduce, reduce_scatter; f32 and bf16; device buffers) take one of two paths:
//   native    the host collective on the staged copies, piece by piece (for bf16: our fp32 add
//             rounded after every pairwise combine, on the host CPU). At p = 2 the bits of the
//             unpipelined call; at p > 2 MPI's combine order may differ with a piece's size;
//   two_shot  the compressed path's shape with raw values: each rank's chunk (even_chunks: equal
//             16-byte blocks) goes to its owner, the owner sums the p copies ON THE GPU in fp32
//             in rank order (0 + c_0 + ... + c_{p-1}; bf16 rounded once, parallel/staged_sum.h),
//             then an all_gather of the reduced chunks: every rank gets identical bits. The
//             all-reduce chains the two shots per piece (StagingEngine::run_chained). At p = 2
//             the same bits as native.
// A group of one sums by a device copy.
// StagedReduce::automatic measures both at the first call of each (op, dtype, power-of-two size
// class), a collective moment, on scratch device buffers (never the caller's data): one warm-up
// and kCalibrationReps timed calls each, the slowest rank's time (MPI max) so every rank chooses
// alike; the choice is cached and printed once on the group's rank 0. ReduceOp::max and u8 stay
// native.
//
// Stats: the call accounting of CommOpStats (logical bytes, bus bytes, wall seconds including
// staging); staging_seconds is the host time spent waiting for staging copies, i.e. copies not
// hidden behind the MPI transfer of another piece (the first piece down, the last one up, and
// any copy slower than the wire). The calibration's calls and time are not counted.
// send, recv, send_recv and broadcast stage whole messages, serially (both ends of a p2p
// message must agree on its pieces, so they keep one). In a build without CUDA no pointer is a
// device pointer and every call passes through.
// Memory: pinned host buffers of the largest message (up to three), for two_shot a device
// buffer of p chunk slots, kept; the calibration's device scratch is freed after measuring.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "parallel/communicator.h"
#include "parallel/staged_plan.h"

namespace taco {

class StagingEngine;

// parallel.staged_reduce: which path a host-staged sum takes.
enum class StagedReduce : uint8_t { automatic, native, two_shot };
const char* staged_reduce_name(StagedReduce mode);  // "auto", "native", "two_shot"
// "auto" | "native" | "two_shot"; anything else throws UserError naming `source`.
StagedReduce staged_reduce_from_name(const std::string& name, const std::string& source);

class HostStagedCommunicator final : public Communicator {
 public:
  // MPI tag of the pairwise transfers (any tag works: host calls are blocking and in order).
  static constexpr int kStagingTag = 32700;
  static constexpr int kCalibrationReps = 3;

  explicit HostStagedCommunicator(Communicator& host, StagedReduce reduce = StagedReduce::automatic,
                                  size_t piece_bytes = staging::kDefaultPieceBytes);
  ~HostStagedCommunicator() override;

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  const char* backend() const override { return "mpi+staging"; }

  StagedReduce reduce_mode() const { return reduce_; }
  size_t piece_bytes() const { return piece_bytes_; }
  // > 0, the same on every rank of the group.
  void set_piece_bytes(size_t bytes);
  // The path a sum of `bytes` (logical size, as CommOpStats::bytes) of `dtype` takes: "native"
  // or "two_shot", or "unmeasured" in auto mode before the first call of its size class.
  const char* reduce_path(CommOp op, DType dtype, size_t bytes) const;

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
  // Host values: the host communicator's call, nothing to stage.
  void all_reduce_values(double* values, size_t count, ReduceOp op) override;

 private:
  // Serial staging of one buffer (host buffers pass through): the input copied down after
  // `stream` is done, the output copied up.
  const void* in(const void* p, size_t bytes, int slot, Stream stream);
  void* out(void* p, size_t bytes, int slot);
  void copy_back(void* device, const void* host, size_t bytes);

  // The pipelined device paths; each returns the seconds waited for staging copies.
  // pairwise: the wire of an exchange plan's piece j (MPI_Sendrecv with each peer in turn);
  // exchange: runs such a plan.
  std::function<void(size_t)> pairwise(const staging::Plan& plan, const void* host_down,
                                       void* host_up);
  double exchange(const staging::Plan& plan, const void* dev_src, void* host_down, void* dev_dst,
                  void* host_up, Stream after);
  double device_all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                           bool two_shot, Stream stream);
  double device_reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                               ReduceOp op, bool two_shot, Stream stream);
  double device_all_gather(const void* send, void* recv, size_t send_count, DType dtype,
                           Stream stream);
  double device_all_to_all(const void* send, void* recv, size_t count, DType dtype, Stream stream);
  // Does this sum take the two-shot path? In auto mode the first call of a size class measures
  // (collective: every rank of the group calls with the same arguments).
  bool use_two_shot(CommOp op, DType dtype, size_t count, ReduceOp rop, Stream stream);
  bool calibrate(CommOp op, DType dtype, size_t count, Stream stream);

  Communicator& host_;
  StagedReduce reduce_;
  size_t piece_bytes_;
  std::unique_ptr<StagingEngine> engine_;
  std::map<std::tuple<CommOp, DType, int>, bool> two_shot_;  // auto's choices by size class
};

}  // namespace taco
